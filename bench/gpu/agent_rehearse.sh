#!/usr/bin/env bash
# bench/gpu/agent.sh rehearsed here, before device time is spent on it: a Python 3.12 virtualenv holding the GPU
# image's packages that the agent stack may import (the versions /work/.library/device/KINDS.md gives, else the
# newest), the parts bench/gpu/agent_pack.sh made installed into it exactly as agent.sh installs them there, its
# import check, Whisper's timing on the cached questions, then the agent benchmark (WebRTC and Twilio callers, one
# conversation) and the voice benchmark's aiortc client (two turns) against a CPU `cadence serve` on a tiny
# checkpoint, as the card runs them.
# A package the parts lack fails here, not on the card. No torch in the virtualenv: the agent side needs none.
#   bash bench/gpu/agent_pack.sh && bash bench/gpu/agent_rehearse.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
V=/tmp/gpu-image-venv
[ -x $V/bin/python3 ] || "${PY312:-python3.12}" -m venv $V
$V/bin/python3 -m pip install -q numpy==2.5.2 huggingface_hub==1.33.0 onnxruntime==1.30.0 tokenizers==0.23.2 \
  safetensors==0.8.0 httpx httpcore h11 anyio idna certifi aiohttp pyyaml requests protobuf packaging pillow \
  matplotlib tqdm typing-extensions psutil prometheus-client uvloop jinja2 click rich regex filelock fsspec scipy \
  aiofiles annotated-doc attrs multidict yarl frozenlist aiosignal propcache aiohappyeyeballs urllib3 six \
  python-dateutil typer markdown-it-py pygments sortedcontainers tabulate wrapt zipp simplejson sympy networkx \
  joblib threadpoolctl cloudpickle msgpack typing-inspect pandas scikit-learn
rm -rf /tmp/agent-parts /tmp/site
bash bench/gpu/agent.sh stage > /dev/null
W=$(mktemp -d)
python3 -m tts_engine.cli make-checkpoint --size tiny --out "$W/ckpt" > /dev/null
python3 -m tts_engine.cli serve --model "$W/ckpt" --port 8765 > "$W/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -rf "$W"' EXIT
(
  export PATH=$V/bin:$PATH
  # shellcheck disable=SC1091  # agent.sh, sourced as on the card
  source bench/gpu/agent.sh install
  until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8765/ready', timeout=2)" 2>/dev/null; do
    sleep 1
  done
  python3 -m bench.voice.stt_compare --questions --only "10 s" --cpu-threads 2 --out "$W/stt.json"
  python3 -m bench.agent --cadence-url ws://127.0.0.1:8765/v1/stream --conversations 1 --out "$W/agent"
  python3 -m bench.agent --cadence-url ws://127.0.0.1:8765/v1/stream --conversations 1 --transport twilio \
    --out "$W/phone"
  printf 'cadence_url = "ws://127.0.0.1:8765/v1/stream"\nfallback_tts = "none"\n' > "$W/demo.toml"
  python3 -m bench.voice --client aiortc --turns 2 --demo-args "--config $W/demo.toml" --out "$W/voice"
)
echo "rehearsal passed"
