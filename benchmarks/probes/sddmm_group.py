"""A/B of HP-SDDMM's lanes per nonzero (``group``) at K = 64..256, float32: the rule's group (the
narrowest that covers K with one vector per lane, up to 32) against narrower groups that loop
over K, and `torch.sparse.sampled_addmm`; back-to-back ms per call on every .npz in a folder.

    python benchmarks/probes/sddmm_group.py .data [K,...]   # needs a GPU
"""
import glob
import sys

import numpy as np
import scipy.sparse as sp
import torch
from numba import cuda

from numbasparse.bench.timing import time_cuda_interleaved
from numbasparse.csr import CSR
from numbasparse.cuda import hp

folder = sys.argv[1]
widths = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "64,128,256").split(",")]
rng = np.random.default_rng(0)
for path in sorted(glob.glob(f"{folder}/*.npz")):
    A = sp.load_npz(path).tocsr()
    A.data = rng.uniform(0.5, 1.5, A.nnz).astype(np.float32)
    dev = CSR.from_scipy(A, dtype=np.float32)
    T = torch.sparse_csr_tensor(torch.from_numpy(A.indptr).cuda(), torch.from_numpy(A.indices).cuda(),
                                torch.from_numpy(A.data).cuda(), A.shape)
    for k in widths:
        Xt = torch.randn(A.shape[0], k, device="cuda")
        Yt = torch.randn(A.shape[1], k, device="cuda")
        X, Y = cuda.as_cuda_array(Xt), cuda.as_cuda_array(Yt)
        out_t = torch.empty(A.nnz, device="cuda")
        out = cuda.as_cuda_array(out_t)
        expected = torch.sparse.sampled_addmm(T, Xt, Yt.T, beta=0.0).values()
        variants = {"rule": lambda: hp.sddmm_hp(dev, X, Y, out),
                    "torch": lambda: torch.sparse.sampled_addmm(T, Xt, Yt.T, beta=0.0)}
        for g in (4, 8, 16, 32):
            variants[f"g{g}"] = lambda g=g: hp.sddmm_hp(dev, X, Y, out, group=g)
        bad = []
        for label, fn in variants.items():
            if label != "torch":
                out_t.fill_(float("nan"))
                fn()
                err = float(torch.linalg.norm(out_t - expected) / torch.linalg.norm(expected))
                if not err < 1e-5:
                    bad.append(f"{label}:{err:.1e}")
        times = {n: v[0] for n, v in time_cuda_interleaved(variants, calls=20, warmup=3, repeat=7).items()}
        rule = times["rule"]
        cells = " ".join(f"{n}={v * 1000:.1f}({rule / v:.2f})" for n, v in times.items() if n != "rule")
        print(f"{path.split('/')[-1][:-4]:18s} K={k:3d} nnz={A.nnz:8d} | rule={rule * 1000:.1f}us {cells}"
              f"{' BAD ' + ' '.join(bad) if bad else ''}", flush=True)
