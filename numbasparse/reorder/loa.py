"""HC-SpMM's layout reorganization LOA (paper 001, section V-B, Algorithms 5 and 6), in numba.njit."""
import numpy as np
import scipy.sparse as sp
from numba import njit

from ._checks import graph_copy, positive_int


@njit(cache=True)
def _loa(indptr, indices, t_indptr, t_indices, order, window, vertex_window):
    """Greedy row windows: start from the first unvisited vertex of ``order`` and add, ``window-1``
    times, the candidate among the next ``vertex_window`` unvisited ones that maximises the
    window's computing intensity (nnz / non-zero columns), ties to the higher degree.

    Terminates: ``order`` is a permutation of 0..n-1, so while ``placed < n`` an unvisited
    vertex is left at or after ``head`` (the scan is also bounded by n), and every turn of the
    outer loop places at least one vertex.  The CSR must be canonical (no duplicates).

    Non-zero columns are kept incrementally (Algorithm 6): ``shared[v]`` counts the columns of
    v already in the window, updated only for the columns a new member brings (through the
    transpose: the rows that hold a column)."""
    n = order.shape[0]
    visited = np.zeros(n, np.bool_)
    in_window = np.zeros(t_indptr.shape[0] - 1, np.bool_)
    shared = np.zeros(n, np.int64)
    touched_cols = np.empty(t_indptr.shape[0] - 1, np.int64)
    touched_rows = np.empty(t_indices.shape[0] + 1, np.int64)
    perm = np.empty(n, np.int64)
    placed = 0
    head = 0
    while placed < n:
        while head < n and visited[order[head]]:
            head += 1
        if head == n:
            break  # unreachable for a permutation ``order``; loa() checks the result
        member = order[head]
        n_cols = 0
        n_rows = 0
        cur_eles = 0
        for size in range(window):
            if size > 0:
                best, best_p, best_deg = -1, -1.0, -1
                seen = 0
                j = head
                while j < n and seen < vertex_window:
                    v = order[j]
                    j += 1
                    if visited[v]:
                        continue
                    seen += 1
                    deg = indptr[v + 1] - indptr[v]
                    cols = n_cols + deg - shared[v]
                    p = (cur_eles + deg) / cols if cols > 0 else 0.0
                    if p > best_p or (p == best_p and deg > best_deg):
                        best, best_p, best_deg = v, p, deg
                if best < 0:
                    break  # every vertex is placed
                member = best
            visited[member] = True
            perm[placed] = member
            placed += 1
            cur_eles += indptr[member + 1] - indptr[member]
            for p in range(indptr[member], indptr[member + 1]):
                c = indices[p]
                if not in_window[c]:  # a new column: every row holding it now shares one more
                    in_window[c] = True
                    touched_cols[n_cols] = c
                    n_cols += 1
                    for q in range(t_indptr[c], t_indptr[c + 1]):
                        r = t_indices[q]
                        if shared[r] == 0:
                            touched_rows[n_rows] = r
                            n_rows += 1
                        shared[r] += 1
            if placed == n:
                break
        for t in range(n_cols):
            in_window[touched_cols[t]] = False
        for t in range(n_rows):
            shared[touched_rows[t]] = 0
    return perm


def loa(A, *, window=16, vertex_window=64):
    """LOA permutation (``perm[new] = old``) of a square graph: rows regrouped into windows of
    ``window`` rows with high computing intensity, for HC-SpMM's dense-tile path.

    Vertices are first sorted by their smallest neighbour (Algorithm 5, line 2; isolated ones
    last); ``vertex_window`` bounds the candidates examined per step (our default, 64, keeps
    the cost linear in the graph: window * vertex_window candidate checks per window).

    A: square scipy.sparse matrix; only its pattern is used, but NaN/inf weights are refused
        (ValueError); negative weights are accepted (signed matrices such as Laplacians).
        ``A`` is never modified (unsorted indices and duplicates are handled on a copy).
    window, vertex_window: positive integers (Python or numpy ints; bools and floats are
        refused); values above n behave as n."""
    window = positive_int(window, "window")
    vertex_window = positive_int(vertex_window, "vertex_window")
    A = graph_copy(A, non_negative=False, dtype=None)  # canonical, and shares nothing with A
    n = A.shape[0]
    window, vertex_window = min(window, max(n, 1)), min(vertex_window, max(n, 1))  # same result
    first = np.full(n, n, np.int64)
    nonempty = np.diff(A.indptr) > 0
    first[nonempty] = A.indices[A.indptr[:-1][nonempty]]  # sorted indices: first = smallest
    order = np.argsort(first, kind="stable").astype(np.int64)
    T = sp.csr_matrix(A.T)
    perm = _loa(A.indptr.astype(np.int64), A.indices.astype(np.int64), T.indptr.astype(np.int64),
                T.indices.astype(np.int64), order, window, vertex_window)
    if n and (perm.min() < 0 or perm.max() >= n or np.bincount(perm, minlength=n).max() != 1):
        raise RuntimeError("loa produced no permutation: please report this graph")
    return perm
