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
    tile_ptr: np.ndarray     # (n_windows + 1,) cumulative number of 16x8 tiles per window
    nnz: np.ndarray          # (n_windows,) nonzeros per window
    n_cols: np.ndarray       # (n_windows,) non-zero columns per window

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


def row_windows(A):
    """RowWindows of a canonical scipy CSR matrix ``A``."""
    col_ptr, cols, entry_col, nnz = _condense(A.indptr.astype(np.int64), A.indices.astype(np.int64),
                                              A.shape[0], A.shape[1])
    n_cols = np.diff(col_ptr)
    tile_ptr = np.concatenate([[0], np.cumsum(-(-n_cols // TILE_COLS))]).astype(np.int64)
    return RowWindows(len(nnz), col_ptr, cols, entry_col, tile_ptr, nnz, n_cols)
