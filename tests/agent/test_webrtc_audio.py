"""The agent's WebRTC receivers hand each audio packet on as it arrives; the benchmark's listeners, once the
next one arrives (agent/webrtc_audio.py).

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
            "wrapping": receive([65534, 65535, 0, 1]), "duplicate": receive([5, 6, 6, 7]),
            "video_prefetch": video._prefetch}

before = report()
%s
print(json.dumps({"before": before, "after": report()}))
"""


def _probe(setup: str) -> dict:
    return fresh_interpreter(PROBE % setup)


def test_the_agent_server_passes_on_each_audio_packet_as_it_arrives():
    got = _probe(AGENT_SERVER)
    # aiortc's own: four later packets before the first frame leaves (80 ms at 20 ms a packet), and a
    # missing packet holds back the ones after it
    assert got["before"]["in_order"] == [False, False, False, False, True]
    assert got["before"]["lost_then_late"] == [False, False, False, False]
    # the agent's: each packet leaves as it arrives; one later than a packet already handed on is dropped
    assert got["after"]["in_order"] == [True] * 5
    assert got["after"]["lost_then_late"] == [True, True, True, False]
    assert got["after"]["wrapping"] == [True] * 4  # sequence numbers wrap at 2^16
    assert got["after"]["duplicate"] == [True, True, False, True]
    assert got["after"]["video_prefetch"] == got["before"]["video_prefetch"]


def test_the_benchmark_listeners_hold_one_packet():
    got = _probe("from bench.voice.client import peer_connection\npeer_connection()")
    assert got["after"]["in_order"] == [False, True, True, True, True]
    # a missing packet is still waited for, so a listener plays nothing out of order
    assert got["after"]["lost_then_late"] == [False, False, False, True]


def test_in_one_process_each_receiver_gets_the_latest_policy():
    got = _probe(AGENT_SERVER + "\nfrom bench.voice.client import peer_connection\npeer_connection()")
    assert got["after"]["in_order"] == [False, True, True, True, True]
