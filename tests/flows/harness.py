"""One phone-like call through the real agent pipeline with a flow attached: transcripts in (as the
STT would hand them over), the scripted LLM calling the flow's tools, Cadence TTS on a real server,
a paced output that plays the audio in real time. The only stand-in is the audio device."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    ErrorFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.filters.identity_filter import IdentityFilter
from pipecat.processors.frame_processor import FrameDirection
from pipecat.workers.runner import WorkerRunner

from agent.cadence_tts import CadenceStreamOptions, CadenceTTSService
from agent.pipeline import AgentConfig, build_pipeline
from agent.scripted_llm import Script, ScriptedLLM
from flows.session import attach
from tests.agent.helpers import PacedOutputTransport


@dataclass
class Request:
    """One stream the engine was asked for: who speaks, and all the text it was given."""

    speaker: str | None
    language: str
    instructions: str | None
    text: str
    at: float = field(default_factory=time.monotonic)


class _RecordingStream:
    def __init__(self, stream, request: Request):
        self._stream = stream
        self._request = request

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def append(self, text: str) -> None:
        self._request.text += text
        self._stream.append(text)


class RecordingEngine:
    """The real engine, recording each stream's voice and text as the server opens and feeds it."""

    def __init__(self, engine):
        self._engine = engine
        self.requests: list[Request] = []

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def open_stream(self, options, text: str = "", *, end_input: bool = False):
        stream = self._engine.open_stream(options, text, end_input=end_input)
        v = options.voice
        request = Request(v.speaker, v.language, v.instruct, text)
        self.requests.append(request)
        return _RecordingStream(stream, request)


class BotSpeech(BaseObserver):
    """When the bot speaks, as the output transport says (BotStarted/StoppedSpeakingFrame), and
    every error any processor reports."""

    def __init__(self, output):
        super().__init__()
        self._output = output
        self.speaking = False
        self.stops = 0
        self.errors: list[ErrorFrame] = []

    async def on_push_frame(self, data: FramePushed):
        if isinstance(data.frame, ErrorFrame) and data.frame not in self.errors:
            self.errors.append(data.frame)
        if data.source is not self._output or data.direction != FrameDirection.DOWNSTREAM:
            return
        if isinstance(data.frame, BotStartedSpeakingFrame):
            self.speaking = True
        elif isinstance(data.frame, BotStoppedSpeakingFrame):
            self.speaking = False
            self.stops += 1


class FlowCall:
    """A call running `flow_file`, answered by the scripted LLM with `script`, or by `llm`."""

    def __init__(self, ws_url: str, flow_file: Path, script: Script | None = None, llm=None):
        self.cfg = AgentConfig(cadence_url=ws_url, user_speech_timeout_s=0.2, flow=str(flow_file)).validate()
        self.tts = CadenceTTSService(url=ws_url, options=CadenceStreamOptions(seed=5))
        self.connects = 0
        connect = self.tts._websocket_connect

        async def counting_connect(*args, **kwargs):
            self.connects += 1
            return await connect(*args, **kwargs)

        self.tts._websocket_connect = counting_connect
        self.llm = llm if llm is not None else ScriptedLLM(script=script, tokens_per_s=80, first_token_s=0.02)
        self.output = PacedOutputTransport()
        pipeline, self.context = build_pipeline(self.cfg, input=IdentityFilter(), output=self.output, stt=None,
                                                llm=self.llm, tts=self.tts, vad=False)
        self.speech = BotSpeech(self.output)
        self.worker = PipelineWorker(pipeline, params=PipelineParams(), observers=[self.speech],
                                     enable_rtvi=False, idle_timeout_secs=None)
        self.manager = attach(self.worker, self.cfg, llm=self.llm, pipeline=pipeline, tts=self.tts)
        self.nodes: list[str] = []
        self._stops_before_say = 0

    async def run(self, turns: list[tuple[str, str]], timeout_s: float = 60.0) -> None:
        """For each (node, text): wait until the flow is at `node` and the bot has finished speaking,
        then say `text`. Then wait for the flow to end the call."""
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        running = asyncio.create_task(runner.run())
        watch = asyncio.create_task(self._watch_nodes())
        try:
            async with asyncio.timeout(timeout_s):
                for node, text in turns:
                    await self._wait_for_turn(node, running)
                    await self._say(text)
                await running
        finally:
            watch.cancel()
            if not running.done():
                await self.worker.cancel()
                await running

    async def _watch_nodes(self) -> None:
        while True:
            node = self.manager.current_node
            if node is not None and (not self.nodes or self.nodes[-1] != node):
                self.nodes.append(node)
            await asyncio.sleep(0.005)

    def _bot_answered(self) -> bool:
        """The newest message is the bot's spoken reply (not a tool call, a result or a node's task)."""
        messages = self.context.get_messages()
        last = messages[-1] if messages else {}
        return last.get("role") == "assistant" and isinstance(last.get("content"), str)

    async def _wait_for_turn(self, node: str, running: asyncio.Task) -> None:
        while (self.manager.current_node != node or self.speech.speaking
               or self.speech.stops == self._stops_before_say or not self._bot_answered()):
            if running.done():
                raise AssertionError(f"the call ended at node {self.manager.current_node!r}, waiting for {node!r}")
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)

    async def _say(self, text: str) -> None:
        self._stops_before_say = self.speech.stops
        await self.worker.queue_frame(VADUserStartedSpeakingFrame(start_secs=0.2))
        await asyncio.sleep(0.3)
        await self.worker.queue_frames([
            TranscriptionFrame(text, user_id="caller", timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"), finalized=True),
            VADUserStoppedSpeakingFrame(stop_secs=0.2)])
