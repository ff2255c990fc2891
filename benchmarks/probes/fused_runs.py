"""The fused SDDMM -> SpMM and attention kernels' run length (``fused.RUN``, the entries of a row
one warp takes; longer rows are cut into runs and merged).  Run on a GPU machine:
    python benchmarks/probes/fused_runs.py GRAPH.npz ... [--k 32,64] [--runs 16,32,64,128,0] [--out F]
Run 0 gives each row one warp (the kernel before rows were cut).  Per graph, K (= F) and op: each
run length's relative error against the unfused path in float64, then one call and back to back
(ms by events, interleaved), the unfused float32 path beside; one JSON line each with ``--out``."""
import argparse
import json

import numpy as np
import scipy.sparse as sp
import torch

import numbasparse as ns
from numbasparse.bench.timing import time_cuda_interleaved
from numbasparse.cuda import fused
from numbasparse.reference import relative_error

parser = argparse.ArgumentParser()
parser.add_argument("graphs", nargs="+")
parser.add_argument("--k", default="32,64")
parser.add_argument("--runs", default="16,32,64,128,0")
parser.add_argument("--out")
args = parser.parse_args()
runs = [int(r) for r in args.runs.split(",")]
rng = np.random.default_rng(0)
out = open(args.out, "w") if args.out else None

for path in args.graphs:
    A0 = sp.load_npz(path).tocsr().astype(np.float32)
    A0.data = rng.uniform(0.5, 1.5, A0.nnz).astype(np.float32)
    longest = int(np.diff(A0.indptr).max())
    matrices = {run: ns.CSR.from_scipy(A0) for run in runs}  # one each: a replay belongs to its matrix
    unfused_matrix, exact = ns.CSR.from_scipy(A0), ns.CSR.from_scipy(A0, dtype=np.float64)
    for k in (int(x) for x in args.k.split(",")):
        X, Y, Z = (torch.randn(n, k, device="cuda") / k ** 0.5 for n in (A0.shape[0], A0.shape[1], A0.shape[1]))
        for op in (ns.sddmm_spmm, ns.graph_attention):
            expected = op(exact, X.double(), Y.double(), Z.double(), fused=False).cpu().numpy()

            def fused_call(run):
                def call():
                    fused.RUN = run or 1 << 40
                    return op(matrices[run], X, Y, Z, fused=True)
                return call

            fns = {f"run {run}" if run else "row per warp": fused_call(run) for run in runs}
            fns["unfused"] = lambda: op(unfused_matrix, X, Y, Z, fused=False)
            errors = {name: relative_error(fn().cpu().numpy(), expected) for name, fn in fns.items()}
            one = time_cuda_interleaved(fns, calls=1, repeat=20)
            b2b = time_cuda_interleaved(fns, calls=20, repeat=5)
            row = {"graph": path, "nnz": int(A0.nnz), "longest_row": longest, "k": k, "op": op.__name__,
                   "error": errors, "ms": {n: t[0] for n, t in one.items()}, "b2b_ms": {n: t[0] for n, t in b2b.items()}}
            print(f"{path.split('/')[-1]:22s} longest {longest:6d} K={k:3d} {op.__name__:15s} " +
                  "  ".join(f"{n} {one[n][0]:.3f}/{b2b[n][0]:.3f}" for n in fns) +
                  f"  max error {max(errors.values()):.1e}", flush=True)
            if out:
                out.write(json.dumps(row) + "\n")
fused.RUN = None
