"""Kernel time of HP-SpMM with each rule parameter moved (DTP nonzeros per group x1/4..x4, the
launch mode toggled, gather depth 1/2/4) beside the column-slab kernel and cuSPARSE, float32 sum,
with the pattern statistics the rules read; then one call by events of the rule, the toggled
launch mode and cuSPARSE.  One JSON line per graph and N (checked first: error < 1e-5).

    python benchmarks/probes/spmm_variants.py .data [--n 32,64,128,256] [--graphs a,b] > OUT.jsonl

``--events-only``: no kernel times, so no CUPTI in the process (once attached it adds host time
to every later launch): one call by events and back to back of the rule, the toggled launch mode,
the slab kernel and cuSPARSE.

``--ncu rule,npg256,...``: only those variants, each checked (its first run) and then run once
more, untimed, for Nsight Compute (``ncu -k regex:"spmm_(hp|slab)" ... python ...``: each
variant's second kernel is the one to read); absent labels are skipped; ``cusparse`` adds one
unchecked ``torch.sparse.mm`` after them (widen the ``-k`` regex to catch its kernels).
"""
import argparse
import json
import sys

import numpy as np
import torch
from numba import cuda

from _variants import errors, weighted_graphs
from numbasparse import dispatch, reductions
from numbasparse.bench.timing import time_cuda_interleaved, time_kernels
from numbasparse.cuda import hp, slab
from numbasparse.cuda.device import WARP_SIZE
from numbasparse.preprocess import rows as row_prep

parser = argparse.ArgumentParser()
parser.add_argument("folder")
parser.add_argument("--n", default="32,64,128,256")
parser.add_argument("--graphs", default="")
parser.add_argument("--ncu", default="")
parser.add_argument("--events-only", action="store_true")
args = parser.parse_args()
widths = [int(x) for x in args.n.split(",")]
wanted = set(filter(None, args.graphs.split(",")))
rng = np.random.default_rng(0)


def public_call(A, Bt, single):
    """``ns.spmm`` on a fresh CSR of ``A``, its HP launch mode forced (``single``; None: the
    rule's) while its first calls plan and record it (from then on the replay launches it).
    Forcing moves the mean-row bound only: a graph whose rows span more blocks than
    ``hp.MAX_SINGLE_LAUNCH_SPAN`` or whose groups zero more than ``hp.MAX_ZEROED_ROWS`` empty rows
    keeps the filled launch (the JSON line's ``span`` and ``empty_per_group`` say).  The rule is
    patched, not ``hp.SINGLE_MAX_MEAN_ROW``, which ``auto``'s slab rule reads too."""
    import numbasparse as ns

    csr, rule = ns.CSR.from_scipy(A), hp.single_launch
    if single is not None:
        mean_row = 0.0 if single else float("inf")
        hp.single_launch = lambda _, span, empty_rows: rule(mean_row, span, empty_rows)
    try:
        for _ in range(6):
            ns.spmm(csr, Bt)
    finally:
        hp.single_launch = rule
    return lambda: ns.spmm(csr, Bt)


for name, A, dev, T in weighted_graphs(args.folder, rng):
    if wanted and name not in wanted:
        continue
    lengths = np.diff(A.indptr)
    nonempty = int(np.count_nonzero(lengths))
    for n in widths:
        Bt = torch.from_numpy(rng.standard_normal((A.shape[1], n)).astype(np.float32)).cuda()
        B = cuda.as_cuda_array(Bt)
        Ct = torch.empty((A.shape[0], n), device="cuda")
        C = cuda.as_cuda_array(Ct)
        expected = torch.sparse.mm(T, Bt)
        plan = hp._spmm_plan(dev, reductions.CODES["sum"], n, B, C, None, None, None, None, None)
        npg, lanes = plan.nnz_per_group, hp.lane_layout(n, 4, B)[0]
        block_nnz = hp.WARPS_PER_BLOCK * (WARP_SIZE // lanes) * npg
        _, width, _ = slab.tiling(A.nnz, A.shape[1], n, 4, B)
        stats = dict(graph=name, n=n, rows=A.shape[0], nnz=A.nnz, nonempty=nonempty,
                     mean_row=A.nnz / max(1, nonempty), max_row=int(lengths.max()),
                     row_cv=float(lengths[lengths > 0].std() / max(1e-9, lengths[lengths > 0].mean())),
                     share_split=float(lengths[lengths > npg].sum() / max(1, A.nnz)),
                     lanes=lanes, npg=npg, depth=plan.depth, single=plan.single, grid=list(plan.grid),
                     waves=plan.grid[0] * plan.grid[1] / hp.full_wave(),
                     span=row_prep.crossing_span(A.indptr, block_nnz),
                     empty_per_group=row_prep.empty_rows_per_group(A.indptr, npg),
                     entries_per_segment=dispatch.entries_per_segment(A.indptr, A.indices, width),
                     auto="slab" if dispatch.slab_pays(dev, n, 4) else "hp")
        variants = {"rule": lambda: hp.spmm_hp(dev, B, C, "sum"),
                    "slab": lambda: slab.spmm_slab(dev, B, C, "sum")}
        toggled = "filled" if plan.single else "single"
        variants[toggled] = lambda: hp.spmm_hp(dev, B, C, "sum", single=not plan.single)
        for f in (0.25, 0.5, 2, 4):
            p = int(npg * f)
            if 4 <= p <= 4096:
                variants[f"npg{p}"] = lambda p=p: hp.spmm_hp(dev, B, C, "sum", nnz_per_group=p)
        for d in (1, 2, 4):
            if d != plan.depth:
                variants[f"d{d}"] = lambda d=d: hp.spmm_hp(dev, B, C, "sum", depth=d)
        if args.ncu:  # only the listed variants: checked (the warm-up), then run once each
            variants = {k: v for k, v in variants.items() if k in args.ncu.split(",")}
        bad = errors(variants, Ct, expected)
        if args.ncu:
            if "cusparse" in args.ncu.split(","):  # (the yardstick: its kernel beside ours)
                variants["cusparse"] = lambda: torch.sparse.mm(T, Bt)
            for label, fn in variants.items():
                print(f"{name} N={n} {label}", file=sys.stderr, flush=True)
                fn()
                torch.cuda.synchronize()
            continue
        variants["cusparse"] = lambda: torch.sparse.mm(T, Bt)
        timed = {k: variants[k] for k in ("rule", toggled, "slab", "cusparse")}
        if args.events_only:
            if stats["auto"] == "hp":  # through the public call (replayed), its launch mode forced
                timed["api rule"] = public_call(A, Bt, None)
                timed[f"api {toggled}"] = public_call(A, Bt, not plan.single)
            one = {k: v[0] for k, v in time_cuda_interleaved(timed, calls=1, repeat=60).items()}
            b2b = {k: v[0] for k, v in time_cuda_interleaved(timed, calls=20, repeat=10).items()}
            print(json.dumps(dict(stats, one_call_ms=one, b2b_ms=b2b, bad=bad)), flush=True)
            print(f"{name} N={n} one call " + " ".join(f"{k}={v * 1e3:.1f}" for k, v in one.items())
                  + " | b2b " + " ".join(f"{k}={v * 1e3:.1f}" for k, v in b2b.items()), file=sys.stderr, flush=True)
            continue
        kernel = {k: time_kernels(fn, repeat=20) for k, fn in variants.items()}
        one = {k: v[0] for k, v in time_cuda_interleaved(timed, calls=1, repeat=30).items()}
        print(json.dumps(dict(stats, kernel_ms=kernel, one_call_ms=one, bad=bad)), flush=True)
        print(f"{name} N={n} " + " ".join(f"{k}={v * 1e3:.1f}" for k, v in kernel.items()), file=sys.stderr, flush=True)
