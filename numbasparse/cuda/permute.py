"""``P A P^T`` on the GPU: a device CSR with its nodes renumbered, rows sorted as the host's
:func:`numbasparse.reorder.order.permuted` sorts them (the same canonical matrix).

A reordering's time counts against what it saves per call, and on the host the permutation
(moving every entry, then sorting every row on its new columns) took as long as computing the
order itself (BENCHMARKS.md "Reordering").  Here each row of the result is row ``perm[i]`` of A,
its columns renumbered by the inverse permutation, and sorted by ranking rather than sorting:

1. Rows of at most 32 entries (most rows of most graphs): one warp per row, a lane per entry;
   an entry's place is the number of the row's entries with a smaller new column (columns of a
   canonical row are distinct), counted through warp shuffles.
2. Longer rows, cut into chunks of CHUNK entries: one block per chunk sorts (new column << 32 |
   place in chunk) keys with a bitonic network in shared memory.
3. One block per chunk again: an entry's place in its row is its place in its sorted chunk plus,
   for each other chunk of the row, the keys there with a smaller column (a binary search).
"""
import functools

import numpy as np
from numba import cuda, int64

from . import launch
from .device import WARP_SIZE, allocating, device_limits, grid_stride_grid, simulator_enabled
from .intrinsics import shfl_idx, syncblock

#: Entries of a long row's chunk: the bitonic sort's shared keys (8 bytes each).
CHUNK = 1024
#: Graphs with a row longer than this are permuted on the host: the merge's searches grow with
#: the square of a row's length (4.2M entries and one row of 2**21: 133 ms on an H200, against
#: 199 ms on the host's 16 cores; with a row of 2**20: 80 against 182 ms).
LONGEST_ROW = 2**20
#: Threads per block of the chunk kernels: most long rows hold 33 to a few hundred entries, so
#: small blocks (more of them per SM) rather than threads idle at every barrier of a short network.
CHUNK_THREADS = 128
#: Above this, a key (an unused slot of a chunk, a lane without an entry): sorts last.
_LAST = np.iinfo(np.int64).max


@launch.kernel_factory
def short_rows_kernel():
    """Thread mapping: one warp per row of the result, grid-stride; lane j holds entry j."""

    @cuda.jit
    def short_rows(indptr, indices, data, perm, inverse, new_indptr, out_indices, out_data):
        lane = cuda.laneid
        for row in range(cuda.grid(1) // WARP_SIZE, perm.shape[0], cuda.gridsize(1) // WARP_SIZE):
            start = indptr[perm[row]]
            length = indptr[perm[row] + 1] - start
            if length > WARP_SIZE:  # (warp-uniform) a long row: the chunk kernels' work
                continue
            column = int64(_LAST)
            if lane < length:
                column = inverse[indices[start + lane]]
            # rank: the row's columns smaller than this lane's (distinct, so the ranks are a permutation)
            rank = 0
            for k in range(length):
                if shfl_idx(column, k) < column:
                    rank += 1
            if lane < length:
                at = new_indptr[row] + rank
                out_indices[at] = column
                out_data[at] = data[start + lane]

    return short_rows


@launch.kernel_factory
def sort_chunks_kernel(chunk):
    """Thread mapping: one block per chunk (grid-stride), chunk // 2 threads or fewer; each
    thread loads entries, then takes one compare-exchange of each bitonic step at a time."""

    @cuda.jit
    def sort_chunks(indptr, indices, perm, inverse, chunk_row, chunk_offset, chunk_keys, keys):
        keyed = cuda.shared.array(chunk, int64)
        t, threads = cuda.threadIdx.x, cuda.blockDim.x
        for c in range(cuda.blockIdx.x, chunk_row.shape[0], cuda.gridDim.x):
            row, offset = chunk_row[c], chunk_offset[c]
            start = indptr[perm[row]] + offset
            length = min(chunk, indptr[perm[row] + 1] - start)
            size = 1  # the network's width: a power of two, so short chunks take short networks
            while size < length:
                size *= 2
            # load: (new column << 32 | place in the chunk), unused slots last
            for j in range(t, size, threads):
                keyed[j] = (inverse[indices[start + j]] << 32) | j if j < length else _LAST
            # sort: bitonic merges of spans 2, 4, .., size, each in strides span/2 .. 1
            span = 2
            while span <= size:
                stride = span // 2
                while stride > 0:
                    syncblock()
                    for p in range(t, size // 2, threads):
                        i = 2 * p - (p & (stride - 1))
                        a, b = keyed[i], keyed[i + stride]
                        if (a > b) == ((i & span) == 0):
                            keyed[i], keyed[i + stride] = b, a
                    stride //= 2
                span *= 2
            syncblock()
            # store at the chunk's place among its row's keys (the merge kernel reads them there)
            at = chunk_keys[c] + offset
            for j in range(t, length, threads):
                keys[at + j] = keyed[j]
            syncblock()  # (the next chunk's loads overwrite keyed)

    return sort_chunks


@launch.kernel_factory
def merge_chunks_kernel(chunk):
    """Thread mapping: one block per chunk (grid-stride), a thread per entry of it.  Each entry
    searches every other chunk of its row: a row of L entries costs L * L / chunk searches, which
    is why the plans permute graphs with rows over LONGEST_ROW entries on the host."""

    @cuda.jit
    def merge_chunks(indptr, data, perm, new_indptr, chunk_row, chunk_offset, chunk_keys, keys, out_indices,
                     out_data):
        for c in range(cuda.blockIdx.x, chunk_row.shape[0], cuda.gridDim.x):
            row, offset = chunk_row[c], chunk_offset[c]
            start = indptr[perm[row]]
            length = indptr[perm[row] + 1] - start
            at = chunk_keys[c]  # the row's keys; its place in the result: new_indptr[row]
            for j in range(cuda.threadIdx.x, min(chunk, length - offset), cuda.blockDim.x):
                key = keys[at + offset + j]
                column = key >> 32
                # place in the row: place in this chunk + each other chunk's smaller columns
                rank = j
                for other in range(0, length, chunk):
                    if other == offset:
                        continue
                    lo, hi = at + other, at + min(other + chunk, length)
                    while lo < hi:  # first key of that chunk with a column >= this one
                        mid = (lo + hi) // 2
                        if keys[mid] < (column << 32):
                            lo = mid + 1
                        else:
                            hi = mid
                    rank += lo - (at + other)
                out_indices[new_indptr[row] + rank] = column
                out_data[new_indptr[row] + rank] = data[start + offset + (key & 0xFFFFFFFF)]

    return merge_chunks


def permuted_on_device(A, perm, *, chunk=CHUNK):
    """``P A P^T`` of device :class:`~numbasparse.CSR` ``A`` (square, canonical, fewer than 2**31
    nodes) for a permutation ``perm`` of its nodes (``perm[new] = old``; anything else,
    ValueError): a new CSR on A's GPU with A's dtypes, equal to the host's ``permuted(A, perm)``;
    its host copy is downloaded on first need.  Returns when the GPU has finished (the caller
    times it).  Needs device memory for the result and 8 bytes per entry of the rows over 32
    entries.  ``chunk``: a power of two, the long rows' chunk (tests take small ones)."""
    from ..csr import CSR
    from ..reorder.order import long_row_chunks, row_maps

    n, nnz = A.shape[0], A.nnz
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"a node order needs a square graph, A is {A.shape[0]}x{A.shape[1]}")
    if n >= 2**31:  # (a key packs a column and a place into one int64)
        raise ValueError(f"A has {n} nodes; reordering takes graphs of fewer than 2**31")
    if chunk < 2 or chunk & (chunk - 1):
        raise ValueError(f"chunk must be a power of two of at least 2, got {chunk!r}")
    host_indptr = A.host_indptr
    perm, inverse, new_indptr = row_maps(host_indptr, perm)
    new_indptr = new_indptr.astype(host_indptr.dtype, copy=False)
    chunk_row, chunk_offset, chunk_keys, long_entries = long_row_chunks(new_indptr, WARP_SIZE, chunk)
    with A._on_its_gpu(), allocating("the permuted CSR", nnz * (A.indices.dtype.itemsize + A.data.dtype.itemsize)
                                     + 8 * long_entries + 40 * n):
        index = [cuda.to_device(a) for a in (perm, inverse, new_indptr, chunk_row, chunk_offset, chunk_keys)]
        d_perm, d_inverse, d_indptr, d_rows, d_offsets, d_keys_at = index
        out_indices = cuda.device_array(nnz, A.indices.dtype)
        out_data = cuda.device_array(nnz, A.data.dtype)
        if n:
            launch.run(short_rows_kernel(), *grid_stride_grid(n * WARP_SIZE), 0,
                       A.indptr, A.indices, A.data, d_perm, d_inverse, d_indptr, out_indices, out_data)
        if chunk_row.size:
            keys = cuda.device_array(long_entries, np.int64)
            blocks = min(chunk_row.size, device_limits()[0] * 32)
            launch.run(sort_chunks_kernel(chunk), blocks, min(chunk // 2, CHUNK_THREADS), 0,
                       A.indptr, A.indices, d_perm, d_inverse, d_rows, d_offsets, d_keys_at, keys)
            launch.run(merge_chunks_kernel(chunk), blocks, min(chunk, CHUNK_THREADS), 0,
                       A.indptr, A.data, d_perm, d_indptr, d_rows, d_offsets, d_keys_at, keys, out_indices, out_data)
        cuda.synchronize()
    return CSR._of_device(d_indptr, out_indices, out_data, A.shape, A.dtype, new_indptr)


def compile_permutation(A):
    """Compile (or load) the permutation's kernels for device CSR ``A``'s dtypes, on a tiny graph
    of them, so that the time a reordering is charged is its own, not the compiler's (the
    simulator compiles nothing)."""
    if not simulator_enabled():
        _compile(A.index_dtype, A.dtype)


@functools.lru_cache(maxsize=None)
def _compile(index_dtype, dtype):
    from .._compat import scipy_sparse as sp
    from ..csr import CSR

    n = WARP_SIZE + 1  # one row of each kind: short, and long (one chunk)
    rows = np.r_[np.zeros(n, np.int64), 1]
    tiny = sp.csr_matrix((np.ones(n + 1, np.float32), (rows, np.r_[np.arange(n), 0])), shape=(n, n))
    tiny.indptr, tiny.indices = tiny.indptr.astype(index_dtype), tiny.indices.astype(index_dtype)
    permuted_on_device(CSR._of_canonical(tiny, dtype=dtype), np.arange(n))
