"""Command line: ``python -m numbasparse demo [--data DIR] [--n N] [--dtype float32|float64]``."""
import argparse
import sys

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m numbasparse")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="check and time every algorithm on the default graph "
                                       "or on every *.npz graph of --data")
    demo.add_argument("--data", help="directory of scipy CSR *.npz graphs (default: the bundled graph)")
    demo.add_argument("--n", type=int, default=64, help="columns of B, X and Y (default 64)")
    demo.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    args = parser.parse_args(argv)

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


if __name__ == "__main__":
    sys.exit(main())
