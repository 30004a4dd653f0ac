"""The engine's counters around a trial: parsed from Prometheus text, differenced, pooled."""

from __future__ import annotations

from bench.load.server_metrics import during, host_per_iteration_ms, parse, pooled, scrape

TEXT = """# HELP cadence_engine_steps engine metric 'steps'
# TYPE cadence_engine_steps gauge
cadence_engine_steps 120.0
cadence_engine_host_plan_s 0.5
cadence_engine_host_wait_s 1.5
cadence_engine_host_iterations 100.0
cadence_engine_gc_pause_max_s 0.002
cadence_engine_active_streams 3.0
cadence_http_responses_total{endpoint="speech",status="200"} 7.0
cadence_engine_bogus nope
"""


def test_parse_keeps_the_engine_gauges_only():
    assert parse(TEXT) == {"steps": 120.0, "host_plan_s": 0.5, "host_wait_s": 1.5, "host_iterations": 100.0,
                           "gc_pause_max_s": 0.002, "active_streams": 3.0}


def test_during_differences_counts_and_keeps_levels():
    before = {"steps": 20.0, "host_plan_s": 0.1, "host_wait_s": 0.5, "host_iterations": 50.0,
              "gc_pause_max_s": 0.001, "active_streams": 9.0}
    d = during(before, parse(TEXT))
    assert d["steps"] == 100.0 and d["host_iterations"] == 50.0 and abs(d["host_plan_s"] - 0.4) < 1e-12
    assert d["gc_pause_max_s"] == 0.002 and d["active_streams"] == 3.0  # as read after, not differenced
    per = host_per_iteration_ms(d)
    assert abs(per["plan"] - 8.0) < 1e-9 and abs(per["wait"] - 20.0) < 1e-9 and set(per) == {"plan", "wait"}
    # the longest iteration is a level: no share of each iteration
    assert set(host_per_iteration_ms({**d, "host_iteration_max_s": 0.08})) == {"plan", "wait"}
    assert during(before, None) is None and host_per_iteration_ms({"steps": 1.0}) is None


def test_pooled_sums_counts_and_takes_the_largest_level():
    p = pooled([{"steps": 10.0, "gc_pause_max_s": 0.003}, {"steps": 5.0, "gc_pause_max_s": 0.001}])
    assert p == {"steps": 15.0, "gc_pause_max_s": 0.003}
    assert pooled([]) is None


def test_a_target_without_metrics_gives_none():
    assert scrape("http://127.0.0.1:9", timeout_s=0.5) is None  # nothing listens on the discard port
