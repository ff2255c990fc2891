"""HP-SpMM and HP-SDDMM (paper 000): hybrid node/edge parallelism over CSR.

Every warp (for SpMM: every lane group of a warp) gets the same number of nonzeros, chosen by
Dynamic Task Partition (:func:`spmm_nnz_per_group`, :func:`nnz_per_warp`), whatever rows they
fall in, so a heavy row is spread over many warps and light rows are packed into one:
edge-parallel balance with node-parallel accumulation.  Where SpMM's groups are whole warps the
segments carry the same predicted work instead, a row end counting as ROW_END_COST entries
(:func:`numbasparse.preprocess.rows.balanced_segments`; :func:`balances` says where), so that
blocks of short rows do not outlast the others.  Unlike the paper's hybrid CSR/COO format, no
COO row array is stored: the row of each segment's first nonzero is found once on the host
(:func:`numbasparse.preprocess.rows.segment_rows`, ``segment_rows_at``) and a warp walks
``indptr`` from there as its nonzeros cross row ends.

This module holds the family's launch rules (lane layout, gather depth, DTP and balanced
segments, single launch, block order),
its plans (kept in the matrix's cache), the SpMM kernel built from named device-function
parts (accumulate, store, row walk, cross-block look-back) and the SDDMM kernel.  Measurements
behind the rules: BENCHMARKS.md, "HP-SpMM and HP-SDDMM".
"""
import collections
import math

import numba
import numpy as np
from numba import cuda
from numba.cuda import config

from .. import reductions
from ..preprocess import rows as row_prep
from . import device, launch
from .device import WARP_SIZE as WARP
from .device import cdiv
from .fill import fill_identity, round_into, workspace
from ..dtypes import compute_dtype, is_half, is_half_format, kernel_format, storage_dtype
from .intrinsics import (atomic_max_float, atomic_min_float, converters, flagged_parts, flagged_words,
                         half_vector_store, shfl_down, syncblock, syncwarp_lanes, value_types, vector_load,
                         vector_width)
from .reductions import combine, mean_scale

# Launch rules ------------------------------------------------------------------------------

#: Warps per thread block.
WARPS_PER_BLOCK = 4
#: Register cap of the float32 sum kernels with 8 columns per lane (not in the single launch):
#: 8 blocks per SM instead of 7, at the cost of an 8-byte spill; faster at N = 128/256.
MAX_REGISTERS = 64
#: Candidate nonzeros per warp of HP-SDDMM's DTP (paper 000 section III-B2), largest first; 16
#: and 8 keep small graphs from being latency-bound.
NNZ_PER_WARP = (512, 256, 128, 64, 32, 16, 8)
#: The DTP on graphs in locality order (:func:`window_nnz`): the rows of B (SpMM: one column tile
#: of each; SDDMM: of X and Y) that the lane groups in flight gather kept within this share of
#: L2, halving the DTP's nonzeros per group (SpMM) or per warp (SDDMM) at most WINDOW_HALVINGS /
#: SDDMM_WINDOW_HALVINGS times (each halving adds fixed work per group or warp); "in locality
#: order": half the entries within WINDOW_ORDER of the window's rows of the diagonal (and beyond
#: one group's rows).  Measured (H100, BENCHMARKS.md "HP-SpMM's window on ordered graphs"): an
#: 800k-node community-ordered graph, rows of 25, SpMM N = 256: windows of 44 / 22 / 11 MB ran
#: 1.00 / 1.20 / 1.37x (N = 128, 22 / 11 MB: 1.00 / 1.14x), the same graph in random order
#: 0.99-1.00x; cnr-2000 (crawl order) N = 256, 33 -> 16 MB: 1.04x, and at N = 128 16 -> 8 MB lost
#: 0.87x to the fixed cost.  SDDMM, whose warps' only fixed cost is finding their first row, gains
#: from more halvings ("HP-SDDMM's window on ordered graphs"): the rule's counts ran the 800k-node
#: graph at K = 64..256 1.38-1.66x faster, cnr-2000 and its directed copy 1.09-1.45x, each the
#: fastest count timed or within 5% of it (random order: 1.04-1.06x from any smaller count).
WINDOW_L2_SHARE, WINDOW_ORDER, WINDOW_HALVINGS, SDDMM_WINDOW_HALVINGS = 1 / 3, 1 / 16, 2, 3
#: HP-SDDMM's DTP scale factor alpha: ask for at least this many full waves of blocks.
WAVES = 2
#: Candidate nonzeros per lane group of HP-SpMM's DTP (:func:`spmm_nnz_per_group`): 4 for graphs
#: too small to fill the GPU even so; at most 512, as before (larger counts are unmeasured).
NNZ_PER_GROUP = (512, 256, 128, 64, 32, 16, 8, 4)
#: HP-SpMM's DTP: a lane group's fixed cost (finding its first row, flushing the partial rows
#: at its ends with atomics), in nonzeros' worth of work.  Fitted on the 18 shared graphs x
#: N = 32..256 (one constant; 12-24 did as well): BENCHMARKS.md, "HP-SpMM's work per lane group".
GROUP_COST = 16
#: Fewest and most lanes per SpMM lane group: narrow groups give a warp several nonzeros per
#: instruction where N is small.
MIN_LANES, MAX_LANES = 4, 32
#: Entries of one row whose B rows a lane group loads before it uses the first (more gathers in
#: flight), on graphs whose non-empty rows average GATHER_MIN_ROW entries or more and wherever a
#: group is a whole warp, for lanes of at most GATHER_MAX_WIDTH columns of 32 bits or more,
#: twice that of 16 bits (one 16-byte load either way; wider ones would spill); 16-bit values
#: twice the depth (:func:`gather_depth`).  Whole-warp groups on short rows, float32, N = 128 /
#: 256 on the 18 shared graphs: depth 2 over 1 gained up to 1.22x, lost nowhere beyond 2%.
GATHER_DEPTH, GATHER_MIN_ROW, GATHER_MAX_WIDTH = 2, 16, 4
#: Vectors of X[i] (and of Y[j]) each lane of an HP-SDDMM group loads per nonzero: loads in flight
#: per lane and fewer shuffle steps per dot product, against fewer nonzeros at once per warp.
#: 7 graphs x K = 64, 256 (H200, the tuner's timings of every group): 4 vectors per lane was
#: 1.06-1.92x faster than 1 (the narrowest group covering K) in 13 of 14 cases, 0.98x in the
#: other (a 0.04 ms call).
SDDMM_VECTORS_PER_LANE = 4
#: HP-SDDMM's DTP asks for this many full waves (rather than WAVES) where each warp still gets at
#: least two steps of its lane groups (:func:`sddmm_nnz_per_warp`): its nonzeros cost the same
#: whatever their row, so only the last, partly filled wave idles, a smaller share of more
#: waves; a warp of one step pays its setup for too little work.  Measured: BENCHMARKS.md, "Runs
#: of empty rows, and SDDMM's waves".
SDDMM_WAVES = 4
#: A warp looking for the row of its next nonzero walks ``indptr`` one row at a time, and every
#: WALK_PROBE rows looks that far ahead to bisect past a run of empty rows (a web crawl's pages
#: without links leave thousands in a row, a dependent load each).  HP-SDDMM, whose groups cross
#: a row end at almost every step on short rows, where the check costs a few percent, skips runs
#: only on graphs that have one longer than WALK_PROBE (same section).
WALK_PROBE = 16  # (a power of two: tested with a mask)
#: The single launch is used only where no lane group writes more than MAX_ZEROED_ROWS empty
#: rows, one after another, and no row spans more than MAX_SINGLE_LAUNCH_SPAN blocks after its
#: first: its last block reads the others' parts one after another, a chain of L2 round trips
#: (measured up to 71 blocks: BENCHMARKS.md, "HP-SpMM's work per lane group").  Where the single
#: launch is forced (a 16-bit C) on a graph past MAX_ZEROED_ROWS, C is zeroed first and the
#: kernel skips empty rows (:func:`zeroed_single`; BENCHMARKS.md "Runs of empty rows in the
#: single launch": bfloat16 cnr-2000 directed 1.7-2.3x faster; float32 there, the filled
#: launch stays 1.10-1.14x faster than the zeroed single launch).
MAX_ZEROED_ROWS, MAX_SINGLE_LAUNCH_SPAN = 32, 64
#: ... and only on graphs whose non-empty rows average fewer than SINGLE_MAX_MEAN_ROW entries: the
#: single launch saves the fill of C, the filled kernel the block merges and look-backs, which
#: grow with the rows.  Measured (BENCHMARKS.md, "HP-SpMM's work per lane group"): one launch
#: 1.07-1.08x faster at a mean row of 16.8 (cnr-2000, N >= 128; 0.99-1.00x below) and 1.04-1.14x
#: at 17.0 (wiki-vote directed), 0.88-0.97x at 21.1 (ca-AstroPh); on longer rows 0.78-1.04x,
#: slower in 22 of 24 cases.
SINGLE_MAX_MEAN_ROW = 18
#: HP-SpMM's lane groups take segments of equal predicted work rather than equal entries
#: (:func:`numbasparse.preprocess.rows.balanced_segments`; the rule, :func:`balances`, for
#: whole-warp groups on A's own rows in order): an entry's work plus ROW_END_COST entries' work per
#: row ending in the segment.  Blocks of the same entries cost more where their rows are short (each
#: row end is a store and a dependent ``indptr`` load), and where they run last the grid waits on
#: them: Nsight Compute on coauthor-cs with its rows by decreasing length (single launch, N = 128,
#: equal entries) found the same instructions as on its rows shuffled, but SMs busy 63% of the
#: kernel's cycles against 82%.  Measured (H200, sum, N = 128 / 256, kernel time, BENCHMARKS.md
#: "HP-SpMM's segments of equal predicted work"): 15 shared graphs in their own ids and with rows by
#: decreasing and increasing length, a row end costing 1, 2 and 4 entries: 4 ran fastest (float32
#: 1.100x the rules of equal entries, 90 cases; bfloat16 1.240x, 36 cases), 1 slowest.  A's rows
#: shuffled through a map (``shuffled``) stay for the tuner, on equal entries.
ROW_END_COST = 4
#: ... where HP-SpMM's lane groups are whole warps (narrower groups share a warp and run its loop
#: together, so a warp's groups of unequal entries wait on the longest: through ``auto`` at
#: N = 32 / 64, float32, balanced groups of 8 and 16 lanes ran 0.75-1.35x, geomean 0.99x), but not in
#: the float32 single launch of 8 values a lane (N = 129..256 on short rows: 0.86-1.07x, slower on
#: pubmed and coauthor-cs in their own ids; not profiled).  Elsewhere blocks of equal entries take
#: their chunks in the order (:func:`order_blocks`: in order, reversed or scattered) whose predicted
#: grid time (:func:`numbasparse.preprocess.rows.grid_time`, the same costs) is lowest, by a factor
#: of ORDER_MIN_GAIN or more against A's own order (H200, filled launch, 90 cases: the predicted
#: order ran at 0.994 of the per-case best of the three, BENCHMARKS.md "HP-SpMM's blocks in the
#: order of their predicted cost").
ORDER_MIN_GAIN = 1.05  # (measured with a row end of 2 entries; the decisions were the same for 1 to 8)
BLOCK_ORDERS = ("in_order", "reversed", "scattered")
#: The single launch takes another block order only scattered, only on long rows and where no
#: row spans more than SCATTER_MAX_SPAN blocks after its first (:func:`order_blocks`; measured:
#: BENCHMARKS.md "The single launch in a scattered order": nell, spans of 35-71 blocks, ran
#: 0.67-0.98x in any order).
SCATTER_MAX_SPAN = 32
#: Float32 products (every reduction) whose whole-warp groups of one 16-byte vector a lane would
#: cover N in two column tiles (N = 132..256) take one tile of two vectors a lane
#: (WIDE_TILE_VALUES values, 8 accumulators) where :func:`wide_tiles` holds: on graphs whose
#: non-empty rows average fewer than WIDE_TILE_MAX_MEAN_ROW entries.  Measured on the 18 shared
#: graphs (H100, BENCHMARKS.md "One column tile at N = 256"), sum at N = 256: 1.02-1.25x faster at
#: mean rows of 4.5-10 with B in L2 and the GPU full, 0.90-0.97x at 13.1-17.0, 0.86-0.94x on
#: longer rows, 0.86x at 10.1 with B 1.7x the L2 (Flickr), 0.93-1.01x on graphs that do not fill
#: the GPU; the rule's picks at N = 192 1.06-1.36x, for max at N = 256 1.03-1.26x, for mean
#: 1.17-1.31x.  Four tiles (N = 512: the picks 0.90-1.17x) stay narrow.
WIDE_TILE_VALUES, WIDE_TILE_MAX_MEAN_ROW = 8, 12


def lane_layout(n_cols, itemsize, *arrays, lanes=None):
    """(lanes, vec, cf): groups of ``lanes`` lanes, each lane reading ``cf`` aligned vectors of
    ``vec`` columns.  The vector is as wide as alignment allows; the group is MAX_LANES or as
    narrow as that vector allows without idling lanes (lanes * vec <= n_cols, at least
    MIN_LANES), so N = 32 float32 runs 8 lanes x 4 columns (a warp works on 4 nonzeros at once)
    and N = 256 two column tiles of 32 lanes x 4 columns.  ``lanes`` forces the group size.  A
    group narrower than MAX_LANES takes cf = 2 vectors per lane where N is wider than one vector
    of the group.  16-bit values take 8-wide vectors only where 32 lanes of 4 cannot cover N:
    a group of fewer lanes shares its warp with other groups, which wait for each other at every
    row end (measured: 32 x 4 faster than 16 x 8 at N = 128, BENCHMARKS.md "Half precision").
    ``arrays``: those the vectors address (B; and C for 16-bit values, stored by vectors too)."""
    vec = vector_width(n_cols, itemsize, *arrays)
    if vec > 4 and n_cols < MAX_LANES * vec:
        vec = 4
    if lanes is None:
        lanes = MAX_LANES
        while lanes > MIN_LANES and lanes * vec > n_cols:
            lanes //= 2
    while vec > 1 and lanes * vec > n_cols:
        vec //= 2
    cf = 2 if n_cols > lanes * vec and lanes < MAX_LANES else 1
    return lanes, vec, cf


def mean_row(nnz, nonempty_rows):
    """Entries per non-empty row: the statistic behind HP-SpMM's row-length rules."""
    return nnz / max(1, nonempty_rows)


def gathers_fit(width, itemsize=4):
    """True where a lane of ``width`` values of ``itemsize`` bytes can hold several entries' B
    rows in flight without spilling (at most GATHER_MAX_WIDTH values, twice that of 16 bits)."""
    return width <= (2 if itemsize == 2 else 1) * GATHER_MAX_WIDTH


def gather_depth(nnz, nonempty_rows, width, itemsize=4, lanes=MAX_LANES):
    """Entries per gather batch for a graph of ``nnz`` entries in ``nonempty_rows`` non-empty
    rows with ``width`` columns of ``itemsize`` bytes per lane in groups of ``lanes``:
    GATHER_DEPTH (twice that for 16-bit values: a load brings half the bytes, so twice the loads
    in flight keep the same bytes in flight) on graphs of long rows (the kernel is latency-bound
    there) and wherever a group is the whole warp (no other group to diverge from at row ends);
    1 on short rows in narrower groups (short runs of one row leave a warp's groups on
    different paths)."""
    long_rows = mean_row(nnz, nonempty_rows) >= GATHER_MIN_ROW
    scale = 2 if itemsize == 2 else 1
    return scale * GATHER_DEPTH if gathers_fit(width, itemsize) and (long_rows or lanes == MAX_LANES) else 1


def full_wave(registers_per_thread=64):
    """Thread blocks the GPU runs at once (SMs x blocks per SM)."""
    return device.device_limits()[0] * device.blocks_per_sm(WARPS_PER_BLOCK * WARP, registers_per_thread)


def nnz_per_warp(nnz, waves=WAVES):
    """Dynamic Task Partition (paper 000, Eq. 4-5), HP-SDDMM's: the largest candidate nonzeros
    per warp that still launches ``waves`` full waves of blocks on this GPU, so that small and
    sampled graphs fill every SM; the smallest candidate when even that cannot."""
    wave = full_wave()
    for candidate in NNZ_PER_WARP:
        if cdiv(nnz, candidate * WARPS_PER_BLOCK) >= waves * wave:
            return candidate
    return NNZ_PER_WARP[-1]


def spmm_nnz_per_group(nnz, n_tiles, groups_per_warp=1):
    """HP-SpMM's Dynamic Task Partition: nonzeros per lane group.  Each group costs its
    nonzeros plus a fixed GROUP_COST, and the GPU runs ``slots`` groups at once, so a call takes
    about (work + groups x GROUP_COST) / slots plus the last group's own time (while it
    finishes, the other SMs idle).  With ``p`` nonzeros per group that is
    ``W (1 + GROUP_COST / p) + p`` for ``W`` nonzeros per slot, least at
    ``p = sqrt(GROUP_COST x W)``: the candidate nearest it (geometrically).  Small groups on
    a small graph pay the fixed cost over and over (instructions and split-row atomics); large
    groups on a large graph leave SMs idle at the end, the more so the more unequal its rows."""
    slots = full_wave() * WARPS_PER_BLOCK * groups_per_warp
    best = math.sqrt(GROUP_COST * nnz * n_tiles / slots)
    return min(NNZ_PER_GROUP, key=lambda p: abs(math.log2(p) - math.log2(max(best, 1.0))))


def window_rows(nnz_per_group, groups_per_warp, mean_row_nnz):
    """Rows whose entries the lane groups of HP's kernels work on at once: every group slot of a
    full wave, ``nnz_per_group`` entries each, rows of ``mean_row_nnz`` entries."""
    return full_wave() * WARPS_PER_BLOCK * groups_per_warp * nnz_per_group / max(mean_row_nnz, 1.0)


def window_nnz(A, nnz_per_group, groups_per_warp, row_bytes, smallest, halvings):
    """The DTP's ``nnz_per_group`` for device CSR A, halved (at most ``halvings`` times, not
    below ``smallest``) while the dense rows of the window (:func:`window_rows`, ``row_bytes`` of
    each) take more than WINDOW_L2_SHARE of the L2 cache, on graphs in locality order whose
    reuse crosses groups: the median distance of an entry from the diagonal above one group's
    rows and at most WINDOW_ORDER of the window's.  There the groups in flight gather the same
    rows, which L2 keeps only while the window fits in it.  Where entries lie within a group's
    own rows (a road network) the group itself re-reads them at once; where they are spread
    beyond the window (random ids) no window size brings the reuse back.  Square A only: the
    distance compares row and column ids, one node numbering in a graph; and only where the
    gathered operand is larger than L2 (else L2 keeps all of it whatever the window)."""
    mean = mean_row(A.nnz, pattern_fact(A, "nonempty_rows"))
    l2 = device.memory_system()[0]
    budget = WINDOW_L2_SHARE * l2

    def footprint(p):
        return min(window_rows(p, groups_per_warp, mean), A.shape[1]) * row_bytes

    if (footprint(nnz_per_group) <= budget or A.shape[0] != A.shape[1]  # (rows and columns: one node order)
            or A.shape[1] * row_bytes <= l2  # (L2 keeps all of it anyway)
            or nnz_per_group <= smallest):
        return nnz_per_group
    distance = pattern_fact(A, "median_column_distance")
    if not nnz_per_group / mean < distance <= WINDOW_ORDER * window_rows(nnz_per_group, groups_per_warp, mean):
        return nnz_per_group
    least = max(nnz_per_group >> halvings, smallest)
    p = nnz_per_group
    while p > least and footprint(p) > budget:
        p //= 2
    return p


def window_nnz_per_group(A, nnz_per_group, groups_per_warp, tile_bytes):
    """HP-SpMM's DTP ``nnz_per_group`` for its window of B rows (one column tile of
    ``tile_bytes`` each): :func:`window_nnz`."""
    return window_nnz(A, nnz_per_group, groups_per_warp, tile_bytes, min(NNZ_PER_GROUP), WINDOW_HALVINGS)


def sddmm_nnz_per_warp(nnz, group):
    """HP-SDDMM's DTP for lane groups of ``group`` lanes: nonzeros per warp for SDDMM_WAVES
    waves where that is at least two steps of the warp's groups, else for WAVES waves."""
    npw = nnz_per_warp(nnz, waves=SDDMM_WAVES)
    return npw if npw >= 2 * (WARP // group) else nnz_per_warp(nnz)


def sddmm_window_nnz_per_warp(A, npw, group, row_bytes):
    """HP-SDDMM's DTP ``npw`` for its window of X and Y rows (``row_bytes`` for both of one
    entry's: a warp's rows are read from X, their columns' from Y, near them in a graph in
    locality order): :func:`window_nnz` with a warp as the group, at least two steps of the
    warp's groups of ``group`` lanes."""
    smallest = max(min(NNZ_PER_WARP), 2 * (WARP // group))
    return window_nnz(A, npw, 1, row_bytes, smallest, SDDMM_WINDOW_HALVINGS)


def short_rows(nnz, nonempty_rows):
    """True where ``nnz`` entries in ``nonempty_rows`` non-empty rows average fewer than
    SINGLE_MAX_MEAN_ROW: HP-SpMM's single-launch regime, latency-bound, each row's end (a
    dependent ``indptr`` load, a store) weighing as much as its gathers."""
    return mean_row(nnz, nonempty_rows) < SINGLE_MAX_MEAN_ROW


def single_launch(mean_row_nnz, span, empty_rows_per_group):
    """True where HP-SpMM runs as one GPU operation (the kernel writes every element of C:
    empty rows, rows split in the block, rows crossing blocks) rather than after a fill: graphs
    of short rows (``mean_row_nnz`` below SINGLE_MAX_MEAN_ROW) whose rows span at most
    MAX_SINGLE_LAUNCH_SPAN blocks after their first and whose groups zero at most
    MAX_ZEROED_ROWS empty rows (past that the single launch needs a memset of C,
    :func:`zeroed_single`, and the filled launch is faster).  On long rows the block merge and
    look-back cost more than the filled kernel's atomics."""
    return (mean_row_nnz < SINGLE_MAX_MEAN_ROW and span <= MAX_SINGLE_LAUNCH_SPAN
            and not zeroed_single(empty_rows_per_group))


def zeroed_single(empty_rows_per_group):
    """True where the single launch runs after a memset of C and skips empty rows, rather than
    zeroing them itself: where a lane group would zero more than MAX_ZEROED_ROWS empty rows, each
    found by a dependent ``indptr`` load (the single launch is forced for a 16-bit C, and
    :func:`single_launch` excludes such graphs otherwise).  The count is :func:`single_launch`'s: it
    includes the rows after the last entry, which the last group zeroes alone, by stores without
    loads but one row after another (isolated nodes numbered last; not measured)."""
    return empty_rows_per_group > MAX_ZEROED_ROWS


def order_blocks(A, block_nnz, gathered_bytes, single=False):
    """The order in which HP-SpMM's blocks take their chunks of ``block_nnz`` nonzeros (one of
    BLOCK_ORDERS): the one of lowest predicted grid time (:func:`predicted_time`), where it is
    ORDER_MIN_GAIN times below A's own order's.  Reversed (the filled launch only): a graph
    numbered by degree, hubs first, runs its blocks of short rows first.  Scattered
    (:func:`coprime_stride`): every wave mixes long and short rows; only where the blocks fill
    more than a wave and the gathered operand (``gathered_bytes``: one column tile of B), which
    scattered blocks in flight read all over, takes at most WINDOW_L2_SHARE of L2 (past it the
    order's own locality is what keeps B rows in L2: a degree-ranked graph whose tile took 98% of
    L2 ran 2.5% slower scattered; reversed blocks keep their neighbours).  The ``single`` launch
    takes only the scattered order, only on graphs of long rows (not :func:`short_rows`: there it
    runs for a 16-bit C) and only where no row
    spans more than SCATTER_MAX_SPAN blocks after its first: out of order, a row's finishing block
    is the one of its blocks that starts last, near the end of the grid, and its look-back (one
    L2 round trip per part) is no longer hidden behind other blocks' work."""
    wave, blocks = full_wave(), cdiv(A.nnz, block_nnz)
    orders = [] if single else ["reversed"]
    if (blocks > wave and gathered_bytes <= WINDOW_L2_SHARE * device.memory_system()[0]
            and not (single and (short_rows(A.nnz, pattern_fact(A, "nonempty_rows"))
                                 or pattern_fact(A, "crossing_span", block_nnz) > SCATTER_MAX_SPAN))):
        orders.append("scattered")
    if not orders or blocks < 3:
        return "in_order"
    best = min(orders, key=lambda order: predicted_time(A, block_nnz, order))
    own = predicted_time(A, block_nnz, "in_order")
    return best if own >= ORDER_MIN_GAIN * predicted_time(A, block_nnz, best) else "in_order"


def balances(lanes, width, value_format, single):
    """Whether HP-SpMM's rule takes balanced segments (ROW_END_COST) for groups of ``lanes``
    lanes of ``width`` values each: whole warps, but not float32's single launch of 8 values a
    lane."""
    return lanes == WARP and not (single and value_format == "<f4" and width == 8)


def predicted_time(A, block_nnz, order, mixed=False):
    """The grid time :func:`numbasparse.preprocess.rows.grid_time` predicts for HP-SpMM's blocks
    of ``block_nnz`` nonzeros taking their chunks in ``order`` over a wave (:func:`full_wave`),
    on A's rows or (``mixed``) on the same rows in a random order."""
    costs = pattern_fact(A, "chunk_costs", block_nnz, ROW_END_COST)  # (one pass over the rows for every order)
    return row_prep.grid_time(costs, full_wave(), order_stride(costs.size, order), mixed)


def check_block_order(order):
    """A ValueError naming ``block_order`` unless ``order`` is one of BLOCK_ORDERS (compared by
    equality: an unhashable value is refused the same way)."""
    if not any(order == known for known in BLOCK_ORDERS):
        raise ValueError(f"block_order must be one of {', '.join(BLOCK_ORDERS)}, got {order!r}")


def order_stride(blocks, order):
    """The stride by which block b of a grid of ``blocks`` takes chunk ``b * stride % blocks`` in
    ``order``: 1 in order; ``blocks - 1`` reversed (block 0 keeps chunk 0, block b > 0 takes chunk
    ``blocks - b``: a multiplication, so the kernel's look-back finds a row's last-starting block
    as for any stride); :func:`coprime_stride` scattered."""
    check_block_order(order)
    if order == "in_order" or blocks < 3:
        return 1
    return blocks - 1 if order == "reversed" else coprime_stride(blocks)


def coprime_stride(blocks):
    """A stride coprime to ``blocks`` near ``blocks`` / golden ratio, so that block b taking chunk
    ``b * stride % blocks`` is a bijection and consecutive blocks take chunks far apart (the
    multiples of an irrational fraction fill an interval evenly).  Grids of 1 or 2 blocks get 1:
    in order."""
    stride = max(1, round(blocks * 0.6180339887))
    while math.gcd(stride, blocks) != 1:
        stride += 1
    return stride


def row_map_fits(A):
    """Whether the map of A's shuffled rows (:func:`shuffled_rows`: an int32 per entry and per
    row) can address A: fewer than 2**31 entries and rows."""
    return A.nnz + A.shape[0] < 2 ** 31


def can_widen(lanes, vec, cf, n_cols, value_format):
    """True where HP-SpMM's layout (lanes, vec, cf) covers ``n_cols`` float32 columns in two
    tiles of whole-warp groups of one 16-byte vector a lane (N = 132..256, multiples of 4): the
    layouts that :func:`wide_tiles` may make one tile of two vectors a lane (WIDE_TILE_VALUES
    values).  Narrower vectors (N not a multiple of 4, misaligned B) were not timed."""
    return (lanes == WARP and cf == 1 and 2 * vec == WIDE_TILE_VALUES and cdiv(n_cols, lanes * vec) == 2
            and value_format == "<f4")


def wide_tiles(nnz, nonempty_rows, b_bytes):
    """True where HP-SpMM's two column tiles of whole-warp groups become one tile twice as wide
    (:func:`can_widen`; B of ``b_bytes``): on short rows (non-empty rows averaging fewer than
    WIDE_TILE_MAX_MEAN_ROW entries), where reading each entry and walking each row end once per
    tile costs as much as the gathers; where the two tiles fill the GPU (at least GROUP_COST
    nonzeros per group slot: otherwise they run side by side on SMs that would idle, and one
    tile only lengthens each group); and where B fits in L2 (the two tiles run one after the
    other, blockIdx.y, each over half of B's columns)."""
    slots = full_wave() * WARPS_PER_BLOCK
    return (mean_row(nnz, nonempty_rows) < WIDE_TILE_MAX_MEAN_ROW and 2 * nnz >= GROUP_COST * slots
            and b_bytes <= device.memory_system()[0])


def merges_in_block(reduce_code):
    """True for the reductions whose split rows HP-SpMM merges inside a thread block even when C
    is filled first (an atomic max/min is a round trip to L2 per element)."""
    return reductions.is_extremum(reduce_code)


# Kernel parts ------------------------------------------------------------------------------
#
# A lane of a group owns ``cf`` vectors of ``vec`` consecutive columns, ``j + c * span + v``
# (span = lanes * vec), accumulated in ``acc[c * vec + v]``.  Each factory below returns inlined
# device functions over those columns, closed over the kernel's compile-time configuration.

def _accumulate_parts(reduce_code, vec, cf, span, fmt):
    """(add_entry, gather_row, accumulate): combine ``a * B[k, columns]`` into ``acc``, either at
    once (add_entry) or in two steps, loading the rows of several entries before the first
    multiply (gather_row then accumulate); B's values of format ``fmt`` (16-bit ones converted
    to float32 as they are loaded)."""
    load = vector_load(vec, fmt=fmt)

    @cuda.jit(device=True, inline="always")
    def add_entry(acc, a, B, k, j, n):
        """acc = acc (reduce) a * B[k, this lane's columns < n] (vector loads, used at once).
        Kept apart from gather_row + accumulate: routing the loads through ``gathered`` changes
        ptxas's register allocation (more spills in the capped kernels, tools/kernel_report.py)."""
        for c in range(cf):
            if j + c * span < n:
                b = load(B, k, j + c * span)
                for v in range(vec):
                    acc[c * vec + v] = combine(reduce_code, acc[c * vec + v], a * b[v])

    @cuda.jit(device=True, inline="always")
    def gather_row(B, k, j, n, out, at):
        """``out[at:at + vec * cf]`` = this lane's columns of row k of B (slots of columns past
        n are left unset and unused)."""
        for c in range(cf):
            if j + c * span < n:
                b = load(B, k, j + c * span)
                for v in range(vec):
                    out[at + c * vec + v] = b[v]

    @cuda.jit(device=True, inline="always")
    def accumulate(acc, a, gathered, at, j, n):
        """acc = acc (reduce) a * gathered[at:at + vec * cf], over this lane's columns < n."""
        for c in range(cf):
            if j + c * span < n:
                for v in range(vec):
                    acc[c * vec + v] = combine(reduce_code, acc[c * vec + v], a * gathered[at + c * vec + v])

    return add_entry, gather_row, accumulate


def _store_parts(reduce_code, vec, cf, span, fmt):
    """(flush, zero_row): write a lane's columns of a row into C, stored when the group owns the
    whole row, else combined atomically into the filled C; or write zeros (an empty row).  A
    16-bit C (format ``fmt``) is only ever stored whole rows (the single launch): rounded once,
    never combined atomically in 16 bits."""
    to_storage = converters(fmt)[1]
    scale_of = mean_scale(reduce_code, value_types(fmt)[1])

    if is_half_format(fmt):
        pack = _half_packer(vec, reduce_code, to_storage, scale_of)
        store = half_vector_store(vec)

        @cuda.jit(device=True, inline="always")
        def flush(C, row, j, acc, count, owned):
            for c in range(cf):
                if j + c * span < C.shape[1]:
                    store(C, row, j + c * span, pack(acc, c * vec, count))
    else:
        flush = _atomic_flush(reduce_code, vec, cf, span, scale_of)

    @cuda.jit(device=True, inline="always")
    def zero_row(C, row, j):
        for c in range(cf):
            if j + c * span < C.shape[1]:
                for v in range(vec):
                    C[row, j + c * span + v] = 0

    return flush, zero_row


def _adding(flush):
    """``flush`` that never stores: every row, owned or not, combined atomically into C."""
    @cuda.jit(device=True, inline="always")
    def adding_flush(C, row, j, acc, count, owned):
        flush(C, row, j, acc, count, False)

    return adding_flush


def _half_packer(vec, reduce_code, to_storage, scale_of):
    """``pack(acc, at, count)``: the 16-bit bits of ``acc[at:at + vec]`` (scaled by
    ``scale_of(count)``, :func:`~numbasparse.cuda.reductions.mean_scale`) as a tuple, for one
    vector store."""
    @cuda.jit(device=True, inline="always")
    def bits(acc, k, scale):
        return to_storage(acc[k] * scale)

    if vec == 1:
        @cuda.jit(device=True, inline="always")
        def pack(acc, at, count):
            scale = scale_of(count)
            return (bits(acc, at, scale),)
    elif vec == 2:
        @cuda.jit(device=True, inline="always")
        def pack(acc, at, count):
            scale = scale_of(count)
            return bits(acc, at, scale), bits(acc, at + 1, scale)
    elif vec == 4:
        @cuda.jit(device=True, inline="always")
        def pack(acc, at, count):
            scale = scale_of(count)
            return bits(acc, at, scale), bits(acc, at + 1, scale), bits(acc, at + 2, scale), bits(acc, at + 3, scale)
    else:
        @cuda.jit(device=True, inline="always")
        def pack(acc, at, count):
            scale = scale_of(count)
            return (bits(acc, at, scale), bits(acc, at + 1, scale), bits(acc, at + 2, scale), bits(acc, at + 3, scale),
                    bits(acc, at + 4, scale), bits(acc, at + 5, scale), bits(acc, at + 6, scale),
                    bits(acc, at + 7, scale))
    return pack


def _atomic_flush(reduce_code, vec, cf, span, scale_of):
    """``flush`` of a float32/float64 C: stored when owned, else combined atomically."""
    MEAN, MAX, MIN = reductions.MEAN, reductions.MAX, reductions.MIN

    @cuda.jit(device=True, inline="always")
    def flush(C, row, j, acc, count, owned):
        scale = scale_of(count)
        for c in range(cf):
            if j + c * span < C.shape[1]:
                for v in range(vec):
                    col = j + c * span + v
                    x = acc[c * vec + v]
                    if reduce_code == MEAN:
                        x = x * scale  # partial sums are scaled: split rows need no 2nd pass
                    if owned:
                        C[row, col] = x
                    elif reduce_code == MAX:
                        atomic_max_float(C, row, col, x)
                    elif reduce_code == MIN:
                        atomic_min_float(C, row, col, x)
                    else:
                        cuda.atomic.add(C, (row, col), x)

    return flush


def _lookback(reduce_code, vec, cf, span, value_bits, flush, strided):
    """``finish_across_blocks``: a row crossing blocks in the single launch, finished by the
    block of its chunks that starts last (the highest block index; in order, its last chunk's)
    with a decoupled look-back (as single-pass prefix scans do): the row's other blocks publish
    their parts in ``parts``, every value with its ready flag in one 64-bit store
    (:func:`intrinsics.flagged_parts`, no fence or counter needed); the finishing block waits
    for those flags, combines the parts with its own, clears the flags for the next call and
    stores the row.  It waits only on blocks of lower index, which the GPU starts first, so the
    blocks out of order (block b runs chunk ``b * order_stride % gridDim.x``: reversed or
    scattered) are as safe as in order.  ``strided``: the kernel is compiled for such a stride,
    whose ``order_inverse`` maps a chunk to its block (chunk c runs in block
    ``c * order_inverse % gridDim.x``); in order the finishing block is the last chunk's."""
    publish, take, clear = flagged_parts(value_bits)
    simulated = config.ENABLE_CUDASIM  # blocks run one after another there: a missing part never comes

    @cuda.jit(device=True, inline="always")
    def finish_across_blocks(C, parts, received, row, row_start, row_end, chunk, first, last, order_inverse, j, acc):
        """The row's chunks are ``first``..``last`` (``chunk`` this block's)."""
        grid_x = cuda.gridDim.x
        n = C.shape[1]
        finisher = last
        if strided:  # the row's chunk whose block has the highest index
            # chunk k + 1 runs in block b + order_inverse (mod the grid) if k runs in block b:
            # stepped from this block (the same search with a 64-bit modulo per chunk cost 18
            # registers more, BENCHMARKS.md "The single launch in a scattered order")
            block = numba.int64(cuda.blockIdx.x)
            for _ in range(first, chunk):
                block = block - order_inverse if block >= order_inverse else block - order_inverse + grid_x
            latest = numba.int64(-1)
            for k in range(first, last + 1):
                if block > latest:
                    latest = block
                    finisher = k
                block = block + order_inverse if block + order_inverse < grid_x else block + order_inverse - grid_x
        if chunk != finisher:  # publish this chunk's part: row tail (side 0) or head (side 1)
            side = 0 if chunk > first else 1
            base = (side * grid_x + chunk) * n
            for c in range(cf):
                if j + c * span < n:
                    for v in range(vec):
                        publish(parts, base + j + c * span + v, acc[c * vec + v])
            return
        for other in range(first, last + 1):  # chunks run by blocks of lower index: started before this one
            if other == chunk:
                continue
            base = (grid_x + other if other == first else other) * n  # the first chunk's part is the row's head
            ready = False
            while not ready:  # all of this lane's values are loaded before any flag is tested
                ready = True
                for c in range(cf):
                    if j + c * span < n:
                        for v in range(vec):
                            ok, received[c * vec + v] = take(parts, base + j + c * span + v)
                            ready = ready and ok
                if simulated and not ready:  # (a wrong finishing block fails here instead of hanging)
                    raise RuntimeError("HP-SpMM's look-back waits on a part no earlier block published")
            for c in range(cf):
                if j + c * span < n:
                    for v in range(vec):
                        acc[c * vec + v] = combine(reduce_code, acc[c * vec + v], received[c * vec + v])
                        clear(parts, base + j + c * span + v)
        flush(C, row, j, acc, row_end - row_start, True)

    return finish_across_blocks


@cuda.jit(device=True, inline="always")
def row_of(indptr, lo, hi, position):
    """The row holding nonzero ``position``, known to lie in rows [lo, hi]: bisection."""
    while lo < hi:
        mid = (lo + hi) // 2
        if indptr[mid + 1] <= position:
            lo = mid + 1
        else:
            hi = mid
    return lo


@cuda.jit(device=True, inline="always")
def walk_to(indptr, row, last, position):
    """The row holding nonzero ``position`` (at most row ``last``), walking from ``row``: one
    row at a time, but every WALK_PROBE rows a look WALK_PROBE rows ahead, and past a run of
    empty rows a bisection (the walk's common case, the next row or two, pays nothing extra)."""
    while indptr[row + 1] <= position:
        row += 1
        if row & (WALK_PROBE - 1) == 0 and indptr[min(row + WALK_PROBE, last) + 1] <= position:
            row = row_of(indptr, row + WALK_PROBE, last, position)
    return row


@cuda.jit(device=True, inline="always")
def step_to(indptr, row, last, position):
    """:func:`walk_to` without the look-ahead: one row at a time (``last`` unused)."""
    while indptr[row + 1] <= position:
        row += 1
    return row


def _row_walk(width, init, merge, single, zeroes, flush, zero_row, c_row, prefetch_row, stored_row):
    """(leave_partial, next_row): at a row's end, finish the group's row (store it, combine it
    atomically, or leave it in shared memory for the block merge), reset ``acc`` and move to the
    next non-empty row, zeroing the empty rows it skips where ``zeroes`` (the single launch
    into an unwritten C).  ``c_row(remap, nnz, row)``: C's row of the kernel's row ``row``;
    ``prefetch_row`` loads it as the walk enters the row (``crow``; where C's rows are A's, a
    constant), so that its latency hides behind the row's gathers rather than delaying its
    store, and ``stored_row(row, crow)`` is the row the store takes."""

    @cuda.jit(device=True, inline="always")
    def leave_partial(partials, slot, acc):
        for v in range(width):
            partials[slot + v] = acc[v]

    @cuda.jit(device=True, inline="always")
    def next_row(C, indptr, remap, nnz, partials, partial_rows, acc, row, crow, row_start, row_end, seg_start, bg,
                 slot, j, active):
        """Returns the next non-empty row's (row, start, end, C's row)."""
        if merge and row_start < seg_start and (bg > 0 or single):
            partial_rows[bg] = row  # group bg - 1 (or, for group 0, an earlier block) holds this row too
            if active:
                leave_partial(partials, slot, acc)
        elif active:
            flush(C, stored_row(row, crow), j, acc, row_end - row_start, row_start >= seg_start)
        if zeroes:  # the empty rows in between are this group's to zero (few: single_launch)
            row += 1
            while indptr[row + 1] == row_end:
                if active:
                    zero_row(C, c_row(remap, nnz, row), j)
                row += 1
        else:  # C is filled or zeroed: skip them
            row = walk_to(indptr, row + 1, indptr.shape[0] - 2, row_end)
        for v in range(width):
            acc[v] = init
        return row, row_end, indptr[row + 1], prefetch_row(remap, nnz, row)

    return leave_partial, next_row


# SpMM kernel --------------------------------------------------------------------------------

@launch.kernel_factory
def spmm_hp_kernel(reduce_code, lanes, vec, cf, value_dtype, index_dtype, depth, single=False, out_dtype=None,
                   adds_to_c=False, strided=False, zeroed=False, mapped=False, balanced=False):
    """Compile-once factory of the HP-SpMM kernel.

    Thread mapping: a warp is ``32 // lanes`` groups of ``lanes`` lanes; group g owns
    nonzeros [g * nnz_per_group, (g + 1) * nnz_per_group) and the column tile blockIdx.y of
    ``lanes * vec * cf`` columns; lane l of the group owns ``cf`` groups of ``vec``
    consecutive columns, ``tile + c*lanes*vec + l*vec`` for c < cf, each read from B with one
    ``vec``-wide load (hierarchical vectorized memory access, paper 000 section III-B2; with
    lanes < 32 one warp instruction serves 32 // lanes nonzeros, as narrow rows of B need).

    Phases: (1) the group reads its first row from ``group_rows`` and caches ``lanes``
    (column, value) pairs at a time in shared memory (coalesced); (2) it accumulates per row in
    registers, ``depth`` entries' B rows loaded before the first multiply on graphs of long
    rows; (3) at each row switch it stores the row if it owned all of it, else combines it
    atomically into C (filled first with the reduction's identity) or, for max/min and in the
    single launch, leaves it for (4) the block merge: after a barrier the group holding a row's
    first part in the block combines the partials of the groups after it (one atomic per
    block, not per group).

    Block b's groups are those of chunk ``b * order_stride % gridDim.x`` of the nonzeros: in
    order for a stride of 1, reversed or scattered for another stride coprime to the grid
    (:func:`order_stride`; :func:`order_blocks` on segments of equal entries);
    ``order_inverse`` is the stride's inverse modulo the grid (chunk to block, for the
    look-back).  ``strided`` (single launch only): compiled for a stride other than 1; the single
    launch in order ignores both arguments (its look-back's search would cost registers).

    ``out_dtype``: C's value format where it differs from A's and B's (float32 results of
    16-bit operands); 16-bit values are read and computed in float32 either way.

    ``single``: the kernel writes every element of C itself, so a call is one GPU operation
    (no fill before it, which costs a host-bound call as much as a small graph's kernel):
    every reduction merges in the block, a row crossing blocks is finished by the one of its
    blocks that starts last (:func:`_lookback`), and a group zeroes the empty rows whose
    ``indptr`` lies in its nonzeros (the rows it skips, those just before its first row, and,
    for the last group, the rows after the last entry).  ``zeroed`` (single launch only): C is
    zeroed before the kernel, which skips empty rows as the filled kernel does (a run of empty
    rows costs a group one dependent ``indptr`` load a row otherwise: :func:`zeroed_single`).

    ``mapped`` (single launch only): the kernel works on A's rows in another order
    (:func:`shuffled_rows`, an alternative the tuner tries): ``indptr`` and ``group_rows`` are
    that order's, entry p of it is A's entry ``remap[p]`` and its row r is C's row
    ``remap[nnz + r]``.  Otherwise ``remap`` is not read.

    ``balanced`` (blocks in order, A's own rows): the groups' segments are those of
    :func:`numbasparse.preprocess.rows.balanced_segments`, of equal predicted work rather than
    equal entries, read from ``bounds`` (each group's first entry, then per block the first and
    last chunk of the rows crossing its start and its end, for the look-back).  Otherwise
    ``bounds`` is not read and group g owns entries [g * nnz_per_group, (g + 1) * nnz_per_group).

    ``adds_to_c`` (sum, filled kernel, float32/float64 C): every row is combined atomically,
    so the launch adds A B to what C holds (C += A B), with no fill before it.
    """
    groups = WARP // lanes
    cache_size = WARPS_PER_BLOCK * WARP
    _, value_type, compute = value_types(value_dtype)  # 16-bit values are computed in float32
    to_compute = converters(value_dtype)[0]
    index_type = numba.from_dtype(np.dtype(index_dtype))
    init = compute(reductions.initial(reduce_code))
    tile = lanes * vec * cf
    span = lanes * vec  # columns covered by one vector load of the whole group
    width = vec * cf
    gathered_size = depth * width  # (local array sizes must be compile-time constants)
    group_mask = (1 << lanes) - 1 if lanes < WARP else 0xFFFFFFFF
    merge = merges_in_block(reduce_code) or single
    block_groups = WARPS_PER_BLOCK * groups
    merge_size = block_groups * tile if merge else 1  # one partial row tile per group
    merge_rows_size = block_groups if merge else 1
    add_entry, gather_row, accumulate = _accumulate_parts(reduce_code, vec, cf, span, value_dtype)
    flush, zero_row = _store_parts(reduce_code, vec, cf, span, out_dtype or value_dtype)
    if adds_to_c:  # (a store anywhere else, a 16-bit C or the single launch's merges would not add)
        assert reduce_code == reductions.SUM and not single and not is_half_format(out_dtype or value_dtype)
        flush = _adding(flush)
    finish_across_blocks = _lookback(reduce_code, vec, cf, span, np.dtype(compute).itemsize * 8, flush, strided)
    zeroes = single and not zeroed  # the kernel writes C's empty rows
    assert single or not mapped
    assert not (balanced and (mapped or strided))

    if balanced:
        @cuda.jit(device=True, inline="always")
        def segment(bounds, group, nnz_per_group, nnz):
            return bounds[group], bounds[group + 1]

        @cuda.jit(device=True, inline="always")
        def row_chunks(bounds, row_start, row_end, lo, hi, chunk, block_nnz):
            heads = numba.int64(cuda.gridDim.x) * block_groups + 1  # (bounds: group starts, heads, tails)
            first = chunk if row_start >= lo else bounds[heads + chunk]
            last = chunk if row_end <= hi else bounds[heads + cuda.gridDim.x + chunk]
            return first, last
    else:
        @cuda.jit(device=True, inline="always")
        def segment(bounds, group, nnz_per_group, nnz):
            start = group * nnz_per_group
            return start, min(start + nnz_per_group, nnz)

        @cuda.jit(device=True, inline="always")
        def row_chunks(bounds, row_start, row_end, lo, hi, chunk, block_nnz):
            return row_start // block_nnz, (row_end - 1) // block_nnz

    if mapped:
        @cuda.jit(device=True, inline="always")
        def c_row(remap, nnz, row):
            return remap[nnz + row]

        @cuda.jit(device=True, inline="always")
        def entry(remap, p):
            return remap[p]

        prefetch_row = c_row  # C's row, loaded as the walk enters the row

        @cuda.jit(device=True, inline="always")
        def stored_row(row, crow):
            return crow
    else:  # (A's own rows: nothing loaded or carried, the kernel's registers unchanged)
        @cuda.jit(device=True, inline="always")
        def c_row(remap, nnz, row):
            return row

        @cuda.jit(device=True, inline="always")
        def entry(remap, p):
            return p

        @cuda.jit(device=True, inline="always")
        def prefetch_row(remap, nnz, row):
            return 0

        @cuda.jit(device=True, inline="always")
        def stored_row(row, crow):
            return row

    leave_partial, next_row = _row_walk(width, init, merge, single, zeroes, flush, zero_row, c_row, prefetch_row,
                                        stored_row)
    # float32 sums over 8 columns per lane: capped for occupancy (MAX_REGISTERS); not in the
    # single launch, whose extra state would spill under the cap
    capped = reduce_code == reductions.SUM and value_dtype == "<f4" and width == 8 and not single
    options = {"max_registers": MAX_REGISTERS} if capped and not config.ENABLE_CUDASIM else {}
    # balanced segments' block bounds are loads: read where the merge needs them, not kept live
    # through the loop (single launch, float32 at 4 values a lane: 67-71 -> 64 registers), but
    # for float32 at 8 values a lane, where ptxas then allocates 85 against 80 read first
    late_bounds = balanced and not (value_dtype == "<f4" and width == 8)

    @cuda.jit(device=True, inline="always")
    def finish_row(C, parts, received, bounds, row, row_start, row_end, lo, hi, chunk, block_nnz, order_inverse, j,
                   acc):
        """Store the row, whose entries in [lo, hi) are in ``acc``: directly if they are all of
        it, else atomically into the filled C, or across blocks in the single launch."""
        owned = row_start >= lo and row_end <= hi
        if owned or not single:
            flush(C, row, j, acc, row_end - row_start, owned)
        else:
            first, last = row_chunks(bounds, row_start, row_end, lo, hi, chunk, block_nnz)
            finish_across_blocks(C, parts, received, row, row_start, row_end, chunk, first, last, order_inverse, j,
                                 acc)

    @cuda.jit(**options)  # (the simulator's jit takes no register cap)
    def spmm_hp(indptr, indices, data, group_rows, B, C, nnz_per_group, parts, order_stride, order_inverse, remap,
                bounds):
        lane = cuda.threadIdx.x % WARP
        g = lane // lanes
        glane = lane % lanes
        mask = numba.uint32(group_mask << (g * lanes))
        cached_col = cuda.shared.array(cache_size, index_type)
        cached_val = cuda.shared.array(cache_size, value_type)
        partials = cuda.shared.array(merge_size, value_type)  # merge: partial rows left by groups
        partial_rows = cuda.shared.array(merge_rows_size, index_type)  # and their rows (-1: none)
        acc = cuda.local.array(width, value_type)
        received = cuda.local.array(width if single else 1, value_type)  # another block's part
        gathered = cuda.local.array(gathered_size, value_type)  # B columns of depth entries
        nnz = indices.shape[0]
        bg = (cuda.threadIdx.x // WARP) * groups + g  # the group's index in its block
        # the block's chunk of nonzeros: with order_stride > 1 (coprime to the grid) the blocks
        # resident at once take chunks spread over the whole matrix
        if single and not strided:  # (no modulo: it costs the single launch registers)
            work_block = numba.int64(cuda.blockIdx.x)
        else:
            work_block = (numba.int64(cuda.blockIdx.x) * order_stride) % cuda.gridDim.x
        group_id = work_block * block_groups + bg
        seg_start, seg_end = segment(bounds, group_id, nnz_per_group, nnz)
        block_nnz = block_groups * nnz_per_group
        if not late_bounds:
            block_start = segment(bounds, work_block * block_groups, nnz_per_group, nnz)[0]
            block_end = segment(bounds, (work_block + 1) * block_groups - 1, nnz_per_group, nnz)[1]
        slot = bg * tile + glane * width  # this lane's part of the group's partial row
        j = cuda.blockIdx.y * tile + glane * vec
        n = C.shape[1]
        active = j < n  # vec divides n, so a started vector is complete
        gather = False  # merge: combine the partials of the next groups into the last row
        row = row_start = row_end = 0
        if merge:
            partial_rows[bg] = -1
        if seg_start < nnz:  # whole groups idle (and still reach the merge's barrier)
            # (1) the group's first row
            row = group_rows[group_id]
            crow = prefetch_row(remap, nnz, row)
            row_start = indptr[row]
            row_end = indptr[row + 1]
            if zeroes and active:
                r = row - 1
                while r >= 0 and indptr[r] == seg_start:  # empty rows just before this group's
                    zero_row(C, c_row(remap, nnz, r), j)
                    r -= 1
            for v in range(width):
                acc[v] = init
            base = cuda.threadIdx.x - glane  # this group's slots in the cache
            for chunk in range(seg_start, seg_end, lanes):
                if chunk + glane < seg_end:
                    at = entry(remap, chunk + glane)
                    cached_col[base + glane] = indices[at]
                    cached_val[base + glane] = to_compute(data[at])
                syncwarp_lanes(mask)
                count = min(lanes, seg_end - chunk)
                # (2) accumulate, (3) finish each row as the entries cross its end
                if depth == 1:  # entry by entry, all groups of the warp in step
                    for kk in range(count):
                        if chunk + kk >= row_end:
                            row, row_start, row_end, crow = next_row(C, indptr, remap, nnz, partials, partial_rows,
                                                                     acc, row, crow, row_start, row_end, seg_start, bg,
                                                                     slot, j, active)
                        if active:
                            add_entry(acc, cached_val[base + kk], B, cached_col[base + kk], j, n)
                else:  # runs of entries in one row, depth entries' B rows loaded before use
                    kk = 0
                    while kk < count:
                        if chunk + kk >= row_end:
                            row, row_start, row_end, crow = next_row(C, indptr, remap, nnz, partials, partial_rows,
                                                                     acc, row, crow, row_start, row_end, seg_start, bg,
                                                                     slot, j, active)
                        stop = min(count, row_end - chunk)  # entries kk..stop-1 lie in this row
                        if active:
                            while kk + depth <= stop:
                                for u in range(depth):
                                    gather_row(B, cached_col[base + kk + u], j, n, gathered, u * width)
                                for u in range(depth):
                                    accumulate(acc, cached_val[base + kk + u], gathered, u * width, j, n)
                                kk += depth
                            while kk < stop:
                                add_entry(acc, cached_val[base + kk], B, cached_col[base + kk], j, n)
                                kk += 1
                        kk = stop
                syncwarp_lanes(mask)  # the next chunk overwrites the cache
            # (3) the group's last row
            if merge and row_start < seg_start and (bg > 0 or single):
                partial_rows[bg] = row
                if active:
                    leave_partial(partials, slot, acc)
            elif merge and row_end > seg_end:
                gather = True  # the row goes on in the next group
            elif active:
                flush(C, stored_row(row, crow), j, acc, row_end - row_start,
                      row_start >= seg_start and row_end <= seg_end)
            if zeroes and active and seg_end == nnz:
                for r in range(row + 1, C.shape[0]):  # empty rows after the last entry
                    zero_row(C, c_row(remap, nnz, r), j)
        # (4) the block merge
        if merge:
            syncblock()  # every partial is in shared memory
            h = bg + 1
            for task in range(2 if single else 1):  # this group's last row, then the block's first
                if task == 1:  # (single launch) group 0 finishes the row begun in an earlier chunk
                    gather = bg == 0 and partial_rows[0] >= 0
                    if gather:
                        row = partial_rows[0]
                        row_start = indptr[row]
                        row_end = indptr[row + 1]
                        h = 0
                        for v in range(width):
                            acc[v] = init
                if gather:
                    while h < block_groups and partial_rows[h] == row:
                        if active:
                            for v in range(width):
                                acc[v] = combine(reduce_code, acc[v], partials[h * tile + glane * width + v])
                        h += 1
                    if active:  # (finish_row takes C's row: it only stores there)
                        if late_bounds:
                            block_start = segment(bounds, work_block * block_groups, nnz_per_group, nnz)[0]
                            block_end = segment(bounds, (work_block + 1) * block_groups - 1, nnz_per_group, nnz)[1]
                        finish_row(C, parts, received, bounds, c_row(remap, nnz, row), row_start, row_end, block_start,
                                   block_end, work_block, block_nnz, order_inverse, j, acc)

    return spmm_hp


# SpMM plan and launch ------------------------------------------------------------------------

HPPlan = collections.namedtuple("HPPlan", "kernel grid nnz_per_group group_rows single fill_rows unused_scratch depth "
                                           "layout block_order order_stride order_inverse zeroed shuffled indptr "
                                           "remap balanced bounds")


def pattern_fact(A, name, *args, shuffled=False):
    """A fact of device CSR A's pattern computed on the host (the function ``name`` of
    :mod:`numbasparse.preprocess.rows`, from ``host_indptr``; "median_column_distance" also from
    a sample of the indices), once per pattern, kept in A's cache; the array ones uploaded; HP's
    rules, dispatch, the tuner and the fused kernels' run length read them here.  ``shuffled``:
    the fact of A's rows in :func:`shuffled_rows`' order (the facts of ``row_prep`` that read
    ``indptr`` only)."""
    if shuffled:
        if name == "median_column_distance":
            raise ValueError("median_column_distance reads A's own entries")
        indptr = _shuffled_order(A)[0]
    else:
        indptr = A.host_indptr

    def build():
        if name == "segment_rows":
            return cuda.to_device(row_prep.segment_rows(indptr, *args, A.index_dtype))
        if name == "rows_to_fill":
            rows = row_prep.rows_to_fill(indptr, *args, A.index_dtype)
            return cuda.to_device(rows) if rows.size else None
        if name == "median_column_distance":  # (the only fact that reads indices: a sample of them)
            runs = row_prep.sampled_entries(A.nnz)
            positions = [np.arange(start, start + length) for start, length in runs]
            host = A._host_copy  # (a matrix uploaded from scipy keeps its indices: no copies)
            columns = [host.indices[start:start + length] if host is not None else
                       A.indices[start:start + length].copy_to_host() for start, length in runs]
            return row_prep.median_column_distance(A.host_indptr, np.concatenate(positions or [[]]),
                                                   np.concatenate(columns or [[]]))
        return getattr(row_prep, name)(indptr, *args)
    return A.cache.get_or_build("plans", (name, *args) + (("shuffled",) if shuffled else ()), build)


def _shuffled_order(A):
    """(indptr, remap) of :func:`numbasparse.preprocess.rows.shuffled_rows` for A, on the host,
    once per pattern (the rules' facts of the shuffled rows read it before any upload)."""
    return A.cache.get_or_build("plans", ("shuffled order",), lambda: row_prep.shuffled_rows(A.host_indptr))


def shuffled_rows(A):
    """A's rows in :func:`numbasparse.preprocess.rows.shuffled_rows`' seeded order, as the
    mapped kernel (``spmm_hp(..., shuffled=True)``) reads them: (that order's ``indptr``, in A's
    index dtype; ``remap``, int32) on the device, uploaded once per pattern, in A's cache."""
    def build():
        indptr, remap = _shuffled_order(A)
        with device.allocating("HP-SpMM's row map", remap.size * 4 + indptr.size * A.indptr.dtype.itemsize):
            return cuda.to_device(indptr.astype(A.indptr.dtype)), cuda.to_device(remap.astype(np.int32))
    return A.cache.get_or_build("plans", ("shuffled rows on the device",), build)


def spmm_layout(A, n_cols, itemsize, B, *, stored=(), lanes=None):
    """(lanes, vec, cf, depth) of the kernel for A and ``n_cols`` columns of B of ``itemsize``
    bytes (``stored``: C where vector stores address it): the lane layout (:func:`lane_layout`,
    ``lanes`` forcing the group size), one tile twice as wide (:func:`can_widen`) where
    :func:`wide_tiles` holds, and the gather depth."""
    forced = lanes is not None
    lanes, vec, cf = lane_layout(n_cols, itemsize, B, *stored, lanes=lanes)
    if (not forced and can_widen(lanes, vec, cf, n_cols, kernel_format(A.dtype))
            and wide_tiles(A.nnz, pattern_fact(A, "nonempty_rows"), A.shape[1] * n_cols * itemsize)):
        cf = 2
    return lanes, vec, cf, gather_depth(A.nnz, pattern_fact(A, "nonempty_rows"), vec * cf, itemsize, lanes)


def _spmm_plan(A, code, n, B, C, nnz_per_group, lanes, layout, depth, single, accumulate=False, block_order=None,
               zeroed=None, shuffled=None, balanced=None):
    """The launch plan of HP-SpMM for A (the layout, DTP, single-launch, balanced-segment and
    block-order rules, or the given overrides)."""
    fmt = kernel_format(A.dtype)
    out_fmt = fmt if C.dtype == np.uint16 else kernel_format(C.dtype)  # float32 C of 16-bit operands: "<f4"
    stored = (C,) if is_half_format(out_fmt) else ()  # a 16-bit C is written by vector stores
    if layout:
        lanes, vec, cf = layout
        depth = depth or gather_depth(A.nnz, pattern_fact(A, "nonempty_rows"), vec * cf, C.dtype.itemsize, lanes)
    else:
        lanes, vec, cf, rule_depth = spmm_layout(A, n, C.dtype.itemsize, B, stored=stored, lanes=lanes)
        depth = depth or rule_depth
    n_tiles = cdiv(n, lanes * vec * cf)
    groups_per_warp = WARP // lanes
    if nnz_per_group is None:
        nnz_per_group = window_nnz_per_group(A, spmm_nnz_per_group(A.nnz, n_tiles, groups_per_warp=groups_per_warp),
                                             groups_per_warp, lanes * vec * cf * B.dtype.itemsize)
    block_groups = WARPS_PER_BLOCK * groups_per_warp
    grid = (cdiv(cdiv(A.nnz, nnz_per_group), block_groups), n_tiles)
    if is_half_format(out_fmt) or (shuffled and single is None):  # a 16-bit C is written whole by the kernel,
        single = True  # never combined atomically (spmm_hp runs the filled kernel for it into a float32
        # workspace); shuffled rows are the single launch's
    if single is None:
        single = single_launch(mean_row(A.nnz, pattern_fact(A, "nonempty_rows")),
                               pattern_fact(A, "crossing_span", block_groups * nnz_per_group),
                               pattern_fact(A, "empty_rows_per_group", nnz_per_group))
    single = bool(single)
    if shuffled and (not single or not row_map_fits(A)):
        raise ValueError("shuffled rows take the single launch and fewer than 2**31 entries and rows")
    shuffled = bool(shuffled)
    if zeroed is None:  # (only the single launch zeroes empty rows itself)
        zeroed = single and zeroed_single(pattern_fact(A, "empty_rows_per_group", nnz_per_group, shuffled=shuffled))
    zeroed = single and bool(zeroed)
    in_order = block_order is None or block_order == "in_order"
    if balanced is None:  # the rule (ROW_END_COST): whole-warp groups on A's own rows in order
        balanced = not shuffled and in_order and balances(lanes, vec * cf, fmt, single)
    elif balanced and not (in_order and not shuffled):
        raise ValueError("balanced segments take A's own rows in order (shuffled=False, block_order='in_order')")
    balanced = bool(balanced)
    if block_order is None:  # (shuffled rows are in no order to correct; balanced blocks cost the same)
        block_order = "in_order" if shuffled or balanced else order_blocks(
            A, block_groups * nnz_per_group, A.shape[1] * lanes * vec * cf * B.dtype.itemsize, single)
    stride = order_stride(grid[0], block_order)
    kernel = spmm_hp_kernel(code, lanes, vec, cf, fmt, A.indices.dtype.str, depth, single,
                            None if out_fmt == fmt else out_fmt, accumulate, single and block_order != "in_order",
                            zeroed, shuffled, balanced)
    if balanced:
        bounds, group_rows = balanced_segments(A, grid[0], block_groups)
        # (max and min's filled launch fills the rows its block merge cannot store)
        fill_rows = balanced_rows_to_fill(A, grid[0], block_groups) if not single and merges_in_block(code) else None
    else:
        bounds = A.cache.get_or_build("plans", ("no bounds",), lambda: cuda.device_array(1, A.index_dtype))
        group_rows = pattern_fact(A, "segment_rows", nnz_per_group, shuffled=shuffled)
        fill_rows = (pattern_fact(A, "rows_to_fill", block_groups * nnz_per_group)
                     if not single and merges_in_block(code) else None)
    # the filled kernel takes (and never reads) the single launch's scratch argument, a kernel on
    # A's own rows the row map
    unused = None if single else cuda.device_array(1, np.uint64)
    indptr, remap = shuffled_rows(A) if shuffled else (A.indptr, cuda.device_array(1, np.int32))
    return HPPlan(kernel, grid, nnz_per_group, group_rows, single, fill_rows, unused, depth, (lanes, vec, cf),
                  block_order, stride, pow(stride, -1, grid[0]) if stride > 1 else 1, zeroed, shuffled, indptr, remap,
                  balanced, bounds)


def balanced_segments(A, blocks, block_groups):
    """(bounds, group_rows) of :func:`numbasparse.preprocess.rows.balanced_segments` for A's rows
    in ``blocks`` blocks of ``block_groups`` groups, on the device in A's index dtype (32-bit
    bounds where they fit: fewer registers); once per pattern and grid, in A's cache."""
    def build():
        bounds = pattern_fact(A, "balanced_segments", blocks, block_groups, ROW_END_COST).astype(A.index_dtype)
        group_rows = row_prep.segment_rows_at(A.host_indptr, bounds[:blocks * block_groups], A.index_dtype)
        with device.allocating("HP-SpMM's balanced segments", bounds.nbytes + group_rows.nbytes):
            return cuda.to_device(bounds), cuda.to_device(group_rows)
    return A.cache.get_or_build("plans", ("balanced segments", blocks, block_groups, ROW_END_COST), build)


def balanced_rows_to_fill(A, blocks, block_groups):
    """The rows that the filled launch's block merge cannot store alone on balanced segments
    (:func:`numbasparse.preprocess.rows.rows_to_fill`), on the device, None if none."""
    def build():
        bounds = pattern_fact(A, "balanced_segments", blocks, block_groups, ROW_END_COST)
        block_starts = bounds[:blocks * block_groups + 1:block_groups]
        rows = row_prep.rows_to_fill(A.host_indptr, block_starts, A.index_dtype)
        return cuda.to_device(rows) if rows.size else None
    return A.cache.get_or_build("plans", ("balanced rows to fill", blocks, block_groups, ROW_END_COST), build)


def _scratch(A, key, plan, n, dtype, stream):
    """The ``parts`` of a single-launch HP-SpMM on ``stream`` (two rows of C per block, each
    value in :func:`intrinsics.flagged_words` with ready flags; zero, and cleared again by each
    call): one per stream, since calls on one stream run one after another.  (Two launches
    sharing it at once could take each other's parts and wait for ever: e.g. two CUDA graphs
    instantiated from calls captured on one stream and run together on two streams.  One graph
    is safe: CUDA runs the launches of one executable graph one after another.)"""
    handle = launch.stream_handle(stream)
    words = flagged_words(2 * plan.grid[0] * n, compute_dtype(dtype).itemsize)  # parts in the compute type
    def build():
        with device.allocating("HP-SpMM's scratch", words * 8):
            return cuda.to_device(np.zeros(words, np.uint64))
    parts = A.cache.get_or_build("scratch", (key, handle), build)
    return handle, parts


def spmm_hp(A, B, C, reduce, *, stream=0, nnz_per_group=None, lanes=None, layout=None, depth=None, single=None,
            accumulate=False, values=None, block_order=None, zeroed=None, shuffled=None, balanced=None):
    """Launch HP-SpMM on a device :class:`CSR` A and device arrays B, C.  In its single launch
    (:func:`single_launch`, graphs of short rows) the kernel alone writes all of C; otherwise C
    is filled with the reduction's identity first (sum and mean: a memset; max and min: only the
    rows :func:`numbasparse.preprocess.rows.rows_to_fill` lists).  The plan is made once per
    pattern, N, dtype and alignment of B and kept in ``A.cache``.

    Overrides of the rules, for tools and tests: ``nnz_per_group`` (DTP), ``lanes`` (group
    size), ``layout`` ((lanes, vec, cf)), ``depth`` (gather depth), ``single`` (launch mode),
    ``balanced`` (segments of equal predicted work, ROW_END_COST, rather than equal entries: the
    rule for whole-warp groups, :func:`balances`), and on equal entries ``block_order`` (one of BLOCK_ORDERS,
    :func:`order_stride`) and ``shuffled`` (the single launch on the rows in a seeded random
    order read through a map, :func:`shuffled_rows`; True implies ``single=True``, and
    ``single=False`` with it is a ValueError; either with ``balanced=True`` is a ValueError), and
    ``zeroed`` (the single launch after a memset of C, :func:`zeroed_single`).

    ``accumulate``: C += A B (sum into a float32 or float64 C, the filled kernel without its
    fill, every row added atomically): how a product split by columns adds its parts.

    A 16-bit C is written by the single launch (after a memset of C where
    :func:`zeroed_single` holds), or, with ``single=False``, by the filled kernel
    into a float32 workspace kept filled between calls, rounded into C by a second launch
    (:func:`~numbasparse.cuda.fill.workspace`).

    ``values``: a device array of A.nnz values in A's dtype to use instead of A's (an SDDMM's
    scores), passed per call like B and C, so the launch binds on A (and a call that makes
    new values each time, as the unfused SDDMM -> SpMM does, is replayed)."""
    code = reductions.CODES[reduce]
    if block_order is not None:
        check_block_order(block_order)
    if accumulate:
        if code != reductions.SUM or C.dtype.itemsize < 4 or single:
            raise ValueError("accumulate takes reduce='sum', a float32 or float64 C and the filled kernel")
        single = False
    m, n = C.shape
    if m == 0 or n == 0:
        return
    if A.nnz == 0:  # every row empty: 0 for every reduction (nothing to add)
        if not accumulate:
            fill_identity(C, reductions.SUM, stream)
        return
    rounded = C.dtype == np.uint16 and single is False  # a 16-bit C from the filled kernel
    result = C
    if rounded:
        handle, C = workspace(A, code, n, stream)
    key = ("spmm_hp", code, n, A.dtype.name, C.dtype.str, launch.alignment(B), launch.alignment(C), nnz_per_group,
           lanes, layout, depth, single, accumulate, block_order, zeroed, shuffled, balanced)
    if values is not None:
        if values.shape != A.data.shape or values.dtype != A.data.dtype:
            raise ValueError(f"values must be {A.data.shape} of {A.data.dtype}, got {values.shape} of {values.dtype}")
        bound_key, variable = key + ("values",), (2, 4, 5)
    else:
        bound_key, variable, values = key, (4, 5), A.data
    plan = A.cache.get_or_build("plans", key, lambda: _spmm_plan(A, code, n, B, C, nnz_per_group, lanes, layout,
                                                                 depth, single, accumulate, block_order, zeroed,
                                                                 shuffled, balanced))
    if plan.single:
        handle, parts = _scratch(A, key, plan, n, A.dtype, stream)
        bound_key = bound_key + (handle,)  # the bound launch holds this stream's scratch
        if plan.zeroed:  # the kernel skips empty rows
            fill_identity(C, reductions.SUM, stream)
    else:
        parts = plan.unused_scratch
        if not accumulate and not rounded:  # (accumulating: C holds what the product adds to; a workspace is filled)
            if not merges_in_block(code):  # sum, mean: a memset
                fill_identity(C, code, stream)
            elif plan.fill_rows is not None:  # max, min: the rows the block merge cannot store alone
                fill_identity(C, code, stream, rows=plan.fill_rows, A=A, key=key + ("fill",))
    args = (plan.indptr, A.indices, values, plan.group_rows, B, C, plan.nnz_per_group, parts, plan.order_stride,
            plan.order_inverse, plan.remap, plan.bounds)
    if rounded:
        round_into(A, C, result, code, handle, stream, bound_key, plan.kernel, plan.grid, WARPS_PER_BLOCK * WARP,
                   args, variable)
    else:
        launch.run_bound(A.cache, bound_key, plan.kernel, plan.grid, WARPS_PER_BLOCK * WARP, stream, args, variable)


# SDDMM --------------------------------------------------------------------------------------

@launch.kernel_factory
def sddmm_hp_kernel(vec, group, value_dtype, skips_runs):
    """Compile-once factory of the HP-SDDMM kernel (``skips_runs``: the walk to a nonzero's row
    skips runs of empty rows, :func:`walk_to`; else it steps row by row, :func:`step_to`).

    Thread mapping: warp w owns nonzeros [w * nnz_per_warp, (w + 1) * nnz_per_warp), as in
    HP-SpMM; it is split into ``32 // group`` groups of ``group`` lanes, each group computing
    one nonzero's dot product at a time (so short feature vectors still use every lane).  A
    lane reads ``vec``-wide aligned vectors of X[i] and Y[j], a shuffle tree over the group
    sums them, and the group's first lane writes ``a_ij * dot``.
    """
    groups = WARP // group
    span = group * vec
    walk = walk_to if skips_runs else step_to
    zero = value_types(value_dtype)[2](0)
    to_compute, to_storage = converters(value_dtype)
    load = vector_load(vec, fmt=value_dtype)

    @cuda.jit
    def sddmm_hp(indptr, indices, data, warp_rows, X, Y, out, nnz_per_warp):
        lane = cuda.threadIdx.x % WARP
        g = lane // group
        lane_in_group = lane % group
        warp_id = cuda.blockIdx.x * WARPS_PER_BLOCK + cuda.threadIdx.x // WARP
        seg_start = warp_id * nnz_per_warp
        nnz = indices.shape[0]
        if seg_start >= nnz:
            return  # the whole warp leaves together
        seg_end = min(seg_start + nnz_per_warp, nnz)
        k_dim = X.shape[1]
        last_row = warp_rows[warp_id + 1] if warp_id + 1 < warp_rows.shape[0] else indptr.shape[0] - 2
        row = row_of(indptr, warp_rows[warp_id], last_row, min(seg_start + g, seg_end - 1))
        for base in range(seg_start, seg_end, groups):
            p = base + g
            partial = zero
            if p < seg_end:
                row = walk(indptr, row, last_row, p)
                col = indices[p]
                for k in range(lane_in_group * vec, k_dim, span):
                    x = load(X, row, k)
                    y = load(Y, col, k)
                    for v in range(vec):
                        partial += x[v] * y[v]
            offset = group // 2
            while offset > 0:  # every lane takes part in the shuffles
                partial += shfl_down(partial, offset)
                offset //= 2
            if lane_in_group == 0 and p < seg_end:
                out[p] = to_storage(to_compute(data[p]) * partial)

    return sddmm_hp


def sddmm_layout(k_dim, itemsize, X, Y):
    """(vec, group): lanes read ``vec``-wide vectors, and a nonzero's dot product takes the
    narrowest group of lanes that covers K with SDDMM_VECTORS_PER_LANE vectors per lane (at most a
    warp)."""
    vec = vector_width(k_dim, itemsize, X, Y)
    group = 1
    while group < WARP and group * vec * SDDMM_VECTORS_PER_LANE < k_dim:
        group *= 2
    return vec, group


def sddmm_rules(A, k_dim, X, Y, group=None):
    """(vec, group, nnz_per_warp) of HP-SDDMM's rules for this call (``group``: an override)."""
    vec, rule_group = sddmm_layout(k_dim, X.dtype.itemsize, X, Y)
    group = group or rule_group
    return vec, group, sddmm_window_nnz_per_warp(A, sddmm_nnz_per_warp(A.nnz, group), group,
                                                 2 * k_dim * X.dtype.itemsize)


def _sddmm_plan(A, k_dim, X, Y, out, nnz_per_warp_override, group_override=None, skips_runs=None):
    vec, group, npw = sddmm_rules(A, k_dim, X, Y, group_override)
    npw = nnz_per_warp_override or npw
    grid = cdiv(cdiv(A.nnz, npw), WARPS_PER_BLOCK)
    if skips_runs is None:
        skips_runs = pattern_fact(A, "longest_empty_run") > WALK_PROBE
    kernel = sddmm_hp_kernel(vec, group, kernel_format(A.dtype), bool(skips_runs))
    return kernel, grid, npw, pattern_fact(A, "segment_rows", npw)


def sddmm_hp(A, X, Y, out, *, stream=0, nnz_per_warp=None, group=None, skips_runs=None):
    """Launch HP-SDDMM: ``out[p] = a_p * <X[i], Y[j]>`` for each stored entry p = (i, j).
    Overrides of the rules, for tools and tests: ``nnz_per_warp`` (DTP), ``group`` (lanes per
    nonzero, a power of two up to 32; each lane loops over K in vectors), ``skips_runs`` (the
    walk skips runs of empty rows; default: where a run is longer than WALK_PROBE)."""
    if A.nnz == 0:
        return
    if group is not None and (group not in (1, 2, 4, 8, 16, 32)):
        raise ValueError(f"group must be a power of two from 1 to 32, got {group!r}")
    k_dim = X.shape[1]
    key = ("sddmm_hp", k_dim, A.dtype.name, min(launch.alignment(X), launch.alignment(Y)), nnz_per_warp, group,
           skips_runs)
    kernel, grid, npw, warp_rows = A.cache.get_or_build(
        "plans", key, lambda: _sddmm_plan(A, k_dim, X, Y, out, nnz_per_warp, group, skips_runs))
    args = (A.indptr, A.indices, A.data, warp_rows, X, Y, out, npw)
    launch.run_bound(A.cache, key, kernel, grid, WARPS_PER_BLOCK * WARP, stream, args, (4, 5, 6))


# Ahead-of-time compilation ------------------------------------------------------------------

def precompile_variants(A, B, X, reduce):
    """Launch every HP kernel variant of this width and dtype that ``auto`` may pick on some graph,
    for :func:`numbasparse.precompile`: HP-SpMM's gather depths x launch modes (16-bit C: the
    single launch, which ``auto`` takes for it, in order and scattered, each also after a memset of
    C: :func:`zeroed_single`), on the segments the rule takes (:func:`balances`), the wide tiles
    of :func:`wide_tiles` and, once per call with
    ``reduce="sum"``, HP-SDDMM's walk past runs of empty rows and (float32 and
    float64) the accumulating kernel of both depths
    (:func:`numbasparse.dispatch.spmm_add`, :mod:`numbasparse.distributed`'s pipeline).  Which
    of them a graph reaches depends on its rows and hub rows, and no set of small graphs is sure
    to reach them all at every width.  B (K, N) and X (M, N): device
    arrays as the kernels take them (16-bit values as their bits); results discarded."""
    half = is_half(A.dtype)
    C = cuda.device_array((A.shape[0], B.shape[1]), storage_dtype(A.dtype))
    lanes, vec, cf = lane_layout(B.shape[1], C.dtype.itemsize, B)
    for depth in (1, (2 if half else 1) * GATHER_DEPTH):
        for single in (True,) if half else (True, False):  # auto writes a 16-bit C by the single launch
            spmm_hp(A, B, C, reduce, depth=depth, single=single, block_order="in_order", zeroed=False,
                    shuffled=False)  # (the rule's segments: balanced for whole warps)
        if half:  # after a memset of C on graphs of long runs of empty rows (:func:`zeroed_single`), and on
            # equal entries scattered (only on long rows, so for a 16-bit C: :func:`order_blocks`)
            orders = ("in_order",) if balances(lanes, vec * cf, kernel_format(A.dtype), True) else (
                "in_order", "scattered")
            for order, zeroed in ((order, zeroed) for order in orders for zeroed in (False, True)):
                if (order, zeroed) != ("in_order", False):
                    spmm_hp(A, B, C, reduce, depth=depth, single=True, block_order=order, zeroed=zeroed,
                            shuffled=False)
    if can_widen(lanes, vec, cf, B.shape[1], kernel_format(A.dtype)):
        for single in (True, False):
            spmm_hp(A, B, C, reduce, layout=(lanes, vec, 2), depth=1, single=single)
        if reduce == "sum":  # and accumulating (dispatch.spmm_add)
            spmm_hp(A, B, C, reduce, layout=(lanes, vec, 2), depth=1, accumulate=True)
    if reduce == "sum":
        sddmm_hp(A, X, B, cuda.device_array(A.nnz, storage_dtype(A.dtype)), skips_runs=True)
        if not half:
            for depth in (1, GATHER_DEPTH):
                spmm_hp(A, B, C, reduce, depth=depth, accumulate=True)
