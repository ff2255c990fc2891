"""What a reordered plan pays for its order, by part (GPU only): the breadth-first order, the
permutation of A on the host (``reorder.order.permuted``) and on the GPU
(``cuda.permute.permuted_on_device``, from the upload every plan makes), on a shuffled copy of
each graph; the GPU's result checked equal to the host's.

    python benchmarks/probes/permute_cost.py --graphs .data/cnr_2000.npz,rmat:20 --out p.json

Each part: the median of --repeat runs after one warm-up (compiles excluded).
"""
import argparse
import json
import time

import numpy as np


def median_seconds(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="rmat:20")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from numba import cuda, get_num_threads

    from numbasparse import CSR, graphs
    from numbasparse.csr import canonical_csr
    from numbasparse.cuda.permute import compile_permutation, permuted_on_device
    from numbasparse.reorder.order import bfs_of, compile_reordering, permuted

    rows = []
    for spec in args.graphs.split(","):
        A = canonical_csr(graphs.shuffled(graphs.from_spec(spec).tocsr()), dtype=np.float32)
        compile_reordering(A)
        perm = bfs_of(A)
        start = time.perf_counter()
        device = CSR._of_canonical(A)
        cuda.synchronize()
        upload = time.perf_counter() - start
        compile_permutation(device)
        host = permuted(A, perm)
        got = permuted_on_device(device, perm).to_scipy()
        equal = bool(np.array_equal(got.indptr, host.indptr) and np.array_equal(got.indices, host.indices)
                     and np.array_equal(got.data, host.data))
        row = dict(graph=spec, nodes=A.shape[0], nnz=int(A.nnz), longest_row=int(np.diff(A.indptr).max()),
                   host_threads=get_num_threads(), equal=equal, upload_ms=upload * 1e3,
                   bfs_ms=median_seconds(lambda: bfs_of(A), args.repeat) * 1e3,
                   host_permute_ms=median_seconds(lambda: permuted(A, perm), args.repeat) * 1e3,
                   gpu_permute_ms=median_seconds(
                       lambda: permuted_on_device(device, perm), args.repeat) * 1e3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
