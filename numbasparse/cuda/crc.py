"""GE-SpMM (paper 003): coalesced row caching (CRC) and coarse-grained warp merging (CWM).

Both kernels read A in CSR with no preprocessing and support every reduction of
:mod:`numbasparse.cuda.reductions`.
"""

import numba
import numpy as np
from numba import cuda

from .. import reductions
from . import launch
from .device import ROW_WARPS_PER_BLOCK, WARP_SIZE, row_warp_grid
from .reductions import combine, finalize, mean_scale
from .intrinsics import syncwarp

WARP = WARP_SIZE


@launch.kernel_factory
def spmm_crc_cwm_kernel(reduce_code, cf, value_dtype, index_dtype):
    """Compile-once factory for the CRC kernel with coarsening factor ``cf`` (1 = plain CRC).

    Thread mapping: one warp per (row of A, tile of ``32 * cf`` columns of B); lane ``l``
    owns columns ``tile + l + 32 * c`` for ``c < cf``.

    CRC (paper 003, Algorithm 2): the warp loads 32 entries of its sparse row into shared
    memory with one coalesced access, then every lane consumes all 32 from there, reading
    B row-wise (coalesced across lanes).  CWM (Algorithm 3): each thread produces ``cf``
    outputs, so one load of the sparse row serves ``cf`` warps' worth of columns and the
    ``cf`` independent loads of B are in flight together (ILP).
    """
    warps = ROW_WARPS_PER_BLOCK
    cache_size = warps * WARP  # shared-memory shapes must be compile-time constants
    value_type = numba.from_dtype(np.dtype(value_dtype))
    index_type = numba.from_dtype(np.dtype(index_dtype))
    init = np.dtype(value_dtype).type(reductions.initial(reduce_code))
    zero = np.dtype(value_dtype).type(0)
    tile = WARP * cf
    scale_of = mean_scale(reduce_code, value_type)

    @cuda.jit
    def spmm_crc_cwm(indptr, indices, data, B, C):
        lane = cuda.threadIdx.x % WARP
        warp = cuda.threadIdx.x // WARP
        row = cuda.blockIdx.x * warps + warp
        cached_col = cuda.shared.array(cache_size, index_type)
        cached_val = cuda.shared.array(cache_size, value_type)
        acc = cuda.local.array(cf, value_type)
        if row >= C.shape[0]:
            return  # the whole warp leaves together
        n = C.shape[1]
        col0 = cuda.blockIdx.y * tile + lane
        for c in range(cf):
            acc[c] = init
        base = warp * WARP
        start = indptr[row]
        end = indptr[row + 1]
        for chunk in range(start, end, WARP):
            if chunk + lane < end:
                cached_col[base + lane] = indices[chunk + lane]
                cached_val[base + lane] = data[chunk + lane]
            syncwarp()
            for kk in range(min(WARP, end - chunk)):
                k = cached_col[base + kk]
                v = cached_val[base + kk]
                for c in range(cf):
                    j = col0 + c * WARP
                    if j < n:
                        acc[c] = combine(reduce_code, acc[c], v * B[k, j])
            syncwarp()  # the next chunk overwrites the cache
        scale = scale_of(max(end - start, 1))
        for c in range(cf):
            j = col0 + c * WARP
            if j < n:
                C[row, j] = finalize(reduce_code, acc[c], end - start, scale, zero)

    return spmm_crc_cwm


def spmm_crc_cwm(A, B, C, reduce, *, cf, stream=0):
    """Launch the CRC (cf=1) or CRC+CWM kernel: ``C = reduce(A @ B)``, all on the device."""
    m, n = C.shape
    if m == 0 or n == 0:
        return
    kernel = spmm_crc_cwm_kernel(reductions.CODES[reduce], cf, C.dtype.str, A.indices.dtype.str)
    grid, block = row_warp_grid(m, n, WARP * cf)
    launch.run_bound(A.cache, ("crc", kernel, n), kernel, grid, block, stream, (A.indptr, A.indices, A.data, B, C),
                     (3, 4))
