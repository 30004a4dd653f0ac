"""`cadence phone`: the phone bot. One process serves the carrier endpoint (call webhooks for
Twilio, Telnyx and Plivo, and the media stream WebSocket they connect to) and the SIP listener (a
PBX or SIP trunk calls it directly), each call with its own pipeline. `--workers N` adds N - 1
processes that serve the carrier endpoint on the same port (SO_REUSEPORT: the kernel shares the
connections out), for more calls than one Python event loop carries; SIP stays in the first.

The same settings as `cadence demo` (`--config FILE.toml`, CADENCE_* environment variables;
agent/demo.py's load_config) and the same offline defaults: Whisper tiny.en hears, the OFFLINE
SCRIPTED LLM answers, the Piper fallback voice speaks unless a Cadence engine is configured.
Its own settings (SIP transports, allow-list, registration, webhook keys) are the file's `[phone]`
table (transports/telephony/settings.py). Set-up per carrier and for a SIP trunk: docs/telephony.md.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import sys
from pathlib import Path


def _port_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    if not sep or not low.isdigit() or not high.isdigit():
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH, e.g. 20000-30000, got {text!r}")
    return int(low), int(high)


def _check_udp(host: str, port: int) -> None:
    """An address in use is a clear error now, not a failed start after the models load."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise ValueError(f"cannot listen for SIP on udp {host}:{port}: {e.strerror}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser("phone", help="run the phone bot: carrier media streams (Twilio, Telnyx, Plivo) "
                              "and SIP calls (docs/telephony.md)", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, help="TOML settings file (the same as cadence demo's)")
    p.add_argument("--flow", type=Path, default=None, help="a structured conversation (YAML or JSON; docs/flows.md)")
    p.add_argument("--cadence-url", default=None, help="a running engine's ws://.../v1/stream")
    p.add_argument("--host", default="127.0.0.1", help="address of the carrier endpoint and the SIP listener")
    p.add_argument("--port", type=int, default=8765, help="carrier endpoint (HTTP + WebSocket) port; 0 picks one")
    p.add_argument("--public-url", default=None,
                   help="the wss://.../ws URL carriers reach the media stream at (default: from each webhook's Host)")
    p.add_argument("--sip-port", type=int, default=5060, help="SIP (UDP) port; 0 picks one")
    p.add_argument("--no-sip", action="store_true", help="serve the carrier endpoint only")
    p.add_argument("--sip-advertise", default=None,
                   help="the address written into SDP/Contact (behind NAT, or with --host 0.0.0.0)")
    p.add_argument("--rtp-ports", type=_port_range, default=(20000, 30000), help="RTP port range (default 20000-30000)")
    p.add_argument("--max-calls", type=int, default=8, help="calls at once, per listener (default 8)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes answering media streams on the one port, each with --max-calls (default 1)")
    p.add_argument("--sip-transport", action="append", choices=["udp", "tcp"], default=None,
                   help="SIP transport, repeatable (default: the config's sip_transports, else udp)")
    p.add_argument("--sip-allow", action="append", default=None, metavar="CIDR",
                   help="a network INVITEs may come from, repeatable (others get 403; default: the config's)")
    p.add_argument("--rtp-timeout", type=float, default=None, metavar="S",
                   help="hang up a call whose caller sent no RTP for S seconds (default 20)")
    p.set_defaults(func=run)


def _loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


def _warn_if_open(host: str, settings, no_sip: bool) -> None:
    """Listening beyond localhost with no protection configured is allowed, but said."""
    if _loopback(host):
        return
    open_webhooks = [c for c in ("twilio", "telnyx", "plivo", "exotel") if not settings.keys.configured(c)]
    if open_webhooks:
        print(f"cadence phone: warning: webhooks of {', '.join(open_webhooks)} are not verified (no key in "
              "[phone]); media streams still need a webhook's one-time token", file=sys.stderr)
    if not no_sip and not settings.sip_allow:
        print("cadence phone: warning: SIP accepts INVITEs from anyone (set [phone] sip_allow or --sip-allow)",
              file=sys.stderr)


class _Ready:
    """Prints where the bot answers once everything is listening."""

    def __init__(self, host: str, port: int, sip, workers: int = 1):
        self.host, self.port, self.sip, self.workers = host, port, sip, workers

    async def start(self) -> None:
        shown = "localhost" if self.host in ("0.0.0.0", "::") else self.host
        base = f"http://{shown}:{self.port}"
        print(f"cadence phone: call webhooks {base}/twilio, {base}/telnyx, {base}/plivo; media stream "
              f"ws://{shown}:{self.port}/ws" + (f" ({self.workers} processes)" if self.workers > 1 else ""),
              file=sys.stderr)
        if self.sip is not None:
            at = self.sip.advertised_ip or shown
            print(f"cadence phone: SIP on {'+'.join(self.sip.transports)} {self.sip.host}:{self.sip.port} "
                  f"(call sip:bot@{at}:{self.sip.port})", file=sys.stderr)
            if self.sip.register is not None:
                print(f"cadence phone: registering {self.sip.register.aor} at {self.sip.register.registrar}",
                      file=sys.stderr)
        print("cadence phone: ready (Ctrl-C to stop)", file=sys.stderr, flush=True)

    async def stop(self) -> None:
        pass


def _settings(args):
    """The agent's config and the phone's own settings, checked (a bad flow fails here, not in a call)."""
    from agent.demo import load_config

    from .telephony.settings import load_phone_settings

    agent_file, settings = load_phone_settings(args.config, dict(os.environ))
    cfg = load_config(agent_file, cadence_url=args.cadence_url, flow=str(args.flow) if args.flow else None)
    if cfg.flow is not None:
        from flows.loader import load_flow

        load_flow(cfg.flow)  # a bad flow file fails now, with its file, line and key, not inside a call
    if not cfg.has_tts:
        raise ValueError("a phone bot needs a voice: configure cadence_url or speech_base_url, or keep "
                         "fallback_tts = 'piper'")
    return cfg, settings


def _uvicorn(app):
    import uvicorn

    from agent.demo import _Server

    # The standard asyncio loop: aiosipua 0.7.1 asserts asyncio's own DatagramTransport class, which
    # uvloop's UDP transport is not (its SIP socket would never read).
    return _Server(uvicorn.Config(app, loop="asyncio", lifespan="on", log_level="warning",
                                  timeout_graceful_shutdown=3))


def _worker(args, port: int, secret: bytes, number: int) -> None:
    """One more process on the carrier endpoint's port (spawned by `run`): its own models and calls."""
    from tts_engine.server.config import ServerConfig
    from tts_engine.server.run import bind

    from .telephony.endpoint import create_app

    cfg, settings = _settings(args)
    # not listening yet: the server listens once its models are loaded
    sock = bind(ServerConfig(host=args.host, port=port), reuse_port=True, listen=False)
    app = create_app(cfg, max_calls=args.max_calls, public_url=args.public_url, keys=settings.keys,
                     stream_secret=secret, worker=number)
    with contextlib.suppress(KeyboardInterrupt):
        _uvicorn(app).run(sockets=[sock])


def run(args) -> int:
    import secrets

    from agent.demo import start_workers, stop_workers
    from tts_engine.server.config import ServerConfig
    from tts_engine.server.run import bind

    from .sip.server import SipServer
    from .telephony.endpoint import create_app

    if args.config is not None and not args.config.is_file():
        raise FileNotFoundError(f"config file {args.config} does not exist")
    if args.public_url is not None and not args.public_url.startswith(("ws://", "wss://")):
        raise ValueError(f"--public-url must be a ws:// or wss:// URL, got {args.public_url!r}")
    if not 0 <= args.sip_port <= 65535:
        raise ValueError(f"--sip-port must be in 0-65535, got {args.sip_port}")
    if not 1 <= args.workers <= 64:
        raise ValueError(f"--workers must be in 1-64, got {args.workers}")
    if not args.no_sip:
        _check_udp(args.host, args.sip_port)
    cfg, settings = _settings(args)
    sip = None if args.no_sip else SipServer(
        cfg, host=args.host, port=args.sip_port, advertised_ip=args.sip_advertise, max_calls=args.max_calls,
        rtp_ports=args.rtp_ports, transports=args.sip_transport or settings.sip_transports,
        allow_from=args.sip_allow or settings.sip_allow,
        rtp_timeout_s=args.rtp_timeout if args.rtp_timeout is not None else settings.rtp_timeout_s,
        register=settings.register)
    _warn_if_open(args.host, settings, args.no_sip)
    sock = bind(ServerConfig(host=args.host, port=args.port), reuse_port=args.workers > 1)
    with contextlib.ExitStack() as stack:
        stack.callback(sock.close)
        port = sock.getsockname()[1]
        secret = secrets.token_bytes(32)
        calls = [(args, port, secret, i) for i in range(1, args.workers)]
        stack.callback(stop_workers, start_workers(_worker, calls, "phone-worker"))
        companions = [*([sip] if sip else []), _Ready(args.host, port, sip, args.workers)]
        app = create_app(cfg, max_calls=args.max_calls, public_url=args.public_url, companions=companions,
                         keys=settings.keys, stream_secret=secret)
        if cfg.llm_base_url is None:
            print("cadence phone: LLM is the OFFLINE SCRIPTED LLM (not a language model); "
                  "set CADENCE_LLM_BASE_URL for a real one", file=sys.stderr)
        with contextlib.suppress(KeyboardInterrupt):
            _uvicorn(app).run(sockets=[sock])
    print("cadence phone: stopped", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m transports.phone`: `cadence phone` without the installed console command."""
    from tts_engine.cli import run_client_command

    return run_client_command(register, "phone", argv)


if __name__ == "__main__":
    sys.exit(main())
