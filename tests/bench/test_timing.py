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
