"""Row gathers for reordered graphs: ``dst[i] = src[index[i]]`` (2-D) and ``dst[i] = src[index[i]]`` (1-D)."""

from numba import cuda

from . import launch
from .device import grid_stride_grid


@launch.kernel_factory
def gather_rows_kernel():
    """Thread mapping: one thread per element of ``dst``, grid-stride; consecutive threads
    copy consecutive columns of a row, so both the read and the write are coalesced."""

    @cuda.jit
    def gather_rows(src, index, dst):
        n = dst.shape[1]
        for e in range(cuda.grid(1), dst.shape[0] * n, cuda.gridsize(1)):
            i = e // n
            dst[i, e - i * n] = src[index[i], e - i * n]

    return gather_rows


@launch.kernel_factory
def gather_kernel():
    """Thread mapping: one thread per element of ``dst``, grid-stride."""

    @cuda.jit
    def gather(src, index, dst):
        for i in range(cuda.grid(1), dst.shape[0], cuda.gridsize(1)):
            dst[i] = src[index[i]]

    return gather


def gather(src, index, dst, *, stream=0):
    """``dst[i] = src[index[i]]`` for 1-D or 2-D device arrays (rows for 2-D)."""
    size = dst.shape[0] * (dst.shape[1] if len(dst.shape) == 2 else 1)
    if size == 0:
        return
    kernel = gather_rows_kernel() if len(dst.shape) == 2 else gather_kernel()
    launch.run(kernel, *grid_stride_grid(size), stream, src, index, dst)
