"""``prepare()``: upload and reorder a graph once, then run SpMM/SDDMM in the caller's node order
(or, with ``node_order="plan"``, in the plan's)."""
import functools
import time

import numpy as np
from ._compat import scipy_sparse as sp

from . import api, arrays, dispatch
from .cuda.device import gpu_present
from .csr import CSR, canonical_csr
from .dtypes import check_value_dtype

REORDERINGS = (None, "auto", "louvain", "loa", "bfs", "rcm", "degree")
#: Whose node order a plan's operands and results are in (see :func:`prepare`).
NODE_ORDERS = ("caller", "plan")


def _permutation(host, reorder, reorder_args):
    """``perm[new] = old`` for ``reorder`` (a fixed method) of canonical scipy CSR ``host``."""
    if reorder == "louvain":
        from .reorder import cluster_order

        return cluster_order(host, **reorder_args)
    if reorder == "loa":
        from .reorder import loa

        return loa(host, **reorder_args)
    from .reorder.order import LOCALITY_ORDERS

    if reorder_args:
        raise TypeError(f"reorder={reorder!r} takes no arguments, got {sorted(reorder_args)}")
    return LOCALITY_ORDERS[reorder](host)


class _Ordered:
    """The graph in one node order: the matrix the kernels see (device CSR or host scipy), and
    the index maps between that order and the caller's (``perm`` None: the caller's own)."""

    def __init__(self, host, perm, backend, dtype, reordered=None):
        """``reordered``: ``host`` permuted by ``perm`` (:meth:`Plan._permuter`: a host scipy
        copy or a device CSR), made by the caller (who times it)."""
        self.perm = perm
        if perm is not None:
            self.inverse = np.empty_like(perm)
            self.inverse[perm] = np.arange(perm.size)
            self.canonical, host = host, reordered
        self.A = CSR._of_canonical(host, dtype=dtype) if backend == "cuda" and not isinstance(host, CSR) else host
        self._by_dtype = {}

    @functools.cached_property
    def entry_order(self):
        """Entry p of the permuted CSR is entry ``entry_order[p]`` of the canonical one (made at
        the first call that needs it: an SDDMM in the caller's order)."""
        from .reorder.order import entry_order

        return entry_order(self.canonical, self.perm)

    @functools.cached_property
    def entry_inverse(self):
        """Where each entry of the canonical CSR sits in the permuted one."""
        inverse = np.empty_like(self.entry_order)
        inverse[self.entry_order] = np.arange(self.entry_order.size)
        return inverse

    def matrix(self, dtype):
        """The matrix the kernels see with values of ``dtype``: the dense operands decide, as in
        :func:`numbasparse.spmm` (a device copy per dtype, converted from the plan's values once;
        the CPU backend converts a host matrix itself)."""
        if not isinstance(self.A, CSR) or self.A.dtype == dtype:
            return self.A
        if dtype not in self._by_dtype:
            self._by_dtype[dtype] = self.A.astype(dtype)
        return self._by_dtype[dtype]

    def _index(self, name, op):
        """The permutation as an array where ``op`` lives (on the device: uploaded once, kept in
        the device matrix's cache)."""
        values = {"perm": self.perm, "inverse": self.inverse, "entries": self.entry_inverse}[name]
        if not op.on_device:
            return values
        if not isinstance(self.A, CSR):
            raise TypeError(f"{op.name} is a CUDA array but the plan runs on the CPU backend: pass a host array "
                            f"(or prepare the plan with backend='cuda')")
        from numba import cuda

        return self.A.cache.get_or_build("plans", ("plan_index", name), lambda: cuda.to_device(values))

    def gather(self, op, name, shape):
        """Rows of ``op`` taken in the order of index ``name`` (a new array of op's kind)."""
        index = self._index(name, op)
        if not op.on_device:
            return arrays.host_result(op, op.array[index])
        from .cuda.gather import gather

        result, view = arrays.empty_like_framework(op, shape, op.dtype)
        gather(op.array, index, view, stream=arrays.stream_of(op))
        return result


class Plan:
    """A graph ready for repeated products (see :func:`prepare`).

    ``perm[new] = old`` is the node order the kernels see (None: the caller's).  With
    ``node_order="caller"`` inputs are permuted on the way in and results back on the way out, so
    callers never see it; with ``node_order="plan"`` operands and results are in that order
    (:meth:`to_plan_order`, :meth:`to_caller_order` convert once).
    ``preprocess_seconds`` is the whole preparation time, ``reorder_seconds`` the part spent
    computing permutations and permuting the matrix by them (with ``reorder="auto"``, also
    predicting their effect): what a reordering must win back.  With
    ``reorder="auto"``, ``decisions`` maps each width N called so far (with ``node_order="plan"``,
    the one ``n_cols`` decided for in :func:`prepare`) to the record of
    :func:`numbasparse.reorder.locality.choose_order` (the method taken, or None, and why), and
    ``perm`` and ``A`` are those of the order taken last.
    """

    def __init__(self, A, reorder, algorithm, backend, dtype, index_dtype, node_order, n_cols, reorder_args):
        start = time.perf_counter()
        if reorder not in REORDERINGS:
            raise ValueError(f"reorder must be one of {REORDERINGS}, got {reorder!r}")
        if reorder in (None, "auto") and reorder_args:
            raise TypeError(f"reorder={reorder!r} takes no arguments, got {sorted(reorder_args)} (prepare's own "
                            f"arguments are reorder, algorithm, backend, dtype, index_dtype, node_order and n_cols)")
        if node_order not in NODE_ORDERS:
            raise ValueError(f"node_order must be one of {NODE_ORDERS}, got {node_order!r}")
        decide_now = reorder == "auto" and node_order == "plan"
        if (n_cols is not None) != decide_now:
            raise ValueError("n_cols is the width that reorder='auto' decides for once, with node_order='plan' (the "
                             f"caller's features take one order for every call): give it there and only there, "
                             f"got n_cols={n_cols!r} with reorder={reorder!r}, node_order={node_order!r}")
        if decide_now and (isinstance(n_cols, bool) or not isinstance(n_cols, (int, np.integer)) or n_cols < 1):
            raise ValueError(f"n_cols must be a positive integer, got {n_cols!r}")
        dispatch.check_option("algorithm", algorithm,
                              ("auto",) + tuple(dict.fromkeys(dispatch.algorithms("spmm") + dispatch.algorithms("sddmm"))))
        host = canonical_csr(A, dtype=dtype, index_dtype=index_dtype)
        if reorder is not None and host.shape[0] != host.shape[1]:
            raise ValueError(f"reorder needs a square graph, A is {host.shape[0]}x{host.shape[1]}")
        if backend not in dispatch.BACKENDS:
            raise ValueError(f"backend must be one of {dispatch.BACKENDS}, got {backend!r}")
        if backend == "auto":
            backend = "cuda" if gpu_present() else "cpu"
        self.shape, self.nnz, self.backend, self.algorithm = host.shape, host.nnz, backend, algorithm
        self.reorder, self.decisions, self._host, self._dtype = reorder, {}, host, dtype
        self.node_order = node_order
        self._computed = {}  # "auto": the orders computed so far (reorder.locality.choose_order's ``computed``)
        perm = reordered = None
        if reorder not in (None, "auto"):
            from .reorder.order import compile_reordering

            compile_reordering(host)
            permute = self._permuter(host, backend, dtype)
            t0 = time.perf_counter()
            perm = _permutation(host, reorder, reorder_args)
            reordered = permute(host, perm)
            self.reorder_seconds = time.perf_counter() - t0
        else:
            self.reorder_seconds = 0.0
        self._orders = {None: _Ordered(host, perm, backend, dtype, reordered)}  # "auto" adds the orders it takes
        self._fixed = self._orders[None]
        if decide_now:  # one order for every call, chosen before the caller permutes its features
            itemsize = check_value_dtype(host.dtype if dtype is None else dtype, "dtype").itemsize
            self._fixed = self._decide(int(n_cols), itemsize)
        self.perm = self._fixed.perm
        self.A = self._fixed.A
        self.preprocess_seconds = time.perf_counter() - start

    def __repr__(self):
        return (f"<numbasparse.Plan {self.shape[0]}x{self.shape[1]}, nnz={self.nnz}, reorder={self.reorder}, "
                f"backend={self.backend}, preprocess {self.preprocess_seconds * 1e3:.1f} ms>")

    @staticmethod
    def _permuter(host, backend, dtype, uploaded=None):
        """``permute(host, perm)``: the graph in a node order as the kernels see it.  On a GPU
        permuted there (from ``uploaded``, the canonical ``host`` there, else a new upload), as a
        device CSR: on the host the permutation took as long as computing the order.  Else a host
        scipy copy: on the CPU backend, for a graph with rows over ``cuda.permute.LONGEST_ROW``
        entries, and on the simulator (its thread per entry would take seconds:
        tests/cuda/test_permute.py runs the kernels there on tiny graphs)."""
        from .cuda.device import simulator_enabled
        from .reorder.order import permuted

        if backend != "cuda" or simulator_enabled():
            return permuted
        from .cuda.permute import LONGEST_ROW, compile_permutation, permuted_on_device

        if host.nnz and np.diff(host.indptr).max() > LONGEST_ROW:
            return permuted
        uploaded = CSR._of_canonical(host, dtype=dtype) if uploaded is None else uploaded
        compile_permutation(uploaded)
        return lambda host, perm: permuted_on_device(uploaded, perm)

    def _order_for(self, n_cols, itemsize, out=None):
        """The order the kernels use for width ``n_cols``: the fixed one, or ``auto``'s decision
        (made once per width; the graph's own order for a call with ``out``, which a reordered
        plan cannot write into in the caller's order)."""
        if self.reorder != "auto" or self.node_order == "plan" or out is not None:
            return self._fixed
        return self._decide(n_cols, itemsize)

    def _decide(self, n_cols, itemsize):
        """``auto``'s order for width ``n_cols`` (on the GPU only, where the mechanism was
        measured), decided once per width and recorded in ``decisions``."""
        if self.backend != "cuda" or self.nnz == 0:
            return self._fixed
        if n_cols not in self.decisions:
            from .cuda.device import memory_system
            from .reorder.locality import choose_order

            l2_bytes, bandwidth = memory_system()
            method, perm, record = choose_order(self._host, n_cols, itemsize, l2_bytes, bandwidth,
                                                computed=self._computed, permutes=self.node_order == "caller",
                                                permute=self._permuter(self._host, self.backend, self._dtype,
                                                                       self._orders[None].A))
            self.decisions[n_cols] = dict(record, method=method)
            self.reorder_seconds += record["model_seconds"] + sum(
                v["seconds"] for v in record.values() if isinstance(v, dict))
            if method is not None and method not in self._orders:
                self._orders[method] = _Ordered(self._host, perm, self.backend, self._dtype,
                                                self._computed[method][2])
        order = self._orders[self.decisions[n_cols]["method"]]
        self.perm, self.A = order.perm, order.A
        return order

    def to_plan_order(self, X):
        """The rows of ``X`` (one per node, in the caller's order) in the plan's node order,
        ``X[plan.perm]``, as an array of X's kind (``X`` itself without a reordering): convert
        features once for a ``node_order="plan"`` plan."""
        return self._permute_rows(X, "X", "perm")

    def to_caller_order(self, C):
        """The rows of ``C`` (one per node, in the plan's order) back in the caller's order."""
        return self._permute_rows(C, "C", "inverse")

    def _on_its_gpu(self, *ops):
        """The plan's GPU (current at :func:`prepare`) made current for a call, its device operands
        ``ops`` checked against it (:func:`numbasparse.cuda.device.on_gpu_of`): the permutations are
        uploaded and gathered there."""
        return api._on_operands_gpu(self._orders[None].A, *ops)

    def _permute_rows(self, X, name, index):
        if self.node_order != "plan":
            raise ValueError("to_plan_order and to_caller_order are for plans with node_order='plan' (a "
                             "node_order='caller' plan permutes operands itself on every call)")
        x = arrays.dense(X, name, 2)
        if self._fixed.perm is None:  # (a plan of the caller's order, square or not)
            if x.shape[0] not in self.shape:
                raise ValueError(f"{name} must have one row per row or column of the plan's matrix {self.shape}, "
                                 f"got shape {x.shape}")
            return X
        if x.shape[0] != self.shape[0]:
            raise ValueError(f"{name} must have one row per node ({self.shape[0]}), got shape {x.shape}")
        with self._on_its_gpu(x):
            return self._fixed.gather(x, index, x.shape)

    def spmm(self, B, *, reduce="sum", out=None):
        """``spmm(A, B)`` in the caller's node order (in the plan's, for ``node_order="plan"``)."""
        b = arrays.dense(B, "B", 2)
        if b.shape[0] != self.shape[1]:
            raise ValueError(f"A has {self.shape[1]} columns but B has {b.shape[0]} rows")
        with self._on_its_gpu(b):
            return self._spmm(B, b, reduce, out)

    def _spmm(self, B, b, reduce, out):
        order = self._order_for(b.shape[1], b.dtype.itemsize, out)
        A = order.matrix(b.dtype)
        if order.perm is None or self.node_order == "plan":
            return api.spmm(A, B, reduce=reduce, algorithm=self.algorithm, backend=self.backend, out=out)
        if out is not None:
            raise ValueError("out is not supported on a reordered plan")
        C = api.spmm(A, order.gather(b, "perm", b.shape), reduce=reduce, algorithm=self.algorithm,
                     backend=self.backend)
        c = arrays.dense(C, "C", 2)
        return order.gather(c, "inverse", c.shape)

    def sddmm(self, X, Y):
        """``sddmm(A, X, Y)`` in the caller's node order (values in A's canonical order); for
        ``node_order="plan"``, X and Y in the plan's order and the values in ``plan.A``'s entry
        order."""
        x, y = arrays.dense(X, "X", 2), arrays.dense(Y, "Y", 2)
        arrays.same_place(x, y)
        if x.shape[0] != self.shape[0] or y.shape[0] != self.shape[1]:
            raise ValueError(f"A is {self.shape[0]}x{self.shape[1]}, so X must have {self.shape[0]} rows "
                             f"and Y {self.shape[1]}; got X {x.shape}, Y {y.shape}")
        with self._on_its_gpu(x, y):
            return self._sddmm(X, Y, x, y)

    def _sddmm(self, X, Y, x, y):
        order = self._order_for(y.shape[1], y.dtype.itemsize)
        A = order.matrix(x.dtype)
        if order.perm is None or self.node_order == "plan":
            return api.sddmm(A, X, Y, algorithm=self.algorithm, backend=self.backend)
        values = api.sddmm(A, order.gather(x, "perm", x.shape), order.gather(y, "perm", y.shape),
                           algorithm=self.algorithm, backend=self.backend)
        if sp.issparse(values):
            ordered = np.empty_like(values.data)
            ordered[order.entry_order] = values.data
            host = order.canonical
            return sp.csr_matrix((ordered, host.indices.copy(), host.indptr.copy()), shape=host.shape)
        v = arrays.dense(values, "values", 1)
        return order.gather(v, "entries", v.shape)


def prepare(A, *, reorder=None, algorithm="auto", backend="auto", dtype=None, index_dtype=None, node_order="caller",
            n_cols=None, **reorder_args):
    """Upload ``A`` once (and reorder it) for repeated ``plan.spmm(B)`` / ``plan.sddmm(X, Y)``.

    reorder: None, "louvain" (HP-SpMM's graph-clustering order, :func:`reorder.cluster_order`),
        "loa" (HC-SpMM's layout reorganization, :func:`reorder.loa`), "bfs", "rcm" or "degree"
        (cheap locality orders: :func:`reorder.bfs_order`, :func:`reorder.rcm_order`,
        :func:`reorder.degree_order`; graphs of fewer than 2**31 nodes); extra keyword
        arguments go to louvain/loa (``seed``, ``resolution``, ``window``, ``vertex_window``).
        "auto": on the GPU, per width N at its first call, the cheap order whose predicted saving
        of DRAM traffic (B rows fetched again once B outgrows L2) net of the per-call
        permutations wins back its computing time within ``reorder.locality.PAYBACK_CALLS``
        calls, else the graph's own order (:func:`numbasparse.reorder.locality.choose_order`;
        ``plan.decisions`` records each decision and why).
    node_order: "caller" (default): ``plan.spmm`` / ``plan.sddmm`` take and return arrays in the
        caller's node order, permuting B in and C out on every call (which can cost more than a
        reordering saves); "plan": they are in the plan's order (``plan.perm``), into which the
        caller converts its features once (``plan.to_plan_order(X)``, back with
        ``plan.to_caller_order(C)``), so a reordering costs nothing per call.  ``reorder="auto"``
        then decides once, here, for width ``n_cols`` (required with it, refused otherwise).
    """
    return Plan(A, reorder, algorithm, backend, dtype, index_dtype, node_order, n_cols, reorder_args)
