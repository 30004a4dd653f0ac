"""`cadence agent-bench` (bench/agent): the caller-side arithmetic on known timelines, and the harness
end to end on the CPU: real `cadence serve` (tiny random-weight checkpoint), the real agent servers
with the paced stand-in LLM, aiortc and Twilio-protocol callers on real sockets, spoken turns."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.agent import cli
from bench.agent.timeline import GAP_MS, Heard, Turn, measure_turns

from .starving_proxy import starving_proxy

REPO = Path(__file__).resolve().parents[2]
FIELDS = ("token_to_audio_ms", "token_to_tts_ms", "speech_end_to_audio_ms", "speech_end_to_transcript_ms",
          "speech_end_to_token_ms", "barge_in_ms", "barge_in_from_speech_ms")


def _heard(*spans: tuple[float, float, float]) -> Heard:
    """20 ms pieces over each (start, end, rms) span, on arrival (as WebRTC hands them over)."""
    heard = Heard()
    for start, end, rms in spans:
        t = start
        while t < end:
            heard.play(t, 20.0, rms, buffered=False)
            t += 20.0
    return heard


def test_a_steady_reply_is_timed_from_the_first_token_with_no_underrun():
    heard = _heard((0, 1300, 0.0), (1300, 4000, 0.05), (4000, 5000, 0.0))
    events = [{"type": "llm_first_token", "t_ms": 1200.0}]
    [r] = measure_turns(heard, [Turn(started_ms=0.0, speech_end_ms=900.0)], events)
    assert (r["token_to_audio_ms"], r["speech_end_to_audio_ms"]) == (100.0, 400.0)
    assert (r["underruns"], r["barge_in_ms"], r["interrupted"]) == (0, None, False)


def test_the_engines_part_is_timed_from_the_first_token_to_the_agents_stamp():
    heard = _heard((0, 1300, 0.0), (1300, 4000, 0.05))
    events = [{"type": "tts_first_audio", "t_ms": 1100.0},  # an earlier reply's: before this turn's token
              {"type": "llm_first_token", "t_ms": 1200.0}, {"type": "tts_first_audio", "t_ms": 1230.0}]
    [r] = measure_turns(heard, [Turn(started_ms=1000.0)], events)
    assert (r["token_to_tts_ms"], r["token_to_audio_ms"]) == (30.0, 100.0)
    [none] = measure_turns(heard, [Turn(started_ms=1000.0)], events[:2])
    assert none["token_to_tts_ms"] is None


def test_the_wait_after_speech_splits_at_the_transcript_and_the_first_token():
    heard = _heard((0, 1300, 0.0), (1300, 4000, 0.05))
    events = [{"type": "stt_final", "t_ms": 300.0},  # a draft's final before the speech ended: not this one
              {"type": "stt_final", "t_ms": 1000.0}, {"type": "llm_first_token", "t_ms": 1200.0},
              {"type": "stt_final", "t_ms": 3000.0}]  # the barge-in's, after the reply began
    [r] = measure_turns(heard, [Turn(started_ms=0.0, speech_end_ms=900.0)], events)
    assert (r["speech_end_to_transcript_ms"], r["speech_end_to_token_ms"], r["speech_end_to_audio_ms"]) == (
        100.0, 300.0, 400.0)
    [none] = measure_turns(heard, [Turn(started_ms=0.0, speech_end_ms=900.0)], events[2:])
    assert none["speech_end_to_transcript_ms"] is None and none["speech_end_to_token_ms"] == 300.0


def test_a_gap_in_the_reply_is_an_underrun_and_a_short_one_is_not():
    heard = _heard((0, 1000, 0.05), (1000, 1200, 0.0), (1200, 1240, 0.05), (1240, 1280, 0.0), (1280, 2000, 0.05))
    [r] = measure_turns(heard, [Turn(started_ms=-500.0)], [{"type": "llm_first_token", "t_ms": -100.0}])
    assert (r["underruns"], r["underrun_ms"]) == (1, 200.0)  # the 40 ms dip is under GAP_MS
    assert GAP_MS > 40


def test_missing_audio_on_a_buffered_leg_is_an_underrun_and_clear_silences_it():
    heard = Heard()
    for arrived in (0, 20, 40, 200, 220):  # a carrier leg: 140 ms with nothing to play
        heard.play(arrived, 20.0, 0.05, buffered=True)
    [r] = measure_turns(heard, [Turn(started_ms=-50.0)], [{"type": "llm_first_token", "t_ms": -10.0}])
    assert (r["underruns"], r["underrun_ms"]) == (1, 140.0)
    heard.play(240, 500.0, 0.05, buffered=True)
    heard.clear(300.0)
    assert heard.pieces[-1][1] == 300.0


def test_barge_in_is_timed_to_the_last_audible_audio_and_a_turn_never_heard_counts():
    heard = _heard((0, 3000, 0.05), (3000, 4000, 0.0), (4000, 5000, 0.05))
    events = [{"type": "interruption", "t_ms": 100.0},  # the caller's own turn start: not a barge-in
              {"type": "llm_first_token", "t_ms": 200.0}, {"type": "interruption", "t_ms": 2920.0},
              {"type": "llm_first_token", "t_ms": 3900.0}]
    turns = [Turn(started_ms=0.0, barge_at_ms=2500.0), Turn(started_ms=6000.0)]
    first, never = measure_turns(heard, turns, events, end_ms=9000.0)
    assert (first["barge_in_ms"], first["barge_in_from_speech_ms"]) == (80.0, 500.0)
    assert first["underruns"] == 0  # the reply ends at the interruption
    assert never["heard"] is False and never["token_to_audio_ms"] is None
    from bench.agent.report import summarise

    row = summarise(2, [first, never], [])
    assert row["token_to_audio_ms"]["p99"] == math.inf and row["turns_heard"] == 1


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(argv)


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="comma-separated"):
        cli.conversations("1,two")
    with pytest.raises(ValueError, match=r"\[1, 500\]"):
        cli.conversations("0")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        cli.run(_args("--model", str(tmp_path / "nope"), "--device", "cpu"))
    with pytest.raises(ValueError, match="ws://"):
        cli.run(_args("--cadence-url", "http://x"))
    with pytest.raises(ValueError, match="--turns"):
        cli.run(_args("--cadence-url", "ws://127.0.0.1:1/v1/stream", "--turns", "0"))
    with pytest.raises(ValueError, match="--agent-workers must be in 1-32"):
        cli.run(_args("--cadence-url", "ws://127.0.0.1:1/v1/stream", "--agent-workers", "0"))
    with pytest.raises(ValueError, match="--stt-workers must be in 1-16"):
        cli.run(_args("--cadence-url", "ws://127.0.0.1:1/v1/stream", "--stt-workers", "0"))


def test_register_adds_the_agent_bench_command():
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["agent-bench", "--cadence-url", "ws://h:1/v1/stream", "--conversations", "1,20"])
    assert (args.func, args.conversations, args.transport) == (cli.run, [1, 20], "webrtc")


@pytest.fixture(scope="module")
def engine_url(tiny_checkpoint):
    from bench.load.server_proc import ServerProcess

    server = ServerProcess(tiny_checkpoint, device="cpu").start()
    try:
        yield server.url.replace("http://", "ws://") + "/v1/stream"
    finally:
        server.stop()


def _bench(out: Path, *argv: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "bench.agent", "--out", str(out), "--ramp-s", "0.5", *argv],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "agent-bench.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["webrtc", "twilio"])
def test_concurrent_callers_are_measured_end_to_end_with_a_barge_in(engine_url, tmp_path, transport):
    """Two callers at once, each in a client process of its own, against two agent processes on one port,
    through a pass-through proxy that sees the agent's playout reports reach the engine."""
    with starving_proxy(engine_url, speed=None) as (url, sent):
        data = _bench(tmp_path, "--cadence-url", url, "--transport", transport, "--conversations", "2",
                      "--turns", "1", "--callers-per-process", "1", "--agent-workers", "2")
    assert sent["playout"] > 0 and sent["open"] >= 2, sent
    [row] = data["rows"]
    assert "PACED STAND-IN" in data["llm"] and data["playout_reports"] is True
    assert (row["conversations"], row["turns"], row["turns_heard"], row["caller_errors"]) == (2, 2, 2, [])
    for key in FIELDS:  # every turn was heard and interrupted: every figure is there, finite
        assert row[key]["n"] == 2 and 0 <= row[key]["p99"] < 30_000, (key, row[key])
    for record in row["records"]:
        # the reply cannot be heard before the stand-in's first token, nor before the caller stopped
        assert record["interrupted"] and record["token_to_audio_ms"] > 0, record
        assert record["speech_end_to_audio_ms"] > record["token_to_audio_ms"], record
        # the recogniser's transcript, then the LLM's first token, then the audio
        assert 0 < record["speech_end_to_transcript_ms"] < record["speech_end_to_token_ms"], record
        assert record["speech_end_to_token_ms"] < record["speech_end_to_audio_ms"], record
        assert 0 < record["token_to_tts_ms"] < record["token_to_audio_ms"], record
        assert record["barge_in_from_speech_ms"] > record["barge_in_ms"], record
    assert isinstance(row["underruns"], int) and row["underrun_ms"]["n"] == 2
    # both processes watched their loops for the whole round (a 10 ms probe: dozens a second)
    assert row["agent_loop_lag_ms"]["n"] > 100 and row["callers_loop_lag_ms"]["n"] > 100, row
    # the machine's cores were watched too: callers, agents and the engine kept some of them busy
    assert 0 < row["machine_cpu_busy"]["mean"] <= row["machine_cpu_busy"]["peak"] <= 1, row["machine_cpu_busy"]
    assert "| 2 | 2/2 |" in (tmp_path / "agent-bench.md").read_text()
    assert (tmp_path / "agent-bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_starved_engine_shows_underruns_at_the_caller(engine_url, tmp_path):
    """The engine's audio reaches the agent at half real time: the caller hears it break up."""
    with starving_proxy(engine_url, speed=0.5) as (starved, sent):
        data = _bench(tmp_path, "--cadence-url", starved, "--conversations", "1", "--turns", "1",
                      "--no-barge-in", "--no-playout-reports")
    assert sent["playout"] == 0 and sent["open"] >= 1, sent  # the comparison's switch holds them back
    [row] = data["rows"]
    assert row["turns_heard"] == 1 and data["playout_reports"] is False
    assert row["underruns"] >= 3 and row["underrun_ms"]["max"] > 500, row
