"""SpMM on the CPU: rows of A split across cores."""
import numpy as np
from numba import njit, prange

from ..reductions import CODES, MAX, MEAN, MIN
from .threads import parallel_call


@njit(parallel=True, cache=True)
def _spmm_rows(indptr, indices, data, B, C, code):
    n = B.shape[1]
    for i in prange(C.shape[0]):
        start, end = indptr[i], indptr[i + 1]
        out = C[i]
        if end == start:
            out[:] = 0
            continue
        if code == MAX or code == MIN:
            k = indices[start]
            for j in range(n):
                out[j] = data[start] * B[k, j]
            for p in range(start + 1, end):
                k, v = indices[p], data[p]
                for j in range(n):
                    x = v * B[k, j]
                    if (code == MAX and (x > out[j] or x != x)) or (code == MIN and (x < out[j] or x != x)):
                        out[j] = x
        else:
            out[:] = 0
            for p in range(start, end):
                k, v = indices[p], data[p]
                for j in range(n):
                    out[j] += v * B[k, j]
            if code == MEAN:
                out /= end - start


def spmm_rows(A, B, reduce, out=None):
    """``reduce_k a_ik * B[k]`` for each row i; ``A`` canonical scipy CSR, ``B`` C-contiguous."""
    C = np.empty((A.shape[0], B.shape[1]), dtype=B.dtype) if out is None else out
    parallel_call(_spmm_rows, A.indptr, A.indices, A.data, B, C, CODES[reduce])
    return C
