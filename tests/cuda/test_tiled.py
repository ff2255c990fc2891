"""G-Sparse's tiled SpMM on the simulator: every schedule computes the same A @ B."""
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

from numbasparse import CSR
from numbasparse.cuda import tiled
from numbasparse.reference import spmm_reference
from strategies import assert_close

# small schedules keep the simulated thread count low; the kernel logic is the same
SCHEDULES = [tiled.Schedule(2, 8, 2, 4, True), tiled.Schedule(1, 16, 1, 8, False),
             tiled.Schedule(4, 4, 4, 3, True), tiled.Schedule(3, 8, 1, 32, False)]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("dtype, index_dtype", [(np.float32, np.int32), (np.float64, np.int64)])
def test_every_schedule_matches_reference(schedule, dtype, index_dtype):
    rng = np.random.default_rng()
    A = sp.random(13, 17, density=0.3, format="lil", random_state=rng)
    A[5, :] = rng.random(17)  # one row longer than several nnz tiles
    A = sp.csr_matrix(A.toarray() * (rng.random(13) > 0.2)[:, None])  # empty rows
    B = rng.standard_normal((17, 21)).astype(dtype)
    dev = CSR.from_scipy(A, dtype=dtype, index_dtype=index_dtype)
    order = tiled.row_order(dev, schedule.balance)
    C = cuda.to_device(np.full((13, 21), np.nan, dtype))
    tiled.spmm_tiled(dev, order, cuda.to_device(B), C, schedule)
    assert_close(C.copy_to_host(), spmm_reference(A, B), dtype)


def test_schedule_space_respects_hardware_limits():
    space = tiled.schedule_space(8, 8)
    assert space and all(32 <= s.threads <= 1024 and s.shared_bytes(8, 8) <= 48 * 1024 for s in space)
    assert len(tiled.schedule_space(4, 4)) >= len(space)


@pytest.mark.parametrize("schedule", [tiled.SddmmSchedule(2, 8, 4), tiled.SddmmSchedule(1, 32, 64),
                                      tiled.SddmmSchedule(3, 4, 8)])
@pytest.mark.parametrize("k, dtype", [(13, np.float32), (1, np.float64), (0, np.float32)])
def test_tiled_sddmm_matches_reference(schedule, k, dtype):
    from numbasparse.reference import sddmm_reference

    rng = np.random.default_rng()
    A = sp.random(7, 9, density=0.4, format="csr", random_state=rng)
    A = sp.csr_matrix(A.toarray() * (rng.random(7) > 0.2)[:, None])
    X = rng.standard_normal((7, k)).astype(dtype)
    Y = rng.standard_normal((9, k)).astype(dtype)
    dev = CSR.from_scipy(A, dtype=dtype)
    out = cuda.to_device(np.full(dev.nnz, np.nan, dtype))
    tiled.sddmm_tiled(dev, cuda.to_device(X), cuda.to_device(Y), out, schedule)
    assert_close(out.copy_to_host(), sddmm_reference(A, X, Y), dtype)


def test_cs267_blocked_schedules_are_valid_members_of_the_spaces():
    assert tiled.CS267_SPMM in tiled.schedule_space()
    for k in (1, 32, 33, 128, 300):
        assert tiled.cs267_sddmm_schedule(k) in tiled.sddmm_schedule_space()


def test_blocked_algorithm_matches_reference_through_the_api():
    import numbasparse as ns
    from numbasparse.reference import sddmm_reference

    rng = np.random.default_rng()
    A = sp.random(9, 11, density=0.3, format="csr", random_state=rng)
    A = sp.csr_matrix(A.toarray() * (rng.random(9) > 0.2)[:, None])  # empty rows
    B = rng.standard_normal((11, 5)).astype(np.float32)
    assert_close(ns.spmm(A, B, algorithm="blocked", backend="cuda"), spmm_reference(A, B), np.float32)
    X = rng.standard_normal((9, 6)).astype(np.float32)
    Y = rng.standard_normal((11, 6)).astype(np.float32)
    assert_close(ns.sddmm(A, X, Y, algorithm="blocked", backend="cuda").data, sddmm_reference(A, X, Y), np.float32)
    with pytest.raises(ValueError, match="supports reduce"):
        ns.spmm(A, B, algorithm="blocked", reduce="max", backend="cuda")
