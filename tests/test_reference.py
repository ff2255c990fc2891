"""The float64 reference itself, against dense NumPy."""
import numpy as np
import scipy.sparse as sp

from numbasparse import reference


def test_spmm_reference_against_dense_loops(monkeypatch):
    monkeypatch.setattr(reference, "_CHUNK", 7)  # several chunks
    rng = np.random.default_rng()
    A = sp.random(20, 15, density=0.2, format="csr", random_state=rng)
    B = rng.standard_normal((15, 3))
    D = A.toarray()
    for reduce, fn in [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min)]:
        C = reference.spmm_reference(A, B, reduce)
        for i in range(20):
            nz = np.flatnonzero(D[i])
            want = fn(D[i, nz, None] * B[nz], axis=0) if nz.size else np.zeros(3)
            np.testing.assert_allclose(C[i], want, rtol=1e-12)


def test_sddmm_reference_against_dense(monkeypatch):
    monkeypatch.setattr(reference, "_CHUNK", 5)
    rng = np.random.default_rng()
    A = sp.random(10, 8, density=0.3, format="csr", random_state=rng)
    X, Y = rng.standard_normal((10, 4)), rng.standard_normal((8, 4))
    values = reference.sddmm_reference(A, X, Y)
    # (a dot product that nearly cancels differs by the rounding of its terms: absolute slack too)
    np.testing.assert_allclose(sp.csr_matrix((values, A.indices, A.indptr), shape=A.shape).toarray(),
                               A.toarray() * (X @ Y.T), rtol=1e-12, atol=1e-14)


def test_relative_error_flags_nan():
    assert reference.relative_error(np.array([np.nan]), np.array([1.0])) == float("inf")
