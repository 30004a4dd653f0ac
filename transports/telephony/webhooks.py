"""The answers to each carrier's incoming-call webhook: connect the call's audio to our media
stream WebSocket. A user points a phone number's voice webhook at `POST /twilio`, `/telnyx` or
`/plivo` (Exotel: its Voicebot applet's dynamic URL at `/exotel`) and nothing else.

The stream URL is the configured public one, else the request's own host (behind a TLS proxy
`X-Forwarded-Proto: https` makes it `wss://`).
"""

from __future__ import annotations

import json
import re
from xml.sax.saxutils import escape, quoteattr

from fastapi import HTTPException, Request

STREAM_PATH = "/ws"
_HOST = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


def stream_url(request: Request, public_url: str | None) -> str:
    if public_url:
        return public_url
    proto = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    scheme = "wss" if proto in ("https", "wss") else "ws"
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    if not _HOST.fullmatch(host):
        raise HTTPException(400, f"the Host header is not a host name: {host[:80]!r}")
    return f"{scheme}://{host}{STREAM_PATH}"


def twiml(url: str) -> str:
    """Twilio: a bidirectional Media Stream for the rest of the call."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Connect><Stream url={quoteattr(url)} />'
            "</Connect></Response>")


def texml(url: str) -> str:
    """Telnyx TeXML: the same, with RTP-mode bidirectional audio (G.711 both ways)."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Connect><Stream url={quoteattr(url)} '
            'bidirectionalMode="rtp" /></Connect></Response>')


def plivo_xml(url: str) -> str:
    """Plivo: a bidirectional audio stream that keeps the call up while it is open."""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Stream bidirectional="true" keepCallAlive="true" '
            f'contentType="audio/x-mulaw;rate=8000">{escape(url)}</Stream></Response>')


def exotel_json(url: str) -> str:
    """Exotel: the Voicebot applet's dynamic URL endpoint returns the stream URL as JSON."""
    return json.dumps({"url": url})


ANSWERS = {"twilio": twiml, "telnyx": texml, "plivo": plivo_xml, "exotel": exotel_json}
MEDIA_TYPES = {"exotel": "application/json"}  # the others: application/xml
