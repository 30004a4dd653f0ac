"""The engine thread's way out to its streams: scheduler outputs become stream events (audio with
onset trimming and word timings, flush done, done, errors), posted through one `Outbox` and flushed
in batches; each stream's first audio is counted into the engine's first-audio stats.

Everything here runs on the engine thread, which owns `entries`.

Early first audio (`early_first_chunks`): which of a step's first chunks may be sent before the step
is read. The executor launches a step's codec calls that hold a stream's first chunk ahead of its other calls
and records `LaunchedStep.early_event` after them, so their PCM (and the step's codebook-0 ids) are
on the host while the rest of the step still runs. A chunk goes early only if the step's result
cannot change it: no EOS among its frames (read from the step's own codebook 0, or known from an
earlier step), not the stream's last audio (its `final` flag comes from the result), and its stream
still there with nothing decoded yet.
"""

from __future__ import annotations

import time

from ..scheduler.plan import AudioReady, Finished, FlushDone, Output
from ..scheduler.scheduler import Scheduler
from .api import SAMPLES_PER_FRAME, DoneEvent, ErrorEvent, FlushDoneEvent
from .entry import StreamEntry
from .executor import LaunchedStep
from .outbox import Outbox


class Delivery:
    def __init__(self, scheduler: Scheduler, entries: dict[str, StreamEntry], stats: dict[str, float]):
        self.scheduler, self.entries, self.stats = scheduler, entries, stats
        self.outbox = Outbox()  # this thread's events, flushed once per iteration (outbox.py)

    def flush(self) -> None:
        self.outbox.flush()

    def early(self, launched: LaunchedStep, eos_id: int | None) -> None:
        """First audio before its step ends (`early_first_chunks`); the scheduler's AudioReady for it,
        when the step is read, is then skipped. Once per step."""
        if launched.early_delivered:
            return
        launched.early_delivered = True
        self.outbox.flush()  # the steps read so far: their events must not wait for this one
        if not launched.early_batches:
            return
        launched.wait_early()
        for entry, out in early_first_chunks(launched, self.entries, eos_id):
            self.audio(entry, out, launched)
            launched.early_sent.add((out.batch, out.row))
        self.outbox.flush()

    def act(self, outputs: list[Output], launched: LaunchedStep | None = None) -> bool:
        for out in outputs:
            entry = self.entries[out.stream_id]
            if isinstance(out, AudioReady):
                if launched is not None and (out.batch, out.row) in launched.early_sent:
                    continue  # sent by early()
                self.audio(entry, out, launched)
            elif isinstance(out, FlushDone):
                self.outbox.post(entry.handle, FlushDoneEvent(out.stream_id))
            elif isinstance(out, Finished):
                self.entries.pop(out.stream_id)
                self.stats["finished"] += 1
                self.outbox.post(entry.handle, DoneEvent(out.stream_id, entry.state.frames_decoded,
                                                         entry.out.audio_s, out.reason))
        return bool(outputs)

    def audio(self, entry: StreamEntry, out: AudioReady, launched: LaunchedStep) -> None:
        skip = entry.state.audible_skip
        n = out.num_frames * SAMPLES_PER_FRAME
        event = entry.out.audio(launched.host_pcm(out.batch)[out.row, :n], out.first_frame + skip, out.num_frames,
                                final=out.final, first_audible_frame=skip)
        if event is None:
            return
        now = time.monotonic()
        first = entry.state.first_audio_at is None
        if first:
            self.stats["ttfa_sum_s"] += now - entry.state.arrival
            self.stats["ttfa_count"] += 1
            parts = entry.trace.parts(now) if entry.trace is not None else None
            if parts is not None:  # where the engine's share of TTFA goes (means: sum / ttfa_count)
                for name, seconds in parts.items():
                    self.stats[f"ttfa_{name}_sum_s"] += seconds
        self.scheduler.audio_sent(entry.state, event.duration_s, now)
        self.outbox.post(entry.handle, event)

    def finish(self, entry: StreamEntry, *, cancelled: bool = False, error: str | None = None) -> None:
        """End a stream the engine ends itself (cancel, bad input): state and slot freed now."""
        self.scheduler.abort(entry.state.id, cancelled=cancelled)
        self.entries.pop(entry.state.id, None)
        if error is not None:
            # the server's 422 class
            self.outbox.post(entry.handle, ErrorEvent(entry.state.id, error, "invalid_input"))
            return
        self.stats["cancelled"] += 1
        self.outbox.post(entry.handle, DoneEvent(entry.state.id, entry.state.frames_decoded, entry.out.audio_s,
                                                 "cancelled"))


def early_first_chunks(launched: LaunchedStep, entries: dict[str, StreamEntry],
                       eos_id: int | None) -> list[tuple[StreamEntry, AudioReady]]:
    """Call after `launched.wait_early()`: (entry, its AudioReady) per first chunk that may be sent
    now; its PCM is row `row` of `launched.host_pcm(batch)`. eos_id None: EOS never ends a stream
    (random weights)."""
    plan = launched.plan
    rows = {r.stream_id: i for i, r in enumerate(plan.frames.rows)} if plan.frames is not None else {}
    out = []
    for i in launched.early_batches:
        for j, chunk in enumerate(plan.chunks[i].chunks):
            entry = entries.get(chunk.stream_id)
            if entry is None:
                continue
            s = entry.state
            end = chunk.first_frame + chunk.num_frames  # frames [first, end) of this chunk
            if s.first_audio_at is not None or s.frames_decoded or chunk.first_frame != s.audible_skip:
                continue
            if end >= s.frame_limit or (s.eos_frame is not None and s.eos_frame < end):
                continue
            row = rows.get(chunk.stream_id)
            if row is not None and eos_id is not None and launched.c0 is not None and int(launched.c0[row]) == eos_id:
                continue
            out.append((entry, AudioReady(s.id, i, j, 0, chunk.num_frames, False)))
    return out
