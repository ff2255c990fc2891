"""SpMM and SDDMM over the ranks of a ``torch.distributed`` process group, with autograd.

``import numbasparse.distributed as nsd``.  The graph's nodes are partitioned over the ranks
(:func:`partition`: contiguous row blocks balanced by nonzeros, or Louvain communities packed onto
ranks to cut the halo); each rank owns the rows of A and of the node features of its nodes.  Row i
of ``A @ X`` needs ``X[j]`` for every stored ``a_ij``: the owned rows are local, the others (the
rank's *halo*) belong to other ranks.  A :class:`DistGraph` holds a rank's rows of A with its
columns renumbered as [owned nodes, then halo nodes grouped by owner] and the exchange plan: which
of its owned rows each other rank needs, agreed once with ``all_to_all`` when it is built.
:func:`halo_exchange` then sends only those rows (one ``all_to_all_single``); its backward sends
the halo's gradients back to their owners, which add them.  Where the halo is large enough to pay
for it (:func:`pipeline_split`), :func:`spmm` (sum) and :func:`sddmm` do not wait for the halo:
they compute the owned columns' part while the halo's rows arrive (in one batch, or one source
rank after another) and add their column blocks as they come in; their backward sends the
halo's gradients back while the owned rows' gradients are computed.  The local products are
:mod:`numbasparse.torch`'s, so they differentiate in the features and the edge values, on the CPU
backend (gloo ranks, CPU tensors) or on the GPU kernels (NCCL ranks, one GPU each).

Every rank builds the DistGraph from the same whole graph (as PyG's and DGL's full-graph
trainers load it); the ranks check that they agree (same graph and partition) and that each built
its part before any exchange, so a mismatch or an error on one rank is an error on every rank, not a
hang.  (The operations check their operands' shapes on each rank: a rank that raises there leaves
the others waiting in the exchange, as any collective does, until torch.distributed's timeout.)  Parameters stay replicated: average or
sum their gradients as usual (``DistributedDataParallel`` or ``all_reduce``).
"""
import contextlib
import hashlib
import heapq
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from . import api, arrays, dispatch
from . import torch as nst
from ._compat import scipy_sparse as sp
from .csr import CSR, canonical_csr
from .cuda import device as gpus

METHODS = ("contiguous", "louvain")


@dataclass(frozen=True, eq=False)
class Partition:
    """Which rank owns each node: ``owner[i]`` in ``range(n_parts)``."""

    owner: np.ndarray
    n_parts: int

    def nodes(self, rank):
        """The nodes ``rank`` owns, ascending."""
        return np.flatnonzero(self.owner == rank)

    def fingerprint(self):
        return hashlib.sha256(self.n_parts.to_bytes(8, "little") + self.owner.astype(np.int64).tobytes()).digest()


def partition(A, n_parts, method="contiguous", *, seed=0):
    """Partition the nodes of the square sparse matrix ``A`` over ``n_parts`` ranks.

    ``"contiguous"``: rows ``[b_k, b_{k+1})`` to rank k, the boundaries balancing nonzeros plus one
    per row.  ``"louvain"``: the communities of :func:`numbasparse.reorder.louvain` (on the
    symmetrised pattern, ``seed``) packed onto ranks largest first, each onto the least loaded
    rank (same load measure), a community heavier than a rank's share cut into share-sized runs
    first: edges inside a community (or a run) never cross ranks, so the halo is smaller."""
    A = _square(A)
    if isinstance(n_parts, bool) or not isinstance(n_parts, (int, np.integer)) or n_parts < 1:
        raise ValueError(f"n_parts must be a positive integer, got {n_parts!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    load = np.diff(A.indptr).astype(np.float64) + 1.0
    if method == "contiguous":
        cumulative = np.cumsum(load)
        targets = cumulative[-1] * np.arange(1, n_parts) / n_parts if len(load) else np.zeros(n_parts - 1)
        bounds = np.concatenate([[0], np.searchsorted(cumulative, targets, side="right"), [A.shape[0]]])
        owner = np.repeat(np.arange(n_parts, dtype=np.int32), np.diff(bounds))
    else:
        from .reorder import louvain

        labels = louvain(A, seed=seed) if A.nnz else np.arange(A.shape[0])
        owner = _pack(labels, load, n_parts)
    return Partition(owner.astype(np.int32), int(n_parts))


def _pack(labels, load, n_parts):
    """Communities onto ranks, largest first, each onto the least loaded rank (LPT).  A community
    heavier than a rank's share is first cut into share-sized runs of its nodes (by id), so one
    giant community cannot leave the other ranks idle."""
    share = load.sum() / n_parts
    nodes_by_label = np.argsort(labels, kind="stable")
    ends = np.cumsum(np.bincount(labels))
    pieces = []  # (load, nodes)
    for nodes in np.split(nodes_by_label, ends[:-1]):
        weight = load[nodes].sum()
        if weight > share and len(nodes) > 1:
            cut = np.searchsorted(np.cumsum(load[nodes]), share * np.arange(1, int(np.ceil(weight / share))), "right")
            pieces += [(load[p].sum(), p) for p in np.split(nodes, cut) if len(p)]
        elif len(nodes):
            pieces.append((weight, nodes))
    owner = np.empty(len(load), dtype=np.int32)
    ranks = [(0.0, r) for r in range(n_parts)]
    for index in sorted(range(len(pieces)), key=lambda i: -pieces[i][0]):  # (stable: ties by label)
        used, r = heapq.heappop(ranks)
        owner[pieces[index][1]] = r
        heapq.heappush(ranks, (used + pieces[index][0], r))
    return owner


_make_partition = partition  # (DistGraph's argument of that name hides the function)


def _square(A):
    A = canonical_csr(A, dtype=np.float64)
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be square (its rows and columns are the same nodes), got {A.shape[0]}x{A.shape[1]}")
    return A


class DistGraph:
    """This rank's rows of a node-partitioned graph, and its halo exchange plan.

    ``DistGraph(A, partition=None, method="contiguous", group=None, device="cpu",
    dtype=torch.float32)``, called by every rank of ``group`` (default: the world) with the same
    ``A`` and partition (``partition=None``: :func:`partition` with ``method``).

    nodes: the global ids of the owned nodes (ascending); ``n_owned``, ``n_halo``.
    graph: a :class:`numbasparse.torch.Graph` of shape (n_owned, n_owned + n_halo).
    exchanges: False where no rank of the group has a halo (then no exchange ever runs).
    values: the local entries' values (a tensor, in ``graph``'s entry order);
    ``edges()``: their global (row, column) ids.
    pipeline: how :func:`spmm` and :func:`sddmm` overlap the exchange with the products: None
    (the rule, :func:`pipeline_split`), "sources", "halo" or "off"; set it alike on every rank.
    Pipelined calls differentiate once (no ``create_graph``: set "off" for higher derivatives).
    """

    def __init__(self, A, *, partition=None, method="contiguous", group=None, device="cpu", dtype=torch.float32):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("numbasparse.distributed needs an initialised process group: call "
                               "torch.distributed.init_process_group first (torchrun sets up its environment)")
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # "cuda" is the current GPU
            self.device = torch.device("cuda", torch.cuda.current_device())
        # gloo exchanges CPU tensors; NCCL exchanges CUDA tensors on this rank's GPU
        self._comm_device = torch.device("cpu") if dist.get_backend(group) == "gloo" else self.device
        # Everything local first; then every rank learns whether all succeeded and hold the same
        # graph (one all_gather), so an error on one rank is an error on every rank, not a hang.
        failure, local_of = None, None
        try:
            local_of = self._prepare(A, partition, method, dtype)
        except Exception as exc:  # noqa: BLE001 (raised on this rank after the agreement below)
            failure = exc
        self._agree(failure)

        # The plan: I receive my halo from its owners; each rank tells each owner which rows.
        self._recv_counts = np.bincount(self.partition.owner[self.halo], minlength=self.world).astype(np.int64)
        self._send_counts = self._all_to_all_counts(self._recv_counts)
        requested = self._all_to_all_rows(torch.as_tensor(self.halo, dtype=torch.int64), self._recv_counts,
                                           self._send_counts).cpu().numpy()
        send_local = local_of[requested]
        if len(send_local) and (send_local.min() < 0 or send_local.max() >= self.n_owned):
            raise RuntimeError("internal error: a rank asked for rows this rank does not own")
        self._send_index = torch.as_tensor(send_local, dtype=torch.int64, device=self.device)
        self._send_offsets = np.concatenate([[0], np.cumsum(self._send_counts)]).astype(np.int64)
        self._recv_offsets = np.concatenate([[0], np.cumsum(self._recv_counts)]).astype(np.int64)
        self._blocks, self._block_csrs = (None, {}), {}  # the pipeline's column blocks of one split, built on first use
        self._default_blocks = {}  # ... with dg.values, kept while they are unchanged
        self._pattern_blocks = {}  # ... with ones (the pattern alone), per dtype
        self.pipeline = None  # the pipeline's split of the halo: None (the rule), "sources", "halo" or "off"
        # Where no rank has a halo (one rank, or disconnected parts) the exchange is skipped on
        # every rank: appending an empty halo would copy X on each call for nothing.
        rows = torch.tensor([int(self._recv_counts.sum())], dtype=torch.int64, device=self._comm_device)
        largest = rows.clone()
        dist.all_reduce(rows, group=self.group)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=self.group)
        self.exchanges = bool(rows.item() > 0)
        self._max_halo = int(largest.item())  # (the same on every rank: spmm's pipeline rule reads it)

    def _prepare(self, A, partition, method, dtype):
        """This rank's part, computed locally: the checks, the partition, its rows with columns
        renumbered (owned nodes first, then the halo by (owner, id)) and their Graph.  Returns the
        map from global node to local column."""
        A = _square(A)
        part = _make_partition(A, self.world, method) if partition is None else partition
        _check_partition(part, A.shape[0])
        if part.n_parts != self.world:
            raise ValueError(f"partition is for {part.n_parts} ranks; the group has {self.world}")
        h = hashlib.sha256()
        for array in (np.asarray(A.shape), A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data):
            h.update(np.ascontiguousarray(array).tobytes())
        h.update(part.fingerprint())
        self._fingerprint = h.digest()
        self.partition = part
        self.nodes = part.nodes(self.rank)
        self.n_owned = len(self.nodes)
        self.shape = A.shape
        rows = A[self.nodes]
        cols = rows.indices
        local_of = np.full(A.shape[0], -1, dtype=np.int64)
        local_of[self.nodes] = np.arange(self.n_owned)
        halo = np.unique(cols[part.owner[cols] != self.rank])
        self.halo = halo[np.argsort(part.owner[halo], kind="stable")]
        self.n_halo = len(self.halo)
        local_of[self.halo] = self.n_owned + np.arange(self.n_halo)
        local = sp.csr_matrix((rows.data, local_of[cols], rows.indptr), shape=(self.n_owned, self.n_owned + self.n_halo))
        self.graph = nst.Graph(local, device=self.device, dtype=dtype)
        self.values = self.graph.values
        self._global_cols = np.concatenate([self.nodes, self.halo])
        return local_of

    # -- agreement and plan ------------------------------------------------------------------

    def _agree(self, failure):
        """One all_gather of (this rank's preparation succeeded, fingerprint of its graph and
        partition): raise on every rank if any rank failed or the ranks disagree."""
        ok = failure is None
        mine = torch.frombuffer(bytearray(bytes([ok]) + (self._fingerprint if ok else bytes(32))),
                                dtype=torch.uint8).to(self._comm_device)
        everyone = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(everyone, mine, group=self.group)
        if failure is not None:
            raise failure
        failed = [r for r, f in enumerate(everyone) if not f[0]]
        if failed:
            raise ValueError(f"ranks {failed} could not build their part of the DistGraph (their error says why)")
        differ = [r for r, f in enumerate(everyone) if not torch.equal(f, everyone[0])]
        if differ:
            raise ValueError(f"A or the partition differ across ranks (ranks {differ} differ from rank 0): every rank "
                             f"must pass the same graph and partition")

    def _all_to_all_counts(self, counts):
        out = torch.empty(self.world, dtype=torch.int64, device=self._comm_device)
        dist.all_to_all_single(out, torch.as_tensor(counts, device=self._comm_device), group=self.group)
        return out.cpu().numpy()

    def _all_to_all_rows(self, send, send_counts, recv_counts, out=None):
        """Rows of ``send`` (grouped by destination, ``send_counts`` each) exchanged: the rows this
        rank receives, grouped by source (``recv_counts`` each), on ``send``'s device (written
        into ``out`` where given: rows on the communication device, received in place)."""
        device = send.device
        send = send.to(self._comm_device).contiguous()
        if out is None or out.device != self._comm_device:
            received = torch.empty((int(recv_counts.sum()), *send.shape[1:]), dtype=send.dtype,
                                   device=self._comm_device)
        else:
            received = out
        dist.all_to_all_single(received, send, output_split_sizes=recv_counts.tolist(),
                               input_split_sizes=send_counts.tolist(), group=self.group)
        if out is None:
            return received.to(device)
        if received is not out:
            out.copy_(received)
        return out

    # -- column blocks (spmm's pipeline) ----------------------------------------------------------

    def _column_blocks(self, per_source, transpose=False):
        """[(begin, end, indptr, indices, entries)]: this rank's rows of A split by their columns,
        the owned columns first, then the halo's rows [begin, end) as one block (``per_source``
        False) or one block per other rank, in the order :meth:`_post` exchanges their rows;
        each block's pattern over those columns (``transpose``: the block's transpose, its rows
        the block's columns) as arrays on the rank's device (host arrays on CPU ranks), and its
        entries' positions in ``graph``'s entry order (to take their values).  Built on first
        use; one split kept at a time (~12 bytes per entry each way, and :meth:`_ones`' values)."""
        if self._blocks[0] != per_source:  # (the other split's memory first: one split kept)
            self._blocks, self._block_csrs, self._default_blocks, self._pattern_blocks = (per_source, {}), {}, {}, {}
        built = self._blocks[1]
        if transpose not in built:
            row_ptr, cols = (a.cpu().numpy() for a in self.graph._csr_parts[False][:2])  # (no host ones kept)
            rows = np.repeat(np.arange(self.n_owned), np.diff(row_ptr))
            index = np.int32 if max(self.n_owned + self.n_halo, self.graph.nnz) < 2**31 else np.int64
            if per_source:
                sources = [(self.rank - k) % self.world for k in range(1, self.world)]
                ranges = [(self._recv_offsets[r], self._recv_offsets[r + 1]) for r in sources]
            else:
                ranges = [(0, self.n_halo)]
            blocks = []
            for begin, end in [(-self.n_owned, 0)] + ranges:  # (the owned columns, numbered before the halo)
                lo, hi = self.n_owned + begin, self.n_owned + end
                entries = np.flatnonzero((cols >= lo) & (cols < hi))
                r, c, n_rows = rows[entries], cols[entries] - lo, self.n_owned
                if transpose:  # (a stable sort by column keeps each column's rows ascending)
                    order = np.argsort(c, kind="stable")
                    r, c, entries, n_rows = c[order], r[order], entries[order], end - begin
                indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n_rows))])
                arrays = (indptr.astype(index), c.astype(index), entries.astype(index))
                if self.device.type == "cuda":
                    arrays = tuple(torch.as_tensor(a, device=self.device) for a in arrays)
                blocks.append((begin, end, *arrays))
            built[transpose] = blocks
        return built[transpose]

    def _with_values(self, values, per_source, transpose=False):
        """[(begin, end, matrix, entries)]: each column block (or its transpose) with its
        entries' ``values``: a device :class:`CSR` (a scipy CSR on CPU ranks).  The values are
        gathered per call, except ``dg.values`` itself, gathered again only when torch records a
        change to it (an in-place op; not a write through ``.data`` or another framework)."""
        default = values is self.values and not values.is_inference()
        stamp = (per_source, values.data_ptr(), values._version) if default else None
        kept = self._default_blocks.get(transpose)
        if default and kept is not None and kept[0] == stamp:
            return kept[1]
        matrices = []
        for number, (begin, end, indptr, indices, entries) in enumerate(self._column_blocks(per_source, transpose)):
            taken = values.detach()[entries]
            shape = (end - begin, self.n_owned) if transpose else (self.n_owned, end - begin)
            if self.device.type == "cuda":  # one device CSR per block and dtype (plans kept), new values
                key = (number, transpose, taken.dtype)
                if key not in self._block_csrs:
                    self._block_csrs[key] = CSR._from_device(indptr, indices, taken, shape)
                matrix = self._block_csrs[key].with_values(taken)
            else:
                matrix = sp.csr_matrix((taken.numpy(), indices, indptr), shape=shape)
            matrices.append((begin, end, matrix, entries))
        if default:
            self._default_blocks[transpose] = (stamp, matrices)
        return matrices

    def _ones(self, per_source, dtype):
        """:meth:`_with_values` with every value one, as the values' gradient's SDDMM needs (the
        pattern alone): built once per split and dtype, not per backward."""
        self._column_blocks(per_source, False)  # (a new split drops the other's blocks first)
        if dtype not in self._pattern_blocks:
            ones = torch.ones(self.graph.nnz, dtype=dtype, device=self.device)
            self._pattern_blocks[dtype] = self._with_values(ones, per_source)
        return self._pattern_blocks[dtype]

    def _rounds(self, per_source, back=False):
        """The (to, source) pairs of each round of sends and receives: all in one round, or one
        source per round (``per_source``: in round k this rank sends to rank + k and receives from
        rank - k; ``back``, gradients returning to the rows' owners: the other way round)."""
        pairs = [((self.rank + k) % self.world, (self.rank - k) % self.world) for k in range(1, self.world)]
        if back:
            pairs = [(source, to) for to, source in pairs]
        return [[p] for p in pairs] if per_source else [pairs]

    def _post(self, pairs, send, send_offsets, recv, recv_offsets):
        """Start one round: for each (to, source) of ``pairs``, rows ``send_offsets[to]:[to + 1]``
        of ``send`` to ``to``, and rows of ``recv`` by ``recv_offsets`` from ``source`` (batched
        P2P).  Returns the round's requests."""
        ops = []
        for to, source in pairs:
            if send_offsets[to + 1] > send_offsets[to]:
                ops.append(dist.P2POp(dist.isend, send[send_offsets[to]:send_offsets[to + 1]],
                                      self._global(to), self.group))
            if recv_offsets[source + 1] > recv_offsets[source]:
                ops.append(dist.P2POp(dist.irecv, recv[recv_offsets[source]:recv_offsets[source + 1]],
                                      self._global(source), self.group))
        return dist.batch_isend_irecv(ops) if ops else []

    def _post_halo(self, X, halo, per_source):
        """Start the exchange of ``halo`` (this rank's halo rows, received by source in ``halo``'s
        rows) and of the rows of ``X`` other ranks need, in :meth:`_rounds`.  Returns the rows
        sent and each round's requests."""
        send = X[self._send_index].to(self._comm_device)
        return send, [self._post(pairs, send, self._send_offsets, halo, self._recv_offsets)
                      for pairs in self._rounds(per_source)]

    def _global(self, rank):
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    # -- features -----------------------------------------------------------------------------

    def local(self, X):
        """This rank's rows of the whole-graph node features ``X`` (a tensor or an array)."""
        if X.shape[0] != self.partition.owner.shape[0]:
            raise ValueError(f"X must have one row per node of the graph ({self.partition.owner.shape[0]}), got shape "
                             f"{tuple(X.shape)}")
        index = torch.as_tensor(self.nodes, device=X.device) if isinstance(X, torch.Tensor) else self.nodes
        return X[index]

    def gather(self, X_local):
        """The whole-graph node features (original node order), on every rank, from each rank's
        ``X_local`` rows (for evaluation; training needs no gather)."""
        self._check_rows(X_local, "X_local")
        counts = np.bincount(self.partition.owner, minlength=self.world)
        padded = torch.zeros((int(counts.max()), *X_local.shape[1:]), dtype=X_local.dtype, device=self._comm_device)
        padded[:self.n_owned] = X_local.detach().to(self._comm_device)
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded, group=self.group)
        out = torch.empty((self.shape[0], *X_local.shape[1:]), dtype=X_local.dtype, device=self._comm_device)
        for r, part in enumerate(parts):
            out[torch.as_tensor(self.partition.nodes(r), device=self._comm_device)] = part[:counts[r]]
        return out.to(X_local.device)

    def edges(self):
        """Global (row, column) ids of the local entries, in ``graph``'s entry order."""
        pattern = self.graph.pattern()
        rows = np.repeat(self.nodes, np.diff(pattern.indptr))
        return rows, self._global_cols[pattern.indices]

    def halo_rows_per_rank(self):
        """Rows this rank receives from each rank in one exchange."""
        return self._recv_counts.copy()

    def _check_pipeline(self):
        if self.pipeline not in PIPELINES:
            raise ValueError(f"DistGraph.pipeline must be one of {PIPELINES}, got {self.pipeline!r}")

    def _check_rows(self, X, name):
        if not isinstance(X, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor, got {type(X).__name__}")
        if X.dim() < 1 or X.shape[0] != self.n_owned:
            raise ValueError(f"{name} must hold this rank's {self.n_owned} rows (DistGraph.nodes), got shape "
                             f"{tuple(X.shape)}")


class _HaloExchange(torch.autograd.Function):
    """X (owned rows) -> [X; halo rows from their owners]; backward: halo gradients back to their
    owners, added to the owned rows' gradients."""

    @staticmethod
    def forward(ctx, X, dg):
        ctx.dg = dg
        extended = X.new_empty((dg.n_owned + dg.n_halo, *X.shape[1:]))
        extended[:dg.n_owned] = X
        # the halo lands in its rows of the result (no second copy of it, as a concatenation makes)
        dg._all_to_all_rows(X[dg._send_index], dg._send_counts, dg._recv_counts, out=extended[dg.n_owned:])
        return extended

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        return _owned_grad(ctx.dg, grad), None


def _owned_grad(dg, grad):
    """The gradient of the owned rows from that of [owned rows; halo]: the halo's rows sent back
    to their owners, which add them."""
    back = dg._all_to_all_rows(grad[dg.n_owned:], dg._recv_counts, dg._send_counts)
    return grad[:dg.n_owned].clone().index_add_(0, dg._send_index, back)


def _gpu_of(tensor):
    """The tensor's GPU made current (NCCL posts P2P on the current GPU), or nothing on the CPU."""
    return torch.cuda.device(tensor.device) if tensor.is_cuda else contextlib.nullcontext()


def _overlapped(dg, Y, per_source, blocks, first, add):
    """Run ``first()`` while this rank's halo rows of ``Y`` arrive, then ``add(result, block,
    entries, rows)`` for each halo column block as its rows are in.  Returns (result, halo rows).
    Everything that can fail before the sends and receives are posted has run (the blocks are
    built); after, every request completes even on an error, so the next collective cannot hang."""
    halo = Y.new_empty((dg.n_halo, Y.shape[1]))
    # (gloo ranks with CUDA features exchange through host buffers)
    arrived = halo if dg._comm_device == Y.device else torch.empty_like(halo, device=dg._comm_device)
    with _gpu_of(Y):
        send, rounds = dg._post_halo(Y, arrived, per_source)
    waited = 0
    try:
        result = first()
        for (begin, end, block, entries), requests in zip(blocks, rounds):
            for request in requests:
                request.wait()  # (NCCL: the current stream waits; the host goes on)
            waited += 1
            if arrived is not halo:
                halo[begin:end] = arrived[begin:end]
            if block.nnz:
                add(result, block, entries, halo[begin:end])
    finally:
        for requests in rounds[waited:]:
            for request in requests:
                request.wait()
        del send  # (in use until the last round's requests are waited on)
    return result, halo


def _pipelined_owned_grad(dg, values, G, per_source):
    """``_owned_grad(dg, A^T G)`` (A with ``values``) with the exchange hidden: the halo's rows of
    A^T G (row blocks of A^T, so nothing is accumulated) are computed first and each block sent
    back to its owners at once; the owned rows' product runs while they travel."""
    (_, _, owned, _), *halo_blocks = dg._with_values(values, per_source, transpose=True)
    grads = G.new_empty((dg.n_halo, G.shape[1]))
    sent = grads if dg._comm_device == G.device else torch.empty_like(grads, device=dg._comm_device)
    back = torch.empty((len(dg._send_index), G.shape[1]), dtype=G.dtype, device=dg._comm_device)
    rounds, failure, dX = [], None, None
    with _gpu_of(G):
        for (begin, end, block, _), pairs in zip(halo_blocks, dg._rounds(per_source, back=True)):
            if failure is None and end > begin:
                try:
                    api.spmm(block, G, out=grads[begin:end])
                    if sent is not grads:
                        sent[begin:end] = grads[begin:end]
                except Exception as exc:  # noqa: BLE001 (raised once every round is posted and done:
                    failure = exc  # the other ranks wait on this rank's rounds)
                    sent[begin:].fill_(float("nan"))  # (what is still sent: NaN, not stale memory)
            rounds.append(dg._post(pairs, sent, dg._recv_offsets, back, dg._send_offsets))
    try:
        if failure is None:
            dX = api.spmm(owned, G)
    finally:
        for requests in rounds:
            for request in requests:
                request.wait()
    if failure is not None:
        raise failure
    return dX.index_add_(0, dg._send_index, back.to(G.device))


class _PipelinedSpmm(torch.autograd.Function):
    """C = A [X; halo] with the exchange hidden behind the products: the owned columns' product
    runs while the halo's rows arrive (one batch, or one source rank at a time:
    ``per_source``), and each halo block is added into C (HP-SpMM accumulating atomically)
    once its rows are in.  Backward: dX = A^T dC with the halo's rows sent back to their
    owners while the owned rows are computed (:func:`_pipelined_owned_grad`); the values'
    gradient by column blocks (:func:`_block_scores`)."""

    @staticmethod
    def forward(ctx, values, X, dg, per_source):
        (_, _, owned, _), *received = dg._with_values(values, per_source)
        C, halo = _overlapped(dg, X, per_source, received, lambda: api.spmm(owned, X.detach()),
                              lambda C, block, entries, H: _add_product(C, block, H))
        ctx.dg, ctx.per_source = dg, per_source
        ctx.save_for_backward(values, *((X, halo) if ctx.needs_input_grad[0] else ()))
        return C

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dC):
        dg = ctx.dg
        values, *operands = ctx.saved_tensors
        dvalues = dX = None
        dC = dC.contiguous()
        if ctx.needs_input_grad[0]:  # a_ij: <dC_i, [X; halo]_j>
            dvalues = _block_scores(dg, ctx.per_source, dC, *operands)
        if ctx.needs_input_grad[1]:  # (the saved values are the forward's object: dg.values keeps its blocks)
            dX = _pipelined_owned_grad(dg, values, dC, ctx.per_source)
        return dvalues, dX, None, None


class _PipelinedSddmm(torch.autograd.Function):
    """s = values ⊙ <X_i, [Y; halo]_j> with the exchange of Y's halo hidden behind the owned
    columns' scores; each halo block's scores are written to their entries once its rows are in.
    Backward: the values' gradient and dX by column blocks (:func:`_block_scores`,
    :func:`_block_product`), dY as :func:`_pipelined_owned_grad`."""

    @staticmethod
    def forward(ctx, values, X, Y, dg, per_source):
        (_, _, owned, owned_entries), *received = dg._with_values(values, per_source)

        def first():
            s = X.new_empty(dg.graph.nnz)
            s[owned_entries] = _scores(owned, X, Y)
            return s

        def add(s, block, entries, H):
            s[entries] = _scores(block, X, H)

        s, halo = _overlapped(dg, Y, per_source, received, first, add)
        ctx.dg, ctx.per_source = dg, per_source
        ctx.save_for_backward(values, X, Y, halo)
        return s

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, ds):
        dg = ctx.dg
        values, X, Y, halo = ctx.saved_tensors
        needs = ctx.needs_input_grad
        ds = ds.contiguous()
        weights = values.detach() * ds if needs[1] or needs[2] else None  # (ds_ij a_ij: the matrix of dX and dY)
        dvalues = _block_scores(dg, ctx.per_source, X, Y, halo) * ds if needs[0] else None
        dX = _block_product(dg, ctx.per_source, weights, Y, halo) if needs[1] else None
        dY = _pipelined_owned_grad(dg, weights, X, ctx.per_source) if needs[2] else None
        return dvalues, dX, dY, None, None


def _block_scores(dg, per_source, X, Y, halo):
    """<X_i, [Y; halo]_j> for every entry, one column block at a time (no [Y; halo] built: it
    would take another copy of both)."""
    s = X.new_empty(dg.graph.nnz)
    for begin, end, block, entries in dg._ones(per_source, X.dtype):
        if block.nnz:
            s[entries] = _scores(block, X, Y if begin < 0 else halo[begin:end])
    return s


def _block_product(dg, per_source, values, Y, halo):
    """A [Y; halo] (A with ``values``), one column block at a time (no [Y; halo] built)."""
    (_, _, owned, _), *received = dg._with_values(values, per_source)
    C = api.spmm(owned, Y)
    for begin, end, block, _ in received:
        if block.nnz:
            _add_product(C, block, halo[begin:end])
    return C


def _scores(block, X, Y):
    """The SDDMM values of ``block`` with X and Y (a tensor in the block's entry order)."""
    return nst._host_values(api.sddmm(block, X, Y), X.dtype)


def _add_product(C, block, H):
    """C += block @ H: one kernel on the GPU (:func:`numbasparse.dispatch.spmm_add`)."""
    if not C.is_cuda:
        C += torch.from_numpy(np.asarray(api.spmm(block, H.numpy())))
        return
    h, c = arrays.dense(H, "H", 2), arrays.dense(C, "C", 2)
    with gpus.on_gpu_of([("H", h.array), ("C", c.array)]):
        dispatch.spmm_add(block, h.array, c.array, stream=arrays.stream_of(h))


def halo_exchange(dg, X):
    """``[X; halo]``: this rank's feature rows ``X`` followed by the rows of its halo nodes, fetched
    from their owners (differentiable: the backward returns the halo's gradients to them); ``X``
    itself where no rank has a halo."""
    dg._check_rows(X, "X")
    return _HaloExchange.apply(X, dg) if dg.exchanges else X


def spmm(dg, X, values=None, *, reduce="sum"):
    """This rank's rows of ``A @ X`` (or of the row mean, max or min: ``reduce`` as in
    :func:`numbasparse.torch.spmm`), from this rank's rows ``X`` of the features; differentiable
    in X and in ``values`` (default ``dg.values``).

    A sum of float32 or float64 features (2-D) whose halo is large enough
    (:func:`pipeline_split`, or ``dg.pipeline``) is pipelined: the owned columns are multiplied
    while the halo arrives, the halo's blocks added as their rows come in; in the backward the
    halo's gradients are sent back while the owned rows' are computed.  Other reductions,
    16-bit features (autocast included), smaller halos, tensor subclasses and
    ``torch.compile`` exchange the whole halo first (:func:`halo_exchange`), then multiply."""
    dg._check_rows(X, "X")
    dg._check_pipeline()
    if reduce == "sum" and X.dim() == 2:
        B, v = nst._autocast(dg.graph, X, dg.values if values is None else values)
        split = _split(dg, B, v)
        if split != "off":
            return _PipelinedSpmm.apply(nst._values(dg.graph, v, B), B.contiguous(), dg, split == "sources")
    return nst.spmm(dg.graph, halo_exchange(dg, X), values, reduce=reduce)


def _split(dg, Y, values, *others):
    """How :func:`spmm` / :func:`sddmm` exchange ``Y``'s halo: "off" (the whole halo first) for
    16-bit operands, tensor subclasses, under ``torch.compile`` or without any halo; else
    ``dg.pipeline`` or :func:`pipeline_split`."""
    tensors = (Y, values) + others
    if (not dg.exchanges or torch.compiler.is_compiling() or any(type(t) not in nst._PLAIN for t in tensors)
            or Y.dtype not in (torch.float32, torch.float64)):
        return "off"
    return dg.pipeline or pipeline_split(dg.world, dg._max_halo * Y.shape[1] * Y.element_size())


PIPELINES = (None, "sources", "halo", "off")
#: Bytes of the largest halo from which :func:`spmm` pipelines the exchange with the products.
PIPELINE_MIN_BYTES = 32 << 20
#: Bytes per source (the largest halo over P - 1) from which it receives one source at a time.
PER_SOURCE_MIN_BYTES = 128 << 20


def pipeline_split(world, halo_bytes):
    """How :func:`spmm` (sum) splits the exchange for ``world`` ranks whose largest halo is
    ``halo_bytes``: "off" (the whole halo, then one product), "halo" (the owned columns'
    product while the whole halo arrives, then the halo's) or "sources" (each source's block
    added as its rows arrive).  Each split adds fixed costs (a batch of sends and receives, a
    kernel, atomic adds into C) that only a long enough transfer hides.  The same on every
    rank (it depends only on agreed sizes), so the ranks' sends and receives match."""
    if halo_bytes < PIPELINE_MIN_BYTES:
        return "off"
    return "sources" if world > 2 and halo_bytes / (world - 1) >= PER_SOURCE_MIN_BYTES else "halo"


def sddmm(dg, X, Y, values=None):
    """``values ⊙ <X_i, Y_j>`` for this rank's entries (``dg.edges()`` order), from this rank's rows
    of X and Y; differentiable in X, Y and ``values``.  Pipelined as :func:`spmm` (the same rule
    on Y's halo): the owned columns' scores are computed while Y's halo arrives."""
    dg._check_rows(X, "X")
    dg._check_rows(Y, "Y")
    dg._check_pipeline()
    if X.dim() == 2 and Y.dim() == 2:
        x, y, v = nst._autocast(dg.graph, X, Y, dg.values if values is None else values)
        # (before any exchange: a rank whose operands differ must not pick another path than the rest)
        if x.shape[1] != y.shape[1]:
            raise ValueError(f"X and Y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
        if x.dtype != y.dtype or x.device != y.device:
            raise TypeError(f"X ({x.dtype}, {x.device}) and Y ({y.dtype}, {y.device}) must have the same dtype "
                            f"and device")
        split = _split(dg, y, v, x)
        if split != "off":
            return _PipelinedSddmm.apply(nst._values(dg.graph, v, x), x.contiguous(), y.contiguous(), dg,
                                         split == "sources")
    return nst.sddmm(dg.graph, X, halo_exchange(dg, Y), values)


def _check_partition(part, n_nodes):
    """TypeError/ValueError unless ``part`` is a :class:`Partition` of ``n_nodes`` nodes, each
    owned by a rank in ``range(part.n_parts)``."""
    if not isinstance(part, Partition):
        raise TypeError(f"partition must be a numbasparse.distributed.Partition, got {type(part).__name__}")
    owner = np.asarray(part.owner)
    if owner.shape != (n_nodes,) or owner.dtype.kind not in "iu":
        raise ValueError(f"partition.owner must hold one integer rank per node ({n_nodes}), got {owner.dtype} "
                         f"of shape {owner.shape}")
    if owner.size and (owner.min() < 0 or owner.max() >= part.n_parts):
        raise ValueError(f"partition.owner must name ranks in 0..{part.n_parts - 1}, got {owner.min()}..{owner.max()}")


def halo_volume(A, part, itemsize=4, n_cols=1):
    """Per rank: (owned rows, halo rows, bytes received per exchange of ``n_cols`` columns of
    ``itemsize`` bytes), computed from the whole graph and partition without any process group."""
    A = _square(A)
    _check_partition(part, A.shape[0])
    out = []
    row_owner = np.repeat(part.owner, np.diff(A.indptr))
    for r in range(part.n_parts):
        cols = A.indices[row_owner == r]
        halo = np.unique(cols[part.owner[cols] != r])
        out.append((int((part.owner == r).sum()), len(halo), len(halo) * itemsize * n_cols))
    return out
