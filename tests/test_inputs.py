"""Sparse operands of other libraries (numbasparse/inputs.py) give the same results as scipy's."""
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import numbasparse as ns
from numbasparse.reference import spmm_reference
from strategies import assert_close


@pytest.fixture
def graph():
    rng = np.random.default_rng(0)
    A = sp.random(7, 7, density=0.3, format="coo", random_state=rng, dtype=np.float32)
    return sp.csr_matrix(A), rng.standard_normal((7, 3)).astype(np.float32)


def same_product(operand, A, B):
    assert_close(ns.spmm(operand, B, backend="cpu"), spmm_reference(A, B), np.float32)


def test_edge_index_with_weights_and_num_nodes(graph):
    A, B = graph
    coo = A.tocoo()
    edge_index = np.stack([coo.row, coo.col])
    same_product(ns.from_edge_index(edge_index, coo.data, num_nodes=7), A, B)
    unweighted = ns.from_edge_index(edge_index, num_nodes=9)
    assert unweighted.shape == (9, 9) and np.all(unweighted.data == 1)
    twice = ns.from_edge_index(np.concatenate([edge_index, edge_index], axis=1), num_nodes=7)
    assert np.all(twice.data == 2)  # duplicate edges summed


@pytest.mark.parametrize("bad, error, message", [
    (np.zeros((3, 4), np.int64), ValueError, r"shape \(2, E\)"),
    (np.zeros((2, 4), np.float32), TypeError, "integers"),
    (np.array([[0, -1], [1, 2]]), ValueError, "negative"),
])
def test_a_malformed_edge_index_is_refused_by_name(bad, error, message):
    with pytest.raises(error, match=message):
        ns.from_edge_index(bad)


def test_num_nodes_smaller_than_an_index_and_wrong_weights_are_refused():
    edge_index = np.array([[0, 4], [1, 2]])
    with pytest.raises(ValueError, match="num_nodes is 3 but edge_index names node 4"):
        ns.from_edge_index(edge_index, num_nodes=3)
    with pytest.raises(ValueError, match="edge_weight must have shape"):
        ns.from_edge_index(edge_index, np.ones(3))
    with pytest.raises(TypeError, match="num_nodes"):
        ns.from_edge_index(edge_index, num_nodes=2.5)


def test_networkx_graph(graph):
    A, B = graph
    G = nx.from_scipy_sparse_array(A, create_using=nx.DiGraph)
    same_product(G, A, B)


def test_torch_sparse_coo_and_csr_tensors_and_a_torch_edge_index(graph):
    torch = pytest.importorskip("torch")
    A, B = graph
    coo = A.tocoo()
    t = torch.sparse_coo_tensor(np.stack([coo.row, coo.col]), coo.data, size=A.shape)
    same_product(t, A, B)
    same_product(t.to_sparse_csr(), A, B)
    edge_index = torch.as_tensor(np.stack([coo.row, coo.col]))
    same_product(ns.from_edge_index(edge_index, torch.as_tensor(coo.data), num_nodes=7), A, B)
    with pytest.raises(TypeError, match="layout"):
        ns.spmm(torch.ones(7, 7).to_sparse_csc(), B, backend="cpu")


def test_pyg_edge_index_and_torch_sparse_sparse_tensor_by_their_attributes(graph):
    """PyG's EdgeIndex and torch_sparse's SparseTensor are read through their attributes (the
    packages need not be installed for this test: stand-ins with the same attributes)."""
    A, B = graph
    coo = A.tocoo()

    class EdgeIndex:  # PyG's: sparse_size() and as_tensor()
        def sparse_size(self):
            return (7, 7)

        def as_tensor(self):
            return np.stack([coo.row, coo.col])

    binary = sp.csr_matrix((np.ones(A.nnz, np.float32), A.indices, A.indptr), shape=A.shape)
    same_product(EdgeIndex(), binary, B)

    SparseTensor = type("SparseTensor", (), {"__module__": "torch_sparse.tensor",
                                             "csr": lambda self: (A.indptr, A.indices, A.data),
                                             "sparse_sizes": lambda self: A.shape})
    same_product(SparseTensor(), A, B)


def test_anything_else_is_refused_naming_the_accepted_inputs(graph):
    _, B = graph
    with pytest.raises(TypeError, match="networkx graph"):
        ns.spmm(np.ones((7, 7)), B)


# Graphs already on a GPU: canonical CSR parts made with torch operations on the graph's device
# (the logic runs on CPU tensors here; tests/cuda/test_gpu.py runs it on CUDA ones).

def _canonical(A):
    C = A.tocsr(copy=True)
    C.sum_duplicates()
    C.sort_indices()
    return C


def _same_parts(parts, A):
    indptr, indices, values, shape = parts
    C = _canonical(A)
    assert shape == C.shape and indptr.dtype == indices.dtype
    assert np.array_equal(indptr.numpy(), C.indptr) and np.array_equal(indices.numpy(), C.indices)
    np.testing.assert_allclose(values.numpy(), C.data, rtol=1e-6)


def test_gpu_parts_of_coo_with_duplicates_are_canonical():
    torch = pytest.importorskip("torch")
    from numbasparse import inputs

    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, 9, 40), rng.integers(0, 7, 40)  # duplicates, any order
    values = rng.standard_normal(40)
    parts = inputs._torch_coo_parts(torch.tensor(np.stack([rows, cols])), torch.tensor(values), (9, 7), "A")
    assert parts[0].dtype == torch.int32
    _same_parts(parts, sp.coo_matrix((values, (rows, cols)), shape=(9, 7)))


def test_gpu_parts_of_csr_keep_a_canonical_one_and_sort_another():
    torch = pytest.importorskip("torch")
    from numbasparse import inputs

    A = _canonical(sp.random(8, 6, density=0.4, format="csr", random_state=1))
    tensors = [torch.tensor(x) for x in (A.indptr, A.indices, A.data)]
    _same_parts(inputs._torch_csr_parts(*tensors, A.shape, "A"), A)
    shuffled = A.copy()
    for i in range(A.shape[0]):  # reverse each row's entries
        lo, hi = A.indptr[i], A.indptr[i + 1]
        shuffled.indices[lo:hi], shuffled.data[lo:hi] = A.indices[lo:hi][::-1], A.data[lo:hi][::-1]
    parts = inputs._torch_csr_parts(*(torch.tensor(x) for x in (shuffled.indptr, shuffled.indices, shuffled.data)),
                                    A.shape, "A")
    _same_parts(parts, A)


@pytest.mark.parametrize("bad, error", [("column out of range", ValueError), ("indptr decreases", ValueError),
                                        ("indptr short", ValueError), ("values too few", ValueError),
                                        ("complex values", TypeError), ("row out of range", ValueError)])
def test_gpu_parts_refuse_malformed_graphs(bad, error):
    torch = pytest.importorskip("torch")
    from numbasparse import inputs

    indptr, indices, values = torch.tensor([0, 2, 3]), torch.tensor([0, 2, 1]), torch.tensor([1.0, 2.0, 3.0])
    if bad == "row out of range":
        with pytest.raises(error, match="A"):
            inputs._torch_coo_parts(torch.tensor([[0, 2], [0, 1]]), torch.tensor([1.0, 2.0]), (2, 3), "A")
        return
    if bad == "column out of range":
        indices = torch.tensor([0, 3, 1])
    elif bad == "indptr decreases":
        indptr = torch.tensor([0, 3, 2])
    elif bad == "indptr short":
        indptr = torch.tensor([0, 3])
    elif bad == "values too few":
        values = values[:2]
    elif bad == "complex values":
        values = torch.tensor([1j, 2j, 3j])
    with pytest.raises(error, match="A"):
        inputs._torch_csr_parts(indptr, indices, values, (2, 3), "A")


def test_a_csr_built_from_device_arrays_computes_and_downloads_only_when_asked():
    from numba import cuda

    import numbasparse as ns
    from numbasparse.reference import spmm_reference

    A = _canonical(sp.random(12, 9, density=0.3, format="csr", random_state=2, dtype=np.float32))
    dev = ns.CSR._from_device(*(cuda.to_device(x) for x in (A.indptr, A.indices, A.data)), A.shape)
    assert dev._host_copy is None and dev.index_dtype == A.indices.dtype and dev.nnz == A.nnz
    B = np.random.default_rng(3).standard_normal((9, 5)).astype(np.float32)
    C = ns.spmm(dev, B, algorithm="hp")
    assert dev._host_copy is None  # HP's plans need only the row lengths
    np.testing.assert_allclose(C, spmm_reference(A, B), rtol=1e-5, atol=1e-5)
    assert (dev.to_scipy() != A).nnz == 0


def test_gpu_parts_take_values_as_the_host_path_does():
    torch = pytest.importorskip("torch")
    from numbasparse import inputs

    index = torch.tensor([[0, 1], [1, 0]])
    parts = inputs._torch_coo_parts(index, torch.tensor([1, 2]), (2, 2), "A")  # integer values
    assert parts[2].dtype == torch.float32
    learned = torch.tensor([1.0, 2.0], requires_grad=True)
    assert not inputs._torch_coo_parts(index, learned, (2, 2), "A")[2].requires_grad
    with pytest.raises(TypeError, match="real"):
        inputs._torch_coo_parts(index, torch.tensor([1j, 2j]), (2, 2), "A")


@pytest.mark.parametrize("index", [[[0, -1], [1, 2]], [[0, 5], [1, 2]]])
def test_a_torch_coo_tensor_with_an_index_outside_its_shape_is_refused_before_coalescing(index):
    torch = pytest.importorskip("torch")
    A = torch.sparse_coo_tensor(torch.tensor(index), torch.ones(2), (3, 3))
    with pytest.raises(ValueError, match="index outside its shape"):
        ns.spmm(A, np.ones((3, 2), np.float32), backend="cpu")


def test_a_torch_sparse_tensor_that_is_not_2d_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="2-D sparse tensor"):
        ns.spmm(torch.rand(6).to_sparse(), np.ones((6, 2), np.float32), backend="cpu")


def test_from_edge_index_refuses_weights_that_are_not_numbers_and_ids_beyond_int64():
    ei = np.array([[0, 1], [1, 0]])
    with pytest.raises(TypeError, match="edge_weight must hold real numbers"):
        ns.from_edge_index(ei, edge_weight=np.array(["a", "b"]))
    with pytest.raises(ValueError, match="beyond int64"):
        ns.from_edge_index(np.array([[0], [2**63 + 1]], dtype=np.uint64))


def test_a_sparse_torch_tensor_as_a_dense_operand_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="B is a torch tensor of layout"):
        ns.spmm(sp.eye(3, format="csr"), torch.ones(3, 2).to_sparse(), backend="cpu")


def test_a_torch_csr_tensor_with_a_bad_index_pointer_is_refused_by_name():
    torch = pytest.importorskip("torch")
    A = torch.sparse_csr_tensor(torch.tensor([0, 1, 5]), torch.tensor([0, 1]), torch.ones(2), (2, 2),
                                check_invariants=False)
    with pytest.raises(ValueError, match="A"):
        ns.spmm(A, np.ones((2, 2), np.float32), backend="cpu")


def test_a_host_bfloat16_array_through_dlpack_is_read():
    from fakes import DLPackOnly

    torch = pytest.importorskip("torch")
    B = torch.rand(3, 2).bfloat16()
    A = sp.random(4, 3, density=0.5, format="csr", dtype=np.float32, random_state=0)
    C = ns.spmm(A, DLPackOnly(B), backend="cpu")
    from numbasparse.reference import relative_error

    assert isinstance(C, torch.Tensor) and C.dtype == torch.bfloat16
    assert relative_error(C.float().numpy(), spmm_reference(A, B.float().numpy())) <= 2.0 ** -8
