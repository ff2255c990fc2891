"""HP-SpMM's single launch (sum, float32) on one graph in three row orders, once each, for
Nsight Compute: rows by decreasing length in order ("deg"), the rows shuffled beforehand
("shuf", in order), and the by-length copy through the row map (``shuffled=True``):

    ncu --clock-control none -k regex:spmm_hp --section SpeedOfLight --section Occupancy \\
        --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \\
        python benchmarks/probes/ncu_row_order.py GRAPH.npz 128

Prints the order of the launches (one per variant) to stderr.
"""
import sys

import numpy as np
import scipy.sparse as sp
from numba import cuda

from numbasparse.csr import CSR
from numbasparse.cuda import hp
from numbasparse.reorder import degree_order

path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 128
A0 = sp.load_npz(path).tocsr()
A0.data = np.random.default_rng(0).uniform(0.5, 1.5, A0.nnz).astype(np.float32)
variants = (("deg", A0[degree_order(A0)], False),
            ("shuf", A0[np.random.default_rng(1).permutation(A0.shape[0])], False),
            ("deg_mapped", A0[degree_order(A0)], True))
B = cuda.to_device(np.random.default_rng(3).standard_normal((A0.shape[1], n)).astype(np.float32))
for label, A, shuffled in variants:
    A = A.tocsr()
    A.sort_indices()
    dev = CSR.from_scipy(A)
    C = cuda.device_array((A.shape[0], n), np.float32)
    hp.spmm_hp(dev, B, C, "sum", single=True, block_order="in_order", shuffled=shuffled, balanced=False)
    cuda.synchronize()
    err = np.linalg.norm(C.copy_to_host() - A.astype(np.float64) @ B.copy_to_host()) / np.linalg.norm(
        A.astype(np.float64) @ B.copy_to_host())
    print(f"launch: {label} error {err:.1e}", file=sys.stderr, flush=True)
