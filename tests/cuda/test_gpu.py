"""Real-GPU checks: larger graphs, CuPy and PyTorch arrays in and out (skipped without a GPU)."""
import contextlib

import numpy as np
import pytest
from numba import cuda

import numbasparse as ns
from numbasparse import graphs
from numbasparse.reference import sddmm_reference, spmm_reference
from strategies import assert_close

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def rmat():
    return graphs.rmat(15, 16)


@pytest.mark.parametrize("algorithm, reduce", [(a, r) for a in ns.dispatch.algorithms("spmm", "cuda")
                                                for r in ns.dispatch.SPMM[a].reductions])
@pytest.mark.parametrize("n, dtype, index_dtype", [(33, np.float32, np.int32), (128, np.float32, np.int64),
                                                   (70, np.float64, np.int32)])
def test_spmm_on_rmat(rmat, algorithm, reduce, n, dtype, index_dtype):
    B = np.random.default_rng().standard_normal((rmat.shape[1], n)).astype(dtype)
    A = ns.CSR.from_scipy(rmat, dtype=dtype, index_dtype=index_dtype)
    out = cuda.to_device(np.full((rmat.shape[0], n), np.nan, dtype))
    ns.spmm(A, cuda.to_device(B), reduce=reduce, algorithm=algorithm, out=out)
    assert_close(out.copy_to_host(), spmm_reference(rmat, B, reduce), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("maximum", [True, False])
def test_atomic_extremum_on_float_bits(dtype, maximum):
    """One integer atomic on the bits gives the float max/min, for any mix of signs, zeros and
    infinities in the stored value and the new ones."""
    from numbasparse.cuda.intrinsics import atomic_max_float, atomic_min_float

    extremum = atomic_max_float if maximum else atomic_min_float

    @cuda.jit
    def apply(out, values):
        t = cuda.grid(1)
        if t < values.shape[0]:
            extremum(out, t % out.shape[0], t // out.shape[0] % out.shape[1], values[t])

    rng = np.random.default_rng()
    special = np.array([0.0, -0.0, np.inf, -np.inf, 1e-30, -1e-30], dtype)
    start = np.concatenate([special, rng.standard_normal(58)]).astype(dtype).reshape(16, 4)
    values = np.concatenate([special, rng.standard_normal(4096 - 6) * 10.0 ** rng.integers(-3, 4, 4090)]).astype(dtype)
    out = cuda.to_device(start)
    apply[16, 256](out, cuda.to_device(values))
    expected = start.copy()
    t = np.arange(len(values))
    (np.maximum if maximum else np.minimum).at(expected, (t % 16, t // 16 % 4), values)
    np.testing.assert_array_equal(out.copy_to_host(), expected)


@pytest.mark.parametrize("k, f, dtype", [(33, 16, np.float32), (300, 70, np.float32), (64, 8, np.float64)])
def test_fused_gcn_layer_on_rmat(rmat, k, f, dtype):
    rng = np.random.default_rng()
    X = rng.standard_normal((rmat.shape[1], k)).astype(dtype)
    W = rng.standard_normal((k, f)).astype(dtype)
    out = ns.spmm_dense(ns.CSR.from_scipy(rmat, dtype=dtype), cuda.to_device(X), cuda.to_device(W))
    assert_close(out.copy_to_host(), spmm_reference(rmat, X) @ W.astype(np.float64), dtype)


@pytest.mark.parametrize("fused", ["auto", True])
@pytest.mark.parametrize("k, f", [(64, 16), (16, 64), (70, 70)])  # the matmul first, after, equal widths
def test_gcn_layer_of_torch_tensors_keeps_their_dtype_under_autocast(rmat, fused, k, f):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    X = rng.standard_normal((rmat.shape[1], k)).astype(np.float32)
    W = rng.standard_normal((k, f)).astype(np.float32)
    A = ns.CSR.from_scipy(rmat)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = ns.spmm_dense(A, torch.tensor(X, device="cuda"), torch.tensor(W, device="cuda"), fused=fused)
    assert out.dtype == torch.float32 and out.is_cuda
    assert_close(out.cpu().numpy(), spmm_reference(rmat, X) @ W.astype(np.float64), np.float32)


@pytest.mark.parametrize("algorithm", ns.dispatch.algorithms("sddmm", "cuda"))
@pytest.mark.parametrize("k", [1, 32, 70, 256])
def test_sddmm_on_rmat(rmat, k, algorithm):
    rng = np.random.default_rng()
    X = rng.standard_normal((rmat.shape[0], k)).astype(np.float32)
    Y = rng.standard_normal((rmat.shape[1], k)).astype(np.float32)
    S = ns.sddmm(rmat, X, Y, algorithm=algorithm)
    assert_close(S.data, sddmm_reference(rmat, X, Y), np.float32)


def test_torch_in_torch_out_on_its_stream(rmat):
    torch = pytest.importorskip("torch")
    B = torch.randn(rmat.shape[1], 64, device="cuda")
    A = ns.CSR.from_scipy(rmat)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        B2 = B * 2  # produced on the side stream; spmm must be ordered after it
        C = ns.spmm(A, B2)
        S = ns.sddmm(A, B2, B2)
    stream.synchronize()
    assert isinstance(C, torch.Tensor) and C.device == B.device and C.dtype == torch.float32
    assert isinstance(S, torch.Tensor) and S.shape == (A.nnz,)
    Bh = (B * 2).cpu().numpy()
    assert_close(C.cpu().numpy(), spmm_reference(rmat, Bh), np.float32)
    assert_close(S.cpu().numpy(), sddmm_reference(rmat, Bh, Bh), np.float32)


@pytest.mark.parametrize("k, f", [(64, 16), (16, 64)])
def test_repeated_gcn_layer_calls_on_torch_tensors_skip_validation_with_fresh_operands(rmat, k, f):
    torch = pytest.importorskip("torch")
    A = ns.CSR.from_scipy(rmat)
    rng = np.random.default_rng()
    for _ in range(6):
        X = rng.standard_normal((rmat.shape[1], k)).astype(np.float32)
        W = rng.standard_normal((k, f)).astype(np.float32)
        out = ns.spmm_dense(A, torch.tensor(X, device="cuda"), torch.tensor(W, device="cuda", requires_grad=True))
        assert not out.requires_grad
        assert_close(out.cpu().numpy(), spmm_reference(rmat, X) @ W.astype(np.float64), np.float32)
    kept = [key for key in A.cache.sections["replays"] if key[0][0] == "spmm_dense"]
    assert len(kept) == 1


@pytest.mark.parametrize("k, f", [(64, 16), (16, 64)])
def test_gcn_layer_of_cupy_arrays_gives_cupy(rmat, k, f):
    cupy = pytest.importorskip("cupy")
    X = cupy.random.standard_normal((rmat.shape[1], k), dtype=cupy.float32)
    W = cupy.random.standard_normal((k, f), dtype=cupy.float32)
    out = ns.spmm_dense(ns.CSR.from_scipy(rmat), X, W)
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float32
    expected = spmm_reference(rmat, cupy.asnumpy(X)) @ cupy.asnumpy(W).astype(np.float64)
    assert_close(cupy.asnumpy(out), expected, np.float32)


def test_cupy_in_cupy_out(rmat):
    cupy = pytest.importorskip("cupy")
    B = cupy.random.standard_normal((rmat.shape[1], 33), dtype=cupy.float64)
    C = ns.spmm(rmat, B, reduce="max")
    assert isinstance(C, cupy.ndarray) and C.dtype == cupy.float64
    assert_close(cupy.asnumpy(C), spmm_reference(rmat, cupy.asnumpy(B), "max"), np.float64)


def test_non_contiguous_device_array_is_refused(rmat):
    torch = pytest.importorskip("torch")
    B = torch.randn(64, rmat.shape[1], device="cuda").T
    with pytest.raises(ValueError, match="C-contiguous"):
        ns.spmm(rmat, B)


def test_device_out_aliasing_B_is_refused():
    torch = pytest.importorskip("torch")
    import scipy.sparse as sp

    B = torch.randn(8, 8, device="cuda")
    with pytest.raises(ValueError, match="share memory"):
        ns.spmm(sp.identity(8, format="csr", dtype=np.float32), B, out=B)


def _sass(kernel):
    sass = kernel.inspect_sass()
    return "\n".join(sass.values()) if isinstance(sass, dict) else sass


def test_hp_kernel_uses_16_byte_loads_of_B():
    """Hierarchical vectorized memory access: N=128 float32 rows are read with LDG.128, by the
    rule's layout (no spill) and by a forced 16-lane layout of two vectors per lane, whose
    register cap (hp.MAX_REGISTERS) costs it one 8-byte spill, no more; in both launch modes (the
    single launch has no cap and no spill)."""
    from numbasparse.cuda import hp

    A = ns.CSR.from_scipy(graphs.rmat(8, 4))
    B = cuda.to_device(np.ones((A.shape[1], 128), np.float32))
    C = cuda.device_array((A.shape[0], 128), np.float32)
    for lanes, single, spills in ((None, False, 0), (16, False, 2), (None, True, 0), (16, True, 0)):
        hp.spmm_hp(A, B, C, "sum", lanes=lanes, single=single)
        lanes, vec, cf, depth = hp.spmm_layout(A, 128, 4, B, lanes=lanes)
        sass = _sass(hp.spmm_hp_kernel(0, lanes, vec, cf, "<f4", "<i4", depth, single))
        assert "LDG.E.128" in sass
        assert sass.count("STL") <= spills


def test_crc_kernel_keeps_accumulators_in_registers():
    """CWM's per-thread accumulator array must not spill to local memory (no STL/LDL)."""
    from numbasparse.cuda import crc

    kernel = crc.spmm_crc_cwm_kernel(0, 4, "<f4", "<i4")
    A = ns.CSR.from_scipy(graphs.rmat(8, 4))
    B = cuda.to_device(np.ones((A.shape[1], 128), np.float32))
    C = cuda.device_array((A.shape[0], 128), np.float32)
    crc.spmm_crc_cwm(A, B, C, "sum", cf=4)
    sass = _sass(kernel)
    assert "STL" not in sass and "LDL" not in sass


def test_torch_operands_compile_for_contiguous_arrays_and_take_the_fast_launch():
    """numba-cuda 0.30 types interface exports with explicit strides as layout "A" (strided code,
    no fast launch); DeviceView exports none when contiguous, so kernels see layout "C"."""
    torch = pytest.importorskip("torch")
    from numbasparse.arrays import DeviceView
    from numbasparse.cuda import hp, launch, reductions

    A = ns.CSR.from_scipy(graphs.rmat(8, 4))
    B = torch.randn(A.shape[1], 32, device="cuda")
    C = ns.spmm(A, B, algorithm="hp")
    C = ns.spmm(A, B, algorithm="hp")  # the second call goes through the fast launch
    assert_close(C.cpu().numpy(), spmm_reference(A.to_scipy(), B.cpu().numpy()), np.float32)
    lanes, vec, cf, depth = hp.spmm_layout(A, 32, 4, DeviceView.of_torch(B))
    (plan,) = (v for v in A.cache.sections["plans"].values() if isinstance(v, hp.HPPlan))  # the rule's launch mode
    kernel = hp.spmm_hp_kernel(reductions.SUM, lanes, vec, cf, "<f4", "<i4", depth, plan.single)
    layouts = {getattr(t, "layout", "C") for signature in kernel.overloads for t in signature}
    assert layouts == {"C"}
    assert launch._fast_key(kernel) in launch._fast_launch



def test_hp_sddmm_of_both_index_widths_binds_each_on_one_dispatcher():
    """HP-SDDMM's kernel is one dispatcher for int32 and int64 indices: each width gets its own
    fast launch, and repeated calls of either are bound (then replayed)."""
    torch = pytest.importorskip("torch")
    from numbasparse.cuda import launch

    graph = graphs.rmat(9, 8)
    X, Y = (torch.randn(n, 32, device="cuda") for n in graph.shape)
    kernels = set()
    for index_dtype in (np.int32, np.int64):
        A = ns.CSR.from_scipy(graph, index_dtype=index_dtype)
        for _ in range(ns.replay.REPLAY_FROM_CALL + 1):
            out = ns.sddmm(A, X, Y)
        assert_close(out.cpu().numpy(), sddmm_reference(graph, X.cpu().numpy(), Y.cpu().numpy()), np.float32)
        assert replays(A) == 1
        kernels |= {plan[0] for key, plan in A.cache.sections["plans"].items() if isinstance(key, tuple) and key[0] == "sddmm_hp"}
    (kernel,) = kernels
    assert len(launch._fast_launch[launch._fast_key(kernel)]) == 2

def replays(A):
    """Replays kept in A's cache."""
    return sum(isinstance(entry, ns.replay.Replay) for entry in A.cache.sections["replays"].values())


def _freed_nan_block(torch, shape):
    """Leave a NaN-filled block of ``shape`` in torch's caching allocator, for the next
    allocation of that size (a poisoned output for a call that allocates its own)."""
    poison = torch.full(shape, float("nan"), device="cuda")
    del poison


@pytest.mark.parametrize("graph, n, reduce, algorithm", [
    (graphs.rmat(8, 8), 32, "sum", "auto"),     # HP in one launch (short rows)
    (graphs.rmat(8, 8), 64, "max", "auto"),
    (graphs.rmat(15, 16), 32, "sum", "auto"),   # HP after a memset
    (graphs.rmat(15, 16), 64, "max", "hp"),     # HP after the fill of the crossing rows
    (graphs.rmat(15, 16), 70, "min", "slab"),   # fill of every row, then the slab kernel
], ids=["single-sum", "single-max", "memset-sum", "fill-max", "slab-min"])
def test_repeated_torch_calls_are_replayed_with_fresh_operands(monkeypatch, graph, n, reduce, algorithm):
    torch = pytest.importorskip("torch")
    A = ns.CSR.from_scipy(graph)
    resolved = []
    resolve = ns.dispatch.resolve
    monkeypatch.setattr(ns.dispatch, "resolve", lambda *a, **k: resolved.append(a) or resolve(*a, **k))
    for _ in range(6):
        B = torch.randn(graph.shape[1], n, device="cuda")
        _freed_nan_block(torch, (graph.shape[0], n))
        C = ns.spmm(A, B, reduce=reduce, algorithm=algorithm)
        assert_close(C.cpu().numpy(), spmm_reference(graph, B.cpu().numpy(), reduce), np.float32)
    assert len(resolved) == ns.replay.REPLAY_FROM_CALL - 1  # calls 4-6 replayed the launches of call 3
    assert replays(A) == 1


@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_repeated_16_bit_slab_calls_are_replayed_through_their_workspace(monkeypatch, reduce):
    """The slab kernel's float32 workspace is bound into both of its launches: calls 4-6 replay
    them on fresh operands and find the workspace filled again by the call before."""
    torch = pytest.importorskip("torch")
    import ml_dtypes

    graph = graphs.rmat(15, 16)
    A = ns.CSR.from_scipy(graph, dtype="bfloat16")
    exact = graph.astype(np.float64)
    exact.data = graph.data.astype(ml_dtypes.bfloat16).astype(np.float64)
    resolved = []
    resolve = ns.dispatch.resolve
    monkeypatch.setattr(ns.dispatch, "resolve", lambda *a, **k: resolved.append(a) or resolve(*a, **k))
    for _ in range(6):
        B = torch.randn(graph.shape[1], 64, device="cuda", dtype=torch.bfloat16)
        poison = torch.full((graph.shape[0], 64), float("nan"), device="cuda", dtype=torch.bfloat16)
        del poison  # (the next allocation of that size: the call's output)
        C = ns.spmm(A, B, reduce=reduce, algorithm="slab").float().cpu().numpy()
        reference = spmm_reference(exact, B.float().cpu().numpy().astype(np.float64), reduce)
        assert np.linalg.norm(C - reference) <= 2.0**-8 * np.linalg.norm(reference)
    assert len(resolved) == ns.replay.REPLAY_FROM_CALL - 1
    assert replays(A) == 1


def test_a_replay_is_not_used_for_another_alignment_stream_or_dtype():
    torch = pytest.importorskip("torch")
    graph = graphs.rmat(10, 8)
    A = ns.CSR.from_scipy(graph)
    k, n = graph.shape[1], 36
    flat = torch.randn(k * n + 1, device="cuda")
    side = torch.cuda.Stream()
    for _ in range(5):
        for B in (flat[:-1].view(k, n), flat[1:].view(k, n)):  # 16-byte aligned and not
            with torch.cuda.stream(side):
                C_side = ns.spmm(A, B)
            C = ns.spmm(A, B)
            side.synchronize()
            for result in (C, C_side):
                assert_close(result.cpu().numpy(), spmm_reference(graph, B.cpu().numpy()), np.float32)
    assert replays(A) == 4  # one per stream and alignment of B
    with pytest.raises(TypeError, match="float32 CSR"):
        ns.spmm(A, torch.randn(k, n, device="cuda", dtype=torch.float64))
    with pytest.raises(ValueError, match="columns"):
        ns.spmm(A, torch.randn(k + 1, n, device="cuda"))


def test_repeated_torch_sddmm_is_replayed():
    torch = pytest.importorskip("torch")
    graph = graphs.rmat(10, 8)
    A = ns.CSR.from_scipy(graph)
    for _ in range(6):
        X = torch.randn(graph.shape[0], 40, device="cuda")
        Y = torch.randn(graph.shape[1], 40, device="cuda")
        _freed_nan_block(torch, (A.nnz,))
        S = ns.sddmm(A, X, Y)
        assert_close(S.cpu().numpy(), sddmm_reference(graph, X.cpu().numpy(), Y.cpu().numpy()), np.float32)
    assert replays(A) == 1


def _count_full_score_calls(monkeypatch):
    from numbasparse import api

    full = []
    call = api._scores_times_call
    monkeypatch.setattr(api, "_scores_times_call", lambda *args: full.append(1) or call(*args))
    return full


@pytest.mark.parametrize("softmax", [False, True], ids=["sddmm_spmm", "attention"])
@pytest.mark.parametrize("fused", [True, False])
def test_repeated_torch_score_products_are_replayed_fused_or_not(softmax, fused, monkeypatch):
    """Calls are replayed from the fourth on (fresh operands, fresh outputs), the unfused path's
    too: its replay allocates new intermediates (scores, weights) for each call."""
    from numbasparse.reference import attention_reference, sddmm_spmm_reference

    torch = pytest.importorskip("torch")
    graph = graphs.rmat(10, 8)
    A = ns.CSR.from_scipy(graph)
    op, reference = (ns.graph_attention, attention_reference) if softmax else (ns.sddmm_spmm, sddmm_spmm_reference)
    full = _count_full_score_calls(monkeypatch)
    for _ in range(6):
        X, Y = (torch.randn(n, 24, device="cuda") for n in graph.shape)
        Z = torch.randn(graph.shape[1], 40, device="cuda")
        _freed_nan_block(torch, (graph.shape[0], 40))
        out = op(A, X, Y, Z, fused=fused)
        expected = reference(graph, *(t.cpu().numpy().astype(np.float64) for t in (X, Y, Z)))
        assert_close(out.cpu().numpy(), expected, np.float32)
    assert replays(A) == 1
    assert len(full) == ns.replay.REPLAY_FROM_CALL - 1


def test_repeated_torch_score_products_choose_fusion_as_replayed_calls(monkeypatch):
    """A signature's first call weighs a full call's host time; from its second on the call is a
    repeated one, replayed from its fourth, so fused="auto" weighs only the unfused path's
    launches (dispatch.FUSE_MAX_NNZ_REPLAYED); a replay asks nothing."""
    torch = pytest.importorskip("torch")
    from numbasparse import dispatch

    graph = graphs.rmat(10, 8)
    A = ns.CSR.from_scipy(graph)
    asked = []
    pays = dispatch.fuse_pays
    monkeypatch.setattr(dispatch, "fuse_pays", lambda *args: asked.append(args[3:]) or pays(*args))
    for _ in range(ns.replay.REPLAY_FROM_CALL + 1):
        X, Y = (torch.randn(n, 24, device="cuda") for n in graph.shape)
        ns.graph_attention(A, X, Y, torch.randn(graph.shape[1], 40, device="cuda"))
    assert asked == [(False,)] + [(True,)] * (ns.replay.REPLAY_FROM_CALL - 2)
    assert replays(A) == 1


def test_a_training_loop_replays_its_fused_forward_calls(monkeypatch):
    """numbasparse.torch keeps the forward values' matrix while the backward passes other values,
    so a training loop's forward attention is replayed from its fourth step on."""
    torch = pytest.importorskip("torch")
    import numbasparse.torch as nst

    graph = graphs.rmat(10, 8)
    g = nst.Graph(graph, device="cuda")
    W = torch.randn(16, 16, device="cuda", requires_grad=True)
    full = _count_full_score_calls(monkeypatch)
    for _ in range(6):
        H = torch.randn(graph.shape[0], 16, device="cuda")
        Q = H @ W
        nst.graph_attention(g, Q, Q, H).square().sum().backward()
    assert len(full) == ns.replay.REPLAY_FROM_CALL - 1


@pytest.mark.parametrize("graph, reduce", [(graphs.rmat(10, 8), "sum"), (graphs.rmat(12, 16), "max"),
                                           (graphs.rmat(12, 16), "sum")],
                         ids=["single-launch-sum", "fill-max", "memset-sum"])
@pytest.mark.parametrize("streams", ["two streams", "one side stream", "default stream"])
def test_threads_share_a_csr_on_one_or_several_streams(graph, reduce, streams):
    """Two Python threads call spmm and sddmm on the same CSR at once (its plans, bound launches,
    replays and per-stream scratch shared): every result right, on every stream layout."""
    import threading

    torch = pytest.importorskip("torch")
    A = ns.CSR.from_scipy(graph)
    side = [torch.cuda.Stream(), torch.cuda.Stream()]
    chosen = {"two streams": side, "one side stream": [side[0]] * 2, "default stream": [None, None]}[streams]
    errors = []

    def work(stream, seed):
        try:
            generator = torch.Generator(device="cuda").manual_seed(seed)
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                for _ in range(12):
                    B = torch.randn(graph.shape[1], 32, device="cuda", generator=generator)
                    X = torch.randn(graph.shape[0], 16, device="cuda", generator=generator)
                    C, S = ns.spmm(A, B, reduce=reduce), ns.sddmm(A, X, X)
                    torch.cuda.current_stream().synchronize()
                    assert_close(C.cpu().numpy(), spmm_reference(graph, B.cpu().numpy(), reduce), np.float32)
                    Xh = X.cpu().numpy()
                    assert_close(S.cpu().numpy(), sddmm_reference(graph, Xh, Xh), np.float32)
        except Exception as error:  # noqa: BLE001 (reported by the main thread)
            errors.append(error)

    threads = [threading.Thread(target=work, args=(stream, seed)) for seed, stream in enumerate(chosen)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert not errors, errors


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_a_torch_graph_on_the_gpu_is_converted_there(layout):
    """A CUDA torch sparse tensor (COO with duplicates, CSR) becomes a device CSR on the GPU:
    nothing but indptr reaches the host, and the results match scipy's."""
    torch = pytest.importorskip("torch")
    from numbasparse.csr import sparse_operand

    rng = np.random.default_rng(5)
    rows, cols = rng.integers(0, 500, 4000), rng.integers(0, 400, 4000)
    values = rng.standard_normal(4000).astype(np.float32)
    import scipy.sparse as sp

    A = sp.coo_matrix((values, (rows, cols)), shape=(500, 400)).tocsr()
    t = torch.sparse_coo_tensor(torch.tensor(np.stack([rows, cols])), torch.tensor(values), (500, 400),
                                device="cuda")
    if layout == "csr":
        t = t.coalesce().to_sparse_csr()
    dev = sparse_operand(t)
    assert isinstance(dev, ns.CSR) and dev._host_copy is None
    B = torch.randn(400, 48, device="cuda")
    C = ns.spmm(dev, B, algorithm="hp")
    assert dev._host_copy is None
    assert_close(C.cpu().numpy(), spmm_reference(A, B.cpu().numpy()), np.float32)
    assert_close(ns.spmm(t, B, reduce="max").cpu().numpy(), spmm_reference(A, B.cpu().numpy(), "max"), np.float32)


def test_a_cuda_dlpack_array_is_read_in_place():
    torch = pytest.importorskip("torch")
    from fakes import DLPackOnly

    A = graphs.rmat(10, 8).astype(np.float32)
    B = torch.randn(A.shape[1], 40, device="cuda")
    C = ns.spmm(A, DLPackOnly(B))
    assert isinstance(C, torch.Tensor) and C.is_cuda
    assert_close(C.cpu().numpy(), spmm_reference(A, B.cpu().numpy()), np.float32)
