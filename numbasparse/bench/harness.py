"""Check, then time: one benchmark case (graph, op, reduce, N) over every implementation.

Method: each result is compared with a float64 reference before it is timed; timing uses
CUDA events on the default stream after warm-up, median of ``repeat`` runs; when the
dense inputs fit in L2 several copies are rotated so the cache does not hold them; for
small graphs the end-to-end Python call (dispatch included, synchronised) is timed too.
"""
import itertools
from dataclasses import dataclass

import numpy as np

from .. import api, dispatch
from ..csr import CSR
from ..dtypes import as_dtype
from ..reference import attention_reference, relative_error, sddmm_spmm_reference, spmm_reference
from .baselines import BASELINES, OPS, Unsupported, to_numpy
from .timing import time_cuda, time_cuda_interleaved, time_host, time_kernels

#: cuSPARSE and atomics reorder sums; 16-bit results are rounded once (unit roundoff, README)
TOLERANCE = {"float32": 1e-4, "float64": 1e-10, "float16": 2.0**-11, "bfloat16": 2.0**-8}
GCN_OUT = 64  # "gcn" op: (A @ X) @ W with X (K, N) and W (N, GCN_OUT), a GCN layer
#: SDDMM -> SpMM ops, all dense operands N wide: "sddmm_spmm" (A ⊙ X Y^T) Z, "attention" softmax_row(...) Z
SCORE_OPS = ("sddmm_spmm", "attention")
CALL_TIME_MAX_NNZ = 2_000_000


@dataclass
class Case:
    graph: str
    A: object          # scipy CSR
    op: str            # "spmm", "sddmm", "gcn", "sddmm_spmm" or "attention"
    reduce: str        # reduction ("-" for sddmm)
    n: int             # dense columns (N for SpMM, K for SDDMM)
    dtype: str = "float32"


#: Relative error allowed a result computed with TF32 inputs (``ns:ALGO@tf32``): 10-bit mantissas.
TF32_TOLERANCE = 2.0**-9


def tolerance(impl, dtype):
    """Largest relative error a result of ``impl`` may have to be timed: TOLERANCE, for the
    baselines in 16-bit dtypes 4x that (torch's bfloat16 ``sparse.mm`` rounds more than once:
    about 1.7 u measured), TF32_TOLERANCE for ``@tf32`` ones; the error is reported in every row."""
    if impl.endswith("@tf32"):
        return TF32_TOLERANCE
    return TOLERANCE[dtype] * (4 if dtype in ("float16", "bfloat16") and not impl.startswith("ns:") else 1)


def compulsory_bytes(A, op, n, dtype, index_bytes=4):
    """Bytes every implementation must move: the CSR once, the dense inputs once, the
    output once (SpMM: B and C; SDDMM: X, Y and the nnz values; GCN: X, W and the output)."""
    value = as_dtype(dtype).itemsize
    m, k = A.shape
    csr = (m + 1) * index_bytes + A.nnz * (index_bytes + value)
    if op == "spmm":
        return csr + (k * n + m * n) * value
    if op == "gcn":
        return csr + (k * n + n * GCN_OUT + m * GCN_OUT) * value
    if op in SCORE_OPS:  # X, Y, Z in, out written
        return csr + (2 * m * n + 2 * k * n) * value
    return csr + (m + k) * n * value + A.nnz * value


def flops(A, op, n):
    if op in SCORE_OPS:
        return 4 * A.nnz * n
    if op == "gcn":
        return 2 * A.nnz * n + 2 * A.shape[0] * n * GCN_OUT
    return 2 * A.nnz * n


def numbasparse_impl(algorithm):
    """``ns:ALGO`` (``ns:auto``: the library's own choice, per graph); for the "gcn" op,
    ``ns:auto`` is ``spmm_dense`` as it runs by default (unfused, the matmul first where W
    narrows the rows), ``ns:fused`` its fused kernel and ``ns:ALGO`` ``spmm`` with that
    algorithm followed by a torch matmul.  ``ALGO@tf32``: SpMM (or the fused GCN layer,
    ``fused@tf32``) with ``precision="tf32"``."""
    algorithm, _, precision = algorithm.partition("@")
    precision = precision or "ieee"

    def make(A, op, reduce, dtype):
        if precision != "ieee" and op != "spmm" and (op, algorithm) != ("gcn", "fused"):
            raise Unsupported(f"precision={precision!r} is an option of spmm and of the fused GCN layer")
        if not applies(f"ns:{algorithm}", op):
            raise Unsupported(f"no {op} algorithm {algorithm!r}")
        if op == "spmm" and algorithm != "auto" and reduce not in dispatch.SPMM[algorithm].reductions:
            raise Unsupported(f"{algorithm} does not do reduce={reduce}")
        csr = CSR.from_scipy(A, dtype=dtype)
        if op in SCORE_OPS:
            fn = api.sddmm_spmm if op == "sddmm_spmm" else api.graph_attention
            return lambda X, Y, Z: fn(csr, X, Y, Z, fused=algorithm == "fused")
        if op == "gcn" and algorithm in ("fused", "auto"):
            fused = algorithm == "fused" or "auto"
            return lambda X, W: api.spmm_dense(csr, X, W, fused=fused, precision=precision)
        if op == "gcn":
            return lambda X, W: api.spmm(csr, X, algorithm=algorithm) @ W
        if op == "spmm":
            return lambda B: api.spmm(csr, B, reduce=reduce, algorithm=algorithm, precision=precision)
        return lambda X, Y: api.sddmm(csr, X, Y, algorithm=algorithm)
    return make


def implementations(algorithms, baselines):
    impls = {f"ns:{a}": numbasparse_impl(a) for a in list(algorithms) + ["fused", "unfused"]}
    impls.update({b: BASELINES[b] for b in baselines})
    return impls


def _inputs(case, copies, rng):
    import torch

    m, k = case.A.shape
    dtype = getattr(torch, case.dtype)
    shapes = {"spmm": [(k, case.n)], "sddmm": [(m, case.n), (k, case.n)],
              "gcn": [(k, case.n), (case.n, GCN_OUT)], "sddmm_spmm": [(m, case.n), (k, case.n), (k, case.n)],
              "attention": [(m, case.n), (k, case.n), (k, case.n)]}[case.op]
    first = [torch.as_tensor(rng.standard_normal(s), dtype=dtype, device="cuda") for s in shapes]
    return [first] + [[t.clone() for t in first] for _ in range(copies - 1)]


def _reference(case, inputs):
    """Float64 reference: cuSPARSE in float64 for sums (fast, independent), else scipy."""
    import torch

    host = [t.double().cpu().numpy() for t in inputs]
    if case.op in ("spmm", "gcn") and case.reduce == "sum":
        A = case.A
        S = torch.sparse_csr_tensor(torch.as_tensor(A.indptr.astype(np.int64), device="cuda"),
                                    torch.as_tensor(A.indices.astype(np.int64), device="cuda"),
                                    torch.as_tensor(A.data, dtype=torch.float64, device="cuda"), size=A.shape)
        C = torch.sparse.mm(S, inputs[0].double())
        return (C if case.op == "spmm" else C @ inputs[1].double()).cpu().numpy()
    if case.op == "spmm":
        return spmm_reference(case.A, host[0], case.reduce)
    if case.op in SCORE_OPS:
        reference = sddmm_spmm_reference if case.op == "sddmm_spmm" else attention_reference
        return reference(case.A, *host)
    # SDDMM: gathered float64 dot products on the GPU, a few million entries at a time.
    A = case.A
    X, Y = (t.double() for t in inputs)
    rows = torch.as_tensor(np.repeat(np.arange(A.shape[0]), np.diff(A.indptr)), device="cuda")
    cols = torch.as_tensor(A.indices.astype(np.int64), device="cuda")
    vals = torch.as_tensor(A.data, dtype=torch.float64, device="cuda")
    step = max(1, (1 << 27) // max(case.n, 1))
    out = torch.empty(A.nnz, dtype=torch.float64, device="cuda")
    for lo in range(0, A.nnz, step):
        hi = min(lo + step, A.nnz)
        out[lo:hi] = (X[rows[lo:hi]] * Y[cols[lo:hi]]).sum(-1) * vals[lo:hi]
    return out.cpu().numpy()


def l2_copies(case, l2_bytes):
    """How many copies of the dense inputs to rotate so they do not stay in L2."""
    m, k = case.A.shape
    rows = {"spmm": k, "sddmm": m + k, "gcn": k, "sddmm_spmm": m + 2 * k, "attention": m + 2 * k}[case.op]
    dense = rows * case.n * as_dtype(case.dtype).itemsize
    return int(min(8, max(1, np.ceil(3 * l2_bytes / max(dense, 1)))))


def applies(name, op):
    """Whether implementation ``name`` (``ns:ALGO`` or a baseline) implements ``op``."""
    if name.startswith("ns:"):
        algorithm = name[3:].partition("@")[0]
        if op in SCORE_OPS:
            return algorithm in ("fused", "unfused")
        if algorithm == "unfused":
            return False
        if op == "gcn":
            return algorithm in ("fused", "auto") or algorithm in dispatch.algorithms("spmm", "cuda")
        return algorithm == "auto" or algorithm in dispatch.algorithms(op, "cuda")
    return op in OPS[name]


def run_case(case, impls, *, repeat=20, warmup=5, l2_bytes=50 << 20, seed=0):
    """Rows (dicts) for one case: error, median ms per call on an idle GPU (``ms``) and back to
    back (``b2b_ms``), and for small graphs the host time of a call to its end (``call_ms``).
    Every implementation is checked first; then their timed repetitions are interleaved
    (:func:`time_cuda_interleaved`).  The GPU time per call comes from :func:`kernel_times`, in
    a later pass."""
    import torch

    impls = {name: make for name, make in impls.items() if applies(name, case.op)}

    rng = np.random.default_rng(seed)
    copies = l2_copies(case, l2_bytes)
    buffers = _inputs(case, copies, rng)
    reference = _reference(case, buffers[0])
    rows, calls = [], {}
    for name, make in impls.items():
        row = dict(graph=case.graph, nodes=case.A.shape[0], nnz=int(case.A.nnz), op=case.op,
                   reduce=case.reduce, n=case.n, dtype=case.dtype, impl=name,
                   bytes=compulsory_bytes(case.A, case.op, case.n, case.dtype),
                   flops=flops(case.A, case.op, case.n))
        rows.append(row)
        try:
            run = make(case.A, case.op, case.reduce, case.dtype)
            row["error"] = relative_error(to_numpy(run(*buffers[0])), reference)
            if not row["error"] <= tolerance(name, case.dtype):
                row["status"] = "wrong result"
                continue
            cycle = itertools.cycle(buffers)
            calls[name] = (row, lambda run=run, cycle=cycle: run(*next(cycle)))
        except Unsupported as exc:
            row["status"] = f"skipped: {exc}"
        except torch.cuda.OutOfMemoryError:
            row["status"] = "skipped: out of GPU memory"
            torch.cuda.empty_cache()
    _time_rows(calls, repeat=repeat, warmup=warmup, host_time=case.A.nnz <= CALL_TIME_MAX_NNZ)
    return rows


def _time_rows(calls, *, repeat, warmup, host_time=False, b2b_calls=20):
    """Fill ``ms``, ``b2b_ms`` (and with ``host_time`` ``call_ms``) and ``status`` of each
    checked implementation's row, in place; ``calls``: {name: (row, fn)}."""
    import torch

    if not calls:
        return
    fns = {name: fn for name, (_, fn) in calls.items()}
    try:
        single = time_cuda_interleaved(fns, warmup=warmup, repeat=repeat)
        back_to_back = time_cuda_interleaved(fns, calls=b2b_calls, warmup=1, repeat=10)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        for row, _ in calls.values():
            row["status"] = "skipped: out of GPU memory"
        return
    for name, (row, fn) in calls.items():
        row["ms"], row["b2b_ms"] = single[name][0], back_to_back[name][0]
        if host_time:
            row["call_ms"], _ = time_host(lambda: (fn(), torch.cuda.synchronize()), warmup=warmup, repeat=repeat)
        row["status"] = "ok"


def kernel_times(case, impls, *, repeat=20, l2_bytes=50 << 20, seed=0):
    """{impl: GPU milliseconds per call (CUPTI)} for one case, on fresh inputs.  A separate
    pass from :func:`run_case`'s event timings: once CUPTI is attached to the process every
    later launch costs more host time, so the benchmark takes these after all event timings."""
    impls = {name: make for name, make in impls.items() if applies(name, case.op)}
    buffers = _inputs(case, l2_copies(case, l2_bytes), np.random.default_rng(seed))
    times = {}
    for name, make in impls.items():
        try:
            run = make(case.A, case.op, case.reduce, case.dtype)
        except Unsupported:
            continue
        cycle = itertools.cycle(buffers)
        ms = time_kernels(lambda: run(*next(cycle)), warmup=1, repeat=repeat)
        if ms is not None:
            times[name] = ms
    return times


def add_kernel_times(rows, graph, op, reduce, n, times):
    """Put ``kernel_times``' result into the matching rows (``kernel_ms``), in place."""
    for r in rows:
        if (r["graph"], r["op"], r["reduce"], r["n"]) == (graph, op, reduce, n) and r["impl"] in times \
                and r.get("status") == "ok":
            r["kernel_ms"] = times[r["impl"]]


def add_metrics(rows, copy_gbs, yardstick):
    """GFLOP/s, effective GB/s, bandwidth floor and speedup over the yardstick, in place."""
    graphs_by_case = {}
    for r in rows:
        graphs_by_case.setdefault((r["graph"], r["op"], r["reduce"], r["n"]), []).append(r)
    for case_rows in graphs_by_case.values():
        ref = next((r for r in case_rows if r["impl"] == yardstick[case_rows[0]["op"]] and "ms" in r), None)
        for r in case_rows:
            if "ms" not in r:
                continue
            r["gflops"] = r["flops"] / r["ms"] / 1e6
            r["gbs"] = r["bytes"] / r["ms"] / 1e6
            r["floor_ms"] = r["bytes"] / copy_gbs / 1e6
            r["of_floor"] = r["floor_ms"] / r["ms"]
            if ref is not None:
                r["speedup"] = ref["ms"] / r["ms"]
                if "kernel_ms" in r and "kernel_ms" in ref:
                    r["kernel_speedup"] = ref["kernel_ms"] / r["kernel_ms"]
                if "b2b_ms" in r and "b2b_ms" in ref:
                    r["b2b_speedup"] = ref["b2b_ms"] / r["b2b_ms"]
    return rows


def copy_bandwidth_gbs(n_bytes=1 << 30):
    """Device-to-device copy rate in GB/s, counting bytes read plus bytes written."""
    from numba import cuda

    src = cuda.device_array(n_bytes // 4, np.float32)
    dst = cuda.device_array_like(src)
    ms, _ = time_cuda(lambda: dst.copy_to_device(src), warmup=2, repeat=10)
    return 2 * n_bytes / ms / 1e6


def in_sequence(runs, Bs):
    """One call of the sampled workload: ``runs[i](Bs[i])`` for every subgraph, in order."""
    def all_subgraphs():
        for run, B in zip(runs, Bs):
            run(B)
    return all_subgraphs


def run_sampled(name, subgraphs, impls, n, *, dtype="float32", repeat=20, warmup=3, seed=0):
    """The graph-sampling workload: one SpMM (sum) per subgraph, back to back; each result
    is checked, then the whole sequence is timed as one unit, the implementations' repetitions
    interleaved: ``ms`` the median of ``repeat`` sequences each started on an idle GPU,
    ``b2b_ms`` the median of 10 runs of 5 sequences back to back (its GPU time:
    :func:`sampled_kernel_times`)."""
    import torch

    rng = np.random.default_rng(seed)
    tdtype = getattr(torch, dtype)
    Bs = [torch.as_tensor(rng.standard_normal((A.shape[1], n)), dtype=tdtype, device="cuda") for A in subgraphs]
    refs = [spmm_reference(A, B.double().cpu().numpy()) for A, B in zip(subgraphs, Bs)]
    nnz = int(sum(A.nnz for A in subgraphs))
    total_bytes = sum(compulsory_bytes(A, "spmm", n, dtype) for A in subgraphs)
    rows, calls = [], {}
    for impl, make in impls.items():
        if not applies(impl, "spmm"):
            continue
        row = dict(graph=name, nodes=int(sum(A.shape[0] for A in subgraphs)), nnz=nnz, op="spmm",
                   reduce="sum", n=n, dtype=dtype, impl=impl, bytes=total_bytes,
                   flops=2 * nnz * n, subgraphs=len(subgraphs))
        rows.append(row)
        try:
            runs = [make(A, "spmm", "sum", dtype) for A in subgraphs]
            row["error"] = max(relative_error(to_numpy(r(B)), ref) for r, B, ref in zip(runs, Bs, refs))
            if not row["error"] <= tolerance(impl, dtype):
                row["status"] = "wrong result"
                continue
            calls[impl] = (row, in_sequence(runs, Bs))
        except Unsupported as exc:
            row["status"] = f"skipped: {exc}"
    _time_rows(calls, repeat=repeat, warmup=warmup, b2b_calls=5)
    return rows


def sampled_kernel_times(subgraphs, impls, n, *, dtype="float32", repeat=20, seed=0):
    """{impl: GPU milliseconds of the whole sampled sequence (CUPTI)}: :func:`kernel_times`
    for :func:`run_sampled`'s workload."""
    import torch

    rng = np.random.default_rng(seed)
    tdtype = getattr(torch, dtype)
    Bs = [torch.as_tensor(rng.standard_normal((A.shape[1], n)), dtype=tdtype, device="cuda") for A in subgraphs]
    times = {}
    for impl, make in impls.items():
        if not applies(impl, "spmm"):
            continue
        try:
            runs = [make(A, "spmm", "sum", dtype) for A in subgraphs]
        except Unsupported:
            continue
        ms = time_kernels(in_sequence(runs, Bs), warmup=1, repeat=repeat)
        if ms is not None:
            times[impl] = ms
    return times


def add_payoff(rows, prep_seconds):
    """For rows of a reordered graph ``NAME+METHOD``: the reordering time (``prep_s``) and the
    number of calls after which it has paid for itself against the same case on ``NAME``
    (``payoff_calls``; inf when the reordered graph is not faster).  In place."""
    base = {(r["graph"], r["op"], r["reduce"], r["n"], r["impl"]): r for r in rows}
    for r in rows:
        if r["graph"] not in prep_seconds:
            continue
        r["prep_s"] = prep_seconds[r["graph"]]
        plain = base.get((r["graph"].rsplit("+", 1)[0], r["op"], r["reduce"], r["n"], r["impl"]))
        if plain is not None and "ms" in plain and "ms" in r:
            saving = plain["ms"] - r["ms"]
            r["payoff_calls"] = r["prep_s"] * 1e3 / saving if saving > 0 else float("inf")
    return rows
