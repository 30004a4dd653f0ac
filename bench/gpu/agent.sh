# The agent on the GPU machine, from the parts bench/gpu/agent_pack.sh made. The parts need one device call each,
# carried one at a time (carry: [".gpu/pN"]), back to back on one warm machine (it keeps /tmp for 30 s idle):
#   bash bench/gpu/agent.sh stage        in every call: its part into /tmp/agent-parts
#   source bench/gpu/agent.sh install    in the last: joins, unpacks and installs them into /tmp/site, exports
#                                        PYTHONPATH and XDG_CACHE_HOME; then the benchmarks, e.g.
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
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/agent-pack/cache HF_HUB_OFFLINE=1
    python3 -c "import agent.demo, bench.agent.agent_proc, faster_whisper, aiortc, openai" && echo "agent stack ready" ;;
  *) sed -n 1,6p bench/gpu/agent.sh; return 2 2>/dev/null || exit 2 ;;
esac
