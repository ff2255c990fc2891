"""Fused SDDMM -> SpMM kernels: ``(A ⊙ (X Y^T)) Z`` (CS267 report, section 6.2) and graph
attention ``softmax_row(A ⊙ (Q K^T)) V`` (the GAT pattern: SDDMM, edge softmax, SpMM), plus the
edge-softmax kernel the unfused attention path needs.

The fused kernels never write the nnz intermediate: each warp owns a row, computes an entry's
score and immediately accumulates ``score * Z[j]`` into registers, so, unlike the report's
kernel blocked over the sparse matrix, no atomics are needed.
"""
import math

from numba import cuda

from ..dtypes import kernel_format
from . import launch
from .device import ROW_WARPS_PER_BLOCK, WARP_SIZE, cdiv, row_warp_grid
from .intrinsics import converters, shfl_down, shfl_idx, value_types, vector_load, vector_width, warp_sum

WARP = WARP_SIZE
#: Output columns per lane per pass (grid.y covers wider outputs): 32 * 8 = 256 per warp.
MAX_PER_LANE = 8


def per_lane(n_cols):
    """Accumulators per lane for an output of ``n_cols`` columns: 1, 2, 4 or 8."""
    need = max(1, cdiv(n_cols, WARP))
    return min(MAX_PER_LANE, 1 << (need - 1).bit_length())


def lane_width(n_cols, itemsize, *arrays):
    """Columns of one vector load in rows of ``n_cols`` columns of ``arrays``: as wide as
    :func:`intrinsics.vector_width` allows (alignment, ``n_cols`` a multiple), then halved while
    the warp still covers ``n_cols`` in one pass (as many load rounds, fewer conversions and
    products per lane)."""
    width = vector_width(n_cols, itemsize, *arrays)
    while width > 1 and WARP * (width // 2) >= n_cols:
        width //= 2
    return width


def row_widths(X, Y, Z, n_cols):
    """(xy_width, z_width) of :func:`fused_row_kernel` for these operands and ``n_cols`` output
    columns: vectors over X[i] and Y[j] (dot products over K) and over Z[j] (at most
    :func:`per_lane` columns: a lane's accumulators hold whole vectors)."""
    itemsize = X.dtype.itemsize
    return lane_width(X.shape[1], itemsize, X, Y), min(per_lane(n_cols), lane_width(n_cols, itemsize, Z))


@launch.kernel_factory
def fused_row_kernel(q, value_dtype, softmax, xy_width=1, z_width=1):
    """Compile-once factory of the fused ``(A ⊙ (X Y^T)) Z`` kernel of the CS267 report
    (section 6.2; ``softmax`` False) and of fused graph attention ``softmax_row(A ⊙ (Q K^T)) V``
    (True, with X, Y, Z = Q, K, V).

    Thread mapping: one warp per row i; for each stored (i, j) the warp computes
    ``s = a_ij <X[i], Y[j]>``, lane l reading the ``xy_width``-wide vectors of X[i] and Y[j] at
    columns ``k = xy_width * l + 32 * xy_width * r`` (a shuffle sum over the lanes), then adds
    ``s * Z[j, c:c + z_width]`` for its ``q / z_width`` vectors at ``c = n0 + z_width * l +
    32 * z_width * r`` (a warp's loads contiguous: coalesced); blockIdx.y picks ``n0`` (tiles of
    ``32 q`` columns).  The caller picks widths that the column counts and the operands'
    alignment allow (:func:`row_widths`); 16-bit values are loaded as 32-bit words and
    converted to float32 in registers.  The softmax is computed online (running maximum and
    sum, earlier terms rescaled when the maximum grows, as in FlashAttention), so scores are
    never stored; rows with no stored entry give 0, entries scoring -inf weight 0 (a row of
    them NaN, as the unfused path's exp(-inf + inf)).  Without it the rescale factors are the
    constant 1 and fold away.  The output is rounded once, at the end.
    """
    _, value_type, compute = value_types(value_dtype)
    to_compute, to_storage = converters(value_dtype)
    zero, one, lowest, nan = compute(0), compute(1), compute(-math.inf), compute(math.nan)
    warps = ROW_WARPS_PER_BLOCK
    if q % z_width:
        raise ValueError(f"z_width {z_width} must divide the {q} columns per lane")
    load_xy = vector_load(xy_width, fmt=value_dtype)
    load_z = vector_load(z_width, fmt=value_dtype)
    vectors = q // z_width
    xy_span, z_span = WARP * xy_width, WARP * z_width

    @cuda.jit
    def fused_row(indptr, indices, data, X, Y, Z, out):
        lane = cuda.threadIdx.x % WARP
        row = cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP
        if row >= out.shape[0]:
            return
        n = out.shape[1]
        first = cuda.blockIdx.y * WARP * q + z_width * lane  # this lane's first output column
        acc = cuda.local.array(q, value_type)
        for r in range(q):
            acc[r] = zero
        running_max = lowest
        running_sum = zero
        for p in range(indptr[row], indptr[row + 1]):
            j = indices[p]
            partial = zero
            for k in range(xy_width * lane, X.shape[1], xy_span):
                x = load_xy(X, row, k)
                y = load_xy(Y, j, k)
                for v in range(xy_width):
                    partial += x[v] * y[v]
            s = to_compute(data[p]) * warp_sum(partial)
            rescale = one
            weight = s
            if softmax:
                if s == lowest:  # weight 0 (exp(-inf - max) is NaN while the maximum is still -inf)
                    weight = zero
                else:  # (a NaN score makes the row NaN, as the reference's softmax does)
                    new_max = max(running_max, s)
                    rescale = math.exp(running_max - new_max)
                    weight = math.exp(s - new_max)
                    running_max = new_max
                running_sum = running_sum * rescale + weight
            for r in range(vectors):
                c = first + z_span * r
                if c < n:  # n is a multiple of z_width: the whole vector lies in the row
                    z = load_z(Z, j, c)
                    for v in range(z_width):
                        acc[r * z_width + v] = acc[r * z_width + v] * rescale + weight * z[v]
        scale = one
        if softmax:  # (a sum of 0: no entry, giving 0, or every score -inf: NaN, as unfused)
            scale = one / running_sum if running_sum > zero else (nan if running_max == lowest
                                                                   and indptr[row + 1] > indptr[row] else zero)
        for r in range(vectors):
            c = first + z_span * r
            if c < n:
                for v in range(z_width):
                    out[row, c + v] = to_storage(acc[r * z_width + v] * scale)

    return fused_row


@launch.kernel_factory
def edge_softmax_kernel(value_dtype):
    """Compile-once factory of the per-row softmax over stored values (unfused attention).

    Thread mapping: one warp per row; lanes stride over the row's entries for the maximum,
    then the sum of exponentials (shuffle reductions), then write ``exp(v - max) / sum``.
    """
    compute = value_types(value_dtype)[2]
    to_compute, to_storage = converters(value_dtype)
    zero, lowest = compute(0), compute(-math.inf)
    warps = ROW_WARPS_PER_BLOCK

    @cuda.jit
    def edge_softmax(indptr, values, out):
        lane = cuda.threadIdx.x % WARP
        row = cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP
        if row >= indptr.shape[0] - 1:
            return
        lo, hi = indptr[row], indptr[row + 1]
        largest = lowest
        for p in range(lo + lane, hi, WARP):
            largest = max(largest, to_compute(values[p]))
        offset = WARP // 2
        while offset > 0:  # max over the warp, then broadcast
            largest = max(largest, shfl_down(largest, offset))
            offset //= 2
        largest = shfl_idx(largest, 0)
        total = zero
        for p in range(lo + lane, hi, WARP):
            total += math.exp(to_compute(values[p]) - largest)
        total = warp_sum(total)
        for p in range(lo + lane, hi, WARP):
            out[p] = to_storage(math.exp(to_compute(values[p]) - largest) / total)

    return edge_softmax


def sddmm_spmm(A, X, Y, Z, out, *, stream=0):
    """Launch the fused ``out = (A ⊙ (X Y^T)) Z``."""
    _fused_row(A, X, Y, Z, out, False, stream)


def attention(A, Q, K, V, out, *, stream=0):
    """Launch fused graph attention ``out = softmax_row(A ⊙ (Q K^T)) V``."""
    _fused_row(A, Q, K, V, out, True, stream)


def _fused_row(A, X, Y, Z, out, softmax, stream):
    m, n = out.shape
    if m == 0 or n == 0:
        return
    q = per_lane(n)
    widths = row_widths(X, Y, Z, n)  # (from the operands' alignment: part of the key)
    grid, block = row_warp_grid(m, n, WARP * q)
    kernel = fused_row_kernel(q, kernel_format(A.dtype), softmax, *widths)
    key = ("fused", softmax, q, widths, X.shape, Y.shape, Z.shape, X.dtype.str)
    launch.run_bound(A.cache, key, kernel, grid, block, stream, (A.indptr, A.indices, A.data, X, Y, Z, out),
                     (3, 4, 5, 6))


def edge_softmax(A, values, out, *, stream=0):
    """Launch the per-row softmax of ``values`` (one per stored entry of A) into ``out``."""
    m = A.shape[0]
    if m == 0 or A.nnz == 0:
        return
    grid, block = row_warp_grid(m, 1, 1)
    launch.run(edge_softmax_kernel(kernel_format(A.dtype)), grid, block, stream, A.indptr, values, out)
