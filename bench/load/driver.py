"""One open-loop trial: requests go out on their Poisson schedule whatever the server does.

A dispatcher sleeps until each arrival time and starts the request as a task; nothing waits for
completions, so a slow server faces a growing number of requests in flight (recorded over time)
instead of a slowed-down client. The trial ends once every request has finished or timed out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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


@dataclass
class TrialOutcome:
    records: list[RequestRecord]
    in_flight: list[tuple[float, int]]  # (seconds from trial start, requests in flight after the change)
    kept_pcm: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # index -> (PCM, rate), for WER
    wall_s: float = 0.0


async def run_trial(target: Target, schedule: list[Arrival], prompts: dict[int, Prompt], *, timeout_s: float,
                    keep_pcm: Callable[[int], bool] = lambda i: False, desc: str = "") -> TrialOutcome:
    outcome = TrialOutcome(records=[], in_flight=[(0.0, 0)])
    in_flight = 0
    bar = tqdm(total=len(schedule), desc=desc, unit="req", disable=None, leave=False)
    start = time.perf_counter()

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
    for arrival in schedule:
        delay = start + arrival.at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(arrival)))
    await asyncio.gather(*tasks)
    outcome.wall_s = time.perf_counter() - start
    bar.close()
    outcome.records.sort(key=lambda r: r.index)
    return outcome
