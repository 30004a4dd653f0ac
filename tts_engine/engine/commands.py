"""The engine thread's side of the command queue: a stream's open, its text (appended, flushed,
ended), cancel and playout reports, acted on between steps. Text is tokenised incrementally (stable
BPE tokens only); once a stream's prompt is known it queues for a slot."""

from __future__ import annotations

import queue
import time

from ..prompt import Layout
from ..scheduler.request import Phase
from ..scheduler.scheduler import Scheduler
from ..text_stream import StreamingTokenizer
from .api import StreamOptions
from .delivery import Delivery
from .entry import FirstAudioTrace, StreamEntry
from .intake import TextIntake
from .stream import Stream
from .streamout import StreamOutput


class Commands:
    def __init__(self, commands: queue.SimpleQueue, intake: TextIntake, tokenizer, scheduler: Scheduler,
                 delivery: Delivery, entries: dict[str, StreamEntry]):
        self.queue, self.intake, self.tokenizer = commands, intake, tokenizer
        self.scheduler, self.delivery, self.entries = scheduler, delivery, entries

    def drain(self) -> bool:
        """Act on every queued command; False if there was none."""
        did = False
        while True:
            try:
                kind, sid, payload = self.queue.get_nowait()
            except queue.Empty:
                return did
            did = True
            if kind == "open":
                self._open(*payload)
                continue
            entry = self.entries.get(sid)
            if entry is None:
                continue
            if kind == "append":
                if entry.tokenizer is not None and not entry.state.content_ids and not entry.tokenizer.pending_text:
                    payload = payload.lstrip()  # as at open: leading whitespace is not text to speak
                self._add_text(entry, entry.tokenizer.push(payload) if entry.tokenizer else [])
            elif kind == "flush":
                if entry.tokenizer is not None:
                    self._add_text(entry, entry.tokenizer.finish())
                    entry.tokenizer = StreamingTokenizer(self.tokenizer)
                if sid in self.entries:
                    self.scheduler.flush(sid)
            elif kind == "end":
                entry.state.input_ended = True
                self._add_text(entry, entry.tokenizer.finish() if entry.tokenizer is not None else [])
                if sid in self.entries and not entry.state.content_ids:
                    self.delivery.finish(entry, error="text is empty")
            elif kind == "cancel":
                self.delivery.finish(entry, cancelled=True)
            elif kind == "playout":
                self.scheduler.playout(sid, *payload)

    def _open(self, handle: Stream, options: StreamOptions, text: str, end_input: bool) -> None:
        state = self.intake.new_state(handle.id, options, text, end_input)
        entry = StreamEntry(state, handle, options, None, StreamOutput(handle.id, options.silence_threshold_dbfs),
                            trace=FirstAudioTrace(handle.opened_at, drained=time.monotonic()))
        # Token-to-frame timing exists only in the streaming layout.
        entry.out.timings_enabled = state.layout is Layout.STREAMING
        self.scheduler.add(state)
        self.entries[handle.id] = entry
        if state.layout is Layout.NON_STREAMING:
            if not end_input:
                self.delivery.finish(entry, error="the non-streaming layout needs the whole text at open")
                return
            state.input_ended = True
            self._add_text(entry, self.intake.content_ids(text))
        else:
            entry.tokenizer = StreamingTokenizer(self.tokenizer)
            self._add_text(entry, entry.tokenizer.push(text.lstrip()))
            if end_input:
                state.input_ended = True
                self._add_text(entry, entry.tokenizer.finish())
        if handle.id in self.entries and state.input_ended and not state.content_ids:
            self.delivery.finish(entry, error="text is empty")

    def _add_text(self, entry: StreamEntry, ids: list[int]) -> None:
        state = entry.state
        state.content_ids.extend(ids)
        entry.out.add_tokens(ids, self.tokenizer)
        if state.forced_frames is None and state.input_ended:
            state.forced_frames = self.intake.forced_frames(state.content_ids)
        if state.phase is Phase.WAITING_TEXT and state.ready_for_prefill():
            try:
                entry.prompt = self.intake.prompt(state, entry.options)
            except ValueError as exc:  # this stream's input cannot run (e.g. longer than the context)
                self.delivery.finish(entry, error=str(exc))
                return
            self.scheduler.enqueue(state.id, len(entry.prompt))
            if entry.trace is not None:
                entry.trace.queued = time.monotonic()
