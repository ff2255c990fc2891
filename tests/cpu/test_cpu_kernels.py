"""The CPU backend on real-size graphs (bundled, generated, and ../shared/data when present)."""
from pathlib import Path

import numpy as np
import pytest

import numbasparse as ns
from numbasparse import graphs
from numbasparse.reference import sddmm_reference, spmm_reference
from strategies import assert_close

DATA = Path(__file__).parents[3] / "shared" / "data"


def real_size_graphs():
    found = {"default": graphs.default_graph(), "rmat14": graphs.rmat(14, 8)}
    if DATA.is_dir():
        found.update(graphs.load_npz_dir(DATA))
    return found


GRAPHS = real_size_graphs()


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("reduce", ns.api.REDUCTIONS)
@pytest.mark.parametrize("dtype, n", [(np.float32, 33), (np.float64, 64)])
def test_cpu_spmm_on_real_graphs(name, reduce, dtype, n):
    A = GRAPHS[name]
    B = np.random.default_rng().standard_normal((A.shape[1], n)).astype(dtype)
    assert_close(ns.spmm(A, B, reduce=reduce, backend="cpu"), spmm_reference(A, B, reduce), dtype)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_cpu_sddmm_on_real_graphs(name):
    A = GRAPHS[name]
    rng = np.random.default_rng()
    X = rng.standard_normal((A.shape[0], 16)).astype(np.float32)
    Y = rng.standard_normal((A.shape[1], 16)).astype(np.float32)
    assert_close(ns.sddmm(A, X, Y, backend="cpu").data, sddmm_reference(A, X, Y), np.float32)


def test_cpu_int64_indices_and_nonsquare():
    A = graphs.rmat(10, 4)[:700]
    B = np.random.default_rng().standard_normal((A.shape[1], 7))
    dev_free = ns.api.canonical_csr(A, index_dtype=np.int64)
    assert dev_free.indices.dtype == np.int64
    C = ns.cpu.spmm_rows(dev_free, B, "sum")
    assert_close(C, spmm_reference(A, B), np.float64)
