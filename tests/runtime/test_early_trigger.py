"""The code predictor's early triggers (`CodePredictorRunner.early_trigger`): which launches of its PDL passes get
`backend.PDL_EARLY` (the next launch may start before their wait) and which keep triggering after it. The kernels
are stand-ins that record what they were launched with: PDL needs an sm90 GPU, where
tests/gpu/test_code_predictor_gpu.py checks that early triggers give the codes of late ones."""

from __future__ import annotations

import pytest

from tests.runtime.recorded_frame import frame_launches, pdl_code_predictor
from tts_engine.kernels.backend import PDL_EARLY
from tts_engine.runtime.code_predictor import EARLY_TRIGGER_LAUNCHES, CodePredictorRunner


@pytest.fixture(scope="module")
def runner() -> CodePredictorRunner:
    return pdl_code_predictor()


def launches(runner: CodePredictorRunner, monkeypatch, early: tuple[str, ...]) -> list[tuple[str, object]]:
    """One frame of one row through stand-in kernels (`frame_launches`) with `early` -> (launch, its pdl) in launch
    order."""
    runner.early_trigger = early
    try:
        return [(name, kw.get("pdl", False)) for name, _, kw in frame_launches(runner, monkeypatch)]
    finally:
        runner.early_trigger = ()


def test_without_early_triggers_every_launch_triggers_after_its_wait(runner, monkeypatch):
    seen = launches(runner, monkeypatch, ())
    assert {pdl for _, pdl in seen} == {True}
    layers = len(runner.stack.layers)
    # the prefill pass makes its first layer's qkv; passes 1-14 gather it from the table
    assert [n for n, _ in seen].count("qkv") == 15 * layers - 14


def test_early_triggers_are_the_named_launches_but_the_frames_last_draw(runner, monkeypatch):
    seen = launches(runner, monkeypatch, EARLY_TRIGGER_LAUNCHES)
    draws = [pdl for n, pdl in seen if n == "draw"]
    assert draws == [PDL_EARLY] * 14 + [True], "the frame's last draw is followed by what is not the code predictor's"
    assert {pdl for n, pdl in seen if n in ("qkv", "attention_o", "down", "head")} == {PDL_EARLY}
    assert {pdl for n, pdl in seen if n == "gate_up"} == {True}
    only_down = launches(runner, monkeypatch, ("down",))
    assert [(n, pdl == PDL_EARLY) for n, pdl in only_down] == [(n, n == "down") for n, _ in only_down]


def test_an_unknown_or_unsafe_launch_is_refused_and_non_pdl_launches_are_left_alone(runner):
    runner.early_trigger = ("gate_up",)
    try:
        with pytest.raises(ValueError, match="gate_up"):
            runner.trigger("down", True)
        runner.early_trigger = ("down",)
        assert runner.trigger("down", False) is False
        assert runner.trigger("down", True) == PDL_EARLY and runner.trigger("head", True) is True
        assert runner.launch(2)["down"]["pdl"] == PDL_EARLY and runner.launch(2)["gate_up"]["pdl"] is True
    finally:
        runner.early_trigger = ()
