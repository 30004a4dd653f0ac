#!/usr/bin/env bash
# On the GPU machine: install PEER's wheels, start its adapter in the background, wait for /health.
#
#   bench/peers/start.sh qwen-tts|faster-qwen3-tts MODEL_DIR PORT [adapter arguments...]
#
# Prints the adapter's pid once it answers (model loaded and warmed up); its log is
# /tmp/peers/PEER.log. Run from the repository root with the server wheels (.whl/*.whl: fastapi,
# uvicorn, pydantic, ...) already on PYTHONPATH; PEER's own site goes in front of it, so its
# transformers (4.57.3 for qwen-tts) shadows the machine's.
set -euo pipefail
cd "$(dirname "$0")/../.."
peer="${1:?usage: start.sh qwen-tts|faster-qwen3-tts MODEL_DIR PORT [args...]}" model="${2:?model dir}" port="${3:?port}"
shift 3
case "$peer" in
  qwen-tts) module=qwen_tts ;;
  faster-qwen3-tts) module=faster_qwen3_tts ;;
  *) echo "unknown peer $peer" >&2; exit 2 ;;
esac
site="$(bash bench/peers/wheels.sh install "$peer")"
log="/tmp/peers/$peer.log"
PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  nohup python3 -m "bench.peers.$module" --model "$model" --port "$port" "$@" >"$log" 2>&1 &
pid=$!
for _ in $(seq 900); do
  if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null; then
    echo "$pid"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "$peer exited before it answered; the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  sleep 1
done
echo "$peer did not answer within 900 s (pid $pid, log $log)" >&2
exit 1
