"""Louvain quality and speed against networkx (CPU), and the row-window intensity of the
clustering order:  python benchmarks/probes/louvain_vs_networkx.py [DATA_DIR]
Best modularity and best time of 3 seeds each (networkx: 1 seed above 1M nonzeros); our JIT
compile time is measured once and reported separately.  Intensity: mean nnz / non-zero columns
over the non-empty 16-row windows, in the original, Louvain-clustered and LOA orders."""
import sys
import time

import networkx as nx

from numbasparse import graphs
from numbasparse.reorder import cluster_order, loa, louvain, mean_intensity, modularity, permute

t = time.perf_counter()
louvain(graphs.rmat(6), seed=0)
loa(graphs.rmat(6))
print(f"JIT compile or cache load (first calls): {time.perf_counter() - t:.2f} s")
found = graphs.load_npz_dir(sys.argv[1]) if len(sys.argv) > 1 else {}
found["default"] = graphs.default_graph()
found["rmat:16"] = graphs.rmat(16)
print("| graph | nnz | ours Q | ours ms | networkx Q | networkx ms | speed ratio | Q difference | "
      "intensity: original | clustered | LOA | LOA ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, A in found.items():
    ours_q, ours_t = -1.0, 1e9
    for seed in range(3):
        t = time.perf_counter()
        labels = louvain(A, seed=seed)
        ours_t = min(ours_t, time.perf_counter() - t)
        ours_q = max(ours_q, modularity(A, labels))
    G = nx.from_scipy_sparse_array(A)
    nx_q, nx_t = -1.0, 1e9
    for seed in range(3 if A.nnz < 1_000_000 else 1):
        t = time.perf_counter()
        communities = nx.community.louvain_communities(G, seed=seed)
        nx_t = min(nx_t, time.perf_counter() - t)
        nx_q = max(nx_q, nx.community.modularity(G, communities))
    t = time.perf_counter()
    loa_perm = loa(A)
    loa_t = time.perf_counter() - t
    intensity = [mean_intensity(A), mean_intensity(permute(A, cluster_order(A, seed=0))),
                 mean_intensity(permute(A, loa_perm))]
    print(f"| {name} | {A.nnz} | {ours_q:.4f} | {ours_t * 1e3:.1f} | {nx_q:.4f} | {nx_t * 1e3:.0f} | "
          f"{nx_t / ours_t:.0f}x | {(ours_q - nx_q) / nx_q * 100:+.2f}% | "
          + " | ".join(f"{x:.3f}" for x in intensity) + f" | {loa_t * 1e3:.1f} |", flush=True)
