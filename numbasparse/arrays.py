"""Dense operands: NumPy arrays on the host, CUDA arrays of any framework on the device.

A device operand is viewed without a copy through ``__cuda_array_interface__`` and the
result is allocated by the operand's own framework (CuPy in, CuPy out; PyTorch in,
PyTorch out), which is imported only when such an array is passed.  Kernels are launched
on the framework's current stream, so they are ordered with the caller's other work.
"""
from dataclasses import dataclass

import numpy as np

from .csr import check_value_dtype


class DeviceView:
    """A foreign CUDA array (CuPy, PyTorch, ...) seen through ``__cuda_array_interface__``:
    pointer, shape, strides and dtype, no copy.  Cheaper to make than a Numba device array;
    kernels accept it directly (it exports the interface again)."""

    __slots__ = ("owner", "ptr", "shape", "strides", "dtype", "ndim", "size", "nbytes", "_contiguous")

    def __init__(self, owner, interface):
        self.owner = owner  # keeps the memory alive
        self.ptr = interface["data"][0] or 0
        self.shape = tuple(interface["shape"])
        self.dtype = np.dtype(interface["typestr"])
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape))
        self.nbytes = self.size * self.dtype.itemsize
        c_strides = tuple(int(np.prod(self.shape[i + 1:])) * self.dtype.itemsize for i in range(self.ndim))
        strides = interface.get("strides")
        self.strides = c_strides if strides is None else tuple(strides)
        self._contiguous = self.size <= 1 or all(
            st == cs for st, cs, n in zip(self.strides, c_strides, self.shape) if n > 1)

    def is_c_contiguous(self):
        return self._contiguous

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str,
                "data": (self.ptr, False), "version": 3, "stream": None}


@dataclass
class Dense:
    """A validated dense operand."""

    name: str
    framework: str          # "numpy", "torch-cpu", "numba", "cupy", "torch", "cai"
    array: object           # NumPy array (host), Numba device array or DeviceView (device), no copy
    original: object

    @property
    def on_device(self):
        return self.framework in ("numba", "cupy", "torch", "cai")

    @property
    def dtype(self):
        return np.dtype(self.array.dtype)

    @property
    def shape(self):
        return tuple(self.array.shape)


def _framework(x):
    from numba.cuda.cudadrv import devicearray

    if isinstance(x, np.ndarray):
        return "numpy"
    if devicearray.is_cuda_ndarray(x):
        return "numba"
    module = type(x).__module__.split(".")[0]
    if hasattr(x, "__cuda_array_interface__"):
        return module if module in ("cupy", "torch") else "cai"
    if module == "torch" and hasattr(x, "numpy"):
        return "torch-cpu"
    return None


def dense(x, name, ndim):
    """Validate ``x`` as a ``ndim``-D float32/float64 operand named ``name``."""
    framework = _framework(x)
    if framework is None:
        raise TypeError(
            f"{name} must be a NumPy array or a CUDA array (__cuda_array_interface__: Numba, "
            f"CuPy, PyTorch), got {type(x).__module__}.{type(x).__name__}"
        )
    if framework == "torch-cpu":
        if x.requires_grad:
            x = x.detach()
        array = x.numpy()
    elif framework in ("cupy", "torch", "cai"):
        if framework == "torch" and x.requires_grad:
            x = x.detach()
        array = DeviceView(x, x.__cuda_array_interface__)
    else:
        array = x
    if array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(array.shape)}")
    check_value_dtype(array.dtype, name)
    if framework in ("numpy", "torch-cpu"):
        array = np.ascontiguousarray(array)
    elif not array.is_c_contiguous():
        raise ValueError(
            f"{name} must be C-contiguous (row-major) on the device; make a contiguous copy "
            f"first (torch: .contiguous(), CuPy: cupy.ascontiguousarray)"
        )
    return Dense(name, framework, array, x)


def same_place(*operands):
    """Raise TypeError unless the operands all live on the host or all on the device."""
    places = {op.on_device for op in operands}
    if len(places) > 1:
        names = ", ".join(op.name for op in operands)
        raise TypeError(f"{names} must all be host (NumPy) arrays or all CUDA arrays")


def stream_of(op):
    """The Numba stream to launch on so that work is ordered after ``op``'s producer."""
    from numba import cuda

    if op.framework == "torch":
        import torch

        handle = torch.cuda.current_stream(op.original.device).cuda_stream
    elif op.framework == "cupy":
        import cupy

        handle = cupy.cuda.get_current_stream().ptr
    else:
        return 0  # Numba's default stream
    return cuda.external_stream(handle) if handle else 0


def empty_like_framework(op, shape, dtype):
    """(result object of ``op``'s framework, view the kernels write) for a new device array."""
    from numba import cuda

    if op.framework == "torch":
        import torch

        torch_dtype = torch.float32 if np.dtype(dtype) == np.float32 else torch.float64
        result = torch.empty(shape, dtype=torch_dtype, device=op.original.device)
        return result, DeviceView(result, result.__cuda_array_interface__)
    if op.framework == "cupy":
        import cupy

        with cupy.cuda.Device(op.original.device.id):
            result = cupy.empty(shape, dtype=dtype)
        return result, DeviceView(result, result.__cuda_array_interface__)
    result = cuda.device_array(shape, dtype=dtype)
    return result, result


def host_result(op, array):
    """Wrap a NumPy result for a host operand's framework."""
    if op.framework == "torch-cpu":
        import torch

        return torch.from_numpy(array)
    return array
