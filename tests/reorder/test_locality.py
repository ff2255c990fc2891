"""reorder="auto"'s model: B rows fetched through an LRU L2, and the payback rule."""
import os
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest
import scipy.sparse as sp

from numbasparse import graphs
from numbasparse.reorder import locality
from numbasparse.reorder.order import entry_order


def band_graph(n, width):
    """Each node linked to the ``width`` nodes on either side: perfect locality in its own order."""
    offsets = [k for k in range(-width, width + 1) if k]
    return sp.diags([np.ones(n - abs(k), np.float32) for k in offsets], offsets, format="csr")


def lru_fetches(A, rows, held):
    cache, fetches = OrderedDict(), 0
    for r in rows:
        for c in A.indices[A.indptr[r]:A.indptr[r + 1]]:
            if c in cache:
                cache.move_to_end(c)
            else:
                fetches += 1
                cache[c] = True
                if len(cache) > held:
                    cache.popitem(last=False)
    return fetches


def test_predicted_fetches_are_an_lru_caches_misses():
    A = sp.random(80, 60, density=0.1, format="csr", random_state=0)
    rows = np.random.default_rng(1).permutation(80)
    for held in (1, 2, 7, 30, 60):
        assert locality.predicted_fetches(A, rows, held) == lru_fetches(A, rows, held)


def test_predicted_fetches_of_a_large_graph_sample_b_rows_within_two_percent(monkeypatch):
    """Above MODEL_ENTRIES the model follows a hashed sample of B's rows through a
    proportionally smaller L2 (SHARDS): within 2% of the exact count, in good order and shuffled."""
    band = band_graph(40_000, 8)  # 640k entries
    assert band.nnz > locality.MODEL_ENTRIES
    for A in (band, graphs.shuffled(band)):
        rows = np.arange(A.shape[0])
        sampled = locality.predicted_fetches(A, rows, 2000)
        with monkeypatch.context() as m:
            m.setattr(locality, "MODEL_ENTRIES", A.nnz)
            exact = locality.predicted_fetches(A, rows, 2000)
        assert exact > 0 and abs(sampled - exact) <= 0.02 * exact


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_a_fetch_sample_keeps_the_entries_of_the_hashed_columns_renumbered(monkeypatch, index_dtype):
    """The sample: A's entries in the columns whose Fibonacci hash falls under the threshold,
    in their rows, each column numbered among the sampled ones; the used B rows counted on
    those columns and scaled like the fetches."""
    monkeypatch.setattr(locality, "MODEL_ENTRIES", 2000)
    A = sp.random(3000, 5000, density=0.002, format="csr", random_state=3)
    A.indptr, A.indices = A.indptr.astype(index_dtype), A.indices.astype(index_dtype)
    sample = locality.FetchSample(A, held=100_000)
    assert 0 < sample.rate < 1
    threshold = np.uint64(round(sample.rate * 2**24))
    hashed = (np.arange(5000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40) < threshold
    number = np.cumsum(hashed) - 1
    kept = hashed[A.indices]
    assert sample.n_cols == hashed.sum()
    per_row = [kept[a:b].sum() for a, b in zip(A.indptr[:-1], A.indptr[1:])]
    assert np.array_equal(sample.indptr, np.concatenate([[0], np.cumsum(per_row)]))
    assert np.array_equal(sample.indices, number[A.indices[kept]])
    assert sample.used_columns == round(np.unique(A.indices[kept]).size / sample.rate)


def test_b_within_l2_keeps_the_order():
    A = graphs.shuffled(band_graph(3000, 10))
    method, perm, record = locality.choose_order(A, 8, 4, l2_bytes=1 << 20, bandwidth=1e9)
    assert method is None and perm is None and "fits in L2" in record["why"]


def test_an_order_is_taken_where_it_pays_back_and_only_there():
    band = band_graph(3000, 10)
    shuffled = graphs.shuffled(band)
    # 32-byte rows of B through a 2 KiB L2 (64 rows): the band's own order fetches each row about
    # once, a shuffled copy almost every time; slow memory makes the saving pay back at once
    slow = dict(l2_bytes=2048, bandwidth=1e9)
    method, perm, record = locality.choose_order(shuffled, 8, 4, **slow)
    assert method == "bfs" and sorted(perm) == list(range(3000))
    assert record[method]["fetches"] < record["natural_fetches"] / 3 and record[method]["payback_calls"] <= 100
    assert locality.choose_order(band, 8, 4, **slow)[0] is None  # already in good order: nothing to save
    # on fast memory the same saving takes more than PAYBACK_CALLS calls to win back the time
    assert locality.choose_order(shuffled, 8, 4, l2_bytes=2048, bandwidth=1e15)[0] is None


def test_a_removed_fetch_counts_a_share_of_its_bytes():
    """Measured on the GPU, a fetch an order removes saves about half its time at peak
    bandwidth (the gathers are L2-bound too): the saving the decision weighs is that share."""
    shuffled = graphs.shuffled(band_graph(3000, 10))
    _, _, record = locality.choose_order(shuffled, 8, 4, l2_bytes=2048, bandwidth=1e9, permutes=False)
    fetched = record["natural_fetches"] - record["bfs"]["fetches"]
    assert record["bfs"]["saved_bytes_per_call"] == pytest.approx(locality.FETCH_SHARE * fetched * 32)
    assert 0 < locality.FETCH_SHARE < 1


def test_empty_graph_keeps_the_order():
    assert locality.choose_order(sp.csr_matrix((50, 50), dtype=np.float32), 8, 4, 64, 1e9)[0] is None


def test_no_order_is_computed_where_even_one_fetch_per_row_cannot_pay_the_permutations(monkeypatch):
    """The band's own order fetches each B row about twice through an L2 of 20 rows: the
    permutations' bytes exceed anything an order could save, so no candidate order is computed."""
    computed = []
    spy = (("rcm", lambda A: computed.append("rcm") or np.arange(A.shape[0])),)
    method, _, record = locality.choose_order(band_graph(3000, 10), 8, 4, l2_bytes=640, bandwidth=1e9,
                                              candidates=spy)
    assert method is None and computed == [] and "per-call permutations" in record["why"]


def test_without_per_call_permutations_the_orders_are_computed_while_the_natural_order_is_predicted():
    """With the caller's features in the plan's order nothing rules an order out before the
    natural order's prediction, so the orders are computed meanwhile (on another core) and
    charged even where that prediction then says nothing can be saved (the band through an L2 of
    64 rows fetches each B row once)."""
    computed = []
    spy = (("rcm", lambda A: computed.append("rcm") or np.arange(A.shape[0])),)
    method, _, record = locality.choose_order(band_graph(3000, 10), 8, 4, l2_bytes=2048, bandwidth=1e9,
                                              candidates=spy, permutes=False)
    assert method is None and computed == ["rcm"] and "fetches each B row once" in record["why"]
    assert record["rcm"]["fetches"] is None and record["rcm"]["seconds"] > 0


def test_an_order_too_slow_to_pay_back_even_at_one_fetch_per_row_is_not_predicted(monkeypatch):
    """An order whose computing time exceeds PAYBACK_CALLS calls' best possible saving (each B row
    fetched once) is not run through the fetch model, which costs seconds on large graphs."""
    shuffled = graphs.shuffled(band_graph(3000, 10))
    slow = dict(l2_bytes=2048, bandwidth=1e9)
    predicted = []
    real = locality.predicted_fetches
    monkeypatch.setattr(locality, "predicted_fetches", lambda *a: predicted.append(1) or real(*a))
    perm = np.arange(3000)
    method, _, record = locality.choose_order(shuffled, 8, 4, **slow, candidates=(("rcm", None),),
                                              computed={"rcm": (perm, 1e6, None)})  # a million seconds to compute
    assert method is None and len(predicted) == 1  # the natural order's prediction only
    assert record["rcm"]["fetches"] is None and record["rcm"]["payback_calls"] == float("inf")
    predicted.clear()
    method, _, record = locality.choose_order(shuffled, 8, 4, **slow, candidates=(("rcm", None),),
                                              computed={"rcm": (perm, 0.0, None)})
    assert len(predicted) == 2 and record["rcm"]["fetches"] is not None


def test_an_order_that_could_pay_is_charged_the_time_to_permute_the_graph_by_it():
    """A reordered plan permutes A by the order: that time counts against the saving too; the
    order taken keeps its permuted matrix for the plan (not made twice), one not taken none."""
    shuffled = graphs.shuffled(band_graph(3000, 10), seed=0)
    restore = np.argsort(np.random.default_rng(0).permutation(3000))  # back to the band order
    computed = {"rcm": (restore, 0.0, None), "degree": (np.arange(3000), 0.0, None)}
    method, _, record = locality.choose_order(shuffled, 8, 4, l2_bytes=2048, bandwidth=1e9,
                                              candidates=(("rcm", None), ("degree", None)), computed=computed)
    perm, seconds, matrix = computed["rcm"]
    assert method == "rcm" and seconds > 0 and record["rcm"]["seconds"] == seconds
    expected = shuffled[perm][:, perm]
    assert (matrix != expected).nnz == 0 and np.array_equal(matrix.data, shuffled.data[entry_order(shuffled, perm)])
    assert computed["degree"][2] is None  # (the identity saves nothing: never permuted)


_FRESH_PROCESS = """
import numpy as np, scipy.sparse as sp
from numbasparse import graphs
from numbasparse.reorder import locality
offsets = [k for k in range(-10, 11) if k]
band = sp.diags([np.ones(3000 - abs(k), np.float32) for k in offsets], offsets, format="csr")
A = graphs.shuffled(band)
A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
method, _, record = locality.choose_order(A, 8, 4, l2_bytes=2048, bandwidth=1e9, permutes=False)
print(method, record["bfs"]["seconds"])
"""


def test_a_fresh_process_is_not_charged_the_compiler_for_an_int64_graphs_order(tmp_path):
    """With nothing compiled yet (an empty Numba cache), the order's time is its own: the passes
    are compiled for A's index dtypes before the clock starts, so ``auto`` still takes it."""
    out = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr[-2000:]
    method, seconds = out.stdout.split()[-2:]
    assert method == "bfs" and float(seconds) < 0.05, out.stdout
