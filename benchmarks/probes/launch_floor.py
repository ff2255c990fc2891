"""How long does one kernel launch take from Python on this machine?  Run on a GPU machine:
    python benchmarks/probes/launch_floor.py
Per-call microseconds (back to back, 2000 calls) of an empty Numba kernel launched through
Numba, through ``launch.run``, of a bare cuLaunchKernel (cuda.bindings and ctypes) and
cuMemsetD8Async, and of a tiny torch op: the floor under any host path.  Then the same kind of
calls timed as the benchmark's ``ms`` column times one call (between two events on an idle GPU,
median of 200), from nothing between the events to ``ns.spmm`` and ``torch.sparse.mm`` on a
16-row graph: the part of a small call's event time that no kernel can remove."""
import ctypes

import numpy as np
import torch
from numba import cuda

import numbasparse as ns
from numbasparse import graphs
from numbasparse.bench.baselines import torch_csr
from numbasparse.bench.timing import host_us_per_call, time_cuda
from numbasparse.cuda import launch


@cuda.jit
def empty(x):
    pass


@cuda.jit
def many(a, b, c, d, e, n):
    pass


x = cuda.device_array(16, np.float32)
arrays = [cuda.device_array((16, 16), np.float32) for _ in range(5)]
launch.run(empty, 1, 32, 0, x)
launch.run(many, 1, 32, 0, *arrays, 3)
entry = launch._fast_launch[empty][0]
_, memset = launch._driver()
handle = entry.function
entry.slots[:] = launch.kernel_abi(x)[1]
t = torch.zeros(16, device="cuda")
rows = {
    "numba empty[1, 32](x)": lambda: empty[1, 32](x),
    "launch.run(empty, x)": lambda: launch.run(empty, 1, 32, 0, x),
    "launch.run(many, 5 arrays + int)": lambda: launch.run(many, 1, 32, 0, *arrays, 3),
    "cuMemsetD8Async 64 B": lambda: memset(launch.device_pointer(x), 0, 64, 0),
    "torch t.add_(1)": lambda: t.add_(1),
    "torch.empty(1000, 64)": lambda: torch.empty(1000, 64, device="cuda"),
    "numba event record": lambda: cuda.event().record(),
    "torch event record": lambda: torch.cuda.Event(enable_timing=True).record(),
}
try:
    from cuda.bindings import driver

    ptr = entry.params_address
    rows["cuda.bindings cuLaunchKernel"] = lambda: driver.cuLaunchKernel(handle, 1, 1, 1, 32, 1, 1, 0, 0, ptr, 0)
    lib = ctypes.CDLL("libcuda.so.1")
    raw = lib.cuLaunchKernel
    raw.restype = ctypes.c_int
    raw.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    rows["ctypes cuLaunchKernel (params ready)"] = lambda: raw(handle, 1, 1, 1, 32, 1, 1, 0, 0, ptr, None)
except Exception as exc:  # noqa: BLE001
    print("driver:", exc)
for name, f in rows.items():
    print(f"{name:<40} {host_us_per_call(f, calls=2000, warmup=50):7.2f} us")

tiny_graph = graphs.rmat(4, 2)
tiny = ns.CSR.from_scipy(tiny_graph)
torch_mm = torch_csr(np.int32)(tiny_graph, "spmm", "sum", np.float32)  # the benchmark's yardstick
Bt = torch.randn(tiny.shape[1], 32, device="cuda")
one_call = {
    "nothing between the events": lambda: None,
    "torch t.add_(1)": lambda: t.add_(1),
    "launch.run(empty, x)": lambda: launch.run(empty, 1, 32, 0, x),
    "cuMemsetD8Async + launch.run(empty, x)": lambda: (memset(launch.device_pointer(x), 0, 64, 0),
                                                      launch.run(empty, 1, 32, 0, x)),
    "ns.spmm (16-row graph, torch B, N=32)": lambda: ns.spmm(tiny, Bt),
    "torch.sparse.mm (same)": lambda: torch_mm(Bt),
}
print("\none call on an idle GPU, between two events (median of 200):")
for name, f in one_call.items():
    print(f"{name:<40} {time_cuda(f, warmup=20, repeat=200)[0] * 1e3:7.2f} us")
