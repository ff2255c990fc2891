"""The launch layer: the only code that knows Numba's private kernel ABI and the CUDA driver.

Every kernel of every family is launched here, through one of two calls:

- :func:`run` launches ``kernel[grid, block, stream](*args)``.  Numba's own launch re-types every
  argument and wraps every array on each call (30-40 us from Python on an H100), so once
  Numba's launch has compiled a kernel for the arguments' types, ``run`` writes the arguments
  itself, in Numba's kernel ABI, into a parameter buffer kept per compiled signature of the
  kernel (the one whose arrays the arguments match) and calls the driver's ``cuLaunchKernel``
  (about 6 us, BENCHMARKS.md "Host time per call"); with several GPUs, one buffer per
  signature and GPU (each context loads its own module).  It falls back to Numba's launch on
  the simulator, when an argument does not match, for signatures that differ only in scalar
  types (Numba then chooses), and after a driver error (Numba's launch then sets up or
  reports what was wrong).
- :func:`run_bound` is ``run`` for launches repeated on one matrix: from a key's second call on,
  the arguments are packed once (a :class:`BoundLaunch`, kept in the matrix's cache) and a
  call writes only the data pointers of the operands that change.

Also here: compile-once kernel factories (:func:`kernel_factory`, the one cache of compiled
kernels), device addresses and their alignment, stream handles, the driver's memset, and the
hook through which :mod:`numbasparse.replay` observes what a call issued.
"""
import contextlib
import functools
import inspect
import sys
import threading
import weakref

import numpy as np
from numba import cuda

from .device import current_gpu, one_device

#: Driver errors in a row after which a kernel's fast launch stays off (one error, e.g. from a
#: thread with no current context, only sends that call through Numba's launch).
FAST_LAUNCH_FAILURES = 3
#: The driver's error for a thread with no current context, which Numba's launch then sets up.
CUDA_ERROR_INVALID_CONTEXT = 201
#: The widest vector access is 4 float64: 32 bytes.
MAX_ALIGNMENT = 32
#: Held while one call issues launches that share scratch between them (the fused SDDMM->SpMM
#: kernel and its merge; a replayed call's steps), so that another thread's call on the same
#: stream cannot come between them.
ISSUE_LOCK = threading.RLock()


def kernel_factory(factory):
    """Decorator of a compile-once kernel factory: one dispatcher per configuration (the
    factory's arguments, defaults filled in, so that every way of passing them gives the same
    kernel), made on first use and kept for the process (the fast launch keeps a parameter
    buffer per compiled signature of it).  A kernel it makes keeps what it compiles on disk
    (:class:`KernelFiles`), so the next process loads instead of compiling."""
    name = f"{factory.__module__.rsplit('.', 1)[-1]}.{factory.__name__}"
    signature = inspect.signature(factory)
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in signature.parameters.values()):
        raise TypeError(f"kernel factory {name} may take positional-or-keyword parameters only")
    n_params = len(signature.parameters)

    @functools.lru_cache(maxsize=None)
    def make_once(*args):
        made = factory(*args)
        if _is_kernel(made):
            constants = "".join(_module_constants(sys.modules[m]) for m in (factory.__module__, *_SHARED_MODULES))
            options = sorted((k, v) for k, v in made.targetoptions.items() if isinstance(v, (bool, int, float, str)))
            made._cache = KernelFiles(name, repr((args, options, constants)))
        return made

    @functools.wraps(factory)
    def make(*args, **kwargs):
        if not kwargs and len(args) == n_params:  # every argument given: no binding (calls run this)
            return make_once(*args)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return make_once(*bound.args)

    make.cache_clear = make_once.cache_clear
    make.cache_info = make_once.cache_info
    return make


#: Modules whose constants every kernel may compile in (besides its own family module's).
_SHARED_MODULES = ("numbasparse.cuda.intrinsics", "numbasparse.cuda.reductions", "numbasparse.cuda.device",
                   "numbasparse.reductions")


def _module_constants(module):
    """A hash of a module's plain constants (numbers, strings, tuples, dataclass instances): its
    kernels read them as compile-time constants, so a kernel file made with other values (a test
    or a tool that changed one) must not be loaded."""
    import dataclasses
    import hashlib

    plain = (bool, int, float, str, tuple)
    items = [f"{name}={value!r}" for name, value in sorted(vars(module).items()) if not name.startswith("__")
             and (isinstance(value, plain) or dataclasses.is_dataclass(value) and not isinstance(value, type))]
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


def _is_kernel(made):
    """True for a kernel dispatcher on a real GPU (not a device function, not the simulator)."""
    from numba.cuda import config

    return (not config.ENABLE_CUDASIM and hasattr(made, "_cache") and hasattr(made, "targetoptions")
            and not made.targetoptions.get("device", False))


# Compiled kernels on disk ------------------------------------------------------------------

#: What the kernel files did in this process: loaded, stored (compiled here and written) and
#: missed (compiled here because no intact file was found).
kernel_file_counts = {"loaded": 0, "stored": 0, "missed": 0}


class KernelFiles:
    """The on-disk cache of one kernel dispatcher's compiled signatures, in numbasparse's cache
    directory (:mod:`numbasparse.disk`, ``kernels/``), plugged into Numba's dispatcher as its
    ``_cache`` (the hook through which ``cache=True`` loads and saves).

    Numba's own ``cache=True`` cannot serve these kernels: its key hashes the pickled closure
    cells, and a factory's kernel closes over device functions whose pickles carry a per-process
    UUID, so a new process never finds its entry.  This key names the factory and its arguments
    instead, with the signature, the GPU's compute capability and CUDA runtime (Numba's
    ``magic_tuple``), the compiler's versions and a hash of numbasparse's sources; the payload
    is what Numba's own CUDA cache stores (the kernel's reduced state: PTX and cubin)."""

    def __init__(self, name, config):
        self.name, self.config = name, config

    def key(self, sig, target_context):
        from numba.cuda.core import sigutils

        toolchain = _toolchain()
        if toolchain is None:  # numbasparse's sources changed since this process imported them
            return None
        argtypes = sigutils.normalize_signature(sig)[0]
        return repr((self.name, self.config, tuple(str(t) for t in argtypes),
                     target_context.codegen().magic_tuple(), toolchain))

    def load_overload(self, sig, target_context):
        """The compiled kernel of ``sig`` from disk, or None (Numba then compiles it)."""
        from .. import disk

        # (Numba's own cache refreshes the target context first: its typing registries, 0.3 s in a
        # new process, which a compiled kernel does not need; a miss compiles, which refreshes it.)
        key = self.key(sig, target_context)
        payload = disk.load("kernels", self.name, key) if key is not None else None
        if payload is None:
            kernel_file_counts["missed"] += 1
            return None
        try:
            import pickle

            from numba.cuda import utils
            from numba.cuda.core import sigutils
            from numba.cuda.dispatcher import _Kernel

            with utils.numba_target_override():  # as Numba's own CUDA cache loads
                kernel = _Kernel._rebuild(**pickle.loads(payload))
            if tuple(kernel.argument_types) != tuple(sigutils.normalize_signature(sig)[0]):
                raise ValueError("signature differs")
        except Exception as exc:  # noqa: BLE001 (an unreadable entry is a miss: compile, then overwrite it)
            disk.log.debug("ignoring kernel file of %s: %s", self.name, exc)
            kernel_file_counts["missed"] += 1
            return None
        kernel_file_counts["loaded"] += 1
        return kernel

    def save_overload(self, sig, kernel):
        """Write the kernel Numba just compiled (and bound: its cubin exists) for ``sig``."""
        from numba.cuda.serialize import dumps

        from .. import disk

        try:
            payload = dumps(kernel._reduce_states())
        except Exception as exc:  # noqa: BLE001 (not serializable: stay in memory only)
            disk.log.debug("cannot serialize %s: %s", self.name, exc)
            return
        key = self.key(sig, kernel.target_context)
        if key is not None and disk.store("kernels", self.name, key, payload):
            kernel_file_counts["stored"] += 1

    # The rest of Numba's cache interface
    cache_path = property(lambda self: None)

    def enable(self):
        pass

    def disable(self):
        pass

    def flush(self):
        pass


def _source_files():
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent
    return package, sorted(package.rglob("*.py"))


def _source_stamps():
    """(path, mtime, size) of numbasparse's sources."""
    _, files = _source_files()
    stamps = []
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            return None
        stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
    return stamps


#: The sources as this process imported them: a kernel is compiled from what was imported, so
#: kernel files are neither read nor written once the files on disk differ (an upgrade or an
#: edit while the process runs).
_IMPORTED_SOURCES = _source_stamps()


def _toolchain():
    """Versions of what turns a kernel's Python into a cubin and a hash of numbasparse's sources
    (any change to the library makes new entries: stale ones are never read); None when the
    sources on disk are no longer those this process imported (then nothing is cached)."""
    stamps = _source_stamps()
    if stamps is None or stamps != _IMPORTED_SOURCES:
        return None
    return _toolchain_of_imported()


@functools.lru_cache(maxsize=None)
def _toolchain_of_imported():
    import hashlib
    import importlib.metadata

    from numba.cuda.core import config

    versions = []
    for dist in ("numba", "numba-cuda", "llvmlite", "cuda-bindings"):
        try:
            versions.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist}=?")
    package, files = _source_files()
    sources = hashlib.sha256()
    try:
        for path in files:
            sources.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    except OSError:
        return None
    return (*versions, f"opt={config.OPT}", sources.hexdigest()[:24])


# Observing a call ---------------------------------------------------------------------------

_observer = threading.local()


@contextlib.contextmanager
def observing(observer):
    """Report every GPU operation issued in this thread inside the ``with`` block to
    ``observer``: ``observer.launch(bound, arrays)`` for a bound launch (``bound`` None when it
    was not launched bound), ``observer.unbound()`` for a launch through :func:`run`,
    ``observer.memset(array, n_bytes)`` for :func:`zero`, ``observer.intermediate(array)``
    for an intermediate array of the call (:func:`intermediate`)."""
    previous = getattr(_observer, "current", None)
    _observer.current = observer
    try:
        yield observer
    finally:
        _observer.current = previous


def intermediate(array):
    """Tell the observer of this thread's GPU operations (if any) that ``array`` (a device
    array, C-contiguous) is an intermediate of the call, made for it and dropped after it: a
    replay allocates a new one of its size (:mod:`numbasparse.replay`)."""
    observer = getattr(_observer, "current", None)
    if observer is not None:
        observer.intermediate(array)


# Launching ----------------------------------------------------------------------------------

#: dispatcher (and GPU, with several) -> its compiled overloads' _FastLaunch, in compile order
#: (:func:`_register`)
_fast_launch = {}
_registered = {}  # the same keys -> how many overloads the dispatcher had when last registered
_REGISTERING = threading.Lock()  # one thread at a time adds a dispatcher's new overloads


def _fast_key(kernel):
    return kernel if one_device() else (kernel, current_gpu())


def run(kernel, grid, block, stream, *args):
    """Launch the Numba dispatcher ``kernel`` on ``grid`` x ``block`` threads in ``stream``."""
    observer = getattr(_observer, "current", None)
    if observer is not None:
        observer.unbound()
    entry = _fast_launch.get(_fast_key(kernel), ())
    for fast in entry:
        if fast.launch(grid, block, stream, args):
            return
    kernel[grid, block, stream](*args)
    if _driver() is not None and len(kernel.overloads) != _registered.get(_fast_key(kernel)):
        _register(kernel)


def _register(kernel):
    """Give each compiled overload of the dispatcher ``kernel`` its fast launch on the current
    GPU, keeping those it has (and their failure counts)."""
    key = _fast_key(kernel)  # keyed again: Numba's launch gives a thread with no context the current GPU's
    with _REGISTERING:
        known = {fast.signature: fast for fast in _fast_launch.get(key, ())}
        overloads = list(kernel.overloads.values())
        _registered[key] = len(overloads)
        arrays = [_array_kinds(compiled.argument_types) for compiled in overloads]
        # pack tells overloads apart by their arrays only (scalars match loosely): those alike are Numba's to pick
        _fast_launch[key] = tuple(known.get(tuple(compiled.argument_types)) or _FastLaunch(compiled)
                                  for compiled, kinds in zip(overloads, arrays) if arrays.count(kinds) == 1)


def _array_kinds(argument_types):
    """Per argument, (dtype, ndim) of a C-contiguous array, None for anything else."""
    from numba.core import types

    return tuple((ty.dtype, ty.ndim) if isinstance(ty, types.Array) and ty.layout == "C" else None
                 for ty in argument_types)


def run_bound(cache, key, kernel, grid, block, stream, args, variable):
    """``run(kernel, grid, block, stream, *args)`` for a launch repeated on one matrix: from the
    second call with ``key`` on, through a :class:`BoundLaunch` kept in the ``bound`` section of
    ``cache`` (a :class:`numbasparse.cache.MatrixCache`; a matrix made for one call never pays
    for binding).  ``variable``: the indices of the arguments that change from call to call."""
    bound = cache.get("bound", key, False)  # False: never seen; None: seen once, not bound
    arrays = [args[i] for i in variable]
    launched = bound(stream, *arrays) if bound else False
    observer = getattr(_observer, "current", None)
    if observer is not None:
        observer.launch(bound if launched else None, arrays)
    if launched:
        return
    if launched is None:  # the driver refused: one error counted, Numba's launch sets up or raises
        kernel[grid, block, stream](*args)
        return
    run(kernel, grid, block, stream, *args)
    cache.put("bound", key, bind(kernel, grid, block, args, variable) if bound is None else None)


def bind(kernel, grid, block, args, variable):
    """A :class:`BoundLaunch` of ``kernel[grid, block](*args)`` whose arguments at the indices
    ``variable`` change from call to call, made from the fast launch of the compiled overload
    that packs ``args``; None where there is none (the simulator, an overload compiled since
    the kernel's last launch through :func:`run` on the current GPU, overloads that differ only
    in scalar types, arguments it cannot pack)."""
    for fast in _fast_launch.get(_fast_key(kernel), ()):
        values = fast.pack(args) if fast.enabled else None
        if values is not None:
            return BoundLaunch(fast, grid, block, values, variable, args)
    return None


def fast_launch_available():
    """Whether launches can go to the driver directly (so be bound and replayed): not on the
    simulator, nor without cuda.bindings."""
    return _driver() is not None


@functools.lru_cache(maxsize=None)
def _driver():
    """The driver's cuLaunchKernel and cuMemsetD8Async (cuda.bindings, which numba-cuda
    depends on), or None on the simulator."""
    from numba.cuda import config

    if config.ENABLE_CUDASIM:
        return None
    try:
        from cuda.bindings import driver
    except Exception:  # no driver or an older binding: keep Numba's launch (which will say why)
        return None
    return driver.cuLaunchKernel, driver.cuMemsetD8Async


class _FastLaunch:
    """The parameter buffer of one compiled kernel (one overload of a dispatcher, whose
    argument types are ``signature``).  Numba's ABI passes an array as the fields meminfo,
    parent, nitems, itemsize, data pointer, shape..., strides... (one kernel parameter each)
    and a scalar as its C value; every parameter here gets an 8-byte slot, and the driver gets
    the slots' addresses (``kernelParams``)."""

    def __init__(self, compiled):
        from numba.core import types
        from numba.np import numpy_support

        # numba-cuda loads modules as libraries: this is a CUkernel, which cuLaunchKernel takes
        # in place of a CUfunction (CUDA 12+) and launches in the current context; it is the
        # current GPU's, and with several GPUs a call elsewhere is refused (Numba's launch then).
        self.function = int(compiled._codelibrary.get_cufunc().handle)
        self.gpu = None if one_device() else current_gpu()
        self.signature = tuple(compiled.argument_types)
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
        missing, e.g. a context on a new thread, or raises).  After FAST_LAUNCH_FAILURES errors
        in a row the fast path is off for good."""
        if self.gpu is not None and current_gpu() != self.gpu:
            return False
        gx, gy, gz = grid
        bx, by, bz = block
        (err,) = _driver()[0](self.function, gx, gy, gz, bx, by, bz, 0, handle, params_address, 0)
        if err:
            if int(err) != CUDA_ERROR_INVALID_CONTEXT:  # (a new thread's first launch: Numba sets its context)
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
    what was wrong, without a second driver call).  It holds the fixed arguments (the matrix's
    arrays, scratch), so the memory its pointers name lives as long as it does."""

    def __init__(self, fast, grid, block, values, variable, args):
        self.fast, self.grid, self.block = fast, _dim3(grid), _dim3(block)
        self.slots, self.params_address = _parameter_buffer(values)
        offsets = fast.slot_offsets()
        # (slot of the data pointer, (dtype, ndim), shape) per variable argument
        self.variable = [(offsets[i] + 4, fast.kinds[i][1], list(args[i].shape)) for i in variable]
        self.pointer_slots = tuple(slot for slot, _, _ in self.variable)
        self.fixed = [a for i, a in enumerate(args) if i not in variable]
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

    def replay(self, pointers, roles, handle):
        """Launch with the ``variable`` arguments' data pointers ``pointers[r]`` for r in
        ``roles`` (one per variable argument, no check: the caller has checked the operands) in
        the stream of driver handle ``handle``.  True when launched."""
        slots = self.slots
        with self.lock:
            for slot, role in zip(self.pointer_slots, roles):
                slots[slot] = pointers[role]
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


def _dim3(dims):
    return (tuple(dims) + (1, 1))[:3] if isinstance(dims, (tuple, list)) else (dims, 1, 1)


def _float_bits(bits):
    import struct

    pack, unpack = (struct.Struct("<f").pack, struct.Struct("<I").unpack) if bits == 32 else \
        (struct.Struct("<d").pack, struct.Struct("<Q").unpack)
    return lambda x: unpack(pack(x))[0]


# Device arrays in the kernel ABI ------------------------------------------------------------

def device_pointer(array):
    """Device address of a Numba device array or a DeviceView; None for anything else."""
    pointer = getattr(array, "ptr", None)  # a DeviceView
    if pointer is not None:
        return pointer
    if hasattr(array, "device_ctypes_pointer"):
        return array.device_ctypes_pointer.value or 0
    return None


def alignment(array):
    """The largest power of two up to MAX_ALIGNMENT bytes that ``array``'s base address is a
    multiple of (any, on the simulator)."""
    address = device_pointer(array)
    if address is None:
        interface = getattr(array, "__cuda_array_interface__", None)
        address = interface["data"][0] if interface else 0
    size = MAX_ALIGNMENT
    while address % size:
        size //= 2
    return size


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
        pointer = device_pointer(array)
        abi = None
        if pointer is not None and array.is_c_contiguous():
            abi = abi_of(pointer, array.shape, array.strides, array.dtype, array.size)
        _numba_array_abi[array] = abi
    return abi


def abi_of(pointer, shape, strides, dtype, size):
    """The kernel_abi description of a C-contiguous array of ``size`` elements."""
    return (dtype, len(shape)), [0, 0, size, dtype.itemsize, pointer, *shape, *strides]


# Streams ------------------------------------------------------------------------------------

#: Streams remembered (callers making a new stream per call must not grow the maps without end).
MAX_STREAMS = 64
_stream_handles = {}
_external_streams = {}


def stream_handle(stream):
    """The driver handle of a Numba stream (0: the default stream), read once per stream."""
    if not stream:
        return 0
    if not hasattr(stream, "handle"):  # the simulator's streams
        return id(stream)
    entry = _stream_handles.get(id(stream))
    if entry is not None and entry[0] is stream:
        return entry[1]
    if len(_stream_handles) > MAX_STREAMS:
        _stream_handles.clear()
    handle = getattr(stream.handle, "value", stream.handle)  # a ctypes pointer or a binding's handle
    handle = int(handle or 0)
    _stream_handles[id(stream)] = (stream, handle)  # holding the stream keeps its id unique
    return handle


def external_stream(handle):
    """The Numba stream of a foreign stream's driver handle (0: the default stream), one object
    per handle (making one costs ~20 us)."""
    if not handle:
        return 0
    stream = _external_streams.get(handle)
    if stream is None:
        if len(_external_streams) > MAX_STREAMS:
            _external_streams.clear()
        stream = _external_streams[handle] = cuda.external_stream(handle)
    return stream


# Memset -------------------------------------------------------------------------------------

def memset_zero(pointer, n_bytes, handle):
    """cuMemsetD8Async of ``n_bytes`` zero bytes at ``pointer`` in stream ``handle``: the
    driver's error code (0: done)."""
    (err,) = _driver()[1](pointer, 0, n_bytes, handle)
    return err


def zero(array, stream=0):
    """Set a C-contiguous device array to zero bytes in ``stream`` (cuMemsetD8Async: no
    kernel launch).  Returns False, doing nothing, where the driver call is unavailable
    (the simulator)."""
    pointer = device_pointer(array)
    if not pointer or _driver() is None:
        return False
    n_bytes = array.size * array.dtype.itemsize
    err = memset_zero(pointer, n_bytes, stream_handle(stream))
    if err:
        raise RuntimeError(f"cuMemsetD8Async failed with CUDA error {err}")
    observer = getattr(_observer, "current", None)
    if observer is not None:
        observer.memset(array, n_bytes)
    return True
