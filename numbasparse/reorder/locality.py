"""Whether reordering a graph's nodes pays for SpMM on a GPU (``prepare(reorder="auto")``).

The mechanism, measured on the H100 (BENCHMARKS.md, "Reordering"): node order changes SpMM's
speed only through the rows of B it gathers from DRAM.  While B fits in L2 every row is fetched
once whatever the order; once B outgrows L2, a row is fetched again whenever the rows that use it
are processed too far apart for L2 to keep it.  The kernels sweep A's rows in order, so the
fetches follow from the pattern and the row order alone (:func:`predicted_fetches`): L2 is taken
as a least-recently-used store of as many B rows as it holds, so a use of a column fetches its row
again when as many other columns were used since its last use (hub columns stay; columns shared
only by rows far apart are fetched again).  A reordering saves the fetches it removes, but a plan that hides it from the caller
permutes B in and C out on every call (reads and writes of both; none where the caller keeps its
features in the plan's order), and computing it takes time: it pays when the time its removed
fetches save per call (a share FETCH_SHARE of their bytes at peak bandwidth) exceeds the
permutations' and the time to compute it is won back within ``payback_calls`` calls
(:func:`choose_order`).
"""
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit, prange

from .order import LOCALITY_ORDERS, compile_reordering, permuted

#: Calls within which a reordering's computing time must be won back for ``auto`` to take it.
PAYBACK_CALLS = 100
#: The cheap orders ``auto`` weighs against the natural one, as functions of a canonical CSR.
#: Opt-in only: RCM (breadth-first order's locality at many times its cost), Louvain and LOA
#: (seconds on large graphs), and degree order, which puts rows of equal length together, not
#: rows that read the same B rows: it recovered less speed than the breadth-first order wherever
#: both were measured, and its removed fetches realised 0.32 of their modelled time, so the model
#: would take it for being cheaper to compute (BENCHMARKS.md "Reordering").
CANDIDATES = tuple((method, LOCALITY_ORDERS[method]) for method in ("bfs",))
#: Bytes of one DRAM fetch (a sector).
SECTOR = 32
#: Share of a removed fetch's time at peak DRAM bandwidth that a call gains: the gathers are
#: bound by L2 throughput as much as by DRAM (BENCHMARKS.md "What limits HP"), so a fetch turned
#: into an L2 hit saves less than its bytes at peak.  Measured (BENCHMARKS.md "Reordering"):
#: 0.49-0.67 for breadth-first orders of cnr-2000 at N = 256 and 512 on an H100 and an H200,
#: 0.32 for a degree order; with 1.0 `auto` took orders that needed 1500 calls to pay.
FETCH_SHARE = 0.5


#: Entries the fetch model follows: above this, a hash-chosen sample of B's rows (:class:`FetchSample`).
MODEL_ENTRIES = 2**18
#: Fewest B rows the sampled L2 holds, so that its capacity keeps a fine resolution.
MODEL_HELD = 1024


@njit(cache=True, nogil=True)  # (nogil: choose_order predicts one order while it computes another)
def _fetches(indptr, indices, rows, held, after, before):
    # A least-recently-used L2 of ``held`` B rows, simulated: the held columns in a doubly linked
    # list, most recent first; a use moves its column to the front, a miss also evicts the last
    # once ``held`` are in.  (An access hits exactly when fewer than ``held`` other columns were
    # used since its column's last use: the reuse distance the module docstring counts.)
    # ``after`` and ``before``: the list's links, one per column (any contents: a column's links
    # are written when it enters the list, before they are read).
    held_now = np.zeros(after.size, np.bool_)
    head, tail, size, fetches = -1, -1, 0, 0
    for r in rows:
        for q in range(indptr[r], indptr[r + 1]):
            c = indices[q]
            if held_now[c]:
                if c == head:
                    continue
                p, x = before[c], after[c]  # unlink c (not the head: it has a predecessor)
                after[p] = x
                if x >= 0:
                    before[x] = p
                else:
                    tail = p
            else:
                fetches += 1
                held_now[c] = True
                size += 1
                if size > held:  # evict the least recently used
                    last = tail
                    tail = before[last]
                    if tail >= 0:
                        after[tail] = -1
                    else:
                        head = -1
                    held_now[last] = False
                    size -= 1
            before[c] = -1  # c to the front
            after[c] = head
            if head >= 0:
                before[head] = c
            head = c
            if tail < 0:
                tail = c
    return fetches


class FetchSample:
    """The B rows the fetch model follows for canonical CSR ``A`` through an L2 of ``held`` B rows,
    and A's entries in their columns (made once per decision: every order's prediction reads it).

    Exact up to MODEL_ENTRIES entries; above, sampled as SHARDS does (Waldspurger et al., FAST
    2015): the B rows whose hashed index falls under a threshold (a share ``rate`` of them, the
    same rows for every order), an L2 of ``rate * held`` rows, fetches scaled by ``1 / rate``.
    Reuse distances among the sampled rows scale with the rate, so the count stays within 2% of
    the exact one on the shared graphs at a tenth of its time."""

    def __init__(self, A, held):
        from ..cpu.threads import parallel_call

        held = max(1, int(held))
        rate = min(1.0, max(MODEL_ENTRIES / max(A.nnz, 1), MODEL_HELD / held))
        threshold = np.uint64(2**24 if rate == 1 else int(rate * 2**24))
        rate = float(threshold) / 2**24
        # the sampled columns numbered 0, 1, ... (-1: not sampled), so that the simulated L2's
        # lists span only them and stay in the CPU's caches
        ids = np.empty(A.shape[1], np.int32 if A.shape[1] < 2**31 else np.int64)
        self.n_cols = _sample_ids(threshold, ids)
        used = np.zeros(self.n_cols, np.bool_)
        self.indptr, self.indices = parallel_call(_sampled_entries, A.indptr, A.indices, threshold, ids, used)
        self.rate, self.held = rate, max(1, round(held * rate))
        #: B rows A reads at all (scaled back from the sample): the fewest fetches any order can make
        self.used_columns = int(round(np.count_nonzero(used) / rate))

    def fetches(self, rows):
        """B rows fetched (scaled back from the sample) when A's rows are swept in order ``rows``."""
        after, before = np.empty(self.n_cols, self.indices.dtype), np.empty(self.n_cols, self.indices.dtype)
        found = _fetches(self.indptr, self.indices, np.asarray(rows, np.int64), self.held, after, before)
        return int(round(found / self.rate))


#: Fibonacci hashing's multiplier: column c is sampled when the top 24 bits of c * HASH (mod
#: 2**64) fall under the sample's threshold, a hash recomputed wherever it is needed (no table
#: to read per entry).
HASH = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def _is_sampled(c, threshold):
    return (np.uint64(c) * HASH) >> np.uint64(40) < threshold


@njit(cache=True)
def _sample_ids(threshold, ids):
    # ids[c]: column c's number among the sampled columns, -1 where it is not sampled; returns
    # how many are
    k = 0
    for c in range(ids.size):
        if _is_sampled(c, threshold):
            ids[c] = k
            k += 1
        else:
            ids[c] = -1
    return k


@njit(parallel=True, cache=True)
def _sampled_entries(indptr, indices, threshold, ids, used):
    # (indptr, indices) of A's entries in the sampled columns, rows kept, each column given as
    # its number among the sampled (``ids``); marks the sampled columns used (every thread that
    # writes a mark writes True).  One pass reads every entry, putting a row's sampled ones at
    # the start of its own span of a full-size buffer; the second moves only those (a share
    # ``rate`` of the entries) together.  (The buffer is the size of A's indices: less than the
    # permuted copy of A that a reordering makes.)
    n = indptr.size - 1
    spread = np.empty(indices.size, ids.dtype)
    counts = np.zeros(n + 1, np.int64)
    for r in prange(n):
        at = indptr[r]
        for q in range(indptr[r], indptr[r + 1]):
            if _is_sampled(indices[q], threshold):
                c = ids[indices[q]]
                spread[at] = c
                at += 1
                if not used[c]:  # (read first: most columns are marked already, and writes contend)
                    used[c] = True
        counts[r + 1] = at - indptr[r]
    for r in range(n):
        counts[r + 1] += counts[r]
    kept = np.empty(counts[n], ids.dtype)
    for r in prange(n):
        kept[counts[r]:counts[r + 1]] = spread[indptr[r]:indptr[r] + counts[r + 1] - counts[r]]
    return counts, kept


def _compute(method, order, A, computed, record):
    """Compute ``order(A)`` into ``computed`` unless an earlier decision did, and start its
    entry in ``record``: not predicted yet, charged the seconds this decision spent on it (each
    order is charged once, at the decision that computed it)."""
    if method in record:
        return
    charged = 0.0
    if method not in computed:
        start = time.perf_counter()
        computed[method] = (order(A), time.perf_counter() - start, None)
        charged = computed[method][1]
    record[method] = dict(fetches=None, saved_bytes_per_call=None, seconds=charged, payback_calls=float("inf"))


def _compile_model(A):
    """Compile (or load) the model's passes for ``A``'s index dtype before they are timed."""
    from ..cpu.threads import parallel_call

    indptr, indices = np.zeros(2, A.indptr.dtype), np.zeros(0, A.indices.dtype)
    ids = np.zeros(1, np.int32 if A.shape[1] < 2**31 else np.int64)
    _sample_ids(np.uint64(1), ids)
    parallel_call(_sampled_entries, indptr, indices, np.uint64(1), ids, np.zeros(1, np.bool_))
    _fetches(np.zeros(2, np.int64), ids[:0], np.zeros(1, np.int64), 1, ids, ids.copy())  # (links in the ids' dtype)


def predicted_fetches(A, rows, held, sample=None):
    """B rows fetched from DRAM when the rows of scipy CSR ``A`` are swept in the order ``rows``
    through an L2 that keeps the ``held`` B rows used last (module docstring), on
    :class:`FetchSample` ``sample`` (made here when None: give one to predict several orders)."""
    return (FetchSample(A, held) if sample is None else sample).fetches(rows)


def choose_order(A, n_cols, itemsize, l2_bytes, bandwidth, payback_calls=PAYBACK_CALLS, candidates=None,
                 computed=None, permutes=True, permute=permuted):
    """(method, perm, record): the order that pays for SpMM of canonical square scipy CSR ``A``
    (its pattern decides; its values are carried into the permuted copy) with ``n_cols`` columns of ``itemsize`` bytes on a GPU of
    ``l2_bytes`` of L2 and ``bandwidth`` bytes/s of DRAM, or (None, None, record) to keep A's own
    order.  ``record`` says why: B's and L2's bytes, the predicted fetches of each order (None for
    one whose time could not be won back even if it fetched each B row once: not predicted), the
    bytes' worth of time at ``bandwidth`` a call would save (the fetches removed, weighted by
    FETCH_SHARE) net of the permutations, the seconds each order took (to compute,
    and to permute A by it where it could pay) and the calls to win them back, and
    ``model_seconds`` (the fetch predictions).  ``computed``: a dict {method: (perm, seconds,
    permuted A for the order taken, else None)} of orders computed before (for
    other widths), filled in here, so that each order is computed and charged once; ``candidates``: (method, order function) pairs,
    default CANDIDATES; ``permutes``: whether each call permutes B in and C out (False for a
    plan whose caller keeps its features in the plan's order: then nothing rules an order out
    before the natural order's prediction, so the orders are computed while it runs on another
    core, and charged even where it then says none can save anything; ``model_seconds`` counts
    what they did not hide); ``permute(A, perm)``: the permuted A that the plan keeps (default:
    a host copy; a plan on the GPU permutes there)."""
    computed = {} if computed is None else computed
    candidates = CANDIDATES if candidates is None else candidates
    n_rows, k = A.shape
    row_bytes = -(-n_cols * itemsize // SECTOR) * SECTOR
    fetch_worth = FETCH_SHARE * row_bytes  # bytes' worth of time at peak that removing one fetch saves
    record = dict(n_cols=n_cols, b_bytes=k * n_cols * itemsize, l2_bytes=l2_bytes, model_seconds=0.0)
    if A.nnz == 0 or record["b_bytes"] <= l2_bytes // 2:
        return None, None, dict(record, why="B fits in L2: every order fetches each row once")
    if n_rows >= 2**31:
        return None, None, dict(record, why="reordering takes graphs of fewer than 2**31 nodes")
    held = l2_bytes // row_bytes
    _compile_model(A)
    compile_reordering(A)
    start = time.perf_counter()
    sample = FetchSample(A, held)
    natural_rows = np.arange(n_rows)
    record["model_seconds"] += time.perf_counter() - start
    permute_bytes = 2 * (k + n_rows) * n_cols * itemsize if permutes else 0  # B in, C out: read + write
    used_columns = sample.used_columns
    if permutes:  # the per-call permutations may rule every order out: predict first
        start = time.perf_counter()
        natural = predicted_fetches(A, natural_rows, held, sample)
        record["model_seconds"] += time.perf_counter() - start
    else:  # the natural order's prediction on another core (it releases the GIL) while the orders are computed
        with ThreadPoolExecutor(max_workers=1) as pool:
            natural = pool.submit(predicted_fetches, A, natural_rows, held, sample)
            for method, order in candidates:
                _compute(method, order, A, computed, record)
            start = time.perf_counter()
            natural = natural.result()
            record["model_seconds"] += time.perf_counter() - start  # (what the orders did not hide)
    record["natural_fetches"] = natural
    if natural <= used_columns:  # no order fetches a row less than once
        return None, None, dict(record, why="the graph's own order fetches each B row once")
    if (natural - used_columns) * fetch_worth <= permute_bytes:
        return None, None, dict(record, why="even one fetch per B row would not pay for the per-call "
                                             "permutations")
    best = (None, None)
    most_saved = (natural - used_columns) * fetch_worth - permute_bytes  # an order fetching each row once
    for method, order in candidates:
        _compute(method, order, A, computed, record)
        charged = record[method]["seconds"]
        perm, seconds, matrix = computed[method]
        if seconds * bandwidth > payback_calls * most_saved:  # cannot pay back even then: no prediction
            continue
        start = time.perf_counter()
        fetches = predicted_fetches(A, perm, held, sample)
        record["model_seconds"] += time.perf_counter() - start
        saved = (natural - fetches) * fetch_worth - permute_bytes  # per call
        if matrix is None and 0 < saved and seconds * bandwidth <= payback_calls * saved:
            start = time.perf_counter()  # a reordered plan permutes A by it: charged as well
            matrix = permute(A, perm)
            spent = time.perf_counter() - start
            seconds, charged = seconds + spent, charged + spent
            computed[method] = (perm, seconds, matrix)
        calls = seconds * bandwidth / saved if saved > 0 else float("inf")
        record[method] = dict(fetches=fetches, saved_bytes_per_call=saved, seconds=charged, payback_calls=calls)
        if calls <= payback_calls and (best[0] is None or calls < record[best[0]]["payback_calls"]):
            best = (method, perm)
    for method, (perm, seconds, matrix) in computed.items():  # (only the order taken keeps its copy of A)
        if matrix is not None and method != best[0]:
            computed[method] = (perm, seconds, None)
    record["why"] = (f"{best[0]} pays back within {payback_calls} calls" if best[0] else
                     f"no order pays back within {payback_calls} calls")
    return best[0], best[1], record
