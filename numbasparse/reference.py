"""Float64 references (scipy/NumPy) for checking every kernel: the one reference implementation."""
import numpy as np
import scipy.sparse as sp

from .csr import canonical_csr

_CHUNK = 1 << 22  # products held at once by the max/min reference


def spmm_reference(A, B, reduce="sum"):
    """``reduce_j a_ij * B[j]`` in float64; rows with no stored entry give 0."""
    A = canonical_csr(A, dtype=np.float64) if sp.issparse(A) else A.to_scipy().astype(np.float64)
    B = np.asarray(B, dtype=np.float64)
    counts = np.diff(A.indptr)
    if reduce in ("sum", "mean"):
        C = np.asarray(A @ B)
        if reduce == "mean":
            C /= np.maximum(counts, 1)[:, None]
        return C
    if reduce not in ("max", "min"):
        raise ValueError(f"reduce must be sum, mean, max or min, got {reduce!r}")
    ufunc = np.maximum if reduce == "max" else np.minimum
    C = np.zeros((A.shape[0], B.shape[1]))
    rows = np.flatnonzero(counts)
    # Whole rows at a time, about _CHUNK products per group.
    cost = np.cumsum(counts[rows] * max(B.shape[1], 1))
    for sel in np.split(rows, np.flatnonzero(np.diff(cost // _CHUNK)) + 1) if rows.size else ():
        lo, hi = A.indptr[sel[0]], A.indptr[sel[-1] + 1]
        prod = A.data[lo:hi, None] * B[A.indices[lo:hi]]
        C[sel] = ufunc.reduceat(prod, A.indptr[sel] - lo, axis=0)
    return C


def sddmm_reference(A, X, Y):
    """Float64 values ``a_ij * <X[i], Y[j]>`` in the canonical CSR order of ``A``."""
    A = canonical_csr(A, dtype=np.float64) if sp.issparse(A) else A.to_scipy().astype(np.float64)
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    out = np.empty(A.nnz)
    step = max(1, _CHUNK // max(X.shape[1], 1))
    for lo in range(0, A.nnz, step):
        hi = min(lo + step, A.nnz)
        out[lo:hi] = A.data[lo:hi] * np.einsum("ij,ij->i", X[rows[lo:hi]], Y[A.indices[lo:hi]])
    return out


def sddmm_spmm_reference(A, X, Y, Z):
    """Float64 ``(A ⊙ (X Y^T)) Z``."""
    A = canonical_csr(A, dtype=np.float64) if sp.issparse(A) else A.to_scipy().astype(np.float64)
    S = sp.csr_matrix((sddmm_reference(A, X, Y), A.indices, A.indptr), shape=A.shape)
    return np.asarray(S @ np.asarray(Z, dtype=np.float64))


def attention_reference(A, Q, K, V):
    """Float64 ``softmax_row(A ⊙ (Q K^T)) V``: softmax over each row's stored entries; rows
    with none give 0."""
    A = canonical_csr(A, dtype=np.float64) if sp.issparse(A) else A.to_scipy().astype(np.float64)
    scores = sddmm_reference(A, Q, K)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    largest = np.full(A.shape[0], -np.inf)
    np.maximum.at(largest, rows, scores)
    weights = np.exp(scores - largest[rows])
    totals = np.bincount(rows, weights, minlength=A.shape[0])
    S = sp.csr_matrix((weights / totals[rows], A.indices, A.indptr), shape=A.shape)
    return np.asarray(S @ np.asarray(V, dtype=np.float64))


def relative_error(result, reference):
    """``||result - reference|| / ||reference||`` in float64 (inf for NaN; absolute if ref is 0)."""
    result = np.asarray(result, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if result.shape != reference.shape:
        raise ValueError(f"shapes differ: {result.shape} vs {reference.shape}")
    if not np.all(np.isfinite(result)):
        return float("inf")
    diff = np.linalg.norm(result - reference)
    norm = np.linalg.norm(reference)
    return float(diff / norm) if norm > 0 else float(diff)
