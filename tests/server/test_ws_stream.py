"""`/v1/stream` against the real engine: the message protocol, cancel, limits, disconnects."""

from __future__ import annotations

import base64
import json
import random
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

OPEN = {"type": "open", "voice": "ryan", "language": "english", "seed": 3}
LONG_TEXT = "This sentence is long enough to keep a stream busy for many chunks. " * 3


def ws(server, **kwargs):
    return connect(server.ws_url, proxy=None, open_timeout=30, **kwargs)


def send(conn, **message) -> None:
    conn.send(json.dumps(message))


def recv(conn, timeout: float = 60.0) -> dict:
    return json.loads(conn.recv(timeout=timeout))


def collect(conn, until: set[str], timeout: float = 60.0) -> list[dict]:
    """Messages until every context in `until` has sent its `done`."""
    out = []
    waiting = set(until)
    while waiting:
        m = recv(conn, timeout)
        out.append(m)
        if m["type"] == "done" and m["context_id"] in waiting:
            waiting.discard(m["context_id"])
    return out


def audio_of(messages, context_id) -> list[dict]:
    return [m for m in messages if m["type"] == "audio" and m["context_id"] == context_id]


def assert_audio_in_order(chunks: list[dict]) -> None:
    assert chunks, "no audio"
    assert [c["index"] for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        pcm = base64.b64decode(c["audio"])
        assert len(pcm) % 2 == 0 and c["duration_s"] == pytest.approx(len(pcm) / 2 / 24000, abs=1e-5)
    starts = [c["start_s"] for c in chunks]
    assert starts == sorted(starts)


def test_append_flush_end_streams_audio_then_done(server):
    with ws(server) as conn:
        send(conn, **OPEN, context_id="a")
        send(conn, type="append", context_id="a", text="Hello there, ")
        send(conn, type="append", context_id="a", text="general.")
        send(conn, type="flush", context_id="a")
        send(conn, type="playout", context_id="a", played_s=0.0)
        send(conn, type="end", context_id="a")
        messages = collect(conn, {"a"})
    kinds = [m["type"] for m in messages]
    assert "error" not in kinds, messages
    assert kinds.count("flush_done") == 1 and kinds[-1] == "done"
    assert_audio_in_order(audio_of(messages, "a"))
    done = messages[-1]
    assert done["reason"] in ("eos", "length") and done["frames"] >= 1
    assert done["audio_s"] == pytest.approx(sum(c["duration_s"] for c in audio_of(messages, "a")), abs=0.09)
    for m in messages:
        if m["type"] == "timestamps":
            assert all(w["end_s"] >= w["start_s"] >= 0 and w["word"] for w in m["words"])
    server.wait_empty()


def test_open_with_text_and_end_in_one_message(server):
    with ws(server) as conn:
        send(conn, **OPEN, context_id="one", text="Just this.", end=True, max_frames=5)
        messages = collect(conn, {"one"})
    assert messages[-1]["type"] == "done"
    assert_audio_in_order(audio_of(messages, "one"))


def test_no_audio_after_the_cancel_ack(server):
    with ws(server) as conn:
        send(conn, **OPEN, context_id="c", text=LONG_TEXT, end=True)
        first = recv(conn)
        assert first["type"] == "audio", first
        send(conn, type="cancel", context_id="c")
        rest = collect(conn, {"c"})
        assert rest[-1] == {**rest[-1], "type": "done", "reason": "cancelled"}
        with pytest.raises(TimeoutError):
            recv(conn, timeout=0.5)  # nothing of "c" after the ack
        send(conn, type="cancel", context_id="c")  # a late cancel of a finished context is no error
        send(conn, type="playout", context_id="c", played_s=1.0)
        with pytest.raises(TimeoutError):
            recv(conn, timeout=0.3)
    server.wait_empty()


def test_two_contexts_on_one_connection_interleave(server):
    with ws(server) as conn:
        send(conn, **OPEN, context_id="a", text="First voice speaking here.", end=True, max_frames=12)
        send(conn, **{**OPEN, "voice": "serena"}, context_id="b", text="Second voice.", end=True,
             max_frames=12)
        messages = collect(conn, {"a", "b"})
    for cid in ("a", "b"):
        assert_audio_in_order(audio_of(messages, cid))
        assert [m["type"] for m in messages if m.get("context_id") == cid][-1] == "done"
    order = [m["context_id"] for m in messages if m["type"] == "audio"]
    first_b, last_a = order.index("b"), len(order) - 1 - order[::-1].index("a")
    assert first_b < last_a, f"contexts ran one after the other: {order}"
    server.wait_empty()


def test_cancelling_one_context_leaves_its_neighbour_whole(server):
    kept_open = dict(OPEN, voice="serena", context_id="kept", text="Second voice, still here.", end=True, max_frames=14)
    with ws(server) as conn:  # the neighbour alone, for its length
        send(conn, **kept_open)
        alone = collect(conn, {"kept"})[-1]
    with ws(server) as conn:
        send(conn, **OPEN, context_id="gone", text=LONG_TEXT, end=True)
        send(conn, **kept_open)
        before = []
        while not any(m["type"] == "audio" and m["context_id"] == "gone" for m in before):
            before.append(recv(conn))
        send(conn, type="cancel", context_id="gone")
        messages = before + collect(conn, {"gone", "kept"})
    gone = [m for m in messages if m.get("context_id") == "gone"]
    assert gone[-1]["type"] == "done" and gone[-1]["reason"] == "cancelled"
    kept = [m for m in messages if m.get("context_id") == "kept"]
    assert kept[-1] == {**alone, "audio_s": kept[-1]["audio_s"]}  # done, its reason and frames as alone
    assert kept[-1]["audio_s"] == pytest.approx(alone["audio_s"])
    assert "error" not in [m["type"] for m in kept]
    assert_audio_in_order(audio_of(messages, "kept"))
    server.wait_empty()


def test_a_context_longer_than_the_engine_context_is_an_error_event_counted_as_a_rejection(server):
    """Under max_text_chars but, tokenised, over the engine's context: refused after its open, as an error event
    and a `done` for that context alone; the connection and a neighbour go on."""
    before = server.rejections("invalid_request")
    with ws(server) as conn:
        send(conn, **OPEN, context_id="big", text="\U0001f600" * 1400, end=True)
        send(conn, **OPEN, context_id="ok", text="Short and fine.", end=True, max_frames=6)
        messages = collect(conn, {"big", "ok"})
    big = [m for m in messages if m.get("context_id") == "big"]
    assert [m["type"] for m in big] == ["error", "done"] and big[-1]["reason"] == "error"
    assert big[0]["code"] == "invalid_request" and "exceeds the engine's context" in big[0]["message"]
    assert_audio_in_order(audio_of(messages, "ok"))
    assert server.rejections("invalid_request") == before + 1
    server.wait_empty()


def test_bad_messages_get_error_events_and_the_connection_stays_open(server):
    cases = [
        ("{not json", "invalid_json"),
        ("[1, 2]", "invalid_json"),
        (json.dumps({"type": "shout", "context_id": "x"}), "unknown_type"),
        (json.dumps({"context_id": "x"}), "unknown_type"),
        (b"\x00\x01binary", "binary_frame"),
        (json.dumps({"type": "append", "context_id": "nope", "text": "hi"}), "unknown_context"),
        (json.dumps({"type": "flush", "context_id": "nope"}), "unknown_context"),
        (json.dumps({"type": "end", "context_id": "nope"}), "unknown_context"),
        (json.dumps({"type": "cancel", "context_id": "nope"}), "unknown_context"),
        (json.dumps({"type": "playout", "context_id": "nope", "played_s": 1.0}), "unknown_context"),
        (json.dumps({**OPEN, "context_id": "v", "voice": "bob"}), "invalid_request"),
        (json.dumps({**OPEN, "context_id": "v", "temperature": 0}), "invalid_request"),
        (json.dumps({**OPEN, "context_id": "v", "temperature": 3.5e38}), "invalid_request"),
        (json.dumps({**OPEN, "context_id": "v", "repetition_penalty": 1e39}), "invalid_request"),
        ('{"type": "open", "context_id": "v", "n": ' + "1" * 4301 + "}", "invalid_json"),
        (json.dumps({**OPEN, "context_id": "v", "chunk_schedule": [0]}), "invalid_request"),
        (json.dumps({**OPEN, "context_id": ""}), "invalid_request"),
        (json.dumps({**OPEN, "context_id": 5}), "invalid_request"),
        (json.dumps({**OPEN, "context_id": "v", "text": "", "end": True}), "invalid_request"),
        (json.dumps({**OPEN, "context_id": "v", "text": "x" * 5001}), "text_too_long"),
        (json.dumps({"type": "append", "context_id": "nope"}), "invalid_request"),
    ]
    with ws(server) as conn:
        for raw, code in cases:
            conn.send(raw)
            m = recv(conn, 10)
            assert (m["type"], m["code"]) == ("error", code), (raw, m)
            assert m["message"]
        # duplicate context, append after end, playout with a bad value
        send(conn, **OPEN, context_id="d")
        send(conn, **OPEN, context_id="d")
        m = recv(conn, 10)
        assert (m["code"], m["context_id"]) == ("duplicate_context", "d")
        send(conn, type="playout", context_id="d", played_s=-1)
        assert recv(conn, 10)["code"] == "invalid_request"
        send(conn, type="append", context_id="d", text="Short one.")
        send(conn, type="end", context_id="d")
        send(conn, type="append", context_id="d", text="too late")
        messages = collect(conn, {"d"})
        assert [m["code"] for m in messages if m["type"] == "error"] == ["input_ended"]
        assert messages[-1]["type"] == "done"
        # and the connection still works
        send(conn, **OPEN, context_id="ok", text="Still here.", end=True, max_frames=3)
        ok = collect(conn, {"ok"})
        assert ok[-1]["type"] == "done", ok
    server.wait_empty()


def test_too_many_contexts_is_an_error_event(server):
    """The server under test allows 3 contexts per connection."""
    with ws(server) as conn:
        for i in range(3):
            send(conn, **OPEN, context_id=f"c{i}")
        send(conn, **OPEN, context_id="c3")
        m = recv(conn, 10)
        assert (m["type"], m["code"], m["context_id"]) == ("error", "too_many_contexts", "c3")
        for i in range(3):
            send(conn, type="cancel", context_id=f"c{i}")
        acks = collect(conn, {"c0", "c1", "c2"})
        assert all(m["reason"] == "cancelled" for m in acks if m["type"] == "done")
        send(conn, **OPEN, context_id="c3", text="Now there is room.", end=True, max_frames=3)
        assert collect(conn, {"c3"})[-1]["type"] == "done"
    server.wait_empty()


def test_oversized_message_closes_with_1009(server):
    with ws(server, max_size=None) as conn:
        conn.send(json.dumps({"type": "append", "context_id": "x", "text": "a" * (1024 * 1024)}))
        with pytest.raises(ConnectionClosed) as info:
            recv(conn, 10)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1009


def test_closing_the_connection_cancels_its_contexts(server):
    with ws(server) as conn:
        send(conn, **OPEN, context_id="a", text=LONG_TEXT, end=True)
        send(conn, **OPEN, context_id="b", text=LONG_TEXT)
        assert recv(conn)["type"] == "audio"
        assert server.active_streams() == 2
    server.wait_empty()


def test_dropped_connection_cancels_its_contexts(server):
    conn = ws(server, legacy=True)
    send(conn, **OPEN, context_id="a", text=LONG_TEXT, end=True)
    assert recv(conn)["type"] == "audio"
    conn.socket.close()  # no close frame: a reset, as when a client process dies
    server.wait_empty()


def test_random_message_sequences_never_break_the_server(server):
    rng = random.Random(0)
    ids = ["a", "b", "c", "d"]
    makers = [
        lambda: {**OPEN, "context_id": rng.choice(ids), "max_frames": 2,
                 **({"text": "Hi.", "end": True} if rng.random() < 0.5 else {})},
        lambda: {"type": "append", "context_id": rng.choice(ids), "text": rng.choice(["", "word ", "\u0000é😀"])},
        lambda: {"type": rng.choice(["flush", "end", "cancel"]), "context_id": rng.choice(ids)},
        lambda: {"type": "playout", "context_id": rng.choice(ids), "played_s": rng.choice([0, 0.5, -1, "x"])},
        lambda: {"type": rng.choice(["open", "append", "bogus", None]), "context_id": rng.choice([*ids, 3, None])},
    ]
    with ws(server) as conn:
        for _ in range(150):
            send(conn, **rng.choice(makers)())
        for cid in ids:
            send(conn, type="cancel", context_id=cid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                m = recv(conn, 1.0)
            except TimeoutError:
                break
            assert m["type"] in ("audio", "timestamps", "flush_done", "done", "error"), m
            if m["type"] == "error":
                assert m["code"] != "internal_error", m
        send(conn, **OPEN, context_id="final", text="Alive.", end=True, max_frames=2)
        final = collect(conn, {"final"})
        assert final[-1]["type"] == "done", final
    server.wait_empty()
