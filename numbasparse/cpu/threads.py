"""Numba's threading layer for the CPU backend, and a lock for layers that are not thread-safe.

Numba runs ``parallel=True`` kernels on one of three threading layers (``tbb``, ``omp``,
``workqueue``), picked once per process, when the first parallel kernel runs.  Its default
order prefers OpenMP over the workqueue, and on Linux that is GNU OpenMP, which aborts every
child forked after it started ("fork() called from a process already using GNU OpenMP"):
PyTorch DataLoader workers and ``multiprocessing`` pools die.  So, unless the user chose a
layer, we ask for Numba's ``'forksafe'`` selection: TBB where it is installed (fork- and
thread-safe), else the workqueue on Linux and OpenMP elsewhere (Intel/LLVM OpenMP is
fork-safe).  The workqueue is not thread-safe (Numba aborts the process when two Python
threads run parallel kernels at once), so :func:`parallel_call` serialises the kernels unless
the layer in use is known to be thread-safe.

A user's choice wins: ``NUMBA_THREADING_LAYER`` in the environment, or
``numba.config.THREADING_LAYER`` set (in code or ``.numba_config.yaml``) to anything but
``'default'`` before numbasparse is imported.  Nothing can change the layer once Numba has
launched its threads (another library ran a parallel kernel first): then that layer stays.
"""
import os
import threading

from numba.core import config

FORK_SAFE_CHOICE = "forksafe"
THREAD_SAFE_LAYERS = ("tbb", "omp")  # Numba's documentation: both may be called from many threads

_lock = threading.Lock()
_thread_safe = None  # unknown until Numba has launched its threads


def _launched_layer():
    """The layer Numba launched ('tbb', 'omp', 'workqueue'), or None before the first kernel."""
    from numba.np.ufunc import parallel

    try:
        return parallel.threading_layer()
    except ValueError:  # "Threading layer is not initialized."
        return None


def choose_threading_layer():
    """Ask for Numba's fork-safe threading layer, unless the user (or a launched layer) decided.

    Returns the value of ``numba.config.THREADING_LAYER`` now in force."""
    if "NUMBA_THREADING_LAYER" in os.environ or _launched_layer() is not None:
        return config.THREADING_LAYER
    # numba's compiler re-reads NUMBA_* variables when they changed since the last read, which
    # would put 'default' back: read them now, so that our choice is the last word
    config.reload_config()
    if str(config.THREADING_LAYER).lower() in ("default", FORK_SAFE_CHOICE):
        config.THREADING_LAYER = FORK_SAFE_CHOICE
    return config.THREADING_LAYER


def _thread_safe_layer():
    global _thread_safe
    if _thread_safe is None:
        layer = _launched_layer()
        if layer is None:
            choose_threading_layer()  # again, in case NUMBA_* variables changed since import
            return False  # the call about to run launches the layer: under the lock
        _thread_safe = layer in THREAD_SAFE_LAYERS
    return _thread_safe


def parallel_call(kernel, *args):
    """``kernel(*args)`` for a ``parallel=True`` kernel, one thread at a time unless Numba's
    threading layer is thread-safe (TBB, OpenMP).  Each kernel uses every core, so serialising
    concurrent calls costs little throughput; it keeps the workqueue from aborting."""
    if _thread_safe_layer():
        return kernel(*args)
    with _lock:
        return kernel(*args)


def _new_lock_in_child():
    # a fork taken while another thread held the lock would leave the child's copy held forever
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)
