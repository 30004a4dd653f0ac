"""The bounded send buffer of one WebSocket connection.

Pumps (one per context) put encoded messages; the connection's writer task takes them in order.
The bound is in bytes: a put that would exceed it fails, and the connection closes with 1008
(slow consumer) rather than buffering without limit. A cancelled context's queued messages are
dropped with `purge`, so nothing of it reaches the client after the cancel.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class OutMessage:
    context_id: str | None
    text: str
    kind: str  # message type, for purge decisions
    ttfa_from: float | None = None  # first audio of a context: perf_counter() of its open


class Outbox:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: deque[OutMessage] = deque()
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, msg: OutMessage) -> bool:
        """Queue `msg`; False (nothing queued) if the buffer would exceed its bound."""
        size = len(msg.text)
        if self._items and self.bytes + size > self.max_bytes:
            return False
        self._items.append(msg)
        self.bytes += size
        self._ready.set()
        return True

    def purge(self, context_id: str, kinds: frozenset[str]) -> int:
        """Drop the queued messages of `context_id` whose kind is in `kinds`; returns how many."""
        keep = deque(m for m in self._items if not (m.context_id == context_id and m.kind in kinds))
        dropped = len(self._items) - len(keep)
        self._items = keep
        self.bytes = sum(len(m.text) for m in keep)
        return dropped

    async def get(self) -> OutMessage:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        msg = self._items.popleft()
        self.bytes -= len(msg.text)
        return msg
