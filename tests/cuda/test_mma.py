"""Tensor-core MMA intrinsics: each shape against a NumPy product of the same fragments (on the
simulator through its emulation, on a GPU through the instruction), and the PTX accepted by
ptxas for sm_80 and sm_90 (no GPU needed)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

from numbasparse.cuda import mma
from numbasparse.cuda.device import simulator_enabled
from numbasparse.dtypes import bfloat16

TF32 = mma.mma("tf32")
TO_TF32 = mma.to_tf32()


@cuda.jit
def tf32_product(A, B, C, D):
    lane = cuda.threadIdx.x
    g, t = lane // 4, lane % 4
    d = TF32(TO_TF32(A[g, t]), TO_TF32(A[g + 8, t]), TO_TF32(A[g, t + 4]), TO_TF32(A[g + 8, t + 4]),
             TO_TF32(B[t, g]), TO_TF32(B[t + 4, g]), C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1])
    D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1] = d[0], d[1], d[2], d[3]


def half_product_kernel(kind):
    product = mma.mma(kind)
    pack = mma.pack_bits

    @cuda.jit
    def half_product(A, B, C, D):  # A, B: 16-bit values as uint16 bits
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4
        c = 2 * t
        d = product(pack(A[g, c], A[g, c + 1]), pack(A[g + 8, c], A[g + 8, c + 1]),
                    pack(A[g, c + 8], A[g, c + 9]), pack(A[g + 8, c + 8], A[g + 8, c + 9]),
                    pack(B[c, g], B[c + 1, g]), pack(B[c + 8, g], B[c + 9, g]),
                    C[g, c], C[g, c + 1], C[g + 8, c], C[g + 8, c + 1])
        D[g, c], D[g, c + 1], D[g + 8, c], D[g + 8, c + 1] = d[0], d[1], d[2], d[3]

    return half_product


def run(kernel, *host):
    if not simulator_enabled() and cuda.get_current_device().compute_capability < (8, 0):
        pytest.skip("mma.sync with f32 accumulators of these shapes needs sm_80")
    *inputs, D = [cuda.to_device(x) for x in host]
    kernel[1, 32](*inputs, D)
    return D.copy_to_host()


def test_tf32_mma_is_the_product_of_rounded_fragments():
    rng = np.random.default_rng(0)
    A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8, 8), (16, 8)))
    D = run(tf32_product, A, B, C, np.full((16, 8), np.nan, np.float32))
    expected = mma.tf32_bits(A).astype(np.float64) @ mma.tf32_bits(B).astype(np.float64) + C
    np.testing.assert_allclose(D, expected, rtol=1e-5, atol=1e-5)
    # TF32 keeps 10 mantissa bits: the float32 product differs by about 2^-11 relative
    exact = A.astype(np.float64) @ B.astype(np.float64) + C
    assert np.linalg.norm(D - exact) / np.linalg.norm(exact) < 2e-3


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_half_mma_is_the_product_of_the_fragments(kind):
    half = np.dtype(np.float16) if kind == "f16" else bfloat16()
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((16, 16)).astype(half), rng.standard_normal((16, 8)).astype(half)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    D = run(half_product_kernel(kind), A.view(np.uint16), B.view(np.uint16), C, np.full((16, 8), np.nan, np.float32))
    expected = A.astype(np.float64) @ B.astype(np.float64) + C
    np.testing.assert_allclose(D, expected, rtol=1e-5, atol=1e-5)


def test_tf32_rounding_is_to_nearest_ties_away():
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -10)  # TF32's unit in the last place at 1
    assert mma.tf32_bits(one + ulp / 4) == one
    assert mma.tf32_bits(one + ulp / 2) == one + ulp  # a tie: away from zero
    assert mma.tf32_bits(-(one + ulp / 2)) == -(one + ulp)
    assert np.isnan(mma.tf32_bits(np.float32(np.nan))) and mma.tf32_bits(np.float32(np.inf)) == np.inf


def test_layouts_cover_every_element_once():
    for kind in mma.KINDS:
        m, n, k = mma.SHAPES[kind]
        a, b, c = mma.LAYOUTS[kind]
        flat = (lambda regs: [x for lane in regs for r in lane for x in (r if kind != "tf32" else [r])])
        assert sorted(flat(a)) == [(i, j) for i in range(m) for j in range(k)]
        assert sorted(flat(b)) == [(i, j) for i in range(k) for j in range(n)]
        assert sorted(x for lane in c for x in lane) == [(i, j) for i in range(m) for j in range(n)]
    with pytest.raises(ValueError, match="kind must be one of"):
        mma.mma("f8")


PTX_CHECK = """
import shutil, subprocess, sys, tempfile
from pathlib import Path
import nvidia.cuda_nvcc
from numba import cuda, float32, uint16
sys.path.insert(0, sys.argv[1])
import test_mma
ptxas = shutil.which("ptxas") or str(Path(nvidia.cuda_nvcc.__path__[0]) / "bin" / "ptxas")
f32, u16 = float32[:, ::1], uint16[:, ::1]
kernels = [(test_mma.tf32_product.py_func, (f32, f32, f32, f32))]
kernels += [(test_mma.half_product_kernel(k).py_func, (u16, u16, f32, f32)) for k in ("f16", "bf16")]
from numba import boolean, int32, int64
from numbasparse.cuda import hc
i32, i64 = int32[::1], int64[::1]
fragments = (i64, i64, i64, i64, i64, int32[:, ::1], boolean[::1])  # (windows, frag_base, frag_src, paths)
kernels.append((hc.spmm_hc_kernel("<f4", "<i4", True, True).py_func, (i32, i32, float32[::1], *fragments, f32, f32)))
kernels += [(hc.spmm_hc_kernel(fmt, "<i4", True, True).py_func, (i32, i32, uint16[::1], *fragments, u16, u16))
            for fmt in ("<f2", "bf16")]
for fn, signature in kernels:
    for cc in ((8, 0), (9, 0)):
        ptx, _ = cuda.compile_ptx(fn, signature, cc=cc)
        assert "mma.sync.aligned" in ptx
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "k.ptx"
            path.write_text(ptx)
            subprocess.run([ptxas, f"-arch=sm_{cc[0]}{cc[1]}", str(path), "-o", str(Path(tmp) / "k.cubin")], check=True)
print("ok")
"""


def test_the_ptx_assembles_for_sm80_and_sm90():
    """The inline PTX compiled by NVVM and assembled by ptxas (no GPU needed): the intrinsics'
    test kernels and HC-SpMM's tensor-core tile path."""
    ptxas = pytest.importorskip("nvidia.cuda_nvcc")  # noqa: F841  (ptxas ships with it)
    script = PTX_CHECK
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    done = subprocess.run([sys.executable, "-c", script, os.path.dirname(__file__)], env=env, capture_output=True,
                          text=True, timeout=600)
    if "CudaSupportError" in done.stderr and "NVVM" in done.stderr:
        pytest.skip("NVVM not found")
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_tf32_rounding_keeps_a_nan_whose_payload_is_in_the_dropped_bits():
    nan = np.array([0x7F800001], np.uint32).view(np.float32)
    assert np.isnan(mma.tf32_bits(nan))
