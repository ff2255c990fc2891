"""Generators are deterministic, symmetric, loop-free; the loader reads a directory."""
import numpy as np
import pytest
import scipy.sparse as sp

from numbasparse import graphs


@pytest.mark.parametrize("make", [graphs.default_graph, lambda: graphs.rmat(10, 8, seed=3),
                                  lambda: graphs.powerlaw(2000, seed=2)])
def test_generated_graph_is_symmetric_simple_and_deterministic(make):
    A, again = make(), make()
    assert (A != A.T).nnz == 0
    assert A.diagonal().sum() == 0
    assert A.has_canonical_format and np.all(A.data == 1)
    assert (A != again).nnz == 0


def test_default_graph_is_power_law_with_communities():
    A = graphs.default_graph()
    degrees = np.diff(A.indptr)
    assert 3000 <= A.shape[0] <= 10000
    assert degrees.max() > 10 * degrees.mean()  # heavy tail
    import networkx as nx

    G = nx.from_scipy_sparse_array(A)
    communities = nx.community.louvain_communities(G, seed=0)
    assert nx.community.modularity(G, communities) > 0.5


def test_rmat_seed_changes_graph():
    assert (graphs.rmat(8, seed=0) != graphs.rmat(8, seed=1)).nnz > 0


def test_load_npz_dir(tmp_path):
    sp.save_npz(tmp_path / "b.npz", sp.random(5, 5, density=0.3, format="csr"))
    sp.save_npz(tmp_path / "a.npz", sp.identity(3, format="csr"))
    loaded = graphs.load_npz_dir(tmp_path)
    assert list(loaded) == ["a", "b"] and loaded["a"].shape == (3, 3)
    with pytest.raises(ValueError, match="does not exist"):
        graphs.load_npz_dir(tmp_path / "missing")


@pytest.mark.parametrize("spec", ["rmat:x", "nonsense", "rmat:", "powerlaw:1:2:3"])
def test_bad_spec_is_refused(spec):
    with pytest.raises(ValueError, match="graph spec"):
        graphs.from_spec(spec)


def test_specs():
    assert graphs.from_spec("rmat:8:4").shape == (256, 256)
    shuffled = graphs.from_spec("shuffle:rmat:8:4")
    assert shuffled.nnz == graphs.from_spec("rmat:8:4").nnz and (shuffled != graphs.from_spec("rmat:8:4")).nnz
    assert graphs.from_spec("default").shape[0] == graphs.default_graph().shape[0]


def test_node_classification_task_is_seeded_and_split():
    A, X, y, train, val, test = graphs.node_classification()
    A2, X2, y2, *_ = graphs.node_classification()
    assert (A != A2).nnz == 0 and np.array_equal(X, X2) and np.array_equal(y, y2)
    assert (A != graphs.default_graph()).nnz == 0
    assert X.shape == (A.shape[0], 32) and X.dtype == np.float32 and set(np.unique(y)) <= set(range(8))
    assert len(np.intersect1d(train, test)) == 0 and len(train) + len(val) + len(test) == A.shape[0]
