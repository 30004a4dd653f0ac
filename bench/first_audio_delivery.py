"""Where a request's time to first PCM goes outside the engine's GPU work, and the first audio's way
out of the server for settings of `first_audio_yield_ms` (engine/delivery.py) taken in turns on one
server, so that drift and warm-up fall on every setting alike.

The server runs in-process as `cadence serve` runs it (its event loop on a thread of its own, GIL
switch interval 0.5 ms); sequential requests come over a real socket from this process
(bench/socket_latency.py), so the client's clock is the server's. Marks, per stream
(time.perf_counter; the server's by wrapping four methods):
  request   the client has written the request
  handler   the HTTP handler starts (server/http_speech.py `SpeechResponse.started`)
  opened    the engine's stream is made (engine/stream.py `Stream.__init__`, inside `open_stream`)
  drained   the engine thread takes the open command (engine/commands.py `Commands._open`)
  issued    its prefill is handed to the device (engine/executor.py `_mark_issued`)
  posted    the engine thread posts the stream's first audio event (engine/outbox.py `Outbox.post`)
  received  the event loop takes it (engine/stream.py `Stream.receive`)
  sent      the handler's `send` of its body has returned (server/http_speech.py `_note_audio`)
  client    the first PCM byte reaches the client

    python -m bench.first_audio_delivery --model /tmp/ckpt --yields 0,0.3,0.6 --out delivery.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path

MARKS = ("request", "handler", "opened", "drained", "issued", "posted", "received", "sent", "client")
SPANS = (*pairwise(MARKS), ("posted", "client"), ("request", "client"))


class Marks:
    """First time of each mark per stream id; wraps the three methods (`install`) until `remove`."""

    def __init__(self):
        self.at: dict[str, dict[str, float]] = {}
        self._undo = []

    def mark(self, stream_id: str, name: str, at: float | None = None) -> None:
        self.at.setdefault(stream_id, {}).setdefault(name, time.perf_counter() if at is None else at)

    def _wrap(self, owner, method: str, name: str, stream_id) -> None:
        """owner.method (a class's method, or a module's function: its first argument is `obj` then)
        marked `name` for stream_id(its arguments) before each call."""
        original = getattr(owner, method)

        def wrapped(obj, *args, **kwargs):
            self.mark(stream_id(obj, *args), name)
            return original(obj, *args, **kwargs)

        setattr(owner, method, wrapped)
        self._undo.append((owner, method, original))

    def install(self) -> Marks:
        from tts_engine.engine import executor
        from tts_engine.engine.commands import Commands
        from tts_engine.engine.outbox import Outbox
        from tts_engine.engine.stream import Stream
        from tts_engine.server.http_speech import SpeechResponse

        self._wrap(Stream, "__init__", "opened", lambda stream, engine, stream_id, loop: stream_id)
        self._wrap(Commands, "_open", "drained", lambda commands, handle, *rest: handle.id)
        self._wrap(executor, "_mark_issued", "issued", lambda entries, stream_id: stream_id)  # a module's function
        self._wrap(Outbox, "post", "posted", lambda box, receiver, event: receiver.id)
        self._wrap(Stream, "receive", "received", lambda stream, event: stream.id)
        self._wrap(SpeechResponse, "_note_audio", "sent", self._handler_mark)
        return self

    def _handler_mark(self, response) -> str:
        self.mark(response.stream.id, "handler", response.started)
        return response.stream.id

    def client(self, stream_ids: list[str], times: list[tuple[float, float]]) -> None:
        """The client's (request sent, first PCM byte) times of these streams, in order."""
        for sid, (sent, first) in zip(stream_ids, times, strict=True):
            self.mark(sid, "request", sent)
            self.mark(sid, "client", first)

    def remove(self) -> None:
        for owner, method, original in reversed(self._undo):
            setattr(owner, method, original)
        self._undo.clear()

    def spans_ms(self, stream_ids: list[str]) -> dict[str, dict[str, float]]:
        """p50 and mean of each span over the streams that have every mark."""
        rows = [self.at[s] for s in stream_ids if all(m in self.at.get(s, {}) for m in MARKS)]
        out = {"streams": len(rows)}
        for a, b in SPANS:
            d = [(r[b] - r[a]) * 1e3 for r in rows]
            out[f"{a}_to_{b}_ms"] = {"p50": round(statistics.median(d), 4), "mean": round(statistics.fmean(d), 4)}
        return out


def measure(engine, yields_ms: list[float], requests: int, rounds: int) -> dict:
    """Serve `engine` in-process; per round, `requests` sequential requests under each setting."""
    import uvicorn

    from bench.socket_latency import corpus, socket_requests, wait_ready
    from tts_engine.server.app import create_app
    from tts_engine.server.config import ServerConfig
    from tts_engine.server.run import bind, uvicorn_config

    cfg = ServerConfig(host="127.0.0.1", port=0, log_level="warning")
    sock = bind(cfg)
    port = sock.getsockname()[1]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(5e-4)  # as `cadence serve` sets it (--gil-switch-ms 0.5)
    server = uvicorn.Server(uvicorn_config(create_app(engine, cfg), cfg))  # starts and stops the engine
    thread = threading.Thread(target=server.run, kwargs=dict(sockets=[sock]), name="uvicorn")
    thread.start()
    marks = Marks().install()
    results = {y: {"streams": [], "first_pcm_ms_p50": []} for y in yields_ms}
    try:
        wait_ready(port)
        for _ in range(rounds):
            for y in yields_ms:
                engine.delivery.first_audio_yield_s = y / 1e3
                before, times = set(marks.at), []
                client = socket_requests(port, requests, corpus(), times)
                streams = [s for s in marks.at if s not in before][5:]  # after its 5 warm-ups
                marks.client(streams, times)
                results[y]["streams"] += streams
                results[y]["first_pcm_ms_p50"].append(round(client["first_pcm_ms_p50"], 3))
                print(f"yield {y} ms: first PCM p50 {client['first_pcm_ms_p50']:.3f} ms", flush=True)
    finally:
        marks.remove()
        server.should_exit = True
        thread.join(30)
        sys.setswitchinterval(switch)
    return {str(y): {**marks.spans_ms(r["streams"]), "first_pcm_ms_p50_by_round": r["first_pcm_ms_p50"]}
            for y, r in results.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--yields", default="0,0.3,0.6", help="first_audio_yield_ms settings, comma-separated")
    p.add_argument("--requests", type=int, default=50, help="sequential requests per setting and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    import torch

    from tts_engine.engine.core import StreamingEngine

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        torch.set_num_threads(1)
    engine = StreamingEngine(args.model, device=device, freeze_gc=True)
    result = {"device": device, "requests": args.requests, "rounds": args.rounds,
              "by_yield_ms": measure(engine, [float(y) for y in args.yields.split(",")], args.requests,
                                     args.rounds)}
    print(f"first audio delivery: {json.dumps(result['by_yield_ms'])}", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
