# The agent on the GPU machine, from the parts bench/gpu/agent_pack.sh made. The parts need one device call each,
# carried one at a time (carry: [".gpu/pN"]), back to back on one warm machine (it keeps /tmp for 30 s idle):
#   bash bench/gpu/agent.sh stage        in every call: its part into /tmp/agent-parts
#   source bench/gpu/agent.sh install    in the last: joins, unpacks and installs them into /tmp/site, then `env`
#   source bench/gpu/agent.sh env        exports PYTHONPATH, XDG_CACHE_HOME and the cuBLAS name below; then the
#                                        benchmarks, e.g.
#   python3 -m bench.agent --cadence-url ws://127.0.0.1:8000/v1/stream --conversations 1,10,20,50 --out DIR
# bench/gpu/agent_rehearse.sh runs the same here first, so a missing package costs no device time.
# The parts also carry the other GPU runs, one a call (docs/performance.md's H100 section), e.g.:
#   [".whl", ".whl-clone", ".gpu/p3"]  source bench/gpu/setup.sh; ensure_checkpoint; make-checkpoint --variant base;
#                                      python3 -m bench.startup ... --keep-caches /tmp/kc   (cold start: first call)
#   [".whl", ".gpu/p1"]                CADENCE_CUDA_CACHE=/tmp/kc/cuda TRITON_CACHE_DIR=/tmp/kc/triton: bench.soak
#                                      --minutes 9 starts warm and ends inside one 10-minute call
#   [".whl", ".gpu/p2"]                install (the last part), `cadence serve`, then bench.agent
case "${1:-}" in
  stage) mkdir -p /tmp/agent-parts && cp .gpu/p*/part.* /tmp/agent-parts/ && ls /tmp/agent-parts ;;
  install)
    rm -rf /tmp/agent-pack && mkdir -p /tmp/agent-pack /tmp/site
    cat /tmp/agent-parts/part.* | tar -x -C /tmp/agent-pack || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      /tmp/agent-pack/*.whl || return 1
    for x in /tmp/agent-pack/xz/*.tar.xz; do tar -xJf "$x" -C /tmp/site; done
    source bench/gpu/agent.sh env
    python3 -c "import agent.demo, bench.agent.agent_proc, faster_whisper, aiortc, openai" &&
      echo "agent stack ready" ;;
  env)
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/agent-pack/cache HF_HUB_OFFLINE=1
    # CTranslate2's wheels (Whisper) open CUDA 12's libcublas.so.12; the image has CUDA 13's cuBLAS, whose calls
    # CTranslate2 makes keep their names. That library under the old name lets Whisper run on the GPU (bench/voice/
    # stt_compare.py --device cuda checks its transcripts against the CPU's); without it Whisper stays on the CPU.
    cublas=$(python3 -c "import glob, site; print(next(iter(sorted(f for d in site.getsitepackages() for f in
      glob.glob(d + '/nvidia/**/libcublas.so.1[0-9]*', recursive=True))), ''))")
    if [ -n "$cublas" ]; then
      mkdir -p /tmp/cublas12 && ln -sf "$cublas" /tmp/cublas12/libcublas.so.12
      export LD_LIBRARY_PATH=/tmp/cublas12:$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      echo "libcublas.so.12 -> $cublas"
    fi ;;
  *) sed -n 1,7p bench/gpu/agent.sh; return 2 2>/dev/null || exit 2 ;;
esac
