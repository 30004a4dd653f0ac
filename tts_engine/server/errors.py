"""Every failure the server reports, in one table: HTTP status, WebSocket behaviour, error code.

A handler raises `ApiError(code, message)`; the HTTP layer turns it into
`{"error": {"code", "message", "param"}}` with the table's status (plus `Retry-After` for 503),
the WebSocket layer into an error event (the connection stays open) or a close frame.
`docs/streaming-api.md` prints this table; a test checks that they agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    code: str
    http_status: int | None  # None: cannot happen over HTTP
    ws_close: int | None  # a close code, or None: an error event, the connection stays open
    description: str
    over_ws: bool = True  # False: HTTP only


_FAILURES = [
    Failure("invalid_request", 422, None, "a field is missing, has the wrong type or a bad value"),
    Failure("invalid_json", 422, None, "the body or message is not valid JSON (or not valid UTF-8)"),
    Failure("text_too_long", 422, None, "input (or a context's appended text) is over max_text_chars"),
    Failure("unsupported_media_type", 415, None, "the Content-Type is not application/json", over_ws=False),
    Failure("payload_too_large", 413, 1009, "body over max_body_bytes / message over max_ws_message_bytes"),
    Failure("overloaded", 503, None, "the engine's admission caps are reached: retry after retry_after"),
    Failure("engine_unavailable", 503, 1013, "the engine is warming up, stopped or failed"),
    Failure("engine_error", 500, None, "the engine failed while generating this stream"),
    Failure("binary_frame", None, None, "a binary WebSocket frame where a JSON text frame is expected"),
    Failure("unknown_type", None, None, "a message whose `type` is missing or unknown"),
    Failure("unknown_context", None, None, "a message for a context_id that is not open"),
    Failure("duplicate_context", None, None, "`open` with a context_id that is still open"),
    Failure("input_ended", None, None, "`append` or `flush` after `end` for that context"),
    Failure("too_many_contexts", None, None, "`open` past max_contexts_per_connection open contexts"),
    Failure("too_many_connections", 503, 1013, "a WebSocket connect past max_ws_connections open connections, or an "
            "HTTP request while max_connections are open (the connection is closed after the 503)"),
    Failure("slow_consumer", None, 1008, "the client reads too slowly: the send buffer is full"),
    Failure("context_idle", None, None, "a context's input is open but it had no text, flush or audio for "
            "context_idle_timeout_s (60 s): it is cancelled, its `done` follows"),
    Failure("unauthorized", 401, None, "API keys are configured and the request has no valid `Authorization: "
            "Bearer` key or browser token (a WebSocket handshake is refused with 403)"),
    Failure("origin_not_allowed", 403, None, "a browser `Origin` that is not the server's own nor in allowed_origins "
            "(`null` included; the WebSocket handshake is refused with 403)"),
    Failure("host_not_allowed", 421, None, "a `Host` header not in allowed_hosts (DNS rebinding; the WebSocket "
            "handshake is refused with 403)"),
    Failure("client_quota", 429, None, "this client (its key, else its address) holds max_streams_per_client streams "
            "or max_ws_connections_per_client connections (a connection past it: close 1008)"),
    Failure("voice_quota", 403, None, "`POST /v1/voices` past max_voices_per_client voices or "
            "max_voice_seconds_per_client seconds of reference audio for this client: delete one of its voices first",
            over_ws=False),
    Failure("truncated", 422, None, "the speech reached the engine's context before the text ended (its `done` says "
            "reason `length`); a raw audio stream ends without its last chunk"),
    Failure("shutting_down", 503, 1012, "the server is draining for a restart: no new streams; one still running "
            "past drain_grace_s is cancelled with this error"),
    Failure("not_found", 404, None, "no such endpoint", over_ws=False),
    Failure("method_not_allowed", 405, None, "the endpoint exists but not for this method", over_ws=False),
    Failure("internal_error", 500, None, "a server bug (logged); close 1011 if the connection itself fails"),
    Failure("client_closed_request", 499, None, "the client went away before its request body arrived (nothing "
            "reaches it; counted, not logged as a fault)", over_ws=False),
]
FAILURES: dict[str, Failure] = {f.code: f for f in _FAILURES}


class ApiError(Exception):
    """A failure to report to the client. `param`: the request field at fault, if one is."""

    def __init__(self, code: str, message: str, *, param: str | None = None,
                 retry_after_s: float | None = None):
        if code not in FAILURES:
            raise KeyError(f"unknown failure code {code!r}")
        super().__init__(message)
        self.failure = FAILURES[code]
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s

    @property
    def code(self) -> str:
        return self.failure.code

    @property
    def http_status(self) -> int:
        return self.failure.http_status or 500

    def http_body(self) -> dict:
        error = {"code": self.code, "message": self.message}
        if self.param is not None:
            error["param"] = self.param
        return {"error": error}

    def http_headers(self) -> dict[str, str]:
        if self.http_status not in (429, 503):
            return {}
        return {"Retry-After": str(retry_after_header(self.retry_after_s))}

    def ws_event(self, context_id: str | None = None) -> dict:
        event: dict = {"type": "error"}
        if context_id is not None:
            event["context_id"] = context_id
        event["code"] = self.code
        event["message"] = self.message
        if self.retry_after_s is not None:
            event["retry_after"] = round(self.retry_after_s, 3)
        return event


def retry_after_header(retry_after_s: float | None) -> int:
    """Retry-After takes whole seconds: round up, at least 1."""
    if retry_after_s is None or not math.isfinite(retry_after_s):
        return 1
    return max(1, math.ceil(retry_after_s))


# Engine `ErrorEvent.code`s that are the client's fault; any other code is an engine_error.
_ENGINE_CODES = {"invalid_input": "invalid_request"}


def engine_error_code(code: str) -> str:
    """The table's code for an engine `ErrorEvent.code`."""
    return _ENGINE_CODES.get(code, "engine_error")


def markdown_table() -> str:
    """The table as printed in docs/streaming-api.md."""
    rows = ["| code | HTTP | WebSocket | when |", "|---|---|---|---|"]
    for f in _FAILURES:
        http = str(f.http_status) if f.http_status else "-"
        ws = f"close {f.ws_close}" if f.ws_close else "error event" if f.over_ws else "-"
        rows.append(f"| `{f.code}` | {http} | {ws} | {f.description} |")
    return "\n".join(rows)
