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
from .intrinsics import converters, shfl_down, shfl_idx, value_types, warp_sum

WARP = WARP_SIZE
#: Output columns per lane per pass (grid.y covers wider outputs): 32 * 8 = 256 per warp.
MAX_PER_LANE = 8


def per_lane(n_cols):
    """Accumulators per lane for an output of ``n_cols`` columns: 1, 2, 4 or 8."""
    need = max(1, cdiv(n_cols, WARP))
    return min(MAX_PER_LANE, 1 << (need - 1).bit_length())


@launch.kernel_factory
def fused_row_kernel(q, value_dtype, softmax):
    """Compile-once factory of the fused ``(A ⊙ (X Y^T)) Z`` kernel (``softmax`` False) and of
    fused graph attention ``softmax_row(A ⊙ (Q K^T)) V`` (True, with X, Y, Z = Q, K, V).

    Thread mapping: one warp per row i; for each stored (i, j) the warp computes
    ``s = a_ij <X[i], Y[j]>`` (lanes over k, shuffle sum), then lane l adds ``s * Z[j, c]``
    for its ``q`` columns ``c = n0 + l + 32 r`` (coalesced); blockIdx.y picks ``n0``.  The
    softmax is computed online (running maximum and sum, earlier terms rescaled when the
    maximum grows, as in FlashAttention), so scores are never stored; rows with no stored
    entry give 0.  Without it the rescale factors are the constant 1 and fold away.  16-bit
    operands are read into float32 (coalesced over the lanes) and the output rounded once.
    """
    _, value_type, compute = value_types(value_dtype)
    to_compute, to_storage = converters(value_dtype)
    zero, one, lowest = compute(0), compute(1), compute(-math.inf)
    warps = ROW_WARPS_PER_BLOCK

    @cuda.jit
    def fused_row(indptr, indices, data, X, Y, Z, out):
        lane = cuda.threadIdx.x % WARP
        row = cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP
        if row >= out.shape[0]:
            return
        n = out.shape[1]
        n0 = cuda.blockIdx.y * WARP * q
        acc = cuda.local.array(q, value_type)
        for r in range(q):
            acc[r] = zero
        running_max = lowest
        running_sum = zero
        for p in range(indptr[row], indptr[row + 1]):
            j = indices[p]
            partial = zero
            for k in range(lane, X.shape[1], WARP):
                partial += to_compute(X[row, k]) * to_compute(Y[j, k])
            s = to_compute(data[p]) * warp_sum(partial)
            rescale = one
            weight = s
            if softmax:
                new_max = max(running_max, s)
                rescale = math.exp(running_max - new_max)
                weight = math.exp(s - new_max)
                running_sum = running_sum * rescale + weight
                running_max = new_max
            for r in range(q):
                c = n0 + lane + WARP * r
                if c < n:
                    acc[r] = acc[r] * rescale + weight * to_compute(Z[j, c])
        scale = one
        if softmax:
            scale = one / running_sum if running_sum > zero else zero
        for r in range(q):
            c = n0 + lane + WARP * r
            if c < n:
                out[row, c] = to_storage(acc[r] * scale)

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
    grid, block = row_warp_grid(m, n, WARP * q)
    launch.run(fused_row_kernel(q, kernel_format(A.dtype), softmax), grid, block, stream, A.indptr, A.indices,
               A.data, X, Y, Z, out)


def edge_softmax(A, values, out, *, stream=0):
    """Launch the per-row softmax of ``values`` (one per stored entry of A) into ``out``."""
    m = A.shape[0]
    if m == 0 or A.nnz == 0:
        return
    grid, block = row_warp_grid(m, 1, 1)
    launch.run(edge_softmax_kernel(kernel_format(A.dtype)), grid, block, stream, A.indptr, values, out)
