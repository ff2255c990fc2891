"""Synthetic graphs outside the shared set's ranges, to check that `auto`'s rules carry:
    python benchmarks/probes/unseen_graphs.py OUTDIR [--small]
writes one scipy CSR ``.npz`` per family into OUTDIR (then ``python -m numbasparse.bench
--data OUTDIR``).  The shared graphs have mean rows of 2-88 and at most 5.5M nonzeros; these
go to mean rows of 400 and 30M nonzeros, hubs of a power law of exponent 1.8, nodes in
community order (locality), in random order or by decreasing degree (as degree-ranked dumps
number them), and non-power-law degrees.  Every graph is
undirected with random weights in [0.5, 1.5)."""
import argparse
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from numbasparse import graphs

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--small", action="store_true", help="a tenth of the nodes (a quick check)")
parser.add_argument("--only", help="comma-separated family names (default: all)")
args = parser.parse_args()

# name: (nodes, mean degree, communities, mixing, degree exponent, node order)
FAMILIES = {
    "dense_social_400": (60_000, 400, 40, 0.3, 2.5, "random"),     # Reddit-like rows
    "dense_social_400_ordered": (60_000, 400, 40, 0.3, 2.5, "community"),
    "dense_social_400_by_degree": (60_000, 400, 40, 0.3, 2.5, "degree"),
    "mid_dense_120": (120_000, 120, 200, 0.2, 2.3, "random"),       # product co-purchase
    "mid_dense_120_by_degree": (120_000, 120, 200, 0.2, 2.3, "degree"),
    "coauthor_like_14": (35_000, 14, 600, 0.1, 2.8, "community"),    # co-authorship, clustered
    "actor_like_8": (7_600, 8, 30, 0.5, 2.0, "random"),              # small, skewed
    "hubs_1p8": (300_000, 20, 100, 0.5, 1.8, "random"),              # heavy hubs
    "large_sparse_30": (800_000, 30, 2000, 0.2, 2.5, "random"),      # many nodes, B past L2
    "large_sparse_30_ordered": (800_000, 30, 2000, 0.2, 2.5, "community"),
    # short rows numbered by degree (HP's block-order and balancing rules were read off others)
    "coauthor_like_14_by_degree": (35_000, 14, 600, 0.1, 2.8, "degree"),
    "short_10_by_degree": (150_000, 10, 300, 0.3, 2.2, "degree"),
    "short_10": (150_000, 10, 300, 0.3, 2.2, "random"),
    "short_16_by_degree": (80_000, 16, 200, 0.2, 2.5, "degree"),
    "actor_like_8_by_degree": (7_600, 8, 30, 0.5, 2.0, "degree"),
}

out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(1)
for name, (n, degree, communities, mixing, exponent, order) in FAMILIES.items():
    if args.only and name not in args.only.split(","):
        continue
    t = time.perf_counter()
    if args.small:
        n = max(n // 10, 1000)
    A, community = graphs.community_graph(n, degree, communities, mixing, exponent, seed=7,
                                          return_communities=True)
    if order != "random":
        keys = community if order == "community" else -np.diff(A.indptr)
        perm = np.argsort(keys, kind="stable")
        A = sp.csr_matrix(A[perm][:, perm])
    A = sp.csr_matrix(A, dtype=np.float32)
    A.sort_indices()
    A.data = rng.uniform(0.5, 1.5, A.nnz).astype(np.float32)
    sp.save_npz(out / f"{name}.npz", A)
    rows = np.diff(A.indptr)
    print(f"{name}: {A.shape[0]} nodes, {A.nnz} nonzeros, mean row {A.nnz / A.shape[0]:.1f}, "
          f"longest {rows.max()}, {time.perf_counter() - t:.1f} s", flush=True)
