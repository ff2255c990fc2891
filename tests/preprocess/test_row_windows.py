"""HC-SpMM's row-window preprocessing (numba.njit)."""
import numpy as np
import scipy.sparse as sp

from numbasparse.preprocess.row_windows import TILE_COLS, WINDOW, row_windows


def test_row_windows_condense_columns():
    A = sp.random(40, 30, density=0.2, format="csr", random_state=0)
    rw = row_windows(A)
    for w in range(rw.n_windows):
        lo, hi = A.indptr[w * WINDOW], A.indptr[min(w * WINDOW + WINDOW, 40)]
        cols = rw.cols[rw.col_ptr[w]:rw.col_ptr[w + 1]]
        assert np.all(np.diff(cols) > 0)
        np.testing.assert_array_equal(cols[rw.entry_col[lo:hi]], A.indices[lo:hi])
    np.testing.assert_array_equal(rw.n_tiles, -(-rw.n_cols // TILE_COLS))
    assert np.all((rw.density >= 0) & (rw.density <= 1))


def test_tiles_rebuild_each_window():
    """Scattering every tile's entries into dense 16x8 tiles gives back the window."""
    A = sp.random(50, 70, density=0.1, format="csr", random_state=1)
    rw = row_windows(A)
    assert sorted(rw.tile_entry) == list(range(A.nnz))
    dense = A.toarray()
    for w in range(rw.n_windows):
        cols = rw.cols[rw.col_ptr[w]:rw.col_ptr[w + 1]]
        rebuilt = np.zeros((WINDOW, rw.n_tiles[w] * TILE_COLS))
        for t in range(rw.tile_ptr[w], rw.tile_ptr[w + 1]):
            entries = slice(rw.entry_ptr[t], rw.entry_ptr[t + 1])
            assert rw.entry_ptr[t + 1] - rw.entry_ptr[t] <= WINDOW * TILE_COLS
            r, c = np.divmod(rw.tile_slot[entries], TILE_COLS)
            rebuilt[r, (t - rw.tile_ptr[w]) * TILE_COLS + c] = A.data[rw.tile_entry[entries]]
        rows = dense[w * WINDOW:(w + 1) * WINDOW]
        np.testing.assert_array_equal(rebuilt[:len(rows), :len(cols)], rows[:, cols])


def test_empty_matrix_has_no_tiles():
    rw = row_windows(sp.csr_matrix((33, 5), dtype=np.float32))
    assert rw.n_windows == 3 and rw.tile_ptr[-1] == 0 and len(rw.tile_entry) == 0
