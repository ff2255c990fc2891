"""How long ``algorithm="tuned"`` takes to choose a schedule (GPU only), with an empty cache:
    python benchmarks/probes/tuned_search_time.py --graphs default,rmat:16,rmat:18 --n 32,128 --out search.json

For each op, graph and N: the first call (``tuner.schedule_for``: cost-model ranking, the top 8
compiled and timed, the winner written to the disk cache; the cache record's ``search_s``), the
second call on the same CSR (schedule from its cache) and a call on a fresh CSR of the same graph
(schedule from disk).
"""
import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def timed(fn):
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="default,rmat:16")
    p.add_argument("--n", default="32,128")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.environ["NUMBASPARSE_CACHE"] = str(Path(tempfile.mkdtemp()) / "tuned.json")  # empty cache
    import torch

    import numbasparse as ns
    from numbasparse import graphs
    from numbasparse.select import tuner

    rows = []
    for spec in args.graphs.split(","):
        A = graphs.from_spec(spec)
        for op in ("spmm", "sddmm"):
            for n in (int(x) for x in args.n.split(",")):
                csr = ns.CSR.from_scipy(A)
                B = torch.randn(A.shape[1], n, device="cuda")
                X = torch.randn(A.shape[0], n, device="cuda")
                call = ((lambda c: ns.spmm(c, B, algorithm="tuned")) if op == "spmm"
                        else (lambda c: ns.sddmm(c, X, B, algorithm="tuned")))
                first = timed(lambda: call(csr))
                memory = timed(lambda: call(csr))
                disk = timed(lambda: call(ns.CSR.from_scipy(A)))
                record = json.loads(tuner.cache_path().read_text())
                signature = csr.cache.get("plans", ("signature",))  # set by the first call's search
                key = next(k for k in record if k.startswith(f"{op}|") and k.endswith(f"|{n}|float32")
                           and signature in k)
                rows.append(dict(op=op, graph=spec, nnz=int(A.nnz), n=n, first_call_s=first,
                                 search_s=record[key].get("search_s"), memory_call_s=memory,
                                 disk_call_s=disk, schedule=record[key]["schedule"]))
                print(f"{op} {spec} N={n}: first call {first:.2f} s (search {rows[-1]['search_s']:.2f} s), "
                      f"then {memory * 1e3:.2f} ms from memory, {disk * 1e3:.1f} ms from disk "
                      f"(upload included)", flush=True)
                Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
