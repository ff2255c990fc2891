"""Column-slab SpMM against HP-SpMM as B outgrows the L2 cache: ``k`` block-diagonal copies of a
dense graph (the same rows, segments and entries per segment; B ``k`` times larger), float32 sum,
kernel time (CUPTI) of HP-SpMM's rule, the slab kernel and cuSPARSE, checked first.  One JSON
line per graph, copies and N.

    python benchmarks/probes/slab_l2.py .data [--graphs wiki_vote,tolokers] [--copies 1,2,4,8,16]
        [--n 128,256] > OUT.jsonl
"""
import argparse
import json
import sys

import numpy as np
import scipy.sparse as sp
import torch
from numba import cuda

from _variants import errors, weighted
from numbasparse import dispatch
from numbasparse.bench.timing import time_kernels
from numbasparse.cuda import hp, slab
from numbasparse.cuda.device import memory_system

parser = argparse.ArgumentParser()
parser.add_argument("folder")
parser.add_argument("--graphs", default="wiki_vote,tolokers")
parser.add_argument("--copies", default="1,2,4,8,16")
parser.add_argument("--n", default="128,256")
args = parser.parse_args()
rng = np.random.default_rng(0)
l2_bytes = memory_system()[0]
for name in args.graphs.split(","):
    base = sp.load_npz(f"{args.folder}/{name}.npz").tocsr()
    for k in (int(x) for x in args.copies.split(",")):
        A, dev, T = weighted(sp.block_diag([base] * k, format="csr"), rng)
        for n in (int(x) for x in args.n.split(",")):
            Bt = torch.from_numpy(rng.standard_normal((A.shape[1], n)).astype(np.float32)).cuda()
            B = cuda.as_cuda_array(Bt)
            Ct = torch.empty((A.shape[0], n), device="cuda")
            C = cuda.as_cuda_array(Ct)
            expected = torch.sparse.mm(T, Bt)
            variants = {"hp": lambda: hp.spmm_hp(dev, B, C, "sum"), "slab": lambda: slab.spmm_slab(dev, B, C, "sum")}
            bad = errors(variants, Ct, expected)
            variants["cusparse"] = lambda: torch.sparse.mm(T, Bt)
            kernel = {label: time_kernels(fn, repeat=20) for label, fn in variants.items()}
            _, width, _ = slab.tiling(A.nnz, A.shape[1], n, 4, B)
            row = dict(graph=name, copies=k, n=n, rows=A.shape[0], nnz=A.nnz, b_bytes=A.shape[1] * n * 4,
                       b_of_l2=A.shape[1] * n * 4 / l2_bytes,
                       entries_per_segment=dispatch.entries_per_segment(A.indptr, A.indices, width),
                       kernel_ms=kernel, bad=bad)
            print(json.dumps(row), flush=True)
            print(f"{name} x{k} N={n} B/L2={row['b_of_l2']:.2f} eps={row['entries_per_segment']:.2f} "
                  + " ".join(f"{lab}={v * 1e3:.1f}" for lab, v in kernel.items())
                  + f" hp/slab={kernel['hp'] / kernel['slab']:.2f}" + (f" BAD {bad}" if bad else ""),
                  file=sys.stderr, flush=True)
