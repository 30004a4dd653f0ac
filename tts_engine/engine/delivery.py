"""The engine thread's way out to its streams: scheduler outputs become stream events (audio with
onset trimming and word timings, flush done, done, errors), posted through one `Outbox` and flushed
in batches; each stream's first audio is counted into the engine's first-audio stats.

Everything here runs on the engine thread, which owns `entries`.
"""

from __future__ import annotations

import time

from ..scheduler.plan import AudioReady, Finished, FlushDone, Output
from ..scheduler.scheduler import Scheduler
from .api import SAMPLES_PER_FRAME, DoneEvent, ErrorEvent, FlushDoneEvent
from .early import early_first_chunks
from .entry import StreamEntry
from .executor import LaunchedStep
from .outbox import Outbox


class Delivery:
    def __init__(self, scheduler: Scheduler, entries: dict[str, StreamEntry], stats: dict[str, float],
                 first_audio_yield_s: float = 0.0):
        """first_audio_yield_s > 0: a stream's first audio goes to its event loop as soon as it is
        posted, and the engine thread then sleeps that long. The loop needs the GIL to take the event
        and again to write it to the socket; while the engine thread runs Python (the next step's
        launches) the loop waits for it, up to the interpreter's switch interval each time. On the
        2-core CPU machine, tiny model (`bench.first_audio_delivery`, 150 requests a setting): the
        first audio's way from post to the client p50 0.77 ms without, 0.52 with 0.3 ms, 0.42 with
        0.6 ms. On the GPU host (run 15, not a pair) the time outside the engine did not shrink."""
        self.scheduler, self.entries, self.stats = scheduler, entries, stats
        self.outbox = Outbox()  # this thread's events, flushed once per iteration (outbox.py)
        self.first_audio_yield_s = first_audio_yield_s

    def flush(self) -> None:
        self.outbox.flush()

    def early(self, launched: LaunchedStep, eos_id: int | None) -> None:
        """First audio before its step ends (engine/early.py); the scheduler's AudioReady for it,
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
        pcm, s16 = launched.host_pcm(out.batch)
        n = out.num_frames * SAMPLES_PER_FRAME
        event = entry.out.audio(pcm[out.row, :n], out.first_frame + skip, out.num_frames, final=out.final,
                                first_audible_frame=skip, s16=s16[out.row, :n])
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
        if first and self.first_audio_yield_s > 0:  # a listener is waiting for this one
            self.outbox.flush()
            time.sleep(self.first_audio_yield_s)

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
