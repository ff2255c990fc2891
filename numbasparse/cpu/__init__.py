"""CPU backend: ``numba.njit(parallel=True)`` kernels over scipy CSR arrays."""
from .spmm import spmm_rows
from .sddmm import sddmm_rows

__all__ = ["spmm_rows", "sddmm_rows"]
