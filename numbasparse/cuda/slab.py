"""Column-slab tiled SpMM: B rows gathered once from L2 and re-used from L1, on dense graphs.

On dense graphs (GraphSAINT-style sampled subgraphs: rows of ~200 entries over a few thousand
columns) HP-SpMM at N >= 128 gathers B rows from L2 at the same ~8 TB/s ceiling as cuSPARSE
(benchmarks/NOTES.md, seventh session).  Here A is cut into 2-D tiles: a slab of columns whose
rows of B (``SLAB_L1_BYTES``) fit in one SM's L1, times a window of consecutive rows holding a
fixed number of the slab's entries, and one block of ``SLAB_WARPS`` warps, alone on its SM,
computes a tile: every B row the tile reads from L2 then serves the tile's other rows from L1
(on the sampled subgraphs each B row a tile loads is used 10-40 times).  This is HC-SpMM's
observation (paper 001: rows of a window share columns, so a window's B rows can be staged once)
applied through the L1 cache instead of condensed dense tiles, and G-Sparse's 2-D tiling
(paper 002) applied to B's rows rather than A's entries; within a tile the work is split by
entries as in HP-SpMM (paper 000): a tile's segments (one row's entries inside the slab,
contiguous in a CSR with sorted indices, at most ``SLAB_MAX_SEGMENT``) are dealt to its warps for
equal entries.  A segment's partial row is combined into C atomically (float32 sum and mean: one
``red.global.add.v4.f32`` per lane; otherwise a shared-memory transpose and coalesced scalar
atomics, for max/min the integer atomic of ``intrinsics.atomic_max_float``), C having been filled
with the reduction's identity first (0 for the rows without entries).

Only worth it where tiles re-use B rows: :func:`numbasparse.dispatch.slab_pays` (measured rule)
picks it over HP-SpMM.  Measured history in benchmarks/NOTES.md (sessions 7-9): the first
versions re-used B from L1 (86% hit rate) but were issue-bound (44 instructions per entry); 32-bit
entry loops, per-warp segment lists and equal-entry tiles brought that to 19 and made the kernel
1.5-1.6x faster than HP on the sampled workload at N = 64..256.
"""
import functools

import numba
import numpy as np
from numba import cuda
from numba.cuda import config

from . import launch, reductions
from .hp import _fill_grid, fill_rows_kernel, fill_zeros
from .intrinsics import atomic_max_float, atomic_min_float, shfl_idx, syncwarp, vector_load, vector_red_add

WARP = launch.WARP_SIZE
#: Warps per block: 32 warps x 64 registers fill an SM's register file, so a block is alone on
#: its SM and its tile's slab has the SM's L1 to itself.
SLAB_WARPS = 32
SLAB_MAX_REGISTERS = 64
#: Bytes of B rows a tile may read (one slab x one column tile): most of the L1 an SM has left
#: when no shared memory is used (256 KB with shared memory on the H100).
SLAB_L1_BYTES = 160 * 1024
#: Bytes of B a lane may hold loaded ahead (``depth`` entries' vectors loaded before the first
#: is used, at most SLAB_DEPTH entries): what fits in SLAB_MAX_REGISTERS without spilling.
SLAB_GATHER_BYTES = 32
#: Widest column vector of a lane: 4 float32 or 2 float64 (4 float64 spill under the cap).
SLAB_VECTOR_BYTES = 16
SLAB_DEPTH = 4
#: Blocks per SM (tiles times column tiles): two waves, one where a column tile is at most 64
#: columns wide (N <= 64: lighter entries, larger tiles pay), measured on the sampled workload
#: (tools/ab_slab.py, session 9: N=128 1.68x of HP with 2 against 1.62x with 1 and 1.61x with 3,
#: N=256 1.61x against 1.31x with 1, N=64 1.64x with 1 against 1.52x with 2).
SLAB_WAVES = 2
SLAB_WAVES_NARROW = 1
#: Longest segment (entries): a hub row's piece of a slab is cut into pieces of at most this
#: many entries, so that the warps of a tile get equal work (session 9 at N=128: 32 entries
#: 1.68x of HP, 64 1.64x, 128 1.48x).
SLAB_MAX_SEGMENT = 32
#: Float32 sums and means: combine a lane's partial columns with one vector reduction
#: (``red.global.add.v4.f32``) instead of transposing the row through shared memory for
#: coalesced scalar atomics: 1.05-1.15x faster (session 9, tools/ab_slab.py --red).
SLAB_VECTOR_RED = True
#: Address B's rows and C's columns column first (:func:`intrinsics._item_pointer`).
SLAB_COLUMN_FIRST = True


class SlabTiles:
    """The tiling of one sparsity pattern (host arrays).  Columns are cut into slabs of
    ``slab_width``; each slab's rows into windows of consecutive rows holding at most
    ``tile_nnz`` of the slab's entries (so that tiles are equal work whatever the rows' lengths
    and the columns' popularity); a tile is a (slab, window).  Its work is a list of segments
    ``seg_row[s]``, ``seg_start[s]:seg_end[s]`` (a row's entries in the slab, cut into pieces of at
    most ``max_segment``, default SLAB_MAX_SEGMENT).  Block b computes tile ``tile_order[b]``
    (largest tiles first) with ``warps`` warps; warp w of block b computes segments
    ``warp_ptr[b * warps + w]:warp_ptr[b * warps + w + 1]`` (a tile's segments dealt to its
    warps longest first, in snake order, so that warps get equal entries), and ``tile_ptr[b]``
    = ``warp_ptr[b * warps]``."""

    def __init__(self, indptr, indices, shape, slab_width, tile_nnz, max_segment=None, warps=None):
        n_rows, n_cols = shape
        warps = warps or SLAB_WARPS
        self.slab_width = slab_width
        self.tile_nnz = tile_nnz
        self.warps = warps
        self.n_slabs = max(1, launch.cdiv(n_cols, slab_width))
        indptr = np.asarray(indptr, np.int64)
        nnz = int(indptr[-1])
        rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(indptr))
        slab = np.asarray(indices, np.int64) // slab_width
        key = rows * self.n_slabs + slab
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if nnz else np.zeros(0, np.int64)
        ends = np.r_[starts[1:], nnz].astype(np.int64)
        max_segment = max_segment or SLAB_MAX_SEGMENT
        pieces = -(-(ends - starts) // max_segment)  # long segments cut into max_segment pieces
        first = np.repeat(starts, pieces)
        offset = np.arange(first.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        starts = first + offset * max_segment
        ends = np.minimum(starts + max_segment, np.repeat(ends, pieces))
        lengths = ends - starts
        seg_slab = slab[starts]
        # windows: each slab's segments in row order, cut every tile_nnz entries
        by_slab = np.lexsort((starts, seg_slab))
        slab_nnz = np.bincount(seg_slab, weights=lengths, minlength=self.n_slabs).astype(np.int64)
        before = np.cumsum(lengths[by_slab]) - lengths[by_slab]  # entries before the segment...
        before -= (np.cumsum(slab_nnz) - slab_nnz)[seg_slab[by_slab]]  # ...in its slab
        windows = np.maximum(1, -(-slab_nnz // tile_nnz))
        tile = np.empty_like(starts)
        tile[by_slab] = (np.cumsum(windows) - windows)[seg_slab[by_slab]] + before // tile_nnz
        self.n_tiles = int(windows.sum())
        # Largest tiles first: blocks start in index order as SMs free up, so this is
        # longest-processing-time-first scheduling, which keeps the last wave's tail short.
        tile_nnz_each = np.bincount(tile, weights=lengths, minlength=self.n_tiles)
        self.tile_order = np.argsort(-tile_nnz_each, kind="stable")  # block b computes tile tile_order[b]
        position = np.empty(self.n_tiles, np.int64)
        position[self.tile_order] = np.arange(self.n_tiles)
        block = position[tile]
        # In each block, segments longest first dealt to warps 0..w-1, w-1..0, 0..w-1, ...
        by_length = np.lexsort((-lengths, block))
        first_of_block = np.searchsorted(block[by_length], block[by_length], side="left")
        rank = np.arange(by_length.size) - first_of_block
        turn, seat = rank // warps, rank % warps
        warp = np.where(turn % 2 == 0, seat, warps - 1 - seat)
        slot = np.empty_like(warp)
        slot[by_length] = block[by_length] * warps + warp
        order = np.argsort(slot, kind="stable")
        self.seg_row = rows[starts][order]
        self.seg_start = starts[order]
        self.seg_end = ends[order]
        self.seg_tile = tile[order]
        self.warp_ptr = np.searchsorted(slot[order], np.arange(self.n_tiles * warps + 1)).astype(np.int64)
        self.tile_ptr = self.warp_ptr[::warps]

    @property
    def entries_per_segment(self):
        """Mean entries per segment: how many gathers one atomic flush of a partial row serves."""
        return float(self.seg_end.sum() - self.seg_start.sum()) / max(1, self.seg_row.size)

    def reuse(self, indptr, indices):
        """Entries per distinct (tile, column): how many times a tile uses each B row it loads."""
        indices = np.asarray(indices, np.int64)
        if indices.size == 0:
            return 0.0
        lengths = self.seg_end - self.seg_start
        entry = np.repeat(self.seg_start - (np.cumsum(lengths) - lengths), lengths) + np.arange(lengths.sum())
        tile = np.repeat(self.seg_tile, lengths)
        return indices.size / np.unique(tile * (int(indices.max()) + 1) + indices[entry]).size


def slab_estimate(n_rows, n_cols_a, nnz, slab_width, tile_nnz):
    """(re-use, entries per segment) that a tiling should give, from the shape and the entry
    count alone, for rows of equal length and columns spread uniformly: a tile of ``tile_nnz``
    entries spans ``tile_nnz / (entries per row and slab)`` rows and uses each column of its slab
    ``rows * density`` times (at least once when it uses it), and a row of ``l`` entries meets
    ``S * (1 - (1 - 1/S)**l)`` of the ``S`` slabs.  O(1): the input of a dispatch rule, where
    building :class:`SlabTiles` (O(nnz) sorting) is not."""
    if nnz == 0 or n_rows == 0:
        return 0.0, 0.0
    n_slabs = max(1, -(-n_cols_a // slab_width))
    density = nnz / (n_rows * max(1, n_cols_a))
    rows = min(n_rows, tile_nnz * n_rows * n_slabs / nnz)
    column_uses = rows * density  # per column of a tile's slab
    reuse = max(1.0, column_uses / -np.expm1(-column_uses))  # uses per column actually used
    length = nnz / n_rows
    slabs_met = n_slabs * -np.expm1(length * np.log1p(-1.0 / n_slabs)) if n_slabs > 1 else 1.0
    return float(reuse), float(length / max(1.0, slabs_met))


def slab_lane_layout(n_cols, itemsize, *arrays):
    """(vec, depth): each lane owns ``vec`` consecutive columns of a column tile of ``32 * vec``,
    as wide as the alignment of ``arrays`` (B) allows (:func:`launch.vector_width`) and at most
    N / 32 and SLAB_VECTOR_BYTES, and loads ``depth`` entries' vectors ahead (:func:`slab_depth`)."""
    vec = launch.vector_width(n_cols, itemsize, *arrays)
    while vec > 1 and (WARP * vec > n_cols or vec * itemsize > SLAB_VECTOR_BYTES):
        vec //= 2
    return vec, slab_depth(vec, itemsize)


def slab_depth(vec, itemsize):
    """Entries whose B vectors a lane loads before it uses the first: SLAB_GATHER_BYTES of them,
    at most SLAB_DEPTH."""
    return max(1, min(SLAB_DEPTH, SLAB_GATHER_BYTES // (vec * itemsize)))


def slab_layout(nnz, n_cols_a, n_cols, itemsize, vec):
    """(column-tile width, slab width, entries per tile) for lanes of ``vec`` columns: slabs as
    wide as SLAB_L1_BYTES of B rows allow, and tiles of equal entries, SLAB_WAVES (or
    SLAB_WAVES_NARROW) per SM over all column tiles (a slab's last window is partial, so the
    target leaves room for one per slab)."""
    tile_cols = WARP * vec
    n_col_tiles = launch.cdiv(n_cols, tile_cols)
    width = max(WARP, SLAB_L1_BYTES // (tile_cols * itemsize))
    n_slabs = max(1, launch.cdiv(n_cols_a, width))
    width = launch.cdiv(n_cols_a, n_slabs) if n_cols_a else width  # equal slabs
    waves = SLAB_WAVES_NARROW if tile_cols <= 64 else SLAB_WAVES
    tiles = max(1, launch.cdiv(waves * launch.device_limits()[0], n_col_tiles))
    return tile_cols, width, max(1, launch.cdiv(nnz, max(tiles - n_slabs, (tiles + 1) // 2)))


@functools.lru_cache(maxsize=None)
def spmm_slab_kernel(reduce_code, vec, depth, warps, value_dtype, index_dtype, vector_red=False,
                     column_first=False):
    """Compile-once factory of the column-slab SpMM kernel.

    Thread mapping: block (b, y) computes the b-th tile of :class:`SlabTiles`' order (largest
    first) for the column tile y of ``32 * vec`` columns; warp w of the block's ``warps`` takes
    its own list of the tile's segments (``warp_ptr``).  Lane l owns the ``vec`` consecutive
    columns ``y * 32 * vec + l * vec`` and reads them from B with one vector load per entry
    (HP-SpMM's hierarchical vectorized access, paper 000).  A warp loads the (row, start, end) of
    32 segments at once, one per lane, and each segment's (column, value) pairs 32 at a time,
    one per lane (coalesced; the next segment's first 32 while it computes the current one),
    and hands them to all lanes by shuffles; it loads ``depth`` entries' vectors before it uses
    the first (more gathers in flight).  Counters and entry indices are 32-bit (with int32
    indices), so that the loop over entries has no 64-bit arithmetic.
    At the segment's end the warp transposes its partial row through shared memory so that
    lane l combines columns ``l + 32 c`` into C: each atomic instruction of the warp then
    covers 32 consecutive columns (four 32-byte sectors) instead of 32 scattered ones; or, with
    ``vector_red`` (float32 sums and means, vec 2 or 4), each lane adds its ``vec`` columns with
    one vector reduction (``intrinsics.vector_red_add``), no transpose."""
    value_type = numba.from_dtype(np.dtype(value_dtype))
    itype = numba.from_dtype(np.dtype(index_dtype))
    # a non-negative entry index as an unsigned one: no negative-index wrap-around code
    nonneg = numba.uint32 if itype.bitwidth == 32 else numba.uint64
    i32 = numba.int32
    zero_index = itype(0)
    zero_value = np.dtype(value_dtype).type(0)
    init = np.dtype(value_dtype).type(reductions.initial(reduce_code))
    combine = reductions.combine
    load = vector_load(vec, column_first)
    MEAN, MAX, MIN = reductions.MEAN, reductions.MAX, reductions.MIN
    tile = WARP * vec
    gathered_size = depth * vec
    vector_red = vector_red and vec > 1 and np.dtype(value_dtype) == np.float32 and reduce_code in (
        reductions.SUM, MEAN)
    red2, red4 = vector_red_add(2, column_first), vector_red_add(4, column_first)
    options = {} if config.ENABLE_CUDASIM else {"max_registers": SLAB_MAX_REGISTERS}

    @cuda.jit(device=True, inline="always")
    def lane_pair(indices, data, start, end, lane):
        """This lane's (column, value) of a chunk: entry ``start + lane`` if it lies before
        ``end``, else (0, 0)."""
        mine = itype(start + itype(lane))
        if mine < end:
            return indices[nonneg(mine)], data[nonneg(mine)]
        return zero_index, zero_value

    @cuda.jit(device=True, inline="always")
    def add_chunk(acc, gathered, B, k_mine, a_mine, count, j):
        """acc (reduce)= a_e * B[k_e, j:j + vec] over the chunk's first ``count`` entries,
        whose (k_e, a_e) lane e holds."""
        e = i32(0)  # (Numba widens int32 sums to int64: each one is cast back)
        while i32(e + i32(depth)) <= count:
            for u in range(depth):
                b = load(B, shfl_idx(k_mine, i32(e + i32(u))), j)
                for v in range(vec):
                    gathered[u * vec + v] = b[v]
            for u in range(depth):
                a = shfl_idx(a_mine, i32(e + i32(u)))
                for v in range(vec):
                    acc[v] = combine(reduce_code, acc[v], a * gathered[u * vec + v])
            e = i32(e + i32(depth))
        while e < count:
            b = load(B, shfl_idx(k_mine, e), j)
            a = shfl_idx(a_mine, e)
            for v in range(vec):
                acc[v] = combine(reduce_code, acc[v], a * b[v])
            e = i32(e + i32(1))

    @cuda.jit(device=True, inline="always")
    def lane_segment(seg_row, seg_start, seg_end, batch, last, lane):
        """This lane's (row, start, end) of a batch: segment ``batch + lane`` if it is before
        ``last``, else an empty one."""
        mine = itype(batch + itype(lane))
        if mine < last:
            return seg_row[nonneg(mine)], seg_start[nonneg(mine)], seg_end[nonneg(mine)]
        return zero_index, zero_index, zero_index

    @cuda.jit(**options)
    def spmm_slab(indptr, indices, data, seg_row, seg_start, seg_end, warp_ptr, B, C):
        lane = i32(cuda.threadIdx.x) & i32(WARP - 1)
        warp = i32(cuda.threadIdx.x) >> i32(5)
        j0 = i32(cuda.blockIdx.y) * i32(tile)  # the column tile's first column
        j = j0 + lane * i32(vec)
        n = i32(C.shape[1])
        active = j < n
        if not active:  # (vec divides N: a started vector is complete) lanes past N load columns
            j = i32(0)  # 0..vec-1 and skip the atomics, so that the whole warp takes the shuffles
        acc = cuda.local.array(vec, value_type)
        gathered = cuda.local.array(gathered_size, value_type)
        partial = cuda.shared.array((warps, tile), value_type)  # a warp's row, for the transpose
        slot = cuda.blockIdx.x * warps + warp
        first, last = warp_ptr[slot], warp_ptr[slot + 1]
        for batch in range(first, last, itype(WARP)):
            my_row, my_start, my_end = lane_segment(seg_row, seg_start, seg_end, batch, last, lane)
            n_seg = i32(min(last - batch, itype(WARP)))
            k_next, a_next = lane_pair(indices, data, shfl_idx(my_start, i32(0)), shfl_idx(my_end, i32(0)), lane)
            for q in range(n_seg):
                start, end, row = shfl_idx(my_start, q), shfl_idx(my_end, q), shfl_idx(my_row, q)
                k_mine, a_mine = k_next, a_next
                if i32(q + i32(1)) < n_seg:  # the next segment's first pairs, loaded while this one computes
                    k_next, a_next = lane_pair(indices, data, shfl_idx(my_start, i32(q + i32(1))),
                                                 shfl_idx(my_end, i32(q + i32(1))), lane)
                for v in range(vec):
                    acc[v] = init
                chunk = start
                while True:
                    count = i32(min(end - chunk, itype(WARP)))
                    add_chunk(acc, gathered, B, k_mine, a_mine, count, j)
                    chunk = itype(chunk + itype(WARP))
                    if chunk >= end:
                        break
                    k_mine, a_mine = lane_pair(indices, data, chunk, end, lane)
                if vector_red:  # one red.global.add.v2/.v4.f32 per lane
                    if reduce_code == MEAN:  # partial sums scaled by the row's length
                        for v in range(vec):
                            acc[v] = acc[v] / (indptr[row + 1] - indptr[row])
                    if active:
                        if vec == 4:
                            red4(C, row, j, (acc[0], acc[1], acc[2], acc[3]))
                        else:
                            red2(C, row, j, (acc[0], acc[1]))
                    continue
                for v in range(vec):
                    partial[warp, lane * vec + v] = acc[v]
                syncwarp()
                scale = 1
                if reduce_code == MEAN:  # partial sums scaled by the row's length
                    scale = indptr[row + 1] - indptr[row]
                for c in range(vec):
                    col = j0 + lane + i32(c * WARP)
                    if col < n:
                        x = partial[warp, lane + i32(c * WARP)]
                        if reduce_code == MAX:
                            atomic_max_float(C, row, col, x)
                        elif reduce_code == MIN:
                            atomic_min_float(C, row, col, x)
                        elif reduce_code == MEAN:
                            cuda.atomic.add(C, (row, col), x / scale)
                        else:
                            cuda.atomic.add(C, (row, col), x)
                syncwarp()  # the next segment overwrites the warp's row

    return spmm_slab


def _all_rows(A):
    """Device array 0..M-1 (A's index dtype): the rows a max/min launch pre-fills."""
    if "all_rows" not in A._derived:
        A._derived["all_rows"] = cuda.to_device(np.arange(A.shape[0], dtype=A.index_dtype))
    return A._derived["all_rows"]


def slab_tiles(A, vec, n_cols, itemsize, slab_width=None, tile_nnz=None):
    """(column-tile width, device arrays of :class:`SlabTiles`, the host tiling), once per
    pattern and layout (``slab_width``/``tile_nnz`` override the rule, for tests)."""
    tile_cols, width, per_tile = slab_layout(A.nnz, A.shape[1], n_cols, itemsize, vec)
    width, per_tile = slab_width or width, tile_nnz or per_tile
    key = ("slab_tiles", width, per_tile, SLAB_WARPS, SLAB_MAX_SEGMENT)
    if key not in A._derived:
        host = A._host
        tiles = SlabTiles(host.indptr, host.indices, A.shape, width, per_tile, warps=SLAB_WARPS)
        index = A.index_dtype
        arrays = tuple(cuda.to_device(x.astype(index)) for x in (tiles.seg_row, tiles.seg_start, tiles.seg_end,
                                                                 tiles.warp_ptr))
        A._derived[key] = (arrays, tiles)
    return (tile_cols,) + A._derived[key]


def spmm_slab(A, B, C, reduce="sum", *, stream=0, slab_width=None, tile_nnz=None):
    """Launch the column-slab SpMM: fill C with the reduction's identity (sum and mean: a
    memset; max and min: identity in rows with entries, 0 in the others), then one block per
    (tile, column tile).  The layout, tiling and kernel are chosen once per pattern, N, dtype
    and alignment of B and C (a plan kept with A), and later calls launch through
    :func:`launch.run_bound`."""
    m, n = C.shape
    if m == 0 or n == 0:
        return
    code = reductions.CODES[reduce]
    extremum = code in (reductions.MAX, reductions.MIN) and A.nnz > 0
    if extremum:
        rows = _all_rows(A)
        grid, block = _fill_grid(m * n)
        launch.run_bound(A._bound, ("slab_fill_rows", code, n, C.dtype.str),
                         fill_rows_kernel(C.dtype.str, rows.dtype.str), grid, block, stream,
                         (rows, A.indptr, C, 0.0, reductions.initial(code)), (2,))
    else:  # (max and min with no entries: all rows 0)
        fill_zeros(C, stream)
    if A.nnz == 0:
        return
    settings = (SLAB_WARPS, SLAB_MAX_SEGMENT, SLAB_VECTOR_RED, SLAB_COLUMN_FIRST, SLAB_L1_BYTES, SLAB_WAVES,
                SLAB_WAVES_NARROW)
    key = ("spmm_slab", code, n, C.dtype.str, launch.alignment(B), launch.alignment(C), slab_width, tile_nnz,
           settings)
    plan = A._derived.get(key)
    if plan is None:
        vec, depth = slab_lane_layout(n, C.dtype.itemsize, B, C)  # (aligned for C's vector reductions too)
        tile_cols, arrays, tiles = slab_tiles(A, vec, n, C.dtype.itemsize, slab_width, tile_nnz)
        kernel = spmm_slab_kernel(code, vec, depth, SLAB_WARPS, C.dtype.str, A.index_dtype.str, SLAB_VECTOR_RED,
                                  SLAB_COLUMN_FIRST)
        plan = A._derived[key] = (kernel, (tiles.n_tiles, launch.cdiv(n, tile_cols)), arrays)
    kernel, grid, arrays = plan
    args = (A.indptr, A.indices, A.data, *arrays, B, C)
    launch.run_bound(A._bound, key, kernel, grid, SLAB_WARPS * WARP, stream, args, (7, 8))
