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


# rows: empty, short, exactly a warp, one past it, one chunk, several chunks and a partial one
LENGTHS = [0, 3, 32, 33, 1, 16, 0, 40, 5, 17, 2]


@pytest.mark.parametrize("dtype, index_dtype", [(np.float32, np.int32), (np.float64, np.int64),
                                                 (np.float16, np.int32), ("bfloat16", np.int64)])
def test_permuted_on_device_equals_the_hosts_permutation(dtype, index_dtype):
    A = graph(LENGTHS, 41, seed=1)
    perm = np.random.default_rng(2).permutation(41)
    assert_same_as_host(A, dtype, index_dtype, perm, chunk=16)


def test_one_chunk_rows_and_an_identity_order():
    A = graph([33, 0, 7], 40, seed=3)
    assert_same_as_host(A, np.float32, np.int32, np.arange(40), chunk=64)


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
    rows, offsets = long_row_chunks(indptr, 4, 16)
    np.testing.assert_array_equal(rows, [0, 2, 2, 2, 3, 3, 3])
    np.testing.assert_array_equal(offsets, [0, 0, 16, 32, 0, 16, 32])


@pytest.mark.gpu
def test_power_law_rows_equal_the_hosts_permutation_on_a_gpu():
    rng = np.random.default_rng(5)
    n = 20000
    lengths = np.minimum(rng.zipf(1.6, n), n // 2)
    lengths[:3] = [n // 2, 4097, 1025]  # rows of many chunks, and just past one
    A = graph(lengths, n, seed=6)
    assert_same_as_host(A, np.float32, np.int32, rng.permutation(n), chunk=1024)
