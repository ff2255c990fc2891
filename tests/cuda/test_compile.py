"""Every kernel configuration compiles for sm_90 and keeps its accumulators out of local
memory (no spills).  Needs no GPU, only numba-cuda's NVVM and ptxas (the ``cu12`` extra)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _has_cuda_compiler_wheels():
    try:
        return importlib.util.find_spec("nvidia.cuda_nvcc") is not None
    except ModuleNotFoundError:  # no "nvidia" namespace at all
        return False


@pytest.mark.skipif(not _has_cuda_compiler_wheels(),
                    reason="needs the CUDA compiler wheels (pip install '.[cu12]')")
def test_every_kernel_compiles_without_spills():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "kernel_report.py")],
                            capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
