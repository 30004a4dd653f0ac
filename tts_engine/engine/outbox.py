"""Events from the engine thread to the event loops that hold their streams, one wake-up per loop
per engine iteration instead of one per event. No torch.

Each `call_soon_threadsafe` writes to the loop's wake-up socket and makes the loop take the GIL to
run one callback; a step that ends a chunk for 30 streams did that 30 times while the engine thread
wanted the GIL to plan the next step. The engine posts a step's events here and flushes once:
after reading its completed steps, after early first audio, and before it blocks on the device
(so no event waits on a later step). Events of one stream keep their order (one list per loop).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol


class Receiver(Protocol):
    loop: asyncio.AbstractEventLoop

    def receive(self, event: object) -> None:
        """On its loop's thread: take one event."""


def _receive_all(items: list[tuple[Receiver, object]]) -> None:
    for receiver, event in items:
        receiver.receive(event)


class Outbox:
    def __init__(self):
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[Receiver, object]]] = {}

    def post(self, receiver: Receiver, event: object) -> None:
        self._pending.setdefault(receiver.loop, []).append((receiver, event))

    def __len__(self) -> int:
        return sum(len(items) for items in self._pending.values())

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for loop, items in pending.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening any more
                loop.call_soon_threadsafe(_receive_all, items)
