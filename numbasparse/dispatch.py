"""Which kernel runs: the algorithm table and the rules of ``algorithm="auto"``.

Dispatch decides; the kernel families in :mod:`numbasparse.cuda` and :mod:`numbasparse.cpu`
compute.  Every entry's ``run`` has the signature of its operation's launcher:
``run(A, B, C, reduce, *, stream)`` for SpMM, ``run(A, X, Y, out, *, stream)`` for SDDMM, with A
a device :class:`~numbasparse.CSR` and device arrays (CUDA), or ``run(A, B, reduce, out=)`` /
``run(A, X, Y)`` with A a canonical scipy CSR and NumPy arrays (CPU).

The rules of ``auto``, each with the measurement that backs it (H100; BENCHMARKS.md, "SpMM on
the shared graphs" and the sections named):

========= ====================================================== =================================
op        rule                                                   measured
========= ====================================================== =================================
spmm      CPU backend: ``cpu_rows``                              the only CPU kernel
spmm      float16/bfloat16 operands: ``slab`` on graphs of at    bfloat16 on the 18 shared graphs
          least SLAB_MIN_NNZ_HALF entries and N <=                and sampled subgraphs (H200): the
          SLAB_MAX_COLUMNS_HALF where the float32 rules below     slab kernel's picks 0.99-1.34x
          hold (on the 16-bit tiling), else ``hp``: HP writes a   faster by one call there, 0.78-
          16-bit C whole in one launch (after a memset on long    0.96x on smaller graphs ("16-bit
          runs of empty rows); the slab kernel computes in a      operands in the slab kernel")
          float32 workspace and rounds it into C (a second
          launch)
spmm      ``slab`` where N >= SLAB_MIN_COLUMNS (64 on short     18 real graphs x N = 64..256
          rows), B takes at most                                 (balanced tiles): at >= 4 and B
          SLAB_MAX_L2_SHARE of L2 and the default tiling's
          segments (a row's entries in one column slab)          within a quarter of L2, slab
          average >= SLAB_MIN_SEGMENT entries (3.5 where the     faster than HP in 9 of 10 cases
          mean row is short), counted on A's pattern             (1.13-1.66x by kernel time;
          (:func:`slab_pays`): B rows are re-used from L1, at    0.91x in the other); HP faster
          one atomic flush per segment; past a quarter of L2     in 20 of 22 past a quarter of L2
          the tiles' B rows miss L2; HP on short rows is         and in 16 of 22 below 4 (slab
          latency-bound (Nsight Compute: 21-31% of L2            1.08-1.34x on Cora, Citeseer,
          throughput), so the slab kernel pays sooner;           amazon-photo, wiki-vote directed;
          and where its segments' predicted time keeps up        the last, rows of 17 at 3.6,
          with HP's gathers' (:func:`slab_keeps_up_with_hp`):    taken by the short-row threshold;
          its cost is per segment whatever N, HP's per byte,     "What limits HP on the worst
          so on large graphs of long rows at N = 64 the          cases");
          thresholds are too low                                 N = 32 (lane groups, H200): slab
                                                                 1.04-1.68x faster than HP on 7 of
                                                                 8 shared and synthetic graphs at
                                                                 >= 4 (the eighth vetoed); on short
                                                                 rows (HP's one launch against the
                                                                 slab kernel's fill and kernel)
                                                                 slower back to back, one case
                                                                 ("Lane groups in the slab kernel");
                                                                 rows of 300, 18M entries, N = 64,
                                                                 4.2 per segment: slab 2.05x HP's
                                                                 time (H200), vetoed
spmm      ``hp`` elsewhere (its own launch rules: DTP, single    balanced by nonzeros: heavy rows
          launch, column tile, block and row order;              never stall one warp ("HP-SpMM and
          :mod:`.cuda.hp`)                                       HP-SDDMM")
sddmm     ``hp`` (CPU: ``cpu_rows``)                             ("HP-SpMM and HP-SDDMM")
fused     ``sddmm_spmm``/``graph_attention`` in one kernel       10 graphs x K = F = 32..128 (H100),
          (rows cut into runs, merged) where one warp covers     replayed: fused 1.14-1.49x faster by
          the output in one pass and, on a replayed call, up     one call in all 24 cases up to
          to FUSE_MAX_NNZ_REPLAYED entries, else up to           88.6k entries, unfused in 22 of 24
          FUSE_MAX_WORK entry-columns (:func:`fuse_pays`);       from 368k; unreplayed: fused faster
          else HP-SDDMM, [edge softmax], HP-SpMM (three          back to back in 43 of 44 up to 1e8
          launches, an nnz-long intermediate: faster             entry-columns ("Fused SDDMM->SpMM
          kernels, more launches); float16 always fused          and graph attention")
          (its range cannot hold the raw scores the unfused
          path stores)
gcn       ``spmm_dense`` as ``spmm`` and a matmul, the matmul    10 graphs x F_in = 64..256, W
          first where W narrows the rows (:func:`matmul_first`): F_in x 64 (H100): the fused
          HC-SpMM's fused kernel only where no matmul can run    kernel 0.015-0.17x of cuSPARSE +
          (:func:`gcn_fuses`)                                    matmul by kernel time, this path
                                                                 1.05-1.78x; the SpMM first at
                                                                 F_in = 256: 0.48-0.84x on the
                                                                 dense graphs ("The GCN layer
                                                                 unfused by default")
========= ====================================================== =================================

HP-SpMM's own layout, depth, DTP and launch-mode rules live with the kernel
(:mod:`numbasparse.cuda.hp`), as do the column-slab kernel's tiling rules
(:mod:`numbasparse.cuda.slab`).
"""
import functools
from dataclasses import dataclass

import numpy as np

from . import arrays, cpu
from ._compat import scipy_sparse as sp
from .cuda import crc, fused, hc, hp, launch, sddmm_warp, slab, tiled
from .cuda.device import gpu_present, require_cuda, simulator_enabled  # noqa: F401  (re-exported)
from .cuda.device import cdiv, current_gpu, device_limits, memory_system, one_device
from .dtypes import HALF_NAMES, storage_dtype
from .preprocess.rows import nonempty_rows
from .preprocess.slab_tiles import entries_per_segment

BACKENDS = ("auto", "cuda", "cpu")

#: The column-slab SpMM pays where a partial row (one atomic flush per lane) serves at least
#: SLAB_MIN_SEGMENT entries (:func:`slab_pays`) and N >= SLAB_MIN_COLUMNS: first fitted on sampled
#: subgraphs (9-37 entries per segment: faster at N = 64..256, every reduction; R-MAT and small
#: citation graphs, 1-1.5: slower), then checked on the 18 shared graphs (table above).  Just
#: below 4 the slab kernel wins or loses by HP's cost per entry, higher on short rows:
#: SLAB_MIN_SEGMENT_SHORT_ROWS (BENCHMARKS.md "Column-slab SpMM"; benchmarks/NOTES.md, item 1).
SLAB_MIN_SEGMENT = 4.0
#: ... or SLAB_MIN_SEGMENT_SHORT_ROWS on short rows (:func:`hp.short_rows`), where HP is
#: latency-bound, so the slab kernel pays at fewer entries per segment (BENCHMARKS.md "What
#: limits HP on the worst cases").
SLAB_MIN_SEGMENT_SHORT_ROWS = 3.5
#: ... and N >= SLAB_MIN_COLUMNS: at N = 32 the slab kernel runs four segments a warp (lane
#: groups); where the thresholds above and the veto take it there it ran 1.04-1.68x faster than
#: HP (7 graphs; the eighth at the thresholds, 0.55x, is vetoed; H200, BENCHMARKS.md "Lane groups
#: in the slab kernel"); narrower B rows are left to HP, unmeasured.  On short rows
#: SLAB_MIN_COLUMNS_SHORT_ROWS: there HP writes C in one launch, while the slab kernel needs a
#: fill first, a second GPU operation that a small kernel's gain may not pay for (one case
#: measured, wiki-vote directed N = 32: kernel 12.0 -> 7.2 µs, back to back 23.1 -> 25.8 µs).
SLAB_MIN_COLUMNS = 32
SLAB_MIN_COLUMNS_SHORT_ROWS = 64
#: ... and where B (A's columns x N) takes at most this share of the L2 cache: the slab kernel
#: deals its tiles in size order over the whole matrix, so the B rows in use at once span many
#: slabs and stop hitting L2, while HP sweeps rows in order.  k block-diagonal copies of three
#: dense graphs (same entries per segment, B k times larger; BENCHMARKS.md "Column-slab SpMM"),
#: HP time / slab time: 0.91-1.27x up to a quarter of L2, 0.71-1.12x from a quarter to a half,
#: 0.53-1.06x past it; the web crawls (B 1.6-6.4x L2) ran 1.00-1.25x faster on HP.  A quarter
#: is a compromise: tolokers (rows of 88) loses from 0.23, wiki-vote and chameleon win to 0.36.
#: Tiles dealt in the order of their rows instead kept those copies' C rows in L2 (hit rate 65
#: -> 85%) but ran real graphs 0.72-0.85x as fast (benchmarks/NOTES.md, measured dead ends).
SLAB_MAX_L2_SHARE = 0.25
#: ... and where the slab kernel's predicted time is at most SLAB_GUARD_MARGIN times HP's
#: (:func:`slab_keeps_up_with_hp`, a veto for large graphs of long rows near the thresholds above).
#: The slab kernel is bound by its segments, not by N: an SM retires one (its chain of loads,
#: then the flush of a partial row) every SLAB_SEGMENT_NS at N = 64, 128 or 256, while HP on a
#: graph that fills the GPU is bound by the bytes it gathers from L2, HP_GATHER_BYTES_PER_SM a
#: second per SM, plus HP_FIXED_US on small graphs.  Measured (H200, float32 sum, kernel time;
#: BENCHMARKS.md "Column-slab SpMM", "The slab kernel's segments against HP's gathers"): the
#: slab kernel 190-320 ps a segment over 132 SMs on graphs of 0.8-18M entries (25-42 ns an SM),
#: HP 0.41-0.61 ps an entry-column there (6.5-9.8 TB/s of gathers).  Where the thresholds
#: took the slab kernel on rows of 300 (18M entries, 4.2 entries per segment, N = 64) it ran
#: 2.05x HP's time; the model predicts 1.74x.  The margin covers the constants' spread; the
#: measured picks of the thresholds all keep the slab kernel.  Fitted on float32 with the
#: widest lanes (float64's segments and misaligned operands' narrower lanes are not timed);
#: ``benchmarks/probes/slab_veto.py`` measures both rates on another GPU.
SLAB_SEGMENT_NS = 32.0
HP_GATHER_BYTES_PER_SM = 60e9
HP_FIXED_US = 10.0
SLAB_GUARD_MARGIN = 1.25
#: 16-bit operands: the slab kernel adds a GPU operation to HP's single launch (the pass that
#: rounds its float32 workspace into C), so it runs only on graphs of at least
#: SLAB_MIN_NNZ_HALF entries, and up to SLAB_MAX_COLUMNS_HALF: HP gathers half the bytes in
#: 16 bits, the slab kernel's cost per segment stays.  Measured (bfloat16, H200, one call,
#: BENCHMARKS.md "16-bit operands in the slab kernel"): on the picks of the rules above, faster
#: by kernel time but slower by one call on every graph of <= 238k entries (0.78-0.96x:
#: a saving of 1-3 µs against a launch), on tolokers (1.0M) 1.05 / 1.04 / 0.99x at N = 32 /
#: 64 / 128 and on sampled subgraphs (1.25M each) 1.13-1.34x at N = 32..128; at N = 256 slower
#: on tolokers, wiki-vote and its directed copy (kernel 0.85-0.89x), faster on the sampled
#: subgraphs (1.16x): the cap rests on tolokers among the large graphs.
SLAB_MIN_NNZ_HALF = 500_000
SLAB_MAX_COLUMNS_HALF = 128



#: ``fused="auto"`` on a repeated call (a torch call whose signature was seen before: replayed
#: from its :data:`numbasparse.replay.REPLAY_FROM_CALL`-th call) fuses SDDMM->SpMM and attention
#: up to this many stored entries.  A replayed unfused call issues its three launches for a few
#: µs of host time, so fusing saves 10-45 µs of launches and intermediates (one call), while the
#: fused kernel (its warp walks each entry as a chain) takes 0.99-2.4x the unfused kernels' time
#: (geomean 1.5x), an excess of about 0.1 µs per thousand entries.  Measured (10 graphs x
#: K = F = 32..128, H100, BENCHMARKS.md "Fused SDDMM->SpMM and graph attention"): fused faster
#: in all 24 cases up to 88.6k entries (1.14-1.49x one call), mixed at 201k-238k (the unfused
#: call taking 0.85-1.32x the fused one's time), unfused faster in 22 of 24 cases from 368k
#: entries (the fused call taking 0.97-1.72x its time).
FUSE_MAX_NNZ_REPLAYED = 150_000
#: ... and on a signature's first call and on calls never replayed (NumPy, CuPy, ``out=``, a
#: matrix made for one call), whose unfused path costs 170-400 µs of host time (validation,
#: dispatch, three launches), up to this many entry-columns (nnz x (K + F)), where the fused
#: kernel (about 2 ns per thousand entry-columns) takes that long.
#: Measured (same graphs, unreplayed): back to back, fused faster in 43 of 44 cases at or below
#: it (flickr attention K = 32: 0.91x), unfused 1.01-2.1x faster in all 16 above it.
FUSE_MAX_WORK = 1e8

#: ``Algorithm.dtypes``: every algorithm takes FULL_DTYPES; those marked ALL_DTYPES also 16-bit ones.
FULL_DTYPES = ("float32", "float64")
ALL_DTYPES = FULL_DTYPES + HALF_NAMES


@dataclass(frozen=True)
class Algorithm:
    name: str
    backend: str
    run: object
    summary: str
    reductions: tuple = ("sum", "mean", "max", "min")
    dtypes: tuple = FULL_DTYPES
    precisions: tuple = ("ieee",)  # "tf32": float32 products on the tensor cores (``run(..., tf32=True)``)
    half_on_tensor_cores: bool = False  # float16/bfloat16 operands use mma.sync (sm_80 and later)


def _spmm_tuned(A, B, C, reduce, *, stream=0, families=None):
    from .select import tuner

    if A.nnz == 0:  # nothing to tune: HP writes the identity rows
        return hp.spmm_hp(A, B, C, reduce, stream=stream)
    families = families or tuner.FAMILIES
    choice = tuner.choose(A, "spmm", C.shape[1], A.dtype, reduce, families=families)
    tuner.run(choice, "spmm", A, (B, C), reduce, stream)


def _sddmm_tuned(A, X, Y, out, *, stream=0, families=None):
    from .select import tuner

    if A.nnz == 0:
        return
    families = families or tuner.FAMILIES
    tuner.run(tuner.choose(A, "sddmm", X.shape[1], A.dtype, families=families), "sddmm", A, (X, Y, out), stream=stream)


def spmm_add(A, B, C, *, stream=0):
    """C += A B (sum) for a device CSR A and device arrays B, C (float32 or float64): HP-SpMM's
    filled kernel with every row added atomically and no fill, the one kernel that accumulates
    (:mod:`numbasparse.distributed` adds the products of its halo's column blocks so)."""
    hp.spmm_hp(A, B, C, "sum", stream=stream, accumulate=True)


def _spmm_blocked(A, B, C, reduce, *, stream=0):
    tiled.spmm_tiled(A, tiled.row_order(A, False), B, C, tiled.CS267_SPMM, stream=stream)


def _sddmm_blocked(A, X, Y, out, *, stream=0):
    tiled.sddmm_tiled(A, X, Y, out, tiled.cs267_sddmm_schedule(X.shape[1]), stream=stream)


def fuse_pays(A, k, n_cols, replayed=False):
    """True where ``fused="auto"`` runs the fused kernel on device :class:`~numbasparse.CSR` A with
    X of ``k`` columns and an output of ``n_cols``: where one warp covers the output row in one
    pass (wider, the fused kernel computes every score again per pass) and its GPU time is
    predicted below what the unfused path costs beyond its kernels (``replayed``, a repeated
    call: its launches, :data:`FUSE_MAX_NNZ_REPLAYED`; else a full call's host time,
    :data:`FUSE_MAX_WORK`); always for float16 values, whose range (65504) cannot hold the raw
    scores the unfused path stores in A's dtype (the fused kernel keeps them in float32)."""
    if np.dtype(A.dtype) == np.float16:
        return True
    if not fused.one_pass(n_cols):
        return False
    if replayed:
        return A.nnz <= FUSE_MAX_NNZ_REPLAYED
    return A.nnz * (k + n_cols) <= FUSE_MAX_WORK


def check_fused(fused):
    """ValueError/TypeError unless ``fused`` is True, False or "auto"."""
    if isinstance(fused, str) and fused != "auto":
        raise ValueError(f"fused must be True, False or 'auto', got {fused!r}")
    if not isinstance(fused, (bool, np.bool_, str)):
        raise TypeError(f"fused must be True, False or 'auto', got {type(fused).__name__} {fused!r}")


def gcn_fuses(fused, has_matmul):
    """Whether ``spmm_dense`` runs HC-SpMM's fused kernel: for ``fused=True``, and for "auto"
    only where no matmul can run on the operands (Numba and other CUDA-array-interface arrays:
    numbasparse calls no BLAS of its own); the fused kernel aggregates one 16-row window per block
    and lost to SpMM + cuBLAS in every measured case, its product with W on the tensor cores too."""
    if fused == "auto":
        return not has_matmul
    if not fused and not has_matmul:
        raise ValueError("fused=False needs a matmul for X and W: pass them as torch tensors, CuPy arrays or "
                         "NumPy arrays (Numba device arrays have none; fused=True runs the fused kernel)")
    return bool(fused)


def check_gcn_precision(precision, fused, dtype, backend):
    """ValueError/TypeError unless ``spmm_dense`` can give ``precision`` with ``fused``, operands of
    ``dtype`` on ``backend`` (the resolved one): "ieee" always; "tf32" on the fused kernel only
    (the unfused path's matmul follows its framework's TF32 setting), for float32 operands, on
    the CUDA backend of a GPU with TF32 tensor cores."""
    check_option("precision", precision, PRECISIONS)
    if precision != "tf32":
        return
    if fused is not True:
        raise ValueError("precision='tf32' is the fused kernel's (fused=True); the unfused path's matmul follows "
                         "the framework's own TF32 setting")
    if dtype != np.float32:
        raise ValueError(f"precision='tf32' takes float32 operands, not {dtype.name}")
    if backend == "cpu":
        raise ValueError("precision='tf32' runs on the CUDA backend's fused kernel (the tensor cores), not on the CPU")
    require_sm80("TF32 tensor cores (precision='tf32')", "precision='ieee'")


def matmul_first(f_in, f_out):
    """Whether ``(A @ X) @ W`` is computed as ``A @ (X @ W)``: where W has fewer columns than
    rows, so that the SpMM, whose time grows with the columns of each row it gathers, reads the
    narrower operand."""
    return f_out < f_in


def sddmm_then_spmm(A, X, Y, Z, out, *, softmax, fuse, stream=0, like=None, replayed=False):
    """``out = f(A ⊙ (X Y^T)) Z`` with f the identity or the per-row softmax (graph attention).
    fuse: True for one kernel (:mod:`numbasparse.cuda.fused`), False for HP-SDDMM, [edge
    softmax], HP-SpMM with the scores as A's values (three launches and an nnz-long
    intermediate in A's dtype: 16-bit values round the scores once more), "auto" for
    :func:`fuse_pays`'s choice (``replayed``: the call will be replayed).  like: the dense operand (:class:`arrays.Dense`) whose framework
    allocates the intermediates (its allocator, its stream: a CUDA-graph capture sees them), else
    Numba's."""
    if fuse == "auto":
        fuse = fuse_pays(A, X.shape[1], Z.shape[1], replayed)
    if fuse:
        (fused.attention if softmax else fused.sddmm_spmm)(A, X, Y, Z, out, stream=stream)
        return

    def intermediate():
        if like is not None:
            made = arrays.empty_like_framework(like, (A.nnz,), A.dtype)  # (object, view): keep both
        else:
            from numba import cuda

            array = cuda.device_array(A.nnz, dtype=storage_dtype(A.dtype), stream=stream)
            made = array, array
        launch.intermediate(made[1])  # (a replay of this call allocates its own)
        return made

    scores = intermediate()
    hp.sddmm_hp(A, X, Y, scores[1], stream=stream)
    if softmax:
        weights = intermediate()
        fused.edge_softmax(A, scores[1], weights[1], stream=stream)
        scores = weights
    hp.spmm_hp(A, Z, out, "sum", stream=stream, values=scores[1])


_SM80_CHECKED = []


def has_sm80():
    """Whether the current GPU has compute capability 8.0 or newer (bfloat16 conversions, TF32
    and 16-bit tensor cores); True on the simulator.  Asked of the driver once per GPU."""
    if simulator_enabled():
        return True
    gpu = 0 if one_device() else current_gpu()
    if gpu in _SM80_CHECKED:
        return True
    from numba import cuda

    if cuda.get_current_device().compute_capability < (8, 0):
        return False
    _SM80_CHECKED.append(gpu)  # (once per GPU: a call's host time counts)
    return True


def require_sm80(what, instead):
    """ValueError unless :func:`has_sm80`, which ``what`` needs; ``instead``: what to use."""
    if not has_sm80():
        from numba import cuda

        capability = cuda.get_current_device().compute_capability
        raise ValueError(f"{what} need a GPU of compute capability 8.0 or newer (this one is "
                         f"{capability[0]}.{capability[1]}); use {instead}")


def check_option(name, value, allowed):
    """``value`` if it is one of the strings ``allowed``, else TypeError (not a string) or
    ValueError naming the argument ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {allowed}, got {type(value).__name__} {value!r}")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


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
              "HP-SpMM hybrid node/edge parallel, equal nonzeros per lane group, vector loads",
              dtypes=ALL_DTYPES),
    Algorithm("slab", "cuda", slab.spmm_slab,
              "column-slab tiles, one block per SM: B rows re-used from L1 (dense graphs, N >= 32)",
              dtypes=ALL_DTYPES),
    Algorithm("hc", "cuda", functools.partial(hc.spmm_hc, mode="hybrid"),
              "HC-SpMM 16-row windows, dense-tile or CUDA-core path per window (LR selector); 16-bit tiles on "
              "the tensor cores", ("sum",), dtypes=ALL_DTYPES, precisions=("ieee", "tf32"), half_on_tensor_cores=True),
    Algorithm("hc_tiles", "cuda", functools.partial(hc.spmm_hc, mode="tiles"),
              "HC-SpMM, every window on the dense-tile path", ("sum",), dtypes=ALL_DTYPES,
              precisions=("ieee", "tf32"), half_on_tensor_cores=True),
    Algorithm("hc_cores", "cuda", functools.partial(hc.spmm_hc, mode="cores"),
              "HC-SpMM, every window on the CUDA-core path", ("sum",), dtypes=ALL_DTYPES),
    Algorithm("tuned", "cuda", _spmm_tuned,
              "the fastest of auto's choice, HP variants, the column slab and G-Sparse tiles, timed once per "
              "graph, N, dtype, reduction and GPU", dtypes=ALL_DTYPES),
    Algorithm("tiled", "cuda", functools.partial(_spmm_tuned, families=("tiled",)),
              "G-Sparse 2-D shared-memory tiled SpMM, schedule chosen by cost model + autotuner", ("sum",)),
    Algorithm("blocked", "cuda", _spmm_blocked,
              "CS267 blocked SpMM: a block per row, a thread per output, entries staged in shared memory",
              ("sum",)),
    Algorithm("cpu_rows", "cpu", cpu.spmm_rows, "numba.njit(parallel=True), rows across cores",
              dtypes=ALL_DTYPES),
)

SDDMM = _table(
    Algorithm("warp_row", "cuda", sddmm_warp.sddmm_warp_row,
              "one warp per row, shuffle-reduced dot products"),
    Algorithm("hp", "cuda", hp.sddmm_hp,
              "HP-SDDMM hybrid parallel, equal nonzeros per warp, lane groups sized to K", dtypes=ALL_DTYPES),
    Algorithm("tuned", "cuda", _sddmm_tuned,
              "the fastest of auto's choice, HP-SDDMM variants and G-Sparse tiles, timed once per graph, K, "
              "dtype and GPU", dtypes=ALL_DTYPES),
    Algorithm("tiled", "cuda", functools.partial(_sddmm_tuned, families=("tiled",)),
              "G-Sparse tiled SDDMM (X rows in shared memory, adaptive warp shuffle), autotuned schedule"),
    Algorithm("blocked", "cuda", _sddmm_blocked,
              "CS267 blocked SDDMM: a block per row, X[i] in shared memory, 4 lanes per entry"),
    Algorithm("cpu_rows", "cpu", cpu.sddmm_rows, "numba.njit(parallel=True), rows across cores",
              dtypes=ALL_DTYPES),
)

TABLES = {"spmm": SPMM, "sddmm": SDDMM}


def algorithms(op, backend=None):
    """Names that ``algorithm=`` accepts for ``op`` ("spmm" or "sddmm"), optionally of one backend."""
    check_option("op", op, tuple(TABLES))
    if backend is not None:
        check_option("backend", backend, BACKENDS[1:])
    return tuple(name for name, a in TABLES[op].items() if backend in (None, a.backend))


def slab_and_hp_us(nnz, segments, n_cols, itemsize):
    """(slab, HP) predicted µs on this GPU's SMs: the column-slab SpMM's ``segments`` (over all
    column tiles) at SLAB_SEGMENT_NS each per SM; HP-SpMM's HP_FIXED_US plus its gathers (``nnz``
    rows of ``n_cols`` values of ``itemsize`` bytes) at HP_GATHER_BYTES_PER_SM per SM."""
    sms = device_limits()[0]
    return (segments * SLAB_SEGMENT_NS / sms / 1e3,
            HP_FIXED_US + nnz * n_cols * itemsize / (HP_GATHER_BYTES_PER_SM * sms) * 1e6)


def slab_keeps_up_with_hp(nnz, segments, n_cols, itemsize):
    """True where the column-slab SpMM's predicted time is at most SLAB_GUARD_MARGIN times
    HP-SpMM's (:func:`slab_and_hp_us`); False: ``auto`` vetoes the slab kernel."""
    slab_us, hp_us = slab_and_hp_us(nnz, segments, n_cols, itemsize)
    return slab_us <= SLAB_GUARD_MARGIN * hp_us


def slab_pays(A, n_cols, itemsize):
    """True where ``algorithm="auto"`` runs the column-slab SpMM rather than HP-SpMM: N >=
    SLAB_MIN_COLUMNS (SLAB_MIN_COLUMNS_SHORT_ROWS on graphs of short rows), B takes at most
    SLAB_MAX_L2_SHARE of the L2 cache, the default tiling's
    segments (runs of a row's entries in one column slab) average >= SLAB_MIN_SEGMENT entries
    (SLAB_MIN_SEGMENT_SHORT_ROWS on graphs of short rows), counted on A's pattern, and their
    predicted time keeps up with HP's (:func:`slab_keeps_up_with_hp`); for 16-bit operands
    (``itemsize`` 2) only on large graphs up to N = SLAB_MAX_COLUMNS_HALF.  Counted on the GPU for a
    device :class:`~numbasparse.CSR` (the answer kept in ``A.cache``: the rule runs on every
    call), on the host for a scipy matrix (L2, SMs and the tiling are the current GPU's either
    way)."""
    if n_cols < SLAB_MIN_COLUMNS or A.nnz == 0:
        return False
    if itemsize == 2 and (A.nnz < SLAB_MIN_NNZ_HALF or n_cols > SLAB_MAX_COLUMNS_HALF):
        return False

    def decide():
        if A.shape[1] * n_cols * itemsize > SLAB_MAX_L2_SHARE * memory_system()[0]:
            return False
        host = A.tocsr() if sp.issparse(A) else None  # (duplicates summed)
        nnz = host.nnz if host is not None else A.nnz
        short = hp.short_rows(nnz, nonempty_rows(host.indptr) if host is not None
                              else hp.pattern_fact(A, "nonempty_rows"))
        if short and n_cols < SLAB_MIN_COLUMNS_SHORT_ROWS:
            return False
        tile_cols, width, _ = slab.tiling(nnz, A.shape[1], n_cols, itemsize)
        if host is not None:
            counted = entries_per_segment(host.indptr, host.indices, width)
        else:
            counted = slab.entries_per_segment_on_device(A, width)
        if counted < (SLAB_MIN_SEGMENT_SHORT_ROWS if short else SLAB_MIN_SEGMENT):
            return False
        # (segments uncut: up to counted / max_segment fewer than the kernel runs, a few percent)
        return slab_keeps_up_with_hp(nnz, nnz / counted * cdiv(n_cols, tile_cols), n_cols, itemsize)

    return decide() if sp.issparse(A) else A.cache.get_or_build("plans", ("slab_pays", n_cols, itemsize), decide)


def auto_name(op, backend, n_cols, itemsize=4, matrix=None, dtype=None):
    """The algorithm ``"auto"`` picks on ``backend`` (the rules of the table above)."""
    if backend == "cpu":
        return "cpu_rows"
    takes = dtype is None or dtype.name in SPMM["slab"].dtypes
    if op == "spmm" and takes and matrix is not None and slab_pays(matrix, n_cols, itemsize):
        return "slab"
    return "hp"


PRECISIONS = ("ieee", "tf32")


def resolve(op, algorithm, backend, on_device, n_cols, reduce="sum", itemsize=4, matrix=None, dtype=None,
            precision="ieee"):
    """The :class:`Algorithm` to run, or ValueError naming the bad argument (``itemsize``: the
    operands', ``matrix``: A, a device :class:`~numbasparse.CSR` or a scipy matrix, for the rules of
    ``algorithm="auto"``; ``dtype``: the operands', which the algorithm must take; ``precision``:
    "tf32" only on float32 operands and an algorithm that offers it, named explicitly)."""
    table = TABLES[op]
    check_option("backend", backend, BACKENDS)
    check_option("precision", precision, PRECISIONS)
    if precision != "ieee":
        offers = [a.name for a in table.values() if precision in a.precisions]
        if algorithm not in offers:
            raise ValueError(f"precision={precision!r} runs on algorithm {' or '.join(map(repr, offers))}, "
                             f"not {algorithm!r}")
        if dtype is not None and dtype.name != "float32":
            raise ValueError(f"precision={precision!r} takes float32 operands, not {dtype.name}")
    check_option("algorithm", algorithm, ("auto",) + tuple(table))
    if algorithm != "auto":
        wanted = table[algorithm].backend
        if backend not in ("auto", wanted):
            raise ValueError(f"algorithm {algorithm!r} runs on backend {wanted!r}, not {backend!r}")
        backend = wanted
    if backend == "auto":
        backend = "cuda" if (on_device or gpu_present()) else "cpu"
    if backend == "cpu" and on_device:
        raise ValueError("backend='cpu' needs host (NumPy) arrays, but the operands are CUDA arrays")
    if backend == "cuda":
        require_cuda(f"backend='cuda' (algorithm {algorithm!r})")
        if dtype is not None and dtype.name == "bfloat16":
            require_sm80("bfloat16 operands", "float16 or float32")
        if precision == "tf32":
            require_sm80("TF32 tensor cores (precision='tf32')", "precision='ieee'")
    name = algorithm if algorithm != "auto" else auto_name(op, backend, n_cols, itemsize, matrix, dtype)
    if backend == "cuda" and table[name].half_on_tensor_cores and dtype is not None and dtype.name == "float16":
        require_sm80(f"float16 tiles on the tensor cores (algorithm {name!r})", "algorithm 'hp' or 'hc_cores'")
    if op == "spmm" and reduce not in table[name].reductions:
        raise ValueError(f"algorithm {name!r} supports reduce in {table[name].reductions}, not {reduce!r}")
    if dtype is not None and dtype.name not in table[name].dtypes:
        takers = [a.name for a in table.values() if dtype.name in a.dtypes]
        raise ValueError(f"algorithm {name!r} takes {' and '.join(table[name].dtypes)} operands, not {dtype.name}; "
                         f"{dtype.name} runs on {', '.join(takers)} (and 'auto')")
    return table[name]
