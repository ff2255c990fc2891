"""Host time of a call on a host with several GPUs.  Run on a machine with two or more GPUs:
    python benchmarks/probes/several_gpus.py [GRAPH.npz ...]
Per-call microseconds (back to back, calls issued then both GPUs synchronised) of ``ns.spmm``
and ``ns.sddmm`` on torch tensors, with GPU 0 current and the operands on GPU 0 or on GPU 1,
through the fast launch (one per kernel and GPU) and through Numba's launch (the fast path off,
as it was on every multi-GPU host before), beside ``torch.sparse.mm`` on the same GPU.  Each
result is checked against float64 first.  Graphs: the bundled one and any given."""
import sys
import time

import numpy as np
import torch

import numbasparse as ns
from numbasparse import graphs
from numbasparse.cuda import launch
from numbasparse.reference import relative_error, spmm_reference


def host_us(fn, calls=400, warmup=30):
    for _ in range(warmup):
        fn()
    for g in range(torch.cuda.device_count()):
        torch.cuda.synchronize(g)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    for g in range(torch.cuda.device_count()):
        torch.cuda.synchronize(g)
    return (time.perf_counter() - start) / calls * 1e6


def numba_launch_only():
    """Turn the fast launch off for the rest of the process (what a multi-GPU host had)."""
    launch._driver = lambda: None
    launch._fast_launch.clear()


def main(paths):
    assert torch.cuda.device_count() >= 2, "needs two GPUs"
    torch.cuda.set_device(0)
    named = [("bundled", graphs.default_graph())] + [(p.split("/")[-1], graphs.from_spec(p)) for p in paths]
    rng = np.random.default_rng(0)
    rows = []
    for fast in (True, False):
        if not fast:
            numba_launch_only()
        for name, A in named:
            A = A.astype(np.float32)
            A.data = rng.uniform(0.5, 1.5, A.nnz).astype(np.float32)
            for gpu in (0, 1):
                dev = torch.device("cuda", gpu)
                with torch.cuda.device(gpu):
                    M = ns.CSR.from_scipy(A)
                    T = torch.sparse_csr_tensor(torch.tensor(A.indptr), torch.tensor(A.indices), torch.tensor(A.data),
                                                size=A.shape, device=dev)
                for n in (32, 128):
                    B64 = rng.standard_normal((A.shape[1], n))
                    B = torch.tensor(B64, dtype=torch.float32, device=dev)
                    X = torch.tensor(rng.standard_normal((A.shape[0], n)), dtype=torch.float32, device=dev)
                    err = relative_error(ns.spmm(M, B).cpu().numpy(), spmm_reference(A, B64))
                    assert err < 1e-5, (name, gpu, n, err)
                    ours = host_us(lambda: ns.spmm(M, B))
                    sddmm = host_us(lambda: ns.sddmm(M, X, X))
                    theirs = host_us(lambda: torch.sparse.mm(T, B))
                    rows.append((fast, name, gpu, n, ours, sddmm, theirs, err))
                    print(f"{'fast ' if fast else 'numba'} {name:<16} operands on GPU {gpu} (GPU 0 current) N={n:<4} "
                          f"ns.spmm {ours:7.1f} us  ns.sddmm {sddmm:7.1f} us  torch.sparse.mm {theirs:7.1f} us  "
                          f"(error {err:.1e})", flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
