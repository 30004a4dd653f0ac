"""A caller that vanishes without a BYE (baresip killed with SIGKILL mid-answer): its RTP stops, the
bot hangs up after the RTP timeout (its own BYE) and frees the call: pipeline, RTP socket, engine
context (a real Cadence server, tiny random-weight checkpoint), tasks. And a real call over SIP on
TCP: baresip dials with `;transport=tcp`, asks the question, hears the answer (transcribed back)."""

from __future__ import annotations

import signal
import time

import pytest
from aiosipua.dialog import DialogState
from aiosipua.transport import TcpSipTransport

from agent.pipeline import AgentConfig
from tests.transports.telephony.helpers import (
    QUESTION,
    answers_the_question,
    open_sockets,
    spoken,
    transcribe,
    words,
)

from .baresip import Baresip, caller_wav
from .conftest import SipThread
from .test_sip_calls import LEAD_S, watching_calls

RTP_TIMEOUT_S = 3.0


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        time.sleep(0.05)


@pytest.fixture
def cadence_sip_bot(tiny_checkpoint):
    from tests.server.conftest import ServerThread, real_engine
    from tts_engine.server import ServerConfig

    with ServerThread(real_engine(tiny_checkpoint), ServerConfig()) as engine:
        engine.wait_ready()
        with SipThread(AgentConfig(cadence_url=engine.ws_url), rtp_timeout_s=RTP_TIMEOUT_S) as bot:
            yield bot, engine


@pytest.mark.slow
def test_a_caller_gone_without_a_bye_is_hung_up_after_the_rtp_timeout(cadence_sip_bot, tmp_path):
    bot, engine = cadence_sip_bot
    tasks, sockets = bot.tasks(), open_sockets()
    mic = tmp_path / "mic.wav"
    caller_wav(mic, spoken(QUESTION, tmp_path), lead_s=LEAD_S, tail_s=30)
    (tmp_path / "phone").mkdir()
    phone = Baresip(tmp_path / "phone", mic)
    with watching_calls(bot) as seen:
        try:
            phone.dial(bot.uri, seconds=60)
            _wait(lambda: seen and (c := next(iter(seen.values()))).transport and c.transport.output().latencies,
                  60, "bot audio")
            streams_while_up = engine.active_streams()
            phone.proc.send_signal(signal.SIGKILL)  # no BYE: the phone is just gone
            phone.proc.wait()
            killed_at = time.monotonic()
            _wait(lambda: not bot.server.calls, RTP_TIMEOUT_S + 15, "hang-up by the bot")
            ended_after = time.monotonic() - killed_at
        finally:
            phone.close()
    (call,) = seen.values()
    (latency, *_) = call.transport.output().latencies
    print(f"\nSIP call {call.call_id}: end of caller speech -> first bot audio on the line: {latency * 1000:.0f} ms; "
          f"the vanished caller's call ended {ended_after:.1f} s after its last packet")
    assert streams_while_up == 1  # the answer's engine context was open when the phone vanished
    assert call.timed_out and not call.by_caller
    assert ended_after >= RTP_TIMEOUT_S - 0.5  # not before the timeout ...
    assert call.incoming.dialog.state == DialogState.TERMINATED  # ... then the bot's BYE
    assert call.session.rtp_session is None and not bot.server._uas.active_calls
    engine.wait_empty(timeout=10)
    _wait(lambda: bot.tasks() <= tasks and open_sockets() <= sockets, 10, "tasks and sockets back")


@pytest.fixture
def tcp_sip_bot():
    with SipThread(AgentConfig(cadence_url=None), transports=("udp", "tcp")) as bot:
        yield bot


@pytest.mark.slow
def test_a_call_over_sip_on_tcp_hears_its_answer(tcp_sip_bot, tmp_path):
    bot = tcp_sip_bot
    speech = spoken(QUESTION, tmp_path)
    call_s = 25
    mic = tmp_path / "mic.wav"
    caller_wav(mic, speech, lead_s=LEAD_S, tail_s=call_s)
    (tmp_path / "phone").mkdir()
    phone = Baresip(tmp_path / "phone", mic)
    with watching_calls(bot) as seen:
        try:
            phone.dial(f"{bot.uri};transport=tcp", seconds=call_s)
            log = phone.wait(call_s + 20)
            _wait(lambda: not bot.server.calls, 10, "hang-up")
        finally:
            phone.close()
    assert "Call established" in log, log[-2000:]
    (call,) = seen.values()
    assert isinstance(call.incoming.transport, TcpSipTransport)  # the INVITE came over TCP
    heard, rate = phone.recording("dec")
    said = words(transcribe(heard, rate))
    (latency, *_) = call.transport.output().latencies
    print(f"\nSIP over TCP heard: {' '.join(said)}; end of caller speech -> first bot audio on the line: "
          f"{latency * 1000:.0f} ms")
    assert answers_the_question(said), " ".join(said)
    assert call.by_caller and not call.timed_out  # the phone's BYE ended it
