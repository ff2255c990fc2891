"""The column-slab SpMM's tiling of a pattern (:mod:`numbasparse.cuda.slab`): slabs of columns
times windows of rows holding equal entries, each tile's segments dealt to its warps."""
import heapq

import numpy as np

#: Candidate tile sizes between the smallest and the largest: a geometric grid of this ratio.
TILE_SIZE_STEP = 2 ** (1 / 8)
#: A smaller tile is taken only where its tiles finish at least this share earlier: smaller tiles
#: load more B rows per entry, which the finishing time (in entries) does not count (measured:
#: BENCHMARKS.md, "Column-slab SpMM").
MIN_FINISH_GAIN = 0.05


def balanced_tile_nnz(slab_nnz, smallest, largest, column_tiles, slots):
    """Entries per tile, between ``smallest`` and ``largest``, whose tiles finish first: each slab
    (``slab_nnz`` entries each) cut into tiles of that many entries and one partial tile, the
    tiles run largest first (as :class:`SlabTiles` orders them) for each of ``column_tiles``
    column tiles in turn, each taking the first of ``slots`` SMs to free up (one block per SM),
    for a time proportional to its entries; ``largest`` unless a size finishes MIN_FINISH_GAIN
    earlier.  Of sizes that finish together the largest (fewer tiles: more re-use of each B row
    a tile loads)."""
    slab_nnz = np.asarray(slab_nnz, np.int64)
    slab_nnz = slab_nnz[slab_nnz > 0]
    smallest = max(1, smallest)
    if slab_nnz.size == 0 or largest <= smallest:
        return max(1, int(largest))
    bound = _finish(slab_nnz, int(largest), column_tiles, slots)
    best, best_time = int(largest), bound
    size = float(largest)
    while size / TILE_SIZE_STEP >= smallest:
        size /= TILE_SIZE_STEP
        time = _finish(slab_nnz, int(size), column_tiles, slots)
        if time < best_time:
            best, best_time = int(size), time
    return best if best_time <= (1 - MIN_FINISH_GAIN) * bound else int(largest)


def _finish(slab_nnz, per_tile, column_tiles, slots):
    """When the last of the tiles of :func:`balanced_tile_nnz` ends (list scheduling, in entries)."""
    full = int((slab_nnz // per_tile).sum())
    partial = np.sort(slab_nnz[slab_nnz % per_tile > 0] % per_tile)[::-1].tolist()
    order = ([per_tile] * full + partial) * column_tiles
    if len(order) <= slots:
        return order[0]
    free = [0] * slots
    for entries in order:
        heapq.heapreplace(free, free[0] + entries)
    return max(free)


class SlabTiles:
    """The tiling of one sparsity pattern (host arrays).  Columns are cut into slabs of
    ``slab_width``; each slab's rows into windows of consecutive rows holding at most
    ``tile_nnz`` of the slab's entries (so that tiles are equal work whatever the rows' lengths
    and the columns' popularity); a tile is a (slab, window).  Its work is a list of segments
    ``seg_row[s]``, ``seg_start[s]:seg_end[s]`` (a row's entries in the slab, cut into pieces of at
    most ``max_segment``).  Block b computes tile ``tile_order[b]``
    (largest tiles first) with ``warps`` warps; warp w of block b computes segments
    ``warp_ptr[b * warps + w]:warp_ptr[b * warps + w + 1]`` (a tile's segments dealt to its
    warps longest first, in snake order, so that warps get equal entries), and ``tile_ptr[b]``
    = ``warp_ptr[b * warps]``."""

    def __init__(self, indptr, indices, shape, slab_width, tile_nnz, max_segment, warps):
        n_rows, n_cols = shape
        self.slab_width = slab_width
        self.tile_nnz = tile_nnz
        self.warps = warps
        self.n_slabs = max(1, -(-n_cols // slab_width))
        rows, slab, starts, ends = _segments(indptr, indices, n_rows, slab_width, max_segment)
        lengths = ends - starts
        seg_slab = slab[starts]
        # windows: each slab's segments in row order, cut every tile_nnz entries
        by_slab = np.lexsort((starts, seg_slab))
        slab_nnz = np.bincount(seg_slab, weights=lengths, minlength=self.n_slabs).astype(np.int64)
        before = np.cumsum(lengths[by_slab]) - lengths[by_slab]  # entries before the segment...
        before -= (np.cumsum(slab_nnz) - slab_nnz)[seg_slab[by_slab]]  # ...in its slab
        windows = np.maximum(1, -(-slab_nnz // tile_nnz))
        tile = np.empty_like(starts)
        tile[by_slab] = (np.cumsum(windows) - windows)[seg_slab[by_slab]] + before // tile_nnz
        self.n_tiles = int(windows.sum())
        # Largest tiles first: blocks start in index order as SMs free up, so this is
        # longest-processing-time-first scheduling, which keeps the last wave's tail short.
        tile_nnz_each = np.bincount(tile, weights=lengths, minlength=self.n_tiles)
        self.tile_order = np.argsort(-tile_nnz_each, kind="stable")  # block b computes tile tile_order[b]
        position = np.empty(self.n_tiles, np.int64)
        position[self.tile_order] = np.arange(self.n_tiles)
        block = position[tile]
        # In each block, segments longest first dealt to warps 0..w-1, w-1..0, 0..w-1, ...
        by_length = np.lexsort((-lengths, block))
        first_of_block = np.searchsorted(block[by_length], block[by_length], side="left")
        rank = np.arange(by_length.size) - first_of_block
        turn, seat = rank // warps, rank % warps
        warp = np.where(turn % 2 == 0, seat, warps - 1 - seat)
        slot = np.empty_like(warp)
        slot[by_length] = block[by_length] * warps + warp
        order = np.argsort(slot, kind="stable")
        self.seg_row = rows[starts][order]
        self.seg_start = starts[order]
        self.seg_end = ends[order]
        self.seg_tile = tile[order]
        self.warp_ptr = np.searchsorted(slot[order], np.arange(self.n_tiles * warps + 1)).astype(np.int64)
        self.tile_ptr = self.warp_ptr[::warps]

    @property
    def entries_per_segment(self):
        """Mean entries per segment: how many gathers one atomic flush of a partial row serves."""
        return float(self.seg_end.sum() - self.seg_start.sum()) / max(1, self.seg_row.size)

    def reuse(self, indptr, indices):
        """Entries per distinct (tile, column): how many times a tile uses each B row it loads."""
        indices = np.asarray(indices, np.int64)
        if indices.size == 0:
            return 0.0
        lengths = self.seg_end - self.seg_start
        entry = np.repeat(self.seg_start - (np.cumsum(lengths) - lengths), lengths) + np.arange(lengths.sum())
        tile = np.repeat(self.seg_tile, lengths)
        return indices.size / np.unique(tile * (int(indices.max()) + 1) + indices[entry]).size


def _segments(indptr, indices, n_rows, slab_width, max_segment):
    """(row of each entry, slab of each entry, segment starts, segment ends): a segment is one row's
    entries inside one slab (column indices sorted within rows), cut into pieces of at most
    ``max_segment``."""
    indptr = np.asarray(indptr, np.int64)
    nnz = int(indptr[-1]) if indptr.size else 0
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(indptr))
    slab = np.asarray(indices[:nnz], np.int64) // slab_width
    key = rows * (int(slab.max()) + 1 if nnz else 1) + slab
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if nnz else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], nnz].astype(np.int64)
    pieces = -(-(ends - starts) // max_segment)  # long segments cut into max_segment pieces
    first = np.repeat(starts, pieces)
    offset = np.arange(first.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    starts = first + offset * max_segment
    return rows, slab, starts, np.minimum(starts + max_segment, np.repeat(ends, pieces))


def entries_per_segment(indptr, indices, slab_width, max_segment=None):
    """Mean entries per segment of a tiling by slabs of ``slab_width`` columns, segments cut into
    pieces of at most ``max_segment`` (what :attr:`SlabTiles.entries_per_segment` gives, without
    building the tiles; None: uncut, what ``auto``'s rule counts): one O(nnz) pass over the
    pattern.  Counted, not estimated: real graphs number their nodes with locality (crawl
    order, communities), so a row's columns bunch into far fewer slabs than spread uniformly
    would."""
    indptr = np.asarray(indptr, np.int64)
    nnz = int(indptr[-1]) if indptr.size else 0
    if nnz == 0:
        return 0.0
    starts = _segments(indptr, indices, indptr.size - 1, slab_width, max_segment or nnz)[2]
    return nnz / float(starts.size)
