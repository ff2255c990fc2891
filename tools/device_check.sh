#!/usr/bin/env bash
# One device call: a benchmark, the demo and the GPU test suite, logs under $OUT.
# Usage on the device machine (after the numpy prefix from ../shared/tools/device-wheels.sh):
#   [SKIP_TESTS=1] [SKIP_DEMO=1] [TESTS="pytest args"] bash tools/device_check.sh [BENCH ARGS...]
# The whole GPU suite takes more than 10 minutes: within one call's 10-minute limit, split it over
# two calls: TESTS="tests/cuda/test_hp.py tests/cuda/test_gpu.py tests/cuda/test_launch.py
# tests/test_api.py" (the slow part: both HP launch modes compile; 215 tests, 459 s on the H100
# on 2026-11-24) and the rest, TESTS="tests --ignore=..." with those four files (221 tests, 228 s).
# Other device tools (tools/profile_call.py, tools/ab_hp.py, ...) run in their own calls.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -c "import numpy, numba, numba_cuda, torch; print('numpy', numpy.__version__, 'numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'torch', torch.__version__)"
if [ $# -gt 0 ]; then
  python3 -m numbasparse.bench "$@" --out "$OUT/bench.json" --markdown "$OUT/bench.md" --plots "$OUT/plots" \
    > "$OUT/bench.log" 2> "$OUT/bench.err"; echo "bench rc=$?"; tail -5 "$OUT/bench.err"; tail -25 "$OUT/bench.log"
fi
if [ "${SKIP_DEMO:-0}" != 1 ]; then
  python3 -m numbasparse demo > "$OUT/demo.log" 2>&1; echo "demo rc=$?"
  [ -d .data ] && { python3 -m numbasparse demo --data .data > "$OUT/demo_data.log" 2>&1; echo "demo data rc=$?"; }
fi
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -p no:cacheprovider --durations=10 ${TESTS:-} > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"; tail -15 "$OUT/pytest.log"
fi
