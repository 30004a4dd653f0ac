"""`cadence bench` as a command: wired into `cadence`, cheap to parse, one-line errors (exit 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tts_engine.cli import main


def bench_error(capsys, *args: str) -> str:
    try:
        code = main(["bench", *args])
    except SystemExit as e:  # argparse errors
        code = e.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1]


@pytest.mark.parametrize(("args", "message"), [
    (["--out", "x"], "one of the arguments --url --model is required"),
    (["--url", "http://h:1", "--model", "/tmp", "--out", "x"], "not allowed with argument"),
    (["--url", "http://h:1"], "the following arguments are required: --out"),
    (["--url", "http://h:1", "--out", "x", "--rates", "0,5"], "expected positive numbers"),
    (["--url", "http://h:1", "--out", "x", "--extra", "[1]"], "expected a JSON object"),
    (["--url", "ftp://h:1", "--out", "x"], "--url must start with http(s)://"),
    (["--model", "/nonexistent/ckpt", "--out", "x"], "model directory /nonexistent/ckpt does not exist"),
    (["--url", "http://h:1", "--out", "x", "--duration", "0"], "--duration must be > 0"),
    (["--url", "http://h:1", "--out", "/nonexistent/dir/out"], "parent /nonexistent/dir does not exist"),
    (["--url", "http://h:1", "--out", "x", "--text-chars", "500"], "expected MIN,MAX with 0 < MIN < MAX"),
    (["--url", "http://h:1", "--out", "x", "--text-chars", "500,520"], "--text-chars MIN,MAX needs 0 < MIN and MAX"),
])
def test_bad_arguments_give_one_line_and_exit_2(capsys, args, message):
    assert message in bench_error(capsys, *args)


def test_building_the_parser_loads_nothing_heavy():
    code = ("import sys; from tts_engine.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('bench.load.main', 'httpx', 'websockets', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
