"""Tensor-core matrix multiply-accumulate from Python: one ``mma.sync`` instruction per call,
emitted as inline PTX (Numba has no WMMA), with an emulation that runs on the CUDA simulator.

``mma(kind)`` gives a device function of the warp (all 32 lanes call it together) that returns
the lane's four float32 accumulators ``(d0, d1, d2, d3)`` of ``D = A @ B + C``:

- ``"tf32"``: ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``; A 16 x 8, B 8 x 8.
  Arguments ``(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)``, all float32; round A's and B's values
  with :func:`to_tf32` first (the instruction reads only a float32's upper 19 bits).
- ``"f16"``, ``"bf16"``: ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32``;
  A 16 x 16, B 16 x 8.  ``a0..a3`` and ``b0, b1`` are uint32, each holding two 16-bit values
  (:func:`pack`: the lower-numbered column or row in the low half); ``c0..c3`` float32.

Which lane holds which element (PTX ISA, "Matrix Fragments for mma.m16n8k8" and "... for
mma.m16n8k16 with floating point type"), with ``g = lane // 4`` and ``t = lane % 4``, is in
:data:`LAYOUTS` (host-side, for packing and tests): accumulators ``c0, c1`` are row ``g``,
columns ``2t, 2t + 1``, and ``c2, c3`` row ``g + 8``.

On the simulator the warp's lanes leave their fragments in a per-block table between two
barriers (as the shuffles of :mod:`numbasparse.cuda.intrinsics` do), and each lane computes its
outputs in float64 from the values the hardware reads (TF32: the upper 19 bits), rounded once to
float32; the hardware's order of additions differs, so results agree to float32 rounding.  The
simulator's barriers are block-wide: there every warp of the block must call the instruction
together, and the block must be whole warps.
"""
import threading

import numpy as np
from numba import cuda, types
from numba.cuda import config

from .device import WARP_SIZE

KINDS = ("tf32", "f16", "bf16")
#: (M, N, K) of one instruction.
SHAPES = {"tf32": (16, 8, 8), "f16": (16, 8, 16), "bf16": (16, 8, 16)}


def _tf32_layout():
    a = [[(g + 8 * (i % 2), t + 4 * (i // 2)) for i in range(4)] for g, t in _lanes()]
    b = [[(t + 4 * i, g) for i in range(2)] for g, t in _lanes()]
    return a, b


def _half_layout():
    # register i holds two values: (row, column) of its low and high halves
    a = [[((g + 8 * (i % 2), 2 * t + 8 * (i // 2)), (g + 8 * (i % 2), 2 * t + 8 * (i // 2) + 1)) for i in range(4)]
         for g, t in _lanes()]
    b = [[((2 * t + 8 * i, g), (2 * t + 8 * i + 1, g)) for i in range(2)] for g, t in _lanes()]
    return a, b


def _lanes():
    return [(lane // 4, lane % 4) for lane in range(WARP_SIZE)]


#: ``LAYOUTS[kind] = (a, b, c)``: per lane, the (row, column) of each fragment element; for
#: "f16"/"bf16" each A and B register holds a pair ((row, col) of the low half, of the high half).
LAYOUTS = {"tf32": _tf32_layout() + ([[(g + 8 * (i // 2), 2 * t + i % 2) for i in range(4)] for g, t in _lanes()],)}
LAYOUTS["f16"] = LAYOUTS["bf16"] = _half_layout() + (LAYOUTS["tf32"][2],)


def tf32_bits(values):
    """float32 ``values`` rounded to TF32 (10-bit mantissa, to nearest, ties away from zero: what
    ``cvt.rna.tf32.f32`` does), as float32 (host side and simulator)."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    nan = ~finite & ((bits & 0x7FFFFF) != 0)
    rounded = np.where(finite, (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000), bits)
    rounded = np.where(nan, np.uint32(0x7FFFFFFF), rounded)  # a NaN stays a NaN in 19 bits
    return rounded.astype(np.uint32).view(np.float32)


def pack(low_bits, high_bits):
    """Two 16-bit values (their bits) as one uint32 register, ``low_bits`` in the low half."""
    return np.uint32(low_bits) | (np.uint32(high_bits) << np.uint32(16))


@cuda.jit(device=True, inline="always")
def pack_bits(low_bits, high_bits):
    """Device version of :func:`pack`."""
    return types.uint32(low_bits) | (types.uint32(high_bits) << types.uint32(16))


# GPU: inline PTX ---------------------------------------------------------------------------------

def _make_mma(kind):
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    f32, i32 = ir.FloatType(), ir.IntType(32)
    shape = "m16n8k8" if kind == "tf32" else "m16n8k16"
    ab = {"tf32": "tf32", "f16": "f16", "bf16": "bf16"}[kind]
    text = (f"mma.sync.aligned.{shape}.row.col.f32.{ab}.{ab}.f32 "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
    constraints = "=f,=f,=f,=f," + ",".join(["r"] * 6 + ["f"] * 4)
    asm = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([f32] * 4), [i32] * 6 + [f32] * 4), text, constraints)
    operand = types.float32 if kind == "tf32" else types.uint32

    @intrinsic
    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        sig = types.UniTuple(types.float32, 4)(*([operand] * 6 + [types.float32] * 4))

        def codegen(context, builder, signature, args):
            inputs = [context.cast(builder, v, t, operand) for v, t in zip(args[:6], signature.args[:6])]
            if kind == "tf32":  # the float32 registers as .b32
                inputs = [builder.bitcast(v, i32) for v in inputs]
            accumulators = [context.cast(builder, v, t, types.float32) for v, t in zip(args[6:], signature.args[6:])]
            result = builder.call(asm, inputs + accumulators)
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_value(result, k) for k in range(4)])

        return sig, codegen

    return mma


def _make_to_tf32():
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    cvt = ir.InlineAsm(ir.FunctionType(ir.IntType(32), [ir.FloatType()]), "cvt.rna.tf32.f32 $0, $1;", "=r,f")

    @intrinsic
    def to_tf32(typingctx, value):
        def codegen(context, builder, signature, args):
            bits = builder.call(cvt, [context.cast(builder, args[0], signature.args[0], types.float32)])
            return builder.bitcast(bits, ir.FloatType())

        return types.float32(value), codegen

    return to_tf32


# Simulator: the warp's fragments exchanged through a table ----------------------------------------

def _decode(kind, register):
    """The two values a 16-bit-pair register holds (low, high), as float64."""
    from ..dtypes import bfloat16

    half = np.dtype(np.float16) if kind == "f16" else bfloat16()
    pair = np.array([register & 0xFFFF, register >> 16], np.uint16).view(half)
    return float(pair[0]), float(pair[1])


def _tf32_read(value):
    """The float32 the hardware multiplies for a TF32 operand register: its upper 19 bits."""
    bits = np.array([value], np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return float(bits.view(np.float32)[0])


def _make_python_mma(kind):  # pragma: no cover - simulator only
    m, n, k = SHAPES[kind]
    layout_a, layout_b, layout_c = LAYOUTS[kind]

    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        thread = threading.current_thread()
        table = thread._manager.__dict__.setdefault("_numbasparse_mma", {})
        me = thread.thread_id
        table[me] = (a0, a1, a2, a3, b0, b1)
        thread.syncthreads()
        first = me - me % WARP_SIZE
        A, B = np.zeros((m, k)), np.zeros((k, n))
        for lane in range(WARP_SIZE):
            fragment = table[first + lane]
            for matrix, layout, registers in ((A, layout_a, fragment[:4]), (B, layout_b, fragment[4:])):
                for i, register in enumerate(registers):
                    if kind == "tf32":
                        matrix[layout[lane][i]] = _tf32_read(register)
                    else:
                        (r0, k0), (r1, k1) = layout[lane][i]
                        matrix[r0, k0], matrix[r1, k1] = _decode(kind, int(register))
        thread.syncthreads()  # every lane has read the table before it is reused
        D = A @ B
        lane = me % WARP_SIZE
        return tuple(np.float32(float(c) + D[layout_c[lane][i]]) for i, c in enumerate((c0, c1, c2, c3)))

    return mma


def _python_to_tf32(value):  # pragma: no cover - simulator only
    return np.float32(tf32_bits(np.float32(value)))


_made = {}


def mma(kind):
    """The device function of one ``mma.sync`` of ``kind`` ("tf32", "f16" or "bf16"): module
    docstring.  Needs sm_80 or later on a GPU."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind not in _made:
        _made[kind] = (_make_python_mma if config.ENABLE_CUDASIM else _make_mma)(kind)
    return _made[kind]


def to_tf32():
    """Device function rounding a float32 to TF32 (``cvt.rna.tf32.f32``), for :func:`mma`'s
    "tf32" operands."""
    if "to_tf32" not in _made:
        _made["to_tf32"] = _python_to_tf32 if config.ENABLE_CUDASIM else _make_to_tf32()
    return _made["to_tf32"]
