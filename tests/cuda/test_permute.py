"""The GPU permutation P A P^T (the reordered plan's matrix) against the host's, on the simulator
(tiny graphs, small chunks so that long rows span several) or a GPU."""
import numpy as np
import pytest
import scipy.sparse as sp

from numbasparse import CSR
from numbasparse.csr import canonical_csr
from numbasparse.cuda.permute import permuted_on_device
from numbasparse.reorder.order import long_row_chunks, permuted


def graph(lengths, n, seed, dtype=np.float32):
    """Canonical CSR with rows of the given lengths (distinct random columns), random values."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    cols = np.concatenate([rng.choice(n, k, replace=False) for k in lengths] + [np.zeros(0, np.int64)])
    values = rng.uniform(-2, 2, rows.size)
    return canonical_csr(sp.csr_matrix((values, (rows, cols)), shape=(n, n)), dtype=dtype)


def assert_same_as_host(A, dtype, index_dtype, perm, chunk):
    before = A.copy()
    host = permuted(canonical_csr(A, dtype=np.float64, index_dtype=index_dtype), perm)
    device = CSR.from_scipy(A, dtype=dtype, index_dtype=index_dtype)
    result = permuted_on_device(device, perm, chunk=chunk)
    assert result.shape == A.shape and result.nnz == A.nnz
    assert result.dtype == device.dtype and result.index_dtype == device.index_dtype
    got = result.to_scipy()
    np.testing.assert_array_equal(got.indptr, host.indptr)
    np.testing.assert_array_equal(got.indices, host.indices)
    expected = np.asarray(host.data.astype(dtype), np.float64)  # the values move, exactly
    np.testing.assert_array_equal(np.asarray(got.data, np.float64), expected)
    np.testing.assert_array_equal(result.host_indptr, host.indptr)
    assert (A != before).nnz == 0  # the caller's matrix untouched


# rows: empty, short, exactly a warp, one past it, several chunks and a partial one, exactly
# three chunks
LENGTHS = [0, 3, 32, 33, 1, 16, 0, 40, 5, 17, 2, 48]


@pytest.mark.parametrize("dtype, index_dtype", [(np.float32, np.int32), (np.float64, np.int64),
                                                 (np.float16, np.int32), ("bfloat16", np.int64)])
def test_permuted_on_device_equals_the_hosts_permutation(dtype, index_dtype):
    A = graph(LENGTHS, 50, seed=1)
    perm = np.random.default_rng(2).permutation(50)
    assert_same_as_host(A, dtype, index_dtype, perm, chunk=16)


def test_one_chunk_rows_and_an_identity_order():
    A = graph([33, 0, 7], 40, seed=3)
    assert_same_as_host(A, np.float32, np.int32, np.arange(40), chunk=64)


def test_more_chunks_than_blocks_loop_over_the_grid():
    """Chunks of 4 entries: a row of 140 holds 35 of them, more than the simulator's 32 blocks."""
    A = graph([140, 0, 35], 150, seed=8)
    assert_same_as_host(A, np.float32, np.int32, np.random.default_rng(9).permutation(150), chunk=4)


def test_a_non_square_graph_or_a_chunk_that_is_no_power_of_two_is_refused():
    A = CSR.from_scipy(sp.csr_matrix(np.ones((2, 4), np.float32)))
    with pytest.raises(ValueError, match="square graph"):
        permuted_on_device(A, np.arange(2))
    with pytest.raises(ValueError, match="chunk must be a power of two"):
        permuted_on_device(CSR.from_scipy(graph([3, 1, 0], 3, seed=11)), np.arange(3), chunk=24)


def test_a_graph_without_entries():
    A = sp.csr_matrix((6, 6), dtype=np.float32)
    assert_same_as_host(A, np.float32, np.int32, np.random.default_rng(4).permutation(6), chunk=16)


@pytest.mark.parametrize("perm", [[0, 1, 1, 3, 4, 5], [0, 1, 2, 3, 4, 6], [-1, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4],
                                  [0.0, 1, 2, 3, 4, 5]])
def test_a_perm_that_is_no_permutation_is_refused_before_any_launch(perm):
    device = CSR.from_scipy(graph([2, 0, 6, 1, 0, 3], 6, seed=5))
    with pytest.raises(ValueError, match="perm must be a permutation of 0..5"):
        permuted_on_device(device, np.array(perm))


def test_long_rows_are_cut_into_chunks_in_row_order():
    indptr = np.array([0, 5, 5, 45, 78])  # lengths 5, 0, 40, 33 with rows over 4 long
    rows, offsets, starts, entries = long_row_chunks(indptr, 4, 16)
    np.testing.assert_array_equal(rows, [0, 2, 2, 2, 3, 3, 3])
    np.testing.assert_array_equal(offsets, [0, 0, 16, 32, 0, 16, 32])
    np.testing.assert_array_equal(starts, [0, 5, 5, 5, 45, 45, 45])  # among the long rows' entries
    assert entries == 78


@pytest.mark.gpu
def test_power_law_rows_equal_the_hosts_permutation_on_a_gpu():
    rng = np.random.default_rng(5)
    n = 20000
    lengths = np.minimum(rng.zipf(1.6, n), n // 2)
    lengths[:3] = [n // 2, 4097, 1025]  # rows of many chunks, and just past one
    A = graph(lengths, n, seed=6)
    assert_same_as_host(A, np.float32, np.int32, rng.permutation(n), chunk=1024)


@pytest.mark.gpu
@pytest.mark.parametrize("longest_row, on_gpu", [(2**20, True), (2, False)])
def test_plans_permute_on_the_gpu_unless_a_row_is_longer_than_longest_row(longest_row, on_gpu, monkeypatch):
    import numbasparse as ns
    from numbasparse.cuda import permute

    monkeypatch.setattr(permute, "LONGEST_ROW", longest_row)
    A = graph([5, 3, 0, 40, 7] * 20, 100, seed=12)
    plan = ns.prepare(A, reorder="bfs", backend="cuda")
    assert (plan.A._host_copy is None) == on_gpu  # (a device-made CSR downloads its host copy on demand)
    expected = permuted(canonical_csr(A), plan.perm)
    got = plan.A.to_scipy()
    assert np.array_equal(got.indices, expected.indices) and np.array_equal(got.data, expected.data)
