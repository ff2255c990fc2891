"""Train HC-SpMM's core selector from GPU timings of both paths and write the shipped model.

    python tools/train_hc_selector.py benchmarks/results/<run>/hc_selector_data.json [MORE.json ...] \\
        [--out MODEL.json | --write]

Several files (of one ``--precision``) are trained on as one.  The model is written for the kind
of tile its timings are of (``numbasparse.select.TILE_KINDS``: float32 -> emulated, tf32 ->
tf32, float16 / bfloat16 -> half); ``--write`` writes it where the library reads that kind.

Labels: 1 (dense tiles) where the dense-tile path was faster.  For each candidate feature set
two models are fitted: on the synthetic windows alone (as paper 001 does) and on synthetic plus
real window groups.  Reported: accuracy and the time of the selector's choices relative to
the faster path (the oracle) on the synthetic samples (5-fold cross-validation) and on the
real groups, weighted by window count (for the model with real data: leave-one-graph-out,
each graph's groups predicted by a model that never saw that graph).  The model with the
lowest real-graph time over the oracle is written, with these numbers, as the shipped model.
"""
import argparse
import datetime
import json
from pathlib import Path

import numpy as np

from numbasparse.select.hc import FEATURES, Model, features_of, model_path, tile_kind
from numbasparse.select.train import fit_logistic, predict

CANDIDATES = (("sparsity", "n_cols"), ("sparsity", "log2_n_cols"), ("sparsity", "log2_n_cols", "row_nnz"))


def table(samples):
    """Candidate features, labels, times of both paths and window counts as arrays."""
    sparsity = np.array([s["sparsity"] for s in samples])
    n_cols = np.array([s["n_cols"] for s in samples])
    nnz = (1 - sparsity) * 16 * n_cols
    X = features_of(nnz, n_cols)
    t = np.array([[s["t_tiles"], s["t_cores"]] for s in samples])
    return X, (t[:, 0] < t[:, 1]).astype(np.int64), t, np.array([s["windows"] for s in samples], np.float64)


def scores(pred, y, t, weights):
    """(weighted accuracy, time of the chosen paths / time of the faster paths)."""
    chosen = np.where(pred == 1, t[:, 0], t[:, 1]).sum()
    return float(np.average(pred == y, weights=weights)), float(chosen / t.min(axis=1).sum())


def clipped_predict(X, X_train, fitted):
    """Predictions with features clipped to the training range, as the shipped model does."""
    return predict(np.clip(X, X_train.min(axis=0), X_train.max(axis=0)), *fitted)


def cross_validate(X, y, t, folds=5, seed=0):
    order = np.random.default_rng(seed).permutation(len(y))
    pred = np.empty(len(y), np.int64)
    for k in range(folds):
        test = order[k::folds]
        train = np.setdiff1d(order, test)
        pred[test] = clipped_predict(X[test], X[train], fit_logistic(X[train], y[train]))
    return scores(pred, y, t, np.ones(len(y)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="+", help="JSON from tools/hc_selector_data.py (one precision)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", help="write the chosen model here")
    where.add_argument("--write", action="store_true", help="write it as the shipped model of its kind of tile")
    args = p.parse_args()
    docs = [json.loads(Path(path).read_text()) for path in args.data]
    precisions = {d.get("precision", "float32") for d in docs}
    if len(precisions) != 1:
        p.error(f"the data files hold timings of different precisions: {sorted(precisions)}")
    tiles = tile_kind(precisions.pop())
    gpus = {d["gpu"] for d in docs}
    if len(gpus) != 1:
        p.error(f"the data files hold timings of different GPUs: {sorted(gpus)}")
    doc = dict(gpu=docs[0]["gpu"], samples=[s for d in docs for s in d["samples"]])
    if args.write:
        args.out = str(model_path(tiles))
    synthetic = [s for s in doc["samples"] if s["source"] == "synthetic"]
    real = [s for s in doc["samples"] if s["source"] != "synthetic"]
    Xs, ys, ts, _ = table(synthetic)
    Xr, yr, tr, wr = table(real) if real else (None, None, None, None)
    print(f"{doc['gpu']}: {len(synthetic)} synthetic samples ({ys.mean():.0%} faster on tiles), "
          f"{len(real)} real window groups ({(yr.mean() if real else 0):.0%} faster on tiles)")
    always = {"always cores": np.zeros(len(ys), np.int64), "always tiles": np.ones(len(ys), np.int64)}
    for name, pred in always.items():
        acc, rel = scores(pred, ys, ts, np.ones(len(ys)))
        line = f"{name:<34} synthetic acc {acc:.3f} time/oracle {rel:.3f}"
        if real:
            acc_r, rel_r = scores(pred[:1].repeat(len(yr)), yr, tr, wr)
            line += f" | real acc {acc_r:.3f} time/oracle {rel_r:.3f}"
        print(line)
    results = []
    sources = np.array([s["source"].split("+")[0] for s in real])
    for names in CANDIDATES:
        cols = [FEATURES.index(f) for f in names]
        for with_real in (False, True):
            X_train = np.vstack([Xs[:, cols], Xr[:, cols]]) if with_real else Xs[:, cols]
            y_train = np.concatenate([ys, yr]) if with_real else ys
            # real groups weigh by their window count (relative to the mean group): many windows, many samples
            weights = np.concatenate([np.ones(len(ys)), wr / wr.mean()]) if with_real else None
            fitted = fit_logistic(X_train, y_train, weights=weights)
            cv_acc, cv_rel = cross_validate(Xs[:, cols], ys, ts)
            entry = dict(features=list(names), trained_on="synthetic+real" if with_real else "synthetic",
                         synthetic_cv_accuracy=cv_acc, synthetic_cv_time_over_oracle=cv_rel)
            pred = np.empty(len(yr), np.int64)
            for source in np.unique(sources):  # real groups of each graph: model without that graph
                held = sources == source
                if with_real:
                    seen = np.vstack([Xs[:, cols], Xr[~held][:, cols]])
                    model = fit_logistic(np.vstack([Xs[:, cols], Xr[~held][:, cols]]),
                                         np.concatenate([ys, yr[~held]]),
                                         weights=np.concatenate([np.ones(len(ys)), wr[~held] / wr.mean()]))
                else:
                    seen, model = Xs[:, cols], fitted
                pred[held] = clipped_predict(Xr[held][:, cols], seen, model)
            acc_r, rel_r = scores(pred, yr, tr, wr)
            entry.update(real_accuracy=acc_r, real_time_over_oracle=rel_r)
            print(f"{'+'.join(names):<30} {entry['trained_on']:<15} synthetic CV acc {cv_acc:.3f} "
                  f"time/oracle {cv_rel:.3f} | real acc {acc_r:.3f} time/oracle {rel_r:.3f}")
            results.append((rel_r, len(names), entry, fitted, (X_train.min(axis=0), X_train.max(axis=0))))
    _, _, best, (mean, scale, coef, intercept), (lower, upper) = min(results, key=lambda r: (r[0], r[1]))
    print(f"chosen: {'+'.join(best['features'])} trained on {best['trained_on']}")
    if args.out:
        meta = dict(provenance=f"python tools/train_hc_selector.py {' '.join(args.data)}", tiles=tiles, gpu=doc["gpu"],
                    trained=datetime.date.today().isoformat(), samples=len(synthetic),
                    real_groups=len(real), candidates=[r[2] for r in results],
                    baselines=dict(always_cores=scores(np.zeros(len(yr), np.int64), yr, tr, wr),
                                   always_tiles=scores(np.ones(len(yr), np.int64), yr, tr, wr)), **{
                        k: v for k, v in best.items() if k != "features"})
        model = Model(tuple(best["features"]), lower, upper, mean, scale, coef, intercept, meta)
        Path(args.out).write_text(json.dumps(model.to_json(), indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
