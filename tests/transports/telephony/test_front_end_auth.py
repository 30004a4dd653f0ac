"""The carrier endpoint's front door (it listens beyond localhost for carriers): webhooks must carry
the carrier's signature once its key is configured (else 403), and a media stream must come on a
URL a webhook answered with (a one-time token, for that carrier), else it is closed with 1008 and
the reason. Real server, real sockets; the signatures are made as the carriers document them."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import urllib.error
import urllib.request

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.pipeline import AgentConfig
from transports.telephony.auth import CarrierKeys, plivo_signature, twilio_signature
from transports.telephony.endpoint import create_app

from .carrier import CarrierLeg
from .helpers import AppThread, webhook_stream_url

TELNYX_KEY = Ed25519PrivateKey.generate()
KEYS = CarrierKeys(
    twilio_auth_token="twilio-token-1", plivo_auth_token="plivo-token-1",
    telnyx_public_key=base64.b64encode(TELNYX_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode())
FORM = b"CallSid=CA1&From=%2B15550100001&To=%2B15550100002"
PAIRS = [("CallSid", "CA1"), ("From", "+15550100001"), ("To", "+15550100002")]


@pytest.fixture(scope="module")
def phone():
    with AppThread(create_app(AgentConfig(cadence_url=None), keys=KEYS, handshake_timeout_s=2.0)) as server:
        yield server


def test_twilio_signature_matches_twilios_documented_example():
    params = [("CallSid", "CA1234567890ABCDE"), ("Caller", "+12349013030"), ("Digits", "1234"),
              ("From", "+12349013030"), ("To", "+18005551212")]
    assert twilio_signature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params) == \
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="


def test_plivo_v3_signs_the_sorted_url_then_the_sorted_form_then_the_nonce():
    import hashlib
    import hmac

    signed = "https://bot.example.com/plivo?a=1&b=2.CallUUIDu-1Fromf.n0nce"  # query sorted, form sorted by name
    expected = base64.b64encode(hmac.new(b"tok", signed.encode(), hashlib.sha256).digest()).decode()
    assert plivo_signature("tok", "POST", "https://bot.example.com/plivo?b=2&a=1",
                           [("From", "f"), ("CallUUID", "u-1")], "n0nce") == expected


def _post(server: AppThread, carrier: str, headers: dict) -> tuple[int, str]:
    request = urllib.request.Request(f"{server.url}/{carrier}", data=FORM, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _signed(server: AppThread, carrier: str, *, good: bool = True, age_s: float = 0) -> dict:
    url = f"{server.url}/{carrier}"
    if carrier == "twilio":
        return {"X-Twilio-Signature": twilio_signature("twilio-token-1" if good else "other", url, PAIRS)}
    if carrier == "plivo":
        return {"X-Plivo-Signature-V3-Nonce": "12345678901234567890",
                "X-Plivo-Signature-V3": plivo_signature("plivo-token-1" if good else "other", "POST", url, PAIRS,
                                                        "12345678901234567890")}
    ts = str(int(time.time() - age_s))
    key = TELNYX_KEY if good else Ed25519PrivateKey.generate()
    signature = base64.b64encode(key.sign(f"{ts}|".encode() + FORM)).decode()
    return {"telnyx-timestamp": ts, "telnyx-signature-ed25519": signature}


@pytest.mark.parametrize("carrier", ["twilio", "telnyx", "plivo"])
def test_a_webhook_without_the_carriers_signature_gets_403(phone, carrier):
    assert _post(phone, carrier, {})[0] == 403
    status, body = _post(phone, carrier, _signed(phone, carrier, good=False))
    assert status == 403 and "signature is missing or wrong" in body, body
    if carrier == "telnyx":  # a replayed (old) signed webhook
        assert _post(phone, carrier, _signed(phone, carrier, age_s=600))[0] == 403
    status, body = _post(phone, carrier, _signed(phone, carrier))
    assert status == 200 and f"ws://127.0.0.1:{phone.port}/ws/" in body, body


async def _closed(url: str, messages: list[dict]) -> tuple[int, str]:
    async with connect(url, proxy=None) as ws:
        with contextlib.suppress(ConnectionClosed):  # the bot may close before it reads them
            for m in messages:
                await ws.send(json.dumps(m))
        with pytest.raises(ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), 10)
        return ws.close_code, ws.close_reason


def test_a_stream_no_webhook_announced_is_closed_with_the_reason(phone):
    base = f"ws://127.0.0.1:{phone.port}/ws"
    leg = CarrierLeg("twilio", None)
    start = [leg.msg["connected"], leg.msg["start"]]
    for url in (base, f"{base}/made-up-token"):
        code, reason = asyncio.run(_closed(url, start))
        assert code == 1008 and "unknown stream" in reason, (code, reason)
    # A token Twilio's webhook issued, used by a Telnyx stream: refused, and the token is spent.
    url = webhook_stream_url(phone.url, "twilio", data=FORM, headers=_signed(phone, "twilio"))
    telnyx = CarrierLeg("telnyx", None).msg
    code, reason = asyncio.run(_closed(url, [telnyx["connected"], telnyx["start"]]))
    assert code == 1008 and "issued to twilio" in reason, (code, reason)
    code, reason = asyncio.run(_closed(url, start))
    assert code == 1008 and "unknown stream" in reason, (code, reason)
    assert not phone.server.config.app.state.calls


def test_a_webhooks_token_opens_one_call_once(phone):
    url = webhook_stream_url(phone.url, "twilio", data=FORM, headers=_signed(phone, "twilio"))

    async def call_then_again():
        async with connect(url, proxy=None) as ws:
            leg = CarrierLeg("twilio", ws)
            await leg.start()
            await leg.wait_for(lambda: phone.server.config.app.state.calls.get(leg.stream_id), 30, "call")
            await leg.hang_up()
        return await _closed(url, [leg.msg["connected"], leg.msg["start"]])

    code, reason = asyncio.run(asyncio.wait_for(call_then_again(), 60))
    assert code == 1008 and "unknown stream" in reason, (code, reason)


def test_stream_tokens_are_signed_so_any_worker_takes_them_once_and_forgeries_never(monkeypatch):
    from transports.telephony import auth

    secret = b"one secret for every worker process"
    first, second, stranger = auth.StreamTokens(secret), auth.StreamTokens(secret), auth.StreamTokens()
    token = first.issue("twilio")
    assert second.take(token) == "twilio"  # issued by one process, taken by another
    assert second.take(token) is None  # once per process
    assert stranger.take(first.issue("twilio")) is None  # another secret: not ours
    carrier, expires, nonce, signature = first.issue("plivo").split(".")
    for forged in (f"twilio.{expires}.{nonce}.{signature}", f"plivo.{int(expires) + 999}.{nonce}.{signature}",
                   f"plivo.{expires}.{nonce}x.{signature}", f"plivo.{expires}.{nonce}", "", "a.b.c.d"):
        assert first.take(forged) is None, forged
    assert first.take(f"{carrier}.{expires}.{nonce}.{signature}") == "plivo"
    late = first.issue("telnyx")
    monkeypatch.setattr(auth.time, "time", lambda: float(expires) + auth.TOKEN_TTL_S + 1)
    assert first.take(late) is None  # expired
    assert len(first) == 0  # the used nonces it kept have expired too
