#!/usr/bin/env bash
# GPU session 3 runs. On the device machine (repo root):
#   PART=latency CADENCE_COMMIT=<sha> bash bench/gpu/run3.sh   GPU tests, kernel timings, bench.latency
#                                                               (codec per precision, socket: default and
#                                                               --codec-stream) with the TTFA breakdown
#   PART=codec ... bash bench/gpu/run3.sh                       bench.latency's codec part alone
#   PART=codecwin ... bash bench/gpu/run3.sh                    the codec's dense convs: cuDNN against window
#                                                               GEMMs (bf16 fast path), profiles, GPU tests
#   PART=load ... bash bench/gpu/run3.sh                        load sweeps: one `cadence serve` per entry
#                                                               of CONFIGS ("name:serve args;..."),
#                                                               RATES / WARMUP / DURATION per sweep (or
#                                                               PHASES=rate:seconds,...: a sweep each);
#                                                               SOCKET=N: N sequential requests first
#                                                               (PHASES=none: those alone)
#   PART=peers ... bash bench/gpu/run3.sh                       the peers (run2_peers.sh)
#   PART=gputest ... bash bench/gpu/run3.sh                     GPU_TESTS (default tests/gpu/test_engine_gpu.py)
#   PART=trace ... bash bench/gpu/run3.sh                       bench.first_audio_trace (an idle request's GPU timeline)
#   PART=lanes ... bash bench/gpu/run3.sh                       bench.lanes (a newcomer's work on a stream of its own)
#   PART=delivery ... bash bench/gpu/run3.sh                    bench.first_audio_delivery (YIELDS=0,0.3,0.6: the
#                                                               way around the engine per --first-audio-yield-ms)
#   PART=barrier ... bash bench/gpu/run3.sh                     bench.grid_barrier (would a persistent kernel pay: a
#                                                               chain of products, a launch each or a grid barrier)
#   PART=profile ... bash bench/gpu/run3.sh                     bench.profile_step (batch-1 graphs kernel by kernel,
#                                                               with and without PDL; the prefill on both paths;
#                                                               PROFILE_BATCHES, PROFILE_ARGS e.g. --cp-mma-rows 64)
#   PART=drawparts ... bash bench/gpu/run3.sh                   bench.sample_kernel --parts (what a batch-1 draw's parts cost)
#   PART=draw ... bash bench/gpu/run3.sh                        bench.sample_kernel (warps x top-k search), then the
#                                                               kernel's tests, bench.profile_step and bench.latency's
#                                                               stages with its `best` and with DRAWS (default 8,12,2)
#   PART=gemvsweep ... bash bench/gpu/run3.sh                   bench.kernels --gemv-sweep (GEMV_BATCHES=1,4,...,
#                                                               GEMV_SHAPES=cp|talker, GEMV_LIMIT seconds)
#   PART=table ... bash bench/gpu/run3.sh                       issue 3's table in one bench.latency process (stages
#                                                               at TABLE_BATCHES, the copy floor, prefill, host, the
#                                                               codec per CODEC_VARIANTS, 100 socket requests)
#   PART=kerneltests ... bash bench/gpu/run3.sh                 tests/kernels compiled on the card (KERNEL_TESTS_K: a
#                                                               pytest -k expression)
#   PART=stepsweep ... bash bench/gpu/run3.sh                   bench.step_sweep: each product's launch inside its
#                                                               batch-1 step (talker, cp, draw; SWEEP_STAGES,
#                                                               SWEEP_ARGS e.g. "--wide talker --rounds 1",
#                                                               SWEEP_LEAVE: seconds it leaves the parts after it)
#   TABLE_ARGS: more bench.latency arguments for PART=table (e.g. "--pdl-launch-from $W/step-sweep.json" after
#   a sweep in the same call: the table at the tables it found); TABLE_REFERENCE=0: without the plain reference loop
#   (issue 3 asks for it in the table's run; ~1 min)
# Parts can be combined and run in the order given (PART="load latency": a load pair on two GPUs first,
# diagnostics after). Everything lands in $W and comes back as one tarball ($OUT takes at most 8
# files), run3-$TAG.tgz. PORT is the load server's port; DEADLINE (epoch seconds, default start + 585)
# is when everything must have stopped, so the tarball is made inside the device call's limit (run4.sh
# runs two of these side by side, one per GPU).
set -u
source bench/gpu/setup.sh
TAG=${TAG:-${PART// /-}}; PORT=${PORT:-8000}; DEADLINE=${DEADLINE:-$(( $(date +%s) + 585 ))}
W=/tmp/run3-$TAG; rm -rf $W; mkdir -p $W
t0=$SECONDS
left() { local n=$(( DEADLINE - $(date +%s) - ${1:-0} )); echo $(( n > 1 ? n : 1 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $W/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $W/gpu.txt
ensure_checkpoint; echo "checkpoint $((SECONDS - t0)) s"
finish() { tar -czf "$OUT/run3-$TAG.tgz" -C $W . ; ls -la $W | tail -n +2 | wc -l; }
trap finish EXIT

part_gputest() {  # GPU_TESTS (default: the engine's), GPU_TESTS_K: a pytest -k expression
  limit=$(left 5); limit=$(( limit < ${TEST_LIMIT:-200} ? limit : ${TEST_LIMIT:-200} ))
  # shellcheck disable=SC2086  # GPU_TESTS splits into test paths
  timeout $limit python3 -m pytest -q -m gpu ${GPU_TESTS:-tests/gpu/test_engine_gpu.py} ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} \
    -p no:cacheprovider -v --tb=short -rf > $W/gpu-tests.log 2>&1
  echo "gpu tests rc=$? $((SECONDS - t0)) s"; grep -E "PASSED|FAILED|ERROR" $W/gpu-tests.log | cut -c1-160 | tail -40
}

part_gemvsweep() {  # the fused GEMV's launch configurations against cuBLAS
  limit=$(left 5); limit=$(( limit < ${GEMV_LIMIT:-$limit} ? limit : ${GEMV_LIMIT:-$limit} ))
  timeout $limit python3 -m bench.kernels --gemv-sweep --shapes ${GEMV_SHAPES:-cp} --batches ${GEMV_BATCHES:-1} \
    --out $W/gemv-sweep.json > $W/gemv-sweep.log 2>&1
  echo "gemv sweep rc=$? $((SECONDS - t0)) s"; grep -E "cublas|best" $W/gemv-sweep.log | cut -c1-200
}

part_codec() {
  limit=$(left 5); limit=$(( limit < ${CODEC_LIMIT:-200} ? limit : ${CODEC_LIMIT:-200} ))
  timeout $limit python3 -m bench.latency --model /tmp/ckpt --out $W/codec.json --skip-stages --skip-socket \
    --skip-codec-eager > $W/codec.log 2>&1
  echo "codec rc=$? $((SECONDS - t0)) s"; grep -E "^codec" $W/codec.log | cut -c1-700
}

part_codecwin() {  # the codec's dense convs on cuDNN against window GEMMs (interleaved), profiles, GPU tests
  timeout $(left 5) python3 -m bench.latency --model /tmp/ckpt --out $W/codec-window.json --skip-stages --skip-socket \
    --skip-codec-eager --skip-reference --codec-variants "${CODEC_VARIANTS:-bf16+fused+cudnn-window,bf16+fused+window-convs,\
bf16+fused+cudnn-window#2,bf16+fused+window-convs#2}" > $W/codec-window.log 2>&1
  echo "codec windows rc=$? $((SECONDS - t0)) s"; grep -E "^codec" $W/codec-window.log | cut -c1-400
  timeout $(left 5) python3 -m pytest -q -m gpu tests/gpu/test_codec_graphs.py -k "fused_codec_graphs" \
    -p no:cacheprovider > $W/codec-window-tests.log 2>&1
  echo "codec window tests rc=$? $((SECONDS - t0)) s"; tail -3 $W/codec-window-tests.log | cut -c1-300
}

part_latency() {  # SOCKET_ARGS: the serve arguments of a second socket run (default --codec-stream)
  # shellcheck disable=SC2086  # LATENCY_TESTS splits into test paths
  if [ "${LATENCY_TESTS:-}" != none ]; then  # LATENCY_TESTS=none: the benchmarks alone
    timeout ${TEST_LIMIT:-400} python3 -m pytest -q -m gpu ${LATENCY_TESTS:-tests/gpu/test_fast_path_gpu.py \
      tests/gpu/test_codec_graphs.py tests/gpu/test_triton_path_gpu.py tests/gpu/test_code_predictor_gpu.py \
      tests/gpu/test_engine_gpu.py} -p no:cacheprovider \
      > $W/latency-tests.log 2>&1
    echo "gpu tests rc=$? $((SECONDS - t0)) s"; tail -6 $W/latency-tests.log | cut -c1-300
  fi
  if [ -z "${SKIP_KERNELS:-}" ]; then
    timeout 90 python3 -m bench.kernels --out $W/kernels.json > $W/kernels.log 2>&1
    echo "kernels rc=$? $((SECONDS - t0)) s"; grep -i gemv $W/kernels.log | cut -c1-300 | head -20
  fi
  # The talker's GEMVs with the configurations this run's sweep found, if it swept the talker's shapes.
  sweep_args=""; [ "${GEMV_SHAPES:-}" = talker ] && [ -f $W/gemv-sweep.json ] && sweep_args="--talker-launch-from $W/gemv-sweep.json"
  # shellcheck disable=SC2086  # LATENCY_ARGS splits into arguments
  timeout $(left 5) python3 -m bench.latency --model /tmp/ckpt --out $W/latency.json --modes triton \
    --skip-codec-eager --requests ${REQUESTS:-100} --socket-args=${SOCKET_ARGS:---codec-stream} $sweep_args ${LATENCY_ARGS:-} \
    > $W/latency.log 2>&1
  echo "latency rc=$? $((SECONDS - t0)) s"
  grep -E "^(batch|prefill|reference|socket|codec|host)" $W/latency.log | cut -c1-700
}

part_load() {
  IFS=";" read -ra configs <<< "${CONFIGS:-tick2:;tick0:--codec-tick 0}"
  for config in "${configs[@]}"; do
    name=${config%%:*}; args=${config#*:}
    mkdir -p $W/$name
    python3 -m tts_engine.cli serve --model /tmp/ckpt --device cuda --port $PORT --log-level warning $args \
      > $W/$name/serve.log 2>&1 &
    server=$!
    until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/ready', timeout=2)" 2>/dev/null; do
      kill -0 $server 2>/dev/null || { echo "$name: server died"; tail -30 $W/$name/serve.log; continue 2; }
      sleep 1
    done
    echo "$name ($args): server ready $((SECONDS - t0)) s"
    if [ -n "${SOCKET:-}" ]; then  # SOCKET=N: first N sequential requests' first PCM on this server (issue 3)
      timeout $(left 10) python3 -m bench.latency --socket-port $PORT --requests $SOCKET --out $W/$name/socket.json \
        > $W/$name/socket.log 2>&1
      echo "$name socket rc=$? $((SECONDS - t0)) s"; grep "^socket" $W/$name/socket.log | cut -c1-500
    fi
    # Each rate's results are written as it ends, so a sweep cut off at the deadline keeps them.
    # PHASES="10:120,20:300": one sweep per rate with its own measured seconds, in $W/$name/r<rate>
    # (merge with bench.load.merge); otherwise one sweep over RATES with DURATION.
    phases=("${RATES:-10,20,30,40}:${DURATION:-30}")
    [ -n "${PHASES:-}" ] && IFS="," read -ra phases <<< "$PHASES"
    [ "${PHASES:-}" = none ] && phases=()  # PHASES=none: the socket requests alone (SOCKET=N)
    for phase in "${phases[@]}"; do
      rates=${phase%%:*}; duration=${phase#*:}; out=$W/$name; [ -n "${PHASES:-}" ] && out=$W/$name/r$rates
      # A phase cut by the deadline keeps nothing: skip one that cannot finish (run 14: a 120 s phase
      # at 10 req/s took ~135 s with its warm-up, start and drain) instead of spending device time on it.
      need=$(( (duration + ${WARMUP:-5}) * $(tr -cd , <<< "$rates," | wc -c) + 20 ))
      if [ "$(left 10)" -lt "$need" ]; then echo "$name: skipped $rates:$duration, $need s needed, $(left 10) left"; continue; fi
      mkdir -p $out
      timeout $(left 10) python3 -m tts_engine.cli bench --url http://127.0.0.1:$PORT --rates "$rates" \
        --warmup "${WARMUP:-5}" --duration "$duration" --gpu-price 4.29 --no-plots \
        --label "H200, Qwen3-TTS 1.7B CustomVoice random weights, commit ${CADENCE_COMMIT:-?}, serve $args" \
        --out $out > $out/bench.log 2>&1
      echo "$name bench rc=$? $((SECONDS - t0)) s"; cut -c1-200 $out/bench.log | grep "req/s"
    done
    python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())" \
      > $W/$name/metrics.txt 2>&1
    grep -E "^cadence_engine_(ttfa|steps |frames |scheduler_steps|cost_|codec_graphs|host_|gc_)" $W/$name/metrics.txt | cut -c1-120
    kill $server; wait $server 2>/dev/null
  done
}

part_lanes() {  # bench.lanes: a newcomer's work on a stream of its own beside loaded steps
  limit=$(left 5); limit=$(( limit < ${LANES_LIMIT:-150} ? limit : ${LANES_LIMIT:-150} ))
  timeout $limit python3 -m bench.lanes --model /tmp/ckpt --out $W/lanes.json > $W/lanes.log 2>&1
  echo "lanes rc=$? $((SECONDS - t0)) s"; grep -E "^lanes|Error" $W/lanes.log | cut -c1-1500
}

part_trace() {  # bench.first_audio_trace: an idle engine's GPU timeline from open to first audio
  limit=$(left 5); limit=$(( limit < ${TRACE_LIMIT:-150} ? limit : ${TRACE_LIMIT:-150} ))
  timeout $limit python3 -m bench.first_audio_trace --model /tmp/ckpt --out $W/first-audio-trace.json \
    > $W/trace.log 2>&1
  echo "trace rc=$? $((SECONDS - t0)) s"; grep -E "^first audio trace|Error" $W/trace.log | cut -c1-1200
}

part_delivery() {  # bench.first_audio_delivery: a request's way around the engine per --first-audio-yield-ms
  limit=$(left 5); limit=$(( limit < ${DELIVERY_LIMIT:-240} ? limit : ${DELIVERY_LIMIT:-240} ))
  timeout $limit python3 -m bench.first_audio_delivery --model /tmp/ckpt --yields "${YIELDS:-0,0.3,0.6}" \
    --requests ${REQUESTS:-50} --rounds ${ROUNDS:-3} --out $W/first-audio-delivery.json > $W/delivery.log 2>&1
  echo "delivery rc=$? $((SECONDS - t0)) s"; grep -E "^(yield|first audio delivery)|Error" $W/delivery.log | cut -c1-1500
}

part_barrier() {  # bench.grid_barrier, then its GPU test
  limit=$(left 5); limit=$(( limit < ${BARRIER_LIMIT:-90} ? limit : ${BARRIER_LIMIT:-90} ))
  timeout $limit python3 -m bench.grid_barrier --out $W/grid-barrier.json > $W/barrier.log 2>&1
  echo "barrier rc=$? $((SECONDS - t0)) s"; grep -E "^grid barrier|Error" $W/barrier.log | cut -c1-700
  timeout $(left 5) python3 -m pytest -q -m gpu tests/gpu/test_grid_barrier_gpu.py -p no:cacheprovider \
    > $W/barrier-tests.log 2>&1
  echo "barrier tests rc=$? $((SECONDS - t0)) s"; tail -3 $W/barrier-tests.log | cut -c1-300
}

part_profile() {  # bench.profile_step: where the batch-1 critical path's device time goes
  limit=$(left 5); limit=$(( limit < ${PROFILE_LIMIT:-150} ? limit : ${PROFILE_LIMIT:-150} ))
  timeout $limit python3 -m bench.profile_step --batches ${PROFILE_BATCHES:-1} --out $W/profile.json ${PROFILE_ARGS:-} \
    > $W/profile.log 2>&1
  echo "profile rc=$? $((SECONDS - t0)) s"; grep -vE "^ +x" $W/profile.log | cut -c1-300 | tail -20
}

part_drawparts() {  # the batch-1 code-predictor draw with less and less of its work (bench.sample_kernel --parts)
  timeout $(left 5) python3 -m bench.sample_kernel --parts --out $W/draw-parts.json > $W/draw-parts.log 2>&1
  echo "draw parts rc=$? $((SECONDS - t0)) s"; cut -c1-200 $W/draw-parts.log | tail -6
}

part_draw() {  # the sampling kernel's launch: timed alone, then in the engine's graphs
  timeout $(left 5) python3 -m bench.sample_kernel --out $W/sample-kernel.json > $W/sample-kernel.log 2>&1
  echo "sample kernel rc=$? $((SECONDS - t0)) s"; cut -c1-200 $W/sample-kernel.log
  best=$(python3 -c "import json; print(json.load(open('$W/sample-kernel.json'))['best'])") || best=8,12,2
  timeout $(left 5) python3 -m pytest -q tests/kernels/test_sample.py -p no:cacheprovider > $W/sample-tests.log 2>&1
  echo "sample tests rc=$? $((SECONDS - t0)) s"; tail -3 $W/sample-tests.log | cut -c1-300
  for draw in $(printf "%s\n" $best ${DRAWS:-8,12,2} | awk '!seen[$0]++'); do
    timeout $(left 5) python3 -m bench.profile_step --prefill "" --draw $draw --out $W/profile-$draw.json \
      > $W/profile-$draw.log 2>&1
    echo "profile $draw rc=$? $((SECONDS - t0)) s"; grep -E "^[a-z]|sample" $W/profile-$draw.log | cut -c1-200 | head -12
    timeout $(left 5) python3 -m bench.latency --model /tmp/ckpt --modes triton --skip-codec --skip-socket \
      --skip-reference --batches ${DRAW_BATCHES:-1,8,32,64} --draw $draw --out $W/latency-$draw.json > $W/latency-$draw.log 2>&1
    echo "latency $draw rc=$? $((SECONDS - t0)) s"; grep -E "^batch [0-9]+:" $W/latency-$draw.log | cut -c1-170
  done
}

part_table() {  # issue 3's table, one process (run 19's call 3), this script's environment (the server's wheels)
  reference=""; [ "${TABLE_REFERENCE:-1}" = 0 ] && reference=--skip-reference  # TABLE_REFERENCE=0: no reference loop
  timeout $(left 5) python3 -m bench.latency --model /tmp/ckpt --out $W/latency.json --modes triton \
    --batches ${TABLE_BATCHES:-1,8,32,64} --skip-codec-eager $reference --requests 100 \
    --codec-variants "${CODEC_VARIANTS:-bf16+fused}" ${TABLE_ARGS:-} > $W/latency.log 2>&1
  echo "table rc=$? $((SECONDS - t0)) s"; grep -E "^batch (1|32):|^codec bf16|^socket" $W/latency.log | cut -c1-300
}

part_kerneltests() {  # every kernel's tests against its torch reference, compiled for the card
  timeout $(left 5) python3 -m pytest -q tests/kernels ${KERNEL_TESTS_K:+-k "$KERNEL_TESTS_K"} -p no:cacheprovider \
    > $W/kernel-tests.log 2>&1
  echo "kernel tests rc=$? $((SECONDS - t0)) s"; tail -3 $W/kernel-tests.log | cut -c1-300
}

part_stepsweep() {  # each product's whole-row launch timed inside the talker step / code-predictor frame
  timeout $(left ${SWEEP_LEAVE:-5}) python3 -m bench.step_sweep --out $W/step-sweep.json --stages ${SWEEP_STAGES:-talker,cp} \
    ${SWEEP_ARGS:-} > $W/step-sweep.log 2>&1
  echo "step sweep rc=$? $((SECONDS - t0)) s"; cut -c1-400 $W/step-sweep.log | tail -4
}

part_peers() {
  OUT=$W timeout $(left 10) bash bench/gpu/run2_peers.sh
}

# The parts in the order PART names them (a load pair first, diagnostics after, on two GPUs at once).
for part in $PART; do
  declare -F "part_$part" > /dev/null || { echo "unknown part $part"; exit 2; }
  "part_$part"
done
