"""StepPipeline on its own: how many steps stay in flight, and when a step is read."""

from __future__ import annotations

import pytest

from tts_engine.engine.pipeline import StepPipeline


class Step:
    def __init__(self, name: str):
        self.name = name
        self.waited = False

    def wait(self) -> None:
        self.waited = True


def read(pipeline: StepPipeline, must_wait: bool = False) -> list[str]:
    return [s.name for s in pipeline.completed(must_wait)]


def test_depth_one_reads_each_step_right_after_its_launch():
    p = StepPipeline(1)
    p.push(Step("a"))
    assert read(p) == ["a"] and len(p) == 0


def test_depth_two_reads_step_k_after_launching_k_plus_1():
    p = StepPipeline(2)
    a, b, c = Step("a"), Step("b"), Step("c")
    p.push(a)
    assert read(p) == [] and not a.waited  # a runs on the device while the next step is planned
    p.push(b)
    assert read(p) == ["a"] and a.waited and not b.waited
    p.push(c)
    assert read(p) == ["b"]
    # Nothing new to launch: the oldest is waited for, one per iteration.
    assert read(p, must_wait=True) == ["c"] and len(p) == 0
    assert read(p, must_wait=True) == []


def test_depth_must_be_positive():
    with pytest.raises(ValueError):
        StepPipeline(0)


def test_an_iteration_may_ask_for_less_depth_but_never_more():
    p = StepPipeline(2)
    a, b = Step("a"), Step("b")
    p.push(a)
    assert [s.name for s in p.completed(depth=1)] == ["a"]  # no lookahead: read at once
    p.push(b)
    assert [s.name for s in p.completed(depth=5)] == [] and len(p) == 1  # capped at the pipeline's 2
    assert [s.name for s in p.completed(must_wait=True, depth=1)] == ["b"]
