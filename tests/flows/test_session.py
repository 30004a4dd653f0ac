"""The session hook: nothing without a flow, a clear refusal of an LLM that cannot call tools, the
filler's timing, and the voice action's settings change."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pipecat.frames.frames import TTSSpeakFrame, TTSUpdateSettingsFrame
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.filters.identity_filter import IdentityFilter

from agent.cadence_tts import CadenceTTSService
from agent.pipeline import AgentConfig, build_pipeline
from agent.scripted_llm import ScriptedLLM
from flows.loader import Filler
from flows.session import _filler_handler, attach, voice_action

EXAMPLES = Path(__file__).resolve().parents[2] / "flows" / "examples"


class Queue:
    """Stands in for the pipeline worker (only what the hook queues into it is looked at)."""

    def __init__(self):
        self.frames = []

    async def queue_frame(self, frame):
        self.frames.append(frame)


class Manager:
    def __init__(self):
        self.worker = Queue()
        self.current_node = "n"


def pipeline_with(llm):
    cfg = AgentConfig(cadence_url=None, fallback_tts="none").validate(require_tts=False)
    pipeline, _ = build_pipeline(cfg, input=IdentityFilter(), output=IdentityFilter(), stt=None, llm=llm, tts=None,
                                 vad=False)
    return pipeline


def test_no_flow_attaches_nothing_and_an_llm_that_cannot_call_tools_is_refused():
    llm = ScriptedLLM()
    pipeline = pipeline_with(llm)
    worker = PipelineWorker(pipeline)
    assert attach(worker, AgentConfig(), llm=llm, pipeline=pipeline) is None
    cfg = AgentConfig(flow=str(EXAMPLES / "support_triage.yaml"))
    with pytest.raises(ValueError, match="needs an LLM service"):
        attach(worker, cfg, llm=IdentityFilter(), pipeline=pipeline)
    with pytest.raises(FileNotFoundError):
        attach(worker, AgentConfig(flow="no/such/flow.yaml"), llm=llm, pipeline=pipeline)
    manager = attach(worker, cfg, llm=llm, pipeline=pipeline)
    assert manager is not None and manager.current_node is None  # it starts with the pipeline


@pytest.mark.parametrize(("tool_s", "fillers"), [(0.05, 0), (0.6, 1)])
def test_a_tool_slower_than_the_threshold_speaks_the_filler_once_and_still_returns(tool_s, fillers):
    async def tool(args, flow_manager):
        await asyncio.sleep(tool_s)
        return {"echo": args["x"]}, None

    manager = Manager()
    handler = _filler_handler("tool", tool, Filler(text="Hold on.", after_s=0.3))
    started = asyncio.run(asyncio.wait_for(handler({"x": 1}, manager), 5))
    assert started == ({"echo": 1}, None)
    spoken = [f for f in manager.worker.frames if isinstance(f, TTSSpeakFrame)]
    assert [(f.text, f.append_to_context) for f in spoken] == [("Hold on.", False)] * fillers


def test_cancelling_a_call_cancels_the_tool():
    cancelled = asyncio.Event()

    async def tool(args, flow_manager):
        try:
            await asyncio.sleep(10)
        finally:
            cancelled.set()

    async def main():
        call = asyncio.ensure_future(_filler_handler("tool", tool, Filler(after_s=0.05))({}, Manager()))
        await asyncio.sleep(0.1)
        call.cancel()
        await asyncio.wait_for(cancelled.wait(), 1)

    asyncio.run(main())


def test_the_voice_action_queues_the_settings_the_tts_has():
    manager = Manager()
    tts = CadenceTTSService(url="ws://127.0.0.1:1/v1/stream")
    action = {"type": "voice", "voice": "serena", "language": "english", "instructions": "Slowly."}
    asyncio.run(voice_action(tts)(action, manager))
    (frame,) = manager.worker.frames
    assert isinstance(frame, TTSUpdateSettingsFrame) and frame.service is tts
    assert (frame.delta.voice, frame.delta.language, frame.delta.instructions) == ("serena", "english", "Slowly.")
    # A text-only agent has no voice to change.
    asyncio.run(voice_action(None)(action, manager))
    assert len(manager.worker.frames) == 1
