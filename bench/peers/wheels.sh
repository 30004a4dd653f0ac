#!/usr/bin/env bash
# Wheels the peer adapters need on the GPU machine, which has Python 3.12, torch 2.11,
# transformers 5.17, huggingface_hub 1.33, tokenizers 0.23 and no network (docs/peers.md).
#
#   bench/peers/wheels.sh                 here: download into .whl/peers/<peer>/ (git-ignored)
#   bench/peers/wheels.sh install PEER    there: install PEER's wheels into /tmp/peers/PEER and
#                                         print the PYTHONPATH entry to put first
#
# Each peer gets its own folder because the two cannot share one site: the official qwen-tts
# 0.1.1 runs on transformers 4.57.3 (it fails to import on transformers 5), while
# faster-qwen3-tts 0.5.4 needs transformers >= 5.15.1 and `qwen-tts-hf`, a build of the same
# `qwen_tts` package patched for transformers 5. The server wheels in .whl/*.whl (fastapi,
# uvicorn, pydantic, ...) are not repeated here.
set -euo pipefail
cd "$(dirname "$0")/../.."

declare -A WHEELS=(
  # transformers 4.57.3 refuses huggingface_hub >= 1.0 and tokenizers > 0.23.0 at import, so the
  # versions the parity tests use here travel with it.
  [qwen-tts]="qwen-tts==0.1.1 transformers==4.57.3 huggingface-hub==0.36.2 tokenizers==0.22.2"
  # transformers 5.17 and huggingface_hub 1.33 on the machine satisfy it as they are. soxr: transformers
  # 5.17's audio_utils imports it whenever it sees librosa (our import stand-in, compat.py), and the
  # machine lacks it (without it: "Could not import module 'AutoProcessor'" <- "No module named 'soxr'").
  [faster-qwen3-tts]="faster-qwen3-tts==0.5.4 qwen-tts-hf==0.1.1.post1 soxr==1.0.0"
)

if [[ "${1:-}" == install ]]; then
  peer="${2:?usage: wheels.sh install qwen-tts|faster-qwen3-tts}"
  [[ -n "${WHEELS[$peer]:-}" ]] || { echo "unknown peer $peer" >&2; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --root-user-action=ignore \
    --target "/tmp/peers/$peer" .whl/peers/"$peer"/*.whl >&2
  echo "/tmp/peers/$peer"
  exit 0
fi

for peer in "${!WHEELS[@]}"; do
  # shellcheck disable=SC2086  # the list is meant to split into requirement arguments
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d ".whl/peers/$peer" ${WHEELS[$peer]}
done
ls -l .whl/peers/*/
