"""A graph with more than 2^31 nonzeros on one GPU: generated on the GPU, int64 indices end to end,
SpMM and SDDMM checked on sampled rows against float64, timed, peak memory stated.

    python benchmarks/probes/huge_graph.py --nodes 16777216 --degree 130 --n 32     # 2.18e9 nnz: H200
    python benchmarks/probes/huge_graph.py --nodes 4096 --degree 16 --device cpu   # the logic, small

Each row gets ``degree`` distinct sorted columns (cumulative sums of random gaps), so the CSR is
canonical by construction; it reaches numbasparse as a CUDA ``torch.sparse_csr`` tensor and is
checked and converted on the GPU (``numbasparse.inputs.gpu_csr_parts``).  ``torch.sparse.mm`` on
the same tensor is timed too when it fits.
"""
import argparse
import json
import time

import numpy as np
import torch

import numbasparse as ns


def generate(nodes, degree, device, seed=0):
    """(indptr, indices, values) of a canonical CSR with ``degree`` entries per row."""
    g = torch.Generator(device=device).manual_seed(seed)
    span = max(nodes // degree, 1)
    indptr = torch.arange(nodes + 1, device=device, dtype=torch.int64) * degree
    gaps = torch.randint(1, span + 1, (nodes, degree), device=device, generator=g, dtype=torch.int64)
    indices = (torch.cumsum(gaps, dim=1) - 1).reshape(-1)  # strictly increasing per row, < nodes
    del gaps
    values = torch.rand(nodes * degree, device=device, generator=g)
    return indptr, indices, values


def sampled_errors(indptr, indices, values, B, X, C, S, rows):
    """Relative norm errors of C (SpMM) and S (SDDMM scores) on ``rows``, against float64."""
    num_c = den_c = num_s = den_s = 0.0
    for r in rows.tolist():
        lo, hi = int(indptr[r]), int(indptr[r + 1])
        cols = indices[lo:hi]
        a = values[lo:hi].double().cpu()
        Bc = B[cols].double().cpu()
        ref_c = a @ Bc
        num_c += float(((C[r].double().cpu() - ref_c) ** 2).sum())
        den_c += float((ref_c ** 2).sum())
        ref_s = a * (X[r].double().cpu() @ X[cols].double().cpu().T)
        num_s += float(((S[lo:hi].double().cpu() - ref_s) ** 2).sum())
        den_s += float((ref_s ** 2).sum())
    return (num_c / max(den_c, 1e-300)) ** 0.5, (num_s / max(den_s, 1e-300)) ** 0.5


def timed(fn, device, repeat=5):
    fn()
    if device == "cpu":
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - start) / repeat * 1e3
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return float(np.median(times))


def used_gib():
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2**24)
    p.add_argument("--degree", type=int, default=130)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--sample", type=int, default=2000, help="rows checked against float64")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out")
    args = p.parse_args()
    record = dict(nodes=args.nodes, degree=args.degree, nnz=args.nodes * args.degree, n=args.n)
    start = time.perf_counter()
    indptr, indices, values = generate(args.nodes, args.degree, args.device)
    record["generate_s"] = time.perf_counter() - start
    A = torch.sparse_csr_tensor(indptr, indices, values, (args.nodes, args.nodes))
    if args.device == "cpu":  # the logic at small sizes: the CPU backend on a scipy copy
        import scipy.sparse as sp

        A = sp.csr_matrix((values.numpy(), indices.numpy(), indptr.numpy()), shape=(args.nodes, args.nodes))
    start = time.perf_counter()
    csr = ns.csr.sparse_operand(A) if args.device != "cpu" else A
    record["convert_s"] = time.perf_counter() - start
    if args.device != "cpu":
        record["index_dtype"] = str(csr.index_dtype)
        record["gib_after_convert"] = used_gib()
    gen = torch.Generator(device=args.device).manual_seed(1)
    B = torch.randn(args.nodes, args.n, device=args.device, generator=gen)
    X = torch.randn(args.nodes, args.n, device=args.device, generator=gen)
    C = ns.spmm(csr, B)
    S = ns.sddmm(csr, X, X)
    S = torch.as_tensor(S.data) if hasattr(S, "tocsr") else S
    if args.device != "cpu":
        torch.cuda.synchronize()
        record["gib_peak_seen"] = used_gib()
    rows = torch.randint(0, args.nodes, (args.sample,), generator=torch.Generator().manual_seed(2))
    record["spmm_rel_err"], record["sddmm_rel_err"] = sampled_errors(indptr, indices, values, B, X, C, S, rows)
    record["spmm_ms"] = timed(lambda: ns.spmm(csr, B, out=C) if args.device != "cpu" else ns.spmm(csr, B.numpy()),
                              args.device)
    record["sddmm_ms"] = timed(lambda: ns.sddmm(csr, X, X) if args.device != "cpu" else ns.sddmm(csr, X.numpy(),
                                                                                               X.numpy()),
                               args.device)
    record["floor_ms"] = (indices.numel() * (indices.element_size() + values.element_size())
                          + args.nodes * args.n * 4 * 2) / 3.35e12 * 1e3 if args.device != "cpu" else None
    if args.device != "cpu":
        try:
            record["torch_sparse_mm_ms"] = timed(lambda: torch.sparse.mm(A, B), args.device)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
            record["torch_sparse_mm_ms"] = f"failed: {str(exc).splitlines()[0][:200]}"
    print(json.dumps(record, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f)


if __name__ == "__main__":
    main()
