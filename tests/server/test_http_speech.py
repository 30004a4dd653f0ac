"""`POST /v1/audio/speech` against the real engine on a loopback socket."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import struct
import wave

import httpx
import pytest

from .conftest import ServerThread, real_engine

SPEECH = "/v1/audio/speech"
# Short text and a frame cap keep every request cheap on a 2-core CPU.
OK = {"model": "qwen3-tts", "input": "Hello there.", "voice": "ryan", "language": "english", "seed": 7,
      "max_frames": 6}


def post(server, body=None, **kwargs) -> httpx.Response:
    if body is not None:  # json.dumps escapes lone surrogates, which httpx's json= cannot encode
        kwargs["content"] = json.dumps(body).encode()
        kwargs["headers"] = {"content-type": "application/json"}
    return httpx.post(server.url + SPEECH, timeout=60, **kwargs)


def test_pcm_stream_is_s16le_with_sample_rate_header(server):
    r = post(server, OK)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/pcm"
    assert r.headers["x-sample-rate"] == "24000"
    assert r.headers["x-model"] == "qwen3-tts"
    assert len(r.content) > 0 and len(r.content) % 2 == 0
    server.wait_empty()


def test_streamed_wav_header_has_unknown_sizes(server):
    r = post(server, {**OK, "response_format": "wav"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/wav"
    head = r.content[:44]
    assert head[:4] == b"RIFF" and head[8:16] == b"WAVEfmt " and head[36:40] == b"data"
    assert struct.unpack("<I", head[4:8])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", head[40:44])[0] == 0xFFFFFFFF
    channels, rate = struct.unpack("<HI", head[22:28])
    assert (channels, rate) == (1, 24000)
    assert len(r.content) > 44 and (len(r.content) - 44) % 2 == 0


def test_whole_wav_has_proper_sizes_and_parses_with_wave(server):
    r = post(server, {**OK, "response_format": "wav", "stream": False})
    assert r.status_code == 200, r.text
    assert int(r.headers["content-length"]) == len(r.content)
    with wave.open(io.BytesIO(r.content)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24000)
        frames = w.readframes(w.getnframes())
    assert len(frames) == len(r.content) - 44 > 0


def test_whole_pcm_equals_the_streamed_pcm_for_a_seed(server):
    streamed = post(server, OK).content
    whole = post(server, {**OK, "stream": False})
    assert whole.status_code == 200
    assert whole.content == streamed


def test_sse_events_parse_and_end_with_done(server):
    r = post(server, {**OK, "stream_format": "sse"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(block.removeprefix("data: ")) for block in r.text.split("\n\n") if block]
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    assert done["usage"]["output_frames"] >= 1 and done["duration_s"] > 0 and done["model"] == "qwen3-tts"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) > 0 and len(pcm) % 2 == 0


BAD_BODIES = [
    ({**OK, "input": ""}, "input is empty"),
    ({**OK, "input": "  \n\t "}, "input is empty"),
    ({**OK, "input": "\u0000\u0007\u001b"}, "input is empty"),
    # the tiny engine's 2048-position context holds the speech of fewer than max_text_chars (5000)
    ({**OK, "input": "a" * 5001}, "engine's context of 2048 positions"),
    ({**OK, "input": "x" * 10_000}, "engine's context of 2048 positions"),
    ({**OK, "voice": "bob"}, "unknown voice 'bob'"),
    ({k: v for k, v in OK.items() if k != "voice"}, "needs a voice"),
    ({**OK, "language": "klingon"}, "unknown language 'klingon'"),
    ({**OK, "temperature": 0}, "temperature must be"),
    ({**OK, "temperature": "hot"}, "temperature: Input should be a valid number"),
    ({**OK, "top_p": 1.5}, "top_p must be"),
    ({**OK, "top_k": -1}, "top_k"),
    ({**OK, "repetition_penalty": 0}, "repetition_penalty must be"),
    # past fp32: these once overflowed the sampler's table on the engine thread and failed the engine
    ({**OK, "temperature": 3.5e38}, "temperature must be a number in [1e-06, 1e+06]"),
    ({**OK, "temperature": 1e-300}, "temperature must be"),
    ({**OK, "repetition_penalty": 1e39}, "repetition_penalty must be a number in [0.001, 1000]"),
    ({**OK, "seed": -1}, "seed"),
    ({**OK, "seed": 2**63}, "seed"),
    ({**OK, "chunk_schedule": []}, "chunk_schedule"),
    ({**OK, "chunk_schedule": [0, 2]}, "chunk_schedule"),
    ({**OK, "chunk_schedule": [100]}, "chunk_schedule"),
    ({**OK, "chunk_schedule": "1,2"}, "chunk_schedule"),
    ({**OK, "max_frames": 0}, "max_frames"),
    ({**OK, "response_format": "mp3"}, "supported: pcm, wav"),
    ({**OK, "stream_format": "xml"}, "supported: audio, sse"),
    ({**OK, "stream_format": "sse", "stream": False}, "needs stream: true"),
    ({**OK, "speed": 1.5}, "only 1.0"),
    ({**OK, "stream": "yes"}, "stream: Input should be a valid boolean"),
    ({**OK, "input": 123}, "input: Input should be a valid string"),
    ({**OK, "model": 5}, "model: Input should be a valid string"),
    ({"voice": "ryan"}, "input: field required"),
]


@pytest.mark.parametrize(("body", "message"), BAD_BODIES, ids=[m for _, m in BAD_BODIES])
def test_bad_fields_get_422_with_a_message(server, body, message):
    r = post(server, body)
    assert r.status_code == 422, r.text
    assert message in r.json()["error"]["message"]


RAW_BODIES = [
    (b'{"input": "hi", "voice": "ryan"', 422, "not valid JSON"),
    (b"[]", 422, "must be a JSON object"),
    (b"", 422, "not valid JSON"),
    (b'{"input": "hi", "voice": "ryan", "temperature": NaN}', 422, "temperature"),
    (b'{"input": "caf\xe9", "voice": "ryan"}', 422, "not valid UTF-8"),
    (b"[" * 100_000, 413, "over 65536 bytes"),
    (b'{"input": "hi", "voice": "ryan", "x": ' + b"1" * 4301 + b"}", 422, "not acceptable JSON"),
]


@pytest.mark.parametrize(("raw", "status", "message"), RAW_BODIES, ids=[m for _, _, m in RAW_BODIES])
def test_malformed_bodies_get_their_4xx(server, raw, status, message):
    r = post(server, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"]


def test_wrong_content_type_is_415(server):
    for headers in ({"content-type": "text/plain"}, {}):
        r = post(server, content=json.dumps(OK).encode(), headers=headers)
        assert r.status_code == 415, r.text
        assert r.json()["error"]["code"] == "unsupported_media_type"


def test_chunked_body_over_the_limit_is_413(server):
    def chunks():
        for _ in range(20):
            yield b" " * 8192

    r = post(server, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


@pytest.mark.parametrize("text", [
    "Hello \U0001f44b\U0001f3fd world \U0001f389!",  # emoji with a skin-tone modifier
    "Hel\u0007lo\u0000 wo\u001brld\u0085.",  # control characters are removed
    "\ud800Hello\udfff there.",  # lone surrogates (valid JSON escapes) are removed
    "y" * 120,  # one long word
], ids=["emoji", "control-characters", "lone-surrogates", "long-word"])
def test_odd_but_valid_text_is_synthesised(server, text):
    r = post(server, {**OK, "input": text, "max_frames": 3})
    assert r.status_code == 200, r.text
    assert len(r.content) % 2 == 0
    server.wait_empty()


def test_a_word_as_long_as_the_limit_is_synthesised_or_refused_never_a_fault(tiny_checkpoint):
    """4000 characters of one word is within max_text_chars; on the tiny checkpoint it tokenises
    to more rows than the engine's context. Either outcome is fine except a fault."""
    from tts_engine.server import ServerConfig

    with ServerThread(real_engine(tiny_checkpoint), ServerConfig()) as s:
        s.wait_ready()
        r = post(s, {**OK, "input": "y" * 4000, "max_frames": 3})
        assert r.status_code in (200, 422), r.text
        assert httpx.get(s.url + "/health").status_code == 200
        s.wait_empty()


def test_no_bad_input_leaves_a_stream_behind(server):
    for body, _ in BAD_BODIES:
        post(server, body)
    server.wait_empty()
    # nor a failed engine: the next good request is served
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    assert post(server, OK).status_code == 200


def test_client_gone_mid_stream_frees_the_engine(server):
    body = {k: v for k, v in OK.items() if k != "max_frames"}
    body["input"] = "A longer sentence, so that the stream is still running. " * 4
    with httpx.Client(timeout=60) as client, client.stream("POST", server.url + SPEECH, json=body) as r:
        assert r.status_code == 200
        next(r.iter_raw())
        assert server.active_streams() == 1
    server.wait_empty()


def test_health_ready_and_metrics(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    assert httpx.get(server.url + "/ready").status_code == 200
    before = server.rejections("invalid_request")
    post(server, OK)
    assert post(server, {**OK, "voice": "nobody"}).status_code == 422
    text = httpx.get(server.url + "/metrics").text
    assert 'cadence_time_to_first_audio_seconds_count{endpoint="/v1/audio/speech"}' in text
    assert 'cadence_http_responses_total{endpoint="/v1/audio/speech",status="200"}' in text
    assert "cadence_engine_active_streams" in text
    assert server.rejections("invalid_request") == before + 1


# Under the server's max_text_chars but, tokenised, longer than the engine's context (2,048): the engine
# refuses it after the stream opened.
# Under the server's text limit, but tokenised (several tokens an emoji) over the engine's context.
OVER_CONTEXT = "\U0001f600" * 1400


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_longer_than_the_context_is_a_422_counted_as_a_rejection(server, stream):
    before = server.rejections("invalid_request")
    r = post(server, {**OK, "input": OVER_CONTEXT, "stream": stream})
    assert r.status_code == 422 and "exceeds the engine's context" in r.json()["error"]["message"]
    assert server.rejections("invalid_request") == before + 1
    server.wait_empty()


def test_burst_past_admission_caps_gets_503_with_retry_after(tiny_checkpoint):
    """SGLang's recipe: 1 running + 1 queued allowed, 10 at once -> exactly 2 admitted; over a WebSocket too."""
    from tts_engine.server import ServerConfig

    engine = real_engine(tiny_checkpoint, max_active_streams=1, max_queued_streams=1)
    body = {**OK, "input": "Long enough to keep both admitted streams busy for a while."}

    async def burst(url):
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=20)) as client:
            return await asyncio.gather(*(client.post(url + SPEECH, json=body) for _ in range(10)))

    with ServerThread(engine, ServerConfig()) as s:
        s.wait_ready()
        responses = asyncio.run(burst(s.url))
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200] * 2 + [503] * 8, statuses
        for r in responses:
            if r.status_code == 503:
                assert int(r.headers["retry-after"]) >= 1
                assert r.json()["error"]["code"] == "overloaded"
        s.wait_empty()
        # the same caps over a WebSocket: four opens at once, two admitted, two refused by error events
        from websockets.sync.client import connect

        with connect(s.ws_url, proxy=None, open_timeout=30) as conn:
            for i in range(4):
                conn.send(json.dumps({"type": "open", "context_id": f"c{i}", "voice": "ryan", "text": body["input"],
                                      "end": True}))
            messages, done = [], set()
            while len(done) < 2:
                messages.append(json.loads(conn.recv(timeout=120)))
                if messages[-1]["type"] == "done":
                    done.add(messages[-1]["context_id"])
        refused = [m for m in messages if m["type"] == "error"]
        assert sorted(m["context_id"] for m in refused) == ["c2", "c3"] and done == {"c0", "c1"}, messages
        assert all(m["code"] == "overloaded" and m["retry_after"] > 0 for m in refused)
        s.wait_empty()
