"""Permutations of a graph's nodes and the statistics that judge them."""
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from ._checks import graph_copy, positive_int
from .louvain import louvain


def permute(A, perm):
    """``P A P^T``: row and column ``new`` of the result are row and column ``perm[new]`` of A.

    The result is a new canonical CSR matrix (sorted column indices in every row, duplicates
    of ``A`` summed) of ``A``'s dtype.  ``A``: a square scipy.sparse matrix without NaN/inf
    weights (ValueError); negative weights are fine.  Neither ``A`` nor ``perm`` is modified."""
    return permuted(graph_copy(A, non_negative=False, dtype=None), perm)


def permuted(A, perm):
    """``P A P^T`` of a canonical square scipy CSR ``A`` and a permutation ``perm`` of its nodes
    (checked by :func:`row_maps`: the njit pass would write out of bounds otherwise),
    a canonical CSR of A's dtypes.  Rows are permuted in parallel across the CPU's cores,
    because the reordering's time counts against what it saves per call.  Graphs of 2**31
    nodes or more are refused (ValueError)."""
    return _permute(A, perm, entries=False)[0]


def entry_order(A, perm):
    """Where the entries of ``permuted(A, perm)`` come from: its entry p is entry
    ``entry_order[p]`` of A (values in A's entry order map to the result's with
    ``values[entry_order]``).  The permutation's pass once more, for the callers that need it
    (a reordered plan's SDDMM in the caller's order), so that SpMM's plans neither compute nor
    keep 8 bytes per entry."""
    return _permute(A, perm, entries=True)[1]


def _permute(A, perm, entries):
    n = A.shape[0]
    if n >= 2**31:  # the pass packs a column and an offset into one int64 sort key
        raise ValueError(f"A has {n} nodes; reordering takes graphs of fewer than 2**31")
    from ..cpu.threads import parallel_call

    perm, inverse, new_indptr = row_maps(A.indptr, perm)
    movable = A.dtype.kind in "biuf" and A.dtype.itemsize <= 8  # (values Numba can move: not longdouble)
    data = A.data if movable else np.zeros(A.indptr[n], np.int8)
    order = np.empty(A.indptr[n] if entries or not movable else 0, np.int64)
    indices, data = parallel_call(_permuted, A.indptr, A.indices, data, perm, inverse, new_indptr, order)
    indptr = new_indptr
    result = sp.csr_matrix(A.shape, dtype=A.dtype)  # arrays set directly: scipy's constructor
    result.data = data if movable else A.data[order]  # would copy int64 indices to narrow them
    result.indices, result.indptr = indices, indptr.astype(A.indptr.dtype)
    result.has_sorted_indices = result.has_canonical_format = True  # (each row sorted, no duplicates)
    return result, order


def compile_reordering(A):
    """Compile (or load) the njit passes of :func:`permuted` and :func:`bfs_order` for ``A``'s
    dtypes, so that the time a reordering is charged is its own, not the compiler's."""
    from ..cpu.threads import parallel_call

    indptr, indices = np.zeros(2, A.indptr.dtype), np.zeros(0, A.indices.dtype)
    one = np.zeros(1, np.int64)
    parallel_call(_permuted, indptr, indices, np.zeros(0, A.dtype), one, one, np.zeros(2, np.int64),
                  np.zeros(0, np.int64))
    parallel_call(_row_maps, indptr, np.zeros(1, np.int64))
    parallel_call(_pair_hash_sums, indptr, indices)
    t_indptr, t_indices = parallel_call(_transposed_pattern, indptr, indices, 1, 1)
    for sweep in (_bfs, _bfs_levels):
        parallel_call(sweep, indptr, indices, indptr, indices, 1, False)
        parallel_call(sweep, indptr, indices, t_indptr, t_indices, 1, True)


#: Rows up to this long are sorted by insertion, longer ones by quicksort, and rows longer
#: than _RADIX_ROW by a radix sort on the column (half the whole pass's time on a web graph
#: whose long rows hold most entries; shorter rows pay more for the digit counts than they save).
_SHORT_ROW = 32
_RADIX_ROW = 256
#: Bits of the radix sort's digits.
_DIGIT = 11
#: Pieces of equal entry counts the rows are dealt out in (static chunks of equal row counts
#: would give one core every hub of a degree order).
_PIECES = 1024


@njit(parallel=True, cache=True)
def _permuted(indptr, indices, data, perm, inverse, new_indptr, entry_order):
    # Row i of the result is row perm[i] of A with renumbered columns, sorted: rows are
    # independent, so pieces of rows go to the cores, each sorting (column << 32 | offset) keys
    # of one row at a time in a buffer of its own.  ``inverse``, ``new_indptr``: row_maps'.
    # ``entry_order``: filled unless empty.  Returns the result's (indices, data).
    n = perm.size
    nnz = new_indptr[n]
    new_indices = np.empty(nnz, indices.dtype)
    new_data = np.empty(nnz, data.dtype)
    bounds = _piece_bounds(new_indptr, _PIECES)
    for piece in prange(_PIECES):
        longest = 0
        for i in range(bounds[piece], bounds[piece + 1]):
            longest = max(longest, new_indptr[i + 1] - new_indptr[i])
        keys = np.empty(longest, np.int64)
        spare = np.empty(longest if longest > _RADIX_ROW else 0, np.int64)
        counts = np.empty(2**_DIGIT + 1, np.int64)
        for i in range(bounds[piece], bounds[piece + 1]):
            start, at, length = indptr[perm[i]], new_indptr[i], new_indptr[i + 1] - new_indptr[i]
            _sorted_keys(keys, length, indices[start:start + length], inverse, spare, counts)
            for j in range(length):  # split each key into the new column and the entry it came from
                new_indices[at + j] = keys[j] >> 32
                new_data[at + j] = data[start + (keys[j] & 0xFFFFFFFF)]
            if entry_order.size:
                for j in range(length):
                    entry_order[at + j] = start + (keys[j] & 0xFFFFFFFF)
    return new_indices, new_data


def row_maps(indptr, perm):
    """(perm, inverse, indptr) of ``permuted(A, perm)`` from A's ``indptr``: ``perm`` as int64
    (itself where it is already), ``inverse[old] = new`` and the result's row pointers, both
    int64, after checking in the same passes that ``perm`` is a permutation of A's nodes
    (ValueError otherwise: the permutation passes, on the host and the GPU
    (:func:`numbasparse.cuda.permute.permuted_on_device`), would write out of bounds).  The
    caller's ``perm`` is not modified."""
    from ..cpu.threads import parallel_call

    n = indptr.size - 1
    perm = np.asarray(perm)
    if perm.shape != (n,) or perm.dtype.kind not in "iu":
        raise ValueError(f"perm must be a permutation of 0..{n - 1}")
    perm = perm.astype(np.int64, copy=False)
    inverse, new_indptr, valid = parallel_call(_row_maps, indptr, perm)
    if not valid:
        raise ValueError(f"perm must be a permutation of 0..{n - 1}")
    return perm, inverse, new_indptr


@njit(parallel=True, cache=True)
def _row_maps(indptr, perm):
    # (inverse, new indptr, whether perm is a permutation): in range, and each old node's new
    # number maps back to it (so no two share one)
    n = perm.size
    inverse = np.empty(n, np.int64)
    new_indptr = np.zeros(n + 1, np.int64)
    outside = 0
    for i in prange(n):
        outside += perm[i] < 0 or perm[i] >= n
    if outside:
        return inverse, new_indptr, False
    for i in prange(n):
        inverse[perm[i]] = i
        new_indptr[i + 1] = indptr[perm[i] + 1] - indptr[perm[i]]
    unmapped = 0
    for i in prange(n):
        unmapped += inverse[perm[i]] != i
    for i in range(n):
        new_indptr[i + 1] += new_indptr[i]
    return inverse, new_indptr, unmapped == 0


def long_row_chunks(indptr, short, chunk):
    """The chunks of at most ``chunk`` entries that the rows of ``indptr`` longer than ``short``
    are cut into, in row order, as int64 arrays (row, offset in the row, where the row's entries
    start among the long rows' entries), and the long rows' entries in all (the GPU
    permutation's long rows)."""
    lengths = np.diff(indptr)
    rows = np.flatnonzero(lengths > short)
    counts = -(-lengths[rows] // chunk)
    chunk_row = np.repeat(rows, counts).astype(np.int64)
    first = np.repeat(np.cumsum(counts) - counts, counts)  # each chunk's row's first chunk
    row_start = np.cumsum(lengths[rows]) - lengths[rows]  # each long row's first entry among them
    return (chunk_row, (np.arange(chunk_row.size) - first).astype(np.int64) * chunk,
            np.repeat(row_start, counts).astype(np.int64), int(lengths[rows].sum()))


@njit(cache=True)
def _piece_bounds(indptr, pieces):
    # rows of piece k: bounds[k] to bounds[k + 1], those that start in its equal share of entries
    n = indptr.size - 1
    bounds = np.empty(pieces + 1, np.int64)
    bounds[:pieces] = np.searchsorted(indptr[:n], np.arange(pieces) * (indptr[n] / pieces))
    bounds[pieces] = n
    return bounds


@njit(cache=True)
def _sorted_keys(keys, length, columns, inverse, spare, counts):
    # (new column << 32 | offset in the row) of a row's entries, sorted, in keys[:length]
    for j in range(length):
        keys[j] = (inverse[columns[j]] << 32) | j
    if length > _RADIX_ROW:
        _radix_sorted(keys, length, spare, counts, inverse.size)
    elif length > _SHORT_ROW:
        keys[:length].sort()
    else:
        for j in range(1, length):
            key, m = keys[j], j - 1
            while m >= 0 and keys[m] > key:
                keys[m + 1] = keys[m]
                m -= 1
            keys[m + 1] = key


@njit(cache=True)
def _radix_sorted(keys, length, spare, counts, n):
    # least-significant-digit radix sort of keys[:length] on the column bits (those of n - 1):
    # stable passes, so the offsets of equal columns (none in a canonical row) keep their order
    mask = 2**_DIGIT - 1
    shift = 32
    while shift == 32 or (n - 1) >> (shift - 32) > 0:
        counts[:] = 0
        for j in range(length):
            counts[((keys[j] >> shift) & mask) + 1] += 1
        for d in range(mask):
            counts[d + 1] += counts[d]
        for j in range(length):
            d = (keys[j] >> shift) & mask
            spare[counts[d]] = keys[j]
            counts[d] += 1
        keys[:length] = spare[:length]
        shift += _DIGIT


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
    return rcm_of(graph_copy(A, non_negative=False, dtype=None))


def rcm_of(A):
    """:func:`rcm_order` of a canonical scipy CSR ``A`` (unchecked)."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    if A.shape[0] == 0:
        return np.zeros(0, np.int64)
    pattern = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    return np.asarray(reverse_cuthill_mckee((pattern + pattern.T).tocsr(), symmetric_mode=True), dtype=np.int64)


def bfs_order(A):
    """Reversed breadth-first order of A's pattern: a breadth-first sweep restarted from the
    lowest-numbered node not yet reached, which gives every node's unreached neighbours
    consecutive numbers (so consecutive rows read rows of B that L2 still holds), numbered from
    the last node reached down.  The locality of reverse Cuthill-McKee at a fraction of its
    time (no symmetrised copy of A, no search for a peripheral start, no sort by degree), which
    matters because the order's time counts against what it saves per call.  The sweep follows
    edges both ways (rows and columns) where the pattern is not symmetric, as RCM's symmetrised
    pattern does.  Both choices were measured (BENCHMARKS.md, "Reordering"): the reversed
    sweep ran SpMM 1.07x faster than the forward one on a web graph at N = 64 and 256, and on
    its directed copy the one-way sweep was slower than no reordering at all.  ``A``: a square
    scipy.sparse matrix without NaN/inf weights (ValueError)."""
    return bfs_of(graph_copy(A, non_negative=False, dtype=None))


def bfs_of(A):
    """:func:`bfs_order` of a canonical square scipy CSR ``A`` (unchecked but its shape: the
    njit passes would write out of bounds).  The sweep is the same on one core or many: on
    graphs of PARALLEL_SWEEP_ENTRIES entries or more, with 4 threads or more, each level's
    frontier is scanned across the cores (:func:`_bfs_levels`)."""
    from numba import get_num_threads

    from ..cpu.threads import parallel_call

    if A.shape[0] != A.shape[1]:
        raise ValueError(f"a node order needs a square graph, A is {A.shape[0]}x{A.shape[1]}")
    indptr, indices, n = A.indptr, A.indices, A.shape[0]
    t_indptr, t_indices = (indptr, indices) if symmetric_pattern(A) else _transposed(A)
    two_way = t_indices is not indices
    if A.nnz >= PARALLEL_SWEEP_ENTRIES and get_num_threads() >= 4:
        return parallel_call(_bfs_levels, indptr, indices, t_indptr, t_indices, n, two_way)
    return _bfs(indptr, indices, t_indptr, t_indices, n, two_way)


def symmetric_pattern(A):
    """Whether the pattern of canonical square CSR ``A`` equals its transpose's, by a fingerprint:
    the sums of a 64-bit hash of (row, column) and of (column, row) over the entries agree for
    every symmetric pattern, and for another one only by a hash collision (a chance of about
    2**-64, whose cost is a weaker order, never a wrong result)."""
    from ..cpu.threads import parallel_call

    return A.shape[0] == A.shape[1] and parallel_call(_pair_hash_sums, A.indptr, A.indices)


@njit(cache=True, inline="always")
def _pair_hash(a, b):
    # splitmix64 of the pair: a well-mixed 64-bit value per (a, b), not symmetric in a and b
    z = (np.uint64(a) << np.uint64(32)) ^ np.uint64(b)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(parallel=True, cache=True)
def _pair_hash_sums(indptr, indices):
    n = indptr.size - 1
    forward = np.uint64(0)
    backward = np.uint64(0)
    for r in prange(n):  # (sums of uint64 wrap around: the same for any order of terms)
        for p in range(indptr[r], indptr[r + 1]):
            forward += _pair_hash(r, indices[p])
            backward += _pair_hash(indices[p], r)
    return forward == backward


@njit(parallel=True, cache=True)
def _transposed_pattern(indptr, indices, n, chunks):
    # A^T's pattern as CSR by a counting sort of the entries on their column, in ``chunks``
    # pieces of rows of equal entry counts: each piece counts its columns, each column's
    # pieces get consecutive slots, then each piece scatters its rows in order, so every
    # row of A^T lists its columns sorted, whatever the number of pieces
    nnz = indptr[n]
    bounds = _piece_bounds(indptr, chunks)
    at = np.zeros((chunks, n), np.int64)
    for c in prange(chunks):
        for p in range(indptr[bounds[c]], indptr[bounds[c + 1]]):
            at[c, indices[p]] += 1
    t_indptr = np.zeros(n + 1, np.int64)
    for j in prange(n):
        for c in range(chunks):
            t_indptr[j + 1] += at[c, j]
    for j in range(n):
        t_indptr[j + 1] += t_indptr[j]
    for j in prange(n):
        slot = t_indptr[j]
        for c in range(chunks):
            count = at[c, j]
            at[c, j] = slot
            slot += count
    t_indices = np.empty(nnz, indices.dtype)
    for c in prange(chunks):
        for r in range(bounds[c], bounds[c + 1]):
            for p in range(indptr[r], indptr[r + 1]):
                j = indices[p]
                t_indices[at[c, j]] = r
                at[c, j] += 1
    return t_indptr, t_indices


def _transposed(A):
    """A^T's pattern (indptr, indices) of canonical square CSR ``A``, in as many pieces as
    threads, but no more than keep the pieces' counters (pieces x nodes) within A's entries."""
    from numba import get_num_threads

    from ..cpu.threads import parallel_call

    n = A.shape[0]
    chunks = int(max(1, min(get_num_threads(), A.nnz // max(n, 1))))
    return parallel_call(_transposed_pattern, A.indptr, A.indices, n, chunks)


@njit(cache=True)
def _bfs(indptr, indices, t_indptr, t_indices, n, two_way):
    # the sweep over rows (and, ``two_way``, over columns: t_* is A^T's pattern), then reversed
    order = np.empty(n, np.int64)
    reached = np.zeros(n, np.bool_)
    head = tail = 0
    for root in range(n):
        if tail == n:  # every node numbered: the rest of the sweep would find none
            break
        if reached[root]:
            continue
        reached[root] = True
        order[tail] = root
        tail += 1
        while head < tail and tail < n:
            node = order[head]
            head += 1
            tail = _number_unreached(indptr, indices, node, reached, order, tail)
            if two_way:
                tail = _number_unreached(t_indptr, t_indices, node, reached, order, tail)
    return order[::-1].copy()


#: Graphs with this many entries or more sweep each level's frontier on all cores (a web graph
#: of 5.5M entries: 23 against 41 ms on 16 cores; under 1M entries the sweep takes a few ms
#: either way and the parallel one lost up to 1 ms on road and knowledge graphs of many small
#: levels: BENCHMARKS.md "Reordering").
PARALLEL_SWEEP_ENTRIES = 2**20
#: Frontiers of fewer nodes are swept serially; larger ones in _LEVEL_PIECES pieces.
_SERIAL_FRONTIER = 512
_LEVEL_PIECES = 64


@njit(parallel=True, cache=True)
def _bfs_levels(indptr, indices, t_indptr, t_indices, n, two_way):
    # _bfs, level by level: the pieces of a large frontier list, in parallel, their nodes' edges
    # to nodes unreached when the level began (room for each: its nodes' degrees), then one
    # pass numbers those in the pieces' order, skipping repeats: the serial sweep's numbering
    order = np.empty(n, np.int64)
    reached = np.zeros(n, np.bool_)
    listed = np.empty(indptr[n] + (t_indptr[n] if two_way else 0), indices.dtype)
    room = np.zeros(_LEVEL_PIECES + 1, np.int64)
    found = np.zeros(_LEVEL_PIECES, np.int64)
    tail = 0
    for root in range(n):
        if tail == n:
            break
        if reached[root]:
            continue
        reached[root] = True
        order[tail] = root
        head, tail = tail, tail + 1
        while head < tail and tail < n:
            level, size = tail, tail - head
            if size < _SERIAL_FRONTIER:
                for k in range(head, level):
                    tail = _number_unreached(indptr, indices, order[k], reached, order, tail)
                    if two_way:
                        tail = _number_unreached(t_indptr, t_indices, order[k], reached, order, tail)
            else:
                for piece in prange(_LEVEL_PIECES):
                    edges = 0
                    for k in range(head + size * piece // _LEVEL_PIECES, head + size * (piece + 1) // _LEVEL_PIECES):
                        edges += indptr[order[k] + 1] - indptr[order[k]]
                        if two_way:
                            edges += t_indptr[order[k] + 1] - t_indptr[order[k]]
                    room[piece + 1] = edges
                for piece in range(_LEVEL_PIECES):
                    room[piece + 1] += room[piece]
                for piece in prange(_LEVEL_PIECES):
                    at = room[piece]
                    for k in range(head + size * piece // _LEVEL_PIECES, head + size * (piece + 1) // _LEVEL_PIECES):
                        at = _list_unreached(indptr, indices, order[k], reached, listed, at)
                        if two_way:
                            at = _list_unreached(t_indptr, t_indices, order[k], reached, listed, at)
                    found[piece] = at
                for piece in range(_LEVEL_PIECES):
                    for q in range(room[piece], found[piece]):
                        if not reached[listed[q]]:
                            reached[listed[q]] = True
                            order[tail] = listed[q]
                            tail += 1
            head = level
    return order[::-1].copy()


@njit(cache=True, inline="always")
def _list_unreached(indptr, indices, node, reached, listed, at):
    # node's neighbours not reached yet, listed from listed[at] in column order (reached untouched)
    for p in range(indptr[node], indptr[node + 1]):
        if not reached[indices[p]]:
            listed[at] = indices[p]
            at += 1
    return at


@njit(cache=True, inline="always")
def _number_unreached(indptr, indices, node, reached, order, tail):
    # node's unreached neighbours (row ``node`` of the pattern) numbered next, in column order
    for p in range(indptr[node], indptr[node + 1]):
        neighbour = indices[p]
        if not reached[neighbour]:
            reached[neighbour] = True
            order[tail] = neighbour
            tail += 1
    return tail


def degree_order(A):
    """Nodes by decreasing degree (row length), ties in their original order: the hubs, whose
    rows of B most rows read, first and together."""
    return degree_of(graph_copy(A, non_negative=False, dtype=None))


def degree_of(A):
    """:func:`degree_order` of a canonical scipy CSR ``A`` (unchecked)."""
    return np.argsort(-np.diff(A.indptr), kind="stable").astype(np.int64)


#: The cheap locality orders by name (``prepare(reorder=...)``), as functions of a canonical
#: CSR's pattern.
LOCALITY_ORDERS = {"bfs": bfs_of, "rcm": rcm_of, "degree": degree_of}


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
