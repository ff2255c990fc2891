"""A/B of HP-SpMM lane layouts (lanes, vec, cf) by kernel time (CUPTI), best of 3.
    python tools/ab_hp_layouts.py GRAPH...  (wrote benchmarks/results/h100-2026-11-23c/ab_layouts.txt)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import numbasparse as ns  # noqa: E402
from numbasparse.bench.timing import time_kernels  # noqa: E402
from numbasparse.cuda import hp, launch  # noqa: E402
from numbasparse.reference import relative_error, spmm_reference  # noqa: E402
from ab_hp import load  # noqa: E402  (tools/ is on sys.path when a tool runs)

LAYOUTS = {128: [(16, 4, 2), (32, 4, 1), (8, 4, 4)], 256: [(16, 4, 2), (16, 4, 4), (32, 4, 2), (8, 4, 4)]}
rule = launch.hp_lane_layout
for spec in sys.argv[1:]:
    A, = load(spec)
    for n, layouts in LAYOUTS.items():
        Bh = np.random.default_rng(0).standard_normal((A.shape[1], n)).astype(np.float32)
        B = cuda.to_device(Bh)
        C = cuda.device_array((A.shape[0], n), np.float32)
        ref = spmm_reference(A, Bh)
        line = f"{spec:10} N={n:3} (rule {rule(n, 4, B)})"
        for layout in layouts:
            csr = ns.CSR.from_scipy(A)  # a fresh launch-plan cache per layout
            launch.hp_lane_layout = lambda *args, layout=layout, **kw: layout
            fn = lambda: hp.spmm_hp(csr, B, C, "sum")  # noqa: E731
            C.copy_to_device(np.full(C.shape, np.nan, np.float32))
            fn()
            err = relative_error(C.copy_to_host(), ref)
            times = [time_kernels(fn, warmup=3, repeat=20) for _ in range(3)]
            line += f"  {layout}: {min(times) * 1e3:7.1f} us{'' if err < 1e-5 else ' WRONG'}"
            launch.hp_lane_layout = rule
        print(line, flush=True)
