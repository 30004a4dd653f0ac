#!/usr/bin/env bash
# Two run3.sh parts side by side on nvidia-h200-x2, one GPU each (a load sweep must have its GPU to
# itself, so each part gets one). On the device machine (repo root):
#   GPU0="PART=load RATES=10,20 DURATION=120" GPU1="PART=latency" CADENCE_COMMIT=<sha> bash bench/gpu/run4.sh
# Each part's variables are run3.sh's; its log is $OUT/gpu<N>.log and its results $OUT/run3-gpu<N>.tgz.
set -u
source bench/gpu/setup.sh
export DEADLINE=$(( $(date +%s) + ${LIMIT:-585} ))
nvidia-smi --query-gpu=index,name,memory.used --format=csv
ensure_checkpoint
for gpu in 0 1; do
  spec=GPU$gpu
  [ -n "${!spec:-}" ] || continue
  (export CUDA_VISIBLE_DEVICES=$gpu PORT=$((8000 + gpu)) TAG=gpu$gpu; for kv in ${!spec}; do export "${kv//+/ }"; done
   bash bench/gpu/run3.sh) > "$OUT/gpu$gpu.log" 2>&1 &
done
wait
for gpu in 0 1; do echo "== gpu$gpu"; cat "$OUT/gpu$gpu.log" 2>/dev/null; done
