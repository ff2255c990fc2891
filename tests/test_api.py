"""The public API: results through every path, validation at the boundary, inputs untouched."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

import numbasparse as ns
from numbasparse.reference import sddmm_reference, spmm_reference
from strategies import N_COLS, assert_close, graphs, random_dense, spmm_scale

BACKENDS = ["cpu", "cuda"]


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture
def small(rng):
    A = sp.random(9, 6, density=0.4, format="csr", random_state=rng, dtype=np.float64)
    return A, random_dense(rng, (6, 5), np.float32)


@given(A=graphs(), n=st.sampled_from(N_COLS), reduce=st.sampled_from(ns.api.REDUCTIONS),
       algorithm=st.sampled_from(ns.algorithms("spmm")), seed=st.integers(0, 2**32 - 1))
def test_spmm_every_algorithm_through_api(A, n, reduce, algorithm, seed):
    B = random_dense(np.random.default_rng(seed), (A.shape[1], n), np.float32)
    if reduce not in ns.dispatch.SPMM[algorithm].reductions:
        with pytest.raises(ValueError, match="supports reduce"):
            ns.spmm(A, B, reduce=reduce, algorithm=algorithm)
        return
    assert_close(ns.spmm(A, B, reduce=reduce, algorithm=algorithm), spmm_reference(A, B, reduce), np.float32,
                 spmm_scale(A, B, reduce))


@pytest.mark.parametrize("backend", BACKENDS)
def test_spmm_writes_into_out(backend, small):
    A, B = small
    out = np.full((9, 5), np.nan, np.float32)
    assert ns.spmm(A, B, out=out, backend=backend) is out
    assert_close(out, spmm_reference(A, B), np.float32)


def test_spmm_device_arrays_in_device_arrays_out(small):
    A, B = small
    out = cuda.to_device(np.full((9, 5), np.nan, np.float32))
    result = ns.spmm(ns.CSR.from_scipy(A, dtype=np.float32), cuda.to_device(B), out=out)
    assert result is out
    assert_close(out.copy_to_host(), spmm_reference(A, B), np.float32)
    fresh = ns.spmm(A, cuda.to_device(B))
    assert not isinstance(fresh, np.ndarray)
    assert_close(fresh.copy_to_host(), spmm_reference(A, B), np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sddmm_returns_csr_with_canonical_pattern(backend, rng):
    # duplicates and unsorted indices in the input: the result follows the canonical form
    A = sp.csr_matrix((np.array([1.0, 2.0, 3.0, 4.0]), np.array([2, 0, 2, 1]), np.array([0, 3, 4])), shape=(2, 3))
    X, Y = random_dense(rng, (2, 4), np.float64), random_dense(rng, (3, 4), np.float64)
    S = ns.sddmm(A, X, Y, backend=backend)
    assert isinstance(S, sp.csr_matrix) and S.has_sorted_indices and S.nnz == 3
    assert_close(S.toarray(), A.toarray() * (X @ Y.T), np.float64)


def test_sddmm_device_arrays_give_values_in_csr_order(rng):
    A = sp.random(7, 5, density=0.5, format="csr", random_state=rng)
    X, Y = random_dense(rng, (7, 3), np.float32), random_dense(rng, (5, 3), np.float32)
    values = ns.sddmm(ns.CSR.from_scipy(A, dtype=np.float32), cuda.to_device(X), cuda.to_device(Y))
    assert_close(values.copy_to_host(), sddmm_reference(A, X, Y), np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_are_not_modified(backend, rng):
    A = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 2]), np.array([0, 3, 3])), shape=(2, 3))
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    B = random_dense(rng, (3, 4), np.float32)
    B_before = B.copy()
    ns.spmm(A, B, backend=backend)
    ns.sddmm(A, random_dense(rng, (2, 4), np.float32), B, backend=backend)
    for a, b in zip((A.data, A.indices, A.indptr), before):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(B, B_before)


def test_non_contiguous_numpy_input_is_accepted(small):
    A, B = small
    Bt = np.asfortranarray(B)
    assert_close(ns.spmm(A, Bt, backend="cpu"), spmm_reference(A, B), np.float32)


def test_scipy_sparse_array_and_coo_are_accepted(small):
    A, B = small
    for form in (sp.csr_array(A), A.tocoo(), A.tocsc()):
        assert_close(ns.spmm(form, B, backend="cpu"), spmm_reference(A, B), np.float32)


def test_csr_roundtrip_and_transpose(rng):
    A = sp.random(6, 4, density=0.5, format="csr", random_state=rng)
    dev = ns.CSR.from_scipy(A)
    assert dev.shape == (6, 4) and dev.nnz == A.nnz and dev.dtype == np.float64
    assert (dev.to_scipy() != A).nnz == 0
    assert (dev.transpose().to_scipy() != A.T).nnz == 0
    assert ns.CSR.from_scipy(A, index_dtype=np.int64).indices.dtype == np.int64
    assert ns.CSR.from_scipy(A.astype(np.float32)).dtype == np.float32


def test_algorithms_lists_accepted_names():
    assert {"crc", "crc_cwm2", "crc_cwm4", "cpu_rows"} <= set(ns.algorithms("spmm"))
    assert {"warp_row", "cpu_rows"} <= set(ns.algorithms("sddmm"))
    with pytest.raises(ValueError, match="op"):
        ns.algorithms("gemm")


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(reduce="prod"), ValueError, "reduce"),
    (dict(algorithm="fast"), ValueError, "algorithm"),
    (dict(backend="tpu"), ValueError, "backend"),
    (dict(algorithm="crc", backend="cpu"), ValueError, "backend"),
    (dict(out=np.zeros((9, 4), np.float32)), ValueError, "out"),
    (dict(out=np.zeros((9, 5), np.float64)), ValueError, "out"),
])
def test_spmm_rejects_bad_arguments(small, kwargs, error, match):
    A, B = small
    with pytest.raises(error, match=match):
        ns.spmm(A, B, **kwargs)


@pytest.mark.parametrize("B, error, match", [
    (np.zeros((6,), np.float32), ValueError, "B must be 2-D"),
    (np.zeros((5, 3), np.float32), ValueError, "A has 6 columns but B has 5 rows"),
    (np.zeros((6, 3), np.int32), TypeError, "B must have dtype float32, float64, float16 or bfloat16"),
    (np.zeros((6, 3), np.complex64), TypeError, "B must have dtype"),
    ([[1.0] * 3] * 6, TypeError, "B must be a NumPy array or a CUDA array"),
])
def test_spmm_rejects_bad_B(small, B, error, match):
    A, _ = small
    with pytest.raises(error, match=match):
        ns.spmm(A, B)


def test_spmm_rejects_bad_A(small):
    _, B = small
    with pytest.raises(TypeError, match="A must be a scipy.sparse matrix"):
        ns.spmm(np.ones((6, 6)), B)


def test_csr_dtype_mismatch_is_explained(small):
    A, B = small
    with pytest.raises(TypeError, match="astype"):
        ns.spmm(ns.CSR.from_scipy(A, dtype=np.float64), B)


def test_device_out_must_match_B_kind(small):
    A, B = small
    with pytest.raises(TypeError, match="out"):
        ns.spmm(A, cuda.to_device(B), out=np.zeros((9, 5), np.float32))


def test_cpu_backend_refuses_device_arrays(small):
    A, B = small
    with pytest.raises(ValueError, match="backend='cpu'"):
        ns.spmm(A, cuda.to_device(B), backend="cpu")


def test_out_aliasing_B_is_refused(rng):
    A = sp.identity(4, format="csr")
    B = random_dense(rng, (4, 4), np.float32)
    with pytest.raises(ValueError, match="share memory"):
        ns.spmm(A, B, out=B, backend="cpu")


@pytest.mark.parametrize("X, Y, error, match", [
    (np.zeros((9, 3)), np.zeros((6, 4)), ValueError, "same number of columns"),
    (np.zeros((8, 3)), np.zeros((6, 3)), ValueError, "X must have 9 rows"),
    (np.zeros((9, 3)), np.zeros((6, 3), np.float32), TypeError, "same dtype"),
    (np.zeros((9, 3), np.int64), np.zeros((6, 3)), TypeError, "X must have dtype"),
])
def test_sddmm_rejects_bad_operands(small, X, Y, error, match):
    A, _ = small
    with pytest.raises(error, match=match):
        ns.sddmm(A, X, Y)


def test_sddmm_refuses_mixed_host_and_device(small):
    A, _ = small
    X = np.ones((9, 3), np.float32)
    with pytest.raises(TypeError, match="all be host"):
        ns.sddmm(A, X, cuda.to_device(np.ones((6, 3), np.float32)))


def test_complex_A_is_refused(small):
    A, B = small
    with pytest.raises(TypeError, match="A.data must have a real"):
        ns.spmm(A.astype(np.complex64), B)


def test_auto_rule_follows_the_measurements():
    import scipy.sparse as sp

    from numbasparse import dispatch, graphs

    sparse = ns.CSR.from_scipy(graphs.rmat(12, 4))  # short rows spread over the columns
    dense = ns.CSR.from_scipy(sp.csr_matrix(np.ones((512, 512), np.float32)))  # whole rows in each slab
    assert dispatch.auto_name("spmm", "cuda", 64, 4, sparse) == "hp"
    assert dispatch.auto_name("spmm", "cuda", 128, 4, dense) == "slab"  # B rows re-used from L1
    assert dispatch.auto_name("spmm", "cuda", 32, 4, dense) == "slab"  # four segments a warp
    assert dispatch.auto_name("spmm", "cuda", 16, 4, dense) == "hp"  # N < SLAB_MIN_COLUMNS
    assert dispatch.auto_name("spmm", "cuda", 128, 2, dense, np.dtype(np.float16)) == "hp"  # 16-bit C
    assert dispatch.auto_name("sddmm", "cuda", 128, 4, dense) == "hp"
    assert dispatch.auto_name("spmm", "cpu", 64, 4, dense) == "cpu_rows"
    assert dispatch.auto_name("spmm", "cuda", 128, 4, None) == "hp"  # no device matrix: no pattern to count


def test_auto_leaves_the_slab_kernel_once_b_outgrows_a_quarter_of_l2(monkeypatch):
    import scipy.sparse as sp

    from numbasparse import dispatch

    dense = sp.csr_matrix(np.random.default_rng(0).random((512, 512)).astype(np.float32))
    b_bytes = 512 * 128 * 4
    monkeypatch.setattr(dispatch, "memory_system", lambda: (4 * b_bytes, 3e12))
    assert dispatch.auto_name("spmm", "cuda", 128, 4, dense) == "slab"
    monkeypatch.setattr(dispatch, "memory_system", lambda: (4 * b_bytes - 1, 3e12))
    assert dispatch.auto_name("spmm", "cuda", 128, 4, dense) == "hp"


@pytest.mark.parametrize("fused", ["auto", False, True])
@pytest.mark.parametrize("f_in, f_out", [(12, 5), (5, 12)])  # the matmul first, then after the SpMM
@pytest.mark.parametrize("backend", BACKENDS)
def test_spmm_dense_is_spmm_then_matmul(backend, f_in, f_out, fused, rng):
    A = sp.random(40, 30, density=0.2, format="csr", random_state=rng)
    X = random_dense(rng, (30, f_in), np.float32)
    W = random_dense(rng, (f_in, f_out), np.float32)
    expected = spmm_reference(A, X) @ W.astype(np.float64)
    X0, W0 = X.copy(), W.copy()
    assert_close(ns.spmm_dense(A, X, W, fused=fused, backend=backend), expected, np.float32)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(W, W0)


def test_spmm_dense_multiplies_first_only_where_w_narrows_the_rows():
    assert ns.dispatch.matmul_first(256, 64) and not ns.dispatch.matmul_first(64, 64)
    assert not ns.dispatch.matmul_first(16, 64)


def test_spmm_dense_of_torch_cpu_tensors_gives_a_tensor(rng):
    torch = pytest.importorskip("torch")
    A = sp.random(20, 17, density=0.3, format="csr", random_state=rng)
    X = random_dense(rng, (17, 6), np.float32)
    W = random_dense(rng, (6, 3), np.float32)
    out = ns.spmm_dense(A, torch.from_numpy(X), torch.from_numpy(W))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert_close(out.numpy(), spmm_reference(A, X) @ W.astype(np.float64), np.float32)


@pytest.mark.parametrize("fused", ["auto", True])
def test_spmm_dense_on_numba_arrays_runs_the_fused_kernel(fused, rng):
    A = sp.random(20, 17, density=0.3, format="csr", random_state=rng)
    X = random_dense(rng, (17, 6), np.float64)
    W = random_dense(rng, (6, 3), np.float64)
    out = ns.spmm_dense(ns.CSR.from_scipy(A), cuda.to_device(X), cuda.to_device(W), fused=fused)
    assert_close(out.copy_to_host(), spmm_reference(A, X) @ W, np.float64)


def test_spmm_dense_unfused_on_numba_arrays_says_what_it_needs(rng):
    A = sp.random(20, 17, density=0.3, format="csr", random_state=rng)
    X, W = cuda.to_device(random_dense(rng, (17, 6), np.float32)), cuda.to_device(random_dense(rng, (6, 3), np.float32))
    with pytest.raises(ValueError, match="fused=False needs a matmul"):
        ns.spmm_dense(ns.CSR.from_scipy(A, dtype=np.float32), X, W, fused=False)


@pytest.mark.parametrize("fused, error", [("yes", ValueError), (1, TypeError), (None, TypeError)])
def test_spmm_dense_rejects_a_bad_fused(small, fused, error):
    A, _ = small
    with pytest.raises(error, match="fused must be True, False or 'auto'"):
        ns.spmm_dense(A, np.ones((6, 4), np.float32), np.ones((4, 2), np.float32), fused=fused)


@pytest.mark.parametrize("precision, fused, error, match", [
    ("fp8", True, ValueError, "precision must be one of"),
    (None, True, TypeError, "precision must be a string"),
    ("tf32", "auto", ValueError, "precision='tf32' is the fused kernel's"),
    ("tf32", True, ValueError, "precision='tf32' runs on the CUDA backend's fused kernel"),
])
def test_spmm_dense_rejects_a_precision_it_cannot_give(small, precision, fused, error, match):
    A, _ = small
    with pytest.raises(error, match=match):
        ns.spmm_dense(A, np.ones((6, 4), np.float32), np.ones((4, 2), np.float32), fused=fused, backend="cpu",
                      precision=precision)


@pytest.mark.parametrize("X_shape, W_shape, W_dtype, error, match", [
    ((5, 4), (4, 2), np.float32, ValueError, "A has 6 columns but X has 5 rows"),
    ((6, 4), (3, 2), np.float32, ValueError, "X has 4 columns but W has 3 rows"),
    ((6, 4), (4, 2), np.float64, TypeError, "same dtype"),
])
def test_spmm_dense_rejects_bad_shapes(small, X_shape, W_shape, W_dtype, error, match):
    A, _ = small
    with pytest.raises(error, match=match):
        ns.spmm_dense(A, np.ones(X_shape, np.float32), np.ones(W_shape, W_dtype))


@pytest.mark.parametrize("op", ["sddmm_spmm", "graph_attention"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_scores_times_dense_on_host_arrays(op, backend, rng):
    from numbasparse.reference import attention_reference, sddmm_spmm_reference

    A = sp.random(12, 10, density=0.3, format="csr", random_state=rng)
    X, Y, Z = (random_dense(rng, shape, np.float64) for shape in ((12, 6), (10, 6), (10, 4)))
    reference = {"sddmm_spmm": sddmm_spmm_reference, "graph_attention": attention_reference}[op]
    assert_close(getattr(ns, op)(A, X, Y, Z, backend=backend), reference(A, X, Y, Z), np.float64)


@pytest.mark.parametrize("shapes, match", [
    (((9, 3), (6, 3), (5, 2)), "rows"),
    (((9, 3), (6, 4), (6, 2)), "same number of columns"),
])
def test_graph_attention_rejects_bad_shapes(small, shapes, match):
    A, _ = small
    with pytest.raises(ValueError, match=match):
        ns.graph_attention(A, *(np.ones(s, np.float32) for s in shapes))


def test_sddmm_spmm_rejects_mixed_dtypes(small):
    A, _ = small
    with pytest.raises(TypeError, match="same dtype"):
        ns.sddmm_spmm(A, np.ones((9, 2), np.float32), np.ones((6, 2), np.float32), np.ones((6, 2)))


@pytest.mark.parametrize("algorithm", [a for a in ns.algorithms("spmm") if "max" in ns.dispatch.SPMM[a].reductions])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_nan_products_win_in_max_and_min_on_every_backend_and_kernel(algorithm, reduce, rng):
    """One rule everywhere: a row with a NaN product gives NaN (wherever in the row it falls:
    first, middle, last, in a split row), as torch.amax and np.maximum do."""
    dense = np.zeros((6, 12))
    dense[0, [1, 4, 7]] = 1.0                 # NaN first in the row
    dense[1, [0, 2, 5, 9, 11]] = -2.0         # NaN in the middle
    dense[2, [3, 10]] = 0.5                   # NaN last
    dense[4, [0, 2, 4, 6, 7, 8, 9, 11]] = rng.standard_normal(8)  # no NaN (the longest row)
    A = sp.csr_matrix(dense)
    B = random_dense(rng, (12, 4), np.float32)
    B[1, 0] = B[5, 1] = B[10, 2] = np.nan
    B[3, 3] = np.nan                           # row 2 column 3: 0.5 * NaN
    expected = spmm_reference(A, B, reduce)
    C = ns.spmm(A, B, reduce=reduce, algorithm=algorithm)
    assert np.array_equal(np.isnan(C), np.isnan(expected))
    assert np.isnan(expected).sum() == 4
    finite = ~np.isnan(expected)
    assert_close(np.where(finite, C, 0), np.where(finite, expected, 0), np.float32)


def test_the_csr_constructor_checks_and_copies_its_matrix():
    """``CSR(A)`` is ``CSR.from_scipy(A)``: a bad index is refused, duplicates are summed before
    the reduction, and later edits of A do not reach the GPU's copy."""
    A = sp.random(6, 5, density=0.5, format="csr", dtype=np.float32, random_state=1)
    bad = A.copy()
    bad.indices[0] = 100_000_000
    with pytest.raises(ValueError, match="A.indices"):
        ns.CSR(bad)
    dup = sp.csr_matrix((np.array([1., 2, 3], np.float32), np.array([2, 0, 2]), np.array([0, 3, 3, 3, 3, 3, 3])),
                        shape=(6, 5))
    B = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    for backend in BACKENDS:
        assert_close(ns.spmm(ns.CSR(dup), B, reduce="max", backend=backend), spmm_reference(dup, B, "max"),
                     np.float32)
    C = ns.CSR(A.tocoo())
    expected = spmm_reference(A, B)
    A.data[:] = 0
    for backend in BACKENDS:
        assert_close(ns.spmm(C, B, backend=backend), expected, np.float32)


@pytest.mark.parametrize("a_dtype, value, b_dtype", [(np.float64, 1e39, np.float32), (np.float32, 1e5, np.float16)])
def test_values_of_a_beyond_the_operands_range_are_refused(a_dtype, value, b_dtype):
    A = sp.random(6, 5, density=0.5, format="csr", dtype=a_dtype, random_state=1)
    A.data[:] = value
    with pytest.raises(ValueError, match="beyond the range of"):
        ns.spmm(A, np.full((5, 3), 1e-3, b_dtype), backend="cpu")


def test_infinite_values_of_a_are_kept():
    A = sp.csr_matrix(np.array([[np.inf, 1.0], [0.0, 2.0]]))
    C = ns.spmm(A, np.ones((2, 1), np.float32), backend="cpu")
    assert np.isinf(C[0, 0]) and C[1, 0] == 2


def test_algorithms_names_a_bad_op():
    with pytest.raises(TypeError, match="op must be a string"):
        ns.algorithms(["spmm"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_byte_swapped_out_receives_the_result(backend, rng):
    A = sp.random(7, 5, density=0.5, format="csr", dtype=np.float32, random_state=rng)
    B = random_dense(rng, (5, 3), np.float32)
    out = np.full((7, 3), np.nan, ">f4")
    assert ns.spmm(A, B, out=out, backend=backend) is out
    assert_close(out.astype(np.float32), spmm_reference(A, B), np.float32)


def test_duplicates_summed_beyond_the_operands_range_are_refused():
    A = sp.coo_matrix((np.array([3e38, 3e38], np.float32), (np.array([0, 0]), np.array([1, 1]))), shape=(2, 2))
    with pytest.raises(ValueError, match="duplicate entries sum beyond the range of float32"):
        ns.spmm(A, np.ones((2, 1), np.float32), backend="cpu")
