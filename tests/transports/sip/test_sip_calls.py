"""Real SIP calls end to end: Debian's baresip dials the bot over loopback, plays an espeak-ng
question as its microphone and records what it hears; Whisper tiny.en transcribes the recording
back to the scripted LLM's answer. Offline defaults: Whisper tiny.en STT, the OFFLINE SCRIPTED LLM,
the Piper fallback voice. No stand-in: the phone, the SIP stack and the RTP are all real."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from tests.transports.telephony.helpers import QUESTION, answers_the_question, spoken, transcribe, words

from .baresip import Baresip, caller_wav

LEAD_S = 2.0  # silence before the question, as a caller waits for the line to open
CALL_S = 32  # baresip hangs up after this (a loaded 2-core CI machine answers slowly)
STAGGER_S = 5.0  # the second call comes while the first is up; its question after the first one's


@contextlib.contextmanager
def watching_calls(bot) -> Iterator[dict]:
    """Each call the bot answers while the block runs, kept past its hang-up (the server forgets it then)."""
    seen: dict = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.update(bot.server.calls)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        stop.set()
        watcher.join()


@pytest.mark.slow
def test_two_simultaneous_sip_calls_both_hear_their_answers(sip_bot, tmp_path):
    """One phone offers mu-law, the other A-law; their calls overlap; each hears the answer to its
    own question; the first presses keys that arrive as DTMF frames; both hang up (BYE) and the
    bot frees both calls (RTP sockets, pipelines)."""
    speech = spoken(QUESTION, tmp_path)
    phones = []
    for name, codecs in (("mulaw", "PCMU"), ("alaw", "PCMA")):
        mic = tmp_path / f"{name}.wav"
        caller_wav(mic, speech, lead_s=LEAD_S, tail_s=CALL_S)
        (tmp_path / name).mkdir()
        phones.append(Baresip(tmp_path / name, mic, codecs=codecs))
    with watching_calls(sip_bot) as seen:
        try:
            for phone in phones:
                phone.dial(sip_bot.uri, seconds=CALL_S)
                time.sleep(STAGGER_S)
            deadline = time.monotonic() + 20
            while len(seen) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(seen) == 2, f"calls answered: {list(seen)}"
            time.sleep(LEAD_S + len(speech) / 2 / 8000 + 8)  # the question, then most of the answer
            phones[0].press("42#")
            logs = [phone.wait(CALL_S + 20) for phone in phones]
        finally:
            for phone in phones:
                phone.close()

    for phone, log in zip(phones, logs, strict=True):
        assert "Call established" in log, log[-2000:]
        heard, rate = phone.recording("dec")
        said = words(transcribe(heard, rate))
        assert answers_the_question(said), " ".join(said)
        print(f"\nSIP {phone.dir.name} heard: {' '.join(said)}")
    for call in seen.values():
        (latency, *_) = call.transport.output().latencies  # the answer; a later one only after a barge-in
        print(f"SIP call {call.call_id}: end of caller speech -> first bot audio on the line: {latency * 1000:.0f} ms")
        assert 0 < latency < 20  # a loose bound: a shared CI machine can be very slow
    codecs = sorted(c.session.chosen_payload_type for c in seen.values())
    assert codecs == [0, 8]  # PCMU and PCMA
    digits = [c.transport.input().digits for c in seen.values()]
    assert ["4", "2", "#"] in digits, digits
    deadline = time.monotonic() + 10
    while sip_bot.server.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sip_bot.server.calls
    assert all(c.by_caller for c in seen.values())  # ended by the phones' BYE
    assert all(c.session.rtp_session is None for c in seen.values())  # RTP sockets closed


@pytest.fixture
def cadence_sip_bot(tiny_checkpoint):
    from agent.pipeline import AgentConfig
    from tests.server.conftest import ServerThread, real_engine
    from tts_engine.server import ServerConfig

    from .conftest import SipThread

    with ServerThread(real_engine(tiny_checkpoint), ServerConfig()) as engine:
        engine.wait_ready()
        with SipThread(AgentConfig(cadence_url=engine.ws_url)) as bot:
            yield bot, engine


@pytest.mark.slow
def test_hanging_up_mid_answer_frees_the_calls_engine_context(cadence_sip_bot, tmp_path):
    """With a real Cadence server (tiny random-weight checkpoint: noise, not transcribed): the phone
    hangs up while the bot is still answering; the engine context of the answer is cancelled."""
    bot, engine = cadence_sip_bot
    speech = spoken(QUESTION, tmp_path)
    mic = tmp_path / "mic.wav"
    caller_wav(mic, speech, lead_s=LEAD_S, tail_s=30)
    (tmp_path / "phone").mkdir()
    phone = Baresip(tmp_path / "phone", mic)
    streams_while_up = 0
    with watching_calls(bot) as seen:
        try:
            phone.dial(bot.uri, seconds=60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (seen and next(iter(seen.values())).transport
                                                       and next(iter(seen.values())).transport.output().latencies):
                time.sleep(0.05)
            streams_while_up = engine.active_streams()
            phone.proc.terminate()  # baresip quits on SIGTERM: BYE, mid-answer
            log = phone.wait(20)
        finally:
            phone.close()
    assert "Call established" in log, log[-2000:]
    assert streams_while_up == 1  # the answer's engine context was open when the phone hung up
    deadline = time.monotonic() + 10
    while bot.server.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not bot.server.calls and all(c.by_caller for c in seen.values())
    engine.wait_empty(timeout=10)
