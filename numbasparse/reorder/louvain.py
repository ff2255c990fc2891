"""Multi-level Louvain community detection (Blondel et al. 2008) in ``numba.njit``.

Used by HP-SpMM's graph-clustering reordering (paper 000, section III-C), which runs it on the
GPU; here it runs on the CPU as a one-off preprocessing step.
"""
import numpy as np
import scipy.sparse as sp
from numba import njit


def symmetrised(A):
    """``(A + A^T) / 2`` as float64 canonical CSR (A itself if it is already symmetric)."""
    if not sp.issparse(A) or A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("A must be a square scipy.sparse matrix")
    A = sp.csr_matrix(A, dtype=np.float64, copy=True)
    A.sum_duplicates()
    if A.nnz and (A.data < 0).any():
        raise ValueError("A must have non-negative weights for Louvain")
    if (A != A.T).nnz:
        A = sp.csr_matrix((A + A.T) / 2.0)
    return A


@njit(cache=True)
def _local_moving(indptr, indices, weights, degree, order, resolution, two_m, threshold):
    """Phase 1: move single nodes to the neighbouring community of best modularity gain
    until a whole pass gains less than ``threshold``.  Returns labels 0..k-1 and k."""
    n = degree.shape[0]
    labels = np.arange(n)
    total = degree.copy()  # sum of degrees per community
    neighbour_weight = np.zeros(n)
    touched = np.empty(n, np.int64)
    while True:
        gained = 0.0
        for idx in range(n):
            i = order[idx]
            home = labels[i]
            k_i = degree[i]
            n_touched = 0
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                if j == i:
                    continue
                c = labels[j]
                if neighbour_weight[c] == 0.0:
                    touched[n_touched] = c
                    n_touched += 1
                neighbour_weight[c] += weights[p]
            total[home] -= k_i
            stay = neighbour_weight[home] - resolution * total[home] * k_i / two_m
            best, best_gain = home, stay
            for t in range(n_touched):
                c = touched[t]
                gain = neighbour_weight[c] - resolution * total[c] * k_i / two_m
                if gain > best_gain:
                    best, best_gain = c, gain
            total[best] += k_i
            labels[i] = best
            gained += best_gain - stay
            for t in range(n_touched):
                neighbour_weight[touched[t]] = 0.0
        if gained / two_m < threshold:
            break
    # renumber 0..k-1 in order of first appearance
    new_id = np.full(n, -1, np.int64)
    k = 0
    for i in range(n):
        if new_id[labels[i]] < 0:
            new_id[labels[i]] = k
            k += 1
        labels[i] = new_id[labels[i]]
    return labels, k


@njit(cache=True)
def _aggregate(indptr, indices, weights, labels, k):
    """Phase 2: the graph of communities (CSR), internal weight on the diagonal."""
    n = labels.shape[0]
    # nodes grouped by community (counting sort)
    start = np.zeros(k + 1, np.int64)
    for i in range(n):
        start[labels[i] + 1] += 1
    for c in range(k):
        start[c + 1] += start[c]
    members = np.empty(n, np.int64)
    fill = start[:-1].copy()
    for i in range(n):
        members[fill[labels[i]]] = i
        fill[labels[i]] += 1
    acc = np.zeros(k)
    touched = np.empty(k, np.int64)
    out_ptr = np.zeros(k + 1, np.int64)
    out_idx = np.empty(indices.shape[0], np.int64)
    out_w = np.empty(indices.shape[0])
    nnz = 0
    for c in range(k):
        n_touched = 0
        for m in range(start[c], start[c + 1]):
            i = members[m]
            for p in range(indptr[i], indptr[i + 1]):
                d = labels[indices[p]]
                if acc[d] == 0.0:
                    touched[n_touched] = d
                    n_touched += 1
                acc[d] += weights[p]
        touched[:n_touched].sort()
        for t in range(n_touched):
            out_idx[nnz] = touched[t]
            out_w[nnz] = acc[touched[t]]
            acc[touched[t]] = 0.0
            nnz += 1
        out_ptr[c + 1] = nnz
    return out_ptr, out_idx[:nnz], out_w[:nnz]


def louvain(A, *, resolution=1.0, seed=0, threshold=1e-7):
    """Community label (0..k-1) of every node of the symmetrised weighted graph ``A``.

    Multi-level: local moving (nodes visited in a random order drawn from ``seed``) then
    aggregation, repeated until a level merges nothing.  Deterministic for a seed.
    """
    S = symmetrised(A)
    n = S.shape[0]
    labels = np.arange(n)
    two_m = float(S.data.sum())
    if n == 0 or two_m == 0.0:
        return labels
    rng = np.random.default_rng(seed)
    indptr, indices, weights = S.indptr.astype(np.int64), S.indices.astype(np.int64), S.data
    while True:
        degree = np.bincount(np.repeat(np.arange(len(indptr) - 1), np.diff(indptr)), weights,
                             minlength=len(indptr) - 1)
        order = rng.permutation(len(degree))
        level, k = _local_moving(indptr, indices, weights, degree, order, float(resolution), two_m,
                                 float(threshold))
        if k == len(degree):
            break
        labels = level[labels]
        indptr, indices, weights = _aggregate(indptr, indices, weights, level, k)
    return labels


def modularity(A, labels, *, resolution=1.0):
    """Newman modularity of the partition ``labels`` of the symmetrised weighted graph ``A``."""
    S = symmetrised(A)
    labels = np.asarray(labels)
    if labels.shape != (S.shape[0],):
        raise ValueError(f"labels must have one entry per node ({S.shape[0]}), got {labels.shape}")
    two_m = S.data.sum()
    if two_m == 0:
        return 0.0
    coo = S.tocoo()
    inside = coo.data[labels[coo.row] == labels[coo.col]].sum()
    total = np.bincount(labels, weights=np.asarray(S.sum(axis=1)).ravel())
    return float(inside / two_m - resolution * np.sum(total ** 2) / two_m ** 2)
