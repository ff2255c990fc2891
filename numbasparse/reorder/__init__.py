"""Graph reorderings, computed on the CPU with ``numba.njit``: Louvain communities and the
graph-clustering order of HP-SpMM (paper 000).  HC-SpMM's LOA and ``prepare()`` are still
open work (see the issue tracker)."""
from .louvain import louvain, modularity
from .order import cluster_order, permute, row_window_stats

__all__ = ["cluster_order", "louvain", "modularity", "permute", "row_window_stats"]
