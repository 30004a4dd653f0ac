"""Request validation and text cleaning, without a server."""

from __future__ import annotations

import pytest

from tts_engine.config import CONFIG_DIR, ModelConfig
from tts_engine.server.errors import FAILURES, ApiError
from tts_engine.server.schemas import (
    OpenMessage,
    SpeechRequest,
    check_speech_request,
    clean_text,
    parse_client_message,
    parse_json_object,
    validate_model,
)

CFG = ModelConfig.from_file(CONFIG_DIR / "tiny-customvoice.config.json")


@pytest.mark.parametrize(("raw", "clean"), [
    ("plain text", "plain text"),
    ("tab\tnew\nline\r", "tab\tnew\nline\r"),
    ("a\u0000b\u0007c\u001bd\u007fe\u0085f", "abcdef"),
    ("\ud800x\udfff", "x"),
    ("👩‍👩‍👧 and ‏rtl", "👩‍👩‍👧 and ‏rtl"),  # ZWJ sequences and bidi marks stay
])
def test_clean_text_removes_only_control_characters(raw, clean):
    assert clean_text(raw) == clean


def test_options_reach_the_engine_validated():
    req = validate_model(SpeechRequest, {"input": "Hi", "voice": "Ryan", "language": "English", "seed": 5,
                                         "top_k": 0, "chunk_schedule": [2, 4], "max_frames": 9})
    opts = req.stream_options(CFG)
    assert (opts.params.seed, opts.params.top_k, opts.chunk_schedule, opts.max_frames) == (5, 0, (2, 4), 9)
    assert opts.params.temperature == 0.9 and opts.voice.language == "English"


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "Hi", "voice": "ryan", "response_format": "flac"}, "response_format"),
    ({"input": "Hi", "voice": "ryan", "speed": 0.5}, "speed"),
    ({"input": " \u0000 ", "voice": "ryan"}, "input"),
])
def test_speech_request_checks_name_the_field(body, param):
    with pytest.raises(ApiError) as info:
        check_speech_request(validate_model(SpeechRequest, body), 100)
    assert info.value.param == param and info.value.http_status == 422


def test_json_errors():
    for raw, fragment in [(b"\xff", "UTF-8"), (b"{", "not valid JSON"), (b"3", "JSON object"),
                          (b"[" * 10_000 + b"]" * 10_000, "nested too deeply")]:
        with pytest.raises(ApiError, match=fragment) as info:
            parse_json_object(raw, "body")
        assert info.value.code == "invalid_json"


def test_client_messages_parse_by_type():
    msg = parse_client_message({"type": "open", "context_id": "a", "voice": "ryan", "text": "x", "end": True})
    assert isinstance(msg, OpenMessage) and msg.end
    with pytest.raises(ApiError) as info:
        parse_client_message({"type": "dance"})
    assert info.value.code == "unknown_type"
    with pytest.raises(ApiError) as info:
        parse_client_message({"type": "playout", "context_id": "a", "played_s": "1"})
    assert info.value.code == "invalid_request" and info.value.param == "played_s"


def test_every_failure_has_an_http_or_websocket_behaviour():
    for f in FAILURES.values():
        assert f.http_status is not None or f.over_ws
        assert f.ws_close is None or f.over_ws
    assert ApiError("overloaded", "full", retry_after_s=0.2).http_headers() == {"Retry-After": "1"}
