"""One trial's arrivals shared out among client processes (`--client-processes N`).

A Python client streams on the order of 100-150 requests a second of audio before its own event
loop falls behind the schedule: H100 sweeps at 150-200 req/s from one process sent requests 12-115 s
late (`send_lag_max_s`), which measures the client, not the server. With N processes the server
sees the same Poisson arrivals: request i goes out from process i mod N, every process starts on one
shared wall-clock instant (after all have imported their libraries), and their outcomes merge into
one: the records, the in-flight series summed, and every process's loop stalls (a stall is charged
to the underruns it overlaps in any process, so `underruns_in_client_stalls` errs high).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback

from .config import BenchConfig
from .driver import TrialOutcome

LEAD_S = 0.5  # from the go signal to the shared start: every process has its target to build
READY_TIMEOUT_S = 120.0


def run_shared(cfg: BenchConfig, base_url: str, rate: float, seed: int) -> TrialOutcome:
    """The trial of (rate, seed) from cfg.client_processes processes, merged."""
    n = cfg.client_processes
    ctx = mp.get_context("spawn")  # no copy of this process's event loop, threads or GPU state
    # One queue: each part posts (i, None) once ready, then (i, its outcome), or (i, a traceback) instead.
    posts, go, start_wall = ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_part, args=(cfg, base_url, rate, seed, i, posts, go, start_wall),
                         name=f"bench-client-{i}", daemon=True) for i in range(n)]
    for p in procs:
        p.start()
    try:
        _gather(posts, n, READY_TIMEOUT_S, procs)
        start_wall.value = time.time() + LEAD_S
        go.set()
        limit = LEAD_S + cfg.warmup_s + cfg.duration_s + cfg.request_timeout_s + READY_TIMEOUT_S
        parts = _gather(posts, n, limit, procs)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return merge_outcomes([out for _i, out in sorted(parts, key=lambda p: p[0])])


def _gather(q, n: int, timeout_s: float, procs) -> list:
    """n items from q; a part's failure (a traceback string) or a process gone without its item
    raises at once, not after the timeout."""
    items, deadline = [], time.monotonic() + timeout_s
    while len(items) < n:
        try:
            item = q.get(timeout=0.2)
        except queue.Empty:
            item = None
        if item is not None and isinstance(item[1], str):
            raise RuntimeError(f"a client process failed:\n{item[1]}")
        if item is not None:
            items.append(item)
        elif any(not p.is_alive() and p.exitcode != 0 for p in procs):
            codes = [p.exitcode for p in procs]
            raise RuntimeError(f"a client process exited without its results (exit codes {codes})")
        elif time.monotonic() > deadline:
            raise TimeoutError(f"client processes: {len(items)} of {n} answered within {timeout_s:.0f} s")
    return items


def _part(cfg: BenchConfig, base_url: str, rate: float, seed: int, i: int, posts, go, start_wall) -> None:
    try:
        from .sweep import run_one  # httpx, websockets, numpy: imported before the shared start

        posts.put((i, None))
        go.wait()
        posts.put((i, run_one(cfg, base_url, rate, seed, share=(i, cfg.client_processes),
                              start_wall=start_wall.value)))
    except BaseException:
        posts.put((i, f"client process {i} (pid {os.getpid()}):\n{traceback.format_exc()}"))


def merge_outcomes(parts: list[TrialOutcome]) -> TrialOutcome:
    """One outcome from the parts of a trial that shared a start (times are seconds from it)."""
    changes = sorted((t, level - before) for p in parts
                     for (_, before), (t, level) in zip(p.in_flight, p.in_flight[1:], strict=False))
    in_flight, level = [(0.0, 0)], 0
    for t, delta in changes:
        level += delta
        in_flight.append((t, level))
    return TrialOutcome(
        records=sorted((r for p in parts for r in p.records), key=lambda r: r.index),
        in_flight=in_flight,
        kept_pcm={k: v for p in parts for k, v in p.kept_pcm.items()},
        wall_s=max(p.wall_s for p in parts),
        client_stalls=sorted(s for p in parts for s in p.client_stalls),
        client_pids=[pid for p in parts for pid in p.client_pids],
    )
