#!/usr/bin/env bash
# GPU session run: GPU tests, compiled kernel tests, step profile, latency benchmark.
# Usage on the device machine (repo root): CADENCE_COMMIT=<sha> bash bench/gpu/run1.sh  (writes to $OUT)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
t0=$SECONDS
timeout 240 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $((SECONDS - t0)) s"; tail -3 "$OUT/gpu-tests.log"
timeout 120 python3 -m pytest -q tests/kernels -p no:cacheprovider > "$OUT/kernel-tests.log" 2>&1
echo "kernel tests rc=$? $((SECONDS - t0)) s"; tail -3 "$OUT/kernel-tests.log"
timeout 90 python3 -m bench.profile_step --out "$OUT/profile.json" > "$OUT/profile.log" 2>&1
echo "profile rc=$? $((SECONDS - t0)) s"; tail -34 "$OUT/profile.log"
timeout $((570 - SECONDS)) python3 -m bench.latency --model /tmp/ckpt --make --out "$OUT/latency.json" \
  --requests ${REQUESTS:-100} > "$OUT/latency.log" 2>&1
echo "latency rc=$? $((SECONDS - t0)) s"; grep -E "^(batch|prefill|codec batch 1|reference|socket|stages)" "$OUT/latency.log" | cut -c1-400
