"""Which ingredient of reverse Cuthill-McKee makes SpMM faster on the GPU than a plain
breadth-first order (GPU only)?

    python benchmarks/probes/order_variants.py .data/cnr_2000.npz,.data/flickr.npz 256,64 variants.json

For each graph: a seeded shuffle of its node ids, then orders of the shuffle that differ in one
ingredient each: ``bfs`` (``reorder.bfs_order``), ``bfs_fwd`` (its sweep not reversed), ``cm``
(Cuthill-McKee from the lowest node: new neighbours by ascending degree), ``rcm`` (scipy's:
peripheral start, degree sort, reversed), ``rcm_fwd`` (RCM not reversed), ``bfs_hub`` (a sweep
from the highest-degree node), ``degree``; ``cm`` and ``bfs_hub`` follow the symmetrised pattern
of a directed graph, as RCM does.  SpMM sum (``auto``) on each permuted copy, CUDA events,
median of 20, interleaved, each checked on 500 rows first; beside each time the share of the
natural order's speed and the fetch model's B-row fetches (L2 of 50 MB).
"""
import json
import sys

import numpy as np
from numba import njit

from numbasparse import graphs
from numbasparse.reorder import order
from numbasparse.reorder.locality import predicted_fetches


@njit(cache=True)
def sweep(indptr, indices, degree, first, by_degree):
    """Breadth-first sweep from ``first``, restarted at the lowest unreached node; with
    ``by_degree`` each node's new neighbours are numbered by ascending degree (Cuthill-McKee)."""
    n = indptr.size - 1
    out = np.empty(n, np.int64)
    reached = np.zeros(n, np.bool_)
    head = tail = 0
    for k in range(n + 1):
        root = first if k == 0 else k - 1
        if tail == n:
            break
        if reached[root]:
            continue
        reached[root] = True
        out[tail] = root
        tail += 1
        while head < tail:
            node = out[head]
            head += 1
            start = tail
            for p in range(indptr[node], indptr[node + 1]):
                if not reached[indices[p]]:
                    reached[indices[p]] = True
                    out[tail] = indices[p]
                    tail += 1
            if by_degree and tail - start > 1:
                new = out[start:tail]
                new[:] = new[np.argsort(degree[new] * n + np.arange(tail - start))]
    return out


def orders(S):
    """{name: perm} of the shuffled graph ``S`` (canonical CSR)."""
    G = S if order.symmetric_pattern(S) else (S + S.T).tocsr()
    G.sum_duplicates()
    degree = np.diff(G.indptr).astype(np.int64)
    bfs = order.bfs_of(S)
    rcm = order.rcm_of(S)
    return {"bfs": bfs, "bfs_fwd": bfs[::-1].copy(), "cm": sweep(G.indptr, G.indices, degree, 0, True),
            "rcm": rcm, "rcm_fwd": rcm[::-1].copy(),
            "bfs_hub": sweep(G.indptr, G.indices, degree, int(np.argmax(degree)), False),
            "degree": order.degree_of(S)}


def main():
    import torch

    import numbasparse as ns
    from numbasparse.bench.timing import time_cuda_interleaved

    specs, widths, out = sys.argv[1].split(","), [int(n) for n in sys.argv[2].split(",")], sys.argv[3]
    rows = []
    for spec in specs:
        A = graphs.from_spec(spec).tocsr()
        A.sum_duplicates()
        A.data = np.random.default_rng(0).uniform(0.5, 1.5, A.nnz).astype(np.float32)  # weights, never all ones
        S = graphs.shuffled(A)
        matrices = {"natural": A, "shuffled": S}
        matrices.update({name: order.permuted(S, perm) for name, perm in orders(S).items()})
        devices = {name: ns.CSR.from_scipy(M) for name, M in matrices.items()}
        for n in widths:
            B = torch.randn(A.shape[0], n, device="cuda")
            B64 = B.double().cpu().numpy()
            for name, M in matrices.items():
                got = ns.spmm(devices[name], B)[:500].double().cpu().numpy()
                want = M[:500].astype(np.float64) @ B64
                assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5, (spec, n, name)
            fns = {name: (lambda d=d: ns.spmm(d, B)) for name, d in devices.items()}
            times = {name: t[0] for name, t in time_cuda_interleaved(fns, repeat=20).items()}
            for name, M in matrices.items():
                row = dict(graph=spec, n=n, order=name, ms=times[name], recovered=times["natural"] / times[name],
                           fetches=predicted_fetches(M, np.arange(M.shape[0]), 50e6 / (n * 4)))
                rows.append(row)
                print(f"{spec:28s} N={n:<4d} {name:9s} {row['ms']:.3f} ms  recovered {row['recovered']:.2f}"
                      f"  fetches {row['fetches']}", flush=True)
    with open(out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
