"""Timing with warm-up and medians: CUDA events on the GPU, a host clock on the CPU."""
import time

import numpy as np


def time_cuda(fn, *, warmup=3, repeat=20):
    """Median milliseconds of ``fn()`` between CUDA events on the default stream.

    ``fn`` must launch its work on the default stream (Numba's launches do when given no
    stream).  Returns (median_ms, all_ms).
    """
    from numba import cuda

    for _ in range(warmup):
        fn()
    cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cuda.event(), cuda.event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop))
    return float(np.median(times)), times


def time_host(fn, *, warmup=1, repeat=10):
    """Median milliseconds of ``fn()`` by ``time.perf_counter``.  Returns (median_ms, all_ms)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), times
