"""The benchmark's aiortc client: what the agent's page does, in Python, for machines with no
browser (the GPU machine). It sends the questions as a real-time 48 kHz microphone track over
SmallWebRTC (Opus, as a browser sends), opens the same "events" data channel, and measures each
turn as the page does: from the last loud 10 ms of the question it sent to the first received bot
audio above BOT_RMS. It has no jitter buffer or audio output, so "heard" is when a frame arrives,
a little earlier than a browser would play it."""

from __future__ import annotations

import asyncio
import fractions
import json
import time

import numpy as np

from .browser import records_from
from .turns import speak, speech_end_s

RATE = 48000
FRAME = RATE // 50  # 20 ms, as browsers send
BOT_RMS = 0.003  # -50 dBFS: the page's threshold for "bot audio heard"
QUIET_S = 1.5  # the next question waits for this much bot silence
TURN_TIMEOUT_S = 60.0


def _now_ms() -> float:
    return time.monotonic() * 1e3


def _mic_track():
    from aiortc import MediaStreamTrack
    from av import AudioFrame

    class Microphone(MediaStreamTrack):
        """Silence, or the clip being said, paced in real time; notes when a clip's speech ends."""

        kind = "audio"

        def __init__(self):
            super().__init__()
            self._start: float | None = None
            self._pts = 0
            self._clip = np.zeros(0, dtype=np.int16)
            self._pos = 0
            self._end_sample = 0
            self.speech_end_at: float | None = None

        def say(self, clip: np.ndarray) -> None:
            self._clip, self._pos = clip, 0
            self._end_sample = int(speech_end_s(clip, RATE) * RATE)
            self.speech_end_at = None

        async def recv(self):
            if self._start is None:
                self._start = time.monotonic()
            else:
                self._pts += FRAME
                await asyncio.sleep(max(0.0, self._start + self._pts / RATE - time.monotonic()))
            chunk = np.zeros(FRAME, dtype=np.int16)
            if self._pos < len(self._clip):
                part = self._clip[self._pos:self._pos + FRAME]
                chunk[:len(part)] = part
                if self._pos < self._end_sample <= self._pos + FRAME:
                    self.speech_end_at = _now_ms()
                self._pos += FRAME
            frame = AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = RATE, self._pts, fractions.Fraction(1, RATE)
            return frame

    return Microphone()


async def _post_offer(url: str, sdp: str) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.post(
            url.rstrip("/") + "/api/offer", json={"sdp": sdp, "type": "offer"}) as r:
        if r.status != 200:
            raise RuntimeError(f"signalling failed: {r.status} {await r.text()}")
        return await r.json()


def peer_connection():
    """The page's peer connection (host candidates only), whose audio receiver hands each packet to the
    listener as soon as the next one shows it complete (agent/webrtc_audio.py): a one-packet (20 ms)
    jitter buffer, as a browser's adaptive one holds on a clean link, not aiortc's four (80 ms)."""
    from aiortc import RTCConfiguration, RTCPeerConnection

    from agent.webrtc_audio import one_packet_audio_receivers

    one_packet_audio_receivers()
    return RTCPeerConnection(RTCConfiguration(iceServers=[]))


async def negotiate(pc, url: str, listen, listeners: list[asyncio.Task]) -> None:
    """Connect `pc` to the agent at `url` as its page does (an SDP offer POSTed to /api/offer, its answer
    applied); each audio track the agent sends is read by `listen(track)` in a task added to `listeners`
    (the caller cancels them)."""
    from aiortc import RTCSessionDescription

    @pc.on("track")
    def _track(track):
        if track.kind == "audio":
            listeners.append(asyncio.ensure_future(listen(track)))

    await pc.setLocalDescription(await pc.createOffer())  # aiortc gathers its candidates here
    answer = await _post_offer(url, pc.localDescription.sdp)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type=answer["type"]))


async def _until(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def _session(url: str, texts: list[str]) -> tuple[list[dict], list[dict], dict]:
    clips = [speak(t, RATE) for t in texts]
    pc = peer_connection()
    mic = _mic_track()
    pc.addTrack(mic)
    events: list[dict] = []
    turns: list[dict] = []
    state = {"pending": None, "last_bot": 0.0, "ready_at": None, "timed_out": False}
    channel = pc.createDataChannel("events")

    @channel.on("message")
    def _event(message):
        try:
            event = json.loads(message)
        except ValueError:
            return
        event["at"] = _now_ms()
        events.append(event)
        if event["type"] == "config":
            state["ready_at"] = event["at"]
        elif event["type"] == "user_stopped" and mic.speech_end_at is not None:
            state["pending"] = {"speech_end_at": mic.speech_end_at, "turn_end_at": event["at"]}

    async def listen(track):
        while True:
            frame = await track.recv()
            samples = frame.to_ndarray().astype(np.float32) / 32768
            level = float(np.sqrt(np.mean(samples * samples)))
            if level > BOT_RMS:
                now = _now_ms()
                state["last_bot"] = now
                if state["pending"] is not None:
                    turns.append({**state["pending"], "heard_at": now})
                    state["pending"] = None

    listeners: list[asyncio.Task] = []
    try:
        await negotiate(pc, url, listen, listeners)
        if not await _until(lambda: state["ready_at"] is not None, 60):
            raise RuntimeError("the agent's pipeline did not start (no config event in 60 s)")
        await asyncio.sleep(1.0)
        for i, clip in enumerate(clips):
            mic.say(clip)
            heard = await _until(lambda i=i: len(turns) > i, TURN_TIMEOUT_S)
            quiet = heard and await _until(lambda: _now_ms() - state["last_bot"] > QUIET_S * 1e3, TURN_TIMEOUT_S)
            if not quiet:
                state["timed_out"] = True
                break
    finally:
        for task in listeners:
            task.cancel()
        await pc.close()
    return turns, events, {"timed_out": state["timed_out"]}


def run_aiortc(url: str, texts: list[str]) -> tuple[list[dict], dict]:
    """The turns through the aiortc client against the agent at `url`: (records, extra facts)."""
    turns, events, extra = asyncio.run(_session(url, texts))
    return records_from(texts, turns, events), extra
