"""numbasparse.distributed: halo volumes per partitioning, and strong and weak scaling over ranks.

    python benchmarks/distributed.py volumes DATA_DIR [--parts 2,4,8] [--n 64]
    python benchmarks/distributed.py scaling [--backend nccl] [--ranks 1,2,4] [--strong SPEC,...]
        [--weak SCALE] [--n 64,256] [--gcn 256,256,64] [--deadline SECONDS] [--out FILE.jsonl]
        [--baseline EARLIER.jsonl]

``volumes`` (no process group, no GPU): for each ``*.npz`` graph and P, per partitioning
(contiguous vs Louvain): the largest halo (rows a rank receives per exchange), the total over
ranks, the bytes per exchange of N float32 columns, and the load imbalance (largest rank's
nonzeros-plus-rows over the mean).

``scaling``: one world of max(P) ranks (gloo: CPU tensors on the CPU backend; nccl: one GPU
each) and a process subgroup per P, so every P is timed in the same processes (one start-up,
one compile).  Strong scaling: each
``--strong`` graph at every P, contiguous and Louvain partitions (Louvain computed once per
graph, packed per P; skipped above ``--louvain-max-nnz``); weak scaling: ``rmat:S+log2(P)`` at
P ranks (nodes per rank fixed), contiguous.  ``rmat-gpu:SCALE`` draws R-MAT with torch on each
rank's device (:func:`rmat_on_device`; seconds where the host takes minutes at scale 24).  Per
case: the distributed ``spmm`` of each N checked against a float64 product of up to 20k of
the rank's rows and ``sddmm`` (X with itself) on 100k sampled entries, then timed (median of 20, slowest rank):
the halo exchange, the local kernel, the whole call (``nsd.spmm``: the product pipelined with the
exchange, split by :func:`numbasparse.distributed.pipeline_split`) and, at P > 1, the call
with each split forced (``split_ms``; "off" is ``unpipelined_ms``: the product after the whole
exchange); the same for ``sddmm``; and a 2-layer GCN training step
(features, hidden, classes from ``--gcn``: forward, backward, gradient all-reduce), at P > 1
also with the exchanges done first (``unpipelined_ms``).  Speed-up
and efficiency are against the smallest P of ``--ranks`` (1 by default) of the same graph and
partition, or of ``--baseline``'s rows where that holds a smaller P (a series split over calls:
``--ranks 1,2`` then ``--ranks 4 --baseline`` the first call's ``--out``).  Each row is
appended to ``--out`` as it is measured; cases that would start after ``--deadline`` seconds
are skipped.
"""
import argparse
import json
import os
import socket
import sys
import time
import warnings
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


def rmat_on_device(scale, device, edge_factor=16, a=0.57, b=0.19, c=0.19, seed=0):
    """The graph of :func:`numbasparse.graphs.rmat` (Graph500 R-MAT, labels permuted,
    symmetrised, duplicates merged, self-loops dropped, ones) drawn with torch on ``device``:
    seconds on a GPU where the host generator takes minutes at scale 24.  A seeded generator: the
    same graph on every rank of one GPU model (another random stream than ``graphs.rmat``'s)."""
    import scipy.sparse as sp
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    n, m = 1 << scale, edge_factor << scale
    src = torch.zeros(m, dtype=torch.int64, device=device)
    dst = torch.zeros(m, dtype=torch.int64, device=device)
    ab, c_norm, a_norm = a + b, c / (1.0 - (a + b)), a / (a + b)
    for level in range(scale):
        down = torch.rand(m, generator=g, device=device) > ab
        right = torch.rand(m, generator=g, device=device) > down * (c_norm - a_norm) + a_norm
        src += down.to(torch.int64) << level
        dst += right.to(torch.int64) << level
        del down, right
    perm = torch.randperm(n, generator=g, device=device)
    src, dst = perm[src], perm[dst]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = torch.unique(torch.cat([src * n + dst, dst * n + src]))  # sorted by (row, column)
    del src, dst, keep
    rows, cols = keys // n, keys % n
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=n), 0)
    index = np.int32 if n < 2**31 and keys.numel() < 2**31 else np.int64
    return sp.csr_matrix((np.ones(keys.numel(), np.float32), cols.cpu().numpy().astype(index),
                          indptr.cpu().numpy().astype(index)), shape=(n, n))


# NVLink multicast stays off (the device machines' rule; NCCL would otherwise use it on NVSwitch hosts).
MULTICAST_OFF = dict(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")


def _median_max(values, group, device):
    """The median of this rank's ``values``, the largest over the ranks of ``group``."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(np.median(values))], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def _profile(fn, title, path, sync, calls=5):
    """torch.profiler's table of ``calls`` calls of ``fn`` (this rank's host and GPU time per op)
    appended to ``path`` (None: profiled, not written; the other ranks of a collective call)."""
    import torch

    fn()
    sync()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        sync()
    if path is None:
        return
    with open(path, "a") as f:
        f.write(f"\n## {title} ({calls} calls)\n")
        f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))


def _scaling_rank(rank, world, port, args, start):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **MULTICAST_OFF)
    warnings.filterwarnings("ignore", message="Sparse")  # torch's beta notes on the float64 reference
    import numbasparse  # noqa: F401 (its numpy compatibility measures before Numba compiles)
    gpu = args.backend == "nccl"
    if gpu:  # torch and Numba on this rank's GPU (Numba follows the thread's current context)
        torch.cuda.set_device(rank)
        from numba import cuda
        cuda.select_device(rank)
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    import numbasparse.distributed as nsd
    import numbasparse.torch as nst
    from numbasparse import graphs
    from numbasparse.reorder import louvain

    ranks = sorted({int(p) for p in args.ranks.split(",")})
    groups = {P: (None if P == world else dist.new_group(list(range(P)))) for P in ranks}
    widths = [int(n) for n in args.n.split(",")]
    f_in, hidden, classes = (int(x) for x in args.gcn.split(","))
    out = Path(args.out) if args.out else None

    def series(row):
        return row["scaling"], row["graph_family"], row["method"], row["op"], row.get("n")

    base = {}  # series -> (P, ms) of its smallest P: --baseline's rows, then this run's
    for line in (Path(args.baseline).read_text().splitlines() if args.baseline else ()):
        row = json.loads(line)
        if series(row) not in base or row["P"] < base[series(row)][0]:
            base[series(row)] = (row["P"], row["ms"])

    def emit(row):
        if rank != 0:
            return
        key = series(row)
        if row["P"] == ranks[0] and (key not in base or row["P"] <= base[key][0]):
            base[key] = (row["P"], row["ms"])
        if key in base:  # against the smallest P run (1 unless --ranks leaves it out)
            row["baseline_P"], baseline_ms = base[key]
            row["speedup"] = baseline_ms / row["ms"]
            ideal = row["P"] / row["baseline_P"] if row["scaling"] == "strong" else 1.0
            row["efficiency"] = row["speedup"] / ideal
        if out:
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
        print(f"{row['scaling']:<6} {row['graph']:<14} {row['method']:<10} {row['P']:>2} {row['op']:<8} "
              f"{row.get('n', ''):>4} {row['ms']:>9.3f} ms  exchange {row.get('exchange_ms', float('nan')):8.3f}  "
              f"local {row.get('local_ms', float('nan')):8.3f}  unpipelined {row.get('unpipelined_ms', float('nan')):8.3f}  speed-up {row.get('speedup', float('nan')):5.2f}  "
              f"eff {row.get('efficiency', float('nan')):5.2f}  err {row.get('error', float('nan')):.1e}", flush=True)

    def go():
        """Rank 0 decides for everyone whether the next case starts (no rank may skip alone)."""
        flag = torch.tensor([float(time.time() - start < args.deadline)], device=device)
        dist.broadcast(flag, 0)
        return bool(flag.item())

    def times(fn, group, reps=20, warmup=3):
        samples = []
        for i in range(warmup + reps):
            dist.barrier(group=group)
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            if i >= warmup:
                samples.append(time.perf_counter() - t0)
        return samples

    def case(scaling, family, spec, A, method, P, part):
        group = groups[P]
        if rank >= P:
            return
        dg = nsd.DistGraph(A, partition=part, group=group, device=device)
        info = dict(scaling=scaling, graph_family=family, graph=Path(spec).stem if spec.endswith(".npz") else spec,
                    nodes=A.shape[0], nnz=int(A.nnz), method=method, P=P, backend=args.backend)
        halo = torch.tensor([dg.n_halo, dg.n_halo, dg.graph.nnz],
                            dtype=torch.float64, device=device)
        total = halo.clone()
        dist.all_reduce(halo, op=dist.ReduceOp.MAX, group=group)
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
        info.update(max_halo_rows=int(halo[0]), total_halo_rows=int(total[1]), max_local_nnz=int(halo[2]))
        # Checked on up to 20k of the rank's rows (a float64 product of those rows only: the whole
        # graph's would not fit beside the features at scale 24) and 100k of its entries.
        pick = np.random.default_rng(rank)
        sample_rows = np.sort(pick.choice(dg.n_owned, min(dg.n_owned, 20_000), replace=False))
        sub = A[dg.nodes[sample_rows]].tocsr()
        needed, sub_cols = np.unique(sub.indices, return_inverse=True)
        ref_A = torch.sparse_csr_tensor(torch.as_tensor(sub.indptr, dtype=torch.int64),
                                        torch.as_tensor(sub_cols.reshape(-1), dtype=torch.int64),
                                        torch.as_tensor(sub.data, dtype=torch.float64),
                                        size=(sub.shape[0], len(needed)), device=device)
        gen = torch.Generator(device=device).manual_seed(7)
        nodes = torch.as_tensor(dg.nodes, device=device)
        rows, cols = (torch.as_tensor(ids, device=device) for ids in dg.edges())
        # SDDMM checked on these entries (a generator of its own: gen draws the same X on every rank)
        sample = torch.randperm(len(rows), generator=torch.Generator(device=device).manual_seed(rank),
                                device=device)[:100_000]
        edge_values = dg.values.double()[sample]
        rows, cols = rows[sample], cols[sample]
        del sub

        def worst_error(got, ref):
            error = torch.tensor([(torch.linalg.norm(got - ref) / torch.linalg.norm(ref).clamp(min=1e-300)).item()],
                                 dtype=torch.float64, device=device)
            dist.all_reduce(error, op=dist.ReduceOp.MAX, group=group)
            return error.item()

        picked = torch.as_tensor(sample_rows, device=device)
        for n in widths:
            X_full = torch.randn(A.shape[0], n, generator=gen, device=device)  # the same on every rank
            X = X_full[nodes].contiguous()
            ref = torch.sparse.mm(ref_A, X_full[torch.as_tensor(needed, device=device)].double())
            sddmm_ref = edge_values * (X_full[rows].double() * X_full[cols].double()).sum(1)
            del X_full
            error = worst_error(nsd.spmm(dg, X)[picked].double(), ref)
            sddmm_error = worst_error(nsd.sddmm(dg, X, X).double()[sample], sddmm_ref)
            del ref, sddmm_ref
            state = {}

            def exchange():
                state["ext"] = nsd.halo_exchange(dg, X)

            def local():
                nst.spmm(dg.graph, state["ext"])

            def splits(op, fn):
                """The call with each split of the exchange forced ("off": after the whole exchange)."""
                split_ms = {}
                for split in ("off", "halo", "sources") if P > 1 else ():
                    dg.pipeline = split
                    split_ms[split] = _median_max(times(fn, group), group, device) * 1e3
                    if args.profile:  # (every rank of the group calls: the exchange needs them all)
                        _profile(fn, f"{info['graph']} {method} P={P} {op} N={n} {split}",
                                 args.profile if rank == 0 else None, sync)
                dg.pipeline = None
                return split_ms

            ex = _median_max(times(exchange, group), group, device)
            rule = nsd.pipeline_split(P, info["max_halo_rows"] * n * 4) if P > 1 else "off"
            for op, fn, loc_fn, err in (
                    ("spmm", lambda: nsd.spmm(dg, X), local, error),
                    ("sddmm", lambda: nsd.sddmm(dg, X, X), lambda: nst.sddmm(dg.graph, X, state["ext"]),
                     sddmm_error)):
                loc = _median_max(times(loc_fn, group), group, device)
                call = _median_max(times(fn, group), group, device)
                split_ms = splits(op, fn)
                emit(dict(info, op=op, n=n, ms=call * 1e3, exchange_ms=ex * 1e3, local_ms=loc * 1e3,
                          unpipelined_ms=split_ms.get("off", call * 1e3), split_ms=split_ms, rule=rule,
                          exchange_mb=info["max_halo_rows"] * n * 4 / 2**20, error=err))
            del X, state
            if gpu:
                torch.cuda.empty_cache()
        # a 2-layer GCN training step: forward, backward, gradients summed over the ranks
        torch.manual_seed(0)
        X = torch.randn(dg.n_owned, f_in, device=device)
        W1 = torch.nn.Parameter(torch.randn(f_in, hidden, device=device) / f_in ** 0.5)
        W2 = torch.nn.Parameter(torch.randn(hidden, classes, device=device) / hidden ** 0.5)

        def step():
            H = torch.relu(nsd.spmm(dg, X @ W1))
            loss = nsd.spmm(dg, H @ W2).square().mean()
            W1.grad = W2.grad = None
            loss.backward()
            for w in (W1, W2):
                dist.all_reduce(w.grad, group=group)

        try:
            ms = _median_max(times(step, group, reps=10), group, device) * 1e3
            unpipelined = ms
            if P > 1:  # the same step with the exchanges done first
                dg.pipeline = "off"
                unpipelined = _median_max(times(step, group, reps=10), group, device) * 1e3
                dg.pipeline = None
        except torch.cuda.OutOfMemoryError:  # one rank alone (P = 1; no collective to abandon)
            if P > 1:
                raise
            ms = unpipelined = float("nan")
            print(f"# GCN step out of GPU memory at P = 1 ({spec})", flush=True)
        emit(dict(info, op="gcn_step", n=f"{f_in}-{hidden}-{classes}", ms=ms, unpipelined_ms=unpipelined))
        del X, W1, W2, dg
        if gpu:
            torch.cuda.empty_cache()

    loaded = {}

    def load(spec):
        if spec in loaded:
            return loaded[spec]
        t = time.perf_counter()
        if spec.startswith("rmat-gpu:"):
            A = loaded[spec] = rmat_on_device(int(spec.split(":")[1]), device)
        else:
            A = loaded[spec] = graphs.from_spec(spec).tocsr()
        if rank == 0:
            print(f"# {spec}: {A.shape[0]} nodes, {A.nnz} nonzeros, loaded in {time.perf_counter() - t:.1f} s",
                  flush=True)
        return A

    try:
        for spec in [s for s in args.strong.split(",") if s]:
            if not go():
                break
            A = load(spec)
            family = Path(spec).stem if spec.endswith(".npz") else spec
            methods = ["contiguous"] + (["louvain"] if A.nnz <= args.louvain_max_nnz else [])
            for method in methods:
                if not go():
                    break
                labels = louvain(A, seed=0) if method == "louvain" else None
                for P in ranks:
                    if not go():
                        break
                    part = (nsd.partition(A, P, "contiguous") if labels is None else
                            nsd.Partition(nsd._pack(labels, np.diff(A.indptr) + 1.0, P), P))
                    case("strong", family, spec, A, method, P, part)
                    dist.barrier()
        if args.weak:
            for P in ranks:
                if not go():
                    break
                spec = f"{args.weak_generator}:{args.weak + int(np.log2(P))}"
                if rank < P:
                    A = load(spec)
                    case("weak", args.weak_generator, spec, A, "contiguous", P, nsd.partition(A, P, "contiguous"))
                dist.barrier()
    finally:
        dist.destroy_process_group()


def scaling(args):
    import torch.multiprocessing as mp

    world = max(int(p) for p in args.ranks.split(","))
    if args.out:
        Path(args.out).write_text("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"{'kind':<6} {'graph':<14} {'method':<10} {'P':>2} {'op':<8} {'N':>4} {'time':>12}", flush=True)
    mp.spawn(_scaling_rank, args=(world, port, args, time.time()), nprocs=world, join=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("volumes")
    v.add_argument("data")
    v.add_argument("--parts", default="2,4,8")
    v.add_argument("--n", type=int, default=64)
    v.add_argument("--out")
    c = sub.add_parser("scaling")
    c.add_argument("--backend", choices=("gloo", "nccl"), default="nccl")
    c.add_argument("--ranks", default="1,2,4")
    c.add_argument("--strong", default="rmat:20", help="comma-separated graph specs (numbasparse.graphs.from_spec, "
                   "or rmat-gpu:SCALE: R-MAT drawn on each rank's device), each timed at every P")
    c.add_argument("--weak", type=int, default=0, help="R-MAT scale at P = 1 (0: no weak scaling)")
    c.add_argument("--weak-generator", choices=("rmat", "rmat-gpu"), default="rmat",
                   help="R-MAT drawn on the host (numbasparse.graphs) or with torch on each rank's device")
    c.add_argument("--n", default="64,256")
    c.add_argument("--gcn", default="256,256,64", help="GCN features,hidden,classes")
    c.add_argument("--louvain-max-nnz", type=int, default=10_000_000)
    c.add_argument("--deadline", type=float, default=1e9, help="seconds after which no new case starts")
    c.add_argument("--baseline", help="an earlier run's --out (same graphs and method): speed-up and efficiency "
                   "against its smallest P where it is smaller than this run's (split a long series over calls)")
    c.add_argument("--out")
    c.add_argument("--profile", help="append torch.profiler tables of rank 0's SpMM calls, each split, to this file")
    args = parser.parse_args()
    {"volumes": volumes, "scaling": scaling}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
