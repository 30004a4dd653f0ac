"""Playout feedback from the sound card's clock: a slow device (large output latency) reports
less played audio and moves the engine's playout deadline later by that latency, where feedback
from written audio would have reported it all played."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import numpy as np
import pytest
from pipecat.frames.frames import TTSAudioRawFrame, TTSStartedFrame, TTSStoppedFrame
from pipecat.tests.utils import run_test
from pipecat.transports.base_transport import TransportParams

from agent.playout import PlayoutReporter
from transports.local.devices import Device
from transports.local.playout import HardwarePlayoutReporter
from transports.local.transport import SoundDeviceOutput
from tts_engine.prompt import Layout
from tts_engine.scheduler.request import StreamState

SR = 1000
PRIOR_S = 0.005  # audio of an earlier context ahead of the one under test


class RecordingSink:
    def __init__(self):
        self.reports: list[tuple[str, float]] = []

    async def report_playout(self, context_id: str, played_s: float) -> None:
        self.reports.append((context_id, played_s))


def output_with(written_s: float, context_id: str = "ctx") -> SoundDeviceOutput:
    """A SoundDeviceOutput (no stream opened) that has started `context_id` and holds its audio."""
    out = SoundDeviceOutput(Device(0, "test", SR, 1), TransportParams(audio_out_enabled=True, audio_out_sample_rate=SR))
    out.buffer.write(np.zeros(int(PRIOR_S * SR), dtype=np.float32), now=0.0)  # an earlier context's audio
    asyncio.run(out.write_transport_frame(TTSStartedFrame(context_id=context_id)))
    out.buffer.write(np.full(int(written_s * SR), 0.1, dtype=np.float32), now=0.0)
    return out


def play(out: SoundDeviceOutput, *, latency_s: float, until: float, start: float = 0.0, block_s: float = 0.1):
    """The output callback every `block_s` from `start` to `until`, on a device of `latency_s`."""
    block = np.zeros((int(block_s * SR), 1), dtype=np.float32)
    for k in range(round((until - start) / block_s)):
        out.buffer.fill(block, latency_s, now=start + k * block_s)


def deadline(played_s: float, played_at: float, sent_s: float) -> float:
    """The engine scheduler's playout deadline for a stream with this report."""
    s = StreamState(id="s", layout=Layout.STREAMING, seed=0, max_frames=100, forced_frames=None,
                    chunk_schedule=(1,), drop_first_frame=False)
    s.first_audio_at, s.audio_sent_s, s.played_s, s.played_at = 0.0, sent_s, played_s, played_at
    return s.playout_deadline(played_at)


@pytest.mark.parametrize("latency_s", [0.02, 0.5, 0.9])
def test_the_reported_position_trails_the_written_audio_by_the_output_latency(latency_s):
    out = output_with(written_s=2.0)
    play(out, latency_s=latency_s, until=1.0)
    assert out.played_s("ctx", now=1.0) == pytest.approx(1.0 - latency_s - PRIOR_S)
    assert out.played_s("ctx", now=1.0 + latency_s) == pytest.approx(1.0 - PRIOR_S)  # all it was given
    assert out.played_s("ctx", now=latency_s / 2) == 0.0  # handed over, not yet heard
    assert out.played_s("unknown") is None


def test_a_slow_device_moves_the_engine_deadline_later_by_its_latency():
    sent_s, now = 2.0, 1.0
    fast, slow = output_with(sent_s), output_with(sent_s)
    play(fast, latency_s=0.02, until=now)
    play(slow, latency_s=0.5, until=now)
    fast_deadline = deadline(fast.played_s("ctx", now), now, sent_s)
    slow_deadline = deadline(slow.played_s("ctx", now), now, sent_s)
    assert slow_deadline - fast_deadline == pytest.approx(0.5 - 0.02)
    # Written-audio feedback calls all 2 s played: the deadline would be `now`, a second early.
    assert deadline(sent_s, now, sent_s) == now < fast_deadline


def test_the_output_callback_takes_the_latency_from_portaudio_dac_time():
    out = output_with(written_s=1.0)
    out._stream = SimpleNamespace(latency=9.9)  # used only when the host API reports no DAC time
    block = np.zeros((100, 1), dtype=np.float32)
    out._callback(block, 100, SimpleNamespace(currentTime=50.0, outputBufferDacTime=50.7), None)
    t = out.buffer.last_callback_at
    assert out.played_s("ctx", now=t + 0.69) == 0.0
    assert out.played_s("ctx", now=t + 0.75) == pytest.approx(0.05 - PRIOR_S, abs=0.002)
    out._callback(block, 100, SimpleNamespace(currentTime=0.0, outputBufferDacTime=0.0), None)  # no DAC time
    assert out.buffer.onset_after(t + 1) == pytest.approx(out.buffer.last_callback_at + 9.9)


def test_the_reporter_reports_the_dac_position_not_the_written_seconds():
    """The reporter in a pipeline, after the output: the same frames, two devices."""
    reports = {}
    for name, latency_s in (("fast", 0.0), ("slow", 30.0)):
        out = output_with(written_s=1.0)
        out.buffer.fill(np.zeros((1000, 1), dtype=np.float32), latency_s, now=time.monotonic() - 0.3)
        sink = RecordingSink()
        frames = [TTSStartedFrame(context_id="ctx"),
                  TTSAudioRawFrame(audio=b"\0\0" * 16000, sample_rate=16000, num_channels=1, context_id="ctx"),
                  TTSStoppedFrame(context_id="ctx")]
        asyncio.run(run_test(HardwarePlayoutReporter(sink, out), frames_to_send=frames))
        reports[name] = sink.reports
        assert reports[name] and {c for c, _ in reports[name]} == {"ctx"}
    # 0.3 s have left the speaker, less the earlier context's audio ahead of this one (and more as the test runs)
    assert all(0.3 - PRIOR_S <= p <= 1.0 for _, p in reports["fast"]) and reports["fast"][-1][1] >= 0.3 - PRIOR_S
    assert all(p == 0.0 for _, p in reports["slow"])  # 30 s of device latency: nothing heard yet
    written = RecordingSink()
    asyncio.run(run_test(PlayoutReporter(written), frames_to_send=frames))
    assert written.reports[-1][1] == pytest.approx(1.0)  # the written-audio clock: all of it
