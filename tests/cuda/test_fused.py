"""Fused SDDMM -> SpMM and graph attention on the simulator, fused and unfused paths."""
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

import numbasparse as ns
from numbasparse.cuda import fused
from numbasparse.reference import attention_reference, sddmm_spmm_reference
from strategies import assert_close

CASES = [((9, 11), 5, 7, np.float32), ((6, 6), 33, 40, np.float64), ((5, 8), 1, 1, np.float32)]


def _graph(shape, rng):
    A = sp.random(*shape, density=0.35, format="csr", random_state=rng)
    A = sp.csr_matrix(A.toarray() * (rng.random(shape[0]) > 0.25)[:, None])  # empty rows
    A.data = rng.uniform(0.5, 1.5, A.nnz)
    return A


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("shape, k, f, dtype", CASES)
@pytest.mark.parametrize("op", ["sddmm_spmm", "graph_attention"])
def test_scores_times_dense_match_reference(op, shape, k, f, dtype, fuse):
    rng = np.random.default_rng()
    A = _graph(shape, rng)
    X = rng.standard_normal((shape[0], k)).astype(dtype)
    Y = rng.standard_normal((shape[1], k)).astype(dtype)
    Z = rng.standard_normal((shape[1], f)).astype(dtype)
    reference = {"sddmm_spmm": sddmm_spmm_reference, "graph_attention": attention_reference}[op]
    dev = ns.CSR.from_scipy(A, dtype=dtype)
    out = getattr(ns, op)(dev, cuda.to_device(X), cuda.to_device(Y), cuda.to_device(Z), fused=fuse)
    assert_close(out.copy_to_host(), reference(A, X, Y, Z), dtype)


def test_wide_output_takes_several_column_passes(monkeypatch):
    monkeypatch.setattr(fused, "MAX_PER_LANE", 1)
    rng = np.random.default_rng()
    A = _graph((5, 7), rng)
    Q, K = rng.standard_normal((5, 3)), rng.standard_normal((7, 3))
    V = rng.standard_normal((7, 70))
    out = ns.graph_attention(ns.CSR.from_scipy(A), cuda.to_device(Q), cuda.to_device(K), cuda.to_device(V))
    assert_close(out.copy_to_host(), attention_reference(A, Q, K, V), np.float64)


def test_edge_softmax_normalises_each_row():
    rng = np.random.default_rng()
    A = _graph((8, 8), rng)
    dev = ns.CSR.from_scipy(A, dtype=np.float64)
    values = rng.standard_normal(A.nnz) * 10
    out = cuda.to_device(np.full(A.nnz, np.nan))
    fused.edge_softmax(dev, cuda.to_device(values), out)
    got = out.copy_to_host()
    for i in range(8):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        if hi > lo:
            e = np.exp(values[lo:hi] - values[lo:hi].max())
            np.testing.assert_allclose(got[lo:hi], e / e.sum(), rtol=1e-12)


def test_with_values_shares_the_pattern():
    A = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 3, 0]]))
    dev = ns.CSR.from_scipy(A, dtype=np.float64)
    other = dev.with_values(cuda.to_device(np.array([5.0, 6, 7])))
    assert other.indices is dev.indices and other.nnz == 3
    np.testing.assert_array_equal(other.to_scipy().toarray(), [[5, 0, 6], [0, 7, 0]])
    np.testing.assert_array_equal(dev.to_scipy().toarray(), A.toarray())
    with pytest.raises(ValueError, match="shape"):
        dev.with_values(cuda.to_device(np.ones(2)))
    with pytest.raises(TypeError, match="float64"):
        dev.with_values(cuda.to_device(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match="CUDA"):
        dev.with_values(np.ones(3))


@pytest.mark.parametrize("op", ["sddmm_spmm", "graph_attention"])
def test_auto_fuses_where_the_longest_row_is_short_and_matches_both_paths(op, monkeypatch):
    """fused="auto" runs the fused kernel unless a row is longer than FUSE_MAX_ROW (the fused
    kernel's one warp per row would wait on it); both choices give the reference's result."""
    from numbasparse import dispatch

    rng = np.random.default_rng(5)
    A = _graph((12, 9), rng)
    X, Y, Z = (rng.standard_normal(s).astype(np.float32) for s in ((12, 8), (9, 8), (9, 6)))
    reference = {"sddmm_spmm": sddmm_spmm_reference, "graph_attention": attention_reference}[op]
    longest = int(np.diff(A.indptr).max())
    for limit, expect_fused in ((longest, True), (longest - 1, False)):
        monkeypatch.setattr(dispatch, "FUSE_MAX_ROW", limit)
        dev = ns.CSR.from_scipy(A, dtype=np.float32)
        assert dispatch.fuse_pays(dev) is expect_fused
        out = getattr(ns, op)(dev, cuda.to_device(X), cuda.to_device(Y), cuda.to_device(Z))
        assert_close(out.copy_to_host(), reference(A, X, Y, Z), np.float32)
