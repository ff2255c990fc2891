"""CPU backend: ``numba.njit(parallel=True)`` kernels over scipy CSR arrays."""
from .fused import attention_rows, sddmm_spmm_rows
from .spmm import spmm_rows
from .sddmm import sddmm_rows

__all__ = ["attention_rows", "sddmm_spmm_rows", "spmm_rows", "sddmm_rows"]
