"""The carrier's side of a media stream: a stand-in for Twilio's, Telnyx's, Plivo's and Exotel's networks
(which a test cannot reach), speaking their exact media stream messages over a real WebSocket.

Like the carrier it sends the caller's audio as 20 ms mu-law `media` messages without a break
(silence between utterances), plays the bot's audio (`media`; Plivo: `playAudio`) in real time,
echoes each `mark` once the audio sent before it has played (Plivo: answers a `checkpoint` with
`playedStream`), and on `clear` drops the audio not yet played and echoes the marks still pending
(Twilio's documented behaviour; Plivo answers `clearAudio` with `clearedAudio`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from dataclasses import dataclass, field

from pipecat.audio.resamplers.soxr_stream_resampler import SOXRStreamAudioResampler
from pipecat.audio.utils import pcm_to_ulaw, ulaw_to_pcm

from .helpers import CHUNK_S, LINE_RATE

CHUNK_BYTES = int(CHUNK_S * LINE_RATE) * 2  # 16-bit PCM


def twilio_messages(stream_id: str) -> dict:
    call = {"accountSid": "AC" + "0" * 32, "callSid": "CA" + stream_id[2:]}
    return {
        "connected": {"event": "connected", "protocol": "Call", "version": "1.0.0"},
        "start": {"event": "start", "sequenceNumber": "1", "streamSid": stream_id,
                  "start": {**call, "streamSid": stream_id, "tracks": ["inbound"], "customParameters": {},
                            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}},
        "media": lambda seq, chunk, ms, payload: {
            "event": "media", "sequenceNumber": str(seq), "streamSid": stream_id,
            "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(ms), "payload": payload}},
        "mark": lambda seq, name: {"event": "mark", "sequenceNumber": str(seq), "streamSid": stream_id,
                                   "mark": {"name": name}},
        "stop": lambda seq: {"event": "stop", "sequenceNumber": str(seq), "streamSid": stream_id, "stop": call},
    }


def telnyx_messages(stream_id: str) -> dict:
    call = {"user_id": "3e6f995f-85f7-4705-9741-53b116d28237", "call_control_id": "v3:" + stream_id,
            "call_session_id": "sess-" + stream_id}
    return {
        "connected": {"event": "connected", "version": "1.0.0"},
        "start": {"event": "start", "sequence_number": "1", "stream_id": stream_id,
                  "start": {**call, "client_state": "", "from": "+15550100001", "to": "+15550100002",
                            "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1}}},
        "media": lambda seq, chunk, ms, payload: {
            "event": "media", "sequence_number": str(seq), "stream_id": stream_id,
            "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(ms), "payload": payload}},
        "mark": lambda seq, name: {"event": "mark", "sequence_number": str(seq), "stream_id": stream_id,
                                   "mark": {"name": name}},
        "stop": lambda seq: {"event": "stop", "sequence_number": str(seq), "stream_id": stream_id, "stop": call},
    }


def plivo_messages(stream_id: str) -> dict:
    """Plivo sends no `connected`; its stream opens with `start` and closes with the socket."""
    return {
        "start": {"event": "start", "sequenceNumber": 0, "extra_headers": "{}",
                  "start": {"callId": "c4a7e4a2-1b2d-4a9e-8f7e-" + stream_id[-12:], "streamId": stream_id,
                            "accountId": "MAXXXXXXXXXXXXXXXXXX", "tracks": ["inbound"],
                            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}}},
        "media": lambda seq, chunk, ms, payload: {
            "event": "media", "sequenceNumber": seq, "streamId": stream_id, "extra_headers": "{}",
            "media": {"track": "inbound", "timestamp": str(ms), "chunk": chunk, "payload": payload}},
        "mark": lambda seq, name: {"event": "playedStream", "sequenceNumber": seq, "streamId": stream_id,
                                   "name": name},
        "cleared": lambda seq: {"event": "clearedAudio", "sequenceNumber": seq, "streamId": stream_id},
    }


def exotel_messages(stream_id: str) -> dict:
    """Exotel's Voicebot stream: Twilio's events in snake_case; the audio is 16-bit PCM, not mu-law."""
    call = {"call_sid": "b3a9c1d2e4f5a6b7c8d9e0f1a2b3c4d5", "account_sid": "cadence1"}
    return {
        "connected": {"event": "connected"},
        "start": {"event": "start", "sequence_number": 1, "stream_sid": stream_id,
                  "start": {**call, "stream_sid": stream_id, "from": "09999999999", "to": "08888888888",
                            "custom_parameters": {},
                            "media_format": {"encoding": "base64", "sample_rate": "8000", "bit_rate": "128kbps"}}},
        "media": lambda seq, chunk, ms, payload: {
            "event": "media", "sequence_number": seq, "stream_sid": stream_id,
            "media": {"chunk": chunk, "timestamp": str(ms), "payload": payload}},
        "mark": lambda seq, name: {"event": "mark", "sequence_number": seq, "stream_sid": stream_id,
                                   "mark": {"name": name}},
        "stop": lambda seq: {"event": "stop", "sequence_number": seq, "stream_sid": stream_id,
                             "stop": {**call, "reason": "callended"}},
    }


MESSAGES = {"twilio": twilio_messages, "telnyx": telnyx_messages, "plivo": plivo_messages, "exotel": exotel_messages}
LINEAR = {"exotel"}  # carriers whose media payload is 16-bit PCM rather than mu-law
STREAM_IDS = {"twilio": "MZ18ad3ab5a668481ce02b83e7395059f0", "telnyx": "32de0dea-53cb-4b21-89a4-9e5a6a1eb3f1",
              "plivo": "b6f2e3d4-5c6a-4b7c-9d8e-0f1a2b3c4d5e", "exotel": "a1b2c3d4e5f60718293a4b5c6d7e8f90"}
# The bot's messages, per carrier: audio to play, a playout mark, and "drop what is not played"
BOT_EVENTS = {"twilio": ("media", "mark", "clear"), "telnyx": ("media", "mark", "clear"),
              "plivo": ("playAudio", "checkpoint", "clearAudio"), "exotel": ("media", "mark", "clear")}


@dataclass
class Heard:
    """The bot's audio as the caller hears it: (play start time, PCM) per media message."""

    chunks: list[tuple[float, float, bytes]] = field(default_factory=list)  # (arrived, plays at, pcm)

    def pcm(self, since: float = 0.0, until: float = float("inf")) -> bytes:
        return b"".join(p for arrived, _, p in self.chunks if since <= arrived < until)


class CarrierLeg:
    def __init__(self, carrier: str, ws, *, ack_marks: bool = True):
        self.carrier = carrier
        self.stream_id = STREAM_IDS[carrier]
        self.msg = MESSAGES[carrier](self.stream_id)
        self.ws = ws
        self.ack_marks = ack_marks
        self.heard = Heard()
        self.play_end = 0.0  # when the audio received so far will have played
        self.pending_marks: list[tuple[float, str]] = []  # (plays out at, name)
        self.acked: list[tuple[float, str]] = []
        self.clears: list[float] = []
        self.other: list[dict] = []  # any other message from the bot
        self._seq = 1
        self._say: asyncio.Queue[tuple[bytes, asyncio.Future]] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._in_res = SOXRStreamAudioResampler()
        self._out_res = SOXRStreamAudioResampler()

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    async def send(self, message: dict) -> None:
        await self.ws.send(json.dumps(message))

    async def start(self) -> None:
        if "connected" in self.msg:
            await self.send(self.msg["connected"])
        await self.send(self.msg["start"])
        self._tasks = [asyncio.create_task(self._send_audio()), asyncio.create_task(self._receive()),
                       asyncio.create_task(self._play())]

    async def say(self, pcm: bytes) -> float:
        """Send `pcm` (8 kHz 16-bit) in real time; returns the time its last chunk went out."""
        done = asyncio.get_running_loop().create_future()
        await self._say.put((pcm, done))
        return await done

    async def _send_audio(self) -> None:
        """20 ms a message, paced by the clock; silence when the caller says nothing."""
        chunk_no, start = 0, time.monotonic()
        current, done = b"", None
        while True:
            if not current and done is None and not self._say.empty():
                current, done = self._say.get_nowait()
            piece, current = (current[:CHUNK_BYTES], current[CHUNK_BYTES:]) if current else (bytes(CHUNK_BYTES), b"")
            piece = piece.ljust(CHUNK_BYTES, b"\0")
            if self.carrier not in LINEAR:
                piece = await pcm_to_ulaw(piece, LINE_RATE, LINE_RATE, self._out_res)
            payload = base64.b64encode(piece).decode()
            chunk_no += 1
            await self.send(self.msg["media"](self._next(), chunk_no, int(chunk_no * CHUNK_S * 1000), payload))
            if done is not None and not current:
                done.set_result(time.monotonic())
                done = None
            await asyncio.sleep(max(0.0, start + chunk_no * CHUNK_S - time.monotonic()))

    async def _receive(self) -> None:
        audio, mark, clear = BOT_EVENTS[self.carrier]
        async for raw in self.ws:
            now = time.monotonic()
            message = json.loads(raw)
            event = message.get("event")
            if event == audio:
                pcm = base64.b64decode(message["media"]["payload"])
                if self.carrier not in LINEAR:
                    pcm = await ulaw_to_pcm(pcm, LINE_RATE, LINE_RATE, self._in_res)
                plays_at = max(now, self.play_end)
                self.play_end = plays_at + len(pcm) / 2 / LINE_RATE
                self.heard.chunks.append((now, plays_at, pcm))
            elif event == mark:
                name = message["name"] if self.carrier == "plivo" else message["mark"]["name"]
                self.pending_marks.append((max(now, self.play_end), name))
            elif event == clear:
                self.clears.append(now)
                self.play_end = now  # the unplayed audio is dropped ...
                self.heard.chunks = [c for c in self.heard.chunks if c[1] < now]
                if "cleared" in self.msg:
                    await self.send(self.msg["cleared"](self._next()))
                else:
                    for _, name in self.pending_marks:  # ... and its marks come back at once
                        await self._ack(name)
                self.pending_marks.clear()
            else:
                self.other.append(message)

    async def _ack(self, name: str) -> None:
        self.acked.append((time.monotonic(), name))
        await self.send(self.msg["mark"](self._next(), name))

    async def _play(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            if not self.ack_marks:
                continue
            now = time.monotonic()
            while self.pending_marks and self.pending_marks[0][0] <= now:
                await self._ack(self.pending_marks.pop(0)[1])

    def first_audio_after(self, t: float) -> float | None:
        return next((arrived for arrived, _, _ in self.heard.chunks if arrived >= t), None)

    async def wait_for(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:g} s")
            for task in self._tasks:
                if task.done():
                    task.result()  # a failed task's error, or the end of the stream
                    raise AssertionError(f"the media stream ended while waiting for {what}")
            await asyncio.sleep(0.02)
        return value

    async def hang_up(self) -> None:
        """The carrier's `stop` (Plivo sends none), then the socket closes."""
        with contextlib.suppress(Exception):
            if "stop" in self.msg:
                await self.send(self.msg["stop"](self._next()))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()
