"""Fit the tuner's cost model (numbasparse/select/cost.py) to measured candidate times, and say how
well it ranks graphs it was not fitted on.  Runs on the CPU (the CUDA simulator builds the plans,
with an H100's SM count):

    python tools/fit_cost_model.py --data .data RESULTS.json [...] [--write]

RESULTS: ``benchmarks/probes/tuned_vs_auto.py --all`` output from one GPU (every candidate's time,
back to back, per op, graph and N; float32 sums and SDDMM: the model is applied to every dtype
and reduction unfitted).  "The space's own order" below is the order the record lists the
candidates in: the hand order for data recorded before the model (2026-11-27), the model's since.  The rules' pick is left out of the fit and of the ranks: it is
timed first, right after the compiles, and reads slow (BENCHMARKS.md, "algorithm='tuned'").
Reported, fitting on all graphs but one and ranking that one's cases: the Spearman correlation of
predicted and measured times per case, and for the first k candidates in the model's order (the
rules' pick always timed too) the best time found against the best of all.  ``--write`` stores
the constants fitted on every graph as ``numbasparse/select/cost_h100.json``.
"""
import argparse
import ast
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from scipy.optimize import least_squares  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

H100 = ("NVIDIA H100 80GB HBM3", 132)
FITTED = ("l2_bytes_per_us", "dram_bytes_per_us", "round_us", "issue_per_us", "op_us", "host_us", "host_op_us",
          "slab_scale", "tiled_slot_us", "sddmm_tiled_slot_us")


def parse(text):
    """tuner.Candidate of its str(), e.g. 'hp(depth=2, nnz_per_group=8, single=False)'."""
    from numbasparse.select.tuner import Candidate

    call = ast.parse(text, mode="eval").body
    return Candidate.of(call.func.id, **{k.arg: ast.literal_eval(k.value) for k in call.keywords})


def model_rows(records, data):
    """One row per (case, candidate): (case, graph, first?, measured us, family, terms, slots,
    stats, position in the space's order)."""
    from numba import cuda

    import numbasparse as ns
    from numbasparse.cuda import device, slab
    from numbasparse.preprocess.slab_tiles import entries_per_segment
    from numbasparse.select import cost, tuner

    device._limits[0] = (H100[1], 2048, 65536)
    gpu = tuner.Device(*H100)
    rows, matrices = [], {}
    for case, record in enumerate(records):
        path = (Path(data) / Path(record["graph"]).name).with_suffix(".npz")
        if path not in matrices:
            g = sp.load_npz(path).tocsr().astype(np.float32)
            matrices[path] = (g, ns.CSR.from_scipy(g))
        g, A = matrices[path]
        n, op = record["n"], record["op"]
        if op == "spmm":
            operands = (cuda.device_array((g.shape[1], n), np.float32), cuda.device_array((g.shape[0], n), np.float32))
        else:
            operands = (cuda.device_array((g.shape[0], n), np.float32), cuda.device_array((g.shape[1], n), np.float32),
                        cuda.device_array(g.nnz, np.float32))
        rule = tuner.hp_rule(A, op, n, np.float32, "sum", operands)
        if op == "spmm":  # (counted on the host: the simulator would take a thread at a time)
            _, width, _ = slab.tiling(A.nnz, A.shape[1], n, 4, *operands)
            A.cache.put("plans", ("entries_per_segment", width), entries_per_segment(g.indptr, g.indices, width))
        stats = cost.Stats.of(g.shape, g.indptr, 4, gpu.sms, gpu.l2_bytes)
        for i, (text, ms) in enumerate(record["times"].items()):
            inputs = tuner.model_inputs(parse(text), op, A, n, np.float32, rule, stats, gpu, operands, "sum")
            if inputs is not None:
                rows.append((case, path.stem, i == 0, ms * 1e3, *inputs, stats, i))
    return rows


def predict(constants, rows):
    from numbasparse.select import cost

    return np.array([cost.predict_us(constants, r[7], r[4], r[5], r[6]) for r in rows])


def order_keys(constants, rows):
    """The tuner's ranking keys as one sortable number per row (GPU time breaks ties)."""
    from numbasparse.select import cost

    keys = [cost.rank_key(constants, r[7], r[4], r[5], r[6]) for r in rows]
    return np.array([total + 1e-6 * gpu / max(total, 1e-9) for total, gpu in keys])


def fit(rows, start):
    from dataclasses import replace

    x0 = np.log([getattr(start, f) for f in FITTED])
    measured = np.log([r[3] for r in rows])

    def residuals(x):
        return np.log(predict(replace(start, **dict(zip(FITTED, np.exp(x)))), rows)) - measured

    result = least_squares(residuals, x0, loss="linear", max_nfev=400, diff_step=0.05)
    return replace(start, **dict(zip(FITTED, np.exp(result.x))))


def evaluate(rows, predicted, ks=(2, 3, 4, 6, 8)):
    """Per case: Spearman of predicted and measured over the candidates but the rules' pick, and
    for each k the best measured time of the rules' pick and the model's first k - 1 others,
    against the best of all."""
    cases = {}
    for r, p in zip(rows, predicted):
        cases.setdefault(r[0], []).append((r[2], r[3], p))
    rhos, found = [], {k: [] for k in ks}
    for entries in cases.values():
        others = [(m, p) for first, m, p in entries if not first]
        if len(others) >= 3:
            rhos.append(spearmanr([m for m, _ in others], [p for _, p in others])[0])
        best = min(m for _, m, _ in entries)
        firsts = [m for first, m, _ in entries if first]
        ranked = [m for m, _ in sorted(others, key=lambda t: t[1])]
        for k in ks:
            found[k].append(best / min(firsts + ranked[:k - 1]))
    return rhos, {k: (float(np.exp(np.mean(np.log(v)))), float(min(v))) for k, v in found.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    p.add_argument("--data", required=True)
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    from numbasparse.select import cost

    records = [r for path in args.results for r in json.loads(Path(path).read_text())]
    rows = model_rows(records, args.data)
    print(f"{len(records)} cases, {len(rows)} candidate times", flush=True)
    predicted = np.empty(len(rows))
    for graph in sorted({r[1] for r in rows}):  # fitted without the graph it predicts
        constants = fit([r for r in rows if r[1] != graph and not r[2]], cost.Constants())
        test = [i for i, r in enumerate(rows) if r[1] == graph]
        predicted[test] = order_keys(constants, [rows[i] for i in test])
        print(f"  fitted without {graph}", flush=True)
    for op in ("spmm", "sddmm"):
        held = [i for i, r in enumerate(rows) if records[r[0]]["op"] == op]
        graphs = {rows[i][1] for i in held}
        for name, order in (("cost model (graph left out)", predicted[held]),
                            ("the space's own order", np.array([r[8] for r in (rows[i] for i in held)]))):
            rhos, found = evaluate([rows[i] for i in held], order)
            print(f"{op}, {name}: {len(graphs)} graphs; Spearman per case median {np.nanmedian(rhos):.2f}, "
                  f"mean {np.nanmean(rhos):.2f}, below 0: {sum(r < 0 for r in rhos)} of {len(rhos)}")
            for k, (geomean, worst) in found.items():
                print(f"  the rules' pick + the first {k - 1} others: best found / best of all {geomean:.3f} "
                      f"geomean, worst {worst:.3f}")
    constants = fit([r for r in rows if not r[2]], cost.Constants())
    print("constants fitted on every graph:", constants)
    if args.write:
        constants.save(cost.model_path(), fitted_on=[Path(r).name for r in args.results], gpu=H100[0],
                       command="python tools/fit_cost_model.py --data .data " + " ".join(args.results) + " --write")
        print("wrote", cost.model_path())


if __name__ == "__main__":
    main()
