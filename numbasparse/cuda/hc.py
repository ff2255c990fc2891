"""HC-SpMM (paper 001): per 16-row window, a dense-tile path (on the tensor cores through
``mma.sync`` for TF32 and 16-bit operands, else emulated on CUDA cores) or a CUDA-core path over
the window's CSR entries, in one launch; and the fused GCN layer ``(A @ X) @ W`` built from the
same two paths (paper 001, section V-A; its tiles emulated).

Which path each window takes is a boolean array per window (:func:`paths`): the
logistic-regression selector of :mod:`numbasparse.select` fills it, or a forced mode; a tile
result that is not finite in a block's columns is computed again on the CUDA-core path.  The
windows' arrays come from :func:`numbasparse.preprocess.row_windows.row_windows`, uploaded once
per pattern (:func:`windows`).
"""
import numba
import numpy as np
from numba import cuda

from ..dtypes import is_half_format, kernel_format
from ..preprocess.row_windows import TILE_COLS, WINDOW, fragment_sources, row_windows
from . import launch, mma
from .device import cdiv
from .intrinsics import converters, value_types, vector_load, vector_width

THREADS = 128             # 4 warps per window
COLS = 32                 # output columns per pass: thread t owns columns t % 8 + 8 q, q < 4
PER_THREAD = WINDOW * COLS // THREADS  # 4 outputs per thread
STAGE = THREADS           # CSR entries staged per round on the CUDA-core path
FUSED_K = 256             # columns of A @ X kept in shared memory by the fused kernel per pass

assert WINDOW * TILE_COLS == THREADS  # one thread per slot of a 16x8 tile
assert THREADS // 32 * 8 == COLS  # the fused layer's mma.sync: each warp one 8-column tile per pass


@launch.kernel_factory
def window_paths(value_dtype, index_dtype, tensor_cores=False, vec4=False):
    """The device function ``window_into(acc, w, col0, use_tiles, ...)``: each thread's 4
    accumulators set to its part of window w's product with 32 columns of B (from ``col0``), on
    the dense-tile path (``tiles_into``) or the CUDA-core path (``cores_into``), as
    ``use_tiles[w]`` says; a tile result that is not finite is computed again on the CUDA-core
    path (where the tile multiplied an Inf or NaN of B by its empty slots).

    Thread mapping: 128 threads per window; thread t owns row ``t // 8`` of the window and
    columns ``col0 + t % 8 + 8 q`` (q < 4), so each warp instruction reads 32 contiguous bytes
    of a row of B per row of the window.  16-bit values are read into float32.

    ``tensor_cores`` (float32 values: ``mma.sync`` m16n8k8, TF32 inputs rounded from float32;
    float16 and bfloat16 values: m16n8k16, whose products of 16-bit inputs are exact; FP32
    accumulators in both): the dense-tile path is ``tiles_into_mma`` and the arguments
    ``tile_entry, tile_slot`` are the fragment sources ``frag_base, frag_src`` of
    :func:`fragments`.  ``vec4``: B's rows read 4 values per load
    (N a multiple of 4, B aligned to 4 values).
    """
    _, value_type, compute = value_types(value_dtype)
    to_compute = converters(value_dtype)[0]
    index_type = numba.from_dtype(np.dtype(index_dtype))
    zero = compute(0)
    tile_size = WINDOW * TILE_COLS
    b_size = TILE_COLS * COLS
    out_size = WINDOW * COLS
    half = is_half_format(value_dtype)
    tf32 = tensor_cores and not half
    if tf32 and value_dtype != "<f4":
        raise ValueError(f"TF32 tensor cores take float32 values, not {value_dtype}")
    mma_tf32, to_tf32 = (mma.mma("tf32"), mma.to_tf32()) if tf32 else (None, None)
    mma_16 = mma.mma("bf16" if value_dtype == "bf16" else "f16") if tensor_cores and half else None
    pack_bits = mma.pack_bits
    no_bits = numba.uint16(0)
    load4 = vector_load(4)  # (4 values, or a 16-bit B's 4 values' bits, a lane's 4 or 8 fragment sources)
    partial_size = THREADS // 32 * out_size  # each warp's 16 x 32 partial sums

    @cuda.jit(device=True, inline="always")
    def stage(a_tile, b_tile, w, tile, col0, data, col_ptr, cols, tile_ptr, entry_ptr, tile_entry, tile_slot, B):
        """Window w's 16x8 ``tile`` into shared memory (its nonzeros scattered into a zeroed dense
        tile, one entry per thread at most) and the matching 8 rows x 32 columns of B from
        ``col0`` (cooperatively), then a barrier."""
        t = cuda.threadIdx.x
        n = B.shape[1]
        width = col_ptr[w + 1] - col_ptr[w]
        a_tile[t] = zero
        cuda.syncthreads()
        p = entry_ptr[tile] + t
        if p < entry_ptr[tile + 1]:
            a_tile[tile_slot[p]] = to_compute(data[tile_entry[p]])
        first = (tile - tile_ptr[w]) * TILE_COLS
        for e in range(t, b_size, THREADS):
            k = e // COLS
            j = col0 + e - k * COLS
            if first + k < width and j < n:
                b_tile[e] = to_compute(B[cols[col_ptr[w] + first + k], j])
            else:
                b_tile[e] = zero
        cuda.syncthreads()

    @cuda.jit(device=True, inline="always")
    def tiles_into(acc, w, col0, data, col_ptr, cols, tile_ptr, entry_ptr, tile_entry, tile_slot, B):
        """Dense-tile path (paper 001, Algorithm 2 and Figure 6, on CUDA cores): per 16x8 tile,
        ``stage`` it and its B rows, then MMA-style 8-long dot products."""
        t = cuda.threadIdx.x
        r = t // 8
        a_tile = cuda.shared.array(tile_size, value_type)
        b_tile = cuda.shared.array(b_size, value_type)
        for tile in range(tile_ptr[w], tile_ptr[w + 1]):
            stage(a_tile, b_tile, w, tile, col0, data, col_ptr, cols, tile_ptr, entry_ptr, tile_entry, tile_slot, B)
            for q in range(PER_THREAD):
                jj = t % 8 + 8 * q
                s = acc[q]
                for k in range(TILE_COLS):
                    s += a_tile[r * TILE_COLS + k] * b_tile[k * COLS + jj]
                acc[q] = s
            cuda.syncthreads()

    @cuda.jit(device=True, inline="always")
    def b_row_values(B, k, j, n):
        """B[k, j:j + 4] rounded to TF32 (zeros past column n or for k < 0: padding columns)."""
        if k < 0 or j >= n:
            return zero, zero, zero, zero
        if vec4:
            v0, v1, v2, v3 = load4(B, k, j)
            return to_tf32(v0), to_tf32(v1), to_tf32(v2), to_tf32(v3)
        v = cuda.local.array(4, value_type)
        for u in range(4):
            v[u] = to_tf32(B[k, j + u]) if j + u < n else zero
        return v[0], v[1], v[2], v[3]

    @cuda.jit(device=True, inline="always")
    def b_row_bits(B, k, j, n):
        """The bits of 16-bit B[k, j:j + 4] (zeros past column n or for k < 0)."""
        if k < 0 or j >= n:
            return no_bits, no_bits, no_bits, no_bits
        if vec4:
            return load4(B, k, j)
        v = cuda.local.array(4, numba.uint16)
        for u in range(4):
            v[u] = B[k, j + u] if j + u < n else no_bits
        return v[0], v[1], v[2], v[3]

    @cuda.jit(device=True, inline="always")
    def bits_at(data, p):
        return data[p] if p >= 0 else no_bits

    @cuda.jit(device=True, inline="always")
    def tf32_fragments(w, step, live, lane, col0, data, col_ptr, cols, frag_base, frag_src, B):
        """Lane (g, t)'s fragments of MMA step ``step`` of window w (8 condensed columns, one
        m16n8k8 per 8 output columns): A's 4 values from the CSR positions ``frag_src`` lists for
        it (-1: an empty slot), and B rows t and t + 4 of the step at columns 4g..4g+3 of the
        block's 32, for all 4 MMAs at once.  Zeros where not ``live`` (past the last step)."""
        g, k4 = lane // 4, lane % 4
        step = step if live else 0  # (no branch around the loads: a dead step reads as empty slots)
        p0, p1, p2, p3 = load4(frag_src, (frag_base[w] + step) * 32 + lane, 0)
        a0 = to_tf32(data[p0]) if live and p0 >= 0 else zero
        a1 = to_tf32(data[p1]) if live and p1 >= 0 else zero
        a2 = to_tf32(data[p2]) if live and p2 >= 0 else zero
        a3 = to_tf32(data[p3]) if live and p3 >= 0 else zero
        kk, last = col_ptr[w] + step * TILE_COLS + k4, col_ptr[w + 1]
        k0 = cols[kk] if live and kk < last else -1
        k1 = cols[kk + 4] if live and kk + 4 < last else -1
        b00, b01, b02, b03 = b_row_values(B, k0, col0 + 4 * g, B.shape[1])
        b10, b11, b12, b13 = b_row_values(B, k1, col0 + 4 * g, B.shape[1])
        return (a0, a1, a2, a3), ((b00, b10), (b01, b11), (b02, b12), (b03, b13))

    @cuda.jit(device=True, inline="always")
    def half_fragments(w, step, live, lane, col0, data, col_ptr, cols, frag_base, frag_src, B):
        """``tf32_fragments`` for 16-bit values on m16n8k16 (16 condensed columns a step, two
        8-column tiles): A's pairs packed from 8 CSR positions, B from rows 2t, 2t + 1, 2t + 8
        and 2t + 9 (8-byte loads of columns 4g..4g+3), packed in pairs."""
        g, k4 = lane // 4, lane % 4
        step = step if live else 0  # (as in tf32_fragments)
        row = (frag_base[w] + step) * 32 + lane
        p0, p1, p2, p3 = load4(frag_src, row, 0)
        p4, p5, p6, p7 = load4(frag_src, row, 4)
        if not live:
            p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = -1
        a0 = pack_bits(bits_at(data, p0), bits_at(data, p1))
        a1 = pack_bits(bits_at(data, p2), bits_at(data, p3))
        a2 = pack_bits(bits_at(data, p4), bits_at(data, p5))
        a3 = pack_bits(bits_at(data, p6), bits_at(data, p7))
        kk, last = col_ptr[w] + step * 2 * TILE_COLS + 2 * k4, col_ptr[w + 1]
        k0 = cols[kk] if live and kk < last else -1
        k1 = cols[kk + 1] if live and kk + 1 < last else -1
        k2 = cols[kk + 8] if live and kk + 8 < last else -1
        k3 = cols[kk + 9] if live and kk + 9 < last else -1
        b00, b01, b02, b03 = b_row_bits(B, k0, col0 + 4 * g, B.shape[1])
        b10, b11, b12, b13 = b_row_bits(B, k1, col0 + 4 * g, B.shape[1])
        b20, b21, b22, b23 = b_row_bits(B, k2, col0 + 4 * g, B.shape[1])
        b30, b31, b32, b33 = b_row_bits(B, k3, col0 + 4 * g, B.shape[1])
        return (a0, a1, a2, a3), ((pack_bits(b00, b10), pack_bits(b20, b30)),
                                  (pack_bits(b01, b11), pack_bits(b21, b31)),
                                  (pack_bits(b02, b12), pack_bits(b22, b32)),
                                  (pack_bits(b03, b13), pack_bits(b23, b33)))

    fragments = tf32_fragments if tf32 else half_fragments
    mma_op = mma_tf32 if tf32 else mma_16
    tiles_per_step = 1 if tf32 else 2  # (16x8 tiles per MMA step)

    @cuda.jit(device=True, inline="always")
    def mma4(d, a, b):
        """One step's 4 MMAs into the accumulators ``d``: MMA j's column n is column 4n + j of
        the block's 32, so one load of B columns 4g..4g+3 feeds all 4."""
        d[0], d[1], d[2], d[3] = mma_op(a[0], a[1], a[2], a[3], b[0][0], b[0][1], d[0], d[1], d[2], d[3])
        d[4], d[5], d[6], d[7] = mma_op(a[0], a[1], a[2], a[3], b[1][0], b[1][1], d[4], d[5], d[6], d[7])
        d[8], d[9], d[10], d[11] = mma_op(a[0], a[1], a[2], a[3], b[2][0], b[2][1], d[8], d[9], d[10], d[11])
        d[12], d[13], d[14], d[15] = mma_op(a[0], a[1], a[2], a[3], b[3][0], b[3][1], d[12], d[13], d[14], d[15])

    @cuda.jit(device=True, inline="always")
    def tiles_into_mma(acc, w, col0, data, col_ptr, cols, tile_ptr, frag_base, frag_src, B):
        """Dense-tile path on the tensor cores, no staging: warp q takes MMA steps q, q + 4, ...
        of the window, two at a time (both steps' loads are issued before their MMAs: a step's
        loads are a chain of three, positions -> values and columns -> B rows, so one step at a
        time leaves the warp waiting on each).  Each lane loads its fragments straight into
        registers (``fragments``); FP32 accumulators in registers across the steps; the 4 warps'
        partial sums meet once in shared memory."""
        t = cuda.threadIdx.x
        lane, warp = t % 32, t // 32
        steps = (tile_ptr[w + 1] - tile_ptr[w] + tiles_per_step - 1) // tiles_per_step
        d = cuda.local.array(16, value_type)
        for u in range(16):
            d[u] = zero
        for r in range(0, steps, 8):  # (every warp the same number of MMAs: the simulator's barriers)
            a, b = fragments(w, r + warp, r + warp < steps, lane, col0, data, col_ptr, cols, frag_base, frag_src, B)
            a2, b2 = fragments(w, r + 4 + warp, r + 4 + warp < steps, lane, col0, data, col_ptr, cols,
                               frag_base, frag_src, B)
            mma4(d, a, b)
            if r + 4 < steps:  # (alike for the whole block; no MMAs on zeros where a round is half full)
                mma4(d, a2, b2)
        warps_into(acc, d)

    @cuda.jit(device=True, inline="always")
    def warps_into(acc, d):
        """``acc`` = the sum of the 4 warps' MMA accumulators ``d`` (4 MMAs x c0..c3 per lane;
        MMA j's c0, c1 are row g, columns 8t + j and 8t + 4 + j of the 32, c2, c3 row g + 8)
        through shared memory, in the threads' output layout."""
        t = cuda.threadIdx.x
        lane, warp = t % 32, t // 32
        g, k4 = lane // 4, lane % 4
        partial = cuda.shared.array(partial_size, value_type)
        base = warp * out_size
        for j in range(4):
            partial[base + g * COLS + 8 * k4 + j] = d[4 * j]
            partial[base + g * COLS + 8 * k4 + 4 + j] = d[4 * j + 1]
            partial[base + (g + 8) * COLS + 8 * k4 + j] = d[4 * j + 2]
            partial[base + (g + 8) * COLS + 8 * k4 + 4 + j] = d[4 * j + 3]
        cuda.syncthreads()
        for q in range(PER_THREAD):
            at = (t // 8) * COLS + t % 8 + 8 * q
            acc[q] = partial[at] + partial[out_size + at] + partial[2 * out_size + at] + partial[3 * out_size + at]
        cuda.syncthreads()

    @cuda.jit(device=True, inline="always")
    def cores_into(acc, w, col0, indptr, indices, data, B):
        """CUDA-core path (paper 001, Algorithm 1 with edge indices staged in shared memory):
        the window's (column, value) entries are staged 128 at a time; each thread then walks
        its row's staged entries for its 4 columns."""
        t = cuda.threadIdx.x
        m = indptr.shape[0] - 1
        n = B.shape[1]
        row = w * WINDOW + t // 8
        staged_col = cuda.shared.array(STAGE, index_type)
        staged_val = cuda.shared.array(STAGE, value_type)
        lo = indptr[w * WINDOW]
        hi = indptr[min((w + 1) * WINDOW, m)]
        row_lo = indptr[min(row, m)]
        row_hi = indptr[min(row + 1, m)]
        for base in range(lo, hi, STAGE):
            if base + t < hi:
                staged_col[t] = indices[base + t]
                staged_val[t] = to_compute(data[base + t])
            cuda.syncthreads()
            for p in range(max(row_lo, base), min(row_hi, base + STAGE)):
                k = staged_col[p - base]
                a = staged_val[p - base]
                for q in range(PER_THREAD):
                    j = col0 + t % 8 + 8 * q
                    if j < n:
                        acc[q] += a * to_compute(B[k, j])
            cuda.syncthreads()

    @cuda.jit(device=True, inline="always")
    def all_finite(acc):
        """Whether every thread's accumulators are finite (for every thread of the block: a
        barrier)."""
        found = 0
        for q in range(PER_THREAD):
            if acc[q] - acc[q] != zero:  # (Inf - Inf and NaN - NaN are NaN)
                found = 1
        return cuda.syncthreads_or(found) == 0

    @cuda.jit(device=True, inline="always")
    def window_into(acc, w, col0, use_tiles, indptr, indices, data, col_ptr, cols, tile_ptr, entry_ptr, tile_entry,
                    tile_slot, B):
        """``acc`` = the window's product with 32 columns of B from ``col0``, on the path
        ``use_tiles[w]`` picks.  A tile result holding an Inf or NaN is computed again on the
        CUDA-core path: a dense tile multiplies B's rows by the zeros of its empty slots too, so
        an Inf or NaN of B (or a value that TF32 rounds to Inf) would reach rows that never read
        it.  Checking the result in registers costs no second read of B."""
        for q in range(PER_THREAD):
            acc[q] = zero
        if use_tiles[w]:
            if tensor_cores:  # (tile_entry, tile_slot: frag_base, frag_src)
                tiles_into_mma(acc, w, col0, data, col_ptr, cols, tile_ptr, tile_entry, tile_slot, B)
            else:
                tiles_into(acc, w, col0, data, col_ptr, cols, tile_ptr, entry_ptr, tile_entry, tile_slot, B)
            if all_finite(acc):
                return
            for q in range(PER_THREAD):
                acc[q] = zero
        cores_into(acc, w, col0, indptr, indices, data, B)

    return window_into


@launch.kernel_factory
def spmm_hc_kernel(value_dtype, index_dtype, tensor_cores=False, vec4=False, float_out=False):
    """Compile-once factory of the hybrid HC-SpMM kernel (sum).

    Thread mapping: one block of 128 threads per (row window, 32 output columns); the window
    takes the dense-tile path where ``use_tiles[w]`` (and its result is finite), else the
    CUDA-core path (HC-SpMM's per-window hybrid, paper 001 section IV-A: no merging, each
    window is one block's).
    """
    _, value_type, _ = value_types(value_dtype)
    to_storage = converters("<f4" if float_out else value_dtype)[1]  # (float_out: a float32 C for 16-bit values)
    window_into = window_paths(value_dtype, index_dtype, tensor_cores, vec4)

    @cuda.jit
    def spmm_hc(indptr, indices, data, col_ptr, cols, tile_ptr, entry_ptr, tile_entry, tile_slot,
                use_tiles, B, C):
        w = cuda.blockIdx.x
        t = cuda.threadIdx.x
        m, n = C.shape
        col0 = cuda.blockIdx.y * COLS
        acc = cuda.local.array(PER_THREAD, value_type)
        window_into(acc, w, col0, use_tiles, indptr, indices, data, col_ptr, cols, tile_ptr, entry_ptr, tile_entry,
                    tile_slot, B)
        row = w * WINDOW + t // 8
        if row < m:
            for q in range(PER_THREAD):
                j = col0 + t % 8 + 8 * q
                if j < n:
                    C[row, j] = to_storage(acc[q])

    return spmm_hc


@launch.kernel_factory
def spmm_dense_kernel(value_dtype, index_dtype, tensor_cores=False):
    """Compile-once factory of the fused GCN layer ``out = (A @ X) @ W`` (paper 001, section
    V-A: aggregation and update in one kernel, the aggregated rows kept in shared memory).

    Thread mapping: one block of 128 threads per row window.  For each slice of at most 256
    columns of X, the block aggregates the window's 16 rows of ``A @ X`` into shared memory,
    32 columns at a time, on the window's path (``use_tiles``); then thread t computes row
    ``t // 8`` of the window times W for columns ``t % 8 + 8 q`` of each 32-column slice of
    ``out``, adding to what earlier slices of X wrote (the block owns its rows: no atomics).
    16-bit operands are computed in float32; a 16-bit ``out`` is rounded once per slice of 256
    columns of X.

    ``tensor_cores``: the product with W on ``mma.sync`` instead (sm_80 and later), warp w
    taking the 16 x 8 tiles of ``out`` at columns ``8 w + 32 i``: TF32 inputs for float32
    operands (m16n8k8), and for 16-bit ones the window's rows of ``A @ X`` rounded to the
    operands' format and multiplied with W's exactly (m16n8k16); FP32 accumulators in both.
    """
    value_type = value_types(value_dtype)[1]
    window_into = window_paths(value_dtype, index_dtype)
    stride = FUSED_K + 1  # padded rows: the 4 rows a warp reads at once sit in different banks
    z_size = WINDOW * stride
    times_w = (_times_w_on_tensor_cores if tensor_cores else _times_w_on_cuda_cores)(value_dtype, stride)

    @cuda.jit
    def spmm_dense(indptr, indices, data, col_ptr, cols, tile_ptr, entry_ptr, tile_entry, tile_slot,
                   use_tiles, X, W, out):
        w = cuda.blockIdx.x
        t = cuda.threadIdx.x
        r = t // 8
        k_total = X.shape[1]
        z = cuda.shared.array(z_size, value_type)
        acc = cuda.local.array(PER_THREAD, value_type)
        for k0 in range(0, max(k_total, 1), FUSED_K):  # one pass when X has no columns: zeros
            # (1) this slice of the window's rows of A @ X into shared memory
            for c0 in range(k0, min(k0 + FUSED_K, k_total), COLS):
                window_into(acc, w, c0, use_tiles, indptr, indices, data, col_ptr, cols, tile_ptr, entry_ptr,
                            tile_entry, tile_slot, X)
                for q in range(PER_THREAD):
                    z[r * stride + c0 - k0 + t % 8 + 8 * q] = acc[q]
            cuda.syncthreads()
            width = min(FUSED_K, k_total - k0)
            # (2) times W's rows of this slice, added to earlier slices' part of out
            times_w(z, width, k0, W, out, w * WINDOW)
            cuda.syncthreads()

    return spmm_dense


def _times_w_on_cuda_cores(value_dtype, stride):
    """The device function ``times_w(z, width, k0, W, out, row0)`` of :func:`spmm_dense_kernel`:
    out[row0:row0 + 16] (+)= z[:, :width] @ W[k0:k0 + width], thread t taking row ``t // 8``
    and columns ``t % 8 + 8 q`` of each 32-column slice of out."""
    value_type, compute = value_types(value_dtype)[1:]
    to_compute, to_storage = converters(value_dtype)
    zero = compute(0)

    @cuda.jit(device=True, inline="always")
    def times_w(z, width, k0, W, out, row0):
        t = cuda.threadIdx.x
        r = t // 8
        row = row0 + r
        m, f = out.shape
        acc = cuda.local.array(PER_THREAD, value_type)
        if row < m:
            for j0 in range(0, f, COLS):
                for q in range(PER_THREAD):
                    acc[q] = zero
                for k in range(width):  # 4 independent sums per thread, one z load per 4 MACs
                    zk = z[r * stride + k]
                    for q in range(PER_THREAD):
                        j = j0 + t % 8 + 8 * q
                        if j < f:
                            acc[q] += zk * to_compute(W[k0 + k, j])
                for q in range(PER_THREAD):
                    j = j0 + t % 8 + 8 * q
                    if j < f:
                        total = acc[q] + to_compute(out[row, j]) if k0 > 0 else acc[q]
                        out[row, j] = to_storage(total)

    return times_w


def _times_w_on_tensor_cores(value_dtype, stride):
    """The device function ``times_w(z, width, k0, W, out, row0)`` of :func:`spmm_dense_kernel`
    with ``tensor_cores``: out[row0:row0 + 16] (+)= z[:, :width] @ W[k0:k0 + width] on
    ``mma.sync``, z the window's 16 rows in shared memory (row stride ``stride``).  Every warp
    runs the same number of instructions (a warp past out's last column multiplies zeros), as
    ``mma.sync`` and the simulator's emulation of it need."""
    half = is_half_format(value_dtype)
    if not half and value_dtype != "<f4":
        raise ValueError(f"the fused layer's tensor cores take float32 or 16-bit values, not {value_dtype}")
    kind = ("bf16" if value_dtype == "bf16" else "f16") if half else "tf32"
    step = mma.SHAPES[kind][2]  # k per instruction
    mma_op, pack_bits = mma.mma(kind), mma.pack_bits
    to_tf32 = None if half else mma.to_tf32()
    to_compute, to_storage = converters(value_dtype)
    no_bits = numba.uint16(0)
    zero = numba.float32(0)

    @cuda.jit(device=True, inline="always")
    def z_at(z, row, k, width):
        return z[row * stride + k] if k < width else zero

    @cuda.jit(device=True, inline="always")
    def w_bits(W, k, j, k_end):
        return W[k, j] if k < k_end and j < W.shape[1] else no_bits

    @cuda.jit(device=True, inline="always")
    def w_value(W, k, j, k_end):
        return to_tf32(W[k, j]) if k < k_end and j < W.shape[1] else zero

    @cuda.jit(device=True, inline="always")
    def store(out, row, j, value, add):
        if row < out.shape[0] and j < out.shape[1]:
            out[row, j] = to_storage(value + to_compute(out[row, j]) if add else value)

    @cuda.jit(device=True, inline="always")
    def half_step(z, width, k, kk, W, j, k_end, g, q, d0, d1, d2, d3):
        # registers of two values, the lower-numbered column (or row) in the low half
        a0 = pack_bits(to_storage(z_at(z, g, k + 2 * q, width)), to_storage(z_at(z, g, k + 2 * q + 1, width)))
        a1 = pack_bits(to_storage(z_at(z, g + 8, k + 2 * q, width)), to_storage(z_at(z, g + 8, k + 2 * q + 1, width)))
        a2 = pack_bits(to_storage(z_at(z, g, k + 2 * q + 8, width)), to_storage(z_at(z, g, k + 2 * q + 9, width)))
        a3 = pack_bits(to_storage(z_at(z, g + 8, k + 2 * q + 8, width)), to_storage(z_at(z, g + 8, k + 2 * q + 9, width)))
        b0 = pack_bits(w_bits(W, kk + 2 * q, j + g, k_end), w_bits(W, kk + 2 * q + 1, j + g, k_end))
        b1 = pack_bits(w_bits(W, kk + 2 * q + 8, j + g, k_end), w_bits(W, kk + 2 * q + 9, j + g, k_end))
        return mma_op(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)

    @cuda.jit(device=True, inline="always")
    def tf32_step(z, width, k, kk, W, j, k_end, g, q, d0, d1, d2, d3):
        a0 = to_tf32(z_at(z, g, k + q, width))
        a1 = to_tf32(z_at(z, g + 8, k + q, width))
        a2 = to_tf32(z_at(z, g, k + q + 4, width))
        a3 = to_tf32(z_at(z, g + 8, k + q + 4, width))
        b0 = w_value(W, kk + q, j + g, k_end)
        b1 = w_value(W, kk + q + 4, j + g, k_end)
        return mma_op(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)

    mma_step = half_step if half else tf32_step

    @cuda.jit(device=True, inline="always")
    def times_w(z, width, k0, W, out, row0):
        lane = cuda.threadIdx.x % 32
        g, q = lane // 4, lane % 4
        k_end = k0 + width
        for j_base in range(0, out.shape[1], COLS):  # (the block's 4 warps x 8 columns)
            j = j_base + 8 * (cuda.threadIdx.x // 32)  # this warp's 8 columns
            d0 = d1 = d2 = d3 = zero
            for k in range(0, width, step):
                d0, d1, d2, d3 = mma_step(z, width, k, k0 + k, W, j, k_end, g, q, d0, d1, d2, d3)
            # the accumulators' elements: (g, 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1)
            store(out, row0 + g, j + 2 * q, d0, k0 > 0)
            store(out, row0 + g, j + 2 * q + 1, d1, k0 > 0)
            store(out, row0 + g + 8, j + 2 * q, d2, k0 > 0)
            store(out, row0 + g + 8, j + 2 * q + 1, d3, k0 > 0)

    return times_w


def windows(A):
    """HC-SpMM's row windows of A: (RowWindows on the host, dict of its device arrays named as
    ``RowWindows.DEVICE_FIELDS``), built on first use and kept in A's cache."""
    def build():
        host = row_windows(A._host)
        return host, {name: cuda.to_device(getattr(host, name)) for name in host.DEVICE_FIELDS}
    return A.cache.get_or_build("plans", ("row_windows",), build)


def paths(A, mode, tiles="emulated"):
    """(host, device) boolean arrays, per row window: True -> dense-tile path.  ``mode`` is
    "hybrid" (the logistic-regression selector for ``tiles``, one of
    :data:`numbasparse.select.TILE_KINDS`), "tiles" or "cores"."""
    def build():
        from .. import select

        host, _ = windows(A)
        if mode == "hybrid":
            choice = select.use_tiles(host, tiles=tiles)
        else:
            choice = np.full(host.n_windows, mode == "tiles", np.bool_)
        return choice, cuda.to_device(choice)
    return A.cache.get_or_build("plans", ("hc_paths", mode, tiles if mode == "hybrid" else None), build)


def fragments(A, mode, tiles):
    """(frag_base, frag_src) on the device: where the tensor-core path finds each lane's A
    fragment, for the windows ``mode`` puts on ``tiles`` ("tf32": m16n8k8's 8-column tiles,
    "half": m16n8k16's 16-column ones; :func:`numbasparse.preprocess.row_windows.fragment_sources`);
    kept in A's cache."""
    def build():
        host, _ = windows(A)
        base, src = fragment_sources(host, paths(A, mode, tiles)[0], A.indices.dtype, tiles == "half")
        return cuda.to_device(base), cuda.to_device(src)
    return A.cache.get_or_build("plans", ("hc_fragments", mode, tiles), build)  # (the paths of (mode, tiles))


def _window_args(A, use_tiles, tile_arrays=None):
    device_windows = windows(A)[1]
    names = ("col_ptr", "cols", "tile_ptr", "entry_ptr", "tile_entry", "tile_slot")
    arrays = [device_windows[name] for name in names]
    if tile_arrays is not None:  # the tensor-core path's fragment sources in place of the entries
        arrays[4:] = tile_arrays
    return (A.indptr, A.indices, A.data, *arrays, use_tiles)


def spmm_hc(A, B, C, reduce="sum", *, stream=0, mode="hybrid", tf32=False):
    """Launch HC-SpMM: ``C = A @ B`` (sum only), each window on the path ``mode`` gives it
    (:func:`paths`); ``tf32``: the dense-tile path on the tensor cores (float32 operands,
    TF32 inputs: relative errors near 1e-3; sm_80 and later).  float16 and bfloat16 operands
    always take their tiles on the tensor cores (sm_80 and later), accumulated in float32 and
    rounded once.  A tile result that is not finite in a block's columns is computed again on
    the CUDA-core path (a dense tile spreads an Inf or NaN of B to rows that never read it; a
    result that is rightly non-finite costs the second pass too, not accuracy)."""
    m, n = C.shape
    if m == 0 or n == 0:
        return
    fmt = kernel_format(A.dtype)
    half = is_half_format(fmt)
    tensor_cores = bool(tf32) or (half and mode != "cores")  # (cores: no tile, no sm_80 needed)
    tiles = ("half" if half else "tf32") if tensor_cores else "emulated"
    vec4 = tensor_cores and vector_width(n, B.dtype.itemsize, B) >= 4
    kernel = spmm_hc_kernel(fmt, A.indices.dtype.str, tensor_cores, vec4, half and C.dtype.itemsize == 4)
    grid = (cdiv(m, WINDOW), cdiv(n, COLS))
    tile_arrays = fragments(A, mode, tiles) if tensor_cores else None
    args = (*_window_args(A, paths(A, mode, tiles)[1], tile_arrays), B, C)
    launch.run_bound(A.cache, ("hc", kernel, mode, n), kernel, grid, THREADS, stream, args, (len(args) - 2, len(args) - 1))


def spmm_dense(A, X, W, out, *, stream=0, mode="hybrid", tensor_cores=False):
    """Launch the fused GCN layer: ``out = (A @ X) @ W`` (sum aggregation), windows on the paths
    ``mode`` gives them (default: the selector's); ``tensor_cores``: the product with W on
    ``mma.sync`` (float32: TF32 inputs, relative errors of about 3e-4 measured; 16-bit: the
    aggregated rows rounded to 16 bits once more; sm_80 and later)."""
    m, f = out.shape
    if m == 0 or f == 0:
        return
    kernel = spmm_dense_kernel(kernel_format(A.dtype), A.indices.dtype.str, bool(tensor_cores))
    args = (*_window_args(A, paths(A, mode)[1]), X, W, out)
    launch.run_bound(A.cache, ("hc_dense", kernel, mode), kernel, cdiv(m, WINDOW), THREADS, stream, args,
                     tuple(range(len(args) - 3, len(args))))
