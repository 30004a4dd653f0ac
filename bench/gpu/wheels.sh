#!/usr/bin/env bash
# The server's wheels for the GPU machine (Python 3.12, no network): downloaded here into .whl/ (git-ignored;
# `run`'s carry takes it there), installed there by bench/gpu/setup.sh. The versions are this machine's, so the
# server on the card runs what `pip install -e .` gives here. uvloop (uvicorn[standard]'s event loop) is on the
# machine's image already; its 4.5 MB wheel would not fit the 64 MiB a call may carry beside bench/results.
set -euo pipefail
cd "$(dirname "$0")/../.."
for d in /.whl/ /.whl-clone/; do grep -qx "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$@"; }
# A cloned voice's reference audio is decoded by soundfile, which the image lacks. Its 1.6 MB go apart, in
# .whl-clone/: beside .whl/ they fit only a call that carries the agent's smallest part (.gpu/p3).
get -d .whl-clone soundfile==0.13.1 cffi==2.0.0 pycparser==3.0
get -d .whl \
  fastapi==0.165.0 starlette==1.10.0 pydantic==2.13.4 pydantic_core==2.46.4 typing-inspection==0.4.2 \
  uvicorn==0.54.0 websockets==17.4 httptools==0.9.0 python-multipart==0.0.34 annotated-types \
  opentelemetry-api==1.45.2 itsdangerous==2.2.0
ls -l .whl/*.whl .whl-clone/*.whl
