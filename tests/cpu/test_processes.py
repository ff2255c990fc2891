"""The CPU backend after fork (multiprocessing, DataLoader workers) and from several threads.

Numba's default threading layer on Linux is GNU OpenMP, which kills every child forked after
the parent used it; ``numbasparse.cpu.threads`` picks a fork-safe layer instead, and serialises
the kernels where that layer is not thread-safe (the workqueue aborts the process otherwise).
Every test has a timeout, so that a hang fails instead of blocking the run; the thread test
runs in a subprocess, so that an abort fails one test instead of killing pytest."""
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import numbasparse as ns
from numbasparse.cpu import threads
from numbasparse.reference import relative_error, spmm_reference

ROOT = Path(__file__).parents[2]
TIMEOUT = 60
TOLERANCE = 1e-5  # float32 results against the float64 reference

# fork() from a multi-threaded process (Numba's worker threads) warns from Python 3.12 on
pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")


def tiny_problem(seed=0, n_rows=60, n_cols=8):
    rng = np.random.default_rng(seed)
    A = sp.random(n_rows, n_rows, density=0.1, format="csr", dtype=np.float32, random_state=rng)
    B = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    return A, B


def user_chose_a_fork_unsafe_layer():
    return os.environ.get("NUMBA_THREADING_LAYER", "").lower() == "omp" and sys.platform.startswith("linux")


@pytest.fixture(scope="module")
def parent_used_the_cpu_backend():
    """Run the CPU backend in this process first: its threading layer is then launched."""
    A, B = tiny_problem()
    assert relative_error(ns.spmm(A, B, backend="cpu"), spmm_reference(A, B)) <= TOLERANCE
    layer = numba.threading_layer()
    if user_chose_a_fork_unsafe_layer():
        pytest.skip("NUMBA_THREADING_LAYER=omp (GNU OpenMP) was chosen by the user: not fork-safe")
    return layer


def test_the_threading_layer_is_fork_safe(parent_used_the_cpu_backend):
    if sys.platform.startswith("linux"):
        assert parent_used_the_cpu_backend in ("tbb", "workqueue")
    else:
        assert parent_used_the_cpu_backend in ("tbb", "omp", "workqueue")


def _child_spmm(seed, reduce, queue):
    A, B = tiny_problem(seed)
    C = ns.spmm(A, B, reduce=reduce, backend="cpu")
    queue.put((seed, reduce, relative_error(C, spmm_reference(A, B, reduce))))


def test_forked_children_run_the_cpu_backend_after_the_parent(parent_used_the_cpu_backend):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    jobs = [(1, "sum"), (2, "max"), (3, "mean")]
    procs = [ctx.Process(target=_child_spmm, args=(seed, reduce, queue)) for seed, reduce in jobs]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=TIMEOUT) for _ in jobs]
    finally:
        for p in procs:
            p.join(timeout=TIMEOUT)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert sorted((seed, reduce) for seed, reduce, _ in results) == sorted(jobs)
    assert all(err <= TOLERANCE for _, _, err in results), results
    # and the parent still works after its children
    A, B = tiny_problem(4)
    assert relative_error(ns.spmm(A, B, backend="cpu"), spmm_reference(A, B)) <= TOLERANCE


class _SpmmDataset:
    """Item i: ``A_i @ B_i`` by the CPU backend, and the float64 reference."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        A, B = tiny_problem(10 + i)
        return ns.spmm(A, B, backend="cpu"), spmm_reference(A, B)


def test_dataloader_workers_run_the_cpu_backend(parent_used_the_cpu_backend):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    loader = DataLoader(_SpmmDataset(), batch_size=None, num_workers=2, multiprocessing_context="fork",
                        timeout=TIMEOUT)
    seen = 0
    for C, reference in loader:
        assert isinstance(C, torch.Tensor)
        assert relative_error(C.numpy(), reference.numpy()) <= TOLERANCE
        seen += 1
    assert seen == len(_SpmmDataset())


_THREADS_SCRIPT = textwrap.dedent("""
    import threading, sys
    import numpy as np, scipy.sparse as sp, numba
    import numbasparse as ns
    from numbasparse.reference import relative_error, sddmm_reference, spmm_reference

    rng = np.random.default_rng(0)
    A = sp.random(1500, 1500, density=0.01, format="csr", dtype=np.float32, random_state=rng)
    B = rng.standard_normal((1500, 32)).astype(np.float32)
    X = rng.standard_normal((1500, 16)).astype(np.float32)
    ref_spmm, ref_sddmm = spmm_reference(A, B), sddmm_reference(A, X, X)
    errors, start = [], threading.Barrier(2)

    def spmm_loop():
        start.wait()
        for _ in range(30):
            errors.append(relative_error(ns.spmm(A, B, backend="cpu"), ref_spmm))

    def mixed_loop():
        start.wait()
        for _ in range(15):
            errors.append(relative_error(ns.spmm(A, B, backend="cpu"), ref_spmm))
            errors.append(relative_error(ns.sddmm(A, X, X, backend="cpu").data, ref_sddmm))

    workers = [threading.Thread(target=spmm_loop), threading.Thread(target=mixed_loop)]
    for t in workers:
        t.start()
    for t in workers:
        t.join({timeout})
    assert not any(t.is_alive() for t in workers), "a thread hung"
    print(numba.threading_layer(), len(errors), max(errors))
""")


def test_two_threads_at_once_on_the_same_csr_give_correct_results():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT.format(timeout=TIMEOUT)], capture_output=True,
                          text=True, timeout=TIMEOUT * 2, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    layer, count, worst = proc.stdout.split()
    assert int(count) == 60
    assert float(worst) <= TOLERANCE


def test_the_users_threading_layer_keeps_priority():
    """NUMBA_THREADING_LAYER set by the user wins over our choice (here: the workqueue, which
    is what we would choose anyway where TBB is missing, so ask for the one we would not)."""
    wanted = "omp" if numba.config.THREADING_LAYER != "omp" else "workqueue"
    script = textwrap.dedent(f"""
        import numpy as np, scipy.sparse as sp, numba
        import numbasparse as ns
        A = sp.random(20, 20, density=0.2, format="csr", random_state=0)
        ns.spmm(A, np.ones((20, 3)), backend="cpu")
        print(numba.config.THREADING_LAYER, numba.threading_layer())
    """)
    env = dict(os.environ, NUMBA_THREADING_LAYER=wanted,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT * 2,
                          env=env, cwd=ROOT)
    if proc.returncode != 0 and "No threading layer could be loaded" in proc.stderr:
        pytest.skip(f"threading layer {wanted} is not available here")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [wanted, wanted]


def test_kernels_are_serialised_only_where_the_layer_is_not_thread_safe(parent_used_the_cpu_backend):
    assert threads._thread_safe_layer() == (parent_used_the_cpu_backend in threads.THREAD_SAFE_LAYERS)


def test_parallel_call_releases_its_lock_when_the_kernel_raises():
    def failing(*args):
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        threads.parallel_call(failing, 1, 2)
    assert not threads._lock.locked()
    assert threads.parallel_call(lambda a, b: a + b, 1, 2) == 3
