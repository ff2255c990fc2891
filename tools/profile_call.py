"""Where does a small-graph call spend its host time?  Run on a GPU machine:
    python tools/profile_call.py [--graph SPEC] [--n N]
Prints per-call microseconds of each layer (back to back, and after a sync), the event time of one
call on an idle GPU (the benchmark's ``ms``) and a cProfile of the public call on torch tensors.
A "(replayed)" row repeats one signature (``numbasparse.replay``: replayed from its
``REPLAY_FROM_CALL``-th call on); a "full path" row drops the matrix's replays before each call
(``csr.cache.sections["replays"]``), so every call validates, dispatches and plans.
SPEC as the benchmark's ``--graphs`` (default: the bundled graph), N the dense width (64)."""
import argparse
import cProfile
import pstats

import numpy as np
import torch
from numba import cuda

import numbasparse as ns
from numbasparse import arrays, dispatch, graphs
from numbasparse.bench.baselines import BASELINES
from numbasparse.bench.timing import host_us_after_sync, host_us_per_call, time_cuda
from numbasparse.cuda import hp, launch


parser = argparse.ArgumentParser()
parser.add_argument("--graph", default="default")
parser.add_argument("--n", type=int, default=64)
args = parser.parse_args()
N = args.n
A = graphs.from_spec(args.graph).astype(np.float32)
csr = ns.CSR.from_scipy(A)
Bt = torch.randn(A.shape[1], N, device="cuda")
Ct = torch.empty(A.shape[0], N, device="cuda")
Xt = torch.randn(A.shape[0], N, device="cuda")
Bn, Cn = cuda.as_cuda_array(Bt), cuda.as_cuda_array(Ct)
torch_mm = BASELINES["torch_csr32"](A, "spmm", "sum", "float32")  # the benchmark's yardsticks
torch_sddmm = BASELINES["torch_sampled_addmm"](A, "sddmm", "sum", "float32")
Bd = arrays.dense(Bt, "B", 2)
Bv, Cv = Bd.array, arrays.DeviceView.of_torch(Ct)
stream = arrays.stream_of(Bd)


def full_path(call):
    """``call`` after dropping the matrix's replays: the full path (validation, dispatch, plans)."""
    csr.cache.sections["replays"].clear()
    return call()


rows = {
    "torch.sparse.mm": lambda: torch_mm(Bt),
    "  arrays.dense(B)": lambda: arrays.dense(Bt, "B", 2),
    "  dispatch.resolve": lambda: dispatch.resolve("spmm", "hp", "auto", True, N, "sum"),
    "  arrays.empty_like_framework": lambda: arrays.empty_like_framework(Bd, (A.shape[0], N), np.float32),
    "    B.new_empty(shape)": lambda: Bt.new_empty((A.shape[0], N)),
    "    DeviceView.of_torch(C)": lambda: arrays.DeviceView.of_torch(Ct),
    "  arrays.stream_of": lambda: arrays.stream_of(Bd),
    "  launch.zero(C)": lambda: launch.zero(Cv, stream),
    "  hp.spmm_hp(views)": lambda: hp.spmm_hp(csr, Bv, Cv, "sum", stream=stream),
    "hp launcher, numba arrays": lambda: hp.spmm_hp(csr, Bn, Cn, "sum"),
    "ns.spmm numba arrays + out": lambda: ns.spmm(csr, Bn, out=Cn, algorithm="hp"),
    "ns.spmm torch + out": lambda: ns.spmm(csr, Bt, out=Ct, algorithm="hp"),
    "ns.spmm torch (replayed)": lambda: ns.spmm(csr, Bt, algorithm="hp"),
    "ns.spmm torch, full path": lambda: full_path(lambda: ns.spmm(csr, Bt, algorithm="hp")),
    "  B.new_empty + 2 data_ptr": lambda: (Bt.new_empty((A.shape[0], N)).data_ptr(), Bt.data_ptr()),
    "  arrays.torch_signature(B)": lambda: arrays.torch_signature(Bt),
    "  arrays.torch_stream_handle(0)": lambda: arrays.torch_stream_handle(0),
    "ns.sddmm torch (replayed)": lambda: ns.sddmm(csr, Xt, Xt),
    "ns.sddmm torch, full path": lambda: full_path(lambda: ns.sddmm(csr, Xt, Xt)),
    "torch.sparse.sampled_addmm": lambda: torch_sddmm(Xt, Xt),
    "cuda.as_cuda_array(torch)": lambda: cuda.as_cuda_array(Bt, sync=False),
    "torch __cuda_array_interface__": lambda: Bt.__cuda_array_interface__,
    "cuda.get_current_device()": lambda: cuda.get_current_device(),
    "external_stream": lambda: cuda.external_stream(torch.cuda.current_stream().cuda_stream),
}


print(f"graph {args.graph}: {A.shape[0]} rows, {A.nnz} nonzeros, N={N}")
for name, fn in rows.items():
    print(f"{name:<36} {host_us_per_call(fn):8.1f} us back to back, {host_us_after_sync(fn):8.1f} us after a sync, "
          f"{time_cuda(fn, warmup=20, repeat=100)[0] * 1e3:8.1f} us by events")
prof = cProfile.Profile()
for _ in range(300):
    torch.cuda.synchronize()
    prof.enable()
    ns.spmm(csr, Bt, algorithm="hp")  # replayed
    prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(30)
print("fast-launch entries:", len(launch._fast_launch), [k.py_func.__name__ for k in launch._fast_launch])
print("cache entries per section:", csr.cache.sizes())
prof = cProfile.Profile()
for _ in range(300):
    torch.cuda.synchronize()
    prof.enable()
    ns.sddmm(csr, Xt, Xt)
    prof.disable()
pstats.Stats(prof).sort_stats("cumtime").print_stats(25)
