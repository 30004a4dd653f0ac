"""Visible start-up: each phase's steps as log lines (tqdm on a terminal), the engine not ready until
warm-up ends, kernels cached across restarts, and a real `cadence serve` showing its phases."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tts_engine.kernels import cuda_build
from tts_engine.runtime.progress import Phase, kernel_caches

STARTUP = "tts_engine.startup"
PHASE_DONE = re.compile(r"^start-up: (.+) done in ([\d.]+) s$")


def startup_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == STARTUP]


def test_a_phase_logs_each_step_with_its_count_and_seconds_then_its_end(caplog):
    phases = {"talker graphs": ["bucket 64", "bucket 32", "bucket 1"], "codec graphs": ["12 frames x 32"]}
    with caplog.at_level(logging.INFO, logger=STARTUP):
        for name, steps in phases.items():
            with Phase(name, len(steps), bar=False) as phase:
                for what in steps:
                    time.sleep(0.01)
                    phase.step(what)
    lines = startup_lines(caplog)
    assert len(lines) == 6
    assert re.fullmatch(r"start-up: talker graphs 1/3 \(bucket 64\) 0\.\d s", lines[0]), lines[0]
    assert lines[2].startswith("start-up: talker graphs 3/3 (bucket 1) ")
    assert [m.group(1) for m in map(PHASE_DONE.match, lines) if m] == ["talker graphs", "codec graphs"]
    assert float(PHASE_DONE.match(lines[3]).group(2)) >= 0.0


def test_a_failing_phase_says_how_far_it_got(caplog):
    with caplog.at_level(logging.INFO, logger=STARTUP), pytest.raises(RuntimeError), \
            Phase("codec graphs", 4, bar=False) as phase:
        phase.step("12 frames x 32")
        raise RuntimeError("out of memory")
    assert startup_lines(caplog)[-1].startswith("start-up: codec graphs failed after 1 steps")


def test_on_a_terminal_a_phase_is_a_tqdm_bar(caplog, capsys):
    with caplog.at_level(logging.INFO, logger=STARTUP), Phase("prefill graphs", 2, bar=True) as phase:
        phase.step("64 rows")
        phase.step("32 rows")
    err = capsys.readouterr().err
    assert "prefill graphs" in err and "2/2" in err
    assert [line for line in startup_lines(caplog) if not PHASE_DONE.match(line)] == []  # no per-step lines


def test_kernel_caches_honour_their_environment_overrides(monkeypatch, tmp_path):
    monkeypatch.delenv("CADENCE_CUDA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cuda_build.cache_dir() == tmp_path / "xdg" / "cadence" / "cuda"
    monkeypatch.setenv("CADENCE_CUDA_CACHE", str(tmp_path / "cubins"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    assert cuda_build.cache_dir() == tmp_path / "cubins"
    assert kernel_caches() == f"CUDA {tmp_path / 'cubins'}, Triton {tmp_path / 'triton'}"


def test_a_cubin_is_built_once_and_read_from_the_cache_after_a_restart(monkeypatch, tmp_path, caplog):
    """nvcc cannot run here: a stand-in `nvcc` on PATH writes its arguments as the "cubin" and counts its
    calls. A second process (a restart) with the same cache directory must not call it again."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho x >> {calls}\nwhile [ "$1" != "-o" ]; do shift; done\necho "$@" > "$2"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    source = tmp_path / "k.cu"
    source.write_text("// a kernel\n")
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CADENCE_CUDA_CACHE", str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger=STARTUP):
        first = cuda_build.compile_cubin(source, ["-DK=1"], "k")
    assert calls.read_text().count("x") == 1
    assert any(line.startswith("start-up: nvcc built k-") for line in startup_lines(caplog))
    restart = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from tts_engine.kernels import cuda_build; "
         "sys.stdout.buffer.write(cuda_build.compile_cubin(Path(sys.argv[1]), ['-DK=1'], 'k'))", str(source)],
        capture_output=True, env=os.environ, check=True)
    assert restart.stdout == first and calls.read_text().count("x") == 1
    cuda_build.compile_cubin(source, ["-DK=2"], "k")  # other flags: another kernel, built
    assert calls.read_text().count("x") == 2


def test_the_engine_is_not_ready_until_its_warm_up_phases_end(tiny_checkpoint, caplog):
    from tts_engine.engine.core import StreamingEngine

    engine = StreamingEngine(tiny_checkpoint, device="cpu", max_context=256)
    entered, release = threading.Event(), threading.Event()
    decode = engine.codec_runner.decode

    def held_decode(*args, **kwargs):  # the warm-up's first codec call waits until the test lets it go
        entered.set()
        assert release.wait(30)
        return decode(*args, **kwargs)

    engine.codec_runner.decode = held_decode
    with caplog.at_level(logging.INFO, logger=STARTUP):
        engine.start_thread()
        try:
            assert entered.wait(30)
            time.sleep(0.2)
            assert not engine.ready
            assert not any("warm-up done" in line for line in startup_lines(caplog))
            release.set()
            deadline = time.monotonic() + 30
            while not engine.ready:
                assert time.monotonic() < deadline and engine.fault is None
                time.sleep(0.01)
        finally:
            release.set()
            asyncio.run(engine.stop())
    lines = startup_lines(caplog)
    assert [m.group(1) for m in map(PHASE_DONE.match, lines) if m] == ["first codec call", "warm-up"]


def test_cadence_serve_logs_its_start_up_phases_and_becomes_ready(tiny_checkpoint):
    proc = subprocess.Popen([sys.executable, "-m", "tts_engine.cli", "serve", "--model", str(tiny_checkpoint),
                             "--port", "0", "--device", "cpu"], stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        url = None
        while url is None:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            url = next((m.group(1) for m in map(re.compile(r"listening on (http://\S+)").search, list(lines)) if m),
                       None)
            time.sleep(0.05)
        while httpx.get(url + "/ready", timeout=5).status_code != 200:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.1)
        time.sleep(0.5)  # the lines logged before ready have crossed the pipe
        text = "".join(lines)
        for phase in ("loading model", "first codec call", "warm-up"):
            assert re.search(rf"start-up: {phase} done in [\d.]+ s", text), text
        assert re.search(r"loaded talker: [\d.]+ MB read in", text), text
        assert text.index("loading model done") < text.index("warm-up done")
    finally:
        proc.terminate()
        proc.wait(30)
