"""The fast launch's parameter packing, checked against a recording stand-in for the driver
(no GPU needed: what reaches cuLaunchKernel is the slot buffer)."""
import numpy as np
import pytest

from numba.core import types

from numbasparse.arrays import DeviceView
from numbasparse.cache import MatrixCache
from numbasparse.cuda import launch
from fakes import compiled_kernel, stand_in_driver, view


@pytest.fixture
def driver(monkeypatch):
    return stand_in_driver(monkeypatch)


def test_launch_packs_arrays_in_numba_abi_and_scalars_as_c_values(driver):
    idx, B, C = view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384)
    assert driver.fast.launch((2, 3), 128, 0, (idx, B, C, -1, 0.5))
    function, grid, block, stream, slots = driver.calls[-1]
    assert (function, grid, block, stream) == (1234, (2, 3, 1), (128, 1, 1), 0)
    assert slots[:7] == [0, 0, 5, 4, 4096, 5, 4]
    assert slots[7:16] == [0, 0, 12, 4, 8192, 4, 3, 12, 4]
    assert slots[25] == 2**64 - 1 and slots[26] == np.float32(0.5).view(np.uint32)


def test_launch_refuses_arguments_of_another_type(driver):
    idx, C = view((5,), 4096, "<i4"), view((4, 3), 16384)
    assert not driver.fast.launch(1, 32, 0, (idx, view((4, 3), 8192, "<f8"), C, 1, 0.5))
    strided = DeviceView(None, {"shape": (4, 3), "typestr": "<f4", "data": (8192, False), "strides": (4, 16)})
    assert not driver.fast.launch(1, 32, 0, (idx, strided, C, 1, 0.5))
    assert driver.calls == []


def test_bound_launch_writes_only_the_new_pointers(driver, monkeypatch):
    kernel = object()
    monkeypatch.setitem(launch._fast_launch, kernel, (driver.fast,))
    idx = view((5,), 4096, "<i4")
    bound = launch.bind(kernel, (7, 2), 64, (idx, view((4, 3), 8192), view((4, 3), 16384), 9, 1.0),
                        variable=(1, 2))
    assert bound(0, view((4, 3), 1 << 20), view((4, 3), 1 << 21))
    assert driver.fast.launch((7, 2), 64, 0, (idx, view((4, 3), 1 << 20), view((4, 3), 1 << 21), 9, 1.0))
    (*_, bound_slots), (*_, packed_slots) = driver.calls
    assert bound_slots == packed_slots and driver.calls[0][1:3] == ((7, 2, 1), (64, 1, 1))


@pytest.mark.parametrize("other", [view((5, 3), 1 << 20), view((4, 3), 1 << 20, "<f8"), np.ones((4, 3), np.float32)],
                         ids=["shape", "dtype", "host array"])
def test_bound_launch_refuses_an_array_unlike_the_bound_one(driver, monkeypatch, other):
    kernel = object()
    monkeypatch.setitem(launch._fast_launch, kernel, (driver.fast,))
    args = (view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384), 9, 1.0)
    bound = launch.bind(kernel, 1, 32, args, variable=(1, 2))
    assert not bound(0, other, view((4, 3), 1 << 21))
    assert driver.calls == []


def test_bind_without_a_fast_launch_gives_none():
    assert launch.bind(object(), 1, 32, (), variable=()) is None


def test_run_bound_binds_at_the_second_call(driver, monkeypatch):
    kernel = object()
    monkeypatch.setitem(launch._fast_launch, kernel, (driver.fast,))
    cache = MatrixCache()
    idx = view((5,), 4096, "<i4")
    for call in range(3):
        args = (idx, view((4, 3), 8192 * (call + 1)), view((4, 3), 1 << 20), 9, 1.0)
        launch.run_bound(cache, "k", kernel, 2, 32, 0, args, (1, 2))
        assert isinstance(cache.get("bound", "k"), launch.BoundLaunch) == (call >= 1)
        assert driver.calls[-1][4][7 + 4] == 8192 * (call + 1)  # B's data pointer of this call
    assert len(driver.calls) == 3


class Dispatcher:
    """A stand-in Numba dispatcher: its compiled overloads (in compile order, overload i's
    function handle 1000 + i) and the arguments of each launch through Numba."""

    def __init__(self, *signatures):
        self.overloads, self.numba_launches = {}, []
        for argument_types in signatures:
            self.compile(argument_types)

    def compile(self, argument_types):
        self.overloads[argument_types] = compiled_kernel(argument_types, handle=1000 + len(self.overloads))

    def __getitem__(self, config):
        return lambda *args: self.numba_launches.append(args)


def signature(index=types.int32, scalar=types.float32):
    """The stand-in fast launch's signature with another index width or scalar type."""
    matrix = types.Array(types.float32, 2, "C")
    return types.Array(index, 1, "C"), matrix, matrix, types.int64, scalar


def arguments(index="<i4", scalar=0.5):
    return view((5,), 4096, index), view((4, 3), 8192), view((4, 3), 16384), 9, scalar


def test_a_dispatcher_with_two_index_widths_fast_launches_both(driver):
    """Both compiled before the first launch: after Numba's, each width launches through its own
    parameter buffer, and each binds."""
    kernel = Dispatcher(signature(types.int32), signature(types.int64))
    narrow, wide = arguments("<i4"), arguments("<i8")
    for args in (narrow, narrow, wide):
        launch.run(kernel, 2, 32, 0, *args)
    assert kernel.numba_launches == [narrow]
    assert [(function, slots[3]) for function, *_, slots in driver.calls] == [(1000, 4), (1001, 8)]  # index itemsize
    first, second = launch._fast_launch[kernel]
    assert first.params_address != second.params_address
    assert launch.bind(kernel, 2, 32, narrow, (1, 2)).fast is first
    assert launch.bind(kernel, 2, 32, wide, (1, 2)).fast is second


def test_an_index_width_compiled_after_the_first_fast_launch_gets_its_own(driver):
    """The int32 kernel's fast launch is kept (with its failure count); the int64 one launches
    through Numba once, then fast, and binds."""
    kernel = Dispatcher(signature(types.int32))
    narrow, wide = arguments("<i4"), arguments("<i8")
    launch.run(kernel, 2, 32, 0, *narrow)
    (first,) = launch._fast_launch[kernel]
    kernel.compile(signature(types.int64))  # as Numba's launch of the int64 call does
    cache = MatrixCache()
    for _ in range(3):
        launch.run_bound(cache, "wide", kernel, 2, 32, 0, wide, (1, 2))
    assert kernel.numba_launches == [narrow, wide]
    assert [function for function, *_ in driver.calls] == [1001, 1001]
    assert launch._fast_launch[kernel][0] is first
    assert cache.get("bound", "wide").fast is launch._fast_launch[kernel][1]


def test_overloads_differing_only_in_a_scalar_type_take_numbas_launch(driver, monkeypatch):
    """pack matches a scalar loosely, so it could pick another overload than Numba would; their
    Numba launches look for new overloads only when the dispatcher has compiled one."""
    kernel = Dispatcher(signature(scalar=types.float32), signature(scalar=types.float64))
    registered = []
    register = launch._register
    monkeypatch.setattr(launch, "_register", lambda k: registered.append(k) or register(k))
    args = arguments()
    launch.run(kernel, 2, 32, 0, *args)
    launch.run(kernel, 2, 32, 0, *args)
    assert kernel.numba_launches == [args, args] and driver.calls == [] and len(registered) == 1
    assert launch.bind(kernel, 2, 32, args, (1, 2)) is None


def test_an_overload_alike_in_arrays_compiled_later_ends_the_fast_launch_of_both(driver):
    """The float32 kernel launched fast until a float64 one came; other index widths keep theirs."""
    kernel = Dispatcher(signature(scalar=types.float32))
    narrow, wide = arguments("<i4"), arguments("<i8")
    launch.run(kernel, 2, 32, 0, *narrow)
    kernel.compile(signature(scalar=types.float64))
    kernel.compile(signature(types.int64))
    launch.run(kernel, 2, 32, 0, *wide)  # Numba's launch, after which the table is made again
    launch.run(kernel, 2, 32, 0, *narrow)
    launch.run(kernel, 2, 32, 0, *wide)
    assert kernel.numba_launches == [narrow, wide, narrow]
    assert [function for function, *_ in driver.calls] == [1002]


def test_a_driver_error_sends_only_that_call_to_numba(driver, monkeypatch):
    """An error (nothing launched) makes the call fall back; the fast path stays on unless
    FAST_LAUNCH_FAILURES errors come in a row."""
    results = iter([(1,), (0,)] + [(1,)] * launch.FAST_LAUNCH_FAILURES)
    monkeypatch.setattr(launch, "_driver", lambda: (lambda *args: next(results), None))
    args = (view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384), 1, 0.5)
    assert not driver.fast.launch(1, 32, 0, args) and driver.fast.enabled
    assert driver.fast.launch(1, 32, 0, args) and driver.fast.failures == 0
    for _ in range(launch.FAST_LAUNCH_FAILURES):
        assert not driver.fast.launch(1, 32, 0, args)
    assert not driver.fast.enabled


def test_a_driver_error_in_a_bound_launch_goes_to_numba_once(driver, monkeypatch):
    """The bound launch's driver error is counted once and the call goes straight to Numba's
    launch, not through the fast path's driver call a second time."""
    numba_launches = []

    class Kernel:
        def __getitem__(self, config):
            return lambda *args: numba_launches.append((config, args))

    kernel = Kernel()
    monkeypatch.setitem(launch._fast_launch, kernel, (driver.fast,))
    args = (view((5,), 4096, "<i4"), view((4, 3), 8192), view((4, 3), 16384), 9, 1.0)
    cache = MatrixCache()
    cache.put("bound", "k", launch.bind(kernel, 2, 32, args, variable=(1, 2)))
    driver_calls = []
    monkeypatch.setattr(launch, "_driver", lambda: (lambda *a: driver_calls.append(a) or (1,), None))
    launch.run_bound(cache, "k", kernel, 2, 32, 0, args, (1, 2))
    assert len(driver_calls) == 1 and driver.fast.failures == 1
    assert numba_launches == [((2, 32, 0), args)]


def test_a_bound_launch_holds_its_fixed_arguments(driver, monkeypatch):
    """The scratch or matrix arrays a bound launch points to live as long as it does."""
    kernel = object()
    monkeypatch.setitem(launch._fast_launch, kernel, (driver.fast,))
    idx = view((5,), 4096, "<i4")
    bound = launch.bind(kernel, 1, 32, (idx, view((4, 3), 8192), view((4, 3), 16384), 9, 1.0), variable=(1, 2))
    assert bound.fixed[0] is idx and len(bound.fixed) == 3


class _TargetContext:
    """What KernelFiles asks of Numba's target context, without a GPU."""

    def refresh(self):
        pass

    def codegen(self):
        return type("Codegen", (), {"magic_tuple": lambda self: ((12, 8), (9, 0))})()


def test_kernel_file_that_does_not_unpickle_is_compiled_again(tmp_path, monkeypatch):
    import numba

    from numbasparse import disk

    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    files, sig, context = launch.KernelFiles("test.kernel", "(1, 'float32')"), (numba.float32[::1],), _TargetContext()
    before = dict(launch.kernel_file_counts)
    assert files.load_overload(sig, context) is None  # no file yet
    assert disk.store("kernels", files.name, files.key(sig, context), b"not a pickle")
    assert files.load_overload(sig, context) is None  # a foreign payload under the right key
    assert launch.kernel_file_counts["missed"] == before["missed"] + 2
    assert launch.kernel_file_counts["loaded"] == before["loaded"]


def test_kernel_file_key_names_factory_configuration_signature_and_device():
    import numba

    files, other, context = launch.KernelFiles("hp.k", "(1,)"), launch.KernelFiles("hp.k", "(2,)"), _TargetContext()
    f32, f64 = (numba.float32[::1],), (numba.float64[::1],)
    key = files.key(f32, context)
    assert "hp.k" in key and "(1,)" in key and "(9, 0)" in key and "numba-cuda=" in key
    assert key != other.key(f32, context) != files.key(f64, context)


@pytest.mark.gpu
def test_a_new_process_loads_the_kernels_the_last_one_compiled(tmp_path):
    """Kernel files across processes: the first compiles and stores, the second loads every
    kernel (compiles none) and gets the same results; after the files are damaged, the third
    compiles again and rewrites them."""
    import json
    import os
    import subprocess
    import sys

    code = """if True:
        import json, numpy as np, scipy.sparse as sp, numbasparse as ns
        from numbasparse.cuda import launch
        A = sp.random(300, 200, density=0.05, format="csr", random_state=1, dtype=np.float32)
        B = np.random.default_rng(2).standard_normal((200, 64)).astype(np.float32)
        X = np.random.default_rng(3).standard_normal((300, 64)).astype(np.float32)
        csr = ns.CSR.from_scipy(A)
        out = [float(ns.spmm(csr, B).sum()), float(ns.spmm(csr, B, reduce="max").sum()), float(ns.sddmm(csr, X, B).sum())]
        print(json.dumps(dict(launch.kernel_file_counts, out=out)))
    """
    env = dict(os.environ, NUMBASPARSE_CACHE=str(tmp_path))

    def run():
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["stored"] >= 3 and first["loaded"] == 0
    assert second["loaded"] == first["stored"] and second["stored"] == second["missed"] == 0
    assert second["out"] == first["out"]
    for path in (tmp_path / "kernels").iterdir():
        path.write_bytes(path.read_bytes()[:-100])
    third = run()
    assert third["loaded"] == 0 and third["stored"] == first["stored"] and third["out"] == first["out"]


def test_kernel_file_key_follows_the_family_module_constants(monkeypatch):
    """A test or tool that changes a module constant a kernel compiles in gets its own kernel files."""
    from numbasparse.cuda import hc

    before = launch._module_constants(hc)
    monkeypatch.setattr(hc, "FUSED_K", hc.FUSED_K // 2)
    assert launch._module_constants(hc) != before


def test_kernel_files_are_off_once_the_sources_differ_from_those_imported(monkeypatch):
    import numba

    monkeypatch.setattr(launch, "_IMPORTED_SOURCES", [("elsewhere.py", 0, 0)])
    assert launch.KernelFiles("hp.k", "(1,)").key((numba.float32[::1],), _TargetContext()) is None


@pytest.mark.gpu
def test_precompiled_kernels_serve_a_new_process_on_graphs_it_never_saw(tmp_path):
    """precompile(n=[64]) then, in a new process, auto's spmm (sum, max) and sddmm on R-MAT and
    the bundled graph at N = 64: every kernel is loaded, none compiled."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBASPARSE_CACHE=str(tmp_path))
    subprocess.run([sys.executable, "-m", "numbasparse", "compile", "--n", "64"], env=env, check=True,
                   capture_output=True)
    code = """if True:
        import json, numpy as np, numbasparse as ns
        from numba import cuda
        from numbasparse import graphs
        from numbasparse.cuda import launch
        for A in (graphs.rmat(14, 8), graphs.default_graph()):
            csr = ns.CSR.from_scipy(A.astype(np.float32))
            B = cuda.to_device(np.random.default_rng(0).standard_normal((A.shape[1], 64)).astype(np.float32))
            ns.spmm(csr, B); ns.spmm(csr, B, reduce="max"); ns.sddmm(csr, B, B)
        print(json.dumps(launch.kernel_file_counts))
    """
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert counts["loaded"] > 0 and counts["missed"] == 0, counts


def test_a_kernel_factory_gives_one_kernel_however_its_defaults_are_passed():
    from numbasparse.cuda import hp

    given = hp.spmm_hp_kernel(0, 32, 4, 1, "<f4", "<i4", 2, False, None)
    assert hp.spmm_hp_kernel(0, 32, 4, 1, "<f4", "<i4", 2) is given  # what precompile and tests call
    assert hp.spmm_hp_kernel(0, 32, 4, 1, "<f4", "<i4", depth=2, single=False) is given
    assert hp.spmm_hp_kernel(0, 32, 4, 1, "<f4", "<i4", 2, True) is not given


def test_a_kernel_factory_takes_positional_or_keyword_parameters_only():
    with pytest.raises(TypeError, match="positional-or-keyword parameters only"):
        @launch.kernel_factory
        def factory(value_dtype, *, depth=1):
            return None


@pytest.mark.parametrize("n", [8, 128])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_precompile_makes_every_hp_variant_of_a_width(dtype, n, monkeypatch):
    """Which HP-SpMM variant auto runs (gather depth, launch mode, the single launch's block order
    and memset) depends on the graph: precompile makes all of them for each width and dtype, on the
    segments the rule takes (balanced where whole warps cover N: N = 128), 16-bit ones in their
    single launch only (also after a memset of C, for graphs of long runs of empty rows, and on
    equal entries scattered: on long rows it runs for them alone), HP-SDDMM's walk past runs of
    empty rows and the accumulating kernel (float32, float64)."""
    import scipy.sparse as sp
    from numbasparse import aot, arrays, csr
    from numbasparse.cuda import hp
    from numbasparse.dtypes import as_dtype

    made = []
    factory = hp.spmm_hp_kernel

    def recording(code, lanes, vec, cf, fmt, index, depth, single, out_fmt=None, adds_to_c=False, strided=False,
                  zeroed=False, mapped=False, balanced=False):
        made.append((depth, single) + (("adds",) if adds_to_c else ()) + (("strided",) if strided else ())
                    + (("zeroed",) if zeroed else ()) + (("shuffled",) if mapped else ())
                    + (("balanced",) if balanced else ()))
        return factory(code, lanes, vec, cf, fmt, index, depth, single, out_fmt, adds_to_c, strided, zeroed, mapped,
                       balanced)

    monkeypatch.setattr(hp, "spmm_hp_kernel", recording)
    skipping = []
    sddmm_factory = hp.sddmm_hp_kernel

    def recording_sddmm(vec, group, fmt, skips_runs):
        skipping.append(skips_runs)
        return sddmm_factory(vec, group, fmt, skips_runs)

    monkeypatch.setattr(hp, "sddmm_hp_kernel", recording_sddmm)
    dtype = as_dtype(dtype)
    A = csr.CSR.from_scipy(sp.random(6, 5, density=0.4, format="csr", random_state=0), dtype=dtype)
    rng = np.random.default_rng(0)
    B, X = (arrays.to_device(rng.standard_normal(shape).astype(dtype)) for shape in ((5, n), (6, n)))
    hp.precompile_variants(A, *aot._kernel_operands(A, B, X), "sum")
    whole_warps = n == 128  # (balanced segments; groups sharing a warp: equal ones, in any block order)
    if dtype.itemsize == 2:
        expected = [(d, True) + extra for d in (1, 4) for extra in
                    ((("balanced",), ("zeroed", "balanced")) if whole_warps else
                     ((), ("strided",), ("strided", "zeroed"), ("zeroed",)))]
    else:
        kernels = [(1, False), (1, True), (2, False), (2, True), (1, False, "adds"), (2, False, "adds")]
        expected = [k + ("balanced",) for k in kernels] if whole_warps else kernels
    assert sorted(made) == sorted(expected)
    assert skipping == [True]  # HP-SDDMM's walk past runs of empty rows, which these graphs lack
