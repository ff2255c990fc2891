"""Timing with warm-up and medians: CUDA events on the GPU, a host clock on the CPU."""
import sys
import time

import numpy as np


def time_cuda(fn, *, warmup=3, repeat=20):
    """Median milliseconds of ``fn()`` between CUDA events on the default stream, each call
    started on an idle GPU (so a call's host time before its last launch counts too).

    ``fn`` must launch its work on the default stream (Numba's launches do when given no
    stream, numbasparse's on torch's current stream).  The events are PyTorch's when it is
    imported and has a GPU (recording one costs a few microseconds; Numba's, used otherwise,
    more, and the stop event's cost is timed too).  Returns (median_ms, all_ms).
    """
    return _time_between_events(fn, 1, warmup, repeat)


def time_cuda_back_to_back(fn, *, calls=20, warmup=3, repeat=5):
    """Median milliseconds per call of ``calls`` calls of ``fn()`` issued back to back between
    two events (as a training loop issues them: one call's host work overlaps the previous
    call's kernels, so this is max(host time, GPU time) per call).  Returns (median_ms, all_ms)."""
    return _time_between_events(fn, calls, warmup, repeat)


def _time_between_events(fn, calls, warmup, repeat):
    return time_cuda_interleaved({None: fn}, calls=calls, warmup=warmup, repeat=repeat)[None]


def time_cuda_interleaved(fns, *, calls=1, warmup=3, repeat=20, seed=0):
    """:func:`time_cuda` (``calls=1``) or :func:`time_cuda_back_to_back` for several functions
    at once, their repetitions interleaved: each round times every function once, in a fresh
    random order (seeded), so that neither a drift of the host's speed during the run (seen on
    the device hosts: 31 to 48 us per call for the same code, from one block of repetitions to
    the next) nor the function timed just before (a call after a different library's runs on
    colder host caches) favours one function.
    ``fns``: {name: fn}.  Returns {name: (median_ms, all_ms)}."""
    event, synchronize = _events()
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    synchronize()
    rng = np.random.default_rng(seed)
    times = {name: [] for name in names}
    for _ in range(repeat):
        for i in rng.permutation(len(names)):
            fn = fns[names[i]]
            start, stop = event(), event()
            start.record()
            for _ in range(calls):
                fn()
            stop.record()
            stop.synchronize()
            times[names[i]].append(start.elapsed_time(stop) / calls)
    return {name: (float(np.median(t)), t) for name, t in times.items()}


def host_us_per_call(fn, *, calls=300, warmup=20):
    """Microseconds of host time per call of ``fn()``, ``calls`` calls issued back to back
    with the device synchronised before and after (for the tools that split a call's host
    time; on host-bound calls it is the call rate)."""
    _, synchronize = _events()
    for _ in range(warmup):
        fn()
    synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def host_us_after_sync(fn, *, before=None, calls=200, warmup=20):
    """Median microseconds of host time of one call of ``fn()`` started on an idle GPU (the
    device synchronised before each; ``before()``, if given, run first and synchronised too):
    the host part of what the benchmark's one-call ``ms`` column sees."""
    _, synchronize = _events()
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        if before is not None:
            before()
        synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def _events():
    """(make an event, synchronize the device): PyTorch's if it is imported (the benchmark
    does; the library never imports it for this) and has a GPU, else Numba's."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return (lambda: torch.cuda.Event(enable_timing=True)), torch.cuda.synchronize
    from numba import cuda

    class NumbaEvent:
        def __init__(self):
            self.event = cuda.event()

        def record(self):
            self.event.record()

        def synchronize(self):
            self.event.synchronize()

        def elapsed_time(self, stop):
            return cuda.event_elapsed_time(self.event, stop.event)

    return NumbaEvent, cuda.synchronize


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
