"""Column-slab tiled SpMM on the simulator (or a GPU): tiles, segments, column tiles, dtypes."""
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

import numbasparse as ns
from numbasparse import CSR, dispatch, graphs
from numbasparse.cuda import slab
from numbasparse.cuda.device import simulator_enabled
from numbasparse.preprocess.slab_tiles import SlabTiles, entries_per_segment
from numbasparse.reference import spmm_reference
from strategies import assert_close, random_dense


@pytest.fixture(autouse=True)
def few_warps(monkeypatch):
    if simulator_enabled():  # the simulator runs a thread per thread
        monkeypatch.setattr(slab, "DEFAULT", replace(slab.DEFAULT, warps=2))


REDUCTIONS = ("sum", "mean", "max", "min")


def run_slab(A, B, reduce="sum", index_dtype=None, **tiling):
    dev = CSR.from_scipy(A, dtype=B.dtype, index_dtype=index_dtype)
    C = cuda.to_device(np.full((A.shape[0], B.shape[1]), np.nan, B.dtype))  # poisoned
    slab.spmm_slab(dev, cuda.to_device(B), C, reduce, **tiling)
    return C.copy_to_host()


def random_graph(rng, shape, lengths):
    dense = np.zeros(shape)
    for i, n in enumerate(lengths):
        dense[i, rng.choice(shape[1], n, replace=False)] = rng.standard_normal(n)
    return sp.csr_matrix(dense)


# every reduction, each flush: N=70 -> 32 lanes x 2 (two column tiles, the last partial), 33 -> 32 x 1,
# 136 -> 32 x 4 (two tiles); lane groups: 96 -> two groups of 16 x 4 (the second column tile half
# used), 32 -> four of 8 x 4, 8 -> four of 8 x 1; float32 sum/mean flush with vector reductions, max/min
# and vec 1 through the shared-memory transpose.  The simulator's shuffles cost ~10-40 s per case here.
@pytest.mark.parametrize("n_cols,reduce", [(70, "sum"), (70, "max"), (33, "min"), (8, "mean"), (136, "sum"),
                                           (96, "max"), (96, "sum"), (32, "mean")])
def test_slab_matches_reference_over_tiles_and_column_tiles(n_cols, reduce, monkeypatch):
    config = replace(slab.DEFAULT, max_segment=3)  # long row pieces cut in three-entry segments
    rng = np.random.default_rng()
    A = random_graph(rng, (14, 37), [0, 30, 5, 1, 0, 37, 12, 2, 9, 0, 20, 3, 7, 18])
    B = random_dense(rng, (37, n_cols), np.float32)
    C = run_slab(A, B, reduce, slab_width=8, tile_nnz=10, config=config)  # 5 slabs, 1-4 windows each
    assert np.all(C[[0, 4, 9]] == 0)
    assert_close(C, spmm_reference(A, B, reduce), np.float32)


@pytest.mark.parametrize("n_cols,reduce", [(136, "sum"), (70, "mean")])  # vec 4, 2
def test_slab_transposed_flush_matches_reference(n_cols, reduce, monkeypatch):
    config = replace(slab.DEFAULT, vector_red=False, max_segment=3)  # float32 sums: atomics after a transpose
    rng = np.random.default_rng()
    A = random_graph(rng, (10, 30), [0, 30, 5, 1, 0, 12, 2, 9, 20, 3])
    B = random_dense(rng, (30, n_cols), np.float32)
    C = run_slab(A, B, reduce, slab_width=8, tile_nnz=8, config=config)
    assert np.all(C[[0, 4]] == 0)
    assert_close(C, spmm_reference(A, B, reduce), np.float32)


def test_lane_layout_splits_warps_into_groups_before_narrowing_vectors():
    assert slab.lane_layout(256, 4) == (32, 4, 4) and slab.lane_layout(128, 4) == (32, 4, 4)
    assert slab.lane_layout(64, 4) == (16, 4, 4)   # two segments a warp
    assert slab.lane_layout(32, 4) == (8, 4, 4)    # four, MIN_LANES
    assert slab.lane_layout(16, 4) == (8, 2, 4)    # then the vectors narrow
    assert slab.lane_layout(64, 8) == (32, 2, 2)   # float64: 16-byte vectors of 2, depth of 32 bytes
    assert slab.lane_layout(32, 8) == (32, 1, 4)   # and no lane groups
    assert slab.lane_layout(70, 4) == (32, 2, 4)   # N = 70 takes vectors of 2 only
    assert slab.lane_layout(64, 4, config=replace(slab.DEFAULT, lane_groups=False)) == (32, 2, 4)


class _Aligned:
    """A stand-in for a device array at ``address`` (only its alignment and dtype are read)."""

    def __init__(self, dtype, address):
        self.dtype, self.ptr = np.dtype(dtype), address


def test_lane_layout_of_16_bit_operands_is_float32s_and_takes_c_alignment_in_its_own_bytes():
    for n in (256, 128, 64, 32, 16):  # 4 columns a lane at most (8 bytes), as many as float32
        assert slab.lane_layout(n, 2) == slab.lane_layout(n, 4)
    B = _Aligned(np.uint16, 256)
    assert slab.lane_layout(128, 2, B, _Aligned(np.float32, 512)) == (32, 4, 4)
    assert slab.lane_layout(128, 2, B, _Aligned(np.float32, 8)) == (32, 2, 4)  # a float32 C aligned to 8 bytes


HALVES = {"float16": (np.float16, 2.0**-11), "bfloat16": (ml_dtypes.bfloat16, 2.0**-8)}


@pytest.mark.parametrize("name,n_cols,reductions_,index_dtype", [
    ("bfloat16", 64, ("max", "sum", "max"), np.int64), ("float16", 24, ("min", "mean", "min"), np.int32)])
def test_16_bit_operands_are_computed_in_float32_rounded_once_and_leave_the_workspace_filled(
        name, n_cols, reductions_, index_dtype):
    """Each call on one matrix, fresh B: the workspace the last call of a reduction rounded from
    was filled again for its next call (max and min: their identity; sum and mean share zeros)
    (N = 64: groups of 16 lanes x 4 columns; N = 24: 8 x 2, two column tiles)."""
    dtype, u = HALVES[name]
    rng = np.random.default_rng()
    A = random_graph(rng, (14, 37), [0, 30, 5, 1, 0, 37, 12, 2, 9, 0, 20, 3, 7, 18])
    dev = CSR.from_scipy(A, dtype=name, index_dtype=index_dtype)
    exact = A.copy()
    exact.data = exact.data.astype(dtype).astype(np.float64)  # the values the kernel multiplies
    config = replace(slab.DEFAULT, max_segment=3)
    for reduce in reductions_:
        B = random_dense(rng, (37, n_cols), np.float32).astype(dtype)
        C = cuda.to_device(np.full((14, n_cols), 0x7FFF, np.uint16))  # poisoned: NaN bits
        slab.spmm_slab(dev, cuda.to_device(B.view(np.uint16)), C, reduce, slab_width=8, tile_nnz=10, config=config)
        C = C.copy_to_host().view(dtype).astype(np.float64)
        reference = spmm_reference(exact, B.astype(np.float64), reduce)
        assert np.all(C[[0, 4, 9]] == 0)
        assert np.linalg.norm(C - reference) <= u * np.linalg.norm(reference), reduce


def test_a_call_that_fails_between_its_two_launches_leaves_the_workspace_filled(monkeypatch):
    """The rounding pass's launch raises once: the workspace holds that call's sums, so it is
    filled again, and the next call on the matrix is right."""
    from numbasparse.cuda import launch

    rng = np.random.default_rng()
    A = random_graph(rng, (10, 30), [0, 30, 5, 1, 0, 12, 2, 9, 20, 3])
    dev = CSR.from_scipy(A, dtype="bfloat16")
    exact = A.copy()
    exact.data = exact.data.astype(ml_dtypes.bfloat16).astype(np.float64)
    run_bound = launch.run_bound

    def failing(cache, key, *args):
        if key[0] == "round":
            monkeypatch.setattr(launch, "run_bound", run_bound)
            raise RuntimeError("injected")
        return run_bound(cache, key, *args)

    monkeypatch.setattr(launch, "run_bound", failing)
    for attempt in range(2):
        B = random_dense(rng, (30, 16), np.float32).astype(ml_dtypes.bfloat16)
        C = cuda.to_device(np.full((10, 16), 0x7FFF, np.uint16))
        if attempt == 0:
            with pytest.raises(RuntimeError, match="injected"):
                slab.spmm_slab(dev, cuda.to_device(B.view(np.uint16)), C, "sum")
            continue
        slab.spmm_slab(dev, cuda.to_device(B.view(np.uint16)), C, "sum")
        C = C.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64)
        reference = spmm_reference(exact, B.astype(np.float64), "sum")
        assert np.linalg.norm(C - reference) <= 2.0**-8 * np.linalg.norm(reference)


def test_16_bit_operands_into_a_float32_out_are_not_rounded():
    rng = np.random.default_rng()
    A = random_graph(rng, (10, 30), [0, 30, 5, 1, 0, 12, 2, 9, 20, 3])
    B = random_dense(rng, (30, 32), np.float32).astype(ml_dtypes.bfloat16)
    out = np.full((10, 32), np.nan, np.float32)
    ns.spmm(A, B, algorithm="slab", out=out)
    exact = A.copy()
    exact.data = exact.data.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert_close(out, spmm_reference(exact, B.astype(np.float64), "sum"), np.float32)


@pytest.mark.parametrize("n_cols,reduce", [(32, "sum"), (64, "max")])
def test_lane_groups_run_segments_of_different_lengths_in_step(n_cols, reduce):
    """Segments of up to 20 entries in groups of 8 or 16 lanes: a group takes one to three chunks
    while the others of its warp finish theirs, and a batch's last round leaves groups idle."""
    config = replace(slab.DEFAULT, max_segment=20)
    rng = np.random.default_rng()
    A = random_graph(rng, (11, 40), [40, 1, 0, 17, 33, 2, 9, 0, 25, 40, 5])
    B = random_dense(rng, (40, n_cols), np.float32)
    C = run_slab(A, B, reduce, slab_width=40, tile_nnz=1000, config=config)
    assert_close(C, spmm_reference(A, B, reduce), np.float32)


def test_a_lane_group_past_its_segment_leaves_the_row_it_loads_out():
    """Groups past their segment's last entry load B's row 0 (their lanes' pairs are (0, 0)); it
    must not reach C: an infinite row 0, never a column of A, gives no inf or nan."""
    rng = np.random.default_rng()
    A = random_graph(rng, (8, 30), [12, 1, 7, 0, 3, 12, 2, 5])
    A = sp.csr_matrix(A[:, 1:])  # column 0 of B below is never read by A
    A = sp.csr_matrix(sp.hstack([sp.csr_matrix((8, 1)), A]))
    B = random_dense(rng, (30, 32), np.float32)
    B[0] = np.inf
    for reduce in ("sum", "max"):
        C = run_slab(A, B, reduce, slab_width=30, tile_nnz=1000, config=replace(slab.DEFAULT, max_segment=12))
        assert np.isfinite(C).all()
        assert_close(C, spmm_reference(A, B, reduce), np.float32)


@pytest.mark.parametrize("dtype,index_dtype", [(np.float64, np.int64), (np.float32, np.int32)])
def test_slab_default_tiling_non_square_and_dtypes(dtype, index_dtype):
    rng = np.random.default_rng()
    A = random_graph(rng, (9, 50), [3, 50, 0, 17, 8, 1, 25, 0, 40])
    B = random_dense(rng, (50, 12), dtype)
    for reduce in ("sum", "max"):
        assert_close(run_slab(A, B, reduce, index_dtype), spmm_reference(A, B, reduce), dtype)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_slab_zero_nnz_gives_zeros(reduce):
    A = sp.csr_matrix((6, 5), dtype=np.float32)
    C = run_slab(A, random_dense(np.random.default_rng(), (5, 4), np.float32), reduce)
    assert np.all(C == 0)


def test_tiles_cover_every_entry_once_in_equal_tiles_and_balanced_warps():
    rng = np.random.default_rng()
    A = random_graph(rng, (20, 30), rng.integers(0, 30, 20))
    tiles = SlabTiles(A.indptr, A.indices, A.shape, slab_width=7, tile_nnz=9, max_segment=3, warps=2)
    assert np.all(tiles.seg_end - tiles.seg_start <= 3)
    covered = np.zeros(A.nnz, np.int64)
    for s, e in zip(tiles.seg_start, tiles.seg_end):
        covered[s:e] += 1
    assert np.all(covered == 1)
    sizes, windows = [], {}
    for b in range(tiles.n_tiles):  # a block's segments lie in one slab, in consecutive rows
        segments = range(tiles.tile_ptr[b], tiles.tile_ptr[b + 1])
        slabs = {int(A.indices[tiles.seg_start[s]]) // 7 for s in segments}
        assert len(slabs) <= 1
        for s in segments:
            assert np.all(A.indices[tiles.seg_start[s]:tiles.seg_end[s]] // 7 == next(iter(slabs)))
        rows = tiles.seg_row[tiles.tile_ptr[b]:tiles.tile_ptr[b + 1]]
        if slabs:
            windows.setdefault(slabs.pop(), []).append((rows.min(), rows.max()))
        warp_entries = [np.sum(tiles.seg_end[tiles.warp_ptr[w]:tiles.warp_ptr[w + 1]]
                               - tiles.seg_start[tiles.warp_ptr[w]:tiles.warp_ptr[w + 1]]) for w in (2 * b, 2 * b + 1)]
        assert abs(warp_entries[0] - warp_entries[1]) <= 3  # snake order: equal work per warp
        sizes.append(sum(warp_entries))
    assert sizes == sorted(sizes, reverse=True)  # largest tiles first
    assert max(sizes) <= 9 + 3 - 1  # a window closes at the segment that reaches tile_nnz
    for spans in windows.values():  # a slab's windows: disjoint ranges of rows (a row may be cut)
        spans.sort()
        assert all(hi <= lo for (_, hi), (lo, _) in zip(spans, spans[1:]))
    assert tiles.reuse(A.indptr, A.indices) >= 1.0


@pytest.mark.gpu
@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("n_cols", [33, 64, 128, 256])
def test_slab_on_sampled_subgraph_with_default_tiling(n_cols, reduce):
    A = graphs.sample_subgraphs(graphs.rmat(14), 1, min_nodes=3000, max_nodes=3000)[0]
    B = random_dense(np.random.default_rng(), (A.shape[1], n_cols), np.float32)
    assert_close(run_slab(A, B, reduce), spmm_reference(A, B, reduce), np.float32)


@pytest.mark.parametrize("max_segment", [4, 10**9])
@pytest.mark.parametrize("graph", ["uniform", "power-law", "empty rows"])
def test_counted_entries_per_segment_are_the_tilings(graph, max_segment):
    rng = np.random.default_rng(0)
    if graph == "uniform":
        A = sp.random(400, 600, density=0.05, format="csr", random_state=rng)
    elif graph == "power-law":
        A = graphs.rmat(9, 8)
    else:
        A = sp.random(300, 500, density=0.01, format="csr", random_state=rng)  # a third of the rows empty
    A.sort_indices()
    tiles = SlabTiles(A.indptr, A.indices, A.shape, slab_width=100, tile_nnz=1000, max_segment=max_segment, warps=32)
    assert entries_per_segment(A.indptr, A.indices, 100, max_segment) == pytest.approx(tiles.entries_per_segment)
    assert entries_per_segment(np.zeros(4, np.int64), np.zeros(0, np.int32), 100, max_segment) == 0.0


def test_auto_counts_segments_rather_than_assuming_spread_columns(monkeypatch):
    monkeypatch.setattr(dispatch, "memory_system", lambda: (1 << 40, 3e12))  # B well within L2 on any GPU
    # each row's 40 entries fall in one slab: 40 entries per segment (at most 32: max_segment)
    n_rows, n_cols = 64, 65536  # ~100 slabs of 640 columns at N = 64
    starts = np.arange(n_rows) * 61 % (n_cols - 40)
    indices = (starts[:, None] + np.arange(40)).ravel()
    A = sp.csr_matrix((np.ones(indices.size, np.float32), indices, np.arange(n_rows + 1) * 40), shape=(n_rows, n_cols))
    assert dispatch.slab_pays(CSR.from_scipy(A), 64, 4)
    shuffled = np.random.default_rng(0).permutation(n_cols)[indices]  # the same rows, columns renumbered
    spread = sp.csr_matrix((A.data, shuffled, A.indptr), shape=A.shape)
    spread.sort_indices()
    assert not dispatch.slab_pays(CSR.from_scipy(spread), 64, 4)


def test_auto_runs_the_slab_kernel_on_a_dense_graph():
    import numbasparse as ns

    rng = np.random.default_rng()
    A = random_graph(rng, (8, 40), rng.integers(20, 40, 8))  # ~30 entries per row and slab
    B = random_dense(rng, (40, 64), np.float32)
    dev = CSR.from_scipy(A, dtype=np.float32)
    assert dispatch.slab_pays(dev, 64, 4)
    C = ns.spmm(dev, cuda.to_device(B)).copy_to_host()
    assert any(key[0] == "spmm_slab" for key in dev.cache.sections["plans"])
    assert_close(C, spmm_reference(A, B), np.float32)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_nan_wins_in_segments_combined_atomically(reduce):
    config = replace(slab.DEFAULT, max_segment=3)
    rng = np.random.default_rng()
    A = random_graph(rng, (6, 20), [0, 20, 5, 0, 12, 3])
    B = random_dense(rng, (20, 8), np.float32)
    B[A.indices[A.indptr[1] + 17], 1] = np.nan    # a late segment of row 1
    C = run_slab(A, B, reduce, slab_width=8, tile_nnz=6, config=config)
    expected = spmm_reference(A, B, reduce)
    assert np.array_equal(np.isnan(C), np.isnan(expected)) and np.isnan(expected).any()
    assert_close(np.nan_to_num(C), np.nan_to_num(expected), np.float32)


@pytest.mark.parametrize("width", [1, 7, 100])
def test_the_gpu_count_of_segments_is_the_hosts(width):
    rng = np.random.default_rng(width)
    A = sp.random(60, 300, density=0.05, format="csr", random_state=rng)
    A = sp.csr_matrix(A.multiply(np.arange(60)[:, None] % 7 != 3))  # some empty rows
    A.sort_indices()
    dev = CSR.from_scipy(A.astype(np.float32))
    assert slab.entries_per_segment_on_device(dev, width) == pytest.approx(
        entries_per_segment(A.indptr, A.indices, width))


def test_auto_reads_the_pattern_of_a_scipy_operand_too():
    dense = sp.csr_matrix(np.random.default_rng(0).random((48, 48)).astype(np.float32))
    assert dispatch.slab_pays(dense, 64, 4) and dispatch.slab_pays(CSR.from_scipy(dense), 64, 4)
    assert dispatch.resolve("spmm", "auto", "cuda", False, 64, "sum", 4, dense).name == "slab"


def an_h100(monkeypatch):
    """The rule as on an H100: 132 SMs (the simulator has one) and B well within L2."""
    monkeypatch.setattr(dispatch, "memory_system", lambda: (1 << 40, 3e12))
    monkeypatch.setattr(dispatch, "device_limits", lambda: (132, 2048, 65536))


def test_auto_takes_the_slab_kernel_from_four_entries_per_segment_on_long_rows(monkeypatch):
    an_h100(monkeypatch)
    A = sp.random(64, 4096, density=0.05, format="csr", random_state=0, dtype=np.float32)
    for counted, pays in ((4.29, True), (4.0, True), (3.75, False)):  # tolokers N = 128; fb100 N = 64
        monkeypatch.setattr(dispatch, "entries_per_segment", lambda *args, counted=counted: counted)
        assert dispatch.slab_pays(A, 64, 4) == pays


def test_auto_takes_the_slab_kernel_sooner_on_short_rows(monkeypatch):
    """HP is latency-bound on short rows: from 3.5 entries per segment there, 4 on long rows."""
    an_h100(monkeypatch)
    short = sp.random(64, 4096, density=0.003, format="csr", random_state=0, dtype=np.float32)  # rows of ~12
    long = sp.random(64, 4096, density=0.05, format="csr", random_state=0, dtype=np.float32)   # rows of ~200
    # (entries per segment counted, slab?): at and above the short rows' threshold (wiki-vote directed
    # N = 128 counts 3.62), below it (email-enron N = 64: 2.94); long rows still need 4
    cases = ((short, 3.5, True), (short, 3.62, True), (short, 3.4, False), (short, 2.94, False),
             (long, 3.62, False), (long, 4.0, True))
    for A, counted, pays in cases:
        monkeypatch.setattr(dispatch, "entries_per_segment", lambda *args, counted=counted: counted)
        monkeypatch.setattr(slab, "entries_per_segment_on_device", lambda *args, counted=counted: counted)
        for matrix in (A, CSR.from_scipy(A)):  # counted on the host, or on the GPU for a device CSR
            assert dispatch.slab_pays(matrix, 64, 4) == pays, (type(matrix).__name__, A.nnz / A.shape[0], counted)


def test_auto_takes_the_slab_kernel_at_n_32_except_on_short_rows(monkeypatch):
    """Lane groups make the slab kernel pay at N = 32 too, but not against HP's single launch on
    short rows (one GPU operation against a fill and the kernel); below 32 columns, HP."""
    an_h100(monkeypatch)
    short = sp.random(64, 4096, density=0.003, format="csr", random_state=0, dtype=np.float32)  # rows of ~12
    long = sp.random(64, 4096, density=0.05, format="csr", random_state=0, dtype=np.float32)   # rows of ~200
    monkeypatch.setattr(dispatch, "entries_per_segment", lambda *args: 6.63)  # wiki-vote directed, N = 32
    assert not dispatch.slab_pays(short, 32, 4) and dispatch.slab_pays(short, 64, 4)
    assert dispatch.slab_pays(long, 32, 4) and not dispatch.slab_pays(long, 16, 4)


def test_the_slab_kernel_is_vetoed_where_its_segments_cannot_keep_up_with_hps_gathers(monkeypatch):
    """The measured cases (H200, 132 SMs, float32, kernel time): segments x SLAB_SEGMENT_NS an SM
    against HP's gathers; the veto keeps the thresholds' winners and refuses the rows of 300."""
    monkeypatch.setattr(dispatch, "device_limits", lambda: (132, 2048, 65536))
    # (entries, segments over all column tiles, about as the kernel cuts them, N, slab faster?):
    # the rows of 300 by degree, slab 1061 us against HP's 517
    assert not dispatch.slab_keeps_up_with_hp(18_173_466, 4_376_321, 64, 4)
    cases = ((1_038_000, 157_273, 64, True),   # tolokers N = 64: slab 36.8 us, HP 40.8
             (1_038_000, 487_324, 256, True),  # tolokers N = 256, two column tiles: 108.7 against 114.7
             (103_689, 28_883, 128, True),     # wiki-vote directed N = 128: 13.2 against 18.0
             (62_742, 7_698, 64, True))        # chameleon N = 64: 6.1 against 9.9
    for nnz, segments, n, faster in cases:
        assert dispatch.slab_keeps_up_with_hp(nnz, segments, n, 4) == faster
    # float64 gathers twice the bytes, so HP's predicted time doubles and the veto relents (the
    # model's extrapolation: float64 segments were not timed)
    assert dispatch.slab_keeps_up_with_hp(18_173_466, 4_376_321, 64, 8)


def test_auto_asks_the_veto_with_the_segments_of_every_column_tile(monkeypatch):
    an_h100(monkeypatch)
    A = sp.random(64, 4096, density=0.05, format="csr", random_state=0, dtype=np.float32)
    monkeypatch.setattr(dispatch, "entries_per_segment", lambda *args: 5.0)
    asked = []

    def veto(nnz, segments, n_cols, itemsize):
        asked.append((nnz, segments, n_cols, itemsize))
        return False

    monkeypatch.setattr(dispatch, "slab_keeps_up_with_hp", veto)
    assert not dispatch.slab_pays(A, 256, 4)  # (5 entries per segment would take the slab kernel)
    assert asked == [(A.nnz, pytest.approx(A.nnz / 5.0 * 2), 256, 4)]  # two column tiles of 128


def test_the_balanced_tiling_is_worked_out_once_per_width(monkeypatch):
    counted = []
    balanced = slab.balanced_tiling
    monkeypatch.setattr(slab, "balanced_tiling",
                        lambda *args, **kwargs: counted.append(1) or balanced(*args, **kwargs))
    rng = np.random.default_rng()
    A = random_graph(rng, (6, 20), [3, 0, 5, 1, 7, 2])
    B = random_dense(rng, (20, 8), np.float32)
    dev = CSR.from_scipy(A, dtype=np.float32)
    for reduce in ("sum", "max"):  # two plans, one pass over the pattern
        C = cuda.to_device(np.full((6, 8), np.nan, np.float32))
        slab.spmm_slab(dev, cuda.to_device(B), C, reduce)
        assert_close(C.copy_to_host(), spmm_reference(A, B, reduce), np.float32)
    assert len(counted) == 1
