"""The soak suite's short version (`python -m bench.soak`): `cadence serve` on the tiny checkpoint, on the
CPU, under good, cancelling, vanishing, malformed and slow clients for 40 s."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_a_short_soak_loses_no_audio_and_logs_no_server_error(tiny_checkpoint, tmp_path):
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, "-m", "bench.soak", "--checkpoint", str(tiny_checkpoint),
                           "--minutes", "0.67", "--rate", "0.5", "--prebuffer-ms", "1000", "--seed", "7",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    checks = summary["checks"]
    # Underruns depend on this machine's spare CPU (a shared CI runner has little); they are reported and
    # judged in the full soak (docs/performance.md), not here.
    assert {k: v for k, v in checks.items() if k != "zero_underruns"} == {k: True for k in checks
                                                                          if k != "zero_underruns"}, summary
    assert summary["well_behaved"] >= 5 and summary["lost_samples"] == 0 and summary["duplicate_chunks"] == 0
    kinds = summary["by_kind"]
    assert kinds.get("slow_reader") == 2 and sum(kinds.values()) >= 12, kinds
    assert proc.returncode == (0 if summary["pass"] else 1)
    # the engine's own counters of what stops it, read from /metrics before the server stopped
    engine = summary["engine"]
    assert engine["host_iterations"] > 0 and 0 < engine["host_iteration_max_s"] < 60, engine
    assert {"gc_pauses", "gc_pause_max_s", "watchdog_stalls"} <= set(engine), engine
