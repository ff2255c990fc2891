"""The autotuner: the schedule space over every kernel family, G-Sparse's cost model for the tiled
family, the timing loop, and the in-memory and on-disk caches."""
import dataclasses
import json

import numpy as np
import pytest
import scipy.sparse as sp

from numbasparse.cuda.tiled import Schedule
from numbasparse.select import cost, tuner
from strategies import assert_close

H100 = tuner.Device("H100", 132)


def test_ranking_covers_the_valid_space():
    lengths = np.random.default_rng(0).integers(0, 50, 1000)
    ranked = tuner.rank(lengths, 64, H100)
    assert len(ranked) == len(set(ranked)) and all(s.valid() for s in ranked)


def test_cost_grows_with_work_and_balance_helps_a_skewed_block():
    s = Schedule(8, 32, 1, 32, False)
    light, heavy = np.full(4096, 8), np.full(4096, 64)
    assert tuner.predicted_cost(s, heavy, 32, H100) > tuner.predicted_cost(s, light, 32, H100)
    skewed = np.tile([1000] + [1] * 7, 4096)  # one long row in every block of 8
    balanced = Schedule(8, 32, 1, 32, True)
    assert tuner.predicted_cost(balanced, skewed, 32, H100) < tuner.predicted_cost(s, skewed, 32, H100)


def test_tune_times_the_top_k_and_keeps_the_fastest():
    ranked = [tuner.Candidate.of("hp", nnz_per_group=g) for g in (4, 8, 16, 32, 64, 128)]
    times = dict(zip(ranked, (2.0, 3.0, 0.5, 5.0, 6.0, 7.0)))  # the third candidate is fastest
    timed = []

    def time_candidate(c):
        timed.append(c)
        return times[c]

    best, record = tuner.tune(ranked, time_candidate, top_k=5)
    assert timed[:5] == ranked[:5] and best == ranked[2] and record["best_ms"] == 0.5 and record["timed"] == 5
    assert record["first_ms"] == 2.0 and record["times"][str(ranked[2])] == 0.5
    again = timed[5:]  # the winner against the rules' pick, each first in every other round
    pair = (ranked[0], ranked[2])
    assert again == [c for r in range(tuner.CONFIRM_ROUNDS) for c in (pair if r % 2 == 0 else pair[::-1])]
    assert record["confirmed"] is True
    assert tuner.tune(ranked, lambda c: 1.0)[1]["timed"] == 6  # top_k=None: all of them


def test_no_second_timing_when_the_rules_pick_wins_or_ties():
    ranked = [tuner.Candidate.of("hp", nnz_per_group=g) for g in (16, 32, 64)]
    for times in ((1.0, 2.0, 3.0), (1.0, 1.0, 2.0)):  # a tie keeps the first: the rules' pick
        timed = []
        best, record = tuner.tune(ranked, lambda c, t=dict(zip(ranked, times)): timed.append(c) or t[c])
        assert best is ranked[0] and len(timed) == 3 and record["confirmed"] is None


@pytest.mark.parametrize("holds", [False, True])
def test_a_win_over_the_rules_pick_is_timed_again_before_it_is_kept(holds):
    rule, challenger = (tuner.Candidate.of("hp", nnz_per_group=g) for g in (16, 32))
    first_pass = {rule: [1.00], challenger: [0.97]}  # the pass can favour what it times later
    again = 0.95 if holds else 1.02

    def time_candidate(c):
        times = first_pass[c]
        return times.pop() if times else (again if c is challenger else 1.00)

    best, record = tuner.tune([rule, challenger], time_candidate)
    assert best is (challenger if holds else rule) and record["confirmed"] is holds
    assert record["best_ms"] == (0.97 if holds else 1.00) and record["again_ms"] == (1.00, again)


@pytest.mark.parametrize("again, kept", [([0.9, 1.1, 1.1], False), ([1.0, 1.0, 1.0], False), ([1.1, 0.9, 0.95], True)])
def test_the_second_timing_compares_medians_and_a_tie_keeps_the_rules_pick(again, kept):
    rule, challenger = (tuner.Candidate.of("hp", nnz_per_group=g) for g in (16, 32))
    times = {rule: [1.0] * (1 + tuner.CONFIRM_ROUNDS), challenger: [0.5] + again}

    best, record = tuner.tune([rule, challenger], lambda c: times[c].pop(0))
    assert best is (challenger if kept else rule) and record["confirmed"] is kept


def test_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    key = tuner.cache_key("H100", "abc", 64, np.float32)
    assert tuner.load_cached(key) is None
    choice = tuner.Candidate.of("tiled", m_tile=4, n_tile=32, reg_tile=2, nnz_tile=64, balance=True)
    tuner.store(key, choice, {"best_ms": 1.0})
    tuner.store(tuner.cache_key("H100", "abc", 128, np.float32), tuner.Candidate.of("slab"), {})
    assert tuner.load_cached(key) == choice
    assert tuner.cache_key("H100", "abc", 64, np.float32, reduce="max") != key  # per reduction
    assert tuner.cache_key("H100", "abc", 64, np.float32, families=("tiled",)) != key  # per scope


def test_stored_layouts_and_hc_paths_load_back_as_they_were_chosen(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    for n, choice in ((256, tuner.Candidate.of("hp", layout=(32, 4, 2))), (64, tuner.Candidate.of("hc", mode="tiles"))):
        key = tuner.cache_key("H100", "abc", n, np.float32)
        tuner.store(key, choice, {})
        assert tuner.load_cached(key) == choice  # (JSON's list back to a hashable tuple)


def test_graph_signature_follows_structure_not_values():
    A = sp.csr_matrix(np.array([[1.0, 0], [2, 3]]))
    B = A.copy()
    B.data *= 5
    C = sp.csr_matrix(np.array([[1.0, 1], [2, 3]]))
    assert tuner.graph_signature(A) == tuner.graph_signature(B) != tuner.graph_signature(C)


def test_sddmm_schedules_rank():
    from numbasparse.cuda.tiled import SddmmSchedule

    ranked = tuner.rank(np.full(100, 12), 8, H100, op="sddmm")
    assert ranked and all(isinstance(s, SddmmSchedule) and s.valid() for s in ranked)
    # K = 8: lanes past K would idle, so small groups rank above a full warp per entry
    assert ranked[0].group < 32


def _graph(seed=0):
    from numbasparse import CSR

    A = sp.random(24, 20, density=0.15, format="csr", random_state=seed, dtype=np.float32)
    A = sp.csr_matrix(A.multiply(np.arange(24)[:, None] != 3))  # row 3 empty
    return A, CSR.from_scipy(A)


def test_the_rules_choice_is_ranked_first_so_tuned_never_takes_a_slower_one():
    from numbasparse import CSR, dispatch

    _, dev = _graph()
    for reduce in ("sum", "max"):
        ranked = tuner.candidates(dev, "spmm", 40, np.float32, reduce, device=H100)
        assert ranked[0] == tuner.Candidate.of(dispatch.resolve("spmm", "auto", "cuda", True, 40, reduce, 4, dev).name)
        assert len(set(ranked)) == len(ranked)
    dense = CSR.from_scipy(sp.csr_matrix(np.ones((256, 256), np.float32)))  # auto runs the slab kernel
    ranked = tuner.candidates(dense, "spmm", 128, np.float32, device=H100)
    assert ranked[0] == tuner.Candidate.of("slab") and tuner.Candidate.of("hp") in ranked
    assert tuner.candidates(dev, "sddmm", 64, np.float32, device=H100)[0] == tuner.Candidate.of("hp")


def test_the_space_holds_only_kernels_that_take_the_dtype_and_reduction():
    _, dev = _graph()
    families = lambda ranked: {c.family for c in ranked}  # noqa: E731
    assert families(tuner.candidates(dev, "spmm", 40, np.float32, "sum", device=H100)) == {"hp", "slab", "tiled"}
    assert families(tuner.candidates(dev, "spmm", 40, np.float32, "max", device=H100)) == {"hp", "slab"}
    half = tuner.candidates(dev.astype(np.float16), "spmm", 40, np.float16, device=H100)
    assert families(half) == {"hp", "slab", "hc"}  # (HC-SpMM: its tiles on the tensor cores)
    assert not any(c.family == "tiled" for c in half)  # (G-Sparse's tiles combine in C's dtype)
    assert families(tuner.candidates(dev, "spmm", 40, np.float32, families=("tiled",), device=H100)) == {"tiled"}
    sddmm = tuner.candidates(dev, "sddmm", 128, np.float32, device=H100)
    assert {dict(c.params).get("group") for c in sddmm if c.family == "hp"} >= {8, 16}  # narrower groups at K=128


def test_hp_is_also_tried_with_one_tile_of_twice_the_columns_where_whole_warps_take_several():
    from numba import cuda

    from numbasparse.reference import spmm_reference

    A, dev = _graph(5)
    wide = tuner.Candidate.of("hp", layout=(32, 4, 2))
    assert wide in tuner.candidates(dev, "spmm", 256, np.float32, device=H100)  # rule: 2 tiles of 32 x 4
    assert wide not in tuner.candidates(dev, "spmm", 128, np.float32, device=H100)  # one tile already
    B = np.random.default_rng(6).standard_normal((20, 256)).astype(np.float32)
    C = cuda.to_device(np.full((24, 256), np.nan, np.float32))  # poisoned
    tuner.run(wide, "spmm", dev, (cuda.to_device(B), C))
    assert_close(C.copy_to_host(), spmm_reference(A, B), np.float32)


def test_hp_is_also_tried_with_the_narrow_tiles_where_the_rule_takes_wide_ones(monkeypatch):
    from numbasparse.cuda import hp

    monkeypatch.setattr(hp, "full_wave", lambda registers_per_thread=64: 1)  # any graph fills this GPU
    A, dev = _graph(5)
    ranked = tuner.candidates(dev, "spmm", 256, np.float32, device=H100)
    assert tuner.Candidate.of("hp", layout=(32, 4, 1)) in ranked  # the rule's neighbour (hp.wide_tiles)
    assert tuner.Candidate.of("hp", layout=(32, 4, 2)) not in ranked  # the rule's own layout
    assert {dict(c.params).get("depth") for c in ranked if c.family == "hp"} <= {None, 1}  # depth 2 would spill


def test_hp_is_also_tried_on_the_segments_and_orders_the_rule_did_not_take(monkeypatch):
    """Where the rule balances the segments (whole warps: N = 128), the tuner also times equal
    entries: the filled launch in every block order and, where the rule takes the single launch,
    the single launch in order and scattered and on A's rows shuffled; where it takes equal
    entries (groups sharing a warp: N = 40), balanced segments, and the equal-entry plans other
    than the rule's own."""
    from numbasparse.cuda import hp

    _, dev = _graph()

    def equal(single, order):
        return tuner.Candidate.of("hp", single=single, balanced=False, block_order=order, shuffled=False)

    filled = {equal(False, order) for order in hp.BLOCK_ORDERS}
    single = {equal(True, order) for order in ("in_order", "scattered")}
    shuffled = tuner.Candidate.of("hp", single=True, shuffled=True)
    balanced = tuner.Candidate.of("hp", balanced=True, block_order="in_order", shuffled=False)
    half = set(tuner.candidates(dev.astype(np.float16), "spmm", 128, np.float16, device=H100))
    assert filled <= half and single <= half and shuffled in half and balanced not in half
    narrow = set(tuner.candidates(dev.astype(np.float16), "spmm", 40, np.float16, device=H100))
    assert balanced in narrow and equal(True, "scattered") in narrow and equal(True, "in_order") not in narrow
    monkeypatch.setattr(hp, "single_launch", lambda *args: False)  # the filled launch: no row order to try
    ranked = set(tuner.candidates(dev, "spmm", 128, np.float32, device=H100))
    assert filled <= ranked and not single & ranked and not any("shuffled" in dict(c.params) and
                                                               dict(c.params)["shuffled"] for c in ranked)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_every_candidate_computes_the_product(op, monkeypatch):
    from numba import cuda

    from numbasparse.cuda import slab
    from numbasparse.reference import sddmm_reference, spmm_reference

    monkeypatch.setattr(slab, "DEFAULT", dataclasses.replace(slab.DEFAULT, warps=2))  # (simulated threads)
    A, dev = _graph(1)
    rng = np.random.default_rng(2)
    n = 40 if op == "spmm" else 64
    if op == "spmm":
        B = rng.standard_normal((20, n)).astype(np.float32)
        expected, operands = spmm_reference(A, B), (cuda.to_device(B), None)
    else:
        X, Y = rng.standard_normal((24, n)).astype(np.float32), rng.standard_normal((20, n)).astype(np.float32)
        expected, operands = sddmm_reference(A, X, Y), (cuda.to_device(X), cuda.to_device(Y), None)
    ranked = tuner.candidates(dev, op, n, np.float32, device=H100)
    for candidate in ranked:
        out = cuda.to_device(np.full(expected.shape, np.nan, np.float32))  # poisoned
        tuner.run(candidate, op, dev, operands[:-1] + (out,))
        assert_close(out.copy_to_host(), expected, np.float32)


def test_tuned_runs_every_reduction_and_tiled_only_sums():
    import numbasparse as ns
    from numbasparse.reference import spmm_reference

    A, dev = _graph(3)
    B = np.random.default_rng(4).standard_normal((20, 8)).astype(np.float32)
    for reduce in ("sum", "max"):
        assert_close(ns.spmm(dev, B, reduce=reduce, algorithm="tuned"), spmm_reference(A, B, reduce), np.float32)
    with pytest.raises(ValueError, match="'tiled' supports reduce in"):
        ns.spmm(dev, B, reduce="max", algorithm="tiled")


def test_a_choice_is_timed_once_then_taken_from_memory_and_disk(tmp_path, monkeypatch):
    """The GPU path of algorithm="tuned", with the timing faked: time every candidate on the
    first call, keep the fastest in the CSR's cache, and find it on disk for a new CSR of the
    graph."""
    from numbasparse.cuda import device

    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    _, first_csr = _graph()
    _, dev = _graph()  # (made on the simulator, before it is hidden)
    device.device_limits()  # (the simulator's, kept: the fake GPU has no attributes to ask)
    monkeypatch.setattr(device, "memory_system", lambda: (50 << 20, 3.35e12))  # (likewise)
    monkeypatch.setattr(device, "simulator_enabled", lambda: False)
    monkeypatch.setattr(tuner.Device, "current", classmethod(lambda cls: H100))
    calls = []

    def fake_timer(A, op, operands, reduce="sum"):
        seen = []  # the third candidate of each search "takes" 0 ms, the others 1 ms

        def time_candidate(candidate):
            calls.append(candidate)
            if candidate not in seen:
                seen.append(candidate)
            return 0.0 if seen.index(candidate) == 2 else 1.0
        return time_candidate

    monkeypatch.setattr(tuner, "_timer", fake_timer)
    spmm_space = len(tuner.candidates(first_csr, "spmm", 16, np.float32, device=H100))
    searched = min(spmm_space, tuner.TUNE_TOP) + 2 * tuner.CONFIRM_ROUNDS  # the winner timed again vs the rules' pick
    first = tuner.choose(first_csr, "spmm", 16, np.float32)
    assert len(calls) == searched and first == calls[2]
    assert tuner.choose(dev, "spmm", 16, np.float32) == first and len(calls) == searched  # from disk
    assert tuner.choose(dev, "spmm", 16, np.float32) == first  # from the CSR's memory
    sddmm = tuner.choose(dev, "sddmm", 16, np.float32)
    assert sddmm == calls[searched + 2]
    record = json.loads(tuner.cache_path().read_text())
    assert all(len(entry["times"]) == entry["timed"] for entry in record.values())


def _store_many(directory, first, count, go):
    import os

    os.environ["NUMBASPARSE_CACHE"] = directory
    go.wait()  # all writers start together
    for i in range(first, first + count):
        tuner.store(tuner.cache_key("H100", f"g{i}", 64, np.float32), tuner.Candidate.of("hp"), {"i": i})


def test_processes_storing_schedules_at_once_keep_every_entry(tmp_path, monkeypatch):
    import multiprocessing

    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    workers = [context.Process(target=_store_many, args=(str(tmp_path), 1000 * w, 150, go)) for w in range(4)]
    for w in workers:
        w.start()
    go.set()
    for w in workers:
        w.join()
        assert w.exitcode == 0
    missing = [i for w in range(4) for i in range(1000 * w, 1000 * w + 150)
               if tuner.load_cached(tuner.cache_key("H100", f"g{i}", 64, np.float32)) is None]
    assert missing == []


def test_tuned_on_a_matrix_without_entries():
    import numbasparse as ns
    from numbasparse import CSR

    empty = CSR.from_scipy(sp.csr_matrix((5, 7), dtype=np.float32))
    B = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    assert np.array_equal(ns.spmm(empty, B, algorithm="tuned"), np.zeros((5, 4), np.float32))
    assert ns.sddmm(empty, np.ones((5, 4), np.float32), np.ones((7, 4), np.float32), algorithm="tuned").nnz == 0


def test_a_stored_choice_this_code_cannot_run_is_timed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    key = tuner.cache_key("H100", "abc", 64, np.float32)
    assert key.startswith(f"v{tuner.SPACE_VERSION}|")  # a new space version times everything again
    too_big = tuner.Candidate.of("tiled", m_tile=64, n_tile=32, reg_tile=1, nnz_tile=32, balance=False)
    for stale in (too_big, tuner.Candidate.of("hp", lanes=8), tuner.Candidate.of("tiled", m_tile=1)):
        tuner.store(key, stale, {})
        assert tuner.load_cached(key) is None
    sddmm_key = tuner.cache_key("H100", "abc", 64, np.float32, op="sddmm")
    tuner.store(sddmm_key, tuner.Candidate.of("hp", group=8, nnz_per_warp=16), {})
    assert tuner.load_cached(sddmm_key) == tuner.Candidate.of("hp", group=8, nnz_per_warp=16)


def test_half_sums_search_hc_on_the_tensor_cores_and_each_computes_the_product():
    """16-bit sums take HC-SpMM into the space (its tiles' products are exact there); float32
    (whose tiles would be TF32) and max do not."""
    import ml_dtypes
    from numba import cuda

    from numbasparse import CSR
    from numbasparse.reference import spmm_reference

    A, dev = _graph(1)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    half = CSR.from_scipy(A, dtype=bf16)
    ranked = tuner.candidates(half, "spmm", 16, bf16, device=H100)
    hcs = [c for c in ranked if c.family == "hc"]
    assert sorted(dict(c.params)["mode"] for c in hcs) == ["hybrid", "tiles"]
    assert ranked[1:3] == hcs  # (the cost model cannot rank them: timed right after the rules' pick)
    assert not [c for c in tuner.candidates(dev, "spmm", 16, np.float32, device=H100) if c.family == "hc"]
    assert not [c for c in tuner.candidates(half, "spmm", 16, bf16, "max", device=H100) if c.family == "hc"]
    B = np.random.default_rng(3).standard_normal((A.shape[1], 16)).astype(bf16)
    rounded = sp.csr_matrix((A.data.astype(bf16).astype(np.float64), A.indices, A.indptr), shape=A.shape)
    expected = spmm_reference(rounded, B.astype(np.float64))
    for candidate in hcs:
        C = cuda.to_device(np.full(expected.shape, np.nan, np.float32))  # poisoned; float32: the sum itself
        tuner.run(candidate, "spmm", half, (cuda.to_device(B.view(np.uint16)), C))
        assert_close(C.copy_to_host(), expected, np.float32, abs(rounded) @ np.abs(B.astype(np.float64)))


def test_candidates_after_the_rules_pick_follow_the_cost_model():
    """The rules' pick first, then every other candidate by the cost model's predicted time."""
    _, A = _graph()
    for op, n in (("spmm", 16), ("sddmm", 16)):
        ranked = tuner.candidates(A, op, n, np.float32, device=H100)
        operands = tuner.scratch_operands(A, op, n, np.float32)
        rule = tuner.hp_rule(A, op, n, np.float32, "sum", operands)
        keys = [tuner._rank_key(c, op, A, n, np.float32, rule, "sum", tuner._stats(A, H100), H100, cost.shipped(),
                                operands) for c in ranked[1:]]
        assert len(ranked) > 3 and None not in keys and keys == sorted(keys)


def test_the_cost_model_predicts_more_time_for_more_work():
    """Doubling the entries (or N) of an HP-SpMM call never predicts less time, nor is any call
    predicted below the host's time; the shipped constants load."""
    c = cost.shipped()
    assert c.l2_bytes_per_us > 0 and c.host_us > 0
    small = cost.Stats(1000, 1000, 5000, 1000, 4, 132, 50 << 20)
    big = cost.Stats(10 ** 6, 10 ** 6, 2 * 10 ** 7, 10 ** 6, 4, 132, 50 << 20)
    bigger = cost.Stats(10 ** 6, 10 ** 6, 4 * 10 ** 7, 10 ** 6, 4, 132, 50 << 20)
    layout = (32, 4, 1)
    t_small = cost.predict_us(c, small, "hp", cost.hp_spmm_terms(small, 64, 4, 64, 2, True, layout))
    t_big = cost.predict_us(c, big, "hp", cost.hp_spmm_terms(big, 64, 4, 64, 2, True, layout))
    t_bigger = cost.predict_us(c, bigger, "hp", cost.hp_spmm_terms(bigger, 64, 4, 64, 2, True, layout))
    assert c.host_us + c.host_op_us <= t_small < t_big < t_bigger
    wide = cost.predict_us(c, big, "hp", cost.hp_spmm_terms(big, 256, 4, 64, 2, True, layout))
    assert wide > t_big
    sddmm = [cost.predict_us(c, big, "hp", cost.hp_sddmm_terms(big, k, 4, 4, 4, 32)) for k in (32, 128)]
    assert sddmm[0] < sddmm[1]


def test_the_space_of_a_call_without_columns_is_the_rules_pick_unranked():
    """N = 0: nothing to rank (the model's tilings divide by the column tiles), and a tuned call
    gives an empty result."""
    import numbasparse as ns

    A, dev = _graph()
    assert tuner.candidates(dev, "spmm", 0, np.float32, device=H100)[0] == tuner.Candidate.of("hp")
    assert ns.spmm(A, np.zeros((A.shape[1], 0), np.float32), algorithm="tuned").shape == (A.shape[0], 0)
