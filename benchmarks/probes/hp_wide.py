"""A/B of HP-SpMM's rule parameters in float32 (gather depth, DTP nonzeros per group, launch
mode) against the column-slab kernel and cuSPARSE, on every .npz in a folder and N = 32..256:
back-to-back ms per call (max of host and GPU time: the GPU time on all but the smallest graphs).

    python benchmarks/probes/hp_wide.py .data [N,...]   # needs a GPU
"""
import glob, sys
import numpy as np
import scipy.sparse as sp
import torch
from numba import cuda
from numbasparse import reductions
from numbasparse.csr import CSR
from numbasparse.cuda import hp, slab
from numbasparse.bench.timing import time_cuda_interleaved

folder = sys.argv[1]
widths = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "32,64,128,256").split(",")]
rng = np.random.default_rng(0)
for path in sorted(glob.glob(f"{folder}/*.npz")):
    A = sp.load_npz(path).tocsr()
    A.data = rng.uniform(0.5, 1.5, A.nnz).astype(np.float32)
    dev = CSR.from_scipy(A, dtype=np.float32)
    T = torch.sparse_csr_tensor(torch.from_numpy(A.indptr).cuda(), torch.from_numpy(A.indices).cuda(),
                                torch.from_numpy(A.data).cuda(), A.shape)
    for n in widths:
        Bt = torch.from_numpy(rng.standard_normal((A.shape[1], n)).astype(np.float32)).cuda()
        B = cuda.as_cuda_array(Bt)
        Ct = torch.empty((A.shape[0], n), device="cuda")
        C = cuda.as_cuda_array(Ct)
        expected = torch.sparse.mm(T, Bt)
        plan = hp._spmm_plan(dev, reductions.CODES["sum"], n, B, C, None, None, None, None, None)
        layout = hp.lane_layout(n, 4, B)
        depth = hp.gather_depth(dev.nnz, int(np.count_nonzero(np.diff(A.indptr))), layout[1] * layout[2], 4, layout[0])
        npg = plan.nnz_per_group
        variants = {"rule": lambda: hp.spmm_hp(dev, B, C, "sum"),
                    "slab": lambda: slab.spmm_slab(dev, B, C, "sum"),
                    "cusparse": lambda: torch.sparse.mm(T, Bt)}
        for d in (1, 2, 4):
            if d != depth:
                variants[f"d{d}"] = lambda d=d: hp.spmm_hp(dev, B, C, "sum", depth=d)
        variants["single" if not plan.single else "filled"] = lambda: hp.spmm_hp(dev, B, C, "sum", single=not plan.single)
        for f in (0.5, 2):
            p = int(npg * f)
            if p >= 4:
                variants[f"npg{p}"] = lambda p=p: hp.spmm_hp(dev, B, C, "sum", nnz_per_group=p)
        bad = []
        for label, fn in variants.items():
            if label == "cusparse":
                continue
            Ct.fill_(float("nan"))
            fn()
            err = float(torch.linalg.norm(Ct - expected) / torch.linalg.norm(expected))
            if not err < 1e-5:
                bad.append(f"{label}:{err:.1e}")
        times = {k: v[0] for k, v in time_cuda_interleaved(variants, calls=20, warmup=3, repeat=7).items()}
        rule = times["rule"]
        cells = " ".join(f"{k}={v * 1000:.1f}({rule / v:.2f})" for k, v in times.items() if k != "rule")
        print(f"{path.split('/')[-1][:-4]:18s} N={n:3d} nnz={A.nnz:8d} layout={layout} depth={depth} npg={npg} "
              f"single={plan.single} | rule={rule * 1000:.1f}us {cells} {'BAD ' + ' '.join(bad) if bad else ''}",
              flush=True)
