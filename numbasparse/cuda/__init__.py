"""CUDA kernels (``numba.cuda.jit``), one module per kernel family.

Each module holds compile-once kernel factories and a host-side launcher that takes a
:class:`numbasparse.CSR` and device arrays; :mod:`numbasparse.dispatch` picks among them.
"""
