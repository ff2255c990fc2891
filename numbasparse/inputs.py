"""Sparse operands of other libraries, as the scipy CSR the boundary checks (one module for every
input type).  Each converter looks at attributes only, so numbasparse imports no framework:

- ``torch.sparse_coo`` / ``torch.sparse_csr`` tensors;
- ``edge_index``: a (2, E) integer array or tensor (``edge_index[0]`` the rows, ``[1]`` the
  columns, as ``torch.sparse_coo_tensor(edge_index, ...)`` and PyG's
  ``to_scipy_sparse_matrix`` read it), through :func:`from_edge_index` with optional edge
  weights and ``num_nodes``.  PyG's message passing (``flow="source_to_target"``) aggregates
  at ``edge_index[1]``: that is the transpose, ``from_edge_index(edge_index.flip(0))``;
- PyG's ``EdgeIndex`` (a tensor subclass with ``sparse_size``) and ``torch_sparse.SparseTensor``;
- networkx graphs (the adjacency, nodes in ``G.nodes`` order, weights from ``weight``);
- ``cupyx.scipy.sparse`` matrices.

Operands on a GPU are copied to the host: numbasparse's plans are built from a host copy of the
pattern (a graph built on the GPU without that copy is future work).
"""
import numpy as np
from ._compat import scipy_sparse as sp


def from_edge_index(edge_index, edge_weight=None, num_nodes=None, *, name="edge_index"):
    """A scipy CSR matrix of ``num_nodes`` x ``num_nodes`` (default: the largest index + 1)
    with ``A[edge_index[0, e], edge_index[1, e]] = edge_weight[e]`` (1 without weights;
    duplicate edges are summed).  ``edge_index``: a (2, E) integer NumPy array or tensor."""
    index = _host_array(edge_index, name)
    if index.ndim != 2 or index.shape[0] != 2:
        raise ValueError(f"{name} must have shape (2, E), got {tuple(index.shape)}")
    if index.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got {index.dtype}")
    n_edges = index.shape[1]
    if n_edges and index.min() < 0:
        raise ValueError(f"{name} has a negative node index: {int(index.min())}")
    largest = int(index.max()) + 1 if n_edges else 0
    if num_nodes is None:
        num_nodes = largest
    elif not isinstance(num_nodes, (int, np.integer)) or isinstance(num_nodes, bool) or num_nodes < 0:
        raise TypeError(f"num_nodes must be a non-negative integer, got {num_nodes!r}")
    elif num_nodes < largest:
        raise ValueError(f"num_nodes is {num_nodes} but {name} names node {largest - 1}")
    if edge_weight is None:
        weight = np.ones(n_edges, np.float32)
    else:
        weight = _host_array(edge_weight, "edge_weight")
        if weight.shape != (n_edges,):
            raise ValueError(f"edge_weight must have shape ({n_edges},) (one weight per edge), got {weight.shape}")
    return sp.coo_matrix((weight, (index[0], index[1])), shape=(int(num_nodes), int(num_nodes))).tocsr()


def as_scipy(A, name="A"):
    """``A`` as a scipy sparse matrix when it is one of the inputs above, else None."""
    module = type(A).__module__.split(".")[0]
    if module == "torch" and getattr(A, "layout", None) is not None:
        return _from_torch_sparse(A, name)
    if hasattr(A, "sparse_size") and hasattr(A, "as_tensor"):  # PyG EdgeIndex
        index = _host_array(A.as_tensor(), name)
        largest = int(index.max()) + 1 if index.size else 0
        rows, cols = (largest if n is None else int(n) for n in A.sparse_size())
        return sp.coo_matrix((np.ones(index.shape[1], np.float32), (index[0], index[1])), shape=(rows, cols)).tocsr()
    if module == "torch_sparse" and hasattr(A, "csr"):  # torch_sparse.SparseTensor
        indptr, indices, values = A.csr()
        rows, cols = A.sparse_sizes()
        data = np.ones(indices.numel(), np.float32) if values is None else _host_array(values, f"{name}'s values")
        return sp.csr_matrix((data, _host_array(indices, name), _host_array(indptr, name)), shape=(rows, cols))
    if module == "networkx":
        import networkx as nx

        return nx.to_scipy_sparse_array(A, format="csr", dtype=np.float32)
    if module == "cupyx" and hasattr(A, "get"):
        return A.get()
    return None


def _from_torch_sparse(A, name):
    import torch

    if A.layout == torch.sparse_coo:
        A = A.coalesce()
        index, values = _host_array(A.indices(), name), _host_array(A.values(), f"{name}'s values")
        if values.ndim != 1:
            raise ValueError(f"{name} must have scalar values (a 2-D sparse tensor), got values of shape "
                             f"{values.shape}")
        return sp.coo_matrix((values, (index[0], index[1])), shape=tuple(A.shape)).tocsr()
    if A.layout == torch.sparse_csr:
        return sp.csr_matrix((_host_array(A.values(), f"{name}'s values"), _host_array(A.col_indices(), name),
                              _host_array(A.crow_indices(), name)), shape=tuple(A.shape))
    raise TypeError(f"{name} is a torch tensor of layout {A.layout}; numbasparse takes sparse_coo or sparse_csr "
                    f"tensors as sparse operands")


def _host_array(x, name):
    """A NumPy view or copy of an array or tensor (tensors detached and copied from the GPU)."""
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.split(".")[0] == "torch":
        return x.detach().cpu().numpy()
    if hasattr(x, "get") and hasattr(x, "__cuda_array_interface__"):  # a CuPy array
        return x.get()
    try:
        return np.asarray(x)
    except Exception as error:
        raise TypeError(f"{name} must be an array or tensor, got {type(x).__name__}") from error
