"""Where does a replayed call's host time go?  Run on a GPU machine:
    python benchmarks/probes/host_parts.py [SPEC ...] [--n 32]
For each graph: the host microseconds of a replayed ``ns.spmm`` and ``ns.sddmm`` call and of
``torch.sparse.mm``, then of each part of the replayed call on its own (the output's
allocation, the signature, the stream handle, the cache lookup, the recorded steps), and of
one cuLaunchKernel / cuMemsetD8Async through cuda.bindings against the same call through
ctypes on libcuda.  Medians of many calls, the GPU synchronised every 50 calls."""
import argparse
import ctypes
import time

import numpy as np
import torch

import numbasparse as ns
from numbasparse import arrays, graphs, replay
from numbasparse.bench.baselines import BASELINES
from numbasparse.bench.timing import host_us_after_sync
from numbasparse.cuda import launch

parser = argparse.ArgumentParser()
parser.add_argument("graphs", nargs="*", default=[".data/cora.npz"])
parser.add_argument("--n", type=int, default=32)
parser.add_argument("--reps", type=int, default=2000)
args = parser.parse_args()


def host_us(fn, reps=args.reps, sync_every=50):
    times = []
    for i in range(reps):
        if i % sync_every == 0:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return float(np.median(times)) * 1e6


libcuda = ctypes.CDLL("libcuda.so.1")
libcuda.cuLaunchKernel.restype = ctypes.c_int
libcuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
libcuda.cuMemsetD8Async.restype = ctypes.c_int
libcuda.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t, ctypes.c_void_p]

for spec in args.graphs:
    A = graphs.from_spec(spec).astype(np.float32)
    A.data = np.random.default_rng(0).standard_normal(A.nnz).astype(np.float32)
    csr = ns.CSR.from_scipy(A)
    N = args.n
    B = torch.randn(A.shape[1], N, device="cuda")
    X = torch.randn(A.shape[0], N, device="cuda")
    for _ in range(6):
        ns.spmm(csr, B)
        ns.sddmm(csr, X, B)
    torch_mm = BASELINES["torch_csr32"](A, "spmm", "sum", "float32")
    torch_mm(B)
    print(f"\n{spec}: {A.shape[0]} rows, {A.nnz} nonzeros, N={N}")
    print(f"  whole calls, idle GPU: ns.spmm {host_us_after_sync(lambda: ns.spmm(csr, B)):.1f} us, "
          f"ns.sddmm {host_us_after_sync(lambda: ns.sddmm(csr, X, B)):.1f} us, torch.sparse.mm {host_us_after_sync(lambda: torch_mm(B)):.1f} us")
    print(f"  whole calls, queued:   ns.spmm {host_us(lambda: ns.spmm(csr, B)):.1f} us, "
          f"ns.sddmm {host_us(lambda: ns.sddmm(csr, X, B)):.1f} us, torch.sparse.mm {host_us(lambda: torch_mm(B)):.1f} us")
    options = ("spmm", "sum", "auto", "auto", "ieee")
    key, entry = replay._lookup(csr, options, (B,), None)
    print(f"  replay entry: {type(entry).__name__}, steps "
          f"{[('memset' if isinstance(s, int) else type(s).__name__) for s, _ in getattr(entry, 'steps', [])]}")
    parts = {
        "new_empty((m, n))": lambda: B.new_empty((A.shape[0], N)),
        "new_empty(m, n)": lambda: B.new_empty(A.shape[0], N),
        "torch.empty(device=B.device)": lambda: torch.empty((A.shape[0], N), device=B.device),
        "torch_signature": lambda: arrays.torch_signature(B),
        "torch_stream_handle": lambda: arrays.torch_stream_handle(B.device),
        "torch_stream_handle(0)": lambda: arrays.torch_stream_handle(0),
        "_signature": lambda: replay._signature(csr, options, (B,), None),
        "_lookup": lambda: replay._lookup(csr, options, (B,), None),
        "data_ptr x2": lambda: [x.data_ptr() for x in (B, B)],
        "torch.cuda.current_device": torch.cuda.current_device,
        "one_device()": launch.one_device if hasattr(launch, "one_device") else (lambda: None),
    }
    C = B.new_empty((A.shape[0], N))
    handle = arrays.torch_stream_handle(B.device)
    if isinstance(entry, replay.Replay) and not entry.intermediates:  # (pointers below: B's and C's only)
        pointers = [B.data_ptr(), C.data_ptr()]
        parts["Replay(pointers, handle)"] = lambda: entry(pointers, handle)
        bound = next((s for s, _ in entry.steps if not isinstance(s, int)), None)
        if bound is not None:
            roles = next(r for s, r in entry.steps if s is bound)
            parts["BoundLaunch.replay"] = lambda: bound.replay(pointers, roles, handle)
            f = bound.fast
            drv = launch._driver()[0]
            g, b, pa = bound.grid, bound.block, bound.params_address
            parts["cuLaunchKernel (cuda.bindings)"] = lambda: drv(f.function, *g, *b, 0, handle, pa, 0)
            parts["cuLaunchKernel (ctypes)"] = lambda: libcuda.cuLaunchKernel(f.function, *g, *b, 0, handle, pa, None)
    n_bytes = C.numel() * 4
    ptr = C.data_ptr()
    memset = launch._driver()[1]
    parts["cuMemsetD8Async (cuda.bindings)"] = lambda: memset(ptr, 0, n_bytes, handle)
    parts["cuMemsetD8Async (ctypes)"] = lambda: libcuda.cuMemsetD8Async(ptr, 0, n_bytes, handle)
    for name, fn in parts.items():
        print(f"  {name:36s} {host_us(fn):7.2f} us")
