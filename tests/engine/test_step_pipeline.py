"""StepPipeline on its own: how many steps stay in flight, and when a step is read."""

from __future__ import annotations

import threading
import time

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


def test_a_wait_that_is_cut_short_leaves_the_step_in_flight():
    p = StepPipeline(2)
    a, b = Step("a"), Step("b")
    answers = [False, True]  # the first wait is cut short (a command came), the second sees it done
    seen = []

    def wait(step) -> bool:
        seen.append(step.name)
        return answers.pop(0)

    p.push(a)
    assert [s.name for s in p.completed(must_wait=True, wait=wait)] == [] and len(p) == 1 and not a.waited
    assert [s.name for s in p.completed(must_wait=True, wait=wait)] == ["a"] and len(p) == 0
    assert seen == ["a", "a"] and not a.waited  # the engine's wait replaced step.wait()
    # With the pipeline full no other step could be launched beside the oldest: the plain,
    # blocking wait (and before_wait) as before.
    p.push(a)
    p.push(b)
    early = []
    assert [s.name for s in p.completed(wait=wait, before_wait=lambda s: early.append(s.name))] == ["a"]
    assert a.waited and early == ["a"] and seen == ["a", "a"]


class _DeviceStep:
    """A launched step whose device work ends `seconds` after it is made (LaunchedStep's polling)."""

    def __init__(self, seconds: float):
        self.done_at = time.monotonic() + seconds
        self.early_delivered = True  # no early audio in it

    def ready(self) -> bool:
        return time.monotonic() >= self.done_at


def test_the_engine_cuts_its_wait_for_the_device_short_for_a_new_command(tiny_checkpoint):
    """StreamingEngine._await_step (not started: the test is its engine thread): it returns True
    once the step is done, and False as soon as a command arrives, with the step still running."""
    from tts_engine.engine.core import StreamingEngine

    engine = StreamingEngine(tiny_checkpoint, device="cpu", max_context=256)
    t0 = time.monotonic()
    assert engine._await_step(_DeviceStep(0.03)) is True and not engine._interrupted
    assert 0.03 <= time.monotonic() - t0 < 1.0

    step = _DeviceStep(5.0)
    threading.Timer(0.02, engine.command, ("noop", "s0")).start()
    t0 = time.monotonic()
    assert engine._await_step(step) is False and engine._interrupted
    assert time.monotonic() - t0 < 1.0 and not step.ready()
