"""What numbasparse asks of the GPU, in one place: is there one (and the one error when there is
none), its limits (SMs, threads and registers per SM) for occupancy, and the one error when its
memory runs out; plus the thread-grid helpers the kernel families share."""
import contextlib
import functools

from numba import cuda

WARP_SIZE = 32


def simulator_enabled():
    """True under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba.cuda import config

    return bool(config.ENABLE_CUDASIM)


@functools.lru_cache(maxsize=None)
def gpu_present():
    """True when a real CUDA GPU is usable (the simulator does not count)."""
    if simulator_enabled():
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # a broken driver is the same as no GPU here
        return False


def require_cuda(what):
    """Raise the one "no GPU" error (RuntimeError) unless CUDA kernels can run: a real GPU, or
    the simulator.  ``what`` names what needed it."""
    if not (simulator_enabled() or gpu_present()):
        raise RuntimeError(f"{what} needs a CUDA GPU (or the Numba CUDA simulator, NUMBA_ENABLE_CUDASIM=1); "
                           f"none was found")


def out_of_memory(error, what, n_bytes):
    """``error`` itself, or, for the GPU's out-of-memory error of any framework (Numba, PyTorch,
    CuPy), a MemoryError naming ``what`` and its size (``n_bytes``, None: unknown), to raise in its
    place."""
    code = getattr(error, "code", None)
    if isinstance(error, MemoryError) or not (
            code == 2 or "OutOfMemory" in type(error).__name__ or "out of memory" in str(error).lower()):
        return error
    size = "" if n_bytes is None else f": {n_bytes} bytes ({n_bytes / 2**30:.2f} GiB)"
    return MemoryError(f"out of GPU memory allocating {what}{size}")


@contextlib.contextmanager
def allocating(what, n_bytes):
    """Raise :func:`out_of_memory`'s MemoryError for an out-of-memory error inside the block."""
    try:
        yield
    except Exception as error:
        replacement = out_of_memory(error, what, n_bytes)
        if replacement is error:
            raise
        raise replacement from error


@functools.lru_cache(maxsize=None)
def one_device():
    """True with a single GPU (or the simulator): its limits and compiled kernels then need no
    per-device lookup."""
    return simulator_enabled() or len(cuda.gpus) == 1


# Several GPUs ------------------------------------------------------------------------------
# A kernel runs in the current context and reads its arrays by address, so a call must run on the
# GPU holding its operands: launching there with another GPU current faults (or reads across
# NVLink).  Torch and CuPy tensors may live on any GPU whatever the current one is, so the public
# functions make their operands' GPU current for the call (:func:`on_gpu_of`).


def gpu_of(array):
    """Ordinal of the GPU holding the CUDA array ``array`` (a framework's array, a Numba device
    array or a :class:`numbasparse.arrays.DeviceView` of either), or None for one holding no
    memory.  Asked of the framework (torch ``get_device``, DLPack's device, the Numba array's
    context): the driver's pointer attribute answered GPU 0 for a torch tensor on GPU 1 (2x H100,
    cause not established), so it is only the last resort."""
    owner = getattr(array, "owner", array)  # a DeviceView: the framework's array
    if hasattr(owner, "get_device") and hasattr(owner, "is_cuda"):  # torch
        return owner.get_device()
    if hasattr(owner, "__dlpack_device__"):  # CuPy, JAX, ...
        return int(owner.__dlpack_device__()[1])
    gpu_data = getattr(owner, "gpu_data", None)
    if gpu_data is not None:  # Numba: the framework array it views, else the context it was allocated in
        foreign = getattr(gpu_data, "owner", None)  # (as_cuda_array's context is merely the current one)
        if hasattr(foreign, "__cuda_array_interface__") or hasattr(foreign, "__dlpack_device__"):
            return gpu_of(foreign)
        return int(gpu_data.context.device.id)
    from cuda.bindings import driver

    pointer = array.__cuda_array_interface__["data"][0]
    if not pointer:
        return None
    err, ordinal = driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                pointer)
    if err:
        raise ValueError(f"the CUDA array at address {pointer:#x} is not memory the CUDA driver knows ({err})")
    return int(ordinal)


def current_gpu():
    """Ordinal of the GPU of the calling thread's current context, or None when it has none."""
    from cuda.bindings import driver

    err, device = driver.cuCtxGetDevice()
    return None if err else int(device)


def on_gpu_of(named):
    """A context manager under which the GPU holding the CUDA arrays of ``named`` ((name, array)
    pairs; None arrays skipped) is the current one, so that the call's uploads, scratch and
    launches land there; ValueError naming two arrays held by different GPUs.  With one GPU (or
    the simulator) nothing is asked: a no-op."""
    named = [(name, array) for name, array in named if array is not None]
    if not named or one_device():  # (host operands: CUDA is not even initialised)
        return NO_SWITCH
    where = {}
    for name, array in named:
        ordinal = gpu_of(array)
        if ordinal is not None:
            where.setdefault(ordinal, name)
    if len(where) > 1:
        (a, first), (b, second) = list(where.items())[:2]
        raise ValueError(f"{first} is on GPU {a} but {second} is on GPU {b}: numbasparse computes on one GPU, "
                         f"move them to the same device first")
    if not where:
        return NO_SWITCH
    (ordinal,) = where
    return on_gpu(ordinal)


def on_gpu(ordinal):
    """A context manager making GPU ``ordinal`` current (a no-op with one GPU or when it is)."""
    if one_device() or current_gpu() == ordinal:
        return NO_SWITCH
    return cuda.gpus[ordinal]


NO_SWITCH = contextlib.nullcontext()  # the context of a call that stays on the current GPU (reentrant)


_limits = {}


def device_limits():
    """(SM count, max threads per SM, registers per SM) of the current device, asked once per
    device (the query costs more than a kernel launch)."""
    key = 0 if one_device() else cuda.get_current_device().id
    limits = _limits.get(key)
    if limits is None:
        limits = _limits[key] = _query_limits()
    return limits


def _query_limits():
    device = cuda.get_current_device()
    if simulator_enabled():  # the simulator's device has no attributes: H100-like numbers
        return 1, 2048, 65536
    return (int(device.MULTIPROCESSOR_COUNT), int(device.MAX_THREADS_PER_MULTIPROCESSOR),
            int(device.MAX_REGISTERS_PER_MULTIPROCESSOR))


_memory = {}


def memory_system():
    """(L2 bytes, DRAM bytes per second) of the current device, asked once per device: the
    inputs of the reordering decision (:mod:`numbasparse.reorder.locality`).  The simulator has
    no such attributes: an H100's (50 MiB, 3.35 TB/s)."""
    if simulator_enabled():
        return 50 << 20, 3.35e12
    key = 0 if one_device() else cuda.get_current_device().id
    if key not in _memory:
        device = cuda.get_current_device()
        clock_hz = int(device.MEMORY_CLOCK_RATE) * 1000  # (kHz; two transfers per clock)
        _memory[key] = int(device.L2_CACHE_SIZE), 2.0 * clock_hz * int(device.GLOBAL_MEMORY_BUS_WIDTH) / 8
    return _memory[key]


def blocks_per_sm(threads_per_block, registers_per_thread):
    """Active blocks per SM, limited by threads and registers (paper 000, Eq. 3)."""
    _, max_threads, max_registers = device_limits()
    by_threads = max_threads // threads_per_block
    by_registers = max_registers // max(1, registers_per_thread * threads_per_block)
    return max(1, min(by_threads, by_registers, 32))


def cdiv(a, b):
    """Ceiling of a / b for non-negative integers."""
    return -(-a // b)


#: Warps per thread block of the kernels with one warp per row (CRC, CWM, SDDMM warp-per-row, fused).
ROW_WARPS_PER_BLOCK = 4


def row_warp_grid(n_rows, n_cols, cols_per_warp):
    """(grid, block) for kernels with one warp per (row, tile of ``cols_per_warp`` columns):
    blockIdx.x picks ROW_WARPS_PER_BLOCK consecutive rows, blockIdx.y the column tile."""
    grid = (cdiv(n_rows, ROW_WARPS_PER_BLOCK), max(1, cdiv(n_cols, cols_per_warp)))
    return grid, ROW_WARPS_PER_BLOCK * WARP_SIZE


def grid_stride_grid(n_elements, threads=256):
    """(blocks, threads) of a grid-stride kernel over ``n_elements``: at most 16 blocks per SM."""
    return min(cdiv(n_elements, threads), device_limits()[0] * 16), threads
