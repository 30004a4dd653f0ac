"""Who may use the carrier endpoint (it listens beyond localhost for carriers to reach it).

- Call webhooks: with the carrier's key configured, a webhook must carry the carrier's signature,
  else 403. Twilio: `X-Twilio-Signature`, base64 HMAC-SHA1 (auth token) of the URL Twilio called
  followed by the POST parameters sorted by name, each as name + value. Plivo: `X-Plivo-Signature-V3`
  (a comma-separated list), base64 HMAC-SHA256 (auth token) of "<url>.<X-Plivo-Signature-V3-Nonce>",
  where the URL has its query sorted and, for a POST, "?" + query ("." after a non-empty query) and
  the form parameters sorted by name, each as name + value. Telnyx: `telnyx-signature-ed25519`, an
  Ed25519 signature (the account's public key) of "<telnyx-timestamp>|<raw body>", at most 5 min old.
  The algorithms are the carriers' documented ones (their SDKs would bring HTTP clients we never use).
- Media streams: each webhook answer names a stream URL with a one-time token (`/ws/<token>`, good
  for `TOKEN_TTL_S` and for that carrier only, signed so that any worker process accepts it); a
  stream without one that a webhook issued is closed with 1008 and the reason.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from fastapi import HTTPException, Request

TOKEN_TTL_S = 120.0  # a carrier opens the stream within seconds of fetching the webhook
MAX_TOKENS = 4096  # used tokens remembered at most (a stream flood cannot grow this without bound)
TELNYX_MAX_AGE_S = 300


@dataclass(frozen=True)
class CarrierKeys:
    """Webhook verification keys; a carrier without one is not verified (a warning at start says so)."""

    twilio_auth_token: str | None = None
    telnyx_public_key: str | None = None  # base64, from the Telnyx portal (Account settings -> Keys)
    plivo_auth_token: str | None = None

    def __post_init__(self):
        if self.telnyx_public_key:
            _telnyx_key(self.telnyx_public_key)  # a bad key is an error at start, not a 403 per call

    def configured(self, carrier: str) -> bool:
        return bool({"twilio": self.twilio_auth_token, "telnyx": self.telnyx_public_key,
                     "plivo": self.plivo_auth_token}.get(carrier))


def _hmac_b64(key: str, message: str, digest) -> str:
    return base64.b64encode(hmac.new(key.encode(), message.encode(), digest).digest()).decode()


def twilio_signature(auth_token: str, url: str, form: list[tuple[str, str]]) -> str:
    return _hmac_b64(auth_token, url + "".join(k + v for k, v in sorted(form)), hashlib.sha1)


def plivo_signature(auth_token: str, method: str, url: str, form: list[tuple[str, str]], nonce: str) -> str:
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}{parts.path}"
    query = parse_qsl(parts.query, keep_blank_values=True)
    if method == "GET":
        query += form
    sorted_query = "&".join(f"{k}={v}" for k, v in sorted(query))
    if method == "POST" and form:
        base += "?" + sorted_query + ("." if sorted_query else "") + "".join(k + v for k, v in sorted(form))
    elif sorted_query:
        base += "?" + sorted_query
    return _hmac_b64(auth_token, f"{base}.{nonce}", hashlib.sha256)


def _telnyx_key(public_key: str):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key, validate=True))
    except ValueError as e:
        raise ValueError(f"the Telnyx public key is not a base64 Ed25519 key: {e}") from None


def telnyx_valid(public_key: str, signature: str, timestamp: str, body: bytes, now: float | None = None) -> bool:
    from cryptography.exceptions import InvalidSignature

    if not timestamp.isdigit() or abs((now or time.time()) - int(timestamp)) > TELNYX_MAX_AGE_S:
        return False
    try:
        _telnyx_key(public_key).verify(base64.b64decode(signature, validate=True), timestamp.encode() + b"|" + body)
    except (InvalidSignature, ValueError):
        return False
    return True


def public_webhook_url(request: Request, public_url: str | None) -> str:
    """The URL the carrier called (what it signed): the configured public host, else the request's
    Host and X-Forwarded-Proto, with the request's path and query."""
    if public_url:
        parts = urlsplit(public_url)
        origin = f"{'https' if parts.scheme == 'wss' else 'http'}://{parts.netloc}"
    else:
        proto = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
        origin = f"{'https' if proto in ('https', 'wss') else 'http'}://{request.headers.get('host', '')}"
    query = request.url.query
    return origin + request.url.path + (f"?{query}" if query else "")


async def verify_webhook(carrier: str, request: Request, keys: CarrierKeys, public_url: str | None) -> None:
    """Raise 403 unless the webhook carries a valid signature (no-op for a carrier without a key)."""
    if not keys.configured(carrier):
        return
    body = await request.body()
    form = parse_qsl(body.decode(errors="replace"), keep_blank_values=True) if request.method == "POST" else []
    url = public_webhook_url(request, public_url)
    headers = request.headers
    if carrier == "twilio":
        given = headers.get("x-twilio-signature", "")
        ok = bool(given) and hmac.compare_digest(given, twilio_signature(keys.twilio_auth_token, url, form))
    elif carrier == "plivo":
        expected = plivo_signature(keys.plivo_auth_token, request.method, url, form,
                                   headers.get("x-plivo-signature-v3-nonce", ""))
        ok = any(hmac.compare_digest(s.strip(), expected)
                 for s in headers.get("x-plivo-signature-v3", "").split(",") if s.strip())
    else:
        ok = telnyx_valid(keys.telnyx_public_key, headers.get("telnyx-signature-ed25519", ""),
                          headers.get("telnyx-timestamp", ""), body)
    if not ok:
        raise HTTPException(403, f"the {carrier} webhook signature is missing or wrong (for {url})")


class StreamTokens:
    """One-time tokens for the media stream URLs the webhooks hand out: "<carrier>.<expiry>.<nonce>.<HMAC>",
    signed with `secret`, so every process of `cadence phone --workers N` (one secret) accepts the
    tokens any of them issued. Each process remembers the nonces it has seen until they expire: a
    token opens one stream per process."""

    def __init__(self, secret: bytes | None = None, ttl_s: float = TOKEN_TTL_S):
        self.secret = secret or secrets.token_bytes(32)
        self.ttl_s = ttl_s
        self._used: OrderedDict[str, float] = OrderedDict()  # nonce -> expires at (wall clock, shared by processes)

    def _sign(self, body: str) -> str:
        digest = hmac.new(self.secret, body.encode(), hashlib.sha256).digest()[:18]
        return base64.urlsafe_b64encode(digest).decode()

    def issue(self, carrier: str) -> str:
        body = f"{carrier}.{int(time.time() + self.ttl_s)}.{secrets.token_urlsafe(12)}"
        return f"{body}.{self._sign(body)}"

    def take(self, token: str | None) -> str | None:
        """The carrier the token was issued to, once; None for a forged, used or expired token."""
        body, _, signature = (token or "").rpartition(".")
        parts = body.split(".")
        if len(parts) != 3 or not parts[1].isdigit() or not hmac.compare_digest(signature, self._sign(body)):
            return None
        carrier, expires, nonce = parts[0], int(parts[1]), parts[2]
        now = time.time()
        while self._used and (next(iter(self._used.values())) < now or len(self._used) >= MAX_TOKENS):
            self._used.popitem(last=False)
        if expires < now or nonce in self._used:
            return None
        self._used[nonce] = expires
        return carrier

    def __len__(self) -> int:
        return len(self._used)
