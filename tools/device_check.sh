#!/usr/bin/env bash
# One device call: GPU test suite, demo, kernel report and a benchmark, logs under $OUT.
# Usage on the device machine (after the numpy prefix from ../shared/tools/device-wheels.sh):
#   bash tools/device_check.sh [BENCH ARGS...]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -c "import numpy, numba, numba_cuda, torch; print('numpy', numpy.__version__, 'numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'torch', torch.__version__)"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -p no:cacheprovider --durations=10 2>&1 | tee "$OUT/pytest.log" | tail -15
fi
if [ "${SKIP_DEMO:-0}" != 1 ]; then
  python3 -m numbasparse demo 2>&1 | tee "$OUT/demo.log" | tail -30
  [ -d .data ] && python3 -m numbasparse demo --data .data 2>&1 | tee "$OUT/demo_data.log" | tail -45
fi
if [ $# -gt 0 ]; then
  python3 -m numbasparse.bench "$@" --out "$OUT/bench.json" --markdown "$OUT/bench.md" --plots "$OUT/plots" 2>&1 | tee "$OUT/bench.log" | tail -60
fi
