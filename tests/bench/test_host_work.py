"""bench/host_work.py: the real engine's host path with the null model stand-in, measured per frame row."""

from __future__ import annotations

import json

from bench.host_work import main
from tts_engine.engine.core import HOST_PARTS


def test_host_work_is_measured_without_the_stand_in_devices_time(tmp_path, tiny_checkpoint):
    out = tmp_path / "host.json"
    # 30 streams a second, each ~1.7 s at 25 ms a step: ~50 at once, all admitted with 64 slots
    assert main(["--model", str(tiny_checkpoint), "--rate", "30", "--seconds", "3", "--warmup", "1",
                 "--device-ms", "25", "--max-active-streams", "64", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    parts = result["host_ms_per_iteration"]
    assert set(parts) == set(HOST_PARTS) and all(ms >= 0 for ms in parts.values()), parts
    # streams arrived, decoded together and finished: the stand-in's steps never ran the model
    assert result["served"] >= 10 and result["iterations"] >= 10 and result["rows_per_iteration"] > 1, result
    assert result["refused"] == 0, result
    # the 25 ms sleep of every frame step is the stand-in device's, not host work
    assert parts["launch"] < 25 and result["host_work_ms_per_iteration"] < 25, result
    work = sum(ms for part, ms in parts.items() if part != "wait")
    assert abs(result["host_work_us_per_row"] - work / result["rows_per_iteration"] * 1e3) < 1e-6
