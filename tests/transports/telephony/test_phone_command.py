"""`cadence phone` as a process (run through `python -m transports.phone`, the same register/run
the `cadence` dispatcher calls): it serves the call webhooks and the SIP listener in one process,
answers a SIP OPTIONS ping, stops cleanly on SIGINT, and refuses bad options with one line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from aiosipua import SipRequest, SipResponse, generate_branch, generate_call_id, generate_tag
from aiosipua.transport import UdpSipTransport

from tests.agent.helpers import Lines

from .helpers import free_port

REPO = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADENCE_")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _options_ping(port: int) -> int:
    """A SIP OPTIONS to the listener, from aiosipua's transport; the status code of the answer."""
    async def ping():
        got: asyncio.Future = asyncio.get_running_loop().create_future()
        local = free_port(socket.SOCK_DGRAM)
        transport = UdpSipTransport(local_addr=("127.0.0.1", local))
        transport.on_message = lambda msg, _addr: got.done() or got.set_result(msg)
        await transport.start()
        request = SipRequest(method="OPTIONS", uri=f"sip:bot@127.0.0.1:{port}")
        request.headers.set_single("Via", f"SIP/2.0/UDP 127.0.0.1:{local};branch={generate_branch()}")
        request.headers.set_single("From", f"<sip:ping@127.0.0.1>;tag={generate_tag()}")
        request.headers.set_single("To", f"<sip:bot@127.0.0.1:{port}>")
        request.headers.set_single("Call-ID", generate_call_id("127.0.0.1"))
        request.headers.set_single("CSeq", "1 OPTIONS")
        request.headers.set_single("Max-Forwards", "70")
        try:
            transport.send(request, ("127.0.0.1", port))
            answer = await asyncio.wait_for(got, 10)
        finally:
            await transport.stop()
        assert isinstance(answer, SipResponse)
        return answer.status_code

    return asyncio.run(ping())


@pytest.mark.slow
def test_cadence_phone_serves_webhooks_and_sip_and_stops_on_sigint():
    proc = subprocess.Popen([sys.executable, "-m", "transports.phone", "--port", "0", "--sip-port", "0"],
                            cwd=REPO, env=_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    err = Lines(proc.stderr)
    try:
        base = err.wait_for(r"call webhooks (http://\S+)/twilio", timeout=120).group(1)
        sip_port = int(err.wait_for(r"SIP on udp 127\.0\.0\.1:(\d+)", timeout=30).group(1))
        err.wait_for("ready", timeout=30)
        req = urllib.request.Request(f"{base}/twilio", data=b"CallSid=CA1", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read().decode()
        assert re.search(r'<Stream url="ws://(localhost|127\.0\.0\.1):\d+/ws/[\w.-]{20,}"', body), body
        assert _options_ping(sip_port) == 200
    finally:
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=30)
    assert status == 0, err.rest()
    assert "cadence phone: stopped" in err.rest(timeout=2)


@pytest.mark.slow
def test_workers_share_the_port_and_all_stop_on_sigint():
    proc = subprocess.Popen([sys.executable, "-m", "transports.phone", "--port", "0", "--no-sip", "--workers", "2"],
                            cwd=REPO, env=_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    err = Lines(proc.stderr)
    try:
        base = err.wait_for(r"call webhooks (http://\S+)/twilio.*\(2 processes\)", timeout=120).group(1)
        err.wait_for("ready", timeout=30)
        seen, deadline = set(), time.monotonic() + 180  # the second loads its models after the first is ready
        while seen != {0, 1} and time.monotonic() < deadline:
            with urllib.request.urlopen(f"{base}/health", timeout=10) as r:  # a new connection each time
                seen.add(json.loads(r.read())["worker"])
        assert seen == {0, 1}
    finally:
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=60)
    assert status == 0, err.rest()
    port = int(base.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # no process of the bot listens any more


@pytest.mark.parametrize("args, error, message", [
    (["--host", "0.0.0.0", "--sip-port", "0"], ValueError, "set advertised_ip"),
    (["--public-url", "http://x/ws"], ValueError, "--public-url must be a ws://"),
    (["--config", "/nonexistent.toml"], FileNotFoundError, "does not exist"),
    (["--rtp-ports", "20000"], SystemExit, ""),
    (["--workers", "0"], ValueError, "--workers must be in 1-64"),
])
def test_bad_options_are_user_errors(args, error, message):
    """What the dispatcher turns into one line and exit status 2 (argparse's own: status 2 too)."""
    import argparse

    from transports import phone

    parser = argparse.ArgumentParser(prog="cadence")
    phone.register(parser.add_subparsers(dest="command"))
    with pytest.raises(error, match=message):
        parsed = parser.parse_args(["phone", "--port", "0", *args])
        parsed.func(parsed)


def test_a_sip_port_in_use_is_refused_before_anything_loads():
    import argparse

    from transports import phone

    parser = argparse.ArgumentParser(prog="cadence")
    phone.register(parser.add_subparsers(dest="command"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        parsed = parser.parse_args(["phone", "--port", "0", "--sip-port", str(taken.getsockname()[1])])
        with pytest.raises(ValueError, match="cannot listen for SIP on udp"):
            parsed.func(parsed)


def test_the_phones_own_settings_are_the_config_files_phone_table(tmp_path):
    """The agent reads the rest of the same file; secrets may come from the environment instead."""
    from agent.demo import load_config
    from transports.telephony.settings import load_phone_settings

    path = tmp_path / "agent.toml"
    path.write_text('fallback_tts = "piper"\n[phone]\nsip_transports = ["udp", "tcp"]\nsip_allow = ["10.0.0.0/8"]\n'
                    'rtp_timeout_s = 12\ntwilio_auth_token = "from-file"\n'
                    '[phone.register]\nregistrar = "pbx.example.com:5070"\nuser = "2001"\n')
    agent, settings = load_phone_settings(path, {"CADENCE_SIP_PASSWORD": "pw", "CADENCE_PLIVO_AUTH_TOKEN": "env"})
    assert load_config(agent, environ={}).fallback_tts == "piper"
    assert settings.sip_transports == ["udp", "tcp"] and settings.sip_allow == ["10.0.0.0/8"]
    assert settings.rtp_timeout_s == 12
    assert settings.keys.twilio_auth_token == "from-file" and settings.keys.plivo_auth_token == "env"
    assert settings.register.aor == "sip:2001@pbx.example.com" and settings.register.password == "pw"
    assert settings.register.address() == ("pbx.example.com", 5070)
    path.write_text('[phone]\nsip_alow = ["10.0.0.0/8"]\n')
    with pytest.raises(ValueError, match=r"unknown setting.*sip_alow"):
        load_phone_settings(path, {})
    path.write_text('[phone.register]\nuser = "2001"\n')
    with pytest.raises(ValueError, match="registrar"):
        load_phone_settings(path, {})
