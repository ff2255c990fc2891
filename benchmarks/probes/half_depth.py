"""A/B of HP-SpMM gather depth 1-4 for bfloat16 operands under the lane-layout rule, on the bench
graphs and every .npz in .data (back-to-back ms per call).

    python benchmarks/probes/half_depth.py   # needs a GPU
"""
import glob, sys
import numpy as np
import scipy.sparse as sp
from numba import cuda
from numbasparse import graphs
from numbasparse.csr import CSR
from numbasparse.cuda import hp
from numbasparse.bench.timing import time_cuda_back_to_back
import torch  # noqa: F401  (events)

specs = ["default", "rmat:16", "rmat:18", "rmat:20"] + sorted(glob.glob(".data/*.npz"))
rng = np.random.default_rng(0)
for spec in specs:
    A = sp.load_npz(spec).tocsr() if spec.endswith(".npz") else graphs.from_spec(spec)
    A32 = CSR.from_scipy(A, dtype=np.float32)
    Ah = CSR.from_scipy(A, dtype="bfloat16")
    for n in (32, 64, 128, 256):
        B32 = cuda.to_device(rng.standard_normal((A.shape[1], n)).astype(np.float32))
        C32 = cuda.device_array((A.shape[0], n), np.float32)
        Bh = cuda.to_device(rng.integers(0x3f00, 0x3f80, (A.shape[1], n)).astype(np.uint16))
        Ch = cuda.device_array((A.shape[0], n), np.uint16)
        layout = hp.lane_layout(n, 2, Bh)
        variants = {"f32": lambda: hp.spmm_hp(A32, B32, C32, "sum"), "rule": lambda: hp.spmm_hp(Ah, Bh, Ch, "sum")}
        for d in (1, 2, 3, 4):
            variants[f"d{d}"] = lambda d=d: hp.spmm_hp(Ah, Bh, Ch, "sum", depth=d)
        out = []
        for label, fn in variants.items():
            ms, _ = time_cuda_back_to_back(fn, calls=20, warmup=2, repeat=5)
            out.append(f"{label} {ms:.4f}")
        print(spec.split("/")[-1], n, A.nnz, round(A.nnz / max(1, np.count_nonzero(np.diff(A.indptr))), 1), layout,
              "|", " | ".join(out), flush=True)
