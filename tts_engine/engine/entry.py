"""Engine-thread bookkeeping of one stream beside its scheduler state: the handle its events go to,
its text and prompt, and its output formatting."""

from __future__ import annotations

from dataclasses import dataclass

from ..prompt import Prompt
from ..scheduler.request import StreamState
from ..text_stream import StreamingTokenizer
from .api import StreamOptions
from .stream import Stream
from .streamout import StreamOutput

# The spans between FirstAudioTrace's chain of marks, in order (engine stats `ttfa_<part>_sum_s`), and
# "issue", a span inside "plan" (stat `ttfa_issue_sum_s`, not part of the chain's sum), itself cut in
# ISSUE_PARTS: until the stream queues for a slot (its text tokenised, its prompt built; a stream opened
# before its first text token waits for it here), the plan until the launch of the step holding its
# prefill begins, and that launch until the prefill is on the device.
TTFA_PARTS = ("wake", "plan", "launch", "device")
ISSUE_PARTS = ("issue_open", "issue_plan", "issue_prefill")
_CHAIN = ("opened", "drained", "prefill_launched", "chunk_launched")
_ISSUE_CHAIN = ("drained", "queued", "launch_began", "prefill_issued")


@dataclass
class FirstAudioTrace:
    """Monotonic times on the way to a stream's first audio, for the engine's TTFA breakdown:
    opened (the caller's open) -> drained (the engine thread took the open) -> prefill launched (the
    end of the launch of the step holding it) -> first chunk launched (the end of that step's launch)
    -> first audio read (its step completed). prefill_issued: the stream's own prefill has been handed
    to the device (on an idle GPU the device starts there; the rest of "plan" is host work beside it);
    before it, queued (the stream's prompt is built and queued for a slot) and launch_began (the launch of
    the step holding its prefill begins)."""

    opened: float
    drained: float | None = None
    prefill_launched: float | None = None
    chunk_launched: float | None = None
    prefill_issued: float | None = None
    queued: float | None = None
    launch_began: float | None = None

    def parts(self, read: float) -> dict[str, float] | None:
        """Seconds of each span, named by what the stream waited for; None if a mark is missing."""
        marks = [getattr(self, name) for name in _CHAIN] + [read]
        issue = [getattr(self, name) for name in _ISSUE_CHAIN]
        if any(m is None for m in marks + issue):
            return None
        return {**{n: b - a for n, a, b in zip(TTFA_PARTS, marks, marks[1:])},
                "issue": self.prefill_issued - self.drained,
                **{n: b - a for n, a, b in zip(ISSUE_PARTS, issue, issue[1:])}}


@dataclass
class StreamEntry:
    state: StreamState  # shared with the scheduler, which owns it
    handle: Stream
    options: StreamOptions
    tokenizer: StreamingTokenizer | None
    out: StreamOutput
    prompt: Prompt | None = None
    trace: FirstAudioTrace | None = None
