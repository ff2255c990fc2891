"""HP-SpMM on the simulator (or a GPU): every reduction, split rows, vector widths, DTP."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda
from numba.cuda import config

from numbasparse import CSR, dispatch
from numbasparse.cuda import device, hp, launch
from numbasparse.reference import sddmm_reference, spmm_reference
from strategies import N_COLS, assert_close, graphs, random_dense, sddmm_scale, spmm_scale

REDUCTIONS = ("sum", "mean", "max", "min")


def run_hp(A, B, reduce, nnz_per_group=None, index_dtype=None, lanes=None, single=None, zeroed=None, balanced=None):
    dev = CSR.from_scipy(A, dtype=B.dtype, index_dtype=index_dtype)
    C = cuda.to_device(np.full((A.shape[0], B.shape[1]), np.nan, B.dtype))  # poisoned
    hp.spmm_hp(dev, cuda.to_device(B), C, reduce, nnz_per_group=nnz_per_group, lanes=lanes, single=single,
               zeroed=zeroed, balanced=balanced)
    return C.copy_to_host()



def _only_plan(dev):
    """The one HP-SpMM plan in the cache of ``dev``."""
    (plan,) = (v for v in dev.cache.sections["plans"].values() if isinstance(v, hp.HPPlan))
    return plan

@given(A=graphs(), n=st.sampled_from(N_COLS + (128, 260)), reduce=st.sampled_from(REDUCTIONS),
       nnz_per_group=st.sampled_from([1, 5, 32, 64, None]), lanes=st.sampled_from([None, 32, 8, 4]),
       dtype=st.sampled_from([np.float32, np.float64]),
       index_dtype=st.sampled_from([np.int32, np.int64]), single=st.sampled_from([None, True, False]),
       balanced=st.sampled_from([None, True]), seed=st.integers(0, 2**32 - 1))
def test_hp_matches_reference(A, n, reduce, nnz_per_group, lanes, dtype, index_dtype, single, balanced, seed):
    B = random_dense(np.random.default_rng(seed), (A.shape[1], n), dtype)
    C = run_hp(A, B, reduce, nnz_per_group, index_dtype, lanes, single, balanced=balanced)
    assert_close(C, spmm_reference(A, B, reduce), dtype, spmm_scale(A, B, reduce))


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("single", [False, True])
def test_row_split_across_many_warps(reduce, single):
    """One heavy row cut into 7-entry pieces: every piece combines atomically (filled C) or
    through the row's last block (single launch)."""
    rng = np.random.default_rng()
    dense = np.zeros((4, 90))
    dense[1] = rng.standard_normal(90)
    dense[3, :5] = rng.standard_normal(5)
    A = sp.csr_matrix(dense)
    B = random_dense(rng, (90, 33), np.float32)
    C = run_hp(A, B, reduce, nnz_per_group=7, single=single)
    assert np.all(C[[0, 2]] == 0)  # empty rows
    assert_close(C, spmm_reference(A, B, reduce), np.float32)


@pytest.mark.parametrize("name,reductions_", [("bfloat16", ("max", "sum", "max")), ("float16", ("min", "mean", "min"))])
def test_a_16_bit_c_from_the_filled_launch_is_rounded_once_and_leaves_the_workspace_filled(name, reductions_):
    """single=False with a 16-bit C: the filled kernel into the float32 workspace, rounded into C;
    each call on the one matrix (fresh B, another reduction) finds the workspace filled again.
    A heavy row split in 7-entry pieces combines atomically in the workspace."""
    import ml_dtypes

    dtype, u = {"bfloat16": (ml_dtypes.bfloat16, 2.0**-8), "float16": (np.float16, 2.0**-11)}[name]
    rng = np.random.default_rng()
    dense = np.zeros((6, 90))
    dense[1] = rng.standard_normal(90)
    dense[3, :5] = rng.standard_normal(5)
    dense[5, 40:47] = rng.standard_normal(7)
    A = sp.csr_matrix(dense)
    dev = CSR.from_scipy(A, dtype=name)
    exact = A.copy()
    exact.data = exact.data.astype(dtype).astype(np.float64)  # the values the kernel multiplies
    for reduce in reductions_:
        B = random_dense(rng, (90, 40), np.float32).astype(dtype)
        C = cuda.to_device(np.full((6, 40), 0x7FFF, np.uint16))  # poisoned: NaN bits
        hp.spmm_hp(dev, cuda.to_device(B.view(np.uint16)), C, reduce, nnz_per_group=7, single=False)
        C = C.copy_to_host().view(dtype).astype(np.float64)
        reference = spmm_reference(exact, B.astype(np.float64), reduce)
        assert np.all(C[[0, 2, 4]] == 0)
        assert np.linalg.norm(C - reference) <= u * np.linalg.norm(reference), reduce


@given(A=graphs(), n=st.sampled_from((1, 8, 33)), nnz_per_group=st.sampled_from([1, 7, None]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)  # (8: vector loads; wider N adds only simulated threads)
def test_accumulate_adds_the_product_to_what_c_holds(A, n, nnz_per_group, dtype, seed):
    """C += A B: empty rows keep their value, whole and split rows alike are added."""
    rng = np.random.default_rng(seed)
    B, C0 = random_dense(rng, (A.shape[1], n), dtype), random_dense(rng, (A.shape[0], n), dtype)
    C = cuda.to_device(C0)
    dispatch.spmm_add(CSR.from_scipy(A, dtype=dtype), cuda.to_device(B), C)
    assert_close(C.copy_to_host(), C0 + spmm_reference(A, B, "sum"), dtype,
                 spmm_scale(A, B, "sum") + np.abs(C0))
    C = cuda.to_device(C0)
    hp.spmm_hp(CSR.from_scipy(A, dtype=dtype), cuda.to_device(B), C, "sum", nnz_per_group=nnz_per_group,
               accumulate=True)
    assert_close(C.copy_to_host(), C0 + spmm_reference(A, B, "sum"), dtype,
                 spmm_scale(A, B, "sum") + np.abs(C0))


@pytest.mark.parametrize("bad", [dict(reduce="max"), dict(single=True), dict(dtype=np.float16)])
def test_accumulate_takes_sums_into_a_wide_c_only(bad):
    A = sp.random(6, 6, density=0.5, format="csr", random_state=0)
    dtype = bad.get("dtype", np.float32)
    C = cuda.to_device(np.zeros((6, 8), np.uint16 if dtype == np.float16 else dtype))
    B = cuda.to_device(np.zeros((6, 8), np.uint16 if dtype == np.float16 else dtype))
    with pytest.raises(ValueError, match="accumulate"):
        hp.spmm_hp(CSR.from_scipy(A, dtype=dtype), B, C, bad.get("reduce", "sum"), single=bad.get("single"),
                   accumulate=True)


def test_lane_layout_rules():
    assert hp.lane_layout(32, 4, None) == (8, 4, 1)  # 4 nonzeros per warp step
    assert hp.lane_layout(64, 4, None) == (16, 4, 1)
    assert hp.lane_layout(128, 4, None) == (32, 4, 1)
    assert hp.lane_layout(256, 4, None) == (32, 4, 1)  # two column tiles
    assert hp.lane_layout(70, 4, None) == (32, 2, 1)
    assert hp.lane_layout(33, 4, None) == (32, 1, 1)
    assert hp.lane_layout(8, 4, None) == (4, 2, 1)
    assert hp.lane_layout(32, 4, None, lanes=32) == (32, 1, 1)  # a whole warp per group
    assert hp.lane_layout(128, 4, None, lanes=16) == (16, 4, 2)  # forced narrow: 2 vectors


def test_lane_layout_of_16_bit_values_widens_vectors_only_past_32_lanes_of_4():
    assert hp.lane_layout(32, 2, None) == (8, 4, 1)
    assert hp.lane_layout(128, 2, None) == (32, 4, 1)  # not 16 x 8: groups sharing a warp wait at row ends
    assert hp.lane_layout(256, 2, None) == (32, 8, 1)  # one 16-byte load per lane
    assert hp.lane_layout(192, 2, None) == (32, 4, 1)


def test_gather_depth_rule():
    assert hp.gather_depth(nnz=4000, nonempty_rows=100, width=4) == 2  # rows of 40
    assert hp.gather_depth(nnz=400, nonempty_rows=100, width=4, lanes=8) == 1  # rows of 4: groups would diverge
    assert hp.gather_depth(nnz=400, nonempty_rows=100, width=4, lanes=32) == 2  # a group per warp
    assert hp.gather_depth(nnz=4000, nonempty_rows=100, width=8, lanes=16) == 1  # would spill
    assert hp.gather_depth(nnz=0, nonempty_rows=0, width=4, lanes=8) == 1


def test_gather_depth_of_16_bit_values_keeps_the_bytes_in_flight():
    assert hp.gather_depth(nnz=4000, nonempty_rows=100, width=8, itemsize=2, lanes=32) == 4  # 2 x float32's
    assert hp.gather_depth(nnz=400, nonempty_rows=100, width=4, itemsize=2, lanes=32) == 4  # a group per warp
    assert hp.gather_depth(nnz=400, nonempty_rows=100, width=4, itemsize=2, lanes=8) == 1  # groups would diverge
    assert hp.gather_depth(nnz=4000, nonempty_rows=100, width=16, itemsize=2, lanes=16) == 1  # would spill


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_lane_groups_split_rows_and_skip_empty_rows(lanes):
    """Groups of a warp walk different rows; a long row spans groups of several warps."""
    rng = np.random.default_rng()
    dense = np.zeros((9, 70))
    dense[1] = rng.standard_normal(70)
    dense[4, :3] = rng.standard_normal(3)
    dense[5, 10:13] = rng.standard_normal(3)
    dense[8, -1] = 1.0
    A = sp.csr_matrix(dense)
    B = random_dense(rng, (70, 32), np.float32)
    for reduce in ("sum", "max"):
        C = run_hp(A, B, reduce, nnz_per_group=5, lanes=lanes)
        assert np.all(C[[0, 2, 3, 6, 7]] == 0)  # empty rows
        assert_close(C, spmm_reference(A, B, reduce), np.float32)


def _empty_runs(rng, runs):
    """Rows of 1-3 entries separated by runs of empty rows of the given lengths (then a last row)."""
    lengths = []
    for run in runs:
        lengths += [int(rng.integers(1, 4))] + [0] * run
    lengths.append(2)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    cols = rng.integers(0, 20, len(rows))
    return sp.csr_matrix((rng.standard_normal(len(rows)), (rows, cols)), shape=(len(lengths), 20))


@pytest.mark.parametrize("runs", [(3, 4, 5), (14, 15, 16, 17), (6, 1, 37), (200, 0, 90)])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_runs_of_empty_rows_are_skipped_in_both_kernels(runs, index_dtype):
    """Runs of empty rows shorter and longer than hp.WALK_PROBE between a group's nonzeros: SpMM
    on a filled C, SDDMM with whole-warp groups (one nonzero per step, so a group walks every
    row end) by the rule's walk and by either walk."""
    rng = np.random.default_rng()
    A = _empty_runs(rng, runs)
    B = random_dense(rng, (20, 32), np.float32)
    for reduce in ("sum", "max"):
        C = run_hp(A, B, reduce, nnz_per_group=64, index_dtype=index_dtype, single=False)
        assert_close(C, spmm_reference(A, B, reduce), np.float32)
    X = random_dense(rng, (A.shape[0], 8), np.float32)
    Y = random_dense(rng, (20, 8), np.float32)
    dev = CSR.from_scipy(A, dtype=np.float32, index_dtype=index_dtype)
    for skips_runs in (None, True, False):
        out = cuda.to_device(np.full(dev.nnz, np.nan, np.float32))
        hp.sddmm_hp(dev, cuda.to_device(X), cuda.to_device(Y), out, nnz_per_warp=64, group=32,
                    skips_runs=skips_runs)
        assert_close(out.copy_to_host(), sddmm_reference(A, X, Y), np.float32)


@pytest.mark.parametrize("runs", [(3, 40, 5), (0, 70, 1, 0, 33)])
@pytest.mark.parametrize("nnz_per_group", [1, 2, 3])
@pytest.mark.parametrize("zeroed", [False, True])
def test_the_single_launch_leaves_runs_of_empty_rows_zero_wherever_groups_start(runs, nnz_per_group, zeroed):
    """Runs of empty rows longer than hp.WALK_PROBE inside a group and just before a group's
    first row (groups of 1-3 entries start on every row end), empty rows first and last: zeroed
    by the single launch, or by the memset before it (``zeroed``) into a poisoned C."""
    rng = np.random.default_rng()
    A = _empty_runs(rng, runs)
    A = sp.vstack([sp.csr_matrix((20, 20)), A, sp.csr_matrix((19, 20))]).tocsr()
    dev = CSR.from_scipy(A, dtype=np.float32)
    for reduce in ("sum", "max"):
        B = random_dense(rng, (20, 8), np.float32)
        C = cuda.to_device(np.full((A.shape[0], 8), np.nan, np.float32))
        hp.spmm_hp(dev, cuda.to_device(B), C, reduce, nnz_per_group=nnz_per_group, lanes=8, single=True, zeroed=zeroed)
        assert_close(C.copy_to_host(), spmm_reference(A, B, reduce), np.float32)


def test_the_single_launch_runs_after_a_memset_where_groups_would_zero_long_runs_of_empty_rows():
    """hp.zeroed_single: more than MAX_ZEROED_ROWS empty rows for one group (a 16-bit C forces
    the single launch on such graphs) take the memset; MAX_ZEROED_ROWS or fewer do not."""
    rng = np.random.default_rng()
    for runs, zeroed in (((2, 1, 3), False), ((hp.MAX_ZEROED_ROWS,), False), ((hp.MAX_ZEROED_ROWS + 1,), True)):
        dev = CSR.from_scipy(_empty_runs(rng, runs), dtype=np.float32)
        B = cuda.to_device(random_dense(rng, (20, 8), np.float32))
        C = cuda.device_array((dev.shape[0], 8), np.float32)
        assert hp._spmm_plan(dev, 0, 8, B, C, 64, 8, None, None, True).zeroed is zeroed
    assert not hp._spmm_plan(dev, 0, 8, B, C, 64, 8, None, None, False).zeroed  # the filled kernel



def test_the_zeroed_single_launch_writes_no_empty_row(monkeypatch):
    """With the memset (hp.fill_identity) removed, the zeroed kernel leaves every empty row as
    it found it and writes every other row: it skips empty rows rather than storing them."""
    monkeypatch.setattr(hp, "fill_identity", lambda *args, **kwargs: None)
    rng = np.random.default_rng()
    A = _empty_runs(rng, (hp.MAX_ZEROED_ROWS + 9, 0, 3, 50))
    A = sp.vstack([sp.csr_matrix((5, 20)), A, sp.csr_matrix((7, 20))]).tocsr()
    dev = CSR.from_scipy(A, dtype=np.float32)
    empty = np.diff(A.indptr) == 0
    for reduce in ("sum", "max"):
        B = random_dense(rng, (20, 8), np.float32)
        C = cuda.to_device(np.full((A.shape[0], 8), 7.0, np.float32))  # a sentinel
        hp.spmm_hp(dev, cuda.to_device(B), C, reduce, nnz_per_group=2, lanes=8, single=True, zeroed=True)
        C = C.copy_to_host()
        assert np.all(C[empty] == 7.0)
        assert_close(C[~empty], spmm_reference(A, B, reduce)[~empty], np.float32)

def test_a_16_bit_c_on_long_runs_of_empty_rows_comes_from_the_memset_and_single_launch():
    """A bfloat16 product (the single launch forced) on runs of empty rows longer than
    MAX_ZEROED_ROWS, by the rule (the memset first) and forced either way, into a poisoned C."""
    import ml_dtypes

    rng = np.random.default_rng()
    A = _empty_runs(rng, (hp.MAX_ZEROED_ROWS + 9, 2, 50))
    dev = CSR.from_scipy(A, dtype="bfloat16")
    exact = A.copy()
    exact.data = exact.data.astype(ml_dtypes.bfloat16).astype(np.float64)
    for zeroed in (None, True, False):
        B = random_dense(rng, (20, 16), np.float32).astype(ml_dtypes.bfloat16)
        C = cuda.to_device(np.full((A.shape[0], 16), 0x7FFF, np.uint16))  # NaN bits
        hp.spmm_hp(dev, cuda.to_device(B.view(np.uint16)), C, "sum", nnz_per_group=4, zeroed=zeroed)
        if zeroed is None:  # the rule's plan, with the single launch that a 16-bit C forces
            plan = _only_plan(dev)
            assert plan.single and plan.zeroed
        C = C.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64)
        reference = spmm_reference(exact, B.astype(np.float64), "sum")
        assert np.linalg.norm(C - reference) <= 2.0**-8 * np.linalg.norm(reference)


class _CountingIndptr:
    """``indptr`` for calling the walk's device functions on the host (the simulator runs them as
    Python): counts the loads."""

    def __init__(self, indptr):
        self.indptr, self.shape, self.loads = indptr, indptr.shape, 0

    def __getitem__(self, i):
        self.loads += 1
        return self.indptr[i]


@pytest.mark.skipif(not device.simulator_enabled(), reason="calls device functions from the host")
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_the_walk_finds_every_row_and_crosses_a_long_run_in_few_loads(index_dtype):
    lengths = np.zeros(2300, np.int64)
    lengths[[0, 1, 5, 2200, 2201, 2250]] = [2, 1, 3, 1, 4, 2]  # a run of 2194 empty rows, empty rows at the end
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(index_dtype)
    last = len(lengths) - 1
    for position in range(int(indptr[-1])):
        expected = int(np.searchsorted(indptr, position, side="right")) - 1
        for start in range(0, expected + 1, 7):
            assert hp.walk_to(indptr, start, last, position) == expected
            assert hp.row_of(indptr, start, last, position) == expected
    counted = _CountingIndptr(indptr)
    assert hp.walk_to(counted, 5, last, int(indptr[2200])) == 2200
    assert counted.loads < 60  # a row at a time would take 2195


def test_sddmm_skips_runs_only_on_graphs_with_a_run_of_empty_rows_longer_than_the_probe():
    rng = np.random.default_rng(0)
    X = cuda.to_device(random_dense(rng, (300, 8), np.float32))
    Y = cuda.to_device(random_dense(rng, (20, 8), np.float32))
    for runs, skips in (((3, hp.WALK_PROBE), False), ((3, hp.WALK_PROBE + 1), True)):
        dev = CSR.from_scipy(_empty_runs(rng, runs), dtype=np.float32)
        plan = hp._sddmm_plan(dev, 8, X[:dev.shape[0]], Y, None, None)
        assert plan[0] is hp.sddmm_hp_kernel(*hp.sddmm_layout(8, 4, X, Y), "<f4", skips)


def test_dtp_shrinks_work_per_warp_for_small_graphs(monkeypatch):
    monkeypatch.setattr(device, "device_limits", lambda: (132, 2048, 65536))
    big = hp.nnz_per_warp(30_000_000)
    small = hp.nnz_per_warp(50_000)
    assert big == max(hp.NNZ_PER_WARP)
    assert small == min(hp.NNZ_PER_WARP)
    assert hp.nnz_per_warp(3_000_000) < big
    # SDDMM: twice the waves, unless a warp would get fewer than two steps of its lane groups
    assert hp.sddmm_nnz_per_warp(3_000_000, 16) == hp.nnz_per_warp(3_000_000) // 2
    assert hp.sddmm_nnz_per_warp(50_000, 16) == small
    assert hp.sddmm_nnz_per_warp(240_000, 2) == hp.nnz_per_warp(240_000) == 16
    assert hp.sddmm_nnz_per_warp(240_000, 8) == 8


def test_spmm_dtp_grows_with_the_square_root_of_the_work_per_lane_group_slot(monkeypatch):
    monkeypatch.setattr(device, "device_limits", lambda: (132, 2048, 65536))
    slots = hp.full_wave() * hp.WARPS_PER_BLOCK  # lane groups at once, one per warp
    per_slot = 64 * 64 // hp.GROUP_COST  # sqrt(GROUP_COST x per_slot) = 64
    assert hp.spmm_nnz_per_group(per_slot * slots, 1) == 64
    assert hp.spmm_nnz_per_group(4 * per_slot * slots, 1) == 128  # 4x the work: 2x the group
    assert hp.spmm_nnz_per_group(2 * per_slot * slots, 2) == 128  # column tiles are work too
    assert hp.spmm_nnz_per_group(per_slot * slots, 1, groups_per_warp=4) == 32  # 4x the slots
    assert hp.spmm_nnz_per_group(10_000, 1, groups_per_warp=4) == min(hp.NNZ_PER_GROUP)
    assert hp.spmm_nnz_per_group(2**33, 1) == max(hp.NNZ_PER_GROUP)


@settings(max_examples=12)  # simulated shuffles are slow
@given(A=graphs(max_rows=8, max_cols=40), k=st.sampled_from([0, 1, 7, 32, 33, 70, 128]),
       nnz_per_warp=st.sampled_from([1, 3, 32, None]), group=st.sampled_from([None, None, 4, 8]),
       dtype=st.sampled_from([np.float32, np.float64]), index_dtype=st.sampled_from([np.int32, np.int64]),
       seed=st.integers(0, 2**32 - 1))
def test_hp_sddmm_matches_reference(A, k, nnz_per_warp, group, dtype, index_dtype, seed):
    """Also with groups forced narrower than K needs (each lane loops over K)."""
    rng = np.random.default_rng(seed)
    X = random_dense(rng, (A.shape[0], k), dtype)
    Y = random_dense(rng, (A.shape[1], k), dtype)
    dev = CSR.from_scipy(A, dtype=dtype, index_dtype=index_dtype)
    out = cuda.to_device(np.full(dev.nnz, np.nan, dtype))  # poisoned
    hp.sddmm_hp(dev, cuda.to_device(X), cuda.to_device(Y), out, nnz_per_warp=nnz_per_warp, group=group)
    assert_close(out.copy_to_host(), sddmm_reference(A, X, Y), dtype, sddmm_scale(A, X, Y))


def test_sddmm_group_override_must_be_a_lane_count():
    dev = CSR.from_scipy(sp.csr_matrix(np.eye(3, dtype=np.float32)))
    X = cuda.to_device(np.ones((3, 8), np.float32))
    with pytest.raises(ValueError, match="group must be a power of two"):
        hp.sddmm_hp(dev, X, X, cuda.device_array(3, np.float32), group=3)


@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_split_rows_over_several_column_tiles_and_repeated_calls(reduce):
    """A row split into many 3-entry groups, in each of two column tiles; the second call on
    the same CSR (cached launch plan) is right too."""
    rng = np.random.default_rng()
    dense = np.zeros((7, 40))
    dense[0, :2] = rng.standard_normal(2)
    dense[2] = rng.standard_normal(40)
    dense[3, 5:9] = rng.standard_normal(4)
    dense[5, 30:] = rng.standard_normal(10)
    A = sp.csr_matrix(dense)
    dev = CSR.from_scipy(A, dtype=np.float32)
    for _ in range(2):
        B = random_dense(rng, (40, 44), np.float32)  # 44 columns: 2 tiles of 4 lanes x 2 float4
        C = cuda.to_device(np.full((7, 44), np.nan, np.float32))
        hp.spmm_hp(dev, cuda.to_device(B), C, reduce, nnz_per_group=3, lanes=4)
        assert_close(C.copy_to_host(), spmm_reference(A, B, reduce), np.float32)


def rows_of(rng, lengths, n_cols):
    """A dense matrix whose row i holds ``lengths[i]`` random values in distinct random columns."""
    dense = np.zeros((len(lengths), n_cols))
    for i, n in enumerate(lengths):
        dense[i, rng.choice(n_cols, n, replace=False)] = rng.standard_normal(n)
    return dense


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("nnz_per_group", [7, None])
def test_batched_gathers_on_long_rows(reduce, nnz_per_group):
    """Rows averaging over GATHER_MIN_ROW entries take the batched path (depth-2 runs inside
    a row, single entries at run ends, row switches mid-chunk, empty rows, split rows)."""
    rng = np.random.default_rng()
    lengths = [0, 40, 17, 1, 0, 33, 2, 64, 25, 0, 19, 30]
    dense = rows_of(rng, lengths, 70)
    A = sp.csr_matrix(dense)
    n_cols = 16  # lanes of 4 columns: width 4, batches of 2 entries
    _, vec, cf = hp.lane_layout(n_cols, 4, None)
    assert hp.gather_depth(A.nnz, np.count_nonzero(lengths), vec * cf) == 2
    B = random_dense(rng, (70, n_cols), np.float32)
    C = run_hp(A, B, reduce, nnz_per_group=nnz_per_group)
    assert np.all(C[np.array(lengths) == 0] == 0)
    assert_close(C, spmm_reference(A, B, reduce), np.float32)


def test_zero_nnz_gives_zeros():
    A = sp.csr_matrix((5, 6), dtype=np.float32)
    C = run_hp(A, random_dense(np.random.default_rng(), (6, 8), np.float32), "max")
    assert np.all(C == 0)


@pytest.mark.parametrize("reduce,single,zeroed", [("max", False, None), ("min", False, None)]
                         + [(r, True, zeroed) for r in REDUCTIONS for zeroed in (False, True)])
def test_block_merge_of_split_rows(reduce, single, zeroed):
    """Rows split between the groups of one block (merged in shared memory), rows crossing
    blocks (filled, one atomic per block; or combined by the last of their blocks to finish;
    the 130-entry row covers a whole block), empty rows between (in the single launch zeroed
    by the kernel or by the memset before it)."""
    rng = np.random.default_rng()
    lengths = [0, 20, 3, 0, 60, 1, 0, 0, 17, 2, 130, 0, 5]  # blocks of 16 groups x 3 = 48 entries
    dense = rows_of(rng, lengths, 140)
    A = sp.csr_matrix(dense)
    B = random_dense(rng, (140, 32), np.float32)
    C = run_hp(A, B, reduce, nnz_per_group=3, lanes=8, single=single, zeroed=zeroed)
    assert np.all(C[np.array(lengths) == 0] == 0)
    assert_close(C, spmm_reference(A, B, reduce), np.float32)


@pytest.mark.parametrize("reduce, dtype", [("sum", np.float32), ("max", np.float32), ("mean", np.float64)])
def test_single_launch_writes_all_of_c_in_one_kernel_call_after_call(reduce, dtype, monkeypatch):
    """No memset or fill before the kernel; empty rows first and last, rows crossing blocks,
    and the parts' ready flags cleared after each call (three calls, fresh B each time)."""
    rng = np.random.default_rng()
    lengths = [0, 0, 9, 30, 0, 4, 26, 0, 0]  # blocks of 8 groups x 2 = 16 entries
    dense = rows_of(rng, lengths, 40)
    A = sp.csr_matrix(dense)
    dev = CSR.from_scipy(A, dtype=dtype)
    launches = []
    monkeypatch.setattr(launch, "zero", lambda *args: pytest.fail("memset in a single-launch call"))
    run = launch.run
    monkeypatch.setattr(launch, "run", lambda kernel, *args: launches.append(kernel) or run(kernel, *args))
    for _ in range(3):
        B = random_dense(rng, (40, 16), dtype)
        C = cuda.to_device(np.full((len(lengths), 16), np.nan, dtype))
        hp.spmm_hp(dev, cuda.to_device(B), C, reduce, nnz_per_group=2, lanes=16, single=True)
        assert_close(C.copy_to_host(), spmm_reference(A, B, reduce), dtype)
    assert all(k is launches[0] for k in launches)  # the HP kernel only
    (parts,) = dev.cache.sections["scratch"].values()
    assert not parts.copy_to_host().any()


@pytest.mark.parametrize("order", ["scattered", "reversed"])
@pytest.mark.parametrize("single,zeroed", [(False, None), (True, False), (True, True)])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_blocks_out_of_order_give_the_same_product(reduce, single, zeroed, order):
    """Blocks taking their chunks scattered or reversed (either launch, the single one with or
    without a memset before it): rows split across groups, blocks and merges come out as in
    order, empty rows too; in the single launch a row crossing blocks is finished by whichever
    of its blocks starts last."""
    rng = np.random.default_rng()
    lengths = [0, 20, 3, 0, 60, 1, 0, 0, 17, 2, 130, 0, 5, 9, 40, 0, 1]  # blocks of 16 groups x 2 entries
    dense = rows_of(rng, lengths, 140)
    A = sp.csr_matrix(dense)
    B = random_dense(rng, (140, 32), np.float32)
    dev = CSR.from_scipy(A, dtype=np.float32)
    C = cuda.to_device(np.full((len(lengths), 32), np.nan, np.float32))
    hp.spmm_hp(dev, cuda.to_device(B), C, reduce, nnz_per_group=2, lanes=8, single=single, block_order=order,
               zeroed=zeroed)
    plan = _only_plan(dev)
    assert plan.single == single and plan.zeroed == bool(zeroed) and plan.block_order == order
    assert plan.order_stride == (plan.grid[0] - 1 if order == "reversed" else hp.coprime_stride(plan.grid[0]))
    assert plan.order_stride * plan.order_inverse % plan.grid[0] == 1
    assert_close(C.copy_to_host(), spmm_reference(A, B, reduce), np.float32)
    if single:  # the look-back left its scratch clear for the next call
        (parts,) = dev.cache.sections["scratch"].values()
        assert not parts.copy_to_host().any()


def _products_call_after_call(lengths, reduce, **options):
    """Two products with fresh B (N = 32) on one device copy of rows of ``lengths`` entries
    (columns < 140), groups of 8 lanes of 2 entries and HP's ``options``, each checked against
    float64; returns (A, its device copy)."""
    rng = np.random.default_rng()
    A = sp.csr_matrix(rows_of(rng, lengths, 140))
    dev = CSR.from_scipy(A, dtype=np.float32)
    for _ in range(2):
        B = random_dense(rng, (140, 32), np.float32)
        C = cuda.to_device(np.full((len(lengths), 32), np.nan, np.float32))
        hp.spmm_hp(dev, cuda.to_device(B), C, reduce, nnz_per_group=2, lanes=8, **options)
        assert_close(C.copy_to_host(), spmm_reference(A, B, reduce), np.float32)
    return A, dev


@pytest.mark.parametrize("single,zeroed", [(False, None), (True, False), (True, True)])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_balanced_segments_give_the_same_product_call_after_call(reduce, single, zeroed):
    """Segments of equal predicted work rather than equal entries (either launch, the single one
    with or without a memset before it): a hub row spanning several blocks, runs of empty rows
    and rows split across groups come out as with equal segments, the look-back's parts cleared
    after each call."""
    lengths = [0, 20, 3, 0, 60, 1, 0, 0, 17, 2, 130, 0, 5, 9, 40, 0, 1] + [1, 2, 0] * 12  # short rows last
    A, dev = _products_call_after_call(lengths, reduce, single=single, zeroed=zeroed, balanced=True)
    plan = _only_plan(dev)
    assert plan.balanced and plan.single == single and plan.block_order == "in_order" and plan.grid[0] >= 3
    starts = plan.bounds.copy_to_host()[:plan.grid[0] * 16 + 1]
    assert len(set(np.diff(starts[starts < A.nnz]).tolist())) > 1  # segments of unequal entries
    if single:
        (parts,) = dev.cache.sections["scratch"].values()
        assert not parts.copy_to_host().any()


@pytest.mark.parametrize("case", ["bfloat16", "float64 int64 over column tiles"])
def test_balanced_segments_of_16_bit_values_and_int64_indices(case):
    rng = np.random.default_rng()
    lengths = [4, 0, 70, 2, 0, 0, 9, 1, 33, 5] + [1, 0, 2] * 10
    A = sp.csr_matrix(rows_of(rng, lengths, 90))
    if case == "bfloat16":
        dev = _assert_bfloat16_single_launch(rng, A, nnz_per_group=3, balanced=True)
    else:
        B = random_dense(rng, (90, 72), np.float64)
        dev = CSR.from_scipy(A, dtype=np.float64, index_dtype=np.int64)
        C = cuda.to_device(np.full((len(lengths), 72), np.nan))
        hp.spmm_hp(dev, cuda.to_device(B), C, "sum", nnz_per_group=3, lanes=8, single=True, balanced=True)
        assert_close(C.copy_to_host(), spmm_reference(A, B, "sum"), np.float64, spmm_scale(A, B, "sum"))
    assert _only_plan(dev).balanced


@pytest.mark.parametrize("options", [dict(shuffled=True), dict(block_order="reversed")])
def test_balanced_segments_take_a_rows_in_order_only(options):
    A = sp.random(30, 30, density=0.2, format="csr", random_state=1, dtype=np.float32)
    dev = CSR.from_scipy(A)
    B, C = cuda.device_array((30, 8), np.float32), cuda.device_array((30, 8), np.float32)
    with pytest.raises(ValueError, match="balanced"):
        hp.spmm_hp(dev, B, C, "sum", single=True, balanced=True, **options)


def _assert_bfloat16_single_launch(rng, A, **options):
    """The single launch (``options``: its overrides) on A's pattern and values rounded to
    bfloat16, N = 72 (two column tiles of 8 lanes): C rounded once, within bfloat16's unit
    roundoff of float64 (A.data is rounded in place).  Returns the device matrix."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16)
    A.data = A.data.astype(dtype).astype(np.float64)  # the values bfloat16 holds
    B = rng.standard_normal((A.shape[1], 72)).astype(dtype)
    dev = CSR.from_scipy(A, dtype=dtype)
    C = cuda.to_device(np.full((A.shape[0], 72), 0x7FC0, np.uint16))  # NaN bits
    hp.spmm_hp(dev, cuda.to_device(B.view(np.uint16)), C, "sum", lanes=8, single=True, **options)
    result = C.copy_to_host().view(dtype).astype(np.float64)
    reference = spmm_reference(A, B.astype(np.float64), "sum")
    assert np.linalg.norm(result - reference) <= 2.0**-8 * np.linalg.norm(reference)
    return dev


@pytest.mark.parametrize("zeroed", [False, True])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_shuffled_rows_give_the_same_product_call_after_call(reduce, zeroed):
    """The single launch on the rows in a random order (entries read through the map, each row
    stored to its own place in C): rows split across groups and blocks, runs of empty rows
    (zeroed by the kernel or by a memset), the parts' flags cleared after each call."""
    lengths = [0, 20, 3, 0, 60, 1, 0, 0, 17, 2, 130, 0, 5, 9, 40, 0, 1, 0, 0, 0]  # blocks of 16 groups x 2 entries
    _, dev = _products_call_after_call(lengths, reduce, single=True, zeroed=zeroed, shuffled=True)
    plan = _only_plan(dev)
    assert plan.shuffled and plan.zeroed == zeroed and plan.indptr is not dev.indptr and plan.order_stride == 1
    (parts,) = dev.cache.sections["scratch"].values()
    assert not parts.copy_to_host().any()


@pytest.mark.parametrize("case", ["bfloat16", "float64 int64", "per-call values", "with_values"])
def test_shuffled_rows_of_16_bit_values_int64_indices_and_other_values(case):
    """The map reads A's own entries: 16-bit values (C rounded once) over two column tiles,
    int64 indices, values passed per call (an SDDMM's scores) and a ``with_values`` copy, which
    shares the plan and its map, all give the product with their values."""
    rng = np.random.default_rng()
    lengths = [4, 0, 70, 2, 0, 0, 9, 1, 33, 5]
    A = sp.csr_matrix(rows_of(rng, lengths, 90))
    if case == "bfloat16":
        dev = _assert_bfloat16_single_launch(rng, A, nnz_per_group=3, shuffled=True)
    else:
        dtype, index_dtype = (np.float64, np.int64) if case == "float64 int64" else (np.float32, None)
        dev = CSR.from_scipy(A, dtype=dtype, index_dtype=index_dtype)
        values = None
        B = random_dense(rng, (90, 16), dtype)
        C = cuda.to_device(np.full((len(lengths), 16), np.nan, dtype))
        if case == "with_values":  # (the plan and map made for A first)
            hp.spmm_hp(dev, cuda.to_device(B), C, "sum", nnz_per_group=3, lanes=8, single=True, shuffled=True)
            A.data = random_dense(rng, (A.nnz,), np.float32)
            dev = dev.with_values(cuda.to_device(A.data))
        if case == "per-call values":
            A.data = random_dense(rng, (A.nnz,), np.float32)
            values = cuda.to_device(A.data)
        hp.spmm_hp(dev, cuda.to_device(B), C, "sum", nnz_per_group=3, lanes=8, single=True, shuffled=True,
                   values=values)
        assert_close(C.copy_to_host(), spmm_reference(A, B, "sum"), dtype, spmm_scale(A, B, "sum"))
    assert _only_plan(dev).shuffled


def test_shuffled_rows_take_the_single_launch_only():
    A = sp.random(30, 30, density=0.2, format="csr", random_state=1, dtype=np.float32)
    dev = CSR.from_scipy(A)
    B, C = cuda.device_array((30, 8), np.float32), cuda.device_array((30, 8), np.float32)
    with pytest.raises(ValueError, match="single launch"):
        hp.spmm_hp(dev, B, C, "sum", single=False, shuffled=True)


@pytest.mark.parametrize("case", ["bfloat16", "float64 int64"])
def test_scattered_single_launch_of_16_bit_values_and_int64_indices_over_column_tiles(case):
    """The single launch in a scattered order, as auto takes it for 16-bit values (C rounded
    once, within bfloat16's unit roundoff of float64) and with int64 indices, over several
    column tiles (N = 72): rows crossing blocks come out as in order, empty rows too."""
    rng = np.random.default_rng()
    lengths = [0, 20, 3, 0, 60, 1, 0, 17, 2, 130, 0, 5, 9, 40, 1]
    dense = rows_of(rng, lengths, 140)
    A = sp.csr_matrix(dense)
    if case == "bfloat16":
        dev = _assert_bfloat16_single_launch(rng, A, nnz_per_group=2, block_order="scattered")
    else:
        B = random_dense(rng, (140, 72), np.float64)
        dev = CSR.from_scipy(A, dtype=np.float64, index_dtype=np.int64)
        C = cuda.to_device(np.full((len(lengths), 72), np.nan))
        hp.spmm_hp(dev, cuda.to_device(B), C, "sum", nnz_per_group=2, lanes=8, single=True, block_order="scattered")
        assert_close(C.copy_to_host(), spmm_reference(A, B, "sum"), np.float64, spmm_scale(A, B, "sum"))
    plan = _only_plan(dev)
    assert plan.single and plan.order_stride > 1 and plan.grid[1] >= 2  # several column tiles


def test_the_stride_is_what_orders_the_blocks():
    """The filled kernel takes its blocks' chunks from the stride it is given: a stride of the
    grid's size sends every block to chunk 0 (a wrong product), a coprime one gives the product.
    The single launch compiled for a scattered order gives it with the stride's inverse (its
    look-back's chunk-to-block map); compiled in order, it ignores both."""
    from numbasparse.cuda.intrinsics import flagged_words

    rng = np.random.default_rng()
    A = sp.random(40, 30, density=0.3, format="csr", random_state=1, dtype=np.float32)
    B = cuda.to_device(random_dense(rng, (30, 8), np.float32))
    dev = CSR.from_scipy(A)
    expected = spmm_reference(A, B.copy_to_host(), "sum")

    def product(plan, order, inverse):
        C = cuda.to_device(np.zeros((40, 8), np.float32))  # (the filled launch adds to it)
        parts = cuda.to_device(np.zeros(flagged_words(2 * plan.grid[0] * 8, 4), np.uint64))
        launch.run(plan.kernel, plan.grid, hp.WARPS_PER_BLOCK * 32, 0, dev.indptr, dev.indices, dev.data,
                   plan.group_rows, B, C, plan.nnz_per_group, parts, order, inverse, plan.remap, plan.bounds)
        return np.abs(C.copy_to_host() - expected).max()

    def plan(single, order):
        C = cuda.device_array((40, 8), np.float32)
        return hp._spmm_plan(dev, 0, 8, B, C, 2, 8, None, None, single, False, order)

    filled, single, scattered = plan(False, "in_order"), plan(True, "in_order"), plan(True, "scattered")
    blocks = filled.grid[0]
    stride = hp.coprime_stride(blocks)
    assert stride > 1 and scattered.order_stride == stride and single.order_stride == 1
    assert product(filled, blocks, 1) > 1e-3
    assert product(filled, stride, 1) < 1e-4
    assert product(scattered, stride, pow(stride, -1, blocks)) < 1e-4
    assert product(single, blocks, 1) < 1e-4  # (a wrong inverse could make a scattered kernel wait for ever)
    assert scattered.kernel is not single.kernel


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="on a GPU a wrong finishing block waits for ever")
def test_a_wrong_finishing_block_fails_on_the_simulator_instead_of_hanging():
    """The simulator runs blocks one after another, so a look-back waiting on a part no earlier
    block published would spin for ever: it raises instead.  Here the scattered single launch
    runs its blocks in order but is told that chunk k + 1 runs one block lower (an inverse of
    -1), so the first block of a long row takes itself for the one that starts last."""
    from numbasparse.cuda.intrinsics import flagged_words

    rng = np.random.default_rng()
    lengths = [3, 130, 2, 0, 60, 1]
    dense = rows_of(rng, lengths, 140)
    dev = CSR.from_scipy(sp.csr_matrix(dense), dtype=np.float32)
    B = cuda.to_device(random_dense(rng, (140, 8), np.float32))
    C = cuda.to_device(np.zeros((len(lengths), 8), np.float32))
    plan = hp._spmm_plan(dev, 0, 8, B, C, 2, 8, None, None, True, False, "scattered")
    parts = cuda.to_device(np.zeros(flagged_words(2 * plan.grid[0] * 8, 4), np.uint64))
    with pytest.raises(RuntimeError, match="look-back"):
        launch.run(plan.kernel, plan.grid, hp.WARPS_PER_BLOCK * 32, 0, dev.indptr, dev.indices, dev.data,
                   plan.group_rows, B, C, plan.nnz_per_group, parts, 1, plan.grid[0] - 1, plan.remap,
                   plan.bounds)


def test_coprime_stride_orders_every_block_once_and_spreads_neighbours():
    for blocks in (1, 2, 3, 10, 64, 97, 1861, 4096):
        stride = hp.coprime_stride(blocks)
        order = np.arange(blocks) * stride % blocks
        assert sorted(order) == list(range(blocks))
        if blocks >= 10:
            assert blocks / 4 < abs(int(order[1]) - int(order[0])) < 3 * blocks / 4


def test_the_rule_takes_balanced_segments_for_whole_warps_unless_another_order_is_asked_for():
    """Without overrides whole-warp groups run on segments of equal predicted work, in order, in
    either launch mode; groups sharing a warp, a block order other than in order, or A's rows
    shuffled, run on segments of equal entries."""
    rng = np.random.default_rng(0)
    lengths = np.concatenate([np.full(40, 60), np.full(600, 4)])  # hubs first
    rows = np.repeat(np.arange(lengths.size), lengths)
    A = sp.csr_matrix((rng.standard_normal(rows.size), (rows, rng.integers(0, 640, rows.size))), shape=(640, 640))

    def plan(single=None, lanes=None, **options):
        dev = CSR.from_scipy(A, dtype=np.float32)
        B, C = cuda.device_array((640, 128), np.float32), cuda.device_array((640, 128), np.float32)
        return hp._spmm_plan(dev, 0, 128, B, C, 4, lanes, None, None, single, **options)

    for single in (None, True, False):
        taken = plan(single=single)
        assert taken.balanced and taken.block_order == "in_order" and not taken.shuffled and taken.order_stride == 1
    assert plan(block_order="in_order").balanced
    assert not plan(balanced=False).balanced
    assert not plan(single=False, block_order="reversed").balanced
    assert not plan(single=True, shuffled=True).balanced
    assert not plan(lanes=8).balanced  # groups sharing a warp
    assert hp.balances(32, 4, "<f4", True) and hp.balances(32, 8, "bf16", True) and hp.balances(32, 8, "<f4", False)
    assert not hp.balances(32, 8, "<f4", True) and not hp.balances(16, 4, "<f4", False)


def test_blocks_take_the_order_of_least_predicted_time(monkeypatch):
    """Segments of equal entries (groups of 8 lanes): a graph whose ids put its long rows first
    runs its blocks reversed in the filled launch (the blocks of short rows, which cost more, first); the same rows by increasing length or
    shuffled keep their order, and with every block resident at once (slots far beyond the grid)
    every order takes as long.  Of the other orders
    the single launch takes only the scattered one, only on long rows that span few blocks and
    with a tile of B within a third of L2, which the filled launch needs only to scatter."""
    monkeypatch.setattr(hp, "full_wave", lambda registers_per_thread=64: 32)
    monkeypatch.setattr(device, "memory_system", lambda: (1 << 20, 3.35e12))
    rng = np.random.default_rng(0)
    lengths = np.concatenate([np.full(40, 60), np.full(600, 4)])  # hubs first: 75 blocks of 64 entries
    def matrix(order):
        rows = np.repeat(np.arange(lengths.size), lengths[order])
        cols = rng.integers(0, lengths.size, rows.size)
        return sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(lengths.size,) * 2)
    def plan(A, n=32, single=False):
        dev = CSR.from_scipy(A, dtype=np.float32)
        B, C = cuda.device_array((A.shape[1], n), np.float32), cuda.device_array((A.shape[0], n), np.float32)
        return hp._spmm_plan(dev, 0, n, B, C, 4, None, None, None, single)
    hubs_first = matrix(np.arange(lengths.size))
    assert plan(hubs_first).block_order == "reversed"
    assert plan(hubs_first).order_stride == plan(hubs_first).grid[0] - 1
    assert plan(matrix(np.arange(lengths.size)[::-1])).block_order == "in_order"  # hubs last
    assert plan(matrix(rng.permutation(lengths.size))).block_order == "in_order"
    assert plan(hubs_first, single=True).block_order == "in_order"  # short rows (mean 7.5)
    monkeypatch.setattr(hp, "full_wave", lambda registers_per_thread=64: 10 ** 6)
    assert plan(hubs_first).block_order == "in_order"
    monkeypatch.setattr(hp, "full_wave", lambda registers_per_thread=64: 32)
    times = {"in_order": 2.0, "reversed": 1.0, "scattered": 1.5}  # (the rule's logic, not the model)
    monkeypatch.setattr(hp, "predicted_time", lambda A, block_nnz, order, mixed=False: times[order])
    monkeypatch.setattr(hp, "SINGLE_MAX_MEAN_ROW", 5)  # the same rows as long ones: the single launch scatters
    assert plan(hubs_first, single=True).block_order == "scattered"
    span_cap = hp.SCATTER_MAX_SPAN
    monkeypatch.setattr(hp, "SCATTER_MAX_SPAN", 0)  # rows crossing blocks: a scattered look-back at the end
    assert plan(hubs_first, single=True).block_order == "in_order"
    monkeypatch.setattr(hp, "SCATTER_MAX_SPAN", span_cap)
    times["reversed"] = 3.0
    assert plan(hubs_first).block_order == "scattered"
    monkeypatch.setattr(device, "memory_system", lambda: (200 << 10, 3.35e12))  # one tile of B, 640 rows
    assert plan(hubs_first, single=True).block_order == "in_order"  # x 128 bytes: past a third of L2
    assert plan(hubs_first).block_order == "in_order"
    times["reversed"] = 1.0
    assert plan(hubs_first).block_order == "reversed"  # (neighbours stay neighbours)
    times["reversed"] = 1.95  # within ORDER_MIN_GAIN of A's order
    assert plan(hubs_first).block_order == "in_order"


def test_an_unknown_block_order_is_refused_even_without_entries():
    B, C = cuda.device_array((30, 8), np.float32), cuda.device_array((30, 8), np.float32)
    for density in (0.2, 0.0):
        A = CSR.from_scipy(sp.random(30, 30, density=density, format="csr", random_state=1, dtype=np.float32))
        for order in ("backwards", ["in_order"]):
            with pytest.raises(ValueError, match="block_order"):
                hp.spmm_hp(A, B, C, "sum", block_order=order)


def test_single_launch_rule_takes_short_rows_short_spans_and_few_empty_rows_per_group():
    short, span = hp.SINGLE_MAX_MEAN_ROW - 1, hp.MAX_SINGLE_LAUNCH_SPAN
    assert hp.single_launch(short, span, hp.MAX_ZEROED_ROWS)
    assert not hp.single_launch(short, span, hp.MAX_ZEROED_ROWS + 1)
    assert not hp.single_launch(short, span + 1, 0)  # the last block would wait on too many
    assert not hp.single_launch(hp.SINGLE_MAX_MEAN_ROW, 0, 0)  # long rows: fill + kernel
    assert hp.single_launch(16.8, 9, 0) and not hp.single_launch(21.1, 2, 0)  # cnr-2000, ca-AstroPh


def test_wide_tiles_rule_takes_short_rows_on_a_full_gpu_with_b_in_l2(monkeypatch):
    monkeypatch.setattr(device, "device_limits", lambda: (132, 2048, 65536))
    monkeypatch.setattr(device, "memory_system", lambda: (50 << 20, 3.35e12))
    full = hp.GROUP_COST * hp.full_wave() * hp.WARPS_PER_BLOCK // 2  # fills the GPU in two tiles
    rows, b_in_l2 = full // 10, 40 << 20  # rows of 10
    assert hp.wide_tiles(full, rows, b_in_l2)
    assert not hp.wide_tiles(full // 2, rows // 2, b_in_l2)  # the two tiles run side by side
    assert not hp.wide_tiles(full, full // hp.WIDE_TILE_MAX_MEAN_ROW, b_in_l2)  # longer rows
    assert not hp.wide_tiles(full, rows, 60 << 20)  # B would not fit in L2
    # email-enron and Flickr at N = 256 (B of 36 and 87 MiB)
    assert hp.wide_tiles(367662, 36692, 36692 * 1024) and not hp.wide_tiles(899756, 89250, 89250 * 1024)


def test_only_two_float32_tiles_of_one_16_byte_vector_a_lane_may_widen():
    assert all(hp.can_widen(32, 4, 1, n, "<f4") for n in (160, 192, 256))
    assert not hp.can_widen(32, 2, 1, 70, "<f4") and not hp.can_widen(32, 1, 1, 33, "<f4")  # narrower: not timed
    assert not hp.can_widen(32, 4, 1, 128, "<f4")  # one tile already
    assert not hp.can_widen(32, 4, 1, 512, "<f4")  # four tiles: mixed (0.90-1.17x)
    assert not hp.can_widen(32, 8, 1, 512, "<f4")  # 16 values a lane
    assert not hp.can_widen(16, 4, 2, 256, "<f4")  # narrow groups take two vectors already
    assert not hp.can_widen(32, 2, 1, 128, "<f8")  # float64: not measured


def test_float32_products_take_wide_tiles_where_the_rule_holds(monkeypatch):
    monkeypatch.setattr(hp, "full_wave", lambda registers_per_thread=64: 1)  # any graph fills this GPU
    rng = np.random.default_rng(3)
    A = sp.random(40, 30, density=0.1, format="csr", random_state=4, dtype=np.float32)  # rows of 3
    A.data = rng.standard_normal(A.nnz).astype(np.float32)
    dev = CSR.from_scipy(A)
    B = rng.standard_normal((30, 256)).astype(np.float32)
    Bd = cuda.to_device(B)
    assert hp.spmm_layout(dev, 256, 4, Bd) == (32, 4, 2, 1)  # one tile of 8 columns a lane
    assert hp.spmm_layout(dev, 256, 4, Bd, lanes=32)[:3] == (32, 4, 1)  # forced lanes: no rule
    assert hp.spmm_layout(dev, 128, 4, Bd)[:3] == (32, 4, 1)  # one tile already
    assert hp.spmm_layout(dev, 70, 4, cuda.to_device(B[:, :70].copy()))[:3] == (32, 2, 1)  # 8-byte vectors
    with pytest.raises(TypeError):
        hp.spmm_layout(dev, 256, 4, Bd, 16)  # lanes only by name
    dev64 = CSR.from_scipy(A.astype(np.float64))
    assert hp.spmm_layout(dev64, 256, 8, cuda.to_device(B.astype(np.float64)))[2] == 1  # float32 only
    for reduce in ("sum", "mean", "min"):
        C = cuda.to_device(np.full((40, 256), np.nan, np.float32))  # poisoned
        hp.spmm_hp(dev, Bd, C, reduce)
        assert_close(C.copy_to_host(), spmm_reference(A, B, reduce), np.float32)
    plans = [v for v in dev.cache.sections["plans"].values() if isinstance(v, hp.HPPlan)]
    assert [plan.grid[1] for plan in plans] == [1, 1, 1]  # one column tile each


def test_plan_is_kept_in_the_matrix_cache_and_cleared():
    rng = np.random.default_rng()
    A = sp.random(30, 20, density=0.2, format="csr", random_state=1, dtype=np.float32)
    dev = CSR.from_scipy(A)
    B = cuda.to_device(random_dense(rng, (20, 8), np.float32))
    C = cuda.device_array((30, 8), np.float32)
    hp.spmm_hp(dev, B, C, "sum")
    assert any(isinstance(v, hp.HPPlan) for v in dev.cache.sections["plans"].values())
    dev.clear_cache()
    assert dev.cache.sizes() == {"plans": 0, "scratch": 0, "bound": 0, "replays": 0}
    hp.spmm_hp(dev, B, C, "sum")  # rebuilt
    assert_close(C.copy_to_host(), spmm_reference(A, B.copy_to_host(), "sum"), np.float32)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("single", [False, True])
def test_nan_wins_in_rows_split_across_groups_and_blocks(reduce, single):
    """A NaN product in any piece of a split row (merged in the block, combined atomically or
    through the look-back) makes the row's result NaN."""
    rng = np.random.default_rng()
    dense = np.zeros((5, 30))
    dense[1] = rng.standard_normal(30)       # split into 15 two-entry groups, several blocks
    dense[3, :7] = rng.standard_normal(7)
    A = sp.csr_matrix(dense)
    B = random_dense(rng, (30, 8), np.float32)
    B[21, 2] = np.nan                         # late in row 1
    B[2, 5] = np.nan                          # early in rows 1 and 3
    C = run_hp(A, B, reduce, nnz_per_group=2, lanes=4, single=single)
    expected = spmm_reference(A, B, reduce)
    assert np.array_equal(np.isnan(C), np.isnan(expected)) and np.isnan(expected).sum() == 3
    assert_close(np.nan_to_num(C), np.nan_to_num(expected), np.float32)


def test_spmm_dtp_shrinks_the_window_of_an_ordered_graph_to_fit_l2(monkeypatch):
    """A band (entries a few groups' rows from the diagonal) past a small L2 gets smaller
    groups, at most WINDOW_HALVINGS halvings; its shuffled copy (no order to keep) and a
    tridiagonal one (reuse inside a group's own rows) keep the DTP's count."""
    monkeypatch.setattr(device, "device_limits", lambda: (132, 2048, 65536))
    monkeypatch.setattr(device, "memory_system", lambda: (1 << 20, 3.35e12))
    n, half_band = 200_000, 40
    band = sp.diags([1.0] * (2 * half_band + 1), list(range(-half_band, half_band + 1)), shape=(n, n), format="csr")
    shuffled = sp.csr_matrix(band[np.random.default_rng(0).permutation(n)])
    tridiagonal = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(n, n), format="csr")
    tile_bytes = 128 * 4
    for A, capped in ((band, True), (shuffled, False), (tridiagonal, False)):
        dev = CSR.from_scipy(A.astype(np.float32))
        p = 512
        got = hp.window_nnz_per_group(dev, p, 1, tile_bytes)
        assert got == (p >> hp.WINDOW_HALVINGS if capped else p)
    wide = sp.csr_matrix(sp.hstack([band, band]))  # rows and columns of different things: no node order
    assert hp.window_nnz_per_group(CSR.from_scipy(wide.astype(np.float32)), 512, 1, tile_bytes) == 512
    dev = CSR.from_scipy(band.astype(np.float32))
    monkeypatch.setattr(device, "memory_system", lambda: (110 << 20, 3.35e12))  # B's tile fits in L2: unchanged
    assert hp.window_nnz_per_group(dev, 512, 4, tile_bytes) == 512  # (a window of 55 MB, over a third of L2)
    monkeypatch.setattr(device, "memory_system", lambda: (1 << 40, 3.35e12))  # the window fits: unchanged
    assert hp.window_nnz_per_group(dev, 512, 1, tile_bytes) == 512


def test_sddmm_dtp_shrinks_the_window_of_an_ordered_graph_to_fit_l2(monkeypatch):
    """HP-SDDMM's nonzeros per warp are halved as HP-SpMM's groups are, at most
    SDDMM_WINDOW_HALVINGS times and never below two steps of the warp's lane groups; a shuffled
    copy of the graph keeps the DTP's count."""
    monkeypatch.setattr(device, "device_limits", lambda: (132, 2048, 65536))
    monkeypatch.setattr(device, "memory_system", lambda: (1 << 20, 3.35e12))
    n, half_band = 200_000, 40
    band = sp.diags([1.0] * (2 * half_band + 1), list(range(-half_band, half_band + 1)), shape=(n, n), format="csr")
    shuffled = sp.csr_matrix(band[np.random.default_rng(0).permutation(n)])
    row_bytes = 2 * 64 * 4  # a row of X and one of Y, K = 64
    for A, capped in ((band, True), (shuffled, False)):
        dev = CSR.from_scipy(A.astype(np.float32))
        assert hp.sddmm_window_nnz_per_warp(dev, 512, 8, row_bytes) == (512 >> hp.SDDMM_WINDOW_HALVINGS if capped
                                                                        else 512)
    dev = CSR.from_scipy(band.astype(np.float32))
    assert hp.sddmm_window_nnz_per_warp(dev, 64, 2, row_bytes) == 32  # (16 groups of 2 lanes: two steps)
    monkeypatch.setattr(device, "memory_system", lambda: (1 << 40, 3.35e12))  # the window fits: unchanged
    assert hp.sddmm_window_nnz_per_warp(dev, 512, 8, row_bytes) == 512


def test_spmm_hp_takes_per_call_values_in_place_of_as():
    """``values`` replace A's for one call (the unfused SDDMM -> SpMM's scores); A's own values
    are untouched, and values of another length are refused by name."""
    rng = np.random.default_rng(3)
    graph = sp.random(9, 7, density=0.4, format="csr", random_state=4, dtype=np.float32)
    dev = CSR.from_scipy(graph)
    B = random_dense(rng, (7, 5), np.float32)
    scores = random_dense(rng, graph.nnz, np.float32)
    C = cuda.to_device(np.full((9, 5), np.nan, np.float32))
    hp.spmm_hp(dev, cuda.to_device(B), C, "sum", values=cuda.to_device(scores))
    other = sp.csr_matrix((scores.astype(np.float64), graph.indices, graph.indptr), shape=graph.shape)
    assert_close(C.copy_to_host(), spmm_reference(other, B.astype(np.float64), "sum"), np.float32)
    assert np.array_equal(dev.data.copy_to_host(), graph.data)
    with pytest.raises(ValueError, match="values must be"):
        hp.spmm_hp(dev, cuda.to_device(B), C, "sum", values=cuda.to_device(scores[:-1]))


def test_per_call_values_bind_as_a_variable_argument_under_their_own_key(monkeypatch):
    """The launch with ``values`` passes them per call (arguments 2, 4, 5: values, B, C) under a
    key apart from the launch on A's own values (2 fixed), so neither replays the other's."""
    seen = []
    monkeypatch.setattr(launch, "run_bound", lambda cache, key, kernel, grid, block, stream, args, variable:
                        seen.append((key, args, variable)))
    graph = sp.random(9, 7, density=0.4, format="csr", random_state=4, dtype=np.float32)
    dev = CSR.from_scipy(graph)
    B = cuda.to_device(np.ones((7, 5), np.float32))
    C = cuda.device_array((9, 5), np.float32)
    scores = cuda.to_device(np.ones(graph.nnz, np.float32))
    hp.spmm_hp(dev, B, C, "sum")
    hp.spmm_hp(dev, B, C, "sum", values=scores)
    (own_key, own_args, own_variable), (key, args, variable) = seen
    assert own_variable == (4, 5) and own_args[2] is dev.data
    assert variable == (2, 4, 5) and args[2] is scores and key != own_key
