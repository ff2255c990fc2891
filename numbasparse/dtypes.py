"""The dtypes numbasparse computes in: one place for what values and indices may be."""
import numpy as np

VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_INT32_MAX = np.iinfo(np.int32).max


def check_value_dtype(dtype, name):
    """``dtype`` as a NumPy dtype, or TypeError naming ``name`` if values cannot have it."""
    dtype = np.dtype(dtype)
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"{name} must have dtype float32 or float64, got {dtype}")
    return dtype


def index_dtype_for(shape, nnz):
    """int32 when every index and offset fits, else int64."""
    return INDEX_DTYPES[0] if max(shape[0], shape[1], nnz) <= _INT32_MAX else INDEX_DTYPES[1]
