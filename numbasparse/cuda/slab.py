"""Column-slab tiled SpMM: B rows gathered once from L2 and re-used from L1, on dense graphs.

On dense graphs (GraphSAINT-style sampled subgraphs: rows of ~200 entries over a few thousand
columns) HP-SpMM at N >= 128 gathers B rows from L2 at L2's bandwidth ceiling.  Here A is cut
into 2-D tiles (:class:`numbasparse.preprocess.slab_tiles.SlabTiles`): a slab of columns whose
rows of B (``SlabConfig.l1_bytes``) fit in one SM's L1, times a window of consecutive rows
holding a fixed number of the slab's entries, and one block of ``SlabConfig.warps`` warps,
alone on its SM, computes a tile: every B row the tile reads from L2 then serves the tile's
other rows from L1.  This is HC-SpMM's observation (paper 001: rows of a window share columns,
so a window's B rows can be staged once) applied through the L1 cache instead of condensed
dense tiles, and G-Sparse's 2-D tiling (paper 002) applied to B's rows rather than A's entries;
within a tile the work is split by entries as in HP-SpMM (paper 000): a tile's segments (one
row's entries inside the slab, at most ``SlabConfig.max_segment``) are dealt to its warps for
equal entries.  A segment's partial row is combined into C atomically (float32 sum and mean: one
``red.global.add.v4.f32`` per lane; otherwise a shared-memory transpose and coalesced scalar
atomics, for max/min the integer atomic of ``intrinsics.atomic_max_float``), C having been filled
with the reduction's identity first.

Only worth it where tiles re-use B rows: :func:`numbasparse.dispatch.slab_pays` (a measured rule)
picks it over HP-SpMM.  Measurements: BENCHMARKS.md, "Column-slab SpMM".
"""
from dataclasses import dataclass

import numba
import numpy as np
from numba import cuda
from numba.cuda import config

from .. import reductions
from ..dtypes import kernel_format
from ..preprocess.slab_tiles import SlabTiles, balanced_tile_nnz
from . import launch
from .device import WARP_SIZE as WARP
from .device import cdiv, device_limits, grid_stride_grid
from .fill import all_rows, fill_identity, round_into, workspace
from .reductions import combine, mean_scale
from .intrinsics import (atomic_max_float, atomic_min_float, converters, shfl_idx, syncwarp, value_types,
                         vector_load, vector_red_add, vector_width)

#: Register cap: 32 warps x 64 registers fill an SM's register file, so a block is alone on its
#: SM and its tile's slab has the SM's L1 to itself.
MAX_REGISTERS = 64
#: Widest column vector of a lane: 4 float32 or 2 float64 (4 float64 spill under the cap).
VECTOR_BYTES = 16
#: ... and at most 4 columns a lane for 16-bit values (8 bytes): 8 columns from one 16-byte load
#: ran 1.09-1.95x slower than 4 at N = 64..256 (bfloat16 into a float32 C, H200, BENCHMARKS.md
#: "16-bit operands in the slab kernel").
MAX_COLUMNS = 4
#: Fewest lanes a segment takes (:func:`lane_layout`): a narrow column tile is split into lane
#: groups of at least this many lanes, each running its own segment.
MIN_LANES = 8


@dataclass(frozen=True)
class SlabConfig:
    """The column-slab kernel's tunable parameters (defaults measured on the H100, BENCHMARKS.md
    "Column-slab SpMM", ``gather_bytes`` and ``lane_groups`` on the H200, "Lane groups in the
    slab kernel"; ``tools/ab_slab.py`` times others).

    warps: warps per block (32: the block fills its SM).
    l1_bytes: bytes of B rows a tile may read (one slab x one column tile): most of the L1 an SM
        has left when no shared memory is used.
    gather_bytes, max_depth: bytes of B a lane loads ahead (``depth`` entries' vectors before the
        first is used), at most ``max_depth`` entries: what fits in MAX_REGISTERS (float64:
        half the bytes, whose 64-bit arithmetic leaves fewer registers: 64 bytes spill).  Four
        entries of 16 bytes: on graphs under a wave a segment is a chain of dependent gathers,
        which more gathers in flight shorten.
    waves, waves_narrow: blocks per SM over all tiles and column tiles; ``waves_narrow`` where a
        column tile is at most 64 columns wide (lighter entries: larger tiles pay).
    max_segment: longest segment (entries): a hub row's piece of a slab is cut into pieces of at
        most this many, so the warps of a tile get equal work.
    vector_red: float32 sums and means combine a lane's partial columns with one vector reduction
        (``red.global.add.v4.f32``) instead of a shared-memory transpose and scalar atomics.
    column_first: address B's rows and C's columns column first (:func:`intrinsics._item_pointer`).
    lane_groups: where N is narrower than 32 lanes of full vectors, split the warp into groups of
        fewer lanes, each taking its own segment (N = 64 float32: two groups of 16 lanes x 4
        columns), rather than narrowing the vectors: a segment's instructions then serve a
        whole vector a lane (a segment costs about the same at N = 64 as at 128 otherwise).
    """
    warps: int = 32
    l1_bytes: int = 160 * 1024
    gather_bytes: int = 64
    max_depth: int = 4
    waves: int = 2
    waves_narrow: int = 1
    max_segment: int = 32
    vector_red: bool = True
    column_first: bool = True
    lane_groups: bool = True


DEFAULT = SlabConfig()


def lane_layout(n_cols, itemsize, *arrays, config=None):
    """(lanes, vec, depth): a segment is computed by a group of ``lanes`` lanes (32 / lanes
    groups a warp), each lane owning ``vec`` consecutive columns of a column tile of
    ``lanes * vec``; ``vec`` as wide as the alignment of each of ``arrays`` (B, C: a float32 C of
    16-bit operands in its own bytes), VECTOR_BYTES and MAX_COLUMNS allow, then the groups narrowed to at most N columns (down to MIN_LANES lanes; always 32
    without ``config.lane_groups`` and for float64, whose groups spill under the register cap),
    then the vectors; each lane loads ``depth`` entries' vectors ahead (:func:`gather_depth`)."""
    config = config or DEFAULT
    vec = min((vector_width(n_cols, a.dtype.itemsize, a) for a in arrays), default=vector_width(n_cols, itemsize))
    while vec > 1 and (vec * itemsize > VECTOR_BYTES or vec > MAX_COLUMNS):
        vec //= 2
    lanes = WARP
    while config.lane_groups and itemsize <= 4 and lanes > MIN_LANES and lanes * vec > n_cols:
        lanes //= 2
    while vec > 1 and lanes * vec > n_cols:
        vec //= 2
    return lanes, vec, gather_depth(vec, itemsize, config)


def vector_flush(reduce_code, vec, compute, vector_red=True):
    """True where a lane combines its partial row into C with vector reductions
    (``red.global.add.v2/.v4.f32``: float32 sums and means, 2 or more columns), not through
    the shared-memory transpose and scalar atomics."""
    return vector_red and vec > 1 and np.dtype(compute) == np.float32 and reduce_code in (reductions.SUM,
                                                                                          reductions.MEAN)


def gather_depth(vec, itemsize, config=None):
    """Entries whose B vectors a lane loads before it uses the first."""
    config = config or DEFAULT
    budget = config.gather_bytes if itemsize <= 4 else config.gather_bytes // 2
    return max(1, min(config.max_depth, budget // (vec * itemsize)))


def tiling(nnz, n_cols_a, n_cols, itemsize, *arrays, config=None):
    """(column-tile width, slab width, entries per tile): column tiles of :func:`lane_layout`'s
    ``lanes * vec`` (for ``arrays``' alignment: B, C), slabs as
    wide as ``config.l1_bytes`` of B rows allow, and tiles of equal entries, ``config.waves`` per
    SM over all column tiles (a slab's last window is partial, so the target leaves room for one
    per slab: an upper bound, which :func:`balanced_tiling` lowers from the pattern)."""
    config = config or DEFAULT
    lanes, vec, _ = lane_layout(n_cols, itemsize, *arrays, config=config)
    tile_cols = lanes * vec
    width = max(WARP, config.l1_bytes // (tile_cols * itemsize))
    n_slabs = max(1, cdiv(n_cols_a, width))
    width = cdiv(n_cols_a, n_slabs) if n_cols_a else width  # equal slabs
    tiles = _tiles_per_column_tile(n_cols, tile_cols, config)
    return tile_cols, width, max(1, cdiv(nnz, max(tiles - n_slabs, (tiles + 1) // 2)))


def _tiles_per_column_tile(n_cols, tile_cols, config):
    """Tiles a column tile is cut into: ``config.waves`` (or ``waves_narrow``) per SM over all
    column tiles."""
    waves = config.waves_narrow if tile_cols <= 64 else config.waves
    return max(1, cdiv(waves * device_limits()[0], cdiv(n_cols, tile_cols)))


def balanced_tiling(indices, n_cols_a, n_cols, itemsize, *arrays, config=None):
    """:func:`tiling` for a pattern of column ``indices`` (host), its entries per tile lowered
    from the bound to the size whose tiles finish first on this GPU's SMs
    (:func:`~numbasparse.preprocess.slab_tiles.balanced_tile_nnz`): the bound assumes every
    slab ends in a partial tile, so on a wide A (many slabs, most of them light) it leaves SMs
    idle."""
    config = config or DEFAULT
    tile_cols, width, per_tile = tiling(indices.size, n_cols_a, n_cols, itemsize, *arrays, config=config)
    tiles = _tiles_per_column_tile(n_cols, tile_cols, config)
    slab_nnz = np.bincount(np.asarray(indices, np.int64) // width, minlength=max(1, cdiv(n_cols_a, width)))
    per_tile = balanced_tile_nnz(slab_nnz, smallest=cdiv(indices.size, tiles), largest=per_tile,
                                 column_tiles=cdiv(n_cols, tile_cols), slots=device_limits()[0])
    return tile_cols, width, per_tile


@launch.kernel_factory
def spmm_slab_kernel(reduce_code, vec, depth, warps, fmt, index_dtype, vector_red=False,
                     column_first=False, lanes=WARP):
    """Compile-once factory of the column-slab SpMM kernel for values and B of format ``fmt``
    (:func:`~numbasparse.dtypes.kernel_format`; 16-bit ones read as their bits and converted to
    float32 as they are loaded) into a C of their compute type (float32 for 16-bit values).

    Thread mapping: block (b, y) computes the b-th tile of :class:`SlabTiles`' order (largest
    first) for the column tile y of ``lanes * vec`` columns; warp w of the block's ``warps`` takes
    its own list of the tile's segments (``warp_ptr``), ``32 / lanes`` at a time: lane group g
    (lanes ``g * lanes ..``) runs the list's segments g, g + 32 / lanes, ...  Lane l of a group
    owns the ``vec`` consecutive columns ``y * lanes * vec + l * vec`` and reads them from B with
    one vector load per entry (HP-SpMM's hierarchical vectorized access, paper 000).  A warp
    loads the (row, start, end) of 32 segments at once, one per lane, and a group each segment's
    (column, value) pairs ``lanes`` at a time, one per lane (coalesced; the next segment's first
    ones while it computes the current one), and hands them to its lanes by shuffles; it loads
    ``depth`` entries' vectors before it uses the first (more gathers in flight).  The groups of a
    warp run in step (the shuffles take the whole warp): each runs as many entries as the longest
    segment of the round and combines only its own.  Counters and entry indices are 32-bit (with
    int32 indices), so that the loop over entries has no 64-bit arithmetic.
    At the segment's end the group transposes its partial row through shared memory so that
    lane l combines columns ``l + lanes * c`` into C: each atomic instruction of the group then
    covers ``lanes`` consecutive columns instead of scattered ones; or, with ``vector_red``
    (float32 sums and means, vec 2 or 4), each lane adds its ``vec`` columns with one vector
    reduction (``intrinsics.vector_red_add``), no transpose."""
    _, value_type, compute = value_types(fmt)
    to_compute = converters(fmt)[0]
    itype = numba.from_dtype(np.dtype(index_dtype))
    # a non-negative entry index as an unsigned one: no negative-index wrap-around code
    nonneg = numba.uint32 if itype.bitwidth == 32 else numba.uint64
    i32 = numba.int32
    zero_index = itype(0)
    zero_value = compute(0)
    init = compute(reductions.initial(reduce_code))
    load = vector_load(vec, column_first, fmt)
    MEAN, MAX, MIN = reductions.MEAN, reductions.MAX, reductions.MIN
    scale_of = mean_scale(reduce_code, value_type)
    tile = lanes * vec
    warp_row = WARP * vec  # a warp's partial rows in the transpose: its groups' tiles side by side
    groups = WARP // lanes
    group_shift = lanes.bit_length() - 1
    gathered_size = depth * vec
    vector_red = vector_flush(reduce_code, vec, compute, vector_red)
    red2, red4 = vector_red_add(2, column_first), vector_red_add(4, column_first)
    options = {} if config.ENABLE_CUDASIM else {"max_registers": MAX_REGISTERS}

    @cuda.jit(device=True, inline="always")
    def lane_pair(indices, data, start, end, lane):
        """This lane's (column, value) of a chunk: entry ``start + lane`` if it lies before
        ``end``, else (0, 0)."""
        mine = itype(start + itype(lane))
        if mine < end:
            return indices[nonneg(mine)], to_compute(data[nonneg(mine)])
        return zero_index, zero_value

    @cuda.jit(device=True, inline="always")
    def add_chunk(acc, gathered, B, k_mine, a_mine, base, count, longest, j):
        """acc (reduce)= a_e * B[k_e, j:j + vec] over the group's first ``count`` entries of the
        chunk, whose (k_e, a_e) lane ``base + e`` holds; the warp runs ``longest`` entries (the
        longest group's count), a group past its own loads B's row 0 and does not combine it."""
        e = i32(0)  # (Numba widens int32 sums to int64: each one is cast back)
        while i32(e + i32(depth)) <= longest:
            for u in range(depth):
                b = load(B, shfl_idx(k_mine, i32(base + e + i32(u))), j)
                for v in range(vec):
                    gathered[u * vec + v] = b[v]
            for u in range(depth):
                a = shfl_idx(a_mine, i32(base + e + i32(u)))
                if groups == 1 or i32(e + i32(u)) < count:
                    for v in range(vec):
                        acc[v] = combine(reduce_code, acc[v], a * gathered[u * vec + v])
            e = i32(e + i32(depth))
        while e < longest:
            b = load(B, shfl_idx(k_mine, i32(base + e)), j)
            a = shfl_idx(a_mine, i32(base + e))
            if groups == 1 or e < count:
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

    @cuda.jit(device=True, inline="always")
    def in_batch(q, n_seg):
        """True where the batch has a segment ``q`` (whole warps: always, q < n_seg)."""
        return groups == 1 or q < n_seg

    @cuda.jit(device=True, inline="always")
    def holder(q):
        """The lane holding the batch's segment ``q`` (groups ask past the batch: any lane)."""
        return q if groups == 1 else q & i32(WARP - 1)

    @cuda.jit(device=True, inline="always")
    def segment_bounds(my_start, my_end, q, n_seg):
        """(start, end) of the batch's segment ``q``, empty past ``n_seg``."""
        start, end = shfl_idx(my_start, holder(q)), shfl_idx(my_end, holder(q))
        if in_batch(q, n_seg):
            return start, end
        return zero_index, zero_index

    @cuda.jit(**options)
    def spmm_slab(indptr, indices, data, seg_row, seg_start, seg_end, warp_ptr, B, C):
        lane = i32(cuda.threadIdx.x) & i32(WARP - 1)
        warp = i32(cuda.threadIdx.x) >> i32(5)
        group = lane >> i32(group_shift)
        member = lane & i32(lanes - 1)  # the lane's place in its group
        base = lane - member  # the group's first lane
        j0 = i32(cuda.blockIdx.y) * i32(tile)  # the column tile's first column
        j = j0 + member * i32(vec)
        n = i32(C.shape[1])
        active = j < n
        if not active:  # (vec divides N: a started vector is complete) lanes past N load columns
            j = i32(0)  # 0..vec-1 and skip the atomics, so that the whole warp takes the shuffles
        acc = cuda.local.array(vec, value_type)
        gathered = cuda.local.array(gathered_size, value_type)
        partial = cuda.shared.array((warps, warp_row), value_type)  # a warp's rows, for the transpose
        slot = cuda.blockIdx.x * warps + warp
        first, last = warp_ptr[slot], warp_ptr[slot + 1]
        for batch in range(first, last, itype(WARP)):
            my_row, my_start, my_end = lane_segment(seg_row, seg_start, seg_end, batch, last, lane)
            n_seg = i32(min(last - batch, itype(WARP)))
            start, end = segment_bounds(my_start, my_end, group, n_seg)
            k_next, a_next = lane_pair(indices, data, start, end, member)
            for q0 in range(i32(0), n_seg, i32(groups)):
                q = i32(q0 + group)  # this group's segment of the round
                start, end = segment_bounds(my_start, my_end, q, n_seg)
                row = shfl_idx(my_row, holder(q))
                mine = in_batch(q, n_seg)  # (a group past the batch's segments idles)
                k_mine, a_mine = k_next, a_next
                if i32(q0 + i32(groups)) < n_seg:  # the next round's first pairs, loaded while this one computes
                    s_next, e_next = segment_bounds(my_start, my_end, i32(q + i32(groups)), n_seg)
                    k_next, a_next = lane_pair(indices, data, s_next, e_next, member)
                for v in range(vec):
                    acc[v] = init
                stop = end  # where the round's longest segment would end: the warp's trip count
                if groups > 1:
                    longest = i32(end - start)
                    for s in range(group_shift, 5):
                        longest = max(longest, shfl_idx(longest, lane ^ i32(1 << s)))
                    stop = itype(start + itype(longest))
                chunk = start
                while True:
                    add_chunk(acc, gathered, B, k_mine, a_mine, base, i32(min(end - chunk, itype(lanes))),
                              i32(min(stop - chunk, itype(lanes))), j)
                    chunk = itype(chunk + itype(lanes))
                    if chunk >= stop:
                        break
                    k_mine, a_mine = lane_pair(indices, data, chunk, end, member)
                if vector_red:  # one red.global.add.v2/.v4.f32 per lane
                    if reduce_code == MEAN:  # partial sums scaled by the row's length
                        scale = scale_of(indptr[row + 1] - indptr[row])
                        for v in range(vec):
                            acc[v] = acc[v] * scale
                    if active and mine:
                        if vec == 4:
                            red4(C, row, j, (acc[0], acc[1], acc[2], acc[3]))
                        else:
                            red2(C, row, j, (acc[0], acc[1]))
                    continue
                for v in range(vec):
                    partial[warp, lane * vec + v] = acc[v]
                syncwarp()
                # the mean's partial sums scaled by the row's length (the others: no indptr loads)
                scale = scale_of(indptr[row + 1] - indptr[row] if reduce_code == MEAN else 1)
                for c in range(vec):
                    col = j0 + member + i32(c * lanes)
                    if col < n and mine:
                        x = partial[warp, base * vec + member + i32(c * lanes)]
                        if reduce_code == MAX:
                            atomic_max_float(C, row, col, x)
                        elif reduce_code == MIN:
                            atomic_min_float(C, row, col, x)
                        elif reduce_code == MEAN:
                            cuda.atomic.add(C, (row, col), x * scale)
                        else:
                            cuda.atomic.add(C, (row, col), x)
                syncwarp()  # the next segment overwrites the warp's row

    return spmm_slab


def _tiles(A, width, per_tile, config):
    """Device arrays of A's :class:`SlabTiles` and the host tiling, once per pattern and tiling."""
    def build():
        host = A._host
        tiles = SlabTiles(host.indptr, host.indices, A.shape, width, per_tile, config.max_segment, config.warps)
        arrays = tuple(cuda.to_device(x.astype(A.index_dtype)) for x in (tiles.seg_row, tiles.seg_start,
                                                                         tiles.seg_end, tiles.warp_ptr))
        return arrays, tiles
    return A.cache.get_or_build("plans", ("slab_tiles", width, per_tile, config.warps, config.max_segment), build)


def _plan(A, code, n, B, C, slab_width, tile_nnz, config):
    """(kernel, grid, tile arrays) of the column-slab SpMM for A into C (of the values' compute
    type): the layout and tiling rules, for B's bytes a value."""
    itemsize = B.dtype.itemsize
    lanes, vec, depth = lane_layout(n, itemsize, B, C, config=config)  # (C aligned for the vector reductions)
    if tile_nnz or slab_width:
        tile_cols, width, per_tile = tiling(A.nnz, A.shape[1], n, itemsize, B, C, config=config)
    else:  # a pass over the host pattern: once per width, not per reduction and alignment
        tile_cols, width, per_tile = A.cache.get_or_build(
            "plans", ("slab_tiling", n, itemsize, lanes * vec, config),
            lambda: balanced_tiling(A._host.indices[:A.nnz], A.shape[1], n, itemsize, B, C, config=config))
    arrays, tiles = _tiles(A, slab_width or width, tile_nnz or per_tile, config)
    kernel = spmm_slab_kernel(code, vec, depth, config.warps, kernel_format(A.dtype), A.index_dtype.str,
                              config.vector_red, config.column_first, lanes)
    return kernel, (tiles.n_tiles, cdiv(n, tile_cols)), arrays


@launch.kernel_factory
def segment_count_kernel():
    """Compile-once factory of the kernel counting a pattern's segments (runs of one row's
    entries in one slab of ``width`` columns), grid-stride: an entry starts one where its slab
    differs from the previous entry's, and a row's first entry does too where its slab equals
    the previous row's last (indices sorted within rows)."""
    @cuda.jit
    def count(indptr, indices, width, total):
        start = cuda.grid(1)
        stride = cuda.gridsize(1)
        found = 0
        for p in range(start, indices.shape[0], stride):
            if p == 0 or indices[p] // width != indices[p - 1] // width:
                found += 1
        for r in range(start, indptr.shape[0] - 1, stride):
            first = indptr[r]
            if 0 < first < indptr[r + 1] and indices[first] // width == indices[first - 1] // width:
                found += 1
        if found:
            cuda.atomic.add(total, 0, found)

    return count


def entries_per_segment_on_device(A, width):
    """Entries per segment of device CSR ``A`` for slabs of ``width`` columns, counted on the GPU
    (no copy of the pattern to the host) once per width and kept in ``A.cache``: the rule of
    ``auto`` and the tuner's cost model read it."""
    return A.cache.get_or_build("plans", ("entries_per_segment", width), lambda: _count_segments(A, width))


def _count_segments(A, width):
    if A.nnz == 0:
        return 0.0
    total = cuda.to_device(np.zeros(1, np.int64))
    # (the simulator runs a thread per thread: there one warp strides over everything)
    grid, threads = (1, WARP) if config.ENABLE_CUDASIM else grid_stride_grid(max(A.nnz, A.shape[0]))
    launch.run(segment_count_kernel(), grid, threads, 0, A.indptr, A.indices, np.int64(width), total)
    return A.nnz / float(total.copy_to_host()[0])


def spmm_slab(A, B, C, reduce="sum", *, stream=0, slab_width=None, tile_nnz=None, config=None):
    """Launch the column-slab SpMM: fill C with the reduction's identity (sum and mean: a
    memset; max and min: the identity in rows with entries, 0 in the others), then one block per
    (tile, column tile).  A 16-bit C (uint16 bits) is computed in a float32 workspace instead
    (:func:`~numbasparse.cuda.fill.workspace`), then rounded into C once.  The layout, tiling
    and kernel are chosen once per pattern, N, dtype and alignment of B and C (a plan kept in
    ``A.cache``).
    ``slab_width``/``tile_nnz`` override the tiling rule, ``config`` (a :class:`SlabConfig`,
    default DEFAULT) the kernel's parameters (tools and tests)."""
    config = config or DEFAULT
    m, n = C.shape
    if m == 0 or n == 0:
        return
    code = reductions.CODES[reduce]
    rounded = C.dtype == np.uint16  # a 16-bit C: partial rows are never combined in 16 bits
    if A.nnz == 0:  # every row empty: 0 for every reduction
        fill_identity(C, reductions.SUM, stream)
        return
    if rounded:
        handle, target = workspace(A, code, n, stream)
    else:
        target = C
        if reductions.is_extremum(code):
            fill_identity(C, code, stream, rows=all_rows(A), A=A, key=("slab_fill", code, n, C.dtype.str))
        else:
            fill_identity(C, reductions.SUM, stream)
    key = ("spmm_slab", code, n, A.dtype.name, target.dtype.str, launch.alignment(B), launch.alignment(target),
           slab_width, tile_nnz, config)
    kernel, grid, arrays = A.cache.get_or_build("plans", key,
                                                lambda: _plan(A, code, n, B, target, slab_width, tile_nnz, config))
    args = (A.indptr, A.indices, A.data, *arrays, B, target)
    if rounded:
        round_into(A, target, C, code, handle, stream, key, kernel, grid, config.warps * WARP, args, (7, 8))
    else:
        launch.run_bound(A.cache, key, kernel, grid, config.warps * WARP, stream, args, (7, 8))
