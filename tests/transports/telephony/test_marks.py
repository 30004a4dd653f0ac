"""The mark clock on pipecat's real serializers, frame by frame (no socket): after each audio
chunk a mark (Plivo: a checkpoint) in the carrier's own shape; the carrier's acknowledgement moves
the heard position to that mark; `clear` forgets the marks still pending; the reporter turns the
heard position into each TTS context's played seconds."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from pipecat.frames.frames import InterruptionFrame, OutputAudioRawFrame, TTSStartedFrame, TTSStoppedFrame
from pipecat.processors.frame_processor import FrameDirection

from transports.telephony.carriers import CARRIER, make_serializer
from transports.telephony.marks import MarkingSerializer, MarkPlayoutReporter

CHUNK = OutputAudioRawFrame(audio=bytes(640), sample_rate=8000, num_channels=1)  # 40 ms
CALLS = {"twilio": {"stream_id": "MZ1", "call_id": "CA1"},
         "telnyx": {"stream_id": "st-1", "call_id": "v3:1", "outbound_encoding": "PCMU"},
         "plivo": {"stream_id": "pl-1", "call_id": "c-1"}}
ACK = {"twilio": lambda sid, n: {"event": "mark", "streamSid": sid, "mark": {"name": n}},
       "telnyx": lambda sid, n: {"event": "mark", "stream_id": sid, "mark": {"name": n}},
       "plivo": lambda sid, n: {"event": "playedStream", "streamId": sid, "name": n}}
CLEAR = {"twilio": "clear", "telnyx": "clear", "plivo": "clearAudio"}


class Sink:
    def __init__(self):
        self.reports: list[tuple[str, float]] = []

    async def report_playout(self, context_id: str, played_s: float) -> None:
        self.reports.append((context_id, played_s))


async def _scenario(carrier: str):
    sent: list[dict] = []

    async def send(text: str) -> None:
        sent.append(json.loads(text))

    call = CALLS[carrier]
    serializer = MarkingSerializer(make_serializer(carrier, call), CARRIER[carrier], call["stream_id"], send)
    await serializer.setup(_setup())
    sink = Sink()
    reporter = MarkPlayoutReporter(sink, serializer.ledger)
    reporter.push_frame = _swallow
    await reporter.process_frame(TTSStartedFrame(context_id="ctx-1"), FrameDirection.DOWNSTREAM)
    marks = []
    for _ in range(5):
        marks.append(json.loads(await serializer.serialize(CHUNK)))
    await reporter.process_frame(TTSStoppedFrame(context_id="ctx-1"), FrameDirection.DOWNSTREAM)
    name = (lambda m: m["name"]) if carrier == "plivo" else (lambda m: m["mark"]["name"])
    assert await serializer.deserialize(json.dumps(ACK[carrier](call["stream_id"], name(marks[2])))) is None
    heard_after_third = serializer.ledger.heard_s
    clear = json.loads(await serializer.serialize(InterruptionFrame()))
    late = await serializer.deserialize(json.dumps(ACK[carrier](call["stream_id"], name(marks[4]))))
    return sent, marks, heard_after_third, serializer.ledger.heard_s, clear, late, sink.reports


def _setup():
    from unittest.mock import MagicMock

    setup = MagicMock()
    setup.audio_in_sample_rate = 16000
    setup.audio_out_sample_rate = 8000
    return setup


async def _swallow(*_args, **_kwargs):
    return None


@pytest.mark.parametrize("carrier", ["twilio", "telnyx", "plivo"])
def test_each_chunk_is_followed_by_a_mark_and_its_ack_moves_the_heard_position(carrier):
    sent, marks, heard_3, heard_end, clear, late, reports = asyncio.run(_scenario(carrier))
    media_event = "playAudio" if carrier == "plivo" else "media"
    assert [m["event"] for m in sent] == [media_event] * 5
    assert all(base64.b64decode(m["media"]["payload"]) for m in sent)  # 8 kHz G.711: 320 bytes a chunk
    assert len(base64.b64decode(sent[0]["media"]["payload"])) == 320
    assert [m["event"] for m in marks] == ["checkpoint" if carrier == "plivo" else "mark"] * 5
    assert heard_3 == pytest.approx(0.12)  # three 40 ms chunks
    assert clear["event"] == CLEAR[carrier]
    assert late is None and heard_end == pytest.approx(0.12)  # a mark echoed after clear was never heard
    assert reports == [("ctx-1", pytest.approx(0.12))]
