"""Graph reorderings, computed on the CPU with ``numba.njit``: Louvain communities and the
graph-clustering order of HP-SpMM (paper 000), HC-SpMM's layout reorganization LOA (paper 001),
cheap locality orders to measure them against (breadth-first, reverse Cuthill-McKee, degree), and the model
that decides whether an order pays (:mod:`numbasparse.reorder.locality`,
``prepare(reorder="auto")``).  ``numbasparse.prepare()`` applies them and hides the permutation
from the caller."""
from .loa import loa
from .louvain import louvain, modularity
from .order import bfs_order, cluster_order, degree_order, mean_intensity, permute, rcm_order, row_window_stats

__all__ = ["bfs_order", "cluster_order", "degree_order", "loa", "louvain", "mean_intensity", "modularity", "permute", "rcm_order",
           "row_window_stats"]
