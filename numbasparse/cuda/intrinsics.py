"""Warp intrinsics that also run on the Numba CUDA simulator.

The simulator (``NUMBA_ENABLE_CUDASIM=1``) has no ``syncwarp`` and no shuffles, so the
kernels call these wrappers instead.  On a GPU they are the hardware instructions.  On
the simulator a warp barrier becomes a block barrier over the threads still running
(stronger than needed, so it is still correct), and a shuffle exchanges values through a
per-block table between two such barriers.
"""
import threading

from numba import cuda
from numba.cuda import config

FULL_MASK = 0xFFFFFFFF
WARP_SIZE = 32

if not config.ENABLE_CUDASIM:

    @cuda.jit(device=True, inline="always")
    def syncwarp():
        cuda.syncwarp(FULL_MASK)

    @cuda.jit(device=True, inline="always")
    def shfl_down(value, delta):
        return cuda.shfl_down_sync(FULL_MASK, value, delta)

    @cuda.jit(device=True, inline="always")
    def shfl_idx(value, lane):
        return cuda.shfl_sync(FULL_MASK, value, lane)

else:  # pragma: no cover - exercised only under the simulator

    def syncwarp():
        threading.current_thread().syncthreads()

    def _exchange(value, source_of):
        thread = threading.current_thread()
        table = thread._manager.__dict__.setdefault("_numbasparse_shfl", {})
        me = thread.thread_id
        table[me] = value
        thread.syncthreads()
        src = source_of(me % WARP_SIZE)
        result = table[me - me % WARP_SIZE + src] if 0 <= src < WARP_SIZE else value
        thread.syncthreads()
        return result

    def shfl_down(value, delta):
        return _exchange(value, lambda lane: lane + delta)

    def shfl_idx(value, lane):
        return _exchange(value, lambda _: lane)


@cuda.jit(device=True, inline="always")
def warp_sum(value):
    """Sum of ``value`` over the 32 lanes of a warp; every lane gets the total."""
    offset = WARP_SIZE // 2
    while offset > 0:
        value += shfl_down(value, offset)
        offset //= 2
    return shfl_idx(value, 0)
