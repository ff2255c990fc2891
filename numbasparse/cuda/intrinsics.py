"""Warp intrinsics that also run on the Numba CUDA simulator.

The simulator (``NUMBA_ENABLE_CUDASIM=1``) has no ``syncwarp`` and no shuffles, so the
kernels call these wrappers instead (``syncwarp_lanes(mask)``: a barrier of the lanes in
``mask`` only, for kernels whose lane groups run loops of different lengths).  On a GPU they
are the hardware instructions.  On the simulator a warp barrier becomes a block barrier over
the threads still running (stronger than needed, so it is still correct), and a shuffle
exchanges values through a per-block table between two such barriers.  ``syncblock()`` is
``cuda.syncthreads()``, kept apart so that on the simulator warp barriers elsewhere in the
block cannot release it.  Memory operations Numba does not emit are built here from LLVM IR:
``vector_load`` (one 8- or 16-byte load), ``atomic_max_float``/``atomic_min_float`` (one
integer atomic on a float's bits), ``vector_red_add`` (one ``red.global.add.v2/.v4.f32``,
inline PTX) and ``flagged_parts`` (a value and its ready flag in one 64-bit store, inline PTX);
they too have plain-Python simulator versions.  The 2-D ones address their element through
:func:`_item_pointer` (a 32-bit row index: one wide multiply).
"""
import threading

from numba import cuda, types
from numba.cuda import config

from ..dtypes import is_half_format
from .device import WARP_SIZE

FULL_MASK = 0xFFFFFFFF

if not config.ENABLE_CUDASIM:

    @cuda.jit(device=True, inline="always")
    def syncwarp():
        cuda.syncwarp(FULL_MASK)

    @cuda.jit(device=True, inline="always")
    def syncwarp_lanes(mask):
        cuda.syncwarp(mask)

    @cuda.jit(device=True, inline="always")
    def syncblock():
        cuda.syncthreads()

    @cuda.jit(device=True, inline="always")
    def shfl_down(value, delta):
        return cuda.shfl_down_sync(FULL_MASK, value, delta)

    @cuda.jit(device=True, inline="always")
    def shfl_idx(value, lane):
        return cuda.shfl_sync(FULL_MASK, value, lane)

else:  # pragma: no cover - exercised only under the simulator

    def syncwarp():
        threading.current_thread().syncthreads()

    def syncwarp_lanes(mask):
        threading.current_thread().syncthreads()

    def syncblock():
        """Wait until every thread of the block has called this.  The simulator's barrier
        releases when all running threads wait at any barrier, warp barriers included, so
        the waiting threads count arrivals and keep joining barriers until all have come."""
        thread = threading.current_thread()
        manager = thread._manager
        state = manager.__dict__.setdefault("_numbasparse_block_barrier", {"arrived": 0, "lock": threading.Lock()})
        total = manager._block_dim[0] * manager._block_dim[1] * manager._block_dim[2]
        with state["lock"]:
            state["arrived"] += 1
        while True:
            thread.syncthreads()
            done = state["arrived"] == total
            thread.syncthreads()  # all have read the count before anyone resets it
            if done:
                break
        if thread.thread_id == 0:
            state["arrived"] = 0
        thread.syncthreads()

    def _exchange(value, source_of):
        thread = threading.current_thread()
        table = thread._manager.__dict__.setdefault("_numbasparse_shfl", {})
        me = thread.thread_id
        table[me] = value
        thread.syncthreads()
        src = source_of(me % WARP_SIZE)
        result = table[me - me % WARP_SIZE + src] if 0 <= src < WARP_SIZE else value
        thread.syncthreads()
        return result

    def shfl_down(value, delta):
        return _exchange(value, lambda lane: lane + delta)

    def shfl_idx(value, lane):
        return _exchange(value, lambda _: lane)


#: Row strides of the 2-D arrays the intrinsics address must be below this many bytes
#: (:func:`numbasparse.arrays.dense` refuses longer rows), so that a 32-bit row index times the
#: stride is one 32 x 32 -> 64-bit multiply (``mul.wide.s32``, :func:`_item_pointer`).
MAX_ROW_BYTES = 2**31


def _item_pointer(context, builder, sig, args, column_first=False):
    """LLVM pointer to ``arr[i, j]`` for an intrinsic whose first three arguments are
    ``(arr, i, j)``.  For a C-contiguous ``arr`` and a signed row index of at most 32 bits (the
    int32 column indices of a CSR) the row's offset is ``i * stride`` as one 32 x 32 -> 64-bit
    multiply (``mul.wide.s32``; rows shorter than MAX_ROW_BYTES) instead of a 64-bit multiply
    and its carries.  With ``column_first`` the column's address ``&arr[0, j]`` is formed first
    and the row offset added to it, so that where j is loop-invariant the loop's address is one
    wide multiply-add (IMAD.WIDE): faster in the column-slab kernel, slower in HP-SpMM
    (docs/internals.md).  No negative-index wrap-around in either case."""
    from llvmlite import ir
    from numba.core import cgutils

    arr_type = sig.args[0]
    array = context.make_array(arr_type)(context, builder, args[0])
    row_type = sig.args[1]
    if arr_type.layout == "C" and isinstance(row_type, types.Integer) and row_type.signed and row_type.bitwidth <= 32:
        i64, i32 = ir.IntType(64), ir.IntType(32)
        row = context.cast(builder, args[1], row_type, types.int32)
        stride = builder.trunc(cgutils.unpack_tuple(builder, array.strides, 2)[0], i32)
        # inline PTX: LLVM hoists the stride's sign extension out of loops, after which the
        # backend no longer sees two 32-bit factors and emits a full 64-bit multiply
        mul_wide = ir.InlineAsm(ir.FunctionType(i64, [i32, i32]), "mul.wide.s32 $0, $1, $2;", "=l,r,r")
        offset = builder.call(mul_wide, [row, stride])
        column = context.cast(builder, args[2], sig.args[2], types.intp)
        if column_first:
            column_start = builder.gep(array.data, [column])
            item = builder.gep(builder.bitcast(column_start, ir.IntType(8).as_pointer()), [offset])
            return builder.bitcast(item, array.data.type)
        row_start = builder.gep(builder.bitcast(array.data, ir.IntType(8).as_pointer()), [offset])
        row_start = builder.bitcast(row_start, array.data.type)
        return builder.gep(row_start, [column])
    index = [context.cast(builder, args[k], sig.args[k], types.intp) for k in (1, 2)]
    return cgutils.get_item_pointer(context, builder, arr_type, array, index)


def _make_flagged_parts(bits):
    """Intrinsics ``publish(words, i, value)`` and ``take(words, i) -> (ready, value)`` for a
    float of ``bits`` bits passed between blocks of one launch through a uint64 array: each
    32-bit half of the value travels with a ready flag (bit 32) in ONE 64-bit store
    (``st.relaxed.gpu``), which the reader sees whole or not at all (``ld.relaxed.gpu``), so no
    fence or counter orders the value before its flag.  Value i uses words
    ``i * (bits // 32)`` onward (:func:`flagged_words`); a reader clears them (``clear(words,
    i)``, zeros) after use."""
    from llvmlite import ir
    from numba.core import cgutils
    from numba.cuda.extending import intrinsic

    halves = bits // 32
    value_type = types.float32 if bits == 32 else types.float64
    i32, i64 = ir.IntType(32), ir.IntType(64)
    flag = ir.Constant(i64, 1 << 32)

    def word_pointer(context, builder, arr_type, array, index, k):
        index = builder.add(builder.mul(index, ir.Constant(index.type, halves)), ir.Constant(index.type, k))
        return cgutils.get_item_pointer(context, builder, arr_type, array, [index])

    @intrinsic
    def publish(typingctx, words, i, value):
        def codegen(context, builder, sig, args):
            arr_type = sig.args[0]
            array = context.make_array(arr_type)(context, builder, args[0])
            index = context.cast(builder, args[1], sig.args[1], types.intp)
            value = context.cast(builder, args[2], sig.args[2], value_type)
            value_bits = builder.bitcast(value, ir.IntType(bits))
            for k in range(halves):
                half = builder.trunc(builder.lshr(value_bits, ir.Constant(value_bits.type, 32 * k)), i32)
                word = builder.or_(builder.zext(half, i64), flag)
                ptr = word_pointer(context, builder, arr_type, array, index, k)
                store = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ptr.type, i64]),
                                     "st.relaxed.gpu.global.b64 [$0], $1;", "l,l", side_effect=True)
                builder.call(store, [ptr, word])
            return context.get_dummy_value()

        return types.void(words, i, value), codegen

    @intrinsic
    def take(typingctx, words, i):
        signature = types.Tuple((types.boolean, value_type))(words, i)

        def codegen(context, builder, sig, args):
            arr_type = sig.args[0]
            array = context.make_array(arr_type)(context, builder, args[0])
            index = context.cast(builder, args[1], sig.args[1], types.intp)
            ready = ir.Constant(ir.IntType(1), 1)
            value_bits = ir.Constant(ir.IntType(bits), 0)
            for k in range(halves):
                ptr = word_pointer(context, builder, arr_type, array, index, k)
                load = ir.InlineAsm(ir.FunctionType(i64, [ptr.type]), "ld.relaxed.gpu.global.b64 $0, [$1];", "=l,l",
                                    side_effect=True)
                word = builder.call(load, [ptr])
                ready = builder.and_(ready, builder.icmp_unsigned("!=", builder.lshr(word, ir.Constant(i64, 32)),
                                                                  ir.Constant(i64, 0)))
                half = builder.zext(builder.trunc(word, i32), ir.IntType(bits))
                value_bits = builder.or_(value_bits, builder.shl(half, ir.Constant(half.type, 32 * k)))
            value = builder.bitcast(value_bits, ir.FloatType() if bits == 32 else ir.DoubleType())
            return context.make_tuple(builder, sig.return_type, [ready, value])

        return signature, codegen

    return publish, take, _make_clear(halves)


def _make_clear(halves):
    """``clear(words, i)``: zero value i's words (its flags), for the next launch."""

    @cuda.jit(device=True, inline="always")
    def clear(words, i):
        for k in range(halves):
            words[i * halves + k] = 0

    return clear


def flagged_words(n_values, itemsize):
    """uint64 words that :func:`flagged_parts` needs for ``n_values`` floats of ``itemsize``
    bytes: one per 32-bit half."""
    return n_values * (itemsize // 4)


def _make_python_flagged_parts(bits):  # pragma: no cover - simulator only
    import numpy as np

    halves = bits // 32
    float_type, int_type = (np.float32, np.uint32) if bits == 32 else (np.float64, np.uint64)

    def publish(words, i, value):
        value_bits = int(np.array(value, float_type).view(int_type))
        for k in range(halves):
            words[i * halves + k] = (1 << 32) | ((value_bits >> (32 * k)) & 0xFFFFFFFF)

    def take(words, i):
        ready, value_bits = True, 0
        for k in range(halves):
            word = int(words[i * halves + k])
            ready = ready and word >> 32 != 0
            value_bits |= (word & 0xFFFFFFFF) << (32 * k)
        return ready, float_type(np.array(value_bits, int_type).view(float_type))

    return publish, take, _make_clear(halves)


_flagged_parts = {}


def flagged_parts(bits):
    """(publish, take, clear) of :func:`_make_flagged_parts` for 32- or 64-bit floats."""
    if bits not in _flagged_parts:
        make = _make_python_flagged_parts if config.ENABLE_CUDASIM else _make_flagged_parts
        _flagged_parts[bits] = make(bits)
    return _flagged_parts[bits]


def _make_vector_load(width, column_first=False):
    """An intrinsic ``load(arr, i, j) -> tuple`` of ``arr[i, j:j + width]`` as ONE vector
    load (``ld.global.v2``/``.v4``: 8 or 16 bytes).  Numba emits only scalar loads for
    array indexing, so this builds the LLVM vector load directly.  The caller guarantees
    that ``arr[i, j]`` is aligned to ``width`` elements (row length and base pointer)."""
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx, arr, i, j):
        signature = types.UniTuple(arr.dtype, width)(arr, i, j)

        def codegen(context, builder, sig, args):
            arr_type = sig.args[0]
            ptr = _item_pointer(context, builder, sig, args, column_first)
            vector_type = ir.VectorType(context.get_data_type(arr_type.dtype), width)
            align = width * arr_type.dtype.bitwidth // 8
            vector = builder.load(builder.bitcast(ptr, vector_type.as_pointer()), align=align)
            items = [builder.extract_element(vector, ir.Constant(ir.IntType(32), k)) for k in range(width)]
            return context.make_tuple(builder, sig.return_type, items)

        return signature, codegen

    return load


def _make_python_vector_load(width, column_first=False):  # pragma: no cover - simulator only
    def load(arr, i, j):
        return tuple(arr[i, j + k] for k in range(width))

    return load


# 16-bit floats --------------------------------------------------------------------------------
#
# float16 and bfloat16 operands reach the kernels as uint16 arrays of their bits (Numba has no
# bfloat16 array type) and are computed in float32: loads convert in registers, stores round
# to nearest even.  A kernel's value format (``fmt``) is :func:`numbasparse.dtypes.kernel_format`.


def value_types(fmt):
    """(storage Numba type, compute Numba type, compute NumPy type) of value format ``fmt``."""
    import numpy as np

    if is_half_format(fmt):
        return types.uint16, types.float32, np.float32
    dtype = np.dtype(fmt)
    numba_type = types.float32 if dtype == np.float32 else types.float64
    return numba_type, numba_type, dtype.type


def _half_to_float_ir(builder, fmt, bits):
    """LLVM float32 of the 16 ``bits`` (an i16) of a float16 or bfloat16."""
    from llvmlite import ir

    if fmt == "bf16":  # the high half of a float32
        return builder.bitcast(builder.shl(builder.zext(bits, ir.IntType(32)), ir.Constant(ir.IntType(32), 16)),
                               ir.FloatType())
    cvt = ir.InlineAsm(ir.FunctionType(ir.FloatType(), [ir.IntType(16)]), "cvt.f32.f16 $0, $1;", "=f,h")
    return builder.call(cvt, [bits])


def _float_to_half_ir(builder, fmt, value):
    """LLVM i16 bits of the float32 ``value`` rounded to nearest even in format ``fmt``
    (``cvt.rn.bf16.f32``: sm_80 on)."""
    from llvmlite import ir

    kind = "bf16" if fmt == "bf16" else "f16"
    cvt = ir.InlineAsm(ir.FunctionType(ir.IntType(16), [ir.FloatType()]), f"cvt.rn.{kind}.f32 $0, $1;", "=h,f")
    return builder.call(cvt, [value])


def _make_converters(fmt):
    """Intrinsics ``load(bits) -> float32`` and ``store(value) -> uint16`` for format ``fmt``."""
    from numba.cuda.extending import intrinsic

    @intrinsic
    def to_compute(typingctx, bits):
        def codegen(context, builder, sig, args):
            return _half_to_float_ir(builder, fmt, context.cast(builder, args[0], sig.args[0], types.uint16))

        return types.float32(bits), codegen

    @intrinsic
    def to_storage(typingctx, value):
        def codegen(context, builder, sig, args):
            return _float_to_half_ir(builder, fmt, context.cast(builder, args[0], sig.args[0], types.float32))

        return types.uint16(value), codegen

    return to_compute, to_storage


def _make_python_converters(fmt):  # pragma: no cover - simulator only
    import numpy as np

    from ..dtypes import bfloat16

    half = bfloat16() if fmt == "bf16" else np.dtype(np.float16)  # NumPy's rounding: nearest, ties to even

    def to_compute(bits):
        return np.float32(np.array(bits, np.uint16).view(half))

    def to_storage(value):
        return np.uint16(np.array(value, np.float32).astype(half).view(np.uint16))

    return to_compute, to_storage


@cuda.jit(device=True, inline="always")
def _identity(value):
    return value


_converters = {}


def converters(fmt):
    """(to_compute, to_storage): device functions between a stored value of format ``fmt`` and
    its compute type; the identity for float32 and float64."""
    if not is_half_format(fmt):
        return _identity, _identity
    if fmt not in _converters:
        _converters[fmt] = (_make_python_converters if config.ENABLE_CUDASIM else _make_converters)(fmt)
    return _converters[fmt]


def _make_half_vector_load(width, fmt, column_first=False):
    """An intrinsic ``load(arr, i, j) -> UniTuple(float32, width)``: ``width`` 16-bit floats of
    ``arr[i, j:j + width]`` (a uint16 array) in ONE load of ``2 * width`` bytes (up to 16: 8
    halves), converted to float32 in registers."""
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx, arr, i, j):
        signature = types.UniTuple(types.float32, width)(arr, i, j)

        def codegen(context, builder, sig, args):
            ptr = _item_pointer(context, builder, sig, args, column_first)
            i16, i32 = ir.IntType(16), ir.IntType(32)
            if width == 1:
                bits = builder.load(builder.bitcast(ptr, i16.as_pointer()), align=2)
                return context.make_tuple(builder, sig.return_type, [_half_to_float_ir(builder, fmt, bits)])
            # as 32-bit words (ld.global.v4.b32 for 8 halves: the backend splits a vector of i16)
            words = width // 2
            if words == 1:
                word_list = [builder.load(builder.bitcast(ptr, i32.as_pointer()), align=4)]
            else:
                vector = builder.load(builder.bitcast(ptr, ir.VectorType(i32, words).as_pointer()), align=2 * width)
                word_list = [builder.extract_element(vector, ir.Constant(i32, k)) for k in range(words)]
            items = []
            for word in word_list:  # little-endian: the lower column in the low half
                if fmt == "bf16":  # a bfloat16 is the high half of a float32
                    low = builder.shl(word, ir.Constant(i32, 16))
                    high = builder.and_(word, ir.Constant(i32, 0xFFFF0000))
                    items += [builder.bitcast(low, ir.FloatType()), builder.bitcast(high, ir.FloatType())]
                else:
                    low = builder.trunc(word, i16)
                    high = builder.trunc(builder.lshr(word, ir.Constant(i32, 16)), i16)
                    items += [_half_to_float_ir(builder, fmt, low), _half_to_float_ir(builder, fmt, high)]
            return context.make_tuple(builder, sig.return_type, items)

        return signature, codegen

    return load


def _make_python_half_vector_load(width, fmt, column_first=False):  # pragma: no cover - simulator only
    to_compute = converters(fmt)[0]

    def load(arr, i, j):
        return tuple(to_compute(arr[i, j + k]) for k in range(width))

    return load



def _make_half_vector_store(width, column_first=False):
    """An intrinsic ``store(arr, i, j, bits)``: ``arr[i, j:j + width] = bits`` (a uint16 array,
    a UniTuple of ``width`` uint16) in ONE store of ``2 * width`` bytes, packed as 32-bit words
    (``st.global.v4.b32`` for 8 values)."""
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def store(typingctx, arr, i, j, bits):
        def codegen(context, builder, sig, args):
            ptr = _item_pointer(context, builder, sig, args, column_first)
            i16, i32 = ir.IntType(16), ir.IntType(32)
            items = [builder.extract_value(args[3], k) for k in range(width)]
            if width == 1:
                builder.store(items[0], builder.bitcast(ptr, i16.as_pointer()), align=2)
                return context.get_dummy_value()
            words = [builder.or_(builder.zext(items[2 * k], i32),
                                 builder.shl(builder.zext(items[2 * k + 1], i32), ir.Constant(i32, 16)))
                     for k in range(width // 2)]  # little-endian: the lower column in the low half
            if len(words) == 1:
                builder.store(words[0], builder.bitcast(ptr, i32.as_pointer()), align=4)
            else:
                vector_type = ir.VectorType(i32, len(words))
                vector = ir.Constant(vector_type, None)
                for k, word in enumerate(words):
                    vector = builder.insert_element(vector, word, ir.Constant(i32, k))
                builder.store(vector, builder.bitcast(ptr, vector_type.as_pointer()), align=2 * width)
            return context.get_dummy_value()

        return types.void(arr, i, j, bits), codegen

    return store


def _make_python_half_vector_store(width, column_first=False):  # pragma: no cover - simulator only
    def store(arr, i, j, bits):
        for k in range(width):
            arr[i, j + k] = bits[k]

    return store


_half_vector_stores = {}


def half_vector_store(width):
    """``store(arr, i, j, bits)``: ``arr[i, j:j + width] = bits`` for a uint16 array of 16-bit
    floats, one store per call (width 1, 2, 4 or 8; ``arr[i, j]`` aligned to ``width``)."""
    if width not in _half_vector_stores:
        make = _make_python_half_vector_store if config.ENABLE_CUDASIM else _make_half_vector_store
        _half_vector_stores[width] = make(width)
    return _half_vector_stores[width]

_vector_loads = {}


def vector_width(n_cols, itemsize, *arrays):
    """Widest of 4, 2, 1 elements (8 for 16-bit values: 16 bytes) that a :func:`vector_load` of
    rows of ``n_cols`` columns may read: ``n_cols`` a multiple of the width and each array's
    base address aligned to ``width * itemsize`` bytes (so every row starts aligned)."""
    from .launch import MAX_ALIGNMENT, alignment

    aligned_to = min((alignment(a) for a in arrays), default=MAX_ALIGNMENT)
    for width in (8, 4, 2) if itemsize == 2 else (4, 2):
        if n_cols % width == 0 and aligned_to % (width * itemsize) == 0:
            return width
    return 1


def vector_load(width, column_first=False, fmt=None):
    """``load(arr, i, j)`` returning ``arr[i, j:j + width]`` as a tuple, width 1, 2 or 4 (up to
    8 for a 16-bit ``fmt``, whose values come back as float32; ``column_first``: the address
    order of :func:`_item_pointer`)."""
    half = fmt if is_half_format(fmt) else None
    key = (width, column_first, half)
    if key not in _vector_loads:
        if half:
            make = _make_python_half_vector_load if config.ENABLE_CUDASIM else _make_half_vector_load
            _vector_loads[key] = make(width, half, column_first)
        else:
            make = _make_python_vector_load if config.ENABLE_CUDASIM else _make_vector_load
            _vector_loads[key] = make(width, column_first)
    return _vector_loads[key]


def _make_atomic_extremum(maximum):
    """An intrinsic ``f(arr, i, j, value)``: ``arr[i, j] = max(arr[i, j], value)`` (or min)
    for a float32/float64 array, as ONE native integer atomic on the value's bits instead of
    Numba's compare-and-swap loop (a load and a CAS round trip per try; its result, unused,
    lets ptxas post it as a ``red``).  IEEE floats of the same sign order like their bits:
    as signed integers when non-negative, in reverse as unsigned integers when negative, so
    max takes a signed-integer max for a value with a clear sign bit and an unsigned min
    otherwise (min: signed min, unsigned max).  Exact for every non-NaN value, +-0 and
    +-inf included.  A NaN wins and then stays (as :func:`numbasparse.cuda.reductions.combine`
    has it): for max it is stored as the largest positive NaN (all bits but the sign), above
    every other value under both orders; for min as the NaN of all bits set, below them."""
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def extremum(typingctx, arr, i, j, value):
        signature = types.void(arr, i, j, value)

        def codegen(context, builder, sig, args):
            arr_type = sig.args[0]
            ptr = _item_pointer(context, builder, sig, args)
            bits = ir.IntType(arr_type.dtype.bitwidth)
            x = context.cast(builder, args[3], sig.args[3], arr_type.dtype)
            width = arr_type.dtype.bitwidth
            nan_bits = ir.Constant(bits, (1 << (width - 1)) - 1 if maximum else (1 << width) - 1)
            is_nan = builder.fcmp_unordered("uno", x, x)
            x_bits = builder.select(is_nan, nan_bits, builder.bitcast(x, bits))
            int_ptr = builder.bitcast(ptr, bits.as_pointer())
            non_negative = builder.icmp_signed(">=", x_bits, ir.Constant(bits, 0))
            with builder.if_else(non_negative) as (clear, negative):
                with clear:
                    builder.atomic_rmw("max" if maximum else "min", int_ptr, x_bits, "monotonic")
                with negative:
                    builder.atomic_rmw("umin" if maximum else "umax", int_ptr, x_bits, "monotonic")
            return context.get_dummy_value()

        return signature, codegen

    return extremum


if not config.ENABLE_CUDASIM:
    atomic_max_float = _make_atomic_extremum(True)
    atomic_min_float = _make_atomic_extremum(False)
else:  # pragma: no cover - simulator only: simulated threads are Python threads
    _atomic_lock = threading.Lock()

    def atomic_max_float(arr, i, j, value):
        with _atomic_lock:
            old = arr[i, j]
            if value > old or value != value:
                arr[i, j] = value

    def atomic_min_float(arr, i, j, value):
        with _atomic_lock:
            old = arr[i, j]
            if value < old or value != value:
                arr[i, j] = value


def _max_nan_in_one_instruction():
    """True where ``max.NaN``/``min.NaN`` exist (sm_80 on; PTX 7.0): the device's compute
    capability, or, compiling with no GPU (ahead-of-time checks), the sm_90 the library targets."""
    try:
        return cuda.get_current_device().compute_capability >= (8, 0)
    except Exception:  # no device: cross-compiling
        return True


def _make_nan_extremum(maximum):
    """An intrinsic ``f(a, b)``: the max (or min) of two floats of one type, NaN if either is
    NaN (as ``torch.amax``; plain ``max`` in Numba is PTX ``max``, which ignores a NaN).
    float32: one ``max.NaN.f32`` (inline PTX, sm_80 on), the cost of a plain max; float64 (PTX
    has no ``max.NaN.f64``) and older GPUs: a compare and a select around the plain max."""
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def extremum(typingctx, a, b):
        if not (isinstance(a, types.Float) and a == b):
            return None
        signature = a(a, b)

        def codegen(context, builder, sig, args):
            x, y = args
            op = "max" if maximum else "min"
            if sig.args[0] == types.float32 and _max_nan_in_one_instruction():
                f32 = ir.FloatType()
                asm = ir.InlineAsm(ir.FunctionType(f32, [f32, f32]), f"{op}.NaN.f32 $0, $1, $2;", "=f,f,f")
                return builder.call(asm, [x, y])
            ty, width, reg = (ir.FloatType(), 32, "f") if sig.args[0] == types.float32 else (ir.DoubleType(), 64, "d")
            plain = builder.call(ir.InlineAsm(ir.FunctionType(ty, [ty, ty]), f"{op}.f{width} $0, $1, $2;",
                                              f"={reg},{reg},{reg}"), [x, y])  # ignores a NaN
            either_nan = builder.fcmp_unordered("uno", x, y)
            return builder.select(either_nan, builder.fadd(x, y), plain)  # NaN + anything: NaN

        return signature, codegen

    return extremum


if not config.ENABLE_CUDASIM:
    max_nan = _make_nan_extremum(True)
    min_nan = _make_nan_extremum(False)
else:  # pragma: no cover - simulator only

    def max_nan(a, b):
        return a + b if a != a or b != b else max(a, b)

    def min_nan(a, b):
        return a + b if a != a or b != b else min(a, b)


def _make_vector_red_add(width, column_first=False):
    """An intrinsic ``f(arr, i, j, values)``: ``arr[i, j:j + width] += values`` (a float32
    UniTuple) as ONE vector reduction, ``red.global.add.v2/.v4.f32`` (sm_90, inline PTX: Numba
    and LLVM emit only scalar atomics).  The caller guarantees ``arr[i, j]`` is aligned to
    ``width`` elements."""
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    operands = ", ".join(f"${k + 1}" for k in range(width))
    asm = f"red.global.add.v{width}.f32 [$0], {{{operands}}};"

    @intrinsic
    def red_add(typingctx, arr, i, j, values):
        signature = types.void(arr, i, j, values)

        def codegen(context, builder, sig, args):
            ptr = _item_pointer(context, builder, sig, args, column_first)
            element = sig.args[3].types[0] if isinstance(sig.args[3], types.BaseTuple) else sig.args[3].dtype
            items = [context.cast(builder, builder.extract_value(args[3], k), element, types.float32)
                     for k in range(width)]
            f32 = ir.FloatType()
            function = ir.FunctionType(ir.VoidType(), [ptr.type] + [f32] * width)
            builder.call(ir.InlineAsm(function, asm, "l" + ",f" * width, side_effect=True), [ptr] + items)
            return context.get_dummy_value()

        return signature, codegen

    return red_add


def _make_python_vector_red_add(width, column_first=False):  # pragma: no cover - simulator only
    def red_add(arr, i, j, values):
        with _atomic_lock:
            for k in range(width):
                arr[i, j + k] += values[k]

    return red_add


_vector_red_adds = {}


def vector_red_add(width, column_first=False):
    """``red_add(arr, i, j, values)``: ``arr[i, j:j + width] += values`` atomically, one float32
    vector reduction (width 2 or 4) per call (the simulator: element by element under a lock)."""
    key = (width, column_first)
    if key not in _vector_red_adds:
        make = _make_python_vector_red_add if config.ENABLE_CUDASIM else _make_vector_red_add
        _vector_red_adds[key] = make(width, column_first)
    return _vector_red_adds[key]


@cuda.jit(device=True, inline="always")
def warp_sum(value):
    """Sum of ``value`` over the 32 lanes of a warp; every lane gets the total."""
    offset = WARP_SIZE // 2
    while offset > 0:
        value += shfl_down(value, offset)
        offset //= 2
    return shfl_idx(value, 0)
