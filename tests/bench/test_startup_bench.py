"""bench.startup end to end on the CPU: tiny CustomVoice and Base checkpoints, real `cadence serve` processes,
small repetition counts. What it measures on a GPU, it must measure here too (without kernels to build)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile

from bench.startup_refs import reference_wav


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from tts_engine.checkpoint import make_checkpoint

    root = tmp_path_factory.mktemp("startup-bench")
    return (make_checkpoint("tiny", root / "custom", seed=2),
            make_checkpoint("tiny", root / "base", seed=4, variant="base"))


def test_reference_wavs_have_the_asked_length(tmp_path):
    for seconds in (3.0, 10.0):
        path, text = reference_wav(seconds, tmp_path)
        info = soundfile.info(path)
        assert info.frames == round(seconds * info.samplerate) and text.strip()


@pytest.mark.slow
def test_startup_bench_writes_every_measurement(checkpoints, tmp_path):
    custom, base = checkpoints
    out = tmp_path / "startup.json"
    # Without espeak-ng on PATH, as on a bare GPU machine: the synthetic references must clone too.
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "espeak-ng").exists())
    env = {**os.environ, "PATH": path}
    caches = tmp_path / "caches"
    (caches / "cuda").mkdir(parents=True)
    (caches / "cuda" / "stale.so").write_bytes(b"left by an earlier run")
    done = subprocess.run([sys.executable, "-m", "bench.startup", "--custom-model", str(custom), "--base-model",
                           str(base), "--device", "cpu", "--clone-reps", "2", "--clone-seconds", "3", "10",
                           "--requests", "3", "--warmup", "1", "--first-audio-ref-s", "3", "--out", str(out),
                           "--keep-caches", str(caches)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    # The first start was cold (an earlier run's cache emptied) and the caches stay for a later server.
    assert caches.is_dir() and not (caches / "cuda" / "stale.so").exists()
    result = json.loads(out.read_text())
    assert result["reference_source"] == "synthetic"

    starts = result["start"]
    assert set(starts) == {"custom_cold", "custom_warm", "base_warm"}
    for start in starts.values():
        assert 0 < start["listening_s"] < start["ready_s"]
        assert {"loading model", "first codec call", "warm-up"} <= set(start["phases_s"])
        assert "talker" in start["loaded"] and start["loaded"]["talker"]["mb"] > 0
        assert start["nvcc_builds"] == 0  # a CPU engine builds no CUDA kernels
    assert "speaker encoder" in starts["base_warm"]["loaded"]

    clone = result["clone"]
    assert clone["first_clone_s"] > 0
    for length in ("3s", "10s"):
        for mode in ("in_context", "speaker_embedding"):
            row = clone[length][mode]
            assert len(row["runs_ms"]) == 2 and row["p50_ms"] > 0

    first = result["first_audio"]
    assert set(first) == {"builtin_speaker", "cloned_in_context", "cloned_speaker_embedding"}
    for voice in first.values():
        assert voice["requests"] == 3 and 0 < voice["first_pcm_ms_p50"] <= voice["first_pcm_ms_p95"]
