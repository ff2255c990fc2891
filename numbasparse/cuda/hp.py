"""HP-SpMM and HP-SDDMM (paper 000): hybrid node/edge parallelism over CSR.

Every warp (for SpMM: every lane group of a warp) gets the same number of nonzeros, chosen by
Dynamic Task Partition in :func:`numbasparse.cuda.launch.hp_nnz_per_warp`, whatever rows they fall in,
so a heavy row is spread over many warps and light rows are packed into one: edge-parallel
balance with node-parallel accumulation.  Unlike the paper's hybrid CSR/COO format, no COO
row array is stored: the row of each segment's first nonzero is found once on the host
(:func:`segment_rows`, one entry per segment) and a warp walks ``indptr`` from there as its
nonzeros cross row ends.
"""
import collections
import functools

import numba
import numpy as np
from numba import cuda
from numba.cuda import config

from . import launch, reductions
from .intrinsics import (atomic_max_float, atomic_min_float, flagged_parts, flagged_words, shfl_down, syncblock,
                         syncwarp_lanes, vector_load)

WARP = launch.WARP_SIZE


@cuda.jit(device=True, inline="always")
def first_row(indptr, lo, hi, position):
    """The row holding nonzero ``position``: smallest r in [lo, hi] with indptr[r + 1] > position
    (the caller knows it lies there)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if indptr[mid + 1] <= position:
            lo = mid + 1
        else:
            hi = mid
    return lo


def segment_rows(A, nnz_per_segment):
    """Device array: the row holding the first nonzero of each segment of ``nnz_per_segment``
    nonzeros (A's index dtype), found on the host once per sparsity pattern and segment size,
    so that a warp need not binary-search ``indptr`` (a chain of ~log2(M) dependent loads,
    most of a short segment's time) to find where its work starts."""
    key = ("segment_rows", nnz_per_segment)
    rows = A._derived.get(key)
    if rows is None:
        starts = np.arange(0, A.nnz, nnz_per_segment, dtype=np.int64)
        rows = np.searchsorted(A._host.indptr, starts, side="right") - 1
        rows = A._derived[key] = cuda.to_device(rows.astype(A.index_dtype))
    return rows


@functools.lru_cache(maxsize=None)
def zero_fill_kernel(value_dtype):
    """``C[:, :] = 0`` where the driver's memset is not available (the simulator), one
    dispatcher per dtype (the fast launch takes kernels of one signature).
    Thread mapping: one thread per element of C, grid-stride."""

    @cuda.jit
    def zero_fill(C):
        n = C.shape[1]
        for e in range(cuda.grid(1), C.shape[0] * n, cuda.gridsize(1)):
            i = e // n
            C[i, e - i * n] = 0

    return zero_fill


def fill_zeros(C, stream):
    """``C[:, :] = 0`` in ``stream``: the driver's memset, or :func:`zero_fill_kernel` where
    that is unavailable (the simulator)."""
    if not launch.zero(C, stream):
        launch.run(zero_fill_kernel(C.dtype.str), *_fill_grid(C.shape[0] * C.shape[1]), stream, C)


@functools.lru_cache(maxsize=None)
def fill_rows_kernel(value_dtype, index_dtype):
    """``C[i, :] = empty`` for the rows i listed in ``rows`` that have no entries, ``nonempty``
    for the others.  Thread mapping: one thread per element of the listed rows, grid-stride."""

    @cuda.jit
    def fill_rows(rows, indptr, C, empty, nonempty):
        n = C.shape[1]
        for e in range(cuda.grid(1), rows.shape[0] * n, cuda.gridsize(1)):
            r = e // n
            i = rows[r]
            C[i, e - r * n] = empty if indptr[i + 1] == indptr[i] else nonempty

    return fill_rows


def _fill_grid(n_elements):
    """(blocks, threads) of the grid-stride fill kernels."""
    threads = 256
    return min(launch.cdiv(n_elements, threads), launch.device_limits()[0] * 16), threads


@functools.lru_cache(maxsize=None)
def spmm_hp_kernel(reduce_code, lanes, vec, cf, value_dtype, index_dtype, depth, prefilled=True):
    """Compile-once factory of the HP-SpMM kernel.

    Thread mapping: a warp is ``32 // lanes`` groups of ``lanes`` lanes; group g owns
    nonzeros [g * nnz_per_group, (g + 1) * nnz_per_group) and the column tile blockIdx.y of
    ``lanes * vec * cf`` columns; lane l of the group owns ``cf`` groups of ``vec``
    consecutive columns, ``tile + c*lanes*vec + l*vec`` for c < cf, each read from B with one
    ``vec``-wide load (hierarchical vectorized memory access, paper 000 section III-B2; with
    lanes < 32 one warp instruction serves 32 // lanes nonzeros, as narrow rows of B need).
    The group reads its first row from ``group_rows`` (:func:`segment_rows`), caches ``lanes``
    (column, value) pairs at a time in shared memory (coalesced), accumulates per row in
    registers and, at each row switch, stores the row (if the group owned all of it) or
    combines it atomically into C (if the row is split across groups; C was pre-filled with
    the reduction's identity).  With ``depth`` > 1 (graphs of long rows,
    :func:`launch.hp_gather_depth`) a group walks each run of cached entries that lie in one row
    ``depth`` entries at a time, loading all their B vectors before the first multiply, so that
    a warp keeps ``depth`` times more gathers in flight (the kernel is latency-bound there).

    For max and min (an atomic is still a round trip to L2 per element, even as the one integer
    atomic of :func:`intrinsics.atomic_max_float`) the groups of a thread block merge split rows
    through shared memory: a group whose first row began in an earlier group of the block
    leaves its partial there; after a block barrier the group holding the row's first part in
    the block combines the partials of the groups after it and stores the row, or, for a row
    crossing a block boundary (and so pre-filled, :func:`prefill_rows`), combines it
    atomically: one atomic per block, not per group.

    With ``prefilled`` False the kernel writes every element of C itself, so a call is one GPU
    operation (no memset or fill launch before it, which costs a host-bound call as much as a
    small graph's kernel): every reduction merges in the block as above; a row crossing blocks
    is finished by the last of its blocks (a decoupled look-back, as in single-pass prefix
    scans: each earlier block publishes its part in ``parts``, every value with its ready flag
    in one 64-bit store, :func:`intrinsics.flagged_parts`, so no fence or atomic counter is
    needed; the last block waits for those flags, combines, clears the flags for the next
    call and stores the row; it waits only on blocks of lower index, which the GPU starts
    first, so it cannot wait on a block that is not running); and a group
    zeroes the empty rows whose ``indptr`` lies in its nonzeros (the rows it skips, those just
    before its first row, and, for the last group, the rows after the last entry).
    """
    warps = launch.HP_WARPS_PER_BLOCK
    groups = WARP // lanes
    cache_size = warps * WARP
    value_type = numba.from_dtype(np.dtype(value_dtype))
    index_type = numba.from_dtype(np.dtype(index_dtype))
    init = np.dtype(value_dtype).type(reductions.initial(reduce_code))
    load = vector_load(vec)
    combine = reductions.combine
    publish, take, clear = flagged_parts(np.dtype(value_dtype).itemsize * 8)
    tile = lanes * vec * cf
    span = lanes * vec  # columns covered by one vector load of the whole group
    width = vec * cf
    gathered_size = depth * width
    group_mask = (1 << lanes) - 1 if lanes < WARP else 0xFFFFFFFF
    MEAN, MAX, MIN = reductions.MEAN, reductions.MAX, reductions.MIN
    merge = merges_in_block(reduce_code) or not prefilled
    block_groups = warps * groups
    merge_size = block_groups * tile if merge else 1  # one partial row tile per group
    merge_rows_size = block_groups if merge else 1
    # float32 sums over 8 columns per lane: capped for occupancy (launch.HP_MAX_REGISTERS)
    # (not in the single launch: the cap would spill its extra state, tools/kernel_report.py)
    capped = reduce_code == reductions.SUM and value_type == numba.float32 and width == 8 and prefilled
    options = {"max_registers": launch.HP_MAX_REGISTERS} if capped and not config.ENABLE_CUDASIM else {}

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
                        atomic_max_float(C, row, col, x)
                    elif reduce_code == MIN:
                        atomic_min_float(C, row, col, x)
                    else:
                        cuda.atomic.add(C, (row, col), x)

    @cuda.jit(device=True, inline="always")
    def zero_row(C, row, j):
        for c in range(cf):
            if j + c * span < C.shape[1]:
                for v in range(vec):
                    C[row, j + c * span + v] = 0

    @cuda.jit(device=True, inline="always")
    def combine_across_blocks(C, parts, received, row, row_start, row_end, block_start, block_nnz, j, acc):
        """A row crossing blocks: each of its blocks but the last publishes its part in
        ``parts`` (each value with its ready flag, :func:`intrinsics.flagged_parts`); the last
        waits for the earlier blocks' flags, combines their parts with its own, clears them for
        the next call and stores the row."""
        first = row_start // block_nnz  # the row's blocks are first..last
        last = (row_end - 1) // block_nnz
        grid_x = cuda.gridDim.x
        n = C.shape[1]
        if cuda.blockIdx.x < last:
            side = 0 if row_start < block_start else 1  # 0: the row began in an earlier block
            base = (side * grid_x + cuda.blockIdx.x) * n
            for c in range(cf):
                if j + c * span < n:
                    for v in range(vec):
                        publish(parts, base + j + c * span + v, acc[c * vec + v])
            return
        for b in range(first, last):  # blocks of lower index only: they run before this one
            base = (grid_x + b if b == first else b) * n  # the first block's part is its tail
            ready = False
            while not ready:  # all of this lane's values are loaded before any flag is tested
                ready = True
                for c in range(cf):
                    if j + c * span < n:
                        for v in range(vec):
                            ok, received[c * vec + v] = take(parts, base + j + c * span + v)
                            ready = ready and ok
            for c in range(cf):
                if j + c * span < n:
                    for v in range(vec):
                        acc[c * vec + v] = combine(reduce_code, acc[c * vec + v], received[c * vec + v])
                        clear(parts, base + j + c * span + v)
        flush(C, row, j, acc, row_end - row_start, True)

    @cuda.jit(device=True, inline="always")
    def finish_row(C, parts, received, row, row_start, row_end, lo, hi, block_start, block_nnz, j, acc):
        """Store the row, whose entries in [lo, hi) are in ``acc``: directly if they are all of
        it, else atomically into the pre-filled C, or across blocks."""
        owned = row_start >= lo and row_end <= hi
        if owned or prefilled:
            flush(C, row, j, acc, row_end - row_start, owned)
        else:
            combine_across_blocks(C, parts, received, row, row_start, row_end, block_start, block_nnz, j, acc)

    @cuda.jit(device=True, inline="always")
    def add_entry(acc, a, B, k, j, n):
        """acc = acc (reduce) a * B[k, this lane's columns < n] (vector loads, used at once).
        What :func:`gather_row` then :func:`accumulate` compute for one entry, kept apart for the
        entry-by-entry loop: routing it through the ``gathered`` array changed ptxas's allocation
        (the capped N >= 128 kernels spilled 24 bytes instead of 8, tools/kernel_report.py)."""
        for c in range(cf):
            if j + c * span < n:
                b = load(B, k, j + c * span)
                for v in range(vec):
                    acc[c * vec + v] = combine(reduce_code, acc[c * vec + v], a * b[v])

    @cuda.jit(device=True, inline="always")
    def gather_row(B, k, j, n, out, at):
        """``out[at:at + width]`` = this lane's columns of row k of B (vector loads; slots
        of columns past n are left unset and unused)."""
        for c in range(cf):
            if j + c * span < n:
                b = load(B, k, j + c * span)
                for v in range(vec):
                    out[at + c * vec + v] = b[v]

    @cuda.jit(device=True, inline="always")
    def accumulate(acc, a, gathered, at, j, n):
        """acc = acc (reduce) a * gathered[at:at + width], over this lane's columns < n."""
        for c in range(cf):
            if j + c * span < n:
                for v in range(vec):
                    acc[c * vec + v] = combine(reduce_code, acc[c * vec + v], a * gathered[at + c * vec + v])

    @cuda.jit(device=True, inline="always")
    def leave_partial(partials, slot, acc):
        for v in range(width):
            partials[slot + v] = acc[v]

    @cuda.jit(device=True, inline="always")
    def next_row(C, indptr, partials, partial_rows, acc, row, row_start, row_end, seg_start, bg, slot, j, active):
        """Finish the group's row (store it, combine it atomically, or leave it for the block
        merge), reset ``acc`` and move to the next non-empty row: its (row, start, end)."""
        if merge and row_start < seg_start and (bg > 0 or not prefilled):
            partial_rows[bg] = row  # group bg - 1 (or, for group 0, an earlier block) holds this row too
            if active:
                leave_partial(partials, slot, acc)
        elif active:
            flush(C, row, j, acc, row_end - row_start, row_start >= seg_start)
        row += 1
        while indptr[row + 1] == row_end:  # skip empty rows (pre-filled, or zeroed here)
            if not prefilled and active:
                zero_row(C, row, j)
            row += 1
        for v in range(width):
            acc[v] = init
        return row, row_end, indptr[row + 1]

    @cuda.jit(**options)  # (the simulator's jit takes no register cap)
    def spmm_hp(indptr, indices, data, group_rows, B, C, nnz_per_group, parts):
        lane = cuda.threadIdx.x % WARP
        g = lane // lanes
        glane = lane % lanes
        mask = numba.uint32(group_mask << (g * lanes))
        cached_col = cuda.shared.array(cache_size, index_type)
        cached_val = cuda.shared.array(cache_size, value_type)
        partials = cuda.shared.array(merge_size, value_type)  # merge: partial rows left by groups
        partial_rows = cuda.shared.array(merge_rows_size, index_type)  # and their rows (-1: none)
        acc = cuda.local.array(width, value_type)
        received = cuda.local.array(width if not prefilled else 1, value_type)  # another block's part
        gathered = cuda.local.array(gathered_size, value_type)  # B columns of depth entries
        nnz = indices.shape[0]
        bg = (cuda.threadIdx.x // WARP) * groups + g  # the group's index in its block
        group_id = cuda.blockIdx.x * block_groups + bg
        seg_start = group_id * nnz_per_group
        block_nnz = block_groups * nnz_per_group
        block_start = cuda.blockIdx.x * block_nnz
        block_end = min(block_start + block_nnz, nnz)
        slot = bg * tile + glane * width  # this lane's part of the group's partial row
        j = cuda.blockIdx.y * tile + glane * vec
        n = C.shape[1]
        active = j < n  # vec divides n, so a started vector is complete
        gather = False  # merge: combine the partials of the next groups into the last row
        row = row_start = row_end = 0
        if merge:
            partial_rows[bg] = -1
        if seg_start < nnz:  # whole groups idle (and still reach the merge's barrier)
            seg_end = min(seg_start + nnz_per_group, nnz)
            row = group_rows[group_id]
            row_start = indptr[row]
            row_end = indptr[row + 1]
            if not prefilled and active:
                r = row - 1
                while r >= 0 and indptr[r] == seg_start:  # empty rows just before this group's
                    zero_row(C, r, j)
                    r -= 1
            for v in range(width):
                acc[v] = init
            base = cuda.threadIdx.x - glane  # this group's slots in the cache
            for chunk in range(seg_start, seg_end, lanes):
                if chunk + glane < seg_end:
                    cached_col[base + glane] = indices[chunk + glane]
                    cached_val[base + glane] = data[chunk + glane]
                syncwarp_lanes(mask)
                count = min(lanes, seg_end - chunk)
                if depth == 1:  # entry by entry, all groups of the warp in step
                    for kk in range(count):
                        if chunk + kk >= row_end:
                            row, row_start, row_end = next_row(C, indptr, partials, partial_rows, acc, row,
                                                               row_start, row_end, seg_start, bg, slot, j, active)
                        if active:
                            add_entry(acc, cached_val[base + kk], B, cached_col[base + kk], j, n)
                else:  # runs of entries in one row, depth entries' B rows loaded before use
                    kk = 0
                    while kk < count:
                        if chunk + kk >= row_end:
                            row, row_start, row_end = next_row(C, indptr, partials, partial_rows, acc, row,
                                                               row_start, row_end, seg_start, bg, slot, j, active)
                        stop = min(count, row_end - chunk)  # entries kk..stop-1 lie in this row
                        if active:
                            while kk + depth <= stop:
                                for u in range(depth):
                                    gather_row(B, cached_col[base + kk + u], j, n, gathered, u * width)
                                for u in range(depth):
                                    accumulate(acc, cached_val[base + kk + u], gathered, u * width, j, n)
                                kk += depth
                            while kk < stop:
                                add_entry(acc, cached_val[base + kk], B, cached_col[base + kk], j, n)
                                kk += 1
                        kk = stop
                syncwarp_lanes(mask)  # the next chunk overwrites the cache
            if merge and row_start < seg_start and (bg > 0 or not prefilled):
                partial_rows[bg] = row
                if active:
                    leave_partial(partials, slot, acc)
            elif merge and row_end > seg_end:
                gather = True  # the row goes on in the next group
            elif active:
                flush(C, row, j, acc, row_end - row_start, row_start >= seg_start and row_end <= seg_end)
            if not prefilled and active and seg_end == nnz:
                for r in range(row + 1, C.shape[0]):  # empty rows after the last entry
                    zero_row(C, r, j)
        if merge:
            syncblock()  # every partial is in shared memory
            h = bg + 1
            for task in range(1 if prefilled else 2):  # this group's last row, then the block's first
                if task == 1:  # (not pre-filled) group 0 finishes the row begun in an earlier block
                    gather = bg == 0 and partial_rows[0] >= 0
                    if gather:
                        row = partial_rows[0]
                        row_start = indptr[row]
                        row_end = indptr[row + 1]
                        h = 0
                        for v in range(width):
                            acc[v] = init
                if gather:
                    while h < block_groups and partial_rows[h] == row:
                        if active:
                            for v in range(width):
                                acc[v] = combine(reduce_code, acc[v], partials[h * tile + glane * width + v])
                        h += 1
                    if active:
                        finish_row(C, parts, received, row, row_start, row_end, block_start, block_end, block_start,
                                   block_nnz, j, acc)

    return spmm_hp


def merges_in_block(reduce_code):
    """True for the reductions whose split rows HP-SpMM merges inside a thread block."""
    return reduce_code in (reductions.MAX, reductions.MIN)


def prefill_rows(A, block_nnz):
    """Device array of the rows a block-merging HP-SpMM pre-fills (A's index dtype): empty
    rows, and rows whose nonzeros fall in more than one block of ``block_nnz`` nonzeros.
    None when there are none.  Found on the host once per pattern and block size."""
    key = ("prefill_rows", block_nnz)
    if key not in A._derived:
        indptr = A._host.indptr.astype(np.int64)
        start, end = indptr[:-1], indptr[1:]
        crossing = (start // block_nnz) != ((end - 1) // block_nnz)
        rows = np.flatnonzero(crossing | (start == end)).astype(A.index_dtype)
        A._derived[key] = cuda.to_device(rows) if rows.size else None
    return A._derived[key]


def spmm_hp_layout(A, n_cols, itemsize, B, lanes=None):
    """(lanes, vec, cf, depth) of the HP-SpMM kernel for A and ``n_cols`` columns of B: the lane
    layout (:func:`launch.hp_lane_layout`, ``lanes`` forcing the group size) and the gather
    depth (:func:`launch.hp_gather_depth`)."""
    lanes, vec, cf = launch.hp_lane_layout(n_cols, itemsize, B, lanes)
    if "nonempty_rows" not in A._derived:  # counted once per pattern, not once per plan
        A._derived["nonempty_rows"] = int(np.count_nonzero(np.diff(A._host.indptr)))
    depth = launch.hp_gather_depth(A.nnz, A._derived["nonempty_rows"], vec * cf)
    return lanes, vec, cf, depth


def empty_rows_per_group(A, nnz_per_group):
    """The most empty rows one lane group of ``nnz_per_group`` nonzeros zeroes in the
    single-launch HP-SpMM (``prefilled`` False): the empty rows whose ``indptr`` lies in its
    nonzeros, the last group taking those after the last entry.  Once per pattern."""
    key = ("empty_rows_per_group", nnz_per_group)
    if key not in A._derived:
        indptr = A._host.indptr.astype(np.int64)
        at = indptr[:-1][indptr[1:] == indptr[:-1]]
        owner = np.minimum(at // nnz_per_group, launch.cdiv(A.nnz, nnz_per_group) - 1)
        A._derived[key] = int(np.bincount(owner).max()) if owner.size else 0
    return A._derived[key]


def crossing_span(A, block_nnz):
    """The most blocks of ``block_nnz`` nonzeros a row of A spans after its first (0: no row
    crosses a block boundary).  Once per pattern and block size."""
    key = ("crossing_span", block_nnz)
    if key not in A._derived:
        indptr = A._host.indptr.astype(np.int64)
        start, end = indptr[:-1], indptr[1:]
        nonempty = end > start
        spans = (end[nonempty] - 1) // block_nnz - start[nonempty] // block_nnz
        A._derived[key] = int(spans.max()) if spans.size else 0
    return A._derived[key]


HPPlan = collections.namedtuple("HPPlan",
                                "kernel grid nnz_per_group group_rows prefilled fill_rows unused_scratch")


def _hp_plan(A, code, n, B, C, nnz_per_group, lanes, prefill):
    """The launch plan of HP-SpMM for A (the layout, DTP and single-launch rules)."""
    lanes, vec, cf, depth = spmm_hp_layout(A, n, C.dtype.itemsize, B, lanes)
    n_tiles = launch.cdiv(n, lanes * vec * cf)
    groups_per_warp = WARP // lanes
    if nnz_per_group is None:
        nnz_per_group = launch.hp_nnz_per_warp(A.nnz, n_tiles, groups_per_warp=groups_per_warp)
    block_groups = launch.HP_WARPS_PER_BLOCK * groups_per_warp
    grid = (launch.cdiv(launch.cdiv(A.nnz, nnz_per_group), block_groups), n_tiles)
    if prefill is None:
        mean_row_nnz = A.nnz / max(1, A._derived["nonempty_rows"])  # (counted by spmm_hp_layout)
        prefill = not launch.hp_single_launch(mean_row_nnz, crossing_span(A, block_groups * nnz_per_group),
                                              empty_rows_per_group(A, nnz_per_group))
    kernel = spmm_hp_kernel(code, lanes, vec, cf, C.dtype.str, A.indices.dtype.str, depth, bool(prefill))
    fill_rows = prefill_rows(A, block_groups * nnz_per_group) if prefill and merges_in_block(code) else None
    # the pre-filled kernel takes (and never reads) the single launch's scratch argument
    unused = cuda.device_array(1, np.uint64) if prefill else None
    return HPPlan(kernel, grid, nnz_per_group, segment_rows(A, nnz_per_group), bool(prefill), fill_rows, unused)


def _scratch(A, key, plan, n, dtype, stream):
    """The ``parts`` of a single-launch HP-SpMM on ``stream`` (two rows of C per block, each
    value in :func:`intrinsics.flagged_words` with ready flags; zero, and cleared again by each
    call): one per stream, since calls on one stream run one after another.  (Two launches
    sharing it at once could take each other's parts and wait for ever: e.g. two CUDA graphs
    instantiated from calls captured on one stream and run together on two streams.  One graph
    is safe: CUDA runs the launches of one executable graph one after another.)"""
    handle = launch.stream_handle(stream)
    parts = A._derived.get((key, handle))
    if parts is None:
        words = flagged_words(2 * plan.grid[0] * n, dtype.itemsize)
        parts = A._derived[(key, handle)] = cuda.to_device(np.zeros(words, np.uint64))
    return handle, parts


def spmm_hp(A, B, C, reduce, *, stream=0, nnz_per_group=None, lanes=None, prefill=None):
    """Launch HP-SpMM.  With ``prefill`` (the default except on graphs of short rows,
    :func:`launch.hp_single_launch`) C is pre-filled first (for sum and mean a memset, their
    identity being 0; for max and min only the rows :func:`prefill_rows` lists), else the
    kernel alone writes all of C.
    ``nnz_per_group`` defaults to Dynamic Task Partition's choice for this graph and GPU,
    ``lanes`` to :func:`launch.hp_lane_layout`'s (:func:`spmm_hp_layout`)."""
    m, n = C.shape
    if m == 0 or n == 0:
        return
    if A.nnz == 0:  # every row empty: 0 for every reduction
        fill_zeros(C, stream)
        return
    code = reductions.CODES[reduce]
    key = ("spmm_hp", code, n, C.dtype.str, launch.alignment(B), nnz_per_group, lanes, prefill)
    plan = A._derived.get(key)  # once per sparsity pattern
    if plan is None:
        plan = A._derived[key] = _hp_plan(A, code, n, B, C, nnz_per_group, lanes, prefill)
    if plan.prefilled:
        parts = plan.unused_scratch
        if plan.fill_rows is not None:
            grid, block = _fill_grid(plan.fill_rows.shape[0] * n)
            launch.run_bound(A._bound, key + ("fill_rows",), fill_rows_kernel(C.dtype.str, plan.fill_rows.dtype.str),
                             grid, block, stream, (plan.fill_rows, A.indptr, C, 0.0, reductions.initial(code)),
                             (2,))
        elif not merges_in_block(code):
            fill_zeros(C, stream)
    else:
        handle, parts = _scratch(A, key, plan, n, C.dtype, stream)
        key = key + (handle,)  # the bound launch holds this stream's scratch
    args = (A.indptr, A.indices, A.data, plan.group_rows, B, C, plan.nnz_per_group, parts)
    launch.run_bound(A._bound, key, plan.kernel, plan.grid, launch.HP_WARPS_PER_BLOCK * WARP, stream, args, (4, 5))


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
    def sddmm_hp(indptr, indices, data, warp_rows, X, Y, out, nnz_per_warp):
        lane = cuda.threadIdx.x % WARP
        g = lane // group
        lane_in_group = lane % group
        warp_id = cuda.blockIdx.x * warps + cuda.threadIdx.x // WARP
        seg_start = warp_id * nnz_per_warp
        nnz = indices.shape[0]
        if seg_start >= nnz:
            return  # the whole warp leaves together
        seg_end = min(seg_start + nnz_per_warp, nnz)
        k_dim = X.shape[1]
        last_row = warp_rows[warp_id + 1] if warp_id + 1 < warp_rows.shape[0] else X.shape[0] - 1
        row = first_row(indptr, warp_rows[warp_id], last_row, min(seg_start + g, seg_end - 1))
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
    plan = A._derived.get(key)  # the layout and DTP rules, once per sparsity pattern
    if plan is None:
        vec = launch.vector_width(k_dim, X.dtype.itemsize, X, Y)
        group = 1
        while group < WARP and group * vec < k_dim:
            group *= 2
        if nnz_per_warp is None:
            nnz_per_warp = launch.hp_nnz_per_warp(A.nnz, 1)
        grid = launch.cdiv(launch.cdiv(A.nnz, nnz_per_warp), launch.HP_WARPS_PER_BLOCK)
        kernel = sddmm_hp_kernel(vec, group, out.dtype.str)
        plan = A._derived[key] = (kernel, grid, nnz_per_warp, segment_rows(A, nnz_per_warp))
    kernel, grid, nnz_per_warp, warp_rows = plan
    args = (A.indptr, A.indices, A.data, warp_rows, X, Y, out, nnz_per_warp)
    launch.run_bound(A._bound, key, kernel, grid, launch.HP_WARPS_PER_BLOCK * WARP, stream, args, (4, 5, 6))
