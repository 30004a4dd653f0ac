"""bench.stages (issue 3's stage table) on the CPU: its arguments, its table, and every stage callable
it times, run on a tiny model's runner (the CUDA timing itself is tests/gpu/test_stages_gpu.py's)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bench.stage_times import PROMPT_ROWS, prefill_every_slot, prompt_ids, stage_fns
from bench.stages import parse_batches, table


def test_batches_are_checked():
    assert parse_batches("1,8,32,64") == (1, 8, 32, 64)
    for bad in ("", "1,x", "0", "65"):
        with pytest.raises(ValueError, match="--batches"):
            parse_batches(bad)


def test_the_table_holds_every_figure_it_was_given():
    stages = {b: {"talker_step_ms": 0.9 + b, "talker_step_long_ms": 1.1 + b, "code_predictor_frame_ms": 1.2 + b,
                  "frame_step_ms": 2.2 + b} for b in (1, 8)}
    codec = {b: {"chunk_1f_ms": 0.7 + b, "chunk_2f_ms": 0.8 + b, "chunk_12f_ms": 1.3 + b} for b in (1, 8)}
    result = {"stages": stages, "codec": {**codec, "snr_db_vs_fp32": 27.31},
              "floors": {"copy_bandwidth_tbs": 4.271, "floor_talker_step_ms": 0.663,
                         "floor_code_predictor_frame_ms": 0.567},
              "prefill": {"prefill_12_ms": 1.62, "prefill_40_ms": 1.77}, "reference_ms_per_frame": 106.7,
              "socket": {"requests": 100, "first_pcm_ms_p50": 8.19, "first_pcm_ms_p95": 8.67, "first_pcm_ms_max": 8.97}}
    text = table(result)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0] == "| | batch 1 | batch 8 |"
    assert "| code-predictor frame | 2.200 | 9.200 |" in rows and "| codec, 12-frame chunk | 2.300 | 9.300 |" in rows
    assert len(rows) == 1 + 4 + 3
    for figure in ("4.27 TB/s", "0.663 ms", "0.567 ms", "1.62 / 1.77 ms at 12 / 40 rows", "27.3 dB", "106.7 ms",
                   "p50 8.19 ms, p95 8.67, max 8.97"):
        assert figure in text, figure
    del result["socket"], result["reference_ms_per_frame"]
    assert "socket" not in table(result) and "reference" not in table(result)


def test_without_a_gpu_it_says_so_and_exits_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.stages", "--model", str(tmp_path), "--out",
                           str(tmp_path / "out.json")], capture_output=True, text=True, timeout=120)
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: tests/gpu/test_stages_gpu.py runs the table")
    assert done.returncode == 2 and "bench.stages: error: bench.stages needs a CUDA device" in done.stderr
    assert not (tmp_path / "out.json").exists()


def test_every_stage_runs_on_a_runner_and_writes_its_outputs(tiny_checkpoint):
    """The callables the table times, on the tiny model's torch path: each stage produces what the runner's
    own step does (the frame step: codes for every row; the talker steps: one hidden row each)."""
    from tts_engine.runtime.runner import ModelRunner
    from tts_engine.synthesizer import Synthesizer

    text_ids, codec_ids = prompt_ids(40)
    assert len(text_ids) == len(codec_ids) == 40 and codec_ids[3:10] == [2154, 2156, 2050, 2157, 3061, 2148, 2149]
    runner = ModelRunner(Synthesizer(tiny_checkpoint).model, max_slots=2, max_context=96, use_triton=False)
    with torch.inference_mode():
        prefill_every_slot(runner)
        fns = stage_fns(runner, 2)
        assert set(fns) == {"talker_step", "talker_step_long", "code_predictor_frame", "frame_step"}
        hidden = fns["talker_step"]()
        assert hidden.shape == (2, runner.cfg.hidden_size) and torch.isfinite(hidden).all()
        assert fns["talker_step_long"]().shape == hidden.shape
        codes = fns["code_predictor_frame"]()
        assert codes.shape == (2, 15) and int(codes.min()) >= 0
        before = runner.logits[:2].clone()
        fns["frame_step"]()
        assert not torch.equal(runner.logits[:2], before), "the frame step fed its codes back through the talker"
    assert PROMPT_ROWS == 11
