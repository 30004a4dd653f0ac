"""The simulated callers: each a real transport client that speaks its questions (espeak-ng, paced
in real time), listens, and notes what it heard (`timeline.Heard`) and the agent's stamps.

- webrtc: the aiortc client of bench/voice (its microphone track and signalling), on SmallWebRTC;
  the agent's stamps arrive as app messages on the "events" data channel.
- twilio: Twilio's Media Streams messages over a real WebSocket (`connected`, `start`, 20 ms mu-law
  `media`, `mark` echoes once the audio before a mark has played, `stop`); a stand-in for the
  carrier's network, which no benchmark can reach. Its jitter buffer plays each chunk after the
  previous one and drops the unplayed rest on `clear`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from bench.voice.client import RATE as WEBRTC_RATE
from bench.voice.client import _mic_track, _until, negotiate, peer_connection
from bench.voice.turns import speak, speech_end_s

from .timeline import AUDIBLE_RMS, Heard, Turn

LINE_RATE = 8000
LINE_CHUNK = LINE_RATE // 50  # 20 ms
QUIET_S = 1.0  # a reply is over after this much silence
INTERRUPTION = "Wait, stop, I have a different question for you."


@dataclass
class Script:
    questions: list[str]
    barge_in: bool = False  # the last turn is interrupted `barge_after_s` into its audio
    barge_after_s: float = 1.0
    turn_timeout_s: float = 60.0


@dataclass
class CallLog:
    heard: Heard = field(default_factory=Heard)
    turns: list[Turn] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    error: str | None = None
    ended_ms: float = 0.0


def now_ms() -> float:
    return time.monotonic() * 1e3


def _rms(pcm: np.ndarray) -> float:
    x = pcm.astype(np.float32) / 32768
    return float(np.sqrt(np.mean(x * x))) if x.size else 0.0


async def converse(log: CallLog, script: Script, say, speech_end) -> None:
    """The caller's side of the conversation, whatever the transport: `say(i)` starts clip i
    (the questions, then the interruption), `speech_end()` is when the last clip's speech ended."""
    def first_token_since(t):
        return any(e["type"] == "llm_first_token" and e["t_ms"] >= t for e in log.events)

    def heard_since(t):
        return any(s >= t and r > AUDIBLE_RMS for s, _e, r in log.heard.pieces[-200:])

    def quiet():
        loud = [e for _s, e, r in log.heard.pieces[-200:] if r > AUDIBLE_RMS]
        return not loud or now_ms() - max(loud) > QUIET_S * 1e3

    for i in range(len(script.questions)):
        turn = Turn(started_ms=now_ms())
        log.turns.append(turn)
        say(i)
        began = turn.started_ms
        if not await _until(lambda t=began: first_token_since(t), script.turn_timeout_s):
            raise TimeoutError(f"turn {i + 1}: no reply within {script.turn_timeout_s:g} s")
        turn.speech_end_ms = speech_end()
        replied = next(e["t_ms"] for e in log.events if e["type"] == "llm_first_token" and e["t_ms"] >= began)
        if not await _until(lambda t=replied: heard_since(t), script.turn_timeout_s):
            raise TimeoutError(f"turn {i + 1}: the reply was never audible")
        if script.barge_in and i == len(script.questions) - 1:
            await asyncio.sleep(script.barge_after_s)
            turn.barge_at_ms = barged = now_ms()
            say(len(script.questions))
            await _until(lambda t=barged: any(e["type"] == "interruption" and e["t_ms"] >= t
                                     for e in log.events), script.turn_timeout_s)
            await _until(lambda t=barged: first_token_since(t), script.turn_timeout_s)
        await asyncio.sleep(QUIET_S)
        if not await _until(quiet, script.turn_timeout_s):
            raise TimeoutError(f"turn {i + 1}: the reply did not end within {script.turn_timeout_s:g} s")


async def webrtc_call(url: str, script: Script, clips: list[np.ndarray]) -> CallLog:
    log = CallLog()
    pc = peer_connection()
    mic = _mic_track()
    pc.addTrack(mic)
    channel = pc.createDataChannel("events")
    ready = asyncio.Event()

    @channel.on("message")
    def _event(message):
        try:
            event = json.loads(message)
        except ValueError:
            return
        if event.get("type") == "config":
            ready.set()
        elif isinstance(event.get("t_ms"), (int, float)):
            log.events.append(event)

    async def listen(track):
        while True:
            frame = await track.recv()
            pcm = frame.to_ndarray()
            arrived = now_ms()
            log.heard.play(arrived, 1e3 * frame.samples / frame.sample_rate, _rms(pcm), buffered=False)

    listeners: list[asyncio.Task] = []
    try:
        await negotiate(pc, url, listen, listeners)
        await asyncio.wait_for(ready.wait(), 60)
        await asyncio.sleep(1.0)
        await converse(log, script, lambda i: mic.say(clips[i]), lambda: mic.speech_end_at)
    except Exception as e:  # one caller's failure is a result of the run, not its end
        log.error = f"{type(e).__name__}: {e}"
    finally:
        log.ended_ms = now_ms()
        for task in listeners:
            task.cancel()
        await pc.close()
    return log


async def twilio_stream_url(base: str, call: dict[str, str]) -> str:
    """What Twilio does first: POST the call webhook; the stream URL its TwiML answer names (with the one-time
    token the endpoint requires of a media stream)."""
    from xml.etree import ElementTree

    import httpx

    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(f"{base}/twilio", data={"CallSid": call["callSid"], "AccountSid": call["accountSid"]})
    answer.raise_for_status()
    stream = ElementTree.fromstring(answer.text).find(".//Stream")
    if stream is None or not stream.get("url"):
        raise RuntimeError(f"the call webhook named no stream: {answer.text[:200]!r}")
    return stream.get("url")


async def twilio_call(base: str, script: Script, clips: list[tuple[bytes, int]]) -> CallLog:
    """A call to the carrier endpoint at `base` (http://host:port): its webhook, then its media stream.
    `clips` (`line_clips`): the questions then the interruption."""
    import websockets
    from pipecat.audio.utils import create_stream_resampler, ulaw_to_pcm

    same_rate = create_stream_resampler()  # the line's 8 kHz in and out: decoding only

    log = CallLog()
    sid = "MZ" + uuid.uuid4().hex
    call = {"accountSid": "AC" + "0" * 32, "callSid": "CA" + uuid.uuid4().hex}
    state = {"clip": b"", "pos": 0, "end": 0, "speech_end": None, "seq": 0}
    pending: list[tuple[float, str]] = []  # marks to echo: (plays out at, name)

    def seq() -> str:
        state["seq"] += 1
        return str(state["seq"])

    def say(i: int) -> None:
        state["clip"], state["end"] = clips[i]
        state["pos"], state["speech_end"] = 0, None

    try:
        ws_url = await twilio_stream_url(base, call)
    except Exception as e:  # one caller's failure is a result of the run, not its end
        log.error = f"{type(e).__name__}: {e}"
        log.ended_ms = now_ms()
        return log
    async with websockets.connect(ws_url, max_size=2**22) as ws:
        async def send(message: dict) -> None:
            await ws.send(json.dumps(message))

        async def microphone():
            start, n = time.monotonic(), 0
            while True:
                clip, pos = state["clip"], state["pos"]
                chunk = clip[pos:pos + LINE_CHUNK].ljust(LINE_CHUNK, b"\xff")  # 0xff: mu-law silence
                if pos < state["end"] <= pos + LINE_CHUNK:
                    state["speech_end"] = now_ms()
                state["pos"] = pos + LINE_CHUNK if pos < len(clip) else pos
                await send({"event": "media", "sequenceNumber": seq(), "streamSid": sid,
                            "media": {"track": "inbound", "chunk": str(n), "timestamp": str(n * 20),
                                      "payload": base64.b64encode(chunk).decode()}})
                n += 1
                await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))

        async def echo_marks():
            while True:
                while pending and pending[0][0] <= now_ms():
                    _, name = pending.pop(0)
                    await send({"event": "mark", "sequenceNumber": seq(), "streamSid": sid, "mark": {"name": name}})
                await asyncio.sleep(0.005)

        async def receive():
            async for raw in ws:
                message = json.loads(raw)
                kind = message.get("event")
                if kind == "media":
                    ulaw = base64.b64decode(message["media"]["payload"])
                    pcm = np.frombuffer(await ulaw_to_pcm(ulaw, LINE_RATE, LINE_RATE, same_rate), dtype=np.int16)
                    log.heard.play(now_ms(), 1e3 * len(pcm) / LINE_RATE, _rms(pcm), buffered=True)
                elif kind == "mark":
                    played_at = log.heard.pieces[-1][1] if log.heard.pieces else now_ms()
                    pending.append((played_at, message["mark"]["name"]))
                elif kind == "clear":
                    log.heard.clear(now_ms())
                    for i in range(len(pending)):
                        pending[i] = (0.0, pending[i][1])
                elif isinstance(message.get("t_ms"), (int, float)):
                    log.events.append(message)

        await send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await send({"event": "start", "sequenceNumber": seq(), "streamSid": sid,
                    "start": {**call, "streamSid": sid, "tracks": ["inbound"], "customParameters": {},
                              "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
        tasks = [asyncio.create_task(c()) for c in (microphone, echo_marks, receive)]
        try:
            await asyncio.sleep(1.0)
            await converse(log, script, say, lambda: state["speech_end"])
            await send({"event": "stop", "sequenceNumber": seq(), "streamSid": sid, "stop": call})
        except Exception as e:
            log.error = f"{type(e).__name__}: {e}"
        finally:
            log.ended_ms = now_ms()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return log


async def line_clips(texts: list[str]) -> list[tuple[bytes, int]]:
    """The clips as the phone line carries them: (8 kHz mu-law, the sample where speech ends)."""
    from pipecat.audio.utils import create_stream_resampler, pcm_to_ulaw

    same_rate = create_stream_resampler()
    clips = []
    for text in texts:
        pcm = speak(text, LINE_RATE)
        ulaw = await pcm_to_ulaw(pcm.tobytes(), LINE_RATE, LINE_RATE, same_rate)
        clips.append((ulaw, int(speech_end_s(pcm, LINE_RATE) * LINE_RATE)))
    return clips


def webrtc_clips(texts: list[str]) -> list[np.ndarray]:
    return [speak(t, WEBRTC_RATE) for t in texts]
