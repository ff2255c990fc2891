"""Compile every kernel configuration for sm_90 without a GPU and report its resources.

    python tools/kernel_report.py            # needs numba-cuda's NVVM and ptxas (pip install ".[cu12]")

For each kernel: registers, stack frame and spill bytes (from ``ptxas -v``), the widest
global load in the PTX (``ld.global.v2``/``.v4`` = vectorized) and its float64 instructions,
which a kernel of float32 or 16-bit values must not have (Numba promotes a float32 divided by an
integer to float64: a slow division per value).  Used to check that per-thread
accumulator arrays stay in registers and which loads Numba vectorizes.  Kernels compiled with a
register cap are assembled with it and may spill up to CAPPED_SPILL_BYTES.  A kernel that fails
to compile is listed with the start of its error; the exit status is 1 if any kernel failed,
spilled beyond that or computed in float64 without float64 values.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("NUMBA_ENABLE_CUDASIM", None)  # before numba is imported: compile for real

from numba import cuda  # noqa: E402

from numbasparse.cuda import kernel_configs  # noqa: E402


#: A kernel compiled with a register cap (``max_registers``) trades a small spill for occupancy
#: on purpose (measured); more than this many spilled bytes fails the report all the same.
CAPPED_SPILL_BYTES = 16


def ptxas_path():
    found = shutil.which("ptxas")
    if found:
        return found
    import nvidia.cuda_nvcc  # the pip CUDA toolkit

    return str(Path(nvidia.cuda_nvcc.__path__[0]) / "bin" / "ptxas")


def report(name, kernel, signature, ptxas):
    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
    loads = re.findall(r"ld\.global(?:\.nc)?(?:\.v(\d))?\.(?:[fbsu])(\d+)", ptx)
    widest = max((int(v or 1) * int(bits) for v, bits in loads), default=0)
    f64 = len(re.findall(r"\.f64\b", ptx))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        cap = kernel.targetoptions.get("max_registers")  # the kernel's own cap, as its launch links it
        out = subprocess.run([ptxas, "-arch=sm_90", "-v", *([f"-maxrregcount={cap}"] if cap else []), str(src),
                              "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", out)
    stack = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", out)
    return (name, int(regs.group(1)) if regs else -1, *(int(x) for x in stack.groups()), widest, cap, f64)


def report_config(index):
    """:func:`report` of the ``index``-th kernel configuration (run in a worker process), or
    (name, error message) if it does not compile."""
    name, kernel, signature = kernel_configs()[index]
    try:
        return report(name, kernel, signature, ptxas_path())
    except Exception as exc:  # noqa: BLE001 (a typing or ptxas error: report it, go on)
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return name, f"{type(exc).__name__}: {' | '.join(lines[:3])}"[:300]


def main():
    from concurrent.futures import ProcessPoolExecutor

    print(f"{'kernel':<44} {'regs':>5} {'stack':>6} {'spill_st':>8} {'spill_ld':>8} {'widest load (bits)':>19} "
          f"{'f64 instructions':>16}")
    bad = failed = promoted = 0
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:  # compiling is CPU-bound
        for row in pool.map(report_config, range(len(kernel_configs()))):
            if len(row) == 2:
                failed += 1
                print(f"{row[0]:<44} FAILED {row[1]}", flush=True)
                continue
            bad += row[3] > (CAPPED_SPILL_BYTES if row[6] else 0)
            promoted += row[7] > 0 and "<f8" not in row[0]
            print(f"{row[0]:<44} {row[1]:>5} {row[2]:>6} {row[3]:>8} {row[4]:>8} {row[5]:>19} {row[7]:>16}", flush=True)
    if failed or bad or promoted:
        print(f"{failed} kernels failed to compile, {bad} spilled, {promoted} computed in float64 without float64 "
              "values", flush=True)
    return 1 if bad or failed or promoted else 0


if __name__ == "__main__":
    sys.exit(main())
