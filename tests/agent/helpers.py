"""Shared pieces of the agent tests: pipecat's own harness (run_test) drives the processors; the
only stand-in is a paced output transport (the audio device), never our server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipecat.frames.frames import Frame, OutputAudioRawFrame, StartFrame, TTSAudioRawFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams

ROOT = Path(__file__).resolve().parents[2]
# What the agent server does to this process when it is made (its per-process replacements among it)
AGENT_SERVER = "from agent.pipeline import AgentConfig\nfrom agent.server import create_app\ncreate_app(AgentConfig())"


def fresh_interpreter(code: str) -> dict:
    """Runs `code` in a new interpreter at the repository root: per-process replacements made by
    another test in this one cannot leak in. Returns the JSON of its last line of output."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def tokens(text: str) -> list[str]:
    """LLM-like tokens: each word with its leading space."""
    return re.findall(r"\s*\S+", text)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=90))


class PushTimes(BaseObserver):
    """Records (time.monotonic(), source, frame) of every frame pushed downstream."""

    def __init__(self):
        super().__init__()
        self.pushed: list[tuple[float, object, Frame]] = []

    async def on_push_frame(self, data: FramePushed):
        self.pushed.append((time.monotonic(), data.source, data.frame))

    def times(self, source, frame_type) -> list[float]:
        return [t for t, s, f in self.pushed if s is source and isinstance(f, frame_type)]


class PacedOutputTransport(BaseOutputTransport):
    """An output transport that plays audio in real time, as pipecat's websocket transports do
    (one sleep per written chunk), and counts the TTS audio it wrote."""

    def __init__(self, sample_rate: int = 24000):
        super().__init__(TransportParams(audio_out_enabled=True, audio_out_sample_rate=sample_rate,
                                         audio_out_end_silence_secs=0))
        self.written_s = 0.0

    async def start(self, frame: StartFrame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        duration = frame.num_frames / frame.sample_rate
        await asyncio.sleep(duration)
        if isinstance(frame, TTSAudioRawFrame):
            self.written_s += duration
        return True


class Lines:
    """A child's stderr, line by line, read on a thread (the child never blocks on a full pipe)."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream):
        for line in stream:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if m := re.search(pattern, line):
                return m
        raise AssertionError(f"no {pattern!r} in:\n{''.join(self.lines)}")

    def rest(self, timeout: float = 5) -> str:
        with contextlib.suppress(AssertionError):
            self.wait_for(r"(?!)", timeout)
        return "".join(self.lines)


def vads_made_on_the_loop(monkeypatch) -> list[bool]:
    """Records, for each Silero VAD the agent makes from now on, whether it was made on a running
    event loop (a server's calls must load it in a thread: agent.pipeline.make_vad)."""
    import agent.pipeline

    made: list[bool] = []

    class Recording(agent.pipeline.SileroVADAnalyzer):
        def __init__(self, **kwargs):
            try:
                asyncio.get_running_loop()
                made.append(True)
            except RuntimeError:
                made.append(False)
            super().__init__(**kwargs)

    monkeypatch.setattr(agent.pipeline, "SileroVADAnalyzer", Recording)
    return made
