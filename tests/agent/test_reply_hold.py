"""agent/reply_hold.py on its own (the whole pipeline's behaviour is in test_interruptions.py): what
is held, what is released, and that the pipeline's end is never held behind a reply."""

from __future__ import annotations

from pipecat.frames.frames import (
    InterruptionFrame,
    TextFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.tests.utils import SleepFrame, run_test

from agent.reply_hold import ReplyHold

from .helpers import run


def _texts(frames) -> list[str]:
    return [f.text for f in frames if isinstance(f, TextFrame)]


def test_a_reply_in_the_users_pause_is_released_once_the_silence_is_long_enough():
    down, _ = run(run_test(ReplyHold(hold_s=0.6, vad_stop_s=0.2), frames_to_send=[
        VADUserStoppedSpeakingFrame(stop_secs=0.2), TextFrame("held"), TextFrame("behind it"), SleepFrame(sleep=0.8),
        TextFrame("later")]))
    assert _texts(down) == ["held", "behind it", "later"]


def test_a_reply_spoken_over_is_dropped_and_the_end_is_not_held_behind_it():
    """The user speaks again inside the hold (no release while they speak), the pipeline ends: its end
    frame must pass and the held reply goes out first. (Held, the end frame hangs this test: run_test
    waits for it, and no asyncio timeout can cancel a pipeline that waits for its end.) (System
    frames overtake queued ones, so the sleeps keep the VAD's frames behind the text.)"""
    frames = [
        VADUserStoppedSpeakingFrame(stop_secs=0.2), TextFrame("one"), SleepFrame(sleep=0.05),
        VADUserStartedSpeakingFrame(), SleepFrame(sleep=0.8), InterruptionFrame(), TextFrame("two"),
        VADUserStoppedSpeakingFrame(stop_secs=0.2), TextFrame("three"), SleepFrame(sleep=0.05),
        VADUserStartedSpeakingFrame()]
    down, _ = run(run_test(ReplyHold(hold_s=0.6, vad_stop_s=0.2), frames_to_send=frames))
    # "one" went with the interruption; "two" came while the user spoke (nothing to hold it for); "three",
    # held when the user went on, goes out ahead of the end
    assert _texts(down) == ["two", "three"]
