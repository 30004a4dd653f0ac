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


OPUS_PROBE = """
import fractions, json
import numpy as np
from av import AudioFrame
from aiortc import codecs
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

def send():
    # The encoder and decoder a real Opus sender and receiver get; six 10 ms frames of a tone, as the
    # bot's output track hands them on.
    params = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2, payloadType=111)
    encoder, decoder = codecs.get_encoder(params), codecs.get_decoder(params)
    packets, stamps, samples = [], [], []
    for i in range(6):
        tone = (8000 * np.sin(np.arange(480 * i, 480 * (i + 1)) / 7)).astype(np.int16)[None, :]
        frame = AudioFrame.from_ndarray(tone, format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = 48000, 480 * i, fractions.Fraction(1, 48000)
        payloads, stamp = encoder.encode(frame)
        packets.append(len(payloads))
        if payloads:
            stamps.append(stamp)
            samples += [f.samples for f in decoder.decode(JitterFrame(payloads[0], stamp))]
    return {"packets": packets, "stamps": stamps, "samples": samples}

before = send()
%s
print(json.dumps({"before": before, "after": send()}))
"""


def test_the_agent_server_sends_10_ms_opus_packets():
    """aiortc's encoder fills a 20 ms packet from two 10 ms frames; the agent's sends each 10 ms frame at once,
    stamped 480 ticks (10 ms of Opus's 48 kHz clock) apart, and a receiver decodes each to 10 ms."""
    got = fresh_interpreter(OPUS_PROBE % AGENT_SERVER)
    assert got["before"] == {"packets": [0, 1] * 3, "stamps": [0, 960, 1920], "samples": [960] * 3}
    assert got["after"] == {"packets": [1] * 6, "stamps": [480 * i for i in range(6)], "samples": [480] * 6}
