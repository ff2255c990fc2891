"""The G-Sparse schedule search: cost model, ranking, timing loop and the on-disk cache."""
import numpy as np
import scipy.sparse as sp

from numbasparse.cuda.tiled import Schedule
from numbasparse.select import tuner

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
    lengths = np.full(500, 10)
    fake_ms = {s: 1.0 + i for i, s in enumerate(tuner.rank(lengths, 32, H100))}
    timed = []

    def time_schedule(s):
        timed.append(s)
        return fake_ms[s] if len(timed) != 3 else 0.5  # the third candidate is fastest

    best, record = tuner.tune(lengths, 32, time_schedule, H100, top_k=5)
    assert len(timed) == 5 and best == timed[2] and record["best_ms"] == 0.5 and record["timed"] == 5


def test_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    key = tuner.cache_key("H100", "abc", 64, np.float32)
    assert tuner.load_cached(key) is None
    schedule = Schedule(4, 32, 2, 64, True)
    tuner.store(key, schedule, {"best_ms": 1.0})
    tuner.store(tuner.cache_key("H100", "abc", 128, np.float32), Schedule(1, 32, 4, 32, False), {})
    assert tuner.load_cached(key) == schedule


def test_graph_signature_follows_structure_not_values():
    A = sp.csr_matrix(np.array([[1.0, 0], [2, 3]]))
    B = A.copy()
    B.data *= 5
    C = sp.csr_matrix(np.array([[1.0, 1], [2, 3]]))
    assert tuner.graph_signature(A) == tuner.graph_signature(B) != tuner.graph_signature(C)


def test_sddmm_schedules_rank_and_cache(tmp_path, monkeypatch):
    from numbasparse.cuda.tiled import SddmmSchedule

    ranked = tuner.rank(np.full(100, 12), 8, H100, op="sddmm")
    assert ranked and all(isinstance(s, SddmmSchedule) and s.valid() for s in ranked)
    # K = 8: lanes past K would idle, so small groups rank above a full warp per entry
    assert ranked[0].group < 32
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    key = tuner.cache_key("H100", "abc", 8, np.float32, op="sddmm")
    tuner.store(key, ranked[0], {})
    assert tuner.load_cached(key) == ranked[0]


def test_schedule_is_tuned_once_then_taken_from_memory_and_disk(tmp_path, monkeypatch):
    """The GPU path of algorithm="tuned", with the timing faked: tune on the first call,
    remember the schedule in the CSR's cache, and find it on disk for a new CSR of the graph."""
    from numbasparse import CSR
    from numbasparse.cuda import device

    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    A = sp.random(40, 30, density=0.2, format="csr", random_state=0, dtype=np.float32)
    first_csr, dev = CSR.from_scipy(A), CSR.from_scipy(A)  # (made on the simulator, before it is hidden)
    monkeypatch.setattr(device, "simulator_enabled", lambda: False)
    monkeypatch.setattr(tuner.Device, "current", classmethod(lambda cls: H100))
    calls = []

    def fake_timer(A, n_cols, dtype, op="spmm"):
        return lambda schedule: calls.append(schedule) or float(len(calls) % 3)

    monkeypatch.setattr(tuner, "_timer", fake_timer)
    first = tuner.schedule_for(first_csr, 16, np.float32)
    assert len(calls) == 8 and first == calls[2]  # the third timed schedule "took" 0 ms
    assert tuner.schedule_for(dev, 16, np.float32) == first and len(calls) == 8  # from disk
    assert tuner.schedule_for(dev, 16, np.float32) == first  # from the CSR's memory
    sddmm = tuner.schedule_for(dev, 16, np.float32, "sddmm")
    assert len(calls) == 16 and sddmm == calls[8]  # its first 0 ms: call 9


def _store_many(directory, first, count, go):
    import os

    os.environ["NUMBASPARSE_CACHE"] = directory
    go.wait()  # all writers start together
    for i in range(first, first + count):
        tuner.store(tuner.cache_key("H100", f"g{i}", 64, np.float32), Schedule(1, 32, 1, 32, False), {"i": i})


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
