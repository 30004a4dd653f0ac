"""Both peer adapters on the GPU as the benchmark runs them: real processes started by
bench/peers/start.sh (each with its own wheels), a random-weight checkpoint, one request each.

Needs the wheels carried in .whl/peers (bench/peers/wheels.sh) and the server wheels on
PYTHONPATH; docs/peers.md has the command. `PEER_CHECKPOINT=DIR` tests on that checkpoint (the
benchmark's 1.7B one, say) instead of a fresh tiny one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tts_engine.checkpoint import make_checkpoint, speech_frames
from tts_engine.config import ModelConfig

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
TEXT = "The birch canoe slid on the smooth planks."
PORTS = {"qwen-tts": 8111, "faster-qwen3-tts": 8112}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    if os.environ.get("PEER_CHECKPOINT"):
        return Path(os.environ["PEER_CHECKPOINT"])
    return make_checkpoint("tiny", tmp_path_factory.mktemp("peers-tiny"), seed=3)


@pytest.mark.parametrize("peer", list(PORTS))
def test_peer_streams_pcm_of_the_forced_length(cuda, checkpoint, peer):
    if not (REPO / ".whl/peers" / peer).is_dir():
        pytest.fail(f".whl/peers/{peer} is missing: run bench/peers/wheels.sh here and carry .whl")
    port = PORTS[peer]
    extra = ["--chunk-size", "4"] if peer == "faster-qwen3-tts" else []
    started = subprocess.run(["bash", "bench/peers/start.sh", peer, str(checkpoint), str(port), *extra],
                             cwd=REPO, capture_output=True, text=True, timeout=1000)
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split()[-1])
    try:
        cps = ModelConfig.from_file(checkpoint / "config.json").random_weights["chars_per_second"]
        frames = speech_frames(TEXT, cps)
        body = {"input": TEXT, "voice": "ryan", "language": "english", "response_format": "pcm",
                "stream_format": "audio", "seed": 1}
        arrivals, data = [], b""
        t0 = time.perf_counter()
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/audio/speech", json=body, timeout=300) as r:
            assert r.status_code == 200, r.read()
            for piece in r.iter_raw():
                arrivals.append(time.perf_counter() - t0)
                data += piece
        assert len(data) == frames * 1920 * 2  # every frame, frame 0 included
        if peer == "faster-qwen3-tts":  # chunks of 4 frames leave as they are decoded
            assert len(arrivals) > 1 and arrivals[0] < arrivals[-1]
        print(f"{peer}: {frames} frames, first audio {arrivals[0] * 1e3:.0f} ms, "
              f"all {arrivals[-1] * 1e3:.0f} ms, {len(arrivals)} pieces")
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30  # not our child (start.sh detached it): poll until it is gone
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
