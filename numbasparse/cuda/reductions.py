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


def mean_scale(code, compute):
    """Device function ``scale(count)``: what a row's accumulator of ``count`` stored entries is
    multiplied by, in the Numba float type ``compute``: 1 / count for the mean (one division a
    row, not one per column; ``acc / count`` would divide in float64, as Numba promotes a float32
    over an integer), else 1.  ``acc * scale`` may differ from ``acc / count`` by one rounding
    (at most about an ulp)."""
    one = compute(1)

    @cuda.jit(device=True, inline="always")
    def scale(count):
        return one / compute(count) if code == MEAN else one

    return scale


@cuda.jit(device=True, inline="always")
def finalize(code, acc, count, scale, zero):
    """Value written for a row with ``count`` stored entries and accumulator ``acc``
    (``scale``: :func:`mean_scale`'s); ``zero`` is 0 in the output's type (``acc`` may be +-inf
    for an empty row)."""
    if count == 0:
        return zero
    if code == MEAN:
        return acc * scale
    return acc
