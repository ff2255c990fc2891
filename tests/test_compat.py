"""Compatibility measures (numbasparse/_compat.py)."""
import importlib.util
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import numbasparse  # noqa: F401  (applies the measures)
from numbasparse import _compat

COMPILE = """
import numbasparse, numba
from numba import cuda

def double(a, b):
    i = cuda.grid(1)
    if i < a.shape[0]:
        b[i] = 2 * a[i]

ptx, _ = cuda.compile_ptx(double, (numba.float32[::1], numba.float32[::1]), cc=(9, 0))
print("entry" if ".entry" in ptx else "no entry")
"""


def test_numpy_names_numba_cuda_needs_are_provided_only_where_missing():
    old = types.SimpleNamespace(row_stack=np.vstack, vstack=np.vstack)
    new = types.SimpleNamespace(vstack=np.vstack)  # as numpy 2.5 is
    assert _compat.provide_numpy_names(old) == []
    assert _compat.provide_numpy_names(new) == ["row_stack"] and new.row_stack is np.vstack
    assert hasattr(np, "row_stack")  # done for the real numpy on import


@pytest.mark.skipif(importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.cuda_nvcc") is None,
                    reason="needs the CUDA compiler wheels (pip install '.[cu12]')")
def test_a_kernel_compiles_for_sm_90_after_import_whatever_the_numpy():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    result = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, timeout=300)
    assert result.stdout.strip() == "entry", result.stderr


def test_import_loads_no_optional_framework_nor_scipy_sparse_and_creates_no_cuda_context():
    probe = ("import sys, numbasparse; from numba.cuda.cudadrv import driver; "
             "print([m for m in ('torch', 'cupy', 'networkx', 'torch_geometric', 'scipy.sparse') if m in sys.modules], "
             "driver.driver.pid is None)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          env={k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"})
    assert done.stdout.split() == ["[]", "True"], done.stdout  # nothing loaded, cuInit not called


def test_lazy_module_imports_on_first_use_and_keeps_what_it_found():
    lazy = _compat.LazyModule("json")
    assert "dumps" not in vars(lazy)
    assert lazy.dumps([1]) == "[1]" and "dumps" in vars(lazy)
