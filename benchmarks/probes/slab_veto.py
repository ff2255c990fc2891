"""The constants of ``auto``'s veto on the column-slab kernel, measured on this GPU
(``dispatch.slab_keeps_up_with_hp``): per graph and N, float32 sum, the kernel time (CUPTI, best
of 3 x 10, each result checked against cuSPARSE first) of HP-SpMM, the slab kernel and
cuSPARSE; the slab kernel's picoseconds per segment (its segments as the kernel cuts them, over
all column tiles: SLAB_SEGMENT_NS is that times the SM count; lane groups run several at
once, faster than the constant), HP's picoseconds per
entry-column (its gathers' rate: HP_GATHER_BYTES_PER_SM), the veto's predictions and ``auto``'s
pick.  On graphs that fill the GPU (1M entries or more) the two rates are the constants; small
graphs add fixed costs.

    python benchmarks/probes/slab_veto.py GRAPH.npz... [--n 64,128,256] > OUT.txt

Imports ``_variants`` from its own folder (run it as a script).
"""
import argparse

import numpy as np
import scipy.sparse as sp
import torch
from numba import cuda

from _variants import errors, weighted
from numbasparse import dispatch
from numbasparse.bench.timing import time_kernels
from numbasparse.cuda import hp, slab
from numbasparse.cuda.device import cdiv, device_limits
from numbasparse.preprocess.slab_tiles import SlabTiles

parser = argparse.ArgumentParser()
parser.add_argument("graphs", nargs="+")
parser.add_argument("--n", default="64,128,256")
args = parser.parse_args()
sms = device_limits()[0]
rng = np.random.default_rng(0)
for path in args.graphs:
    A = sp.load_npz(path).tocsr()
    A.sort_indices()
    A, dev, T = weighted(A, rng)
    for n in (int(x) for x in args.n.split(",")):
        Bt = torch.from_numpy(rng.standard_normal((A.shape[1], n)).astype(np.float32)).cuda()
        B = cuda.as_cuda_array(Bt)
        Ct = torch.empty((A.shape[0], n), device="cuda")
        C = cuda.as_cuda_array(Ct)
        runs = {"hp": lambda: hp.spmm_hp(dev, B, C, "sum"), "slab": lambda: slab.spmm_slab(dev, B, C, "sum")}
        bad = [f"{label}:{error:.1e}" for label, error in errors(runs, Ct, torch.sparse.mm(T, Bt)).items()]
        runs["cusparse"] = lambda: torch.sparse.mm(T, Bt)
        us = {label: min(time_kernels(run, repeat=10) for _ in range(3)) * 1e3 for label, run in runs.items()}
        lanes = slab.lane_layout(n, 4, B, C)[0]
        tile_cols, width, per_tile = slab.balanced_tiling(A.indices, A.shape[1], n, 4, B, C)
        tiles = SlabTiles(A.indptr, A.indices, A.shape, width, per_tile, slab.DEFAULT.max_segment, slab.DEFAULT.warps)
        segments = tiles.seg_row.size * cdiv(n, tile_cols)
        slab_pred, hp_pred = dispatch.slab_and_hp_us(A.nnz, segments, n, 4)
        print(f"{path.split('/')[-1][:-4]} N={n} nnz={A.nnz} segments={segments} lanes={lanes} "
              + " ".join(f"{label}={t:.1f}us" for label, t in us.items())
              + f" slab_ps_per_segment={us['slab'] * 1e6 / segments:.0f} (x{sms} SMs = {us['slab'] * 1e3 * sms / segments:.1f} ns)"
              + f" hp_ps_per_entry_column={us['hp'] * 1e6 / (A.nnz * n):.3f}"
              + f" predicted slab={slab_pred:.1f}us hp={hp_pred:.1f}us auto={dispatch.auto_name('spmm', 'cuda', n, 4, dev)}"
              + (" BAD " + " ".join(bad) if bad else ""), flush=True)
