"""G-Sparse's tiled SpMM (paper 002, section III-B): 2-D shared-memory tiling of the sparse
rows, 1-D stride register tiling of the output columns and row load balancing, with the
schedule (tile sizes, balancing) an explicit parameter kept apart from the algorithm.

The algorithm is always ``C[i, :] = sum_p a_p * B[col_p, :]`` (reduce "sum"); a
:class:`Schedule` only decides how threads, shared memory and registers cover it.
:mod:`numbasparse.select.tuner` searches the schedules.
"""
from dataclasses import dataclass

import numba
import numpy as np
from numba import cuda

from ..preprocess.rows import longest_first
from . import launch
from .device import cdiv

SHARED_BYTES_MAX = 48 * 1024  # static shared memory per block
THREADS_MAX = 1024


@dataclass(frozen=True, order=True)
class Schedule:
    """How the tiled SpMM kernel covers ``C = A @ B``.

    m_tile: rows of A per block (threadIdx.y); n_tile: threads per row along N (threadIdx.x);
    reg_tile: output columns per thread, strided by n_tile (1-D stride register tiling);
    nnz_tile: (column, value) pairs per row staged in shared memory per round (2-D shared
    tiling: an m_tile x nnz_tile tile); balance: rows taken longest first (row swizzle).
    """
    m_tile: int
    n_tile: int
    reg_tile: int
    nnz_tile: int
    balance: bool

    @property
    def threads(self):
        return self.m_tile * self.n_tile

    @property
    def cols_per_block(self):
        return self.n_tile * self.reg_tile

    def shared_bytes(self, value_itemsize, index_itemsize):
        return self.m_tile * self.nnz_tile * (value_itemsize + index_itemsize) + 4 * self.m_tile

    def valid(self, value_itemsize=4, index_itemsize=4):
        """Fits the hardware limits (threads per block, static shared memory)."""
        return (self.threads <= THREADS_MAX and self.threads >= 32
                and self.shared_bytes(value_itemsize, index_itemsize) <= SHARED_BYTES_MAX)


def schedule_space(value_itemsize=4, index_itemsize=4):
    """Every valid schedule of the search grid."""
    grid = [Schedule(m, n, r, k, b) for m in (1, 2, 4, 8, 16, 32) for n in (8, 16, 32)
            for r in (1, 2, 4) for k in (32, 64, 128, 256) for b in (False, True)]
    return [s for s in grid if s.valid(value_itemsize, index_itemsize)]


#: The CS267 report's blocked SpMM (paper 004, section 4.2) as a schedule: blocks of height 1, one
#: thread per output element (32 columns per block), the row's entries staged in shared memory 32
#: at a time.  ``algorithm="blocked"``.
CS267_SPMM = Schedule(m_tile=1, n_tile=32, reg_tile=1, nnz_tile=32, balance=False)


@launch.kernel_factory
def spmm_tiled_kernel(schedule, value_dtype, index_dtype):
    """Compile-once factory of the tiled SpMM kernel for one schedule.

    Thread mapping: block (n_tile, m_tile); thread (tx, ty) owns row ``order[blockIdx.x * m_tile
    + ty]`` and columns ``blockIdx.y * n_tile * reg_tile + tx + n_tile * r`` (r < reg_tile).  Per
    round the n_tile threads of a row stage nnz_tile of its (column, value) pairs in shared
    memory (coalesced), then each thread accumulates them into its reg_tile registers.
    """
    m_tile, n_tile, reg_tile, nnz_tile = schedule.m_tile, schedule.n_tile, schedule.reg_tile, schedule.nnz_tile
    value_type = numba.from_dtype(np.dtype(value_dtype))
    index_type = numba.from_dtype(np.dtype(index_dtype))
    zero = np.dtype(value_dtype).type(0)
    tile_size = m_tile * nnz_tile

    @cuda.jit
    def spmm_tiled(indptr, indices, data, order, B, C):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        m, n = C.shape
        slot = cuda.blockIdx.x * m_tile + ty
        row = order[slot] if slot < m else -1
        col0 = cuda.blockIdx.y * n_tile * reg_tile
        staged_col = cuda.shared.array(tile_size, index_type)
        staged_val = cuda.shared.array(tile_size, value_type)
        rounds = cuda.shared.array(m_tile, numba.int32)
        lo = indptr[row] if row >= 0 else 0
        length = indptr[row + 1] - lo if row >= 0 else 0
        if tx == 0:
            rounds[ty] = (length + nnz_tile - 1) // nnz_tile
        acc = cuda.local.array(reg_tile, value_type)
        for r in range(reg_tile):
            acc[r] = zero
        cuda.syncthreads()
        block_rounds = 0
        for y in range(m_tile):
            block_rounds = max(block_rounds, rounds[y])
        for ro in range(block_rounds):
            start = ro * nnz_tile
            for k in range(tx, nnz_tile, n_tile):
                if start + k < length:
                    staged_col[ty * nnz_tile + k] = indices[lo + start + k]
                    staged_val[ty * nnz_tile + k] = data[lo + start + k]
            cuda.syncthreads()
            for k in range(min(nnz_tile, length - start)):
                j = staged_col[ty * nnz_tile + k]
                a = staged_val[ty * nnz_tile + k]
                for r in range(reg_tile):
                    c = col0 + tx + n_tile * r
                    if c < n:
                        acc[r] += a * B[j, c]
            cuda.syncthreads()
        if row >= 0:
            for r in range(reg_tile):
                c = col0 + tx + n_tile * r
                if c < n:
                    C[row, c] = acc[r]

    return spmm_tiled


def row_order(A, balance):
    """Device array of A's rows in the order the tiled SpMM takes them: longest first (G-Sparse's
    row load balancing) when ``balance``, else in order; once per pattern."""
    return A.cache.get_or_build("plans", ("row_order", balance),
                                lambda: cuda.to_device(longest_first(A.host_indptr, balance)))


def spmm_tiled(A, order, B, C, schedule, *, stream=0):
    """Launch the tiled SpMM ``C = A @ B`` with ``schedule``; ``order``: :func:`row_order` for
    ``schedule.balance``."""
    m, n = C.shape
    if m == 0 or n == 0:
        return
    kernel = spmm_tiled_kernel(schedule, C.dtype.str, A.indices.dtype.str)
    grid = (cdiv(m, schedule.m_tile), cdiv(n, schedule.cols_per_block))
    launch.run_bound(A.cache, ("tiled", kernel, n), kernel, grid, (schedule.n_tile, schedule.m_tile), stream,
                     (A.indptr, A.indices, A.data, order, B, C), (4, 5))


@dataclass(frozen=True, order=True)
class SddmmSchedule:
    """How the tiled SDDMM kernel covers ``out[p] = a_p <X[i], Y[j]>``.

    m_tile: rows per block, one warp each; group: lanes per dot product (G-Sparse's adaptive
    warp shuffle: 32 / group entries of the row at once, reduced by shuffles inside the group);
    k_tile: columns of X[i] staged in shared memory per round (the row is reused by all its
    entries).
    """
    m_tile: int
    group: int
    k_tile: int

    @property
    def threads(self):
        return self.m_tile * 32

    def shared_bytes(self, value_itemsize, index_itemsize=4):
        return self.m_tile * self.k_tile * value_itemsize

    def valid(self, value_itemsize=4, index_itemsize=4):
        return self.threads <= THREADS_MAX and self.shared_bytes(value_itemsize) <= SHARED_BYTES_MAX


def sddmm_schedule_space(value_itemsize=4, index_itemsize=4):
    grid = [SddmmSchedule(m, g, k) for m in (1, 2, 4, 8, 16) for g in (4, 8, 16, 32) for k in (32, 64, 128, 256)]
    return [s for s in grid if s.valid(value_itemsize, index_itemsize)]


def cs267_sddmm_schedule(k_cols):
    """The CS267 report's blocked SDDMM with the row of X in shared memory (paper 004, section
    5.3) as the nearest schedule of the space: a block per row, whose entries all read X[i] from
    shared memory, and 4 lanes per dot product (the report gives each entry one thread; 4 is
    the space's smallest group).  ``algorithm="blocked"``."""
    k_tile = next((t for t in (32, 64, 128) if t >= k_cols), 256)
    return SddmmSchedule(m_tile=1, group=4, k_tile=k_tile)


@launch.kernel_factory
def sddmm_tiled_kernel(schedule, value_dtype):
    """Compile-once factory of the tiled SDDMM kernel for one schedule.

    Thread mapping: warp w of a block owns row ``blockIdx.x * m_tile + w``; per round it stages
    k_tile columns of X[i] in shared memory, then its 32 / group lane groups take the row's
    entries in turn, lanes of a group striding over k, a shuffle reduction inside the group; the
    group's first lane adds the partial dot product into ``out[p]`` (scaled by a_p last round).
    """
    from .intrinsics import shfl_down, syncwarp

    m_tile, group, k_tile = schedule.m_tile, schedule.group, schedule.k_tile
    value_type = numba.from_dtype(np.dtype(value_dtype))
    zero = np.dtype(value_dtype).type(0)
    groups = 32 // group
    tile_size = m_tile * k_tile

    @cuda.jit
    def sddmm_tiled(indptr, indices, data, X, Y, out):
        lane = cuda.threadIdx.x % 32
        w = cuda.threadIdx.x // 32
        row = cuda.blockIdx.x * m_tile + w
        x_tile = cuda.shared.array(tile_size, value_type)
        if row >= X.shape[0]:
            return
        lo, hi = indptr[row], indptr[row + 1]
        k_dim = X.shape[1]
        grp = lane // group
        sub = lane % group
        for k0 in range(0, max(k_dim, 1), k_tile):
            width = min(k_tile, k_dim - k0)
            for k in range(lane, width, 32):
                x_tile[w * k_tile + k] = X[row, k0 + k]
            syncwarp()
            last = k0 + k_tile >= k_dim
            for base in range(lo, hi, groups):
                p = base + grp
                partial = zero
                if p < hi:
                    j = indices[p]
                    for k in range(sub, width, group):
                        partial += x_tile[w * k_tile + k] * Y[j, k0 + k]
                offset = group // 2
                while offset > 0:
                    partial += shfl_down(partial, offset)
                    offset //= 2
                if sub == 0 and p < hi:
                    total = partial + out[p] if k0 > 0 else partial
                    out[p] = total * data[p] if last else total
            syncwarp()

    return sddmm_tiled


def sddmm_tiled(A, X, Y, out, schedule, *, stream=0):
    """Launch the tiled SDDMM: ``out[p] = a_p <X[i], Y[j]>`` for each stored entry p."""
    m = A.shape[0]
    if m == 0 or A.nnz == 0:
        return
    kernel = sddmm_tiled_kernel(schedule, out.dtype.str)
    launch.run_bound(A.cache, ("tiled_sddmm", kernel), kernel, cdiv(m, schedule.m_tile), schedule.threads, stream,
                     (A.indptr, A.indices, A.data, X, Y, out), (3, 4, 5))
