"""Test setup: use the Numba CUDA simulator when no GPU is found; skip ``gpu`` tests then."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))  # for ``strategies``


def _gpu_found():
    probe = "from numba import cuda; print(cuda.is_available())"
    try:
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return result.stdout.strip().endswith("True")


# compiled kernels and tuned schedules go to disk: keep the tests' out of the user's cache
os.environ["NUMBASPARSE_CACHE"] = tempfile.mkdtemp(prefix="numbasparse-tests-")

if "NUMBA_ENABLE_CUDASIM" not in os.environ and not _gpu_found():
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # must happen before numba is imported

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# The simulator costs about 1 ms per simulated thread: few, tiny examples.
settings.register_profile("numbasparse", max_examples=25, deadline=None, derandomize=False)
settings.load_profile("numbasparse")


def pytest_report_header(config):
    from numbasparse import dispatch

    return f"numbasparse: CUDA {'on a GPU' if dispatch.gpu_present() else 'on the simulator' if dispatch.simulator_enabled() else 'unavailable'}"


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: a deselected compile check does not start
def pytest_collection_modifyitems(config, items):
    from numbasparse import dispatch

    if not config.option.collectonly:
        _compile_check_in_background(items)
    if dispatch.gpu_present():
        return
    skip = pytest.mark.skip(reason="needs a real CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_background = []  # the module of tests/cuda/test_compile.py, once it started its check


def _compile_check_in_background(items):
    """Start the compile check of ``tests/cuda/test_compile.py`` now and run its test last (its
    module docstring says why)."""
    check = [item for item in items if item.name == "test_every_kernel_compiles_without_spills_or_float64_arithmetic"]
    if check and check[0].module.compiler_wheels_present():
        items[:] = [item for item in items if item is not check[0]] + check
        check[0].module.start_report()
        _background.append(check[0].module)


def pytest_sessionfinish(session, exitstatus):
    for module in _background:  # a session stopped before the check's test (-x, Ctrl-C): stop it too
        module.stop_report()
