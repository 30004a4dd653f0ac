"""The phone leg's playout clock: the carrier's own acknowledgements of what the caller has heard.

    output transport ─ MarkingSerializer ─ media, mark ─▶ carrier ─▶ caller
                                         ◀─ mark (played) ─┘
    MarkPlayoutReporter (after the output): context_id, heard position ─▶ CadenceTTSService

`MarkingSerializer` wraps pipecat's serializer for the carrier. After each audio chunk it sends, it
sends a mark named by a sequence number and notes the stream position (seconds of audio written)
at that mark; when the carrier echoes a mark, the caller has heard everything up to its position.
On barge-in the wrapped serializer sends the carrier's `clear`, and the marks still pending are
forgotten: the carrier echoes them as it drops the audio, which was never heard.

It also guards the input: a message that is not JSON, not an object, names another stream, or whose
media does not decode is logged and dropped (pipecat's transport would end the call on the
exception); the call goes on. `MarkPlayoutReporter` turns the heard position into each TTS
context's `played_s`, the same report the browser's PlayoutReporter sends.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from loguru import logger
from pipecat.frames.frames import (
    AudioRawFrame,
    Frame,
    InterruptionFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.serializers.base_serializer import FrameSerializer

from agent.playout import PlayoutSink

from .carriers import Carrier

MAX_PENDING_MARKS = 1024  # a carrier that never acknowledges cannot grow this without bound


class MarkLedger:
    """Stream positions (seconds of audio written) at each mark, and the position heard so far."""

    def __init__(self):
        self.written_s = 0.0
        self.heard_s = 0.0
        self.acked = 0
        self._pending: OrderedDict[str, float] = OrderedDict()
        self._listeners: list[Callable[[float], Awaitable[None]]] = []
        self._count = 0

    def listen(self, callback: Callable[[float], Awaitable[None]]) -> None:
        self._listeners.append(callback)

    def wrote(self, seconds: float) -> str:
        """Audio of `seconds` went out; returns the name of the mark that follows it."""
        self.written_s += seconds
        self._count += 1
        name = f"c{self._count}"
        self._pending[name] = self.written_s
        while len(self._pending) > MAX_PENDING_MARKS:
            self._pending.popitem(last=False)
        return name

    def clear(self) -> None:
        """The carrier drops its unplayed audio: nothing written so far is still to be heard."""
        self._pending.clear()

    async def acked_mark(self, name: str) -> bool:
        """The carrier played up to mark `name`; False for a mark this call does not know."""
        position = self._pending.pop(name, None)
        if position is None:
            return False
        while self._pending and next(iter(self._pending.values())) <= position:
            self._pending.popitem(last=False)  # marks play in order: earlier ones are heard too
        self.acked += 1
        self.heard_s = max(self.heard_s, position)
        for callback in self._listeners:
            await callback(self.heard_s)
        return True

    @property
    def pending(self) -> int:
        return len(self._pending)


class MarkingSerializer(FrameSerializer):
    """pipecat's carrier serializer with a mark after every audio chunk, and a guarded input."""

    def __init__(self, inner: FrameSerializer, carrier: Carrier, stream_id: str,
                 send: Callable[[str], Awaitable[None]], ledger: MarkLedger | None = None):
        super().__init__()
        self._inner = inner
        self._carrier = carrier
        self._stream_id = stream_id
        self._send = send
        self.ledger = ledger or MarkLedger()
        self.rejected = 0  # input messages dropped as malformed or for another stream

    async def setup(self, setup):
        await super().setup(setup)
        await self._inner.setup(setup)

    async def serialize(self, frame: Frame) -> str | bytes | None:
        payload = await self._inner.serialize(frame)
        if isinstance(frame, InterruptionFrame):
            self.ledger.clear()
            return payload
        if not isinstance(frame, AudioRawFrame) or not payload:
            return payload
        await self._send(payload)  # the media; the transport sends the mark that follows it
        name = self.ledger.wrote(frame.num_frames / frame.sample_rate)
        return json.dumps(self._carrier.mark_message(self._stream_id, name))

    def _reject(self, why: str, data) -> None:
        self.rejected += 1
        text = data if isinstance(data, str) else repr(data)
        logger.warning(f"{self._carrier.name} stream {self._stream_id}: dropped a message ({why}): {text[:120]!r}")

    async def deserialize(self, data: str | bytes) -> Frame | None:
        try:
            message = json.loads(data)
        except (ValueError, TypeError):
            self._reject("not JSON", data)
            return None
        if not isinstance(message, dict):
            self._reject("not a JSON object", data)
            return None
        stream = message.get(self._carrier.stream_key)
        if stream is not None and stream != self._stream_id:
            self._reject(f"unknown stream id {stream!r}", data)
            return None
        if message.get("event") == self._carrier.ack_event:
            name = self._carrier.acked_name(message)
            if name is None or not await self.ledger.acked_mark(name):
                logger.debug(f"{self._carrier.name} stream {self._stream_id}: mark {name!r} is not pending")
            return None
        try:
            return await self._inner.deserialize(data)
        except Exception as e:  # bad base64, a payload of the wrong type, an unknown DTMF digit ...
            self._reject(f"{type(e).__name__}: {e}", data)
            return None


class MarkPlayoutReporter(FrameProcessor):
    """After the output transport: reports each TTS context's heard seconds to `sink` whenever the
    carrier acknowledges a mark. A context's audio starts at the stream position its
    TTSStartedFrame passes the output at (frames leave the output in order with the audio)."""

    def __init__(self, sink: PlayoutSink, ledger: MarkLedger, **kwargs):
        super().__init__(**kwargs)
        self._sink = sink
        self._ledger = ledger
        self._context_id: str | None = None
        self._start_s = 0.0
        self._end_s: float | None = None
        self.reports: list[tuple[str, float]] = []
        ledger.listen(self._heard)

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, TTSStartedFrame):
                self._context_id, self._start_s, self._end_s = frame.context_id, self._ledger.written_s, None
            elif isinstance(frame, TTSStoppedFrame) and frame.context_id in (None, self._context_id):
                self._end_s = self._ledger.written_s  # its audio may still be playing: keep listening
            elif isinstance(frame, InterruptionFrame):
                self._context_id = None  # the TTS service cancels the context itself
        await self.push_frame(frame, direction)

    async def _heard(self, heard_s: float) -> None:
        if self._context_id is None:
            return
        end = self._ledger.written_s if self._end_s is None else self._end_s
        played_s = min(max(0.0, heard_s - self._start_s), end - self._start_s)
        self.reports.append((self._context_id, played_s))
        del self.reports[:-256]
        await self._sink.report_playout(self._context_id, played_s)
