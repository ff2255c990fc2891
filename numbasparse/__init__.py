"""numbasparse: sparse kernels for graph neural networks (SpMM, SDDMM), written in Numba."""
from ._compat import provide_numpy_names

provide_numpy_names()  # before numba-cuda compiles: numpy 2.5 (see _compat)

from .api import algorithms, graph_attention, sddmm, sddmm_spmm, spmm, spmm_dense  # noqa: E402
from .csr import CSR  # noqa: E402
from .inputs import from_edge_index  # noqa: E402
from .plan import Plan, prepare  # noqa: E402
from .aot import precompile  # noqa: E402

__version__ = "0.1.0"
__all__ = ["CSR", "Plan", "algorithms", "from_edge_index", "graph_attention", "precompile", "prepare", "sddmm", "sddmm_spmm",
           "spmm", "spmm_dense"]
