"""Baselines timed beside numbasparse, each an optional import (reported as skipped if absent).

Every implementation is ``make(A, op, reduce) -> run`` where ``A`` is a scipy CSR graph and
``run(B)`` (SpMM) or ``run(X, Y)`` (SDDMM) takes torch CUDA tensors and returns something
``to_numpy`` understands.  ``make`` raises ``Unsupported`` for combinations it cannot do.
"""
import numpy as np

from ..dispatch import matmul_first


class Unsupported(Exception):
    """This baseline cannot run this case (missing package, reduction, ...)."""


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise Unsupported("torch is not installed") from exc
    if not torch.cuda.is_available():
        raise Unsupported("torch has no CUDA device")
    return torch


def _values(A, dtype):
    """A's values as a CUDA tensor of ``dtype`` (a name: "bfloat16" has no NumPy dtype)."""
    torch = _torch()
    return torch.as_tensor(A.data, device="cuda").to(getattr(torch, str(dtype)))


def _torch_csr(A, index_dtype, dtype):
    torch = _torch()
    return torch.sparse_csr_tensor(
        torch.as_tensor(A.indptr.astype(index_dtype), device="cuda"),
        torch.as_tensor(A.indices.astype(index_dtype), device="cuda"),
        _values(A, dtype), size=A.shape)


def in_float32(make):
    """A baseline run in float32 on float32 copies of the case's (16-bit) inputs, made when an
    input is first seen (so not timed): the float32 yardstick of half-precision cases."""
    def make32(A, op, reduce, dtype):
        run = make(A, op, reduce, "float32")
        copies = {}

        def run32(*inputs):
            key = tuple(t.data_ptr() for t in inputs)
            if key not in copies:
                copies[key] = [t.float() for t in inputs]
            return run(*copies[key])
        return run32
    return make32


def torch_csr(index_dtype):
    """cuSPARSE through ``torch.sparse.mm`` on a CSR tensor (sum only); for the "gcn" op with
    a torch matmul by W, first where W narrows the rows (as ``spmm_dense`` and PyG's GCNConv
    order them)."""
    def make(A, op, reduce, dtype):
        if op not in ("spmm", "gcn") or reduce != "sum":
            raise Unsupported("torch.sparse.mm on CUDA CSR does sum only")
        torch = _torch()
        S = _torch_csr(A, index_dtype, dtype)
        if op == "gcn":
            return lambda X, W: torch.sparse.mm(S, X @ W) if matmul_first(*W.shape) else torch.sparse.mm(S, X) @ W
        return lambda B: torch.sparse.mm(S, B)
    return make


def cupyx_csr(A, op, reduce, dtype):
    """cuSPARSE through ``cupyx.scipy.sparse.csr_matrix @ B`` (sum only)."""
    if op != "spmm" or reduce != "sum":
        raise Unsupported("cupyx does sum only")
    try:
        import cupy
        import cupyx.scipy.sparse as csp
    except ImportError as exc:
        raise Unsupported("cupy is not installed") from exc
    S = csp.csr_matrix((cupy.asarray(A.data.astype(dtype)), cupy.asarray(A.indices),
                        cupy.asarray(A.indptr)), shape=A.shape)
    return lambda B: S @ cupy.asarray(B)


def pyg_scatter(A, op, reduce, dtype):
    """PyG-style message passing: gather rows of B per edge, then ``index_add_`` /
    ``scatter_reduce_`` into the destination rows; SDDMM as gathered row dot products."""
    torch = _torch()
    row = torch.as_tensor(np.repeat(np.arange(A.shape[0]), np.diff(A.indptr)), device="cuda")
    col = torch.as_tensor(A.indices.astype(np.int64), device="cuda")
    val = _values(A, dtype)
    if op == "sddmm":
        return lambda X, Y: (X[row] * Y[col]).sum(-1) * val
    if op in ("sddmm_spmm", "attention"):
        def scores_times(X, Y, Z):
            scores = (X[row] * Y[col]).sum(-1) * val
            if op == "attention":  # edge softmax per destination row
                largest = torch.full((A.shape[0],), -torch.inf, dtype=X.dtype, device=X.device)
                largest = largest.scatter_reduce(0, row, scores, "amax", include_self=True)
                scores = torch.exp(scores - largest[row])
                scores = scores / torch.zeros_like(largest).index_add_(0, row, scores)[row]
            out = torch.zeros(A.shape[0], Z.shape[1], dtype=Z.dtype, device=Z.device)
            return out.index_add_(0, row, Z[col] * scores[:, None])
        return scores_times

    def run(B):
        messages = B[col] * val[:, None]
        out = torch.zeros(A.shape[0], B.shape[1], dtype=B.dtype, device=B.device)
        if reduce == "sum":
            return out.index_add_(0, row, messages)
        mode = {"mean": "mean", "max": "amax", "min": "amin"}[reduce]
        return out.scatter_reduce_(0, row[:, None].expand_as(messages), messages, mode, include_self=False)

    return run


def torch_sampled_addmm(A, op, reduce, dtype):
    """cuSPARSE SDDMM through ``torch.sparse.sampled_addmm``, which computes (X Y^T) on A's
    pattern without a_ij: on a 0/1 graph that is all; with other values, the result's values
    are then multiplied by A's in place (one elementwise kernel: what a torch user writes)."""
    if op != "sddmm":
        raise Unsupported("sampled_addmm is SDDMM")
    if str(dtype) not in ("float32", "float64"):
        raise Unsupported(f"torch.sparse.sampled_addmm is not implemented for {dtype}")
    torch = _torch()
    S = _torch_csr(A, np.int32, dtype)
    if np.all(A.data == 1):
        return lambda X, Y: torch.sparse.sampled_addmm(S, X, Y.T, beta=0.0)
    weights = S.values().clone()

    def weighted(X, Y):
        out = torch.sparse.sampled_addmm(S, X, Y.T, beta=0.0)
        out.values().mul_(weights)
        return out
    return weighted


BASELINES = {
    "torch_csr32": torch_csr(np.int32),
    "torch_csr64": torch_csr(np.int64),
    "cupyx": cupyx_csr,
    "pyg_scatter": pyg_scatter,
    "torch_sampled_addmm": torch_sampled_addmm,
    "torch_csr32_f32": in_float32(torch_csr(np.int32)),
    "torch_sampled_addmm_f32": in_float32(torch_sampled_addmm),
}

#: Operations each baseline implements.
OPS = {"torch_csr32": ("spmm", "gcn"), "torch_csr64": ("spmm", "gcn"), "cupyx": ("spmm",),
       "pyg_scatter": ("spmm", "sddmm", "sddmm_spmm", "attention"), "torch_sampled_addmm": ("sddmm",),
       "torch_csr32_f32": ("spmm", "gcn"), "torch_sampled_addmm_f32": ("sddmm",)}

#: The yardstick for speedups: cuSPARSE through PyTorch.
YARDSTICK = {"spmm": "torch_csr32", "sddmm": "torch_sampled_addmm", "gcn": "torch_csr32",
             "sddmm_spmm": "pyg_scatter", "attention": "pyg_scatter"}


def to_numpy(result):
    """Values of any result as a NumPy array (dense SpMM output or SDDMM values)."""
    if hasattr(result, "layout") and "sparse" in str(result.layout):
        result = result.values()
    if hasattr(result, "detach"):
        result = result.detach()
        return (result.float() if result.dtype.itemsize == 2 else result).cpu().numpy()
    if hasattr(result, "get"):
        return result.get()
    if hasattr(result, "copy_to_host"):
        return result.copy_to_host()
    return np.asarray(result)
