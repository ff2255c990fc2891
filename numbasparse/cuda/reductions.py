"""Device functions of the SpMM reductions (:mod:`numbasparse.reductions` defines them)."""
from numba import cuda

from .intrinsics import max_nan, min_nan

from ..reductions import CODES, MAX, MEAN, MIN, SUM, initial  # noqa: F401  (re-exported for kernels)


@cuda.jit(device=True, inline="always")
def combine(code, acc, x):
    """acc (reduce) x; for max and min a NaN on either side wins (as ``torch.amax``)."""
    if code == MAX:
        return max_nan(acc, x)
    if code == MIN:
        return min_nan(acc, x)
    return acc + x


@cuda.jit(device=True, inline="always")
def finalize(code, acc, count, zero):
    """Value written for a row with ``count`` stored entries and accumulator ``acc``;
    ``zero`` is 0 in the output's type (``acc`` may be +-inf for an empty row)."""
    if count == 0:
        return zero
    if code == MEAN:
        return acc / count
    return acc
