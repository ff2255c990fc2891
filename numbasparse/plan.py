"""``prepare()``: upload and reorder a graph once, then run SpMM/SDDMM in the caller's node order."""
import time

import numpy as np
from ._compat import scipy_sparse as sp

from . import api, arrays, dispatch
from .cuda.device import gpu_present
from .csr import CSR, canonical_csr

REORDERINGS = (None, "louvain", "loa", "rcm", "degree")


class Plan:
    """A graph ready for repeated products (see :func:`prepare`).

    ``perm[new] = old`` is the node order the kernels see; inputs are permuted on the way in
    and results back on the way out, so callers never see it.  ``preprocess_seconds`` is the
    whole preparation time, ``reorder_seconds`` the part spent computing the permutation.
    """

    def __init__(self, A, reorder, algorithm, backend, dtype, index_dtype, reorder_args):
        start = time.perf_counter()
        if reorder not in REORDERINGS:
            raise ValueError(f"reorder must be one of {REORDERINGS}, got {reorder!r}")
        host = canonical_csr(A, dtype=dtype, index_dtype=index_dtype)
        if reorder is not None and host.shape[0] != host.shape[1]:
            raise ValueError(f"reorder needs a square graph, A is {host.shape[0]}x{host.shape[1]}")
        if backend not in dispatch.BACKENDS:
            raise ValueError(f"backend must be one of {dispatch.BACKENDS}, got {backend!r}")
        if backend == "auto":
            backend = "cuda" if gpu_present() else "cpu"
        self.shape, self.nnz, self.backend, self.algorithm = host.shape, host.nnz, backend, algorithm
        self.reorder = reorder
        t0 = time.perf_counter()
        if reorder == "louvain":
            from .reorder import cluster_order

            perm = cluster_order(host, **reorder_args)
        elif reorder == "loa":
            from .reorder import loa

            perm = loa(host, **reorder_args)
        elif reorder in ("rcm", "degree"):
            from .reorder import degree_order, rcm_order

            if reorder_args:
                raise TypeError(f"reorder={reorder!r} takes no arguments, got {sorted(reorder_args)}")
            perm = (rcm_order if reorder == "rcm" else degree_order)(host)
        else:
            perm = None
        self.reorder_seconds = time.perf_counter() - t0
        self.perm = perm
        if perm is None:
            self._host = host
            self._entry_order = None
        else:
            self.inverse = np.empty_like(perm)
            self.inverse[perm] = np.arange(perm.size)
            # Entry p of the permuted CSR is entry _entry_order[p] of the canonical one.
            numbered = sp.csr_matrix((np.arange(host.nnz, dtype=np.float64), host.indices, host.indptr),
                                     shape=host.shape)
            numbered = numbered[perm][:, perm].tocsr()
            numbered.sort_indices()
            self._entry_order = numbered.data.astype(np.int64)
            self._entry_inverse = np.argsort(self._entry_order).astype(np.int64)
            self._host = sp.csr_matrix((host.data[self._entry_order], numbered.indices.astype(host.indices.dtype),
                                        numbered.indptr.astype(host.indptr.dtype)), shape=host.shape)
            self._canonical = host
        self.A = CSR(self._host, dtype=dtype) if backend == "cuda" else self._host
        self.preprocess_seconds = time.perf_counter() - start

    def __repr__(self):
        return (f"<numbasparse.Plan {self.shape[0]}x{self.shape[1]}, nnz={self.nnz}, reorder={self.reorder}, "
                f"backend={self.backend}, preprocess {self.preprocess_seconds * 1e3:.1f} ms>")

    def _index(self, name, op):
        """The permutation as an array where ``op`` lives (on the device: uploaded once, kept in
        the device matrix's cache)."""
        values = {"perm": self.perm, "inverse": self.inverse, "entries": self._entry_inverse}[name]
        if not op.on_device:
            return values
        from numba import cuda

        return self.A.cache.get_or_build("plans", ("plan_index", name), lambda: cuda.to_device(values))

    def _gather(self, op, name, shape):
        """Rows of ``op`` taken in the order of index ``name`` (a new array of op's kind)."""
        index = self._index(name, op)
        if not op.on_device:
            return arrays.host_result(op, op.array[index])
        from .cuda.gather import gather

        result, view = arrays.empty_like_framework(op, shape, op.dtype)
        gather(op.array, index, view, stream=arrays.stream_of(op))
        return result

    def spmm(self, B, *, reduce="sum", out=None):
        """``spmm(A, B)`` in the caller's node order."""
        if self.perm is None:
            return api.spmm(self.A, B, reduce=reduce, algorithm=self.algorithm, backend=self.backend, out=out)
        if out is not None:
            raise ValueError("out is not supported on a reordered plan")
        b = arrays.dense(B, "B", 2)
        if b.shape[0] != self.shape[1]:
            raise ValueError(f"A has {self.shape[1]} columns but B has {b.shape[0]} rows")
        C = api.spmm(self.A, self._gather(b, "perm", b.shape), reduce=reduce, algorithm=self.algorithm,
                     backend=self.backend)
        c = arrays.dense(C, "C", 2)
        return self._gather(c, "inverse", c.shape)

    def sddmm(self, X, Y):
        """``sddmm(A, X, Y)`` in the caller's node order (values in A's canonical order)."""
        if self.perm is None:
            return api.sddmm(self.A, X, Y, algorithm=self.algorithm, backend=self.backend)
        x, y = arrays.dense(X, "X", 2), arrays.dense(Y, "Y", 2)
        arrays.same_place(x, y)
        if x.shape[0] != self.shape[0] or y.shape[0] != self.shape[1]:
            raise ValueError(f"A is {self.shape[0]}x{self.shape[1]}, so X must have {self.shape[0]} rows "
                             f"and Y {self.shape[1]}; got X {x.shape}, Y {y.shape}")
        values = api.sddmm(self.A, self._gather(x, "perm", x.shape), self._gather(y, "perm", y.shape),
                           algorithm=self.algorithm, backend=self.backend)
        if sp.issparse(values):
            ordered = np.empty_like(values.data)
            ordered[self._entry_order] = values.data
            host = self._canonical
            return sp.csr_matrix((ordered, host.indices.copy(), host.indptr.copy()), shape=host.shape)
        v = arrays.dense(values, "values", 1)
        return self._gather(v, "entries", v.shape)


def prepare(A, *, reorder=None, algorithm="auto", backend="auto", dtype=None, index_dtype=None, **reorder_args):
    """Upload ``A`` once (and reorder it) for repeated ``plan.spmm(B)`` / ``plan.sddmm(X, Y)``.

    reorder: None, "louvain" (HP-SpMM's graph-clustering order, :func:`reorder.cluster_order`),
        "loa" (HC-SpMM's layout reorganization, :func:`reorder.loa`), "rcm" or "degree" (cheap
        locality orders: :func:`reorder.rcm_order`, :func:`reorder.degree_order`); extra keyword
        arguments go to louvain/loa (``seed``, ``resolution``, ``window``, ``vertex_window``).
    """
    return Plan(A, reorder, algorithm, backend, dtype, index_dtype, reorder_args)
