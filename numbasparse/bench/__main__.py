"""``python -m numbasparse.bench``: numbasparse against cuSPARSE and PyG-style scatter on a GPU.

Examples::

    python -m numbasparse.bench                                   # bundled graph, N=32..256
    python -m numbasparse.bench --graphs rmat:16,rmat:18 --data ../shared/data --out r.json
    python -m numbasparse.bench --graphs none --sampled rmat:18 --sampled-count 40
"""
import argparse
import datetime
import sys
import time
import zlib

import numpy as np

from .. import dispatch, graphs
from ..csr import canonical_csr
from . import harness, report
from .baselines import BASELINES, YARDSTICK


def _list(text, cast=str):
    return [cast(x) for x in text.split(",") if x]


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m numbasparse.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="default",
                   help="comma-separated specs: default, rmat:SCALE[:EF], powerlaw:N[:DEG], FILE.npz, or none")
    p.add_argument("--data", help="also every *.npz scipy CSR graph in this directory")
    p.add_argument("--n", type=lambda t: _list(t, int), default=[32, 64, 128, 256], help="dense widths, e.g. 32,64")
    p.add_argument("--ops", type=_list, default=["spmm", "sddmm"],
                   help="spmm, sddmm, gcn ((A @ X) @ W with W N x 64: spmm_dense, its fused kernel, spmm then matmul), "
                        "sddmm_spmm, attention (fused vs unfused; yardstick: PyG-style gather/scatter)")
    p.add_argument("--reduce", type=_list, default=["sum"], help="SpMM reductions, e.g. sum,mean,max,min")
    p.add_argument("--algorithms", type=_list, default=None,
                   help="numbasparse algorithms (default: all CUDA ones); ALGO@tf32: spmm with precision='tf32'")
    p.add_argument("--baselines", type=_list, default=None,
                   help="comma list, or 'none' (default: all; the *_f32 ones only for 16-bit dtypes)")
    p.add_argument("--dtype", choices=("float32", "float64", "float16", "bfloat16"), default="float32",
                   help="operands' dtype; the *_f32 baselines run float32 copies of 16-bit inputs")
    p.add_argument("--values", choices=("random", "graph"), default="random",
                   help="A's values: random in [0.5, 1.5), seeded by the graph's name (default: a kernel that "
                        "ignored them would fail the check), or the graph's own (often all 1)")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reorder", type=_list, default=["none"],
                   help="also time each graph reordered: none,louvain,loa (kernel on the permuted graph)")
    p.add_argument("--sampled", help="graph spec to draw GraphSAINT-style subgraphs from")
    p.add_argument("--sampled-count", type=int, default=32)
    p.add_argument("--sampled-nodes", type=lambda t: _list(t, int), default=[1000, 10000], help="MIN,MAX nodes")
    p.add_argument("--kernel-time", action="store_true",
                   help="also record GPU time per call without host overhead (kernel_ms, via torch.profiler)")
    p.add_argument("--out", help="write all rows and metadata as JSON here")
    p.add_argument("--plots", help="write PNG plots into this directory (needs matplotlib)")
    p.add_argument("--markdown", help="write the table and summary as Markdown here")
    args = p.parse_args(argv)
    if args.baselines is None:
        args.baselines = [b for b in BASELINES if args.dtype in ("float16", "bfloat16") or not b.endswith("_f32")]
    if args.baselines == ["none"]:
        args.baselines = []
    unknown = set(args.baselines) - set(BASELINES)
    if unknown:
        p.error(f"unknown baselines {sorted(unknown)}; known: {sorted(BASELINES)}")
    if set(args.ops) - {"spmm", "sddmm", "gcn", "sddmm_spmm", "attention"}:
        p.error("--ops takes spmm, sddmm, gcn, sddmm_spmm and/or attention")
    if set(args.reduce) - {"sum", "mean", "max", "min"}:
        p.error("--reduce takes sum, mean, max, min")
    if args.repeat < 1 or any(n < 1 for n in args.n):
        p.error("--repeat and --n must be positive")
    if set(args.reorder) - {"none", "louvain", "loa"}:
        p.error("--reorder takes none, louvain and/or loa")
    if len(args.sampled_nodes) != 2 or not 0 < args.sampled_nodes[0] <= args.sampled_nodes[1]:
        p.error("--sampled-nodes takes MIN,MAX")
    return args


def load_graphs(args):
    """{name: CSR} of every requested graph, and {name: seconds} spent reordering the
    ``NAME+louvain`` / ``NAME+loa`` variants that --reorder adds."""
    found = {}
    for spec in _list(args.graphs):
        if spec != "none":
            found[spec] = graphs.from_spec(spec)
    if args.data:
        found.update(graphs.load_npz_dir(args.data))
    # Canonical CSR (sorted, no duplicates) for every implementation and reference alike:
    # SDDMM returns its values in canonical order.
    stored = {name: canonical_csr(A) for name, A in found.items()}
    found = {name: with_values(A, name, args.values) for name, A in stored.items()}
    prep_seconds = {}
    for name, A in stored.items():
        for method in args.reorder:
            if method == "none":
                continue
            from .. import reorder

            start = time.perf_counter()  # (the order from the graph's own values, never the random ones)
            perm = reorder.cluster_order(A) if method == "louvain" else reorder.loa(A)
            prep_seconds[f"{name}+{method}"] = time.perf_counter() - start
            found[f"{name}+{method}"] = reorder.permute(found[name], perm)
    if "none" not in args.reorder:
        found = {k: v for k, v in found.items() if k in prep_seconds}
    return found, prep_seconds


def with_values(A, name, values):
    """``A`` with random values in [0.5, 1.5) seeded by ``name`` (``values="random"``), else as
    it is; A's pattern and dtype unchanged."""
    if values == "graph":
        return A
    A = A.copy()
    A.data = np.random.default_rng(zlib.crc32(name.encode())).uniform(0.5, 1.5, A.nnz).astype(A.dtype)
    return A


def device_meta():
    from numba import cuda

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return {"gpu": name, "sms": dispatch.gpu_present() and int(dev.MULTIPROCESSOR_COUNT),
            "l2_bytes": int(getattr(dev, "L2_CACHE_SIZE", 50 << 20))}


def checkpoint(args, meta, rows):
    """Keep what has been measured so far on disk: long runs can be cut off."""
    if args.out:
        harness.add_metrics(rows, meta["copy_gbs"], YARDSTICK)
        report.write_json(args.out, meta, rows)


def main(argv=None):
    args = parse_args(argv)
    if not dispatch.gpu_present():
        print("numbasparse.bench needs a CUDA GPU (none found)", file=sys.stderr)
        return 2
    algorithms = args.algorithms or sorted(set(dispatch.algorithms("spmm", "cuda")) |
                                           set(dispatch.algorithms("sddmm", "cuda")))
    impls = harness.implementations(algorithms, args.baselines)
    meta = device_meta()
    meta["copy_gbs"] = harness.copy_bandwidth_gbs()
    meta.update(values=args.values, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                command="python -m numbasparse.bench " + " ".join(sys.argv[1:] if argv is None else argv))
    print(f"# {meta['gpu']}: {meta['sms']} SMs, L2 {meta['l2_bytes'] >> 20} MiB, "
          f"device copy {meta['copy_gbs']:.0f} GB/s (read+write)", file=sys.stderr)

    rows = []
    graph_set, prep_seconds = load_graphs(args)
    cases = [harness.Case(name, A, op, reduce if op == "spmm" else "sum" if op == "gcn" else "-", n, args.dtype)
             for name, A in graph_set.items() for op in args.ops
             for reduce in (args.reduce if op == "spmm" else ["-"]) for n in args.n]
    start = time.time()
    for i, case in enumerate(cases, 1):
        print(f"# [{i}/{len(cases)}] {case.graph} {case.op} {case.reduce} N={case.n} "
              f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
        rows += harness.run_case(case, impls, repeat=args.repeat, warmup=args.warmup, l2_bytes=meta["l2_bytes"])
        checkpoint(args, meta, rows)
    if args.sampled:
        base = graphs.from_spec(args.sampled)
        subgraphs = [with_values(canonical_csr(g), f"{args.sampled}#{i}", args.values)
                     for i, g in enumerate(graphs.sample_subgraphs(base, args.sampled_count, *args.sampled_nodes))]
        name = f"sampled({args.sampled},{args.sampled_count})"
        for n in args.n:
            print(f"# sampled workload N={n}", file=sys.stderr, flush=True)
            rows += harness.run_sampled(name, subgraphs, impls, n, dtype=args.dtype,
                                        repeat=args.repeat, warmup=args.warmup)
            checkpoint(args, meta, rows)
    if args.kernel_time:  # a second pass: CUPTI, once attached, slows every later launch
        print("# kernel times (CUPTI)", file=sys.stderr, flush=True)
        for case in cases:
            times = harness.kernel_times(case, impls, repeat=args.repeat, l2_bytes=meta["l2_bytes"])
            harness.add_kernel_times(rows, case.graph, case.op, case.reduce, case.n, times)
        for n in args.n if args.sampled else ():
            times = harness.sampled_kernel_times(subgraphs, impls, n, dtype=args.dtype, repeat=args.repeat)
            harness.add_kernel_times(rows, name, "spmm", "sum", n, times)
        checkpoint(args, meta, rows)
    harness.add_metrics(rows, meta["copy_gbs"], YARDSTICK)
    harness.add_payoff(rows, prep_seconds)

    print(report.table(rows))
    print()
    print(report.summary(rows))
    if args.out:
        report.write_json(args.out, meta, rows)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"{meta['gpu']}, {meta['date']}, `{meta['command']}`; device copy "
                    f"{meta['copy_gbs']:.0f} GB/s\n\n{report.markdown(rows)}\n\n```\n{report.summary(rows)}\n```\n")
    if args.plots:
        for line in report.plots(rows, args.plots, YARDSTICK):
            print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
