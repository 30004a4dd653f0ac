"""One phone call's pipeline, the same as a browser session's (agent.server.run_session): STT,
user turn, LLM, TTS from the agent's config, one pipeline per call, run until the caller hangs up.

Sample rates: the phone line is 8 kHz G.711. Whisper and Silero VAD take 16 kHz, so the caller's
audio is resampled once on the way in (by the carrier's serializer, or the SIP transport); the
voice (24 kHz from Cadence, 22.05 kHz from Piper) is resampled once on the way out, by the output
transport, to the line's 8 kHz (the carrier serializers then see 8 kHz and leave it alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from loguru import logger
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.transports.base_transport import BaseTransport
from pipecat.workers.runner import WorkerRunner

from agent.pipeline import AgentConfig, build_pipeline, choose_tts, latency_observer, make_llm, make_vad
from agent.stt import make_stt
from flows.session import attach as attach_flow

LINE_RATE = 8000
PIPELINE_IN_RATE = 16000


async def run_call(cfg: AgentConfig, transport: BaseTransport, hangup: asyncio.Event, *, label: str,
                   playout: Callable[[object], FrameProcessor] | None = None,
                   observers: Sequence = (), on_tts: Callable[[object], None] | None = None) -> None:
    """Build the call's pipeline on `transport` and run it until `hangup` is set (or it ends).

    `playout` makes the processor that reports heard audio to a Cadence TTS (default: the written
    audio); `on_tts` is told which TTS service the call got (the tests count its engine contexts)."""
    # Model loads (Whisper, Silero) and the engine's health check block: keep the event loop free.
    stt = await asyncio.to_thread(make_stt, cfg)
    tts, tts_in_use = await asyncio.to_thread(choose_tts, cfg)
    if on_tts is not None:
        on_tts(tts)
    vad = await asyncio.to_thread(make_vad, cfg)
    llm = make_llm(cfg)
    pipeline, _ = build_pipeline(cfg, input=transport.input(), output=transport.output(), stt=stt,
                                 llm=llm, tts=tts, vad=vad, playout=playout)
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=PIPELINE_IN_RATE, audio_out_sample_rate=LINE_RATE,
                              enable_metrics=True),
        observers=[latency_observer(), *observers], enable_rtvi=False, idle_timeout_secs=None)
    attach_flow(worker, cfg, llm=llm, pipeline=pipeline, tts=tts, transport=transport)  # no-op without cfg.flow
    logger.info(f"call {label}: pipeline up ({tts_in_use})")

    async def hang_up_when_told():
        await hangup.wait()
        await worker.cancel()

    watcher = asyncio.create_task(hang_up_when_told())
    try:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        await runner.run()
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        logger.info(f"call {label}: ended")
