"""The voice-to-voice benchmark (bench/voice): its per-stage arithmetic on known times, and the
aiortc client (the GPU machine's client) through two spoken turns against a real `cadence demo`."""

from __future__ import annotations

import json

import pytest

from bench.voice import report
from bench.voice.browser import records_from


def test_records_and_percentiles_from_the_page_clock():
    turns = [{"speech_end_at": 1000.0, "turn_end_at": 1600.0, "heard_at": 2300.0},
             {"speech_end_at": 9000.0, "turn_end_at": 9500.0, "heard_at": 10100.0}]
    events = [{"type": "stt_final", "at": 1300.0, "text": " What is it? "}, {"type": "user_stopped", "at": 1600.0},
              {"type": "bot_turn", "at": 1650.0}, {"type": "bot_started", "at": 2100.0},
              {"type": "bot", "at": 2400.0, "text": "You said:"},
              {"type": "stt_final", "at": 9200.0, "text": "Again?"}, {"type": "bot_turn", "at": 9520.0},
              {"type": "bot_started", "at": 9900.0}]
    records = records_from(["q1", "q2", "q3"], turns, events)
    assert records[0] == {"question": "q1", "speech_end": 1.0, "turn_end": 1.6, "stt_final": 1.3, "bot_turn": 1.65,
                          "bot_started": 2.1, "heard": 2.3, "transcript": "What is it?", "reply": "You said:"}
    assert records[1]["stt_final"] == 9.2 and records[1]["bot_turn"] == 9.52
    assert records[2]["heard"] is None  # a turn never heard counts as one, not as a zero
    summary = report.summarise(records, {"client": "test"})
    assert (summary["turns"], summary["turns_heard"]) == (3, 2)
    assert summary["speech_end_to_first_audio"]["p50_s"] == pytest.approx(1.2)  # 1.3 and 1.1
    stages = summary["stages"]
    assert stages["turn end (VAD stop + speech timeout)"]["p50_s"] == pytest.approx(0.55)
    assert stages["TTS first audio to transport"]["max_s"] == pytest.approx(0.45)


def test_the_report_is_json_and_a_plot(tmp_path):
    records = [{"question": "q", "speech_end": 0.0, "turn_end": 0.5, "stt_final": 0.3, "bot_turn": 0.52,
                "bot_started": 0.8, "heard": 0.9, "transcript": "q", "reply": "a"}]
    paths = report.write(report.summarise(records, {"client": "test"}), tmp_path)
    assert [p.name for p in paths] == ["voice-bench.json", "voice-bench.png"]
    assert json.loads(paths[0].read_text())["speech_end_to_first_audio"]["p50_s"] == 0.9
    assert paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_are_clear_errors():
    from bench.voice.run import run_voice_bench

    with pytest.raises(ValueError, match="client must be one of"):
        run_voice_bench(client="telnet")
    with pytest.raises(ValueError, match="turns must be in"):
        run_voice_bench(turns=0)


@pytest.mark.slow
def test_the_aiortc_client_measures_spoken_turns_against_cadence_demo(tmp_path):
    """Two questions over WebRTC from the aiortc client to `cadence demo` (offline defaults: Whisper,
    the scripted LLM, Piper): each is transcribed, answered and heard, and every stage is timed."""
    from bench.voice.run import run_voice_bench

    result = run_voice_bench(client="aiortc", turns=2, out=tmp_path)
    assert (result["turns"], result["turns_heard"]) == (2, 2), result
    for record, key in zip(result["records"], ("capital", "moon")):
        assert key in record["transcript"].lower(), record
        assert record["reply"].startswith("You said:"), record
        order = [record[k] for k in ("speech_end", "turn_end", "bot_turn", "bot_started", "heard")]
        assert order == sorted(order) and record["stt_final"] > record["speech_end"], record
    assert all(s["n"] == 2 for s in result["stages"].values()), result["stages"]
    assert (tmp_path / "voice-bench.png").is_file()
