"""GE-SpMM CRC and CRC+CWM kernels on the simulator (or a GPU), against float64 scipy."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from numbasparse import CSR
from numbasparse.cuda import crc
from numbasparse.reference import spmm_reference
from strategies import N_COLS, assert_close, graphs, random_dense, spmm_scale

REDUCTIONS = ("sum", "mean", "max", "min")


def run_kernel(A, B, reduce, cf, index_dtype=None):
    dev = CSR.from_scipy(A, dtype=B.dtype, index_dtype=index_dtype)
    C = cuda.to_device(np.full((A.shape[0], B.shape[1]), np.nan, B.dtype))  # poisoned
    crc.spmm_crc_cwm(dev, cuda.to_device(B), C, reduce, cf=cf)
    return C.copy_to_host()


@pytest.mark.parametrize("cf", [1, 2, 4])
@given(A=graphs(), n=st.sampled_from(N_COLS), reduce=st.sampled_from(REDUCTIONS),
       dtype=st.sampled_from([np.float32, np.float64]),
       index_dtype=st.sampled_from([np.int32, np.int64]), seed=st.integers(0, 2**32 - 1))
def test_crc_matches_reference(cf, A, n, reduce, dtype, index_dtype, seed):
    B = random_dense(np.random.default_rng(seed), (A.shape[1], n), dtype)
    assert_close(run_kernel(A, B, reduce, cf, index_dtype), spmm_reference(A, B, reduce), dtype,
                 spmm_scale(A, B, reduce))


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_empty_rows_give_zero(reduce):
    import scipy.sparse as sp

    A = sp.csr_matrix(([2.0, -1.0], ([1, 1], [0, 2])), shape=(3, 3))
    B = random_dense(np.random.default_rng(), (3, 5), np.float32)
    C = run_kernel(A, B, reduce, cf=2)
    assert np.all(C[[0, 2]] == 0)
    assert_close(C, spmm_reference(A, B, reduce), np.float32)


def test_row_longer_than_many_warp_chunks():
    import scipy.sparse as sp

    rng = np.random.default_rng()
    A = sp.csr_matrix(rng.standard_normal((2, 100)))  # 100 entries per row: 4 chunks of 32
    B = random_dense(rng, (100, 3), np.float64)
    assert_close(run_kernel(A, B, "sum", cf=1), spmm_reference(A, B), np.float64)


def test_kernel_is_compiled_once_per_configuration():
    a = crc.spmm_crc_cwm_kernel(0, 2, "<f4", "<i4")
    assert crc.spmm_crc_cwm_kernel(0, 2, "<f4", "<i4") is a
    assert crc.spmm_crc_cwm_kernel(0, 4, "<f4", "<i4") is not a
