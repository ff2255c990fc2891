"""Schedule search for G-Sparse's tiled SpMM and SDDMM (paper 002, section III-D): enumerate the valid
schedules, rank them with a cost model built from the graph's row lengths and the GPU's
properties, time the best-ranked ones on the GPU, and keep the winner on disk.

The paper's cost model is a neural network trained on measured kernels; this one is analytic
(no training data needed), which makes its ranking easy to read and to check against an
exhaustive search (``tune(..., top_k=None)`` times every schedule).

Cache: ``tuned.json`` in numbasparse's cache directory (:mod:`numbasparse.disk`), keyed by GPU
name, graph signature (a hash of indptr and indices), N and dtype.
"""
import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from ..cuda.tiled import Schedule, SddmmSchedule, schedule_space, sddmm_schedule_space
from ..disk import cache_dir, locked, write_atomic

WARP = 32


@dataclass(frozen=True)
class Device:
    """What the cost model needs to know about the GPU."""
    name: str
    sms: int
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    shared_per_sm: int = 228 * 1024

    @classmethod
    def current(cls):
        from numba import cuda

        from ..cuda.device import device_limits

        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        sms, threads_per_sm, _ = device_limits()
        return cls(name, sms, threads_per_sm)


def block_maxima(row_lengths, m_tile, balance):
    """Longest row of each block of ``m_tile`` rows (rows longest first when ``balance``)."""
    lengths = np.asarray(row_lengths, dtype=np.int64)
    if balance:
        lengths = np.sort(lengths)[::-1]
    pad = (-len(lengths)) % m_tile
    return np.concatenate([lengths, np.zeros(pad, np.int64)]).reshape(-1, m_tile).max(axis=1)


def predicted_cost(schedule, row_lengths, n_cols, device, value_itemsize=4, index_itemsize=4, per_block=None):
    """Predicted time of ``schedule`` in warp-instruction slots (only the ranking matters).

    A block's rows wait for its longest row at the barriers, so a block costs each of its warps
    (longest row) x (output registers in use) multiply-adds with their B loads, plus per round
    (one nnz_tile chunk) the staging loads and two barriers, in every column block; registers
    past N do no work (the kernel skips them).  The work, in warp instructions, is spread over
    the SMs' 4 schedulers each, slowed when too few warps are resident to hide memory latency
    (fewer than 16 per SM: limited by threads, blocks and shared memory per SM); the time is
    never less than the slowest block.
    ``per_block``: :func:`block_maxima` for this schedule's (m_tile, balance), if already known.
    """
    if per_block is None:
        per_block = block_maxima(row_lengths, schedule.m_tile, schedule.balance)
    rounds = -(-per_block // schedule.nnz_tile)
    col_blocks = -(-n_cols // schedule.cols_per_block)
    registers_used = min(schedule.reg_tile, -(-n_cols // schedule.n_tile))
    round_overhead = schedule.nnz_tile / schedule.n_tile + 40
    block_cost = per_block * registers_used + rounds * round_overhead
    warps = -(-schedule.threads // WARP)
    work = float(block_cost.sum() * warps * col_blocks)
    blocks_per_sm = min(device.blocks_per_sm, device.threads_per_sm // schedule.threads,
                        device.shared_per_sm // max(1, schedule.shared_bytes(value_itemsize, index_itemsize)))
    hiding = min(1.0, blocks_per_sm * warps / 16)
    slowest = float(block_cost.max(initial=0))
    return max(work / (device.sms * 4 * hiding), slowest)


def predicted_sddmm_cost(schedule, row_lengths, n_cols, device, value_itemsize=4, index_itemsize=4):
    """Predicted time of an SDDMM schedule in warp-instruction slots.

    Per row (one warp) and per k_tile round: stage the slice of X[i], then the row's entries in
    batches of 32 / group, each batch ceil(width / group) multiply-adds with their Y loads per
    lane plus log2(group) shuffles.  Work over 4 schedulers per SM, slowed below 16 resident warps
    per SM; never less than the slowest row.
    """
    lengths = np.asarray(row_lengths, dtype=np.int64)
    rounds = max(1, -(-n_cols // schedule.k_tile))
    width = min(schedule.k_tile, max(n_cols, 1))
    batches = -(-lengths // (32 // schedule.group))
    per_batch = -(-width // schedule.group) * 2 + np.log2(schedule.group) + 8
    row_cost = rounds * (batches * per_batch + -(-width // 32) + 8)
    blocks_per_sm = min(device.blocks_per_sm, device.threads_per_sm // schedule.threads,
                        device.shared_per_sm // max(1, schedule.shared_bytes(value_itemsize)))
    hiding = min(1.0, blocks_per_sm * schedule.m_tile / 16)
    return max(float(row_cost.sum()) / (device.sms * 4 * hiding), float(row_cost.max(initial=0)))


def rank(row_lengths, n_cols, device, value_itemsize=4, index_itemsize=4, op="spmm"):
    """Valid schedules of ``op`` ("spmm" or "sddmm"), cheapest predicted first."""
    if op == "spmm":
        space = schedule_space(value_itemsize, index_itemsize)
        sorted_lengths = np.sort(np.asarray(row_lengths, dtype=np.int64))[::-1]  # sorted once, not per schedule
        maxima = {(m, b): block_maxima(sorted_lengths if b else row_lengths, m, False)
                  for m, b in {(s.m_tile, s.balance) for s in space}}
        costs = [predicted_cost(s, row_lengths, n_cols, device, value_itemsize, index_itemsize,
                                per_block=maxima[(s.m_tile, s.balance)]) for s in space]
    else:
        space = sddmm_schedule_space(value_itemsize, index_itemsize)
        costs = [predicted_sddmm_cost(s, row_lengths, n_cols, device, value_itemsize, index_itemsize) for s in space]
    return [space[i] for i in np.argsort(costs, kind="stable")]


def graph_signature(A):
    """Hash of a CSR's structure (indptr and indices) and shape."""
    h = hashlib.sha1(f"{A.shape}".encode())
    h.update(np.ascontiguousarray(A.indptr).tobytes())
    h.update(np.ascontiguousarray(A.indices).tobytes())
    return h.hexdigest()[:16]


def cache_path():
    """The tuner's JSON file, or None when the on-disk cache is off."""
    root = cache_dir()
    return None if root is None else root / "tuned.json"


def cache_key(device_name, signature, n_cols, dtype, op="spmm"):
    return f"{op}|{device_name}|{signature}|{n_cols}|{np.dtype(dtype).name}"


def load_cached(key):
    path = cache_path()
    if path is None:
        return None
    try:
        entry = json.loads(path.read_text()).get(key)
    except (OSError, ValueError):
        return None
    if not entry:
        return None
    return (Schedule if key.startswith("spmm|") else SddmmSchedule)(**entry["schedule"])


def store(key, schedule, record):
    path = cache_path()
    if path is None:
        return
    with locked(path):  # (other processes may be storing their schedules)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {}
        doc[key] = dict(record, schedule=asdict(schedule))
        write_atomic(path, json.dumps(doc, indent=1).encode())


def tune(row_lengths, n_cols, time_schedule, device, *, top_k=8, value_itemsize=4, index_itemsize=4, op="spmm"):
    """Time the ``top_k`` best-ranked schedules (all of them when ``top_k`` is None) with
    ``time_schedule(schedule) -> ms``; returns (best schedule, record of what was timed)."""
    ranked = rank(row_lengths, n_cols, device, value_itemsize, index_itemsize, op)
    candidates = ranked if top_k is None else ranked[:top_k]
    timed = [(time_schedule(s), s) for s in candidates]
    best_ms, best = min(timed, key=lambda t: t[0])
    record = dict(best_ms=best_ms, timed=len(timed), space=len(ranked),
                  model_first=asdict(ranked[0]), model_first_ms=timed[0][0])
    return best, record


def schedule_for(A, n_cols, dtype, op="spmm", *, top_k=8):
    """G-Sparse schedule for (op, device CSR A, N, dtype): from A's cache, else the on-disk cache,
    else the autotuner (cost-model ranking, the best ``top_k`` timed on this GPU, the winner
    stored).  On the simulator, where timings mean nothing, the cost model's first choice."""
    from ..cuda.device import simulator_enabled

    key = ("tuned", op, n_cols, np.dtype(dtype).name)
    schedule = A.cache.get("plans", key)
    if schedule is not None:
        return schedule
    lengths = np.diff(A.host_indptr)
    itemsizes = dict(value_itemsize=np.dtype(dtype).itemsize, index_itemsize=A.index_dtype.itemsize)
    if simulator_enabled():
        schedule = rank(lengths, n_cols, Device("simulator", 1), op=op, **itemsizes)[0]
    else:
        device = Device.current()
        signature = A.cache.get_or_build("plans", ("signature",), lambda: graph_signature(A._host))
        disk_key = cache_key(device.name, signature, n_cols, dtype, op)
        schedule = load_cached(disk_key)
        if schedule is None:
            import time

            start = time.perf_counter()
            schedule, record = tune(lengths, n_cols, _timer(A, n_cols, dtype, op), device, top_k=top_k, op=op,
                                    **itemsizes)
            record["search_s"] = time.perf_counter() - start  # compiles included
            store(disk_key, schedule, record)
    return A.cache.put("plans", key, schedule)


def _timer(A, n_cols, dtype, op="spmm"):
    """``time(schedule) -> ms``: median of 5 launches between CUDA events on scratch operands,
    after a warm-up launch (which compiles)."""
    from numba import cuda

    from ..cuda import tiled

    if op == "spmm":
        B = cuda.to_device(np.ones((A.shape[1], n_cols), dtype))
        C = cuda.device_array((A.shape[0], n_cols), dtype)

        def launch(schedule):
            tiled.spmm_tiled(A, tiled.row_order(A, schedule.balance), B, C, schedule)
    else:
        X = cuda.to_device(np.ones((A.shape[0], n_cols), dtype))
        Y = cuda.to_device(np.ones((A.shape[1], n_cols), dtype))
        out = cuda.device_array(A.nnz, dtype)

        def launch(schedule):
            tiled.sddmm_tiled(A, X, Y, out, schedule)

    def time_schedule(schedule, repeat=5):
        launch(schedule)
        cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, stop = cuda.event(), cuda.event()
            start.record()
            launch(schedule)
            stop.record()
            stop.synchronize()
            times.append(cuda.event_elapsed_time(start, stop))
        return float(np.median(times))
    return time_schedule
