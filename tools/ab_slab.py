"""Column-slab SpMM against HP-SpMM by kernel time (CUPTI), best of 3, over tiling parameters.

    python tools/ab_slab.py [--n 64,128,256] [--l1-kb 160,224] [--waves rule,1,2]
                            [--max-segment 32,64] [--red vector,transpose] [--column-first 1,0]
                            [--lane-groups 1,0] [--stats] GRAPH...

GRAPH as in tools/ab_hp.py (sampled:rmat:20 is the workload the slab kernel is for).  Each case
checks both results against the float64 reference, then prints HP's microseconds and, for every
combination of the options (L1 budget of a slab, tiles per SM and column tile, longest segment,
partial-row flush: one vector reduction per lane or a shared-memory transpose and coalesced
scalar atomics, address order of the loads, lane groups where N is narrower than 32 full
vectors or narrower vectors), the slab kernel's and HP/slab.  Each combination is
a ``slab.SlabConfig`` (``dataclasses.replace`` of ``slab.DEFAULT``) passed to ``spmm_slab``; the
first value of each option is the default's.  With ``--stats``, also the tiles' B-row re-use and
entries per segment (gathers per atomic flush) on the first 4 graphs.  Imports ``ab_hp`` from its own folder (run it as a script)."""
import argparse
import dataclasses
import itertools

import numpy as np
from numba import cuda

import numbasparse as ns
from ab_hp import load, operands
from numbasparse.bench.timing import time_kernels
from numbasparse.cuda import hp, slab
from numbasparse.preprocess.slab_tiles import SlabTiles
from numbasparse.reference import relative_error


def timed(As, dense, expected, launcher):
    """(best-of-3 microseconds of one pass over the graphs, worst relative error)."""
    calls, errors = [], []
    for A, (B,), ref in zip(As, dense, expected):
        csr = ns.CSR.from_scipy(A)  # a fresh plan cache per configuration
        Bd = cuda.to_device(B)
        C = cuda.to_device(np.full((A.shape[0], B.shape[1]), np.nan, np.float32))
        call = (lambda csr=csr, Bd=Bd, C=C: launcher(csr, Bd, C))
        call()
        errors.append(relative_error(C.copy_to_host(), ref))
        calls.append(call)
    fn = lambda: [call() for call in calls]  # noqa: E731
    return min(time_kernels(fn, warmup=3, repeat=20) for _ in range(3)) * 1e3, max(errors)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("graphs", nargs="+")
    parser.add_argument("--n", default="64,128,256")
    default = slab.DEFAULT
    parser.add_argument("--l1-kb", default=str(default.l1_bytes // 1024))
    parser.add_argument("--waves", default="rule",
                        help="tiles per SM: rule (the default's waves and waves_narrow), or numbers")
    parser.add_argument("--max-segment", default=str(default.max_segment), help="longest segments (entries)")
    parser.add_argument("--red", default="vector" if default.vector_red else "transpose",
                        help="partial-row flushes: vector,transpose")
    parser.add_argument("--column-first", default=str(int(default.column_first)),
                        help="address order of the loads: 1,0")
    parser.add_argument("--lane-groups", default=str(int(default.lane_groups)),
                        help="segments a warp at narrow N: 1 (lane groups), 0 (whole warps, narrower vectors)")
    parser.add_argument("--stats", action="store_true")
    args = parser.parse_args()
    rule = default.waves, default.waves_narrow
    rng = np.random.default_rng()
    for spec in args.graphs:
        As = load(spec)
        for n in map(int, args.n.split(",")):
            ops = operands(As, "spmm", n, rng)
            dense, expected = [d for _, d, _ in ops], [e for _, _, e in ops]
            base, err = timed(As, dense, expected, lambda A, B, C: hp.spmm_hp(A, B, C, "sum"))
            print(f"{spec} N={n}: hp {base:8.1f} us{'' if err < 1e-5 else ' WRONG'}", flush=True)
            for kb, waves, longest, red, first, groups in itertools.product(
                    args.l1_kb.split(","), args.waves.split(","), args.max_segment.split(","), args.red.split(","),
                    args.column_first.split(","), args.lane_groups.split(",")):
                wave, narrow = rule if waves == "rule" else (int(waves), int(waves))
                config = dataclasses.replace(default, l1_bytes=int(kb) * 1024, max_segment=int(longest),
                                             waves=wave, waves_narrow=narrow, vector_red=red == "vector",
                                             column_first=first == "1", lane_groups=groups == "1")
                us, err = timed(As, dense, expected,
                                lambda A, B, C, config=config: slab.spmm_slab(A, B, C, "sum", config=config))
                print(f"    slab L1 {kb:>3} KB, waves {waves:>4}, segments <= {longest:>3}, {red:9}, column first {first},"
                      f" lane groups {groups}:"
                      f" {us:8.1f} us{'' if err < 1e-5 else ' WRONG'}  hp/slab {base / us:5.2f}", flush=True)
                if args.stats:
                    stats = []
                    for A in As[:4]:
                        width, per_tile = slab.balanced_tiling(A.indices, A.shape[1], n, 4, config=config)[1:]
                        tiles = SlabTiles(A.indptr, A.indices, A.shape, width, per_tile, config.max_segment,
                                          config.warps)
                        stats.append((tiles.reuse(A.indptr, A.indices), tiles.entries_per_segment))
                    reuse, per_segment = np.mean(stats, axis=0)
                    print(f"        re-use {reuse:5.1f}  entries/segment {per_segment:5.1f}", flush=True)


if __name__ == "__main__":
    main()
