"""Where does a small graph's one-call time go in the benchmark?  Run on a GPU machine:
    python benchmarks/probes/one_call.py [SPEC ...] [--n 32]
The benchmark's ``ms`` column (one call between two events on an idle GPU) puts ``ns.spmm`` on
Cora at ~52 us against 6 us of kernel, while ``tools/profile_call.py`` reads a replayed call at
~28 us alone.  For each graph this times ``ns.spmm`` (auto) and ``torch.sparse.mm``:
alone, with the benchmark's rotating copies of B, interleaved as the benchmark interleaves
them, and through ``harness.run_case`` itself; then the host time of one call started on an
idle GPU, alone and right after the other library's call, and a profile of the latter."""
import argparse
import cProfile
import itertools
import pstats

import numpy as np
import torch

import numbasparse as ns
from numbasparse import graphs
from numbasparse.bench import harness
from numbasparse.bench.baselines import BASELINES
from numbasparse.bench.timing import host_us_after_sync, host_us_per_call, time_cuda, time_cuda_interleaved

parser = argparse.ArgumentParser()
parser.add_argument("graphs", nargs="*", default=[".data/cora.npz", ".data/citeseer.npz"])
parser.add_argument("--n", type=int, default=32)
args = parser.parse_args()


for spec in args.graphs:
    A = graphs.from_spec(spec).astype(np.float32)
    A.data = np.random.default_rng(0).standard_normal(A.nnz).astype(np.float32)
    csr = ns.CSR.from_scipy(A)
    N = args.n
    copies = [torch.randn(A.shape[1], N, device="cuda") for _ in range(8)]
    ring_ns, ring_t = itertools.cycle(copies), itertools.cycle(copies)
    torch_mm = BASELINES["torch_csr32"](A, "spmm", "sum", "float32")
    fns = {
        "ns one B": lambda: ns.spmm(csr, copies[0]),
        "ns rotating B": lambda: ns.spmm(csr, next(ring_ns)),
        "ns as the bench calls it": lambda: harness.api.spmm(csr, next(ring_ns), reduce="sum", algorithm="auto",
                                                            precision="ieee"),
        "torch one B": lambda: torch_mm(copies[0]),
        "torch rotating B": lambda: torch_mm(next(ring_t)),
    }
    print(f"\n{spec}: {A.shape[0]} rows, {A.nnz} nonzeros, N={N}")
    err = float(torch.linalg.norm(ns.spmm(csr, copies[0]) - torch_mm(copies[0])) / torch.linalg.norm(torch_mm(copies[0])))
    print(f"ns vs torch relative difference {err:.1e}")
    for name, fn in fns.items():
        print(f"  alone, by events   {name:<28} {time_cuda(fn, warmup=20, repeat=200)[0] * 1e3:7.1f} us"
              f"   back to back {host_us_per_call(fn, calls=500):6.1f} us")
    inter = time_cuda_interleaved({k: fns[k] for k in ("ns rotating B", "torch rotating B")}, warmup=5, repeat=200)
    for name, (ms, _) in inter.items():
        print(f"  interleaved        {name:<28} {ms * 1e3:7.1f} us")
    rows = harness.run_case(harness.Case(spec, A, "spmm", "sum", N),
                            {"ns:auto": harness.numbasparse_impl("auto"), "torch_csr32": BASELINES["torch_csr32"]})
    for r in rows:
        print(f"  harness.run_case   {r['impl']:<28} {r['ms'] * 1e3:7.1f} us   b2b {r['b2b_ms'] * 1e3:6.1f} us")
    print(f"  host, idle GPU: ns alone {host_us_after_sync(fns['ns rotating B']):6.1f} us, after torch "
          f"{host_us_after_sync(fns['ns rotating B'], before=fns['torch rotating B']):6.1f} us; torch alone "
          f"{host_us_after_sync(fns['torch rotating B']):6.1f} us, after ns {host_us_after_sync(fns['torch rotating B'], before=fns['ns rotating B']):6.1f} us")
    replays = csr.cache.sections["replays"]
    print("  replays:", {str(k[0]): type(v).__name__ for k, v in replays.items()})
    prof = cProfile.Profile()
    for _ in range(200):
        torch_mm(next(ring_t))
        torch.cuda.synchronize()
        prof.enable()
        ns.spmm(csr, next(ring_ns))
        prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)
