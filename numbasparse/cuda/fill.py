"""Filling C with the reduction's identity before a kernel that combines split rows into it
atomically (HP-SpMM off its single launch, the column-slab SpMM): 0 for sum and mean (the
driver's memset), -inf/+inf for max/min in the rows that have entries and 0 in the empty
ones (which no kernel writes).

A 16-bit C is never combined into atomically (each combine would round): those kernels combine
into a float32 workspace kept filled between calls (:func:`workspace`), which a second launch
rounds into C and fills again (:func:`round_into`)."""
import numba
import numpy as np
from numba import cuda

from .. import reductions
from ..dtypes import kernel_format
from . import device, launch
from .device import WARP_SIZE as WARP
from .device import cdiv, device_limits, grid_stride_grid
from .intrinsics import converters


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


@launch.kernel_factory
def round_kernel(reduce_code, fmt, index_dtype):
    """Compile-once factory of the pass that rounds the float32 workspace W of a 16-bit C into C
    (format ``fmt``) and leaves W filled again for the next call: the reduction's identity in
    the rows of A that have entries, 0 elsewhere (sum and mean: 0 everywhere).  Thread mapping:
    blocks of ROUND_ROWS x 32 threads, a warp per row and its lanes along the columns, rows
    grid-stride (no division per element)."""
    to_storage = converters(fmt)[1]
    extremum = reductions.is_extremum(reduce_code)
    identity = np.float32(reductions.initial(reduce_code))
    zero = np.float32(0)
    i32 = numba.int32

    @cuda.jit
    def round_rows(indptr, W, C):
        m, n = i32(C.shape[0]), i32(C.shape[1])
        for i in range(i32(cuda.blockIdx.x * ROUND_ROWS + cuda.threadIdx.y), m, i32(cuda.gridDim.x * ROUND_ROWS)):
            refill = identity if extremum and indptr[i + 1] > indptr[i] else zero
            for j in range(i32(cuda.threadIdx.x), n, i32(WARP)):
                C[i, j] = to_storage(W[i, j])
                W[i, j] = refill

    return round_rows


#: Rows a block of the rounding pass takes at once (a warp each).
ROUND_ROWS = 8


def workspace(A, code, n, stream):
    """(stream handle, W): the float32 (M, n) workspace a 16-bit C of ``A @ B`` is computed in
    on ``stream``, kept in ``A.cache`` per N, reduction (sum and mean share the zeros) and
    stream, M x n x 4 bytes each, filled for the reduction, which :func:`round_into` restores
    after every call, so a call needs no fill of its own.  (One per stream: calls on one stream
    run one after another.)"""
    handle = launch.stream_handle(stream)
    state = _state(code)

    def build():
        with device.allocating("a 16-bit result's float32 workspace", A.shape[0] * n * 4):
            W = cuda.device_array((A.shape[0], n), np.float32)
        _fill(A, W, state, stream)
        return W
    return handle, A.cache.get_or_build("scratch", ("workspace", n, state, handle), build)


def _state(code):
    """The fill a workspace keeps for reduction ``code``: sum and mean share the zeros."""
    return code if reductions.is_extremum(code) else reductions.SUM


def _fill(A, W, state, stream):
    """Fill the workspace W for reduction ``state`` (unbound: once per workspace)."""
    if state == reductions.SUM:
        fill_identity(W, state, stream)
    else:
        launch.run(fill_rows_kernel(W.dtype.str, A.index_dtype.str), *grid_stride_grid(W.size), stream,
                   all_rows(A), A.indptr, W, 0.0, reductions.initial(state))


def round_into(A, W, C, code, handle, stream, key, kernel, grid, block, args, variable):
    """Launch ``kernel`` on ``args`` (bound under ``key``, :func:`launch.run_bound`), whose
    output is the workspace W of :func:`workspace` on the stream of driver ``handle``, then the
    pass that rounds W into the 16-bit C and fills it again.  W is bound into both launches (it
    is this stream's, and a replay reuses it): of the ``variable`` arguments, only the others
    change between calls.  The two are issued under ``launch.ISSUE_LOCK``, so that another
    thread's call on the stream cannot come between them; if anything raises in between, W is
    filled again (and where even that fails, A's cache is forgotten), so that no later call adds
    to this one's sums."""
    m, n = C.shape
    rounding = round_kernel(code, kernel_format(A.dtype), A.index_dtype.str)
    with launch.ISSUE_LOCK:
        try:
            launch.run_bound(A.cache, key + (handle, id(W)), kernel, grid, block, stream, args,
                             tuple(i for i in variable if args[i] is not W))
            launch.run_bound(A.cache, ("round", code, n, A.dtype.name, handle, id(W)), rounding,
                             min(cdiv(m, ROUND_ROWS), device_limits()[0] * 8), (WARP, ROUND_ROWS), stream,
                             (A.indptr, W, C), (2,))
        except BaseException:
            try:
                _fill(A, W, _state(code), stream)
            except Exception:
                A.cache.clear()
            raise


def all_rows(A):
    """Device array 0..M-1 (A's index dtype): the rows a max/min launch fills."""
    return A.cache.get_or_build("plans", ("all_rows",),
                                lambda: cuda.to_device(np.arange(A.shape[0], dtype=A.index_dtype)))
