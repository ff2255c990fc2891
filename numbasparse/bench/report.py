"""Benchmark output: a text table, JSON, Markdown and PNG plots."""
import json
import math

import numpy as np

COLUMNS = ("graph", "nnz", "op", "reduce", "n", "impl", "ms", "call_ms", "b2b_ms", "kernel_ms", "floor_ms",
           "of_floor", "gbs", "gflops", "speedup", "b2b_speedup", "kernel_speedup", "prep_s", "payoff_calls", "error", "status")


def _fmt(value):
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def table(rows, columns=COLUMNS):
    cells = [[_fmt(r.get(c, "-")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def markdown(rows, columns=COLUMNS):
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c, "-")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def geomean_speedups(rows, key="speedup"):
    """{impl: (geometric-mean speedup, min speedup, cases)} over rows that have ``key``."""
    by_impl = {}
    for r in rows:
        if key in r:
            by_impl.setdefault((r["op"], r["impl"]), []).append(r[key])
    return {key: (math.exp(sum(map(math.log, v)) / len(v)), min(v), len(v)) for key, v in sorted(by_impl.items())}


def summary(rows):
    """Geometric-mean and minimum speedups per (op, impl): per call on an idle GPU (events,
    host time included), back to back (``b2b``), and by kernel time (CUPTI)."""
    lines = ["op     impl                      geomean speedup   min    cases   back-to-back geomean   min"
             "   kernel-time geomean   min  cases"]
    b2b = geomean_speedups(rows, "b2b_speedup")
    kernel = geomean_speedups(rows, "kernel_speedup")
    for (op, impl), (g, lo, n) in geomean_speedups(rows).items():
        line = f"{op:<6} {impl:<25} {g:>15.3f} {lo:>6.3f} {n:>7}"
        bg, blo, _ = b2b.get((op, impl), (float("nan"),) * 3)
        line += f"   {bg:>20.3f} {blo:>5.3f}"
        if (op, impl) in kernel:
            kg, klo, kn = kernel[(op, impl)]
            line += f"   {kg:>19.3f} {klo:>5.3f} {kn:>6}"
        lines.append(line)
    return "\n".join(lines)


def write_json(path, meta, rows):
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


def plots(rows, directory, yardstick_name):
    """speedup_<op>.png (per graph and N) and time_vs_nnz_<op>.png; needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["plots skipped: matplotlib is not installed (pip install 'numbasparse[bench]')"]
    from pathlib import Path

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for op in sorted({r["op"] for r in rows}):
        ok = [r for r in rows if r["op"] == op and "ms" in r and r["reduce"] in ("sum", "-")]
        impls = sorted({r["impl"] for r in ok})
        cases = sorted({(r["graph"], r["n"]) for r in ok}, key=lambda c: (c[0], c[1]))
        if not cases:
            continue
        fig, ax = plt.subplots(figsize=(max(8, len(cases) * 0.6), 4.5))
        width = 0.8 / max(1, len(impls))
        for i, impl in enumerate(impls):
            values = [next((r.get("speedup", 0) for r in ok if (r["graph"], r["n"], r["impl"]) == (*c, impl)), 0)
                      for c in cases]
            ax.bar([x + i * width for x in range(len(cases))], values, width, label=impl)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(cases))])
        ax.set_xticklabels([f"{g}\nN={n}" for g, n in cases], rotation=90, fontsize=7)
        ax.set_ylabel(f"speedup over {yardstick_name[op]}")
        ax.legend(fontsize=7)
        written.append(_save(plt, fig, directory / f"speedup_{op}.png"))

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for impl in impls:
            for n in sorted({r["n"] for r in ok}):
                pts = sorted((r["nnz"], r["ms"]) for r in ok if r["impl"] == impl and r["n"] == n)
                if len(pts) > 1:
                    ax.loglog(*zip(*pts), marker="o", label=f"{impl} N={n}")
        ax.set_xlabel("nonzeros")
        ax.set_ylabel("ms")
        ax.legend(fontsize=6)
        written.append(_save(plt, fig, directory / f"time_vs_nnz_{op}.png"))
    return written


def _save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def compact_markdown(rows, yardstick):
    """One line per (graph, op, reduce, N): each implementation's ms, the compulsory-bytes
    floor, and the speedup of each numbasparse kernel over the yardstick."""
    cases = {}
    for r in rows:
        cases.setdefault((r["graph"], r["op"], r["reduce"], r["n"]), {})[r["impl"]] = r
    impls = sorted({r["impl"] for r in rows}, key=lambda i: (not i.startswith("ns:"), i))
    head = ["graph", "nnz", "op", "N", "floor ms"] + [f"{i} ms" for i in impls] + \
        [f"{i} speedup" for i in impls if i.startswith("ns:")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (graph, op, reduce, n), by_impl in cases.items():
        any_row = next(iter(by_impl.values()))
        floor = next((r["floor_ms"] for r in by_impl.values() if "floor_ms" in r), float("nan"))
        cells = [graph if reduce in ("sum", "-") else f"{graph} ({reduce})", str(any_row["nnz"]), op, str(n), _fmt(floor)]
        cells += [_fmt(by_impl[i]["ms"]) if i in by_impl and "ms" in by_impl[i] else
                  ("-" if i not in by_impl else by_impl[i]["status"].replace("skipped: ", "")) for i in impls]
        cells += [_fmt(by_impl[i].get("speedup", float("nan"))) if i in by_impl else "-"
                  for i in impls if i.startswith("ns:")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def family(graph):
    """Graph family for summaries: "rmat", "sampled", or "small" (real graphs, the default)."""
    return "rmat" if graph.startswith("rmat") else "sampled" if graph.startswith("sampled") else "small"


def versus_markdown(rows, impl, yardstick):
    """Per (graph, op, N): ``impl`` against the yardstick by event, back to back and kernel
    time, the compulsory-bytes floor as a fraction of ``impl``'s kernel time, and (SpMM) the
    rate at which both kernels gather rows of B (nnz * N * itemsize bytes per kernel time: the
    traffic a gather-based kernel cannot avoid beyond what caches absorb).  Then the
    geometric mean and minimum of each speedup per op and graph family."""
    cases = {}
    for r in rows:
        if r.get("status") == "ok" and r["impl"] in (impl, yardstick.get(r["op"])):
            cases.setdefault((r["graph"], r["op"], r["n"]), {})[r["impl"] == impl] = r
    head = ["graph", "nnz", "op", "N", "ours ms", "theirs ms", "event x", "b2b x", "ours kernel ms",
            "theirs kernel ms", "kernel x", "floor / our kernel", "gather TB/s ours / theirs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios = {}
    for (graph, op, n), pair in cases.items():
        if len(pair) < 2:
            continue
        ours, theirs = pair[True], pair[False]
        kernel = ours.get("kernel_ms"), theirs.get("kernel_ms")
        gather = "-"
        if op == "spmm" and all(kernel):
            itemsize = np.dtype(ours["dtype"]).itemsize
            rates = [ours["nnz"] * n * itemsize / (k * 1e-3) / 1e12 for k in kernel]
            gather = f"{rates[0]:.2f} / {rates[1]:.2f}"
        lines.append("| " + " | ".join([
            graph, str(ours["nnz"]), op, str(n), _fmt(ours["ms"]), _fmt(theirs["ms"]), _fmt(ours.get("speedup", float("nan"))),
            _fmt(ours.get("b2b_speedup", float("nan"))), _fmt(kernel[0] or float("nan")), _fmt(kernel[1] or float("nan")),
            _fmt(ours.get("kernel_speedup", float("nan"))),
            _fmt(ours["floor_ms"] / kernel[0]) if kernel[0] and "floor_ms" in ours else "-", gather]) + " |")
        for key in ("speedup", "b2b_speedup", "kernel_speedup"):
            if key in ours:
                for group in ((op, "all"), (op, family(graph))):
                    ratios.setdefault(group, {}).setdefault(key, []).append(ours[key])
    lines += ["", "| op | graphs | cases | by event (one call) | back to back | by kernel time |", "|---|---|---|---|---|---|"]
    for (op, fam), by_key in sorted(ratios.items()):
        cells = []
        for key in ("speedup", "b2b_speedup", "kernel_speedup"):
            v = by_key.get(key)
            cells.append(f"{math.exp(sum(map(math.log, v)) / len(v)):.2f}x (min {min(v):.2f})" if v else "-")
        lines.append(f"| {op} | {fam} | {len(by_key['speedup'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    """``python -m numbasparse.bench.report RESULT.json ... [--yardstick OP=IMPL ...]``: Markdown
    tables and summary; ``--yardstick`` recomputes the speedups against another implementation
    of the rows (e.g. ``spmm=torch_csr32_f32`` for a 16-bit run against float32 cuSPARSE)."""
    import argparse

    from .baselines import YARDSTICK
    from .harness import add_metrics

    p = argparse.ArgumentParser(prog="python -m numbasparse.bench.report")
    p.add_argument("paths", nargs="+")
    p.add_argument("--yardstick", action="append", default=[], metavar="OP=IMPL")
    args = p.parse_args(argv)
    yardstick = dict(YARDSTICK)
    for item in args.yardstick:
        op, _, impl = item.partition("=")
        if op not in YARDSTICK or not impl:
            p.error(f"--yardstick takes OP=IMPL with OP one of {sorted(YARDSTICK)}, got {item!r}")
        yardstick[op] = impl
    for path in args.paths:
        with open(path) as f:
            result = json.load(f)
        meta, rows = result["meta"], result["rows"]
        if args.yardstick:
            for r in rows:
                for key in ("speedup", "b2b_speedup", "kernel_speedup"):
                    r.pop(key, None)
            add_metrics(rows, meta["copy_gbs"], yardstick)
        print(f"### `{path}`\n\n{meta['gpu']}, {meta['date']}; device-to-device copy "
              f"{meta['copy_gbs']:.0f} GB/s (read + write).\nCommand: `{meta['command']}`\n")
        print(compact_markdown(rows, yardstick))
        for impl in sorted({r["impl"] for r in rows if r["impl"].startswith("ns:")}):
            print(f"\n{impl} against the yardstick, per case and per graph family:\n")
            print(versus_markdown(rows, impl, yardstick))
        names = ", ".join(f"{impl} for {op}" for op, impl in yardstick.items() if op in {r["op"] for r in rows})
        print(f"\nGeometric-mean speedup over the yardstick ({names}) and the worst case:\n\n```\n"
              + summary(rows) + "\n```\n")

if __name__ == "__main__":
    main()
