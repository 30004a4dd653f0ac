"""bench.schedsim: the real scheduler on the simulated H200 device (the cost table of
docs/benchmarks.md runs 5 and 7). At 40 req/s the per-stream chunk schedules leave most of the device to
small codec calls and first audio waits past 100 ms; the codec tick (the CUDA default) keeps first
audio under 100 ms with no underrun."""

from __future__ import annotations

from bench.schedsim import Sim, codec_ms
from tts_engine.scheduler.config import CODEC_TICK_CUDA, SchedulerConfig


def test_codec_cost_table_interpolates_and_splits_batches():
    assert codec_ms(1, 1) == 2.31 and codec_ms(12, 32) == 24.53
    assert codec_ms(1, 1) < codec_ms(6, 1) < codec_ms(12, 1)
    assert codec_ms(4, 4) < codec_ms(4, 8) < codec_ms(4, 16) < codec_ms(4, 32)
    assert codec_ms(12, 64) == 2 * codec_ms(12, 32)


def test_the_codec_tick_holds_40_requests_a_second_where_schedules_alone_queue():
    off = Sim(40, 8, seed=3, config=SchedulerConfig(codec_tick_steps=0)).run()
    on = Sim(40, 8, seed=3, config=SchedulerConfig(codec_tick_steps=CODEC_TICK_CUDA)).run()
    assert off["requests"] == on["requests"] > 250
    assert off["ttfa_ms_p95"] > 120
    assert on["ttfa_ms_p95"] < 100 and on["underrun_requests"] == 0 and on["rejected"] == 0


def test_one_step_at_a_time_while_no_stream_needs_lookahead_brings_first_audio_sooner():
    # Streams run ~10x faster than real time, so the device is busy most of the time even at
    # 5 req/s; with lookahead on every step an arrival waits behind a second queued step.
    tick = CODEC_TICK_CUDA
    always = Sim(5, 20, seed=1, config=SchedulerConfig(codec_tick_steps=tick, lookahead_buffer_s=None)).run()
    lazy = Sim(5, 20, seed=1, config=SchedulerConfig(codec_tick_steps=tick)).run()
    assert lazy["requests"] == always["requests"] > 60
    assert lazy["ttfa_ms_p50"] < always["ttfa_ms_p50"] - 2
    assert lazy["underrun_requests"] == always["underrun_requests"] == 0


def test_a_faster_code_predictor_brings_first_audio_sooner_under_load():
    """The what-if knob: every frame step and codes half shorter by the code predictor's saving."""
    cfg = SchedulerConfig(codec_tick_steps=CODEC_TICK_CUDA)
    now = Sim(10, 15, seed=2, config=cfg).run()
    faster = Sim(10, 15, seed=2, code_predictor_cut_ms=3.45 - 1.2, config=cfg).run()
    assert faster["requests"] == now["requests"] > 100
    assert faster["ttfa_ms_p50"] < now["ttfa_ms_p50"] - 4 and faster["ttfa_ms_p95"] < now["ttfa_ms_p95"] - 4
    assert faster["underrun_requests"] == now["underrun_requests"] == 0


def test_run10_costs_charge_each_bucket_its_own_frame_step_and_codes_half():
    from bench.schedsim import RUN10_CODES_HALF_MS, RUN10_FRAME_MS

    run7, run10 = Sim(10, 1), Sim(10, 1, run10_costs=True)
    assert run7._frame_ms(1) == 5.17 and run7._codes_half_ms(1) == run7._codes_half_ms(64) == 3.4
    assert run10._frame_ms(1) == 3.30 < run10._frame_ms(8) < run10._frame_ms(64)
    assert all(RUN10_CODES_HALF_MS[b] < RUN10_FRAME_MS[b] for b in RUN10_FRAME_MS)
    cfg = SchedulerConfig(codec_tick_steps=CODEC_TICK_CUDA)
    slow, fast = Sim(5, 10, seed=4, config=cfg).run(), Sim(5, 10, seed=4, config=cfg, run10_costs=True).run()
    assert fast["requests"] == slow["requests"] > 30
    assert fast["ttfa_ms_p50"] < slow["ttfa_ms_p50"] and fast["underrun_requests"] == 0


def test_a_faster_codec_is_charged_less_on_every_call():
    from types import SimpleNamespace

    batch = SimpleNamespace(num_frames=12, chunks=(None,) * 8)
    assert Sim(10, 1, codec_scale=0.5)._codec_ms(batch) == 0.5 * codec_ms(12, 8)
    cfg = SchedulerConfig(codec_tick_steps=CODEC_TICK_CUDA)
    now, faster = (Sim(10, 10, seed=5, config=cfg, run10_costs=True, codec_scale=f).run() for f in (1.0, 0.5))
    assert faster["requests"] == now["requests"] > 60
    assert faster["ttfa_ms_p50"] < now["ttfa_ms_p50"] and faster["underrun_requests"] == 0


def test_run11_codec_costs_and_the_tick_yielding_to_a_prefill():
    """Run 11's codec table, and the what-if `codec_tick_yields_to_prefill` chose for the next GPU A/B:
    at 10 req/s first audio comes sooner, with no underrun."""
    from bench.schedsim import RUN11_CODEC_MS

    assert codec_ms(1, 1, RUN11_CODEC_MS) == 1.61 and abs(codec_ms(12, 32, RUN11_CODEC_MS) - 17.83) < 1e-9
    assert codec_ms(2, 8, RUN11_CODEC_MS) < codec_ms(2, 8)  # cheaper than runs 5-7's codec

    def run(yields: bool) -> dict:
        return Sim(10, 20, seed=1, plan_ms=1.2, plan_ms_per_row=0.08, run10_costs=True, codec_table=RUN11_CODEC_MS,
                   config=SchedulerConfig(codec_tick_steps=CODEC_TICK_CUDA, codec_tick_yields_to_prefill=yields)).run()

    base, yielded = run(False), run(True)
    assert yielded["requests"] == base["requests"] > 150
    assert yielded["ttfa_ms_p50"] < base["ttfa_ms_p50"] - 1 and yielded["ttfa_ms_p95"] < base["ttfa_ms_p95"] - 1
    assert yielded["underrun_requests"] == base["underrun_requests"] == 0 and yielded["rejected"] == 0
