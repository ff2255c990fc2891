"""The column-slab SpMM's tiling of a pattern (:mod:`numbasparse.cuda.slab`): slabs of columns
times windows of rows holding equal entries, each tile's segments dealt to its warps."""
import numpy as np


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
        indptr = np.asarray(indptr, np.int64)
        nnz = int(indptr[-1])
        rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(indptr))
        slab = np.asarray(indices, np.int64) // slab_width
        key = rows * self.n_slabs + slab
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if nnz else np.zeros(0, np.int64)
        ends = np.r_[starts[1:], nnz].astype(np.int64)
        pieces = -(-(ends - starts) // max_segment)  # long segments cut into max_segment pieces
        first = np.repeat(starts, pieces)
        offset = np.arange(first.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        starts = first + offset * max_segment
        ends = np.minimum(starts + max_segment, np.repeat(ends, pieces))
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


def slab_estimate(n_rows, n_cols_a, nnz, slab_width, tile_nnz):
    """(re-use, entries per segment) that a tiling should give, from the shape and the entry
    count alone, for rows of equal length and columns spread uniformly: a tile of ``tile_nnz``
    entries spans ``tile_nnz / (entries per row and slab)`` rows and uses each column of its slab
    ``rows * density`` times (at least once when it uses it), and a row of ``l`` entries meets
    ``S * (1 - (1 - 1/S)**l)`` of the ``S`` slabs.  O(1): the input of a dispatch rule, where
    building :class:`SlabTiles` (O(nnz) sorting) is not."""
    if nnz == 0 or n_rows == 0:
        return 0.0, 0.0
    n_slabs = max(1, -(-n_cols_a // slab_width))
    density = nnz / (n_rows * max(1, n_cols_a))
    rows = min(n_rows, tile_nnz * n_rows * n_slabs / nnz)
    column_uses = rows * density  # per column of a tile's slab
    reuse = max(1.0, column_uses / -np.expm1(-column_uses))  # uses per column actually used
    length = nnz / n_rows
    slabs_met = n_slabs * -np.expm1(length * np.log1p(-1.0 / n_slabs)) if n_slabs > 1 else 1.0
    return float(reuse), float(length / max(1.0, slabs_met))
