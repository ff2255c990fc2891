"""The tuner's cost model: a call's time predicted from graph statistics, for every family of the
schedule space (G-Sparse's cost model, paper 002 section III-C, carried across families).

A candidate's call, as the tuner times it (back to back), takes the longer of its host time (a
fixed cost plus one per GPU operation: a kernel, a memset or fill of C) and its GPU time: per
operation a fixed cost, plus the kernel's limiter, the largest of

- L2 traffic: the gathered rows of B (SpMM) or Y (SDDMM), the entries (index and value, once per
  column tile), C; over the L2's bandwidth;
- DRAM traffic: the compulsory bytes (B or X and Y once, the entries once, C), plus the gathers
  that miss when B outgrows the L2; over DRAM's bandwidth;
- latency: dependent gather rounds per lane group (a group's nonzeros over its gather depth,
  plus a fixed cost per group and per row end, HP-SpMM's Dynamic Task Partition model), times
  the waves of groups the GPU cannot hold at once;
- issue: warp instructions over the SMs' schedulers;

plus the fill of C where the kernel does not write it all.  The column-slab kernel's C traffic is
one atomic flush per segment (a row's run in a column slab); G-Sparse's tiled kernels take their
own model (:func:`numbasparse.select.tuner.predicted_cost`, warp-instruction slots) in time.
The constants (:class:`Constants`) are fitted to measured times on one GPU
(``tools/fit_cost_model.py``, from ``benchmarks/probes/tuned_vs_auto.py --all`` output: float32
sums and SDDMM, applied unfitted to other dtypes and reductions) and shipped as
``cost_<gpu>.json`` beside this file; the statistics come from the pattern and the GPU's SM count
and L2.  Only the order of the predictions is used: the tuner times the candidates the model
ranks first (:data:`numbasparse.select.tuner.TUNE_TOP`).  In the H100's fit the host time per
operation came out near zero: the fixed host time per call absorbed it.
"""
import functools
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from ..cuda.hp import GROUP_COST, WARP
#: Warps one SM keeps resident in HP's kernels (64 registers: 8 blocks of 4 warps).
RESIDENT_WARPS = 32
#: Instructions per entry of a lane besides its multiply-adds (index, value, address, loop).
ENTRY_INSTRUCTIONS = 6


@dataclass(frozen=True)
class Constants:
    """Fitted constants of one GPU (times in microseconds)."""
    l2_bytes_per_us: float = 5.5e6
    dram_bytes_per_us: float = 3.0e6
    round_us: float = 0.6        # one dependent round of gathers (L2 latency)
    issue_per_us: float = 4 * 1.7e3  # warp instructions per SM per microsecond
    op_us: float = 2.0           # GPU time per operation (launch, drain)
    host_us: float = 8.0         # host time per call
    host_op_us: float = 5.0      # host time per GPU operation
    slab_scale: float = 1.0      # the column-slab kernel against the same traffic on HP
    tiled_slot_us: float = 1.0e-3  # one warp-instruction slot of the tiled model
    sddmm_tiled_slot_us: float = 1.0e-3

    @classmethod
    def load(cls, path):
        """The constants in ``path`` (a field it lacks keeps its default)."""
        stored = json.loads(Path(path).read_text())["constants"]
        return cls(**{f.name: float(stored[f.name]) for f in fields(cls) if f.name in stored})

    def save(self, path, **extra):
        Path(path).write_text(json.dumps(dict(extra, constants=asdict(self)), indent=1) + "\n")


def model_path(gpu="h100"):
    return Path(__file__).with_name(f"cost_{gpu}.json")


@functools.lru_cache(maxsize=None)
def shipped():
    """The constants fitted on the H100 (the only GPU measured), or the defaults without a file."""
    path = model_path()
    return Constants.load(path) if path.exists() else Constants()


@dataclass(frozen=True)
class Stats:
    """What the model reads of a matrix and a GPU."""
    rows: int
    cols: int
    nnz: int
    nonempty: int
    index_itemsize: int
    sms: int
    l2_bytes: int

    @classmethod
    def of(cls, shape, indptr, index_itemsize, sms, l2_bytes):
        indptr = np.asarray(indptr)
        nonempty = int(np.count_nonzero(np.diff(indptr))) if indptr.size > 1 else 0
        nnz = int(indptr[-1]) if indptr.size else 0
        return cls(int(shape[0]), int(shape[1]), nnz, nonempty, int(index_itemsize), int(sms), int(l2_bytes))


@dataclass(frozen=True)
class Terms:
    """A call's predicted parts (bytes, rounds, instructions, operations)."""
    l2_bytes: float
    dram_bytes: float
    rounds: float        # dependent rounds of the slowest-finishing waves
    instructions: float  # warp instructions
    fill_bytes: float    # C filled before the kernel
    ops: int             # GPU operations

    def parts_us(self, c, sms, scale=1.0):
        """(GPU time, host time) of one call."""
        limiter = max(self.l2_bytes / c.l2_bytes_per_us, self.dram_bytes / c.dram_bytes_per_us,
                      self.rounds * c.round_us, self.instructions / (sms * c.issue_per_us))
        gpu = self.ops * c.op_us + scale * limiter + self.fill_bytes / c.dram_bytes_per_us
        return gpu, c.host_us + self.ops * c.host_op_us


def _missed_gathers(s, gathers, b_bytes):
    """Gather bytes that miss the L2 (the share of B beyond it, for gathers past the first)."""
    if b_bytes <= s.l2_bytes:
        return 0.0
    return max(0.0, gathers - b_bytes) * (1.0 - s.l2_bytes / b_bytes)


def _rounds(s, work, groups, per_group, resident_groups):
    """Dependent rounds: the groups' work spread over the groups resident at once, and never less
    than one group's own (the last group finishing while the others idle)."""
    return max(work / max(1.0, min(groups, resident_groups)), per_group)


def hp_spmm_terms(s, n, itemsize, nnz_per_group, depth, single, layout):
    """HP-SpMM with resolved parameters (its plan's): ``layout`` (lanes, vec, cf)."""
    lanes, vec, cf = layout
    tiles = -(-n // (lanes * vec * cf))
    entry = s.index_itemsize + itemsize
    gathers = s.nnz * n * itemsize
    c_bytes = s.rows * n * itemsize
    b_bytes = s.cols * n * itemsize
    groups = -(-s.nnz // nnz_per_group) * tiles
    resident = s.sms * RESIDENT_WARPS * (WARP // lanes)
    # a group's rounds: its entries over the gather depth, one per row end, GROUP_COST for its setup
    row_ends = s.nonempty * tiles
    work = (s.nnz * tiles / depth) + row_ends + GROUP_COST * groups
    per_group = nnz_per_group / depth + GROUP_COST
    instructions = s.nnz * tiles * (lanes / WARP) * (ENTRY_INSTRUCTIONS + vec * cf)
    return Terms(l2_bytes=gathers + s.nnz * entry * tiles + c_bytes,
                 dram_bytes=min(gathers, b_bytes) + _missed_gathers(s, gathers, b_bytes) + s.nnz * entry + c_bytes,
                 rounds=_rounds(s, work, groups, per_group, resident), instructions=instructions,
                 fill_bytes=0.0 if single else c_bytes, ops=1 if single else 2)


def slab_spmm_terms(s, n, itemsize, lanes, vec, entries_per_segment):
    """The column-slab SpMM: B rows of a slab served from L1, C by one atomic flush per segment;
    a warp runs 32 / ``lanes`` segments at once."""
    tiles = -(-n // (lanes * vec))
    entry = s.index_itemsize + itemsize
    segments = s.nnz / max(1.0, entries_per_segment)
    c_bytes = s.rows * n * itemsize
    b_bytes = s.cols * n * itemsize
    flushes = 2 * segments * n * itemsize  # (read and write of each atomic)
    instructions = s.nnz * tiles * (lanes / WARP) * (ENTRY_INSTRUCTIONS + vec)
    work = (s.nnz * tiles + segments * tiles) * (lanes / WARP)
    return Terms(l2_bytes=b_bytes + s.nnz * entry * tiles + flushes, dram_bytes=b_bytes + s.nnz * entry + c_bytes,
                 rounds=work / (s.sms * RESIDENT_WARPS), instructions=instructions, fill_bytes=c_bytes, ops=2)


def hp_sddmm_terms(s, k, itemsize, vec, group, nnz_per_warp):
    """HP-SDDMM: a group of ``group`` lanes per nonzero, each lane ``k / (group vec)`` vectors of
    X[i] and Y[j], then log2(group) shuffles."""
    entry = s.index_itemsize + itemsize
    gathers = s.nnz * k * itemsize
    y_bytes = s.cols * k * itemsize
    warps = -(-s.nnz // nnz_per_warp)
    per_lane = -(-k // (group * vec))
    steps = -(-nnz_per_warp * group // WARP)  # a warp's rounds of 32 / group nonzeros
    instructions = warps * steps * (2 * per_lane + math.log2(group) + ENTRY_INSTRUCTIONS)
    work = warps * steps
    return Terms(l2_bytes=gathers + s.nnz * entry + s.nnz * itemsize + s.rows * k * itemsize,
                 dram_bytes=min(gathers, y_bytes) + _missed_gathers(s, gathers, y_bytes) + s.rows * k * itemsize
                 + s.nnz * (entry + itemsize),
                 rounds=_rounds(s, work, warps, steps, s.sms * RESIDENT_WARPS), instructions=instructions,
                 fill_bytes=0.0, ops=1)


def predict_parts(c, s, family, terms=None, slots=None):
    """(GPU, host) microseconds of one call: ``terms`` for HP and slab, ``slots`` (the tiled
    model's warp-instruction slots) for "tiled" / "tiled_sddmm"."""
    if family in ("tiled", "tiled_sddmm"):
        slot_us = c.tiled_slot_us if family == "tiled" else c.sddmm_tiled_slot_us
        return c.op_us + slots * slot_us, c.host_us + c.host_op_us
    return terms.parts_us(c, s.sms, c.slab_scale if family == "slab" else 1.0)


def predict_us(c, s, family, terms=None, slots=None):
    """Predicted microseconds of one call back to back: the longer of its GPU and host time."""
    return max(predict_parts(c, s, family, terms, slots))


def rank_key(c, s, family, terms=None, slots=None):
    """Order of candidates: predicted time, then GPU time (host-bound calls tie on the first)."""
    gpu, host = predict_parts(c, s, family, terms, slots)
    return max(gpu, host), gpu
