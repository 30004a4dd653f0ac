"""bench.first_audio_delivery on the tiny checkpoint (CPU): each setting is served in turn on one
real server, every stream after the warm-ups has all its marks, and the wrapped methods, the
server and the engine are all gone afterwards."""

from __future__ import annotations

import socket

import pytest

from bench import first_audio_delivery
from bench.socket_latency import wait_ready
from tests.threads import one_torch_thread
from tts_engine.engine import executor
from tts_engine.engine.commands import Commands
from tts_engine.engine.core import StreamingEngine
from tts_engine.engine.outbox import Outbox
from tts_engine.engine.stream import Stream
from tts_engine.server.http_speech import SpeechResponse


def test_each_setting_gets_its_streams_marks_and_everything_is_undone(tiny_checkpoint):
    originals = (Outbox.post, Stream.receive, SpeechResponse._note_audio, Commands._open, executor._mark_issued)
    engine = StreamingEngine(tiny_checkpoint, max_active_streams=2)
    with one_torch_thread():
        out = first_audio_delivery.measure(engine, [0.0, 0.5], requests=2, rounds=1)
    assert set(out) == {"0.0", "0.5"}
    for setting in out.values():
        assert setting["streams"] == 2 and len(setting["first_pcm_ms_p50_by_round"]) == 1
        for a, b in first_audio_delivery.SPANS:
            assert setting[f"{a}_to_{b}_ms"]["p50"] > 0
    assert engine.delivery.first_audio_yield_s == 0.0005  # the last setting's
    assert (Outbox.post, Stream.receive, SpeechResponse._note_audio, Commands._open, executor._mark_issued) == originals
    assert not engine.alive


def test_waiting_for_a_server_gives_up_at_its_deadline_or_when_its_check_says_so():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def server_died():
        raise RuntimeError("server exited: boom")

    with pytest.raises(RuntimeError, match="not ready after 0 s"):
        wait_ready(port, timeout_s=0.0)
    with pytest.raises(RuntimeError, match="boom"):
        wait_ready(port, check=server_died)
