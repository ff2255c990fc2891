"""Argument checks shared by the reorderings: every public function of ``numbasparse.reorder``
refuses hostile input here, with an error naming the argument, before any ``numba.njit`` code
(which cannot be interrupted) sees it.  The caller's matrix is never modified: ``graph_copy``
returns a new canonical CSR whose arrays share nothing with ``A``."""
import numbers

import numpy as np
import scipy.sparse as sp

from ..validation import check_sparse


def graph_copy(A, *, name="A", square=True, non_negative=True, dtype=np.float64):
    """A new canonical CSR copy of ``A`` (sorted indices, duplicates summed, values converted to
    ``dtype``, or of ``A``'s dtype for None).

    Raises TypeError when ``A`` is not a real-valued scipy.sparse matrix, ValueError when it is
    not 2-D, not square (``square``), structurally invalid (indices out of range, a broken
    indptr: checked on the raw arrays, before scipy converts anything), or holds a non-finite
    weight (NaN, +-inf, or duplicates that sum past the float range), or a negative one
    (``non_negative``).  Errors name ``name`` and the entry (row, col)."""
    if sp.issparse(A) and A.ndim == 2 and np.dtype(A.dtype).kind not in "biuf":
        raise TypeError(f"{name} must have real numeric weights, got dtype {A.dtype}")
    checked = check_sparse(A, name)  # TypeError if not sparse; A, or its checked CSR conversion
    if square and A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square scipy.sparse matrix, got shape {A.shape[0]}x{A.shape[1]}")
    C = sp.csr_matrix(checked, copy=True)  # new arrays: scipy would share a CSR's own otherwise
    if C.dtype.kind == "f":
        _refuse_non_finite(C, name, "weight")
    if dtype is not None and C.dtype != dtype:
        C = C.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        C.sum_duplicates()  # also sorts the indices (of the copy)
    if C.dtype.kind == "f":
        _refuse_non_finite(C, name, "weight (its duplicate entries sum past the float range)")
    if non_negative and C.nnz and (C.data < 0).any():
        row, col, value = _first_entry(C, C.data < 0)
        raise ValueError(f"{name} must have non-negative weights: entry ({row}, {col}) is {value!r}")
    return C


def _refuse_non_finite(C, name, what):
    if C.nnz and not np.isfinite(C.data).all():
        row, col, value = _first_entry(C, ~np.isfinite(C.data))
        raise ValueError(f"{name} has a non-finite {what} at entry ({row}, {col}): {value!r}")


def _first_entry(C, mask):
    """(row, col, value) of the first stored entry of CSR ``C`` where ``mask`` holds."""
    p = int(np.flatnonzero(mask)[0])
    row = int(np.searchsorted(C.indptr, p, side="right") - 1)
    return row, int(C.indices[p]), float(C.data[p])


def positive_int(value, name):
    """``value`` as a Python int > 0; bools, floats (2.5, nan) and strings are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def finite_real(value, name, *, minimum, strict):
    """``value`` as a finite float > ``minimum`` (``strict``) or >= ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not np.isfinite(value) or (value <= minimum if strict else value < minimum):
        raise ValueError(f"{name} must be finite and {'>' if strict else '>='} {minimum}, got {value!r}")
    return value


def seed_value(seed, name="seed"):
    """``seed`` as a non-negative Python int, or None."""
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be an int or None, got {seed!r} ({type(seed).__name__})")
    if seed < 0:
        raise ValueError(f"{name} must be non-negative, got {seed}")
    return int(seed)
