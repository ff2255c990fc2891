"""Cold start: import time and the first calls of a new process, with an empty and a warm cache.

    python benchmarks/cold_start.py [--backend cuda|cpu] [--repeat 3] [--out FILE.jsonl]

Each measurement is a fresh Python process on R-MAT scale 15 (edge factor 9: 0.52M nonzeros),
N = 64, float32.  Scenarios (cuda): ``empty`` (a new NUMBASPARSE_CACHE directory: every kernel
compiles), ``warm`` (the directory the last process filled), ``precompiled`` (a new directory
filled by ``python -m numbasparse compile --n 64`` first).  On the CPU backend the cache is
Numba's (``NUMBA_CACHE_DIR``): ``empty`` and ``warm`` likewise.  Times: ``import numbasparse``,
CUDA context creation, ``CSR.from_scipy``, then the first ``spmm`` sum, ``spmm`` max, ``sddmm``
(each synchronized) and a second ``spmm`` sum.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numbasparse as ns
from numbasparse import graphs
t = {"import": time.perf_counter() - start, "torch imported": "torch" in sys.modules}
import numpy as np
backend = sys.argv[1]
A = graphs.rmat(15, 9).astype(np.float32)
rng = np.random.default_rng(0)
B = rng.standard_normal((A.shape[1], 64), dtype=np.float32)
X = rng.standard_normal((A.shape[0], 64), dtype=np.float32)
sync = lambda: None
if backend == "cuda":
    from numba import cuda
    start = time.perf_counter(); cuda.current_context(); t["context"] = time.perf_counter() - start
    B, X, sync = cuda.to_device(B), cuda.to_device(X), cuda.synchronize
start = time.perf_counter()
csr = ns.CSR.from_scipy(A) if backend == "cuda" else A
t["from_scipy"] = time.perf_counter() - start
for name, call in (("spmm sum", lambda: ns.spmm(csr, B, backend=backend)),
                   ("spmm max", lambda: ns.spmm(csr, B, reduce="max", backend=backend)),
                   ("sddmm", lambda: ns.sddmm(csr, X, X, backend=backend)),
                   ("spmm sum again", lambda: ns.spmm(csr, B, backend=backend))):
    start = time.perf_counter(); call(); sync(); t[name] = time.perf_counter() - start
if backend == "cuda":
    from numbasparse.cuda import launch
    t["kernel files"] = dict(launch.kernel_file_counts)
t["nnz"] = int(A.nnz)
print(json.dumps(t))
"""


def measure(backend, env):
    done = subprocess.run([sys.executable, "-c", CHILD, backend], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []
    for rep in range(args.repeat):
        fresh = tempfile.mkdtemp(prefix="ns-cold-")
        if args.backend == "cuda":
            env = dict(os.environ, NUMBASPARSE_CACHE=fresh)
            scenarios = [("empty", env), ("warm", env)]
        else:
            env = dict(os.environ, NUMBA_CACHE_DIR=fresh)
            scenarios = [("empty", env), ("warm", env)]
        for scenario, env in scenarios:
            rows.append(dict(measure(args.backend, env), scenario=scenario, backend=args.backend, rep=rep))
            print(json.dumps(rows[-1]), flush=True)
        if args.backend == "cuda":
            env = dict(os.environ, NUMBASPARSE_CACHE=tempfile.mkdtemp(prefix="ns-cold-"))
            start = __import__("time").perf_counter()
            subprocess.run([sys.executable, "-m", "numbasparse", "compile", "--n", "64"], env=env, check=True,
                           capture_output=True)
            compile_s = __import__("time").perf_counter() - start
            rows.append(dict(measure(args.backend, env), scenario="precompiled", backend=args.backend, rep=rep,
                             precompile_s=compile_s))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    keys = ["import", "context", "from_scipy", "spmm sum", "spmm max", "sddmm", "spmm sum again"]
    print(f"\n{'scenario':<12}" + "".join(f"{k:>15}" for k in keys) + "   (median seconds)")
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        got = [r for r in rows if r["scenario"] == scenario]
        cells = []
        for k in keys:
            values = sorted(r[k] for r in got if k in r)
            cells.append(f"{values[len(values) // 2]:>15.3f}" if values else f"{'-':>15}")
        print(f"{scenario:<12}" + "".join(cells))


if __name__ == "__main__":
    main()
