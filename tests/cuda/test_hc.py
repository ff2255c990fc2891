"""HC-SpMM's hybrid kernel on the simulator: both paths and any mix give A @ B."""
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

from numbasparse import CSR
from numbasparse.cpu.row_windows import row_windows
from numbasparse.cuda import hc
from numbasparse.reference import spmm_reference
from strategies import assert_close


def run_hc(A, B, mode):
    dev = CSR.from_scipy(A, dtype=B.dtype)
    rw = row_windows(dev.to_scipy())
    use = {"tiles": np.ones, "cores": np.zeros}.get(mode, lambda k, dtype: np.arange(k) % 2 == 0)(
        rw.n_windows, dtype=np.bool_)
    arrays = {name: cuda.to_device(getattr(rw, name)) for name in ("entry_col", "col_ptr", "cols", "tile_ptr")}
    C = cuda.to_device(np.full((A.shape[0], B.shape[1]), np.nan, B.dtype))  # poisoned
    hc.spmm_hc(dev, arrays, cuda.to_device(use), cuda.to_device(B), C)
    return C.copy_to_host()


@pytest.mark.parametrize("mode", ["tiles", "cores", "mixed"])
@pytest.mark.parametrize("shape, n", [((37, 45), 33), ((20, 300), 8)])
def test_hc_paths_match_reference(mode, shape, n):
    rng = np.random.default_rng()
    A = sp.random(*shape, density=0.15, format="csr", random_state=rng)
    A = sp.csr_matrix(A.toarray() * (rng.random(shape[0]) > 0.2)[:, None])  # empty rows
    B = rng.standard_normal((shape[1], n)).astype(np.float32)
    assert_close(run_hc(A, B, mode), spmm_reference(A, B), np.float32)


def test_row_windows_condense_columns():
    A = sp.random(40, 30, density=0.2, format="csr", random_state=0)
    rw = row_windows(A)
    for w in range(rw.n_windows):
        lo, hi = A.indptr[w * 16], A.indptr[min(w * 16 + 16, 40)]
        cols = rw.cols[rw.col_ptr[w]:rw.col_ptr[w + 1]]
        assert np.all(np.diff(cols) > 0)
        np.testing.assert_array_equal(cols[rw.entry_col[lo:hi]], A.indices[lo:hi])
    np.testing.assert_array_equal(np.diff(rw.tile_ptr), -(-rw.n_cols // 8))
    assert np.all((rw.density >= 0) & (rw.density <= 1))
