"""results.json, report.md and plots from a hand-made sweep (no server)."""

from __future__ import annotations

import gzip
import json
import lzma
from dataclasses import replace
from pathlib import Path

import pytest

from bench.load.config import BenchConfig
from bench.load.corpus import CharMix, prompt_for
from bench.load.driver import TrialOutcome
from bench.load.output import dumps, to_json
from bench.load.plots import write_plots
from bench.load.report import render
from bench.load.summary import capacity, cost_per_million_chars, summarize
from bench.load.sweep import SweepResult, Trial

from .test_summary import rec


def sweep(tmp_path: Path) -> SweepResult:
    cfg = BenchConfig(out=tmp_path, url="http://127.0.0.1:1", rates=(5.0, 10.0, 20.0), warmup_s=1, duration_s=10,
                      gpu_price=4.29, label="unit test")
    result = SweepResult(cfg)
    per_rate = {
        5.0: [rec(i, 0.02, chars=60) for i in range(50)],
        10.0: [rec(i, 0.04, chars=60) for i in range(100)],
        # 20 req/s: three failures in 200 (1.5 %) -> p99 lands on them; a lagging send; the rate fails
        20.0: [rec(i, 0.06, chars=60) for i in range(197)] + [rec(197, None, ok=False, error="HTTP 503: busy"),
                                                              rec(198, None, ok=False, error="HTTP 503: busy"),
                                                              rec(199, None, ok=False, error="timeout after 1 s")],
    }
    per_rate[20.0][5] = replace(per_rate[20.0][5], sent_at_s=per_rate[20.0][5].scheduled_at_s + 0.05)
    for rate, records in per_rate.items():
        outcome = TrialOutcome(records=records, in_flight=[(0.0, 0), (1.0, 3), (5.0, 7), (12.0, 0)], wall_s=12)
        result.trials.append(Trial(rate, 0, outcome, 7, CharMix.of([prompt_for(0, r.index) for r in records])))
        result.rates.append(summarize(rate, [0], records, cfg.duration_s, 7))
    result.capacity = capacity(result.rates, cfg.slo_s)
    result.cost_per_million_chars = cost_per_million_chars(4.29, result.capacity.chars_per_s)
    return result


def test_json_report_and_plots(tmp_path):
    result = sweep(tmp_path)
    data = to_json(result, ["cadence", "bench", "--url", "http://127.0.0.1:1"])
    text = dumps(data)
    assert json.loads(text) == data  # strict JSON: no NaN/Infinity tokens
    assert data["capacity_rate"] == 10.0
    assert [r["sustained"] for r in data["rates"]] == [True, True, False]
    assert data["rates"][2]["audible_ttfa_s"]["p99"] == "inf" and data["rates"][2]["audible_ttfa_s"]["p95"] == 0.06
    assert data["cost_per_million_chars"] == pytest.approx(4.29 * 1e6 / (100 * 60 / 10 * 3600), abs=1e-6)
    assert len(data["trials"]) == 3 and len(data["trials"][2]["records"]) == 200

    names = write_plots(data, tmp_path)
    assert names == ["ttfa_cdf.png", "ttfa_vs_rate.png", "in_flight.png"]
    assert all((tmp_path / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)

    report = render(data, names)
    assert "**unit test**" in report
    assert "| 10 | 100 | 100 | 40.0 / 40.0 / 40.0 |" in report
    assert "| 20 | 200 | 197 | 60.0 / 60.0 / inf |" in report
    assert "**10 req/s**" in report
    assert f"**${data['cost_per_million_chars']:.2f} per million characters**" in report
    assert "HTTP 503 x2" in report and "timeout after 1 s x1" in report
    # the served alone: the three failures left out, p99 is a served request's
    assert data["rates"][2]["served_audible_ttfa_s"]["p99"] == 0.06
    assert "the served requests alone" in report and "20 req/s 60.0 / 60.0 / 60.0 ms (197 served)" in report
    assert "**Warning**" in report and "20 req/s 50.0 ms" in report
    assert "![ttfa_cdf.png](ttfa_cdf.png)" in report


def test_rerender_rebuilds_the_report_and_plots_from_results_json(tmp_path):
    from bench.load import output, rerender

    data = to_json(sweep(tmp_path), ["cadence", "bench", "--no-plots"])
    output.write_json(tmp_path / "results.json", data)
    assert rerender.main([str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert report == render(data, ["ttfa_cdf.png", "ttfa_vs_rate.png", "in_flight.png"])
    assert all((tmp_path / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
               for n in ("ttfa_cdf.png", "ttfa_vs_rate.png", "in_flight.png"))
    assert rerender.main([]) == 2  # usage


def test_runs_at_different_rates_merge_into_one_sweep(tmp_path):
    from bench.load.merge import main as merge_main
    from bench.load.merge import merge

    full = to_json(sweep(tmp_path), ["cadence", "bench"])
    low = {**full, "rates": full["rates"][:1], "trials": full["trials"][:1], "command": ["cadence", "bench", "low"]}
    high = {**full, "rates": full["rates"][1:], "trials": full["trials"][1:], "command": ["cadence", "bench", "high"]}
    merged = merge([high, low])
    assert [r["rate"] for r in merged["rates"]] == [5.0, 10.0, 20.0] == merged["config"]["rates"]
    assert [t["rate"] for t in merged["trials"]] == [5.0, 10.0, 20.0]
    assert merged["capacity_rate"] == full["capacity_rate"] == 10.0
    assert merged["cost_per_million_chars"] == pytest.approx(full["cost_per_million_chars"])
    assert [p["rates"] for p in merged["parts"]] == [[10.0, 20.0], [5.0]]
    assert merged["config"]["duration_s"] == full["config"]["duration_s"]
    with pytest.raises(ValueError, match="differ in warmup_s"):
        merge([low, {**high, "config": {**high["config"], "warmup_s": 99}}])
    # A 300 s phase merged with shorter ones: each rate keeps its measured seconds, and the report says so.
    longer = {**low, "config": {**low["config"], "duration_s": 30.0},
              "rates": [{**low["rates"][0], "measured_s": 30.0 * len(low["config"]["seeds"])}]}
    mixed = merge([high, longer])
    assert mixed["config"]["duration_s"] is None
    method = next(line for line in render(mixed, []).splitlines() if line.startswith("- method"))
    assert "(5 req/s: 30 s, 10 req/s: 10 s, 20 req/s: 10 s) measured per trial" in method
    with pytest.raises(ValueError, match="more than one run"):
        merge([low, low])
    relabelled = {**high, "config": {**high["config"], "label": "other commit"}}
    with pytest.raises(ValueError, match="differ in label"):
        merge([low, relabelled])
    assert merge([low, relabelled], label="both")["config"]["label"] == "both"
    (tmp_path / "low").mkdir()
    (tmp_path / "low" / "results.json").write_text(dumps(low))
    (tmp_path / "high").mkdir()  # committed runs are packed with xz (earlier ones with gzip): read every way
    (tmp_path / "high" / "results.json.xz").write_bytes(lzma.compress(dumps(high).encode()))
    assert merge_main([str(tmp_path / "out"), str(tmp_path / "low"), str(tmp_path / "high")]) == 0
    (tmp_path / "high" / "results.json.xz").unlink()
    (tmp_path / "high" / "results.json.gz").write_bytes(gzip.compress(dumps(high).encode()))
    assert merge_main([str(tmp_path / "out2"), str(tmp_path / "low"), str(tmp_path / "high")]) == 0
    assert (tmp_path / "out2" / "report.md").read_text() == (tmp_path / "out" / "report.md").read_text()
    report = (tmp_path / "out" / "report.md").read_text()
    assert "merged from 2 runs" in report and "`cadence bench high`" in report
    assert report.count("\n| ") >= 4


def test_the_engine_table_shows_host_time_per_iteration_and_the_longest_iteration(tmp_path):
    data = to_json(sweep(tmp_path), ["cadence", "bench"])
    data["rates"][0]["server"] = {"host_iterations": 100.0, "host_plan_s": 0.5, "host_wait_s": 1.5,
                                  "host_iteration_max_s": 0.08, "gc_pauses": 3.0, "gc_pause_sum_s": 0.006,
                                  "gc_pause_max_s": 0.004}
    report = render(data, [])
    assert "| rate | iterations | plan ms | wait ms | device ms | longest iteration ms (since start) |" in report
    assert "| 5 | 100 | 5.00 | 15.00 | - | 80.0 | 3 | 6.0 | 4.0 |" in report  # a CPU server: no device time
    data["rates"][0]["server"]["device_busy_s"] = 1.25
    assert "| 5 | 100 | 5.00 | 15.00 | 12.50 | 80.0 | 3 | 6.0 | 4.0 |" in render(data, [])
