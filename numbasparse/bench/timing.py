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


def time_kernels(fn, *, warmup=3, repeat=20):
    """Milliseconds of GPU work per ``fn()`` as CUPTI records it (kernels, memsets and copies
    from any library in the process: Numba's too), through ``torch.profiler``: the device
    time without the host's launch overhead.  None when the profiler gives no device events."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
    total_us = 0.0
    for event in prof.events():
        if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA:
            total_us += event.time_range.elapsed_us()
    return total_us / 1e3 / repeat if total_us > 0 else None
