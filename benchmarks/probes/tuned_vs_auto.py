"""``algorithm="tuned"`` against ``"auto"`` (GPU only), with an empty tuner cache:

    python benchmarks/probes/tuned_vs_auto.py --graphs default,rmat:18 --data .data --n 64,256 --out tuned.json

For each op, graph and N: the first tuned call (the candidates it times compiled and timed: the
record's ``search_s``; ``--all``: every candidate of the space), their times and the Spearman
rank correlation of the space's order with them, then tuned and auto timed interleaved (back to back, median), results
checked against each other.
"""
import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def spearman(times):
    """Rank correlation of the candidates' order (their position) with their measured times."""
    if len(times) < 3:
        return None
    ranks = np.argsort(np.argsort(times))
    return float(np.corrcoef(np.arange(len(times)), ranks)[0, 1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="default,rmat:16")
    p.add_argument("--data", help="also every .npz graph in this folder")
    p.add_argument("--n", default="64,256")
    p.add_argument("--ops", default="spmm,sddmm")
    p.add_argument("--out", required=True)
    p.add_argument("--all", action="store_true", help="time every candidate (the data tools/fit_cost_model.py "
                   "fits), not the cost model's first tuner.TUNE_TOP")
    args = p.parse_args()
    os.environ["NUMBASPARSE_CACHE"] = tempfile.mkdtemp()  # an empty cache: every first call searches
    import torch

    import numbasparse as ns
    from numbasparse import graphs
    from numbasparse.bench.timing import time_cuda_interleaved
    from numbasparse.select import tuner

    if args.all:
        tuner.TUNE_TOP = None
    found = {s: graphs.from_spec(s) for s in args.graphs.split(",") if s}
    if args.data:
        found.update(graphs.load_npz_dir(args.data))
    rows = []
    for name, A in found.items():
        A = A.astype(np.float32)
        A.data = np.random.default_rng(0).uniform(0.5, 1.5, A.nnz).astype(np.float32)
        for op in args.ops.split(","):
            for n in (int(x) for x in args.n.split(",")):
                csr = ns.CSR.from_scipy(A)
                B = torch.randn(A.shape[1], n, device="cuda")
                X = torch.randn(A.shape[0], n, device="cuda")
                call = ((lambda algorithm: ns.spmm(csr, B, algorithm=algorithm)) if op == "spmm"
                        else (lambda algorithm: ns.sddmm(csr, X, B, algorithm=algorithm)))
                torch.cuda.synchronize()
                start = time.perf_counter()
                tuned = call("tuned")
                torch.cuda.synchronize()
                first_s = time.perf_counter() - start
                auto = call("auto")
                error = float(torch.linalg.norm(tuned - auto) / torch.linalg.norm(auto))
                key = tuner.cache_key(tuner.Device.current().name, csr.cache.get("plans", ("signature",)), n,
                                      np.float32, op)
                entry = json.loads(tuner.cache_path().read_text())[key]
                times = list(entry["times"].values())
                ms = {k: v[0] for k, v in time_cuda_interleaved({"tuned": lambda: call("tuned"),
                                                                  "auto": lambda: call("auto")},
                                                                 calls=20, warmup=3, repeat=9).items()}
                rows.append(dict(op=op, graph=name, nnz=int(A.nnz), n=n, first_call_s=first_s,
                                 search_s=entry["search_s"], candidates=len(times), choice=entry["choice"],
                                 first_ms=entry["first_ms"], best_ms=entry["best_ms"], spearman=spearman(times),
                                 tuned_b2b_ms=ms["tuned"], auto_b2b_ms=ms["auto"], error=error, times=entry["times"],
                                 confirmed=entry.get("confirmed"), again_ms=entry.get("again_ms")))
                print(f"{op} {name} N={n}: search {entry['search_s']:.1f} s over {len(times)} candidates, "
                      f"best {entry['best_ms']:.4f} ms vs rules {entry['first_ms']:.4f} ms "
                      f"({entry['first_ms'] / entry['best_ms']:.2f}x), {entry['choice']}; back to back tuned "
                      f"{ms['tuned']:.4f} auto {ms['auto']:.4f} ms ({ms['auto'] / ms['tuned']:.2f}x); "
                      f"rank corr {rows[-1]['spearman']}; confirmed {entry.get('confirmed')} "
                      f"{entry.get('again_ms') or ''}; err {error:.1e}", flush=True)
                Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
