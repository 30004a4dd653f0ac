#!/usr/bin/env bash
# One session's GPU measurements in a few device calls, back to back on one warm machine (it keeps /tmp and the
# processes started with setsid for 30 s idle), each as `CADENCE_COMMIT=<sha> bash bench/gpu/calls.sh ...`. The
# agent's packages travel in three parts (bench/gpu/agent_pack.sh; carry .gpu/p1..p3, one a call); results go under
# $OUT.
#   [".whl", ".gpu/p1"]         bash bench/gpu/calls.sh sweep main .
#   [".whl", ".gpu/p2", ".ab"]  bash bench/gpu/calls.sh sweep branch .ab/tree && bash bench/gpu/calls.sh servers
#     sweep NAME TREE [NAME TREE ...]: for each (results in $OUT/NAME.tgz), the engine in TREE (e.g. .ab/tree from
#     `git archive BRANCH tts_engine | tar -x -C .ab/tree`) on :8002 under this tree's `cadence bench` (AB_RATES,
#     AB_WARMUP, AB_DURATION;
#     BENCH_ARGS: more of its arguments, e.g. "--text-chars 500,1500" for the long-form mix, "--client-processes 4"
#     past ~100 req/s; SERVE_ARGS: more `cadence serve` arguments; TOML_<NAME>: settings file lines for NAME's server
#     alone, for an A/B of settings on one tree), the 1.7B random-weight checkpoint made first;
#     servers: `cadence serve` left running on :8000 for the agent's benchmarks
#   [".gpu/p3"]                  bash bench/gpu/calls.sh agent   the agent's packages; Whisper's speed on the CPU and
#                                                                the GPU; bench.agent and bench.voice against :8000,
#                                                                each bounded; $OUT/agent.tgz after each
#   []                           bash bench/gpu/calls.sh voice   after `agent`: bench.voice in the settings VOICE names
#   []                           bash bench/gpu/calls.sh more    after `agent`: WebRTC at N = 20, 150 tokens/s at 50
#   []                           bash bench/gpu/calls.sh tail    after `servers`: N = 50 with the server on cores of
#                                                                its own against shared ones (TAIL_RUNS)
#   [".whl"]                     bash bench/gpu/calls.sh soak    bench.soak (SOAK_MINUTES, 9), its own server
set -u
# The device's copy of the tree carries stale git metadata: the reports name the commit given here, or "unknown".
export CADENCE_COMMIT=${CADENCE_COMMIT:-unknown}
[ -d .gpu ] && { bash bench/gpu/agent.sh stage > /dev/null || exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ready() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/ready', timeout=2)" 2>/dev/null; }
metrics() {  # port, file: the server's /metrics
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$1/metrics').read().decode())" > "$2" 2>&1
}
serve() {  # port, engine tree, then more `cadence serve` arguments; pid in /tmp/serve-PORT.pid, log /tmp/serve-PORT.log
  local port=$1 tree=$2 root=$PWD; shift 2  # the tree's tts_engine first, the rest (bench) from this one
  (cd "$tree" && PYTHONPATH=/tmp/site:$PWD:$root exec setsid python3 -m tts_engine.cli serve --model /tmp/ckpt \
    --device cuda --port "$port" --log-level warning "$@") > /dev/null 2> "/tmp/serve-$port.log" < /dev/null &
  echo $! > "/tmp/serve-$port.pid"
}
wait_ready() {  # port, seconds
  local t0=$SECONDS
  until ready "$1"; do
    sleep 1; [ $((SECONDS - t0)) -lt "$2" ] && kill -0 "$(cat "/tmp/serve-$1.pid")" 2>/dev/null ||
      { tail -20 "/tmp/serve-$1.log"; return 1; }
  done
  echo "server :$1 ready in $((SECONDS - t0)) s"
}
# One client address opens every stream of the benchmarks: per-client limits lifted (the engine's own caps stay).
printf '[server]\nmax_streams_per_client = 100000\nmax_ws_connections_per_client = 100000\n' > /tmp/lifted.toml
sweep() {  # name, engine tree: its server on :8002, this tree's `cadence bench` against it, its /metrics after
  local toml="TOML_$1"  # TOML_<name>: more settings for this one, e.g. TOML_t4='[scheduler]\ncodec_tick_steps = 4'
  { cat /tmp/lifted.toml; printf '%b\n' "${!toml:-}"; } > "/tmp/settings-$1.toml"
  serve 8002 "$2" --config "/tmp/settings-$1.toml" ${SERVE_ARGS:-}; wait_ready 8002 200 || return 1
  (cd "$2" && PYTHONPATH=/tmp/site:$PWD python3 -c "import tts_engine.engine.core as c; print('$1:', c.__file__)")
  local n=$(echo "${AB_RATES:-20,50,75,100,150}" | tr ',' ' ' | wc -w) w=${AB_WARMUP:-5} d=${AB_DURATION:-25}
  timeout $((n * (w + d + 25) + 30)) python3 -c 'import argparse, sys
from bench.load.cli import register
p = argparse.ArgumentParser(prog="cadence"); register(p.add_subparsers())
args = p.parse_args(["bench", *sys.argv[1:]]); sys.exit(args.func(args))' --url http://127.0.0.1:8002 \
    --rates "${AB_RATES:-20,50,75,100,150}" --warmup "$w" --duration "$d" --gpu-price 4.29 --no-plots \
    --label "$(nvidia-smi --query-gpu=name --format=csv,noheader), Qwen3-TTS 1.7B random weights, $1" \
    --out "$OUT/$1" ${BENCH_ARGS:-} > "/tmp/bench-$1.log" 2>&1
  echo "$1: bench rc $?"; grep "req/s" "/tmp/bench-$1.log" | cut -c1-200
  metrics 8002 "$OUT/$1/metrics.txt"
  cp /tmp/serve-8002.log "$OUT/$1/serve.log"; kill "$(cat /tmp/serve-8002.pid)"; sleep 3
  tar -czf "$OUT/$1.tgz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"  # one file a sweep: a call brings back at most 8
}
case "${1:-}" in
  sweep)
    source bench/gpu/setup.sh; t0=$SECONDS; ensure_checkpoint || { cat "$OUT/make.log"; exit 1; }
    echo "checkpoint in $((SECONDS - t0)) s"; shift
    while [ $# -ge 2 ]; do sweep "$1" "$2"; shift 2; done ;;
  servers)
    source bench/gpu/setup.sh; ensure_checkpoint || { cat "$OUT/make.log"; exit 1; }
    serve 8000 . --config /tmp/lifted.toml; wait_ready 8000 400 || exit 1
    nvidia-smi --query-gpu=name,memory.used --format=csv ;;
  soak)  # bench.soak against `cadence serve` with the defaults, SOAK_MINUTES (9) at 30 clients/s
    source bench/gpu/setup.sh; ensure_checkpoint || { cat "$OUT/make.log"; exit 1; }
    serve 8001 .; wait_ready 8001 400 || exit 1
    m=${SOAK_MINUTES:-9}
    timeout 590 python3 -m bench.soak --url http://127.0.0.1:8001 --pid "$(cat /tmp/serve-8001.pid)" \
      --log /tmp/serve-8001.log --minutes "$m" --rate 30 --out "$OUT/soak-${m}min.json" 2>&1 | tail -40 ;;
  agent)
    source bench/gpu/agent.sh install || exit 1
    ready 8000 || { echo "no server on :8000"; exit 1; }
    R=/tmp/res; rm -rf $R; mkdir -p $R; U=ws://127.0.0.1:8000/v1/stream
    bounded() {  # seconds, name, command...: its output in $R/NAME.log, then everything so far into $OUT
      local s=$1 name=$2; shift 2
      timeout "$s" "$@" > "$R/$name.log" 2>&1; echo "$name: rc $?"; tail -4 "$R/$name.log"
      tar -czf "$OUT/agent.tgz" -C $R .
    }
    # One Whisper run of each spoken question: on the CPU with 4 threads (the default) and 8, and on the GPU
    for t in 4 8; do
      bounded 60 "stt-cpu$t" python3 -m bench.voice.stt_compare --questions --only "10 s" --cpu-threads $t \
        --out "$R/stt-cpu$t.json"
    done
    bounded 60 stt-cuda python3 -m bench.voice.stt_compare --questions --only "10 s" --device cuda \
      --out $R/stt-cuda.json
    # The agent's defaults (Whisper on the GPU where it runs there) at the N the CPU recogniser broke at
    bounded 170 tw8 python3 -m bench.agent --transport twilio --agent-workers 8 --cadence-url $U \
      --conversations 20,50 --out $R/tw8
    VOICE=${VOICE:-"0.2/0.6 0.12/0.4"} bash bench/gpu/calls.sh voice ;;
  more)  # after `agent`: WebRTC callers at N = 20, and Twilio ones at N = 50 with a faster stand-in LLM (150 tokens/s)
    [ -n "${XDG_CACHE_HOME:-}" ] || source bench/gpu/agent.sh env
    ready 8000 || { echo "no server on :8000"; exit 1; }
    U=ws://127.0.0.1:8000/v1/stream
    timeout 150 python3 -m bench.agent --transport webrtc --agent-workers 8 --cadence-url $U --conversations 20 \
      --out "$OUT/rtc8" 2>&1 | tail -4
    timeout 150 python3 -m bench.agent --transport twilio --agent-workers 8 --llm-tokens-per-s 150 --cadence-url $U \
      --conversations 50 --out "$OUT/tw8-150tps" 2>&1 | tail -4 ;;
  tail)  # after `servers` (the agent installed here, or .gpu/p3 carried): where N = 50's tail goes. Twilio callers
    # against :8000 in each of TAIL_RUNS: shared (as it is), own-cores (the server on ENGINE_CORES of its own, the
    # agents and callers on the rest), own-cores-stt-cpu (Whisper on the agents' cores, not the GPU); /metrics after
    if PYTHONPATH=/tmp/site python3 -c "import faster_whisper" 2>/dev/null; then source bench/gpu/agent.sh env
    else source bench/gpu/agent.sh install || exit 1; fi
    ready 8000 || { echo "no server on :8000"; exit 1; }
    U=ws://127.0.0.1:8000/v1/stream pid=$(cat /tmp/serve-8000.pid) last=$(($(nproc) - 1)) e=${ENGINE_CORES:-4}
    printf 'whisper_device = "cpu"\n' > /tmp/stt-cpu.toml
    for run in ${TAIL_RUNS:-shared own-cores own-cores-stt-cpu}; do
      pin=() more=()
      taskset -a -p -c "0-$last" "$pid" > /dev/null
      case $run in own-cores*) taskset -a -p -c "0-$((e - 1))" "$pid" > /dev/null; pin=(taskset -c "$e-$last") ;; esac
      # Whisper on the CPU answers N = 50 slowly: that run gets twice the time (at 125 s it wrote nothing)
      s=${TAIL_S:-130}; case $run in *stt-cpu) more=(--config /tmp/stt-cpu.toml) s=$((s * 2)) ;; esac
      timeout "$s" "${pin[@]}" python3 -m bench.agent --transport twilio --agent-workers 8 \
        --cadence-url $U --conversations "${TAIL_N:-50}" "${more[@]}" --out "$OUT/tail-$run" 2>&1 | tail -3
      metrics 8000 "$OUT/tail-$run/metrics.txt"
    done
    taskset -a -p -c "0-$last" "$pid" > /dev/null ;;
  voice)  # VOICE: "VAD_STOP/HOLD ..." settings; the scripted LLM at the agent bench's pace (200 ms, then 60 tokens/s)
    [ -n "${XDG_CACHE_HOME:-}" ] || source bench/gpu/agent.sh env
    ready 8000 || { echo "no server on :8000"; exit 1; }
    R=/tmp/res; mkdir -p $R
    for setting in ${VOICE:-0.08/0.3}; do
      stop=${setting%/*} hold=${setting#*/} name=voice-stop${setting%/*}-hold${setting#*/}
      printf 'cadence_url = "ws://127.0.0.1:8000/v1/stream"\nfallback_tts = "none"\nvad_stop_s = %s\n' "$stop" \
        > /tmp/demo.toml
      printf 'reply_hold_s = %s\nscripted_first_token_s = 0.2\nscripted_tokens_per_s = 60\n' "$hold" >> /tmp/demo.toml
      timeout 125 python3 -m bench.voice --client aiortc --turns 5 --demo-args "--config /tmp/demo.toml" \
        --out "$R/$name" > "$R/$name.log" 2>&1
      echo "$name: rc $?"; tail -4 "$R/$name.log"; tar -czf "$OUT/voice.tgz" -C $R .
    done ;;
  *) sed -n 2,19p "$0"; exit 2 ;;
esac
