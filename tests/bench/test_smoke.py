"""CPU smoke run: `cadence bench` against a real `cadence serve` process on the tiny random-weight
checkpoint, over HTTP and over the WebSocket (word by word), for a few seconds at a low rate.

The CPU numbers themselves mean nothing (two shared cores, random weights); what must hold is that
every request is sent and completes, the outputs are written, and the measurements are coherent.
"""

from __future__ import annotations

import json

import pytest

from bench.load.arrivals import poisson_schedule
from bench.load.server_proc import ServerProcess
from tts_engine.cli import main

WARMUP, DURATION = 0.5, 2.0


@pytest.fixture(scope="module")
def server_url(tiny_checkpoint):
    with ServerProcess(tiny_checkpoint, ready_timeout_s=120) as server:
        yield server.url


def bench(tmp_path, url: str, *args: str) -> dict:
    out = tmp_path / "out"
    # Single sentences (--max-join 1) keep each CPU request short, so the trials drain quickly.
    code = main(["bench", "--url", url, "--warmup", str(WARMUP), "--duration", str(DURATION), "--out", str(out),
                 "--max-join", "1", *args])
    assert code == 0
    assert {p.name for p in out.iterdir()} == {"results.json", "report.md", "ttfa_cdf.png", "ttfa_vs_rate.png",
                                               "in_flight.png"}
    assert all((out / name).stat().st_size > 1000 for name in ("ttfa_cdf.png", "ttfa_vs_rate.png", "in_flight.png"))
    data = json.loads((out / "results.json").read_text())
    data["_report"] = (out / "report.md").read_text()
    return data


def check_sane(data: dict, rates: list[float]) -> None:
    assert [s["rate"] for s in data["rates"]] == rates
    for trial in data["trials"]:
        # Open loop: exactly the scheduled requests went out, whatever the server did.
        schedule = poisson_schedule(trial["rate"], WARMUP, DURATION, trial["seed"])
        assert [r["index"] for r in trial["records"]] == [a.index for a in schedule]
        assert trial["in_flight"][-1][1] == 0 and trial["peak_in_flight_all"] >= 1
        for r in trial["records"]:
            assert r["ok"] and r["error"] is None, r["error"]
            assert r["onset_sample"] is not None  # random weights still make loud audio
            assert 0 < r["ttfb_s"] <= r["first_playable_s"] <= r["audible_ttfa_s"] <= r["e2e_s"] < 60
            assert r["audio_s"] > 0.5 and r["rtf"] > 0 and r["sample_rate"] == 24000
            assert sum(n for _, n in r["chunks"]) == round(r["audio_s"] * 24000)
            assert r["underruns"] == len(r["stalls"])
    for s in data["rates"]:
        assert s["requests"] > 0 and s["ok"] == s["requests"] and s["silent"] == 0
        assert 0 < s["audible_ttfa_s"]["p50"] <= s["audible_ttfa_s"]["p95"] <= s["audible_ttfa_s"]["p99"]
        assert s["chars_per_s"] > 0 and s["peak_in_flight"] >= 1
    report = data["_report"]
    assert "## Results" in report and report.count("\n| ") >= len(rates) + 1


@pytest.mark.slow
def test_http_sweep_against_a_real_server(server_url, tmp_path, monkeypatch):
    import bench.load.output as output

    written = []  # rates in each results.json written: one after each rate (a cut-off run keeps them), then final
    real_write = output.write_json
    monkeypatch.setattr(output, "write_json", lambda path, data: (written.append([r["rate"] for r in data["rates"]]),
                                                                  real_write(path, data)))
    data = bench(tmp_path, server_url, "--rates", "1,2", "--gpu-price", "2.5")
    check_sane(data, [1.0, 2.0])
    assert written == [[1.0], [1.0, 2.0], [1.0, 2.0]]
    # Streams were mid-audio between chunks, so the server's longest silence is a positive gap
    assert all(0 < r["server_silence_max_s"] < 5 for r in data["rates"]) and "## Server pauses" in data["_report"]
    assert data["config"]["target"] == "http"
    assert "## Cost" in data["_report"]
    # The engine's counters during each trial: only that trial's requests finished in it.
    for s, trial in zip(data["rates"], data["trials"], strict=True):
        assert s["server"]["finished"] == len(trial["records"]) and s["server"]["host_iterations"] > 0
        assert s["server"]["ready"] == 1 and s["server"]["active_streams"] == 0
    assert "## The engine during each rate" in data["_report"]


@pytest.mark.slow
def test_the_server_exempts_its_warm_heap_from_gc_and_switches_threads_sooner(server_url):
    # `cadence serve` freezes the heap after warm-up (engine/gcpause.py) and counts every collection.
    import httpx

    metrics = dict(line.rsplit(" ", 1) for line in httpx.get(f"{server_url}/metrics").text.splitlines()
                   if line.startswith("cadence_engine_gc_"))
    assert float(metrics["cadence_engine_gc_frozen_objects"]) > 10_000
    assert float(metrics["cadence_engine_gc_pauses"]) >= 0 and "cadence_engine_gc_pause_max_s" in metrics
    # and hands the GIL to a waiting thread after 0.5 ms instead of Python's 5 ms (--gil-switch-ms)
    gil = [line for line in httpx.get(f"{server_url}/metrics").text.splitlines()
           if line.startswith("cadence_engine_gil_switch_interval_s ")]
    assert gil and float(gil[0].split()[1]) == 0.0005


@pytest.mark.slow
def test_websocket_word_by_word_against_a_real_server(server_url, tmp_path):
    data = bench(tmp_path, server_url, "--target", "ws", "--ws-mode", "words", "--rates", "2", "--wer", "1")
    check_sane(data, [2.0])
    assert data["config"]["ws_mode"] == "words" and data["config"]["word_interval_s"] == 0.01
    # The WER pass ran on the first measured request (random weights: the figure itself is noise).
    assert data["wer"]["utterances"] == 1 and data["wer"]["words"] > 0
    assert "## Intelligibility" in data["_report"]


@pytest.mark.slow
def test_client_processes_share_the_arrivals_of_one_schedule(server_url, tmp_path):
    """--client-processes 2: the same open-loop schedule goes out from two other processes on one
    clock (every request once, on time), and the trial merges what they measured."""
    import os

    data = bench(tmp_path, server_url, "--rates", "3", "--client-processes", "2", "--wer", "1")
    check_sane(data, [3.0])
    trial = data["trials"][0]
    assert len(set(trial["client_pids"])) == 2 and os.getpid() not in trial["client_pids"]
    assert max(r["sent_at_s"] - r["scheduled_at_s"] for r in trial["records"]) < 0.25  # one shared start
    assert data["config"]["client_processes"] == 2 and data["wer"]["utterances"] == 1


@pytest.mark.slow
def test_latency_socket_part_against_a_running_server(server_url, tmp_path):
    from bench.socket_latency import corpus, socket_requests

    port = int(server_url.rsplit(":", 1)[1])
    sock = socket_requests(port, 2, corpus())
    assert sock["requests"] == 2 and 0 < sock["first_pcm_ms_p50"] <= sock["first_pcm_ms_p95"] <= sock["total_ms_p50"]
    assert sock["breakdown_mean"]  # the engine's TTFA parts from /metrics
