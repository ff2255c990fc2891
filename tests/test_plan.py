"""prepare(): reordered plans give the results of the unpermuted products, in the caller's order."""
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

import numbasparse as ns
from numbasparse import graphs
from numbasparse.reference import sddmm_reference, spmm_reference
from strategies import assert_close


@pytest.fixture(scope="module")
def graph():
    return graphs.community_graph(n_nodes=300, avg_degree=6, n_communities=6, seed=4)


@pytest.mark.parametrize("reorder", [None, "louvain", "loa"])
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_plan_spmm_equals_unpermuted_cpu(graph, reorder, reduce):
    B = np.random.default_rng().standard_normal((300, 7)).astype(np.float32)
    plan = ns.prepare(graph, reorder=reorder, backend="cpu")
    assert plan.preprocess_seconds > 0 and plan.reorder_seconds >= 0
    assert_close(plan.spmm(B, reduce=reduce), spmm_reference(graph, B, reduce), np.float32)


@pytest.mark.parametrize("reorder", ["louvain", "loa"])
def test_plan_sddmm_values_in_canonical_order_cpu(graph, reorder):
    rng = np.random.default_rng()
    A = graph.copy()
    A.data = rng.random(A.nnz) + 0.5  # non-unit values: the entry order matters
    X, Y = rng.standard_normal((300, 5)), rng.standard_normal((300, 5))
    S = ns.prepare(A, reorder=reorder, backend="cpu", dtype=np.float64).sddmm(X, Y)
    assert_close(S.data, sddmm_reference(A, X, Y), np.float64)
    assert np.array_equal(S.indices, ns.api.canonical_csr(A).indices)


def test_plan_on_device_arrays_small():
    A = graphs.community_graph(n_nodes=24, avg_degree=3, n_communities=3, seed=1)
    rng = np.random.default_rng()
    B = rng.standard_normal((24, 5)).astype(np.float32)
    plan = ns.prepare(A, reorder="loa", backend="cuda", dtype=np.float32, algorithm="hp")
    C = plan.spmm(cuda.to_device(B))
    assert_close(C.copy_to_host(), spmm_reference(A, B), np.float32)
    values = plan.sddmm(cuda.to_device(B), cuda.to_device(B))
    assert_close(values.copy_to_host(), sddmm_reference(A, B, B), np.float32)


def test_prepare_refuses_bad_arguments(graph):
    with pytest.raises(ValueError, match="reorder"):
        ns.prepare(graph, reorder="metis")
    with pytest.raises(ValueError, match="square"):
        ns.prepare(sp.random(4, 5, format="csr"), reorder="loa")
