"""A/B of HP-SpMM lane layouts and gather depths for bfloat16 operands against float32 (back-to-back ms per call).

    python benchmarks/probes/half_layout.py rmat:16,.data/cnr_2000.npz 64,128,256   # needs a GPU
"""
import sys
import numpy as np
from numba import cuda
from numbasparse import graphs
from numbasparse.csr import CSR
from numbasparse.cuda import hp
from numbasparse.bench.timing import time_cuda_back_to_back
import torch  # events

specs = sys.argv[1].split(",")
ns = [int(x) for x in sys.argv[2].split(",")]
rng = np.random.default_rng(0)
for spec in specs:
    A = graphs.from_spec(spec) if not spec.endswith(".npz") else __import__("scipy.sparse").sparse.load_npz(spec).tocsr()
    name = spec.split("/")[-1]
    A32 = CSR.from_scipy(A, dtype=np.float32)
    Ah = CSR.from_scipy(A, dtype="bfloat16")
    for n in ns:
        B32 = cuda.to_device(rng.standard_normal((A.shape[1], n)).astype(np.float32))
        C32 = cuda.device_array((A.shape[0], n), np.float32)
        Bh = cuda.to_device(rng.integers(0x3f00, 0x3f80, (A.shape[1], n)).astype(np.uint16))
        Ch = cuda.device_array((A.shape[0], n), np.uint16)
        variants = {
            "f32 auto": lambda: hp.spmm_hp(A32, B32, C32, "sum"),
            "f32 single": lambda: hp.spmm_hp(A32, B32, C32, "sum", single=True),
            "bf16 default": lambda: hp.spmm_hp(Ah, Bh, Ch, "sum"),
        }
        for lanes, vec, cf in ((32, 4, 1), (32, 8, 1), (16, 8, 1), (32, 2, 1), (8, 8, 1), (16, 4, 1)):
            if lanes * vec * cf > n and not (lanes * vec <= n):
                continue
            for depth in (1, 2):
                variants[f"bf16 {lanes}x{vec}x{cf} d{depth}"] = (
                    lambda l=(lanes, vec, cf), d=depth: hp.spmm_hp(Ah, Bh, Ch, "sum", layout=l, depth=d))
        out = []
        for label, fn in variants.items():
            try:
                ms, _ = time_cuda_back_to_back(fn, calls=20, warmup=2, repeat=5)
                out.append(f"{label} {ms:.4f}")
            except Exception as e:
                out.append(f"{label} ERR {type(e).__name__} {str(e)[:80]}")
        print(name, n, A.nnz, "|", " | ".join(out), flush=True)
