"""Hosts with several GPUs: a call runs on the GPU holding its operands whatever GPU is current,
refuses operands spread over two GPUs by name, and keeps the fast launch (one per kernel and
GPU).  The first tests stand in for the driver (no GPU needed); the rest need two GPUs."""
import numpy as np
import pytest

import numbasparse as ns
from numbasparse import graphs
from numbasparse.cuda import device, launch
from numbasparse.reference import attention_reference, sddmm_reference, sddmm_spmm_reference, spmm_reference
from fakes import stand_in_driver, view
from strategies import assert_close


# Stand-ins: the multi-GPU rules without a second GPU -------------------------------------------

class _FakeGpu:
    """``cuda.gpus[i]`` of the stand-in: entering makes GPU i current, leaving restores."""

    def __init__(self, index, current):
        self.index, self.current, self.saved = index, current, []

    def __enter__(self):
        self.saved.append(self.current[0])
        self.current[0] = self.index

    def __exit__(self, *exc):
        self.current[0] = self.saved.pop()


@pytest.fixture
def two_gpus(monkeypatch):
    """Pretend the host has two GPUs: ``where[id(array)]`` places an array (a DeviceView by its
    owner; GPU 0 by default), ``current[0]`` is the current GPU, ``cuda.gpus[i]`` switches it."""
    from types import SimpleNamespace

    where, current = {}, [0]
    monkeypatch.setattr(device, "one_device", lambda: False)
    monkeypatch.setattr(device, "gpu_of", lambda a: where.get(id(a), where.get(id(getattr(a, "owner", None)), 0)))
    monkeypatch.setattr(device, "current_gpu", lambda: current[0])
    # (each stand-in GPU reports an H100's limits, asked afresh: none leak into the real GPUs' entries)
    limits = dict(MULTIPROCESSOR_COUNT=132, MAX_THREADS_PER_MULTIPROCESSOR=2048, MAX_REGISTERS_PER_MULTIPROCESSOR=65536,
                  MEMORY_CLOCK_RATE=2_619_000, GLOBAL_MEMORY_BUS_WIDTH=5120, L2_CACHE_SIZE=50 << 20)
    monkeypatch.setattr(device, "cuda", SimpleNamespace(gpus=[_FakeGpu(0, current), _FakeGpu(1, current)],
                                                        get_current_device=lambda: SimpleNamespace(id=current[0], **limits)))
    monkeypatch.setattr(device, "_limits", {})
    monkeypatch.setattr(device, "_memory", {})
    monkeypatch.setattr(launch, "one_device", lambda: False)
    monkeypatch.setattr(launch, "current_gpu", lambda: current[0])
    return where, current


@pytest.fixture
def gpu_log(two_gpus, monkeypatch):
    """(what, current GPU) of every launch and Numba allocation; what Numba allocates is placed
    on the current GPU."""
    from numba import cuda

    where, current = two_gpus
    log = []
    run = launch.run

    def logged_run(kernel, *args):
        log.append(("launch", current[0]))
        return run(kernel, *args)

    monkeypatch.setattr(launch, "run", logged_run)
    for name in ("to_device", "device_array"):
        def allocate(*args, _real=getattr(cuda, name), **kwargs):
            array = _real(*args, **kwargs)
            log.append(("allocate", current[0]))
            where[id(array)] = current[0]
            return array

        monkeypatch.setattr(cuda, name, allocate)
    return log


def test_a_fast_launch_runs_only_on_the_gpu_it_was_made_on(monkeypatch):
    driver = stand_in_driver(monkeypatch)
    current = [0]
    monkeypatch.setattr(launch, "one_device", lambda: False)
    monkeypatch.setattr(launch, "current_gpu", lambda: current[0])
    fast = launch._FastLaunch(driver.compiled)  # made on GPU 0
    args = (view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384), 1, 0.5)
    assert fast.launch(1, 32, 0, args)
    current[0] = 1
    assert not fast.launch(1, 32, 0, args) and fast.enabled  # refused, not counted as a driver error
    assert len(driver.calls) == 1
    kernel = object()
    assert launch._fast_key(kernel) == (kernel, 1)


def test_operands_on_two_gpus_are_refused_naming_them(two_gpus):
    where, _ = two_gpus
    from numba import cuda

    A = ns.CSR.from_scipy(graphs.powerlaw(40, 4, seed=1))
    rng = np.random.default_rng()
    B = cuda.to_device(rng.standard_normal((40, 3)).astype(np.float32))
    where[id(A.indptr)] = 1
    with pytest.raises(ValueError, match="A is on GPU 1 but B is on GPU 0"):
        ns.spmm(A, B)
    X, Y = (cuda.to_device(rng.standard_normal((40, 4)).astype(np.float32)) for _ in range(2))
    where[id(A.indptr)], where[id(Y)] = 0, 1
    with pytest.raises(ValueError, match="A is on GPU 0 but Y is on GPU 1"):
        ns.sddmm(A, X, Y)
    with pytest.raises(ValueError, match="A is on GPU 0 but K is on GPU 1"):
        ns.graph_attention(A, X, Y, B)
    out = cuda.device_array((40, 3), np.float32)
    where[id(out)] = 1
    with pytest.raises(ValueError, match="B is on GPU 0 but out is on GPU 1"):
        ns.spmm(A, B, out=out)


def test_a_call_launches_and_allocates_on_its_operands_gpu(two_gpus, gpu_log):
    from numba import cuda

    where, current = two_gpus
    current[0] = 1
    A = ns.CSR.from_scipy(graphs.powerlaw(50, 4, seed=3))  # made on GPU 1
    rng = np.random.default_rng()
    B = rng.standard_normal((50, 6)).astype(np.float32)
    B_dev = cuda.to_device(B)
    current[0] = 0
    gpu_log.clear()
    C = ns.spmm(A, B_dev)
    assert current[0] == 0 and gpu_log and all(gpu == 1 for _, gpu in gpu_log)
    assert_close(C.copy_to_host(), spmm_reference(A.to_scipy(), B), np.float32)
    gpu_log.clear()
    ns.spmm(A, B, backend="cuda")  # host B: uploaded to A's GPU
    assert gpu_log and all(gpu == 1 for _, gpu in gpu_log)


def test_a_reordered_plan_gathers_on_its_gpu_and_refuses_operands_elsewhere(two_gpus, gpu_log):
    from numba import cuda

    where, current = two_gpus
    A = graphs.powerlaw(60, 4, seed=5)
    current[0] = 1
    plan = ns.prepare(A, reorder="rcm", backend="cuda")  # lives on GPU 1
    B = np.random.default_rng().standard_normal((60, 5)).astype(np.float32)
    B_dev = cuda.to_device(B)
    current[0] = 0
    gpu_log.clear()
    C = plan.spmm(B_dev)
    assert current[0] == 0 and gpu_log and all(gpu == 1 for _, gpu in gpu_log)
    assert_close(C.copy_to_host(), spmm_reference(A, B), np.float32)
    B_other = cuda.to_device(B)  # made with GPU 0 current
    with pytest.raises(ValueError, match="A is on GPU 1 but B is on GPU 0"):
        plan.spmm(B_other)


def test_values_on_another_gpu_than_the_pattern_are_refused(two_gpus):
    from numba import cuda

    where, _ = two_gpus
    A = ns.CSR.from_scipy(graphs.powerlaw(40, 4, seed=1))
    values = cuda.to_device(np.ones(A.nnz, np.float32))
    where[id(values)] = 1
    with pytest.raises(ValueError, match="A is on GPU 0 but values is on GPU 1"):
        A.with_values(values)


def test_a_gpu_array_is_placed_by_its_framework_before_the_driver():
    """torch's device, then DLPack's, then a Numba array's foreign owner, then its context (the
    driver's pointer attribute gave GPU 0 for torch memory on GPU 1)."""
    from types import SimpleNamespace

    from numbasparse.arrays import DeviceView

    torch_like = SimpleNamespace(get_device=lambda: 3, is_cuda=True)
    dlpack_like = SimpleNamespace(__dlpack_device__=lambda: (2, 2))
    numba_own = SimpleNamespace(gpu_data=SimpleNamespace(owner=None, context=SimpleNamespace(
        device=SimpleNamespace(id=1))))
    numba_view_of_torch = SimpleNamespace(gpu_data=SimpleNamespace(owner=SimpleNamespace(
        get_device=lambda: 3, is_cuda=True, __cuda_array_interface__={}), context=SimpleNamespace(
        device=SimpleNamespace(id=0))))
    assert device.gpu_of(torch_like) == 3
    view = object.__new__(DeviceView)
    view.owner = torch_like
    assert device.gpu_of(view) == 3
    assert device.gpu_of(dlpack_like) == 2
    assert device.gpu_of(numba_own) == 1
    assert device.gpu_of(numba_view_of_torch) == 3


def test_cpu_backend_calls_on_host_operands_never_count_the_gpus(monkeypatch):
    """Counting the GPUs initialises CUDA, which a CPU-backend call must not (forked workers,
    threads of a CPU-only process)."""
    def asked():
        raise AssertionError("a host-only call asked for the GPUs")

    monkeypatch.setattr(device, "one_device", asked)
    A = graphs.powerlaw(60, 4, seed=2)
    rng = np.random.default_rng()
    X, Y, Z = (rng.standard_normal((60, k)) for k in (5, 5, 3))
    assert_close(ns.spmm(A, Z, backend="cpu"), spmm_reference(A, Z), np.float64)
    assert_close(ns.sddmm(A, X, Y, backend="cpu").data, sddmm_reference(A, X, Y).data, np.float64)
    assert_close(ns.graph_attention(A, X, Y, Z, backend="cpu"), attention_reference(A, X, Y, Z), np.float64)
    assert_close(ns.spmm_dense(A, X, Y.T, backend="cpu"), spmm_reference(A, X) @ Y.T, np.float64)


# Two real GPUs ------------------------------------------------------------------------------

def _two_gpus_or_skip():
    from numba import cuda

    if device.simulator_enabled() or not device.gpu_present() or len(cuda.gpus) < 2:
        pytest.skip("needs two CUDA GPUs")


@pytest.fixture
def graph():
    A = graphs.powerlaw(700, 12, seed=4).astype(np.float64)
    A.data = np.random.default_rng(1).uniform(0.5, 1.5, A.nnz)
    return A


@pytest.mark.gpu
def test_torch_operands_on_a_gpu_that_is_not_current_are_computed_there(graph):
    """Every op on tensors of GPU 1 with GPU 0 current: right results on GPU 1, GPU 0 still
    current afterwards, and repeated calls (bound, then replayed) stay right."""
    _two_gpus_or_skip()
    import torch

    torch.cuda.set_device(0)
    gpu1 = torch.device("cuda", 1)
    rng = np.random.default_rng()
    B, X, Y, Z = (rng.standard_normal(shape) for shape in ((700, 45), (700, 16), (700, 16), (700, 40)))
    t = {name: torch.tensor(v, dtype=torch.float32, device=gpu1) for name, v in zip("BXYZ", (B, X, Y, Z))}
    A = ns.CSR.from_scipy(graph, dtype=np.float32)  # uploaded to GPU 0: the call's GPU is A's and B's
    with pytest.raises(ValueError, match="A is on GPU 0 but B is on GPU 1"):
        ns.spmm(A, t["B"])
    A1 = _csr_on(1, graph)
    for call in range(6):  # scipy A: uploaded where the operands are; from call 4 on, A1's calls replay
        C = ns.spmm(graph if call == 0 else A1, t["B"])
        assert C.device == gpu1
        assert_close(C.cpu().numpy(), spmm_reference(graph, B), np.float32)
        s = ns.sddmm(A1, t["X"], t["Y"])
        assert_close(s.cpu().numpy(), sddmm_reference(graph, X, Y).data, np.float32)
    assert torch.cuda.current_device() == 0 and device.current_gpu() == 0
    assert any(isinstance(key, tuple) and key[1] == 1 for key in launch._fast_launch)  # the fast launch, on GPU 1
    from numbasparse.replay import Replay

    assert any(type(entry) is Replay for entry in A1.cache.sections["replays"].values())
    assert_close(ns.sddmm_spmm(A1, t["X"], t["Y"], t["Z"]).cpu().numpy(),
                 sddmm_spmm_reference(graph, X, Y, Z), np.float32)
    assert_close(ns.graph_attention(A1, t["X"], t["Y"], t["Z"]).cpu().numpy(),
                 attention_reference(graph, X, Y, Z), np.float32)
    W = rng.standard_normal((16, 24))
    assert_close(ns.spmm_dense(A1, t["X"], torch.tensor(W, dtype=torch.float32, device=gpu1)).cpu().numpy(),
                 spmm_reference(graph, X) @ W, np.float32)
    assert torch.cuda.current_device() == 0


def _csr_on(gpu, A):
    from numba import cuda

    with cuda.gpus[gpu]:
        return ns.CSR.from_scipy(A, dtype=np.float32)


@pytest.mark.gpu
def test_calls_alternating_between_two_gpus_replay_on_each(graph):
    """One graph on each GPU, calls alternating: each GPU's kernels launch fast and its calls
    replay, and a refused mixed call leaves both GPUs usable."""
    _two_gpus_or_skip()
    import torch

    from numbasparse.replay import Replay

    rng = np.random.default_rng()
    B = rng.standard_normal((700, 64))
    mats = [_csr_on(g, graph) for g in (0, 1)]
    Bs = [torch.tensor(B, dtype=torch.float32, device=f"cuda:{g}") for g in (0, 1)]
    for call in range(5):
        for g in (0, 1):
            C = ns.spmm(mats[g], Bs[g])
            assert C.device.index == g
            assert_close(C.cpu().numpy(), spmm_reference(graph, B), np.float32)
        if call == 2:
            with pytest.raises(ValueError, match="GPU"):
                ns.spmm(mats[0], Bs[1])
    for g in (0, 1):
        assert any(type(entry) is Replay for entry in mats[g].cache.sections["replays"].values())
    torch.cuda.synchronize(0), torch.cuda.synchronize(1)


@pytest.mark.gpu
def test_autograd_on_a_graph_of_another_gpu(graph):
    _two_gpus_or_skip()
    import torch

    import numbasparse.torch as nst

    torch.cuda.set_device(0)
    g = nst.Graph(graph, device="cuda:1", dtype=torch.float64)
    X = torch.randn(700, 9, dtype=torch.float64, device="cuda:1", requires_grad=True)
    nst.spmm(g, X).square().sum().backward()
    expected = 2 * (graph.T @ (graph @ X.detach().cpu().numpy()))
    assert_close(X.grad.cpu().numpy(), expected, np.float64)
    assert torch.cuda.current_device() == 0
