"""numbasparse.distributed: halo volumes per partitioning, and the time split of a distributed SpMM.

    python benchmarks/distributed.py volumes DATA_DIR [--parts 2,4,8] [--n 64]
    python benchmarks/distributed.py time [--graph rmat:16] [--ranks 1,2,4] [--backend gloo|nccl] [--n 64]

``volumes`` (no process group, no GPU): for each ``*.npz`` graph and P, per partitioning
(contiguous vs Louvain): the largest halo (rows a rank receives per exchange), the total over
ranks, the bytes per exchange of N float32 columns, and the load imbalance (largest rank's
nonzeros-plus-rows over the mean).

``time``: spawns P ranks (gloo: CPU tensors on the CPU backend; nccl: one GPU per rank) for each
P in ``--ranks`` and partitioning, and reports the median over 20 calls of one ``spmm`` (sum) of
N columns, split into the halo exchange and the local kernel (the slowest rank's), with the
speed-up over P = 1.
"""
import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np


def volumes(args):
    import scipy.sparse as sp

    import numbasparse.distributed as nsd

    parts = [int(p) for p in args.parts.split(",")]
    print(f"{'graph':<20} {'P':>2} {'method':<10} {'max halo rows':>13} {'total halo':>11} "
          f"{'MB/exchange':>11} {'imbalance':>9}")
    rows = []
    for path in sorted(Path(args.data).glob("*.npz")):
        A = sp.load_npz(path)
        for P in parts:
            for method in nsd.METHODS:
                start = time.perf_counter()
                part = nsd.partition(A, P, method)
                seconds = time.perf_counter() - start
                v = nsd.halo_volume(A, part, itemsize=4, n_cols=args.n)
                load = np.bincount(part.owner, weights=np.diff(A.indptr) + 1.0, minlength=P)
                row = dict(graph=path.stem, P=P, method=method, max_halo=max(h for _, h, _ in v),
                           total_halo=sum(h for _, h, _ in v), mb=sum(b for _, _, b in v) / 2**20,
                           imbalance=float(load.max() / load.mean()), partition_s=round(seconds, 2))
                rows.append(row)
                print(f"{row['graph']:<20} {P:>2} {method:<10} {row['max_halo']:>13} {row['total_halo']:>11} "
                      f"{row['mb']:>11.2f} {row['imbalance']:>9.2f}", flush=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rank(rank, world, port, spec, method, backend, n_cols, queue):
    import torch
    import torch.distributed as dist

    import numbasparse.distributed as nsd
    import numbasparse.torch as nst
    from numbasparse import graphs

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        A = graphs.from_spec(spec)
        dg = nsd.DistGraph(A, method=method, device=device)
        X = torch.randn(dg.n_owned, n_cols, device=device)
        sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
        exchange, local = [], []
        for i in range(25):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            ext = nsd.halo_exchange(dg, X)
            sync()
            t1 = time.perf_counter()
            nst.spmm(dg.graph, ext)
            sync()
            t2 = time.perf_counter()
            if i >= 5:
                exchange.append(t1 - t0)
                local.append(t2 - t1)
        stats = torch.tensor([np.median(exchange), np.median(local), np.median(exchange) + np.median(local)],
                             dtype=torch.float64, device=device)
        gathered = [torch.zeros_like(stats) for _ in range(world)]
        dist.all_gather(gathered, stats)
        if rank == 0:
            worst = torch.stack(gathered).max(dim=0).values.cpu().tolist()
            queue.put(dict(exchange_ms=worst[0] * 1e3, local_ms=worst[1] * 1e3, total_ms=worst[2] * 1e3,
                           halo_rows=int(dg.n_halo)))
    finally:
        dist.destroy_process_group()


def timing(args):
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    print(f"{'graph':<12} {'method':<10} {'P':>2} {'exchange ms':>11} {'local ms':>9} {'total ms':>9} {'speed-up':>8}")
    rows = []
    for method in ("contiguous", "louvain"):
        base = None
        for P in [int(p) for p in args.ranks.split(",")]:
            queue = context.SimpleQueue()
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            mp.spawn(_rank, args=(P, port, args.graph, method, args.backend, args.n, queue), nprocs=P, join=True)
            row = dict(queue.get(), graph=args.graph, method=method, P=P, backend=args.backend, n=args.n)
            base = base or row["total_ms"]
            row["speedup"] = base / row["total_ms"]
            rows.append(row)
            print(f"{args.graph:<12} {method:<10} {P:>2} {row['exchange_ms']:>11.3f} {row['local_ms']:>9.3f} "
                  f"{row['total_ms']:>9.3f} {row['speedup']:>8.2f}", flush=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("volumes")
    v.add_argument("data")
    v.add_argument("--parts", default="2,4,8")
    v.add_argument("--n", type=int, default=64)
    v.add_argument("--out")
    t = sub.add_parser("time")
    t.add_argument("--graph", default="rmat:16")
    t.add_argument("--ranks", default="1,2")
    t.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    t.add_argument("--n", type=int, default=64)
    t.add_argument("--out")
    args = parser.parse_args()
    (volumes if args.command == "volumes" else timing)(args)


if __name__ == "__main__":
    sys.exit(main())
