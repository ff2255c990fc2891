"""Fused SDDMM -> SpMM on the CPU (rows across cores): ``(A ⊙ (X Y^T)) Z`` and graph attention
``softmax_row(A ⊙ (Q K^T)) V``, each row's scores used as they are computed."""
import numpy as np
from numba import njit, prange

from .threads import parallel_call


@njit(parallel=True, cache=True)
def _fused_rows(indptr, indices, data, X, Y, Z, out, softmax):
    scores = np.empty(indices.shape[0], np.float64)  # one scratch for all rows: no allocation per row
    for i in prange(out.shape[0]):
        lo, hi = indptr[i], indptr[i + 1]
        largest = -np.inf
        for p in range(lo, hi):
            s = 0.0
            for k in range(X.shape[1]):
                s += X[i, k] * Y[indices[p], k]
            scores[p] = data[p] * s
            largest = max(largest, scores[p])
        if softmax and hi > lo:
            total = 0.0
            for p in range(lo, hi):
                scores[p] = np.exp(scores[p] - largest)
                total += scores[p]
            for p in range(lo, hi):
                scores[p] /= total
        for c in range(out.shape[1]):
            out[i, c] = 0
        for p in range(lo, hi):
            for c in range(out.shape[1]):
                out[i, c] += scores[p] * Z[indices[p], c]


def sddmm_spmm_rows(A, X, Y, Z):
    """``(A ⊙ (X Y^T)) Z`` for a canonical scipy CSR ``A``."""
    out = np.empty((A.shape[0], Z.shape[1]), dtype=Z.dtype)
    parallel_call(_fused_rows, A.indptr, A.indices, A.data, X, Y, Z, out, False)
    return out


def attention_rows(A, Q, K, V):
    """``softmax_row(A ⊙ (Q K^T)) V`` (softmax over each row's stored entries)."""
    out = np.empty((A.shape[0], V.shape[1]), dtype=V.dtype)
    parallel_call(_fused_rows, A.indptr, A.indices, A.data, Q, K, V, out, True)
    return out
