"""`cadence agent-bench` / `python -m bench.agent`: the sweep. For each N in `--conversations`, N
callers at once (started over `--ramp-s`), each speaking `--turns` questions, the last one
interrupted mid-answer (`--no-barge-in` to skip), against one agent process (agent_proc.py) whose
TTS is `--cadence-url` or an engine started here on `--model`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import random
import re
import secrets
import shutil
import socket
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.child import child_process
from bench.cpu_busy import CpuBusy
from bench.loop_lag import LoopLag, lag_summary

from . import report
from .agent_proc import SECRET_ENV, TRANSPORTS
from .callers import INTERRUPTION, Script, line_clips, twilio_call, webrtc_call, webrtc_clips
from .timeline import GAP_MS, measure_turns

REPO = Path(__file__).resolve().parents[2]
NAME = "agent-bench"


def conversations(text: str) -> list[int]:
    try:
        ns = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--conversations must be a comma-separated list of counts, got {text!r}") from None
    if not ns or any(not 1 <= n <= 500 for n in ns):
        raise ValueError(f"--conversations must be counts in [1, 500], got {text!r}")
    return ns


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transport", choices=TRANSPORTS, default="webrtc",
                   help="webrtc: aiortc callers against the agent server (cadence demo); twilio: the "
                        "Media Streams protocol against the carrier endpoint (cadence phone)")
    p.add_argument("--conversations", type=conversations, default=[1, 10, 20, 50],
                   help="the concurrent conversations to run, e.g. 1,10,20,50")
    p.add_argument("--turns", type=int, default=2, help="questions per caller")
    p.add_argument("--no-barge-in", action="store_true", help="do not interrupt each caller's last answer")
    engine = p.add_mutually_exclusive_group(required=True)
    engine.add_argument("--cadence-url", help="a running `cadence serve`: ws://HOST:PORT/v1/stream")
    engine.add_argument("--model", type=Path, help="start `cadence serve` on this checkpoint")
    p.add_argument("--device", default="cuda", help="with --model: cpu or cuda")
    p.add_argument("--config", type=Path, help="the agent's settings (the same file as cadence demo)")
    p.add_argument("--llm-first-token-ms", type=float, default=200.0, help="the paced stand-in LLM's first-token delay")
    p.add_argument("--llm-tokens-per-s", type=float, default=60.0, help="the paced stand-in LLM's token rate")
    p.add_argument("--no-playout-reports", action="store_true",
                   help="the engine gets no playout reports (the comparison of what the feedback buys)")
    p.add_argument("--stt-workers", type=int, default=None,
                   help="Whisper runs at once in each agent process (a comparison; default: agent/stt.py's)")
    p.add_argument("--gap-ms", type=float, default=GAP_MS, help="an underrun: nothing to play for this long")
    p.add_argument("--ramp-s", type=float, default=2.0, help="callers start at random within this many seconds")
    p.add_argument("--agent-workers", type=int, default=1,
                   help="agent processes sharing the calls on one port, as `cadence phone --workers` and `cadence "
                        "demo --workers` (a WebRTC caller sends its whole offer in one request, so its answer and "
                        "its media stay with one process)")
    p.add_argument("--callers-per-process", type=int, default=10,
                   help="callers sharing one client process (so the clients' own CPU stays off the figures)")
    p.add_argument("--out", type=Path, default=Path("agent-bench"), help="report directory")


def register(subparsers) -> None:
    p = subparsers.add_parser(NAME, help="many live conversations through the agent, measured at the caller")
    add_arguments(p)
    p.set_defaults(func=run)


def _validate(args: argparse.Namespace) -> None:
    if not 1 <= args.turns <= 20:
        raise ValueError(f"--turns must be in [1, 20], got {args.turns}")
    if args.llm_first_token_ms < 0 or args.llm_tokens_per_s <= 0:
        raise ValueError("--llm-first-token-ms must be >= 0 and --llm-tokens-per-s > 0")
    if args.gap_ms <= 0 or args.ramp_s < 0 or args.callers_per_process < 1:
        raise ValueError("--gap-ms must be > 0, --ramp-s >= 0 and --callers-per-process >= 1")
    if not 1 <= args.agent_workers <= 32:
        raise ValueError(f"--agent-workers must be in 1-32, got {args.agent_workers}")
    if args.stt_workers is not None and not 1 <= args.stt_workers <= 16:
        raise ValueError(f"--stt-workers must be in 1-16, got {args.stt_workers}")
    if args.model is not None and not args.model.is_dir():
        raise FileNotFoundError(f"no checkpoint directory at {args.model}")
    if args.config is not None and not args.config.is_file():
        raise FileNotFoundError(f"no config file at {args.config}")
    if args.cadence_url is not None and not re.match(r"wss?://", args.cadence_url):
        raise ValueError(f"--cadence-url must be a ws:// or wss:// URL, got {args.cadence_url!r}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def agent_processes(args: argparse.Namespace, cadence_url: str, max_sessions: int, lag_dir: Path,
                    timeout_s: float = 300):
    """`--agent-workers` agents (agent_proc.py) as children on one port, each writing its loop lag into
    `lag_dir`; yields their base URL once every one takes connections."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", SECRET_ENV: secrets.token_hex(32)}
    with contextlib.ExitStack() as stack:
        for i in range(args.agent_workers):
            cmd = [sys.executable, "-m", "bench.agent.agent_proc", "--transport", args.transport, "--port", str(port),
                   "--cadence-url", cadence_url, "--max-sessions", str(max_sessions),
                   "--loop-lag-file", str(lag_dir / f"agent-loop-lag.{i}.txt"),
                   "--first-token-ms", str(args.llm_first_token_ms), "--tokens-per-s", str(args.llm_tokens_per_s),
                   *(["--config", str(args.config)] if args.config else []),
                   *(["--no-playout-reports"] if args.no_playout_reports else []),
                   *(["--stt-workers", str(args.stt_workers)] if args.stt_workers else [])]
            stack.enter_context(child_process(cmd, "agent-bench agent: ready", what=f"agent process {i}",
                                              timeout_s=timeout_s, cwd=REPO, env=env))
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def engine(args: argparse.Namespace):
    """The TTS URL: the given one, or a `cadence serve` started here (bench/load/server_proc.py)."""
    if args.cadence_url is not None:
        yield args.cadence_url
        return
    from bench.load.server_proc import ServerProcess

    server = ServerProcess(args.model, device=args.device).start()
    try:
        yield server.url.replace("http://", "ws://") + "/v1/stream"
    finally:
        server.stop()


def _callers(transport: str, url: str, script: Script, delays: list[float]) -> tuple[list, list]:
    """One client process's callers, started after their delays; returns their CallLogs and this
    process's loop lag (bench/loop_lag.py) while they ran."""
    texts = [*script.questions, INTERRUPTION]

    async def main():
        if transport == "webrtc":
            clips = webrtc_clips(texts)
            call = webrtc_call
        else:
            clips = await line_clips(texts)
            call = twilio_call

        async def one(delay):
            await asyncio.sleep(delay)
            return await call(url, script, clips)

        watch = LoopLag()
        watcher = watch.start()
        logs = await asyncio.gather(*(one(d) for d in delays))
        watcher.cancel()
        return logs, watch.lags

    return asyncio.run(main())


def run_round(args: argparse.Namespace, url: str, n: int, lag_dir: Path) -> dict:
    from bench.voice.turns import questions

    script = Script(questions=questions(args.turns), barge_in=not args.no_barge_in)
    delays = [random.uniform(0, args.ramp_s) for _ in range(n)]
    size = args.callers_per_process
    groups = [delays[i:i + size] for i in range(0, n, size)]
    began_ms = time.monotonic() * 1e3
    with CpuBusy() as cpu:
        if len(groups) == 1:
            parts = [_callers(args.transport, url, script, groups[0])]
        else:  # spawned, not forked: this process runs threads
            with ProcessPoolExecutor(len(groups), mp_context=multiprocessing.get_context("spawn")) as pool:
                parts = list(pool.map(_callers, *zip(*[(args.transport, url, script, g) for g in groups])))
    logs = [log for part, _lags in parts for log in part]
    records, errors = [], []
    for log in logs:
        if log.error:
            errors.append(log.error)
        records += measure_turns(log.heard, log.turns, log.events, gap_ms=args.gap_ms, end_ms=log.ended_ms)
    row = report.summarise(n, records, errors)
    row["callers_loop_lag_ms"] = lag_summary([lag for _part, lags in parts for lag in lags])
    row["agent_loop_lag_ms"] = lag_summary(read_lags(lag_dir), began_ms, time.monotonic() * 1e3)
    row["machine_cpu_busy"] = cpu.summary()  # callers, agents and engine share the machine's cores
    row["records"] = records
    return row


def read_lags(lag_dir: Path) -> list[tuple[float, float]]:
    """The agents' loop lag lines ("probe began ms, lag ms"), written once a second by agent_proc."""
    time.sleep(1.1)  # the round's last second
    return [(float(at), float(lag)) for path in lag_dir.glob("agent-loop-lag.*.txt")
            for at, lag in (line.split() for line in path.read_text().splitlines())]


def run(args: argparse.Namespace) -> int:
    _validate(args)
    command = "cadence agent-bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == [NAME] else sys.argv[1:])
    rows: list[dict] = []
    data = {"transport": args.transport, "command": command, "playout_reports": not args.no_playout_reports,
            "llm": f"PACED STAND-IN LLM (not a language model): first token after {args.llm_first_token_ms:g} ms, "
                   f"then {args.llm_tokens_per_s:g} tokens/s",
            "tts": f"cadence serve at {args.cadence_url}" if args.cadence_url else
                   f"cadence serve --model {args.model} --device {args.device} (started by the harness)",
            "gap_ms": args.gap_ms, "cpu_count": os.cpu_count(), "agent_workers": args.agent_workers,
            "stt_workers": args.stt_workers, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    lag_dir = Path(tempfile.mkdtemp(prefix="agent-bench-lag-"))
    with engine(args) as cadence_url, agent_processes(args, cadence_url, max(args.conversations), lag_dir) as url:
        for n in args.conversations:
            began = time.monotonic()
            rows.append(run_round(args, url, n, lag_dir))
            print(f"agent-bench: N={n}: {rows[-1]['turns_heard']}/{rows[-1]['turns']} turns heard in "
                  f"{time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
            paths = report.write(data, args.out)  # after every round: a sweep cut short keeps its rounds
    shutil.rmtree(lag_dir, ignore_errors=True)
    print(report.render(data))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0 if all(not r["caller_errors"] for r in rows) else 1
