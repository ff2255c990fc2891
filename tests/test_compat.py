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
