"""An interruption silences the bot's WebRTC audio at once (agent/webrtc_audio.py): the real pipecat
SmallWebRTC output, with the patched class, writes into pipecat's real output track, which a task
reads as aiortc's sender would (in real time, 10 ms a frame). Only the WebRTC connection is a stand-in:
the client that owns the track and reports itself connected.

Each check runs in a fresh interpreter: the replacement is per process."""

from __future__ import annotations

from .helpers import AGENT_SERVER, fresh_interpreter

PROBE = """
import asyncio, json, time
import numpy as np
from pipecat.frames.frames import InterruptionFrame, TTSAudioRawFrame
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.transports.base_transport import TransportParams
import pipecat.transports.smallwebrtc.transport as webrtc

%s

RATE = 24000

class Client:  # stands in for SmallWebRTCClient: a connected peer whose track pipecat writes to
    def __init__(self):
        self._audio_output_track = webrtc.RawAudioTrack(RATE)
    async def setup(self, params, setup): pass
    async def connect(self): pass
    async def disconnect(self): pass
    async def write_audio_frame(self, frame):  # what SmallWebRTCClient.write_audio_frame does
        await self._audio_output_track.add_audio_bytes(frame.audio)
        return True

async def main():
    client = Client()
    # writes of 200 ms (pipecat's default is 40): the interruption at 300 ms comes ~100 ms into the second
    output = webrtc.SmallWebRTCOutputTransport(client, TransportParams(
        audio_out_enabled=True, audio_out_sample_rate=RATE, audio_out_end_silence_secs=0, audio_out_10ms_chunks=20))
    heard = []  # (time, loud) of each 10 ms frame the track sends

    async def sender():
        while True:
            frame = await client._audio_output_track.recv()
            heard.append((time.monotonic(), bool(np.abs(frame.to_ndarray()).max() > 0)))

    reader = asyncio.create_task(sender())
    tone = (np.sin(np.arange(RATE) * 0.05) * 8000).astype(np.int16).tobytes()  # 1 s of bot speech
    marks = {}

    speech = TTSAudioRawFrame(audio=tone, sample_rate=RATE, num_channels=1, context_id="c")
    speech.interruptible = INTERRUPTIBLE
    frames = [speech, SleepFrame(sleep=0.3), InterruptionFrame(), SleepFrame(sleep=0.3)]
    original = output.process_frame
    async def stamped(frame, direction):
        if isinstance(frame, InterruptionFrame):
            marks["interrupted"] = time.monotonic()
        await original(frame, direction)
    output.process_frame = stamped
    await run_test(output, frames_to_send=frames)
    reader.cancel()
    loud_after = [t for t, loud in heard if loud and t > marks["interrupted"]]
    print(json.dumps({"loud_before": sum(1 for t, loud in heard if loud and t <= marks["interrupted"]),
                      "loud_ms_after": round((max(loud_after) - marks["interrupted"]) * 1e3, 1) if loud_after else 0.0,
                      "patched": bool(getattr(webrtc.SmallWebRTCOutputTransport, "empties_track", False))}))

asyncio.run(asyncio.wait_for(main(), 60))
"""


def _probe(setup: str, interruptible: bool = True) -> dict:
    return fresh_interpreter(PROBE % f"{setup}\nINTERRUPTIBLE = {interruptible}")


def test_an_interruption_empties_the_track_and_the_bot_goes_silent_at_once():
    got = _probe(AGENT_SERVER)
    assert got["patched"] and got["loud_before"] > 20  # the bot spoke before the interruption
    # one 10 ms frame may be in the sender's hands when the interruption comes
    assert got["loud_ms_after"] <= 15, got


def test_pipecat_alone_plays_out_the_write_in_hand():
    """The same without the agent's replacement: the track plays out the rest of its write."""
    got = _probe("")
    assert not got["patched"] and got["loud_before"] > 20
    assert got["loud_ms_after"] >= 50, got


def test_audio_marked_not_interruptible_plays_on():
    got = _probe(AGENT_SERVER, interruptible=False)
    assert got["patched"] and got["loud_ms_after"] >= 50, got
