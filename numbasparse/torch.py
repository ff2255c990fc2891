"""PyTorch autograd for numbasparse's operations (``import numbasparse.torch as nst``).

A :class:`Graph` holds a sparsity pattern once (host CSR, and on the GPU a device CSR) and
the map from its entries to those of its transpose.  The edge values are an ordinary tensor
(``graph.values`` by default), so they can be learned: every function here differentiates
with respect to its dense operands and the values.

Gradients (C = A B with A's values a):  dB = A^T dC (SpMM on the transposed pattern with the
values gathered), da_ij = <dC_i, B_j> (SDDMM).  SDDMM s_ij = a_ij <X_i, Y_j>: dX = (a ⊙ ds) Y,
dY = (a ⊙ ds)^T X, da = ds ⊙ <X_i, Y_j>.  The fused operations recompute their scores in the
backward pass (as FlashAttention does) instead of storing them.  Backward passes are built from
the same differentiable operations, so ``create_graph=True`` gives exact second derivatives.

CPU tensors run on the CPU backend (numba.njit), CUDA tensors on the GPU kernels, so
``torch.autograd.gradcheck`` runs in float64 on either.
"""
import numpy as np
import scipy.sparse as sp
import torch

from . import api
from .csr import CSR, canonical_csr


class Graph:
    """A sparse matrix's pattern for autograd use: ``Graph(A, device="cuda")``.

    A: any scipy.sparse matrix (made canonical: sorted, duplicates summed).  ``values`` is a
    float tensor of its nnz values on ``device`` (pass your own, e.g. learnable, to the ops).
    """

    def __init__(self, A, *, device="cpu", dtype=torch.float32):
        host = canonical_csr(A, dtype=np.float64)
        self.shape = host.shape
        self.nnz = host.nnz
        self.device = torch.device(device)
        positions = sp.csr_matrix((np.arange(host.nnz, dtype=np.int64) + 1, host.indices, host.indptr),
                                  shape=host.shape)
        transposed = positions.T.tocsr()
        transposed.sort_indices()
        self._patterns = {False: host, True: sp.csr_matrix(
            (np.ones(host.nnz), transposed.indices, transposed.indptr), shape=transposed.shape)}
        self._to_transposed = torch.as_tensor(transposed.data - 1, device=self.device)
        self._rows = torch.as_tensor(np.repeat(np.arange(host.shape[0]), np.diff(host.indptr)), device=self.device)
        self._degrees = torch.as_tensor(np.diff(host.indptr), device=self.device)
        self.values = torch.as_tensor(host.data, dtype=dtype, device=self.device)
        self._device_csr = {}
        self._with_values = {}

    def matrix(self, values, transpose=False):
        """The pattern (or its transpose) with ``values`` (in this pattern's entry order), as
        the numbasparse API takes it: a scipy CSR for CPU tensors, a device CSR for CUDA."""
        values = values.detach()
        if transpose:
            values = values[self._to_transposed]
        pattern = self._patterns[transpose]
        if values.device.type == "cpu":
            return sp.csr_matrix((values.numpy(), pattern.indices, pattern.indptr), shape=pattern.shape)
        key = (transpose, values.dtype)
        if key not in self._device_csr:
            self._device_csr[key] = CSR.from_scipy(pattern, dtype=_numpy_dtype(values.dtype))
        values = values.contiguous()
        # The matrix of the last values seen, kept while they are passed again (the same memory:
        # it holds them, so their address is not reused), so that its launches stay bound and
        # repeated calls are replayed; values changed in place are read at each launch.
        cached = self._with_values.get(key)
        if cached is None or cached[0] != (values.data_ptr(), values.numel()):
            cached = self._with_values[key] = ((values.data_ptr(), values.numel()),
                                               self._device_csr[key].with_values(values))
        return cached[1]

    def row_sums(self, edge_values):
        """Sum of ``edge_values`` over each row's entries."""
        out = torch.zeros(self.shape[0], dtype=edge_values.dtype, device=edge_values.device)
        return out.index_add_(0, self._rows, edge_values)

    def degrees(self, dtype):
        return self._degrees.to(dtype)


def _numpy_dtype(dtype):
    return {torch.float32: np.float32, torch.float64: np.float64}[dtype]


def _sddmm_values(graph, X, Y, values):
    """``values ⊙ <X_i, Y_j>`` over the pattern, as a tensor in entry order (no autograd)."""
    out = api.sddmm(graph.matrix(values), X.detach().contiguous(), Y.detach().contiguous())
    return torch.from_numpy(out.data) if sp.issparse(out) else out


# The backward passes are written with the autograd Functions themselves (and torch ops), so
# that with ``create_graph=True`` they record their own graph: second derivatives are exact.

class _SpMM(torch.autograd.Function):
    """C = A B, or A^T B with ``transpose`` (A's values in the pattern's entry order)."""

    @staticmethod
    def forward(ctx, graph, values, B, transpose):
        ctx.graph, ctx.transpose = graph, transpose
        ctx.save_for_backward(values, B)
        return api.spmm(graph.matrix(values, transpose), B.detach().contiguous())

    @staticmethod
    def backward(ctx, dC):
        values, B = ctx.saved_tensors
        graph, transpose = ctx.graph, ctx.transpose
        dvalues = dB = None
        if ctx.needs_input_grad[1]:  # a_ij: <dC_i, B_j> (A B) or <B_i, dC_j> (A^T B)
            ones = torch.ones_like(values)
            dvalues = _SDDMM.apply(graph, ones, B, dC) if transpose else _SDDMM.apply(graph, ones, dC, B)
        if ctx.needs_input_grad[2]:
            dB = _SpMM.apply(graph, values, dC, not transpose)
        return None, dvalues, dB, None


class _SDDMM(torch.autograd.Function):
    """s = values ⊙ <X_i, Y_j> per stored entry (i, j)."""

    @staticmethod
    def forward(ctx, graph, values, X, Y):
        ctx.graph = graph
        ctx.save_for_backward(values, X, Y)
        return _sddmm_values(graph, X, Y, values)

    @staticmethod
    def backward(ctx, ds):
        values, X, Y = ctx.saved_tensors
        return (None,) + _score_grads(ctx.needs_input_grad[1:4], ctx.graph, values, X, Y, ds)


def _score_grads(needs, graph, values, X, Y, ds):
    """Gradients of s = values ⊙ <X_i, Y_j> given ds: (dvalues, dX, dY), None where not needed."""
    dvalues = dX = dY = None
    weighted = values * ds
    if needs[0]:
        dvalues = ds * _SDDMM.apply(graph, torch.ones_like(values), X, Y)
    if needs[1]:
        dX = _SpMM.apply(graph, weighted, Y, False)
    if needs[2]:
        dY = _SpMM.apply(graph, weighted, X, True)
    return dvalues, dX, dY


class _ScoresTimes(torch.autograd.Function):
    """out = f(s) Z with s = values ⊙ <X_i, Y_j> and f the identity or the row softmax; the
    forward is one fused kernel, the backward recomputes s (it is never stored)."""

    @staticmethod
    def forward(ctx, graph, values, X, Y, Z, softmax):
        ctx.graph, ctx.softmax = graph, softmax
        ctx.save_for_backward(values, X, Y, Z)
        fn = api.graph_attention if softmax else api.sddmm_spmm
        return fn(graph.matrix(values), X.detach().contiguous(), Y.detach().contiguous(), Z.detach().contiguous())

    @staticmethod
    def backward(ctx, dout):
        values, X, Y, Z = ctx.saved_tensors
        graph = ctx.graph
        s = _SDDMM.apply(graph, values, X, Y)
        weights = _edge_softmax(graph, s) if ctx.softmax else s
        dZ = _SpMM.apply(graph, weights, dout, True) if ctx.needs_input_grad[4] else None
        dweights = _SDDMM.apply(graph, torch.ones_like(values), dout, Z)
        if ctx.softmax:  # softmax backward per row: w ⊙ (dw - sum_j w dw)
            ds = weights * (dweights - graph.row_sums(weights * dweights)[graph._rows])
        else:
            ds = dweights
        return (None,) + _score_grads(ctx.needs_input_grad[1:4], graph, values, X, Y, ds) + (dZ, None)


def _edge_softmax(graph, s):
    largest = torch.full((graph.shape[0],), -torch.inf, dtype=s.dtype, device=s.device)
    largest = largest.scatter_reduce(0, graph._rows, s.detach(), "amax")  # a constant shift
    e = torch.exp(s - largest[graph._rows])
    return e / graph.row_sums(e)[graph._rows]


def _values(graph, values, like):
    values = graph.values if values is None else values
    if values.shape != (graph.nnz,):
        raise ValueError(f"values must have shape ({graph.nnz},), got {tuple(values.shape)}")
    if values.dtype != like.dtype or values.device != like.device:
        raise TypeError(f"values ({values.dtype}, {values.device}) must match the dense operands "
                        f"({like.dtype}, {like.device})")
    return values


def spmm(graph, B, values=None, *, reduce="sum"):
    """``C = A B`` (reduce "sum") or the row mean over stored entries ("mean"), differentiable
    in B and in the values."""
    values = _values(graph, values, B)
    if reduce == "mean":
        values = values / graph.degrees(values.dtype).clamp(min=1)[graph._rows]
    elif reduce != "sum":
        raise ValueError(f"reduce must be 'sum' or 'mean' for autograd, got {reduce!r}")
    return _SpMM.apply(graph, values, B, False)


def sddmm(graph, X, Y, values=None):
    """``values ⊙ <X_i, Y_j>`` per stored entry (a tensor in the pattern's entry order)."""
    return _SDDMM.apply(graph, _values(graph, values, X), X, Y)


def sddmm_spmm(graph, X, Y, Z, values=None):
    """``(A ⊙ (X Y^T)) Z`` in one fused kernel forward; differentiable in X, Y, Z, values."""
    return _ScoresTimes.apply(graph, _values(graph, values, X), X, Y, Z, False)


def graph_attention(graph, Q, K, V, values=None):
    """``softmax_row(A ⊙ (Q K^T)) V`` fused forward (online softmax); differentiable in all."""
    return _ScoresTimes.apply(graph, _values(graph, values, Q), Q, K, V, True)
