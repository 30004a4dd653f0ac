#!/usr/bin/env bash
# GPU run, part 3: the peers (faster-qwen3-tts, official qwen-tts) through their adapters on the same
# 1.7B random-weight checkpoint, measured by the same `cadence bench` client.
set -u
source bench/gpu/setup.sh
t0=$SECONDS
ensure_checkpoint
peer() {  # name port rates duration
  pid=$(timeout 240 bash bench/peers/start.sh "$1" /tmp/ckpt "$2") || { echo "$1 failed to start"; \
    tail -20 "/tmp/peers/$1.log"; cp "/tmp/peers/$1.log" "$OUT/" 2>/dev/null; return; }
  echo "$1 ready $((SECONDS - t0)) s"
  timeout "$5" python3 -m tts_engine.cli bench --url "http://127.0.0.1:$2" --request-model "$1" --rates "$3" \
    --warmup 5 --duration "$4" --request-timeout 60 --gpu-price 4.29 --no-plots \
    --label "H200, $1 adapter, Qwen3-TTS 1.7B random weights" --out "$OUT/load-$1" > "$OUT/bench-$1.log" 2>&1
  echo "$1 bench rc=$? $((SECONDS - t0)) s"; kill "$pid"; cp "/tmp/peers/$1.log" "$OUT/" 2>/dev/null
  grep -A6 -i "audible TTFA" "$OUT/load-$1/report.md" 2>/dev/null | head -12 | cut -c1-250
}
# PEERS: which of them (default both).
[[ " ${PEERS:-faster-qwen3-tts qwen-tts} " == *" faster-qwen3-tts "* ]] && \
  peer faster-qwen3-tts 8102 "${FQ_RATES:-1,2}" "${FQ_DURATION:-45}" 200
[[ " ${PEERS:-faster-qwen3-tts qwen-tts} " == *" qwen-tts "* ]] && \
  peer qwen-tts 8101 "${QT_RATES:-0.1}" "${QT_DURATION:-60}" 160
