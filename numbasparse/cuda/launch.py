"""Launch-configuration rules shared by the CUDA kernels: one place for each number."""
import contextlib
import functools
import threading
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
#: Register cap of the float32 sum HP-SpMM kernels with 8 columns per lane (16-lane groups x 2
#: vectors: N between 64 and 128, or forced lanes): 64 lets 8 blocks (32 warps) share an SM
#: where the uncapped kernel took 68 (7 blocks), at the cost of an 8-byte spill: 4-10% faster
#: at N = 128/256 on R-MAT and the sampled workload, the same on PubMed, when the rule still
#: chose that layout there (H100, tools/ab_hp.py, BENCHMARKS.md).  Mean, max, min and float64
#: would spill 80+ bytes; the narrower kernels use fewer than 64 anyway (and ptxas allots more under a cap).
HP_MAX_REGISTERS = 64
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


#: Entries of one row whose B rows an HP-SpMM lane group loads before it uses the first (more
#: gathers in flight per warp), on graphs whose non-empty rows average HP_GATHER_MIN_ROW entries
#: or more, and for lanes of at most HP_GATHER_MAX_WIDTH columns (wider ones would spill).
HP_GATHER_DEPTH = 2
HP_GATHER_MIN_ROW = 16
HP_GATHER_MAX_WIDTH = 4


def hp_gather_depth(nnz, nonempty_rows, width):
    """Entries per HP-SpMM gather batch for a graph of ``nnz`` entries in ``nonempty_rows``
    non-empty rows, with ``width`` columns per lane.  H100, kernel time against depth 1
    (tools/ab_hp.py, BENCHMARKS.md): depth 2 is 1.09-1.23x faster on the sampled workload (rows
    of ~200 entries) and 1.01-1.13x on R-MAT scales 16 and 18 (means 39 and 44); depth 4 was
    slower than 2 (0.85-1.10x of depth 1); depth 2 on Cora and PubMed (means 4) took 0.80-0.97x
    of depth 1 (short runs of one row leave a warp's groups on different paths), hence the rule."""
    long_rows = nnz >= HP_GATHER_MIN_ROW * max(1, nonempty_rows)
    return HP_GATHER_DEPTH if long_rows and width <= HP_GATHER_MAX_WIDTH else 1


#: The single-launch HP-SpMM (:func:`hp_single_launch`) is used only where no lane group would
#: zero more than this many empty rows, one after another,
HP_MAX_ZEROED_ROWS = 32
#: and no row spans more than this many blocks after its first (the row's last block waits for
#: the parts of the others one block after another: an L2 round trip each).
HP_MAX_SINGLE_LAUNCH_SPAN = 10


def hp_single_launch(mean_row_nnz, span, empty_rows_per_group):
    """True where HP-SpMM runs as one GPU operation (``hp.spmm_hp_kernel``, prefilled False:
    the kernel zeroes empty rows itself, merges split rows in the block and finishes rows
    crossing blocks in the row's last block) rather than after a memset (or fill): for graphs
    of short rows (``mean_row_nnz``, nonzeros per non-empty row, below HP_GATHER_MIN_ROW) whose
    rows span at most HP_MAX_SINGLE_LAUNCH_SPAN blocks after their first (``span``) and whose
    groups zero at most HP_MAX_ZEROED_ROWS empty rows.  H100, tools/ab_hp.py (BENCHMARKS.md,
    session 12), single launch against memset + kernel by kernel time: Cora, Citeseer, PubMed
    (up to 2772 blocks) and the default graph (spans up to 10), sum and max, N = 32..256,
    0.88-1.39x (below 1 only for sums at N <= 64 on Cora, Citeseer and the default graph,
    0.88-0.97x, calls that one GPU operation fewer makes faster by events); R-MAT 14, 16 and
    18 (mean rows 34-39) and the sampled workload (mean 106), sums, 0.78-0.99x: long rows are
    split over many groups, and the block merge and the look-back cost more there than the
    pre-filled kernel's atomics."""
    return (mean_row_nnz < HP_GATHER_MIN_ROW and span <= HP_MAX_SINGLE_LAUNCH_SPAN
            and empty_rows_per_group <= HP_MAX_ZEROED_ROWS)


#: Fewest and most lanes per HP-SpMM lane group: narrow groups give a warp several nonzeros
#: per instruction where N is small (H100, tools/tune_hp.py on rmat:16-20: N=32 8 lanes
#: 1.4-2.3x faster than 32).  At N >= 128 a whole warp per entry (32 lanes x 4 columns, tiles of
#: 128 columns) beat 16 lanes x 2 vectors once gathers were batched: 48 instead of 64 capped
#: registers; sampled workload 1.15x vs 1.11x, Cora/PubMed up to 1.20x, R-MAT 18 at N=128 1.04x
#: vs 1.10x (tools/ab_hp.py against depth 1 with 16 x 2, BENCHMARKS.md).
HP_MIN_LANES = 4
HP_MAX_LANES = 32


def hp_lane_layout(n_cols, itemsize, B, lanes=None):
    """(lanes, vec, cf) for HP-SpMM: groups of ``lanes`` lanes, each lane reading ``cf``
    aligned vectors of ``vec`` columns.  The vector is as wide as alignment allows; the group
    is HP_MAX_LANES or as narrow as that vector allows without idling lanes (lanes * vec <=
    n_cols, at least HP_MIN_LANES), so N = 32 float32 runs 8 lanes x 4 columns and a warp works
    on 4 nonzeros at once, and N = 256 two column tiles (blockIdx.y) of 32 lanes x 4 columns.
    ``lanes`` forces the group size.  A group narrower than HP_MAX_LANES (forced, or for N below
    32 vectors) takes cf = 2 vectors per lane where N is wider than one vector of the group."""
    vec = vector_width(n_cols, itemsize, B)
    if lanes is None:
        lanes = HP_MAX_LANES
        while lanes > HP_MIN_LANES and lanes * vec > n_cols:
            lanes //= 2
    while vec > 1 and lanes * vec > n_cols:
        vec //= 2
    cf = 2 if n_cols > lanes * vec and lanes < HP_MAX_LANES else 1
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


def hp_full_wave(registers_per_thread=64):
    """Thread blocks of an HP kernel that the GPU runs at once (SMs x blocks per SM)."""
    return device_limits()[0] * blocks_per_sm(HP_WARPS_PER_BLOCK * WARP_SIZE, registers_per_thread)


def hp_nnz_per_warp(nnz, n_tiles, registers_per_thread=64, groups_per_warp=1):
    """Dynamic Task Partition (paper 000, Eq. 4-5): the largest candidate nonzeros per warp
    (per lane group when a warp holds ``groups_per_warp`` of them) that still launches
    HP_WAVES full waves of blocks on this GPU, so that small and sampled graphs fill every
    SM; the smallest candidate when even that cannot."""
    full_wave = hp_full_wave(registers_per_thread)
    for candidate in HP_NNZ_PER_WARP:
        if cdiv(nnz, candidate * HP_WARPS_PER_BLOCK * groups_per_warp) * n_tiles >= HP_WAVES * full_wave:
            return candidate
    return HP_NNZ_PER_WARP[-1]


# ---------------------------------------------------------------------------------------
# Kernel launch.  ``kernel[grid, block, stream](*args)`` re-types every argument and
# wraps every array on each call (about 30-40 us per launch from Python on an H100, see
# tools/profile_call.py).  Once a kernel has exactly one compiled signature, ``run``
# writes the arguments itself, in Numba's kernel ABI, into a parameter buffer kept per
# kernel and calls the driver's cuLaunchKernel through cuda.bindings (the driver call
# itself takes ~6 us on the H100 machine, the packing 2-4 us: tools/launch_floor.py).
# It falls back to the ordinary launch on the simulator, on machines with several GPUs
# (one compiled module per context), whenever an argument does not match, and after a
# driver error (Numba's launch then sets up or reports what was wrong).  ``bind`` goes
# one step further for launchers called again and again on one matrix: the arguments are
# packed once and a call writes only the data pointers of the dense operands.

_fast_launch = {}
#: Driver errors in a row after which a kernel's fast launch stays off (one error, e.g. from a
#: thread with no current context, only sends that call through Numba's launch).
FAST_LAUNCH_FAILURES = 3


def run(kernel, grid, block, stream, *args):
    """Launch the Numba dispatcher ``kernel`` on ``grid`` x ``block`` threads in ``stream``."""
    recording = getattr(_recording, "current", None)
    if recording is not None:  # (a call that launches through run() is not replayed)
        recording.add_launch(None, ())
    entry = _fast_launch.get(kernel)
    if entry is not None and entry.launch(grid, block, stream, args):
        return
    kernel[grid, block, stream](*args)
    if entry is None and _driver() is not None and len(kernel.overloads) == 1:
        _fast_launch[kernel] = _FastLaunch(next(iter(kernel.overloads.values())))


@functools.lru_cache(maxsize=None)
def _driver():
    """The driver's cuLaunchKernel and cuMemsetD8Async (cuda.bindings, which numba-cuda
    depends on), or None where they are not to be used: the simulator, several GPUs."""
    from numba.cuda import config

    if config.ENABLE_CUDASIM:
        return None
    try:
        if len(cuda.gpus) != 1:
            return None
        from cuda.bindings import driver
    except Exception:  # no driver or an older binding: keep Numba's launch (which will say why)
        return None
    return driver.cuLaunchKernel, driver.cuMemsetD8Async


class _FastLaunch:
    """The parameter buffer of one compiled kernel.  Numba's ABI passes an array as the
    fields meminfo, parent, nitems, itemsize, data pointer, shape..., strides... (one kernel
    parameter each) and a scalar as its C value; every parameter here gets an 8-byte slot,
    and the driver gets the slots' addresses (``kernelParams``)."""

    def __init__(self, compiled):
        import threading

        from numba.core import types
        from numba.np import numpy_support

        # numba-cuda loads modules as libraries: this is a CUkernel, which cuLaunchKernel takes
        # in place of a CUfunction (CUDA 12+) and launches in the current context.
        self.function = int(compiled._codelibrary.get_cufunc().handle)
        self.kinds = []
        n_slots = 0
        for ty in compiled.argument_types:
            if isinstance(ty, types.Array) and ty.layout == "C":
                self.kinds.append(("array", (numpy_support.as_dtype(ty.dtype), ty.ndim)))
                n_slots += 5 + 2 * ty.ndim
            elif isinstance(ty, types.Integer):
                self.kinds.append(("int", (1 << ty.bitwidth) - 1))
                n_slots += 1
            elif ty in (types.float32, types.float64):
                self.kinds.append(("float", _float_bits(ty.bitwidth)))
                n_slots += 1
            else:
                self.kinds.append(("unsupported", None))
        self.slots, self.params_address = _parameter_buffer([0] * n_slots)
        self.lock = threading.Lock()  # the driver reads the slots without holding the GIL
        self.enabled = True
        self.failures = 0  # driver errors in a row

    def pack(self, args):
        """The slot values of ``args``, or None if an argument does not match the signature."""
        values = []
        for (kind, expected), value in zip(self.kinds, args):
            if kind == "array":
                abi = kernel_abi(value)
                if abi is None or abi[0] != expected:
                    return None
                values += abi[1]
            elif kind == "int" and isinstance(value, (int, np.integer)):
                values.append(int(value) & expected)
            elif kind == "float" and isinstance(value, (int, float, np.integer, np.floating)):
                values.append(expected(value))
            else:
                return None
        return values

    def launch(self, grid, block, stream, args):
        """Launch and return True, or return False (nothing launched) if an argument differs."""
        values = self.pack(args) if self.enabled else None
        if values is None:
            return False
        with self.lock:
            self.slots[:] = values
            return self.call(self.params_address, _dim3(grid), _dim3(block), stream_handle(stream))

    def call(self, params_address, grid, block, handle):
        """cuLaunchKernel with the parameters at ``params_address`` on ``grid`` x ``block``
        (3-tuples) in the stream of driver handle ``handle``; False after a driver error
        (nothing was launched: the caller then launches through Numba, which sets up what was
        missing, e.g. a context on a new thread, or raises).  After FAST_LAUNCH_FAILURES errors in a row the fast path is off for good."""
        gx, gy, gz = grid
        bx, by, bz = block
        (err,) = _driver()[0](self.function, gx, gy, gz, bx, by, bz, 0, handle, params_address, 0)
        if err:
            self.failures += 1
            self.enabled = self.failures < FAST_LAUNCH_FAILURES
            return False
        self.failures = 0
        return True

    def slot_offsets(self):
        """Index of each argument's first slot."""
        offsets, slot = [], 0
        for kind, expected in self.kinds:
            offsets.append(slot)
            slot += 5 + 2 * expected[1] if kind == "array" else 1
        return offsets


class BoundLaunch:
    """A launch of one kernel with its arguments packed once (:func:`bind`).  A call passes
    new arrays for the ``variable`` arguments, which must have the bound arrays' dtype and
    shape (C-contiguous): only their data pointers are written, so the call's host cost is
    the driver's.  It returns True when launched; False, launching nothing, when an array does
    not match or the fast launch is off (the caller then launches through :func:`run`); None
    after a driver error (the caller then launches through Numba, which sets up or reports
    what was wrong, without a second driver call)."""

    def __init__(self, fast, grid, block, values, variable, args):
        import threading

        self.fast, self.grid, self.block = fast, _dim3(grid), _dim3(block)
        self.slots, self.params_address = _parameter_buffer(values)
        offsets = fast.slot_offsets()
        # (slot of the data pointer, (dtype, ndim), shape) per variable argument
        self.variable = [(offsets[i] + 4, fast.kinds[i][1], list(args[i].shape)) for i in variable]
        self.lock = threading.Lock()

    def __call__(self, stream, *arrays):
        with self.lock:
            for (slot, kind, shape), array in zip(self.variable, arrays):
                abi = kernel_abi(array)
                if abi is None or abi[0] != kind or abi[1][5:5 + kind[1]] != shape:
                    return False
                self.slots[slot] = abi[1][4]
            if not self.fast.enabled:
                return False
            return self.fast.call(self.params_address, self.grid, self.block, stream_handle(stream)) or None

    def replay(self, pointers, handle):
        """Launch with the ``variable`` arguments' data pointers taken from ``pointers`` (one
        per variable argument, no check: :class:`Replay` has checked the call's operands) in
        the stream of driver handle ``handle``.  True when launched."""
        with self.lock:
            for (slot, _, _), pointer in zip(self.variable, pointers):
                self.slots[slot] = pointer
            return self.fast.enabled and self.fast.call(self.params_address, self.grid, self.block, handle)


def _parameter_buffer(values):
    """(slots, address of the pointer array): one 8-byte slot per kernel parameter, holding
    ``values``, and the array of the slots' addresses that cuLaunchKernel takes as
    ``kernelParams`` (kept alive by the slots' ``_params`` attribute)."""
    import ctypes

    slots = (ctypes.c_uint64 * len(values))(*values)
    base = ctypes.addressof(slots)
    params = (ctypes.c_void_p * len(values))(*range(base, base + 8 * len(values), 8))
    slots._params = params
    return slots, ctypes.addressof(params)


def run_bound(cache, key, kernel, grid, block, stream, args, variable):
    """``run(kernel, grid, block, stream, *args)`` for a launcher called again and again on one
    matrix: from the second call with ``key`` on, through a :class:`BoundLaunch` kept in
    ``cache`` (a matrix made for one call, e.g. by ``with_values``, never pays for binding).
    ``variable``: the indices of the arguments that change from call to call."""
    bound = cache.get(key)
    arrays = [args[i] for i in variable]
    launched = bound(stream, *arrays) if bound is not None else False
    recording = getattr(_recording, "current", None)
    if recording is not None:
        recording.add_launch(bound if launched else None, arrays)
    if launched:
        return
    if launched is None:  # the driver refused: one error counted, Numba's launch sets up or raises
        kernel[grid, block, stream](*args)
        return
    run(kernel, grid, block, stream, *args)
    cache[key] = bind(kernel, grid, block, args, variable) if key in cache else None


def bind(kernel, grid, block, args, variable):
    """A :class:`BoundLaunch` of ``kernel[grid, block](*args)`` whose arguments at the indices
    ``variable`` change from call to call, or None where the fast launch is unavailable (the
    simulator, several GPUs, a kernel not yet launched once through :func:`run`, arguments
    it cannot pack)."""
    fast = _fast_launch.get(kernel)
    values = fast.pack(args) if fast is not None and fast.enabled else None
    if values is None:
        return None
    return BoundLaunch(fast, grid, block, values, variable, args)


def _dim3(dims):
    return (tuple(dims) + (1, 1))[:3] if isinstance(dims, (tuple, list)) else (dims, 1, 1)


def _float_bits(bits):
    import struct

    pack, unpack = (struct.Struct("<f").pack, struct.Struct("<I").unpack) if bits == 32 else \
        (struct.Struct("<d").pack, struct.Struct("<Q").unpack)
    return lambda x: unpack(pack(x))[0]


def _device_pointer(array):
    """Device address of a Numba device array or a DeviceView; None for anything else."""
    pointer = getattr(array, "ptr", None)  # a DeviceView
    if pointer is not None:
        return pointer
    if hasattr(array, "device_ctypes_pointer"):
        return array.device_ctypes_pointer.value or 0
    return None


_numba_array_abi = weakref.WeakKeyDictionary()  # a Numba array's description never changes


def kernel_abi(array):
    """((dtype, ndim), kernel-ABI fields) of a C-contiguous device array, the fields being
    meminfo, parent, nitems, itemsize, data pointer, shape..., strides...; None for anything
    else (a strided array, a host array)."""
    abi = getattr(array, "abi", None)  # a DeviceView describes itself once
    if abi is not None:
        return abi
    try:
        abi = _numba_array_abi.get(array, False)
    except TypeError:  # not weak-referenceable: not a Numba array
        return None
    if abi is False:
        pointer = _device_pointer(array)
        abi = None
        if pointer is not None and array.is_c_contiguous():
            abi = abi_of(pointer, array.shape, array.strides, array.dtype, array.size)
        _numba_array_abi[array] = abi
    return abi


def abi_of(pointer, shape, strides, dtype, size):
    """The kernel_abi description of a C-contiguous array of ``size`` elements."""
    return (dtype, len(shape)), [0, 0, size, dtype.itemsize, pointer, *shape, *strides]


_stream_handles = {}


def stream_handle(stream):
    """The driver handle of a Numba stream (0: the default stream), read once per stream."""
    if not stream:
        return 0
    if not hasattr(stream, "handle"):  # the simulator's streams
        return id(stream)
    entry = _stream_handles.get(id(stream))
    if entry is not None and entry[0] is stream:
        return entry[1]
    if len(_stream_handles) > 64:  # callers making a new stream per call: do not grow without end
        _stream_handles.clear()
    handle = getattr(stream.handle, "value", stream.handle)  # a ctypes pointer or a binding's handle
    handle = int(handle or 0)
    _stream_handles[id(stream)] = (stream, handle)  # holding the stream keeps its id unique
    return handle


def _memset_zero(pointer, n_bytes, handle):
    """cuMemsetD8Async of ``n_bytes`` zero bytes at ``pointer`` in stream ``handle``: the
    driver's error code (0: done)."""
    (err,) = _driver()[1](pointer, 0, n_bytes, handle)
    return err


def zero(array, stream=0):
    """Set a C-contiguous device array to zero bytes in ``stream`` (cuMemsetD8Async: no
    kernel launch).  Returns False, doing nothing, where the driver call is unavailable
    (the simulator)."""
    pointer = _device_pointer(array)
    driver = _driver()
    if not pointer or driver is None:
        return False
    n_bytes = array.size * array.dtype.itemsize
    err = _memset_zero(pointer, n_bytes, stream_handle(stream))
    if err:
        raise RuntimeError(f"cuMemsetD8Async failed with CUDA error {err}")
    recording = getattr(_recording, "current", None)
    if recording is not None:
        recording.add_zero(array, n_bytes)
    return True


# Replaying a call ----------------------------------------------------------------------------
#
# A public call on device operands spends most of its host time choosing what to launch:
# validation, dispatch, plans, keys.  For a call repeated on operands of one signature (the same
# matrix, shapes, dtypes, device and stream), :func:`recording` captures the GPU operations the
# call issued, and the :class:`Replay` issues them again with the new operands' data pointers.

_recording = threading.local()


@contextlib.contextmanager
def recording(*operands):
    """Capture the GPU operations issued inside the ``with`` block on ``operands`` (the
    call's variable arrays, recognised by identity: B and C for SpMM).  The recording's
    ``replay()`` is then a :class:`Replay`, or None when something issued cannot be replayed:
    a launch through :func:`run` (unbound), a bound launch not yet bound (a call's first two
    launches with a key), or an array that is not one of ``operands``."""
    recording = Recording(operands)
    previous = getattr(_recording, "current", None)
    _recording.current = recording
    try:
        yield recording
    finally:
        _recording.current = previous


class Recording:
    """The steps of one call, as :func:`recording` captures them."""

    def __init__(self, operands):
        self.operands = operands
        self.steps = []
        self.replayable = True

    def _roles(self, arrays):
        roles = [next((i for i, op in enumerate(self.operands) if op is a), None) for a in arrays]
        return None if None in roles else roles

    def add_launch(self, bound, arrays):
        roles = self._roles(arrays)
        if bound is None or roles is None:
            self.replayable = False
        else:
            self.steps.append((bound, roles))

    def add_zero(self, array, n_bytes):
        roles = self._roles([array])
        if roles is None:
            self.replayable = False
        else:
            self.steps.append((n_bytes, roles))

    def replay(self):
        if not self.replayable:
            return None
        alignments = tuple(_address(op) % MAX_ALIGNMENT for op in self.operands)
        return Replay(tuple(self.steps), alignments)


class Replay:
    """A recorded call's GPU operations (bound launches and memsets), issued again by
    ``replay(pointers, handle)`` on new operands: ``pointers`` their data pointers in the
    recorded order, ``handle`` the driver handle of the stream.  The caller guarantees that the
    operands have the recorded ones' shapes and dtypes; the replay checks their alignment
    (which chose the vector width) and returns False, issuing nothing, when it differs.  It
    also returns False when a launch's fast path has been turned off, having issued the steps
    before it (which the caller's full call then issues again)."""

    __slots__ = ("steps", "alignments")

    def __init__(self, steps, alignments):
        self.steps, self.alignments = steps, alignments

    def __call__(self, pointers, handle):
        for pointer, alignment in zip(pointers, self.alignments):
            if pointer % MAX_ALIGNMENT != alignment:
                return False
        for step, roles in self.steps:
            if isinstance(step, int):  # a memset of that many bytes
                if _memset_zero(pointers[roles[0]], step, handle):
                    return False
            elif not step.replay([pointers[r] for r in roles], handle):
                return False
        return True
