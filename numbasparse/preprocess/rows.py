"""Row bookkeeping of a CSR pattern for kernels that split work by nonzeros (HP-SpMM/SDDMM,
paper 000): where each segment of nonzeros starts, and which rows a kernel must fill itself.

The functions take ``indptr`` (any integer dtype; :func:`grid_time` takes :func:`chunk_costs`'
result) and work in int64."""
import math

import numpy as np


def _cdiv(a, b):
    return -(-a // b)


def segment_rows(indptr, nnz_per_segment, index_dtype):
    """The row holding the first nonzero of each segment of ``nnz_per_segment`` nonzeros (in
    ``index_dtype``), so that a warp need not binary-search ``indptr`` (a chain of ~log2(M)
    dependent loads, most of a short segment's time) to find where its work starts."""
    indptr = np.asarray(indptr)
    return segment_rows_at(indptr, np.arange(0, int(indptr[-1]), nnz_per_segment, dtype=np.int64), index_dtype)


def nonempty_rows(indptr):
    """Number of rows with at least one stored entry."""
    return int(np.count_nonzero(np.diff(indptr)))


def rows_to_fill(indptr, block_nnz, index_dtype):
    """The rows a kernel that merges split rows inside a thread block of ``block_nnz`` nonzeros
    (or, an array, blocks starting at those entries) cannot write alone: empty rows, and rows
    whose nonzeros fall in more than one block.  They are filled with the reduction's identity
    before the kernel runs."""
    indptr = np.asarray(indptr, np.int64)
    start, end = indptr[:-1], indptr[1:]
    if np.ndim(block_nnz):  # each row's blocks counted from the (few) block starts, not searched per row
        def block_of(positions):  # (positions sorted: the block starts at or before each)
            at = np.searchsorted(positions, np.asarray(block_nnz, np.int64), side="left")
            return np.cumsum(np.bincount(at, minlength=positions.size + 1)[:positions.size])
        crossing = block_of(start) != block_of(end - 1)
    else:
        crossing = (start // block_nnz) != ((end - 1) // block_nnz)
    return np.flatnonzero(crossing | (start == end)).astype(index_dtype)


def crossing_span(indptr, block_nnz):
    """The most blocks of ``block_nnz`` nonzeros a row spans after its first (0: no row crosses
    a block boundary)."""
    indptr = np.asarray(indptr, np.int64)
    start, end = indptr[:-1], indptr[1:]
    nonempty = end > start
    spans = (end[nonempty] - 1) // block_nnz - start[nonempty] // block_nnz
    return int(spans.max()) if spans.size else 0


def empty_rows_per_group(indptr, nnz_per_group):
    """The most empty rows one lane group of ``nnz_per_group`` nonzeros writes in a kernel that
    fills empty rows itself: the empty rows whose ``indptr`` lies in its nonzeros, the last
    group taking those after the last entry."""
    indptr = np.asarray(indptr, np.int64)
    nnz = int(indptr[-1])
    at = indptr[:-1][indptr[1:] == indptr[:-1]]
    owner = np.minimum(at // nnz_per_group, _cdiv(nnz, nnz_per_group) - 1)
    return int(np.bincount(owner).max()) if owner.size else 0


def chunk_costs(indptr, block_nnz, row_end_cost):
    """The work of each chunk of ``block_nnz`` nonzeros, in units of one entry's: its entries plus
    ``row_end_cost`` per row ending in it (float64, one per chunk)."""
    indptr = np.asarray(indptr, np.int64)
    nnz = int(indptr[-1])
    blocks = _cdiv(nnz, block_nnz)
    ends = indptr[1:][indptr[1:] > indptr[:-1]] - 1  # the last entry of each non-empty row
    cost = np.bincount(ends // block_nnz, minlength=blocks) * float(row_end_cost)
    cost += np.minimum(block_nnz, nnz - np.arange(blocks, dtype=np.int64) * block_nnz)
    return cost


def grid_time(costs, slots, stride, mixed=False):
    """The predicted time of a grid whose block b runs chunk ``b * stride % blocks`` of
    :func:`chunk_costs` ``costs`` on ``slots`` block slots (the GPU's blocks at once): a block
    starts, at the latest, when the work dispatched before it, spread over the slots, is done
    (the greedy list-scheduling bound; blocks of the first wave too, since the GPU starts them
    one after another), and the grid takes the most any block finishes after that start: where
    costly chunks run last, the grid waits on them.  ``mixed``: every chunk at the mean cost, an
    optimistic estimate of the same rows in a random order (rows longer than a chunk keep their
    chunks unequal in any order).  ``stride`` must be coprime to the number of chunks."""
    blocks = costs.size
    if blocks == 0:
        return 0.0
    if math.gcd(stride, blocks) != 1:
        raise ValueError(f"stride {stride} is not coprime to {blocks} blocks")
    run = np.full(blocks, costs.mean()) if mixed else costs[np.arange(blocks, dtype=np.int64) * stride % blocks]
    before = np.cumsum(run) - run  # the work dispatched before each block
    return float((before / slots + run).max())


def balanced_segments(indptr, blocks, block_groups, row_end_cost):
    """Segments of equal work for ``blocks`` x ``block_groups`` groups, in :func:`chunk_costs`'
    units (an entry, plus ``row_end_cost`` per row end), so that no block of short rows costs
    more than one of long rows.  Returns ``bounds`` (int64): each group's first entry and nnz
    after the last (``groups + 1`` values, rising by at least one until they reach nnz: a group
    is empty only after the last entry), then per block the chunk (block) holding the first
    entry of the row that crosses its start, and the chunk holding the last entry of the row
    that crosses its end (the block itself where none does).  For at least one row and one block
    (a pattern without entries: every segment empty)."""
    indptr = np.asarray(indptr, np.int64)
    nnz = int(indptr[-1])
    groups = blocks * block_groups
    lengths = np.diff(indptr)
    work = indptr + row_end_cost * np.concatenate(([0], np.cumsum(lengths > 0, dtype=np.int64)))  # before each row
    targets = (np.arange(groups, dtype=np.float64) * (float(work[-1]) / groups)).astype(work.dtype)
    rows = np.minimum(np.searchsorted(work, targets, side="right") - 1, lengths.size - 1)
    starts = indptr[rows] + np.minimum(targets - work[rows], lengths[rows])
    step = np.arange(groups, dtype=np.int64)
    starts = np.minimum(np.maximum.accumulate(starts - step) + step, nnz)  # never an empty group before the end
    starts = np.append(starts, nnz)
    block_starts = starts[::block_groups]  # blocks + 1 values
    chunk_of = lambda p: np.searchsorted(block_starts[:-1], p, side="right") - 1  # noqa: E731
    last_row = lengths.size - 1  # (the row of a position: searched among the rows' starts, capped)
    head_rows = np.minimum(np.searchsorted(indptr, block_starts[:-1], side="right") - 1, last_row)
    tail_rows = np.minimum(np.searchsorted(indptr, np.maximum(block_starts[1:] - 1, 0), side="right") - 1, last_row)
    heads = np.where(indptr[head_rows] < block_starts[:-1], chunk_of(indptr[head_rows]), np.arange(blocks))
    tails = np.where(indptr[tail_rows + 1] > block_starts[1:], chunk_of(indptr[tail_rows + 1] - 1), np.arange(blocks))
    return np.concatenate((starts, heads, tails)).astype(np.int64)


def segment_rows_at(indptr, starts, index_dtype):
    """The row holding each of the entries ``starts`` (segments of any length, as
    :func:`balanced_segments` makes; a start at nnz gets the last row + 1, never read)."""
    return (np.searchsorted(np.asarray(indptr), starts, side="right") - 1).astype(index_dtype)


def longest_empty_run(indptr):
    """The most consecutive empty rows (0 for a matrix with none)."""
    empty = np.diff(np.asarray(indptr, np.int64)) == 0
    if not empty.any():
        return 0
    edges = np.flatnonzero(np.diff(np.concatenate(([0], empty.view(np.int8), [0]))))
    return int((edges[1::2] - edges[::2]).max())


def sampled_entries(nnz, runs=64, run=1024):
    """(start, length) of up to ``runs`` evenly spaced runs of ``run`` consecutive entries of
    ``nnz``: a sample of a pattern that costs a few small copies of a device ``indices``."""
    if nnz <= runs * run:
        return [(0, nnz)] if nnz else []
    return [(int(start), run) for start in np.linspace(0, nnz - run, runs).astype(np.int64)]


def median_column_distance(indptr, positions, columns):
    """Median of ``|i - j|`` over the entries at ``positions`` (CSR order; their ``columns``):
    how far a graph's entries lie from the diagonal, small where its node ids follow locality
    (community, crawl or spatial order), about a third of the nodes where they are random."""
    if len(positions) == 0:
        return 0.0
    rows = np.searchsorted(np.asarray(indptr, np.int64), np.asarray(positions, np.int64), side="right") - 1
    return float(np.median(np.abs(np.asarray(columns, np.int64) - rows)))


def longest_row(indptr):
    """Entries in the longest row (0 for a matrix with no rows)."""
    indptr = np.asarray(indptr, np.int64)
    return int(np.diff(indptr).max()) if indptr.size > 1 else 0


def longest_first(indptr, balance=True):
    """Row order: longest rows first (G-Sparse's row load balancing) when ``balance``, else
    0..M-1; int64."""
    indptr = np.asarray(indptr, np.int64)
    if not balance:
        return np.arange(indptr.size - 1, dtype=np.int64)
    return np.argsort(-np.diff(indptr), kind="stable").astype(np.int64)


def row_runs(indptr, run, index_dtype):
    """Each row cut into runs of at most ``run`` entries (an empty row: one empty run), for a
    kernel with one warp per run whose time is its chain of entries.  Returns (run_row,
    run_start, run_slot, split_rows, slot_ptr) in ``index_dtype``: each run's row and first
    entry; its slot among the partial results of rows cut into several runs (-1 in a row of
    one run); those rows, and the CSR-style pointer of their consecutive slots."""
    indptr = np.asarray(indptr, np.int64)
    lengths = np.diff(indptr)
    runs = np.maximum(1, _cdiv(lengths, run))
    run_row = np.repeat(np.arange(lengths.size), runs)
    first = np.concatenate(([0], np.cumsum(runs)))[:-1]
    run_start = indptr[:-1][run_row] + run * (np.arange(run_row.size) - first[run_row])
    split = runs > 1
    in_split = split[run_row]
    run_slot = np.full(run_row.size, -1, np.int64)
    run_slot[in_split] = np.arange(int(np.count_nonzero(in_split)))
    slot_ptr = np.concatenate(([0], np.cumsum(runs[split])))
    return tuple(a.astype(index_dtype) for a in (run_row, run_start, run_slot, np.flatnonzero(split), slot_ptr))


#: Seed of :func:`shuffled_rows`' permutation: the same pattern gets the same order in every
#: process (plans, timings and results do not vary between runs).
SHUFFLE_SEED = 0x5EED


def shuffled_rows(indptr):
    """A seeded random order of the rows as a kernel that splits work by nonzeros sees it, the
    entries left where they are: (``indptr`` of the rows in that order, ``remap``), where
    ``remap[:nnz]`` gives each position of the reordered entries its entry in the matrix and
    ``remap[nnz + r]`` the matrix row of reordered row r.  int64 both."""
    indptr = np.asarray(indptr, np.int64)
    m, nnz = indptr.size - 1, int(indptr[-1])
    order = np.random.default_rng(SHUFFLE_SEED).permutation(m)
    lengths = np.diff(indptr)[order]
    shuffled = np.zeros(m + 1, np.int64)
    np.cumsum(lengths, out=shuffled[1:])
    entries = np.repeat(indptr[:-1][order] - shuffled[:-1], lengths) + np.arange(nnz, dtype=np.int64)
    return shuffled, np.concatenate((entries, order))
