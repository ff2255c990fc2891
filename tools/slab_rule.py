"""Per-graph kernel times of HP-SpMM and the column-slab SpMM, with the features of the
``auto`` rule (:func:`numbasparse.dispatch.slab_pays`), to fit and check that rule.

    python tools/slab_rule.py [--n 64,128,256] GRAPH...

GRAPH as in tools/ab_hp.py; a sampled:SPEC graph is measured subgraph by subgraph.  For each
(graph, N): rows, columns, entries, the mean non-empty row (the rule's threshold is lower
below ``hp.SINGLE_MAX_MEAN_ROW``), the default tiling's entries per segment (counted, as the
rule does), B's size over the L2 cache's, HP's and the slab kernel's microseconds (best of 3,
results checked against the float64 reference), HP/slab, and the rule's choice.  Imports
``ab_hp`` and ``ab_slab`` from its own folder (run it as a script)."""
import argparse

import numpy as np

from ab_hp import load, operands
from ab_slab import timed
from numbasparse import CSR, dispatch
from numbasparse.cuda import hp, slab
from numbasparse.cuda.device import memory_system
from numbasparse.preprocess.slab_tiles import entries_per_segment


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("graphs", nargs="+")
    parser.add_argument("--n", default="64,128,256")
    args = parser.parse_args()
    rng = np.random.default_rng()
    print(f"{'graph':<22} {'N':>4} {'rows':>7} {'cols':>7} {'nnz':>9} {'row':>5} {'per seg':>7} "
          f"{'B/L2':>5} {'hp us':>8} {'slab us':>8} {'hp/slab':>7} rule")
    for spec in args.graphs:
        for g, A in enumerate(load(spec)):
            for n in map(int, args.n.split(",")):
                (_, dense, expected), = operands([A], "spmm", n, rng)
                hp_us, e1 = timed([A], [dense], [expected], lambda a, b, c: hp.spmm_hp(a, b, c, "sum"))
                slab_us, e2 = timed([A], [dense], [expected], lambda a, b, c: slab.spmm_slab(a, b, c, "sum"))
                width = slab.tiling(A.nnz, A.shape[1], n, 4)[1]
                per_segment = entries_per_segment(A.indptr, A.indices, width, slab.DEFAULT.max_segment)
                choice = "slab" if dispatch.slab_pays(CSR.from_scipy(A), n, 4) else "hp"
                name = f"{spec}[{g}]" if spec.startswith("sampled:") else spec
                b_of_l2 = A.shape[1] * n * 4 / memory_system()[0]
                mean_row = A.nnz / max(1, np.count_nonzero(np.diff(A.indptr)))
                print(f"{name:<22} {n:>4} {A.shape[0]:>7} {A.shape[1]:>7} {A.nnz:>9} {mean_row:5.1f} "
                      f"{per_segment:7.1f} {b_of_l2:5.2f} "
                      f"{hp_us:8.1f} {slab_us:8.1f} {hp_us / slab_us:7.2f} {choice}"
                      f"{'' if max(e1, e2) < 1e-5 else ' WRONG'}", flush=True)


if __name__ == "__main__":
    main()
