"""A replica's headroom by the engine's admission model, read without admitting anything.

The router ranks replicas by it, from a snapshot taken under the admission's lock. With
predicted-underrun admission (on CUDA) it is stricter than `Admission.try_admit`: every admitted stream,
queued ones too, counts against the streams the cost model says stay real time, so a replica whose slots
are full shows no room even while its queue has some, and new streams go where one would decode at
once. No torch, no Ray: the tests call it directly.
"""

from __future__ import annotations

import time


def headroom(engine) -> dict[str, float | bool]:
    """{"admits", "free" (streams it would take before a cap or predicted underrun), "admitted" (its
    streams now), "ready", "at" (wall time of this reading)}."""
    ready = bool(getattr(engine, "ready", False)) and bool(getattr(engine, "alive", False))
    adm = engine.scheduler.admission
    with adm.lock:
        admitted, cap = adm.admitted, adm.max_active + adm.max_queued
        free = cap - admitted
        if adm.reject_predicted_underrun:
            # an empty engine always takes one stream (admission.py)
            free = min(free, max(adm.sustainable - admitted, 1 if admitted == 0 else 0))
    free = max(0, free) if ready else 0
    return {"admits": free > 0, "free": free, "admitted": admitted, "ready": ready, "at": time.time()}


def rank_key(stats: dict, routed_since: int = 0) -> tuple:
    """Sort key, best first: replicas that admit, then the most free streams once the streams this
    router sent since the reading are taken off, then the fewest streams (the shorter queue for a slot)."""
    free = float(stats.get("free", 0)) - routed_since
    return (not (stats.get("admits") and free > 0), -free, float(stats.get("admitted", 0)) + routed_since)
