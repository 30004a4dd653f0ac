"""Slot ids: which rows of the runners' per-slot buffers (talker KV cache, sampling rows, codec
state) belong to a stream. Owns ids only, never tensors (nano-vllm's block manager). No torch."""

from __future__ import annotations


class SlotPool:
    def __init__(self, num_slots: int):
        if num_slots < 1:
            raise ValueError("a slot pool needs at least one slot")
        self.num_slots = num_slots
        # pop() hands out the highest free id first.
        self._free = list(range(num_slots))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def free(self) -> list[int]:
        return list(self._free)

    @property
    def used(self) -> set[int]:
        return set(self._used)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("no free slot")
        slot = self._free.pop()
        self._used.add(slot)
        return slot

    def release(self, slot: int) -> None:
        if slot not in self._used:
            raise RuntimeError(f"slot {slot} is not in use")
        self._used.remove(slot)
        self._free.append(slot)

    def violations(self) -> list[str]:
        """free + used == all slots, and disjoint."""
        out = []
        free = set(self._free)
        if len(free) != len(self._free):
            out.append(f"a slot is free twice: {sorted(self._free)}")
        if free & self._used:
            out.append(f"slots both free and used: {sorted(free & self._used)}")
        if free | self._used != set(range(self.num_slots)):
            out.append(f"slots lost or invented: free {sorted(free)}, used {sorted(self._used)}")
        return out
