"""bench.stages end to end on the card: the whole table of a tiny checkpoint in one process (stages, codec,
floors, prefill, socket), every figure a positive time, the table printed from them."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_stage_table_runs_and_every_figure_is_a_time(cuda, tiny_checkpoint, tmp_path):
    out = tmp_path / "stages.json"
    done = subprocess.run([sys.executable, "-m", "bench.stages", "--model", str(tiny_checkpoint), "--out", str(out),
                           "--batches", "1,2", "--requests", "3", "--skip-reference"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    for b in ("1", "2"):
        assert all(0 < v < 1000 for v in result["stages"][b].values()), result["stages"][b]
        assert all(0 < v < 1000 for v in result["codec"][b].values()), result["codec"][b]
    assert result["floors"]["copy_bandwidth_tbs"] > 0.1 and all(v > 0 for v in result["prefill"].values())
    assert result["socket"]["requests"] == 3 and 0 < result["socket"]["first_pcm_ms_p50"] < 10_000
    assert "| frame step |" in done.stdout and "socket first PCM (3 sequential requests)" in done.stdout
