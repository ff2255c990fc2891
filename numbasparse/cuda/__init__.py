"""CUDA kernels (``numba.cuda.jit``), one module per kernel family.

Each family module (``hp``, ``slab``, ``crc``, ``sddmm_warp``, ``hc``, ``tiled``, ``fused``,
``gather``, ``fill``, ``permute``) holds its launch rules, its plan (kept in the matrix's cache), compile-once
kernel factories and a host-side launcher that takes a :class:`numbasparse.CSR` and device
arrays; :mod:`numbasparse.dispatch` picks among them.  Shared below them: ``launch`` (the only
code that knows Numba's launch ABI and the driver), ``device`` (device queries, grid helpers),
``intrinsics`` (warp and memory intrinsics that also run on the simulator) and ``reductions``.
"""


def kernel_configs():
    """(name, kernel, signature) for every kernel configuration the library compiles, for
    ahead-of-time checks (``tools/kernel_report.py``, ``tests/cuda/test_compile.py``)."""
    import numba
    import numpy as np

    from .. import reductions
    from . import crc, fill, fused, gather, hc, hp, permute, sddmm_warp, slab, tiled

    def hp_spmm(csr, I, B, C):
        """HP-SpMM's kernel arguments (:func:`hp.spmm_hp`): A's arrays, group_rows, B, C,
        nnz_per_group, the single launch's parts, the block order's stride and inverse, the row map, the
        balanced segments."""
        return (*csr, I[::1], B, C, numba.int64, numba.uint64[::1], numba.int64, numba.int64, numba.int32[::1],
                I[::1])

    configs = []
    for value, index in (("<f4", "<i4"), ("<f8", "<i8")):
        V, I = numba.from_dtype(np.dtype(value)), numba.from_dtype(np.dtype(index))
        csr = (I[::1], I[::1], V[::1])
        for reduce, code in reductions.CODES.items():
            for cf in (1, 2, 4):
                configs.append((f"spmm_crc_cwm cf={cf} {reduce} {value}/{index}",
                                crc.spmm_crc_cwm_kernel(code, cf, value, index), (*csr, V[:, ::1], V[:, ::1])))
            for lanes, vec, cf in ((32, 1, 1), (32, 2, 1), (32, 4, 1), (32, 4, 2), (16, 4, 1), (16, 4, 2), (16, 2, 2),
                                   (16, 1, 2), (8, 4, 1), (8, 4, 2), (4, 4, 1), (4, 2, 1)):
                for depth in (1, 2) if (lanes, vec, cf) in ((32, 4, 1), (32, 2, 1), (16, 4, 1), (8, 4, 1), (32, 1, 1)) else (1,):
                    for single in (False, True):
                        configs.append((f"spmm_hp lanes={lanes} vec={vec} cf={cf} depth={depth} single={single} "
                                        f"{reduce} {value}/{index}",
                                        hp.spmm_hp_kernel(code, lanes, vec, cf, value, index, depth, single),
                                        hp_spmm(csr, I, V[:, ::1], V[:, ::1])))
        for reduce, code in reductions.CODES.items():  # the single launch compiled for a stride (scattered)
            for lanes, vec, cf, depth in ((32, 4, 1, 2), (32, 4, 2, 1), (8, 4, 1, 1)):
                configs.append((f"spmm_hp lanes={lanes} vec={vec} cf={cf} depth={depth} single=True strided "
                                f"{reduce} {value}/{index}",
                                hp.spmm_hp_kernel(code, lanes, vec, cf, value, index, depth, True, None, False, True),
                                hp_spmm(csr, I, V[:, ::1], V[:, ::1])))
        for reduce, code in reductions.CODES.items():  # balanced segments (the rule for whole warps)
            for lanes, vec, cf, depth in ((32, 4, 1, 2), (32, 4, 2, 1), (32, 4, 1, 1), (32, 2, 1, 1), (32, 1, 1, 1)):
                for single in (False, True):
                    configs.append((f"spmm_hp lanes={lanes} vec={vec} cf={cf} depth={depth} single={single} "
                                    f"balanced {reduce} {value}/{index}",
                                    hp.spmm_hp_kernel(code, lanes, vec, cf, value, index, depth, single, balanced=True),
                                    hp_spmm(csr, I, V[:, ::1], V[:, ::1])))
        for lanes, vec, cf in ((32, 4, 1), (32, 4, 2)):  # C += A B on balanced segments
            configs.append((f"spmm_hp lanes={lanes} vec={vec} cf={cf} accumulate balanced sum {value}/{index}",
                            hp.spmm_hp_kernel(reductions.SUM, lanes, vec, cf, value, index, 1, False, None, True,
                                              balanced=True),
                            hp_spmm(csr, I, V[:, ::1], V[:, ::1])))
        for reduce, code in reductions.CODES.items():  # the single launch on shuffled rows (whole warps)
            for lanes, vec, cf, depth in ((32, 4, 1, 2), (32, 4, 2, 1)):
                configs.append((f"spmm_hp lanes={lanes} vec={vec} cf={cf} depth={depth} single=True shuffled "
                                f"{reduce} {value}/{index}",
                                hp.spmm_hp_kernel(code, lanes, vec, cf, value, index, depth, True, mapped=True),
                                hp_spmm(csr, I, V[:, ::1], V[:, ::1])))
        for lanes, vec, cf in ((32, 4, 1), (32, 4, 2), (16, 4, 1)):  # C += A B (numbasparse.distributed)
            configs.append((f"spmm_hp lanes={lanes} vec={vec} cf={cf} accumulate sum {value}/{index}",
                            hp.spmm_hp_kernel(reductions.SUM, lanes, vec, cf, value, index, 1, False, None, True),
                            hp_spmm(csr, I, V[:, ::1], V[:, ::1])))
        for reduce, code in reductions.CODES.items():
            vecs = [v for v in (1, 2, 4) if v * np.dtype(value).itemsize <= slab.VECTOR_BYTES]
            # whole warps at every width; lane groups (float32 only) at every width too: N = 64 / 32
            # take 4 columns a lane, narrower or misaligned N fewer (slab.lane_layout)
            lane_counts = (32, 16, 8) if np.dtype(value).itemsize == 4 else (32,)
            for lanes, vec in ((lanes, vec) for lanes in lane_counts for vec in vecs):
                config = slab.DEFAULT
                depth = slab.gather_depth(vec, np.dtype(value).itemsize)
                configs.append((f"spmm_slab lanes={lanes} vec={vec} depth={depth} {reduce} {value}/{index}",
                                slab.spmm_slab_kernel(code, vec, depth, config.warps, value, index, config.vector_red,
                                                      config.column_first, lanes),
                                (*csr, I[::1], I[::1], I[::1], I[::1], V[:, ::1], V[:, ::1])))
        configs.append((f"fill_all {value}", fill.fill_all_kernel(value), (V[:, ::1],)))
        configs.append((f"fill_rows {value}/{index}", fill.fill_rows_kernel(value, index), (I[::1], I[::1], V[:, ::1], V, V)))
        for vec, group, skips in ((1, 1, True), (4, 8, True), (4, 8, False), (4, 32, True), (2, 32, True)):
            configs.append((f"sddmm_hp vec={vec} group={group} skips_runs={skips} {value}/{index}",
                            hp.sddmm_hp_kernel(vec, group, value, skips),
                            (*csr, I[::1], V[:, ::1], V[:, ::1], V[::1], numba.int64)))
        configs.append((f"sddmm_warp_row {value}/{index}", sddmm_warp.sddmm_warp_row_kernel(value),
                        (*csr, V[:, ::1], V[:, ::1], V[::1])))
        windows = (numba.int64[::1],) * 6 + (numba.boolean[::1],)
        configs.append((f"spmm_hc {value}/{index}", hc.spmm_hc_kernel(value, index),
                        (*csr, *windows, V[:, ::1], V[:, ::1])))
        if value == "<f4":  # the dense tiles on the tensor cores (TF32; 16-bit values): fragment sources
            fragments = (*windows[:4], numba.int64[::1], I[:, ::1], numba.boolean[::1])
            for fmt, float_out in (("<f4", False), ("<f2", False), ("bf16", False), ("bf16", True)):
                D = V if fmt == "<f4" else numba.uint16
                for vec4 in (True, False):
                    configs.append((f"spmm_hc tensor cores vec4={vec4} float_out={float_out} {fmt}/{index}",
                                    hc.spmm_hc_kernel(fmt, index, True, vec4, float_out),
                                    (I[::1], I[::1], D[::1], *fragments, D[:, ::1], (V if float_out else D)[:, ::1])))
        for tensor_cores in (False, True) if value == "<f4" else (False,):
            configs.append((f"spmm_dense tensor_cores={tensor_cores} {value}/{index}",
                            hc.spmm_dense_kernel(value, index, tensor_cores),
                            (*csr, *windows, V[:, ::1], V[:, ::1], V[:, ::1])))
        for q, xy, z in ((4, 4, 4), (8, 4, 4), (8, 1, 1)):  # the most registers: widest vectors; misaligned
            for softmax in (False, True):
                configs.append((f"fused_row q={q} xy={xy} z={z} softmax={softmax} {value}/{index}",
                                fused.fused_row_kernel(q, value, softmax, xy, z),
                                (*csr, *(I[::1],) * 3, numba.int64, *(V[:, ::1],) * 6)))
        for softmax in (False, True):
            configs.append((f"merge_runs softmax={softmax} {value}/{index}", fused.merge_runs_kernel(value, softmax),
                            (I[::1], I[::1], V[:, ::1], V[:, ::1], V[:, ::1])))
        for schedule in (tiled.Schedule(1, 32, 1, 32, False), tiled.Schedule(8, 32, 4, 64, True),
                         tiled.Schedule(32, 8, 2, 32, False)):
            configs.append((f"spmm_tiled {schedule.m_tile}x{schedule.n_tile}x{schedule.reg_tile}x"
                            f"{schedule.nnz_tile} {value}/{index}", tiled.spmm_tiled_kernel(schedule, value, index),
                            (*csr, numba.int64[::1], V[:, ::1], V[:, ::1])))
        for schedule in (tiled.SddmmSchedule(4, 8, 64), tiled.SddmmSchedule(1, 32, 256), tiled.cs267_sddmm_schedule(32),
                         tiled.cs267_sddmm_schedule(128)):
            configs.append((f"sddmm_tiled {schedule.m_tile}x{schedule.group}x{schedule.k_tile} {value}/{index}",
                            tiled.sddmm_tiled_kernel(schedule, value), (*csr, V[:, ::1], V[:, ::1], V[::1])))
        configs.append((f"edge_softmax {value}/{index}", fused.edge_softmax_kernel(value), (I[::1], V[::1], V[::1])))
        configs.append((f"gather_rows {value}", gather.gather_rows_kernel(), (V[:, ::1], numba.int64[::1], V[:, ::1])))
        configs.append((f"gather {value}", gather.gather_kernel(), (V[::1], numba.int64[::1], V[::1])))
        L = numba.int64[::1]
        configs.append((f"short_rows {value}/{index}", permute.short_rows_kernel(), (*csr, L, L, I[::1], I[::1], V[::1])))
        configs.append((f"sort_chunks {index}", permute.sort_chunks_kernel(permute.CHUNK),
                        (I[::1], I[::1], L, L, L, L, L, L)))
        configs.append((f"merge_chunks {value}/{index}", permute.merge_chunks_kernel(permute.CHUNK),
                        (I[::1], V[::1], L, I[::1], L, L, L, L, I[::1], V[::1])))
    # 16-bit values (uint16 bits in the kernels): the kernels that take them, in their launch modes
    H, I = numba.uint16, numba.int32
    csr = (I[::1], I[::1], H[::1])
    windows = (numba.int64[::1],) * 6 + (numba.boolean[::1],)
    for fmt in ("<f2", "bf16"):
        for reduce, code in reductions.CODES.items():
            for lanes, vec, depth in ((8, 4, 1), (32, 4, 4), (32, 8, 4)):
                configs.append((f"spmm_hp lanes={lanes} vec={vec} depth={depth} single=True {reduce} {fmt}",
                                hp.spmm_hp_kernel(code, lanes, vec, 1, fmt, "<i4", depth, True),
                                hp_spmm(csr, I, H[:, ::1], H[:, ::1])))
            # the filled launch into a float32 workspace (or out=), float32 layouts, either segments
            for lanes, vec, cf, depth in ((32, 4, 1, 2), (32, 4, 2, 1), (8, 4, 1, 1)):
                for balanced in (False, True) if lanes == hp.WARP else (False,):
                    configs.append((f"spmm_hp lanes={lanes} vec={vec} cf={cf} depth={depth} single=False"
                                    f"{' balanced' if balanced else ''} {reduce} {fmt}/float32",
                                    hp.spmm_hp_kernel(code, lanes, vec, cf, fmt, "<i4", depth, False, "<f4",
                                                      balanced=balanced),
                                    hp_spmm(csr, I, H[:, ::1], numba.float32[:, ::1])))
            for lanes, vec, depth, zeroed in ((32, 4, 4, False), (32, 8, 4, False), (32, 4, 4, True),
                                              (32, 8, 4, True)):  # balanced segments (the rule, whole warps)
                configs.append((f"spmm_hp lanes={lanes} vec={vec} depth={depth} single=True balanced"
                                f"{' zeroed' if zeroed else ''} {reduce} {fmt}",
                                hp.spmm_hp_kernel(code, lanes, vec, 1, fmt, "<i4", depth, True, zeroed=zeroed,
                                                  balanced=True),
                                hp_spmm(csr, I, H[:, ::1], H[:, ::1])))
            for lanes, vec, depth in ((32, 4, 4), (32, 8, 4)):  # the single launch on shuffled rows
                configs.append((f"spmm_hp lanes={lanes} vec={vec} depth={depth} single=True shuffled {reduce} {fmt}",
                                hp.spmm_hp_kernel(code, lanes, vec, 1, fmt, "<i4", depth, True, mapped=True),
                                hp_spmm(csr, I, H[:, ::1], H[:, ::1])))
            for lanes, vec, depth in ((32, 4, 4), (32, 8, 4)):  # the single launch compiled for a stride (scattered)
                configs.append((f"spmm_hp lanes={lanes} vec={vec} depth={depth} single=True strided {reduce} {fmt}",
                                hp.spmm_hp_kernel(code, lanes, vec, 1, fmt, "<i4", depth, True, None, False, True),
                                hp_spmm(csr, I, H[:, ::1], H[:, ::1])))
            for lanes, vec, depth, strided in ((8, 4, 1, False), (32, 4, 4, False), (32, 8, 4, False),
                                                 (32, 4, 4, True), (32, 8, 4, True)):  # after a memset of C
                mode = "single=True strided zeroed" if strided else "single=True zeroed"
                configs.append((f"spmm_hp lanes={lanes} vec={vec} depth={depth} {mode} {reduce} {fmt}",
                                hp.spmm_hp_kernel(code, lanes, vec, 1, fmt, "<i4", depth, True, None, False, strided,
                                                  True),
                                hp_spmm(csr, I, H[:, ::1], H[:, ::1])))
        F = numba.float32
        for reduce, code in reductions.CODES.items():  # the column slab into a float32 C: every shape
            # lane_layout reaches in bfloat16 (lanes 32 / 16 / 8 x 4, 2, 1 columns), the widest in float16
            for lanes, vec in ((lanes, vec) for lanes in (32, 16, 8) for vec in (4, 2, 1)
                               if fmt == "bf16" or vec == 4):
                config = slab.DEFAULT
                depth = slab.gather_depth(vec, 2)
                configs.append((f"spmm_slab lanes={lanes} vec={vec} depth={depth} {reduce} {fmt}",
                                slab.spmm_slab_kernel(code, vec, depth, config.warps, fmt, "<i4", config.vector_red,
                                                      config.column_first, lanes),
                                (*csr, I[::1], I[::1], I[::1], I[::1], H[:, ::1], F[:, ::1])))
            configs.append((f"round {reduce} {fmt}", fill.round_kernel(code, fmt, "<i4"),
                            (I[::1], F[:, ::1], H[:, ::1])))
        for skips in (False, True):
            configs.append((f"sddmm_hp vec=8 group=4 skips_runs={skips} {fmt}",
                            hp.sddmm_hp_kernel(8, 4, fmt, skips),
                            (*csr, I[::1], H[:, ::1], H[:, ::1], H[::1], numba.int64)))
        for q, xy, z in ((2, 8, 2), (4, 4, 4), (8, 8, 8), (8, 1, 1)):  # the widest vectors; misaligned
            for softmax in (False, True):
                configs.append((f"fused_row q={q} xy={xy} z={z} softmax={softmax} {fmt}",
                                fused.fused_row_kernel(q, fmt, softmax, xy, z),
                                (*csr, *(I[::1],) * 3, numba.int64, *(H[:, ::1],) * 4, *(numba.float32[:, ::1],) * 2)))
        for softmax in (False, True):
            configs.append((f"merge_runs softmax={softmax} {fmt}", fused.merge_runs_kernel(fmt, softmax),
                            (I[::1], I[::1], numba.float32[:, ::1], numba.float32[:, ::1], H[:, ::1])))
        configs.append((f"edge_softmax {fmt}", fused.edge_softmax_kernel(fmt), (I[::1], H[::1], H[::1])))
        for tensor_cores in (False, True):
            configs.append((f"spmm_dense tensor_cores={tensor_cores} {fmt}", hc.spmm_dense_kernel(fmt, "<i4", tensor_cores),
                            (*csr, *windows, *(H[:, ::1],) * 3)))
    L = numba.int64[::1]  # the permutation moves 16-bit values as their bits
    configs.append(("short_rows uint16", permute.short_rows_kernel(), (*csr, L, L, I[::1], I[::1], H[::1])))
    configs.append(("merge_chunks uint16", permute.merge_chunks_kernel(permute.CHUNK),
                    (I[::1], H[::1], L, I[::1], L, L, L, L, I[::1], H[::1])))
    return configs
