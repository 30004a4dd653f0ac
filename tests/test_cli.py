"""`cadence say` and `cadence make-checkpoint` as a user runs them: real processes, real files."""

from __future__ import annotations

import subprocess
import sys
import wave

import numpy as np
import pytest


def cadence(*args, stdin: str | None = None):
    return subprocess.run([sys.executable, "-m", "tts_engine.cli", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_say_writes_an_audible_24khz_wav(tiny_checkpoint, tmp_path):
    out = tmp_path / "hello.wav"
    r = cadence("say", "Hello there, general Kenobi.", "--model", tiny_checkpoint, "--voice", "ryan",
                "--language", "english", "--out", out, "--seed", "3")
    assert r.returncode == 0, r.stderr
    with wave.open(str(out)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768
    # Random-weight checkpoint: length follows the text (28 chars at 14.5 chars/s + frame 0).
    frames = len(pcm) / 1920
    assert frames == 1 + np.ceil(len("Hello there, general Kenobi.") / 14.5 * 12.5)
    assert 20 * np.log10(np.sqrt(np.mean(pcm**2))) > -45


def test_say_reads_text_from_stdin(tiny_checkpoint, tmp_path):
    out = tmp_path / "stdin.wav"
    r = cadence("say", "--model", tiny_checkpoint, "--voice", "aiden", "--out", out, "--greedy",
                stdin="Read from standard input.\n")
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 44


@pytest.mark.parametrize(("args", "message"), [
    (["--voice", "bob"], "unknown voice 'bob'"),
    (["--voice", "ryan", "--language", "klingon"], "unknown language 'klingon'"),
    (["--voice", "ryan", "--model", "/nonexistent/model"], "does not exist"),
    (["--voice", "ryan", "--temperature", "0"], "temperature must be"),
    (["--voice", "ryan", "--max-frames", "0"], "--max-frames"),
    (["--voice", "ryan", "--temperature", "hot"], "invalid float value"),
])
def test_bad_arguments_give_one_line_and_exit_2(tiny_checkpoint, tmp_path, args, message):
    base = ["say", "Some text.", "--out", tmp_path / "x.wav"]
    if "--model" not in args:
        base += ["--model", tiny_checkpoint]
    r = cadence(*base, *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert message in lines[0]
    assert "Traceback" not in r.stderr


def test_empty_stdin_is_an_error(tiny_checkpoint, tmp_path):
    r = cadence("say", "--model", tiny_checkpoint, "--voice", "ryan", "--out", tmp_path / "x.wav",
                stdin="  \n")
    assert r.returncode == 2 and "no text" in r.stderr


def test_make_checkpoint_rejects_unknown_size(tmp_path):
    r = cadence("make-checkpoint", "--size", "70b", "--out", tmp_path)
    assert r.returncode == 2 and "invalid choice" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _config(tmp_path, text: str):
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("toml,message", [
    ("[scheduler]\nrealtime_margin = 0.5\n", "[scheduler]: realtime_margin must be >= 1, got 0.5"),
    ("[scheduler]\nlookahead_buffer_s = -1\n", "[scheduler]: lookahead_buffer_s must be a number >= 0, got -1.0"),
    ("[engine]\ngil_switch_ms = 0\n", "[engine]: gil_switch_ms must be > 0, got 0.0"),
    ("[engine]\nmax_context = 32\n", "[engine]: max_context must be in 64-32768, got 32"),
    ("[engine]\nprofile_seconds = 0\n", "[engine]: profile_seconds must be > 0, got 0.0"),
    ("[engine]\ncodec_precision = \"fp8\"\n", "[engine]: codec_precision must be one of fp32, tf32, bf16"),
    ("[server]\nport = \"eighty\"\n", "[server].port: expected int, got str 'eighty'"),
    ("[server]\nmax_body_byte = 1\n", "[server]: unknown setting 'max_body_byte'"),
    ("[kernels]\ncp_gemv_rows = 1\n", "unknown table [kernels]"),
    ("[server\n", "Expected ']'"),
])
def test_serve_rejects_a_bad_config_file_before_loading_the_model(tmp_path, toml, message):
    r = cadence("serve", "--model", tmp_path / "missing", "--config", _config(tmp_path, toml))
    assert r.returncode == 2 and r.stderr.startswith("cadence serve: error: ") and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_serve_shows_its_config_defaults_and_they_load_back(tmp_path):
    """--show-config prints a file that `--config` accepts as it is, with every table's defaults."""
    from tts_engine import settings

    r = cadence("serve", "--show-config")
    assert r.returncode == 0 and "[server]" in r.stdout and "[scheduler]" in r.stdout and "[engine]" in r.stdout
    assert "max_active_streams = 64" in r.stdout
    assert settings.load(_config(tmp_path, r.stdout)) == settings.ServeSettings()


def test_serve_flags_override_the_config_file(tmp_path):
    from tts_engine import settings

    path = _config(tmp_path, "[server]\nport = 9000\nhost = \"0.0.0.0\"\n[scheduler]\nmax_active_streams = 8\n")
    loaded = settings.load(path, {"server": {"port": 9100, "host": None}, "scheduler": {"max_active_streams": 4}})
    assert (loaded.server.port, loaded.server.host, loaded.scheduler.max_active_streams) == (9100, "0.0.0.0", 4)


def test_serve_keeps_at_most_fifteen_options():
    """Kernel choices are internal (runtime/options.py) and server knobs live in the config file."""
    from tts_engine.cli import build_parser

    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    assert len([a for a in serve._actions if a.option_strings]) <= 15


@pytest.mark.parametrize("command", ["serve", "say", "make-checkpoint"])
@pytest.mark.parametrize("device", ["cuda:9", "tpu", "meta"])
def test_a_device_this_machine_lacks_is_a_clear_error(tmp_path, tiny_checkpoint, command, device):
    """Not a traceback from the checkpoint loader (a pinned-memory error, with `--device cuda` and no GPU)."""
    import torch

    args = {"serve": ["--model", tiny_checkpoint],
            "say": ["hello", "--model", tiny_checkpoint, "--voice", "ryan", "--out", tmp_path / "a.wav"],
            "make-checkpoint": ["--size", "tiny", "--out", tmp_path / "ckpt"]}[command]
    r = cadence(command, *args, "--device", device)
    want = {"tpu": "--device 'tpu' is not a device",
            "meta": "--device meta: only cpu and cuda are supported",
            "cuda:9": "--device cuda:9: this machine has" if torch.cuda.is_available()
            else "--device cuda:9: no CUDA device is available"}[device]
    assert r.returncode == 2 and r.stderr.startswith(f"cadence {command}: error: {want}"), r.stderr
    assert not (tmp_path / "a.wav").exists() and not (tmp_path / "ckpt").exists()


def test_say_clones_a_voice_from_reference_audio(tmp_path):
    """A Base checkpoint speaks in the voice of a reference recording (in-context, with its transcript)."""
    import shutil
    import wave

    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is needed (apt-get install espeak-ng)")
    ref_text = "This is the reference voice for the cloning test."
    subprocess.run(["espeak-ng", "-w", str(tmp_path / "ref.wav"), ref_text], check=True)
    assert cadence("make-checkpoint", "--size", "tiny", "--variant", "base", "--out", tmp_path / "base").returncode == 0
    r = cadence("say", "Hello there.", "--model", tmp_path / "base", "--ref-audio", tmp_path / "ref.wav",
                "--ref-text", ref_text, "--out", tmp_path / "out.wav")
    assert r.returncode == 0, r.stderr
    with wave.open(str(tmp_path / "out.wav")) as w:
        assert w.getframerate() == 24000 and w.getnframes() > 0
    r = cadence("say", "Hello.", "--model", tmp_path / "base", "--ref-text", ref_text, "--out", tmp_path / "x.wav")
    assert r.returncode == 2 and "--ref-text goes with --ref-audio" in r.stderr
