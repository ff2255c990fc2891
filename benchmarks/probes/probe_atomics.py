"""Throughput of coalesced float32 atomic adds (``red.global.add.f32``) against plain stores and
loads of the same addresses, on a GPU:  python benchmarks/probes/probe_atomics.py [MB]

Every warp writes 128 consecutive bytes per instruction (a lane per float), the pattern of an
HP-SpMM row flush, over a buffer of MB megabytes (default 64: beyond L2) and a 4 MB one (in L2).
Prints GB/s of each and the atomic/store ratio: what combining partial rows with atomics costs
against storing them (the question behind the column-slab SpMM, numbasparse/cuda/slab.py)."""
import sys

import numpy as np
from numba import cuda


@cuda.jit
def store(C, reps):
    for r in range(reps):
        for e in range(cuda.grid(1), C.shape[0], cuda.gridsize(1)):
            C[e] = r


@cuda.jit
def atomic(C, reps):
    for r in range(reps):
        for e in range(cuda.grid(1), C.shape[0], cuda.gridsize(1)):
            cuda.atomic.add(C, e, 1.0)


@cuda.jit
def load(C, out, reps):
    s = 0.0
    for r in range(reps):
        for e in range(cuda.grid(1), C.shape[0], cuda.gridsize(1)):
            s += C[e]
    if s == -1.0:
        out[0] = s


def rate(kernel, args, nbytes):
    grid = cuda.get_current_device().MULTIPROCESSOR_COUNT * 8
    kernel[grid, 256](*args)
    cuda.synchronize()
    start, stop = cuda.event(), cuda.event()
    times = []
    for _ in range(5):
        start.record()
        kernel[grid, 256](*args)
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3)
    return nbytes / min(times) / 1e9


def main():
    for mb in (float(sys.argv[1]) if len(sys.argv) > 1 else 64.0, 4.0):
        n = int(mb * 2**20) // 4
        reps = max(1, int(256 / mb))
        C = cuda.to_device(np.zeros(n, np.float32))
        out = cuda.device_array(1, np.float32)
        nbytes = n * 4 * reps
        s = rate(store, (C, reps), nbytes)
        a = rate(atomic, (C, reps), nbytes)
        ld = rate(load, (C, out, reps), nbytes)
        print(f"{mb:6.0f} MB x {reps}: store {s:7.0f} GB/s  atomic add {a:7.0f} GB/s  load {ld:7.0f} GB/s  "
              f"atomic/store {a / s:.2f}", flush=True)


if __name__ == "__main__":
    main()
