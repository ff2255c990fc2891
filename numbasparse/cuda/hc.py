"""HC-SpMM (paper 001): per 16-row window, a dense-tile path that emulates the tensor-core
computation on CUDA cores, or a CUDA-core path over the window's CSR entries, in one launch.

The selector that fills ``use_tiles`` (logistic regression on window features, trained on
H100 timings) is not written yet; callers pass the per-window choice.
"""
import functools

import numba
import numpy as np
from numba import cuda

from ..cpu.row_windows import TILE_COLS, WINDOW
from . import launch

THREADS = 128             # 4 warps per window
COLS = 32                 # output columns per block (blockIdx.y tiles N)
STAGE = THREADS           # CSR entries staged per round on the CUDA-core path
PER_THREAD = WINDOW * COLS // THREADS  # outputs per thread: 4


@functools.lru_cache(maxsize=None)
def spmm_hc_kernel(value_dtype, index_dtype):
    """Compile-once factory of the hybrid HC-SpMM kernel (sum only).

    Thread mapping: one block of 128 threads per (row window, 32 output columns); thread t owns
    row ``t // 8`` of the window and columns ``t % 8 + 8 q`` (q < 4) of the block's 32.
    Dense-tile path (``use_tiles[w]``): for each 16x8 tile of condensed columns, the block
    scatters the tile's nonzeros into a dense 16x8 shared array and all warps cooperatively
    load the matching 8 rows x 32 columns of B into shared memory (paper 001, Figure 6), then
    every thread does the 8-long dot products of a tensor-core MMA for its outputs.
    CUDA-core path: the window's (column, value) entries are staged in shared memory 128 at a
    time; each thread accumulates its row's staged entries for its columns.
    """
    value_type = numba.from_dtype(np.dtype(value_dtype))
    index_type = numba.from_dtype(np.dtype(index_dtype))
    tile_size = WINDOW * TILE_COLS
    b_size = TILE_COLS * COLS
    zero = np.dtype(value_dtype).type(0)

    @cuda.jit
    def spmm_hc(indptr, indices, data, entry_col, col_ptr, cols, tile_ptr, use_tiles, B, C):
        w = cuda.blockIdx.x
        t = cuda.threadIdx.x
        r = t // 8
        row = w * WINDOW + r
        m, n = C.shape
        col0 = cuda.blockIdx.y * COLS
        a_tile = cuda.shared.array(tile_size, value_type)
        b_tile = cuda.shared.array(b_size, value_type)
        staged_col = cuda.shared.array(STAGE, index_type)
        staged_val = cuda.shared.array(STAGE, value_type)
        acc = cuda.local.array(PER_THREAD, value_type)
        for q in range(PER_THREAD):
            acc[q] = zero
        lo = indptr[w * WINDOW]
        hi = indptr[min((w + 1) * WINDOW, m)]
        if use_tiles[w]:
            for tile in range(tile_ptr[w + 1] - tile_ptr[w]):
                first = tile * TILE_COLS
                for e in range(t, tile_size, THREADS):
                    a_tile[e] = zero
                cuda.syncthreads()
                for p in range(lo + t, hi, THREADS):  # scatter this tile's nonzeros
                    k = entry_col[p] - first
                    if 0 <= k < TILE_COLS:
                        i = 0
                        while indptr[w * WINDOW + i + 1] <= p:
                            i += 1
                        a_tile[i * TILE_COLS + k] = data[p]
                for e in range(t, b_size, THREADS):  # 8 rows of B, 32 columns, coalesced
                    k = e // COLS
                    j = col0 + e - k * COLS
                    cc = first + k
                    if cc < col_ptr[w + 1] - col_ptr[w] and j < n:
                        b_tile[e] = B[cols[col_ptr[w] + cc], j]
                    else:
                        b_tile[e] = zero
                cuda.syncthreads()
                for q in range(PER_THREAD):
                    jj = t % 8 + 8 * q
                    s = acc[q]
                    for k in range(TILE_COLS):
                        s += a_tile[r * TILE_COLS + k] * b_tile[k * COLS + jj]
                    acc[q] = s
                cuda.syncthreads()
        else:
            row_lo = indptr[min(row, m)]
            row_hi = indptr[min(row + 1, m)]
            for base in range(lo, hi, STAGE):
                if base + t < hi:
                    staged_col[t] = indices[base + t]
                    staged_val[t] = data[base + t]
                cuda.syncthreads()
                for p in range(max(row_lo, base), min(row_hi, base + STAGE)):
                    k = staged_col[p - base]
                    a = staged_val[p - base]
                    for q in range(PER_THREAD):
                        j = col0 + t % 8 + 8 * q
                        if j < n:
                            acc[q] += a * B[k, j]
                cuda.syncthreads()
        if row < m:
            for q in range(PER_THREAD):
                j = col0 + t % 8 + 8 * q
                if j < n:
                    C[row, j] = acc[q]

    return spmm_hc


def spmm_hc(A, windows, use_tiles, B, C, *, stream=0):
    """Launch HC-SpMM: ``C = A @ B`` with window w on the dense-tile path where ``use_tiles[w]``.

    ``windows`` holds the device copies of :func:`numbasparse.cpu.row_windows.row_windows`'s
    arrays (``entry_col``, ``col_ptr``, ``cols``, ``tile_ptr``) as a dict.
    """
    m, n = C.shape
    if m == 0 or n == 0:
        return
    kernel = spmm_hc_kernel(C.dtype.str, A.indices.dtype.str)
    grid = (launch.cdiv(m, WINDOW), launch.cdiv(n, COLS))
    launch.run(kernel, grid, THREADS, stream, A.indptr, A.indices, A.data, windows["entry_col"],
               windows["col_ptr"], windows["cols"], windows["tile_ptr"], use_tiles, B, C)
