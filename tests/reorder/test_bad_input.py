"""Hostile input to the reorderings: refused with errors naming the argument, never a hang, never
a change to the caller's arrays.

The cases that used to hang inside njit code (which Ctrl-C cannot stop) run in one subprocess
with a timeout, so that a regression fails the test instead of blocking the run."""
import inspect
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import numbasparse as ns
from numbasparse.reorder import cluster_order, loa, louvain, mean_intensity, modularity, permute, row_window_stats

loa_module = sys.modules["numbasparse.reorder.loa"]
louvain_module = sys.modules["numbasparse.reorder.louvain"]

ROOT = Path(__file__).parents[2]
TIMEOUT = 60


def small_graph():
    """Two triangles joined by one edge, unit weights, symmetric."""
    edges = [(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5), (2, 3)]
    r, c = zip(*edges)
    A = sp.coo_matrix((np.ones(len(edges)), (r, c)), shape=(6, 6))
    return sp.csr_matrix(A + A.T)


def with_entry(A, i, j, value):
    """A copy of CSR ``A`` with the stored entry (i, j) set to ``value`` (only that entry)."""
    A = A.copy()
    p = A.indptr[i] + np.flatnonzero(A.indices[A.indptr[i]:A.indptr[i + 1]] == j)[0]
    A.data[p] = value
    return A


def explicit_zeros():
    """Triangle 0-1-2 and edge 3-4 (unit weights), and explicit zeros 0-3, 1-3, 2-3."""
    rows = {0: {1: 1, 2: 1, 3: 0}, 1: {0: 1, 2: 1, 3: 0}, 2: {0: 1, 1: 1, 3: 0}, 3: {0: 0, 1: 0, 2: 0, 4: 1}, 4: {3: 1}}
    indptr, indices, weights = [0], [], []
    for i in range(5):
        for j in sorted(rows[i]):
            indices.append(j)
            weights.append(float(rows[i][j]))
        indptr.append(len(indices))
    return sp.csr_matrix((np.array(weights), np.array(indices), np.array(indptr)), shape=(5, 5))


def corrupt(fmt):
    """small_graph() in format ``fmt`` with index 3 moved past the matrix (1000000)."""
    A = small_graph().asformat(fmt)
    A.indices[3] = 10**6
    return A


def unsorted_with_duplicates():
    """A CSR matrix that is not canonical: row 0 unsorted, row 1 holds (1, 0) twice."""
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    indices = np.array([2, 0, 0, 0, 2, 1], dtype=np.int32)
    indptr = np.array([0, 2, 4, 6], dtype=np.int32)
    A = sp.csr_matrix((data, indices, indptr), shape=(3, 3))
    assert not A.has_canonical_format
    return A


# ---- the cases that used to hang or crash: one subprocess, a line per finished case ----------

NON_FINITE_1_2 = r"^A has a non-finite weight at entry \(1, 2\)"
ISOLATED = {
    # name: (code evaluated with A = small_graph(), expected outcome)
    "louvain_nan_weight": ("louvain(with_entry(A, 1, 2, np.nan))", ("ValueError", NON_FINITE_1_2)),
    "louvain_inf_weight": ("louvain(with_entry(A, 1, 2, np.inf))", ("ValueError", NON_FINITE_1_2)),
    "louvain_minus_inf_weight": ("louvain(with_entry(A, 1, 2, -np.inf))", ("ValueError", NON_FINITE_1_2)),
    "louvain_duplicates_summing_past_float_max": (
        "louvain(sp.csr_matrix((np.array([1e308, 1e308]), np.array([1, 1]), np.array([0, 2, 2])), shape=(2, 2)))",
        ("ValueError", r"A has a non-finite weight .*duplicate.* at entry \(0, 1\)")),
    "louvain_resolution_nan": ("louvain(A, resolution=np.nan)", ("ValueError", "resolution must be finite and > 0")),
    "louvain_resolution_inf": ("louvain(A, resolution=np.inf)", ("ValueError", "resolution must be finite and > 0")),
    "louvain_resolution_zero": ("louvain(A, resolution=0.0)", ("ValueError", "resolution must be finite and > 0")),
    "louvain_resolution_negative": ("louvain(A, resolution=-1)", ("ValueError", "resolution must be finite and > 0")),
    "louvain_threshold_nan": ("louvain(A, threshold=np.nan)", ("ValueError", "threshold must be finite and >= 0")),
    "louvain_threshold_negative": ("louvain(A, threshold=-1)", ("ValueError", "threshold must be finite and >= 0")),
    "louvain_threshold_inf": ("louvain(A, threshold=np.inf)", ("ValueError", "threshold must be finite and >= 0")),
    "cluster_order_inf_weight": ("cluster_order(with_entry(A, 1, 2, np.inf))", ("ValueError", NON_FINITE_1_2)),
    "modularity_nan_weight": ("modularity(with_entry(A, 1, 2, np.nan), np.zeros(6, int))",
                              ("ValueError", NON_FINITE_1_2)),
    "prepare_louvain_nan_weight": ("ns.prepare(with_entry(A, 1, 2, np.nan), reorder='louvain', backend='cpu')",
                                   ("ValueError", "non-finite weight")),
    "prepare_louvain_threshold_negative": ("ns.prepare(A, reorder='louvain', backend='cpu', threshold=-1)",
                                           ("ValueError", "threshold must be finite and >= 0")),
    "prepare_loa_window_nan": ("ns.prepare(A, reorder='loa', backend='cpu', window=float('nan'))",
                               ("TypeError", "^window must be a positive integer")),
    # these return: the value printed is compared below
    "louvain_threshold_zero_terminates": ("louvain(A, threshold=0.0).tolist()", ("returns", [0, 0, 0, 1, 1, 1])),
    "louvain_1e308_weights_are_rescaled": ("louvain(A * 1e308).tolist()", ("returns", [0, 0, 0, 1, 1, 1])),
    "louvain_power_of_two_scaling_is_exact": (
        "bool(np.array_equal(louvain(A * 2.0**1000, seed=5), louvain(A, seed=5)))", ("returns", True)),
    "louvain_subnormal_weights_are_rescaled": ("louvain(A * 5e-324).tolist()", ("returns", [0, 0, 0, 1, 1, 1])),
    "louvain_huge_resolution_terminates": ("len(louvain(A, resolution=1e300))", ("returns", 6)),
    "modularity_1e308_weights_equal_unit_weights": (
        "modularity(A * 1e308, [0, 0, 0, 1, 1, 1]) == modularity(A, [0, 0, 0, 1, 1, 1])", ("returns", True)),
    # explicit zero weights: _aggregate wrote past its scratch array (memory corruption)
    "louvain_explicit_zero_weights": ("louvain(explicit_zeros(), seed=1).tolist()", ("returns", [0, 0, 0, 1, 1])),
}
# a column index past the matrix: LOA wrote out of bounds in njit code, scipy's CSC -> CSR
# conversion (louvain, permute, ...) segfaulted
for _func, _call in {"louvain": "louvain(B)", "modularity": "modularity(B, np.zeros(6, int))",
                     "cluster_order": "cluster_order(B)", "loa": "loa(B)", "permute": "permute(B, np.arange(6))",
                     "row_window_stats": "row_window_stats(B)", "mean_intensity": "mean_intensity(B)"}.items():
    for _fmt in ("csr", "csc"):
        ISOLATED[f"{_func}_corrupt_{_fmt}_index"] = (f"[B := corrupt({_fmt!r}), {_call}]",
                                                     ("ValueError", r"^A\.indices\[3\] = 1000000"))

_SCRIPT = """
import json, sys, warnings
import numpy as np, scipy.sparse as sp
warnings.simplefilter("ignore")
import numbasparse as ns
from numbasparse.reorder import cluster_order, loa, louvain, mean_intensity, modularity, permute, row_window_stats
{helpers}
A = small_graph()
for name, code in json.loads(sys.argv[1]).items():
    try:
        outcome = ["returns", eval(code)]
    except Exception as e:
        outcome = [type(e).__name__, str(e)]
    print(json.dumps([name, outcome]), flush=True)
"""


@pytest.fixture(scope="module")
def isolated_outcomes():
    """Run every ISOLATED case in one fresh interpreter, with a timeout; {name: outcome}."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cases = json.dumps({name: code for name, (code, _) in ISOLATED.items()})
    helpers = "".join(inspect.getsource(f) for f in (small_graph, with_entry, explicit_zeros, corrupt))
    script = _SCRIPT.format(helpers=helpers)
    try:
        proc = subprocess.run([sys.executable, "-c", script, cases], capture_output=True, text=True,
                              timeout=TIMEOUT * 2, env=env, cwd=ROOT)
        stdout, note = proc.stdout, f"exit code {proc.returncode}: {proc.stderr[-2000:]}"
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        note = f"timed out after {TIMEOUT * 2} s (a hang)"
    found = dict(json.loads(line) for line in stdout.splitlines() if line.startswith("["))
    return found, note


@pytest.mark.parametrize("name", sorted(ISOLATED))
def test_hostile_input_fails_fast_or_returns_in_a_subprocess(isolated_outcomes, name):
    found, note = isolated_outcomes
    assert name in found, f"{name} did not finish: {note}"
    kind, detail = found[name]
    expected_kind, expected = ISOLATED[name][1]
    if expected_kind == "returns":
        assert kind == "returns", f"{kind}: {detail}"
        assert detail == expected
    else:
        assert kind == expected_kind, f"{kind}: {detail}"
        assert re.search(expected, detail), detail


# ---- bounded loops, checked on the pure-Python bodies of the njit kernels ----------------------

def test_local_moving_stops_when_the_gain_is_nan():
    """A gain of -inf - -inf (products past the float range) made ``gained`` NaN, and
    ``NaN < threshold`` never ended the loop: local moving must stop on NaN."""
    # edges 0-1 and 2-3; node 0's degree inf (past what louvain() lets through) makes its gain
    # NaN - NaN, while node 2 still moves; threshold -1 never ends a pass by itself
    indptr = np.array([0, 1, 2, 3, 4], np.int64)
    indices = np.array([1, 0, 3, 2], np.int64)
    weights = np.ones(4)
    degree = np.array([np.inf, 1.0, 1.0, 1.0])
    with np.errstate(invalid="ignore"):
        labels, k, converged = louvain_module._local_moving.py_func(
            indptr, indices, weights, degree, np.arange(4), 1.0, 4.0, -1.0, 50)
    assert converged  # stopped by the NaN guard, not by the pass bound
    assert labels[2] == labels[3]


def test_local_moving_stops_after_max_passes():
    A = small_graph()
    degree = np.asarray(A.sum(axis=1)).ravel()
    args = (A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data, degree, np.arange(6), 1.0, A.data.sum(), 0.0)
    _, _, converged = louvain_module._local_moving.py_func(*args, 1)
    assert not converged  # the first pass moves nodes: one pass is not enough
    _, _, converged = louvain_module._local_moving.py_func(*args, louvain_module.MAX_PASSES)
    assert converged


def test_louvain_warns_when_it_reaches_max_passes(monkeypatch):
    monkeypatch.setattr(louvain_module, "MAX_PASSES", 1)
    with pytest.warns(RuntimeWarning, match="MAX_PASSES"):
        labels = louvain(small_graph(), seed=0)
    assert labels.shape == (6,)


def test_louvain_warns_when_it_reaches_max_levels(monkeypatch):
    monkeypatch.setattr(louvain_module, "MAX_LEVELS", 1)  # the first level merges: a second was due
    with pytest.warns(RuntimeWarning, match="MAX_LEVELS"):
        labels = louvain(small_graph(), seed=0)
    assert labels.tolist() == [0, 0, 0, 1, 1, 1]


def test_loop_bounds_are_named_positive_constants():
    for name in ("MAX_PASSES", "MAX_LEVELS"):
        value = getattr(louvain_module, name)
        assert isinstance(value, int) and value > 0


def test_aggregate_with_explicit_zero_weights_stays_in_bounds():
    """``acc[d] == 0`` marked "not yet seen": explicit zero weights added d again and again,
    writing past ``touched`` (size k) -- out of bounds in njit code.  py_func is bounds-checked."""
    A = explicit_zeros()
    out_ptr, out_idx, out_w = louvain_module._aggregate.py_func(
        A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data, np.array([0, 0, 0, 1, 1]), 2)
    assert out_ptr.tolist() == [0, 2, 4]
    assert out_idx.tolist() == [0, 1, 0, 1]  # canonical: one entry per (community, community)
    assert out_w.tolist() == [6.0, 0.0, 0.0, 2.0]


def test_loa_scan_terminates_for_any_order():
    """``while visited[order[head]]`` relied on ``order`` being a permutation; the scan is bounded."""
    A = small_graph()
    T = sp.csr_matrix(A.T)
    args = [a.astype(np.int64) for a in (A.indptr, A.indices, T.indptr, T.indices)]
    perm = loa_module._loa.py_func(*args, np.zeros(6, np.int64), 2, 4)  # not a permutation
    assert perm.shape == (6,)
    perm = loa_module._loa.py_func(*args, np.arange(6, dtype=np.int64), 2, 4)
    assert sorted(perm) == list(range(6))


# ---- the caller's arrays are never modified --------------------------------------------------

def _arrays(A):
    names = {"csr": ("indptr", "indices", "data"), "csc": ("indptr", "indices", "data"),
             "coo": ("row", "col", "data"), "lil": (), "dok": ()}[A.format]
    return {n: getattr(A, n) for n in names}


def _snapshot(A):
    snap = {n: (a.dtype, a.shape, a.tobytes()) for n, a in _arrays(A).items()}
    snap["dense"] = A.toarray().tobytes()
    return snap


def _inputs():
    A = unsorted_with_duplicates()
    coo = A.tocoo()
    coo_dup = sp.coo_matrix((np.r_[coo.data, 1.5], (np.r_[coo.row, 2], np.r_[coo.col, 2])), shape=(3, 3))
    return {"csr_unsorted_duplicates": A,
            "csr_array": sp.csr_array(A),
            "csc": sp.csc_matrix(unsorted_with_duplicates().T),
            "coo_duplicates": coo_dup,
            "csr_int64_values": sp.csr_matrix((np.arange(1, 7), A.indices, A.indptr), shape=(3, 3)),
            "csr_float32": A.astype(np.float32),
            "csr_int64_indices": sp.csr_matrix((A.data, A.indices.astype(np.int64), A.indptr.astype(np.int64)),
                                               shape=(3, 3))}


CALLS = {
    "louvain": lambda A: louvain(A),
    "modularity": lambda A: modularity(A, np.array([0, 0, 1])),
    "cluster_order": lambda A: cluster_order(A),
    "loa": lambda A: loa(A, window=2, vertex_window=2),
    "permute": lambda A: permute(A, np.array([2, 0, 1])),
    "row_window_stats": lambda A: row_window_stats(A, window=2),
    "mean_intensity": lambda A: mean_intensity(A, window=2),
}


@pytest.mark.parametrize("kind", sorted(_inputs()))
@pytest.mark.parametrize("call", sorted(CALLS))
def test_reorder_functions_leave_the_callers_matrix_byte_identical(call, kind):
    A = _inputs()[kind]
    before = _snapshot(A)
    CALLS[call](A)
    after = _snapshot(A)
    assert after.keys() == before.keys()
    for name in before:
        assert after[name] == before[name], f"{call} changed A.{name}"


def test_loa_and_permute_leave_perm_and_labels_untouched():
    A = small_graph()
    perm = np.array([5, 4, 3, 2, 1, 0], dtype=np.int64)
    labels = np.array([0, 0, 0, 1, 1, 1])
    permute(A, perm)
    modularity(A, labels)
    assert perm.tolist() == [5, 4, 3, 2, 1, 0] and labels.tolist() == [0, 0, 0, 1, 1, 1]


def test_results_do_not_depend_on_index_order_or_duplicates():
    A = unsorted_with_duplicates()
    canonical = A.copy()
    canonical.sum_duplicates()
    assert np.array_equal(loa(A, window=2, vertex_window=2), loa(canonical, window=2, vertex_window=2))
    assert np.array_equal(louvain(A), louvain(canonical))
    assert (permute(A, [2, 0, 1]) != permute(canonical, [2, 0, 1])).nnz == 0
    for a, b in zip(row_window_stats(A, 2), row_window_stats(canonical, 2)):
        assert np.array_equal(a, b)


# ---- non-finite and negative weights, non-square and non-sparse A ----------------------------

ALL_FUNCTIONS = {
    "louvain": lambda A: louvain(A),
    "modularity": lambda A: modularity(A, np.zeros(6, int)),
    "cluster_order": lambda A: cluster_order(A),
    "loa": lambda A: loa(A),
    "permute": lambda A: permute(A, np.arange(6)),
    "row_window_stats": lambda A: row_window_stats(A),
    "mean_intensity": lambda A: mean_intensity(A),
}
SQUARE_ONLY = ["louvain", "modularity", "cluster_order", "loa", "permute"]


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("func", sorted(set(ALL_FUNCTIONS) - {"louvain", "modularity", "cluster_order"}))
def test_non_finite_weights_are_refused_naming_the_entry(func, value):
    # louvain, modularity and cluster_order: in the subprocess above (they used to hang)
    A = with_entry(small_graph(), 1, 2, value)
    with pytest.raises(ValueError, match=r"A has a non-finite weight at entry \(1, 2\)"):
        ALL_FUNCTIONS[func](A)


@pytest.mark.parametrize("func", ["louvain", "modularity", "cluster_order"])
def test_negative_weights_are_refused_where_weights_count(func):
    A = with_entry(small_graph(), 4, 5, -2.0)
    with pytest.raises(ValueError, match=r"A must have non-negative weights: entry \(4, 5\) is -2.0"):
        ALL_FUNCTIONS[func](A)


@pytest.mark.parametrize("func", ["loa", "permute", "row_window_stats", "mean_intensity"])
def test_negative_weights_are_accepted_where_only_the_pattern_counts(func):
    """LOA, permute and the window statistics use the pattern only: signed matrices (Laplacians)
    keep working, as they do for ``prepare(A, reorder="loa")``."""
    A = small_graph()
    signed = A.copy()
    signed.data = -signed.data
    result, expected = ALL_FUNCTIONS[func](signed), ALL_FUNCTIONS[func](A)
    if func == "permute":
        assert (result + expected).nnz == 0
    else:
        for a, b in zip(np.atleast_1d(result), np.atleast_1d(expected)):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("func", sorted(ALL_FUNCTIONS))
@pytest.mark.parametrize("A", [np.eye(3), [[0, 1], [1, 0]], None, "A"], ids=["ndarray", "list", "None", "str"])
def test_non_sparse_A_is_refused_naming_A(func, A):
    with pytest.raises(TypeError, match=r"^A must be a scipy\.sparse"):
        ALL_FUNCTIONS[func](A)


@pytest.mark.parametrize("func", SQUARE_ONLY)
def test_non_square_A_is_refused_naming_A(func):
    with pytest.raises(ValueError, match=r"^A must be a square scipy\.sparse matrix, got shape 3x4"):
        ALL_FUNCTIONS[func](sp.random(3, 4, density=0.5, format="csr", random_state=0))


def test_row_window_stats_accepts_non_square_A():
    nnz, columns, intensity = row_window_stats(sp.csr_matrix(np.array([[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 1, 1]])), 2)
    assert nnz.tolist() == [4, 4] and columns.tolist() == [3, 4]


@pytest.mark.parametrize("func", sorted(ALL_FUNCTIONS))
def test_complex_A_is_refused(func):
    with pytest.raises(TypeError, match="A must have real numeric weights"):
        ALL_FUNCTIONS[func](sp.csr_matrix(np.eye(3) * (1 + 1j)))


# ---- the scalar arguments ----------------------------------------------------------------------

WINDOW_ARGS = {
    "loa.window": lambda v: loa(small_graph(), window=v),
    "loa.vertex_window": lambda v: loa(small_graph(), vertex_window=v),
    "row_window_stats.window": lambda v: row_window_stats(small_graph(), window=v),
    "mean_intensity.window": lambda v: mean_intensity(small_graph(), window=v),
    "prepare.window": lambda v: ns.prepare(small_graph(), reorder="loa", backend="cpu", window=v).perm,
}


@pytest.mark.parametrize("value", [2.5, 2.0, float("nan"), float("inf"), True, np.True_, "4", None, 1 + 0j],
                         ids=repr)
@pytest.mark.parametrize("where", sorted(WINDOW_ARGS))
def test_window_arguments_must_be_integers(where, value):
    name = where.split(".")[1]
    with pytest.raises(TypeError, match=f"^{name} must be a positive integer"):
        WINDOW_ARGS[where](value)


@pytest.mark.parametrize("value", [0, -3, np.int64(0)], ids=repr)
@pytest.mark.parametrize("where", sorted(WINDOW_ARGS))
def test_window_arguments_must_be_positive(where, value):
    name = where.split(".")[1]
    with pytest.raises(ValueError, match=f"^{name} must be a positive integer"):
        WINDOW_ARGS[where](value)


@pytest.mark.parametrize("where", sorted(WINDOW_ARGS))
def test_window_arguments_accept_numpy_integers_and_huge_values(where):
    expected = WINDOW_ARGS[where](3)
    for value in (np.int64(3), np.int32(3), np.uint8(3)):
        assert np.array_equal(np.asarray(WINDOW_ARGS[where](value), dtype=object), np.asarray(expected, dtype=object))
    # more than the rows behaves as the rows, without overflowing int64 on the way
    huge, rows = WINDOW_ARGS[where](2**70), WINDOW_ARGS[where](6)
    assert np.array_equal(np.asarray(huge, dtype=object), np.asarray(rows, dtype=object))


@pytest.mark.parametrize("value, error", [(1.5, TypeError), ("0", TypeError), (True, TypeError), (-1, ValueError)],
                         ids=repr)
def test_seed_must_be_a_non_negative_int_or_none(value, error):
    with pytest.raises(error, match="^seed must be"):
        louvain(small_graph(), seed=value)


def test_seed_accepts_numpy_integers_and_none():
    A = small_graph()
    assert np.array_equal(louvain(A, seed=np.int64(3)), louvain(A, seed=3))
    assert louvain(A, seed=None).shape == (6,)


@pytest.mark.parametrize("argument", ["resolution", "threshold"])
@pytest.mark.parametrize("value", ["1", None, True, 1j], ids=repr)
def test_resolution_and_threshold_must_be_real_numbers(argument, value):
    with pytest.raises(TypeError, match=f"^{argument} must be a real number"):
        louvain(small_graph(), **{argument: value})


def test_modularity_checks_resolution_and_labels():
    A = small_graph()
    with pytest.raises(ValueError, match="resolution"):
        modularity(A, np.zeros(6, int), resolution=np.nan)
    with pytest.raises(TypeError, match="labels must be integers"):
        modularity(A, np.zeros(6))
    with pytest.raises(ValueError, match="labels must be non-negative"):
        modularity(A, -np.ones(6, int))
    # huge label values are relabelled, not given to bincount (which would allocate 2**62 bins)
    labels = np.array([0, 0, 0, 2**62, 2**62, 2**62])
    assert modularity(A, labels) == modularity(A, [0, 0, 0, 1, 1, 1])


def test_valid_results_are_unchanged_by_the_checks():
    """Pinned outputs on a fixed graph (computed before the hardening)."""
    A = small_graph()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no MAX_PASSES / MAX_LEVELS warning on a normal graph
        assert louvain(A, seed=0).tolist() == [0, 0, 0, 1, 1, 1]
        assert modularity(A, [0, 0, 0, 1, 1, 1]) == pytest.approx(5 / 14 - 0.0)
    assert sorted(loa(A, window=2)) == list(range(6))
