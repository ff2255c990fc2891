"""Time HP-SpMM/SDDMM for each nonzeros-per-group candidate and lane-group size beside torch
(GPU only):
    python benchmarks/probes/tune_hp.py rmat:18 rmat:20 ...   # graph specs or .npz directories
Times are kernel times (CUPTI through torch.profiler).  Used to set DTP's candidates and wave
factor (``hp.NNZ_PER_WARP``, ``hp.WAVES``; SpMM's DTP is now ``hp.spmm_nnz_per_group``, set from
``spmm_variants.py``) and the lane-group rule (``hp.lane_layout``) in numbasparse/cuda/hp.py."""
import sys
from pathlib import Path

import numpy as np
import torch
from numba import cuda

import numbasparse as ns
from numbasparse import graphs
from numbasparse.bench.timing import time_kernels
from numbasparse.cuda import hp
from numbasparse.cuda.device import WARP_SIZE, cdiv

found = {}
for spec in sys.argv[1:]:  # graph specs, or a directory of .npz graphs
    found.update(graphs.load_npz_dir(spec) if Path(spec).is_dir() else {spec: graphs.from_spec(spec)})
for spec, A in found.items():
    csr = ns.CSR.from_scipy(A)
    S = torch.sparse_csr_tensor(torch.as_tensor(A.indptr, device="cuda"), torch.as_tensor(A.indices, device="cuda"),
                                torch.as_tensor(A.data, device="cuda"), size=A.shape)
    for n in (32, 64, 128, 256):
        Bt = torch.randn(A.shape[1], n, device="cuda")
        B, C = cuda.as_cuda_array(Bt), cuda.device_array((A.shape[0], n), np.float32)
        ref = torch.sparse.mm(S, Bt)
        t_torch = time_kernels(lambda: torch.sparse.mm(S, Bt))
        layout = hp.lane_layout(n, 4, B)
        line = f"{spec:<10} nnz={A.nnz:<9} N={n:<4} torch {t_torch:7.3f} ms | default lanes,vec,cf={layout}"
        for lanes in sorted({32, 16, 8, layout[0]}):  # kernel time (CUPTI), ms
            _, vec, cf = hp.lane_layout(n, 4, B, lanes=lanes)
            dtp = hp.spmm_nnz_per_group(A.nnz, cdiv(n, lanes * vec * cf), groups_per_warp=WARP_SIZE // lanes)
            line += f"\n    lanes={lanes:<2} vec={vec} cf={cf} DTP={dtp:<4}"
            for npw in (4, 8, 16, 32, 64, 128, 256, 512, 1024):
                hp.spmm_hp(csr, B, C, "sum", nnz_per_group=npw, lanes=lanes)
                err = float((torch.as_tensor(C.copy_to_host(), device="cuda") - ref).norm() / ref.norm())
                t = time_kernels(lambda: hp.spmm_hp(csr, B, C, "sum", nnz_per_group=npw, lanes=lanes))
                line += f" {npw}:{t:6.3f}{'' if err < 1e-4 else '!ERR'}"
        print(line, flush=True)
    X = torch.randn(A.shape[0], 64, device="cuda")
    Xn, out = cuda.as_cuda_array(X), cuda.device_array(A.nnz, np.float32)
    t_torch = time_kernels(lambda: torch.sparse.sampled_addmm(S, X, X.T, beta=0.0))
    line = f"{spec:<10} SDDMM K=64 torch {t_torch:7.3f} ms |"
    for npw in (8, 16, 32, 64, 128, 256, 512, 1024):
        t = time_kernels(lambda: hp.sddmm_hp(csr, Xn, Xn, out, nnz_per_warp=npw))
        line += f" {npw}:{t:6.3f}"
    print(line, flush=True)
