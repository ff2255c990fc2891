"""Time HC-SpMM's two paths on synthetic and real row windows (on a GPU): the selector's
training data.

    python tools/hc_selector_data.py --data ../shared/data --graphs default,rmat:16 --out hc_data.json
        [--precision float32|tf32|float16|bfloat16] [--cols 16,24,32] [--skip-synthetic]

Synthetic (paper 001, section IV-C): for each (non-zero columns, sparsity) on a grid, a matrix
of identical-shape windows, each over its own random columns.  Real: the windows of each graph
(and of its LOA reordering) grouped by (density, columns) bins, each group timed as a matrix
of just its windows (stacked copies with rotated columns, to be well above launch overhead).
Every sample: features, window count, and the median time of each path, all windows on the
dense-tile path vs all on the CUDA-core path (CUDA events).  ``--precision``: float32 (the tiles
emulated on CUDA cores), tf32 (float32 operands, tiles on ``mma.sync`` TF32) or float16 /
bfloat16 (tiles on m16n8k16, C in float32): each kind of tile costs differently, so each has
its own shipped model (``numbasparse.select.TILE_KINDS``), fitted on its own timings.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numba import cuda

from numbasparse import CSR, graphs, reorder
from numbasparse.arrays import device_storage
from numbasparse.bench.timing import time_cuda
from numbasparse.cuda import hc
from numbasparse.dtypes import as_dtype
from numbasparse.preprocess.row_windows import row_windows
from numbasparse.select import window_features
from numbasparse.select.data import synthetic_windows, window_groups

COLS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 130)
SPARSITY = tuple(k / 16 for k in range(1, 16))


PRECISIONS = ("float32", "tf32", "float16", "bfloat16")
TOLERANCE = {"float32": 1e-4, "tf32": 3e-3}  # (16-bit: against the rounded operands, float32 sums)
CHECKED_COLUMNS = 16


def time_paths(A, n, precision="float32", repeat=7, launches=10):
    """Median ms per launch of each path (all windows on it: ``hc.spmm_hc``'s forced modes)
    for C = A @ B, B (K, n), operands in ``precision`` (C in float32), each path checked first."""
    dtype = as_dtype("float32" if precision == "tf32" else precision)
    dev = CSR.from_scipy(A, dtype=dtype)
    host_B = np.random.default_rng(0).standard_normal((A.shape[1], n)).astype(dtype)
    B = cuda.to_device(device_storage(host_B))
    C = cuda.device_array((A.shape[0], n), np.float32)
    rounded = sp.csr_matrix((A.data.astype(dtype).astype(np.float64), A.indices, A.indptr), shape=A.shape)
    # every row, a few columns at both ends (the first and last column blocks): the full
    # reference took most of the run
    checked = np.unique(np.r_[0:min(n, CHECKED_COLUMNS // 2), max(0, n - CHECKED_COLUMNS // 2):n])
    expected = rounded @ host_B[:, checked].astype(np.float64)
    out = {}
    for mode in ("tiles", "cores"):
        hc.spmm_hc(dev, B, C, mode=mode, tf32=precision == "tf32")
        got = C.copy_to_host()[:, checked]
        err = np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30)
        if not err < TOLERANCE.get(precision, 1e-5):
            raise AssertionError(f"{mode} path wrong: relative error {err}")

        def launch_all():
            for _ in range(launches):
                hc.spmm_hc(dev, B, C, mode=mode, tf32=precision == "tf32")

        out[mode] = time_cuda(launch_all, warmup=1, repeat=repeat)[0] / launches
    return out


def replicate(sub, target_nnz, rng, max_copies=64):
    """Enough copies of a group's windows, stacked, to time it above launch overhead; each
    copy's columns are rotated by a random offset so the copies read other rows of B."""
    rows = -(-sub.shape[0] // 16) * 16
    sub = sp.csr_matrix(sub)
    sub.resize((rows, sub.shape[1]))
    parts = [sub]
    for _ in range(min(max_copies, target_nnz // max(sub.nnz, 1)) - 1):
        part = sub.copy()
        part.indices = (part.indices + rng.integers(sub.shape[1])) % sub.shape[1]
        part.has_sorted_indices = False
        part.sort_indices()
        parts.append(part)
    return sp.vstack(parts, format="csr")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--graphs", default="default,rmat:16")
    p.add_argument("--skip-synthetic", action="store_true")
    p.add_argument("--cols", default=",".join(map(str, COLS)), help="the synthetic grid's non-zero columns per window")
    p.add_argument("--data")
    p.add_argument("--n", default="32,128")
    p.add_argument("--target-nnz", type=int, default=1 << 20)
    p.add_argument("--loa-max-nnz", type=int, default=3_000_000, help="LOA-reorder graphs up to this size")
    p.add_argument("--precision", choices=PRECISIONS, default="float32")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    ns = [int(x) for x in args.n.split(",")]
    samples = []
    started = time.time()

    def save():
        Path(args.out).write_text(json.dumps({"gpu": str(cuda.get_current_device().name),
                                              "precision": args.precision, "samples": samples}))

    for n_cols in () if args.skip_synthetic else [int(c) for c in args.cols.split(",")]:
        for sparsity in SPARSITY:
            per_window = max(round((1 - sparsity) * 16 * n_cols), n_cols)
            n_windows = int(np.clip(args.target_nnz // per_window, 2048, 65536))
            A = synthetic_windows(n_windows, n_cols, sparsity, seed=n_cols * 100 + int(sparsity * 16))
            f = window_features(row_windows(A)).mean(axis=0)
            for n in ns:
                t = time_paths(A, n, args.precision)
                samples.append(dict(source="synthetic", n=n, sparsity=float(f[0]), n_cols=float(f[1]),
                                    windows=n_windows, t_tiles=t["tiles"], t_cores=t["cores"]))
        print(f"synthetic n_cols={n_cols} done ({time.time() - started:.0f} s)", flush=True)
        save()

    found = {spec: graphs.from_spec(spec) for spec in args.graphs.split(",") if spec}
    if args.data:
        found.update(graphs.load_npz_dir(args.data))
    for name, A in list(found.items()):
        if A.nnz <= args.loa_max_nnz:
            found[name + "+loa"] = reorder.permute(A, reorder.loa(A))
    rng = np.random.default_rng(0)
    for name, A in found.items():
        for features, count, sub in window_groups(A, min_windows=32):
            stacked = replicate(sub, args.target_nnz, rng)
            for n in ns:
                t = time_paths(stacked, n, args.precision)
                samples.append(dict(source=name, n=n, sparsity=float(features[0]), n_cols=float(features[1]),
                                    windows=count, timed_windows=stacked.shape[0] // 16,
                                    t_tiles=t["tiles"], t_cores=t["cores"]))
        print(f"{name} done ({time.time() - started:.0f} s)", flush=True)
        save()
    save()


if __name__ == "__main__":
    main()
