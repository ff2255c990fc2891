"""Graph reorderings, computed on the CPU with ``numba.njit``: Louvain communities and the
graph-clustering order of HP-SpMM (paper 000), and HC-SpMM's layout reorganization LOA (paper
001).  ``numbasparse.prepare()`` applies them and hides the permutation from the caller."""
from .loa import loa
from .louvain import louvain, modularity
from .order import cluster_order, mean_intensity, permute, row_window_stats

__all__ = ["cluster_order", "loa", "louvain", "mean_intensity", "modularity", "permute", "row_window_stats"]
