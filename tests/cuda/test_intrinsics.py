"""The intrinsics' contracts, on the simulator (their Python versions) or a GPU (the PTX)."""
import numpy as np
import pytest
from numba import cuda

from numbasparse.cuda.intrinsics import flagged_parts, flagged_words


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_published_value_is_taken_whole_with_its_flag(dtype):
    publish, take, _ = flagged_parts(np.dtype(dtype).itemsize * 8)

    @cuda.jit
    def roundtrip(words, values, out, ready):
        i = cuda.grid(1)
        if i < values.shape[0]:
            if i % 2 == 0:  # odd values are never published: their flags stay clear
                publish(words, i, values[i])
            ok, out[i] = take(words, i)
            ready[i] = ok

    values = np.array([-2.5, 7.0, np.inf, 3.0, -0.0, 1.0, 1e-30, np.nan, np.pi, 5.0], dtype)
    words = cuda.to_device(np.zeros(flagged_words(values.size, np.dtype(dtype).itemsize), np.uint64))
    out = cuda.to_device(np.full(values.size, 42, dtype))
    ready = cuda.to_device(np.zeros(values.size, np.bool_))
    roundtrip[1, 32](words, cuda.to_device(values), out, ready)
    assert list(ready.copy_to_host()) == [i % 2 == 0 for i in range(values.size)]
    taken = out.copy_to_host()
    assert taken[::2].tobytes() == values[::2].tobytes()  # bit for bit, -0.0 included
