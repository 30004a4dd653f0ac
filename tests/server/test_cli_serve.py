"""`cadence serve` as a user runs it: a real process, one-line errors, a server that answers."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest


def serve_args_error(capsys, *args) -> str:
    """Run `cadence serve ARGS` in this process; it must fail before loading the model."""
    from tts_engine.cli import main

    try:
        code = main(["serve", *map(str, args)])
    except SystemExit as e:  # argparse errors
        code = e.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "/nonexistent/model"], "does not exist"),
    (["--port", "70000"], "port must be in"),
    (["--max-active-streams", "0"], "max_active_streams must be >= 1"),
    (["--port", "eighty"], "invalid int value"),
])
def test_bad_serve_arguments_give_one_line_and_exit_2(tiny_checkpoint, capsys, args, message):
    base = [] if "--model" in args else ["--model", tiny_checkpoint]
    assert message in serve_args_error(capsys, *base, *args)


def test_address_in_use_is_a_one_line_error(tiny_checkpoint, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = serve_args_error(capsys, "--model", tiny_checkpoint, "--port", port)
    assert f"cannot listen on 127.0.0.1:{port}" in line


def test_serve_answers_speech_and_stops_on_sigint(tiny_checkpoint, tmp_path):
    # a context twice the default: the longest text a stream may carry follows it
    config = tmp_path / "serve.toml"
    config.write_text("[engine]\nmax_context = 4096\n")
    proc = subprocess.Popen([sys.executable, "-m", "tts_engine.cli", "serve", "--model", str(tiny_checkpoint),
                             "--port", "0", "--log-level", "warning", "--config", str(config)],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.search(r"listening on (http://[\d.]+:\d+)", line)
        assert match, line
        url = match.group(1)
        deadline = time.monotonic() + 120
        while httpx.get(url + "/ready").status_code != 200:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        r = httpx.post(url + "/v1/audio/speech", json={"input": "Hi.", "voice": "ryan", "max_frames": 3},
                       timeout=60)
        assert r.status_code == 200 and len(r.content) % 2 == 0
        # 2,000 characters: over what the default context holds (~1,480), within this one's (~3,000)
        long_text = ("The birch canoe slid on the smooth planks. " * 50)[:2000]
        r = httpx.post(url + "/v1/audio/speech", json={"input": long_text, "voice": "ryan", "max_frames": 3},
                       timeout=60)
        assert r.status_code == 200 and len(r.content) > 0, r.text
        r = httpx.post(url + "/v1/audio/speech", json={"input": long_text * 2, "voice": "ryan", "max_frames": 3},
                       timeout=60)
        assert r.status_code == 422 and "context of 4096 positions" in r.json()["error"]["message"], r.text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert "cadence serve: stopped" in proc.stderr.read()
