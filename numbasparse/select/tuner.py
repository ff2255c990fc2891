"""The autotuner of ``algorithm="tuned"``: G-Sparse's schedule search (paper 002, section III-D)
applied to the whole library.  One schedule space spans the CUDA kernel families; a candidate
(:class:`Candidate`) is a family and its parameters.  For one call (:func:`candidates`):

- the rules' own choice, what ``algorithm="auto"`` runs, always ranked first: the tuned choice
  is the fastest of a set that holds auto's, so it is never one that timed slower than auto's;
- HP-SpMM around its rules: DTP's nonzeros per group halved and doubled, the other gather
  depth (not for lanes of 8 values, which would spill), the other launch mode (the filled launch
  writes a 16-bit C through a float32 workspace and a rounding pass), the other segments than the
  rule's (equal predicted work, :data:`numbasparse.cuda.hp.ROW_END_COST`, or equal entries: the
  filled launch in each block order and the single launch in order and scattered), the single
  launch on A's rows shuffled (:func:`numbasparse.cuda.hp.shuffled_rows`),
  and where whole-warp groups cover N in several column tiles, tiles of
  twice the columns (or, where the rule took those, :func:`numbasparse.cuda.hp.wide_tiles`, the
  narrow ones); HP-SDDMM: lane
  groups per nonzero halved and doubled (each lane loops over K) and DTP halved and doubled;
- the column-slab SpMM, where it takes the dtype;
- HC-SpMM (sum, 16-bit operands: its tiles on the tensor cores, whose products of 16-bit inputs
  are exact, so the result is what ``auto``'s is up to summation order), its selector's hybrid
  and every window on tiles;
- G-Sparse's 2-D tiled kernels (sum, float32/float64): the TILED_TOP schedules its analytic
  cost model ranks first (:func:`rank`; the paper's model is a neural network trained on
  measured kernels, this one needs no training data and is easy to check against an exhaustive
  search, ``tools/tune_report.py``).

After the rules' choice come the families the cost model does not cover (HC-SpMM), then the
others in the order of the cost model of every family (:mod:`numbasparse.select.cost`; only where
HP is in the space: ``algorithm="tiled"`` keeps G-Sparse's order); the first TUNE_TOP are timed
(CUDA events around back-to-back batches of about 1 ms, median of 5, after a warm-up launch
that compiles), and the fastest is kept (one other than the rules' choice only if it
still wins when the two are timed again, alternating: :func:`tune`): in the matrix's cache, and
on disk in ``tuned.json`` in numbasparse's cache directory (:mod:`numbasparse.disk`), keyed by
op, GPU name, graph signature (a hash of indptr and indices), N, dtype and reduction, with every
timed candidate's time (the model is fitted to a search that times all of them:
``benchmarks/probes/tuned_vs_auto.py --all``, ``tools/fit_cost_model.py``).  On the
simulator, where timings mean nothing, the first candidate is taken.
"""
import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from .. import reductions
from . import cost
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
    l2_bytes: int = 50 << 20

    @classmethod
    def current(cls):
        from numba import cuda

        from ..cuda.device import device_limits, memory_system

        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        sms, threads_per_sm, _ = device_limits()
        return cls(name, sms, threads_per_sm, l2_bytes=memory_system()[0])


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


#: Part of every cache key: raise it when the schedule space, a family's parameters or the way a
#: choice is made change, so that choices made otherwise are timed again.
SPACE_VERSION = 13


def cache_key(device_name, signature, n_cols, dtype, op="spmm", reduce="sum", families=None):
    tail = "" if op != "spmm" or reduce == "sum" else f"|{reduce}"
    scope = "" if families is None else "|" + ",".join(families)
    return f"v{SPACE_VERSION}|{op}|{device_name}|{signature}|{n_cols}|{np.dtype(dtype).name}{tail}{scope}"


#: The parameters each family's launcher takes (a stored choice with others is not used).
PARAMETERS = {("spmm", "hp"): {"nnz_per_group", "depth", "single", "layout", "block_order", "shuffled", "balanced"},
              ("sddmm", "hp"): {"group", "nnz_per_warp"}, ("spmm", "slab"): set(), ("spmm", "hc"): {"mode"}}


def load_cached(key):
    """The candidate stored under ``key``, or None (also for an entry this code cannot run)."""
    path = cache_path()
    if path is None:
        return None
    try:
        entry = json.loads(path.read_text()).get(key)
        if not entry:
            return None
        candidate = Candidate.from_dict(entry["choice"])
        op = key.split("|")[1]
        if candidate.family == "tiled":
            if not _tiled(op, dict(candidate.params)).valid():
                return None
        elif not set(dict(candidate.params)) <= PARAMETERS[(op, candidate.family)]:
            return None
        return candidate
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def store(key, candidate, record):
    path = cache_path()
    if path is None:
        return
    with locked(path):  # (other processes may be storing their choices)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {}
        doc[key] = dict(record, choice=candidate.as_dict())
        write_atomic(path, json.dumps(doc, indent=1).encode())


# The whole schedule space ----------------------------------------------------------------------

#: G-Sparse tiled schedules taken into the space: the cost model's first TILED_TOP beside the
#: other families, its first TILED_TOP_ALONE for ``algorithm="tiled"`` (whose best was within
#: 1.00-1.03x of an exhaustive search, BENCHMARKS.md "G-Sparse tuned and CS267 blocked kernels").
TILED_TOP, TILED_TOP_ALONE = 3, 8
FAMILIES = ("hp", "slab", "hc", "tiled")


@dataclass(frozen=True)
class Candidate:
    """One point of the schedule space: a kernel ``family`` ("hp", "slab", "hc" or "tiled") and its
    parameters as sorted (name, value) pairs; no parameters means the family's own rules."""
    family: str
    params: tuple = ()

    @classmethod
    def of(cls, family, **params):
        return cls(family, tuple(sorted(params.items())))

    def as_dict(self):
        return dict(family=self.family, params=dict(self.params))

    @classmethod
    def from_dict(cls, entry):
        if entry["family"] not in FAMILIES:
            raise ValueError(f"unknown family {entry['family']!r}")
        # (JSON gives lists: a layout is a tuple, hashable as a candidate must be)
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in entry["params"].items()}
        return cls.of(entry["family"], **params)

    def __str__(self):
        return f"{self.family}({', '.join(f'{k}={v}' for k, v in self.params)})"


def _tiled(op, params):
    return Schedule(**params) if op == "spmm" else SddmmSchedule(**params)


def run(candidate, op, A, operands, reduce="sum", stream=0):
    """Launch ``candidate`` on device CSR ``A``: ``operands`` is (B, C) for SpMM, (X, Y, out) for
    SDDMM (device arrays, 16-bit values as their bits)."""
    from ..cuda import hc, hp, slab, tiled

    params = dict(candidate.params)
    if op == "spmm":
        B, C = operands
        if candidate.family == "hp":
            hp.spmm_hp(A, B, C, reduce, stream=stream, **params)
        elif candidate.family == "slab":
            slab.spmm_slab(A, B, C, reduce, stream=stream)
        elif candidate.family == "hc":
            hc.spmm_hc(A, B, C, reduce, stream=stream, **params)
        else:
            schedule = _tiled(op, params)
            tiled.spmm_tiled(A, tiled.row_order(A, schedule.balance), B, C, schedule, stream=stream)
    elif candidate.family == "hp":
        hp.sddmm_hp(A, *operands, stream=stream, **params)
    else:
        tiled.sddmm_tiled(A, *operands, _tiled(op, params), stream=stream)


def candidates(A, op, n_cols, dtype, reduce="sum", operands=None, families=FAMILIES, device=None, by_model=True):
    """The schedule space for one call, ranked (module docstring): the candidates of
    ``families`` that take ``dtype`` and ``reduce``, the rules' choice first, then (``by_model``,
    where HP is in the space) the families the cost model does not cover and the others in its
    order.  ``operands``: device arrays the plans read the alignment of (default: fresh ones)."""
    from .. import dispatch
    from ..cuda import hp
    from ..dtypes import is_half

    dtype = np.dtype(dtype)
    operands = operands or scratch_operands(A, op, n_cols, dtype)
    itemsize = dtype.itemsize
    ranked = []
    hp_params = None  # HP's own parameters, where HP is in the space
    if op == "spmm":
        rule = dispatch.auto_name("spmm", "cuda", n_cols, itemsize, A, dtype)
        if rule in families:
            ranked.append(Candidate.of(rule))
        if "hp" in families:
            plan = _hp_spmm_plan(A, n_cols, reduce, operands)
            hp_params = _spmm_rule(plan)
            npg, depth, single, (lanes, vec, cf) = hp_params
            rule_hp = (npg, depth, single)
            npgs = sorted({npg, max(4, npg // 2), 2 * npg})
            depths = (depth,) if not hp.gathers_fit(vec * cf, 2 if is_half(dtype) else 4) else (
                depth, 1 if depth > 1 else (2 * hp.GATHER_DEPTH if is_half(dtype) else hp.GATHER_DEPTH))
            singles = (single, not single)
            around = [(g, d, s) for g in npgs for d in depths for s in singles if (g, d, s) != rule_hp]
            around.sort(key=lambda p: sum(a != b for a, b in zip(p, rule_hp)))  # nearest the rules first
            if rule != "hp":
                ranked.append(Candidate.of("hp"))
            ranked += [Candidate.of("hp", nnz_per_group=g, depth=d, single=bool(s)) for g, d, s in around]
            # the other segments: equal predicted work where the rule takes equal entries, else equal
            # entries, the filled launch in each block order and the single launch in order and
            # scattered (its look-back follows any), except the rule's own plan; and the single
            # launch on A's rows in a random order read through a map (hp.shuffled_rows)
            if not plan.balanced:
                ranked.append(Candidate.of("hp", balanced=True, block_order="in_order", shuffled=False))
            ranked += [Candidate.of("hp", single=single, balanced=False, block_order=order, shuffled=False)
                       for single, orders in ((True, ("in_order", "scattered")), (False, hp.BLOCK_ORDERS))
                       if plan.single or not single for order in orders
                       if plan.balanced or (single, order) != (plan.single, plan.block_order)]
            if plan.single and hp.row_map_fits(A):
                ranked.append(Candidate.of("hp", single=True, shuffled=True))
            # HP's layout neighbour where whole warps cover N in several tiles: tiles of twice or
            # half the columns, whichever the rule (hp.wide_tiles) did not take
            if lanes == hp.WARP and cf == 2:  # (whole-warp groups take two vectors only as wide tiles)
                ranked.append(Candidate.of("hp", layout=(lanes, vec, 1)))
            elif lanes == hp.WARP and cf == 1 and 2 * vec <= hp.WIDE_TILE_VALUES and n_cols > lanes * vec:
                ranked.append(Candidate.of("hp", layout=(lanes, vec, 2)))
        if "slab" in families and rule != "slab" and dtype.name in dispatch.SPMM["slab"].dtypes:
            ranked.append(Candidate.of("slab"))
        if "hc" in families and is_half(dtype) and reduce == "sum" and dispatch.has_sm80():
            ranked += [Candidate.of("hc", mode=mode) for mode in ("hybrid", "tiles")]
    else:
        if "hp" in families:
            ranked.append(Candidate.of("hp"))
            hp_params = hp_rule(A, op, n_cols, dtype, reduce, operands)
            _, group, npw = hp_params
            groups = [g for g in (group, 2 * group, group // 2) if 1 <= g <= hp.WARP]
            npws = sorted({npw, max(1, npw // 2), 2 * npw})
            ranked += [Candidate.of("hp", group=g, nnz_per_warp=w) for g in groups for w in npws
                       if (g, w) != (group, npw)]
    if "tiled" in families and not is_half(dtype) and (op == "sddmm" or reduce == "sum"):
        device = device or _device()
        lengths = np.diff(A.host_indptr)
        top = rank(lengths, n_cols, device, itemsize, A.index_dtype.itemsize, op)
        top = top[:TILED_TOP_ALONE if tuple(families) == ("tiled",) else TILED_TOP]
        ranked += [Candidate.of("tiled", **asdict(s)) for s in top]
    if by_model and hp_params is not None and n_cols > 0 and len(ranked) > 2:
        device = device or _device()
        stats = _stats(A, device)
        constants = cost.shipped()
        keys = {c: _rank_key(c, op, A, n_cols, dtype, hp_params, reduce, stats, device, constants, operands)
                for c in ranked[1:]}
        # the rules' pick, the families the model does not cover (it cannot rank them), then the model's order
        ranked = ranked[:1] + [c for c in ranked[1:] if keys[c] is None] + sorted(
            (c for c in ranked[1:] if keys[c] is not None), key=keys.get)
    return ranked


def _stats(A, device):
    from ..cuda import hp

    return A.cache.get_or_build("plans", ("cost_stats", device.sms, device.l2_bytes), lambda: cost.Stats(
        A.shape[0], A.shape[1], A.nnz, hp.pattern_fact(A, "nonempty_rows"), A.index_dtype.itemsize, device.sms,
        device.l2_bytes))


def hp_rule(A, op, n_cols, dtype, reduce, operands):
    """HP's own parameters for the call: (nnz_per_group, depth, single, layout) of its SpMM plan,
    or (vec, group, nnz_per_warp) of its SDDMM layout and DTP."""
    from ..cuda import hp

    if op == "spmm":
        return _spmm_rule(_hp_spmm_plan(A, n_cols, reduce, operands))
    X, Y, _ = operands
    return hp.sddmm_rules(A, n_cols, X, Y)


def _hp_spmm_plan(A, n_cols, reduce, operands):
    from ..cuda import hp

    return hp._spmm_plan(A, reductions.CODES[reduce], n_cols, *operands, None, None, None, None, None)


def _spmm_rule(plan):
    return plan.nnz_per_group, plan.depth, plan.single, plan.layout


def resolved_hp(candidate, A, n_cols, reduce, rule, operands):
    """An HP-SpMM candidate's (nnz_per_group, depth, single, layout): its own parameters, the
    rules' for the others; a candidate of another layout takes what HP's plan gives that layout."""
    from ..cuda import hp

    params = dict(candidate.params)
    if "layout" in params:
        plan = hp._spmm_plan(A, reductions.CODES[reduce], n_cols, *operands, None, None, tuple(params["layout"]),
                             None, None)
        rule = (plan.nnz_per_group, plan.depth, plan.single, plan.layout)
    npg, depth, single, layout = rule
    return (params.get("nnz_per_group", npg), params.get("depth", depth), params.get("single", single), layout)


def _rank_key(candidate, op, A, n_cols, dtype, rule, reduce, stats, device, constants, operands):
    """The cost model's order (:func:`numbasparse.select.cost.rank_key`); None for a family it does
    not model (HC-SpMM)."""
    inputs = model_inputs(candidate, op, A, n_cols, dtype, rule, stats, device, operands, reduce)
    return None if inputs is None else cost.rank_key(constants, stats, *inputs)


def model_inputs(candidate, op, A, n_cols, dtype, rule, stats, device, operands, reduce="sum"):
    """(family, terms, slots) of ``candidate`` for :func:`numbasparse.select.cost.predict_us`, or
    None for a family the model does not cover.  ``rule``: HP's own parameters for the call."""
    from ..cuda import slab

    itemsize = np.dtype(dtype).itemsize
    params = dict(candidate.params)
    if candidate.family == "tiled":
        lengths = np.diff(A.host_indptr)
        if op == "spmm":
            return "tiled", None, predicted_cost(Schedule(**params), lengths, n_cols, device, itemsize,
                                                 A.index_dtype.itemsize)
        return "tiled_sddmm", None, predicted_sddmm_cost(SddmmSchedule(**params), lengths, n_cols, device,
                                                         itemsize, A.index_dtype.itemsize)
    if op == "sddmm" and candidate.family == "hp":
        vec, group, npw = rule
        return "hp", cost.hp_sddmm_terms(stats, n_cols, itemsize, vec, params.get("group", group),
                                         params.get("nnz_per_warp", npw)), None
    if candidate.family == "hp":
        return "hp", cost.hp_spmm_terms(stats, n_cols, itemsize, *resolved_hp(candidate, A, n_cols, reduce, rule,
                                                                              operands)), None
    if candidate.family == "slab":
        lanes, vec, _ = slab.lane_layout(n_cols, itemsize, *operands)
        _, width, _ = slab.tiling(A.nnz, A.shape[1], n_cols, itemsize, *operands)
        eps = slab.entries_per_segment_on_device(A, width)
        return "slab", cost.slab_spmm_terms(stats, n_cols, itemsize, lanes, vec, eps), None
    return None


def _device():
    from ..cuda.device import simulator_enabled

    return Device("simulator", 1) if simulator_enabled() else Device.current()


def scratch_operands(A, op, n_cols, dtype, seed=0):
    """Device operands to time candidates on: random values in ``dtype`` (never all ones), a
    result array of the storage dtype."""
    from numba import cuda

    from ..arrays import device_storage
    from ..dtypes import storage_dtype

    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)

    def dense(rows):
        return cuda.to_device(device_storage(rng.standard_normal((rows, n_cols)).astype(dtype)))

    if op == "spmm":
        return dense(A.shape[1]), cuda.device_array((A.shape[0], n_cols), storage_dtype(dtype))
    return dense(A.shape[0]), dense(A.shape[1]), cuda.device_array(A.nnz, storage_dtype(dtype))


#: A candidate that beats the rules' pick (the first) in the first pass is timed against it again,
#: CONFIRM_ROUNDS times each, in alternating order, and kept only if its median still wins: the
#: pass times the rules' pick first, right after the compiles, where the H100 read it 1.2-2.2x
#: slower than back to back, and kept winners that were 0.85-0.95x of auto (BENCHMARKS.md,
#: "algorithm='tuned'").  (3 rounds: not measured against other counts.)
CONFIRM_ROUNDS = 3


def tune(ranked, time_candidate, top_k=None):
    """Time the first ``top_k`` of ``ranked`` (all when None) with ``time_candidate(c) -> ms``;
    returns (the fastest, a record of what was timed: ``first_ms`` is the first candidate's, the
    rules' own choice in the whole space; ``confirmed`` whether another winner held when timed
    again against it, None when the rules' choice won the pass)."""
    timed = [(time_candidate(c), c) for c in (ranked if top_k is None else ranked[:top_k])]
    best_ms, best = min(timed, key=lambda t: t[0])
    first_ms, first = timed[0]
    record = dict(best_ms=best_ms, first_ms=first_ms, timed=len(timed), times={str(c): ms for ms, c in timed},
                  confirmed=None)
    if best is not first:
        again = {first: [], best: []}
        for r in range(CONFIRM_ROUNDS):  # (each of the two first in every other round)
            for c in (first, best) if r % 2 == 0 else (best, first):
                again[c].append(time_candidate(c))
        again_first, again_best = float(np.median(again[first])), float(np.median(again[best]))
        record.update(confirmed=again_best < again_first, again_ms=(again_first, again_best))
        if not record["confirmed"]:
            best, record["best_ms"] = first, first_ms
    return best, record


#: Candidates timed: the rules' pick and the cost model's first 7 others.  Fitted on all 18
#: shared graphs but the one ranked, in turn, that keeps 0.988x (SpMM) and 0.996x (SDDMM) of the
#: full search's best time, geomean over 144 H100 cases, timing 8 of 12-17 candidates
#: (BENCHMARKS.md "The tuner's cost model across families").
TUNE_TOP = 8


def choose(A, op, n_cols, dtype, reduce="sum", *, families=FAMILIES, top_k=None):
    """The candidate ``algorithm="tuned"`` runs for (op, device CSR A, N, dtype, reduce): from A's
    cache, else the on-disk cache, else timed now and stored: the first ``top_k`` ranked
    candidates (None: TUNE_TOP of them, or all where TUNE_TOP is None, as ``tuned_vs_auto.py
    --all`` sets it).  ``families`` narrows the space (``algorithm="tiled"``: G-Sparse's)."""
    from ..cuda.device import simulator_enabled

    dtype = np.dtype(dtype)
    families = tuple(families)

    def build():  # (under the matrix cache's lock: two threads never time the space at once)
        if simulator_enabled():
            return candidates(A, op, n_cols, dtype, reduce, families=families, by_model=False)[0]
        device = _device()
        signature = A.cache.get_or_build("plans", ("signature",), lambda: graph_signature(A._host))
        disk_key = cache_key(device.name, signature, n_cols, dtype, op, reduce,
                             None if families == FAMILIES else families)
        choice = load_cached(disk_key)
        if choice is None:
            import time

            start = time.perf_counter()
            operands = scratch_operands(A, op, n_cols, dtype)
            ranked = candidates(A, op, n_cols, dtype, reduce, operands, families, device)
            choice, record = tune(ranked, _timer(A, op, operands, reduce), TUNE_TOP if top_k is None else top_k)
            record["search_s"] = time.perf_counter() - start  # compiles included
            store(disk_key, choice, record)
        return choice

    return A.cache.get_or_build("plans", ("tuned", op, reduce, n_cols, dtype.name, families), build)


#: A candidate is timed in batches of back-to-back calls lasting about BATCH_MS (at most MAX_BATCH
#: calls): one call between events would time the host's launch path too, which differs between
#: candidates (a memset before the kernel, a single launch) by more than their kernels do on small
#: graphs, and was 0.91-0.96x against auto back to back in 2 of 14 cases (BENCHMARKS.md).
BATCH_MS, MAX_BATCH = 1.0, 20


def _timer(A, op, operands, reduce="sum"):
    """``time(candidate) -> ms`` per call: launches issued back to back between CUDA events (as a
    training loop issues them: a candidate's host work overlaps the GPU's, so the time is what a
    loop sees, not a lone call's launch latency), batches of about BATCH_MS, median of 5, after
    a warm-up launch (which compiles)."""
    from numba import cuda

    def batch(candidate, calls):
        start, stop = cuda.event(), cuda.event()
        start.record()
        for _ in range(calls):
            run(candidate, op, A, operands, reduce)
        stop.record()
        stop.synchronize()
        return cuda.event_elapsed_time(start, stop) / calls

    def time_candidate(candidate, repeat=5):
        run(candidate, op, A, operands, reduce)
        cuda.synchronize()
        calls = int(min(MAX_BATCH, max(1, BATCH_MS / max(batch(candidate, 1), 1e-3))))
        return float(np.median([batch(candidate, calls) for _ in range(repeat)]))
    return time_candidate
