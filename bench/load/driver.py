"""One open-loop trial: requests go out on their Poisson schedule whatever the server does.

A dispatcher sleeps until each arrival time and starts the request as a task; nothing waits for
completions, so a slow server faces a growing number of requests in flight (recorded over time)
instead of a slowed-down client. The trial ends once every request has finished or timed out.

The client must not shape what it measures: chunk arrival times are taken on its event loop, so a
pause of the loop looks like a late chunk. Python's cyclic garbage collector is held off for the
trial (objects made before it are frozen out of its reach; reference counting still frees the
rest), and a monitor task records every pause of the loop longer than LOOP_STALL_S, so that the
report can say which underruns coincide with one (a client pause of 100 ms reads as underruns
of the streams it stalls).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from tqdm import tqdm

from .arrivals import Arrival
from .corpus import Prompt
from .measure import measure
from .records import Exchange, RequestRecord


class Target(Protocol):
    name: str

    def new_exchange(self, keep_pcm: bool) -> Exchange: ...

    async def run(self, prompt: Prompt, ex: Exchange) -> None: ...

    async def close(self) -> None: ...


LOOP_STALL_S = 0.02
_TICK_S = 0.002


@dataclass
class TrialOutcome:
    records: list[RequestRecord]
    in_flight: list[tuple[float, int]]  # (seconds from trial start, requests in flight after the change)
    kept_pcm: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # index -> (PCM, rate), for WER
    wall_s: float = 0.0
    # (seconds from trial start, length): pauses of the client's event loop past LOOP_STALL_S
    client_stalls: list[tuple[float, float]] = field(default_factory=list)
    client_pids: list[int] = field(default_factory=lambda: [os.getpid()])  # the processes that sent it


async def _watch_loop(start: float, stalls: list[tuple[float, float]]) -> None:
    """Sleep in short ticks; a tick that returns late by more than LOOP_STALL_S was a loop pause."""
    while True:
        before = time.perf_counter()
        await asyncio.sleep(_TICK_S)
        late = time.perf_counter() - before - _TICK_S
        if late > LOOP_STALL_S:
            stalls.append((before + _TICK_S - start, late))


@contextlib.contextmanager
def _collector_held() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
        gc.collect()


async def run_trial(target: Target, schedule: list[Arrival], prompts: dict[int, Prompt], *, timeout_s: float,
                    keep_pcm: Callable[[int], bool] = lambda i: False, desc: str = "",
                    start_at: float | None = None) -> TrialOutcome:
    """start_at: the perf_counter() instant the schedule counts from (default: now); processes
    sharing a trial's arrivals pass one shared instant (processes.py)."""
    with _collector_held():  # entered first: its collection must not delay the schedule
        return await _run_trial(target, schedule, prompts, timeout_s=timeout_s, keep_pcm=keep_pcm, desc=desc,
                                start_at=start_at)


async def _run_trial(target: Target, schedule: list[Arrival], prompts: dict[int, Prompt], *, timeout_s: float,
                     keep_pcm: Callable[[int], bool], desc: str, start_at: float | None) -> TrialOutcome:
    outcome = TrialOutcome(records=[], in_flight=[(0.0, 0)])
    in_flight = 0
    bar = tqdm(total=len(schedule), desc=desc, unit="req", disable=None, leave=False)
    start = time.perf_counter() if start_at is None else start_at

    def change(delta: int) -> None:
        nonlocal in_flight
        in_flight += delta
        outcome.in_flight.append((time.perf_counter() - start, in_flight))

    async def one(arrival: Arrival) -> None:
        prompt = prompts[arrival.index]
        ex = target.new_exchange(keep_pcm(arrival.index))
        change(+1)
        try:
            await asyncio.wait_for(target.run(prompt, ex), timeout_s)
        except TimeoutError:
            ex.error = f"timeout after {timeout_s:g} s"
        except Exception as e:  # a client-side failure is one failed request, not a crashed run
            ex.error = f"client error: {type(e).__name__}: {e}"
        done = time.perf_counter()
        change(-1)
        outcome.records.append(measure(ex, index=arrival.index, measured=arrival.measured, prompt=prompt,
                                       scheduled_at_s=arrival.at_s, trial_t0=start, done_at=done))
        if ex.keep_pcm and ex.error is None:
            outcome.kept_pcm[arrival.index] = (bytes(ex.pcm), ex.sample_rate)
        bar.update(1)
        bar.set_postfix(in_flight=in_flight, refresh=False)

    tasks = []
    watcher = asyncio.create_task(_watch_loop(start, outcome.client_stalls))
    for arrival in schedule:
        delay = start + arrival.at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(arrival)))
    await asyncio.gather(*tasks)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    outcome.wall_s = time.perf_counter() - start
    bar.close()
    outcome.records.sort(key=lambda r: r.index)
    return outcome
