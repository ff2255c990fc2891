"""HC-SpMM's kernels on the simulator: both paths and any mix give A @ B; the fused GCN
layer gives (A @ X) @ W."""
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

import numbasparse as ns
from numbasparse import CSR
from numbasparse.cuda import hc
from numbasparse.reference import spmm_reference
from strategies import assert_close


def _setup(A, dtype, mode):
    """A device CSR whose windows take the paths of ``mode``: "tiles", "cores" or "mixed"
    (every other window on each path)."""
    dev = CSR.from_scipy(A, dtype=dtype)
    if mode == "mixed":
        windows, _ = hc.windows(dev)
        choice = np.arange(windows.n_windows) % 2 == 0
        dev.cache.put("plans", ("hc_paths", "mixed", None), (choice, cuda.to_device(choice)))
    return dev


def _graph(shape, rng, density=0.15):
    A = sp.random(*shape, density=density, format="csr", random_state=rng)
    return sp.csr_matrix(A.toarray() * (rng.random(shape[0]) > 0.2)[:, None])  # empty rows


@pytest.mark.parametrize("mode", ["tiles", "cores", "mixed"])
@pytest.mark.parametrize("shape, n", [((37, 45), 33), ((20, 300), 8)])
def test_hc_paths_match_reference(mode, shape, n):
    rng = np.random.default_rng()
    A = _graph(shape, rng)
    B = rng.standard_normal((shape[1], n)).astype(np.float32)
    dev = _setup(A, np.float32, mode)
    C = cuda.to_device(np.full((shape[0], n), np.nan, np.float32))  # poisoned
    hc.spmm_hc(dev, cuda.to_device(B), C, mode=mode)
    assert_close(C.copy_to_host(), spmm_reference(A, B), np.float32)


@pytest.mark.parametrize("mode, n, width", [("tiles", 40, 45), ("mixed", 40, 45), ("tiles", 37, 45), ("tiles", 40, 150)])
def test_tensor_core_tiles_match_the_tf32_product(mode, n, width):
    """The dense-tile path on mma.sync (TF32): A @ B of the TF32-rounded operands to float32
    accuracy, and A @ B itself to TF32's (about 2^-11 per product, relative).  Windows of 6
    tiles (the 4 warps take unequal shares; ``width`` 150: about 19, several rounds of two
    steps per warp) and one of none, a partial last column block, and N = 37 (B's rows read one
    value at a time, past column N as zeros)."""
    from numbasparse.cuda import device, mma

    if not device.simulator_enabled() and cuda.get_current_device().compute_capability < (8, 0):
        pytest.skip("TF32 tensor cores need sm_80")
    rng = np.random.default_rng(5)
    A = _graph((37, width), rng, density=0.3).tolil()
    A[16:32] = 0  # a window without tiles
    A = A.tocsr()
    A.data = rng.uniform(-1, 1, A.nnz)
    B = rng.standard_normal((width, n)).astype(np.float32)
    dev = _setup(A, np.float32, mode)
    C = cuda.to_device(np.full((37, n), np.nan, np.float32))  # poisoned
    hc.spmm_hc(dev, cuda.to_device(B), C, mode=mode, tf32=True)
    rounded = sp.csr_matrix((mma.tf32_bits(A.data.astype(np.float32)), A.indices, A.indptr), shape=A.shape)
    expected = spmm_reference(rounded, mma.tf32_bits(B)) if mode == "tiles" else None
    if expected is not None:
        assert_close(C.copy_to_host(), expected, np.float32)
    exact = spmm_reference(A, B)
    assert np.linalg.norm(C.copy_to_host() - exact) / np.linalg.norm(exact) < 2e-3
    with pytest.raises(ValueError, match="TF32 tensor cores take float32"):
        hc.spmm_hc(_setup(A, np.float64, "tiles"), cuda.to_device(B.astype(np.float64)),
                   cuda.device_array((37, 40)), mode="tiles", tf32=True)


def test_the_hybrid_takes_the_selector_model_of_its_kind_of_tile():
    """Each kind of tile (emulated, TF32, 16-bit) has its own model: one CSR run in float32 and
    TF32 keeps both paths, each the selector's choice for its kind, and both results right."""
    import ml_dtypes

    from numbasparse import select
    from numbasparse.arrays import device_storage
    from numbasparse.cuda import device

    if not device.simulator_enabled() and cuda.get_current_device().compute_capability < (8, 0):
        pytest.skip("tensor cores need sm_80")
    rng = np.random.default_rng(7)
    A = _graph((48, 40), rng, density=0.4)
    B = rng.standard_normal((40, 16)).astype(np.float32)
    exact = spmm_reference(A, B)
    runs = [(np.float32, False, "emulated"), (np.float32, True, "tf32"), (ml_dtypes.bfloat16, False, "half")]
    for dtype, tf32, tiles in runs:
        dev = _setup(A, dtype, "hybrid")
        C = cuda.to_device(np.full((48, 16), np.nan, np.float32))  # poisoned
        hc.spmm_hc(dev, cuda.to_device(device_storage(B.astype(dtype))), C, mode="hybrid", tf32=tf32)
        chosen, _ = hc.paths(dev, "hybrid", tiles)
        assert np.array_equal(chosen, select.use_tiles(hc.windows(dev)[0], tiles=tiles))
        assert ("hc_paths", "hybrid", tiles) in dev.cache.sections["plans"]
        error = np.linalg.norm(C.copy_to_host() - exact) / np.linalg.norm(exact)
        assert error < (1e-6 if tiles == "emulated" else 1e-2)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode, n, width", [("tiles", 40, 60), ("mixed", 37, 60), ("cores", 40, 60), ("tiles", 33, 150)])
def test_half_tiles_on_the_tensor_cores_match_the_float32_sum(name, mode, n, width):
    """16-bit values: the tiles on m16n8k16 (exact products, float32 sums), windows of 3-4 MMA
    tiles of 16 columns (the last one partial; ``width`` 150: about 10, two rounds of two
    steps per warp), N = 37 and 33 read one value at a time.  Into a float32
    ``out``: the float32 sum of the rounded operands; in the operands' dtype: rounded once."""
    import ml_dtypes

    import numbasparse as ns
    from numbasparse.cuda import device

    if not device.simulator_enabled() and cuda.get_current_device().compute_capability < (8, 0):
        pytest.skip("16-bit tensor cores need sm_80")
    dtype = np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else np.float16)
    rng = np.random.default_rng(6)
    A = _graph((37, width), rng, density=0.3).tolil()
    A[16:32] = 0  # a window without tiles
    A = A.tocsr()
    A.data = rng.uniform(-1, 1, A.nnz)
    B = rng.standard_normal((width, n)).astype(dtype)
    rounded = sp.csr_matrix((A.data.astype(dtype).astype(np.float64), A.indices, A.indptr), shape=A.shape)
    expected = spmm_reference(rounded, B.astype(np.float64))
    dev = _setup(A, dtype, mode)
    out = np.full((37, n), np.nan, np.float32)  # poisoned
    if mode == "mixed":  # (the injected per-window paths are read by hc.spmm_hc: 16-bit values as bits)
        C = cuda.to_device(out)
        hc.spmm_hc(dev, cuda.to_device(B.view(np.uint16)), C, mode="mixed")
        out = C.copy_to_host()
    else:
        ns.spmm(dev, B, algorithm=f"hc_{mode}", backend="cuda", out=out)
    assert_close(out, expected, np.float32, np.abs(rounded) @ np.abs(B.astype(np.float64)))
    C = ns.spmm(dev, B, algorithm="hc_tiles", backend="cuda")
    assert C.dtype == dtype
    assert np.linalg.norm(C.astype(np.float64) - expected) / np.linalg.norm(expected) <= 2.0 ** -8


@pytest.mark.parametrize("dtype, tf32", [(np.float32, False), (np.float32, True), (np.float16, False)])
@pytest.mark.parametrize("special", [np.inf, np.nan])
def test_a_non_finite_b_row_reaches_only_the_rows_that_read_it(dtype, tf32, special):
    """A dense tile multiplies an Inf or NaN of B by its empty slots (0 x Inf = NaN) and
    spreads it to rows that never read it: such a block of columns is computed again on the
    CUDA-core path; the other block of columns stays on the tiles."""
    from numbasparse.cuda import device

    needs_sm80 = tf32 or dtype == np.float16
    if needs_sm80 and not device.simulator_enabled() and cuda.get_current_device().compute_capability < (8, 0):
        pytest.skip("tensor cores need sm_80")
    A = sp.csr_matrix(([1.0, 2.0, 3.0], ([0, 1, 1], [0, 1, 2])), shape=(2, 3))  # row 1 does not use B[0]
    B = (np.arange(1.0, 1.0 + 3 * 40).reshape(3, 40) / 64).astype(dtype)
    B[0, 5] = special
    C = ns.spmm(_setup(A, dtype, "tiles"), B, algorithm="hc_tiles", backend="cuda",
                precision="tf32" if tf32 else "ieee").astype(np.float64)
    expected = A @ B.astype(np.float64)  # (sparse: only stored entries multiply)
    assert np.isnan(C[0, 5]) if np.isnan(special) else C[0, 5] == np.inf
    finite = np.isfinite(expected)
    assert finite.sum() == 79
    np.testing.assert_allclose(C[finite], expected[finite], rtol=2e-3)


def test_hc_dense_window_float64():
    rng = np.random.default_rng()
    A = sp.csr_matrix(rng.random((18, 12)))  # every slot of every tile is a nonzero
    B = rng.standard_normal((12, 5))
    dev = _setup(A, np.float64, "tiles")
    C = cuda.to_device(np.full((18, 5), np.nan))
    hc.spmm_hc(dev, cuda.to_device(B), C, mode="tiles")
    assert_close(C.copy_to_host(), A @ B, np.float64)


@pytest.mark.parametrize("mode", ["tiles", "cores", "mixed"])
@pytest.mark.parametrize("k, f", [(10, 7), (40, 33), (0, 4)])
def test_fused_layer_matches_unfused(mode, k, f):
    rng = np.random.default_rng()
    A = _graph((21, 30), rng, 0.2)
    X = rng.standard_normal((30, k)).astype(np.float32)
    W = rng.standard_normal((k, f)).astype(np.float32)
    dev = _setup(A, np.float32, mode)
    out = cuda.to_device(np.full((21, f), np.nan, np.float32))
    hc.spmm_dense(dev, cuda.to_device(X), cuda.to_device(W), out, mode=mode)
    assert_close(out.copy_to_host(), spmm_reference(A, X) @ W.astype(np.float64), np.float32)


def test_a_b_value_that_tf32_rounds_to_inf_reaches_only_the_rows_that_read_it():
    """TF32 rounds float32 values near FLT_MAX up to Inf: the tile result holds it, so the
    window is computed again on the CUDA-core path, in float32."""
    from numbasparse.cuda import device

    if not device.simulator_enabled() and cuda.get_current_device().compute_capability < (8, 0):
        pytest.skip("tensor cores need sm_80")
    A = sp.csr_matrix(([1.0, 2.0], ([0, 1], [0, 1])), shape=(2, 2))  # row 1 does not read B[0]
    B = np.array([[np.finfo(np.float32).max], [1.0]], np.float32)
    C = ns.spmm(_setup(A, np.float32, "tiles"), B, algorithm="hc_tiles", backend="cuda", precision="tf32")
    assert C[1, 0] == 2.0


def test_fused_layer_keeps_a_nan_of_x_in_the_rows_that_read_it():
    """The fused layer aggregates A @ X on the window's path: a NaN in X reaches only the rows
    of A @ X (and of the output) that read it, as in the unfused layer."""
    A = sp.csr_matrix(([1.0, 2.0], ([0, 1], [0, 1])), shape=(2, 2))  # row 1 does not read X[0]
    X = np.array([[np.nan, 1.0], [0.5, 2.0]], np.float32)
    W = np.array([[1.0, -1.0], [2.0, 0.5]], np.float32)
    out = cuda.to_device(np.full((2, 2), -7.0, np.float32))
    hc.spmm_dense(_setup(A, np.float32, "tiles"), cuda.to_device(X), cuda.to_device(W), out, mode="tiles")
    out = out.copy_to_host()
    assert np.isnan(out[0]).all()
    np.testing.assert_allclose(out[1], (2.0 * X[1]) @ W, rtol=1e-6)


def test_fused_layer_wider_than_shared_memory(monkeypatch):
    """X wider than the shared-memory slice: several passes add into out."""
    rng = np.random.default_rng()
    A = _graph((16, 9), rng, 0.4)
    X = rng.standard_normal((9, 70)).astype(np.float32)
    W = rng.standard_normal((70, 3)).astype(np.float32)
    monkeypatch.setattr(hc, "FUSED_K", 32)
    hc.spmm_dense_kernel.cache_clear()
    try:
        dev = _setup(A, np.float32, "mixed")
        out = cuda.to_device(np.full((16, 3), np.nan, np.float32))
        hc.spmm_dense(dev, cuda.to_device(X), cuda.to_device(W), out, mode="mixed")
    finally:
        hc.spmm_dense_kernel.cache_clear()
    assert_close(out.copy_to_host(), spmm_reference(A, X) @ W.astype(np.float64), np.float32)


def _skip_without_sm80():
    from numbasparse.cuda import device

    if not device.simulator_enabled() and cuda.get_current_device().compute_capability < (8, 0):
        pytest.skip("tensor cores need sm_80")


@pytest.mark.parametrize("k, f, fused_k", [(20, 13, 256), (70, 40, 32), (0, 4, 256), (8, 33, 256)])
def test_fused_layer_on_tensor_cores_is_the_tf32_product(monkeypatch, k, f, fused_k):
    """The product with W on m16n8k8: (A @ X) @ W to TF32's accuracy, not float32's.  k not a
    multiple of 8, f not of 8 (a warp past out's last column), an empty window, no columns
    in X, and X wider than the shared slice (several passes adding into out)."""
    _skip_without_sm80()
    rng = np.random.default_rng(7)
    A = _graph((37, 30), rng, 0.3).tolil()
    A[16:32] = 0  # an empty window
    A = A.tocsr()
    X = rng.standard_normal((30, k)).astype(np.float32)
    W = rng.standard_normal((k, f)).astype(np.float32)
    monkeypatch.setattr(hc, "FUSED_K", fused_k)
    hc.spmm_dense_kernel.cache_clear()
    try:
        dev = _setup(A, np.float32, "mixed")
        out = cuda.to_device(np.full((37, f), np.nan, np.float32))  # poisoned
        hc.spmm_dense(dev, cuda.to_device(X), cuda.to_device(W), out, mode="mixed", tensor_cores=True)
    finally:
        hc.spmm_dense_kernel.cache_clear()
    got, exact = out.copy_to_host(), spmm_reference(A, X) @ W.astype(np.float64)
    if k == 0:
        assert np.array_equal(got, np.zeros((37, f)))
        return
    error = np.linalg.norm(got - exact) / np.linalg.norm(exact)
    assert 1e-6 < error < 2e-3


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_fused_layer_of_16_bit_operands_through_the_api(name):
    """16-bit operands take the product with W on m16n8k16 (the aggregated rows rounded once
    more): within two roundings of the float64 product of the rounded operands; on CUDA cores
    (``tensor_cores=False``, GPUs before sm_80) within one.  And
    precision='tf32' through the API: fused only, float32 only."""
    import ml_dtypes

    import numbasparse as ns

    _skip_without_sm80()
    dtype = np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else np.float16)
    u = 2.0 ** -8 if name == "bfloat16" else 2.0 ** -11
    rng = np.random.default_rng(8)
    A = _graph((37, 30), rng, 0.3)
    A.data = rng.uniform(0.5, 1.5, A.nnz)
    X = rng.standard_normal((30, 40)).astype(dtype)
    W = rng.standard_normal((40, 21)).astype(dtype)
    out = ns.spmm_dense(A, X, W, fused=True, backend="cuda")
    rounded = sp.csr_matrix((A.data.astype(dtype).astype(np.float64), A.indices, A.indptr), shape=A.shape)
    exact = spmm_reference(rounded, X.astype(np.float64)) @ W.astype(np.float64)
    assert out.dtype == dtype
    assert np.linalg.norm(out.astype(np.float64) - exact) / np.linalg.norm(exact) <= 2 * u
    dev = CSR.from_scipy(A, dtype=dtype)  # on CUDA cores (GPUs before sm_80): rounded once
    cores = cuda.to_device(np.full((37, 21), 0xFFFF, np.uint16))  # poisoned
    hc.spmm_dense(dev, cuda.to_device(X.view(np.uint16)), cuda.to_device(W.view(np.uint16)), cores)
    cores = cores.copy_to_host().view(dtype).astype(np.float64)
    assert np.linalg.norm(cores - exact) / np.linalg.norm(exact) <= u
    X32, W32 = X.astype(np.float32), W.astype(np.float32)
    tf32 = ns.spmm_dense(A, X32, W32, fused=True, backend="cuda", precision="tf32")
    exact = spmm_reference(A, X32) @ W32.astype(np.float64)
    assert 1e-6 < np.linalg.norm(tf32 - exact) / np.linalg.norm(exact) < 2e-3
    with pytest.raises(ValueError, match="precision='tf32' is the fused kernel's"):
        ns.spmm_dense(A, X32, W32, backend="cuda", precision="tf32")
    with pytest.raises(ValueError, match="precision='tf32' takes float32 operands, not float64"):
        ns.spmm_dense(A, X32.astype(np.float64), W32.astype(np.float64), fused=True, backend="cuda", precision="tf32")
    with pytest.raises(ValueError, match="precision must be one of"):
        ns.spmm_dense(A, X32, W32, fused=True, backend="cuda", precision="fp8")


def test_precision_tf32_through_the_api():
    import numbasparse as ns
    from numbasparse.cuda import device

    if not device.simulator_enabled() and cuda.get_current_device().compute_capability < (8, 0):
        pytest.skip("TF32 tensor cores need sm_80")
    rng = np.random.default_rng(6)
    A = _graph((20, 30), rng, density=0.4)
    B = rng.standard_normal((30, 16)).astype(np.float32)
    C = ns.spmm(A, B, algorithm="hc_tiles", precision="tf32", backend="cuda")
    exact = spmm_reference(A, B)
    assert 0 < np.linalg.norm(C - exact) / np.linalg.norm(exact) < 2e-3  # TF32, not IEEE float32
    with pytest.raises(ValueError, match="precision='tf32' runs on algorithm 'hc' or 'hc_tiles', not 'auto'"):
        ns.spmm(A, B, precision="tf32", backend="cuda")
    with pytest.raises(ValueError, match="precision='tf32' takes float32 operands, not float64"):
        ns.spmm(A, B.astype(np.float64), algorithm="hc", precision="tf32", backend="cuda")
    with pytest.raises(ValueError, match="precision must be one of"):
        ns.spmm(A, B, precision="fp8", backend="cuda")
