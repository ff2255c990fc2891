"""``python -m numbasparse demo``: run every algorithm on real or bundled graphs, check, time.

Rows: SpMM per algorithm and reduction, the GCN layer ``spmm_dense`` ((A @ B) @ W, W N x 16;
fused on CUDA), SDDMM per algorithm."""
import numpy as np

from . import api, dispatch, graphs
from .arrays import to_device
from .bench.timing import time_cuda, time_host
from .csr import CSR, canonical_csr
from .dtypes import as_dtype
from .reference import relative_error, sddmm_reference, spmm_reference

#: Largest relative error per dtype; 16-bit results are rounded once (unit roundoff, README).
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def _rows_for_graph(name, A, n_cols, dtype, backend, rng):
    """Yield one result row per (operation, algorithm, reduction) that takes ``dtype``."""
    tolerance = TOLERANCE[dtype.name]
    A = canonical_csr(A, dtype=dtype)  # the values the kernels compute with (16-bit: rounded once)
    B = rng.standard_normal((A.shape[1], n_cols)).astype(dtype)
    X = rng.standard_normal((A.shape[0], n_cols)).astype(dtype)
    Y = rng.standard_normal((A.shape[1], n_cols)).astype(dtype)
    if backend == "cuda":
        A_op = CSR.from_scipy(A, dtype=dtype)
        B_op, X_op, Y_op = to_device(B), to_device(X), to_device(Y)
        timer, to_host = time_cuda, (lambda a: a.copy_to_host())
    else:
        A_op, B_op, X_op, Y_op = canonical_csr(A, dtype=dtype), B, X, Y
        timer, to_host = time_host, (lambda a: a.data if hasattr(a, "tocsr") else a)

    for algo in dispatch.algorithms("spmm", backend):
        if dtype.name not in dispatch.SPMM[algo].dtypes:
            continue
        # (a first "tuned" call times its whole schedule space, seconds per reduction: sum shows it)
        for reduce in ("sum",) if algo == "tuned" else dispatch.SPMM[algo].reductions:
            ref = spmm_reference(A, B, reduce)
            run = lambda: api.spmm(A_op, B_op, reduce=reduce, algorithm=algo)  # noqa: E731
            err = relative_error(to_host(run()), ref)
            ms, _ = timer(run)
            yield name, "spmm", algo, reduce, backend, err, ms, err <= tolerance
    W = rng.standard_normal((n_cols, 16)).astype(dtype)
    W_op = to_device(W) if backend == "cuda" else W
    run = lambda: api.spmm_dense(A_op, B_op, W_op)  # noqa: E731
    err = relative_error(to_host(run()), spmm_reference(A, B) @ W.astype(np.float64))
    ms, _ = timer(run)
    yield name, "gcn", "fused" if backend == "cuda" else "cpu_rows", "sum", backend, err, ms, err <= tolerance
    ref = sddmm_reference(A, X, Y)
    for algo in dispatch.algorithms("sddmm", backend):
        if dtype.name not in dispatch.SDDMM[algo].dtypes:
            continue
        run = lambda: api.sddmm(A_op, X_op, Y_op, algorithm=algo)  # noqa: E731
        err = relative_error(to_host(run()), ref)
        ms, _ = timer(run)
        yield name, "sddmm", algo, "-", backend, err, ms, err <= tolerance


def run_demo(data=None, n_cols=64, dtype=np.float32, seed=0, out=print):
    """Check and time every algorithm; returns the rows; prints a table with ``out``."""
    graph_set = graphs.load_npz_dir(data) if data else {"default": graphs.default_graph()}
    if not graph_set:
        raise ValueError(f"no *.npz graphs found in {data!r}")
    backend = "cuda" if dispatch.gpu_present() else "cpu"
    dtype = as_dtype(dtype)
    rng = np.random.default_rng(seed)
    out(f"numbasparse demo: backend={backend}, N={n_cols}, dtype={np.dtype(dtype).name}; "
        f"error = ||C - C_ref|| / ||C_ref|| against float64 scipy; "
        f"time = median ms per call ({'CUDA events, data on the GPU' if backend == 'cuda' else 'host clock'})")
    header = ("graph", "nodes", "nnz", "op", "algorithm", "reduce", "backend", "error", "ms", "ok")
    out("{:<10} {:>8} {:>9} {:<6} {:<9} {:<6} {:<7} {:>9} {:>9} {:>4}".format(*header))
    rows = []
    for name, A in graph_set.items():
        for row in _rows_for_graph(name, A, n_cols, dtype, backend, rng):
            name_, op, algo, reduce, be, err, ms, ok = row
            out(f"{name_:<10} {A.shape[0]:>8} {A.nnz:>9} {op:<6} {algo:<9} {reduce:<6} {be:<7} "
                f"{err:>9.2e} {ms:>9.3f} {'yes' if ok else 'NO':>4}")
            rows.append(row)
    return rows
