"""Dependency checks that must run before numba is imported."""
import re

import numpy

# numba-cuda 0.30.4 calls ``np.row_stack`` (removed in numpy 2.5) when it compiles
# a kernel.  pyproject.toml declares the same bound; a test checks they agree.
NUMPY_UPPER = (2, 5)


def numpy_version(text):
    """(major, minor) of a numpy version string such as '2.4.6' or '2.5.0rc1'."""
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"cannot parse numpy version {text!r}")
    return int(match.group(1)), int(match.group(2))


def check_numpy(version=None):
    """Raise ImportError when the installed numpy cannot compile CUDA kernels."""
    version = numpy.__version__ if version is None else version
    if numpy_version(version) >= NUMPY_UPPER:
        bound = ".".join(map(str, NUMPY_UPPER))
        raise ImportError(
            f"numbasparse needs numpy<{bound}, found numpy {version}: numba-cuda fails to "
            f"compile kernels with it (np.row_stack was removed). "
            f"Install a supported numpy with: pip install 'numpy<{bound}'"
        )
