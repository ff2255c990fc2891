"""The column-slab kernel's tile size: the bound of ``slab.tiling`` (every slab assumed to end in
a partial tile) against ``slab.balanced_tiling`` (the size whose tiles finish first, from the
pattern's entries per slab), by kernel time (CUPTI, best of 3), HP-SpMM beside them.  Run on a
GPU machine:
    python benchmarks/probes/slab_balance.py .data [--n 64,128,256] [--graphs a,b] > OUT.jsonl
One JSON line per graph and N (each result checked against cuSPARSE first: error < 1e-5)."""
import argparse
import json
import sys

import numpy as np
import torch
from numba import cuda

from _variants import errors, weighted_graphs
from numbasparse.bench.timing import time_kernels
from numbasparse.cuda import hp, slab

parser = argparse.ArgumentParser()
parser.add_argument("folder")
parser.add_argument("--n", default="64,128,256")
parser.add_argument("--graphs", default="")
args = parser.parse_args()
wanted = set(filter(None, args.graphs.split(",")))
rng = np.random.default_rng(0)
for name, A, dev, T in weighted_graphs(args.folder, rng):
    if wanted and name not in wanted:
        continue
    for n in map(int, args.n.split(",")):
        Bt = torch.from_numpy(rng.standard_normal((A.shape[1], n)).astype(np.float32)).cuda()
        Ct = torch.empty((A.shape[0], n), device="cuda")
        B, C = cuda.as_cuda_array(Bt), cuda.as_cuda_array(Ct)
        _, width, bound = slab.tiling(A.nnz, A.shape[1], n, 4, B, C)
        balanced = slab.balanced_tiling(A.indices, A.shape[1], n, 4, B, C)[2]
        variants = {"hp": lambda: hp.spmm_hp(dev, B, C, "sum"),
                    "bound": lambda: slab.spmm_slab(dev, B, C, "sum", slab_width=width, tile_nnz=bound),
                    "balanced": lambda: slab.spmm_slab(dev, B, C, "sum")}
        bad = errors(variants, Ct, torch.sparse.mm(T, Bt))
        us = {k: min(time_kernels(fn, repeat=20) for _ in range(3)) * 1e3 for k, fn in variants.items()}
        print(json.dumps(dict(graph=name, n=n, width=width, bound=bound, balanced=balanced, us=us, bad=bad)), flush=True)
        print(f"{name:20} N={n:3} tile {bound:7d} -> {balanced:7d}  " + " ".join(f"{k}={v:7.1f}" for k, v in us.items())
              + f"  bound/balanced {us['bound'] / us['balanced']:.2f}  hp/balanced {us['hp'] / us['balanced']:.2f}"
              + (f" BAD {bad}" if bad else ""), file=sys.stderr, flush=True)
