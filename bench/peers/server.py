"""What both peer adapters share: our request checks, the frame budget, one worker, the PCM body.

  POST /v1/audio/speech   our server's request body (tts_engine/server/schemas.py); served only as
                          response_format "pcm", stream_format "audio": 200 with chunked raw s16le
                          mono PCM at 24 kHz, the status line sent with the first audio
  GET  /health, /ready    200 once the model is loaded and warm (the port opens only then)

- Checks: our server's own schema and checks, so a bad request gets the same 422 body
  `{"error": {"code", "message", "param"}}` from every system under test; then the peer's own
  voice/language lists. Fields a peer cannot honour (`chunk_schedule`, other formats) are refused,
  not ignored.
- Length: random weights never emit EOS on purpose, so, as our engine does (checkpoint.py
  `speech_frames`, engine/core.py forced_frames), a request on a checkpoint with a
  `random_weights` block runs exactly `speech_frames(text)` frames with EOS masked: the work a
  real model would do for that text. A real checkpoint stops on EOS.
- Concurrency: one worker thread runs every model call, one request at a time, in arrival order.
  Neither package can run two generations on one loaded model at once (the official one has no
  server or queue; faster-qwen3-tts owns one static KV cache and one CUDA graph), so requests that
  arrive meanwhile wait, and the benchmark measures that wait. `--max-queue` optionally refuses
  (503 + Retry-After) requests past that many unfinished ones; the packages have no such cap.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import uvicorn
from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tts_engine.checkpoint import DEFAULT_CHARS_PER_SECOND, speech_frames
from tts_engine.config import ModelConfig
from tts_engine.engine.audio import SAMPLE_RATE, to_s16le
from tts_engine.server.config import ServerConfig
from tts_engine.server.errors import ApiError
from tts_engine.server.http_speech import ENDPOINT, check_content_type
from tts_engine.server.schemas import SpeechRequest, check_speech_request, parse_json_object, validate_model

log = logging.getLogger("bench.peers")
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty")


@dataclass(frozen=True)
class Job:
    text: str
    voice: str
    language: str  # lower case, "auto" included
    instruct: str | None
    frames: int | None  # exact frame count (random weights, EOS masked); None: stop on EOS
    max_frames: int | None  # the request's cap, when frames is None
    sampling: dict[str, float | int]  # only what the request set: the peer's defaults otherwise
    seed: int | None


class Peer(Protocol):
    name: str

    def check(self, job: Job) -> None:
        """Raise ValueError (-> 422) for what this package would refuse."""

    def synthesize(self, job: Job) -> Iterator[np.ndarray]:
        """Float PCM at 24 kHz, in as many pieces as the package gives them."""


def check_voice(job: Job, speakers: set[str], languages: set[str]) -> None:
    """ValueError (-> 422) for a voice or language the peer's model does not list."""
    if speakers and job.voice not in speakers:
        raise ValueError(f"unknown voice {job.voice!r}; choose one of: {', '.join(sorted(speakers))}")
    if languages and job.language not in languages:
        raise ValueError(f"unknown language {job.language!r}; supported: {', '.join(sorted(languages))}")


def check_sample_rate(sample_rate: int) -> None:
    if sample_rate != SAMPLE_RATE:
        raise RuntimeError(f"the peer produced {sample_rate} Hz audio; the adapter serves {SAMPLE_RATE} Hz PCM")


def forced_frames(cfg: ModelConfig, text: str) -> int | None:
    if not cfg.is_random:
        return None
    return speech_frames(text, float(cfg.random_weights.get("chars_per_second", DEFAULT_CHARS_PER_SECOND)))


def make_job(req: SpeechRequest, text: str, cfg: ModelConfig) -> Job:
    """Raises ApiError(invalid_request) for what the adapters do not serve."""
    refused = {"response_format": req.response_format != "pcm", "stream_format": req.stream_format != "audio",
               "stream": not req.stream, "chunk_schedule": req.chunk_schedule is not None}
    for param, bad in refused.items():
        if bad:
            raise ApiError("invalid_request", f"{param} {getattr(req, param)!r} is not served by peer adapters: they "
                           "stream raw PCM (response_format 'pcm', stream_format 'audio', stream true) and have "
                           "no chunk schedule", param=param)
    options = req.stream_options(cfg)  # voice, language and sampling checks, as in our server
    frames = forced_frames(cfg, text)
    if frames is not None and req.max_frames is not None:
        frames = min(frames, req.max_frames)
    sampling = {k: getattr(req, k) for k in SAMPLING_FIELDS if getattr(req, k) is not None}
    voice = options.voice
    return Job(text, voice.speaker.lower(), voice.language.lower(), voice.instruct, frames, req.max_frames,
               sampling, req.seed)


_END = object()


class Worker:
    """One thread for every model call: loading, warm-up and requests, one at a time, in order.

    One thread also keeps a package's thread-bound state (CUDA graphs captured on it, the current
    device) where it was made."""

    def __init__(self, name: str):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.unfinished = 0  # admitted requests still waiting or running (event-loop thread only)

    def call(self, fn: Callable, *args):
        return self._pool.submit(fn, *args).result()

    async def stream(self, peer: Peer, job: Job) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        out: asyncio.Queue = asyncio.Queue()
        gone = threading.Event()  # the client left: skip or stop the work

        def post(fn, *args) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping
                loop.call_soon_threadsafe(fn, *args)

        def run() -> None:
            try:
                if gone.is_set():
                    return
                if job.seed is not None:
                    torch.manual_seed(job.seed)  # both packages sample from torch's global generators
                pieces = peer.synthesize(job)
                try:
                    for pcm in pieces:
                        post(out.put_nowait, to_s16le(pcm))
                        if gone.is_set():
                            break
                finally:
                    pieces.close()
            except Exception as e:
                log.exception("%s failed", peer.name)
                post(out.put_nowait, e)
            finally:
                post(out.put_nowait, _END)
                post(self._finished)

        self.unfinished += 1
        self._pool.submit(run)
        try:
            while (item := await out.get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            gone.set()

    def _finished(self) -> None:
        self.unfinished -= 1


@dataclass(frozen=True)
class Limits:
    max_queue: int = 0  # 0: no cap
    max_text_chars: int = ServerConfig.max_text_chars
    max_body_bytes: int = ServerConfig.max_body_bytes


def create_app(peer: Peer, worker: Worker, cfg: ModelConfig, limits: Limits) -> FastAPI:
    app = FastAPI(title=f"{peer.name} (peer adapter)", docs_url=None, redoc_url=None, openapi_url=None)

    async def api_error(request: Request, exc: ApiError) -> Response:
        return JSONResponse(exc.http_body(), exc.http_status, headers=exc.http_headers())

    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
        return JSONResponse(ApiError(code, str(exc.detail)).http_body(), exc.status_code)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(HTTPException, http_error)

    async def speech(request: Request) -> Response:
        check_content_type(request.headers.get("content-type"))
        body = await request.body()
        if len(body) > limits.max_body_bytes:
            raise ApiError("payload_too_large", f"the body has {len(body)} bytes; the limit is {limits.max_body_bytes}")
        req = validate_model(SpeechRequest, parse_json_object(body, "request body"))
        job = make_job(req, check_speech_request(req, limits.max_text_chars), cfg)
        try:
            peer.check(job)
        except ValueError as e:
            raise ApiError("invalid_request", f"{peer.name}: {e}") from None
        if limits.max_queue and worker.unfinished >= limits.max_queue:
            raise ApiError("overloaded", f"{worker.unfinished} requests are waiting or running (--max-queue)",
                           retry_after_s=1.0)
        pieces = worker.stream(peer, job)
        try:  # the status line waits for the first audio, as in our server: a failure is still a 500
            first = await anext(pieces, b"")
        except Exception as e:
            raise ApiError("engine_error", f"{peer.name} failed: {e}") from None
        headers = {"x-sample-rate": str(SAMPLE_RATE), "x-peer": peer.name, "cache-control": "no-store"}
        return StreamingResponse(_prepend(first, pieces), media_type="audio/pcm", headers=headers)

    async def health() -> Response:
        return JSONResponse({"status": "ok", "peer": peer.name, "unfinished": worker.unfinished})

    app.add_api_route(ENDPOINT, speech, methods=["POST"])
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/ready", health, methods=["GET"])
    return app


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        if first:
            yield first
        async for piece in rest:
            yield piece
    finally:
        await rest.aclose()  # tells the worker to stop if the client went away


# --- command line ----------------------------------------------------------------------------

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def arg_parser(module: str, description: str, port: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m bench.peers.{module}", description=description)
    p.add_argument("--model", required=True, type=Path,
                   help="checkpoint directory in the official layout (cadence make-checkpoint writes one)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--dtype", choices=list(DTYPES), default=None,
                   help="default: the checkpoint's torch_dtype on CUDA, float32 on CPU")
    p.add_argument("--attn", default="sdpa", help="attn_implementation for from_pretrained (default: sdpa)")
    p.add_argument("--max-queue", type=int, default=0,
                   help="answer 503 past this many unfinished requests (default 0: no cap, as the package has none)")
    p.add_argument("--max-text-chars", type=int, default=ServerConfig.max_text_chars)
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="skip the warm-up request before the port opens")
    return p


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json there")
    args.config = ModelConfig.from_file(args.model / "config.json")
    if args.config.tts_model_type != "custom_voice":
        parser.error(f"--model {args.model}: a {args.config.tts_model_type} checkpoint; the adapters serve "
                     "CustomVoice checkpoints (built-in voices), as the benchmark does")
    if args.max_queue < 0:
        parser.error("--max-queue must be >= 0")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.dtype is None:
        on_cuda = args.device.startswith("cuda")
        stored = args.config.raw.get("torch_dtype")
        args.dtype = (stored if stored in DTYPES else "bfloat16") if on_cuda else "float32"
    args.torch_dtype = DTYPES[args.dtype]
    return args


def serve(args: argparse.Namespace, name: str, load: Callable[[], Peer]) -> None:
    # The packages log every config default at INFO; only our own progress is worth that level.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    worker = Worker(name)
    started = time.perf_counter()
    try:
        peer = worker.call(load)
    except ImportError as e:
        # The whole chain to the log: a lazy import (transformers' "Could not import module
        # 'AutoProcessor'") names only the symbol, its cause names the module that failed.
        log.error("%s failed to import", name, exc_info=e)
        raise SystemExit(f"{name}: {e}. Its packages come as wheels: bench/peers/wheels.sh, then "
                         f"bench/peers/start.sh {name} ... (docs/peers.md)") from e
    if args.warmup:
        worker.call(_warm_up, peer, args.config)
    log.info("%s ready on %s (%s) in %.1f s: http://%s:%d%s", name, args.device, args.dtype,
             time.perf_counter() - started, args.host, args.port, ENDPOINT)
    limits = Limits(args.max_queue, args.max_text_chars)
    uvicorn.run(create_app(peer, worker, args.config, limits), host=args.host, port=args.port,
                log_level="warning", access_log=False)


def _warm_up(peer: Peer, cfg: ModelConfig) -> None:
    """One short request before the port opens: first-call costs (allocator, kernels, a package's
    graph capture) are not what the benchmark compares."""
    text = "Warm-up."
    job = Job(text, cfg.speakers[0], "auto", None, forced_frames(cfg, text), None, {}, 0)
    for _ in peer.synthesize(job):
        pass
