"""SDDMM on the CPU: rows of A split across cores."""
import numpy as np
from numba import njit, prange

from .threads import parallel_call


@njit(parallel=True, cache=True)
def _sddmm_rows(indptr, indices, data, X, Y, out, zero):
    k_dim = X.shape[1]
    for i in prange(X.shape[0]):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            s = zero
            for k in range(k_dim):
                s += X[i, k] * Y[j, k]
            out[p] = data[p] * s


def sddmm_rows(A, X, Y):
    """``a_ij * <X[i], Y[j]>`` for each stored entry of ``A`` (canonical scipy CSR), in order."""
    out = np.empty(A.nnz, dtype=X.dtype)
    parallel_call(_sddmm_rows, A.indptr, A.indices, A.data, X, Y, out, X.dtype.type(0))
    return out
