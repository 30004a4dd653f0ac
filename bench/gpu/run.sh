#!/usr/bin/env bash
# The GPU runs, on the device machine (repo root; results under $OUT, one tarball run-<parts>.tgz):
#   CADENCE_COMMIT=<sha> bash bench/gpu/run.sh PART...     the parts in the order given:
#     tests    tests/gpu, then tests/kernels compiled for the card (GPU_TESTS: other test paths;
#              GPU_TESTS_K: a pytest -k expression)
#     stages   issue 3's stage table: python -m bench.stages (the talker step, code-predictor frame,
#              frame step and codec chunks at batch 1 / 8 / 32 / 64, the copy floor, a prompt's
#              prefill, the plain reference loop, 100 sequential socket requests' first PCM;
#              STAGE_ARGS: more of its arguments)
#     load     `cadence bench` at RATES (default 10,20) req/s, DURATION (default 90) s each, against
#              one `cadence serve` with the defaults (SERVE_ARGS: more of its arguments)
#     peers    the peers' adapters (bench/peers) under the same client (PEERS, FQ_RATES, QT_RATES)
# The 1.7B random-weight checkpoint is made at /tmp/ckpt once per machine (bench/gpu/setup.sh).
# DEADLINE (epoch seconds, default start + 585) is when everything must have stopped, inside one
# device call's limit; a part that cannot finish by then is skipped.
set -u
export CADENCE_COMMIT=${CADENCE_COMMIT:-unknown}  # the device's copy carries stale git metadata
[ $# -gt 0 ] || { sed -n 2,15p "$0"; exit 2; }
source bench/gpu/setup.sh
DEADLINE=${DEADLINE:-$(( $(date +%s) + 585 ))}; PORT=${PORT:-8000}; TAG=$(IFS=-; echo "$*")
W=/tmp/run-$TAG; rm -rf "$W"; mkdir -p "$W"
t0=$SECONDS
left() { local n=$(( DEADLINE - $(date +%s) - ${1:-0} )); echo $(( n > 1 ? n : 1 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$W/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$W/gpu.txt"
finish() { tar -czf "$OUT/run-$TAG.tgz" -C "$W" . ; }
trap finish EXIT
# `cadence bench` without the installed console command (the tree is on PYTHONPATH, not pip-installed).
cadence_bench() {  # bounded by the deadline (timeout cannot run a shell function, so it runs in here)
  timeout "$(left 10)" python3 -c 'import argparse, sys
from bench.load.cli import register
p = argparse.ArgumentParser(prog="cadence"); register(p.add_subparsers())
args = p.parse_args(["bench", *sys.argv[1:]]); sys.exit(args.func(args))' "$@"
}
wait_ready() {  # pid port
  until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$2/ready', timeout=2)" 2>/dev/null; do
    kill -0 "$1" 2>/dev/null || return 1
    sleep 1
  done
}

part_tests() {
  # shellcheck disable=SC2086  # GPU_TESTS splits into test paths
  timeout "$(left 60)" python3 -m pytest -q -m gpu ${GPU_TESTS:-tests/gpu} ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} \
    -p no:cacheprovider -rf > "$W/gpu-tests.log" 2>&1
  echo "gpu tests rc=$? $((SECONDS - t0)) s"; tail -5 "$W/gpu-tests.log" | cut -c1-300
  timeout "$(left 5)" python3 -m pytest -q tests/kernels ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} -p no:cacheprovider \
    > "$W/kernel-tests.log" 2>&1
  echo "kernel tests rc=$? $((SECONDS - t0)) s"; tail -3 "$W/kernel-tests.log" | cut -c1-300
}

part_stages() {
  ensure_checkpoint
  # shellcheck disable=SC2086  # STAGE_ARGS splits into arguments
  timeout "$(left 5)" python3 -m bench.stages --model /tmp/ckpt --out "$W/stages.json" ${STAGE_ARGS:-} \
    > "$W/stages.log" 2>&1
  echo "stages rc=$? $((SECONDS - t0)) s"; grep -E "^\||floor|prefill|codec:|reference|socket" "$W/stages.log"
}

part_load() {
  ensure_checkpoint
  # shellcheck disable=SC2086  # SERVE_ARGS splits into arguments
  python3 -m tts_engine.cli serve --model /tmp/ckpt --device cuda --port "$PORT" --log-level warning ${SERVE_ARGS:-} \
    > "$W/serve.log" 2>&1 &
  local server=$!
  wait_ready $server "$PORT" || { echo "server died"; tail -30 "$W/serve.log"; return; }
  echo "server ready $((SECONDS - t0)) s"
  local rates=${RATES:-10,20} duration=${DURATION:-90}
  local need=$(( (duration + 5) * $(tr -cd , <<< "$rates," | wc -c) + 20 ))
  if [ "$(left 10)" -lt "$need" ]; then
    echo "load skipped: $need s needed, $(left 10) left"
  else
    cadence_bench --url "http://127.0.0.1:$PORT" --rates "$rates" --warmup 5 \
      --duration "$duration" --gpu-price 4.29 --no-plots \
      --label "$(head -2 "$W/gpu.txt" | tail -1 | cut -d, -f1), Qwen3-TTS 1.7B random weights, commit ${CADENCE_COMMIT:-?}" \
      --out "$W/load" > "$W/bench.log" 2>&1
    echo "bench rc=$? $((SECONDS - t0)) s"; grep "req/s" "$W/bench.log" | cut -c1-200
  fi
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())" \
    > "$W/metrics.txt" 2>&1
  kill $server; wait $server 2>/dev/null
}

part_peers() {  # name port rates duration: each peer's adapter started, then the same client against it
  ensure_checkpoint
  peer() {
    local pid
    pid=$(timeout 240 bash bench/peers/start.sh "$1" /tmp/ckpt "$2") || { echo "$1 failed to start"; \
      cp "/tmp/peers/$1.log" "$W/" 2>/dev/null; return; }
    cadence_bench --url "http://127.0.0.1:$2" --request-model "$1" --rates "$3" --warmup 5 \
      --duration "$4" --request-timeout 60 --gpu-price 4.29 --no-plots \
      --label "$1 adapter, Qwen3-TTS 1.7B random weights" --out "$W/load-$1" > "$W/bench-$1.log" 2>&1
    echo "$1 bench rc=$? $((SECONDS - t0)) s"; kill "$pid"; cp "/tmp/peers/$1.log" "$W/" 2>/dev/null
  }
  [[ " ${PEERS:-faster-qwen3-tts qwen-tts} " == *" faster-qwen3-tts "* ]] && peer faster-qwen3-tts 8102 "${FQ_RATES:-1,2}" 45
  [[ " ${PEERS:-faster-qwen3-tts qwen-tts} " == *" qwen-tts "* ]] && peer qwen-tts 8101 "${QT_RATES:-0.1}" 60
}

for part in "$@"; do
  declare -F "part_$part" > /dev/null || { echo "unknown part $part (tests, stages, load, peers)"; exit 2; }
  "part_$part"
done
