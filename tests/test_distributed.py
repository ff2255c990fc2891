"""numbasparse.distributed on gloo process groups (CPU backend): the same results and gradients as
one process, on the bundled graph and a power-law graph, with 2 and 4 ranks."""
import os
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import numbasparse as ns  # noqa: E402
import numbasparse.distributed as nsd  # noqa: E402
import numbasparse.torch as nst  # noqa: E402
from numbasparse import graphs  # noqa: E402


def _graph(name):
    return graphs.default_graph() if name == "bundled" else graphs.powerlaw(1500, seed=3)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, backend, check, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        check(rank, world, *args)
    finally:
        dist.destroy_process_group()


def _spawn(world, check, *args, backend="gloo"):
    torch.multiprocessing.spawn(_rank_main, args=(world, _free_port(), backend, check, args), nprocs=world, join=True)


def _close(got, expected, tolerance=1e-12):
    got = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    expected = np.asarray(expected)
    scale = max(np.linalg.norm(expected), 1e-300)
    assert got.shape == expected.shape and np.linalg.norm(got - expected) / scale < tolerance


def _check_against_one_process(rank, world, graph, method):
    A = _graph(graph)
    dg = nsd.DistGraph(A, method=method, dtype=torch.float64)
    assert nsd.halo_volume(A, dg.partition)[rank][:2] == (dg.n_owned, dg.n_halo)
    rng = np.random.default_rng(0)  # the same features on every rank
    X, Y = rng.standard_normal((A.shape[0], 12)), rng.standard_normal((A.shape[0], 12))
    for reduce in ("sum", "mean", "max", "min"):
        _close(nsd.spmm(dg, dg.local(torch.tensor(X)), reduce=reduce), ns.spmm(A, X, reduce=reduce)[dg.nodes])
    rows, cols = dg.edges()
    full = ns.sddmm(A, X, Y)
    _close(nsd.sddmm(dg, dg.local(torch.tensor(X)), dg.local(torch.tensor(Y))), np.asarray(full[rows, cols]).ravel())
    _close(dg.gather(dg.local(torch.tensor(X))), X)

    # A GCN layer, forward and backward, against numbasparse.torch on the whole graph; and max
    W0 = rng.standard_normal((12, 5))
    g = nst.Graph(A, dtype=torch.float64)
    for reduce in ("sum", "max"):
        W, x = torch.tensor(W0, requires_grad=True), dg.local(torch.tensor(X)).requires_grad_()
        values = dg.values.clone().requires_grad_()
        H = torch.relu(nsd.spmm(dg, x @ W, values, reduce=reduce))
        (H ** 2).sum().backward()
        dist.all_reduce(W.grad)  # the replicated parameter's gradient: the sum over ranks
        Wr, xr = torch.tensor(W0, requires_grad=True), torch.tensor(X, requires_grad=True)
        vr = g.values.clone().requires_grad_()
        Hr = torch.relu(nst.spmm(g, xr @ Wr, vr, reduce=reduce))
        (Hr ** 2).sum().backward()
        _close(H, Hr.detach().numpy()[dg.nodes])
        _close(W.grad, Wr.grad.numpy())
        _close(x.grad, xr.grad.numpy()[dg.nodes])
        position = {(i, j): e for e, (i, j) in enumerate(zip(*nst_edges(g)))}
        _close(values.grad, vr.grad.numpy()[[position[e] for e in zip(rows, cols)]])


def nst_edges(g):
    pattern = g.pattern()
    return np.repeat(np.arange(g.shape[0]), np.diff(pattern.indptr)), pattern.indices


@pytest.mark.parametrize("world, graph, method", [(1, "bundled", "contiguous"), (2, "bundled", "contiguous"),
                                                  (2, "power-law", "louvain"), (4, "power-law", "contiguous"),
                                                  (4, "bundled", "louvain")])
def test_ranks_compute_what_one_process_computes(world, graph, method):
    _spawn(world, _check_against_one_process, graph, method)


def _check_no_halo_means_no_exchange(rank, world):
    import scipy.sparse as sp

    A = graphs.powerlaw(200, seed=4)
    blocks = sp.block_diag([A] * world, format="csr")  # one component per rank: no halo anywhere
    for graph, exchanges in ((blocks, False), (graphs.powerlaw(200 * world, seed=4), world > 1)):
        dg = nsd.DistGraph(graph, dtype=torch.float64)
        assert dg.exchanges is exchanges
        x = dg.local(torch.tensor(np.random.default_rng(rank).standard_normal((graph.shape[0], 6))))
        assert (nsd.halo_exchange(dg, x) is x) is not exchanges
        _close(nsd.spmm(dg, x), (graph @ dg.gather(x).numpy())[dg.nodes])


@pytest.mark.parametrize("world", [1, 2])
def test_no_exchange_runs_where_no_rank_has_a_halo(world):
    _spawn(world, _check_no_halo_means_no_exchange)


def _check_pipelined_sum_matches_exchange_then_multiply(rank, world):
    A = graphs.powerlaw(1500, seed=3)
    dg = nsd.DistGraph(A, dtype=torch.float64)
    rng = np.random.default_rng(rank)
    x0, v0 = rng.standard_normal((dg.n_owned, 7)), rng.standard_normal(dg.graph.nnz)
    weights = torch.tensor(rng.standard_normal((dg.n_owned, 7)))
    x2, values2 = torch.tensor(x0, requires_grad=True), torch.tensor(v0, requires_grad=True)
    expected = nst.spmm(dg.graph, nsd.halo_exchange(dg, x2), values2)
    (expected * weights).sum().backward()
    for split in ("sources", "halo"):
        dg.pipeline = split
        x, values = torch.tensor(x0, requires_grad=True), torch.tensor(v0, requires_grad=True)
        got = nsd.spmm(dg, x, values)
        per_source, built = dg._blocks  # this split's column blocks ran
        blocks = built[False]
        assert per_source == (split == "sources") and len(blocks) == (world if split == "sources" else 2)
        assert sum(len(entries) for *_, entries in blocks) == dg.graph.nnz
        _close(got, expected.detach().numpy())
        (got * weights).sum().backward()
        assert sorted(np.concatenate([e for *_, e in built[True]])) == list(range(dg.graph.nnz))  # (transposed)
        _close(x.grad, x2.grad.numpy())
        _close(values.grad, values2.grad.numpy())
        with torch.no_grad():  # values changed in place: the blocks take the new values
            values.mul_(-2.0)
        _close(nsd.spmm(dg, x, values), -2.0 * expected.detach().numpy())
    dg.pipeline = "always"
    with pytest.raises(ValueError, match="pipeline"):
        nsd.spmm(dg, x)

    dg.pipeline = "sources"  # the default values, changed by torch ops, in inference mode, ...
    X = torch.tensor(x0)
    default = nst.spmm(dg.graph, nsd.halo_exchange(dg, X)).numpy()
    _close(nsd.spmm(dg, X), default)
    with torch.no_grad():
        dg.values.mul_(3.0)
    _close(nsd.spmm(dg, X), 3.0 * default)
    with torch.inference_mode():
        _close(nsd.spmm(dg, X, dg.values * 2.0), 6.0 * default)
    mine = torch.tensor(v0)
    first = nsd.spmm(dg, X, mine)
    mine.data.mul_(-1.0)  # (a write torch does not count: values other than dg.values are read per call)
    _close(nsd.spmm(dg, X, mine), -first.numpy())

    # the gradient through dg.values' kept blocks (transposed too)
    x = X.clone().requires_grad_()
    (nst.spmm(dg.graph, nsd.halo_exchange(dg, x)) * weights).sum().backward()
    expected_grad, x.grad = x.grad, None
    for split in ("sources", "halo"):
        dg.pipeline = split
        for _ in range(2):
            (nsd.spmm(dg, x) * weights).sum().backward()
            _close(x.grad, expected_grad.numpy())
            x.grad = None

    # an error on one rank after its sends and receives were posted, in the forward and in the
    # backward: raised there, nothing hangs
    for split in ("sources", "halo"):
        dg.pipeline = split
        out = nsd.spmm(dg, x)
        for target, name, run in ((nsd, "_add_product", lambda: nsd.spmm(dg, X)),
                                  (nsd.api, "spmm", lambda: out.sum().backward())):
            planted = getattr(target, name)
            if rank == 1:
                setattr(target, name, lambda *args, **kw: (_ for _ in ()).throw(RuntimeError("planted")))
                try:
                    with pytest.raises(RuntimeError, match="planted"):
                        run()
                finally:
                    setattr(target, name, planted)
            else:
                run()
            dist.barrier()
            _close(nsd.spmm(dg, X), 3.0 * default)


def _check_pipelined_scores_match_exchange_then_score(rank, world):
    A = graphs.powerlaw(1500, seed=3)
    dg = nsd.DistGraph(A, dtype=torch.float64)
    rng = np.random.default_rng(rank)
    x0, y0, v0 = (rng.standard_normal((dg.n_owned, 5)), rng.standard_normal((dg.n_owned, 5)),
                  rng.standard_normal(dg.graph.nnz))
    weights = torch.tensor(rng.standard_normal(dg.graph.nnz))
    leaves = [torch.tensor(a, requires_grad=True) for a in (x0, y0, v0)]
    expected = nst.sddmm(dg.graph, leaves[0], nsd.halo_exchange(dg, leaves[1]), leaves[2])
    (expected * weights).sum().backward()
    for split in ("sources", "halo"):
        dg.pipeline = split
        mine = [torch.tensor(a, requires_grad=True) for a in (x0, y0, v0)]
        got = nsd.sddmm(dg, *mine)
        _close(got, expected.detach().numpy())
        (got * weights).sum().backward()
        for leaf, reference in zip(mine, leaves):
            _close(leaf.grad, reference.grad.numpy())
        # the values' gradient reads the pattern through ones-valued blocks: built once per split
        ones = dg._ones(split == "sources", torch.float64)
        assert ones is dg._ones(split == "sources", torch.float64) and list(dg._pattern_blocks) == [torch.float64]
        assert all((block.data == 1).all() for _, _, block, _ in ones)
        x, y = (torch.tensor(a) for a in (x0, y0))  # the default values
        _close(nsd.sddmm(dg, x, y), nst.sddmm(dg.graph, x, nsd.halo_exchange(dg, y)).numpy())
    # an error on one rank after the exchange was posted: raised there, nothing hangs
    dg.pipeline = "sources"
    expected = nst.sddmm(dg.graph, x, nsd.halo_exchange(dg, y)).numpy()
    if rank == 1:
        planted = nsd._scores
        nsd._scores = lambda *args: (_ for _ in ()).throw(RuntimeError("planted"))
        try:
            with pytest.raises(RuntimeError, match="planted"):
                nsd.sddmm(dg, x, y)
        finally:
            nsd._scores = planted
    else:
        nsd.sddmm(dg, x, y)
    dist.barrier()
    _close(nsd.sddmm(dg, x, y), expected)
    with pytest.raises(ValueError, match="Y must hold"):
        nsd.sddmm(dg, x, y[1:])
    with pytest.raises(ValueError, match="same number of columns"):
        nsd.sddmm(dg, x, y[:, :3])


@pytest.mark.parametrize("world", [2, 3])
def test_pipelined_sum_matches_exchange_then_multiply(world):
    _spawn(world, _check_pipelined_sum_matches_exchange_then_multiply)


@pytest.mark.parametrize("world", [2, 3])
def test_pipelined_scores_match_exchange_then_score(world):
    _spawn(world, _check_pipelined_scores_match_exchange_then_score)


def test_pipeline_split_needs_a_halo_long_enough_to_hide_its_fixed_costs():
    assert nsd.pipeline_split(4, nsd.PIPELINE_MIN_BYTES - 1) == "off"
    assert nsd.pipeline_split(4, nsd.PIPELINE_MIN_BYTES) == "halo"
    assert nsd.pipeline_split(4, 3 * nsd.PER_SOURCE_MIN_BYTES) == "sources"
    assert nsd.pipeline_split(2, 10 * nsd.PER_SOURCE_MIN_BYTES) == "halo"  # one source: one batch


def _check_mismatch_is_refused(rank, world):
    A = graphs.powerlaw(300, seed=1).tolil()
    if rank == 1:
        A[0, 5] = 7.0  # this rank holds another graph
    with pytest.raises(ValueError, match="differ across ranks"):
        nsd.DistGraph(A.tocsr())
    dg = nsd.DistGraph(graphs.powerlaw(300, seed=1))
    with pytest.raises(ValueError, match="rows"):
        nsd.spmm(dg, torch.zeros(dg.n_owned + 1, 3, dtype=torch.float32))
    with pytest.raises(ValueError, match="ranks"):
        nsd.DistGraph(graphs.powerlaw(300, seed=1), partition=nsd.partition(graphs.powerlaw(300, seed=1), world + 1))
    # one rank's bad argument: an error on that rank and on the other, no hang
    wrong = nsd.partition(graphs.powerlaw(300, seed=1), world + (rank == 1))
    with pytest.raises(ValueError, match="partition is for" if rank == 1 else "could not build"):
        nsd.DistGraph(graphs.powerlaw(300, seed=1), partition=wrong)


def test_different_graphs_on_different_ranks_are_an_error_on_every_rank():
    _spawn(2, _check_mismatch_is_refused)


def test_without_a_process_group_building_is_a_clear_error():
    with pytest.raises(RuntimeError, match="init_process_group"):
        nsd.DistGraph(graphs.powerlaw(100))


def test_partitions_cover_every_node_and_balance_nonzeros():
    A = graphs.powerlaw(2000, seed=2)
    for method in nsd.METHODS:
        part = nsd.partition(A, 4, method)
        assert part.owner.shape == (2000,) and set(np.unique(part.owner)) <= {0, 1, 2, 3}
    for method in nsd.METHODS:
        loads = np.bincount(nsd.partition(A, 4, method).owner, weights=np.diff(A.indptr) + 1.0)
        assert loads.max() < (1.1 if method == "contiguous" else 1.3) * loads.mean()
    volumes = {m: sum(v[1] for v in nsd.halo_volume(A, nsd.partition(A, 4, m))) for m in nsd.METHODS}
    assert volumes["louvain"] < volumes["contiguous"]


@pytest.mark.parametrize("bad, error", [(dict(n_parts=0), ValueError), (dict(n_parts=2.5), ValueError),
                                        (dict(n_parts=2, method="metis"), ValueError)])
def test_partition_arguments_are_checked(bad, error):
    with pytest.raises(error):
        nsd.partition(graphs.powerlaw(50), **bad)


def test_non_square_graph_is_refused():
    import scipy.sparse as sp

    with pytest.raises(ValueError, match="square"):
        nsd.partition(sp.random(10, 12, density=0.3, format="csr"), 2)


def _check_on_the_gpu(rank, world):
    """CUDA tensors and the GPU kernels (gloo ranks sharing GPU 0, NCCL ranks a GPU each): float32
    against float64 references."""
    device = torch.device("cuda", rank if dist.get_backend() == "nccl" else 0)
    torch.cuda.set_device(device)
    A = _graph("power-law")
    dg = nsd.DistGraph(A, method="louvain", device=device)
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((A.shape[0], 40)), rng.standard_normal((A.shape[0], 40))
    x, y = (dg.local(torch.tensor(M, dtype=torch.float32, device=device)) for M in (X, Y))
    for reduce in ("sum", "mean", "max", "min"):
        _close(nsd.spmm(dg, x, reduce=reduce), ns.spmm(A, X, reduce=reduce)[dg.nodes], 1e-5)
    rows, cols = dg.edges()
    for split in ("halo", "sources", None):  # (the rule keeps so small a halo unpipelined)
        dg.pipeline = split
        _close(nsd.spmm(dg, x), ns.spmm(A, X)[dg.nodes], 1e-5)
        _close(nsd.sddmm(dg, x, y), np.asarray(ns.sddmm(A, X, Y)[rows, cols]).ravel(), 1e-5)
    dg.pipeline = "sources"  # and the gradients and training step below through it
    values, xg, yg = dg.values.detach().clone().requires_grad_(), x.clone().requires_grad_(), y.clone().requires_grad_()
    nsd.sddmm(dg, xg, yg, values).sum().backward()  # the sum of scores: d/dX A Y, d/dY A^T X, d/da_ij <X_i, Y_j>
    _close(xg.grad, (A @ Y)[dg.nodes], 1e-5)
    _close(yg.grad, (A.T @ X)[dg.nodes], 1e-5)
    _close(values.grad, np.einsum("ij,ij->i", X[rows], Y[cols]), 1e-5)
    values.grad = None
    (nsd.spmm(dg, x, values) * y).sum().backward()  # d/da_ij of sum(Y ⊙ A X): <Y_i, X_j>
    _close(values.grad, np.einsum("ij,ij->i", Y[rows], X[cols]), 1e-5)
    W0 = rng.standard_normal((40, 8))
    W, xg = torch.tensor(W0, dtype=torch.float32, device=device, requires_grad=True), x.clone().requires_grad_()
    (torch.relu(nsd.spmm(dg, xg @ W)) ** 2).sum().backward()
    dist.all_reduce(W.grad)
    Wr, xr = torch.tensor(W0, requires_grad=True), torch.tensor(X, requires_grad=True)
    (torch.relu(nst.spmm(nst.Graph(A, dtype=torch.float64), xr @ Wr)) ** 2).sum().backward()
    _close(W.grad, Wr.grad.numpy(), 1e-4)
    _close(xg.grad, xr.grad.numpy()[dg.nodes], 1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("backend, world", [("nccl", 1), ("gloo", 2), ("nccl", 2), ("nccl", 4)])
def test_ranks_on_a_gpu_compute_what_one_process_computes(backend, world):
    if backend == "nccl" and torch.cuda.device_count() < world:
        pytest.skip(f"NCCL ranks need a GPU each ({world} ranks, {torch.cuda.device_count()} GPUs)")
    _spawn(world, _check_on_the_gpu, backend=backend)


@pytest.mark.parametrize("owner, n_parts, error", [([0, 1, 5, 1, 0], 2, "ranks in 0..1"), ([0, 1, 0], 2, "one integer"),
                                                     ([0.0, 1, 0, 1, 0], 2, "one integer")])
def test_halo_volume_checks_the_partition_against_the_graph(owner, n_parts, error):
    import scipy.sparse as sp

    H = sp.random(5, 5, density=0.5, format="csr", dtype=np.float32, random_state=3)
    with pytest.raises(ValueError, match=error):
        nsd.halo_volume((H + H.T).tocsr(), nsd.Partition(np.array(owner), n_parts))
    with pytest.raises(TypeError, match="Partition"):
        nsd.halo_volume((H + H.T).tocsr(), np.zeros(5, int))
