"""Training inputs for the selector: synthetic row windows as paper 001 (section IV-C)
describes, and real windows grouped by their features."""
import numpy as np
import scipy.sparse as sp
from numba import njit

from ..preprocess.row_windows import WINDOW, row_windows
from .hc import window_features


@njit(cache=True)
def _synthetic(n_windows, n_cols, nnz, n_columns_total, seed):
    np.random.seed(seed)
    rows = np.empty(n_windows * nnz, np.int64)
    cols = np.empty(n_windows * nnz, np.int64)
    taken = np.zeros(WINDOW * n_cols, np.bool_)
    chosen = np.zeros(n_columns_total, np.bool_)
    picked = np.empty(n_cols, np.int64)
    for w in range(n_windows):
        for c in range(n_cols):  # n_cols distinct columns of the whole matrix
            while True:
                k = np.random.randint(0, n_columns_total)
                if not chosen[k]:
                    chosen[k] = True
                    picked[c] = k
                    break
        taken[:] = False
        filled = 0
        for c in range(n_cols):  # every column gets one nonzero in a random row ...
            r = np.random.randint(0, WINDOW)
            taken[r * n_cols + c] = True
            filled += 1
        while filled < nnz:      # ... then the rest at random free places
            s = np.random.randint(0, WINDOW * n_cols)
            if not taken[s]:
                taken[s] = True
                filled += 1
        e = w * nnz
        for r in range(WINDOW):
            for c in range(n_cols):
                if taken[r * n_cols + c]:
                    rows[e] = w * WINDOW + r
                    cols[e] = picked[c]
                    e += 1
        for c in range(n_cols):
            chosen[picked[c]] = False
    return rows, cols


def synthetic_windows(n_windows, n_cols, sparsity, *, n_columns_total=1 << 16, seed=0):
    """A (16 n_windows) x n_columns_total CSR matrix of windows that each have ``n_cols``
    non-zero columns (distinct random columns, each with at least one nonzero) and
    ``round((1 - sparsity) 16 n_cols)`` nonzeros, at least one per column."""
    if not 1 <= n_cols <= n_columns_total:
        raise ValueError("n_cols must be between 1 and n_columns_total")
    nnz = int(round((1.0 - sparsity) * WINDOW * n_cols))
    nnz = min(max(nnz, n_cols), WINDOW * n_cols)
    rows, cols = _synthetic(n_windows, n_cols, nnz, n_columns_total, seed)
    A = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)),
                      shape=(n_windows * WINDOW, n_columns_total))
    A.sum_duplicates()
    return A


def window_groups(A, *, col_bins=(1, 2, 4, 8, 16, 32, 64, 128, 1 << 62), min_windows=256):
    """Real windows of ``A`` grouped by (density bin, n_cols bin), density = 1 - sparsity in
    halving bins (1-1/2, 1/2-1/4, ... below 1/128): a list of (mean features, window count,
    sub-matrix of just those windows stacked)."""
    windows = row_windows(A)
    features = window_features(windows)
    keep = windows.nnz > 0
    density = np.maximum(1.0 - features[:, 0], 1e-12)
    s_bin = np.minimum(np.floor(-np.log2(density)).astype(np.int64), 7)
    c_bin = np.searchsorted(np.asarray(col_bins), windows.n_cols, side="right")
    groups = []
    for key in sorted(set(zip(s_bin[keep].tolist(), c_bin[keep].tolist()))):
        members = np.flatnonzero(keep & (s_bin == key[0]) & (c_bin == key[1]))
        if len(members) < min_windows:
            continue
        rows = (members[:, None] * WINDOW + np.arange(WINDOW)).ravel()
        rows = rows[rows < A.shape[0]]
        groups.append((features[members].mean(axis=0), len(members), sp.csr_matrix(A[rows])))
    return groups
