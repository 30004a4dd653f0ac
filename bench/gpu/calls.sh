#!/usr/bin/env bash
# One session's GPU measurements in three device calls, back to back on one warm machine (it keeps /tmp and the
# processes started with setsid for 30 s idle). Each call stages one part of the agent's packages
# (bench/gpu/agent_pack.sh; carry one of .gpu/p1..p3) and runs one step; results go under $OUT.
#   [".whl", ".gpu/p1"]  bash bench/gpu/calls.sh servers   the server's wheels, the 1.7B random-weight checkpoint,
#                                                           two `cadence serve` left running: :8001 with the defaults
#                                                           (the soak's), :8000 with per-client limits lifted (the
#                                                           agent bench's callers all come from 127.0.0.1)
#   [".gpu/p2"]          bash bench/gpu/calls.sh soak      bench.soak, 9 minutes (SOAK_MINUTES) at 30 clients/s, :8001
#   [".gpu/p3"]          bash bench/gpu/calls.sh agent     the agent's packages, then bench.agent and bench.voice
#                                                           against :8000, each bounded; $OUT/agent.tgz after each
#   []                   bash bench/gpu/calls.sh fast      after `agent`: Twilio callers with a faster stand-in LLM
#                                                           (150 tokens/s), the engine's share without the LLM's pace;
#                                                           then N = 50 with Whisper on the GPU
set -u
[ "${1:-}" = fast ] || bash bench/gpu/agent.sh stage > /dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ready() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/ready', timeout=2)" 2>/dev/null; }
serve() {  # port, then more `cadence serve` arguments; its pid in /tmp/serve-PORT.pid, its log in /tmp/serve-PORT.log
  local port=$1; shift
  setsid python3 -m tts_engine.cli serve --model /tmp/ckpt --device cuda --port "$port" --log-level warning "$@" \
    > /dev/null 2> "/tmp/serve-$port.log" < /dev/null & echo $! > "/tmp/serve-$port.pid"
}
case "${1:-}" in
  servers)
    source bench/gpu/setup.sh; ensure_checkpoint || { cat "$OUT/make.log"; exit 1; }
    printf '[server]\nmax_streams_per_client = 100000\nmax_ws_connections_per_client = 100000\n' > /tmp/lifted.toml
    t0=$SECONDS; serve 8001; serve 8000 --config /tmp/lifted.toml
    until ready 8001 && ready 8000; do
      sleep 1; [ $((SECONDS - t0)) -lt 400 ] || { tail -20 /tmp/serve-800*.log; exit 1; }
    done
    echo "both servers ready in $((SECONDS - t0)) s"; nvidia-smi --query-gpu=name,memory.used --format=csv ;;
  soak)
    ready 8001 || { echo "no server on :8001"; exit 1; }
    m=${SOAK_MINUTES:-9}  # fewer where the session's device time is short
    timeout 590 python3 -m bench.soak --url http://127.0.0.1:8001 --pid "$(cat /tmp/serve-8001.pid)" \
      --log /tmp/serve-8001.log --minutes "$m" --rate 30 --out "$OUT/soak-${m}min.json" 2>&1 | tail -40 ;;
  agent)
    source bench/gpu/agent.sh install || exit 1
    ready 8000 || { echo "no server on :8000"; exit 1; }
    kill "$(cat /tmp/serve-8001.pid)" 2>/dev/null
    R=/tmp/res; rm -rf $R; mkdir -p $R; U=ws://127.0.0.1:8000/v1/stream
    bounded() {  # seconds, name, command...: its output in $R/NAME.log, then everything so far into $OUT
      local s=$1 name=$2; shift 2
      timeout "$s" "$@" > "$R/$name.log" 2>&1; echo "$name: rc $?"; tail -4 "$R/$name.log"
      tar -czf "$OUT/agent.tgz" -C $R .
    }
    # The agent runs docs/performance.md leaves open. Each is bounded to fit the call: a round of N callers takes
    # 40-60 s, eight agent processes start in ~20 s, and a voice bench's turn takes ~10 s after its demo starts.
    bounded 160 tw8 python3 -m bench.agent --transport twilio --agent-workers 8 --cadence-url $U \
      --conversations 30,50 --out $R/tw8
    for hold in 0.6 0.3; do  # the default reply hold, and a shorter one (the trade-off: docs/agent.md)
      printf 'cadence_url = "%s"\nfallback_tts = "none"\nreply_hold_s = %s\n' $U $hold > /tmp/demo.toml
      # the scripted LLM at the agent bench's stand-in pace: 200 ms, then 60 tokens/s
      printf 'scripted_first_token_s = 0.2\nscripted_tokens_per_s = 60\n' >> /tmp/demo.toml
      bounded 125 voice-hold$hold python3 -m bench.voice --client aiortc --turns 5 \
        --demo-args "--config /tmp/demo.toml" --out $R/voice-hold$hold
    done
    # Whisper runs in parallel within each agent process (same threads) against tw8's one at a time
    bounded 100 tw8-stt4 python3 -m bench.agent --transport twilio --agent-workers 8 --stt-workers 4 \
      --cadence-url $U --conversations 50 --out $R/tw8-stt4 ;;
  fast)
    export XDG_CACHE_HOME=/tmp/agent-pack/cache HF_HUB_OFFLINE=1
    ready 8000 || { echo "no server on :8000"; exit 1; }
    timeout 190 python3 -m bench.agent --transport twilio --agent-workers 8 --llm-tokens-per-s 150 \
      --cadence-url ws://127.0.0.1:8000/v1/stream --conversations 20,30,40 --out "$OUT/tw8-150tps" 2>&1 | tail -12
    # Whisper on the GPU (CTranslate2's CUDA build): the agents' recogniser off the machine's cores at N = 50
    printf 'whisper_device = "cuda"\n' > /tmp/stt-cuda.toml
    timeout 100 python3 -m bench.agent --transport twilio --agent-workers 8 --config /tmp/stt-cuda.toml \
      --cadence-url ws://127.0.0.1:8000/v1/stream --conversations 50 --out "$OUT/tw8-stt-cuda" 2>&1 | tail -12 ;;
  *) sed -n 2,14p "$0"; exit 2 ;;
esac
