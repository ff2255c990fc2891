"""Record and replay of repeated calls (:mod:`numbasparse.replay`), against a stand-in driver."""
from types import SimpleNamespace

import pytest

from numbasparse import replay
from numbasparse.cache import MatrixCache
from numbasparse.cuda import launch

from fakes import stand_in_driver, view


@pytest.fixture
def driver(monkeypatch):
    return stand_in_driver(monkeypatch)


def bound_kernel(driver, monkeypatch, args, variable=(1, 2)):
    """A kernel with the stand-in fast launch and a cache holding its bound launch under "k"."""
    kernel = object()
    monkeypatch.setitem(launch._fast_launch, kernel, (driver.fast,))
    cache = MatrixCache()
    cache.put("bound", "k", launch.bind(kernel, (7, 2), 64, args, variable))
    return kernel, cache


def record(*views):
    return launch.observing(replay.Recording(views))


def test_a_recorded_call_replays_its_memsets_and_launches_on_new_pointers(driver, monkeypatch):
    idx, B, C = view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384)
    kernel, cache = bound_kernel(driver, monkeypatch, (idx, B, C, 9, 1.0))
    with record(B, C) as recorded:
        launch.zero(C, 0)
        launch.run_bound(cache, "k", kernel, (7, 2), 64, 0, (idx, B, C, 9, 1.0), (1, 2))
    again = recorded.replay()
    issued = len(driver.calls)
    assert again((1 << 20, 1 << 21), 77)
    memset, (function, grid, block, stream, slots) = driver.calls[issued:]
    assert memset == ("memset", 1 << 21, 0, 48, 77)
    assert (grid, block, stream) == ((7, 2, 1), (64, 1, 1), 77)
    assert slots[7 + 4] == 1 << 20 and slots[16 + 4] == 1 << 21 and slots[4] == 4096


def test_a_replay_refuses_operands_of_another_alignment(driver, monkeypatch):
    """The vector width was chosen for the recorded operands' alignment."""
    idx, B, C = view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384)
    kernel, cache = bound_kernel(driver, monkeypatch, (idx, B, C, 9, 1.0))
    with record(B, C) as recorded:
        launch.run_bound(cache, "k", kernel, (7, 2), 64, 0, (idx, B, C, 9, 1.0), (1, 2))
    issued = len(driver.calls)
    assert not recorded.replay()((8192 + 4, 1 << 21), 0)
    assert len(driver.calls) == issued


@pytest.mark.parametrize("step", ["unbound launch", "first bound launch", "other array"])
def test_a_call_with_a_step_it_cannot_replay_gives_no_replay(driver, monkeypatch, step):
    idx, B, C = view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384)
    kernel, cache = bound_kernel(driver, monkeypatch, (idx, B, C, 9, 1.0))
    with record(B, C) as recorded:
        if step == "unbound launch":
            launch.run(kernel, 1, 32, 0, idx, B, C, 9, 1.0)
        elif step == "first bound launch":  # binds only at the second call with this key
            launch.run_bound(cache, "new key", kernel, 1, 32, 0, (idx, B, C, 9, 1.0), (1, 2))
        else:
            launch.zero(view((4, 3), 1 << 22), 0)
    assert recorded.replay() is None


def test_observing_ends_with_its_block():
    with record() as recorded:
        pass
    assert recorded.replay() is not None and getattr(launch._observer, "current", None) is None


def test_a_call_signature_is_replayed_from_its_replay_from_call_th_call(driver, monkeypatch):
    """Calls 1-3 make the full call (compile, bind, record), call 4 on are replayed."""
    monkeypatch.setattr(replay, "_signature", lambda *args: ("options", 0))  # one signature, stream 0
    monkeypatch.setattr(replay, "one_device", lambda: True)  # (the signature names no GPU)
    A = SimpleNamespace(cache=MatrixCache())
    kernel = object()
    monkeypatch.setitem(launch._fast_launch, kernel, (driver.fast,))
    idx = view((5,), 4096, "<i4")

    def full_call(record):
        B, C = view((4, 3), 8192), view((4, 3), 16384)
        with record(B, C):
            launch.run_bound(A.cache, "k", kernel, 1, 32, 0, (idx, B, C, 9, 1.0), (1, 2))
        return "full call"

    operand = SimpleNamespace(data_ptr=lambda: 8192 + 1024)
    output = SimpleNamespace(data_ptr=lambda: 16384 + 1024)
    results = [replay.call(A, (), (operand,), None, lambda A, B: (output,), full_call, ()) for _ in range(6)]
    first = replay.REPLAY_FROM_CALL - 1
    assert results[:first] == ["full call"] * first
    assert all(r is output for r in results[first:])
    assert driver.calls[-1][4][7 + 4] == 8192 + 1024  # the replayed launch got the new B


def test_a_signatures_calls_after_its_first_are_known_to_be_replayed(driver, monkeypatch):
    """What fused="auto" weighs (record.replays): a first call's host time, a repeated call's
    launches; a call without a signature is never replayed."""
    monkeypatch.setattr(replay, "_signature", lambda *args: ("options", 0))
    monkeypatch.setattr(replay, "one_device", lambda: True)
    A = SimpleNamespace(cache=MatrixCache())
    kernel = object()
    monkeypatch.setitem(launch._fast_launch, kernel, (driver.fast,))
    idx = view((5,), 4096, "<i4")
    seen = []

    def full_call(record):
        seen.append(record.replays)
        B, C = view((4, 3), 8192), view((4, 3), 16384)
        with record(B, C):
            launch.run_bound(A.cache, "k", kernel, 1, 32, 0, (idx, B, C, 9, 1.0), (1, 2))

    operand = SimpleNamespace(data_ptr=lambda: 8192 + 1024)
    output = SimpleNamespace(data_ptr=lambda: 16384 + 1024)
    for _ in range(6):
        replay.call(A, (), (operand,), None, lambda A, B: (output,), full_call, ())
    assert seen == [False] + [True] * (replay.REPLAY_FROM_CALL - 2)
    monkeypatch.setattr(replay, "_signature", lambda *args: None)
    replay.call(A, (), (operand,), None, lambda A, B: (output,), full_call, ())
    assert seen[-1] is False


def test_a_replay_that_cannot_allocate_its_output_raises_the_full_calls_memory_error(monkeypatch):
    class OutOfMemoryError(RuntimeError):  # (torch's name for it)
        pass

    monkeypatch.setattr(replay, "_signature", lambda *args: ("options", 0))
    A = SimpleNamespace(cache=MatrixCache())
    A.cache.put("replays", ("options", 0), replay.Replay((), ()))
    operand = SimpleNamespace(data_ptr=lambda: 8192)

    def no_memory(A, B):
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(MemoryError, match="out of GPU memory allocating the call's output"):
        replay.call(A, (), (operand,), None, no_memory, None, ())

    def other(A, B):
        raise KeyError("not memory")

    with pytest.raises(KeyError):
        replay.call(A, (), (operand,), None, other, None, ())


def test_a_process_first_torch_call_has_a_signature(monkeypatch):
    """A torch operand has a signature before numbasparse has converted any (the first call of a
    process counts towards its replay, as a training loop's GPU test expects)."""
    torch = pytest.importorskip("torch")
    from numbasparse import arrays

    monkeypatch.setattr(arrays, "_TORCH_TENSOR", [])
    monkeypatch.setattr(arrays, "_TORCH_DTYPES", {})
    x = torch.zeros(3, 4)
    monkeypatch.setattr(type(x), "is_cuda", property(lambda self: True))  # (a stand-in CUDA tensor)
    monkeypatch.setattr(type(x), "get_device", lambda self: 0)
    assert arrays.torch_signature(x) == (x.shape, torch.float32, 0, x.data_ptr() % launch.MAX_ALIGNMENT)
    assert arrays.torch_signature(object()) is None


def test_a_replay_allocates_the_calls_intermediates_anew(driver, monkeypatch):
    """An array the call declared as its intermediate is a role of the replay, which passes a
    new one of its size (the unfused SDDMM -> SpMM's scores)."""
    idx, B, C, scores = view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384), view((4, 3), 32768)
    kernel, cache = bound_kernel(driver, monkeypatch, (idx, B, C, 9, 1.0))
    with record(B, C) as recorded:
        launch.intermediate(scores)
        launch.run_bound(cache, "k", kernel, (7, 2), 64, 0, (idx, B, scores, 9, 1.0), (1, 2))
    again = recorded.replay()
    assert again.intermediates == (4 * 3 * 4,)
    issued = len(driver.calls)
    assert again((1 << 20, 1 << 21, 1 << 22), 5)
    ((_, _, _, stream, slots),) = driver.calls[issued:]
    assert stream == 5 and slots[7 + 4] == 1 << 20 and slots[16 + 4] == 1 << 22


def test_an_intermediate_outside_a_recorded_call_is_ignored():
    launch.intermediate(view((4,), 4096))  # no observer: nothing to tell


def test_a_replay_allocates_intermediates_of_at_least_the_recorded_bytes_like_the_first_operand():
    made = []

    class Tensor:  # the parts of a CUDA torch.Tensor that a replay's allocation uses
        def element_size(self):
            return 4

        def new_empty(self, shape):
            made.append(shape)
            return Tensor()

    out = replay._intermediates(Tensor(), (48, 10, 0))
    assert len(out) == 3 and made == [(12,), (3,), (0,)]
