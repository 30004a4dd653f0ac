"""Runs a flow in one agent session: the single hook every transport (browser, phone, local) calls
after it has built its pipeline worker.

    manager = flows.session.attach(worker, cfg, llm=llm, pipeline=pipeline, tts=tts)

does nothing when `cfg.flow` is None. Otherwise it loads the flow file, makes a pipecat
`FlowManager` over the pipeline's own context aggregators, teaches it the `voice` action (a node
changes the TTS voice, language or instructions; the TTS applies it at its next utterance, on the
same connection) and the filler (a tool still running after `filler.after_s` makes the agent say
`filler.text`, so the caller does not sit in silence; the tool's result still returns into the
flow), and starts the flow's first node when the pipeline starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from loguru import logger
from pipecat.flows import FlowManager, FlowsFunctionSchema
from pipecat.frames.frames import TTSSpeakFrame, TTSUpdateSettingsFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator, LLMUserAggregator
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TTSService

from agent.scripted_llm import ScriptedLLM

from .loader import VOICE_ACTION, VOICE_KEYS, Filler, LoadedFlow, load_flow


@dataclasses.dataclass(frozen=True)
class _Aggregators:
    """The pipeline's aggregator pair, in the shape FlowManager asks for."""

    user_aggregator: LLMUserAggregator
    assistant_aggregator: LLMAssistantAggregator

    def user(self) -> LLMUserAggregator:
        return self.user_aggregator

    def assistant(self) -> LLMAssistantAggregator:
        return self.assistant_aggregator


def attach(
    worker: PipelineWorker,
    cfg: Any,
    *,
    llm: Any,
    pipeline: Pipeline,
    tts: TTSService | None = None,
    flow: LoadedFlow | None = None,
    transport: Any = None,
) -> FlowManager | None:
    """Run `cfg.flow` (a flow file; or `flow`, already loaded) in this session; None if no flow is set.

    Call it after the worker is built and before it runs. Raises FileNotFoundError or
    flows.loader.FlowFileError (both ValueErrors or OSErrors with one clear message) for a bad file.
    """
    path = getattr(cfg, "flow", None)
    if flow is None and path is None:
        return None
    if not isinstance(llm, LLMService):
        raise ValueError(f"a flow needs an LLM service that calls tools, got {type(llm).__name__}")
    loaded = flow if flow is not None else load_flow(Path(path))
    if isinstance(llm, ScriptedLLM) and not llm.calls_tools:
        logger.warning("the offline scripted LLM calls no tools: the flow stays at its first node; configure an "
                       "OpenAI-compatible LLM (llm_base_url) to run it")
    manager = FlowManager(llm=llm, context_aggregator=_aggregators(pipeline), worker=worker, transport=transport,
                          global_functions=_with_filler(loaded.flow.global_functions, loaded.filler))
    for name in loaded.config.nodes:
        node = loaded.flow.node(name)  # the Flow's own dict: its transitions lead to this same node
        if "functions" in node:
            node["functions"] = _with_filler(node["functions"], loaded.filler)
    manager.register_action(VOICE_ACTION, voice_action(tts))

    @worker.event_handler("on_pipeline_started")
    async def _start(_worker, _frame):
        logger.info(f"flow {loaded.path}: starting at node {loaded.config.initial_node!r}")
        await manager.initialize(loaded.flow.initial_node)

    return manager


def _aggregators(pipeline: Pipeline) -> _Aggregators:
    processors = pipeline.processors
    user = next((p for p in processors if isinstance(p, LLMUserAggregator)), None)
    assistant = next((p for p in processors if isinstance(p, LLMAssistantAggregator)), None)
    if user is None or assistant is None:
        raise ValueError("a flow needs the pipeline's user and assistant context aggregators")
    return _Aggregators(user, assistant)


def voice_action(tts: TTSService | None):
    """The `voice` action: a TTS settings change queued behind what the pipeline already carries, so
    the current utterance finishes in the old voice and the next one uses the new."""
    settings_class = getattr(tts, "Settings", TTSSettings) if tts is not None else TTSSettings
    known = {f.name for f in dataclasses.fields(settings_class)}

    async def set_voice(action: dict, flow_manager: FlowManager) -> None:
        change = {k: action[k] for k in VOICE_KEYS if k in action}
        if tts is None:
            logger.info(f"flow node {flow_manager.current_node!r}: voice {change} ignored (text-only agent)")
            return
        ignored = sorted(set(change) - known)
        if ignored:
            logger.warning(f"{type(tts).__name__} has no {', '.join(ignored)} setting: ignored")
        delta = settings_class(**{k: v for k, v in change.items() if k in known})
        logger.info(f"flow: voice -> {change}")
        await flow_manager.worker.queue_frame(TTSUpdateSettingsFrame(delta=delta, service=tts))

    return set_voice


def _with_filler(functions: list, filler: Filler | None) -> list:
    if filler is None:
        return functions
    return [dataclasses.replace(f, handler=_filler_handler(f.name, f.handler, filler))
            if isinstance(f, FlowsFunctionSchema) and not getattr(f.handler, "_cadence_filler", False) else f
            for f in functions]


def _filler_handler(name: str, handler, filler: Filler):
    """`handler`, speaking `filler.text` once if it is still running after `filler.after_s`."""

    async def run(args, flow_manager: FlowManager):
        call = asyncio.ensure_future(handler(args, flow_manager))
        try:
            done, _ = await asyncio.wait({call}, timeout=filler.after_s)
            if not done:
                logger.info(f"tool {name} still running after {filler.after_s:g} s: saying {filler.text!r}")
                # Kept out of the LLM context: it is the agent's, not the model's, words.
                await flow_manager.worker.queue_frame(TTSSpeakFrame(filler.text, append_to_context=False))
            return await call
        finally:
            if not call.done():
                call.cancel()

    run._cadence_filler = True
    return run
