"""Reordering on shuffled graphs (GPU only): does ``prepare(reorder=...)`` win back the natural
order's speed, and does ``reorder="auto"`` take an order exactly where one pays?

    python benchmarks/probes/reorder_payback.py --graphs rmat:20,.data/cnr_2000.npz --n 64,256 --out r.json

For each graph G and width N: SpMM sum (``auto`` algorithm) on G as it is ("natural") and on a
seeded shuffle of its node ids; on the shuffle, ``prepare(reorder=M)`` for each method M, timed as
a user calls it (``plan.spmm``: B permuted in, C permuted back on every call) with CUDA events
(median, interleaved; checked on 2000 sampled rows). Per method: the time, the share of the natural order's speed recovered,
the seconds spent computing the order and the calls to win them back against the shuffled
graph's own order; for ``auto``, the decision and the model's predicted B-row fetches per order
(``plan.decisions``), to set beside the measured times.  ``M@plan`` rows: the same order with
``node_order="plan"`` (B converted once, no per-call permutation: the kernel on the reordered
graph alone; ``auto@plan`` decides for the row's N at prepare).
"""
import argparse
import json
import time

import numpy as np


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="rmat:20")
    p.add_argument("--n", default="64,256")
    p.add_argument("--methods", default="bfs,rcm,degree,louvain,auto")
    p.add_argument("--louvain-max-nnz", type=int, default=5_000_000, help="skip Louvain above this")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    import torch

    import numbasparse as ns
    from numbasparse import graphs
    from numbasparse.bench.timing import time_cuda_interleaved

    rng = np.random.default_rng(0)
    rows = []
    for spec in args.graphs.split(","):
        natural = graphs.from_spec(spec).tocsr()
        natural.data = rng.uniform(0.5, 1.5, natural.nnz).astype(np.float32)  # weights, never all ones
        shuffled = graphs.shuffled(natural)
        for n in (int(k) for k in args.n.split(",")):
            B = torch.randn(natural.shape[1], n, device="cuda")
            B_shuffled = torch.randn(natural.shape[1], n, device="cuda")
            plans, prep, fns = {}, {}, {}
            fns["natural"] = (lambda A=ns.CSR.from_scipy(natural), B=B: ns.spmm(A, B))
            for method in ["none"] + args.methods.split(","):
                if method == "louvain" and natural.nnz > args.louvain_max_nnz:
                    continue
                start = time.perf_counter()
                plan = ns.prepare(shuffled, reorder=None if method == "none" else method)
                plan.spmm(B_shuffled)  # "auto" decides (and computes orders) at its first call
                torch.cuda.synchronize()
                prep[method] = dict(seconds=time.perf_counter() - start, reorder_seconds=plan.reorder_seconds)
                plans[method] = plan
                fns[method] = (lambda plan=plan: plan.spmm(B_shuffled))
                if method == "none":
                    continue
                start = time.perf_counter()
                kept = ns.prepare(shuffled, reorder=method, node_order="plan", n_cols=n if method == "auto" else None)
                B_plan = kept.to_plan_order(B_shuffled)
                torch.cuda.synchronize()
                label = f"{method}@plan"
                prep[label] = dict(seconds=time.perf_counter() - start, reorder_seconds=kept.reorder_seconds)
                plans[label] = kept
                fns[label] = (lambda kept=kept, B_plan=B_plan: kept.spmm(B_plan))
            check = np.sort(rng.choice(shuffled.shape[0], min(2000, shuffled.shape[0]), replace=False))
            expected = torch.from_numpy(shuffled[check].astype(np.float64) @ B_shuffled.double().cpu().numpy())
            for method, plan in plans.items():
                got = (plan.to_caller_order(plan.spmm(plan.to_plan_order(B_shuffled))) if plan.node_order == "plan"
                       else plan.spmm(B_shuffled))
                got = got[torch.from_numpy(check).cuda()].double().cpu()
                err = float(torch.linalg.norm(got - expected) / torch.linalg.norm(expected))
                assert err < 1e-5, (spec, n, method, err)
            times = {k: v[0] for k, v in time_cuda_interleaved(fns, repeat=20).items()}
            for method in plans:
                saved_ms = times["none"] - times[method]
                row = dict(graph=spec, nnz=int(natural.nnz), nodes=int(natural.shape[0]), n=n, method=method,
                           ms=times[method], natural_ms=times["natural"], shuffled_ms=times["none"],
                           recovered=times["natural"] / times[method], **prep[method],
                           payback_calls=(prep[method]["reorder_seconds"] * 1e3 / saved_ms if saved_ms > 0
                                          else float("inf")))
                if method == "auto@plan":  # the same decision on the graph in its natural order
                    row["auto_on_natural"] = ns.prepare(natural, reorder="auto", node_order="plan",
                                                        n_cols=n).decisions[n]["method"]
                if method.startswith("auto"):
                    decision = plans[method].decisions.get(n, {})
                    row["auto_took"] = decision.get("method")
                    row["auto_why"] = decision.get("why")
                    row["predicted_fetches"] = {k: (v["fetches"] if isinstance(v, dict) else v) for k, v in
                                                decision.items() if k == "natural_fetches" or isinstance(v, dict)}
                rows.append(row)
                print(f"{spec:28s} N={n:<4d} {method:8s} {times[method]:8.3f} ms  natural {times['natural']:.3f}"
                      f"  shuffled {times['none']:.3f}  recovered {row['recovered']:.2f}  order "
                      f"{row['reorder_seconds']:.2f} s  payback {row['payback_calls']:.0f} calls"
                      + (f"  auto took {row['auto_took']}: {row['auto_why']}" if method.startswith("auto") else "")
                      + (f"  on the natural graph: {row['auto_on_natural']}" if "auto_on_natural" in row else ""),
                      flush=True)
            with open(args.out, "w") as f:
                json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1, default=str)


if __name__ == "__main__":
    main()
