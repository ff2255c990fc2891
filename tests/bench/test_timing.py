"""Event timing: per call on an idle GPU, and back to back per call (fake events, no GPU)."""
from numbasparse.bench import timing


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.calls = 0

    def fn(self):
        self.calls += 1
        self.now += 2.0  # every call costs 2 ms between the events


def fake_events(clock):
    class Event:
        def record(self):
            self.at = clock.now

        def synchronize(self):
            pass

        def elapsed_time(self, stop):
            return stop.at - self.at

    return Event, (lambda: None)


def test_time_cuda_times_each_call_and_back_to_back_divides_by_calls(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing, "_events", lambda: fake_events(clock))
    ms, times = timing.time_cuda(clock.fn, warmup=2, repeat=5)
    assert ms == 2.0 and len(times) == 5 and clock.calls == 7
    ms, times = timing.time_cuda_back_to_back(clock.fn, calls=10, warmup=1, repeat=3)
    assert ms == 2.0 and len(times) == 3 and clock.calls == 7 + 1 + 30


def test_interleaved_timing_shuffles_each_round_and_times_each_function_alone(monkeypatch):
    clock, order = FakeClock(), []

    def costs(name, ms):
        def fn():
            order.append(name)
            clock.now += ms
        return fn

    monkeypatch.setattr(timing, "_events", lambda: fake_events(clock))
    fns = {"a": costs("a", 1.0), "b": costs("b", 3.0), "c": costs("c", 0.5)}
    result = timing.time_cuda_interleaved(fns, calls=4, warmup=2, repeat=30)
    assert {name: ms for name, (ms, _) in result.items()} == {"a": 1.0, "b": 3.0, "c": 0.5}
    assert all(len(times) == 30 for _, times in result.values())
    timed = order[6:]  # after two warm-up calls of each
    rounds = [timed[i:i + 12:4] for i in range(0, len(timed), 12)]  # first call of each block, per round
    assert len(rounds) == 30 and all(sorted(r) == ["a", "b", "c"] for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # the order changes from round to round


def test_host_time_after_a_sync_runs_before_then_synchronises_before_each_timed_call(monkeypatch):
    trail = []
    monkeypatch.setattr(timing, "_events", lambda: (None, lambda: trail.append("sync")))
    us = timing.host_us_after_sync(lambda: trail.append("call"), before=lambda: trail.append("before"),
                                   calls=3, warmup=1)
    assert us >= 0
    assert trail == ["call"] + ["before", "sync", "call"] * 3
