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
``torch.autograd.gradcheck`` runs in float64 on either.  The operations are torch custom ops
(``torch.ops.numbasparse.spmm``, ``.sddmm``, ``.scores_times``), so ``torch.compile`` traces a
model built on them without graph breaks.
"""
import itertools
import weakref

import numpy as np
import scipy.sparse as sp
import torch

from . import api
from .csr import CSR, canonical_csr
from .inputs import gpu_csr_parts


_IDS = itertools.count()


class Graph:
    """A sparse matrix's pattern for autograd use: ``Graph(A, device="cuda")``.

    A: any sparse operand numbasparse takes (made canonical: sorted, duplicates summed); one
    already on the GPU (a CUDA torch sparse tensor, ...) is converted there, without a host copy.
    ``values`` is a float tensor of its nnz values on ``device`` (pass your own, e.g. learnable,
    to the ops).  The transposed pattern (for the backward pass) and the map from this pattern's
    entries to its transpose's are built once, with torch operations on ``device``.
    """

    def __init__(self, A, *, device="cpu", dtype=torch.float32):
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"device must name a torch device ('cpu', 'cuda', 'cuda:1'), got {device!r}") from error
        parts = gpu_csr_parts(A) if device.type == "cuda" else None  # a graph on the GPU stays there
        if parts is None:
            host = canonical_csr(A, dtype=np.float64)
            parts = (*(torch.as_tensor(x, device=device) for x in (host.indptr, host.indices, host.data)), host.shape)
        self._setup(parts, device, dtype)

    @classmethod
    def _from_parts(cls, parts, *, device, dtype):
        """A Graph of canonical CSR parts (indptr, indices, values, shape) as tensors."""
        self = object.__new__(cls)
        self._setup(parts, torch.device(device), dtype)
        return self

    def _setup(self, parts, device, dtype):
        if dtype not in _DTYPES:
            raise TypeError(f"dtype must be one of {', '.join(map(str, _DTYPES))}, got {dtype}")
        indptr, indices, values, shape = parts
        indptr, indices = indptr.to(device, torch.int64), indices.to(device, torch.int64)
        self.shape, self.nnz, self.device = tuple(shape), int(indices.shape[0]), device
        self._degrees = indptr[1:] - indptr[:-1]
        self._rows = torch.repeat_interleave(torch.arange(self.shape[0], device=device), self._degrees)
        self._cols = indices
        # the transpose's entries are this pattern's in (column, row) order
        self._to_transposed = torch.argsort(indices * max(self.shape[0], 1) + self._rows, stable=True)
        t_indptr = torch.zeros(self.shape[1] + 1, dtype=torch.int64, device=device)
        t_indptr[1:] = torch.cumsum(torch.bincount(indices, minlength=self.shape[1]), 0)
        self._csr_parts = {False: (indptr, indices, self.shape),
                           True: (t_indptr, self._rows[self._to_transposed], self.shape[::-1])}
        self._host_patterns = {}
        self.values = values.detach().to(device, dtype).clone()  # never the caller's memory (it may be learned)
        self._derived_values = {}  # what -> (the values' identity and version, derived values): _derived
        self._device_csr = {}
        self._with_values = {}
        self.key = f"graph{next(_IDS)}"  # how the custom ops name this graph (a string: a constant to torch.compile)
        _GRAPHS[self.key] = self

    def _derived(self, what, values, make):
        """``make(values)``, made once while ``values`` are unchanged (the same tensor, not
        modified in place) and need no gradient: values derived anew each call (an autocast
        cast, the mean's scaling) would give each call a new matrix, whose launches are never
        bound nor its calls replayed."""
        if values.requires_grad or torch.compiler.is_compiling():  # (a compiled graph derives them as torch ops)
            return make(values)
        key = (values.data_ptr(), values.shape, values.dtype, values._version)
        kept = self._derived_values.get(what)
        if kept is None or kept[0] != key or kept[2] is not values:
            kept = self._derived_values[what] = (key, make(values), values)
        return kept[1]

    def pattern(self, transpose=False):
        """The pattern (or its transpose) as a scipy CSR of ones (a host copy, made on first use)."""
        if transpose not in self._host_patterns:
            indptr, indices, shape = self._csr_parts[transpose]
            self._host_patterns[transpose] = sp.csr_matrix(
                (np.ones(self.nnz), indices.cpu().numpy(), indptr.cpu().numpy()), shape=shape)
        return self._host_patterns[transpose]

    def matrix(self, values, transpose=False):
        """The pattern (or its transpose) with ``values`` (in this pattern's entry order), as
        the numbasparse API takes it: a scipy CSR for CPU tensors, a device CSR for CUDA."""
        values = values.detach()
        if transpose:
            values = values[self._to_transposed]
        if values.device.type == "cpu":  # (scipy holds 16-bit values as float32; the API rounds them back)
            pattern = self.pattern(transpose)
            host = values.numpy() if values.dtype in (torch.float32, torch.float64) else values.float().numpy()
            return sp.csr_matrix((host, pattern.indices, pattern.indptr), shape=pattern.shape)
        key = (transpose, values.dtype)
        if key not in self._device_csr:
            indptr, indices, shape = self._csr_parts[transpose]
            narrow = torch.int32 if max(*shape, self.nnz) < 2**31 else torch.int64
            ones = torch.ones(self.nnz, dtype=values.dtype, device=values.device)
            self._device_csr[key] = CSR._from_device(indptr.to(narrow), indices.to(narrow), ones, shape)
        values = values.contiguous()
        # The matrices of the last few values seen (each holds its values, so their address is not
        # reused), so that a forward's launches stay bound and its calls replay although the
        # backward passes other values (ones, weights) in between; values changed in place are
        # read at each launch.
        recent = self._with_values.setdefault(key, {})
        address = (values.data_ptr(), values.numel())
        matrix = recent.pop(address, None)
        if matrix is None:
            matrix = self._device_csr[key].with_values(values)
            keep = _RECENT_VALUES if values.numel() * values.element_size() <= _RECENT_BYTES else 1
            while len(recent) >= keep:
                del recent[next(iter(recent))]  # the least recently used
        recent[address] = matrix
        return matrix

    @property
    def rows(self):
        """Each entry's row (an int64 tensor in entry order)."""
        return self._rows

    @property
    def cols(self):
        """Each entry's column (an int64 tensor in entry order).  Per-edge elementwise operations
        of node values (DGL's ``u_add_v``, ``u_mul_v``, ...) are ``X[g.rows] + Y[g.cols]`` in
        torch: a gather each, near the memory bandwidth already, with autograd and torch.compile
        as usual; numbasparse's SDDMM is the reduction (``<X_i, Y_j>``), which torch has not."""
        return self._cols

    def row_sums(self, edge_values):
        """Sum of ``edge_values`` over each row's entries."""
        return _row_sums(edge_values, self._rows, self.shape[0])

    def degrees(self, dtype):
        return self._degrees.to(dtype)


_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_RECENT_VALUES = 4  # matrices kept per (pattern, dtype): a training step's forward values and its backward's
_RECENT_BYTES = 64 << 20  # larger values keep one matrix (their calls are kernel-bound: replays save little)
_AUTOCAST_FROM = (torch.float32, torch.float16, torch.bfloat16)  # what autocast casts (float64 stays)
_VALUE_DTYPES = _AUTOCAST_FROM + (torch.float64,)


def _host_values(out, dtype):
    """An SDDMM result as a tensor of the nnz values of ``dtype`` (the CPU backend's is a scipy
    CSR, float32 for 16-bit operands)."""
    return torch.from_numpy(out.data).to(dtype) if sp.issparse(out) else out


def _check(graph, **operands):
    """TypeError unless ``graph`` is a :class:`Graph` and every operand a torch tensor (or None)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a numbasparse.torch.Graph (Graph(A, device=...)), got "
                        f"{type(graph).__module__}.{type(graph).__name__}")
    for name, x in operands.items():
        if x is not None and not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor, got {type(x).__module__}.{type(x).__name__}")
        if x is not None and x.dtype not in _VALUE_DTYPES:
            raise TypeError(f"{name} must have dtype float32, float64, float16 or bfloat16, got {x.dtype}")


def _autocast(graph, *tensors):
    """The dense operands and, last, the edge values (None: ``graph.values``) as
    ``torch.autocast`` would pass them to a matmul: where autocast is on for their device,
    float32 and 16-bit ones in the autocast dtype (float64 ones stay: as cuBLAS ops under
    autocast, an explicit float64 is kept).  The casts are torch ops, so gradients flow back in
    each operand's own dtype.  The graph's own values, when no gradient flows to them, are cast
    once per dtype while they are unchanged: a new cast each step would give each step a new
    matrix, whose calls are never bound or replayed."""
    *dense, values = tensors
    own = values is None
    values = graph.values if own else values
    device_type = next(t for t in dense if t is not None).device.type
    if not torch.is_autocast_enabled(device_type):
        return (*dense, values)
    dtype = torch.get_autocast_dtype(device_type)
    dense = [t.to(dtype) if t is not None and t.dtype in _AUTOCAST_FROM else t for t in dense]
    if values.dtype not in _AUTOCAST_FROM or values.dtype == dtype:
        return (*dense, values)
    if not own:
        return (*dense, values.to(dtype))
    return (*dense, graph._derived(("cast", dtype), values, lambda v: v.to(dtype)))


# Each operation exists twice, with one forward, one setup and one backward: as a torch custom op
# (``numbasparse::spmm``, ``::sddmm``, ``::spmm_extremum``, ``::scores_times``, with a fake implementation and
# registered autograd), which torch.compile traces without a graph break, and as an
# autograd.Function, which eager calls take because its Python overhead per call is far smaller
# (the custom op's autograd wrapper costs tens of microseconds).  ``_run`` picks one.  A Graph
# reaches an op as its key, a string (ops take tensors and plain values only).  The backward
# formulas call the operations themselves (and torch ops), so with ``create_graph=True`` they
# record their own graph: second derivatives are exact.

_GRAPHS = weakref.WeakValueDictionary()  # Graph.key -> Graph


def _graph(key):
    graph = _GRAPHS.get(key)
    if graph is None:
        raise RuntimeError(f"numbasparse {key} no longer exists (keep the Graph alive while its ops run)")
    return graph


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _run(name, *args):
    """Operation ``name`` ("spmm", "sddmm", "scores_times") on ``args``: the autograd.Function
    for plain tensors in eager mode, the custom op while torch.compile traces or for tensor
    subclasses (fake and functional tensors of AOT tracing, and any other)."""
    if torch.compiler.is_compiling() or any(type(a) not in _PLAIN for a in args if isinstance(a, torch.Tensor)):
        return _CUSTOM_OPS[name](*args)
    return _FUNCTIONS[name].apply(*args)


def _spmm_forward(values, B, graph_key, transpose):
    """C = A B, or A^T B with ``transpose`` (A's values in the pattern's entry order)."""
    return api.spmm(_graph(graph_key).matrix(values, transpose), B.detach().contiguous())


def _spmm_setup(ctx, inputs, output):
    values, B, graph_key, transpose = inputs
    ctx.graph_key, ctx.transpose = graph_key, transpose
    ctx.save_for_backward(values, B)


def _spmm_backward(ctx, dC):
    values, B = ctx.saved_tensors
    graph_key, transpose = ctx.graph_key, ctx.transpose
    dvalues = dB = None
    if ctx.needs_input_grad[0]:  # a_ij: <dC_i, B_j> (A B) or <B_i, dC_j> (A^T B)
        ones = torch.ones_like(values)
        dvalues = _run("sddmm", ones, B, dC, graph_key) if transpose else _run("sddmm", ones, dC, B, graph_key)
    if ctx.needs_input_grad[1]:
        dB = _run("spmm", values, dC, graph_key, not transpose)
    return dvalues, dB, None, None


def _sddmm_forward(values, X, Y, graph_key):
    """s = values ⊙ <X_i, Y_j> per stored entry (i, j), in the pattern's entry order."""
    graph = _graph(graph_key)
    return _host_values(api.sddmm(graph.matrix(values), X.detach().contiguous(), Y.detach().contiguous()), X.dtype)


def _sddmm_setup(ctx, inputs, output):
    values, X, Y, graph_key = inputs
    ctx.graph_key = graph_key
    ctx.save_for_backward(values, X, Y)


def _sddmm_backward(ctx, ds):
    values, X, Y = ctx.saved_tensors
    return _score_grads(ctx.needs_input_grad[:3], ctx.graph_key, values, X, Y, ds) + (None,)


def _score_grads(needs, graph_key, values, X, Y, ds):
    """Gradients of s = values ⊙ <X_i, Y_j> given ds: (dvalues, dX, dY), None where not needed."""
    dvalues = dX = dY = None
    weighted = values * ds
    if needs[0]:
        dvalues = ds * _run("sddmm", torch.ones_like(values), X, Y, graph_key)
    if needs[1]:
        dX = _run("spmm", weighted, Y, graph_key, False)
    if needs[2]:
        dY = _run("spmm", weighted, X, graph_key, True)
    return dvalues, dX, dY


def _scores_times_forward(values, X, Y, Z, rows, graph_key, softmax):
    """out = f(s) Z with s = values ⊙ <X_i, Y_j> and f the identity or the row softmax (fused
    where it pays on CUDA, ``fused="auto"``); the backward recomputes s (it is never stored).
    ``rows``: each entry's row (the backward's softmax needs it as an input, not a constant)."""
    fn = api.graph_attention if softmax else api.sddmm_spmm
    return fn(_graph(graph_key).matrix(values), X.detach().contiguous(), Y.detach().contiguous(),
              Z.detach().contiguous())


def _scores_times_setup(ctx, inputs, output):
    values, X, Y, Z, rows, graph_key, softmax = inputs
    ctx.graph_key, ctx.softmax, ctx.n_rows = graph_key, softmax, _graph(graph_key).shape[0]
    ctx.save_for_backward(values, X, Y, Z, rows)


def _scores_times_backward(ctx, dout):
    values, X, Y, Z, rows = ctx.saved_tensors
    graph_key = ctx.graph_key
    dtypes = (values.dtype, X.dtype, Y.dtype, Z.dtype)
    if X.dtype in (torch.float16, torch.bfloat16):  # the recomputed scores in float32, as the fused
        values, X, Y, Z, dout = (t.float() for t in (values, X, Y, Z, dout))  # forward keeps them
    s = _run("sddmm", values, X, Y, graph_key)
    weights = _edge_softmax(s, rows, ctx.n_rows) if ctx.softmax else s
    dZ = _run("spmm", weights, dout, graph_key, True) if ctx.needs_input_grad[3] else None
    dweights = _run("sddmm", torch.ones_like(values), dout, Z, graph_key)
    if ctx.softmax:  # softmax backward per row: w ⊙ (dw - sum_j w dw)
        ds = weights * (dweights - _row_sums(weights * dweights, rows, ctx.n_rows)[rows])
    else:
        ds = dweights
    grads = _score_grads(ctx.needs_input_grad[:3], graph_key, values, X, Y, ds) + (dZ,)
    return tuple(g if g is None else g.to(d) for g, d in zip(grads, dtypes)) + (None, None, None)


def _extremum_forward(values, B, rows, cols, graph_key, reduce):
    """C[i] = max (or min) over the stored j of a_ij B[j]; ``rows``, ``cols``: each entry's row
    and column (the backward's inputs)."""
    return api.spmm(_graph(graph_key).matrix(values), B.detach().contiguous(), reduce=reduce)


def _extremum_setup(ctx, inputs, output):
    values, B, rows, cols, graph_key, reduce = inputs
    ctx.graph_key = graph_key
    ctx.save_for_backward(values, B, rows, cols, output)


def _extremum_backward(ctx, dC):
    """The gradient of each output element goes to the one entry that gave it: of the entries
    whose product equals the result, the first in the row's (sorted) order.  A NaN result sends
    no gradient (a NaN product equals nothing).  Built from torch ops on (nnz, N) arrays."""
    values, B, rows, cols, C = ctx.saved_tensors
    n_entries = values.shape[0]
    products = values[:, None] * B[cols]
    hits = products == C[rows]
    position = torch.arange(n_entries, device=values.device)[:, None].expand_as(products)
    candidates = torch.where(hits, position, n_entries)
    first = torch.full_like(C, n_entries, dtype=position.dtype).scatter_reduce(
        0, rows[:, None].expand_as(candidates), candidates, "amin")
    routed = torch.where(hits & (position == first[rows]), dC[rows], torch.zeros_like(products))
    dvalues = (routed * B[cols]).sum(dim=1) if ctx.needs_input_grad[0] else None
    dB = torch.zeros_like(B).index_add(0, cols, routed * values[:, None]) if ctx.needs_input_grad[1] else None
    return dvalues, dB, None, None, None, None


@torch.library.custom_op("numbasparse::spmm", mutates_args=())
def _spmm_op(values: torch.Tensor, B: torch.Tensor, graph_key: str, transpose: bool) -> torch.Tensor:
    return _spmm_forward(values, B, graph_key, transpose)


@_spmm_op.register_fake
def _(values, B, graph_key, transpose):
    return B.new_empty((_graph(graph_key).shape[1 if transpose else 0], B.shape[1]))


@torch.library.custom_op("numbasparse::sddmm", mutates_args=())
def _sddmm_op(values: torch.Tensor, X: torch.Tensor, Y: torch.Tensor, graph_key: str) -> torch.Tensor:
    return _sddmm_forward(values, X, Y, graph_key)


@_sddmm_op.register_fake
def _(values, X, Y, graph_key):
    return X.new_empty((_graph(graph_key).nnz,))


@torch.library.custom_op("numbasparse::spmm_extremum", mutates_args=())
def _extremum_op(values: torch.Tensor, B: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, graph_key: str,
                 reduce: str) -> torch.Tensor:
    return _extremum_forward(values, B, rows, cols, graph_key, reduce)


@_extremum_op.register_fake
def _(values, B, rows, cols, graph_key, reduce):
    return B.new_empty((_graph(graph_key).shape[0], B.shape[1]))


@torch.library.custom_op("numbasparse::scores_times", mutates_args=())
def _scores_times_op(values: torch.Tensor, X: torch.Tensor, Y: torch.Tensor, Z: torch.Tensor, rows: torch.Tensor,
                     graph_key: str, softmax: bool) -> torch.Tensor:
    return _scores_times_forward(values, X, Y, Z, rows, graph_key, softmax)


@_scores_times_op.register_fake
def _(values, X, Y, Z, rows, graph_key, softmax):
    return Z.new_empty((_graph(graph_key).shape[0], Z.shape[1]))


def _function(name, forward, setup, backward):
    """The autograd.Function of an operation (the eager path of :func:`_run`), with a classic
    ``forward(ctx, ...)``: a ``setup_context`` Function costs about three times as much per call."""
    def forward_with_ctx(ctx, *inputs):
        output = forward(*inputs)
        setup(ctx, inputs, output)
        return output

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward_with_ctx),
                                                   "backward": staticmethod(backward)})


def _holding_graph(setup):
    """``setup`` that also keeps the op's Graph alive until the backward has run: ops name their
    Graph by key, so ``spmm(Graph(A), X).sum().backward()`` would otherwise find it gone."""
    def setup_holding_graph(ctx, inputs, output):
        ctx.graph = next(_GRAPHS.get(a) for a in inputs if isinstance(a, str) and a.startswith("graph"))
        setup(ctx, inputs, output)

    return setup_holding_graph


_CUSTOM_OPS = {"spmm": _spmm_op, "sddmm": _sddmm_op, "spmm_extremum": _extremum_op, "scores_times": _scores_times_op}
_FUNCTIONS = {}
for _name, _parts in (("spmm", (_spmm_forward, _spmm_setup, _spmm_backward)),
                      ("sddmm", (_sddmm_forward, _sddmm_setup, _sddmm_backward)),
                      ("spmm_extremum", (_extremum_forward, _extremum_setup, _extremum_backward)),
                      ("scores_times", (_scores_times_forward, _scores_times_setup, _scores_times_backward))):
    _parts = (_parts[0], _holding_graph(_parts[1]), _parts[2])
    _CUSTOM_OPS[_name].register_autograd(_parts[2], setup_context=_parts[1])
    _FUNCTIONS[_name] = _function(f"_{_name}", *_parts)


def _row_sums(edge_values, rows, n_rows):
    """Sum of ``edge_values`` ((E, ...)) over each row's entries (``rows``: each entry's row)."""
    shape = (n_rows,) + tuple(edge_values.shape[1:])
    return torch.zeros(shape, dtype=edge_values.dtype, device=edge_values.device).index_add(0, rows, edge_values)


def _edge_softmax(s, rows, n_rows):
    """Softmax of the entry values ``s`` ((E,) or (E, heads)) over each row's entries."""
    index = rows if s.dim() == 1 else rows[:, None].expand_as(s)
    largest = torch.full((n_rows,) + tuple(s.shape[1:]), -torch.inf, dtype=s.dtype, device=s.device)
    largest = largest.scatter_reduce(0, index, s.detach(), "amax")  # a constant shift
    e = torch.exp(s - largest[rows])
    return e / _row_sums(e, rows, n_rows)[rows]


def _values(graph, values, like, heads=None):
    """The entry values for an operation on ``like``: (nnz,), or (nnz, heads) for a multi-head one."""
    values = graph.values if values is None else values
    if heads is not None and values.dim() == 1:
        values = values[:, None].expand(graph.nnz, heads)
    expected = (graph.nnz,) if heads is None else (graph.nnz, heads)
    if values.shape != expected:
        raise ValueError(f"values must have shape {expected}, got {tuple(values.shape)}")
    if values.dtype != like.dtype or values.device != like.device:
        raise TypeError(f"values ({values.dtype}, {values.device}) must match the dense operands "
                        f"({like.dtype}, {like.device})")
    return values


def _per_head(fn, values, *dense):
    """A multi-head operation as one per head (a launch each): head h takes ``values[:, h]`` and
    ``d[:, h]`` of every dense operand; the results are stacked on dimension 1."""
    return torch.stack([fn(values[:, h], *(d[:, h] for d in dense)) for h in range(values.shape[1])], dim=1)


def spmm(graph, B, values=None, *, reduce="sum"):
    """``C = A B`` (reduce "sum"), the row mean over stored entries ("mean"), or the row maximum
    or minimum of ``a_ij B[j]`` ("max", "min"; rows without entries give 0), differentiable in B
    and in the values.  max/min route each output's gradient to the entry that gave it (of tied
    entries, the first in the row; a NaN result passes none).

    Multi-head: B of shape (K, heads, F) with values of shape (nnz, heads) (or (nnz,), shared by
    the heads) gives C of shape (M, heads, F), head h computed with values[:, h] and B[:, h]."""
    _check(graph, B=B, values=values)
    B, values = _autocast(graph, B, values)
    if B.dim() == 3:
        values = _values(graph, values, B, heads=B.shape[1])
        return _per_head(lambda v, b: spmm(graph, b.contiguous(), v.contiguous(), reduce=reduce), values, B)
    values = _values(graph, values, B)
    if reduce == "mean":
        values = graph._derived("mean", values, lambda v: v / graph.degrees(v.dtype).clamp(min=1)[graph._rows])
    elif reduce in ("max", "min"):
        return _run("spmm_extremum", values, B, graph._rows, graph._cols, graph.key, reduce)
    elif reduce != "sum":
        raise ValueError(f"reduce must be 'sum', 'mean', 'max' or 'min', got {reduce!r}")
    return _run("spmm", values, B, graph.key, False)


def sddmm(graph, X, Y, values=None):
    """``values ⊙ <X_i, Y_j>`` per stored entry (a tensor in the pattern's entry order).
    Multi-head: X (M, heads, D) and Y (N, heads, D) give scores of shape (nnz, heads)."""
    _check(graph, X=X, Y=Y, values=values)
    X, Y, values = _autocast(graph, X, Y, values)
    if X.dim() != Y.dim() or (X.dim() == 3 and X.shape[1] != Y.shape[1]):
        raise ValueError(f"X and Y must both be 2-D, or both 3-D with the same number of heads; got shapes "
                         f"{tuple(X.shape)} and {tuple(Y.shape)}")
    if X.dim() == 3:
        values = _values(graph, values, X, heads=X.shape[1])
        return _per_head(lambda v, x, y: sddmm(graph, x.contiguous(), y.contiguous(), v.contiguous()), values, X, Y)
    return _run("sddmm", _values(graph, values, X), X, Y, graph.key)


def sddmm_spmm(graph, X, Y, Z, values=None):
    """``(A ⊙ (X Y^T)) Z`` (forward fused where it pays: ``ns.sddmm_spmm(fused="auto")``);
    differentiable in X, Y, Z, values."""
    _check(graph, X=X, Y=Y, Z=Z, values=values)
    X, Y, Z, values = _autocast(graph, X, Y, Z, values)
    return _run("scores_times", _values(graph, values, X), X, Y, Z, graph._rows, graph.key, False)


def graph_attention(graph, Q, K, V, values=None):
    """``softmax_row(A ⊙ (Q K^T)) V`` (forward fused where it pays, with an online softmax:
    ``ns.graph_attention(fused="auto")``); differentiable in all."""
    _check(graph, Q=Q, K=K, V=V, values=values)
    Q, K, V, values = _autocast(graph, Q, K, V, values)
    return _run("scores_times", _values(graph, values, Q), Q, K, V, graph._rows, graph.key, True)


def edge_softmax(graph, scores):
    """Softmax of per-entry ``scores`` over each row's stored entries (GAT's attention weights):
    ``scores`` of shape (nnz,) or (nnz, heads), in the pattern's entry order (as :func:`sddmm`
    returns them); rows without entries have no weights.  Differentiable (torch ops)."""
    _check(graph, scores=scores)
    if scores.shape[:1] != (graph.nnz,):
        raise ValueError(f"scores must have {graph.nnz} rows (one per stored entry), got shape {tuple(scores.shape)}")
    return _edge_softmax(scores, graph._rows, graph.shape[0])
