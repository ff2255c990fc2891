"""Multi-level Louvain community detection (Blondel et al. 2008) in ``numba.njit``.

Used by HP-SpMM's graph-clustering reordering (paper 000, section III-C), which runs it on the
GPU; here it runs on the CPU as a one-off preprocessing step.

Every loop is bounded: local moving stops after ``MAX_PASSES`` passes over a level's nodes, the
multi-level loop after ``MAX_LEVELS`` levels (and, before that, as soon as a level merges
nothing: each level that goes on has strictly fewer nodes than the one before).  Hostile input
(NaN/inf/negative weights, NaN parameters) is refused before any njit code runs.
"""
import warnings

import numpy as np
import scipy.sparse as sp
from numba import njit

from ._checks import finite_real, graph_copy, seed_value

MAX_PASSES = 1000
"""Most passes of local moving over the nodes of one level.  A pass that gains less than
``threshold`` (relative to the total weight), or moves no node, ends local moving earlier;
real graphs need a few tens.  Reaching the bound gives a RuntimeWarning and a valid (if not
fully converged) partition."""

MAX_LEVELS = 1000
"""Most levels (local moving + aggregation) of :func:`louvain`; a level that merges nothing
ends it earlier, as does reaching one node.  Reaching the bound gives a RuntimeWarning."""

_SCALE_LIMIT = 2.0 ** 500
"""Weights whose sum lies outside [1/_SCALE_LIMIT, _SCALE_LIMIT] (or overflows: 1e308 entries)
are multiplied by a power of two first (see :func:`symmetrised`)."""


def symmetrised(A, *, name="A"):
    """``(A + A^T) / 2`` as a new float64 canonical CSR matrix, with explicit entries kept.

    ``A`` must be a square scipy.sparse matrix with finite, non-negative weights (ValueError
    otherwise, naming the entry).  If the sum of the weights overflows float64 (entries of
    1e308) or lies outside [2**-500, 2**500], every weight is first multiplied by the power of
    two that brings the largest into [0.5, 1): exact in floating point (barring underflow of
    weights 2**1000 times smaller than the largest), and neither Louvain's partition nor the
    modularity depends on a common factor of all weights.  ``A`` itself is never modified."""
    S = graph_copy(A, name=name)
    if S.nnz:
        with np.errstate(over="ignore"):
            total = S.data.sum()
        if not (total == 0.0 or 1.0 / _SCALE_LIMIT <= total <= _SCALE_LIMIT):
            _, exponent = np.frexp(S.data.max())
            S.data = np.ldexp(S.data, -exponent)
    if (S != S.T).nnz:
        S = sp.csr_matrix((S + S.T) / 2.0)
    return S


@njit(cache=True)
def _local_moving(indptr, indices, weights, degree, order, resolution, two_m, threshold, max_passes):
    """Phase 1: move single nodes to the neighbouring community of best modularity gain until
    a whole pass gains less than ``threshold`` (relative to ``two_m``), moves nothing, gains
    NaN, or ``max_passes`` passes have run.  Returns labels 0..k-1, k, and whether it stopped
    before ``max_passes`` ran out.

    ``indptr``/``indices`` must be canonical (no duplicate entries in a row): then a row
    touches at most n communities, the size of ``touched``."""
    n = degree.shape[0]
    labels = np.arange(n)
    total = degree.copy()  # sum of degrees per community
    neighbour_weight = np.zeros(n)
    in_touched = np.zeros(n, np.bool_)  # not neighbour_weight == 0: zero weights stay out
    touched = np.empty(n, np.int64)
    converged = False
    for _ in range(max_passes):
        gained = 0.0
        moved = 0
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
                if not in_touched[c]:
                    in_touched[c] = True
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
            if best != home:
                moved += 1
            gained += best_gain - stay
            for t in range(n_touched):
                neighbour_weight[touched[t]] = 0.0
                in_touched[touched[t]] = False
        # "not >=": a NaN gain (overflowing products) ends local moving as well
        if moved == 0 or not (gained / two_m >= threshold):
            converged = True
            break
    # renumber 0..k-1 in order of first appearance
    new_id = np.full(n, -1, np.int64)
    k = 0
    for i in range(n):
        if new_id[labels[i]] < 0:
            new_id[labels[i]] = k
            k += 1
        labels[i] = new_id[labels[i]]
    return labels, k, converged


@njit(cache=True)
def _aggregate(indptr, indices, weights, labels, k):
    """Phase 2: the graph of communities (canonical CSR: sorted, no duplicates), internal
    weight on the diagonal."""
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
    in_touched = np.zeros(k, np.bool_)  # not acc == 0: explicit zero weights would repeat d
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
                if not in_touched[d]:
                    in_touched[d] = True
                    touched[n_touched] = d
                    n_touched += 1
                acc[d] += weights[p]
        touched[:n_touched].sort()
        for t in range(n_touched):
            out_idx[nnz] = touched[t]
            out_w[nnz] = acc[touched[t]]
            acc[touched[t]] = 0.0
            in_touched[touched[t]] = False
            nnz += 1
        out_ptr[c + 1] = nnz
    return out_ptr, out_idx[:nnz], out_w[:nnz]


def louvain(A, *, resolution=1.0, seed=0, threshold=1e-7):
    """Community label (0..k-1) of every node of the symmetrised weighted graph ``A``.

    Multi-level: local moving (nodes visited in a random order drawn from ``seed``) then
    aggregation, repeated until a level merges nothing.  Deterministic for a seed.

    A: square scipy.sparse matrix, finite non-negative weights (see :func:`symmetrised`: weights
        whose sum overflows, like entries of 1e308, are rescaled by a power of two, not refused).
    resolution: finite, > 0.  threshold: finite, >= 0 (a pass gaining less, relative to the
        total weight, ends local moving; so does a pass that moves no node).
    seed: a non-negative int, or None for fresh entropy.

    Local moving runs at most ``MAX_PASSES`` passes per level and the whole at most
    ``MAX_LEVELS`` levels; reaching either gives a RuntimeWarning and the partition so far.
    """
    resolution = finite_real(resolution, "resolution", minimum=0.0, strict=True)
    threshold = finite_real(threshold, "threshold", minimum=0.0, strict=False)
    seed = seed_value(seed)
    S = symmetrised(A)
    n = S.shape[0]
    labels = np.arange(n)
    two_m = float(S.data.sum())
    if n == 0 or two_m == 0.0:
        return labels
    rng = np.random.default_rng(seed)
    indptr, indices, weights = S.indptr.astype(np.int64), S.indices.astype(np.int64), S.data
    unconverged = 0
    for _ in range(MAX_LEVELS):
        degree = np.bincount(np.repeat(np.arange(len(indptr) - 1), np.diff(indptr)), weights,
                             minlength=len(indptr) - 1)
        order = rng.permutation(len(degree))
        level, k, converged = _local_moving(indptr, indices, weights, degree, order, resolution, two_m,
                                            threshold, MAX_PASSES)
        unconverged += not converged
        if k == len(degree):
            break
        labels = level[labels]
        if k == 1:
            break  # one community: the next level could merge nothing
        indptr, indices, weights = _aggregate(indptr, indices, weights, level, k)
    else:
        warnings.warn(f"louvain stopped after MAX_LEVELS={MAX_LEVELS} levels", RuntimeWarning, stacklevel=2)
    if unconverged:
        warnings.warn(f"louvain: local moving stopped after MAX_PASSES={MAX_PASSES} passes on {unconverged} "
                      f"level(s) without converging", RuntimeWarning, stacklevel=2)
    return labels


def modularity(A, labels, *, resolution=1.0):
    """Newman modularity of the partition ``labels`` of the symmetrised weighted graph ``A``.

    A: as for :func:`louvain` (a common power-of-two rescaling does not change the value).
    labels: one non-negative integer per node.  resolution: finite, >= 0."""
    resolution = finite_real(resolution, "resolution", minimum=0.0, strict=False)
    S = symmetrised(A)
    labels = np.asarray(labels)
    if labels.shape != (S.shape[0],):
        raise ValueError(f"labels must have one entry per node ({S.shape[0]}), got {labels.shape}")
    if labels.dtype.kind not in "biu":
        raise TypeError(f"labels must be integers, got dtype {labels.dtype}")
    if labels.size and labels.min() < 0:
        raise ValueError(f"labels must be non-negative, got {labels.min()}")
    if labels.size and labels.max() >= labels.size:
        labels = np.unique(labels, return_inverse=True)[1]  # keep bincount's size to n
    two_m = S.data.sum()
    if two_m == 0:
        return 0.0
    coo = S.tocoo()
    inside = coo.data[labels[coo.row] == labels[coo.col]].sum()
    total = np.bincount(labels, weights=np.asarray(S.sum(axis=1)).ravel())
    return float(inside / two_m - resolution * np.sum(total ** 2) / two_m ** 2)
