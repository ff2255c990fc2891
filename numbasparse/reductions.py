"""The reductions of SpMM, shared by every backend (GE-SpMM's SpMM-like operation, paper 003,
section III-D): ``C[i, j] = reduce_k a_ik * B[k, j]`` over the stored entries of row i.

Empty rows give 0 for every reduction; ``mean`` divides by the number of stored entries of the
row.  NaN products propagate for every reduction and on every backend and kernel: a row with a
NaN product gives NaN, for max and min too (as ``torch.amax`` and ``np.maximum`` do; ``np.fmax``
would ignore it).
Kernel factories take the integer code as a compile-time constant, so a kernel's branches on
it fold away.
"""
import math

SUM, MEAN, MAX, MIN = 0, 1, 2, 3
CODES = {"sum": SUM, "mean": MEAN, "max": MAX, "min": MIN}
NAMES = tuple(CODES)


def initial(code):
    """Identity element of the reduction, as a Python float: what C is filled with before a
    kernel combines split rows into it (``fill``)."""
    if code == MAX:
        return -math.inf
    if code == MIN:
        return math.inf
    return 0.0


def is_extremum(code):
    """True for max and min, whose identity is not 0 (so a zero fill is not enough)."""
    return code in (MAX, MIN)
