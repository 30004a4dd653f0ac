"""The first-audio SLO over the real server: a stream that would queue past it gets 503 + Retry-After
at once (HTTP) or an `overloaded` error event (WebSocket), and the admitted one is served whole."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.server import ServerConfig

from .conftest import ServerThread, real_engine

SPEECH = "/v1/audio/speech"
BODY = {"model": "qwen3-tts", "input": "Long enough to keep the one slot busy for a while.", "voice": "ryan",
        "language": "english", "seed": 7, "max_frames": 12, "response_format": "pcm"}


def test_streams_that_would_queue_past_the_slo_are_refused_at_once(tiny_checkpoint):
    # One slot and room for four queued: with the SLO, no finish seen yet means no stream may queue.
    engine = real_engine(tiny_checkpoint, scheduler=SchedulerConfig(max_active_streams=1, max_queued_streams=4,
                                                                    first_audio_slo_s=0.1))

    async def burst(url):
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=10)) as client:
            async def one():
                t0 = time.monotonic()
                r = await client.post(url + SPEECH, json=BODY)
                return r, time.monotonic() - t0
            return await asyncio.gather(*(one() for _ in range(5)))

    with ServerThread(engine, ServerConfig()) as s:
        s.wait_ready()
        results = asyncio.run(burst(s.url))
        served = [r for r, _ in results if r.status_code == 200]
        refused = [(r, took) for r, took in results if r.status_code == 503]
        assert len(served) == 1 and len(refused) == 4, [r.status_code for r, _ in results]
        # whole: its 12 frames (max_frames; random weights) less frame 0, which a built-in voice drops
        assert len(served[0].content) == 11 * 1920 * 2
        slowest_served = max(took for r, took in results if r.status_code == 200)
        for r, took in refused:
            error = r.json()["error"]
            assert error["code"] == "overloaded" and "first-audio SLO of 100 ms" in error["message"], error
            assert int(r.headers["retry-after"]) >= 1
            assert took < slowest_served  # refused at once, not after waiting for the slot
        metrics = httpx.get(s.url + "/metrics").text
        assert "cadence_engine_rejected_slo 4" in metrics, metrics
        s.wait_empty()
        # over a WebSocket: two opens at once, the second refused by an error event
        from websockets.sync.client import connect

        with connect(s.ws_url, proxy=None, open_timeout=30) as conn:
            for i in range(2):
                conn.send(json.dumps({"type": "open", "context_id": f"c{i}", "voice": "ryan", "text": BODY["input"],
                                      "end": True}))
            messages = []
            while not any(m["type"] == "done" for m in messages):
                messages.append(json.loads(conn.recv(timeout=120)))
        refused_ws = [m for m in messages if m["type"] == "error"]
        assert [m["context_id"] for m in refused_ws] == ["c1"], messages
        assert refused_ws[0]["code"] == "overloaded" and refused_ws[0]["retry_after"] >= 1
        s.wait_empty()
