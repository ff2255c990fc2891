"""Straightforward SDDMM with one warp per row of A."""

import numpy as np
from numba import cuda

from . import launch
from .device import ROW_WARPS_PER_BLOCK, WARP_SIZE, row_warp_grid
from .intrinsics import warp_sum

WARP = WARP_SIZE


@launch.kernel_factory
def sddmm_warp_row_kernel(value_dtype):
    """Compile-once factory of the warp-per-row SDDMM kernel.

    Thread mapping: one warp per row i of A; for each stored entry (i, j) in turn, lane
    ``l`` multiplies ``X[i, k] * Y[j, k]`` for ``k = l, l + 32, ...`` (coalesced) and a
    shuffle reduction sums the 32 partial dot products; lane 0 writes ``a_ij * dot``.
    """
    warps = ROW_WARPS_PER_BLOCK
    zero = np.dtype(value_dtype).type(0)

    @cuda.jit
    def sddmm_warp_row(indptr, indices, data, X, Y, out):
        lane = cuda.threadIdx.x % WARP
        row = cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP
        if row >= X.shape[0]:
            return
        k_dim = X.shape[1]
        for p in range(indptr[row], indptr[row + 1]):
            j = indices[p]
            partial = zero
            for k in range(lane, k_dim, WARP):
                partial += X[row, k] * Y[j, k]
            total = warp_sum(partial)
            if lane == 0:
                out[p] = data[p] * total

    return sddmm_warp_row


def sddmm_warp_row(A, X, Y, out, *, stream=0):
    """Launch the warp-per-row SDDMM: ``out[p] = a_p * <X[i], Y[j]>`` for each entry p."""
    m = A.shape[0]
    if m == 0 or A.nnz == 0:
        return
    kernel = sddmm_warp_row_kernel(out.dtype.str)
    grid, block = row_warp_grid(m, 1, 1)
    launch.run_bound(A.cache, ("warp_row", kernel), kernel, grid, block, stream,
                     (A.indptr, A.indices, A.data, X, Y, out), (3, 4, 5))
