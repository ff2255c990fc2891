"""Louvain, the clustering order, permutations and row-window statistics (CPU)."""
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from numbasparse import graphs
from numbasparse.reorder import cluster_order, louvain, modularity, permute, row_window_stats
from numbasparse.reorder.order import entry_order, permuted


def cliques(sizes, bridges=True):
    """Disjoint cliques, consecutive ones joined by one edge; nodes shuffled."""
    blocks = [np.ones((s, s)) - np.eye(s) for s in sizes]
    A = sp.lil_matrix(sp.block_diag(blocks))
    starts = np.cumsum([0] + sizes[:-1])
    if bridges:
        for a, b in zip(starts[:-1], starts[1:]):
            A[a, b] = A[b, a] = 1
    truth = np.repeat(np.arange(len(sizes)), sizes)
    perm = np.random.default_rng(0).permutation(len(truth))
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    return permute(A, perm), truth[perm]


def same_partition(a, b):
    return len(set(zip(a, b))) == len(set(a)) == len(set(b))


def test_louvain_recovers_planted_cliques():
    A, truth = cliques([6, 8, 5, 7])
    assert same_partition(louvain(A, seed=3), truth)


def test_louvain_is_deterministic_for_a_seed():
    A = graphs.default_graph()
    np.testing.assert_array_equal(louvain(A, seed=7), louvain(A, seed=7))


@pytest.mark.parametrize("name", ["default", "rmat12"])
def test_modularity_matches_networkx_and_louvain_quality(name):
    A = graphs.default_graph() if name == "default" else graphs.rmat(12, 8)
    labels = louvain(A, seed=0)
    G = nx.from_scipy_sparse_array(A)
    communities = [set(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    ours = modularity(A, labels)
    assert ours == pytest.approx(nx.community.modularity(G, communities), abs=1e-9)
    theirs = max(nx.community.modularity(G, nx.community.louvain_communities(G, seed=s)) for s in range(2))
    assert ours >= theirs * 0.99


def test_modularity_of_a_single_community_is_zero():
    A = graphs.rmat(8, 4)
    assert modularity(A, np.zeros(A.shape[0], int)) == pytest.approx(0.0, abs=1e-12)


def test_cluster_order_is_a_permutation_with_contiguous_communities():
    A, truth = cliques([5, 9, 4])
    perm = cluster_order(A, seed=1)
    assert np.array_equal(np.sort(perm), np.arange(A.shape[0]))
    ordered = truth[perm]
    assert np.count_nonzero(np.diff(ordered)) == 2  # each community is one run


def test_permute_is_PAPT_and_refuses_bad_perms():
    rng = np.random.default_rng()
    A = sp.random(7, 7, density=0.4, format="csr", random_state=rng)
    perm = rng.permutation(7)
    np.testing.assert_array_equal(permute(A, perm).toarray(), A.toarray()[perm][:, perm])
    with pytest.raises(ValueError, match="permutation"):
        permute(A, [0, 0, 1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="square"):
        permute(sp.random(3, 4, format="csr"), [0, 1, 2])


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_permuted_rows_are_canonical_and_map_every_entry_back(index):
    """Sorted columns in every row (kernels and users expect them), the caller's index width,
    an empty row and a long one, and entry_order mapping each entry to its source; a
    permutation that is not one is refused before the unchecked pass sees it."""
    rng = np.random.default_rng(11)
    A = sp.random(60, 60, density=0.1, format="csr", random_state=rng)
    A = sp.csr_matrix(A + sp.csr_matrix((np.ones(60), (np.zeros(60, int), np.arange(60))), shape=(60, 60)))
    A = A.tolil()
    A[5, :] = 0
    A = A.tocsr()
    A.eliminate_zeros()
    A.indices, A.indptr = A.indices.astype(index), A.indptr.astype(index)
    perm = rng.permutation(60)
    result, order = permuted(A, perm), entry_order(A, perm)
    assert result.has_sorted_indices and result.indices.dtype == index and result.indptr.dtype == index
    np.testing.assert_array_equal(result.toarray(), A.toarray()[perm][:, perm])
    rows = np.repeat(np.arange(60), np.diff(A.indptr))
    new_rows = np.repeat(np.arange(60), np.diff(result.indptr))
    np.testing.assert_array_equal(perm[new_rows], rows[order])
    np.testing.assert_array_equal(perm[result.indices], A.indices[order])
    np.testing.assert_array_equal(result.data, A.data[order])
    for bad in (perm[:-1], np.r_[perm[:-1], perm[0]], np.r_[perm[:-1], 60], np.r_[perm[:-1], -1]):
        with pytest.raises(ValueError, match="perm must be a permutation"):
            permuted(A, bad)
        with pytest.raises(ValueError, match="perm must be a permutation"):
            entry_order(A, bad)


def test_row_window_stats():
    A = sp.csr_matrix(np.array([[1, 1, 0], [0, 1, 0], [0, 0, 0], [1, 0, 1]]))
    nnz, columns, intensity = row_window_stats(A, window=2)
    np.testing.assert_array_equal(nnz, [3, 2])
    np.testing.assert_array_equal(columns, [2, 2])
    np.testing.assert_allclose(intensity, [1.5, 1.0])


def test_louvain_refuses_bad_graphs():
    with pytest.raises(ValueError, match="square"):
        louvain(sp.random(3, 4, format="csr"))
    with pytest.raises(ValueError, match="non-negative"):
        louvain(sp.csr_matrix(-np.eye(3)))


def test_loa_is_a_permutation_that_raises_window_intensity():
    from numbasparse.reorder import loa, mean_intensity

    A = graphs.default_graph()
    perm = loa(A)
    assert np.array_equal(np.sort(perm), np.arange(A.shape[0]))
    assert mean_intensity(permute(A, perm)) > mean_intensity(A) * 1.2


def test_loa_groups_a_shuffled_clique_into_one_window():
    from numbasparse.reorder import loa, mean_intensity

    A, truth = cliques([16, 16], bridges=False)
    perm = loa(A, window=16, vertex_window=32)
    windows = truth[perm].reshape(2, 16)
    assert all(len(set(w)) == 1 for w in windows)
    assert mean_intensity(permute(A, perm)) == pytest.approx(15 * 16 / 16)


def test_loa_refuses_bad_arguments():
    from numbasparse.reorder import loa

    with pytest.raises(ValueError, match="square"):
        loa(sp.random(3, 4, format="csr"))
    with pytest.raises(ValueError, match="positive"):
        loa(sp.identity(3, format="csr"), window=0)


def _bandwidth(A):
    A = A.tocoo()
    return int(np.abs(A.row - A.col).max()) if A.nnz else 0


def test_rcm_order_recovers_the_locality_a_shuffle_took():
    from numbasparse import graphs
    from numbasparse.reorder import permute, rcm_order

    n = 400
    band = sp.diags([np.ones(n - k) for k in (1, 2, 3)], [1, 2, 3], shape=(n, n), format="csr")
    band = (band + band.T).tocsr()  # bandwidth 3
    mixed = graphs.shuffled(band, seed=1)
    assert _bandwidth(mixed) > 100
    assert _bandwidth(permute(mixed, rcm_order(mixed))) <= 6


def test_bfs_order_recovers_the_locality_a_shuffle_took():
    from numbasparse.reorder import bfs_order

    n = 400
    band = sp.diags([np.ones(n - k) for k in (1, 2, 3)], [1, 2, 3], shape=(n, n), format="csr")
    band = (band + band.T).tocsr()  # bandwidth 3
    mixed = graphs.shuffled(band, seed=1)
    # (from a root inside the band the sweep grows two fronts, interleaved: within twice RCM's)
    assert _bandwidth(mixed) > 100 and _bandwidth(permute(mixed, bfs_order(mixed))) <= 12


def test_bfs_order_numbers_each_nodes_unreached_neighbours_next_and_restarts_at_the_lowest_unreached():
    """Symmetric pattern: 0 - 3, 0 - 1, 3 - 2, 1 - 3, 4 - 5; the sweep from 0 takes 0's
    neighbours in column order, restarts at 4, and the order is the sweep's, reversed."""
    from numbasparse.reorder import bfs_order

    edges = [(0, 3), (0, 1), (3, 2), (1, 3), (4, 5)]
    A = sp.csr_matrix((np.ones(len(edges)), tuple(zip(*edges))), shape=(6, 6))
    A = A + A.T
    assert bfs_order(A).tolist() == [5, 4, 2, 3, 1, 0]  # the sweep 0, 1, 3, 2, 4, 5
    assert bfs_order(sp.csr_matrix((0, 0))).shape == (0,)
    assert bfs_order(sp.csr_matrix((3, 3))).tolist() == [2, 1, 0]


def test_bfs_order_of_a_directed_graph_follows_edges_both_ways():
    """0 -> 1 <- 5, 2 -> 3: along rows alone the sweep would reach 5 only at its restart; along
    columns too it reaches 5 from 1 (as RCM's symmetrised pattern would)."""
    from numbasparse.reorder import bfs_order

    edges = [(0, 1), (5, 1), (2, 3)]
    A = sp.csr_matrix((np.ones(len(edges)), tuple(zip(*edges))), shape=(6, 6))
    assert bfs_order(A).tolist() == [4, 3, 2, 5, 1, 0]  # the sweep 0, 1, 5, 2, 3, 4


@pytest.mark.parametrize("directed", [False, True])
def test_the_level_parallel_sweep_numbers_nodes_as_the_serial_one(directed, monkeypatch):
    """Large frontiers scanned in pieces across the cores, small ones serially, several
    components: the same order as the one-core sweep, through bfs_order on a graph it sends
    to the parallel sweep."""
    from numbasparse.reorder import bfs_order, order

    rng = np.random.default_rng(7)
    n, m = 6000, 40000
    rows, cols = rng.integers(0, 5000, m), rng.integers(0, 5000, m)  # nodes 5000.. only in small pieces
    A = sp.csr_matrix((np.ones(m + 3), (np.r_[rows, 5000, 5001, 5003], np.r_[cols, 5001, 5002, 5004])), shape=(n, n))
    A = (A if directed else A + A.T).tocsr()
    A.sum_duplicates()
    t_indptr, t_indices = order._transposed(A) if directed else (A.indptr, A.indices)
    serial = order._bfs(A.indptr, A.indices, t_indptr, t_indices, n, directed)
    parallel = order._bfs_levels(A.indptr, A.indices, t_indptr, t_indices, n, directed)
    assert np.array_equal(serial, parallel)
    monkeypatch.setattr(order, "PARALLEL_SWEEP_ENTRIES", 1)
    monkeypatch.setattr("numba.get_num_threads", lambda: 4)
    assert np.array_equal(bfs_order(A), serial)


def test_symmetric_pattern_is_judged_on_the_pattern_alone():
    from numbasparse.reorder.order import symmetric_pattern

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        M = sp.random(n, n, density=rng.uniform(0, 0.3), format="csr", random_state=rng)
        pattern = sp.csr_matrix((np.ones(M.nnz), M.indices, M.indptr), shape=M.shape)
        assert symmetric_pattern(M) == ((pattern != pattern.T).nnz == 0)
        U = (pattern + 2 * pattern.T).tocsr()  # a symmetric pattern with unsymmetric values
        assert symmetric_pattern(U)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_transposed_pattern_is_scipys_in_any_number_of_pieces(index_dtype):
    from numbasparse.reorder.order import _transposed_pattern

    rng = np.random.default_rng(11)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        M = sp.random(n, n, density=rng.uniform(0, 0.3), format="csr", random_state=rng)
        T = M.T.tocsr()
        T.sort_indices()
        for pieces in (1, 3, 8):
            indptr, indices = _transposed_pattern(M.indptr.astype(index_dtype), M.indices.astype(index_dtype), n,
                                                  pieces)
            assert indices.dtype == index_dtype
            assert np.array_equal(indptr, T.indptr) and np.array_equal(indices, T.indices)


def test_degree_order_puts_hubs_first_and_keeps_ties_in_order():
    from numbasparse.reorder import degree_order

    A = sp.csr_matrix(np.array([[0, 1, 0, 0], [1, 0, 1, 1], [0, 1, 0, 0], [0, 1, 0, 0]], dtype=np.float32))
    assert degree_order(A).tolist() == [1, 0, 2, 3]


def test_locality_orders_are_permutations_and_leave_results_unchanged():
    import numbasparse as ns
    from numbasparse import graphs

    A = graphs.powerlaw(300, seed=4)
    B = np.random.default_rng(0).standard_normal((300, 5))
    for reorder in ("bfs", "rcm", "degree"):
        plan = ns.prepare(A, reorder=reorder, backend="cpu")
        assert sorted(plan.perm.tolist()) == list(range(300))
        np.testing.assert_allclose(plan.spmm(B), ns.spmm(A, B, backend="cpu"), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="no arguments"):
        ns.prepare(A, reorder="rcm", backend="cpu", seed=1)


def test_permute_keeps_values_numba_cannot_move():
    """longdouble weights go through the entry order instead of the njit pass."""
    rng = np.random.default_rng(3)
    A = sp.random(30, 30, density=0.2, format="csr", random_state=rng).astype(np.longdouble)
    perm = rng.permutation(30)
    result = permute(A, perm)
    assert result.dtype == np.longdouble
    np.testing.assert_array_equal(result.toarray(), A.toarray()[perm][:, perm])


def test_fixed_locality_orders_read_only_the_pattern_of_a_plans_graph():
    """A plan's graph may carry NaN weights (the products keep them); its order does not care."""
    import numbasparse as ns

    A = graphs.powerlaw(200, seed=2).astype(np.float32)
    A.data[0] = np.nan
    B = np.random.default_rng(1).standard_normal((200, 3)).astype(np.float32)
    expected = ns.spmm(A, B, backend="cpu")
    for reorder in ("bfs", "rcm", "degree"):
        np.testing.assert_array_equal(np.isnan(ns.prepare(A, reorder=reorder, backend="cpu").spmm(B)),
                                      np.isnan(expected))


def test_rcm_of_an_empty_graph_is_an_empty_order():
    from numbasparse.reorder import rcm_order

    assert rcm_order(sp.csr_matrix((0, 0))).shape == (0,)
