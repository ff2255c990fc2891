"""Canonical CSR: the one conversion from user input, and the device-resident ``CSR``."""
import numpy as np
from ._compat import scipy_sparse as sp

from . import arrays
from .cache import MatrixCache
from .dtypes import INDEX_DTYPES, check_value_dtype, compute_dtype, index_dtype_for, is_half
from .inputs import as_scipy, gpu_csr_parts
from .validation import check_sparse


def sparse_operand(A, name="A"):
    """``A`` as the public functions take it: a device :class:`CSR` as it is (built by the
    library: trusted), or a scipy.sparse matrix or array, or another library's sparse operand
    converted to one (:mod:`numbasparse.inputs`), whose structure passed
    :func:`numbasparse.validation.check_sparse` (LIL, DIA and DOK come back as CSR); TypeError
    for anything else.  The first thing every public function does with its sparse operand."""
    if isinstance(A, CSR):
        return A
    if not sp.issparse(A):
        on_gpu = gpu_csr_parts(A, name)  # a graph already on a GPU stays there
        if on_gpu is not None:
            return CSR._from_device(*on_gpu)
        converted = as_scipy(A, name)  # torch sparse, PyG, networkx, cupyx (numbasparse.inputs)
        if converted is None:
            raise TypeError(f"{name} must be a scipy.sparse matrix, a numbasparse.CSR, a torch sparse tensor, a "
                            f"PyG EdgeIndex or SparseTensor, a networkx graph or a cupyx sparse matrix (an "
                            f"edge_index goes through numbasparse.from_edge_index), got {type(A).__name__}")
        A = converted
    return check_sparse(A, name)


def is_canonical(A):
    """True when the checked scipy CSR ``A`` has sorted, duplicate-free indices in every row and
    no stored entries past ``indptr[-1]`` (its own check: scipy's cached
    ``has_canonical_format`` is stale after an in-place edit of the arrays)."""
    indptr, indices = A.indptr, A.indices
    nnz = int(indptr[-1])
    if indices.shape[0] != nnz or A.data.shape[0] != nnz:
        return False
    if nnz < 2:
        return True
    decreasing = indices[1:] <= indices[:-1]  # at position p: entries p and p + 1 out of order
    row_starts = indptr[1:-1]
    decreasing[row_starts[(row_starts > 0) & (row_starts < nnz)] - 1] = False  # across rows: fine
    return not decreasing.any()


def _native_values(A):
    """``A`` with its values in native byte order (scipy cannot copy others), sharing the index
    arrays; ``A`` itself when they already are."""
    if A.dtype.isnative:
        return A
    values = A.data.astype(A.dtype.newbyteorder("="))
    if A.format in ("csr", "csc", "bsr"):
        return type(A)((values, A.indices, A.indptr), shape=A.shape)
    if A.format == "coo":
        return type(A)((values, (A.row, A.col)), shape=A.shape)
    return _native_values(A.tocsr())


def _check_range(values, dtype, name):
    """ValueError where a finite value of ``values``, or a sum of duplicates, has no finite value of
    ``dtype`` (asked when the converted values hold an inf or NaN: the input's own are kept)."""
    finite = np.abs(values[np.isfinite(values)].astype(np.float64))
    with np.errstate(over="ignore"):
        overflows = finite.size and not np.isfinite(np.asarray(finite.max()).astype(dtype))
    if overflows:
        raise ValueError(f"{name} has values up to {finite.max():.3g}, beyond the range of {np.dtype(dtype).name}: "
                         f"scale them, or compute in a wider dtype")
    if finite.size == values.size:  # every value fits: duplicate entries summed past the range
        raise ValueError(f"{name}'s duplicate entries sum beyond the range of {np.dtype(dtype).name}: scale them, "
                         f"or compute in a wider dtype")


def canonical_csr(A, *, dtype=None, index_dtype=None, name="A", checked=False):
    """A new scipy CSR matrix equal to ``A``: sorted indices, duplicates summed.

    ``A``'s structure is checked first (:func:`sparse_operand`; ``checked``: it already was),
    and ``A`` itself is never modified.  ``dtype`` (float32, float64, float16 or bfloat16)
    defaults to float64 for float64 input and float32 otherwise; scipy holds no 16-bit floats, so
    for those the result is float32 with every value rounded to ``dtype``.  ``index_dtype``
    defaults to int32 where it fits.
    """
    if not checked:
        A = sparse_operand(A, name)
    if isinstance(A, CSR):
        A = A.to_scipy()
    A = _native_values(A)
    if dtype is None:
        dtype = np.float64 if A.dtype == np.float64 else np.float32
    dtype = check_value_dtype(dtype, "dtype")
    if A.dtype.kind not in "biuf":
        raise TypeError(f"{name} must have real numeric values, got {A.dtype}")
    half = is_half(dtype)  # summed in float64, rounded to 16 bits once, held as float32
    with np.errstate(over="ignore"):  # (a value out of dtype's range: the ValueError below)
        csr = sp.csr_matrix(A, dtype=np.float64 if half else dtype, copy=True)
        csr.sum_duplicates()  # also sorts the indices
        if half:
            csr.data = csr.data.astype(dtype).astype(np.float32)
    if not np.isfinite(csr.data).all():
        _check_range(A.data, dtype, name)
    if index_dtype is None:
        index_dtype = index_dtype_for(csr.shape, csr.nnz)
    try:
        index_dtype = np.dtype(index_dtype)
    except TypeError:
        raise TypeError(f"index_dtype must be int32 or int64, got {index_dtype!r}") from None
    if index_dtype not in INDEX_DTYPES:
        raise TypeError(f"index_dtype must be int32 or int64, got {index_dtype}")
    if index_dtype == np.int32 and index_dtype_for(csr.shape, csr.nnz) != np.int32:
        raise ValueError(f"{name} is too large for int32 indices: use index_dtype=int64")
    csr.indptr = csr.indptr.astype(index_dtype, copy=False)
    csr.indices = csr.indices.astype(index_dtype, copy=False)
    return csr


class CSR:
    """A canonical CSR matrix resident on the GPU.

    Build it once with :meth:`from_scipy` and pass it wherever ``A`` is accepted, so that
    repeated calls do not upload the graph again.  ``indptr``, ``indices`` and ``data`` are
    Numba device arrays; ``host_indptr`` is a host copy of ``indptr`` (the plans are built from
    row lengths).  A full host copy (scipy, for :meth:`to_scipy`, the CPU backend, plans that
    read column indices) is kept when the matrix came from the host, and downloaded on first
    need when it was built on the GPU (a torch, PyG or CuPy graph already there:
    :func:`numbasparse.inputs.gpu_csr_parts`).  What calls derive from the matrix (plans, bound
    launches, replays, scratch) is kept in ``cache`` (:class:`numbasparse.cache.MatrixCache`,
    bounded); :meth:`clear_cache` frees it.
    """

    def __init__(self, A, dtype=None, *, index_dtype=None):
        """The same as :meth:`from_scipy`: ``A`` checked and made canonical (a copy: later edits
        of ``A`` do not reach the GPU's copy)."""
        self._upload(canonical_csr(A, dtype=dtype, index_dtype=index_dtype), dtype)

    @classmethod
    def _of_canonical(cls, host, dtype=None):
        """A CSR of ``host``, a scipy CSR the caller made with :func:`canonical_csr` (no copy)."""
        self = object.__new__(cls)
        self._upload(host, dtype)
        return self

    def _upload(self, host, dtype):
        from numba import cuda

        from .cuda.device import allocating, require_cuda

        require_cuda("numbasparse.CSR (a matrix on the GPU)")
        dtype = host.dtype if dtype is None else check_value_dtype(dtype, "dtype")  # 16-bit: host holds float32
        self._set_host(host.shape, host.nnz, dtype, host.indptr, host)
        with allocating("the CSR's arrays", host.indptr.nbytes + host.indices.nbytes + host.data.nbytes):
            self.indptr = cuda.to_device(host.indptr)
            self.indices = cuda.to_device(host.indices)
            self.data = cuda.to_device(arrays.device_storage(host.data.astype(dtype, copy=False)))

    def _set_host(self, shape, nnz, dtype, host_indptr, host):
        self._shape, self._nnz, self._dtype = tuple(shape), int(nnz), np.dtype(dtype)  # asked on every call
        self.host_indptr = host_indptr
        self._host_copy = host  # None: download on first use (built on the GPU)
        self._values_on_device_only = False  # True for with_values(): the host copy holds the pattern only
        self._converted = False  # True: made by the library from another framework's GPU matrix
        self.cache = MatrixCache()

    @classmethod
    def _from_device(cls, indptr, indices, data, shape):
        """A CSR of canonical device arrays (any CUDA arrays of one index dtype, values of a
        value dtype), kept as they are: only ``indptr`` is copied to the host.  The caller has
        checked them (:func:`numbasparse.inputs.gpu_csr_parts`)."""
        from numba import cuda

        self = object.__new__(cls)
        self.indptr, self.indices = (a if hasattr(a, "copy_to_host") else cuda.as_cuda_array(a)
                                     for a in (indptr, indices))  # Numba arrays as they are
        values = arrays.dense(data, "A.data", 1)  # 16-bit values: a view of their bits
        self.data = values.array
        self._owners = (indptr, indices, data)  # the framework's tensors own the memory
        # a torch tensor's copy is ordered on torch's current stream, where it was computed
        host_indptr = indptr.cpu().numpy() if hasattr(indptr, "cpu") else self.indptr.copy_to_host()
        self._set_host(shape, self.indices.shape[0], values.dtype, host_indptr, None)
        self._converted = True
        return self

    @classmethod
    def _of_device(cls, indptr, indices, data, shape, dtype, host_indptr):
        """A CSR of the library's own canonical Numba device arrays (``data`` as the kernels read
        values of ``dtype``) and ``host_indptr``, a host copy of ``indptr``; the host copy of the
        whole matrix is downloaded on first need."""
        self = object.__new__(cls)
        self.indptr, self.indices, self.data = indptr, indices, data
        self._set_host(shape, indices.shape[0], dtype, host_indptr, None)
        return self

    def _host_values(self):
        """The device values downloaded, in the compute dtype (float32 for 16-bit values)."""
        from numba import cuda

        data = self.data if hasattr(self.data, "copy_to_host") else cuda.as_cuda_array(self.data)
        values = arrays.host_values(data.copy_to_host(), self._dtype)
        return values.astype(compute_dtype(self._dtype), copy=False)

    @property
    def _host(self):
        """The scipy copy (downloaded on first use for a matrix built on the GPU)."""
        if self._host_copy is None:
            self._host_copy = sp.csr_matrix((self._host_values(), self.indices.copy_to_host(),
                                             self.host_indptr), shape=self._shape)
        return self._host_copy

    @classmethod
    def from_scipy(cls, A, *, dtype=None, index_dtype=None):
        """Upload ``A`` (any scipy.sparse matrix or array) in canonical CSR form.

        dtype: float32, float64, float16 or bfloat16 (default: float64 if ``A`` is float64, else
            float32); "bfloat16" as a string needs no ml_dtypes import by the caller.
        index_dtype: int32 or int64 (default: int32 when nnz and both dimensions fit).
        """
        return cls._of_canonical(canonical_csr(A, dtype=dtype, index_dtype=index_dtype), dtype=dtype)

    @property
    def shape(self):
        return self._shape

    @property
    def nnz(self):
        return self._nnz

    @property
    def dtype(self):
        return self._dtype

    @property
    def index_dtype(self):
        return self.host_indptr.dtype

    def clear_cache(self):
        """Drop everything calls derived from this matrix (plans, bound launches, replayed calls,
        scratch buffers), freeing their device memory; the next call rebuilds what it needs.
        ``with_values`` copies share the pattern's plans and scratch, so theirs go too."""
        self.cache.clear()

    def to_scipy(self):
        """A scipy.sparse.csr_matrix copy of this matrix (float32 for 16-bit values: scipy holds
        no 16-bit floats)."""
        if self._values_on_device_only:
            host = self._host
            return sp.csr_matrix((self._host_values(), host.indices.copy(), host.indptr.copy()),
                                 shape=host.shape)
        return self._host.copy()

    def with_values(self, values):
        """This sparsity pattern with other values, without copying anything.

        values: a CUDA array (Numba, CuPy, PyTorch) of ``nnz`` values of this matrix's dtype,
        in this matrix's (canonical) entry order, e.g. the output of ``sddmm``.  indptr and
        indices, and what was derived from them (plans, scratch), are shared.
        """
        v = arrays.dense(values, "values", 1)
        if not v.on_device:
            raise TypeError("values must be a CUDA array (the CSR lives on the GPU)")
        if v.shape != (self.nnz,):
            raise ValueError(f"values must have shape ({self.nnz},), got {tuple(v.shape)}")
        if v.dtype != self.dtype:
            raise TypeError(f"values must be {self.dtype}, got {v.dtype}")
        self._on_its_gpu(("values", v.array))  # (the check only: values on another GPU, ValueError)
        return self._with_data(v.array)

    def _with_data(self, data):
        """:meth:`with_values` of a device array as the kernels read it (16-bit values: their
        bits), unchecked: for the library's own intermediates."""
        other = object.__new__(CSR)
        other.__dict__.update(self.__dict__)
        other.data = data
        other._converted = False
        other.cache = MatrixCache(pattern=self.cache)  # bound launches and replays hold the values' pointer
        other._values_on_device_only = True
        return other

    def transpose(self):
        """``A^T`` as a new device-resident CSR (transposed on the host, then uploaded to this
        matrix's GPU)."""
        with self._on_its_gpu():
            return CSR.from_scipy(self.to_scipy().T, dtype=self.dtype, index_dtype=self.index_dtype)

    def _on_its_gpu(self, *named):
        """This matrix's GPU made current (:func:`numbasparse.cuda.device.on_gpu_of`), the device
        arrays of the (name, array) pairs ``named`` checked against it."""
        from .cuda.device import on_gpu_of

        return on_gpu_of([("A", self._placed), *named])

    @property
    def _placed(self):
        """An array of this matrix that knows its GPU: the framework's own tensor when the matrix
        was made from one (Numba's view of it names the GPU current then), else ``indptr``."""
        owners = getattr(self, "_owners", None)
        return self.indptr if owners is None else owners[0]

    @property
    def T(self):
        return self.transpose()

    def astype(self, dtype):
        """This matrix with values of another dtype (self if it already has it); cast on the GPU
        for a matrix made there from torch tensors, else through the host copy."""
        dtype = check_value_dtype(dtype, "dtype")
        if dtype == self.dtype:
            return self
        if self._converted and type(self._owners[2]).__module__.split(".")[0] == "torch":
            values = self._owners[2].to(arrays.torch_dtype(dtype))
            return CSR._from_device(self._owners[0], self._owners[1], values, self._shape)
        with self._on_its_gpu():
            return CSR.from_scipy(self.to_scipy(), dtype=dtype, index_dtype=self.index_dtype)

    def __repr__(self):
        return (f"<numbasparse.CSR {self.shape[0]}x{self.shape[1]}, nnz={self.nnz}, "
                f"{self.dtype}, indices {self.index_dtype}>")
