"""A/B of the HP kernels against a baseline copy of hp.py, by kernel time (CUPTI), best of 3.

    git show REF:numbasparse/cuda/hp.py > numbasparse/cuda/old_hp.py   # the baseline (not committed)
    python tools/ab_hp.py [--ops spmm,spmm_mean,spmm_max,spmm_min,sddmm] [--n 32,64,128,256] [--baseline MODULE]
                          [--variants MODULE,...] [--events] [--dtype float32|float16|bfloat16] GRAPH...

GRAPH is default, rmat:SCALE, sampled:SPEC (32 GraphSAINT-style subgraphs of SPEC, one call
each, as the benchmark's sampled workload) or the name of a graph in .data/.  Each case checks
every result against a float64 reference (of the operands as rounded to ``--dtype``; a 16-bit
result within 2e-2, float32 within 1e-5) first and prints the microseconds of the baseline and of
each variant (default: numbasparse.cuda.hp, "new") and baseline/variant.  A variant is a module,
optionally with HP-SpMM rule overrides after a colon, "/"-separated, passed to its ``spmm_hp`` as
keywords: ``hp:depth=3`` (gather depth), ``hp:layout=32.2.1`` (lanes.vec.cf),
``hp:depth=2/layout=16.4.1``, ``hp:single=1`` (the single launch; 0: memset or fill + kernel), ``hp:zeroed=1`` (the single
launch after a memset of C, skipping empty rows),
``hp:npg=256`` (HP-SpMM's nonzeros per lane group), ``hp:group=8`` and ``hp:npw=128`` (HP-SDDMM's lanes per
nonzero and nonzeros per warp; the SpMM options apply to SpMM only, these two to SDDMM)
("hp" is numbasparse.cuda.hp): no copy of hp.py is needed to time a depth, a lane layout or
either launch mode.  The baseline runs with no overrides.  A baseline copied from a REF must
import against the current package (its relative imports, e.g. ``from . import device, launch``,
resolve in numbasparse/cuda/).
"""
import argparse
import importlib
import sys

import numpy as np
from numba import cuda

import numbasparse as ns
from numbasparse import graphs
from numbasparse.arrays import device_storage
from numbasparse.dtypes import as_dtype, is_half
from numbasparse.bench.timing import time_cuda_interleaved, time_kernels
from numbasparse.reference import relative_error, sddmm_reference, spmm_reference


def load(spec):
    """The list of graphs one case calls the kernel on."""
    if spec.startswith("sampled:"):
        return graphs.sample_subgraphs(graphs.from_spec(spec[len("sampled:"):]), 32)
    if ":" in spec or spec == "default":
        return [graphs.from_spec(spec)]
    return [graphs.load_npz_dir(".data")[spec]]


DTYPE = np.dtype(np.float32)  # the operands' (--dtype)


def operands(As, op, n, rng):
    """Fresh random operands and the float64 reference result for each graph of a case, made
    once and shared by the baseline and every variant."""
    out = []
    for A in As:
        rounded = A.astype(np.float64)
        rounded.data = A.data.astype(DTYPE).astype(np.float64)
        if op == "sddmm":
            X = rng.standard_normal((A.shape[0], n)).astype(DTYPE)
            Y = rng.standard_normal((A.shape[1], n)).astype(DTYPE)
            out.append((A, (X, Y), sddmm_reference(rounded, X.astype(np.float64), Y.astype(np.float64))))
        else:
            B = rng.standard_normal((A.shape[1], n)).astype(DTYPE)
            out.append((A, (B,), spmm_reference(rounded, B.astype(np.float64), reduction(op))))
    return out


def _poisoned(shape):
    """A device result array of DTYPE's storage, NaN everywhere."""
    return cuda.to_device(device_storage(np.full(shape, np.nan, DTYPE)))


def _result(array):
    host = array.copy_to_host()
    return (host.view(DTYPE) if is_half(DTYPE) else host).astype(np.float64)


def cases(graph_operands, op, module, **options):
    """(callable running the kernel once per graph, worst relative error of the results);
    ``options``: keywords of the module's ``spmm_hp`` or ``sddmm_hp``."""
    calls, errors = zip(*(case(A, dense, expected, op, module, **options) for A, dense, expected in graph_operands))
    return (lambda: [call() for call in calls]), max(errors)


def reduction(op):
    """SpMM's reduction of an --ops entry: spmm (sum), spmm_mean, spmm_max, spmm_min."""
    return op.partition("_")[2] or "sum"


def case(A, dense, expected, op, module, **options):
    """(callable running the kernel on the given operands, relative error of its result)."""
    csr = ns.CSR.from_scipy(A, dtype=DTYPE)  # a fresh plan cache per module
    if op == "sddmm":
        Xd, Yd = (cuda.to_device(device_storage(x)) for x in dense)
        out = _poisoned(A.nnz)
        fn = lambda: module.sddmm_hp(csr, Xd, Yd, out, **options)  # noqa: E731
        fn()
        return fn, relative_error(_result(out), expected)
    reduce = reduction(op)
    Bd = cuda.to_device(device_storage(dense[0]))
    C = _poisoned((A.shape[0], dense[0].shape[1]))
    fn = lambda: module.spmm_hp(csr, Bd, C, reduce, **options)  # noqa: E731
    fn()
    return fn, relative_error(_result(C), expected)


SDDMM_OPTIONS = ("group", "nnz_per_warp")  # (the other overrides are HP-SpMM's)


def variant(spec):
    """(label, module, HP-SpMM rule overrides: keywords of ``spmm_hp``) of a --variants entry
    (see the docstring)."""
    name, _, options = spec.partition(":")
    module = importlib.import_module(name if "." in name else f"numbasparse.cuda.{name}")
    overrides = {}
    for option in filter(None, options.split("/")):
        key, _, value = option.partition("=")
        if key == "depth":
            overrides["depth"] = int(value)
        elif key == "layout":
            overrides["layout"] = tuple(int(x) for x in value.split("."))
        elif key == "single":
            overrides["single"] = bool(int(value))
        elif key == "zeroed":
            overrides["zeroed"] = bool(int(value))
        elif key == "group":
            overrides["group"] = int(value)
        elif key == "npg":
            overrides["nnz_per_group"] = int(value)
        elif key == "npw":
            overrides["nnz_per_warp"] = int(value)
        elif key == "prefill":
            sys.exit(f"variant option {option!r}: prefill=P is now single={1 - int(value)} (single=1: one launch)")
        else:
            sys.exit(f"unknown variant option {option!r} (depth=D, layout=LANES.VEC.CF, single=0/1, zeroed=0/1, npg=NNZ_PER_GROUP, group=G or npw=NNZ_PER_WARP)")
    label = "new" if spec in ("hp", "numbasparse.cuda.hp") else spec.replace("numbasparse.cuda.", "")
    return label, module, overrides


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("graphs", nargs="+")
    parser.add_argument("--ops", default="spmm,spmm_max,sddmm")
    parser.add_argument("--n", default="32,64,128,256")
    parser.add_argument("--baseline", default="numbasparse.cuda.old_hp")
    parser.add_argument("--variants", default="numbasparse.cuda.hp")
    parser.add_argument("--dtype", default="float32", help="the operands': float32, float16 or bfloat16")
    parser.add_argument("--events", action="store_true",
                        help="also the CUDA-event time of one call on an idle GPU (interleaved, median of 50)")
    args = parser.parse_args()
    global DTYPE
    DTYPE = as_dtype(args.dtype)
    tolerance = 2e-2 if is_half(DTYPE) else 1e-5
    try:
        old_hp = importlib.import_module(args.baseline)
    except ModuleNotFoundError:
        sys.exit("make the baseline first: git show REF:numbasparse/cuda/hp.py > numbasparse/cuda/old_hp.py")
    variants = [variant(spec) for spec in args.variants.split(",")]
    rng = np.random.default_rng()
    ratios = {}
    for spec in args.graphs:
        As = load(spec)
        for op in args.ops.split(","):
            for n in map(int, args.n.split(",")):
                line = f"{spec:10} {op:9} N={n:3}"
                us, fns = {}, {}
                graph_operands = operands(As, op, n, rng)
                for name, module, overrides in (("old", old_hp, {}), *variants):
                    mine = {k: v for k, v in overrides.items() if (k in SDDMM_OPTIONS) == (op == "sddmm")}
                    fn, err = cases(graph_operands, op, module, **mine)
                    fns[name] = fn
                    us[name] = min(time_kernels(fn, warmup=3, repeat=20) for _ in range(3)) * 1e3
                    line += f"  {name} {us[name]:8.1f} us{'' if err < tolerance else f' WRONG ({err:.1e})'}"
                for name, _, _ in variants:
                    ratios.setdefault((op, name), []).append(us["old"] / us[name])
                    line += f"  old/{name} {us['old'] / us[name]:5.2f}"
                if args.events:
                    events = {k: v[0] * 1e3 for k, v in time_cuda_interleaved(fns, repeat=50).items()}
                    line += "  | events" + "".join(f"  {k} {v:6.1f}" for k, v in events.items())
                    for name, _, _ in variants:
                        ratios.setdefault((op + " events", name), []).append(events["old"] / events[name])
                print(line, flush=True)
    for (op, name), r in ratios.items():
        print(f"{op}: old/{name} geomean {np.exp(np.mean(np.log(r))):.3f}, min {min(r):.2f}, max {max(r):.2f}")


if __name__ == "__main__":
    main()
