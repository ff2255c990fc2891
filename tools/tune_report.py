"""How close the G-Sparse cost model's pick is to an exhaustive search (on a GPU).

    python tools/tune_report.py --graphs default,rmat:16,rmat:18 --n 32,128 --out tune.json [--op sddmm]

For each (graph, N): every valid schedule is timed (``tuner._timer``: CUDA events around
back-to-back batches of about 1 ms, median of 5, after a warm-up); reported are the exhaustive best, the cost model's first choice and the best of
its top 8 (``algorithm="tiled"`` times its top ``tuner.TILED_TOP``; ``"tuned"`` those among the other families' candidates), each in ms and
relative to the exhaustive best, the rank of the exhaustive best in the model's order, the search
times, and HP-SpMM and cuSPARSE (torch) on the same operands for comparison (cuSPARSE
sampled_addmm for SDDMM; values of 1 as in the benchmark graphs).
"""
import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

import numbasparse as ns
from numbasparse import graphs
from numbasparse.bench.timing import time_cuda
from numbasparse.select import tuner


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="default,rmat:16")
    p.add_argument("--data")
    p.add_argument("--n", default="32,128")
    p.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from numba import cuda

    found = {s: graphs.from_spec(s) for s in args.graphs.split(",") if s}
    if args.data:
        found.update(graphs.load_npz_dir(args.data))
    device = tuner.Device.current()
    results = []
    for name, A in found.items():
        dev = ns.CSR.from_scipy(A, dtype=np.float32)
        lengths = np.diff(dev.to_scipy().indptr)
        for n in (int(x) for x in args.n.split(",")):
            timer = tuner._timer(dev, args.op, tuner.scratch_operands(dev, args.op, n, np.float32))
            start = time.perf_counter()
            ranked = tuner.rank(lengths, n, device, index_itemsize=dev.index_dtype.itemsize, op=args.op)
            model_s = time.perf_counter() - start
            start = time.perf_counter()
            ms = [timer(tuner.Candidate.of("tiled", **asdict(s))) for s in ranked]
            exhaustive_s = time.perf_counter() - start
            best = int(np.argmin(ms))
            top8 = int(np.argmin(ms[:8]))
            rng = np.random.default_rng(0)
            B = cuda.to_device(rng.standard_normal((A.shape[1], n)).astype(np.float32))
            X = cuda.to_device(rng.standard_normal((A.shape[0], n)).astype(np.float32))
            if args.op == "spmm":
                hp_ms = time_cuda(lambda: ns.spmm(dev, B, algorithm="hp"), repeat=20)[0]
            else:
                hp_ms = time_cuda(lambda: ns.sddmm(dev, X, B, algorithm="hp"), repeat=20)[0]
            row = dict(op=args.op, graph=name, nnz=int(A.nnz), n=n, space=len(ranked), exhaustive_ms=ms[best],
                       exhaustive=asdict(ranked[best]), model_first_ms=ms[0], model_first=asdict(ranked[0]),
                       top8_ms=ms[top8], best_rank_in_model_order=best, model_s=model_s,
                       exhaustive_s=exhaustive_s, hp_ms=hp_ms,
                       all=[dict(asdict(s), ms=t) for s, t in zip(ranked, ms)])  # to recalibrate the model
            try:
                import torch

                S = torch.sparse_csr_tensor(*(torch.as_tensor(a, device="cuda") for a in
                                              (A.indptr.astype(np.int32), A.indices.astype(np.int32),
                                               A.data.astype(np.float32))), size=A.shape)
                Bt = torch.as_tensor(B.copy_to_host(), device="cuda")
                if args.op == "spmm":
                    row["torch_ms"] = time_cuda(lambda: torch.sparse.mm(S, Bt), repeat=20)[0]
                else:
                    Xt = torch.as_tensor(X.copy_to_host(), device="cuda")
                    row["torch_ms"] = time_cuda(lambda: torch.sparse.sampled_addmm(S, Xt, Bt.T, beta=0.0),
                                                repeat=20)[0]
            except ImportError:
                pass
            results.append(row)
            print(f"{name} N={n}: exhaustive {ms[best]:.3f} ms, model's first {ms[0]:.3f} ms "
                  f"({ms[0] / ms[best]:.2f}x), best of top 8 {ms[top8]:.3f} ms ({ms[top8] / ms[best]:.2f}x), "
                  f"exhaustive best ranked {best}/{len(ranked)}; hp {hp_ms:.3f} ms, "
                  f"torch {row.get('torch_ms', float('nan')):.3f} ms; search {exhaustive_s:.0f} s", flush=True)
            Path(args.out).write_text(json.dumps({"gpu": device.name, "rows": results}, indent=1))


if __name__ == "__main__":
    main()
