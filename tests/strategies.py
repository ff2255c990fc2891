"""Hypothesis strategies and checks shared by the tests."""
import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

N_COLS = (1, 7, 32, 33, 70)
TOLERANCE = {np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-13}


@st.composite
def graphs(draw, max_rows=12, max_cols=80):
    """Small random sparse matrices: empty rows, sometimes one heavy row (> 32 entries, so
    a warp needs several chunks), non-square, sometimes no entries at all, random values."""
    m = draw(st.integers(1, max_rows))
    n = draw(st.integers(1, max_cols))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    density = draw(st.sampled_from([0.0, 0.05, 0.2, 0.5]))
    mask = rng.random((m, n)) < density
    if draw(st.booleans()):
        mask[rng.integers(m)] = rng.random(n) < 0.9  # one heavy row
    mask[rng.random(m) < 0.25] = False  # some empty rows
    rows, cols = np.nonzero(mask)
    values = rng.standard_normal(rows.size) + 0.1
    return sp.csr_matrix((values, (rows, cols)), shape=(m, n))


def random_dense(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype) + 0.5


def assert_close(result, reference, dtype, scale=None):
    """``result`` within TOLERANCE of the float64 ``reference`` by relative norm error, or, where
    ``scale`` is given (per element, the sum of the absolute terms: ``|A| @ |B|`` for SpMM), within
    the rounding that summing those terms in another order allows (32 ulps of the scale): with
    few outputs that nearly cancel, the norm error alone depends on the summation order."""
    from numbasparse.reference import relative_error

    err = relative_error(result, reference)
    if err <= TOLERANCE[np.dtype(dtype)]:
        return
    if scale is not None:
        bound = 32 * np.finfo(dtype).eps * np.asarray(scale, np.float64)
        diff = np.abs(np.asarray(result, np.float64) - np.asarray(reference, np.float64))
        if np.all(diff <= bound):
            return
    assert err <= TOLERANCE[np.dtype(dtype)], f"relative error {err:.3e}"


def spmm_scale(A, B, reduce):
    """``scale`` for :func:`assert_close` of an SpMM: |A| @ |B| (divided by the row lengths for
    mean); None for max and min, which round nothing."""
    if reduce in ("max", "min"):
        return None
    A = sp.csr_matrix(A, dtype=np.float64)
    scale = abs(A) @ np.abs(np.asarray(B, np.float64))
    if reduce == "mean":
        scale /= np.maximum(np.diff(A.indptr), 1)[:, None]
    return scale


def sddmm_scale(A, X, Y):
    """``scale`` for :func:`assert_close` of an SDDMM: ``|a_ij| <|X[i]|, |Y[j]|>`` per entry."""
    from numbasparse.reference import sddmm_reference

    return np.abs(sddmm_reference(abs(sp.csr_matrix(A, dtype=np.float64)), np.abs(X), np.abs(Y)))
