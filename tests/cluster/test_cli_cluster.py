"""`cadence cluster`'s user errors: one line, status 2, before Ray starts."""

from __future__ import annotations

from tts_engine.cli import main

from .conftest import free_port


def test_cluster_refuses_bad_arguments_before_ray_starts(tiny_checkpoint, tmp_path, capsys):
    port = str(free_port())
    assert main(["cluster", "--model", str(tmp_path / "none"), "--port", port]) == 2
    assert main(["cluster", "--model", str(tiny_checkpoint), "--port", "0"]) == 2
    assert main(["cluster", "--model", str(tiny_checkpoint), "--port", port, "--replicas", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "fixed --port" in err[1] and "--replicas must be >= 1" in err[2]
