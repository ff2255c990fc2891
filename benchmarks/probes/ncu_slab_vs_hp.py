"""Run HP-SpMM and the column-slab SpMM (sum) once each on the largest of 4 sampled subgraphs of
rmat:20, for Nsight Compute:

    ncu -k regex:"spmm_(hp|slab)" --section SpeedOfLight --section Occupancy \\
        --section MemoryWorkloadAnalysis --section WarpStateStats --section InstructionStats \\
        python benchmarks/probes/ncu_slab_vs_hp.py 128
"""
import sys

import numpy as np
from numba import cuda

import numbasparse as ns
from numbasparse import graphs
from numbasparse.cuda import hp, slab

n = int(sys.argv[1]) if len(sys.argv) > 1 else 128
A = max(graphs.sample_subgraphs(graphs.from_spec("rmat:20"), 4), key=lambda a: a.nnz)
print("graph", A.shape, A.nnz, flush=True)
csr = ns.CSR.from_scipy(A)
B = cuda.to_device(np.random.default_rng().standard_normal((A.shape[1], n)).astype(np.float32))
C = cuda.device_array((A.shape[0], n), np.float32)
hp.spmm_hp(csr, B, C, "sum")
slab.spmm_slab(csr, B, C, "sum")
cuda.synchronize()
