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


def test_serve_rejects_a_bad_scheduler_setting_before_loading_the_model(tmp_path):
    r = cadence("serve", "--model", tmp_path / "missing", "--realtime-margin", "0.5")
    assert r.returncode == 2 and r.stderr.strip() == "cadence serve: error: realtime_margin must be >= 1, got 0.5"


def test_serve_rejects_a_negative_lookahead_buffer(tmp_path):
    r = cadence("serve", "--model", tmp_path / "missing", "--lookahead-buffer-s", "-1")
    assert r.returncode == 2
    assert r.stderr.strip() == "cadence serve: error: lookahead_buffer_s must be >= 0, got -1.0"


def test_serve_rejects_a_gil_switch_interval_that_is_not_positive(tmp_path):
    r = cadence("serve", "--model", tmp_path / "missing", "--gil-switch-ms", "0")
    assert r.returncode == 2 and r.stderr.strip() == "cadence serve: error: --gil-switch-ms must be > 0, got 0.0"


def test_serve_rejects_a_profile_window_that_is_not_positive(tmp_path):
    r = cadence("serve", "--model", tmp_path / "missing", "--profile-engine", tmp_path / "p", "--profile-seconds", "0")
    assert r.returncode == 2 and r.stderr.strip() == "cadence serve: error: profile seconds must be > 0, got 0.0"


@pytest.mark.parametrize("args,message", [
    (["--cp-gemv-rows", "9"], "--cp-gemv-rows must be in 0..4, got 9"),
    (["--talker-gemv-rows", "-1"], "--talker-gemv-rows must be in 0..4, got -1"),
    (["--cp-mma-rows", "2"], "--cp-mma-rows must be 0 or above --cp-gemv-rows (2) and at most 64, got 2"),
    (["--cp-gemv-rows", "1", "--cp-mma-rows", "65"],
     "--cp-mma-rows must be 0 or above --cp-gemv-rows (1) and at most 64, got 65"),
    (["--prefill-mma-rows", "65"], "--prefill-mma-rows must be in 0..64, got 65"),
    (["--talker-qk-attention-context", "-1"], "--talker-qk-attention-context must be >= 0, got -1"),
    (["--first-audio-yield-ms", "-1"], "--first-audio-yield-ms must be >= 0, got -1.0"),
    (["--codec-window-max", "-1"], "--codec-window-max must be >= 0, got -1"),
    (["--cp-gemv-rows", "0", "--cp-pdl"],
     "--cp-pdl needs --cp-gemv-rows > 0 (PDL launches the code predictor's GEMVs)"),
    (["--cp-pdl"], "--cp-pdl needs a CUDA device (sm90+), not cpu"),
    (["--talker-gemv-rows", "0", "--talker-pdl"],
     "--talker-pdl needs --talker-gemv-rows > 0 (PDL launches the talker's GEMV steps)"),
    (["--talker-pdl"], "--talker-pdl needs a CUDA device (sm90+), not cpu"),
    (["--prefill-stream"], "--prefill-stream needs a CUDA device, not cpu"),
])
def test_serve_rejects_fast_path_options_out_of_range(tmp_path, args, message):
    r = cadence("serve", "--model", tmp_path / "missing", *args)
    assert r.returncode == 2 and r.stderr.strip() == f"cadence serve: error: {message}"


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


def test_serve_has_a_flag_for_every_fast_path_option():
    """Every FastPathOptions field is settable from `cadence serve` (a new kernel path can be timed on a server
    without code changes), as --field-name, and its value reaches the options."""
    from tts_engine.cli import build_parser
    from tts_engine.runtime.options import FastPathOptions

    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    dests = {a.dest for a in serve._actions}
    assert set(FastPathOptions.__dataclass_fields__) <= dests, set(FastPathOptions.__dataclass_fields__) - dests
    args = build_parser().parse_args(["serve", "--model", "x", "--cp-qkv-table", "--no-cp-fused-attention"])
    assert args.cp_qkv_table is True and args.cp_fused_attention is False
