"""The soak's clients: one coroutine per behaviour, each returning an Outcome."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
from dataclasses import dataclass, field

import httpx
from websockets.asyncio.client import connect

from bench.load.playout import Chunk, simulate

SAMPLE_RATE = 24000
VOICE = {"voice": "ryan", "language": "english"}
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please hold while I look that up for you.",
    "Your appointment is confirmed for Tuesday at half past ten in the morning.",
    "I can help with billing, deliveries and returns; which one do you need today?",
    "Thanks for calling. Is there anything else I can do for you before you go?",
    "The weather tomorrow looks cloudy with a chance of light rain in the afternoon.",
]


def underruns(chunks: list[Chunk], prebuffer_s: float) -> int:
    """Underruns of a player that starts `prebuffer_s` after the first audio arrives (0: at once, as
    bench/load's zero-buffer player)."""
    if chunks and prebuffer_s > 0:
        chunks = [Chunk(chunks[0].at_s + prebuffer_s, chunks[0].samples), *chunks[1:]]
    return simulate(chunks, SAMPLE_RATE).underruns


@dataclass
class Outcome:
    kind: str
    ok: bool = True  # the client saw what its behaviour should see
    sent_samples: int | None = None  # what the server says it sent (well-behaved clients)
    received_samples: int = 0
    duplicates: int = 0  # chunk indices seen twice, or out of order
    underruns: int = 0
    ttfa_s: float | None = None
    problem: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return 0 if self.sent_samples is None else self.sent_samples - self.received_samples


def text_for(rng: random.Random, sentences: int | None = None) -> str:
    return " ".join(rng.choice(SENTENCES) for _ in range(sentences or rng.randint(1, 3)))


def _pcm(message: dict) -> int:
    return len(base64.b64decode(message["audio"])) // 2


async def ws_good(ws_url: str, headers: dict, rng: random.Random, prebuffer_s: float = 0.0) -> Outcome:
    out = Outcome("ws_good")
    chunks: list[Chunk] = []
    start = time.perf_counter()
    async with connect(ws_url, additional_headers=headers, max_size=None, open_timeout=60) as conn:
        await conn.send(json.dumps({"type": "open", "context_id": "c", "text": text_for(rng), "end": True, **VOICE}))
        expected_index = 0
        async for raw in conn:
            m = json.loads(raw)
            now = time.perf_counter() - start
            if m["type"] == "audio":
                n = _pcm(m)
                out.received_samples += n
                out.duplicates += m["index"] != expected_index
                expected_index = m["index"] + 1
                chunks.append(Chunk(now, n))
                out.ttfa_s = out.ttfa_s if out.ttfa_s is not None else now
            elif m["type"] == "done":
                out.sent_samples = m["samples"]
                out.ok = m["reason"] == "eos"
                out.problem = "" if out.ok else f"done {m['reason']}"
                break
            elif m["type"] == "error":
                out.ok, out.problem = False, f"error {m['code']}: {m['message']}"
    out.underruns = underruns(chunks, prebuffer_s)
    return out


async def sse_good(url: str, headers: dict, client: httpx.AsyncClient, rng: random.Random,
                   prebuffer_s: float = 0.0) -> Outcome:
    out = Outcome("sse_good")
    chunks: list[Chunk] = []
    start = time.perf_counter()
    body = {"input": text_for(rng), "stream_format": "sse", **VOICE}
    async with client.stream("POST", url + "/v1/audio/speech", json=body, headers=headers) as r:
        if r.status_code != 200:
            out.ok, out.problem = False, f"status {r.status_code}: {(await r.aread())[:200]!r}"
            return out
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            m = json.loads(line[6:])
            now = time.perf_counter() - start
            if m["type"] == "speech.audio.delta":
                n = _pcm(m)
                out.received_samples += n
                chunks.append(Chunk(now, n))
                out.ttfa_s = out.ttfa_s if out.ttfa_s is not None else now
            elif m["type"] == "speech.audio.done":
                out.sent_samples = m["samples"]
                out.ok = m["reason"] == "eos"
                out.problem = "" if out.ok else f"done {m['reason']}"
            elif m["type"] == "error":
                out.ok, out.problem = False, f"error {m['error']['code']}"
    if out.sent_samples is None:
        out.ok, out.problem = False, out.problem or "no done event"
    out.underruns = underruns(chunks, prebuffer_s)
    return out


async def ws_cancel(ws_url: str, headers: dict, rng: random.Random) -> Outcome:
    """Cancels after its first audio; nothing of the context may follow the `done` (reason cancelled)."""
    out = Outcome("ws_cancel")
    async with connect(ws_url, additional_headers=headers, max_size=None, open_timeout=60) as conn:
        await conn.send(json.dumps({"type": "open", "context_id": "c", "text": text_for(rng, 3), "end": True,
                                    **VOICE}))
        done = False
        async for raw in conn:
            m = json.loads(raw)
            if m["type"] == "audio" and not done:
                await conn.send(json.dumps({"type": "cancel", "context_id": "c"}))
                done = True  # the cancel is on its way
            elif m["type"] == "done":
                out.ok = m["reason"] in ("cancelled", "eos")
                out.problem = "" if out.ok else f"done {m['reason']}"
                break
        try:  # after the ack, nothing more for this context
            extra = await asyncio.wait_for(conn.recv(), 0.3)
            out.ok, out.problem = False, f"message after done: {extra[:80]}"
        except TimeoutError:
            pass
    return out


async def ws_vanish(ws_url: str, headers: dict, rng: random.Random) -> Outcome:
    """Drops the TCP connection after its first audio, without a close frame."""
    out = Outcome("ws_vanish")
    conn = await connect(ws_url, additional_headers=headers, max_size=None, open_timeout=60)
    await conn.send(json.dumps({"type": "open", "context_id": "c", "text": text_for(rng, 3), "end": True, **VOICE}))
    while json.loads(await conn.recv())["type"] != "audio":
        pass
    conn.transport.abort()
    return out


async def http_vanish(url: str, headers: dict, client: httpx.AsyncClient, rng: random.Random) -> Outcome:
    out = Outcome("http_vanish")
    async with client.stream("POST", url + "/v1/audio/speech", json={"input": text_for(rng, 3), **VOICE},
                             headers=headers) as r:
        async for _ in r.aiter_raw():
            break  # leaves with the response unread: the connection is closed
    return out


MALFORMED = [
    "{not json", "[1, 2]", json.dumps({"type": "shout", "context_id": "x"}), json.dumps({"type": "open"}),
    json.dumps({"type": "append", "context_id": "nope", "text": "hi"}), b"\x00\x01binary",
    json.dumps({"type": "open", "context_id": "m", "voice": "nobody", "language": "english", "text": "x"}),
    json.dumps({"type": "playout", "context_id": "nope", "played_s": 1e308}),
    json.dumps({"type": "open", "context_id": "z", "text": "\u200b\u200e", "end": True, **VOICE}),
]


async def ws_malformed(ws_url: str, headers: dict, rng: random.Random) -> Outcome:
    """Sends a malformed message, expects an error event, and is still served on the same connection."""
    out = Outcome("ws_malformed")
    async with connect(ws_url, additional_headers=headers, max_size=None, open_timeout=60) as conn:
        await conn.send(rng.choice(MALFORMED))
        m = json.loads(await conn.recv())
        if m["type"] != "error":
            out.ok, out.problem = False, f"no error event: {m}"
            return out
        await conn.send(json.dumps({"type": "open", "context_id": "ok", "text": "Fine.", "end": True, **VOICE}))
        async for raw in conn:
            m = json.loads(raw)
            if m["type"] == "done" and m.get("context_id") == "ok":
                out.ok = m["reason"] == "eos"
                break
    return out


async def http_malformed(url: str, headers: dict, client: httpx.AsyncClient, rng: random.Random) -> Outcome:
    out = Outcome("http_malformed")
    body = rng.choice([b"{not json", b'{"input": 5}', b"\xff\xfe", json.dumps({"input": "x" * 9000}).encode()])
    r = await client.post(url + "/v1/audio/speech", content=body,
                          headers={**headers, "content-type": "application/json"})
    out.ok = r.status_code == 422
    out.problem = "" if out.ok else f"status {r.status_code}"
    return out


async def slow_reader(ws_url: str, headers: dict, stop: asyncio.Event, rng: random.Random) -> Outcome:
    """Stays connected for the whole soak, reading a message every 0.2 s, one long utterance after another."""
    out = Outcome("slow_reader")
    async with connect(ws_url, additional_headers=headers, max_size=None, open_timeout=60) as conn:
        n = 0
        while not stop.is_set():
            n += 1
            await conn.send(json.dumps({"type": "open", "context_id": f"s{n}", "text": text_for(rng, 4),
                                        "end": True, **VOICE}))
            while True:
                m = json.loads(await conn.recv())
                await asyncio.sleep(0.2)
                if m["type"] == "done":
                    out.extra["utterances"] = n
                    break
    return out
