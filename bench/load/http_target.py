"""Target (a): any server speaking the OpenAI streaming speech endpoint.

`POST {base}/v1/audio/speech` with `response_format: "pcm"`, `stream_format: "audio"`, `stream:
true`; the body is raw s16le PCM at the rate of the `X-Sample-Rate` header, else `sample_rate`.
Time zero is taken from httpcore's trace hook at the moment the request headers start going out
(after any connection set-up), i.e. the first request byte sent; TTFB is the end of the response
headers (the first response bytes).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from .corpus import Prompt
from .records import Exchange

KEEPALIVE_EXPIRY_S = 2.0


class HttpTarget:
    name = "http"

    def __init__(self, base_url: str, *, voice: str | None, language: str | None, request_model: str | None,
                 extra: dict[str, Any], sample_rate: int, timeout_s: float):
        self.url = base_url.rstrip("/") + "/v1/audio/speech"
        self.fields = {k: v for k, v in (("model", request_model), ("voice", voice), ("language", language))
                       if v is not None}
        self.extra = extra
        self.sample_rate = sample_rate
        # Unbounded pool: an open-loop client must never queue a request behind a busy connection.
        # Idle connections expire well before a server's keep-alive timeout (uvicorn's default 5 s
        # equals httpx's default expiry: a request written as the server closes its connection fails,
        # about one in a few thousand at 30 req/s).
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0),
                                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=256,
                                                            keepalive_expiry=KEEPALIVE_EXPIRY_S))

    def body(self, text: str) -> dict[str, Any]:
        return {**self.fields, "input": text, "stream": True, "response_format": "pcm", "stream_format": "audio",
                **self.extra}

    def new_exchange(self, keep_pcm: bool) -> Exchange:
        return Exchange(self.sample_rate, keep_pcm)

    async def run(self, prompt: Prompt, ex: Exchange) -> None:
        async def trace(event: str, info: dict) -> None:
            now = time.perf_counter()
            if event.endswith("send_request_headers.started") and ex.t0 is None:
                ex.t0 = now
            elif event.endswith("receive_response_headers.complete"):
                ex.ttfb_s = ex.since_t0(now)

        fallback_t0 = time.perf_counter()
        try:
            async with self.client.stream("POST", self.url, json=self.body(prompt.text),
                                          extensions={"trace": trace}) as r:
                if ex.t0 is None:  # a transport without trace events: the best we know
                    ex.t0 = fallback_t0
                ex.status = r.status_code
                if r.status_code != 200:
                    ex.error = f"HTTP {r.status_code}: {(await r.aread())[:200].decode(errors='replace')}"
                    ex.end_s = ex.since_t0(time.perf_counter())
                    return
                rate = r.headers.get("x-sample-rate")
                if rate and rate.isdigit():
                    ex.sample_rate = int(rate)
                async for data in r.aiter_raw():
                    ex.add_pcm(data, time.perf_counter())
                ex.end_s = ex.since_t0(time.perf_counter())
        except httpx.HTTPError as e:
            if ex.t0 is None:
                ex.t0 = fallback_t0
            ex.error = f"{type(e).__name__}: {e}"

    async def close(self) -> None:
        await self.client.aclose()
