"""Back-to-back timing of the sampled workload, per implementation, in three rounds.  Run on a GPU:
    python benchmarks/probes/sampled_b2b_rounds.py
For N = 32 and 64 it times ns:hp, ns:auto and ns:slab in turn, three times over (event time of one
sequence of 32 calls, back to back with and without Python's garbage collector, and the host time
per call), then each call's host time on an idle GPU and a cProfile of 20 sequences.  Unlike the
benchmark it times each implementation in its own block of runs, on purpose: it showed
(``h100-2026-11-24/sampled_b2b_rounds.txt``) that the back-to-back gaps between implementations
that run the same kernels move from one round to the next with the device host's speed, not with
the implementation."""
import cProfile
import gc
import pstats
import time

import numpy as np
import torch

from numbasparse import graphs
from numbasparse.bench import harness
from numbasparse.bench.timing import host_us_per_call, time_cuda, time_cuda_back_to_back

NAMES = ("ns:hp", "ns:auto", "ns:slab")


def rounds(n, runs, Bs):
    for trial in range(3):
        for name in NAMES:
            f = harness.in_sequence(runs[name], Bs)
            ms, _ = time_cuda(f, warmup=2, repeat=20)
            b2b, all_b2b = time_cuda_back_to_back(f, calls=5, warmup=1, repeat=20)
            host = host_us_per_call(f, calls=20, warmup=2) / len(Bs)
            gc.disable()
            b2b_nogc, _ = time_cuda_back_to_back(f, calls=5, warmup=1, repeat=20)
            gc.enable()
            print(f"N={n} trial {trial} {name:8s} ms {ms:.3f} b2b {b2b:.3f} (min {min(all_b2b):.3f} max "
                  f"{max(all_b2b):.3f}) b2b no-gc {b2b_nogc:.3f} host/call {host:.1f} us gc counts {gc.get_count()}",
                  flush=True)


def idle_host_times(n, runs, Bs):
    """Each call's host time with the GPU idle before it, and a cProfile of 20 sequences."""
    for name in ("ns:hp", "ns:auto"):
        per = []
        for run, B in zip(runs[name], Bs):
            torch.cuda.synchronize()
            start = time.perf_counter()
            run(B)
            per.append((time.perf_counter() - start) * 1e6)
        print(f"N={n} {name} host us per call at idle GPU: median {np.median(per):.1f} max {max(per):.1f}", flush=True)
    for name in ("ns:hp", "ns:auto"):
        f = harness.in_sequence(runs[name], Bs)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20):
            f()
        profiler.disable()
        torch.cuda.synchronize()
        print(f"--- cProfile N={n} {name} (20 sequences)")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def main():
    subgraphs = graphs.sample_subgraphs(graphs.from_spec("rmat:20"), 32, 1000, 10000)
    rng = np.random.default_rng(0)
    for n in (32, 64):
        Bs = [torch.as_tensor(rng.standard_normal((A.shape[1], n)), dtype=torch.float32, device="cuda")
              for A in subgraphs]
        runs = {name: [harness.numbasparse_impl(name[3:])(A, "spmm", "sum", "float32") for A in subgraphs]
                for name in NAMES}
        for name in NAMES:  # compile and bind every launch before timing
            for _ in range(2):
                harness.in_sequence(runs[name], Bs)()
        torch.cuda.synchronize()
        rounds(n, runs, Bs)
        idle_host_times(n, runs, Bs)


if __name__ == "__main__":
    main()
