"""Python's cyclic garbage collector, kept from stopping the engine for a whole collection.

A full (generation 2) collection walks every tracked object in the process while holding the GIL,
so the engine thread, the server's event loop and every stream stop together. With torch, the model
and the server imported that heap is ~190k objects and one full collection took ~125 ms on the
development machine; under load on the H200 the engine went silent for 160-230 ms about
once every 2-5 minutes at 20 req/s and every ~40 s at 40 req/s, and the newest streams, whose
buffers were still short, ran dry. Full collections come due when the objects that survived younger
collections reach a quarter of the long-lived heap, so their rate grows with the request rate.

`freeze_heap()` runs once the engine is warm: everything alive then (modules, weights, graphs,
the server) moves to the permanent generation that collections skip, so a full collection walks
only what the requests themselves made. `GcPauses` records every collection's duration for
/metrics (`gc_pauses`, `gc_pause_max_s`, `gc_pause_sum_s`), so a stall can be checked against it, beside
the process's GIL switch interval (`gil_switch_interval_s`, set by `cadence serve --gil-switch-ms`).
No torch.
"""

from __future__ import annotations

import gc
import sys
import threading
import time


def freeze_heap() -> int:
    """Collect once, then move every object still alive to the permanent generation; returns how
    many objects are frozen (all freezes so far). Counting them walks the whole permanent generation
    (CPython's `gc.get_freeze_count` is a list walk: 17 ms for 183k objects on the development
    machine, the GIL held throughout), so it is counted here, once, not on every /metrics scrape."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def thaw_heap() -> None:
    """Undo `freeze_heap`: the frozen objects go back to the oldest generation."""
    gc.unfreeze()


class GcPauses:
    """Duration of every cyclic collection in the process (gc.callbacks), while installed."""

    def __init__(self):
        self.count = 0
        self.max_s = 0.0
        self.sum_s = 0.0
        self.frozen_objects = 0  # as `freeze_heap` counted them (frozen objects freed since still count)
        # thread id -> start of the collection it runs. No lock: a collection can start inside
        # any allocation, also one made while such a lock is held (a deadlock), and the GIL keeps
        # these few updates whole enough for counters.
        self._started: dict[int, float] = {}

    def install(self) -> GcPauses:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        return self

    def remove(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def reset(self) -> None:
        """Counts from now on: the engine's ready, after the freeze's own full collection (0.1-0.2 s), which is no
        pause of serving."""
        self.count, self.max_s, self.sum_s = 0, 0.0, 0.0

    def _callback(self, phase: str, info: dict) -> None:
        tid = threading.get_ident()
        if phase == "start":
            self._started[tid] = time.perf_counter()
            return
        start = self._started.pop(tid, None)
        if start is None:  # installed during a collection
            return
        pause = time.perf_counter() - start
        self.count += 1
        self.sum_s += pause
        self.max_s = max(self.max_s, pause)

    def stats(self) -> dict[str, float]:
        return {"gc_pauses": float(self.count), "gc_pause_max_s": self.max_s, "gc_pause_sum_s": self.sum_s,
                "gc_frozen_objects": float(self.frozen_objects), "gil_switch_interval_s": sys.getswitchinterval()}
