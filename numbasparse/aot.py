"""Ahead-of-time compilation: the common kernel configurations compiled into the on-disk cache.

``numbasparse.precompile()`` or ``python -m numbasparse compile [--dtypes ...] [--n ...]``, once per
image or CI cache, on a machine with the GPU (or at least the compute capability) the kernels will
run on: every later process loads these kernels instead of compiling them (:mod:`numbasparse.disk`).

Which kernel ``auto`` runs depends on N, the dtypes and the graph (row lengths, hub rows, density),
so the configurations are reached the way a user reaches them: by calling the public functions on
four small synthetic graphs whose shapes lead ``auto`` to each of its kernel variants: short rows
(HP, one launch), short rows with one hub row (HP's two-launch mode), power-law rows (HP with
deeper gathers; at some widths the column slab), dense rows (column slab, N >= 32).  A kernel
family whose rules pick among variants by traits no small graph is sure to have (HP's gather
depth and launch mode) launches those itself, once per dtype and width (``precompile_variants``).
"""
import sys
import time

import numpy as np

from .dtypes import check_value_dtype

#: What ``precompile()`` covers by default: the widths and dtypes of most GNN layers.
DEFAULT_DTYPES = ("float32",)
DEFAULT_N = (32, 64, 128, 256)
DEFAULT_INDEX_DTYPES = ("int32",)
REDUCTIONS = ("sum", "mean", "max", "min")


def _graphs():
    """Small graphs that reach every variant ``auto`` picks among (see the module docstring)."""
    import scipy.sparse as sp

    from . import graphs

    rng = np.random.default_rng(0)
    short = sp.random(4096, 4096, density=4 / 4096, format="csr", random_state=rng)
    star = short.tolil()
    star[0, :] = 1.0  # short rows and one hub row spanning many blocks
    hubs = graphs.rmat(13, 16)
    dense = sp.random(2048, 2048, density=0.04, format="csr", random_state=rng)
    return {"short rows": short, "short rows, one hub": star.tocsr(), "power-law rows": hubs, "dense rows": dense}


def precompile(dtypes=DEFAULT_DTYPES, n=DEFAULT_N, index_dtypes=DEFAULT_INDEX_DTYPES, progress=True):
    """Compile (or find on disk) every kernel that ``spmm`` (sum, mean, max, min), ``sddmm``,
    ``sddmm_spmm`` and ``graph_attention`` (both paths of ``fused="auto"``) run for ``dtypes`` x
    ``n`` x ``index_dtypes``, and the permutation of a reordered plan (``prepare``), and store
    them in the on-disk cache.  Needs a GPU.  Returns
    {"loaded", "stored", "missed", "seconds"}: kernels found on disk, compiled and stored, and
    compiled without an intact file to replace."""
    from numba import cuda

    from . import api, arrays, csr, dispatch
    from .cuda import hp, launch, permute, slab
    from .dtypes import is_half
    from .cuda.device import gpu_present, simulator_enabled
    from .disk import cache_dir

    if simulator_enabled() or not gpu_present():
        raise RuntimeError("precompile needs a CUDA GPU (the simulator compiles nothing to keep); none was found")
    if cache_dir() is None:
        raise ValueError("the on-disk cache is off (NUMBASPARSE_CACHE=off): nothing would be kept")
    dtypes = [check_value_dtype(d, "dtypes") for d in dtypes]  # "float16", "bfloat16" too
    index_dtypes = [np.dtype(d) for d in index_dtypes]
    n = [int(k) for k in n]
    if not n or min(n) < 1:
        raise ValueError(f"n must be column counts of at least 1, got {n}")
    graphs = _graphs()
    first = next(iter(graphs))
    steps = [(d, i, k, name) for d in dtypes for i in index_dtypes for k in n for name in graphs]
    before = dict(launch.kernel_file_counts)
    start = time.perf_counter()
    rng = np.random.default_rng(1)
    for done, (dtype, index_dtype, k, name) in enumerate(steps, 1):
        if progress:
            _bar(done - 1, len(steps), f"{dtype.name}/{index_dtype.name} N={k} {name}")
        A = csr.CSR.from_scipy(graphs[name], dtype=dtype, index_dtype=index_dtype)
        B = arrays.to_device(rng.standard_normal((A.shape[1], k)).astype(dtype))
        X = arrays.to_device(rng.standard_normal((A.shape[0], k)).astype(dtype))
        for reduce in REDUCTIONS:
            api.spmm(A, B, reduce=reduce)
            if name == first:  # the variants HP's rules may pick on graphs unlike these
                hp.precompile_variants(A, *_kernel_operands(A, B, X), reduce)
            if name == "dense rows" and is_half(dtype) and k <= dispatch.SLAB_MAX_COLUMNS_HALF:
                # auto's 16-bit column slab, which it takes on larger graphs than this one
                slab.spmm_slab(A, *_kernel_operands(A, B), cuda.device_array((A.shape[0], k), np.uint16), reduce)
        api.sddmm(A, X, B)
        if A.shape[0] == A.shape[1]:
            for fuse in (True, False):  # fused="auto" takes either by the graph (dispatch.fuse_pays)
                api.graph_attention(A, X, X, X, fused=fuse)
                api.sddmm_spmm(A, X, X, X, fused=fuse)
            if k == n[0]:  # a reordered plan's permutation on the GPU (prepare(reorder=...))
                permute.compile_permutation(A)
    cuda.synchronize()
    if progress:
        _bar(len(steps), len(steps), "done")
        sys.stderr.write("\n")
    counts = {key: launch.kernel_file_counts[key] - before[key] for key in before}
    return dict(counts, seconds=round(time.perf_counter() - start, 1))


def _kernel_operands(A, *arrays):
    """``arrays`` as the kernels of A's dtype take them: 16-bit floats as their bits."""
    from .dtypes import is_half

    return tuple(a.view(np.uint16) for a in arrays) if is_half(A.dtype) else arrays


def _bar(done, total, what, width=30):
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what:<40}")
    sys.stderr.flush()
