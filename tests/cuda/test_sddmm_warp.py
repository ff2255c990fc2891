"""Warp-per-row SDDMM on the simulator (or a GPU), against float64 NumPy."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

from numbasparse import CSR
from numbasparse.cuda import sddmm_warp
from numbasparse.reference import sddmm_reference
from strategies import assert_close, graphs, random_dense, sddmm_scale


@settings(max_examples=12)  # each simulated shuffle is two block barriers: slow
@given(A=graphs(max_rows=8, max_cols=40), k=st.sampled_from([1, 7, 32, 33, 70]),
       dtype=st.sampled_from([np.float32, np.float64]),
       index_dtype=st.sampled_from([np.int32, np.int64]), seed=st.integers(0, 2**32 - 1))
def test_sddmm_warp_row_matches_reference(A, k, dtype, index_dtype, seed):
    rng = np.random.default_rng(seed)
    X = random_dense(rng, (A.shape[0], k), dtype)
    Y = random_dense(rng, (A.shape[1], k), dtype)
    dev = CSR.from_scipy(A, dtype=dtype, index_dtype=index_dtype)
    out = cuda.to_device(np.full(dev.nnz, np.nan, dtype))  # poisoned
    sddmm_warp.sddmm_warp_row(dev, cuda.to_device(X), cuda.to_device(Y), out)
    assert_close(out.copy_to_host(), sddmm_reference(A, X, Y), dtype, sddmm_scale(A, X, Y))
