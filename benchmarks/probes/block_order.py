"""HP-SpMM on node orders that sort rows by length: which order costs (A's rows or its columns),
HP's blocks in order against scattered and (``--reversed``) reversed (``hp.order_blocks``) in
either launch, the single launch on the rows shuffled through a map (``single_shuffled``) and
(``--balanced``) segments of equal predicted work (``hp.balances``: the rule for whole warps), sum,
kernel time by CUPTI beside the slab kernel and cuSPARSE, each result checked against float64.

    python benchmarks/probes/block_order.py FOLDER --n 64,128,256 [--graphs a,b] [--copies deg,mix25] > OUT.jsonl
    python benchmarks/probes/block_order.py FOLDER --n 128 --orders > OUT.jsonl
    python benchmarks/probes/block_order.py FOLDER --n 128 --dtype bfloat16 --copies deg > OUT.jsonl

A graph of FOLDER runs in its own order and, per ``--copies``, with its rows by decreasing
length (``deg``) or increasing length (``asc``), that order with N% of its positions shuffled
among themselves (``mixN``) or its rows shuffled (``shuf``), B unchanged.  ``--dtype bfloat16``:
16-bit operands (the single launch only; cuSPARSE in bfloat16 too, errors checked to 1e-2).
``--reversed``: also HP's blocks in reverse order (the costliest chunks first where rows end
more densely towards the end).  ``--balanced``: also segments of equal predicted work
(``spmm_hp(balanced=True)``) in either launch (the order variants run on equal entries),
``--row-end-costs 1,4``: also balanced on those costs of a row end.  ``--orders``: instead, rows
or columns (B's rows with them) shuffled or by degree
(by decreasing row length, for the columns too: the two differ on directed graphs).
One JSON line per case: the kernel times (µs), the plan's launch mode, block order, DTP and
blocks, and the grid times ``hp.predicted_time`` gives each order (``predicted``; ``mixed``: the
rows in a random order).
"""
import argparse
import json
import sys

import numpy as np
import torch

import ml_dtypes
from _variants import weighted_graphs
from numbasparse import reductions
from numbasparse.arrays import DeviceView
from numbasparse.bench.timing import time_kernels
from numbasparse.csr import CSR
from numbasparse.cuda import hp, slab
from numbasparse.cuda.device import WARP_SIZE
from numbasparse.reorder import degree_order

parser = argparse.ArgumentParser()
parser.add_argument("folder")
parser.add_argument("--n", default="64,128,256")
parser.add_argument("--graphs", default="")
parser.add_argument("--copies", default="deg",
                    help="comma list of deg, asc, mixN (deg with N%% of positions reshuffled), shuf")
parser.add_argument("--orders", action="store_true", help="rows or columns shuffled or by degree instead")
parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
parser.add_argument("--reversed", action="store_true", help="also the blocks in reverse order")
parser.add_argument("--balanced", action="store_true", help="also segments of equal predicted work, in order")
parser.add_argument("--row-end-costs", default="",
                    help="with --balanced: also balanced on these costs of a row end (comma list, in entries)")
args = parser.parse_args()
half = args.dtype == "bfloat16"
tolerance = 1e-2 if half else 1e-5
widths = [int(x) for x in args.n.split(",")]
wanted = set(filter(None, args.graphs.split(",")))


def copies(A):
    """(label, matrix, permutation of B's rows or None): the variants of A to time."""
    yield "own", A, None
    by_degree = degree_order(A)
    if args.orders:
        shuffled = np.random.default_rng(1).permutation(A.shape[0])
        for label, perm in (("shuffled", shuffled), ("degree", by_degree)):
            yield f"rows_{label}", A[perm], None
            yield f"columns_{label}", A[:, perm], perm
        return
    for copy in filter(None, args.copies.split(",")):
        if copy == "asc":  # rows by increasing length (short rows first)
            yield "rows_asc", A[by_degree[::-1]], None
            continue
        if copy == "shuf":
            yield "rows_shuf", A[np.random.default_rng(1).permutation(A.shape[0])], None
            continue
        order = by_degree.copy()
        if copy.startswith("mix"):
            rng = np.random.default_rng(2)
            pick = np.flatnonzero(rng.random(order.size) < int(copy[3:]) / 100)
            order[pick] = order[rng.permutation(pick)]
        yield f"rows_{copy}", A[order], None


def balanced_on(dev, cost, B, C, single):
    """HP-SpMM on segments balanced for a row end of ``cost`` entries: a copy of ``dev``'s
    matrix (plans are cached per matrix, not per cost), kept per cost."""
    key = ("balanced copy", cost)
    copy = dev.cache.sections["plans"].get(key)
    if copy is None:
        copy = dev.cache.sections["plans"][key] = CSR.from_scipy(dev.to_scipy(), dtype=dev.dtype)
    saved, hp.ROW_END_COST = hp.ROW_END_COST, cost
    try:
        hp.spmm_hp(copy, B, C, "sum", single=single, block_order="in_order", shuffled=False, balanced=True)
    finally:
        hp.ROW_END_COST = saved


for name, A0, _, _ in weighted_graphs(args.folder, np.random.default_rng(0)):
    if wanted and name not in wanted:
        continue
    for label, A, perm in copies(A0):
        A = A.tocsr()
        A.sort_indices()
        tdtype = torch.bfloat16 if half else torch.float32
        if half:
            A.data = torch.from_numpy(A.data).to(tdtype).float().numpy()  # the values bfloat16 holds
        dev = CSR.from_scipy(A, dtype=ml_dtypes.bfloat16 if half else np.float32)
        T = torch.sparse_csr_tensor(*(torch.from_numpy(a).cuda() for a in (A.indptr, A.indices, A.data)), A.shape)
        T = T.to(tdtype)
        for n in widths:
            B0 = torch.from_numpy(np.random.default_rng(3).standard_normal((A0.shape[1], n)).astype(np.float32)).cuda()
            Bt = (B0 if perm is None else B0[torch.from_numpy(perm).cuda()].contiguous()).to(tdtype)
            B = DeviceView.of_torch(Bt)
            Ct = torch.empty(A.shape[0], n, device="cuda", dtype=tdtype)
            C = DeviceView.of_torch(Ct)
            expected = torch.from_numpy(A.astype(np.float64) @ Bt.double().cpu().numpy()).cuda()
            plan = hp._spmm_plan(dev, reductions.CODES["sum"], n, B, C, None, None, None, None, None)
            block_nnz = hp.WARPS_PER_BLOCK * (WARP_SIZE // plan.layout[0]) * plan.nnz_per_group
            variants = {"rule": lambda: hp.spmm_hp(dev, B, C, "sum")}
            orders = ("in_order", "scattered", "reversed") if args.reversed else ("in_order", "scattered")
            for single in (True,) if half else (True, False):
                for order in orders:
                    variants[f"{'single' if single else 'filled'}_{order}"] = (
                        lambda single=single, order=order: hp.spmm_hp(dev, B, C, "sum", single=single,
                                                                      block_order=order, shuffled=False,
                                                                      balanced=False))
                if args.balanced:
                    variants[f"{'single' if single else 'filled'}_balanced"] = (
                        lambda single=single: hp.spmm_hp(dev, B, C, "sum", single=single, block_order="in_order",
                                                         shuffled=False, balanced=True))
                    for cost in filter(None, args.row_end_costs.split(",")):
                        variants[f"{'single' if single else 'filled'}_balanced_r{cost}"] = (
                            lambda single=single, cost=cost: balanced_on(dev, float(cost), B, C, single))
            variants["single_shuffled"] = lambda: hp.spmm_hp(dev, B, C, "sum", single=True, block_order="in_order",
                                                             shuffled=True)
            if not half:
                variants["slab"] = lambda: slab.spmm_slab(dev, B, C, "sum")
            variants["cusparse"] = lambda: Ct.copy_(torch.sparse.mm(T, Bt))
            bad = {}
            for key, fn in variants.items():
                Ct.fill_(float("nan"))
                fn()
                err = float(torch.linalg.norm(Ct.double() - expected) / torch.linalg.norm(expected))
                if not err < tolerance:
                    bad[key] = err
            variants["cusparse"] = lambda: torch.sparse.mm(T, Bt)  # (timed without the copy)
            us = {key: time_kernels(fn, repeat=30) for key, fn in variants.items()}
            us = {key: None if ms is None else ms * 1e3 for key, ms in us.items()}  # (None: no CUPTI events)
            blocks = plan.grid[0]
            predicted = {order: hp.predicted_time(dev, block_nnz, order) for order in hp.BLOCK_ORDERS}
            predicted["mixed"] = hp.predicted_time(dev, block_nnz, "in_order", mixed=True)
            print(json.dumps(dict(graph=name, copy=label, n=n, dtype=args.dtype, single=plan.single,
                                  block_order=plan.block_order, shuffled=plan.shuffled, balanced=plan.balanced,
                                  nnz_per_group=plan.nnz_per_group, blocks=blocks, predicted=predicted, us=us,
                                  bad=bad)), flush=True)
            gain = predicted["in_order"] / min(predicted.values())  # (over orders the rule may not take)
            print(f"{name} {label} N={n} predicted gain={gain:.2f} "
                  + " ".join(f"{k}={v:.1f}" for k, v in us.items() if v is not None)
                  + (f" BAD {bad}" if bad else ""), file=sys.stderr, flush=True)
