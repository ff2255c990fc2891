"""The reductions of GE-SpMM's SpMM-like operation (paper 003, section III-D).

``C[i, j] = reduce_k a_ik * B[k, j]`` over the stored entries of row i.  A kernel factory
captures the reduction code as a compile-time constant, so the branches below fold away
in each compiled kernel.  Empty rows give 0 for every reduction; ``mean`` divides by the
number of stored entries of the row.  NaN products: sum and mean propagate them; for max and
min the result is unspecified (a NaN may or may not win, depending on the order in which the
kernel meets the entries and on the split rows' integer atomics).
"""
import math

from numba import cuda

SUM, MEAN, MAX, MIN = 0, 1, 2, 3
CODES = {"sum": SUM, "mean": MEAN, "max": MAX, "min": MIN}


def initial(code):
    """Identity element of the reduction, as a Python float."""
    if code == MAX:
        return -math.inf
    if code == MIN:
        return math.inf
    return 0.0


@cuda.jit(device=True, inline="always")
def combine(code, acc, x):
    if code == MAX:
        return max(acc, x)
    if code == MIN:
        return min(acc, x)
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
