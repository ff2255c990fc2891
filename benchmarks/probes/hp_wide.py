"""A/B of HP-SpMM's rule parameters in float32 (gather depth, DTP nonzeros per group, launch
mode) against the column-slab kernel and cuSPARSE, on every .npz in a folder and N = 32..256:
back-to-back ms per call (max of host and GPU time: the GPU time on all but the smallest graphs).

    python benchmarks/probes/hp_wide.py .data [N,...]   # needs a GPU
"""
import sys

import numpy as np
import torch
from numba import cuda

from _variants import compare, weighted_graphs
from numbasparse import reductions
from numbasparse.cuda import hp, slab

folder = sys.argv[1]
widths = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "32,64,128,256").split(",")]
rng = np.random.default_rng(0)
for name, A, dev, T in weighted_graphs(folder, rng):
    for n in widths:
        Bt = torch.from_numpy(rng.standard_normal((A.shape[1], n)).astype(np.float32)).cuda()
        B = cuda.as_cuda_array(Bt)
        Ct = torch.empty((A.shape[0], n), device="cuda")
        C = cuda.as_cuda_array(Ct)
        plan = hp._spmm_plan(dev, reductions.CODES["sum"], n, B, C, None, None, None, None, None)
        npg = plan.nnz_per_group
        variants = {"rule": lambda: hp.spmm_hp(dev, B, C, "sum"),
                    "slab": lambda: slab.spmm_slab(dev, B, C, "sum"),
                    "cusparse": lambda: torch.sparse.mm(T, Bt)}
        for d in (1, 2, 4):
            if d != plan.depth:
                variants[f"d{d}"] = lambda d=d: hp.spmm_hp(dev, B, C, "sum", depth=d)
        variants["single" if not plan.single else "filled"] = lambda: hp.spmm_hp(dev, B, C, "sum", single=not plan.single)
        for f in (0.5, 2):
            p = int(npg * f)
            if p >= 4:
                variants[f"npg{p}"] = lambda p=p: hp.spmm_hp(dev, B, C, "sum", nnz_per_group=p)
        summary = compare(variants, Ct, torch.sparse.mm(T, Bt), "cusparse")
        print(f"{name:18s} N={n:3d} nnz={A.nnz:8d} layout={hp.spmm_layout(dev, n, 4, B)[:3]} depth={plan.depth} npg={npg} "
              f"single={plan.single} | {summary}", flush=True)
