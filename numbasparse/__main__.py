"""Command line:

- ``python -m numbasparse demo [--data DIR] [--n N] [--dtype float32|float64|float16|bfloat16]``
- ``python -m numbasparse compile [--dtypes float32,float64] [--n 32,64,128,256] [--index-dtypes int32,int64]``
"""
import argparse
import sys

import numpy as np

from . import aot


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m numbasparse")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="check and time every algorithm on the default graph "
                                       "or on every *.npz graph of --data")
    demo.add_argument("--data", help="directory of scipy CSR *.npz graphs (default: the bundled graph)")
    demo.add_argument("--n", type=int, default=64, help="columns of B, X and Y (default 64)")
    demo.add_argument("--dtype", choices=("float32", "float64", "float16", "bfloat16"), default="float32")
    compile_ = sub.add_parser("compile", help="compile the common kernel configurations into the on-disk "
                                               "cache (needs a GPU)")
    compile_.add_argument("--dtypes", default=",".join(aot.DEFAULT_DTYPES),
                          help="comma-separated value dtypes (default %(default)s)")
    compile_.add_argument("--n", default=",".join(map(str, aot.DEFAULT_N)),
                          help="comma-separated column counts N (default %(default)s)")
    compile_.add_argument("--index-dtypes", default=",".join(aot.DEFAULT_INDEX_DTYPES),
                          help="comma-separated index dtypes (default %(default)s)")
    args = parser.parse_args(argv)
    if args.command == "compile":
        return _compile(parser, args)

    from .demo import run_demo

    if args.n < 1:
        parser.error("--n must be at least 1")
    try:
        rows = run_demo(args.data, n_cols=args.n, dtype=np.dtype(args.dtype))
    except ValueError as exc:
        parser.error(str(exc))
    failed = [r for r in rows if not r[-1]]
    print(f"{len(rows) - len(failed)} of {len(rows)} checks passed")
    return 1 if failed else 0


def _compile(parser, args):
    from .disk import cache_dir

    try:
        n = [int(k) for k in args.n.split(",")]
        counts = aot.precompile(args.dtypes.split(","), n, args.index_dtypes.split(","))
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    except RuntimeError as exc:
        print(f"python -m numbasparse compile: {exc}", file=sys.stderr)
        return 1
    print(f"{counts['stored']} kernels compiled and stored, {counts['loaded']} already on disk, in "
          f"{counts['seconds']} s ({cache_dir() / 'kernels'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
