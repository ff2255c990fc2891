"""Fused SDDMM -> SpMM and graph attention on the simulator, fused and unfused paths."""
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

import numbasparse as ns
from numbasparse import arrays, dispatch
from numbasparse.cuda import fused, hp, launch
from numbasparse.reference import attention_reference, relative_error, sddmm_spmm_reference
from fakes import view
from strategies import assert_close

CASES = [((9, 11), 5, 7, np.float32), ((6, 6), 33, 40, np.float64), ((5, 8), 1, 1, np.float32)]


def _graph(shape, rng):
    A = sp.random(*shape, density=0.35, format="csr", random_state=rng)
    A = sp.csr_matrix(A.toarray() * (rng.random(shape[0]) > 0.25)[:, None])  # empty rows
    A.data = rng.uniform(0.5, 1.5, A.nnz)
    return A


@pytest.mark.parametrize("fuse, run", [(True, fused.RUN), (True, 2), (False, fused.RUN)])
@pytest.mark.parametrize("shape, k, f, dtype", CASES)
@pytest.mark.parametrize("op", ["sddmm_spmm", "graph_attention"])
def test_scores_times_dense_match_reference(op, shape, k, f, dtype, fuse, run, monkeypatch):
    """run 2: the fused kernel cuts rows into runs of 2 entries and merges their partial rows."""
    monkeypatch.setattr(fused, "RUN", run)
    rng = np.random.default_rng()
    A = _graph(shape, rng)
    X = rng.standard_normal((shape[0], k)).astype(dtype)
    Y = rng.standard_normal((shape[1], k)).astype(dtype)
    Z = rng.standard_normal((shape[1], f)).astype(dtype)
    reference = {"sddmm_spmm": sddmm_spmm_reference, "graph_attention": attention_reference}[op]
    dev = ns.CSR.from_scipy(A, dtype=dtype)
    out = getattr(ns, op)(dev, cuda.to_device(X), cuda.to_device(Y), cuda.to_device(Z), fused=fuse)
    assert_close(out.copy_to_host(), reference(A, X, Y, Z), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("fuse, run", [(True, fused.RUN), (True, 1), (False, fused.RUN)])
def test_attention_gives_minus_inf_scores_no_weight_and_keeps_nan_rows_nan(fuse, run, dtype, monkeypatch):
    # row 0 starts with a -inf score (the online softmax's running maximum is still -inf there),
    # row 1 is empty, row 2 scores -inf only and row 3 starts with a NaN: NaN rows on every path;
    # run 1: every entry its own run, so that the merge meets runs of -inf and of NaN
    monkeypatch.setattr(fused, "RUN", run)
    A = sp.csr_matrix((np.array([-np.inf, 1.0, 2.0, -np.inf, -np.inf, np.nan, 1.0]),
                       np.array([0, 1, 2, 0, 1, 0, 2]), np.array([0, 3, 3, 5, 7])), shape=(4, 3))
    rng = np.random.default_rng()
    Q = (np.abs(rng.standard_normal((4, 8))) / 4 + 0.1).astype(dtype)  # dots > 0
    K = (np.abs(rng.standard_normal((3, 8))) / 4 + 0.1).astype(dtype)
    V = rng.standard_normal((3, 4)).astype(dtype)
    dev = ns.CSR.from_scipy(A, dtype=dtype)
    out = ns.graph_attention(dev, cuda.to_device(Q), cuda.to_device(K), cuda.to_device(V), fused=fuse).copy_to_host()
    with np.errstate(invalid="ignore"):
        expected = attention_reference(A, Q, K, V)
    assert np.isfinite(expected[:2]).all() and np.isnan(expected[2:]).all()
    # float16 rounds the result once (and, unfused, the scores too): twice the README's bounds
    tolerance = 1e-5 if dtype == np.float32 else 2.0**-11 * (2 if fuse else 4)
    assert relative_error(out[:2], expected[:2]) <= tolerance
    assert np.isnan(out[2:]).all()


def test_wide_output_takes_several_column_passes(monkeypatch):
    monkeypatch.setattr(fused, "MAX_PER_LANE", 1)
    rng = np.random.default_rng()
    A = _graph((5, 7), rng)
    Q, K = rng.standard_normal((5, 3)), rng.standard_normal((7, 3))
    V = rng.standard_normal((7, 70))
    out = ns.graph_attention(ns.CSR.from_scipy(A), cuda.to_device(Q), cuda.to_device(K), cuda.to_device(V))
    assert_close(out.copy_to_host(), attention_reference(A, Q, K, V), np.float64)


def test_the_fused_launch_is_bound_to_the_matrix_keyed_by_its_vector_widths(monkeypatch, host_alignment):
    """A bound launch (so that repeated torch calls replay it), keyed by everything that picks the
    kernel: another alignment of the operands must not reuse it."""
    rng = np.random.default_rng()
    A = ns.CSR.from_scipy(_graph((8, 8), rng), dtype=np.float32)
    keys = []  # the keys of launches bound to A's own cache
    run_bound = launch.run_bound

    def recorded(cache, key, *rest):
        if cache is A.cache:
            keys.append(key)
        return run_bound(cache, key, *rest)

    monkeypatch.setattr(launch, "run_bound", recorded)
    X, Z = (cuda.to_device(rng.standard_normal((8, n)).astype(np.float32)) for n in (256, 12))
    ns.graph_attention(A, X, X, Z, fused=True)
    off = cuda.to_device(rng.standard_normal(8 * 256 + 1).astype(np.float32))[1:].reshape(8, 256)  # 4 bytes off
    ns.graph_attention(A, off, off, Z, fused=True)
    fused_keys = [k for k in keys if k[0] == "fused"]
    assert len(fused_keys) == 2 and fused_keys[0] != fused_keys[1]


def test_edge_softmax_normalises_each_row():
    rng = np.random.default_rng()
    A = _graph((8, 8), rng)
    dev = ns.CSR.from_scipy(A, dtype=np.float64)
    values = rng.standard_normal(A.nnz) * 10
    out = cuda.to_device(np.full(A.nnz, np.nan))
    fused.edge_softmax(dev, cuda.to_device(values), out)
    got = out.copy_to_host()
    for i in range(8):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        if hi > lo:
            e = np.exp(values[lo:hi] - values[lo:hi].max())
            np.testing.assert_allclose(got[lo:hi], e / e.sum(), rtol=1e-12)


def test_with_values_shares_the_pattern():
    A = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 3, 0]]))
    dev = ns.CSR.from_scipy(A, dtype=np.float64)
    other = dev.with_values(cuda.to_device(np.array([5.0, 6, 7])))
    assert other.indices is dev.indices and other.nnz == 3
    np.testing.assert_array_equal(other.to_scipy().toarray(), [[5, 0, 6], [0, 7, 0]])
    np.testing.assert_array_equal(dev.to_scipy().toarray(), A.toarray())
    with pytest.raises(ValueError, match="shape"):
        dev.with_values(cuda.to_device(np.ones(2)))
    with pytest.raises(TypeError, match="float64"):
        dev.with_values(cuda.to_device(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match="CUDA"):
        dev.with_values(np.ones(3))


@pytest.mark.parametrize("op", ["sddmm_spmm", "graph_attention"])
def test_auto_fuses_where_one_warp_covers_the_output_and_matches_both_paths(op, monkeypatch):
    """fused="auto" runs the fused kernel unless the output needs several column passes (each
    would compute the scores again) or the work exceeds FUSE_MAX_WORK; both give the reference."""
    rng = np.random.default_rng(5)
    A = _graph((12, 9), rng)
    X, Y, Z = (rng.standard_normal(s).astype(np.float32) for s in ((12, 8), (9, 8), (9, 6)))
    reference = {"sddmm_spmm": sddmm_spmm_reference, "graph_attention": attention_reference}[op]
    ran = []
    for name in ("attention", "sddmm_spmm"):
        monkeypatch.setattr(fused, name, _recording(getattr(fused, name), ran, "fused"))
    monkeypatch.setattr(hp, "sddmm_hp", _recording(hp.sddmm_hp, ran, "unfused"))
    work = A.nnz * (8 + 6)  # entry-columns
    for per_lane, most, path in ((1, work, "fused"), (0, work, "unfused"), (1, work - 1, "unfused")):
        monkeypatch.setattr(fused, "MAX_PER_LANE", per_lane)  # 32 columns in a pass, or none
        monkeypatch.setattr(dispatch, "FUSE_MAX_WORK", most)
        dev = ns.CSR.from_scipy(A, dtype=np.float32)
        ran.clear()
        out = getattr(ns, op)(dev, cuda.to_device(X), cuda.to_device(Y), cuda.to_device(Z))
        assert ran == [path]
        assert_close(out.copy_to_host(), reference(A, X, Y, Z), np.float32)


def test_auto_on_a_replayed_call_fuses_by_the_entries_and_otherwise_by_the_work(monkeypatch):
    """A replayed call's unfused path costs a few launches (fuse up to FUSE_MAX_NNZ_REPLAYED
    entries, whatever the widths); a full call's costs its host time (up to FUSE_MAX_WORK)."""
    dev = ns.CSR.from_scipy(_graph((12, 9), np.random.default_rng(6)), dtype=np.float32)
    monkeypatch.setattr(dispatch, "FUSE_MAX_WORK", dev.nnz * (8 + 6))
    monkeypatch.setattr(dispatch, "FUSE_MAX_NNZ_REPLAYED", dev.nnz)
    assert dispatch.fuse_pays(dev, 8, 6, replayed=True) and dispatch.fuse_pays(dev, 8, 6)
    assert dispatch.fuse_pays(dev, 64, 200, replayed=True) and not dispatch.fuse_pays(dev, 64, 200)
    monkeypatch.setattr(dispatch, "FUSE_MAX_NNZ_REPLAYED", dev.nnz - 1)
    assert not dispatch.fuse_pays(dev, 8, 6, replayed=True) and dispatch.fuse_pays(dev, 8, 6)


def test_a_call_that_is_never_replayed_chooses_fusion_by_its_host_time(monkeypatch):
    """Numba device arrays have no replay signature: fused="auto" asks as for a full call."""
    rng = np.random.default_rng(7)
    A = _graph((6, 5), rng)
    asked = []
    pays = dispatch.fuse_pays
    monkeypatch.setattr(dispatch, "fuse_pays", lambda *args: asked.append(args[3:]) or pays(*args))
    X, Y, Z = (cuda.to_device(rng.standard_normal(s).astype(np.float32)) for s in ((6, 4), (5, 4), (5, 3)))
    ns.sddmm_spmm(ns.CSR.from_scipy(A, dtype=np.float32), X, Y, Z)
    assert asked == [(False,)]


def test_run_length_balances_a_runs_chain_against_the_merges():
    assert fused.run_length(0) == fused.run_length(99) == fused.RUN_MIN
    assert fused.run_length(1383) == 32 and fused.run_length(5425) == 64
    assert fused.run_length(10 ** 9) == fused.RUN_MAX


def _recording(fn, ran, label):
    def recorded(*args, **kwargs):
        ran.append(label)
        return fn(*args, **kwargs)
    return recorded


def test_auto_always_fuses_float16_whose_range_cannot_hold_the_raw_scores(monkeypatch):
    """Scores of 40 * 40 * 64 = 102400 overflow float16 (65504): the unfused path, which stores
    them in A's dtype, would give NaN; auto takes the fused kernel, which keeps them in float32."""
    A = sp.csr_matrix(np.ones((2, 3), np.float32))
    Q = np.full((2, 64), 40, np.float16)
    K = np.full((3, 64), 40, np.float16)
    V = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float16)
    dev = ns.CSR.from_scipy(A, dtype=np.float16)
    assert dispatch.fuse_pays(dev, 64, 300) and not dispatch.fuse_pays(ns.CSR.from_scipy(A), 64, 300)  # (wide)
    out = ns.graph_attention(dev, *(cuda.to_device(M.view(np.uint16)).view(np.float16) for M in (Q, K, V)))
    expected = V.astype(np.float64).mean(axis=0)  # equal scores: equal weights
    np.testing.assert_allclose(out.copy_to_host().astype(np.float64), np.tile(expected, (2, 1)), rtol=2e-3)


def test_fused_argument_is_checked():
    A = sp.csr_matrix(np.ones((2, 2), np.float32))
    X = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="fused must be True, False or 'auto', got 'Auto'"):
        ns.graph_attention(A, X, X, X, fused="Auto")
    with pytest.raises(TypeError, match="fused must be"):
        ns.sddmm_spmm(A, X, X, X, fused=None)


# Vector loads ---------------------------------------------------------------------------------

#: Value dtypes and the bound on the fused kernels' relative norm error against float64 on the
#: same (rounded) inputs: the 16-bit ones round once, within the unit roundoff (tests/test_half.py).
VALUE_DTYPES = {"float32": (np.float32, 2e-6), "float64": (np.float64, 1e-13),
                "float16": (np.float16, 2.0**-11), "bfloat16": (ml_dtypes.bfloat16, 2.0**-8)}
#: (value dtype, softmax, K, N, (xy_width, z_width)): every width on both sides for 16-bit and
#: for 32/64-bit values, each dtype and softmax setting at least once (the simulator is slow);
#: N = 264 takes two column tiles (blockIdx.y) of 256.
WIDTH_CASES = [("float16", False, 136, 68, (8, 4)), ("bfloat16", True, 68, 136, (4, 8)),
               ("float16", True, 34, 33, (2, 1)), ("bfloat16", False, 33, 34, (1, 2)),
               ("bfloat16", True, 40, 264, (2, 8)), ("float32", True, 136, 68, (4, 4)),
               ("float64", False, 34, 33, (2, 1)), ("float32", False, 33, 34, (1, 2)),
               ("float64", True, 40, 40, (2, 2))]


@pytest.mark.parametrize("typestr, k, n, widths", [
    ("<u2", 136, 264, (8, 8)), ("<u2", 68, 68, (4, 4)), ("<u2", 40, 40, (2, 2)), ("<u2", 33, 33, (1, 1)),
    ("<f4", 136, 264, (4, 4)), ("<f4", 34, 40, (2, 2)), ("<f8", 68, 136, (4, 4)), ("<u2", 8, 16, (1, 1)),
])
def test_vectors_are_the_widest_alignment_allows_that_one_warp_pass_needs(typestr, k, n, widths):
    """K = 40 takes 2-wide vectors though 8 divide it: 32 lanes of 2 cover it in one pass, as 5
    lanes of 8 would; Z's vectors are at most per_lane(N) wide."""
    X, Y, Z = view((5, k), 1 << 20, typestr), view((7, k), 2 << 20, typestr), view((7, n), 3 << 20, typestr)
    assert fused.row_widths(X, Y, Z, n) == widths


def test_an_operand_off_vector_alignment_narrows_only_its_own_side():
    X, Z = view((5, 136), 1 << 20, "<u2"), view((7, 136), 3 << 20, "<u2")
    off = view((7, 136), (2 << 20) + 2, "<u2")  # one element past a 16-byte boundary
    assert fused.row_widths(X, off, Z, 136) == (1, 8)
    assert fused.row_widths(X, X, off, 136) == (8, 1)
    assert fused.row_widths(X, view((7, 136), (2 << 20) + 4, "<u2"), Z, 136) == (2, 8)


def _host_operands(rng, dtype, m, n, k, f):
    """X, Y of dot products near 1 in size (softmax weights far from one-hot) and Z."""
    X, Y = (rng.standard_normal(s) * k**-0.25 for s in ((m, k), (n, k)))
    return X.astype(dtype), Y.astype(dtype), rng.standard_normal((n, f)).astype(dtype)


def _poisoned_output(shape, dtype):
    return cuda.to_device(arrays.device_storage(np.full(shape, np.nan, dtype)))


def _run_fused(A, dtype, softmax, X, Y, Z, shape):
    dev = ns.CSR.from_scipy(A, dtype=dtype)
    out = _poisoned_output(shape, dtype)
    (fused.attention if softmax else fused.sddmm_spmm)(dev, X, Y, Z, out)
    reference = (attention_reference if softmax else sddmm_spmm_reference)
    return out.copy_to_host().view(dtype).astype(np.float64), dev, reference


def _rounded_reference(reference, dev, *hosts):
    return reference(dev.to_scipy(), *(h.astype(np.float64) for h in hosts))  # dev: A's rounded values


def _graph_with_empty_rows(rng, shape):
    A = _graph(shape, rng).tolil()
    A[1, :] = 0
    A[2, :] = 0
    A[0, rng.random(shape[1]) < 0.8] = 1.25  # a long row next to them
    return sp.csr_matrix(A)


@pytest.mark.parametrize("name, softmax, k, n, widths", WIDTH_CASES)
def test_fused_rows_match_float64_at_every_vector_width(name, softmax, k, n, widths):
    dtype, bound = VALUE_DTYPES[name]
    rng = np.random.default_rng()
    A = _graph_with_empty_rows(rng, (6, 7))
    hosts = _host_operands(rng, dtype, 6, 7, k, n)
    X, Y, Z = (cuda.to_device(arrays.device_storage(h)) for h in hosts)
    assert fused.row_widths(X, Y, Z, n) == widths
    got, dev, reference = _run_fused(A, dtype, softmax, X, Y, Z, (6, n))
    assert relative_error(got, _rounded_reference(reference, dev, *hosts)) <= bound
    assert not np.any(got[1:3])  # the empty rows


@pytest.fixture
def host_alignment(monkeypatch):
    """On the simulator a device array has no device address (launch.alignment sees any as
    aligned): use the host address behind it, so an array off vector alignment is seen as such."""
    if not dispatch.simulator_enabled():
        return
    alignment = launch.alignment

    def host(array):
        behind = getattr(array, "_ary", None)  # the simulator's NumPy array
        return alignment(view(array.shape, behind.ctypes.data)) if behind is not None else alignment(array)

    monkeypatch.setattr(launch, "alignment", host)


@pytest.mark.parametrize("name, softmax, off", [("float32", False, "Y"), ("bfloat16", True, "Z"),
                                                ("float16", True, "Y"), ("float64", False, "Z")])
def test_an_operand_one_element_off_alignment_is_read_with_width_one(name, softmax, off, host_alignment):
    dtype, bound = VALUE_DTYPES[name]
    rng = np.random.default_rng()
    k = n = 136
    A = _graph_with_empty_rows(rng, (6, 7))
    hosts = _host_operands(rng, dtype, 6, 7, k, n)
    X, Y, Z = (cuda.to_device(arrays.device_storage(h)) for h in hosts)
    host = hosts[1 if off == "Y" else 2]
    flat = cuda.to_device(arrays.device_storage(np.full(host.size + 1, np.nan, dtype)))
    shifted = flat[1:].reshape(host.shape)  # starts one element past the buffer's (aligned) start
    shifted.copy_to_device(arrays.device_storage(host))
    Y, Z = (shifted, Z) if off == "Y" else (Y, shifted)
    xy_width, z_width = fused.row_widths(X, Y, Z, n)
    assert (xy_width == 1) == (off == "Y") and (z_width == 1) == (off == "Z") and xy_width * z_width > 1
    got, dev, reference = _run_fused(A, dtype, softmax, X, Y, Z, (6, n))
    assert relative_error(got, _rounded_reference(reference, dev, *hosts)) <= bound
    assert not np.any(got[1:3])


def test_cut_rows_stay_right_when_the_run_length_changes_on_one_matrix(monkeypatch):
    """The partial rows are kept per size: a longer run after a shorter one (fewer slots) and a
    shorter after a longer (more) both read and write scratch of their own size."""
    rng = np.random.default_rng(3)
    A = _graph((8, 8), rng)
    X, Y, Z = (rng.standard_normal(s).astype(np.float32) for s in ((8, 4), (8, 4), (8, 5)))
    dev = ns.CSR.from_scipy(A, dtype=np.float32)
    for run in (4, 1, 2):
        monkeypatch.setattr(fused, "RUN", run)
        out = ns.graph_attention(dev, cuda.to_device(X), cuda.to_device(Y), cuda.to_device(Z), fused=True)
        assert_close(out.copy_to_host(), attention_reference(A, X, Y, Z), np.float32)


def test_the_fused_kernel_and_its_merge_are_issued_under_one_lock(monkeypatch):
    """Another thread's call on the stream cannot come between the launch that writes a cut row's
    partial rows and the merge that reads them."""
    monkeypatch.setattr(fused, "RUN", 1)
    owned = []
    run_bound = launch.run_bound

    def recorded(*args, **kwargs):
        owned.append(launch.ISSUE_LOCK._is_owned())
        return run_bound(*args, **kwargs)
    monkeypatch.setattr(launch, "run_bound", recorded)
    rng = np.random.default_rng(4)
    A = _graph((6, 6), rng)
    X = rng.standard_normal((6, 3)).astype(np.float32)
    ns.sddmm_spmm(ns.CSR.from_scipy(A, dtype=np.float32), *(cuda.to_device(X) for _ in range(3)), fused=True)
    assert len(owned) == 2 and all(owned)
