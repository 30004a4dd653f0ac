"""The open-loop driver against an in-process fake target (no server): requests leave on
schedule however slow the responses are, and the measurements come out of the chunk timings."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from bench.load.arrivals import poisson_schedule
from bench.load.corpus import Prompt
from bench.load.driver import run_trial
from bench.load.records import Exchange

SR = 24000


def pcm(seconds_silent: float, seconds_loud: float) -> bytes:
    n_loud = round(seconds_loud * SR)
    loud = 0.3 * np.sin(2 * np.pi * 300 * np.arange(n_loud) / SR)
    x = np.concatenate([np.zeros(round(seconds_silent * SR)), loud])
    return (x * 32767).astype("<i2").tobytes()


class FakeTarget:
    """Each request: first chunk (40 ms silence + 40 ms tone) 50 ms after sending, a second 80 ms
    chunk at 250 ms (120 ms after the first ran dry: one underrun), then held open until hold_s."""

    name = "fake"

    def __init__(self, hold_s: float, hang_every: int = 0):
        self.hold_s = hold_s
        self.hang_every = hang_every
        self.calls = 0

    def new_exchange(self, keep_pcm: bool) -> Exchange:
        return Exchange(SR, keep_pcm)

    async def run(self, prompt: Prompt, ex: Exchange) -> None:
        self.calls += 1
        ex.t0 = time.perf_counter()
        ex.status = 200
        if self.hang_every and self.calls % self.hang_every == 0:
            await asyncio.sleep(3600)
        await asyncio.sleep(0.05)
        ex.ttfb_s = ex.since_t0(time.perf_counter())
        ex.add_pcm(pcm(0.04, 0.04), time.perf_counter())
        await asyncio.sleep(0.25 - ex.since_t0(time.perf_counter()))
        ex.add_pcm(pcm(0.0, 0.08)[:-1], time.perf_counter())  # a sample split across two reads
        ex.add_pcm(pcm(0.0, 0.08)[-1:], time.perf_counter())
        await asyncio.sleep(self.hold_s)
        ex.end_s = ex.since_t0(time.perf_counter())


def run(target, schedule, **kw):
    prompts = {a.index: Prompt("Hello there.", 1) for a in schedule}
    return asyncio.run(run_trial(target, schedule, prompts, **kw))


def test_requests_leave_on_schedule_while_earlier_ones_are_still_running():
    schedule = poisson_schedule(20, 0.2, 1.0, seed=5)
    assert len(schedule) >= 10
    out = run(FakeTarget(hold_s=1.0), schedule, timeout_s=10)
    # A closed loop would need len(schedule) * 1.3 s; open loop: the last arrival + one request.
    # (The trial's own clock: the garbage collection around it is not the schedule's.)
    assert out.wall_s < schedule[-1].at_s + 1.3 + 0.5
    assert len(out.records) == len(schedule)
    lags = [r.send_lag_s for r in out.records]
    assert max(lags) < 0.05 and min(lags) >= 0
    assert max(n for _, n in out.in_flight) >= len(schedule) // 2  # they overlap
    assert out.in_flight[-1][1] == 0


def test_measurements_follow_the_chunk_timings():
    schedule = poisson_schedule(5, 0.0, 0.6, seed=1)
    out = run(FakeTarget(hold_s=0.0), schedule, timeout_s=10)
    for r in out.records:
        assert r.ok and r.status == 200 and r.error is None
        assert r.first_playable_s == pytest.approx(0.05, abs=0.02)
        # onset: the window one hop before the tone, 40 ms into the first chunk
        assert r.onset_sample == round(0.03 * SR)
        assert r.audible_ttfa_s == pytest.approx(r.first_playable_s + 0.03)
        assert r.underruns == 1 and r.stall_total_s == pytest.approx(0.12, abs=0.02)
        assert r.audio_s == pytest.approx(0.16) and r.chunks[-2][1] + r.chunks[-1][1] == round(0.08 * SR)
        assert r.e2e_s == pytest.approx(0.25, abs=0.03)
        assert r.rtf == pytest.approx(r.e2e_s / r.audio_s)


def test_a_hung_request_times_out_and_the_rest_complete():
    schedule = poisson_schedule(10, 0.0, 0.6, seed=2)
    assert len(schedule) >= 3
    out = run(FakeTarget(hold_s=0.0, hang_every=2), schedule, timeout_s=0.5, keep_pcm=lambda i: True)
    hung = [r for r in out.records if not r.ok]
    assert len(hung) == len(schedule) // 2
    assert all(r.error == "timeout after 0.5 s" and r.audible_ttfa_s is None for r in hung)
    assert all(r.ok for r in out.records if r not in hung)
    assert set(out.kept_pcm) == {r.index for r in out.records if r.ok}  # only finished ones kept


class BlockingTarget(FakeTarget):
    """FakeTarget whose third request blocks the client's event loop for 80 ms after its first
    chunk: the second chunks of requests in flight then arrive late on the client's clock."""

    async def run(self, prompt: Prompt, ex: Exchange) -> None:
        self.calls += 1
        call = self.calls
        ex.t0 = time.perf_counter()
        ex.status = 200
        await asyncio.sleep(0.05)
        ex.ttfb_s = ex.since_t0(time.perf_counter())
        ex.add_pcm(pcm(0.0, 0.08), time.perf_counter())
        if call == 3:
            time.sleep(0.08)  # blocks the loop, as a collector pause would
        await asyncio.sleep(0.1)
        ex.add_pcm(pcm(0.0, 0.08), time.perf_counter())
        ex.end_s = ex.since_t0(time.perf_counter())


def test_the_client_records_its_own_loop_pauses_and_holds_off_the_collector():
    import gc

    from bench.load.driver import LOOP_STALL_S
    from bench.load.summary import underruns_in_stalls

    schedule = poisson_schedule(20.0, 0.0, 0.4, seed=4)
    assert len(schedule) >= 4
    enabled = gc.isenabled()
    out = run(BlockingTarget(hold_s=0.0), schedule, timeout_s=5.0)
    assert gc.isenabled() == enabled and not gc.get_freeze_count()
    assert out.client_stalls and max(n for _, n in out.client_stalls) >= 0.06
    assert all(n > LOOP_STALL_S for _, n in out.client_stalls)
    # A request whose first chunk ran dry during the pause counts an underrun inside it.
    late = [r for r in out.records if r.underruns]
    assert late and underruns_in_stalls(out.records, out.client_stalls) >= 1
    assert underruns_in_stalls(out.records, []) == 0


def test_outcomes_of_processes_that_shared_a_trial_merge_into_one():
    from bench.load.driver import TrialOutcome
    from bench.load.processes import merge_outcomes

    a = TrialOutcome(records=[], in_flight=[(0.0, 0), (0.1, 1), (0.5, 2), (0.9, 1), (1.0, 0)],
                     client_stalls=[(0.7, 0.03)], client_pids=[11], wall_s=1.0)
    b = TrialOutcome(records=[], in_flight=[(0.0, 0), (0.3, 1), (0.6, 0)], client_stalls=[(0.2, 0.05)],
                     client_pids=[12], wall_s=1.2)
    merged = merge_outcomes([a, b])
    assert merged.in_flight == [(0.0, 0), (0.1, 1), (0.3, 2), (0.5, 3), (0.6, 2), (0.9, 1), (1.0, 0)]
    assert merged.client_stalls == [(0.2, 0.05), (0.7, 0.03)]
    assert merged.client_pids == [11, 12] and merged.wall_s == 1.2


def test_a_failed_or_vanished_client_process_stops_the_trial_at_once():
    import queue
    import time
    from types import SimpleNamespace

    from bench.load.processes import _gather

    q = queue.Queue()
    q.put((0, None))
    q.put((1, "client process 1 (pid 7):\nTraceback ... ImportError: no module named httpx"))
    t0 = time.monotonic()
    alive = [SimpleNamespace(is_alive=lambda: True, exitcode=None)] * 2
    with pytest.raises(RuntimeError, match="ImportError"):
        _gather(q, 2, 60, alive)
    q.put((0, None))
    gone = [SimpleNamespace(is_alive=lambda: True, exitcode=None), SimpleNamespace(is_alive=lambda: False, exitcode=-9)]
    with pytest.raises(RuntimeError, match=r"exit codes \[None, -9\]"):
        _gather(q, 2, 60, gone)
    assert time.monotonic() - t0 < 5  # neither waited for the timeout
