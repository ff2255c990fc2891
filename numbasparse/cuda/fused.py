"""Fused SDDMM -> SpMM kernels: ``(A ⊙ (X Y^T)) Z`` (CS267 report, section 6.2) and graph
attention ``softmax_row(A ⊙ (Q K^T)) V`` (the GAT pattern: SDDMM, edge softmax, SpMM), plus the
edge-softmax kernel the unfused attention path needs.

The fused kernels never write the nnz intermediate: each warp owns a run of a row's entries,
computes an entry's score and immediately accumulates ``score * Z[j]`` into registers; a row
cut into several runs is combined by a merge kernel from the runs' partial rows, so, unlike the
report's kernel blocked over the sparse matrix, no atomics are needed.
"""
import math

from numba import cuda

from ..dtypes import compute_dtype, kernel_format
from ..preprocess.rows import row_runs
from . import launch
from .device import ROW_WARPS_PER_BLOCK, WARP_SIZE, allocating, cdiv, row_warp_grid
from .hp import pattern_fact
from .intrinsics import converters, shfl_down, shfl_idx, value_types, vector_load, vector_width, warp_sum

WARP = WARP_SIZE
#: The entries of a row one warp takes (:func:`run_length`; a number here overrides it).  A
#: longer row is cut into runs that other warps take, their partial results merged by a second
#: kernel: a warp walks its entries as a chain of dependent loads (an index, then rows of Y and
#: Z), so a warp given a whole long row held the kernel (BENCHMARKS.md, "Fused SDDMM->SpMM and
#: graph attention").
RUN = None
RUN_MIN, RUN_MAX = 16, 256
#: Output columns per lane per pass (grid.y covers wider outputs): 32 * 8 = 256 per warp.
MAX_PER_LANE = 8


def one_pass(n_cols):
    """Whether one warp covers an output row of ``n_cols`` columns in one pass (wider outputs
    take several column tiles, each computing the row's scores again)."""
    return n_cols <= WARP * MAX_PER_LANE


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

    Thread mapping: one warp per run of at most ``run`` entries of a row i (a row is cut into
    runs, :func:`numbasparse.preprocess.rows.row_runs`, so that no warp waits on a long row's
    chain of entries); for each stored (i, j) of its run the warp computes
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
    constant 1 and fold away.  A row of one run is written to ``out``, rounded once; a run of a
    row cut into several writes its sums and (maximum, sum) to ``partial`` and ``stats`` at its
    slot, and :func:`merge_runs_kernel` combines them.
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
    def fused_row(indptr, indices, data, run_row, run_start, run_slot, run, X, Y, Z, out, partial, stats):
        lane = cuda.threadIdx.x % WARP
        r = cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP
        if r >= run_row.shape[0]:
            return
        row = run_row[r]
        n = out.shape[1]
        first = cuda.blockIdx.y * WARP * q + z_width * lane  # this lane's first output column
        acc = cuda.local.array(q, value_type)
        for v in range(q):
            acc[v] = zero
        running_max = lowest
        running_sum = zero
        for p in range(run_start[r], min(run_start[r] + run, indptr[row + 1])):
            j = indices[p]
            partial_dot = zero
            for k in range(xy_width * lane, X.shape[1], xy_span):
                x = load_xy(X, row, k)
                y = load_xy(Y, j, k)
                for v in range(xy_width):
                    partial_dot += x[v] * y[v]
            s = to_compute(data[p]) * warp_sum(partial_dot)
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
            for v in range(vectors):
                c = first + z_span * v
                if c < n:  # n is a multiple of z_width: the whole vector lies in the row
                    z = load_z(Z, j, c)
                    for w in range(z_width):
                        acc[v * z_width + w] = acc[v * z_width + w] * rescale + weight * z[w]
        slot = run_slot[r]
        if slot >= 0:  # a run of a row cut into several: its partial result, merged by merge_runs
            if lane == 0:
                stats[slot, 0] = running_max
                stats[slot, 1] = running_sum
            for v in range(vectors):
                c = first + z_span * v
                if c < n:
                    for w in range(z_width):
                        partial[slot, c + w] = acc[v * z_width + w]
            return
        scale = one
        if softmax:  # (a sum of 0: no entry, giving 0, or every score -inf: NaN, as unfused)
            scale = one / running_sum if running_sum > zero else (nan if running_max == lowest
                                                                   and indptr[row + 1] > indptr[row] else zero)
        for v in range(vectors):
            c = first + z_span * v
            if c < n:
                for w in range(z_width):
                    out[row, c + w] = to_storage(acc[v * z_width + w] * scale)

    return fused_row


@launch.kernel_factory
def merge_runs_kernel(value_dtype, softmax):
    """Compile-once factory of the merge of the rows :func:`fused_row_kernel` cut into runs:
    one warp per such row, lanes over the columns; each run's sums are weighted by
    ``exp(max_run - max_row)`` (1 without the softmax) and the total divided by the weighted sum
    of the runs' exponentials (as FlashDecoding merges split rows), then rounded once."""
    compute = value_types(value_dtype)[2]
    to_storage = converters(value_dtype)[1]
    zero, one, lowest, nan = compute(0), compute(1), compute(-math.inf), compute(math.nan)
    warps = ROW_WARPS_PER_BLOCK

    @cuda.jit
    def merge_runs(split_rows, slot_ptr, partial, stats, out):
        lane = cuda.threadIdx.x % WARP
        r = cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP
        if r >= split_rows.shape[0]:
            return
        row = split_rows[r]
        lo, hi = slot_ptr[r], slot_ptr[r + 1]
        largest = lowest
        total = zero
        scale = one
        if softmax:
            for s in range(lo, hi):
                largest = max(largest, stats[s, 0])
            for s in range(lo, hi):  # (a run of scores all -inf weighs 0; a NaN makes the total NaN)
                if stats[s, 0] != lowest:
                    total += stats[s, 1] * math.exp(stats[s, 0] - largest)
            scale = one / total if total > zero else (nan if largest == lowest else zero)
        for c in range(lane, out.shape[1], WARP):
            acc = zero
            for s in range(lo, hi):
                weight = one
                if softmax:
                    weight = math.exp(stats[s, 0] - largest) if stats[s, 0] != lowest else zero
                acc += weight * partial[s, c]
            out[row, c] = to_storage(acc * scale)

    return merge_runs


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


def run_length(longest):
    """Entries per run for a matrix whose longest row has ``longest``: the power of two at or
    above sqrt(longest / 2), within RUN_MIN..RUN_MAX.  A cut row costs a chain of ``run``
    entries in its warps and of ``longest / run`` partial rows in the merge's warp, at about
    half an entry's time each (H100), which this balances (benchmarks/probes/fused_runs.py:
    the best of 16-128 or within 12% of it on 8 graphs, longest rows 99-5425)."""
    target = math.sqrt(max(longest, 1) / 2)
    return min(RUN_MAX, max(RUN_MIN, 1 << math.ceil(math.log2(max(target, 1)))))


def runs(A, run):
    """(run_row, run_start, run_slot, split_rows, slot_ptr) of device CSR A on the device (see
    :func:`numbasparse.preprocess.rows.row_runs`) and the number of slots; kept in A's cache."""
    def build():
        host = row_runs(A.host_indptr, run, A.index_dtype)
        return tuple(cuda.to_device(a) for a in host), int(host[4][-1])
    return A.cache.get_or_build("plans", ("fused_runs", run), build)


def _partials(A, n_slots, n, dtype, stream):
    """(key, partial, stats) of the runs of cut rows for ``n`` output columns, in the compute
    type: one pair per stream and size (calls on one stream run one after another; a call issues
    its two launches under ``launch.ISSUE_LOCK``, so that another thread's call on the stream
    cannot come between them); 1-row placeholders for a matrix with no row cut."""
    handle = launch.stream_handle(stream)
    compute = compute_dtype(dtype)
    rows = max(n_slots, 1)

    def build():
        with allocating("the fused kernel's partial rows", rows * (n + 2) * compute.itemsize):
            return cuda.device_array((rows, n), compute), cuda.device_array((rows, 2), compute)
    key = ("fused_partials", rows, n, compute.str, handle)
    return (key, *A.cache.get_or_build("scratch", key, build))


def _fused_row(A, X, Y, Z, out, softmax, stream):
    m, n = out.shape
    if m == 0 or n == 0:
        return
    run = RUN or run_length(pattern_fact(A, "longest_row"))
    q = per_lane(n)
    widths = row_widths(X, Y, Z, n)  # (from the operands' alignment: part of the key)
    (run_row, run_start, run_slot, split_rows, slot_ptr), n_slots = runs(A, run)
    scratch, partial, stats = _partials(A, n_slots, n, A.dtype, stream)
    grid, block = row_warp_grid(run_row.shape[0], n, WARP * q)
    kernel = fused_row_kernel(q, kernel_format(A.dtype), softmax, *widths)
    # (the scratch's identity in the keys: both bound launches hold the same partial rows)
    key = ("fused", softmax, q, widths, run, X.shape, Y.shape, Z.shape, X.dtype.str, scratch, id(partial))
    args = (A.indptr, A.indices, A.data, run_row, run_start, run_slot, run, X, Y, Z, out, partial, stats)
    with launch.ISSUE_LOCK:
        launch.run_bound(A.cache, key, kernel, grid, block, stream, args, (7, 8, 9, 10))
        if n_slots:
            grid, block = row_warp_grid(split_rows.shape[0], 1, 1)
            launch.run_bound(A.cache, key + ("merge",), merge_runs_kernel(kernel_format(A.dtype), softmax), grid,
                             block, stream, (split_rows, slot_ptr, partial, stats, out), (4,))


def edge_softmax(A, values, out, *, stream=0):
    """Launch the per-row softmax of ``values`` (one per stored entry of A) into ``out``."""
    m = A.shape[0]
    if m == 0 or A.nnz == 0:
        return
    grid, block = row_warp_grid(m, 1, 1)
    fmt = kernel_format(A.dtype)
    launch.run_bound(A.cache, ("edge_softmax", fmt), edge_softmax_kernel(fmt), grid, block, stream,
                     (A.indptr, values, out), (1, 2))
