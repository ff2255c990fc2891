"""Permutations of a graph's nodes and the statistics that judge them."""
import numpy as np
import scipy.sparse as sp
from numba import njit

from ._checks import graph_copy, positive_int
from .louvain import louvain


def check_permutation(perm, n):
    """``perm`` as a new int64 array, if it is a permutation of 0..n-1 (ValueError otherwise)."""
    perm = np.asarray(perm)
    if perm.shape != (n,) or perm.dtype.kind not in "iu" or not np.array_equal(np.sort(perm), np.arange(n)):
        raise ValueError(f"perm must be a permutation of 0..{n - 1}")
    return perm.astype(np.int64)  # a copy, even of an int64 perm


def permute(A, perm):
    """``P A P^T``: row and column ``new`` of the result are row and column ``perm[new]`` of A.

    The result is a new canonical CSR matrix (sorted column indices in every row, duplicates
    of ``A`` summed) of ``A``'s dtype.  ``A``: a square scipy.sparse matrix without NaN/inf
    weights (ValueError); negative weights are fine.  Neither ``A`` nor ``perm`` is modified."""
    return permuted(graph_copy(A, non_negative=False, dtype=None), perm)[0]


def permuted(A, perm):
    """(``P A P^T``, entry_order) of a canonical square scipy CSR ``A`` and a permutation
    ``perm`` of its nodes (checked by :func:`check_permutation`: the njit pass would write out
    of bounds otherwise): entry p of the result is entry ``entry_order[p]`` of A (values in A's
    entry order map to the result's with ``values[entry_order]``).  One pass over the entries'
    indices, faster than scipy's row and column indexing, which matters because the
    reordering's time counts against what it saves per call."""
    indptr, indices, entry_order = _permuted(A.indptr, A.indices, check_permutation(perm, A.shape[0]))
    indptr, indices = indptr.astype(A.indptr.dtype), indices.astype(A.indices.dtype)
    result = sp.csr_matrix((A.data[entry_order], indices, indptr), shape=A.shape)
    result.indices, result.indptr = indices, indptr  # (scipy narrows int64 indices that fit in int32)
    return result, entry_order


def compile_permuted(A):
    """Compile (or load) :func:`permuted`'s pass for ``A``'s index dtypes, so that the time a
    reordering is charged is the permutation's, not the compiler's."""
    _permuted(np.zeros(2, A.indptr.dtype), np.zeros(0, A.indices.dtype), np.zeros(1, np.int64))


@njit(cache=True)
def _permuted(indptr, indices, perm):
    # Two stable counting sorts of the renumbered entries (by column, then by row): rows come
    # out sorted without comparing, in a few passes over the entries.
    n = perm.size
    nnz = indptr[n]  # (scipy's arrays may hold spare room past the last row's end)
    inverse = np.empty(n, np.int64)
    inverse[perm] = np.arange(n)
    new_indptr = np.zeros(n + 1, np.int64)
    starts = np.zeros(n + 1, np.int64)  # where each new column's entries go in the by-column order
    for row in range(n):
        new_indptr[inverse[row] + 1] = indptr[row + 1] - indptr[row]
    for p in range(nnz):
        starts[inverse[indices[p]] + 1] += 1
    for i in range(n):
        new_indptr[i + 1] += new_indptr[i]
        starts[i + 1] += starts[i]
    by_column = np.empty(nnz, np.int64)
    for row in range(n):
        for p in range(indptr[row], indptr[row + 1]):
            column = inverse[indices[p]]
            by_column[starts[column]] = p
            starts[column] += 1
    row_of = np.empty(nnz, np.int64)
    for row in range(n):
        row_of[indptr[row]:indptr[row + 1]] = inverse[row]
    fill = new_indptr[:n].copy()
    new_indices = np.empty(nnz, np.int64)
    entry_order = np.empty(nnz, np.int64)
    for p in by_column:  # by increasing new column: each row's entries land in column order
        row = row_of[p]
        new_indices[fill[row]] = inverse[indices[p]]
        entry_order[fill[row]] = p
        fill[row] += 1
    return new_indptr, new_indices, entry_order


def cluster_order(A, **louvain_args):
    """HP-SpMM's graph-clustering reordering (paper 000, section III-C): a permutation that
    makes every Louvain community contiguous.

    Communities keep the order of their lowest-numbered node, and nodes keep their original
    order inside a community (a stable sort by label), so whatever locality the input order
    already has survives, while rows that share neighbours become neighbours themselves: the
    warps that process them then read the same rows of B while those are still in L2.

    ``louvain_args`` (resolution, seed, threshold) and ``A`` are checked by :func:`louvain`.
    """
    labels = louvain(A, **louvain_args)
    first = np.full(labels.max() + 1 if labels.size else 0, labels.size, np.int64)
    np.minimum.at(first, labels, np.arange(labels.size))
    rank = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    return np.argsort(rank[labels], kind="stable")


def rcm_order(A):
    """Reverse Cuthill-McKee order of the symmetrised pattern (scipy's): a breadth-first order
    that keeps each node's neighbours close to it, so the rows of B that consecutive rows read
    are close together (a cheap locality order: no communities, O(nnz)).  ``A``: a square
    scipy.sparse matrix without NaN/inf weights (ValueError)."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    A = graph_copy(A, non_negative=False, dtype=None)
    if A.shape[0] == 0:
        return np.zeros(0, np.int64)
    pattern = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    return np.asarray(reverse_cuthill_mckee((pattern + pattern.T).tocsr(), symmetric_mode=True), dtype=np.int64)


def degree_order(A):
    """Nodes by decreasing degree (row length), ties in their original order: the hubs, whose
    rows of B most rows read, first and together."""
    A = graph_copy(A, non_negative=False, dtype=None)
    return np.argsort(-np.diff(A.indptr), kind="stable").astype(np.int64)


def row_window_stats(A, window=16):
    """Per window of ``window`` consecutive rows: (nnz, non-zero columns, computing intensity
    = nnz / non-zero columns, 0 for an empty window), as three arrays (HC-SpMM, paper 001).

    ``A``: a scipy.sparse matrix, any shape, without NaN/inf weights (ValueError); only its
    pattern counts (duplicates count once).  ``window``: a positive integer (bools and floats are
    refused); values above the row count behave as the row count."""
    window = positive_int(window, "window")
    A = graph_copy(A, square=False, non_negative=False, dtype=None)
    window = min(window, max(A.shape[0], 1))  # one window either way; keeps numpy in int64
    n_windows = -(-A.shape[0] // window)
    win_of_entry = np.repeat(np.arange(A.shape[0]) // window, np.diff(A.indptr))
    nnz = np.bincount(win_of_entry, minlength=n_windows)
    pairs = np.unique(win_of_entry.astype(np.int64) * A.shape[1] + A.indices)
    columns = np.bincount(pairs // max(A.shape[1], 1), minlength=n_windows)
    intensity = np.divide(nnz, columns, out=np.zeros(n_windows), where=columns > 0)
    return nnz, columns, intensity


def mean_intensity(A, window=16):
    """Mean computing intensity over the windows that hold any nonzero (empty windows carry no
    work, and an ordering that gathers empty rows together should not be penalised for it)."""
    _, columns, intensity = row_window_stats(A, window)
    busy = columns > 0
    return float(intensity[busy].mean()) if busy.any() else 0.0
