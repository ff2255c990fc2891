"""HC-SpMM's row windows (paper 001, section IV; condensing as in TC-GNN), built with numba.njit.

Rows are cut into windows of ``WINDOW`` = 16; the distinct columns of a window are condensed
(sorted) and cut into dense tiles of ``TILE_COLS`` = 8 condensed columns, the unit of the
tensor-core path.  Everything both kernel paths need is stored once here.
"""
from dataclasses import dataclass

import numpy as np
from numba import njit

WINDOW = 16
TILE_COLS = 8


@dataclass
class RowWindows:
    n_windows: int
    col_ptr: np.ndarray      # (n_windows + 1,) window w's condensed columns: cols[col_ptr[w]:col_ptr[w+1]]
    cols: np.ndarray         # original column of each condensed column
    entry_col: np.ndarray    # (nnz,) condensed column (within its window) of each CSR entry
    tile_ptr: np.ndarray     # (n_windows + 1,) window w's tiles are tile_ptr[w]:tile_ptr[w+1]
    entry_ptr: np.ndarray    # (n_tiles + 1,) tile t's entries are tile_entry[entry_ptr[t]:entry_ptr[t+1]]
    tile_entry: np.ndarray   # (nnz,) CSR position of each entry, grouped by tile
    tile_slot: np.ndarray    # (nnz,) its place in the dense 16x8 tile: row_in_window * 8 + column_in_tile
    nnz: np.ndarray          # (n_windows,) nonzeros per window
    n_cols: np.ndarray       # (n_windows,) non-zero columns per window

    #: the arrays the HC-SpMM kernels read, in the order they take them
    DEVICE_FIELDS = ("col_ptr", "cols", "tile_ptr", "entry_ptr", "tile_entry", "tile_slot")

    @property
    def n_tiles(self):
        """16x8 tiles per window."""
        return np.diff(self.tile_ptr)

    @property
    def density(self):
        """Fraction of the dense tiles' 16 x 8 slots that hold a nonzero, per window."""
        tiles = np.diff(self.tile_ptr)
        return np.divide(self.nnz, tiles * WINDOW * TILE_COLS, out=np.zeros(self.n_windows), where=tiles > 0)


@njit(cache=True)
def _condense(indptr, indices, n_rows, n_cols_total):
    n_windows = (n_rows + WINDOW - 1) // WINDOW
    col_ptr = np.zeros(n_windows + 1, np.int64)
    cols = np.empty(indices.shape[0], np.int64)
    entry_col = np.empty(indices.shape[0], np.int64)
    nnz = np.zeros(n_windows, np.int64)
    slot = np.full(n_cols_total, -1, np.int64)
    total = 0
    for w in range(n_windows):
        lo, hi = indptr[w * WINDOW], indptr[min((w + 1) * WINDOW, n_rows)]
        nnz[w] = hi - lo
        start = total
        for p in range(lo, hi):
            c = indices[p]
            if slot[c] < 0:
                slot[c] = 0
                cols[total] = c
                total += 1
        cols[start:total].sort()
        for k in range(start, total):
            slot[cols[k]] = k - start
        for p in range(lo, hi):
            entry_col[p] = slot[indices[p]]
        for k in range(start, total):
            slot[cols[k]] = -1
        col_ptr[w + 1] = total
    return col_ptr, cols[:total].copy(), entry_col, nnz


@njit(cache=True)
def _group_by_tile(indptr, entry_col, tile_ptr, n_rows):
    """Counting sort of the entries by tile: (entry_ptr, tile_entry, tile_slot)."""
    n_windows = tile_ptr.shape[0] - 1
    nnz = entry_col.shape[0]
    entry_ptr = np.zeros(tile_ptr[-1] + 1, np.int64)
    tile_of = np.empty(nnz, np.int64)
    slot = np.empty(nnz, np.int64)
    for w in range(n_windows):
        for r in range(WINDOW):
            row = w * WINDOW + r
            if row >= n_rows:
                break
            for p in range(indptr[row], indptr[row + 1]):
                tile_of[p] = tile_ptr[w] + entry_col[p] // TILE_COLS
                slot[p] = r * TILE_COLS + entry_col[p] % TILE_COLS
                entry_ptr[tile_of[p] + 1] += 1
    for t in range(tile_ptr[-1]):
        entry_ptr[t + 1] += entry_ptr[t]
    fill = entry_ptr[:-1].copy()
    tile_entry = np.empty(nnz, np.int64)
    tile_slot = np.empty(nnz, np.int64)
    for p in range(nnz):
        q = fill[tile_of[p]]
        fill[tile_of[p]] += 1
        tile_entry[q] = p
        tile_slot[q] = slot[p]
    return entry_ptr, tile_entry, tile_slot


def row_windows(A):
    """RowWindows of a canonical scipy CSR matrix ``A``."""
    indptr = A.indptr.astype(np.int64)
    col_ptr, cols, entry_col, nnz = _condense(indptr, A.indices.astype(np.int64), A.shape[0], A.shape[1])
    n_cols = np.diff(col_ptr)
    tile_ptr = np.concatenate([[0], np.cumsum(-(-n_cols // TILE_COLS))]).astype(np.int64)
    entry_ptr, tile_entry, tile_slot = _group_by_tile(indptr, entry_col, tile_ptr, A.shape[0])
    return RowWindows(len(nnz), col_ptr, cols, entry_col, tile_ptr, entry_ptr, tile_entry, tile_slot, nnz, n_cols)


@njit(cache=True)
def _fragment_sources(tile_ptr, entry_ptr, tile_entry, tile_slot, windows, n_tiles, wide):
    """Per MMA tile of ``windows`` (in order), the CSR position of each value of the lanes' A
    fragments, -1 where the slot is empty: rows ``32 tile + lane``.  m16n8k8 (TF32, 8 columns
    per tile): lane ``4 g + t`` holds rows g, g + 8 of columns t, t + 4, shape (n_tiles * 32,
    4).  ``wide``, m16n8k16 (16-bit, two 8-column tiles per MMA tile): lane ``4 g + t`` holds
    register i's pair of columns ``2 t + 8 (i // 2)`` and the next of row ``g + 8 (i % 2)``,
    at positions ``2 i`` (low half) and ``2 i + 1``, shape (n_tiles * 32, 8)."""
    per_lane = 8 if wide else 4
    out = np.full((n_tiles * 32, per_lane), -1, np.int64)
    base = 0
    for w in windows:
        for tile in range(tile_ptr[w], tile_ptr[w + 1]):
            local = tile - tile_ptr[w]
            for e in range(entry_ptr[tile], entry_ptr[tile + 1]):
                r, c = tile_slot[e] // TILE_COLS, tile_slot[e] % TILE_COLS
                if wide:
                    cc = (local % 2) * TILE_COLS + c  # column within the 16 of MMA tile local // 2
                    lane = (r % 8) * 4 + (cc % 8) // 2
                    out[(base + local // 2) * 32 + lane, 2 * (r // 8 + 2 * (cc // 8)) + cc % 2] = tile_entry[e]
                else:
                    out[(base + local) * 32 + (r % 8) * 4 + c % 4, r // 8 + 2 * (c // 4)] = tile_entry[e]
        tiles = tile_ptr[w + 1] - tile_ptr[w]
        base += (tiles + 1) // 2 if wide else tiles
    return out


def fragment_sources(windows, use_tiles, index_dtype, wide=False):
    """(frag_base, frag_src) for the tensor-core tile path: ``frag_base[w]`` the first MMA tile
    of window w in ``frag_src`` (-1 for windows on the CUDA-core path) and ``frag_src``
    (:func:`_fragment_sources`; ``wide``: 16-column tiles for m16n8k16) in ``index_dtype``.
    Positions, not values: the fragments stay right when A's values change."""
    chosen = np.flatnonzero(use_tiles)
    tiles = windows.n_tiles[chosen]
    if wide:
        tiles = -(-tiles // 2)
    frag_base = np.full(windows.n_windows, -1, np.int64)
    frag_base[chosen] = np.concatenate([[0], np.cumsum(tiles)[:-1]]) if len(chosen) else []
    src = _fragment_sources(windows.tile_ptr, windows.entry_ptr, windows.tile_entry, windows.tile_slot,
                            chosen.astype(np.int64), int(tiles.sum()), wide)
    return frag_base, src.astype(index_dtype)
