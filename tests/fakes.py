"""Stand-ins for the GPU: device arrays that are only descriptions, and a recording driver."""
import ctypes
from types import SimpleNamespace

from numba.core import types

from numbasparse.arrays import DeviceView
from numbasparse.cuda import launch


def view(shape, ptr, typestr="<f4"):
    return DeviceView(None, {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3})


def compiled_kernel(argument_types, handle=1234):
    """A stand-in for a dispatcher's compiled overload: what a fast launch reads of it."""
    return SimpleNamespace(_codelibrary=SimpleNamespace(get_cufunc=lambda: SimpleNamespace(handle=handle)),
                           argument_types=tuple(argument_types))


def stand_in_driver(monkeypatch):
    """Replaces the driver calls of :mod:`numbasparse.cuda.launch` and gives it an empty
    fast-launch table; ``calls`` holds (function, grid, block, stream, slot values), ``fast``
    is a fast launch of a kernel taking (int32[:], float32[:, :], float32[:, :], int64,
    float32) made from ``compiled`` (a launch records as many slots as ``fast`` has, so a
    stand-in kernel of another signature keeps its layout)."""
    calls = []

    def cu_launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        slots = [ctypes.c_uint64.from_address(pointers[i]).value for i in range(fast.n_slots)]
        calls.append((function, (gx, gy, gz), (bx, by, bz), stream, slots))
        return (0,)

    def cu_memset_d8_async(pointer, value, n_bytes, stream):
        calls.append(("memset", pointer, value, n_bytes, stream))
        return (0,)

    monkeypatch.setattr(launch, "_driver", lambda: (cu_launch_kernel, cu_memset_d8_async))
    monkeypatch.setattr(launch, "one_device", lambda: True)  # one stand-in GPU, also on a host with several
    monkeypatch.setattr(launch, "_fast_launch", {})
    monkeypatch.setattr(launch, "_registered", {})
    compiled = compiled_kernel((types.Array(types.int32, 1, "C"), types.Array(types.float32, 2, "C"),
                                types.Array(types.float32, 2, "C"), types.int64, types.float32))
    fast = launch._FastLaunch(compiled)
    fast.n_slots = len(fast.slots)
    return SimpleNamespace(calls=calls, fast=fast, compiled=compiled)


class DLPackOnly:
    """An array of another framework that speaks DLPack only (as JAX's do), wrapping ``array``."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()
