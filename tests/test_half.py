"""Half precision: float16 and bfloat16 operands on every operation, computed in float32 and
rounded once to the operands' dtype, on the CUDA kernels (the simulator here) and the CPU backend.

The bound pinned here (and stated in the README): against a float64 computation on the same
16-bit inputs, an operation that rounds once (SpMM, SDDMM, the fused kernels, the fused GCN
layer) is within the unit roundoff u of the dtype by relative norm error (u = 2^-11 float16,
2^-8 bfloat16); the unfused SDDMM -> SpMM and attention also round their scores: within 2u."""
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies

import numbasparse as ns
from numbasparse import dispatch

HALVES = {"float16": (np.dtype(np.float16), 2.0**-11), "bfloat16": (np.dtype(ml_dtypes.bfloat16), 2.0**-8)}
BACKENDS = ["cuda", "cpu"]


def relative_error(result, reference):
    result = np.asarray(result.toarray() if sp.issparse(result) else result, np.float64)
    reference = reference.toarray() if sp.issparse(reference) else reference
    return np.linalg.norm(result - reference) / np.linalg.norm(reference)


@pytest.fixture
def graph():
    """A 37 x 29 graph with an empty row, a heavy row and values that 16 bits cannot hold exactly."""
    rng = np.random.default_rng(7)
    dense = (rng.random((37, 29)) < 0.15) * rng.standard_normal((37, 29))
    dense[3] = 0
    dense[11, rng.random(29) < 0.9] = 1.1
    return sp.csr_matrix(dense)


def rounded(A, dtype):
    """A with its values rounded to ``dtype``, in float64: what the kernels compute with."""
    A = A.astype(np.float64)
    A.data = A.data.astype(dtype).astype(np.float64)
    return A


def operands(rng, dtype, *shapes):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_spmm_in_half_precision_rounds_once(graph, name, backend, reduce):
    dtype, u = HALVES[name]
    (B,) = operands(np.random.default_rng(1), dtype, (29, 24))
    C = ns.spmm(graph, B, reduce=reduce, backend=backend)
    assert C.dtype == dtype and C.shape == (37, 24)
    reference = ns.spmm(rounded(graph, dtype), B.astype(np.float64), reduce=reduce, backend="cpu")
    assert relative_error(C, reference) <= u
    assert not np.any(C.astype(np.float32)[3])  # the empty row


@pytest.mark.parametrize("name,reduce", [("bfloat16", "sum"), ("bfloat16", "max"), ("float16", "mean"),
                                         ("float16", "min")])
def test_spmm_on_the_column_slab_in_half_precision_rounds_once(graph, name, reduce, monkeypatch):
    from dataclasses import replace

    from numbasparse.cuda import device, slab

    if device.simulator_enabled():  # the simulator runs a thread per thread
        monkeypatch.setattr(slab, "DEFAULT", replace(slab.DEFAULT, warps=2))
    dtype, u = HALVES[name]
    (B,) = operands(np.random.default_rng(5), dtype, (29, 24))
    C = ns.spmm(graph, B, reduce=reduce, algorithm="slab")
    assert C.dtype == dtype and C.shape == (37, 24)
    reference = ns.spmm(rounded(graph, dtype), B.astype(np.float64), reduce=reduce, backend="cpu")
    assert relative_error(C, reference) <= u
    assert not np.any(C.astype(np.float32)[3])  # the empty row


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sddmm_in_half_precision_rounds_once(graph, name, backend):
    dtype, u = HALVES[name]
    X, Y = operands(np.random.default_rng(2), dtype, (37, 16), (29, 16))
    S = ns.sddmm(graph, X, Y, backend=backend)
    reference = ns.sddmm(rounded(graph, dtype), X.astype(np.float64), Y.astype(np.float64), backend="cpu")
    assert S.dtype == np.float32  # scipy holds no 16-bit floats: the 16-bit values, widened
    assert np.array_equal(S.data, S.data.astype(dtype).astype(np.float32))
    assert relative_error(S, reference) <= u


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("op", ["sddmm_spmm", "graph_attention"])
@pytest.mark.parametrize("backend, fused", [("cuda", True), ("cuda", False), ("cpu", True)])
def test_scores_times_in_half_precision(graph, name, op, backend, fused):
    dtype, u = HALVES[name]
    X, Y, Z = operands(np.random.default_rng(3), dtype, (37, 8), (29, 8), (29, 12))
    out = getattr(ns, op)(graph, X, Y, Z, fused=fused, backend=backend)
    assert out.dtype == dtype
    reference = getattr(ns, op)(rounded(graph, dtype), *(a.astype(np.float64) for a in (X, Y, Z)), backend="cpu")
    assert relative_error(out, reference) <= (u if fused else 2 * u)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_spmm_dense_in_half_precision(graph, name, backend, fused):
    """Within u where it rounds once (the CPU backend), 2u on the GPU (the unfused path's
    intermediate product, and the fused kernel's aggregated rows on the tensor cores, are
    rounded to the operands' dtype)."""
    dtype, u = HALVES[name]
    X, W = operands(np.random.default_rng(4), dtype, (29, 20), (20, 6))
    out = ns.spmm_dense(graph, X, W, fused=fused, backend=backend)
    assert out.dtype == dtype
    reference = ns.spmm_dense(rounded(graph, dtype), X.astype(np.float64), W.astype(np.float64), backend="cpu")
    assert relative_error(out, reference) <= (2 * u if backend == "cuda" else u)


@pytest.mark.parametrize("name", HALVES)
def test_half_csr_keeps_its_values_in_half_and_gives_float32_to_scipy(graph, name):
    dtype, _ = HALVES[name]
    A = ns.CSR.from_scipy(graph, dtype=name)
    assert A.dtype == dtype
    back = A.to_scipy()
    assert back.dtype == np.float32
    assert np.array_equal(back.data, graph.data.astype(dtype).astype(np.float32))
    with pytest.raises(TypeError, match="A.astype"):
        ns.spmm(A, np.ones((29, 4), np.float32))


def test_algorithms_without_half_precision_name_those_with_it(graph):
    B = np.ones((29, 8), np.float16)
    with pytest.raises(ValueError, match="'crc' takes float32 and float64 operands, not float16; float16 runs on hp"):
        ns.spmm(graph, B, algorithm="crc")
    assert "slab" in [name for name, a in dispatch.SPMM.items() if "bfloat16" in a.dtypes]


def test_auto_runs_the_slab_kernel_for_half_only_on_large_graphs_up_to_n_128():
    half = np.dtype(np.float16)
    small = sp.csr_matrix(np.ones((256, 256), np.float32))  # 32 entries per segment, 65k entries
    large = sp.csr_matrix(np.ones((1024, 1024), np.float32))  # 1M entries
    assert dispatch.resolve("spmm", "auto", "cuda", True, 128, "sum", 4, small).name == "slab"
    assert dispatch.resolve("spmm", "auto", "cuda", True, 128, "sum", 2, small, dtype=half).name == "hp"
    assert dispatch.resolve("spmm", "auto", "cuda", True, 128, "sum", 2, large, dtype=half).name == "slab"
    assert dispatch.resolve("spmm", "auto", "cuda", True, 256, "sum", 2, large, dtype=half).name == "hp"


def test_half_tiles_on_the_tensor_cores_and_bfloat16_need_sm80_and_name_the_alternatives(monkeypatch):
    monkeypatch.setattr(dispatch, "has_sm80", lambda: False)  # an older GPU
    float16, bfloat16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
    for algorithm in ("hc", "hc_tiles"):
        with pytest.raises(ValueError, match=f"float16 tiles on the tensor cores \\(algorithm '{algorithm}'\\).*'hp'"):
            dispatch.resolve("spmm", algorithm, "cuda", True, 64, "sum", 2, dtype=float16)
    for algorithm in ("hp", "hc_cores"):  # CUDA cores only
        assert dispatch.resolve("spmm", algorithm, "cuda", True, 64, "sum", 2, dtype=float16).name == algorithm
    with pytest.raises(ValueError, match="bfloat16 operands need a GPU of compute capability 8.0"):
        dispatch.resolve("spmm", "hp", "cuda", True, 64, "sum", 2, dtype=bfloat16)


def test_half_inputs_are_not_modified(graph):
    B = np.random.default_rng(5).standard_normal((29, 8)).astype(ml_dtypes.bfloat16)
    before = B.copy()
    ns.spmm(graph, B, backend="cuda")
    assert np.array_equal(B.view(np.uint16), before.view(np.uint16))


def test_a_float16_overflow_gives_inf_not_a_wrong_finite_value():
    A = sp.csr_matrix(np.full((1, 4), 300.0))
    C = ns.spmm(A, np.full((4, 2), 100.0, np.float16), backend="cuda")  # 120000 > 65504
    assert np.all(np.isinf(C.astype(np.float32)))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [8, 256])
def test_a_half_output_off_vector_alignment_is_written_right(graph, n):
    torch = pytest.importorskip("torch")
    B = torch.randn(29, n, device="cuda").to(torch.bfloat16)
    out = torch.empty(37 * n + 1, device="cuda", dtype=torch.bfloat16)[1:].view(37, n)  # 2-byte aligned
    A = ns.CSR.from_scipy(graph, dtype="bfloat16")
    ns.spmm(A, B, out=out)
    reference = ns.spmm(rounded(graph, HALVES["bfloat16"][0]), B.double().cpu().numpy(), backend="cpu")
    assert relative_error(out.float().cpu().numpy(), reference) <= 2.0**-8


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_a_float32_out_gets_the_float32_accumulation_of_half_operands(graph, name, backend, reduce):
    dtype, u = HALVES[name]
    (B,) = operands(np.random.default_rng(6), dtype, (29, 16))
    out = np.full((37, 16), np.nan, np.float32)
    assert ns.spmm(graph, B, reduce=reduce, backend=backend, out=out) is out
    reference = ns.spmm(rounded(graph, dtype), B.astype(np.float64), reduce=reduce, backend="cpu")
    assert relative_error(out, reference) <= 1e-6  # float32, not rounded to 16 bits
    with pytest.raises(ValueError, match=r"out must have shape \(37, 16\) and dtype .* \(or float32\)"):
        ns.spmm(graph, B, backend=backend, out=np.zeros((37, 16), np.float64))


def test_a_numba_bfloat16_array_gives_a_bfloat16_result(graph):
    from numba import cuda

    B = np.random.default_rng(8).standard_normal((29, 4)).astype(ml_dtypes.bfloat16)
    A = ns.CSR.from_scipy(graph, dtype="bfloat16")
    dB = cuda.to_device(B.view(np.uint16)).view(B.dtype)  # (Numba copies no bfloat16 buffer from the host)
    C = ns.spmm(A, dB).copy_to_host()
    assert C.dtype.name == "bfloat16"
    assert np.array_equal(C.view(np.uint16), ns.spmm(graph, B, backend="cuda").view(np.uint16))


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_torch_cpu_bfloat16_operand_takes_an_out(graph, backend, out_dtype):
    torch = pytest.importorskip("torch")
    B = torch.randn(29, 4).to(torch.bfloat16)
    out = torch.empty(37, 4, dtype=getattr(torch, out_dtype))
    assert ns.spmm(graph, B, backend=backend, out=out) is out
    reference = ns.spmm(rounded(graph, HALVES["bfloat16"][0]), B.double().numpy(), backend="cpu")
    assert relative_error(out.double().numpy(), reference) <= HALVES["bfloat16"][1]


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_prepare_in_half_precision(graph, name, backend):
    dtype, u = HALVES[name]
    square = sp.csr_matrix(sp.random(20, 20, density=0.2, random_state=9) + sp.eye(20))
    (B,) = operands(np.random.default_rng(9), dtype, (20, 8))
    reference = ns.spmm(rounded(square, dtype), B.astype(np.float64), backend="cpu")
    for reorder in (None, "degree"):
        C = ns.prepare(square, dtype=name, backend=backend, reorder=reorder).spmm(B)
        assert C.dtype == dtype and relative_error(C, reference) <= u


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_torch_sparse_operand_with_half_values_meets_half_operands(graph, backend):
    torch = pytest.importorskip("torch")
    A = torch.tensor(graph.toarray()).to(torch.float16).to_sparse_csr()
    B = torch.randn(29, 4).to(torch.float16)
    C = ns.spmm(A, B, backend=backend)
    reference = ns.spmm(rounded(graph, np.float16), B.double().numpy(), backend="cpu")
    assert C.dtype == torch.float16 and relative_error(C.double().numpy(), reference) <= 2.0**-11


def test_float64_values_are_rounded_to_16_bits_once():
    x = 1 + 2.0**-11 + 2.0**-40  # float32 first would round to 1 + 2^-11, a tie, then to 1
    C = ns.spmm(sp.csr_matrix(np.array([[x]])), np.ones((1, 1), np.float16), backend="cpu")
    assert C[0, 0] == np.float16(x) != np.float16(1)


def test_a_bfloat16_dtype_error_names_the_argument(monkeypatch):
    import numbasparse.dtypes as dtypes

    monkeypatch.setattr(dtypes, "as_dtype", lambda d: (_ for _ in ()).throw(TypeError("needs ml_dtypes")))
    with pytest.raises(TypeError, match="dtype: needs ml_dtypes"):
        dtypes.check_value_dtype("bfloat16", "dtype")


@pytest.mark.parametrize("n", [1, 3, 33])
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_half_spmm_on_odd_widths_int64_indices_and_empty_graphs(graph, n, reduce):
    dtype, u = HALVES["bfloat16"]
    (B,) = operands(np.random.default_rng(10), dtype, (29, n))
    A = ns.CSR.from_scipy(graph, dtype="bfloat16", index_dtype=np.int64)
    reference = ns.spmm(rounded(graph, dtype), B.astype(np.float64), reduce=reduce, backend="cpu")
    assert relative_error(ns.spmm(A, B, reduce=reduce, backend="cuda"), reference) <= u
    empty = sp.csr_matrix((37, 29))
    assert not np.any(ns.spmm(empty, B, reduce=reduce, backend="cuda").astype(np.float32))
    assert ns.spmm(sp.csr_matrix((0, 29)), B, backend="cuda").shape == (0, n)
    assert ns.sddmm(empty, *operands(np.random.default_rng(11), dtype, (37, n), (29, n)), backend="cuda").nnz == 0


@settings(max_examples=15)
@given(A=strategies.graphs(), n=st.sampled_from(strategies.N_COLS), name=st.sampled_from(sorted(HALVES)),
       reduce=st.sampled_from(["sum", "mean", "max", "min"]), backend=st.sampled_from(BACKENDS),
       seed=st.integers(0, 2**32 - 1))
def test_every_half_spmm_element_is_its_float32_sum_rounded_once(A, n, name, reduce, backend, seed):
    """Per element: within half a unit in the last place of the exact value (u relative), plus
    what float32 summation in any order may add (32 float32 ulps of sum |a_ij b_j|), plus
    float16's subnormal spacing."""
    dtype, u = HALVES[name]
    B = np.random.default_rng(seed).standard_normal((A.shape[1], n)).astype(dtype)
    C = ns.spmm(A, B, reduce=reduce, backend=backend).astype(np.float64)
    A16, B64 = rounded(A, dtype), B.astype(np.float64)
    exact = ns.spmm(A16, B64, reduce=reduce, backend="cpu")
    scale = ns.spmm(abs(A16), np.abs(B64), reduce="mean" if reduce == "mean" else "sum", backend="cpu")
    assert np.all(np.abs(C - exact) <= u * np.abs(exact) + 32 * 2.0**-24 * scale + 2.0**-24)


@settings(max_examples=15)
@given(A=strategies.graphs(), k=st.sampled_from(strategies.N_COLS), name=st.sampled_from(sorted(HALVES)),
       backend=st.sampled_from(BACKENDS), seed=st.integers(0, 2**32 - 1))
def test_every_half_sddmm_value_is_its_float32_dot_rounded_once(A, k, name, backend, seed):
    dtype, u = HALVES[name]
    rng = np.random.default_rng(seed)
    X, Y = (rng.standard_normal((rows, k)).astype(dtype) for rows in A.shape)
    S = ns.sddmm(A, X, Y, backend=backend).data.astype(np.float64)
    A16 = rounded(A, dtype)
    exact = ns.sddmm(A16, X.astype(np.float64), Y.astype(np.float64), backend="cpu").data
    scale = ns.sddmm(abs(A16), np.abs(X.astype(np.float64)), np.abs(Y.astype(np.float64)), backend="cpu").data
    assert np.all(np.abs(S - exact) <= u * np.abs(exact) + 32 * 2.0**-24 * scale + 2.0**-24)
