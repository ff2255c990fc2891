"""HP-SpMM and HP-SDDMM (paper 000): hybrid node/edge parallelism over CSR.

Every warp (for SpMM: every lane group of a warp) gets the same number of nonzeros, chosen by
Dynamic Task Partition in :func:`numbasparse.cuda.launch.hp_nnz_per_warp`, whatever rows they fall in,
so a heavy row is spread over many warps and light rows are packed into one: edge-parallel
balance with node-parallel accumulation.  Unlike the paper's hybrid CSR/COO format, no COO
row array is stored: a warp finds its first row by binary search in ``indptr`` and then
walks ``indptr`` as its nonzeros cross row ends.
"""
import functools

import numba
import numpy as np
from numba import cuda

from . import launch, reductions
from .intrinsics import shfl_down, syncwarp_lanes, vector_load

WARP = launch.WARP_SIZE


@cuda.jit(device=True, inline="always")
def first_row(indptr, n_rows, position):
    """The row holding nonzero ``position``: smallest r with indptr[r + 1] > position."""
    lo, hi = 0, n_rows - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if indptr[mid + 1] <= position:
            lo = mid + 1
        else:
            hi = mid
    return lo


@functools.lru_cache(maxsize=None)
def fill_rows_kernel(value_dtype):
    """``C[i, :] = empty`` for rows without entries and ``nonempty`` for the others.
    Thread mapping: one thread per element of C, grid-stride."""

    @cuda.jit
    def fill_rows(indptr, C, empty, nonempty):
        n = C.shape[1]
        start = cuda.grid(1)
        for e in range(start, C.shape[0] * n, cuda.gridsize(1)):
            i = e // n
            C[i, e - i * n] = empty if indptr[i + 1] == indptr[i] else nonempty

    return fill_rows


@functools.lru_cache(maxsize=None)
def spmm_hp_kernel(reduce_code, lanes, vec, cf, value_dtype, index_dtype):
    """Compile-once factory of the HP-SpMM kernel.

    Thread mapping: a warp is ``32 // lanes`` groups of ``lanes`` lanes; group g owns
    nonzeros [g * nnz_per_group, (g + 1) * nnz_per_group) and the column tile blockIdx.y of
    ``lanes * vec * cf`` columns; lane l of the group owns ``cf`` groups of ``vec``
    consecutive columns, ``tile + c*lanes*vec + l*vec`` for c < cf, each read from B with one
    ``vec``-wide load (hierarchical vectorized memory access, paper 000 section III-B2; with
    lanes < 32 one warp instruction serves 32 // lanes nonzeros, as narrow rows of B need).
    The group caches ``lanes`` (column, value) pairs at a time in shared memory (coalesced),
    accumulates per row in registers and, at each row switch, stores the row (if the group
    owned all of it) or combines it atomically into C (if the row is split across groups; C
    was pre-filled with the reduction's identity).
    """
    warps = launch.HP_WARPS_PER_BLOCK
    groups = WARP // lanes
    cache_size = warps * WARP
    value_type = numba.from_dtype(np.dtype(value_dtype))
    index_type = numba.from_dtype(np.dtype(index_dtype))
    init = np.dtype(value_dtype).type(reductions.initial(reduce_code))
    load = vector_load(vec)
    combine = reductions.combine
    tile = lanes * vec * cf
    span = lanes * vec  # columns covered by one vector load of the whole group
    width = vec * cf
    group_mask = (1 << lanes) - 1 if lanes < WARP else 0xFFFFFFFF
    MEAN, MAX, MIN = reductions.MEAN, reductions.MAX, reductions.MIN

    @cuda.jit(device=True, inline="always")
    def flush(C, row, j, acc, count, owned):
        for c in range(cf):
            if j + c * span < C.shape[1]:
                for v in range(vec):
                    col = j + c * span + v
                    x = acc[c * vec + v]
                    if reduce_code == MEAN:
                        x = x / count  # partial sums are scaled: split rows need no 2nd pass
                    if owned:
                        C[row, col] = x
                    elif reduce_code == MAX:
                        cuda.atomic.max(C, (row, col), x)
                    elif reduce_code == MIN:
                        cuda.atomic.min(C, (row, col), x)
                    else:
                        cuda.atomic.add(C, (row, col), x)

    @cuda.jit
    def spmm_hp(indptr, indices, data, B, C, nnz_per_group):
        lane = cuda.threadIdx.x % WARP
        g = lane // lanes
        glane = lane % lanes
        mask = numba.uint32(group_mask << (g * lanes))
        cached_col = cuda.shared.array(cache_size, index_type)
        cached_val = cuda.shared.array(cache_size, value_type)
        acc = cuda.local.array(width, value_type)
        nnz = indices.shape[0]
        seg_start = ((cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP) * groups + g) * nnz_per_group
        if seg_start >= nnz:
            return  # the whole group leaves together
        seg_end = min(seg_start + nnz_per_group, nnz)
        j = cuda.blockIdx.y * tile + glane * vec
        n = C.shape[1]
        active = j < n  # vec divides n, so a started vector is complete
        row = first_row(indptr, C.shape[0], seg_start)
        row_start = indptr[row]
        row_end = indptr[row + 1]
        for v in range(width):
            acc[v] = init
        base = cuda.threadIdx.x - glane  # this group's slots in the cache
        for chunk in range(seg_start, seg_end, lanes):
            if chunk + glane < seg_end:
                cached_col[base + glane] = indices[chunk + glane]
                cached_val[base + glane] = data[chunk + glane]
            syncwarp_lanes(mask)
            for kk in range(min(lanes, seg_end - chunk)):
                if chunk + kk >= row_end:  # row switch
                    if active:
                        flush(C, row, j, acc, row_end - row_start, row_start >= seg_start)
                    row += 1
                    while indptr[row + 1] == row_end:
                        row += 1  # skip empty rows (pre-filled)
                    row_start = row_end
                    row_end = indptr[row + 1]
                    for v in range(width):
                        acc[v] = init
                if active:
                    a = cached_val[base + kk]
                    k = cached_col[base + kk]
                    for c in range(cf):
                        if j + c * span < n:
                            b = load(B, k, j + c * span)
                            for v in range(vec):
                                acc[c * vec + v] = combine(reduce_code, acc[c * vec + v], a * b[v])
            syncwarp_lanes(mask)  # the next chunk overwrites the cache
        if active:
            flush(C, row, j, acc, row_end - row_start, row_start >= seg_start and row_end <= seg_end)

    return spmm_hp


def spmm_hp(A, B, C, reduce, *, stream=0, nnz_per_group=None, lanes=None):
    """Launch HP-SpMM: pre-fill C (a memset for sum and mean, whose identity is 0), then the
    hybrid-parallel kernel.  ``nnz_per_group`` defaults to Dynamic Task Partition's choice
    for this graph and GPU, ``lanes`` to :func:`launch.hp_lane_layout`'s."""
    m, n = C.shape
    if m == 0 or n == 0:
        return
    code = reductions.CODES[reduce]
    if code in (reductions.MAX, reductions.MIN) or not launch.zero(C, stream):
        identity = reductions.initial(code) if code in (reductions.MAX, reductions.MIN) else 0.0
        fill = fill_rows_kernel(C.dtype.str)
        fill_threads = 256
        fill_blocks = min(launch.cdiv(m * n, fill_threads), launch.device_limits()[0] * 16)
        launch.run(fill, fill_blocks, fill_threads, stream, A.indptr, C, 0.0, identity)
    if A.nnz == 0:
        return
    key = ("spmm_hp", code, n, C.dtype.str, launch.alignment(B), nnz_per_group, lanes)
    bound = A._bound.get(key)  # repeated calls: only B's and C's pointers are written
    if bound is not None and bound(stream, B, C):
        return
    plan = A._derived.get(key)  # the layout and DTP rules, once per sparsity pattern
    if plan is None:
        lanes, vec, cf = launch.hp_lane_layout(n, C.dtype.itemsize, B, lanes)
        n_tiles = launch.cdiv(n, lanes * vec * cf)
        groups_per_warp = WARP // lanes
        if nnz_per_group is None:
            nnz_per_group = launch.hp_nnz_per_warp(A.nnz, n_tiles, groups_per_warp=groups_per_warp)
        kernel = spmm_hp_kernel(code, lanes, vec, cf, C.dtype.str, A.indices.dtype.str)
        n_groups = launch.cdiv(A.nnz, nnz_per_group)
        grid = (launch.cdiv(n_groups, launch.HP_WARPS_PER_BLOCK * groups_per_warp), n_tiles)
        plan = A._derived[key] = (kernel, grid, nnz_per_group)
    kernel, grid, nnz_per_group = plan
    args = (A.indptr, A.indices, A.data, B, C, nnz_per_group)
    launch.run(kernel, grid, launch.HP_WARPS_PER_BLOCK * WARP, stream, *args)
    # bound at the second call, so that matrices made for one call (with_values) skip it
    A._bound[key] = launch.bind(kernel, grid, launch.HP_WARPS_PER_BLOCK * WARP, args, variable=(3, 4)) \
        if key in A._bound else None


@functools.lru_cache(maxsize=None)
def sddmm_hp_kernel(vec, group, value_dtype):
    """Compile-once factory of the HP-SDDMM kernel.

    Thread mapping: warp w owns nonzeros [w * nnz_per_warp, (w + 1) * nnz_per_warp), as in
    HP-SpMM; it is split into ``32 // group`` groups of ``group`` lanes, each group computing
    one nonzero's dot product at a time (so short feature vectors still use every lane).  A
    lane reads ``vec``-wide aligned vectors of X[i] and Y[j], a shuffle tree over the group
    sums them, and the group's first lane writes ``a_ij * dot``.
    """
    warps = launch.HP_WARPS_PER_BLOCK
    groups = WARP // group
    span = group * vec
    zero = np.dtype(value_dtype).type(0)
    load = vector_load(vec)

    @cuda.jit
    def sddmm_hp(indptr, indices, data, X, Y, out, nnz_per_warp):
        lane = cuda.threadIdx.x % WARP
        g = lane // group
        lane_in_group = lane % group
        seg_start = (cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP) * nnz_per_warp
        nnz = indices.shape[0]
        if seg_start >= nnz:
            return  # the whole warp leaves together
        seg_end = min(seg_start + nnz_per_warp, nnz)
        k_dim = X.shape[1]
        row = first_row(indptr, X.shape[0], min(seg_start + g, seg_end - 1))
        for base in range(seg_start, seg_end, groups):
            p = base + g
            partial = zero
            if p < seg_end:
                while indptr[row + 1] <= p:
                    row += 1
                col = indices[p]
                for k in range(lane_in_group * vec, k_dim, span):
                    x = load(X, row, k)
                    y = load(Y, col, k)
                    for v in range(vec):
                        partial += x[v] * y[v]
            offset = group // 2
            while offset > 0:  # every lane takes part in the shuffles
                partial += shfl_down(partial, offset)
                offset //= 2
            if lane_in_group == 0 and p < seg_end:
                out[p] = data[p] * partial

    return sddmm_hp


def sddmm_hp(A, X, Y, out, *, stream=0, nnz_per_warp=None):
    """Launch HP-SDDMM: ``out[p] = a_p * <X[i], Y[j]>`` for each stored entry p = (i, j)."""
    if A.nnz == 0:
        return
    k_dim = X.shape[1]
    key = ("sddmm_hp", k_dim, out.dtype.str, min(launch.alignment(X), launch.alignment(Y)), nnz_per_warp)
    bound = A._bound.get(key)  # repeated calls: only X's, Y's and out's pointers are written
    if bound is not None and bound(stream, X, Y, out):
        return
    plan = A._derived.get(key)  # the layout and DTP rules, once per sparsity pattern
    if plan is None:
        vec = launch.vector_width(k_dim, X.dtype.itemsize, X, Y)
        group = 1
        while group < WARP and group * vec < k_dim:
            group *= 2
        if nnz_per_warp is None:
            nnz_per_warp = launch.hp_nnz_per_warp(A.nnz, 1)
        grid = launch.cdiv(launch.cdiv(A.nnz, nnz_per_warp), launch.HP_WARPS_PER_BLOCK)
        plan = A._derived[key] = (sddmm_hp_kernel(vec, group, out.dtype.str), grid, nnz_per_warp)
    kernel, grid, nnz_per_warp = plan
    args = (A.indptr, A.indices, A.data, X, Y, out, nnz_per_warp)
    launch.run(kernel, grid, launch.HP_WARPS_PER_BLOCK * WARP, stream, *args)
    A._bound[key] = launch.bind(kernel, grid, launch.HP_WARPS_PER_BLOCK * WARP, args, variable=(3, 4, 5)) \
        if key in A._bound else None  # at the second call, as in spmm_hp
