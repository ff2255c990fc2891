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

A graph already on a GPU (a CUDA torch sparse tensor, a CUDA ``EdgeIndex`` or ``SparseTensor``, a
cupyx matrix) is made canonical and checked there, with torch's own GPU operations
(:func:`gpu_csr_parts`), and becomes a device :class:`numbasparse.CSR` without a host round trip
(only ``indptr`` is copied back: the plans are built from row lengths).  The other inputs are
converted on the host (:func:`as_scipy`).
"""
import numpy as np
from ._compat import scipy_sparse as sp
from .validation import check_csr_arrays


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
    if n_edges and int(index.max()) >= np.iinfo(np.int64).max:
        raise ValueError(f"{name} has a node index beyond int64: {int(index.max())}")
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
        if weight.dtype.kind not in "biuf":
            raise TypeError(f"edge_weight must hold real numbers, got {weight.dtype}")
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
        _check_index(index, (rows, cols), name)
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

    if A.layout in (torch.sparse_coo, torch.sparse_csr) and (A.dim() != 2 or A.sparse_dim() != 2):
        raise ValueError(f"{name} must be a 2-D sparse tensor with scalar values, got shape {tuple(A.shape)} "
                         f"with {A.sparse_dim()} sparse dimensions")
    if A.layout == torch.sparse_coo:
        _check_index(A._indices(), tuple(A.shape), name)  # before coalesce(), which corrupts memory on one out of range
        A = A.coalesce()
        index, values = _host_array(A.indices(), name), _host_array(A.values(), f"{name}'s values")
        if values.ndim != 1:
            raise ValueError(f"{name} must have scalar values (a 2-D sparse tensor), got values of shape "
                             f"{values.shape}")
        return sp.coo_matrix((values, (index[0], index[1])), shape=tuple(A.shape)).tocsr()
    if A.layout == torch.sparse_csr:
        indptr, indices = _host_array(A.crow_indices(), name), _host_array(A.col_indices(), name)
        check_csr_arrays(indptr, indices, tuple(A.shape), name)
        return sp.csr_matrix((_host_array(A.values(), f"{name}'s values"), indices, indptr), shape=tuple(A.shape))
    raise TypeError(f"{name} is a torch tensor of layout {A.layout}; numbasparse takes sparse_coo or sparse_csr "
                    f"tensors as sparse operands")


def _host_array(x, name):
    """A NumPy view or copy of an array or tensor (tensors detached and copied from the GPU)."""
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.split(".")[0] == "torch":
        x = x.detach()
        return (x.float() if x.is_floating_point() and x.dtype.itemsize == 2 else x).cpu().numpy()
    if hasattr(x, "get") and hasattr(x, "__cuda_array_interface__"):  # a CuPy array
        return x.get()
    try:
        return np.asarray(x)
    except Exception as error:
        raise TypeError(f"{name} must be an array or tensor, got {type(x).__name__}") from error


def gpu_csr_parts(A, name="A"):
    """(indptr, indices, values, shape) of a sparse operand that lives on a GPU, as torch CUDA
    tensors in canonical CSR form (rows' indices sorted, duplicates summed), checked on the GPU
    (shape, index range, monotone ``indptr``), indices int32 where they fit; None for any other
    operand.  Nothing is copied to the host but a few scalars."""
    module = type(A).__module__.split(".")[0]
    if not _on_gpu(A):
        return None
    if module == "torch" and getattr(A, "layout", None) is not None:
        import torch

        if A.layout == torch.sparse_coo:
            index, values = A._indices(), A._values()  # (uncoalesced: coalesced below)
            if A.dim() != 2 or values.dim() != 1:
                raise ValueError(f"{name} must be a 2-D sparse tensor with scalar values, got shape {tuple(A.shape)}")
            return _torch_coo_parts(index, values, tuple(A.shape), name)
        if A.layout == torch.sparse_csr:
            return _torch_csr_parts(A.crow_indices(), A.col_indices(), A.values(), tuple(A.shape), name)
        return None  # other layouts: as_scipy says what is accepted
    if hasattr(A, "sparse_size") and hasattr(A, "as_tensor"):  # PyG EdgeIndex
        import torch

        index = A.as_tensor()
        sizes = A.sparse_size()
        largest = (int(index.max()) + 1 if index.numel() else 0) if None in sizes else None  # (a sync: only if needed)
        shape = tuple(largest if n is None else int(n) for n in sizes)
        return _torch_coo_parts(index, torch.ones(index.shape[1], dtype=torch.float32, device=index.device), shape,
                                name)
    if module == "torch_sparse" and hasattr(A, "csr"):  # torch_sparse.SparseTensor
        import torch

        indptr, indices, values = A.csr()
        if values is None:
            values = torch.ones(indices.numel(), dtype=torch.float32, device=indices.device)
        return _torch_csr_parts(indptr, indices, values, tuple(A.sparse_sizes()), name)
    if module == "cupyx" and hasattr(A, "tocsr"):  # zero-copy views as torch tensors
        try:
            import torch
        except ImportError:  # without torch, cupyx matrices take the host path
            return None

        A = A.tocsr()
        gpu = torch.device("cuda", A.data.device.id)  # its own GPU, not torch's current one
        return _torch_csr_parts(*(torch.as_tensor(x, device=gpu) for x in (A.indptr, A.indices, A.data)),
                                tuple(A.shape), name)
    return None


def _on_gpu(A):
    """True for a torch tensor (or torch_sparse SparseTensor) on a GPU or a cupyx matrix."""
    if type(A).__module__.split(".")[0] == "cupyx":
        return hasattr(A, "get")
    flag = getattr(A, "is_cuda", False)
    return bool(flag() if callable(flag) else flag)


def _check_index(index, shape, name):
    """ValueError naming ``name`` unless every (row, column) of the (2, E) ``index`` (a NumPy
    array or a tensor) lies in ``shape``."""
    if index.shape[1] and (int(index.min()) < 0 or int(index[0].max()) >= shape[0] or int(index[1].max()) >= shape[1]):
        raise ValueError(f"{name} has an index outside its shape {tuple(shape)}")


def _torch_coo_parts(index, values, shape, name):
    """Canonical CSR parts of COO ``index`` (2, E) and ``values`` (E,), checked, on their device."""
    import torch

    values = _values(values, index.shape[1], name)
    if len(shape) != 2 or min(shape) < 0:
        raise ValueError(f"{name} must be 2-D, got shape {shape}")
    _check_index(index, shape, name)
    coo = torch.sparse_coo_tensor(index, values, shape, check_invariants=False).coalesce()  # (checked above)
    rows, cols = coo.indices()
    indptr = torch.zeros(shape[0] + 1, dtype=torch.int64, device=rows.device)
    indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=shape[0]), 0)
    return _narrowed(indptr, cols, coo.values(), shape)


def _torch_csr_parts(indptr, indices, values, shape, name):
    """Canonical CSR parts of CSR arrays (torch tensors), checked, on their device: kept as they
    are when already canonical, else re-made through a coalesced COO."""
    import torch

    nnz = indices.shape[0]
    values = _values(values, nnz, name)
    if len(shape) != 2 or min(shape) < 0 or indptr.dim() != 1 or indptr.shape[0] != shape[0] + 1:
        raise ValueError(f"{name}'s indptr must have {shape[0] + 1} entries (rows + 1) for shape {shape}, got "
                         f"{tuple(indptr.shape)}")
    indptr, indices = indptr.to(torch.int64), indices.to(torch.int64)
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz or bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError(f"{name}'s indptr must start at 0, never decrease and end at nnz ({nnz})")
    if nnz and (int(indices.min()) < 0 or int(indices.max()) >= shape[1]):
        raise ValueError(f"{name} has a column index outside 0..{shape[1] - 1}")
    # as csr.is_canonical: a decrease of the column index is fine only where a new row starts
    out_of_order = indices[1:] <= indices[:-1]
    starts = indptr[1:-1]
    out_of_order[starts[(starts > 0) & (starts < nnz)] - 1] = False
    if bool(out_of_order.any()):
        rows = torch.repeat_interleave(torch.arange(shape[0], device=indptr.device), indptr[1:] - indptr[:-1])
        return _torch_coo_parts(torch.stack([rows, indices]), values, shape, name)
    return _narrowed(indptr, indices, values, shape)


def _values(values, nnz, name):
    """The values: detached, float32, float64, float16 and bfloat16 kept, other real dtypes (int,
    bool) as float32; complex refused."""
    import torch

    if values.dim() != 1 or values.shape[0] != nnz:
        raise ValueError(f"{name} must have one scalar value per stored entry ({nnz}), got values of shape "
                         f"{tuple(values.shape)}")
    if values.dtype.is_complex:
        raise TypeError(f"{name}'s values must be real, got {values.dtype}")
    values = values.detach()
    keep = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
    return values if values.dtype in keep else values.to(torch.float32)


def _narrowed(indptr, indices, values, shape):
    """The parts with int32 indices where every index and offset fits (``dtypes.index_dtype_for``)."""
    import torch

    from .dtypes import index_dtype_for

    index_dtype = torch.int32 if index_dtype_for(shape, indices.shape[0]) == np.int32 else torch.int64
    return (indptr.to(index_dtype).contiguous(), indices.to(index_dtype).contiguous(), values.contiguous(), shape)
