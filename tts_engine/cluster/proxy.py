"""Runs in Serve's proxy (RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=tts_engine.cluster.proxy:middlewares):
a WebSocket whose replica dies mid-connection gets, for each context still open, the error event a
failed stream gets from a single server, then close 1013 (try again: a new connection goes to a live
replica). Without it Serve's proxy drops the TCP connection with no close frame and no event."""

from __future__ import annotations

import contextlib
import json
import logging

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)
ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
IMPORT_PATH = "tts_engine.cluster.proxy:middlewares"
# Events that end a context or refuse its `open` are short; audio events (the bulk) are longer than
# this and are not parsed.
SHORT_EVENT = 2048
REFUSED_AT_OPEN = {"overloaded", "engine_unavailable", "shutting_down", "too_many_contexts", "client_quota",
                   "invalid_request", "text_too_long"}


def _message(text: str) -> dict:
    with contextlib.suppress(ValueError):
        m = json.loads(text)
        if isinstance(m, dict) and isinstance(m.get("context_id"), str):
            return m
    return {}


class ReplicaLoss:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        contexts: set[str] = set()
        state = {"accepted": False, "over": False}

        async def watched_receive() -> Message:
            message = await receive()
            if message["type"] == "websocket.receive" and (m := _message(message.get("text") or "")):
                if m.get("type") == "open":
                    contexts.add(m["context_id"])
            elif message["type"] == "websocket.disconnect":
                state["over"] = True
            return message

        async def watched_send(message: Message) -> None:
            kind = message["type"]
            if kind == "websocket.accept":
                state["accepted"] = True
            elif kind == "websocket.close":
                state["over"] = True
            elif kind == "websocket.send" and len(text := message.get("text") or "") < SHORT_EVENT:
                m = _message(text)
                if m.get("type") == "done" or (m.get("type") == "error" and m.get("code") in REFUSED_AT_OPEN):
                    contexts.discard(m.get("context_id"))
            await send(message)

        try:
            await self.app(scope, watched_receive, watched_send)
        except Exception:
            log.exception("the replica of a WebSocket connection failed")
        if state["accepted"] and not state["over"]:
            await self._replica_lost(send, contexts)

    @staticmethod
    async def _replica_lost(send: Send, contexts: set[str]) -> None:
        with contextlib.suppress(Exception):  # the client may be gone as well
            for context_id in sorted(contexts):
                event = {"type": "error", "context_id": context_id, "code": "engine_error",
                         "message": "the replica serving this connection failed: reconnect to continue"}
                await send({"type": "websocket.send", "text": json.dumps(event)})
            await send({"type": "websocket.close", "code": 1013, "reason": "replica failed"})


def middlewares() -> list[Middleware]:
    return [Middleware(ReplicaLoss)]
