"""The dtypes numbasparse computes in: one place for what values and indices may be.

Values are float32, float64, float16 or bfloat16 (NumPy has no bfloat16: on the host it is
``ml_dtypes.bfloat16``, on the device torch's).  The two 16-bit formats are storage only: every
kernel reads them into float32, accumulates in float32 and rounds its result to the operands'
dtype once (:func:`compute_dtype`).
"""
import numpy as np

HALF_NAMES = ("float16", "bfloat16")
VALUE_NAMES = ("float32", "float64") + HALF_NAMES
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_INT32_MAX = np.iinfo(np.int32).max


def bfloat16():
    """NumPy's dtype for bfloat16 (``ml_dtypes``, imported on first need); TypeError if absent."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("bfloat16 host arrays need the ml_dtypes package (pip install ml_dtypes)") from None
    return np.dtype(ml_dtypes.bfloat16)


def as_dtype(dtype):
    """``dtype`` (a NumPy dtype, type or name, "bfloat16" included) as a NumPy dtype."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return bfloat16()
    return np.dtype(dtype)


def is_half(dtype):
    """True for float16 and bfloat16 (a bfloat16 dtype is recognised without importing ml_dtypes)."""
    dtype = np.dtype(dtype)
    return dtype.itemsize == 2 and dtype.name in HALF_NAMES


def check_value_dtype(dtype, name):
    """``dtype`` as a NumPy dtype, or TypeError naming ``name`` if values cannot have it."""
    try:
        dtype = as_dtype(dtype)
    except TypeError as error:
        raise TypeError(f"{name}: {error}") from None
    if dtype.name not in VALUE_NAMES or dtype.itemsize not in (2, 4, 8) or not dtype.isnative:
        raise TypeError(f"{name} must have dtype float32, float64, float16 or bfloat16, got {dtype}")
    return dtype


def compute_dtype(dtype):
    """The dtype kernels accumulate ``dtype`` values in: float32 for the 16-bit formats."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if is_half(dtype) else dtype


def storage_dtype(dtype):
    """The dtype a kernel's array of ``dtype`` values has: uint16 bits for the 16-bit formats."""
    dtype = np.dtype(dtype)
    return np.dtype(np.uint16) if is_half(dtype) else dtype


#: Kernel value formats of the 16-bit dtypes (:func:`kernel_format`).
HALF_FORMATS = ("<f2", "bf16")


def kernel_format(dtype):
    """The value format kernel factories are compiled for (:mod:`numbasparse.cuda.intrinsics`):
    "<f4", "<f8", "<f2" (float16) or "bf16"."""
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        return "bf16"
    return dtype.newbyteorder("<").str


def is_half_format(fmt):
    """True for the kernel formats of float16 and bfloat16."""
    return fmt in HALF_FORMATS


def index_dtype_for(shape, nnz):
    """int32 when every index and offset fits, else int64."""
    return INDEX_DTYPES[0] if max(shape[0], shape[1], nnz) <= _INT32_MAX else INDEX_DTYPES[1]
