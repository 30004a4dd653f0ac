"""Two engine replicas behind the headroom router on a local Ray cluster: the single server's API
through the router, routing by the engine's admission, contexts pinned to one replica, a replica
killed mid-stream. Real sockets and real processes; only the checkpoint is a random-weight stand-in."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from websockets.sync.client import connect

from .conftest import CAP, wait_for

pytestmark = pytest.mark.slow
REPLICA = "x-cadence-replica"
OPEN = {"type": "open", "voice": "ryan", "language": "english", "seed": 3}


def ws(cluster):
    return connect(cluster.ws_url, proxy=None, open_timeout=30)


def replica_of(conn) -> str:
    return conn.response.headers[REPLICA]


def send(conn, **message) -> None:
    conn.send(json.dumps(message))


def recv(conn, timeout: float = 60.0) -> dict:
    return json.loads(conn.recv(timeout=timeout))


def until_done(conn, context_id: str) -> list[dict]:
    out = []
    while not out or out[-1]["type"] not in ("done", "error"):
        out.append(recv(conn))
    return out


def speech(cluster, text="Hello there.", **fields) -> httpx.Response:
    body = {"input": text, "voice": "ryan", "language": "english", "response_format": "pcm", **fields}
    return httpx.post(cluster.url + "/v1/audio/speech", json=body, timeout=60)


def hold(conn, n: int, prefix: str) -> None:
    """Open n contexts that wait for text: each is an admitted stream of the connection's replica."""
    for i in range(n):
        send(conn, **OPEN, context_id=f"{prefix}{i}")


def settled(cluster, active: dict[str, int]) -> None:
    """Wait until every named replica reports that many admitted streams (the router's readings are
    newer than the board's, which replicas push every second)."""
    wait_for(lambda: all(cluster.replicas().get(r, {}).get("active_streams") == n for r, n in active.items()),
             15, f"replicas to report {active}")


def test_http_speech_and_endpoints_through_the_router(cluster):
    r = speech(cluster)
    assert r.status_code == 200 and r.headers["content-type"] == "audio/pcm" and r.headers[REPLICA]
    assert len(r.content) > 0 and len(r.content) % 2 == 0
    wav = speech(cluster, response_format="wav")
    assert wav.status_code == 200 and wav.content[:4] == b"RIFF"
    bad = speech(cluster, voice="nobody")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    assert httpx.get(cluster.url + "/health").json()["status"] == "ok"
    assert httpx.get(cluster.url + "/ready").status_code == 200
    assert httpx.get(cluster.url + "/v1/voices").status_code == 200
    assert httpx.get(cluster.url + "/nowhere").json()["error"]["code"] == "not_found"


def test_metrics_per_replica_and_summed(cluster):
    before = cluster.replicas()
    assert len(before) == 2
    speech(cluster)

    def scraped() -> str | None:
        text = httpx.get(cluster.url + "/metrics").text
        return text if 'endpoint="/v1/audio/speech"' in text else None

    text = wait_for(scraped, 10, "the speech request in the metrics")
    per_replica = [ln for ln in text.splitlines() if ln.startswith("cadence_http_responses_total{")
                   and 'endpoint="/v1/audio/speech"' in ln and 'status="200"' in ln]
    summed = [ln for ln in per_replica if "replica=" not in ln]
    assert summed and sum(float(ln.split()[-1]) for ln in per_replica if "replica=" in ln) == \
        float(summed[0].split()[-1])


def test_ws_contexts_through_the_router(cluster):
    with ws(cluster) as conn:
        send(conn, **OPEN, context_id="a")
        send(conn, type="append", context_id="a", text="Hello there, general.")
        send(conn, type="end", context_id="a")
        events = until_done(conn, "a")
        audio = [e["index"] for e in events if e["type"] == "audio"]
        assert audio and audio == list(range(len(audio)))
        assert events[-1]["type"] == "done"
        send(conn, type="append", context_id="missing", text="x")
        assert recv(conn)["code"] == "unknown_context"


def test_new_streams_go_to_the_replica_with_headroom_and_contexts_stay(cluster):
    """A connection fills replica X with CAP open contexts; replica Y then holds more idle WebSocket
    connections than X (so by Serve's own queue length X looks emptier), yet every new stream goes to
    Y. X's connection cannot open another context, though Y has room: contexts stay on X. With both
    full, clients get the single server's 503 + Retry-After and `overloaded` event."""
    with ws(cluster) as a:
        x = replica_of(a)
        hold(a, CAP, "a")
        settled(cluster, {x: CAP})
        with ws(cluster) as idle1, ws(cluster) as idle2:
            y = replica_of(idle1)
            assert y != x and replica_of(idle2) == y
            for _ in range(6):
                r = speech(cluster)
                assert r.status_code == 200 and r.headers[REPLICA] == y
            send(a, **OPEN, context_id="pinned")
            refused = recv(a)
            assert refused["type"] == "error" and refused["context_id"] == "pinned"
            assert refused["code"] == "overloaded"
            hold(idle1, CAP, "b")
            settled(cluster, {x: CAP, y: CAP})
            full = speech(cluster)
            assert full.status_code == 503 and full.json()["error"]["code"] == "overloaded"
            assert int(full.headers["Retry-After"]) >= 1
            with ws(cluster) as late:
                send(late, **OPEN, context_id="late")
                event = recv(late)
                assert event["code"] == "overloaded" and event["retry_after"] > 0
    settled(cluster, {x: 0, y: 0})


def test_killing_a_replica_ends_its_streams_and_spares_the_other(cluster):
    import ray

    with ws(cluster) as doomed:
        victim = replica_of(doomed)
        hold(doomed, 1, "d")
        settled(cluster, {victim: 1})
        with on_another_replica(cluster, victim) as spared:
            survivor = replica_of(spared)
            send(spared, **OPEN, context_id="s")
            send(spared, type="append", context_id="s", text="Still here after the other one went.")
            actor = ray.get_actor(f"SERVE_REPLICA::cadence#EngineReplica#{victim}", namespace="serve")
            ray.kill(actor, no_restart=True)
            ended = doomed_ending(doomed)
            assert ended == ["error engine_error d0", "close 1013"]
            send(spared, type="end", context_id="s")
            events = until_done(spared, "s")
            assert events[-1]["type"] == "done" and any(e["type"] == "audio" for e in events)
    for _ in range(4):
        r = speech(cluster)
        assert r.status_code == 200 and r.headers[REPLICA] == survivor


def on_another_replica(cluster, replica: str, within_s: float = 15.0):
    """A connection the router sends to a replica other than `replica`. The router ranks by readings
    that may trail the board by a push (a busy CI machine), and a tie goes to either replica: a
    connection that lands on `replica` meanwhile is closed and the next one tried."""
    deadline = time.monotonic() + within_s
    while True:
        conn = ws(cluster)
        if replica_of(conn) != replica:
            return conn
        conn.close()
        assert time.monotonic() < deadline, f"every connection for {within_s} s went to {replica}"
        time.sleep(0.2)


def doomed_ending(conn) -> list[str]:
    """How the killed replica's connection ends: its error events, then its close code."""
    from websockets.exceptions import ConnectionClosed

    seen = []
    try:
        while True:
            event = recv(conn, timeout=30)
            if event["type"] == "error":
                seen.append(f"error {event['code']} {event.get('context_id')}")
    except ConnectionClosed as e:
        return [*seen, f"close {e.rcvd.code if e.rcvd else 'none'}"]
