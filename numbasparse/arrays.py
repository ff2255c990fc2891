"""Dense operands: NumPy arrays on the host, CUDA arrays of any framework on the device.

A device operand is viewed without a copy through ``__cuda_array_interface__`` and the
result is allocated by the operand's own framework (CuPy in, CuPy out; PyTorch in,
PyTorch out), which is imported only when such an array is passed.  Other frameworks' arrays
(JAX, TensorFlow, ...) come in without a copy through DLPack (:func:`from_dlpack`): host ones as
NumPy arrays, CUDA ones as torch tensors (or CuPy arrays without torch), and the results are
of that framework.  Kernels are launched
on the framework's current stream, so they are ordered with the caller's other work.
"""
import functools
import math
import sys
from dataclasses import dataclass

import numpy as np

from .cuda.intrinsics import MAX_ROW_BYTES
from .cuda.launch import MAX_ALIGNMENT, abi_of, external_stream
from .dtypes import check_value_dtype, is_half, storage_dtype


class DeviceView:
    """A foreign CUDA array (CuPy, PyTorch, ...) seen through ``__cuda_array_interface__``:
    pointer, shape, strides and dtype, no copy.  Cheaper to make than a Numba device array;
    kernels accept it directly (it exports the interface again, and ``abi`` is how the fast
    launch passes it: :func:`numbasparse.cuda.launch.kernel_abi`, None when not C-contiguous)."""

    __slots__ = ("owner", "ptr", "shape", "strides", "dtype", "logical", "ndim", "size", "nbytes", "_contiguous",
                 "abi")

    def __init__(self, owner, interface):
        self.owner = owner  # keeps the memory alive
        shape = tuple(interface["shape"])
        dtype = np.dtype(interface["typestr"])
        strides = interface.get("strides")
        self._set(interface["data"][0] or 0, shape, None if strides is None else tuple(strides), dtype)

    @classmethod
    def of_torch(cls, tensor):
        """The view of a CUDA tensor from its attributes (torch builds its
        ``__cuda_array_interface__`` in Python: several times slower)."""
        dtype = _torch_dtypes().get(tensor.dtype)
        if dtype is None:  # not a value dtype: let the interface name the dtype for the error
            return cls(tensor, tensor.__cuda_array_interface__)
        view = object.__new__(cls)
        view.owner = tensor
        if tensor.is_contiguous():  # torch's test, like ours, ignores the strides of size-1 dims
            view._set(tensor.data_ptr(), tuple(tensor.shape), None, dtype)
        else:
            itemsize = dtype.itemsize
            view._set(tensor.data_ptr(), tuple(tensor.shape), tuple(st * itemsize for st in tensor.stride()), dtype)
        return view

    def _set(self, ptr, shape, strides, dtype):
        """Fill the fields; ``strides`` None means C-contiguous.  The kernels see a 16-bit float
        array as its uint16 bits (``dtype``); ``logical`` is the values' dtype."""
        self.ptr = ptr
        self.shape = shape
        self.logical = dtype
        dtype = storage_dtype(dtype)
        self.dtype = dtype
        self.ndim = len(shape)
        self.size, c_strides = _c_layout(shape, dtype.itemsize)
        self.nbytes = self.size * dtype.itemsize
        if strides is None:
            self.strides = c_strides
            self._contiguous = True
        else:
            self.strides = strides
            self._contiguous = self.size <= 1 or all(
                st == cs for st, cs, n in zip(strides, c_strides, shape) if n > 1)
        self.abi = abi_of(ptr, shape, self.strides, dtype, self.size) if self._contiguous else None

    def is_c_contiguous(self):
        return self._contiguous

    @property
    def __cuda_array_interface__(self):
        # strides None (C-contiguous, as the interface allows) rather than the explicit
        # C strides: numba-cuda 0.30 compares explicit strides with the itemsize in bits and
        # so types every strided export as layout "A" (slower code, and no fast launch).
        strides = None if self._contiguous else self.strides
        return {"shape": self.shape, "strides": strides, "typestr": self.dtype.str,
                "data": (self.ptr, False), "version": 3, "stream": None}


@functools.lru_cache(maxsize=256)
def _c_layout(shape, itemsize):
    """(element count, byte strides) of a C-contiguous array of ``shape`` (cached: views of
    the same shapes are made on every call)."""
    strides = []
    step = itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return math.prod(shape), tuple(reversed(strides))


_TORCH_DTYPES = {}  # torch dtype -> NumPy dtype, filled when torch is first seen
_TORCH_TENSOR = []  # [torch.Tensor, torch.strided], from then on


def _torch_dtypes():
    if not _TORCH_DTYPES:
        import torch

        _TORCH_DTYPES.update({torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
                              torch.float16: np.dtype(np.float16)})
        try:
            from .dtypes import bfloat16

            _TORCH_DTYPES[torch.bfloat16] = bfloat16()
        except TypeError:  # no ml_dtypes: bfloat16 tensors are refused by name
            pass
        _TORCH_TENSOR.extend((torch.Tensor, torch.strided))
    return _TORCH_DTYPES


def torch_dtype(dtype):
    """The torch dtype of NumPy value dtype ``dtype``."""
    return next(t for t, d in _torch_dtypes().items() if d == dtype)


def torch_signature(x):
    """(shape, dtype, device index, address modulo MAX_ALIGNMENT) of a C-contiguous CUDA
    ``torch.Tensor``, else None: what a replayed call (:mod:`numbasparse.replay`) needs to be
    unchanged about an operand.  (torch is looked up among the imported modules, never imported:
    a process's first call counts towards its replay like the others.)"""
    if not _TORCH_TENSOR:
        torch = sys.modules.get("torch")
        if torch is None or type(x) is not getattr(torch, "Tensor", None):  # (None: torch still importing)
            return None
        _torch_dtypes()
    if type(x) is not _TORCH_TENSOR[0] or not x.is_cuda or x.layout is not _TORCH_TENSOR[1] or not x.is_contiguous():
        return None
    return x.shape, x.dtype, x.get_device(), x.data_ptr() % MAX_ALIGNMENT


@dataclass
class Dense:
    """A validated dense operand."""

    name: str
    framework: str          # "numpy", "torch-cpu", "numba", "cupy", "torch", "cai"
    array: object           # NumPy array (host), Numba device array or DeviceView (device), no copy
    original: object
    value_dtype: np.dtype   # the values' (a 16-bit float's device ``array`` holds its uint16 bits)

    @property
    def on_device(self):
        return self.framework in ("numba", "cupy", "torch", "cai")

    @property
    def dtype(self):
        return self.value_dtype

    @property
    def shape(self):
        return tuple(self.array.shape)


def _framework(x):
    if isinstance(x, np.ndarray):
        return "numpy"
    module = type(x).__module__.split(".")[0]
    if module == "torch":  # asked first: torch builds __cuda_array_interface__ on every access
        if getattr(x, "is_cuda", False):
            return "torch"
        return "torch-cpu" if hasattr(x, "numpy") else None
    from numba.cuda.cudadrv import devicearray

    if devicearray.is_cuda_ndarray(x):
        return "numba"
    if hasattr(x, "__cuda_array_interface__"):
        return "cupy" if module == "cupy" else "cai"
    return None


def _check_torch(x, name):
    """TypeError naming ``name`` for a tensor the kernels cannot read: not on the CPU or a CUDA
    device (e.g. ``meta``: no data, and asking it for any would initialise CUDA), or of a dtype
    other than the value dtypes (float32, float64, float16, bfloat16)."""
    _torch_dtypes()  # (fills _TORCH_TENSOR)
    if x.layout is not _TORCH_TENSOR[1]:
        raise TypeError(f"{name} is a torch tensor of layout {x.layout}; dense operands must be strided tensors "
                        f"(sparse ones: .to_dense())")
    if not x.is_cuda and x.device.type != "cpu":
        raise TypeError(f"{name} is a torch tensor on the {x.device.type!r} device; numbasparse takes CPU or "
                        f"CUDA tensors")
    if x.dtype not in _torch_dtypes():
        hint = " (bfloat16 needs the ml_dtypes package)" if str(x.dtype) == "torch.bfloat16" else ""
        raise TypeError(f"{name} must have dtype float32, float64, float16 or bfloat16, got {x.dtype}{hint}")


#: DLPack device types (``__dlpack_device__()[0]``) numbasparse reads.
DLPACK_CPU, DLPACK_CUDA = 1, 2


def from_dlpack(x, name):
    """``x`` (an object with ``__dlpack__``) as a NumPy array (host) or a torch tensor / CuPy
    array (CUDA), sharing its memory; TypeError naming ``name`` for other devices."""
    device_type = int(x.__dlpack_device__()[0])
    if device_type == DLPACK_CPU:
        try:
            return np.from_dlpack(x)
        except (RuntimeError, BufferError, TypeError):  # a dtype NumPy does not know (bfloat16)
            try:
                import torch
            except ImportError:
                raise TypeError(f"{name} is a host DLPack array of a dtype NumPy cannot read (bfloat16?); "
                                f"reading it needs torch") from None
            return torch.from_dlpack(x)
    if device_type == DLPACK_CUDA:
        try:
            import torch

            return torch.from_dlpack(x)
        except (ImportError, RuntimeError):  # no torch, or a torch without CUDA
            pass
        try:
            import cupy
        except ImportError:
            raise TypeError(f"{name} is a CUDA DLPack array: reading it needs torch (with CUDA) or CuPy") from None
        return cupy.from_dlpack(x)
    raise TypeError(f"{name} is a DLPack array on device type {device_type}; numbasparse takes host (1) and "
                    f"CUDA (2) arrays")


def dlpack_only(x):
    """True for an array numbasparse reads through DLPack only (not NumPy, torch or CUDA-array-interface)."""
    return _framework(x) is None and hasattr(x, "__dlpack__")


def dense(x, name, ndim):
    """Validate ``x`` as a ``ndim``-D operand of a value dtype named ``name``: no copy on the
    device; on the host a C-contiguous array in native byte order (a copy where ``x`` is not)."""
    framework = _framework(x)
    if framework is None and hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        x = from_dlpack(x, name)
        framework = _framework(x)
    if framework is None:
        raise TypeError(
            f"{name} must be a NumPy array or a CUDA array (__cuda_array_interface__: Numba, "
            f"CuPy, PyTorch), got {type(x).__module__}.{type(x).__name__}"
        )
    if framework in ("torch", "torch-cpu"):
        _check_torch(x, name)
        if x.requires_grad:
            x = x.detach()
    if framework == "torch-cpu":
        array = torch_cpu_numpy(x)
    elif framework == "torch":
        array = DeviceView.of_torch(x)
    elif framework in ("cupy", "cai"):
        array = DeviceView(x, x.__cuda_array_interface__)
    elif framework == "numba" and not x.is_c_contiguous():
        # Numba's test counts the strides of size-1 axes (a broadcast row); the view's does not.
        # Its interface drops the strides of any stride-0 axis, so the view takes the array's own.
        array = DeviceView(x, {**x.__cuda_array_interface__, "strides": tuple(x.strides), "typestr": x.dtype})
    else:
        array = x
    if array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(array.shape)}")
    dtype = np.dtype(getattr(array, "logical", array.dtype))
    if framework in ("numpy", "torch-cpu") and dtype.kind == "f" and not dtype.isnative:
        array = array.astype(dtype.newbyteorder("="))  # the kernels read native floats: a copy
        dtype = array.dtype
    dtype = check_value_dtype(dtype, name)
    if framework == "numba" and is_half(dtype) and not isinstance(array, DeviceView):
        array = array.view(np.uint16)  # the kernels read 16-bit floats as their bits
    if ndim == 2 and array.shape[1] * array.dtype.itemsize >= MAX_ROW_BYTES:
        raise ValueError(f"{name} has rows of {array.shape[1] * array.dtype.itemsize} bytes; the kernels "
                         f"address rows shorter than {MAX_ROW_BYTES} bytes (2 GiB)")
    if framework in ("numpy", "torch-cpu"):
        array = c_strided(np.ascontiguousarray(array))
    elif not array.is_c_contiguous():
        raise ValueError(
            f"{name} must be C-contiguous (row-major) on the device; make a contiguous copy "
            f"first (torch: .contiguous(), CuPy: cupy.ascontiguousarray)"
        )
    return Dense(name, framework, array, x, dtype)


def c_strided(array):
    """C-contiguous host ``array`` with the C strides (the same memory, no copy): NumPy counts an
    array contiguous whatever the strides of its size-1 dimensions (a broadcast row: stride 0),
    which Numba's copy to the device does not take."""
    size, strides = _c_layout(array.shape, array.itemsize)
    if array.strides == strides:
        return array
    return np.lib.stride_tricks.as_strided(array, strides=strides, writeable=array.flags.writeable)


def overlaps(a, b):
    """True when two arrays (both host, or both device) share memory."""
    a, b = (getattr(x, "_ary", x) for x in (a, b))  # the simulator's device arrays wrap NumPy arrays
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.shares_memory(a, b)
    (pa, na), (pb, nb) = _extent(a), _extent(b)
    return na > 0 and nb > 0 and pa < pb + nb and pb < pa + na


def _extent(array):
    """(device address, bytes) of a device array."""
    interface = array.__cuda_array_interface__
    size = math.prod(interface["shape"]) * np.dtype(interface["typestr"]).itemsize
    return interface["data"][0] or 0, size


def same_place(*operands):
    """Raise TypeError unless the operands all live on the host or all on the device."""
    places = {op.on_device for op in operands}
    if len(places) > 1:
        names = ", ".join(op.name for op in operands)
        raise TypeError(f"{names} must all be host (NumPy) arrays or all CUDA arrays")


_UNSET = object()
_raw_stream = _UNSET  # torch's raw current-stream getter (or None), looked up once: every replayed call asks


def torch_stream_handle(device):
    """The raw handle of torch's current stream on ``device`` (a torch.device or an index; the
    public API builds a Stream object each time; the raw getter, when torch has it, is several
    times cheaper)."""
    global _raw_stream
    if _raw_stream is _UNSET:
        import torch

        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    index = device if isinstance(device, int) else device.index
    if _raw_stream is not None and index is not None:
        return _raw_stream(index)
    import torch

    return torch.cuda.current_stream(device).cuda_stream


def stream_of(op):
    """The Numba stream to launch on so that work is ordered after ``op``'s producer: the
    framework's current stream (Numba's default stream for Numba arrays)."""
    if op.framework == "torch":
        return external_stream(torch_stream_handle(op.original.device))
    if op.framework == "cupy":
        import cupy

        return external_stream(cupy.cuda.get_current_stream().ptr)
    return 0


def empty_like_framework(op, shape, dtype):
    """(result object of ``op``'s framework, view the kernels write) for a new device array
    (MemoryError naming its size when the GPU's memory is exhausted)."""
    try:
        return _empty_like_framework(op, shape, dtype)
    except Exception as error:  # (no context manager here: this runs on every full call)
        from .cuda.device import out_of_memory

        raise out_of_memory(error, f"an output of shape {tuple(shape)}",
                            math.prod(shape) * np.dtype(dtype).itemsize) from error


def _empty_like_framework(op, shape, dtype):
    from numba import cuda

    if op.framework == "torch":
        tensor = op.original
        if np.dtype(dtype) == op.dtype:  # new_empty without dtype= is a third cheaper
            result = tensor.new_empty(shape)
        else:
            result = tensor.new_empty(shape, dtype=torch_dtype(dtype))
        return result, DeviceView.of_torch(result)  # on the operand's device
    if op.framework == "cupy":
        import cupy

        with cupy.cuda.Device(op.original.device.id):
            result = cupy.empty(shape, dtype=dtype)
        return result, DeviceView(result, result.__cuda_array_interface__)
    if is_half(dtype):  # a Numba array of the operand's 16-bit dtype, seen as its bits
        result = cuda.device_array(shape, dtype=dtype)
        return result, result.view(np.uint16)
    result = cuda.device_array(shape, dtype=dtype)
    return result, result


def device_matmul(op):
    """``matmul(a, b)`` on the GPU for CUDA arrays of ``op``'s framework, with cuBLAS: torch's
    (autocast off, so the product keeps the operands' dtype) or CuPy's (on the arrays' GPU);
    None for Numba and other CUDA arrays (numbasparse calls no BLAS of its own)."""
    if op.framework == "torch":
        return _torch_matmul
    if op.framework == "cupy":
        return _cupy_matmul
    return None


def _torch_matmul(a, b):
    import torch

    if a.requires_grad or b.requires_grad:  # (numbasparse's functions are not autograd operations)
        a, b = a.detach(), b.detach()
    if torch.is_autocast_enabled("cuda"):
        with torch.autocast("cuda", enabled=False):
            return torch.matmul(a, b)
    return torch.matmul(a, b)


def _cupy_matmul(a, b):
    import cupy

    with cupy.cuda.Device(a.device.id):
        return cupy.matmul(a, b)


def torch_cpu_numpy(t):
    """A CPU tensor of a value dtype as a NumPy array sharing its memory (a bfloat16 one through its
    bits: torch has no NumPy bfloat16)."""
    if t.dtype.itemsize == 2 and t.is_floating_point():
        import torch

        return t.view(torch.int16).numpy().view(_torch_dtypes()[t.dtype])
    return t.numpy()


def device_storage(array):
    """A host array as the kernels read it once uploaded: 16-bit floats as their uint16 bits."""
    return array.view(np.uint16) if is_half(array.dtype) else array


def to_device(array):
    """A Numba device copy of a host array in its own dtype; a bfloat16 one is uploaded as its
    bits and viewed back (Numba's upload takes no buffer of ml_dtypes' bfloat16)."""
    from numba import cuda

    if is_half(array.dtype):
        return cuda.to_device(array.view(np.uint16)).view(array.dtype)
    return cuda.to_device(array)


def host_values(array, dtype):
    """A downloaded device array of storage dtype as values of ``dtype`` (a view)."""
    return array.view(dtype) if is_half(dtype) else array


def host_result(op, array):
    """Wrap a NumPy result for a host operand's framework."""
    if op.framework == "torch-cpu":
        import torch

        if array.dtype.name == "bfloat16":  # torch reads no ml_dtypes array: its bits, then a view
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)
    return array
