"""Launch-configuration rules shared by the CUDA kernels: one place for each number."""
import functools
import weakref

import numpy as np

from numba import cuda

WARP_SIZE = 32
#: Warps per thread block for the row-per-warp kernels (CRC, CWM, SDDMM warp-per-row).
ROW_WARPS_PER_BLOCK = 4


def cdiv(a, b):
    return -(-a // b)


def row_warp_grid(n_rows, n_cols, cols_per_warp):
    """(grid, block) for kernels with one warp per (row, tile of ``cols_per_warp`` columns).

    blockIdx.x picks ROW_WARPS_PER_BLOCK consecutive rows, blockIdx.y the column tile.
    """
    grid = (cdiv(n_rows, ROW_WARPS_PER_BLOCK), max(1, cdiv(n_cols, cols_per_warp)))
    return grid, ROW_WARPS_PER_BLOCK * WARP_SIZE


#: Warps per thread block of the hybrid-parallel (HP) kernels.
HP_WARPS_PER_BLOCK = 4
#: Candidate nonzeros per lane group (HP-SpMM) or per warp (HP-SDDMM), paper 000 section III-B2,
#: largest first; 16 and 8 keep small graphs from being latency-bound (BENCHMARKS.md).
HP_NNZ_PER_WARP = (512, 256, 128, 64, 32, 16, 8)
#: DTP's scale factor alpha: ask for at least this many full waves of blocks.
HP_WAVES = 2


def vector_width(n_cols, itemsize, *arrays):
    """Widest of 4, 2, 1 elements such that every row of each 2-D array starts on a
    ``width * itemsize``-byte boundary (so vector loads are aligned): ``n_cols`` must be a
    multiple of the width and each array's base address aligned to it."""
    aligned_to = min((alignment(a) for a in arrays), default=MAX_ALIGNMENT)
    for width in (4, 2):
        if n_cols % width == 0 and aligned_to % (width * itemsize) == 0:
            return width
    return 1


#: Fewest and most lanes per HP-SpMM lane group: narrow groups give a warp several nonzeros
#: per instruction (H100, tools/tune_hp.py on rmat:16-20: N=32 8 lanes 1.4-2.3x faster than
#: 32; N=128 16 lanes x 2 vectors 3-12% faster than 32 lanes x 1; N=256 within -8%..+6%).
HP_MIN_LANES = 4
HP_MAX_LANES = 16


def hp_lane_layout(n_cols, itemsize, B, lanes=None):
    """(lanes, vec, cf) for HP-SpMM: groups of ``lanes`` lanes, each lane reading ``cf``
    aligned vectors of ``vec`` columns.  The vector is as wide as alignment allows; the group
    is HP_MAX_LANES or as narrow as that vector allows without idling lanes (lanes * vec <=
    n_cols, at least HP_MIN_LANES), so N = 32 float32 runs 8 lanes x 4 columns and a warp works
    on 4 nonzeros at once; ``lanes`` forces the group size (32: a whole warp per group).
    cf = 2 lets one pass over the nonzeros cover two vectors per lane (wider N: more column
    tiles, blockIdx.y)."""
    vec = vector_width(n_cols, itemsize, B)
    if lanes is None:
        lanes = HP_MAX_LANES
        while lanes > HP_MIN_LANES and lanes * vec > n_cols:
            lanes //= 2
    while vec > 1 and lanes * vec > n_cols:
        vec //= 2
    cf = 2 if n_cols > lanes * vec else 1
    return lanes, vec, cf


#: The widest vector load is 4 float64: 32 bytes.
MAX_ALIGNMENT = 32


def alignment(array):
    """The largest power of two up to MAX_ALIGNMENT bytes that ``array``'s base address is a
    multiple of: all that :func:`vector_width` needs to know of the array."""
    address = _address(array)
    size = MAX_ALIGNMENT
    while address % size:
        size //= 2
    return size


def _address(array):
    pointer = _device_pointer(array)
    if pointer is not None:
        return pointer
    interface = getattr(array, "__cuda_array_interface__", None)
    return interface["data"][0] if interface else 0  # the simulator: any alignment works


_limits = {}


def device_limits():
    """(SM count, max threads per SM, registers per SM) of the current device (asked once
    per device: the query costs ~9 us, more than a kernel launch)."""
    key = 0 if _one_device() else cuda.get_current_device().id
    limits = _limits.get(key)
    if limits is None:
        limits = _limits[key] = _device_limits()
    return limits


@functools.lru_cache(maxsize=None)
def _one_device():
    from numba.cuda import config

    return bool(config.ENABLE_CUDASIM) or len(cuda.gpus) == 1


def _device_limits():
    from numba.cuda import config

    device = cuda.get_current_device()
    if config.ENABLE_CUDASIM:  # the simulator's device has no attributes: H100-like numbers
        return 1, 2048, 65536
    return (int(device.MULTIPROCESSOR_COUNT), int(device.MAX_THREADS_PER_MULTIPROCESSOR),
            int(device.MAX_REGISTERS_PER_MULTIPROCESSOR))


def blocks_per_sm(threads_per_block, registers_per_thread):
    """Active blocks per SM, limited by threads and registers (paper 000, Eq. 3)."""
    _, max_threads, max_registers = device_limits()
    by_threads = max_threads // threads_per_block
    by_registers = max_registers // max(1, registers_per_thread * threads_per_block)
    return max(1, min(by_threads, by_registers, 32))


def hp_nnz_per_warp(nnz, n_tiles, registers_per_thread=64, groups_per_warp=1):
    """Dynamic Task Partition (paper 000, Eq. 4-5): the largest candidate nonzeros per warp
    (per lane group when a warp holds ``groups_per_warp`` of them) that still launches
    HP_WAVES full waves of blocks on this GPU, so that small and sampled graphs fill every
    SM; the smallest candidate when even that cannot."""
    sms = device_limits()[0]
    threads = HP_WARPS_PER_BLOCK * WARP_SIZE
    full_wave = sms * blocks_per_sm(threads, registers_per_thread)
    for candidate in HP_NNZ_PER_WARP:
        if cdiv(nnz, candidate * HP_WARPS_PER_BLOCK * groups_per_warp) * n_tiles >= HP_WAVES * full_wave:
            return candidate
    return HP_NNZ_PER_WARP[-1]


# ---------------------------------------------------------------------------------------
# Kernel launch.  ``kernel[grid, block, stream](*args)`` re-types every argument and
# wraps every array on each call (about 30-40 us per launch from Python on an H100, see
# tools/profile_call.py).  Once a kernel has exactly one compiled signature, ``run``
# packs the arguments itself in Numba's kernel ABI and calls cuda.core's ``launch``.
# It falls back to the ordinary launch on the simulator, on machines with several GPUs
# (one compiled module per context), and whenever an argument does not match.

_fast_launch = {}
_launch_configs = {}


def run(kernel, grid, block, stream, *args):
    """Launch the Numba dispatcher ``kernel`` on ``grid`` x ``block`` threads in ``stream``."""
    entry = _fast_launch.get(kernel)
    if entry is not None and entry.launch(grid, block, stream, args):
        return
    kernel[grid, block, stream](*args)
    if entry is None and _fast_launch_allowed() and len(kernel.overloads) == 1:
        _fast_launch[kernel] = _FastLaunch(next(iter(kernel.overloads.values())))


@functools.lru_cache(maxsize=None)
def _fast_launch_allowed():
    from numba.cuda import config

    if config.ENABLE_CUDASIM:
        return False
    try:
        from cuda.core import LaunchConfig, launch  # noqa: F401

        return len(cuda.gpus) == 1
    except Exception:  # an older numba-cuda or cuda.core: keep Numba's launch
        return False


class _FastLaunch:
    """Argument packing for one compiled kernel (Numba's ABI: an array is meminfo, parent,
    nitems, itemsize, data pointer, shape..., strides...; scalars as C values)."""

    def __init__(self, compiled):
        import ctypes

        from numba.core import types
        from numba.np import numpy_support

        self.kernel = compiled._codelibrary.get_cufunc().kernel
        self.kinds = []
        for ty in compiled.argument_types:
            if isinstance(ty, types.Array) and ty.layout == "C":
                self.kinds.append(("array", numpy_support.as_dtype(ty.dtype), ty.ndim))
            elif isinstance(ty, types.Integer):
                self.kinds.append(("scalar", getattr(ctypes, f"c_{ty}"), int))
            elif ty in (types.float32, types.float64):
                self.kinds.append(("scalar", ctypes.c_float if ty == types.float32 else ctypes.c_double, float))
            else:
                self.kinds.append(("unsupported", None, None))

    def launch(self, grid, block, stream, args):
        """Launch and return True, or return False (nothing launched) if an argument differs."""
        from cuda.core import LaunchConfig, launch

        packed = []
        for (kind, a, b), value in zip(self.kinds, args):
            if kind == "array":
                fields = _array_fields(value)
                if fields is None or value.dtype != a or value.ndim != b or not value.is_c_contiguous():
                    return False
                packed += fields
            elif kind == "scalar" and isinstance(value, (int, float, np.integer, np.floating)):
                packed.append(a(b(value)))
            else:
                return False
        key = (grid, block)
        config = _launch_configs.get(key)
        if config is None:
            config = _launch_configs[key] = LaunchConfig(grid=grid, block=block, shmem_size=0)
        launch(_core_stream(stream), config, self.kernel, *packed)
        return True


def _device_pointer(array):
    """Device address of a Numba device array or a DeviceView; None for anything else."""
    pointer = getattr(array, "ptr", None)  # a DeviceView
    if pointer is not None:
        return pointer
    if hasattr(array, "device_ctypes_pointer"):
        return array.device_ctypes_pointer.value or 0
    return None


_numba_array_fields = weakref.WeakKeyDictionary()  # a Numba array's fields never change


def _array_fields(array):
    """The kernel-ABI fields of a device array (meminfo, parent, nitems, itemsize, data
    pointer, shape..., strides...), or None when ``array`` is not one."""
    pointer = getattr(array, "ptr", None)  # a DeviceView: made per call, cheap to read
    if pointer is not None:
        return [0, 0, array.size, array.dtype.itemsize, pointer, *array.shape, *array.strides]
    try:
        fields = _numba_array_fields.get(array)
    except TypeError:  # not weak-referenceable: not a Numba array
        return None
    if fields is None:
        pointer = _device_pointer(array)
        if pointer is None:
            return None
        fields = [0, 0, array.size, array.dtype.itemsize, pointer, *array.shape, *array.strides]
        _numba_array_fields[array] = fields
    return fields


_core_streams = {}


def _core_stream(stream):
    """cuda.core's view of a Numba stream (or 0), made once per stream object."""
    entry = _core_streams.get(id(stream))
    if entry is not None and entry[0] is stream:
        return entry[1]
    from numba.cuda.cudadrv.driver import _to_core_stream

    if len(_core_streams) > 64:  # callers making a new stream per call: do not grow without end
        _core_streams.clear()
    core = _to_core_stream(stream)
    _core_streams[id(stream)] = (stream, core)  # holding the stream keeps its id unique
    return core


def zero(array, stream=0):
    """Set a C-contiguous device array to zero bytes in ``stream`` (cuMemsetD8Async: no
    kernel launch).  Returns False, doing nothing, where the driver call is unavailable
    (the simulator)."""
    pointer = _device_pointer(array)
    if not pointer or not _fast_launch_allowed():
        return False
    from cuda.bindings import driver

    (err,) = driver.cuMemsetD8Async(pointer, 0, array.size * array.dtype.itemsize, _core_stream(stream).handle)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuMemsetD8Async failed: {err}")
    return True
