"""prepare(): reordered plans give the results of the unpermuted products, in the caller's order."""
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

import numbasparse as ns
from numbasparse import graphs
from numbasparse.reference import sddmm_reference, spmm_reference
from strategies import assert_close


@pytest.fixture(scope="module")
def graph():
    return graphs.community_graph(n_nodes=300, avg_degree=6, n_communities=6, seed=4)


@pytest.mark.parametrize("reorder", [None, "louvain", "loa"])
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_plan_spmm_equals_unpermuted_cpu(graph, reorder, reduce):
    B = np.random.default_rng().standard_normal((300, 7)).astype(np.float32)
    plan = ns.prepare(graph, reorder=reorder, backend="cpu")
    assert plan.preprocess_seconds > 0 and plan.reorder_seconds >= 0
    assert_close(plan.spmm(B, reduce=reduce), spmm_reference(graph, B, reduce), np.float32)


@pytest.mark.parametrize("reorder", ["louvain", "loa"])
def test_plan_sddmm_values_in_canonical_order_cpu(graph, reorder):
    rng = np.random.default_rng()
    A = graph.copy()
    A.data = rng.random(A.nnz) + 0.5  # non-unit values: the entry order matters
    X, Y = rng.standard_normal((300, 5)), rng.standard_normal((300, 5))
    S = ns.prepare(A, reorder=reorder, backend="cpu", dtype=np.float64).sddmm(X, Y)
    assert_close(S.data, sddmm_reference(A, X, Y), np.float64)
    assert np.array_equal(S.indices, ns.api.canonical_csr(A).indices)


def test_plan_on_device_arrays_small():
    A = graphs.community_graph(n_nodes=24, avg_degree=3, n_communities=3, seed=1)
    rng = np.random.default_rng()
    B = rng.standard_normal((24, 5)).astype(np.float32)
    plan = ns.prepare(A, reorder="loa", backend="cuda", dtype=np.float32, algorithm="hp")
    C = plan.spmm(cuda.to_device(B))
    assert_close(C.copy_to_host(), spmm_reference(A, B), np.float32)
    values = plan.sddmm(cuda.to_device(B), cuda.to_device(B))
    assert_close(values.copy_to_host(), sddmm_reference(A, B, B), np.float32)


@pytest.mark.parametrize("reorder", [None, "rcm"])
def test_plan_takes_operands_of_another_dtype_on_every_backend(reorder):
    """The dense operands decide the dtype, as in spmm: a float32 plan multiplies float64 B on the
    device as on the CPU (one converted copy of the matrix per dtype)."""
    A = graphs.community_graph(n_nodes=24, avg_degree=3, n_communities=3, seed=1)
    rng = np.random.default_rng()
    B = rng.standard_normal((24, 5))
    for backend in ("cpu", "cuda"):
        plan = ns.prepare(A, reorder=reorder, backend=backend, algorithm="hp" if backend == "cuda" else "auto")
        assert plan.A.dtype == np.float32
        for _ in range(2):
            C = plan.spmm(B if backend == "cpu" else cuda.to_device(B))
            C = C if backend == "cpu" else C.copy_to_host()
            assert C.dtype == np.float64
            assert_close(C, spmm_reference(A, B), np.float32)  # A's values are float32
            values = plan.sddmm(*(X if backend == "cpu" else cuda.to_device(X) for X in (B, B)))
            values = values.data if backend == "cpu" else values.copy_to_host()
            assert_close(values, sddmm_reference(A, B, B), np.float32)


def test_prepare_refuses_bad_arguments(graph):
    with pytest.raises(ValueError, match="reorder"):
        ns.prepare(graph, reorder="metis")
    with pytest.raises(TypeError, match="reorder=None takes no arguments, got \\['sead'\\]"):
        ns.prepare(graph, sead=1)  # a misspelt argument is not silently ignored
    with pytest.raises(TypeError, match="got \\['ncols'\\].*node_order and n_cols"):
        ns.prepare(graph, reorder="auto", node_order="plan", ncols=8)  # named, before n_cols is missed
    with pytest.raises(ValueError, match="square"):
        ns.prepare(sp.random(4, 5, format="csr"), reorder="loa")


def test_auto_reorders_per_width_where_the_model_says_it_pays(monkeypatch):
    """A shuffled band graph on a (faked) GPU of 4 KiB of L2 and slow memory: at N = 8 B's 32-byte
    rows outgrow L2 and a locality order pays back at once; at N = 1 B fits.  Results stay in the
    caller's order either way."""
    from numbasparse.cuda import device
    from numbasparse.reorder import locality

    monkeypatch.setattr(device, "memory_system", lambda: (4096, 1e6))
    monkeypatch.setattr(locality, "FETCH_SHARE", 1.0)  # (every fetch's bytes: a saving that beats the permutations)
    offsets = [k for k in range(-4, 5) if k]
    band = sp.diags([np.ones(400 - abs(k), np.float32) for k in offsets], offsets, format="csr")
    A = graphs.shuffled(band)
    A.data = np.random.default_rng(0).uniform(0.5, 1.5, A.nnz).astype(np.float32)
    plan = ns.prepare(A, reorder="auto", backend="cuda", algorithm="hp")
    rng = np.random.default_rng(1)
    for n in (8, 1):
        B = rng.standard_normal((400, n)).astype(np.float32)
        assert_close(plan.spmm(cuda.to_device(B)).copy_to_host(), spmm_reference(A, B), np.float32)
    assert plan.decisions[8]["method"] in ("bfs", "degree") and plan.decisions[1]["method"] is None
    assert plan.perm is None  # the order taken last (N = 1)
    X = rng.standard_normal((400, 8)).astype(np.float32)
    values = plan.sddmm(cuda.to_device(X), cuda.to_device(X)).copy_to_host()
    assert_close(values, sddmm_reference(A, X, X), np.float32)
    assert plan.perm is not None and plan.reorder_seconds > 0


def test_auto_keeps_the_order_on_the_cpu_backend(graph):
    plan = ns.prepare(graph, reorder="auto", backend="cpu")
    B = np.random.default_rng().standard_normal((300, 4)).astype(np.float32)
    assert_close(plan.spmm(B), spmm_reference(graph, B), np.float32)
    assert plan.perm is None and plan.decisions == {}
    with pytest.raises(TypeError, match="reorder='auto' takes no arguments"):
        ns.prepare(graph, reorder="auto", seed=1)


def test_auto_reads_only_the_pattern_and_computes_each_order_once(monkeypatch):
    """NaN weights do not stop the orders (they read the pattern); a call with out= keeps the
    graph's own order; a second width reuses the orders computed for the first."""
    from numbasparse.cuda import device
    from numbasparse.reorder import locality

    monkeypatch.setattr(device, "memory_system", lambda: (4096, 1e6))
    monkeypatch.setattr(locality, "FETCH_SHARE", 1.0)  # (every fetch's bytes: a saving that beats the permutations)
    offsets = [k for k in range(-4, 5) if k]
    A = graphs.shuffled(sp.diags([np.ones(400 - abs(k), np.float32) for k in offsets], offsets, format="csr"))
    A.data[0] = np.nan
    computed = []
    bfs = locality.LOCALITY_ORDERS["bfs"]
    monkeypatch.setattr(locality, "CANDIDATES", (("bfs", lambda G: computed.append(1) or bfs(G)),))
    plan = ns.prepare(A, reorder="auto", backend="cuda", algorithm="hp")
    rng = np.random.default_rng(2)
    for n in (8, 9):
        B = rng.standard_normal((400, n)).astype(np.float32)
        C = plan.spmm(cuda.to_device(B)).copy_to_host()
        assert np.isnan(C).any() and plan.decisions[n]["method"] == "bfs"
    assert computed == [1] and plan.decisions[9]["bfs"]["seconds"] == 0.0
    out = cuda.device_array((400, 8), np.float32)
    assert plan.spmm(cuda.to_device(B[:, :8].copy()), out=out) is out  # the graph's own order
    with pytest.raises(ValueError, match="A has 400 columns but B has 3 rows"):
        plan.spmm(np.ones((3, 16), np.float32))
    assert 16 not in plan.decisions


@pytest.mark.parametrize("reorder", [None, "rcm", "louvain"])
def test_plan_order_takes_and_returns_the_plans_order(graph, reorder):
    """node_order='plan': no per-call permutation; features converted once give the caller's
    product back, and the plan behaves as the permuted matrix itself (out= included)."""
    rng = np.random.default_rng()
    A = graph.copy()
    A.data = rng.uniform(0.5, 1.5, A.nnz).astype(np.float32)
    B = rng.standard_normal((300, 6)).astype(np.float32)
    plan = ns.prepare(A, reorder=reorder, backend="cpu", node_order="plan")
    assert (plan.perm is None) == (reorder is None)
    B_plan = plan.to_plan_order(B)
    if reorder is not None:
        assert np.array_equal(B_plan, B[plan.perm])
    C_plan = plan.spmm(B_plan)
    assert_close(plan.to_caller_order(C_plan), spmm_reference(A, B), np.float32)
    assert_close(C_plan, spmm_reference(plan.A, B_plan), np.float32)
    out = np.full((300, 6), np.nan, np.float32)
    assert plan.spmm(B_plan, out=out) is out and np.array_equal(out, C_plan)
    S = plan.sddmm(B_plan, B_plan)  # values in plan.A's entry order
    assert np.array_equal(S.indices, plan.A.indices)
    assert_close(S.data, sddmm_reference(plan.A, B_plan, B_plan), np.float32)


def test_plan_order_on_device_arrays_small():
    A = graphs.community_graph(n_nodes=24, avg_degree=3, n_communities=3, seed=1)
    rng = np.random.default_rng()
    B = rng.standard_normal((24, 5)).astype(np.float32)
    plan = ns.prepare(A, reorder="degree", backend="cuda", algorithm="hp", node_order="plan")
    B_plan = plan.to_plan_order(cuda.to_device(B))
    assert np.array_equal(B_plan.copy_to_host(), B[plan.perm])
    C = plan.to_caller_order(plan.spmm(B_plan)).copy_to_host()
    assert_close(C, spmm_reference(A, B), np.float32)


def test_plan_order_lets_auto_take_an_order_the_per_call_permutations_would_eat(monkeypatch):
    """A shuffled band graph whose B outgrows a (faked) L2: with per-call permutations the
    saving cannot pay, without them it does; auto decides once, at prepare, for n_cols."""
    from numbasparse.cuda import device
    from numbasparse.reorder import locality

    monkeypatch.setattr(device, "memory_system", lambda: (8192, 1e8))
    offsets = [k for k in range(-4, 5) if k]
    A = graphs.shuffled(sp.diags([np.ones(400 - abs(k), np.float32) for k in offsets], offsets, format="csr"))
    pattern = ns.api.canonical_csr(A)
    caller = locality.choose_order(pattern, 8, 4, 8192, 1e8)
    plan_kept = locality.choose_order(pattern, 8, 4, 8192, 1e8, permutes=False)
    assert caller[0] is None and plan_kept[0] in ("bfs", "degree")
    plan = ns.prepare(A, reorder="auto", backend="cuda", algorithm="hp", node_order="plan", n_cols=8)
    assert plan.decisions[8]["method"] == plan_kept[0] and plan.perm is not None
    B = np.random.default_rng(3).standard_normal((400, 8)).astype(np.float32)
    for n in (8, 3):  # one order for every width
        C = plan.to_caller_order(plan.spmm(plan.to_plan_order(cuda.to_device(B[:, :n].copy()))))
        assert_close(C.copy_to_host(), spmm_reference(A, B[:, :n]), np.float32)
    assert list(plan.decisions) == [8]


def test_node_order_arguments_are_checked(graph):
    with pytest.raises(ValueError, match="node_order must be one of"):
        ns.prepare(graph, node_order="mine")
    with pytest.raises(ValueError, match="n_cols is the width"):
        ns.prepare(graph, reorder="auto", node_order="plan")  # auto must know the width up front
    with pytest.raises(ValueError, match="n_cols is the width"):
        ns.prepare(graph, reorder="rcm", n_cols=8)
    with pytest.raises(ValueError, match="positive integer"):
        ns.prepare(graph, reorder="auto", node_order="plan", n_cols=0)
    plan = ns.prepare(graph, reorder="rcm", backend="cpu")
    with pytest.raises(ValueError, match="node_order='plan'"):
        plan.to_plan_order(np.zeros((300, 2), np.float32))
    plan = ns.prepare(graph, reorder="rcm", backend="cpu", node_order="plan")
    with pytest.raises(ValueError, match="one row per node"):
        plan.to_plan_order(np.zeros((299, 2), np.float32))


def test_a_reordered_plan_keeps_the_index_dtype_it_was_given(graph):
    plan = ns.prepare(graph, reorder="rcm", backend="cpu", index_dtype=np.int64)
    assert plan.A.indices.dtype == np.int64 and plan.A.indptr.dtype == np.int64
    B = np.random.default_rng().standard_normal((300, 3)).astype(np.float32)
    assert_close(plan.spmm(B), spmm_reference(graph, B), np.float32)


def test_device_operands_on_a_cpu_plan_are_a_clear_error(graph):
    for node_order in ("caller", "plan"):
        plan = ns.prepare(graph, reorder="rcm", backend="cpu", node_order=node_order)
        X = cuda.to_device(np.zeros((300, 2), np.float32))
        with pytest.raises(TypeError, match="CUDA array but the plan runs on the CPU backend"):
            plan.to_plan_order(X) if node_order == "plan" else plan.spmm(X)


def test_a_plan_in_the_callers_order_takes_operands_of_a_non_square_graph():
    R = sp.random(5, 8, density=0.4, format="csr", random_state=1, dtype=np.float32)
    plan = ns.prepare(R, backend="cpu", node_order="plan")
    B = np.random.default_rng().standard_normal((8, 3)).astype(np.float32)
    assert plan.to_plan_order(B) is B
    assert_close(plan.spmm(B), spmm_reference(R, B), np.float32)


def test_a_plan_in_the_callers_order_checks_the_rows_it_is_given():
    G = sp.random(12, 12, density=0.3, format="csr", dtype=np.float32, random_state=3)
    plan = ns.prepare((G + G.T).tocsr(), node_order="plan", backend="cpu")
    with pytest.raises(ValueError, match="X must have one row per row or column"):
        plan.to_plan_order(np.ones((5, 4), np.float32))


@pytest.mark.parametrize("option, value, error, match", [("algorithm", "nope", ValueError, "algorithm must be one of"),
                                                         ("index_dtype", "junk", TypeError, "index_dtype must be")])
def test_prepare_checks_its_options_before_any_call(option, value, error, match):
    with pytest.raises(error, match=match):
        ns.prepare(sp.eye(4, format="csr"), backend="cpu", **{option: value})
