"""PyG layers whose aggregation runs on numbasparse (``import numbasparse.pyg``; needs
torch_geometric).

``GCNConv``, ``SAGEConv``, ``GATConv`` and ``GINConv`` are PyG's own classes with one method
replaced: ``propagate``, the message passing itself.  Constructor arguments, parameters (names,
shapes, initialisation), normalisation, attention coefficients, dropout, bias and outputs are
PyG's; the sum, mean or max over each node's incoming edges is :func:`numbasparse.torch.spmm`
(with the edge weights or attention coefficients as the sparse matrix's values), so gradients
flow through numbasparse's autograd.  A state dict moves between a PyG layer and its numbasparse
twin unchanged.

Any other ``MessagePassing`` layer whose messages are ``weight * x_j`` (or ``x_j``) can call
:func:`aggregate` from its ``propagate`` or ``message_and_aggregate``::

    def message_and_aggregate(self, edge_index, x):
        return numbasparse.pyg.aggregate(edge_index, x[0], size=(x[0].size(0), x[1].size(0)), reduce="sum")

Graphs follow PyG's default ``flow="source_to_target"``: node ``edge_index[1, e]`` receives the
message of ``edge_index[0, e]``.  The sparse pattern of an ``edge_index`` is built once and kept
(the last few distinct ones, compared by value), so a layer called again on the same graph pays
only for its kernels.
"""
import numbers

import torch
import torch_geometric.nn as pyg_nn

from . import torch as nst

#: Distinct edge_index tensors whose patterns are kept (compared by value: PyG builds a new
#: tensor on each call when it adds self loops).
PATTERNS_KEPT = 8
_patterns = []  # [(edge_index, (n_dst, n_src), Pattern)], most recent first


class Pattern:
    """The numbasparse graph of an ``edge_index`` (rows: receivers, columns: senders) and the
    entry of each edge (duplicate edges share one)."""

    def __init__(self, edge_index, size):
        # torch operations on the edge_index's device: a graph on the GPU is built there
        index = edge_index.detach().to(torch.int64)
        receivers, senders = index[1], index[0]
        n_dst, n_src = size
        if index.numel() and (int(index.min()) < 0 or int(senders.max()) >= n_src or int(receivers.max()) >= n_dst):
            raise ValueError(f"edge_index names a node outside 0..{n_src - 1} (sources) / 0..{n_dst - 1} "
                             f"(targets)")
        pairs = receivers * max(n_src, 1) + senders
        order = torch.argsort(pairs, stable=True)
        ordered = pairs[order]
        first = torch.ones_like(ordered, dtype=torch.bool)
        first[1:] = ordered[1:] != ordered[:-1]
        entry = torch.empty_like(order)
        entry[order] = torch.cumsum(first, 0) - 1
        n_entries = int(first.sum())
        counts = torch.bincount(entry, minlength=n_entries).to(torch.float64)
        rows, cols = receivers[order][first], senders[order][first]
        indptr = torch.zeros(n_dst + 1, dtype=torch.int64, device=index.device)
        indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=n_dst), 0)
        self.graph = nst.Graph._from_parts((indptr, cols, counts, (n_dst, n_src)), device=index.device,
                                           dtype=torch.float64)
        self.entry_of_edge = entry
        self.edges_per_row = torch.bincount(receivers, minlength=n_dst)

    def values(self, edge_values, like):
        """Per-entry values from per-edge ``edge_values`` ((E,) or (E, heads); None: 1 per
        edge), duplicates summed: the sum over a node's edges of ``value * x_j``."""
        if edge_values is None:
            return self.graph.values.to(like.dtype)  # edge counts per entry
        if edge_values.shape[0] != self.entry_of_edge.shape[0]:
            raise ValueError(f"edge_values must have one row per edge ({self.entry_of_edge.shape[0]}), got shape "
                             f"{tuple(edge_values.shape)}")
        shape = (self.graph.nnz,) + tuple(edge_values.shape[1:])
        return torch.zeros(shape, dtype=edge_values.dtype, device=edge_values.device).index_add(
            0, self.entry_of_edge, edge_values)


@torch.compiler.disable  # host work on the pattern, run eagerly (a graph break under torch.compile)
def pattern(edge_index, size):
    """The :class:`Pattern` of ``edge_index`` for ``size`` = (receivers, senders), from the
    patterns kept or new."""
    for i, (kept, kept_size, found) in enumerate(_patterns):
        if kept_size == size and kept.shape == edge_index.shape and kept.device == edge_index.device \
                and torch.equal(kept, edge_index):
            _patterns.insert(0, _patterns.pop(i))
            return found
    found = Pattern(edge_index, size)
    _patterns.insert(0, (edge_index.detach().clone(), size, found))
    del _patterns[PATTERNS_KEPT:]
    return found


def aggregate(edge_index, x, *, size=None, edge_values=None, reduce="sum"):
    """``out[i] = reduce over the edges (j -> i) of edge_values[e] * x[j]`` ("sum", "mean": over
    the edges, "max", "min": of ``x[j]``, edge values not allowed; nodes without edges give 0).
    ``x``: (senders, F), or (senders, heads, F) with ``edge_values`` (E, heads).  ``size``:
    (senders, receivers) as PyG passes it (default: x's rows for both)."""
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise TypeError(f"edge_index must be a (2, E) tensor (PyG's SparseTensor and torch sparse adjacency "
                        f"are not taken here), got {type(edge_index).__name__}")
    if edge_index.is_floating_point() or edge_index.is_complex() or edge_index.dtype == torch.bool:
        raise TypeError(f"edge_index must hold integer node ids, got {edge_index.dtype}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch tensor, got {type(x).__name__}")
    if size is not None and not all(n is None or isinstance(n, numbers.Integral) for n in size):
        raise TypeError(f"size must hold integers (or None), got {size!r}")
    n_src = x.shape[0] if size is None or size[0] is None else size[0]
    n_dst = n_src if size is None or size[1] is None else size[1]
    found = pattern(edge_index, (n_dst, n_src))
    if reduce in ("max", "min"):
        if edge_values is not None:
            raise ValueError(f"reduce={reduce!r} takes no edge values")
        ones = torch.ones(found.graph.nnz, dtype=x.dtype, device=x.device)
        return nst.spmm(found.graph, x, ones, reduce=reduce)
    values = found.values(edge_values, x)
    if reduce == "mean":
        values = values / found.edges_per_row.clamp(min=1)[found.graph._rows].to(values.dtype)
    elif reduce not in ("sum", "add"):
        raise ValueError(f"reduce must be 'sum', 'mean', 'max' or 'min', got {reduce!r}")
    return nst.spmm(found.graph, x, values.to(x.dtype))


def _size(size, x):
    """PyG's (senders, receivers) of a propagate call."""
    if size is not None:
        return size
    if isinstance(x, (tuple, list)):
        return (x[0].size(0), x[1].size(0) if x[1] is not None else x[0].size(0))
    return (x.size(0), x.size(0))


def _source(x):
    return x[0] if isinstance(x, (tuple, list)) else x


class GCNConv(pyg_nn.GCNConv):
    """PyG's ``GCNConv`` with the normalised sum over incoming edges on numbasparse."""

    def propagate(self, edge_index, size=None, x=None, edge_weight=None, **kwargs):
        return aggregate(edge_index, x, size=_size(size, x), edge_values=edge_weight, reduce="sum")


class SAGEConv(pyg_nn.SAGEConv):
    """PyG's ``SAGEConv`` (``aggr`` "mean", "max", "min" or "sum") with the aggregation on
    numbasparse."""

    def propagate(self, edge_index, size=None, x=None, **kwargs):
        return aggregate(edge_index, _source(x), size=_size(size, x), reduce=_reduce(self.aggr))


class GINConv(pyg_nn.GINConv):
    """PyG's ``GINConv`` with the sum over incoming edges on numbasparse."""

    def propagate(self, edge_index, size=None, x=None, **kwargs):
        return aggregate(edge_index, _source(x), size=_size(size, x), reduce=_reduce(self.aggr))


class GATConv(pyg_nn.GATConv):
    """PyG's ``GATConv`` (multi-head): PyG computes the attention coefficients (and their
    softmax and dropout); the weighted sum over incoming edges, per head, runs on numbasparse."""

    def edge_updater(self, edge_index, alpha=None, edge_attr=None, size=None):
        # PyG generates this method from the type comments in a class's own ``forward``, which a
        # subclass does not repeat: the same steps, written out (each edge's coefficient from its
        # sender's and receiver's, then PyG's edge_update: leaky ReLU, softmax, dropout)
        alpha_src, alpha_dst = alpha
        senders, receivers = edge_index[0], edge_index[1]
        n_dst = size[1] if size is not None and size[1] is not None else \
            (alpha_dst if alpha_dst is not None else alpha_src).size(0)
        return self.edge_update(alpha_src[senders], None if alpha_dst is None else alpha_dst[receivers],
                                edge_attr, receivers, None, n_dst)

    def propagate(self, edge_index, size=None, x=None, alpha=None, **kwargs):
        return aggregate(edge_index, _source(x), size=_size(size, x), edge_values=alpha, reduce="sum")


def _reduce(aggr):
    if not isinstance(aggr, str):
        raise ValueError(f"numbasparse.pyg takes aggr 'add'/'sum', 'mean', 'max' or 'min', got {aggr!r}")
    return {"add": "sum"}.get(aggr, aggr)
