"""Fuzz test of the public API (the hardening issue): random shapes, dtypes, layouts, broken
sparse structure and wrong option values, on the CPU backend and, for a few tiny cases, on CUDA
(the simulator when there is no GPU).

Every example is a *recipe* of plain values drawn by hypothesis; its builder (``BUILDERS``) turns
it into the call's arguments, and :func:`check` asserts:

* the call either returns a result equal to a float64 reference computed here from the raw
  input arrays (not through numbasparse's own conversion), or raises ValueError/TypeError;
  any other exception (IndexError, AttributeError, a numba TypingError, ...) is a failure;
* invalid input (broken structure, wrong dtype/shape/option) is refused, and clearly valid input
  (see :class:`Verdict`) is accepted: where the contract is unclear either outcome passes, but a
  result must still be correct;
* the caller's arrays (sparse structure, dense operands, ``out`` unless the call succeeded,
  mutable option values) are byte-identical afterwards, with the same dtype, strides and flags.

Examples that may crash the process (corrupted index arrays that could reach native code, an
``out`` aliasing A's index arrays) run in a worker subprocess (:class:`Worker`, one for the
module, restarted after a crash), which must answer: dying (a signal, or any exit) or hanging is
a failure.  ``NUMBASPARSE_FUZZ_EXAMPLES`` (default 60) and ``NUMBASPARSE_FUZZ_CUDA_EXAMPLES``
(default 12) set the number of examples per test (about 15 s for the file on 2 cores).

A failing example prints its recipe; ``check(recipe)`` (this module imported from tests/)
replays it.  The triggers of bugs it found (now fixed) are forced in regression tests at the end
of the file.
"""
import base64
import importlib.util
import copy
import os
import pickle
import selectors
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, Phase, assume, event, given, settings
from hypothesis import strategies as st

import numbasparse as ns
from numbasparse.cuda.device import gpu_present, simulator_enabled
from numbasparse.reference import relative_error
from strategies import TOLERANCE

EXAMPLES = int(os.environ.get("NUMBASPARSE_FUZZ_EXAMPLES", "60"))
CUDA_EXAMPLES = int(os.environ.get("NUMBASPARSE_FUZZ_CUDA_EXAMPLES", "12"))
HAVE_CUDA = gpu_present() or simulator_enabled()
HAVE_TORCH = importlib.util.find_spec("torch") is not None  # (torch operands only where it is installed)
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA GPU and the simulator is off")
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
fuzz_cuda = settings(max_examples=CUDA_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

OK, EITHER, RAISE = 0, 1, 2  # what the call must do: succeed / succeed correctly or refuse / refuse
REDUCTIONS = ("sum", "mean", "max", "min")
BACKENDS = ("auto", "cuda", "cpu")


def _algorithms(op, backend):
    try:
        return ns.dispatch.algorithms(op, backend)
    except Exception:  # an older dispatch without the backend filter
        table = ns.dispatch.TABLES[op]
        return tuple(name for name, a in table.items() if a.backend == backend)


CPU_SPMM, CUDA_SPMM = _algorithms("spmm", "cpu"), _algorithms("spmm", "cuda")
CPU_SDDMM, CUDA_SDDMM = _algorithms("sddmm", "cpu"), _algorithms("sddmm", "cuda")

# ---- option values --------------------------------------------------------------------------------
BAD_OPTIONS = ["", "SUM", "Sum", "sum ", "avg", "CPU", "Auto", "gpu", "cuda:0", "hp ", None, 0, 1, 2.5, True,
               b"sum", b"cpu", ["sum"], ["cpu"], ("auto",), {"sum": 1}, float("nan")]
BAD_ALGORITHMS = ["", "AUTO", "Auto", "rows", "cpu", "HP", "hp ", None, 0, b"auto", ["auto"], ("cpu_rows",), 1.0]
BAD_BACKENDS = ["", "CPU", "Cuda", "gpu", "host", "cuda:0", "cpu ", None, 0, 1, b"cpu", ["cpu"], ("auto",), False]
BAD_FUSED = ["no", "", None, 0, 1, 2, [], [False], np.bool_(False)]
VALID_DTYPE_OPTIONS = [None, "float32", "float64", np.float32, np.float64, "f4", "f8", float, np.dtype("float32")]
BAD_DTYPE_OPTIONS = ["int32", int, bool, "bogus", "", 5, ["float32"], object, complex, "c8"]
VALID_INDEX_OPTIONS = [None, np.int32, np.int64, "int32", "int64", "i4", np.dtype("int64")]
BAD_INDEX_OPTIONS = ["int16", np.uint32, np.float64, "uint64", "bogus", 7, ["int32"], object, bool, "float32"]


def option_level(value, valid):
    """OK for one of the ``valid`` strings, EITHER for an equal str subclass (np.str_), else RAISE."""
    if type(value) is str and value in valid:
        return OK
    if isinstance(value, str) and str(value) in valid:
        return EITHER
    return RAISE


# ---- regressions ----------------------------------------------------------------------------------
# The fuzz tests found these bugs (now fixed); each trigger is forced in a test at the end of the
# file.  A new bug's trigger may be listed in KNOWN_BUGS (left out of the fuzz tests) with an xfail
# test until it is fixed.

KNOWN_BUGS = {}


# ---- verdicts and cases ---------------------------------------------------------------------------

class Verdict:
    """What the call must do: the strictest need of its arguments (RAISE > EITHER > OK)."""

    def __init__(self):
        self.level, self.why = OK, []

    def need(self, level, why):
        if level > OK:
            self.why.append(("either: " if level == EITHER else "invalid: ") + why)
        self.level = max(self.level, level)


@dataclass
class Case:
    call: object                         # () -> result
    verdict: Verdict
    check: object = None                 # (result) -> None, asserts the result; only if not RAISE
    watched: list = field(default_factory=list)  # (name, object) that must be unchanged
    written: tuple = ()                  # objects the call may write when it succeeds (out, aliases)
    note: str = ""                        # where the call runs (statistics)


# ---- sparse operand -------------------------------------------------------------------------------

A_VALUE_DTYPES = ["float64"] * 4 + ["float32"] * 3 + ["float16", "int8", "int16", "int32", "int64", "uint8", "uint64",
                                                     "bool", "longdouble", ">f8", ">f4", ">i4"]
INDEX_DTYPES = ["int32", "int32", "int64", "int64", "int16", "int8", "uint8", "uint16", "uint32", "uint64",
                ">i4", ">i8", ">u4"]
CORRUPTIONS = ["index_high", "index_negative", "index_huge", "indptr0", "indptr_decreasing", "indptr_short",
               "indptr_long", "indptr_last", "data_short", "float_indices", "coo_row"]


def pick(draw, good, bad, percent_bad):
    """A value from ``good``, or ``percent_bad`` % of the time from ``bad``.  (The bad range
    is inside 0..99: hypothesis favours the ends, and shrinks to 0, a good value.)"""
    return draw(st.sampled_from(bad if 40 <= draw(st.integers(0, 99)) < 40 + percent_bad else good))


@st.composite
def sparse_recipes(draw, tiny=False, corrupt=True, square=False):
    r = {"seed": draw(st.integers(0, 2**32 - 1))}
    r["kind"] = pick(draw, ["scipy"] * 6 + ["csr_object", "other_format"], ["not_sparse"], 2)
    top = 4 if tiny else 7
    r["m"] = draw(st.integers(0, top))
    if square and pick(draw, [True], [False], 10):
        r["n"] = r["m"]
    else:
        r["n"] = draw(st.integers(0, top) | st.sampled_from([5] if tiny else [33, 40]))  # > 32: a heavy row
    r["density"] = draw(st.sampled_from([0.0, 0.2, 0.5, 0.9]))
    r["heavy"] = draw(st.booleans())
    r["empty_rows"] = draw(st.booleans())
    r["dups"] = draw(st.sampled_from([0, 0, 0, 1, 3]))
    r["unsorted"] = draw(st.booleans())
    r["values"] = pick(draw, A_VALUE_DTYPES, ["complex128", "complex64"], 2)
    r["special"] = draw(st.sampled_from(["none"] * 8 + ["nan", "inf", "-inf"]))
    r["fmt"] = draw(st.sampled_from(["csr", "csr", "csc", "coo"] if r["kind"] == "scipy" else
                                    ["lil", "dok", "dia", "bsr"]))
    r["cls"] = draw(st.sampled_from(["matrix", "array"]))
    r["ptr_dtype"], r["idx_dtype"] = draw(st.sampled_from(INDEX_DTYPES)), draw(st.sampled_from(INDEX_DTYPES))
    if draw(st.booleans()):
        r["idx_dtype"] = r["ptr_dtype"]
    r["trailing"] = draw(st.sampled_from([0, 0, 0, 0, 1, 2]))
    roll = draw(st.integers(0, 99))
    r["mutation"] = "none"
    if r["kind"] == "scipy" and corrupt and 40 <= roll < 55:
        r["mutation"] = draw(st.sampled_from(CORRUPTIONS))
    elif r["kind"] == "scipy" and 55 <= roll < 65:
        r["mutation"] = draw(st.sampled_from(["stale_unsort", "stale_dup"]))
    r["warm"] = draw(st.booleans())  # corrupt after a first (valid) call rather than before the call
    r["csr_dtype"] = draw(st.sampled_from(["float32", "float64"]))
    r["not_sparse"] = draw(st.sampled_from(["dense", "none", "list", "sparse_1d", "sparse_3d", "string"]))
    return r


def is_crashy(recipe):
    """True for the recipes run in the worker: corrupted structure, out aliasing an index array."""
    def walk(x):
        if isinstance(x, dict):
            if x.get("mutation") in CORRUPTIONS and x.get("kind") == "scipy":
                return True
            if x.get("out") == "alias_indices":
                return True
            return any(walk(v) for v in x.values())
        return False
    return walk(recipe)


def _values(rng, size, dtype, special="none", offset=0.1):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        v = rng.standard_normal(size) + offset
    elif dt.kind == "c":
        v = rng.standard_normal(size) + 1j * rng.standard_normal(size)
    elif dt.kind == "b":
        v = rng.random(size) < 0.8
    elif dt.kind == "u":
        v = rng.integers(0, 10, size)
    else:
        v = rng.integers(-100, 101, size) if dt.itemsize == 1 else rng.integers(-5, 10, size)
    v = np.asarray(v).astype(dt)
    if special != "none" and dt.kind in "fc" and v.size:
        v.reshape(-1)[rng.integers(v.size)] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[special]
    return v


def _index_dtype(name, need):
    """``name`` if it holds values up to ``need``, else int32."""
    dt = np.dtype(name)
    return dt if np.iinfo(dt).max >= need else np.dtype(np.int32)


@dataclass
class Sparse:
    A: object
    shape: tuple = None          # (M, N) when A has a 2-D shape
    entries: tuple = None        # (rows, cols, values) of the stored entries, for the reference
    chain: tuple = ()            # dtypes the values pass through before the operands' dtype
    dtype: object = None         # the CSR object's dtype
    corrupt: object = None       # () -> None: breaks A (in place or by attribute)


def _raw_entries(A, fmt):
    """(rows, cols, values) of the entries a valid csr/csc/coo A stores (scipy's semantics: only
    indices[:indptr[-1]] count), read from the raw arrays."""
    if fmt == "coo":
        coords = getattr(A, "coords", None) or (A.row, A.col)
        return np.asarray(coords[0], np.int64), np.asarray(coords[1], np.int64), np.asarray(A.data)
    indptr = np.asarray(A.indptr).astype(np.int64)
    nnz = int(indptr[-1])
    major = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    minor = np.asarray(A.indices[:nnz]).astype(np.int64)
    values = np.asarray(A.data[:nnz])
    return (major, minor, values) if fmt == "csr" else (minor, major, values)


def build_sparse(r, v):
    """The sparse operand of recipe ``r``; records in verdict ``v`` whether it is valid."""
    rng = np.random.default_rng(r["seed"])
    m, n = r["m"], r["n"]
    kind = r["kind"]
    if kind == "not_sparse":
        what = r["not_sparse"]
        v.need(RAISE, f"A is {what}")
        if what == "dense":
            return Sparse(np.ones((m, n)))
        if what == "list":
            return Sparse([[1.0] * n for _ in range(m)])
        if what == "string":
            return Sparse("A")
        if what == "sparse_1d":
            return Sparse(sp.coo_array(np.ones(max(n, 1))))
        if what == "sparse_3d":
            return Sparse(sp.coo_array(np.ones((1, max(m, 1), max(n, 1)))))
        return Sparse(None)

    mask = rng.random((m, n)) < r["density"]
    if r["heavy"] and m and n:
        mask[rng.integers(m)] = rng.random(n) < 0.9
    if r["empty_rows"] and m:
        mask[rng.random(m) < 0.3] = False
    rows, cols = np.nonzero(mask)
    value_dtype = np.dtype(r["values"])
    if kind != "scipy":  # the other formats and CSR objects: canonical input, values scipy supports
        value_dtype = np.dtype(np.float64) if value_dtype.kind == "c" or value_dtype == np.float16 \
            else value_dtype.newbyteorder("=")
    vals = _values(rng, rows.size, value_dtype, r["special"])
    if value_dtype.kind == "c":
        v.need(RAISE, f"A has {value_dtype} values")
    if value_dtype == np.float16:
        v.need(EITHER, "A has float16 values (scipy.sparse does not support them)")

    if kind in ("csr_object", "other_format"):
        base = sp.csr_matrix((vals, cols.astype(np.int32), np.concatenate([[0], np.cumsum(mask.sum(1))])
                              .astype(np.int32)), shape=(m, n)) if m else sp.csr_matrix((0, n), dtype=value_dtype)
        if kind == "csr_object":
            A = ns.CSR.from_scipy(base, dtype=r["csr_dtype"])
            return Sparse(A, (m, n), _raw_entries(base, "csr"), (np.dtype(r["csr_dtype"]),), A.dtype)
        fmt = r["fmt"]
        if fmt == "bsr":
            rb = next(d for d in (2, 1) if m % d == 0) if m else 1
            cb = next(d for d in (3, 1) if n % d == 0) if n else 1
            A = base.tobsr(blocksize=(rb, cb))
        else:
            A = base.asformat(fmt)
        if r["cls"] == "array":
            A = {"lil": sp.lil_array, "dok": sp.dok_array, "dia": sp.dia_array, "bsr": sp.bsr_array}[fmt](A)
        return Sparse(A, (m, n), _raw_entries(A.tocsr(), "csr"))

    # scipy csr/csc/coo built from raw arrays, with duplicates, unsorted indices, any index dtype
    if r["dups"] and rows.size:
        pick = rng.integers(rows.size, size=r["dups"])
        rows, cols = np.append(rows, rows[pick]), np.append(cols, cols[pick])
        vals = np.append(vals, _values(rng, pick.size, value_dtype)).astype(value_dtype)  # (append: native order)
    fmt = r["fmt"]
    stale = r["mutation"].startswith("stale")
    if stale:  # a canonical matrix with native indices, whose scipy flags get cached below
        rows, cols, vals = rows[:mask.sum()], cols[:mask.sum()], vals[:mask.sum()]
    major, minor, n_major = (rows, cols, m) if fmt != "csc" else (cols, rows, n)
    tiebreak = rng.random(major.size) if r["unsorted"] and not stale else minor
    order = np.lexsort((tiebreak, major))
    major, minor, vals = major[order], minor[order], vals[order]
    matrix = r["cls"] == "matrix"
    if fmt == "coo":
        need = max(m, n, 1) + 1
        A = (sp.coo_matrix if matrix else sp.coo_array)((m, n))
        A.coords = (major.astype(_index_dtype("int32" if stale else r["ptr_dtype"], need)),
                    minor.astype(_index_dtype("int32" if stale else r["idx_dtype"], need)))
        A.data = vals
    else:
        trailing = 0 if stale else r["trailing"]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(major, minlength=n_major))]).astype(np.int64)
        indices = np.append(minor, rng.integers(0, max(m, n, 1) + 3, trailing))  # past indptr[-1]: ignored
        data = np.append(vals, _values(rng, trailing, value_dtype)).astype(value_dtype)
        need = max(m, n, len(indices), 1) + 3
        cls = {("csr", True): sp.csr_matrix, ("csr", False): sp.csr_array,
               ("csc", True): sp.csc_matrix, ("csc", False): sp.csc_array}[fmt, matrix]
        A = cls((m, n))
        A.indptr = indptr.astype(_index_dtype("int32" if stale else r["ptr_dtype"], need))
        A.indices = indices.astype(_index_dtype("int32" if stale else r["idx_dtype"], need))
        A.data = data

    mutation = r["mutation"]
    if stale:
        # scipy caches has_canonical_format; then the arrays are edited in place (still a valid
        # matrix): two entries of a row (column) swapped, or one made a duplicate of its neighbour
        if fmt == "coo":
            A.sum_duplicates()
            major_of, minor_of = A.coords
            pairs = np.flatnonzero(major_of[1:] == major_of[:-1])
        else:
            minor_of = A.indices
            pairs = np.flatnonzero(np.diff(A.indptr.astype(np.int64)) >= 2)
            pairs = A.indptr[pairs].astype(np.int64)
        assert A.has_canonical_format
        if pairs.size:
            p = int(pairs[rng.integers(pairs.size)])
            if mutation == "stale_unsort":
                for a in (A.coords if fmt == "coo" else (A.indices,)) + (A.data,):
                    a[[p, p + 1]] = a[[p + 1, p]]
            else:
                minor_of[p + 1] = minor_of[p]
    entries = _raw_entries(A, fmt)

    corrupt = None
    if mutation in CORRUPTIONS:
        corrupt = _corruption(A, fmt, mutation, rng, m, n)
        if corrupt is not None:
            v.need(RAISE, f"A corrupted: {mutation}")
    return Sparse(A, (m, n), entries, corrupt=corrupt)


def _corruption(A, fmt, how, rng, m, n):
    """A function that breaks A's structure as ``how`` says (None where A has nothing to break)."""
    if fmt == "coo":
        coords = getattr(A, "coords", None) or (A.row, A.col)
        row, col = coords
        if how == "data_short" and len(A.data):
            return lambda: setattr(A, "data", A.data[:-1])
        if how == "float_indices":
            return lambda: setattr(A, "coords", (row.astype(np.float64), col))
        if not len(col):
            return None
        k = int(rng.integers(len(col)))
        target, bound = (row, m) if how == "coo_row" else (col, n)
        value = _bad_index(target.dtype, bound, how)

        def corrupt():
            target[k] = value
        return corrupt

    indptr, indices = A.indptr, A.indices
    major = len(indptr) - 1
    nnz = int(indptr[-1])
    minor = n if fmt == "csr" else m
    if how in ("index_high", "index_negative", "index_huge", "coo_row"):
        if nnz == 0:
            return None
        k = int(rng.integers(nnz))
        value = _bad_index(indices.dtype, minor, how)

        def corrupt():
            indices[k] = value
        return corrupt
    if how == "indptr0":
        def corrupt():
            indptr[0] = 1
        return corrupt
    if how == "indptr_decreasing":
        if major < 2:
            return None
        i = int(rng.integers(1, major))
        value = int(indptr[i + 1]) + 1

        def corrupt():
            indptr[i] = value
        return corrupt
    if how == "indptr_last":
        def corrupt():
            indptr[-1] = len(indices) + 1
        return corrupt
    if how == "indptr_short":
        return lambda: setattr(A, "indptr", indptr[:-1])
    if how == "indptr_long":
        return lambda: setattr(A, "indptr", np.append(indptr, indptr[-1:]))
    if how == "data_short":
        return (lambda: setattr(A, "data", A.data[:-1])) if len(A.data) else None
    if how == "float_indices":
        return lambda: setattr(A, "indices", indices.astype(np.float64))
    return None


def _bad_index(dtype, bound, how):
    info = np.iinfo(dtype)
    if how == "index_negative":
        return np.array(-1).astype(np.dtype(dtype).newbyteorder("=")).item() if info.min == 0 else -1
    if how == "index_huge":
        return min(10**7, info.max)
    return bound


# ---- the reference --------------------------------------------------------------------------------

@dataclass
class Canon:
    shape: tuple
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray            # float64 sums of the values cast to the computing dtype
    absvalues: np.ndarray         # sums of their magnitudes (for error bounds)
    alt: np.ndarray = None        # duplicates summed in the values' own dtype (scipy's semantics) instead
    eps: float = 0.0              # unit roundoff the values may carry (duplicates summed in a narrower type)
    width: int = 1                # longest row / most duplicates


def canonical(sparse, compute):
    """The canonical CSR (sorted, duplicates summed) of the stored entries, values cast through
    ``sparse.chain`` then to ``compute``, summed in float64."""
    rows, cols, vals = sparse.entries
    m, n = sparse.shape
    vals = vals.astype(vals.dtype.newbyteorder("=")) if vals.dtype.byteorder not in "=|" else vals

    def cast(x):
        for dt in (*sparse.chain, compute):
            x = x.astype(dt)
        return x.astype(np.float64)

    keys = rows * max(n, 1) + cols
    uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    with np.errstate(all="ignore"):
        cv = cast(vals)
        values, absvalues = np.zeros(uniq.size), np.zeros(uniq.size)
        np.add.at(values, inverse, cv)
        np.add.at(absvalues, inverse, np.abs(cv))
        alt = None
        eps = np.finfo(compute).eps
        if uniq.size < keys.size:  # duplicates: scipy may sum them before the conversion
            native = np.zeros(uniq.size, vals.dtype)
            np.add.at(native, inverse, vals)
            alt = cast(native)
            for dt in (vals.dtype, *sparse.chain):
                if np.dtype(dt).kind == "f":
                    eps = max(eps, np.finfo(dt).eps)
            if vals.dtype.kind not in "biu":
                alt = None  # float sums differ in rounding only: covered by eps
    r, c = uniq // max(n, 1), uniq % max(n, 1)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=m))]).astype(np.int64)
    width = max([1, *np.diff(indptr).tolist(), *counts.tolist()])
    return Canon((m, n), indptr, c.astype(np.int64), values, absvalues, alt, eps, width)


def _rows(canon):
    return np.repeat(np.arange(canon.shape[0]), np.diff(canon.indptr))


def ref_spmm(canon, values, B, reduce):
    """(C, scale for the error bound, unspecified entries) of ``reduce_j a_ij B[j]``."""
    B = np.asarray(B, np.float64)
    m, N = canon.shape[0], B.shape[1]
    C, S, U = np.zeros((m, N)), np.zeros((m, N)), np.zeros((m, N), bool)
    with np.errstate(all="ignore"):
        for i in range(m):
            lo, hi = canon.indptr[i], canon.indptr[i + 1]
            if lo == hi:
                continue
            P = values[lo:hi, None] * B[canon.indices[lo:hi]]
            Pa = canon.absvalues[lo:hi, None] * np.abs(B[canon.indices[lo:hi]])
            if reduce in ("sum", "mean"):
                C[i], S[i] = P.sum(0), Pa.sum(0)
                if reduce == "mean":
                    C[i] /= hi - lo
                    S[i] /= hi - lo
            else:
                C[i] = P.max(0) if reduce == "max" else P.min(0)
                S[i] = Pa.max(0)
                U[i] = np.isnan(P).any(0)  # NaN products: max/min unspecified (reductions.py)
    return C, S, U


def ref_sddmm(canon, values, X, Y):
    X, Y = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    rows = _rows(canon)
    with np.errstate(all="ignore"):
        dots = np.einsum("ij,ij->i", X[rows], Y[canon.indices]) if rows.size else np.zeros(0)
        scale = canon.absvalues * np.einsum("ij,ij->i", np.abs(X[rows]), np.abs(Y[canon.indices])) \
            if rows.size else np.zeros(0)
        return values * dots, scale


def ref_scores_times(canon, values, X, Y, Z, softmax):
    scores, scale = ref_sddmm(canon, values, X, Y)
    Z = np.asarray(Z, np.float64)
    m = canon.shape[0]
    out, S = np.zeros((m, Z.shape[1])), np.zeros((m, Z.shape[1]))
    with np.errstate(all="ignore"):
        for i in range(m):
            lo, hi = canon.indptr[i], canon.indptr[i + 1]
            if lo == hi:
                continue
            s, cols = scores[lo:hi], canon.indices[lo:hi]
            if softmax:
                w = np.exp(s - s.max())
                w /= w.sum()
                out[i] = w @ Z[cols]
                S[i] = (w @ np.abs(Z[cols])) * (1 + 2 * scale[lo:hi].max())
            else:
                out[i] = s @ Z[cols]
                S[i] = scale[lo:hi] @ np.abs(Z[cols])
    return out, S


def compare(result, ref, scale, dtype, eps, width, unspecified=None, strict_nonfinite=True, what="result"):
    """None when ``result`` matches ``ref``: by relative error (strategies.TOLERANCE), else entry
    by entry within ``8 (width + 4) eps scale``; NaN/inf where the reference has them
    (``strict_nonfinite``); ``unspecified`` entries are not compared.  Else a message."""
    res = np.asarray(result, np.float64)
    ref = np.asarray(ref, np.float64)
    if res.shape != ref.shape:
        return f"{what} has shape {res.shape}, expected {ref.shape}"
    keep = np.ones(ref.shape, bool) if unspecified is None else ~unspecified
    finite = np.isfinite(ref) & keep
    if strict_nonfinite:
        nonfinite = ~np.isfinite(ref) & keep
        bad = nonfinite & ~((np.isnan(ref) & np.isnan(res)) | (ref == res))
        if bad.any():
            k = np.argwhere(bad)[0]
            return f"{what}{tuple(k)} = {res[tuple(k)]!r}, expected {ref[tuple(k)]!r}"
    r, f = res[finite], ref[finite]
    if not r.size:
        return None
    if not np.isfinite(r).all():
        k = np.argwhere(finite & ~np.isfinite(res))[0]
        return f"{what}{tuple(k)} = {res[tuple(k)]!r}, expected {ref[tuple(k)]!r}"
    if relative_error(r, f) <= TOLERANCE[np.dtype(dtype)]:
        return None
    tol = 8 * (width + 4) * max(eps, np.finfo(dtype).eps) * np.asarray(scale, np.float64)[finite]
    bad = np.abs(r - f) > tol
    if bad.any():
        k = np.argwhere(finite)[np.argmax(bad)]
        return (f"{what}{tuple(k)} = {res[tuple(k)]!r}, expected {ref[tuple(k)]!r} (relative error "
                f"{relative_error(r, f):.3e})")
    return None


def first_match(attempts):
    """Pass when any (values-variant) comparison passes; else fail with the first message."""
    messages = [m for m in (a() for a in attempts) if m is not None]
    if len(messages) == len(attempts):
        raise AssertionError(messages[0])


# ---- dense operands -------------------------------------------------------------------------------

DENSE_DTYPES = ["int8", "int32", "int64", "uint8", "bool", "complex64", "complex128", "object", ">f4",
                ">f8", "longdouble", "float32", "float64"]
TORCH_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64")  # halves: test_half.py
LAYOUTS = ["C", "F", "strided", "transposed", "reversed", "broadcast", "unaligned"]


@st.composite
def dense_recipes(draw, cuda=False):
    r = {"seed": draw(st.integers(0, 2**32 - 1)), "kind": "numpy", "dtype": None, "layout": "C",
         "readonly": False, "special": "none", "drow": 0, "dcol": 0, "ndim": 2, "grad": False}
    if not 20 <= draw(st.integers(0, 99)) < 50:  # most operands are plain
        return r
    r["kind"] = pick(draw, ["numpy"] * 6 + ["torch"] * 2 * HAVE_TORCH + ["matrix"], ["list", "none", "scalar"], 4)
    r["dtype"] = pick(draw, [None], DENSE_DTYPES, 10)
    r["layout"] = draw(st.sampled_from(LAYOUTS))
    r["readonly"] = draw(st.booleans())
    r["special"] = draw(st.sampled_from(["none", "none", "nan", "inf", "-inf"]))
    r["drow"] = pick(draw, [0], [-1, 1, 2], 5)
    r["dcol"] = pick(draw, [0], [-1, 1], 5)
    r["ndim"] = pick(draw, [2], [0, 1, 3], 3)
    r["grad"] = draw(st.booleans())
    return r


@dataclass
class Dense:
    obj: object               # what is passed
    name: str
    kind: str                 # numpy, matrix, torch, device, list, none, scalar
    values: np.ndarray = None  # host values (as the call sees them)
    owners: tuple = ()        # arrays whose bytes must stay unchanged
    ndim: int = None
    dtype: object = None      # numpy dtype of the operand
    place: str = "host"

    @property
    def shape(self):
        return None if self.values is None else self.values.shape


def build_dense(r, name, shape, compute, place="host"):
    rng = np.random.default_rng(r["seed"])
    kind = r["kind"]
    if kind == "list":
        return Dense([[1.0] * shape[1]] * shape[0], name, "list")
    if kind == "none":
        return Dense(None, name, "none")
    if kind == "scalar":
        return Dense(1.5, name, "scalar")
    dtype = np.dtype(r["dtype"] or compute)
    a, b = max(shape[0] + r["drow"], 0), max(shape[1] + r["dcol"], 0)
    shape = {0: (), 1: (a,), 2: (a, b), 3: (a, b, 1)}[r["ndim"]]
    layout = r["layout"] if r["ndim"] == 2 else "C"
    make = lambda s: _values(rng, s, dtype, r["special"], offset=0.5)  # noqa: E731
    if layout == "F":
        base = np.asfortranarray(make(shape))
        arr = base
    elif layout == "strided":
        base = make((2 * a, 2 * b))
        arr = base[::2, ::2]
    elif layout == "transposed":
        base = make((b, a))
        arr = base.T
    elif layout == "reversed":
        base = make(shape)
        arr = base[::-1, ::-1]
    elif layout == "broadcast":
        base = make((b,))
        arr = np.broadcast_to(base, shape)
    elif layout == "unaligned" and dtype != object and dtype.itemsize > 1:
        values = make(shape)
        base = np.zeros(values.nbytes + 1, np.uint8)
        arr = base[1:].view(dtype).reshape(shape)
        arr[...] = values
    else:
        base = arr = make(shape)
    if r["readonly"]:
        arr = arr.view()
        arr.flags.writeable = False
    if kind == "matrix" and arr.ndim == 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            return Dense(np.asmatrix(arr), name, "matrix", np.asarray(arr), (base,), 2, dtype)
    if kind == "torch" and HAVE_TORCH and dtype.isnative and dtype.name in TORCH_DTYPES and arr.flags.writeable \
            and arr.flags.aligned and all(s >= 0 for s in arr.strides):  # what torch.from_numpy takes
        import torch

        t = torch.from_numpy(arr)
        if r["grad"] and dtype.kind == "f":
            t.requires_grad_(True)
        return Dense(t, name, "torch", arr, (base,), arr.ndim, dtype)
    if place == "device" and dtype.isnative and dtype != object:
        from numba import cuda

        host = np.ascontiguousarray(arr)
        try:  # (a device array with a broadcast row's stride 0 where Numba's copy takes it)
            device = cuda.to_device(host)
        except ValueError as e:  # (where not, "incompatible shape": the C strides)
            if "incompatible shape" not in str(e):
                raise
            device = cuda.to_device(np.array(host, order="C"))
        return Dense(device, name, "device", host, (base,), arr.ndim, dtype, "device")
    return Dense(arr, name, "numpy", arr, (base,), arr.ndim, dtype)


def dense_rules(v, ops, sparse=None):
    """Kinds, dimensions, dtypes and places of the dense operands (and A's dtype for a CSR);
    returns the computing dtype (None when there is none)."""
    for d in ops:
        if d.kind in ("list", "none", "scalar"):
            v.need(RAISE, f"{d.name} is {d.kind}")
            return None
        if d.ndim != 2:
            v.need(RAISE, f"{d.name} is {d.ndim}-D")
        if d.kind == "matrix":
            v.need(EITHER, f"{d.name} is an np.matrix")
    normal = []
    for d in ops:
        dt = d.dtype
        if dt.kind == "f" and dt.itemsize in (4, 8):
            if not dt.isnative:
                v.need(EITHER, f"{d.name} is big-endian {dt}")
            dt = dt.newbyteorder("=")
        else:
            v.need(RAISE, f"{d.name} has dtype {dt}")
        normal.append(dt)
    if len(set(normal)) > 1:
        v.need(RAISE, f"operands of dtypes {[str(d.dtype) for d in ops]}")
    if len({d.place for d in ops}) > 1:
        v.need(RAISE, "host and device operands mixed")
    compute = normal[0]
    if compute.kind != "f" or compute.itemsize not in (4, 8):
        return None
    if sparse is not None and isinstance(sparse.A, ns.CSR) and sparse.dtype != compute:
        v.need(RAISE, f"a {sparse.dtype} CSR with {compute} operands")
    return compute


def effective_backend(backend, algorithm, table, device):
    """Where a call with valid options runs."""
    if algorithm != "auto" and isinstance(algorithm, str) and algorithm in table:
        return table[algorithm].backend
    if backend == "auto":
        return "cuda" if device or gpu_present() else "cpu"
    return backend


def backend_rules(v, op_table, algorithm, backend, device, reduce=None):
    table = op_table
    for what, value, valid in (("backend", backend, BACKENDS), ("algorithm", algorithm, ("auto", *table))):
        level = option_level(value, valid)
        v.need(level, f"{what}={value!r}")
        if level == RAISE:
            return None
    algorithm, backend = str(algorithm), str(backend)
    runs = effective_backend(backend, algorithm, table, device)
    if algorithm != "auto" and backend not in ("auto", runs):
        v.need(RAISE, f"algorithm {algorithm!r} with backend {backend!r}")
    if runs == "cpu" and device:
        v.need(RAISE, "backend cpu with device operands")
    if runs == "cuda" and not HAVE_CUDA:
        v.need(RAISE, "no CUDA")
    if reduce is not None and algorithm != "auto" and reduce not in table[algorithm].reductions:
        v.need(RAISE, f"algorithm {algorithm!r} without reduce={reduce!r}")
    return runs


# ---- snapshots ------------------------------------------------------------------------------------

SPARSE_ATTRS = ("data", "indices", "indptr", "row", "col", "offsets")


def fingerprint(x):
    """A comparable picture of everything the caller can see of ``x``."""
    if isinstance(x, np.ndarray):
        data = repr(x.tolist()) if x.dtype == object else x.tobytes()
        return ("ndarray", type(x).__name__, x.dtype.str, x.shape, x.strides, x.flags.writeable, data)
    if sp.issparse(x):
        parts = [type(x).__name__, x.shape]
        for attr in SPARSE_ATTRS:
            a = x.__dict__.get(attr, getattr(x, attr, None)) if attr not in ("row", "col") else None
            if isinstance(a, np.ndarray):
                parts.append((attr, id(a), fingerprint(a)))
        coords = getattr(x, "coords", None) if x.format == "coo" else None
        if coords is not None:
            parts.append(("coords", tuple((id(c), fingerprint(c)) for c in coords)))
        if x.format == "lil":
            parts.append(("lil", repr(x.rows.tolist()), repr(x.data.tolist())))
        if x.format == "dok":
            parts.append(("dok", sorted(x.items())))
        return tuple(parts)
    if isinstance(x, ns.CSR):
        host = x.to_scipy()
        return ("CSR", fingerprint(host.indptr), fingerprint(host.indices), fingerprint(host.data),
                x.indptr.copy_to_host().tobytes(), x.indices.copy_to_host().tobytes(),
                x.data.copy_to_host().tobytes())
    if type(x).__module__.startswith("torch"):
        return ("torch", str(x.dtype), tuple(x.shape), x.stride(), x.requires_grad, x.detach().numpy().tobytes())
    if hasattr(x, "copy_to_host"):
        return ("device", x.shape, str(x.dtype), x.copy_to_host().tobytes())
    return ("other", repr(x))


def unchanged(case, before):
    written = case.written
    for (name, obj), fp in zip(case.watched, before):
        if any(obj is w for w in written):
            continue
        if isinstance(obj, np.ndarray) and any(isinstance(w, np.ndarray) and np.shares_memory(obj, w)
                                               for w in written):
            continue
        after = fingerprint(obj)
        assert after == fp, f"the call modified {name}"


# ---- running a case -------------------------------------------------------------------------------

def execute(case):
    case.call.setup()
    before = [fingerprint(obj) for _, obj in case.watched]
    try:
        result = case.call()
    except (ValueError, TypeError) as e:
        _event(case, "refused")
        if case.verdict.level == OK:
            raise AssertionError(f"valid input refused with {type(e).__name__}: {e}") from e
        case.written = ()
        unchanged(case, before)
        return
    _event(case, "returned")
    if case.verdict.level == RAISE:
        raise AssertionError(f"invalid input accepted ({'; '.join(case.verdict.why)}): returned "
                             f"{type(result).__name__}")
    case.check(result)
    unchanged(case, before)


def _event(case, outcome):
    """Outcome statistics (pytest --hypothesis-show-statistics)."""
    try:
        where = f" on {case.note}" if case.note and outcome == "returned" else ""
        event(f"{('valid', 'unclear', 'invalid')[case.verdict.level]} input {outcome}{where}")
    except Exception:  # outside a hypothesis test: the worker process
        pass


def check(recipe):
    """Build the case of ``recipe`` and check it (in this process)."""
    execute(BUILDERS[recipe["op"]](recipe))


def run(recipe, known=False):
    """Check ``recipe`` here, or in the worker when it may crash the process.  Recipes that
    trigger a known bug (:data:`KNOWN_BUGS`) are left out unless ``known``."""
    if not known:
        assume(not any(trigger(recipe) for trigger in KNOWN_BUGS.values()))
    if is_crashy(recipe):
        WORKER.check(recipe)
    else:
        check(recipe)


class warmed:
    """The call, with ``setup`` (run before the inputs are snapshot) corrupting A first: just
    before the call, or (``warm``) after a first call made while A was still valid (nothing
    derived from A may be trusted on the next call)."""

    def __init__(self, call, sparse, warm):
        self.call, self.sparse, self.warm = call, sparse, warm

    def setup(self):
        if self.sparse.corrupt is None:
            return
        if self.warm:
            try:
                self.call()
            except (ValueError, TypeError):
                pass
        self.sparse.corrupt()

    def __call__(self):
        return self.call()


def host(result):
    """NumPy view of a result of any kind (NumPy, torch CPU, device array)."""
    if isinstance(result, np.ndarray):
        return np.asarray(result)
    if type(result).__module__.startswith("torch"):
        return result.detach().numpy()
    if hasattr(result, "copy_to_host"):
        return result.copy_to_host()
    raise AssertionError(f"unexpected result type {type(result).__name__}")


def check_kind(result, first):
    """The result is of the first operand's kind (NumPy in, NumPy out; torch in, torch out; ...)."""
    if first.kind in ("numpy", "matrix"):
        assert isinstance(result, np.ndarray), f"NumPy operands gave a {type(result).__name__}"
    elif first.kind == "torch":
        assert type(result).__module__.startswith("torch"), f"torch operands gave a {type(result).__name__}"
    else:
        assert hasattr(result, "copy_to_host") or hasattr(result, "__cuda_array_interface__"), \
            f"device operands gave a {type(result).__name__}"


def sparse_watch(sparse):
    return [("A", sparse.A)]


def dense_watch(*ops):
    out = []
    for d in ops:
        out.append((d.name, d.obj))
        out += [(f"{d.name} (its buffer)", o) for o in d.owners]
    return out


# ---- spmm -----------------------------------------------------------------------------------------

OUT_KINDS = ["fresh", "wrong_shape", "wrong_dtype", "fortran", "strided", "readonly", "alias_B", "alias_data",
             "alias_indices", "list", "matrix", "device", "host", "unaligned"] + ["torch"] * HAVE_TORCH


@st.composite
def spmm_recipes(draw, cuda=False):
    r = {"op": "spmm", "cuda": cuda, "A": draw(sparse_recipes(tiny=cuda, corrupt=not cuda or draw(st.booleans())))}
    r["dtype"] = draw(st.sampled_from(["float32", "float64"]))
    r["A"]["csr_dtype"] = pick(draw, [r["dtype"]], ["float32", "float64"], 15)  # a CSR object's dtype
    r["N"] = draw(st.integers(0, 3) if cuda else st.integers(0, 8) | st.sampled_from([33, 64]))
    r["B"] = draw(dense_recipes(cuda))
    r["place"] = draw(st.sampled_from(["host", "device"])) if cuda else "host"
    r["reduce"] = pick(draw, REDUCTIONS, BAD_OPTIONS + [np.str_("mean")], 4)
    r["algorithm"], r["backend"] = draw(algorithm_backend(CPU_SPMM, CUDA_SPMM, cuda))
    table = ns.dispatch.SPMM
    if isinstance(r["algorithm"], str) and r["algorithm"] in table and "max" not in table[r["algorithm"]].reductions:
        r["reduce"] = pick(draw, ["sum"], list(REDUCTIONS), 20)  # a sum-only algorithm
    r["out"] = pick(draw, [None], OUT_KINDS, 20)
    r["warm"] = draw(st.booleans())
    return r


@st.composite
def algorithm_backend(draw, cpu_names, cuda_names, cuda):
    if cuda:
        algorithm = pick(draw, ["auto", *cuda_names, *cuda_names], BAD_ALGORITHMS + list(cpu_names), 6)
        backend = pick(draw, ["cuda", "cuda", "auto"], BAD_BACKENDS + ["cpu"], 6)
        return algorithm, backend
    choice = draw(st.integers(0, 99))
    if not 40 <= choice < 49:
        return draw(st.sampled_from(["auto", *cpu_names])), draw(st.sampled_from(["cpu", "auto"]))
    if choice < 43:  # a CUDA algorithm, with a backend that refuses it before anything runs
        return draw(st.sampled_from(cuda_names)), draw(st.sampled_from(["cpu"] + BAD_BACKENDS))
    if choice < 46:
        return draw(st.sampled_from(BAD_ALGORITHMS)), draw(st.sampled_from(["cpu", "auto"]))
    return draw(st.sampled_from(["auto", *cpu_names])), draw(st.sampled_from(BAD_BACKENDS))


def build_out(kind, shape, compute, B, sparse, v, device_ops, runs=None):
    """(out, what it may alias) for ``out=kind``; records its validity in ``v``."""
    M, N = shape
    dtype = compute or np.dtype(np.float32)
    if kind is None:
        return None
    from numba import cuda

    if kind == "list":
        v.need(RAISE, "out is a list")
        return [[0.0] * N] * M
    if kind == "torch" and HAVE_TORCH:
        import torch

        out = torch.from_numpy(np.full(shape, np.nan, dtype))
        if B.kind != "torch":
            v.need(EITHER, "a torch out with a NumPy B")
        return out
    if kind in ("device", "host"):
        out = cuda.device_array(shape, dtype) if kind == "device" else np.full(shape, np.nan, dtype)
        if (kind == "device") != device_ops:
            v.need(RAISE, "out and B in different places")
        return out
    if kind == "wrong_shape":
        v.need(RAISE, "out has the wrong shape")
        return np.zeros((M + 1, N), dtype)
    if kind == "wrong_dtype":
        v.need(RAISE, "out has the wrong dtype")
        return np.zeros(shape, np.float64 if dtype == np.float32 else np.float32)
    if device_ops:
        out = cuda.device_array(shape, dtype)
        if kind == "alias_B" and hasattr(B.obj, "copy_to_host") and B.shape == shape and B.dtype == dtype:
            out = B.obj
            v.need(EITHER, "out is B")
        return out
    if kind == "fortran":
        out = np.asfortranarray(np.full(shape, np.nan, dtype))
    elif kind == "strided":
        out = np.full((M, 2 * N), np.nan, dtype)[:, ::2]
    elif kind == "readonly":
        out = np.full(shape, np.nan, dtype)
        out.flags.writeable = False
    elif kind == "matrix":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            out = np.asmatrix(np.full(shape, np.nan, dtype))
        v.need(EITHER, "out is an np.matrix")
    elif kind == "unaligned":
        buffer = np.zeros(M * N * dtype.itemsize + 1, np.uint8)
        out = buffer[1:].view(dtype).reshape(shape)
    elif kind == "alias_B" and isinstance(B.obj, np.ndarray) and B.obj.shape == shape and B.dtype == dtype:
        out = B.obj
    elif kind == "alias_data" and isinstance(getattr(sparse.A, "data", None), np.ndarray) \
            and sparse.A.data.dtype == dtype and sparse.A.data.size >= M * N and sparse.A.data.ndim == 1:
        out = sparse.A.data[:M * N].reshape(shape)
    elif kind == "alias_indices" and isinstance(getattr(sparse.A, "indices", None), np.ndarray) \
            and sparse.A.indices.dtype.itemsize == dtype.itemsize and sparse.A.indices.dtype.isnative \
            and sparse.A.indices.size >= M * N:
        out = sparse.A.indices[:M * N].view(dtype).reshape(shape)
    else:
        out = np.full(shape, np.nan, dtype)
    if not (out.flags.c_contiguous and out.flags.writeable):
        v.need(RAISE, "out is not a writable C-contiguous array")
    if runs == "cuda" and simulator_enabled() and out.size == 0 and out.strides != np.empty(shape, dtype).strides:
        # the simulator's copy_to_host compares the strides of empty arrays (numba-cuda does not)
        v.need(EITHER, "an empty out view on the simulator")
    if any(isinstance(a, np.ndarray) and np.shares_memory(out, a) for a in _input_arrays(sparse, B)):
        v.need(EITHER, "out shares memory with an input")
    return out


def _input_arrays(sparse, *ops):
    arrays = [d.obj for d in ops if isinstance(d.obj, np.ndarray)] + [o for d in ops for o in d.owners]
    A = sparse.A
    if sp.issparse(A):
        arrays += [a for a in (getattr(A, k, None) for k in SPARSE_ATTRS) if isinstance(a, np.ndarray)]
        if A.format == "coo":
            arrays += list(A.coords)
    return arrays


def build_spmm(r):
    v = Verdict()
    sparse = build_sparse(r["A"], v)
    M, K = r["A"]["m"], r["A"]["n"]
    B = build_dense(r["B"], "B", (K, r["N"]), r["dtype"], r["place"])
    device = B.place == "device"  # (a torch B is a CPU tensor whatever the place)
    compute = dense_rules(v, [B], sparse)
    if B.ndim == 2 and B.shape[0] != K:
        v.need(RAISE, f"B has {B.shape[0]} rows for {K} columns of A")
    level = option_level(r["reduce"], REDUCTIONS)
    v.need(level, f"reduce={r['reduce']!r}")
    runs = backend_rules(v, ns.dispatch.SPMM, r["algorithm"], r["backend"], B.place == "device",
                         str(r["reduce"]) if level < RAISE else None)
    if runs == "cuda" and not r["cuda"] and simulator_enabled() and v.level < RAISE:
        raise AssertionError("a CPU-only recipe would run on CUDA")  # the strategy's job
    shape = (M, B.shape[1] if B.ndim == 2 else 0)
    out = build_out(r["out"], shape, compute, B, sparse, v, device, runs)
    written = (out,) if out is not None else ()
    if isinstance(out, np.ndarray):
        written += tuple(a for a in _input_arrays(sparse, B) if isinstance(a, np.ndarray) and np.shares_memory(out, a))
        if sp.issparse(sparse.A) and any(np.shares_memory(out, a) for a in _input_arrays(sparse)):
            written += (sparse.A,)
    kwargs = dict(reduce=r["reduce"], algorithm=r["algorithm"], backend=r["backend"])
    if r["out"] is not None:
        kwargs["out"] = out
    call = warmed(lambda: ns.spmm(sparse.A, B.obj, **kwargs), sparse, r["warm"])

    reference = None
    if v.level < RAISE:
        canon = canonical(sparse, compute)
        reduce = str(r["reduce"])
        B_values = np.array(B.values, np.float64)  # before the call: it may alias out
        reference = [(ref_spmm(canon, vals, B_values, reduce)) for vals in (canon.values, canon.alt)
                     if vals is not None]

    def check_result(result):
        if out is not None:
            assert result is out, "spmm(out=) did not return out"
        else:
            check_kind(result, B)
        C = host(result)
        assert C.dtype == compute, f"result dtype {C.dtype}, expected {compute}"
        if out is None and isinstance(result, np.ndarray):
            assert not any(np.shares_memory(result, a) for a in _input_arrays(sparse, B)), "result aliases an input"
        strict = str(r["reduce"]) in ("sum", "mean")
        first_match([lambda ref=ref: compare(C, ref[0], ref[1], compute, canon.eps, canon.width,
                                             ref[2], strict, "C") for ref in reference])

    watched = sparse_watch(sparse) + dense_watch(B) + [("out", out)] + _option_watch(r)
    return Case(call, v, check_result, watched, written, runs)


def _option_watch(r):
    return [(f"option {k}", r[k]) for k in ("reduce", "algorithm", "backend", "fused") if k in r
            and isinstance(r[k], (list, dict))]


# ---- sddmm ----------------------------------------------------------------------------------------

@st.composite
def sddmm_recipes(draw, cuda=False):
    r = {"op": "sddmm", "cuda": cuda, "A": draw(sparse_recipes(tiny=cuda, corrupt=not cuda or draw(st.booleans())))}
    r["dtype"] = draw(st.sampled_from(["float32", "float64"]))
    r["A"]["csr_dtype"] = pick(draw, [r["dtype"]], ["float32", "float64"], 15)  # a CSR object's dtype
    r["D"] = draw(st.integers(0, 3) if cuda else st.integers(0, 8) | st.sampled_from([33, 64]))
    r["X"], r["Y"] = draw(dense_recipes(cuda)), draw(dense_recipes(cuda))
    r["place"] = draw(st.sampled_from(["host", "device"])) if cuda else "host"
    r["algorithm"], r["backend"] = draw(algorithm_backend(CPU_SDDMM, CUDA_SDDMM, cuda))
    r["warm"] = draw(st.booleans())
    return r


def build_sddmm(r):
    v = Verdict()
    sparse = build_sparse(r["A"], v)
    M, N = r["A"]["m"], r["A"]["n"]
    X = build_dense(r["X"], "X", (M, r["D"]), r["dtype"], r["place"])
    Y = build_dense(r["Y"], "Y", (N, r["D"]), r["dtype"], r["place"])
    compute = dense_rules(v, [X, Y], sparse)
    if X.ndim == 2 and Y.ndim == 2:
        if X.shape[0] != M or Y.shape[0] != N or X.shape[1] != Y.shape[1]:
            v.need(RAISE, f"X {X.shape}, Y {Y.shape} for A {M}x{N}")
    device = X.place == "device" and Y.place == "device"
    runs = backend_rules(v, ns.dispatch.SDDMM, r["algorithm"], r["backend"], device)
    if runs == "cuda" and not r["cuda"] and simulator_enabled() and v.level < RAISE:
        raise AssertionError("a CPU-only recipe would run on CUDA")
    call = warmed(lambda: ns.sddmm(sparse.A, X.obj, Y.obj, algorithm=r["algorithm"], backend=r["backend"]), sparse,
                  r["warm"])
    if v.level < RAISE:
        canon = canonical(sparse, compute)
        refs = [ref_sddmm(canon, vals, X.values, Y.values) for vals in (canon.values, canon.alt) if vals is not None]

    def check_result(result):
        if device:
            check_kind(result, X)
            values = host(result)
            assert values.shape == (canon.values.size,), f"values of shape {values.shape}, nnz {canon.values.size}"
        else:
            assert isinstance(result, sp.csr_matrix), f"sddmm returned {type(result).__name__}, not csr_matrix"
            assert result.shape == (M, N), f"shape {result.shape}"
            np.testing.assert_array_equal(np.asarray(result.indptr, np.int64), canon.indptr,
                                          "sddmm: not A's canonical indptr")
            np.testing.assert_array_equal(np.asarray(result.indices, np.int64), canon.indices,
                                          "sddmm: not A's canonical indices")
            values = result.data
            assert not any(np.shares_memory(a, b) for a in (result.data, result.indices, result.indptr)
                           for b in _input_arrays(sparse, X, Y)), "result aliases an input"
        assert values.dtype == compute, f"values dtype {values.dtype}, expected {compute}"
        first_match([lambda ref=ref: compare(values, ref[0], ref[1], compute, canon.eps, canon.width + X.shape[1],
                                             what="values") for ref in refs])

    return Case(call, v, check_result, sparse_watch(sparse) + dense_watch(X, Y) + _option_watch(r), (), runs)


# ---- spmm_dense, sddmm_spmm, graph_attention ------------------------------------------------------

@st.composite
def fused_recipes(draw, op, cuda=False):
    r = {"op": op, "cuda": cuda, "A": draw(sparse_recipes(tiny=cuda, corrupt=not cuda or draw(st.booleans())))}
    r["dtype"] = draw(st.sampled_from(["float32", "float64"]))
    r["A"]["csr_dtype"] = pick(draw, [r["dtype"]], ["float32", "float64"], 15)  # a CSR object's dtype
    dims = st.integers(0, 3) if cuda else st.integers(0, 6) | st.sampled_from([33])
    r["D"], r["F"] = draw(dims), draw(dims)
    r["X"], r["Y"], r["Z"] = draw(dense_recipes(cuda)), draw(dense_recipes(cuda)), draw(dense_recipes(cuda))
    r["place"] = draw(st.sampled_from(["host", "device"])) if cuda else "host"
    if cuda:
        r["backend"] = pick(draw, ["cuda", "cuda", "auto"], BAD_BACKENDS + ["cpu"], 6)
    else:
        r["backend"] = pick(draw, ["cpu", "auto"], BAD_BACKENDS, 6)
    r["fused"] = pick(draw, [True, False, "auto"], BAD_FUSED, 10)
    r["warm"] = draw(st.booleans())
    return r


def _backend_only(v, backend, device, cuda_recipe):
    level = option_level(backend, BACKENDS)
    v.need(level, f"backend={backend!r}")
    if level == RAISE:
        return None
    runs = effective_backend(str(backend), "auto", {}, device)
    if runs == "cpu" and device:
        v.need(RAISE, "backend cpu with device operands")
    if runs == "cuda" and not HAVE_CUDA:
        v.need(RAISE, "no CUDA")
    if runs == "cuda" and not cuda_recipe and simulator_enabled() and v.level < RAISE:
        raise AssertionError("a CPU-only recipe would run on CUDA")
    return runs


def build_spmm_dense(r):
    v = Verdict()
    sparse = build_sparse(r["A"], v)
    M, K = r["A"]["m"], r["A"]["n"]
    X = build_dense(r["X"], "X", (K, r["D"]), r["dtype"], r["place"])
    W = build_dense(r["Y"], "W", (r["D"], r["F"]), r["dtype"], r["place"])
    compute = dense_rules(v, [X, W], sparse)
    if X.ndim == 2 and W.ndim == 2 and (X.shape[0] != K or W.shape[0] != X.shape[1]):
        v.need(RAISE, f"X {X.shape}, W {W.shape} for A {M}x{K}")
    device = X.place == "device" and W.place == "device"
    runs = _backend_only(v, r["backend"], device, r["cuda"])
    call = warmed(lambda: ns.spmm_dense(sparse.A, X.obj, W.obj, backend=r["backend"]), sparse, r["warm"])
    if v.level < RAISE:
        canon = canonical(sparse, compute)
        W64 = np.asarray(W.values, np.float64)
        refs = []
        for vals in (canon.values, canon.alt):
            if vals is not None:
                Z, S, _ = ref_spmm(canon, vals, X.values, "sum")
                with np.errstate(all="ignore"):
                    refs.append((Z @ W64, S @ np.abs(W64)))

    def check_result(result):
        check_kind(result, X)
        C = host(result)
        assert C.dtype == compute, f"result dtype {C.dtype}, expected {compute}"
        first_match([lambda ref=ref: compare(C, ref[0], ref[1], compute, canon.eps, canon.width + X.shape[1],
                                             strict_nonfinite=False, what="C") for ref in refs])

    return Case(call, v, check_result, sparse_watch(sparse) + dense_watch(X, W), (), runs)


def build_scores_times(r):
    v = Verdict()
    sparse = build_sparse(r["A"], v)
    M, N = r["A"]["m"], r["A"]["n"]
    softmax = r["op"] == "graph_attention"
    names = ("Q", "K", "V") if softmax else ("X", "Y", "Z")
    X = build_dense(r["X"], names[0], (M, r["D"]), r["dtype"], r["place"])
    Y = build_dense(r["Y"], names[1], (N, r["D"]), r["dtype"], r["place"])
    Z = build_dense(r["Z"], names[2], (N, r["F"]), r["dtype"], r["place"])
    compute = dense_rules(v, [X, Y, Z], sparse)
    if X.ndim == 2 and Y.ndim == 2 and Z.ndim == 2:
        if X.shape[0] != M or Y.shape[0] != N or Z.shape[0] != N or X.shape[1] != Y.shape[1]:
            v.need(RAISE, f"{X.shape}, {Y.shape}, {Z.shape} for A {M}x{N}")
    device = all(d.place == "device" for d in (X, Y, Z))
    runs = _backend_only(v, r["backend"], device, r["cuda"])
    if not (isinstance(r["fused"], (bool, np.bool_)) or r["fused"] == "auto"):
        v.need(EITHER, f"fused={r['fused']!r}")
    fn = ns.graph_attention if softmax else ns.sddmm_spmm
    call = warmed(lambda: fn(sparse.A, X.obj, Y.obj, Z.obj, fused=r["fused"], backend=r["backend"]), sparse, r["warm"])
    if v.level < RAISE:
        canon = canonical(sparse, compute)
        refs = [ref_scores_times(canon, vals, X.values, Y.values, Z.values, softmax)
                for vals in (canon.values, canon.alt) if vals is not None]

    def check_result(result):
        check_kind(result, X)
        C = host(result)
        assert C.dtype == compute, f"result dtype {C.dtype}, expected {compute}"
        first_match([lambda ref=ref: compare(C, ref[0], ref[1], compute, canon.eps,
                                             canon.width + X.shape[1] + Z.shape[1], strict_nonfinite=False,
                                             what="C") for ref in refs])

    return Case(call, v, check_result, sparse_watch(sparse) + dense_watch(X, Y, Z) + _option_watch(r), (), runs)


# ---- CSR.from_scipy -------------------------------------------------------------------------------

@st.composite
def csr_recipes(draw):
    r = {"op": "csr", "A": draw(sparse_recipes())}
    r["dtype"] = pick(draw, VALID_DTYPE_OPTIONS, BAD_DTYPE_OPTIONS, 12)
    r["index_dtype"] = pick(draw, VALID_INDEX_OPTIONS, BAD_INDEX_OPTIONS, 12)
    r["warm"] = draw(st.booleans())
    return r


def _dtype_option(v, value, valid, bad, what):
    if any(value is x or (type(value) is type(x) and value == x) for x in valid):
        return np.dtype(value) if value is not None else None
    v.need(RAISE if any(value is x or (type(value) is type(x) and value == x) for x in bad) else EITHER,
           f"{what}={value!r}")
    return None


def default_dtype(A_dtype):
    """The documented default: float64 for float64 values, else float32."""
    dt = np.dtype(A_dtype)
    return np.dtype(np.float64) if dt.kind == "f" and dt.itemsize == 8 else np.dtype(np.float32)


def build_csr(r):
    v = Verdict()
    sparse = build_sparse(r["A"], v)
    if isinstance(sparse.A, ns.CSR):
        v.need(EITHER, "A is a CSR already")
    dtype = _dtype_option(v, r["dtype"], VALID_DTYPE_OPTIONS, BAD_DTYPE_OPTIONS, "dtype")
    index_dtype = _dtype_option(v, r["index_dtype"], VALID_INDEX_OPTIONS, BAD_INDEX_OPTIONS, "index_dtype")
    call = warmed(lambda: ns.CSR.from_scipy(sparse.A, dtype=r["dtype"], index_dtype=r["index_dtype"]), sparse,
                  r["warm"])
    if v.level < RAISE:
        A_dtype = sparse.dtype if isinstance(sparse.A, ns.CSR) else sparse.A.dtype
        want = dtype if dtype is not None else default_dtype(A_dtype)
        canon = canonical(sparse, want)
        want_index = index_dtype if index_dtype is not None else np.dtype(np.int32)

    def check_result(C):
        assert isinstance(C, ns.CSR), f"returned {type(C).__name__}"
        assert C.shape == sparse.shape and C.nnz == canon.values.size, (C.shape, C.nnz)
        assert C.dtype == want, f"dtype {C.dtype}, expected {want} (A is {A_dtype}, dtype={r['dtype']!r})"
        assert C.index_dtype == want_index, f"index dtype {C.index_dtype}, expected {want_index}"
        H = C.to_scipy()
        assert H.data.dtype == want, f"to_scipy() has {H.data.dtype} values"
        for name in ("indptr", "indices"):  # (to_scipy() itself may narrow them: scipy's constructor)
            assert getattr(C, name).copy_to_host().dtype == want_index, f"device {name} not {want_index}"
        np.testing.assert_array_equal(H.indptr, canon.indptr)
        np.testing.assert_array_equal(H.indices, canon.indices)
        first_match([lambda vals=vals: compare(H.data, vals, canon.absvalues, want, canon.eps, canon.width,
                                               what="data") for vals in (canon.values, canon.alt) if vals is not None])
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(C, name).copy_to_host(), getattr(H, name), f"device {name}")
        T = C.T.to_scipy()
        np.testing.assert_array_equal(T.toarray(), H.toarray().T)

    return Case(call, v, check_result, sparse_watch(sparse) + _option_watch(r))


# ---- prepare / Plan -------------------------------------------------------------------------------

REORDER_ARGS = {
    "louvain": [{"seed": 3}, {"seed": None}, {"resolution": 0.5}, {"threshold": 1e-3}],
    "loa": [{"window": 1}, {"window": 3}, {"vertex_window": 2}],
}
BAD_REORDER_ARGS = [{"seed": -1}, {"seed": 1.5}, {"resolution": 0}, {"resolution": float("nan")}, {"window": 0},
                    {"window": 2.0}, {"window": True}, {"bogus": 1}, {"vertex_window": -3}]


@st.composite
def plan_recipes(draw, cuda=False):
    r = {"op": "plan", "cuda": cuda,
         "A": draw(sparse_recipes(tiny=cuda, square=True, corrupt=not cuda or draw(st.booleans())))}
    r["reorder"] = pick(draw, [None, None, "louvain", "loa"], ["Louvain", "", "RCM", b"loa", ["loa"], 0, True], 3)
    args = REORDER_ARGS.get(r["reorder"]) if isinstance(r["reorder"], str) else None
    roll = draw(st.integers(0, 99))
    r["reorder_args"] = ({} if not 40 <= roll < 70 else draw(st.sampled_from(BAD_REORDER_ARGS))
                         if roll < 44 or not args else draw(st.sampled_from(args)))
    r["plan_dtype"] = pick(draw, [None, None, "float32", "float64"], BAD_DTYPE_OPTIONS, 3)
    r["index_dtype"] = pick(draw, [None, None, "int32", "int64"], BAD_INDEX_OPTIONS, 3)
    both = tuple(n for n in CPU_SPMM if n in CPU_SDDMM)
    r["algorithm"], r["backend"] = draw(algorithm_backend(both, tuple(n for n in CUDA_SPMM if n in CUDA_SDDMM)
                                                          if cuda else CUDA_SPMM, cuda))
    r["method"] = draw(st.sampled_from(["spmm", "sddmm"]))
    r["dtype"] = draw(st.sampled_from(["float32", "float64"]))
    r["A"]["csr_dtype"] = pick(draw, [r["dtype"]], ["float32", "float64"], 15)  # a CSR object's dtype
    r["N"] = draw(st.integers(0, 3) if cuda else st.integers(0, 6))
    r["B"], r["Y"] = draw(dense_recipes(cuda)), draw(dense_recipes(cuda))
    r["place"] = draw(st.sampled_from(["host", "device"])) if cuda else "host"
    r["reduce"] = pick(draw, REDUCTIONS, BAD_OPTIONS, 3)
    if cuda:  # prepare() picks the backend without seeing the operands: "auto" is the CPU without a GPU
        r["backend"] = pick(draw, ["cuda"], BAD_BACKENDS + ["cpu", "auto"], 6)
        r["plan_dtype"] = pick(draw, [r["dtype"]], [None, "float32", "float64"], 15)  # a CSR of the operands' dtype
        r["reduce"] = pick(draw, ["sum"], list(REDUCTIONS), 30)  # the CUDA algorithms of both ops: sum-only ones
    r["out"] = pick(draw, [None], ["fresh", "fresh", "wrong_shape", "readonly"], 15)
    r["repeat"] = draw(st.integers(1, 2))
    r["warm"] = draw(st.booleans())
    return r


def build_plan(r):
    v = Verdict()
    sparse = build_sparse(r["A"], v)
    M, N = r["A"]["m"], r["A"]["n"]
    if isinstance(sparse.A, ns.CSR):
        v.need(EITHER, "prepare() of a CSR")
    reorder = r["reorder"]
    if not (reorder is None or (type(reorder) is str and reorder in ("louvain", "loa"))):
        v.need(RAISE, f"reorder={reorder!r}")
        reorder = None
    args = r["reorder_args"]
    if reorder is None and args:
        v.need(EITHER, f"reorder arguments {args} without a reordering")
    elif reorder is not None:
        if M != N:
            v.need(RAISE, f"reorder of a {M}x{N} matrix")
        if args and not any(args.keys() == a.keys() and all(type(args[k]) is type(a[k]) and args[k] == a[k]
                                                             for k in a) for a in REORDER_ARGS[reorder]):
            v.need(RAISE, f"{reorder} with {args}")
        if sparse.entries is not None:
            values = sparse.entries[2]
            if values.dtype.kind == "f" and not np.isfinite(values).all():
                v.need(EITHER, "reordering a graph with non-finite weights")
            if reorder == "louvain" and values.dtype.kind in "iuf" and (values < 0).any():
                v.need(EITHER, "louvain of negative weights")
            if reorder == "louvain" and values.dtype.kind in "biu" and values.dtype.itemsize == 1:
                v.need(EITHER, "louvain of int8 weights (their sums may wrap)")
    plan_dtype = _dtype_option(v, r["plan_dtype"], [None, "float32", "float64"], BAD_DTYPE_OPTIONS, "dtype")
    _dtype_option(v, r["index_dtype"], [None, "int32", "int64"], BAD_INDEX_OPTIONS, "index_dtype")
    method = r["method"]
    if method == "spmm":
        ops = [build_dense(r["B"], "B", (N, r["N"]), r["dtype"], r["place"])]
    else:
        ops = [build_dense(r["B"], "X", (M, r["N"]), r["dtype"], r["place"]),
               build_dense(r["Y"], "Y", (N, r["N"]), r["dtype"], r["place"])]
    compute = dense_rules(v, ops)
    if all(d.ndim == 2 for d in ops):
        if method == "spmm" and ops[0].shape[0] != N:
            v.need(RAISE, f"B {ops[0].shape} for A {M}x{N}")
        if method == "sddmm" and (ops[0].shape[0] != M or ops[1].shape[0] != N or ops[0].shape[1] != ops[1].shape[1]):
            v.need(RAISE, f"X {ops[0].shape}, Y {ops[1].shape} for A {M}x{N}")
    device = all(d.place == "device" for d in ops)
    reduce = r["reduce"] if method == "spmm" else "sum"
    if method == "spmm":
        v.need(option_level(reduce, REDUCTIONS), f"reduce={reduce!r}")
    table = ns.dispatch.SPMM if method == "spmm" else ns.dispatch.SDDMM
    backend = r["backend"]
    if option_level(backend, BACKENDS) == OK and backend == "auto":
        backend = "cuda" if gpu_present() else "cpu"  # prepare() decides once, without the operands
    runs = backend_rules(v, table, r["algorithm"], backend, device,
                         str(reduce) if method == "spmm" and option_level(reduce, REDUCTIONS) < RAISE else None)
    if runs == "cuda" and not r["cuda"] and simulator_enabled() and v.level < RAISE:
        raise AssertionError("a CPU-only recipe would run on CUDA")
    A_dtype = None
    if sparse.entries is not None and v.level < RAISE:
        A_dtype = sparse.dtype if isinstance(sparse.A, ns.CSR) else sparse.A.dtype
        plan_dtype = plan_dtype if plan_dtype is not None else default_dtype(A_dtype)
        if plan_dtype != compute and runs == "cuda":
            v.need(EITHER, f"a {plan_dtype} plan (on CUDA) with {compute} operands")
    out = None
    if method == "spmm" and r["out"] is not None:
        out = build_out(r["out"], (M, ops[0].shape[1] if ops[0].ndim == 2 else 0), compute, ops[0], sparse, v,
                        device, runs)
        if reorder is not None:
            v.need(EITHER, "out= on a reordered plan")

    def call():
        plan = ns.prepare(sparse.A, reorder=r["reorder"], algorithm=r["algorithm"], backend=r["backend"],
                          dtype=r["plan_dtype"], index_dtype=r["index_dtype"], **args)
        results = []
        for _ in range(r["repeat"]):
            if method == "spmm":
                kwargs = {"reduce": reduce}
                if out is not None:
                    kwargs["out"] = out
                results.append(plan.spmm(ops[0].obj, **kwargs))
            else:
                results.append(plan.sddmm(ops[0].obj, ops[1].obj))
        return results

    call = warmed(call, sparse, r["warm"])
    if v.level < RAISE:
        chain = sparse.chain + (plan_dtype,)
        canon = canonical(Sparse(sparse.A, sparse.shape, sparse.entries, chain), compute)
        if method == "spmm":
            refs = [ref_spmm(canon, vals, ops[0].values, str(reduce)) for vals in (canon.values, canon.alt)
                    if vals is not None]
        else:
            refs = [ref_sddmm(canon, vals, ops[0].values, ops[1].values) for vals in (canon.values, canon.alt)
                    if vals is not None]

    def check_result(results):
        for result in results:
            if method == "spmm":
                if out is not None:
                    assert result is out, "Plan.spmm(out=) did not return out"
                else:
                    check_kind(result, ops[0])
                values = host(result)
                strict = str(reduce) in ("sum", "mean")
                first_match([lambda ref=ref: compare(values, ref[0], ref[1], compute, canon.eps, canon.width,
                                                     ref[2], strict, "C") for ref in refs])
            else:
                if device:
                    values = host(result)
                else:
                    assert isinstance(result, sp.csr_matrix), f"Plan.sddmm returned {type(result).__name__}"
                    np.testing.assert_array_equal(np.asarray(result.indptr, np.int64), canon.indptr)
                    np.testing.assert_array_equal(np.asarray(result.indices, np.int64), canon.indices)
                    values = result.data
                first_match([lambda ref=ref: compare(values, ref[0], ref[1], compute, canon.eps,
                                                     canon.width + ops[0].shape[1], what="values") for ref in refs])
            assert values.dtype == compute, f"dtype {values.dtype}, expected {compute}"

    watched = sparse_watch(sparse) + dense_watch(*ops) + [("out", out)] + _option_watch(r) + \
        [("reorder_args", args)]
    written = (out,) if out is not None else ()
    return Case(call, v, check_result, watched, written, runs)


BUILDERS = {"spmm": build_spmm, "sddmm": build_sddmm, "spmm_dense": build_spmm_dense,
            "sddmm_spmm": build_scores_times, "graph_attention": build_scores_times, "csr": build_csr,
            "plan": build_plan}


# ---- the worker subprocess ------------------------------------------------------------------------

MAGIC = b"@@fuzz-reply@@ "
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
WORKER_TIMEOUT = 120  # seconds for one case (a first njit compilation included)


class Worker:
    """A Python subprocess that checks the crash-prone recipes: ``check(recipe)`` must answer
    pass or fail; dying or hanging is a failure (the process is then started again)."""

    def __init__(self):
        self.proc = None
        self.stderr = None

    def start(self):
        self.stderr = tempfile.TemporaryFile()
        code = (f"import sys; sys.path[:0] = {[TESTS_DIR, REPO_ROOT]!r}; "
                f"import test_fuzz_api as t; t.serve()")
        self.proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, env=dict(os.environ), cwd=REPO_ROOT)
        self.buffer = b""

    def stderr_tail(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-3000:]

    def check(self, recipe):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write(base64.b64encode(pickle.dumps(recipe)) + b"\n")
        self.proc.stdin.flush()
        reply = self._read_reply(WORKER_TIMEOUT)
        if reply in ("eof", "timeout"):
            try:
                rc = self.proc.wait(timeout=30 if reply == "eof" else 0.1)
            except subprocess.TimeoutExpired:  # hung: stop our own child
                self.proc.kill()
                self.proc.wait()
                rc = None
            if rc is None:
                detail = f"did not answer within {WORKER_TIMEOUT} s"
            else:
                detail = (f"was killed by signal {-rc}" if rc < 0 else f"exited with code {rc}")
            tail = self.stderr_tail()
            self.proc = None
            raise AssertionError(f"the worker process {detail} on this case\n--- its stderr ---\n{tail}")
        status, message = reply
        if status != "pass":
            raise AssertionError(f"in the worker process:\n{message}")

    def _read_reply(self, timeout):
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                while b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    if line.startswith(MAGIC):
                        return pickle.loads(base64.b64decode(line[len(MAGIC):]))
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return "timeout"
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return "eof"
                self.buffer += chunk

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def serve():
    """The worker's loop: a base64 pickled recipe per line in, a MAGIC-prefixed reply per line out."""
    warnings.simplefilter("ignore")
    replies = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything else printed goes to stderr
    for line in sys.stdin.buffer:
        recipe = pickle.loads(base64.b64decode(line))
        try:
            check(recipe)
            reply = ("pass", "")
        except BaseException:  # noqa: B902 - every failure is reported to the parent
            reply = ("fail", traceback.format_exc())
        replies.write(MAGIC + base64.b64encode(pickle.dumps(reply)) + b"\n")
        replies.flush()


WORKER = Worker()


@pytest.fixture(scope="module", autouse=True)
def _close_worker():
    yield
    WORKER.close()


# ---- the tests: one per API function, CPU and CUDA ------------------------------------------------

@fuzz
@given(recipe=spmm_recipes())
def test_fuzz_spmm(recipe):
    run(recipe)


@fuzz
@given(recipe=sddmm_recipes())
def test_fuzz_sddmm(recipe):
    run(recipe)


@fuzz
@given(recipe=fused_recipes("spmm_dense"))
def test_fuzz_spmm_dense(recipe):
    run(recipe)


@fuzz
@given(recipe=fused_recipes("sddmm_spmm"))
def test_fuzz_sddmm_spmm(recipe):
    run(recipe)


@fuzz
@given(recipe=fused_recipes("graph_attention"))
def test_fuzz_graph_attention(recipe):
    run(recipe)


@fuzz
@given(recipe=csr_recipes())
def test_fuzz_csr_from_scipy(recipe):
    run(recipe)


@fuzz
@given(recipe=plan_recipes())
def test_fuzz_prepare_plan(recipe):
    run(recipe)


@needs_cuda
@fuzz_cuda
@given(recipe=spmm_recipes(cuda=True))
def test_fuzz_spmm_cuda(recipe):
    run(recipe)


@needs_cuda
@fuzz_cuda
@given(recipe=sddmm_recipes(cuda=True))
def test_fuzz_sddmm_cuda(recipe):
    run(recipe)


@needs_cuda
@fuzz_cuda
@given(recipe=st.sampled_from(["spmm_dense", "sddmm_spmm", "graph_attention"]).flatmap(
    lambda op: fused_recipes(op, cuda=True)))
def test_fuzz_fused_cuda(recipe):
    run(recipe)


@needs_cuda
@fuzz_cuda
@given(recipe=plan_recipes(cuda=True))
def test_fuzz_prepare_plan_cuda(recipe):
    run(recipe)


# ---- regressions: each fixed bug's trigger, forced ---------------------------------------------------

regression = settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck),
                     phases=[Phase.explicit, Phase.generate])  # no shrinking: the recipe is minimal already
PLAIN = {"kind": "numpy", "dtype": None, "layout": "C", "readonly": False, "special": "none", "drow": 0, "dcol": 0,
         "ndim": 2, "grad": False}
HOST_OPS = {"spmm": spmm_recipes(), "sddmm": sddmm_recipes(), "spmm_dense": fused_recipes("spmm_dense"),
            "sddmm_spmm": fused_recipes("sddmm_spmm"), "graph_attention": fused_recipes("graph_attention"),
            "csr": csr_recipes(), "plan": plan_recipes()}


def forced(ops, **fields):
    """Recipes of ``ops`` with valid options, plain dense operands, a valid scipy A, then ``fields``
    set (``A__fmt="csr"`` sets ``recipe["A"]["fmt"]``)."""
    def apply(recipe):
        recipe = copy.deepcopy(recipe)
        for name in ("B", "X", "Y", "Z"):
            if name in recipe:
                recipe[name] = dict(PLAIN, seed=recipe[name]["seed"])
        plain = {"reduce": "sum", "algorithm": "auto", "backend": "cpu", "fused": True, "out": None, "reorder": None,
                 "reorder_args": {}, "plan_dtype": None, "index_dtype": None, "warm": False}
        recipe.update({k: v for k, v in plain.items() if k in recipe})
        if recipe["op"] == "csr":
            recipe["dtype"] = None
        recipe["A"].update(kind="scipy", mutation="none", special="none", trailing=0, warm=False,
                           values=recipe.get("dtype") or "float64", ptr_dtype="int32", idx_dtype="int32")
        for path, value in fields.items():
            *keys, last = path.split("__")
            target = recipe
            for key in keys:
                target = target[key]
            target[last] = value
        return recipe
    return st.one_of([HOST_OPS[op] for op in ops]).map(apply)


ALL_OPS = ("spmm", "sddmm", "spmm_dense", "sddmm_spmm", "graph_attention")


@regression
@given(recipe=forced(ALL_OPS, A__fmt="csr", A__m=0, A__mutation="indptr_short"))
def test_a_corrupt_indptr_is_refused_before_anything_reads_it(recipe):
    run(recipe, known=True)


@regression
@given(recipe=forced(["sddmm"], A__fmt="csr", A__trailing=2))
def test_sddmm_ignores_entries_past_indptr_end_as_scipy_does(recipe):
    run(recipe, known=True)


@regression
@given(recipe=forced(list(HOST_OPS), A__fmt="csr", A__values=">f8"))
def test_big_endian_values_of_every_format_are_converted(recipe):
    run(recipe, known=True)


@regression
@given(recipe=forced(["csr"], A__fmt="coo", A__values=">f8", A__m=3, A__n=3, A__density=0.9))
def test_big_endian_float64_values_default_to_float64(recipe):
    run(recipe, known=True)


@regression
@given(recipe=forced(["spmm", "sddmm", "graph_attention"], A__fmt="csr", A__mutation="stale_dup", A__m=3, A__n=4,
                     A__density=0.9, A__empty_rows=False, reduce="mean"))
def test_indices_edited_in_place_are_made_canonical_again(recipe):
    run(recipe, known=True)


@regression
@given(recipe=forced(["spmm"], B__kind="torch", out="fresh", A__fmt="csr", A__m=2, A__n=3))
def test_a_cpu_tensor_b_writes_into_a_numpy_out(recipe):
    pytest.importorskip("torch")
    run(recipe, known=True)


@regression
@given(recipe=forced(["spmm"], B__kind="torch", out="torch", A__fmt="csr"))
def test_a_cpu_tensor_out_is_accepted_for_a_cpu_tensor_b(recipe):
    pytest.importorskip("torch")
    run(recipe, known=True)
