"""Every kernel configuration compiles for sm_90, keeps its accumulators out of local memory
(no spills) and computes float32 and 16-bit values without float64 instructions.  Needs no GPU,
only numba-cuda's NVVM and ptxas (the ``cu12`` extra).

The check (``tools/kernel_report.py``, a few hundred kernels) takes minutes of CPU.  When this test
is collected, ``conftest.py`` starts it in the background at once (niced) and runs this test last,
so that on a machine of few cores its compiles overlap the simulator tests instead of following
them."""
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
_report = None  # (process, its output file) of the background run


def compiler_wheels_present():
    try:
        return importlib.util.find_spec("nvidia.cuda_nvcc") is not None
    except ModuleNotFoundError:  # no "nvidia" namespace at all
        return False


def start_report():
    """Start ``tools/kernel_report.py`` in the background, once (lower priority than the tests)."""
    global _report
    if _report is None:
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        output = tempfile.TemporaryFile(mode="w+")
        niced = (lambda: os.nice(10)) if hasattr(os, "nice") else None
        # its own process group: stop_report() ends its pool of compiling workers with it
        process = subprocess.Popen([sys.executable, str(ROOT / "tools" / "kernel_report.py")], stdout=output,
                                   stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=niced,
                                   start_new_session=True)
        _report = process, output
    return _report


def stop_report():
    """End the background run (and its workers) if it is still running."""
    if _report is not None and _report[0].poll() is None:
        process = _report[0]
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
        process.wait()


@pytest.mark.skipif(not compiler_wheels_present(), reason="needs the CUDA compiler wheels (pip install '.[cu12]')")
def test_every_kernel_compiles_without_spills_or_float64_arithmetic():
    process, output = start_report()  # (already running when conftest started it)
    try:
        process.wait(timeout=1800)
    finally:
        stop_report()
    output.seek(0)
    text = output.read()
    output.close()
    assert process.returncode == 0, text
