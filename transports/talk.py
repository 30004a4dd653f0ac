"""`cadence talk`: the voice agent on this machine's own microphone and speaker.

The same settings as `cadence demo` (`--config FILE.toml`, CADENCE_* environment variables;
agent/demo.py's load_config) and the same offline defaults: Whisper tiny.en hears, the OFFLINE
SCRIPTED LLM answers, the Piper fallback voice speaks unless a Cadence engine is configured.
Echo (transports/local/echo.py): by default the microphone is muted while the bot is audible;
`--aec` cancels the bot's voice out of the microphone instead, so the user may interrupt;
`--headphones` takes the microphone as is (full-duplex barge-in).

Exit status: 0 after Ctrl-C (or SIGTERM), 1 when an audio device is lost mid-call (a line says
which), 2 for a user error (no such device, no audio device at all, a bad config file).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

HEALTH_EVERY_S = 0.25
STOP_TIMEOUT_S = 10.0


def register(subparsers) -> None:
    p = subparsers.add_parser("talk", help="talk to the voice agent through this machine's microphone and speaker",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, help="TOML settings file (the same as cadence demo's)")
    p.add_argument("--flow", type=Path, default=None, help="a structured conversation (YAML or JSON; docs/flows.md)")
    p.add_argument("--list-devices", action="store_true", help="list the audio devices and exit")
    p.add_argument("--input", help="microphone: a device index or name (default: the system's)")
    p.add_argument("--output", help="speaker: a device index or name (default: the system's)")
    echo = p.add_mutually_exclusive_group()
    echo.add_argument("--aec", action="store_true",
                      help="cancel the bot's voice out of the microphone (WebRTC AEC), so you can interrupt it")
    echo.add_argument("--headphones", action="store_true",
                      help="no echo path: the microphone stays open while the bot speaks (barge-in)")
    p.set_defaults(func=run)


def run(args) -> int:
    from agent.demo import load_config

    from .local.devices import list_devices, resolve
    from .local.echo import webrtc_canceller

    if args.list_devices:
        print(list_devices())
        return 0
    if args.config is not None and not args.config.is_file():
        raise FileNotFoundError(f"config file {args.config} does not exist")
    cfg = load_config(args.config, flow=str(args.flow) if args.flow else None)
    if cfg.flow is not None:
        from flows.loader import load_flow

        load_flow(cfg.flow)  # a bad flow file fails now, with its file, line and key
    if not cfg.has_tts:
        raise ValueError("cadence talk needs a voice: configure cadence_url or speech_base_url, or keep "
                         "fallback_tts = 'piper'")
    mic, speaker = resolve(args.input, "input"), resolve(args.output, "output")
    mode = "aec" if args.aec else "headphones" if args.headphones else "gate"
    canceller = webrtc_canceller() if mode == "aec" else None
    return asyncio.run(talk(cfg, mic, speaker, mode, canceller=canceller))


async def talk(cfg, mic, speaker, mode: str, *, canceller=None, out=sys.stderr) -> int:
    """Run one local call until Ctrl-C/SIGTERM (0) or a lost device (1)."""
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.workers.runner import WorkerRunner

    from agent.pipeline import build_pipeline, choose_tts, latency_observer, make_llm
    from agent.server import describe
    from agent.stt import make_stt
    from flows.session import attach as attach_flow

    from .local.playout import HardwarePlayoutReporter
    from .local.status import StatusLine
    from .local.transport import LocalAudioTransport

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    transport = LocalAudioTransport(mic, speaker, echo_mode=mode, canceller=canceller)
    stt = await asyncio.to_thread(make_stt, cfg)
    tts, tts_in_use = await asyncio.to_thread(choose_tts, cfg)
    if tts is None:
        raise ValueError("cadence talk needs a voice (no TTS is configured)")
    llm = make_llm(cfg)
    output = transport.output()
    pipeline, _ = build_pipeline(cfg, input=transport.input(), output=output, stt=stt, llm=llm, tts=tts,
                                 playout=lambda service: HardwarePlayoutReporter(service, output))
    status = StatusLine(write, output.buffer.onset_after, tty=out.isatty())
    worker = PipelineWorker(pipeline, params=PipelineParams(enable_metrics=True),
                            observers=[latency_observer(), status], enable_rtvi=False, idle_timeout_secs=None)
    attach_flow(worker, cfg, llm=llm, pipeline=pipeline, tts=tts, transport=transport)  # no-op without cfg.flow
    what = describe(cfg)
    echo = {"gate": "the microphone is muted while the bot speaks (use --aec or --headphones to interrupt it)",
            "aec": "echo cancellation on (WebRTC AEC3): you can interrupt the bot",
            "headphones": "headphones: the microphone stays open, you can interrupt the bot"}[mode]
    write(f"cadence talk: microphone {mic.name} ({mic.sample_rate} Hz), speaker {speaker.name} "
          f"({speaker.sample_rate} Hz); {echo}\n"
          f"cadence talk: STT {what['stt']}; LLM {what['llm']}; TTS {tts_in_use}\n"
          "cadence talk: speak now (Ctrl-C to stop)\n")
    status.show("listening")

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    lost: str | None = None
    try:
        while not running.done() and not stop.is_set():
            lost = transport.health()
            if lost is not None:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HEALTH_EVERY_S)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if not running.done():
            await worker.cancel()
            try:
                await asyncio.wait_for(running, STOP_TIMEOUT_S)
            except TimeoutError:
                write("\ncadence talk: the pipeline did not stop in time\n")
    if lost is not None:
        write(f"\ncadence talk: {lost}; ending the call\n")
        return 1
    write("\ncadence talk: stopped\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cadence")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["talk", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"cadence talk: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
