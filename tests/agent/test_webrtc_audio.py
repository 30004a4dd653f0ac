"""The agent's WebRTC receivers hand each audio packet on once the next one arrives (agent/webrtc_audio.py).

Each check runs in a fresh interpreter: the replacement is per process, and another test in this one
may have made it already."""

from __future__ import annotations

from .helpers import AGENT_SERVER, fresh_interpreter

PROBE = """
import json, types
from aiortc.rtcrtpreceiver import RTCRtpReceiver
from aiortc.rtp import RtpPacket

def receive(sequence):
    # A real audio receiver's buffer; 20 ms packets. Which packets let a frame out.
    buffer = RTCRtpReceiver("audio", types.SimpleNamespace(state="new"))._RTCRtpReceiver__jitter_buffer
    out = []
    for seq in sequence:
        packet = RtpPacket(sequence_number=seq, timestamp=960 * seq, payload=b"x")
        packet._data = b"x"  # what the receiver sets once it has depayloaded the packet
        out.append(buffer.add(packet)[1] is not None)
    return out

def report():
    video = RTCRtpReceiver("video", types.SimpleNamespace(state="new"))._RTCRtpReceiver__jitter_buffer
    return {"in_order": receive([0, 1, 2, 3, 4]), "lost_then_late": receive([0, 2, 3, 1]),
            "video_prefetch": video._prefetch}

before = report()
%s
print(json.dumps({"before": before, "after": report()}))
"""


def _probe(setup: str) -> dict:
    return fresh_interpreter(PROBE % setup)


def test_the_agent_server_passes_on_each_audio_packet_when_the_next_arrives():
    got = _probe(AGENT_SERVER)
    # aiortc's own: four later packets before the first frame leaves (80 ms at 20 ms a packet)
    assert got["before"]["in_order"] == [False, False, False, False, True]
    # the agent's: each frame leaves as the next packet arrives (20 ms)
    assert got["after"]["in_order"] == [False, True, True, True, True]
    # a missing packet is still waited for, so nothing is skipped or reordered
    assert got["after"]["lost_then_late"] == [False, False, False, True]
    assert got["after"]["video_prefetch"] == got["before"]["video_prefetch"]


def test_the_benchmark_listeners_use_the_same_receivers():
    got = _probe("from bench.voice.client import peer_connection\npeer_connection()")
    assert got["after"]["in_order"] == [False, True, True, True, True]
