"""The carrier endpoint: call webhooks (`POST /twilio|/telnyx|/plivo|/exotel`) and the media stream
WebSocket (`/ws`) every carrier connects to.

A connection's first messages (`connected`, `start`) say which carrier it is and name the stream
(pipecat's `parse_telephony_websocket`); the call then runs on pipecat's serializer for that
carrier, wrapped by `MarkingSerializer` (marks as the playout clock, a guarded input), on a
`FastAPIWebsocketTransport`, with the call's own pipeline (`run_call`). Bounds: `max_calls` calls at
once (past it the socket is closed with 1013 "try again later"), and a connection must name its
stream within `handshake_timeout_s` (else 1008).

Who may connect (auth.py): with a carrier's key configured its webhooks must be signed (else 403);
each webhook answer names `/ws/<one-time token>`, and with `require_stream_token` a stream without
a token a webhook issued, or of another carrier than the one it was issued to, is closed with 1008.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import Response
from loguru import logger
from starlette.websockets import WebSocketState

from agent.pipeline import AgentConfig

from .auth import CarrierKeys, StreamTokens, verify_webhook
from .call import run_call
from .carriers import CARRIER, make_serializer
from .marks import MarkingSerializer, MarkPlayoutReporter
from .webhooks import ANSWERS, MEDIA_TYPES, STREAM_PATH, stream_url

MAX_CALLS = 8  # each runs a whole pipeline (STT, LLM, TTS)


@dataclass
class Call:
    """A live call, for the logs and the tests."""

    carrier: str
    stream_id: str
    serializer: MarkingSerializer
    reporters: list[MarkPlayoutReporter] = field(default_factory=list)
    tts: object = None


def _sender(websocket: WebSocket):
    async def send(text: str) -> None:
        connected = WebSocketState.CONNECTED
        if websocket.application_state != connected or websocket.client_state != connected:
            return
        try:
            await websocket.send_text(text)
        except Exception as e:  # the carrier went away mid-send: the transport notices and ends the call
            logger.debug(f"media stream send failed: {type(e).__name__} {e}")

    return send


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    logger.warning(f"media stream refused ({code}): {reason}")
    with contextlib.suppress(Exception):
        await websocket.close(code=code, reason=reason[:120])


def create_app(cfg: AgentConfig, *, max_calls: int = MAX_CALLS, public_url: str | None = None,
               handshake_timeout_s: float = 10.0, companions: Sequence = (), keys: CarrierKeys | None = None,
               require_stream_token: bool = True, stream_secret: bytes | None = None, worker: int = 0) -> FastAPI:
    """`public_url`: the wss:// URL carriers reach `/ws` at (default: from each webhook's Host).
    `companions`: objects with async start()/stop() run for the app's lifetime (the SIP listener).
    `keys`: the carriers' webhook signature keys; `require_stream_token`: refuse streams that no
    webhook announced (off only for tests that speak to `/ws` directly). `stream_secret`: signs the
    stream tokens, the same in every worker process (`worker`: this one's number, in `/health`)."""
    from pipecat.runner.utils import parse_telephony_websocket
    from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport

    from agent.server import preload

    if max_calls < 1:
        raise ValueError(f"max_calls must be >= 1, got {max_calls}")
    calls: dict[str, Call] = {}
    opening = 0
    keys = keys or CarrierKeys()
    tokens = StreamTokens(stream_secret)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await asyncio.to_thread(preload, cfg)
        for companion in companions:
            await companion.start()
        try:
            yield
        finally:
            for companion in reversed(companions):
                await companion.stop()

    app = FastAPI(title="Cadence phone", lifespan=lifespan)
    app.state.calls = calls
    app.state.tokens = tokens

    def webhook(carrier: str):
        async def answer(request: Request):
            await verify_webhook(carrier, request, keys, public_url)
            url = f"{stream_url(request, public_url)}/{tokens.issue(carrier)}"
            return Response(ANSWERS[carrier](url), media_type=MEDIA_TYPES.get(carrier, "application/xml"))
        return answer

    for name in ANSWERS:
        app.add_api_route(f"/{name}", webhook(name), methods=["GET", "POST"])

    @app.get("/health")
    async def health():
        return {"calls": len(calls), "max_calls": max_calls, "worker": worker}

    @app.websocket(STREAM_PATH)
    @app.websocket(STREAM_PATH + "/{token}")
    async def media_stream(websocket: WebSocket, token: str | None = None):
        nonlocal opening
        await websocket.accept()
        issued_to = tokens.take(token)
        if issued_to is None and (token is not None or require_stream_token):
            await _close(websocket, 1008, "unknown stream: its URL has no token from a call webhook "
                         "(or the token was used or expired)")
            return
        if len(calls) + opening >= max_calls:
            await _close(websocket, 1013, f"{max_calls} calls are up: try again later")
            return
        opening += 1
        try:
            carrier, call_data = await asyncio.wait_for(parse_telephony_websocket(websocket), handshake_timeout_s)
            if carrier not in CARRIER:
                raise ValueError(f"not a Twilio, Telnyx, Plivo or Exotel media stream (detected: {carrier})")
            if issued_to not in (None, carrier):
                raise ValueError(f"a {carrier} stream on a URL issued to {issued_to}")
            inner = make_serializer(carrier, call_data)
            stream_id = call_data.get("stream_id")
            if stream_id in calls:
                raise ValueError(f"stream {stream_id!r} is already connected")
        except TimeoutError:
            await _close(websocket, 1008, f"no start message within {handshake_timeout_s:g} s")
            return
        except Exception as e:  # whatever the first messages were, say so and close
            await _close(websocket, 1008, f"bad media stream start: {type(e).__name__}: {e}")
            return
        finally:
            opening -= 1
        serializer = MarkingSerializer(inner, CARRIER[carrier], stream_id, _sender(websocket))
        call = calls[stream_id] = Call(carrier, stream_id, serializer)
        transport = FastAPIWebsocketTransport(websocket, FastAPIWebsocketParams(
            audio_in_enabled=True, audio_out_enabled=True, add_wav_header=False, serializer=serializer,
            allowed_origins=[]))
        hangup = asyncio.Event()

        @transport.event_handler("on_client_disconnected")
        async def _gone(_transport, _ws):
            hangup.set()

        def reporter(tts):
            r = MarkPlayoutReporter(tts, serializer.ledger)
            call.reporters.append(r)
            return r

        def got_tts(tts):
            call.tts = tts

        logger.info(f"{carrier} call {call_data.get('call_id')} stream {stream_id}: connected")
        try:
            await run_call(cfg, transport, hangup, label=f"{carrier}:{stream_id}", playout=reporter, on_tts=got_tts)
        finally:
            calls.pop(stream_id, None)

    return app
