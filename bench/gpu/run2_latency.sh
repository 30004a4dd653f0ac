#!/usr/bin/env bash
# GPU run, part 1: GPU tests of what changed, compiled sampler-kernel tests, single-stream latency.
# On the device machine (repo root): CADENCE_COMMIT=<sha> bash bench/gpu/run2_latency.sh   (writes to $OUT)
set -u
source bench/gpu/setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
t0=$SECONDS
python3 -m tts_engine.cli make-checkpoint --size 1.7b --out /tmp/ckpt --device cuda > "$OUT/make.log" 2>&1
echo "checkpoint rc=$? $((SECONDS - t0)) s"
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_fast_path_gpu.py tests/gpu/test_codec_graphs.py \
  tests/gpu/test_triton_path_gpu.py tests/gpu/test_code_predictor_gpu.py tests/gpu/test_engine_gpu.py -p no:cacheprovider \
  > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests rc=$? $((SECONDS - t0)) s"; tail -4 "$OUT/gpu-tests.log"
timeout 60 python3 -m pytest -q tests/kernels/test_sample.py -p no:cacheprovider > "$OUT/kernel-tests.log" 2>&1
echo "kernel tests rc=$? $((SECONDS - t0)) s"; tail -2 "$OUT/kernel-tests.log"
timeout $((580 - SECONDS)) python3 -m bench.latency --model /tmp/ckpt --out "$OUT/latency.json" --modes triton \
  --skip-codec --requests ${REQUESTS:-100} > "$OUT/latency.log" 2>&1
echo "latency rc=$? $((SECONDS - t0)) s"; grep -E "^(batch|prefill|reference|socket)" "$OUT/latency.log" | cut -c1-300
