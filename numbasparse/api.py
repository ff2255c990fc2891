"""Public functions: validation at the boundary and array-type handling, then dispatch.

A call flows: public function -> :mod:`numbasparse.replay` (a repeated call on torch tensors is
replayed here) -> validation (:mod:`numbasparse.arrays` for dense operands, :mod:`numbasparse.csr`
for the sparse one) -> :func:`numbasparse.dispatch.resolve` (which kernel) -> the kernel family's
launcher (plan from the matrix's cache, then :mod:`numbasparse.cuda.launch`).
"""
import functools

import numpy as np
from ._compat import scipy_sparse as sp

from . import arrays, dispatch, replay
from .csr import CSR, canonical_csr, is_canonical, sparse_operand
from .dtypes import INDEX_DTYPES, compute_dtype, is_half, storage_dtype
from .cuda import hc
from .cuda import device as gpus
from .cuda.device import allocating
from .reductions import NAMES as REDUCTIONS


def _check_csr_dtype(A, dtype, operand):
    if A.dtype != dtype:
        raise TypeError(
            f"A is a {A.dtype} CSR but {operand} is {dtype}: use A.astype({dtype.name!r}) once "
            f"(or pass {operand} as {A.dtype})"
        )


def _host_csr(A, dtype, operand):
    """Canonical scipy CSR of the checked operand ``A`` with values of ``dtype`` (for the CPU
    backend).  A CSR matrix that is already canonical (:func:`csr.is_canonical`), of that dtype
    and with native int32/int64 indices is used as it is (the CPU kernels only read it), so
    repeated calls, and ``Plan``'s CPU path, do not copy the graph each time."""
    if isinstance(A, CSR):
        _check_csr_dtype(A, dtype, operand)
        return A.to_scipy() if A._values_on_device_only else A._host
    if A.format == "csr" and A.dtype == dtype and not is_half(dtype) and A.indices.dtype == A.indptr.dtype \
            and A.indices.dtype in INDEX_DTYPES and is_canonical(A):
        return A
    return canonical_csr(A, dtype=dtype, checked=True)


def _device_csr(A, dtype, operand):
    if isinstance(A, CSR) and A._converted:  # made from a GPU input by this call: A's values follow
        return A.astype(dtype)
    if isinstance(A, CSR):
        _check_csr_dtype(A, dtype, operand)
        return A
    return CSR._of_canonical(canonical_csr(A, dtype=dtype, checked=True), dtype=dtype)


def _to_device(*host_arrays):
    """Device copies of host operands, for the CUDA backend (MemoryError naming the size when the
    GPU's memory is exhausted); 16-bit floats as their uint16 bits, as the kernels read them."""
    from numba import cuda

    with allocating("device copies of the operands", sum(a.nbytes for a in host_arrays)):
        return [cuda.to_device(arrays.device_storage(a)) for a in host_arrays]


def _device_empty(shape, dtype):
    from numba import cuda

    with allocating(f"an output of shape {shape}", int(np.prod(shape)) * np.dtype(dtype).itemsize):
        return cuda.device_array(shape, dtype=storage_dtype(dtype))


def _download(C_dev, dtype, out=None):
    """A device result of ``dtype`` values as a host array (into ``out`` when given)."""
    if out is not None and out.dtype.isnative:
        C_dev.copy_to_host(arrays.device_storage(out))
        return out
    if out is not None:  # (a byte-swapped out: the driver copies native values only)
        out[...] = arrays.host_values(C_dev.copy_to_host(), dtype)
        return out
    return arrays.host_values(C_dev.copy_to_host(), dtype)


def _cpu_operands(dtype, *host_arrays):
    """Host operands as the CPU kernels take them: 16-bit floats widened to float32 (they
    compute in float32, as the GPU kernels do)."""
    return [a.astype(np.float32) if is_half(dtype) else a for a in host_arrays]


def _cpu_result(C, dtype, out=None):
    """A CPU kernel's result (float32 for 16-bit operands) rounded to ``dtype``, into ``out``."""
    if out is not None and C is not out:
        out[...] = C
        return out
    return C.astype(dtype) if C.dtype != dtype else C


def _operands(*named):
    """Validated 2-D dense operands from (name, array) pairs, all on the host or all on the
    device, all of one dtype."""
    ops = [arrays.dense(a, name, 2) for name, a in named]
    arrays.same_place(*ops)
    if len({op.dtype for op in ops}) > 1:
        raise TypeError(f"{' and '.join(op.name for op in ops)} must have the same dtype, got "
                        f"{' and '.join(str(op.dtype) for op in ops)}")
    return ops


def _on_operands_gpu(A, *ops):
    """The call's GPU made current (:func:`numbasparse.cuda.device.on_gpu_of`): the one holding
    A (a :class:`CSR`) and the device operands; a no-op with one GPU."""
    device_ops = [op for op in ops if op.on_device]
    if not (device_ops or isinstance(A, CSR)) or gpus.one_device():  # (CUDA is initialised once either holds)
        return gpus.NO_SWITCH
    named = [(op.name, op.array) for op in device_ops]
    return A._on_its_gpu(*named) if isinstance(A, CSR) else gpus.on_gpu_of(named)


def _sparse_arrays(A):
    """(name, array) of the arrays of A that an output must not share memory with: the device
    arrays of a :class:`CSR`, else the host arrays of a scipy matrix."""
    if isinstance(A, CSR):
        return [("A.indptr", A.indptr), ("A.indices", A.indices), ("A.data", A.data)]
    return [(f"A.{k}", getattr(A, k)) for k in ("data", "indices", "indptr", "row", "col")
            if isinstance(getattr(A, k, None), np.ndarray)]


def _output(out, like, shape, dtype, A):
    """(result object, array the kernel writes) for ``spmm``'s ``out=`` argument: where B lives
    (host: a NumPy array or a CPU tensor; device: a CUDA array), shape (M, N), B's dtype,
    C-contiguous, writable, and sharing no memory with B or A (the kernels cannot run in place)."""
    if out is None:
        if like.on_device:
            return arrays.empty_like_framework(like, shape, dtype)
        return None, None
    if arrays.dlpack_only(out):
        raise TypeError("out must be a NumPy array, a torch tensor or a CUDA array (Numba, CuPy): a DLPack "
                        "array cannot be written in place")
    o = arrays.dense(out, "out", len(shape))
    if o.on_device != like.on_device:
        raise TypeError("out must live where B does (both host arrays, or both CUDA arrays)")
    wider = is_half(dtype) and o.dtype == np.float32  # a float32 result of 16-bit operands: not rounded
    if o.shape != shape or (o.dtype != dtype and not wider):
        also = " (or float32)" if is_half(dtype) else ""
        raise ValueError(f"out must have shape {shape} and dtype {dtype}{also}, got {o.shape} {o.dtype}")
    if o.on_device:
        target = o.array
        gpus.on_gpu_of([("B", like.array), ("out", target)])  # (only the check: B's GPU is current)
    else:
        if o.framework == "torch-cpu" and (out.requires_grad or not out.is_contiguous()):
            raise ValueError("out must be a C-contiguous tensor that does not require grad")
        target = out if isinstance(out, np.ndarray) else arrays.torch_cpu_numpy(out)
        if not target.flags.c_contiguous:
            raise ValueError("out must be C-contiguous")
        if not target.flags.writeable:
            raise ValueError("out is read-only")
    b = arrays.torch_cpu_numpy(like.original) if like.framework == "torch-cpu" else like.original \
        if not like.on_device else like.array  # B's own memory (like.array may be a contiguous copy of it)
    inputs = [("B", b)] + [(name, a) for name, a in _sparse_arrays(A) if isinstance(a, np.ndarray) != o.on_device]
    for name, array in inputs:
        if arrays.overlaps(target, array):
            raise ValueError(f"out must not share memory with {name}")
    return out, target


def spmm(A, B, *, reduce="sum", algorithm="auto", backend="auto", out=None, precision="ieee"):
    """Sparse-dense product with a reduction: ``C[i] = reduce_j a_ij * B[j]``.

    A: scipy.sparse matrix/array (converted to canonical CSR) or :class:`CSR`, shape (M, K).
    B: (K, N) float32, float64, float16 or bfloat16 (16-bit: computed in float32, rounded once),
        a NumPy array or a CUDA array (Numba, CuPy, PyTorch).
    reduce: "sum", "mean" (over the stored entries of the row), "max" or "min"; rows with
        no stored entry give 0; a NaN product makes its row NaN (max and min too).
    algorithm: "auto" or a name from ``algorithms("spmm")``.
    backend: "auto" (CUDA for device arrays or when a GPU is present, else CPU), "cuda", "cpu".
    out: optional (M, N) array of B's kind and dtype to write the result into (float32 for 16-bit
        B: the float32 accumulation, not rounded to 16 bits).
    precision: "ieee" (every product and sum in B's precision, or float32 for 16-bit B) or
        "tf32" (float32 B on the algorithms that offer it, ``hc`` and ``hc_tiles``: their dense
        tiles multiplied on the tensor cores with TF32 inputs, 10-bit mantissas, so results
        differ from "ieee" at about 1e-3 relative; sm_80 and later).

    Returns C (M, N), of B's dtype and kind: NumPy in, NumPy out; CuPy in, CuPy out; ...

    A call repeated with a :class:`CSR` and CUDA torch tensors of one shape, dtype, device and
    alignment, on one stream, is replayed from its ``replay.REPLAY_FROM_CALL``-th time on: the
    launches the full call made are issued again with the new data pointers, skipping
    validation and dispatch, which the earlier calls with those operands already passed
    (:mod:`numbasparse.replay`).
    """
    return replay.call(A, ("spmm", reduce, algorithm, backend, precision), (B,), out, _spmm_outputs, _spmm,
                       (A, B, reduce, algorithm, backend, out, precision))


def _spmm_outputs(A, B):  # (sizes as arguments, not a tuple: torch parses them faster)
    return (B.new_empty(A.shape[0], B.shape[1]),)


def _spmm(A, B, reduce, algorithm, backend, out, precision, record):
    A = sparse_operand(A)
    dispatch.check_option("reduce", reduce, REDUCTIONS)
    b = arrays.dense(B, "B", 2)
    m, k = A.shape
    if b.shape[0] != k:
        raise ValueError(f"A has {k} columns but B has {b.shape[0]} rows (A is {m}x{k}, B is {b.shape})")
    with _on_operands_gpu(A, b):
        return _spmm_checked(A, b, reduce, algorithm, backend, out, precision, record)


def _spmm_checked(A, b, reduce, algorithm, backend, out, precision, record):
    m = A.shape[0]
    algo = dispatch.resolve("spmm", algorithm, backend, b.on_device, b.shape[1], reduce, b.dtype.itemsize,
                            A, dtype=b.dtype, precision=precision)
    run = algo.run if precision == "ieee" else functools.partial(algo.run, tf32=True)
    shape = (m, b.shape[1])
    result, C = _output(out, b, shape, b.dtype, A)

    if algo.backend == "cpu":
        (B32,) = _cpu_operands(b.dtype, b.array)
        direct = C is not None and C.dtype == B32.dtype  # the CPU kernel writes out itself
        C = _cpu_result(algo.run(_host_csr(A, b.dtype, "B"), B32, reduce, out=C if direct else None), b.dtype, C)
        return arrays.host_result(b, C) if result is None else result

    dev = _device_csr(A, b.dtype, "B")
    if b.on_device:
        with record(b.array, C):
            run(dev, b.array, C, reduce, stream=arrays.stream_of(b))
        return result
    (B_dev,), C_dev = _to_device(b.array), _device_empty(shape, b.dtype if C is None else C.dtype.newbyteorder("="))
    run(dev, B_dev, C_dev, reduce)
    C = _download(C_dev, b.dtype, C)
    return arrays.host_result(b, C) if result is None else result


def sddmm(A, X, Y, *, algorithm="auto", backend="auto"):
    """Sampled dense-dense product: ``a_ij * <X[i], Y[j]>`` for each stored entry (i, j) of A.

    A: scipy.sparse matrix/array or :class:`CSR`, shape (M, N).
    X: (M, K) and Y: (N, K), of one value dtype, both NumPy arrays or both CUDA arrays.

    Returns, for NumPy X/Y, a scipy.sparse.csr_matrix with A's canonical sparsity pattern
    (sorted indices, duplicates summed); for CUDA X/Y, a 1-D array of X's framework holding
    the nnz values in the order of ``CSR.from_scipy(A)``.  Repeated calls on torch tensors
    are replayed as :func:`spmm`'s are.
    """
    return replay.call(A, ("sddmm", algorithm, backend), (X, Y), None, _sddmm_outputs, _sddmm,
                       (A, X, Y, algorithm, backend))


def _sddmm_outputs(A, X, Y):
    return (X.new_empty(A.nnz),)


def _sddmm(A, X, Y, algorithm, backend, record):
    A = sparse_operand(A)
    x, y = _operands(("X", X), ("Y", Y))
    m, n = A.shape
    if x.shape[0] != m or y.shape[0] != n:
        raise ValueError(f"A is {m}x{n}, so X must have {m} rows and Y {n} rows; got X {x.shape}, Y {y.shape}")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"X and Y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
    with _on_operands_gpu(A, x, y):
        return _sddmm_checked(A, x, y, algorithm, backend, record)


def _sddmm_checked(A, x, y, algorithm, backend, record):
    algo = dispatch.resolve("sddmm", algorithm, backend, x.on_device, x.shape[1], dtype=x.dtype)

    if algo.backend == "cpu":
        host = _host_csr(A, x.dtype, "X")
        values = _cpu_result(algo.run(host, *_cpu_operands(x.dtype, x.array, y.array)), x.dtype)
        return _scipy_result(values, host)

    dev = _device_csr(A, x.dtype, "X")
    if x.on_device:
        result, values = arrays.empty_like_framework(x, (dev.nnz,), x.dtype)
        with record(x.array, y.array, values):
            algo.run(dev, x.array, y.array, values, stream=arrays.stream_of(x))
        return result
    values = _device_empty((dev.nnz,), x.dtype)
    algo.run(dev, *_to_device(x.array, y.array), values)
    return _scipy_result(_download(values, x.dtype), dev._host)


def _scipy_result(values, host):
    """SDDMM's values on the host as a scipy CSR of A's pattern (float32 for 16-bit values: scipy
    holds no 16-bit floats; the values are those of the operands' dtype)."""
    return sp.csr_matrix((values.astype(compute_dtype(values.dtype), copy=False), host.indices.copy(),
                          host.indptr.copy()), shape=host.shape)


def spmm_dense(A, X, W, *, fused="auto", backend="auto", precision="ieee"):
    """A GCN layer's aggregation and update, ``(A @ X) @ W`` (sum aggregation).

    A: scipy.sparse matrix/array or :class:`CSR`, shape (M, K).
    X: (K, F_in) and W: (F_in, F_out), of one value dtype, both NumPy or both CUDA arrays.
    fused: "auto" (default) or False: :func:`spmm` and a matmul, the matmul first (``A @ (X @
        W)``) where W has fewer columns than rows, so that the SpMM gathers the narrower rows
        (:func:`numbasparse.dispatch.matmul_first`); the matmul is the operands' framework's
        (cuBLAS through torch or CuPy, with torch's TF32 setting; NumPy's on the host) and its
        16-bit intermediate is rounded once more.  True: one CUDA kernel that aggregates each
        16-row window of ``A @ X`` into shared memory on HC-SpMM's path for that window and
        multiplies it by W there (paper 001, section V-A), slower than the unfused path in every
        case measured (BENCHMARKS.md, "HC-SpMM and the fused GCN layer"); "auto" runs it only for
        Numba and other CUDA-array-interface arrays, for which there is no matmul to call.
    backend: "auto", "cuda" or "cpu", as in :func:`spmm`.
    precision: "ieee" or, with ``fused=True`` and float32 operands, "tf32": the fused kernel's
        product with W on the tensor cores with TF32 inputs (relative errors of about 3e-4
        measured; sm_80 and later).  16-bit operands with "ieee" take that product on the tensor
        cores on sm_80 and later (the aggregated rows rounded to 16 bits once more, as the
        unfused path rounds its intermediate).

    Returns (M, F_out) of X's dtype and kind.  A repeated unfused call on torch tensors of one
    signature skips its own validation (:func:`numbasparse.replay.composite`), and its
    :func:`spmm` is replayed.
    """
    key, unfused = replay.composite(A, ("spmm_dense", fused, type(fused), backend, precision), (X, W))
    if unfused is not None:
        return unfused(A, X, W)
    dispatch.check_fused(fused)
    A = sparse_operand(A)
    x, w = _operands(("X", X), ("W", W))
    m, k = A.shape
    if x.shape[0] != k:
        raise ValueError(f"A has {k} columns but X has {x.shape[0]} rows (A is {m}x{k}, X is {x.shape})")
    if w.shape[0] != x.shape[1]:
        raise ValueError(f"X has {x.shape[1]} columns but W has {w.shape[0]} rows (W is {w.shape})")
    with _on_operands_gpu(A, x, w):
        return _spmm_dense_checked(A, x, w, fused, backend, key, precision)


def _spmm_dense_checked(A, x, w, fused, backend, key, precision):
    shape = (A.shape[0], w.shape[1])
    first = dispatch.matmul_first(x.shape[1], w.shape[1])
    algo = dispatch.resolve("spmm", "auto", backend, x.on_device, x.shape[1], dtype=x.dtype)
    dispatch.check_gcn_precision(precision, fused, x.dtype, algo.backend)
    if algo.backend == "cpu":
        x32, w32 = _cpu_operands(x.dtype, x.array, w.array)
        host = _host_csr(A, x.dtype, "X")
        Z = algo.run(host, x32 @ w32, "sum") if first else algo.run(host, x32, "sum") @ w32
        return arrays.host_result(x, _cpu_result(Z, x.dtype))

    dev = _device_csr(A, x.dtype, "X")
    matmul = arrays.device_matmul(x) if x.on_device else _host_matmul(x.dtype)
    if not dispatch.gcn_fuses(fused, matmul is not None):
        if x.on_device:
            unfused = functools.partial(_spmm_dense_unfused, matmul, first)
            if key is not None and dev is A:  # (a key is a CUDA torch call's: A is a CSR)
                A.cache.put("replays", key, unfused)
            return unfused(dev, x.original, w.original)
        return arrays.host_result(x, _spmm_dense_unfused(matmul, first, dev, x.array, w.array))
    tensor_cores = precision == "tf32" or (is_half(x.dtype) and dispatch.has_sm80())
    if x.on_device:
        result, out = arrays.empty_like_framework(x, shape, x.dtype)
        hc.spmm_dense(dev, x.array, w.array, out, stream=arrays.stream_of(x), tensor_cores=tensor_cores)
        return result
    out = _device_empty(shape, x.dtype)
    hc.spmm_dense(dev, *_to_device(x.array, w.array), out, tensor_cores=tensor_cores)
    return arrays.host_result(x, _download(out, x.dtype))


def _spmm_dense_unfused(matmul, first, A, X, W):
    return spmm(A, matmul(X, W), backend="cuda") if first else matmul(spmm(A, X, backend="cuda"), W)


def _host_matmul(dtype):
    """NumPy's matmul for host operands of ``dtype`` (16-bit floats multiplied in float32, the
    product rounded to ``dtype``)."""
    def matmul(a, b):
        return _cpu_result(np.matmul(*_cpu_operands(dtype, a, b)), dtype)
    return matmul


def sddmm_spmm(A, X, Y, Z, *, fused="auto", backend="auto"):
    """``(A ⊙ (X Y^T)) Z``: SDDMM then SpMM with its result as the sparse matrix (CS267 report).

    A: scipy.sparse or :class:`CSR` (M, N); X: (M, K); Y: (N, K); Z: (N, F); of one value dtype,
    all NumPy or all CUDA arrays.  fused: True for the fused CUDA kernel (a warp per run of a
    row's entries; a second kernel merges the runs of long rows; scores never stored), False for HP-SDDMM then
    HP-SpMM, "auto" (default) for the fused kernel where the output takes one pass and its GPU time is
    predicted below the unfused path's cost beyond its kernels (on repeated torch calls, which
    are replayed: graphs of at most 150k entries), and always for float16
    (:func:`numbasparse.dispatch.fuse_pays`).  Returns (M, F) of X's dtype and kind.  Repeated
    calls on torch tensors are replayed as :func:`spmm`'s are (the unfused path's with new
    intermediates).
    """
    return _scores_times(A, X, Y, Z, ("X", "Y", "Z"), softmax=False, fused=fused, backend=backend)


def graph_attention(A, Q, K, V, *, fused="auto", backend="auto"):
    """Attention over a graph's edges, ``softmax_row(A ⊙ (Q K^T)) V``: for each row i,
    ``sum_j w_ij V[j]`` with ``w_ij = softmax over the stored j of a_ij <Q[i], K[j]>`` (the
    GAT pattern SDDMM -> edge softmax -> SpMM).  Rows with no stored entry give 0.

    A: scipy.sparse or :class:`CSR` (M, N); Q: (M, D); K: (N, D); V: (N, F).  fused: True for one
    CUDA kernel with an online softmax, False for HP-SDDMM, an edge-softmax kernel and HP-SpMM,
    "auto" (default) as in :func:`sddmm_spmm`; repeated calls are replayed, as there.
    """
    return _scores_times(A, Q, K, V, ("Q", "K", "V"), softmax=True, fused=fused, backend=backend)


def _scores_times(A, X, Y, Z, names, *, softmax, fused, backend):
    options = ("attention" if softmax else "sddmm_spmm", fused, type(fused), backend)  # (True and 1 differ)
    return replay.call(A, options, (X, Y, Z), None, _scores_times_outputs, _scores_times_call,
                       (A, X, Y, Z, names, softmax, fused, backend))


def _scores_times_outputs(A, X, Y, Z):
    return (X.new_empty(A.shape[0], Z.shape[1]),)


def _scores_times_call(A, X, Y, Z, names, softmax, fused, backend, record):
    A = sparse_operand(A)
    dispatch.check_fused(fused)
    x, y, z = _operands(*zip(names, (X, Y, Z)))
    m, n = A.shape
    if x.shape[0] != m or y.shape[0] != n or z.shape[0] != n:
        raise ValueError(f"A is {m}x{n}, so {names[0]} must have {m} rows and {names[1]}, {names[2]} {n} "
                         f"rows; got {x.shape}, {y.shape}, {z.shape}")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"{names[0]} and {names[1]} must have the same number of columns, "
                         f"got {x.shape[1]} and {y.shape[1]}")
    with _on_operands_gpu(A, x, y, z):
        return _scores_times_checked(A, x, y, z, names, softmax, fused, backend, record)


def _scores_times_checked(A, x, y, z, names, softmax, fused, backend, record):
    algo = dispatch.resolve("sddmm", "auto", backend, x.on_device, x.shape[1], dtype=x.dtype)
    shape = (A.shape[0], z.shape[1])
    if algo.backend == "cpu":
        from . import cpu

        host = _host_csr(A, x.dtype, names[0])
        run = cpu.attention_rows if softmax else cpu.sddmm_spmm_rows
        return arrays.host_result(x, _cpu_result(run(host, *_cpu_operands(x.dtype, x.array, y.array, z.array)),
                                                 x.dtype))

    dev = _device_csr(A, x.dtype, names[0])
    if x.on_device:
        result, out = arrays.empty_like_framework(x, shape, x.dtype)
        # (the unfused path's intermediates: declared to the recording, a replay allocates them anew)
        with record(x.array, y.array, z.array, out):
            dispatch.sddmm_then_spmm(dev, x.array, y.array, z.array, out, softmax=softmax, fuse=fused,
                                     stream=arrays.stream_of(x), like=x, replayed=record.replays)
        return result
    out = _device_empty(shape, x.dtype)
    dispatch.sddmm_then_spmm(dev, *_to_device(x.array, y.array, z.array), out, softmax=softmax, fuse=fused)
    return arrays.host_result(x, _download(out, x.dtype))


def algorithms(op):
    """Names that ``algorithm=`` accepts for ``op`` ("spmm" or "sddmm")."""
    return dispatch.algorithms(op)
