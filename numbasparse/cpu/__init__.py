"""CPU backend: ``numba.njit(parallel=True)`` kernels over scipy CSR arrays."""
from . import threads

threads.choose_threading_layer()  # before any kernel runs: GNU OpenMP kills forked children (DataLoader workers)

from .fused import attention_rows, sddmm_spmm_rows  # noqa: E402
from .spmm import spmm_rows  # noqa: E402
from .sddmm import sddmm_rows  # noqa: E402

__all__ = ["attention_rows", "sddmm_spmm_rows", "spmm_rows", "sddmm_rows"]
