"""A/B of HP-SDDMM's lanes per nonzero (``group``) at K = 64..256, float32: the rule's group (the
narrowest that covers K with one vector per lane, up to 32) against narrower groups that loop
over K, and `torch.sparse.sampled_addmm`; back-to-back ms per call on every .npz in a folder.

    python benchmarks/probes/sddmm_group.py .data [K,...]   # needs a GPU
"""
import sys

import numpy as np
import torch
from numba import cuda

from _variants import compare, weighted_graphs
from numbasparse.cuda import hp

folder = sys.argv[1]
widths = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "64,128,256").split(",")]
rng = np.random.default_rng(0)
for name, A, dev, T in weighted_graphs(folder, rng):
    for k in widths:
        Xt = torch.randn(A.shape[0], k, device="cuda")
        Yt = torch.randn(A.shape[1], k, device="cuda")
        X, Y = cuda.as_cuda_array(Xt), cuda.as_cuda_array(Yt)
        out_t = torch.empty(A.nnz, device="cuda")
        out = cuda.as_cuda_array(out_t)
        variants = {"rule": lambda: hp.sddmm_hp(dev, X, Y, out),
                    "torch": lambda: torch.sparse.sampled_addmm(T, Xt, Yt.T, beta=0.0)}
        for g in (4, 8, 16, 32):
            variants[f"g{g}"] = lambda g=g: hp.sddmm_hp(dev, X, Y, out, group=g)
        summary = compare(variants, out_t, torch.sparse.sampled_addmm(T, Xt, Yt.T, beta=0.0).values(), "torch")
        print(f"{name:18s} K={k:3d} nnz={A.nnz:8d} | {summary}", flush=True)
