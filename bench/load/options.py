"""`cadence bench` arguments. Standard library only: the `cadence` parser imports this module when
it is built, and everything heavy (httpx, websockets, numpy, matplotlib) loads only in `main`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def float_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def char_range(text: str) -> tuple[int, int]:
    values = int_list(text)
    if len(values) != 2 or not 0 < values[0] < values[1]:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX with 0 < MIN < MAX, got {text!r}")
    return values[0], values[1]


def json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of a running server (http://host:port)")
    where.add_argument("--model", type=Path,
                       help="checkpoint directory: start a fresh `cadence serve` on it for every trial")
    p.add_argument("--device", default="cpu", help="with --model: the server's device (cpu or cuda)")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="with --model: one more `cadence serve` argument (repeatable), "
                        "e.g. --serve-arg=--max-active-streams=64")
    p.add_argument("--target", choices=["http", "ws"], default="http",
                   help="http: OpenAI POST /v1/audio/speech; ws: Cadence's WebSocket /v1/stream")
    p.add_argument("--ws-mode", choices=["whole", "words"], default="whole",
                   help="ws: send the whole text at once, or word by word like an LLM")
    p.add_argument("--word-interval-ms", type=float, default=10.0, help="ws words: time between words")
    p.add_argument("--ws-contexts-per-connection", type=int, default=4,
                   help="ws: concurrent contexts multiplexed on one connection")
    p.add_argument("--rates", type=float_list, default=[1.0], help="requests per second, e.g. 1,5,10,20,30,40")
    p.add_argument("--seeds", type=int_list, default=[0], help="arrival/text seeds; each is one trial per rate")
    p.add_argument("--warmup", type=float, default=30.0, help="warm-up seconds per trial (sent, not counted)")
    p.add_argument("--duration", type=float, default=300.0, help="measured seconds per trial")
    p.add_argument("--max-join", type=int, default=3, help="texts are 1..N joined Harvard sentences")
    p.add_argument("--text-chars", type=char_range, default=None, metavar="MIN,MAX",
                   help="the long-form mix instead: paragraphs of MIN..MAX characters, e.g. 500,1500")
    p.add_argument("--voice", default="ryan")
    p.add_argument("--language", default="english", help="'' leaves the field out")
    p.add_argument("--request-model", default=None, help="the request's `model` field (other servers need it)")
    p.add_argument("--extra", type=json_object, default={},
                   help="JSON object merged into every request body / WebSocket open (e.g. '{\"seed\": 1}')")
    p.add_argument("--sample-rate", type=int, default=24000,
                   help="PCM rate when the server sends no X-Sample-Rate header (WebSocket: always)")
    p.add_argument("--request-timeout", type=float, default=120.0, help="seconds before a request counts as failed")
    p.add_argument("--slo-ms", type=float, default=100.0, help="p95 audible TTFA that a sustained rate must meet")
    p.add_argument("--gpu-price", type=float, default=None, help="GPU price per hour (USD): report cost per 1M chars")
    p.add_argument("--client-processes", type=int, default=1, metavar="N",
                   help="client processes sharing the arrivals (one Python process falls behind its schedule "
                        "past ~100-150 req/s of streaming audio: see send lag in the report)")
    p.add_argument("--wer", type=int, default=0, metavar="N",
                   help="transcribe the first N measured requests of each trial and report WER (real weights)")
    p.add_argument("--wer-model", default=None, help="faster-whisper model dir (default: bundled tiny.en)")
    p.add_argument("--wer-device", default="cpu")
    p.add_argument("--label", default="", help="free text for the report (hardware, model, commit)")
    p.add_argument("--out", type=Path, required=True, help="directory for results.json, report.md and plots")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots (no matplotlib needed)")
