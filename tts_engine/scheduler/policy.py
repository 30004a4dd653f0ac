"""Which work runs in the next engine step. Pure functions over stream states; no torch.

Frame rows, most urgent first:
  0. starving: passed over `starvation_steps` steps in a row (a guard; deadlines alone already
     move every audible stream forward as its buffer drains)
  1. not yet audible, by arrival: their listener hears nothing yet, and the first chunk is one
     frame, so prefill + two frame steps + a one-frame codec call stand between them and sound
  2. audible, by playout deadline (when the listener's buffer runs dry), then arrival
The batch holds every candidate up to the largest captured bucket, unless capacity is short (more
candidates than the largest bucket, or a predicted cycle that misses real time): then streams more
than `yield_buffer_s` ahead of their listener yield, and only fill rows the smaller bucket of the
others would pad anyway (a padded row costs as much as a real one).

Prefills are FIFO. One per step while a slot is free; more while the most urgent audible stream's
buffer covers their cost, so that admitting new streams never makes a playing one run dry.

Chunks follow each stream's chunk schedule over the frames launched so far (see request.py); a
stream that yields also defers its chunks unless it is ending or flushing.
"""

from __future__ import annotations

from collections.abc import Callable

from .config import SchedulerConfig
from .request import StreamState


def starving(s: StreamState, cfg: SchedulerConfig) -> bool:
    return cfg.starvation_steps > 0 and s.skipped_steps >= cfg.starvation_steps


def urgency(s: StreamState, now: float, cfg: SchedulerConfig) -> tuple[int, float, float]:
    if starving(s, cfg):
        return (0, -float(s.skipped_steps), s.arrival)
    if not s.audible:
        return (1, s.arrival, 0.0)
    return (2, s.playout_deadline(now), s.arrival)


def deferrable(s: StreamState, now: float, cfg: SchedulerConfig) -> bool:
    """Far enough ahead of its listener to give its turn to others when capacity is short."""
    return s.audible and s.buffered_s(now) > cfg.yield_buffer_s and not starving(s, cfg)


def select_frame_rows(candidates: list[StreamState], now: float, cfg: SchedulerConfig, *, max_batch: int,
                      bucket_for: Callable[[int], int], short: bool) -> list[StreamState]:
    """Streams that produce a frame this step, most urgent first."""
    ordered = sorted(candidates, key=lambda s: urgency(s, now, cfg))
    if not short:
        return ordered[:max_batch]
    must = [s for s in ordered if not deferrable(s, now, cfg)][:max_batch]
    if not must:
        return ordered[:max_batch]
    room = bucket_for(len(must)) - len(must)
    fill = [s for s in ordered if deferrable(s, now, cfg)][:room]
    return sorted(must + fill, key=lambda s: urgency(s, now, cfg))


def select_prefills(queued: list[StreamState], free_slots: int, cfg: SchedulerConfig, *,
                    cost_of: Callable[[StreamState], float], budget_s: float) -> list[StreamState]:
    """FIFO; the first while a slot is free, the next ones while their total cost fits `budget_s`."""
    chosen: list[StreamState] = []
    spent = 0.0
    for s in sorted(queued, key=lambda s: s.arrival):
        if len(chosen) >= min(free_slots, cfg.max_prefills_per_step):
            break
        cost = cost_of(s)
        if chosen and spent + cost > budget_s:
            break
        chosen.append(s)
        spent += cost
    return chosen


def flushing(s: StreamState) -> bool:
    """Every frame the oldest pending flush waits for has been launched."""
    return bool(s.flush_targets) and s.frames_launched >= s.flush_targets[0]


def due_chunks(s: StreamState, on_tick: bool | None = None, urgent: bool = False,
               free_chunks: int = 1) -> list[tuple[int, int]]:
    """(first absolute frame, frames) of each chunk due now, in order.

    on_tick None: the stream's chunk schedule. A chunk is due once its frames are launched; a
    shorter one when no more frames will come (end of stream) or a flush waits for them.

    on_tick True/False (the codec tick, `SchedulerConfig.codec_tick_steps`): the first `free_chunks`
    chunks as the schedule says, as soon as their frames are launched; after them, chunks are due
    only on a tick step (or at the end, for a flush, or while `urgent`: its listener is about to run
    dry), holding every ready frame in pieces of at most the schedule's largest entry. Streams that
    get a frame every step then all hold the same number of frames at a tick and share one codec
    call, instead of one small call per stream's phase."""
    out = []
    chunked, planned = s.frames_chunked, s.chunks_planned
    ready = s.audible_frames_ready()
    short_ok = s.launches_over or flushing(s)
    sched = s.chunk_schedule
    while ready > 0:
        if on_tick is not None and planned >= free_chunks:
            if not (on_tick or short_ok or urgent):
                break
            want = max(sched)
        else:
            want = sched[min(planned, len(sched) - 1)]
            if ready < want and not short_ok:
                break
        n = min(want, ready)
        out.append((s.audible_skip + chunked, n))
        chunked += n
        planned += 1
        ready -= n
    return out
