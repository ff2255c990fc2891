"""DeviceView: what the kernels see of a foreign CUDA array (no GPU needed to check it)."""
import numpy as np
import pytest

from fakes import DLPackOnly
from numbasparse.arrays import DeviceView, dense
from numbasparse.cuda.device import simulator_enabled


class FakeCudaArray:
    """Exports only __cuda_array_interface__, like a CuPy or PyTorch array would."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=4096):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}


def test_view_reads_the_interface():
    view = DeviceView(None, FakeCudaArray((3, 5)).__cuda_array_interface__)
    assert (view.ptr, view.shape, view.dtype, view.ndim, view.size) == (4096, (3, 5), np.float32, 2, 15)
    assert view.strides == (20, 4) and view.is_c_contiguous() and view.nbytes == 60
    assert view.__cuda_array_interface__["data"] == (4096, False)


def test_transposed_view_is_not_contiguous():
    view = DeviceView(None, FakeCudaArray((5, 3), strides=(4, 20)).__cuda_array_interface__)
    assert not view.is_c_contiguous()


def test_dense_wraps_foreign_arrays_and_checks_them():
    op = dense(FakeCudaArray((4, 2)), "B", 2)
    assert op.on_device and op.framework == "cai" and isinstance(op.array, DeviceView)
    with pytest.raises(ValueError, match="C-contiguous"):
        dense(FakeCudaArray((4, 2), strides=(4, 16)), "B", 2)
    with pytest.raises(ValueError, match="2-D"):
        dense(FakeCudaArray((4,)), "B", 2)
    with pytest.raises(TypeError, match="float32, float64, float16 or bfloat16"):
        dense(FakeCudaArray((4, 2), typestr="<i8"), "B", 2)


def test_a_broadcast_row_is_contiguous_with_the_c_strides():
    """NumPy calls a (1, n) row broadcast from (n,) C-contiguous (stride 0 on its size-1 axis);
    the operand keeps its memory but takes the C strides, which Numba's copy to the GPU needs."""
    row = np.broadcast_to(np.arange(3, dtype=np.float32), (1, 3))
    op = dense(row, "X", 2)
    assert op.array.strides == (12, 4) and np.shares_memory(op.array, row) and not op.array.flags.writeable
    assert np.array_equal(op.array, row)
    view = DeviceView(None, FakeCudaArray((1, 3), strides=(0, 4)).__cuda_array_interface__)
    assert view.is_c_contiguous() and view.__cuda_array_interface__["strides"] is None


def test_a_numba_array_broadcast_along_a_longer_axis_is_refused():
    """Numba's interface says C-contiguous (strides None) for any stride-0 axis; a row broadcast
    to two rows must still be refused (the kernels would read past it), one row taken."""
    if simulator_enabled():
        pytest.skip("the simulator's device arrays are NumPy arrays")
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    class Memory:  # (a stand-in for device memory: no GPU needed to make the array)
        device_ctypes_pointer = type("Pointer", (), {"value": 4096})()

    with pytest.raises(ValueError, match="C-contiguous"):
        dense(DeviceNDArray((2, 3), (0, 4), np.float32, gpu_data=Memory()), "B", 2)
    with pytest.raises(ValueError, match="C-contiguous"):
        dense(DeviceNDArray((3, 2), (4, 0), np.float32, gpu_data=Memory()), "B", 2)
    op = dense(DeviceNDArray((1, 3), (0, 4), np.float32, gpu_data=Memory()), "B", 2)
    assert isinstance(op.array, DeviceView) and op.array.is_c_contiguous() and op.array.ptr == 4096
    assert op.array.__cuda_array_interface__["strides"] is None  # the kernels see C strides


def test_a_float16_cuda_array_is_seen_as_its_bits_with_its_dtype_kept():
    op = dense(FakeCudaArray((4, 2), typestr="<f2"), "B", 2)  # a CuPy float16 array
    assert op.dtype == np.float16 and op.array.dtype == np.uint16 and op.array.ptr == 4096
    assert op.array.__cuda_array_interface__["typestr"] == "<u2"  # what the kernels are typed for
    assert op.array.strides == (4, 2) and op.array.is_c_contiguous()


def test_a_bfloat16_torch_tensor_is_seen_as_its_bits_with_its_dtype_kept():
    torch = pytest.importorskip("torch")
    from numbasparse.arrays import _torch_dtypes

    _torch_dtypes()
    t = torch.zeros((3, 4), dtype=torch.bfloat16)
    view = DeviceView.of_torch(t)
    assert view.dtype == np.uint16 and view.logical.name == "bfloat16" and view.strides == (8, 2)
    host = dense(t, "B", 2)  # a CPU tensor: NumPy's (ml_dtypes) bfloat16, no copy
    assert host.dtype.name == "bfloat16" and np.shares_memory(host.array, t.view(torch.int16).numpy())


def test_dense_refuses_rows_of_two_gibibytes():
    # the kernels address a row as a 32-bit row index times a 32-bit row stride (intrinsics)
    with pytest.raises(ValueError, match="B has rows of 2147483648 bytes"):
        dense(FakeCudaArray((2, 2**29)), "B", 2)
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.float64), shape=(1, 2**28), strides=(0, 0))
    with pytest.raises(ValueError, match="X has rows"):
        dense(huge, "X", 2)
    assert dense(FakeCudaArray((2, 2**29 - 1)), "B", 2).shape == (2, 2**29 - 1)


@pytest.mark.parametrize("make", [lambda t: t, lambda t: t.T, lambda t: t[1:, ::2], lambda t: t[:, 2:3]],
                         ids=["contiguous", "transposed", "strided", "column"])
def test_torch_view_from_attributes_matches_the_interface_rule(make):
    torch = pytest.importorskip("torch")
    from numbasparse.arrays import _torch_dtypes

    _torch_dtypes()
    t = make(torch.arange(24, dtype=torch.float64).reshape(4, 6))
    view = DeviceView.of_torch(t)
    a = t.numpy()
    interface = {"shape": a.shape, "typestr": a.dtype.str, "data": (t.data_ptr(), False), "strides": a.strides}
    expected = DeviceView(t, interface)
    assert (view.ptr, view.shape, view.strides, view.dtype, view.size) == \
        (expected.ptr, expected.shape, expected.strides, expected.dtype, expected.size)
    assert view.is_c_contiguous() == expected.is_c_contiguous() == a.flags.c_contiguous


def test_contiguous_view_exports_no_strides_so_numba_types_it_as_c_layout():
    from numba.cuda.typing.typeof import _typeof_cuda_array_interface

    view = DeviceView(None, FakeCudaArray((3, 5), strides=(20, 4)).__cuda_array_interface__)
    assert view.__cuda_array_interface__["strides"] is None
    assert _typeof_cuda_array_interface(view.__cuda_array_interface__, None).layout == "C"


def test_gpu_out_of_memory_becomes_a_memory_error_naming_the_size():
    from numbasparse.cuda.device import allocating, out_of_memory

    class CudaAPIError(Exception):
        code = 2

    class OutOfMemoryError(RuntimeError):
        pass

    for error in (CudaAPIError(2, "CUDA_ERROR_OUT_OF_MEMORY"), OutOfMemoryError("CUDA out of memory. Tried ...")):
        replaced = out_of_memory(error, "an output of shape (10, 10)", 3 * 2**30)
        assert isinstance(replaced, MemoryError) and "3221225472 bytes (3.00 GiB)" in str(replaced)
        assert "an output of shape (10, 10)" in str(replaced)
    other = ValueError("something else")
    assert out_of_memory(other, "x", 1) is other
    with pytest.raises(MemoryError, match="the operands"):
        with allocating("the operands", 8):
            raise CudaAPIError(2, "oom")


@pytest.mark.gpu
def test_an_output_too_large_for_the_gpu_raises_memory_error():
    torch = pytest.importorskip("torch")
    from numbasparse import arrays

    B = arrays.dense(torch.ones(4, 4, device="cuda"), "B", 2)
    with pytest.raises(MemoryError, match="out of GPU memory allocating an output of shape"):
        arrays.empty_like_framework(B, (2**20, 2**20), np.dtype(np.float32))  # 4 TiB


def test_dlpack_arrays_are_taken_without_a_copy():
    import scipy.sparse as sp

    import numbasparse as ns
    from numbasparse import arrays

    B = np.random.default_rng(0).standard_normal((6, 3))
    seen = arrays.dense(DLPackOnly(B), "B", 2)
    assert np.shares_memory(seen.array, B)
    A = sp.random(5, 6, density=0.5, format="csr", random_state=1)
    np.testing.assert_allclose(ns.spmm(A, DLPackOnly(B)), ns.spmm(A, B))


def test_dlpack_array_on_another_device_is_refused_by_name():
    from numbasparse import arrays

    class Elsewhere(DLPackOnly):
        def __dlpack_device__(self):
            return (14, 0)  # a oneAPI device

    with pytest.raises(TypeError, match="B is a DLPack array on device type 14"):
        arrays.dense(Elsewhere(np.zeros((2, 2))), "B", 2)


def test_a_dlpack_array_cannot_be_out():
    import scipy.sparse as sp

    import numbasparse as ns

    A = sp.random(5, 6, density=0.5, format="csr", random_state=1)
    with pytest.raises(TypeError, match="out must be"):
        ns.spmm(A, np.ones((6, 3)), out=DLPackOnly(np.zeros((5, 3))))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_to_device_keeps_the_dtype_and_the_values(dtype):
    from numbasparse.arrays import to_device
    from numbasparse.dtypes import as_dtype

    host = np.random.default_rng(0).standard_normal((5, 3)).astype(as_dtype(dtype))
    copy = to_device(host)
    assert copy.dtype == host.dtype
    np.testing.assert_array_equal(copy.copy_to_host().view(np.uint8), host.view(np.uint8))
