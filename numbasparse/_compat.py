"""Compatibility measures for the libraries numbasparse depends on, applied on import, before
numba-cuda compiles anything.  Each one says what it works around and when it can go.

numpy 2.5 removed ``np.row_stack`` (an alias of ``np.vstack`` since numpy 2.0), and numba-cuda
0.30.4, its last release, registers ``overload(np.row_stack)`` when it compiles its first kernel:
every kernel fails to compile with AttributeError (numba-cuda #907, closed as "unlikely to fix").
Providing the name lets numba-cuda register its overload; nothing in numbasparse calls it.  Drop
this when numba-cuda (or its successor) no longer names ``np.row_stack``.
"""
import numpy

#: numpy names that numba-cuda 0.30.4 refers to, and what stands in for each where numpy lacks it.
MISSING_NUMPY_NAMES = {"row_stack": "vstack"}


def provide_numpy_names(module=numpy):
    """Give ``module`` (numpy) the names of MISSING_NUMPY_NAMES it lacks; return those given."""
    given = []
    for name, stand_in in MISSING_NUMPY_NAMES.items():
        if not hasattr(module, name):
            setattr(module, name, getattr(module, stand_in))
            given.append(name)
    return given


class LazyModule:
    """A module imported on its first attribute access (each attribute then kept here): keeps
    ``import numbasparse`` from importing scipy (0.45 s on the H100 machine's image), which only
    calls that handle scipy matrices need."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attribute):
        import importlib

        value = getattr(importlib.import_module(self._name), attribute)
        setattr(self, attribute, value)
        return value


scipy_sparse = LazyModule("scipy.sparse")
