"""Error of every operation in float16 and bfloat16: relative norm error against float64 on the
same 16-bit inputs, in units of the dtype's unit roundoff u (2^-11 float16, 2^-8 bfloat16), on
the bundled graph and a power-law graph.

    python benchmarks/half_errors.py --backend cuda      # the GPU kernels (needs a GPU)
    python benchmarks/half_errors.py --backend cpu       # the CPU backend

The bound the README states and the tests pin: within u for the operations that round once,
2u for the unfused SDDMM -> SpMM (its scores are rounded too).
"""
import argparse

import ml_dtypes
import numpy as np

import numbasparse as ns
from numbasparse import graphs
from numbasparse.reference import attention_reference, sddmm_reference, sddmm_spmm_reference, spmm_reference

DTYPES = {"float16": (np.dtype(np.float16), 2.0**-11), "bfloat16": (np.dtype(ml_dtypes.bfloat16), 2.0**-8)}


def error(result, reference):
    result = np.asarray(result.data if hasattr(result, "tocsr") else result, np.float64)
    return np.linalg.norm(result - reference) / np.linalg.norm(reference)


def cases(A, dtype, n, backend, rng):
    """(name, result, float64 reference) per operation."""
    A64 = A.astype(np.float64)
    A64.data = A64.data.astype(dtype).astype(np.float64)  # the values the kernels compute with
    B, X, Y, Z = (rng.standard_normal(s).astype(dtype) for s in
                  ((A.shape[1], n), (A.shape[0], n), (A.shape[1], n), (A.shape[1], n)))
    B64, X64, Y64, Z64 = (a.astype(np.float64) for a in (B, X, Y, Z))
    for reduce in ("sum", "mean", "max", "min"):
        yield f"spmm {reduce}", ns.spmm(A, B, reduce=reduce, backend=backend), spmm_reference(A64, B64, reduce)
    yield "sddmm", ns.sddmm(A, X, Y, backend=backend), sddmm_reference(A64, X64, Y64)
    for fused in (True, False):
        label = "fused" if fused else "unfused"
        yield f"sddmm_spmm {label}", ns.sddmm_spmm(A, X, Y, Z, fused=fused, backend=backend), \
            sddmm_spmm_reference(A64, X64, Y64, Z64)
        yield f"graph_attention {label}", ns.graph_attention(A, X, Y, Z, fused=fused, backend=backend), \
            attention_reference(A64, X64, Y64, Z64)
    W = rng.standard_normal((n, 32)).astype(dtype)
    yield "spmm_dense", ns.spmm_dense(A, B, W, backend=backend), \
        spmm_reference(A64, B64) @ W.astype(np.float64)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="auto")
    p.add_argument("--n", type=int, default=64)
    args = p.parse_args()
    named = {"bundled (4096 nodes)": graphs.default_graph(),
             "power-law (Chung-Lu, 20000 nodes, exponent 2.1)": graphs.powerlaw(20000)}
    print(f"backend {args.backend}, N = {args.n}; relative norm error / u")
    for graph_name, A in named.items():
        print(f"\n{graph_name}, nnz {A.nnz}")
        for dtype_name, (dtype, u) in DTYPES.items():
            rng = np.random.default_rng(0)
            row = [f"{name} {error(result, reference) / u:.2f}" for name, result, reference in
                   cases(A, dtype, args.n, args.backend, rng)]
            print(f"  {dtype_name}: " + " | ".join(row))


if __name__ == "__main__":
    main()
