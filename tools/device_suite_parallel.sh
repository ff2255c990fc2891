#!/usr/bin/env bash
# The whole GPU test suite in one device call on a host with 4 or more GPUs: seven pytest shards at
# once, each seeing every GPU (so the several-GPU code paths run) with a different one first (its
# default GPU).  Verbose logs under $OUT/pytest_shard*.log, so a shard cut by its limit still names
# its failures; prints each shard's last lines and every failure.
# Usage on the device machine: bash tools/device_suite_parallel.sh [SECONDS_PER_SHARD] [SHARD,...] [GPU,...]
# (the listed shards only, e.g. "0,1,2" then "3,4,5,6" in two calls on a one-GPU machine; the
# listed GPUs only, e.g. "1,2,3" while GPU 0 times something else).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
limit=${1:-540}
only=${2:-}
gpus=(${3:-$(seq -s ' ' 0 $(( $(nvidia-smi -L | wc -l) - 1 )))})
gpus=(${gpus[@]//,/ })
n_gpus=${#gpus[@]}
top_rest="tests --ignore=tests/cuda --ignore=tests/select --ignore=tests/preprocess --ignore=tests/reorder"
top_rest="$top_rest --ignore=tests/bench --ignore=tests/cpu --ignore=tests/test_api.py --ignore=tests/test_fuzz_api.py"
top_rest="$top_rest --ignore=tests/test_distributed.py --ignore=tests/test_torch.py --ignore=tests/test_half.py --ignore=tests/test_pyg.py"
# Seven shards of roughly equal length on an H100 (the slowest files alone); shard i runs first on
# the (i mod n)-th of the n GPUs used.
shards=(
  "tests/cuda/test_hp.py"
  "tests/cuda/test_gpu.py"
  "tests/cuda/test_launch.py tests/test_api.py"
  "tests/cuda tests/select tests/preprocess tests/reorder tests/bench tests/cpu --ignore=tests/cuda/test_hp.py --ignore=tests/cuda/test_gpu.py --ignore=tests/cuda/test_launch.py"
  "tests/test_fuzz_api.py tests/test_distributed.py"
  "tests/test_torch.py tests/test_half.py tests/test_pyg.py"
  "$top_rest"
)
run=()
for i in "${!shards[@]}"; do [[ -z "$only" || ",$only," == *",$i,"* ]] && run+=("$i"); done
(( ${#run[@]} )) || { echo "no shard matches '$only' (shards 0-$(( ${#shards[@]} - 1 )), comma-separated)"; exit 2; }
for i in "${run[@]}"; do
  first=$((i % n_gpus))
  order=$(python3 -c "g='${gpus[*]}'.split(); f=$first; print(','.join(g[(f + k) % len(g)] for k in range(len(g))))")
  CUDA_VISIBLE_DEVICES=$order timeout "$limit" python3 -m pytest -v -rfE -p no:cacheprovider --durations=5 ${shards[$i]} \
    > "$OUT/pytest_shard$i.log" 2>&1 &
done
wait
for i in "${run[@]}"; do echo "== shard $i: ${shards[$i]}"; tail -2 "$OUT/pytest_shard$i.log"; done
for i in "${run[@]}"; do grep -h "FAILED\|ERROR" "$OUT/pytest_shard$i.log"; done | sort -u | head -60
