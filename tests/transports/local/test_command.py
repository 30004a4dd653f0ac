"""`cadence talk`'s arguments and settings, checked before any audio device is opened."""

from __future__ import annotations

import argparse

import pytest

from transports import talk


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cadence")
    talk.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["talk", *argv])


def test_the_command_registers_its_options():
    args = parse("--input", "2", "--output", "USB speaker", "--aec")
    assert (args.input, args.output, args.aec, args.headphones) == ("2", "USB speaker", True, False)
    assert args.func is talk.run
    with pytest.raises(SystemExit):
        parse("--aec", "--headphones")  # one echo mode at a time


def test_the_config_file_is_the_demos(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        talk.run(parse("--config", str(tmp_path / "missing.toml")))
    bad = tmp_path / "bad.toml"
    bad.write_text('lm_base_url = "http://localhost:1"\n')
    with pytest.raises(ValueError, match="unknown setting 'lm_base_url'"):
        talk.run(parse("--config", str(bad)))
    silent = tmp_path / "silent.toml"
    silent.write_text('fallback_tts = "none"\n')  # valid for the demo (text only), not for a spoken call
    with pytest.raises(ValueError, match="cadence talk needs a voice"):
        talk.run(parse("--config", str(silent)))
