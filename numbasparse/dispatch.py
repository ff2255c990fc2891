"""Which kernel runs: the algorithm table and the rules of ``algorithm="auto"``.

Dispatch decides; the kernels in :mod:`numbasparse.cuda` and :mod:`numbasparse.cpu`
compute.  Every entry's ``run`` has the signature of its operation's launcher.
"""
import functools
from dataclasses import dataclass

from . import cpu
from .cuda import crc, fused, hc, hp, sddmm_warp, slab, tiled

BACKENDS = ("auto", "cuda", "cpu")


@dataclass(frozen=True)
class Algorithm:
    name: str
    backend: str
    run: object
    summary: str
    reductions: tuple = ("sum", "mean", "max", "min")


def hc_windows(A):
    """HC-SpMM's row windows of a device :class:`CSR`: (RowWindows, dict of device arrays),
    built on the host and uploaded on first use, then kept with the matrix."""
    if "row_windows" not in A._derived:
        from numba import cuda

        from .cpu.row_windows import row_windows

        windows = row_windows(A._host)
        A._derived["row_windows"] = (windows, {name: cuda.to_device(getattr(windows, name))
                                               for name in windows.DEVICE_FIELDS})
    return A._derived["row_windows"]


def hc_paths(A, mode):
    """Device boolean array, per row window: True -> dense-tile path.  ``mode`` is "hybrid"
    (the logistic-regression selector, :mod:`numbasparse.select`), "tiles" or "cores"."""
    key = ("hc_paths", mode)
    if key not in A._derived:
        import numpy as np
        from numba import cuda

        from . import select

        windows, _ = hc_windows(A)
        if mode == "hybrid":
            choice = select.use_tiles(windows)
        else:
            choice = np.full(windows.n_windows, mode == "tiles", np.bool_)
        A._derived[key] = cuda.to_device(choice)
    return A._derived[key]


def _spmm_hc(mode):
    def run(A, B, C, reduce, *, stream=0):
        hc.spmm_hc(A, hc_windows(A)[1], hc_paths(A, mode), B, C, stream=stream)
    return run


def spmm_dense_fused(A, X, W, out, *, stream=0):
    """The fused GCN layer on HC-SpMM's hybrid paths (selector-chosen per window)."""
    hc.spmm_dense(A, hc_windows(A)[1], hc_paths(A, "hybrid"), X, W, out, stream=stream)


def _row_order(A, balance):
    key = ("row_order", balance)
    if key not in A._derived:
        from numba import cuda

        A._derived[key] = cuda.to_device(tiled.row_order(A._host, balance))
    return A._derived[key]


def tuned_schedule(A, n_cols, dtype, op="spmm", *, top_k=8):
    """G-Sparse schedule for (op, A, N, dtype): from A's memory, else the on-disk cache, else the
    autotuner (cost-model ranking, the best ``top_k`` timed on this GPU, winner stored).  On the
    simulator, where timings mean nothing, the cost model's first choice."""
    import numpy as np

    from .select import tuner

    key = ("tuned", op, n_cols, np.dtype(dtype).name)
    if key in A._derived:
        return A._derived[key]
    lengths = np.diff(A._host.indptr)
    itemsizes = dict(value_itemsize=np.dtype(dtype).itemsize, index_itemsize=A.index_dtype.itemsize)
    if simulator_enabled():
        schedule = tuner.rank(lengths, n_cols, tuner.Device("simulator", 1), op=op, **itemsizes)[0]
    else:
        device = tuner.Device.current()
        if "signature" not in A._derived:  # hashing a large graph takes a while: once per CSR
            A._derived["signature"] = tuner.graph_signature(A._host)
        disk_key = tuner.cache_key(device.name, A._derived["signature"], n_cols, dtype, op)
        schedule = tuner.load_cached(disk_key)
        if schedule is None:
            import time

            start = time.perf_counter()
            schedule, record = tuner.tune(lengths, n_cols, _timer(A, n_cols, dtype, op), device, top_k=top_k,
                                          op=op, **itemsizes)
            record["search_s"] = time.perf_counter() - start  # compiles included
            tuner.store(disk_key, schedule, record)
    A._derived[key] = schedule
    return schedule


def _timer(A, n_cols, dtype, op="spmm"):
    """``time(schedule) -> ms``: median of 5 launches on scratch operands, after a warm-up."""
    import numpy as np
    from numba import cuda

    from .bench.timing import time_cuda

    if op == "spmm":
        B = cuda.to_device(np.ones((A.shape[1], n_cols), dtype))
        C = cuda.device_array((A.shape[0], n_cols), dtype)

        def time_schedule(schedule):
            order = _row_order(A, schedule.balance)
            return time_cuda(lambda: tiled.spmm_tiled(A, order, B, C, schedule), warmup=1, repeat=5)[0]
    else:
        X = cuda.to_device(np.ones((A.shape[0], n_cols), dtype))
        Y = cuda.to_device(np.ones((A.shape[1], n_cols), dtype))
        out = cuda.device_array(A.nnz, dtype)

        def time_schedule(schedule):
            return time_cuda(lambda: tiled.sddmm_tiled(A, X, Y, out, schedule), warmup=1, repeat=5)[0]
    return time_schedule


def _spmm_tuned(A, B, C, reduce, *, stream=0):
    schedule = tuned_schedule(A, C.shape[1], C.dtype)
    tiled.spmm_tiled(A, _row_order(A, schedule.balance), B, C, schedule, stream=stream)


def _sddmm_tuned(A, X, Y, out, *, stream=0):
    tiled.sddmm_tiled(A, X, Y, out, tuned_schedule(A, X.shape[1], out.dtype, "sddmm"), stream=stream)


def _spmm_blocked(A, B, C, reduce, *, stream=0):
    tiled.spmm_tiled(A, _row_order(A, False), B, C, tiled.CS267_SPMM, stream=stream)


def _sddmm_blocked(A, X, Y, out, *, stream=0):
    tiled.sddmm_tiled(A, X, Y, out, tiled.cs267_sddmm_schedule(X.shape[1]), stream=stream)


def sddmm_then_spmm(A, X, Y, Z, out, *, softmax, fuse, stream=0):
    """``out = f(A ⊙ (X Y^T)) Z`` with f the identity or the per-row softmax (graph attention).
    fuse: one kernel (:mod:`numbasparse.cuda.fused`), else HP-SDDMM, [edge softmax], HP-SpMM
    with the scores as A's values (three launches and an nnz-long intermediate)."""
    if fuse:
        (fused.attention if softmax else fused.sddmm_spmm)(A, X, Y, Z, out, stream=stream)
        return
    from numba import cuda

    scores = cuda.device_array(A.nnz, dtype=out.dtype, stream=stream)
    hp.sddmm_hp(A, X, Y, scores, stream=stream)
    if softmax:
        weights = cuda.device_array(A.nnz, dtype=out.dtype, stream=stream)
        fused.edge_softmax(A, scores, weights, stream=stream)
        scores = weights
    hp.spmm_hp(A.with_values(scores), Z, out, "sum", stream=stream)


def _table(*algorithms):
    return {a.name: a for a in algorithms}


SPMM = _table(
    Algorithm("crc", "cuda", functools.partial(crc.spmm_crc_cwm, cf=1),
              "GE-SpMM coalesced row caching, one warp per row and 32 columns"),
    Algorithm("crc_cwm2", "cuda", functools.partial(crc.spmm_crc_cwm, cf=2),
              "GE-SpMM CRC + coarse-grained warp merging, 2 columns per thread"),
    Algorithm("crc_cwm4", "cuda", functools.partial(crc.spmm_crc_cwm, cf=4),
              "GE-SpMM CRC + coarse-grained warp merging, 4 columns per thread"),
    Algorithm("hp", "cuda", hp.spmm_hp,
              "HP-SpMM hybrid node/edge parallel, equal nonzeros per lane group, vector loads"),
    Algorithm("slab", "cuda", slab.spmm_slab,
              "column-slab tiles, one block per SM: B rows re-used from L1 (dense graphs, N >= 64)"),
    Algorithm("hc", "cuda", _spmm_hc("hybrid"),
              "HC-SpMM 16-row windows, dense-tile or CUDA-core path per window (LR selector)", ("sum",)),
    Algorithm("hc_tiles", "cuda", _spmm_hc("tiles"), "HC-SpMM, every window on the dense-tile path", ("sum",)),
    Algorithm("hc_cores", "cuda", _spmm_hc("cores"), "HC-SpMM, every window on the CUDA-core path", ("sum",)),
    Algorithm("tuned", "cuda", _spmm_tuned,
              "G-Sparse 2-D shared-memory tiled SpMM, schedule chosen by cost model + autotuner", ("sum",)),
    Algorithm("blocked", "cuda", _spmm_blocked,
              "CS267 blocked SpMM: a block per row, a thread per output, entries staged in shared memory",
              ("sum",)),
    Algorithm("cpu_rows", "cpu", cpu.spmm_rows, "numba.njit(parallel=True), rows across cores"),
)

SDDMM = _table(
    Algorithm("warp_row", "cuda", sddmm_warp.sddmm_warp_row,
              "one warp per row, shuffle-reduced dot products"),
    Algorithm("hp", "cuda", hp.sddmm_hp,
              "HP-SDDMM hybrid parallel, equal nonzeros per warp, lane groups sized to K"),
    Algorithm("tuned", "cuda", _sddmm_tuned,
              "G-Sparse tiled SDDMM (X rows in shared memory, adaptive warp shuffle), autotuned schedule"),
    Algorithm("blocked", "cuda", _sddmm_blocked,
              "CS267 blocked SDDMM: a block per row, X[i] in shared memory, 4 lanes per entry"),
    Algorithm("cpu_rows", "cpu", cpu.sddmm_rows, "numba.njit(parallel=True), rows across cores"),
)

TABLES = {"spmm": SPMM, "sddmm": SDDMM}


def algorithms(op, backend=None):
    """Names that ``algorithm=`` accepts for ``op`` ("spmm" or "sddmm"), optionally of one backend."""
    if op not in TABLES:
        raise ValueError(f"op must be one of {sorted(TABLES)}, got {op!r}")
    if backend is not None and backend not in BACKENDS[1:]:
        raise ValueError(f"backend must be one of {BACKENDS[1:]}, got {backend!r}")
    return tuple(name for name, a in TABLES[op].items() if backend in (None, a.backend))


@functools.lru_cache(maxsize=None)
def gpu_present():
    """True when a real CUDA GPU is usable (the simulator does not count)."""
    from numba import cuda
    from numba.cuda import config

    if config.ENABLE_CUDASIM:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # a broken driver is the same as no GPU here
        return False


def simulator_enabled():
    from numba.cuda import config

    return bool(config.ENABLE_CUDASIM)


#: The column-slab kernel pays where a partial row (one vector atomic per lane) serves at least
#: SLAB_MIN_SEGMENT entries by :func:`slab_features`, and N >= SLAB_MIN_COLUMNS.  Fitted on
#: tools/slab_rule.py (H100, session 9, benchmarks/results/h100-2026-11-23h/slab_rule.txt):
#: faster than HP-SpMM on each of the 32 sampled subgraphs of rmat:20 at N = 64, 128 and 256
#: (1.29-2.92x; 9-37 estimated entries per segment, the 1.1k-2.3k-node subgraphs included),
#: slower on R-MAT scale 16 (0.38-0.57x) and within 0.81-1.22x
#: on Cora, PubMed and the default graph (1.0-1.5 entries per segment).  N = 32 not measured
#: (HP is 1.9x of cuSPARSE there on the sampled workload).  The rule, fitted on sums, holds for
#: mean, max and min too: on three of those subgraphs (1.1k, 4.9k and 9.1k nodes) at N = 64..256 the
#: slab kernel was 1.08-2.80x faster than HP for every reduction (session 10,
#: benchmarks/results/h100-2026-11-24/dense_reductions.json).
SLAB_MIN_SEGMENT = 4.0
SLAB_MIN_COLUMNS = 64


def slab_features(shape, nnz, n_cols, itemsize):
    """(B-row re-use, entries per segment) the column-slab kernel's default tiling should give
    for an (M, K) matrix of ``nnz`` entries and N = ``n_cols`` (:func:`slab.slab_estimate`)."""
    vec, _ = slab.slab_lane_layout(n_cols, itemsize)
    _, width, per_tile = slab.slab_layout(nnz, shape[1], n_cols, itemsize, vec)
    return slab.slab_estimate(shape[0], shape[1], nnz, width, per_tile)


@functools.lru_cache(maxsize=4096)
def slab_pays(shape, nnz, n_cols, itemsize):
    """True where ``algorithm="auto"`` runs the column-slab SpMM rather than HP-SpMM (kept per
    argument tuple: the rule runs on every call)."""
    if n_cols < SLAB_MIN_COLUMNS or nnz == 0:
        return False
    return slab_features(shape, nnz, n_cols, itemsize)[1] >= SLAB_MIN_SEGMENT


def _auto_name(op, backend, n_cols, nnz, shape=None, itemsize=4):
    if backend == "cpu":
        return "cpu_rows"
    # HP kernels balance work by nonzeros, so heavy rows do not stall one warp.  Measured on the
    # H100 (BENCHMARKS.md, session 6: crc_small.json, spmm_maxmin.json, ab_max_int_atomics.txt),
    # kernel time of HP against the best of CRC, CRC+CWM2 and CRC+CWM4 at N = 32..256: sum
    # faster in all 32 cases on Cora, Citeseer, PubMed, the default graph, powerlaw:30000:8,
    # powerlaw:100000:8, rmat:14 and rmat:16 (1.7-7.9x on the small and power-law graphs, 10-29x
    # on R-MAT: a row-per-warp kernel waits for its longest row, one B load after another); max
    # and min, since their integer atomics, 8.3-55 us on the four small graphs against 17-87 us
    # for CRC+CWM2.  CRC saves HP's second launch (memset or fill), which shows only in
    # host-bound single calls; HP itself now runs as one launch on graphs of short rows
    # (launch.hp_single_launch).  The condensed-tile kernel tried in session 6
    # (benchmarks/experiments/condensed-tiles.patch) was 4.3-12x slower than HP on every graph.
    # Dense graphs (sampled subgraphs) at N >= 64: the column-slab kernel (slab_pays).
    if op == "spmm" and shape is not None and slab_pays(shape, nnz, n_cols, itemsize):
        return "slab"
    return "hp"


def resolve(op, algorithm, backend, on_device, n_cols, nnz=0, reduce="sum", shape=None, itemsize=4):
    """The :class:`Algorithm` to run, or ValueError naming the bad argument (``shape``: A's,
    and ``itemsize``: the operands', for the rule of ``algorithm="auto"``)."""
    table = TABLES[op]
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if algorithm != "auto" and algorithm not in table:
        raise ValueError(f"algorithm must be 'auto' or one of {tuple(table)}, got {algorithm!r}")
    if algorithm != "auto":
        wanted = table[algorithm].backend
        if backend not in ("auto", wanted):
            raise ValueError(f"algorithm {algorithm!r} runs on backend {wanted!r}, not {backend!r}")
        backend = wanted
    if backend == "auto":
        backend = "cuda" if (on_device or gpu_present()) else "cpu"
    if backend == "cpu" and on_device:
        raise ValueError("backend='cpu' needs host (NumPy) arrays, but the operands are CUDA arrays")
    if backend == "cuda" and not (gpu_present() or simulator_enabled()):
        raise ValueError("backend='cuda' needs a CUDA GPU (or NUMBA_ENABLE_CUDASIM=1); none was found")
    name = algorithm if algorithm != "auto" else _auto_name(op, backend, n_cols, nnz, shape, itemsize)
    if op == "spmm" and reduce not in table[name].reductions:
        raise ValueError(f"algorithm {name!r} supports reduce in {table[name].reductions}, not {reduce!r}")
    return table[name]
