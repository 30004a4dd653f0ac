"""The benchmark's agent process: the real agent server (`agent.server.create_app`, as `cadence demo`
runs it, or the carrier endpoint `transports.telephony.endpoint.create_app`, as `cadence phone`
runs it) under uvicorn, with three substitutions made here and nowhere else:

- the LLM is the PACED STAND-IN (`stand_in.PacedLLM`): no hosted LLM is reachable from a benchmark
  machine, and a fixed first-token delay and token rate make runs comparable;
- `--no-playout-reports` drops the playout reports to the engine (the N = 20 comparison only:
  the engine's deadline policy then runs without the transport's clock); `--stt-workers` sets how
  many Whisper runs one process makes at once (agent/stt.py's STT_WORKERS; a comparison only);
- turn-taking as before the reply hold (agent/reply_hold.py): the turn ends 0.4 s after the VAD's
  stop and the reply plays as soon as it is heard. With the hold, the LLM's first token would come
  inside the user's pause and the voice wait for its end: token -> audible would measure the hold,
  not the engine and the transport.

Three observations are added, which change nothing the agent does: the TTS service stamps the first
engine audio of each reply as it arrives (`stand_in.TTS_FIRST_AUDIO`, so a turn's latency splits
into the engine's part and the rest), the recogniser stamps each final transcript
(`stand_in.STT_FINAL`), and `--loop-lag-file` receives this process's event-loop lateness
(bench/loop_lag.py) as "probe began ms, lag ms" lines, once a second.

    python -m bench.agent.agent_proc --transport webrtc|twilio --port P --cadence-url URL [...]
prints "agent-bench agent: ready" on stderr once it takes connections.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from pathlib import Path

TRANSPORTS = ("webrtc", "twilio")
SECRET_ENV = "CADENCE_BENCH_STREAM_SECRET"


def _substitute(first_token_s: float, tokens_per_s: float, playout_reports: bool) -> None:
    import agent.pipeline
    import transports.telephony.call
    from agent.cadence_tts import CadenceTTSService
    from agent.stt import IncrementalWhisperSTT

    from .stand_in import PacedLLM, stamp_final_transcripts, stamp_first_engine_audio

    def make_llm(_cfg):
        return PacedLLM(first_token_s=first_token_s, tokens_per_s=tokens_per_s)

    agent.pipeline.make_llm = make_llm  # agent.server.run_session imports it per session
    transports.telephony.call.make_llm = make_llm
    stamp_first_engine_audio(CadenceTTSService)
    stamp_final_transcripts(IncrementalWhisperSTT)
    if not playout_reports:
        async def no_report(self, context_id: str, played_s: float) -> None:
            return None

        CadenceTTSService.report_playout = no_report


def build_app(args: argparse.Namespace, ready: asyncio.Event):
    from agent.demo import load_config

    cfg = load_config(args.config, cadence_url=args.cadence_url)
    # The engine must answer: a silent fallback to the CPU Piper voice would measure the wrong thing.
    cfg = dataclasses.replace(cfg, fallback_tts="none", llm_base_url=None, user_speech_timeout_s=0.4,
                              reply_hold_s=0.0).validate()
    _substitute(args.first_token_ms / 1e3, args.tokens_per_s, not args.no_playout_reports)
    if args.stt_workers is not None:  # the comparison's setting, before the model loads
        import agent.stt

        agent.stt.STT_WORKERS = args.stt_workers
    if args.transport == "webrtc":
        from agent.server import create_app

        def on_ready(readiness):
            if readiness.error is None:
                ready.set()
            else:
                print(f"agent-bench agent: models failed to load: {readiness.error}", file=sys.stderr, flush=True)

        return create_app(cfg, max_sessions=args.max_sessions, on_ready=on_ready)
    from transports.telephony.endpoint import create_app

    ready.set()  # its lifespan loads the shared models before the server listens
    secret = os.environ.get(SECRET_ENV)  # one for every agent process: a webhook's token opens a stream on any
    return create_app(cfg, max_calls=args.max_sessions, stream_secret=bytes.fromhex(secret) if secret else None)


async def write_loop_lag(path: Path) -> None:
    from bench.loop_lag import LoopLag

    watch, written = LoopLag(), 0
    watch.start()
    with path.open("a") as f:
        while True:
            await asyncio.sleep(1.0)
            lags, written = watch.lags[written:], len(watch.lags)
            f.write("".join(f"{at:.1f} {lag:.2f}\n" for at, lag in lags))
            f.flush()


async def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from tts_engine.server.config import ServerConfig
    from tts_engine.server.run import bind

    if args.loop_lag_file is not None:
        asyncio.get_running_loop().create_task(write_loop_lag(args.loop_lag_file))
    ready = asyncio.Event()
    app = build_app(args, ready)
    # Other agent processes may take the same port (`--agent-workers`): the kernel shares the callers out
    # among those listening, and this one listens once its models are loaded.
    sock = bind(ServerConfig(host="127.0.0.1", port=args.port), reuse_port=True, listen=False)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=3))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task
            raise SystemExit("agent-bench agent: the server did not start")
        await asyncio.sleep(0.05)
    await ready.wait()
    print("agent-bench agent: ready", file=sys.stderr, flush=True)
    await task


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.agent.agent_proc")
    p.add_argument("--transport", choices=TRANSPORTS, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cadence-url", required=True)
    p.add_argument("--config", type=Path)
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument("--first-token-ms", type=float, default=200.0)
    p.add_argument("--tokens-per-s", type=float, default=60.0)
    p.add_argument("--no-playout-reports", action="store_true")
    p.add_argument("--loop-lag-file", type=Path)
    p.add_argument("--stt-workers", type=int, default=None)
    asyncio.run(serve(p.parse_args(argv)))


if __name__ == "__main__":
    main()
