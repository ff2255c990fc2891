"""Host-side preprocessing of a sparsity pattern, for every backend: NumPy and ``numba.njit`` on
the CPU, no CUDA.  Each function takes the pattern's arrays (``indptr``, ``indices``, shape) and
returns host arrays; the kernel families upload what they need once and keep it in the
matrix's cache (:mod:`numbasparse.cache`).

- :mod:`.rows`: where work starts and what must be filled (HP-SpMM's segment rows, rows to fill,
  rows crossing blocks, empty rows per lane group);
- :mod:`.slab_tiles`: the column-slab SpMM's 2-D tiles;
- :mod:`.row_windows`: HC-SpMM's 16-row windows and 16x8 dense tiles;
- :func:`.rows.longest_first`: G-Sparse's row load-balancing order.
"""
