"""Filling C with the reduction's identity before a kernel that combines split rows into it
atomically (HP-SpMM off its single launch, the column-slab SpMM): 0 for sum and mean (the
driver's memset), -inf/+inf for max/min in the rows that have entries and 0 in the empty
ones (which no kernel writes)."""
from numba import cuda

from .. import reductions
from . import launch
from .device import grid_stride_grid


@launch.kernel_factory
def fill_all_kernel(value_dtype):
    """``C[:, :] = 0`` where the driver's memset is not available (the simulator), one
    dispatcher per dtype.  Thread mapping: one thread per element of C, grid-stride."""

    @cuda.jit
    def fill_all(C):
        n = C.shape[1]
        for e in range(cuda.grid(1), C.shape[0] * n, cuda.gridsize(1)):
            i = e // n
            C[i, e - i * n] = 0

    return fill_all


@launch.kernel_factory
def fill_rows_kernel(value_dtype, index_dtype):
    """``C[i, :] = empty`` for the rows i listed in ``rows`` that have no entries, ``nonempty``
    for the others.  Thread mapping: one thread per element of the listed rows, grid-stride."""

    @cuda.jit
    def fill_rows(rows, indptr, C, empty, nonempty):
        n = C.shape[1]
        for e in range(cuda.grid(1), rows.shape[0] * n, cuda.gridsize(1)):
            r = e // n
            i = rows[r]
            C[i, e - r * n] = empty if indptr[i + 1] == indptr[i] else nonempty

    return fill_rows


def fill_identity(C, code, stream, *, rows=None, A=None, key=None):
    """Fill C with the identity of reduction ``code`` in ``stream``.  Sum and mean (identity 0):
    every element (a memset).  Max and min: the ``rows`` listed (a device array), with the
    identity where the row of ``A`` has entries and 0 where it has none, launched bound under
    ``key`` in A's cache."""
    if not reductions.is_extremum(code):
        if not launch.zero(C, stream):
            launch.run(fill_all_kernel(C.dtype.str), *grid_stride_grid(C.shape[0] * C.shape[1]), stream, C)
        return
    grid, block = grid_stride_grid(rows.shape[0] * C.shape[1])
    launch.run_bound(A.cache, key, fill_rows_kernel(C.dtype.str, rows.dtype.str), grid, block, stream,
                     (rows, A.indptr, C, 0.0, reductions.initial(code)), (2,))
