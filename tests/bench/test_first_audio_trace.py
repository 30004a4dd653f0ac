"""bench.first_audio_trace's reading of a Chrome trace (the GPU run makes the trace; here a made-up one)."""

from __future__ import annotations

import pytest

from bench.first_audio_trace import AUDIO, OPEN, timeline


def _kernel(ts, dur, name):
    return {"cat": "kernel", "name": name, "ts": ts, "dur": dur}


def test_the_timeline_between_open_and_first_audio():
    events = [
        {"cat": "user_annotation", "name": OPEN, "ts": 1000.0, "dur": 5},
        _kernel(900, 50, "before the open"),  # not this request's
        _kernel(1400, 100, "embed"),  # 400 µs of host before the first kernel
        _kernel(1500, 300, "prefill"),  # back to back
        _kernel(1700, 50, "overlapping"),  # inside prefill's interval (another stream)
        {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 1850.0, "dur": 5},
        _kernel(1900, 200, "frame"),  # a 100 µs gap after prefill, one launch in it
        _kernel(2105, 95, "codec"),  # 5 µs: under the threshold
        {"cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": 2200, "dur": 20},  # device work too
        {"cat": "user_annotation", "name": AUDIO, "ts": 2500.0, "dur": 1},
        _kernel(2600, 10, "after the audio"),
    ]
    t = timeline({"traceEvents": events})
    assert t["open_to_audio_us"] == 1500 and t["open_to_first_kernel_us"] == 400 and t["first_kernel"] == "embed"
    assert t["kernels"] == 6 and t["busy_us"] == 100 + 300 + 200 + 95 + 20
    assert t["span_us"] == 820 and t["last_kernel_to_audio_us"] == 280
    assert t["graph_launches_at_us"] == [850]
    assert t["gaps"] == [{"at_us": 800, "gap_us": 100, "after": "prefill", "before": "frame",
                          "runtime_calls": ["cudaGraphLaunch"]}]
    assert t["gaps_over_threshold_us"] == 100


def test_a_trace_without_the_annotations_is_an_error():
    with pytest.raises(ValueError, match="annotations"):
        timeline({"traceEvents": [_kernel(0, 1, "k")]})
