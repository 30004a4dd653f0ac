#!/usr/bin/env bash
# GPU run, part 2: the open-loop sweep (cadence bench) against one `cadence serve` on the 1.7B
# random-weight checkpoint. RATES / DURATION / WARMUP from the environment.
set -u
source bench/gpu/setup.sh
t0=$SECONDS
ensure_checkpoint
python3 -m tts_engine.cli serve --model /tmp/ckpt --device cuda --port 8000 --log-level warning ${SERVE_ARGS:-} \
  > "$OUT/serve.log" 2>&1 &
server=$!
until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/ready', timeout=2)" 2>/dev/null; do
  kill -0 $server 2>/dev/null || { echo "server died"; tail -30 "$OUT/serve.log"; exit 1; }
  sleep 1
done
echo "server ready $((SECONDS - t0)) s"
timeout $((590 - SECONDS)) python3 -m tts_engine.cli bench --url http://127.0.0.1:8000 --rates "${RATES:-1,5,10,20,30,40}" \
  --warmup "${WARMUP:-10}" --duration "${DURATION:-60}" --gpu-price 4.29 --no-plots \
  --label "H200, Qwen3-TTS 1.7B CustomVoice random weights, commit ${CADENCE_COMMIT:-?}" --out "$OUT/load" \
  > "$OUT/bench.log" 2>&1
echo "bench rc=$? $((SECONDS - t0)) s"
python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/metrics').read().decode())" > "$OUT/metrics.txt" 2>&1
kill $server; tail -45 "$OUT/load/report.md" 2>/dev/null | cut -c1-250
