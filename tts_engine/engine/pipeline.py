"""Engine steps in flight, oldest first. No torch: the same logic runs on CPU (depth 1, every step
complete when launched) and on CUDA (depth 2: step k+1 is launched before step k is read, so the GPU
never waits for Python to plan)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Protocol


class Launched(Protocol):
    def done(self) -> bool:
        """The device has finished this step (never blocks)."""

    def wait(self) -> None:
        """Block until the device has finished this step."""


class StepPipeline:
    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError("pipeline depth must be >= 1")
        self.depth = depth
        self._steps: deque[Launched] = deque()

    def __len__(self) -> int:
        return len(self._steps)

    def push(self, step: Launched) -> None:
        self._steps.append(step)

    def completed(self, must_wait: bool = False) -> Iterator[Launched]:
        """Steps to read now, oldest first: while `depth` are in flight the oldest is waited for
        (with depth 2 the GPU runs the newer one meanwhile); steps already done come along;
        `must_wait` (nothing was launched) waits for the oldest at least."""
        first = True
        while self._steps and (len(self._steps) >= self.depth or self._steps[0].done() or (must_wait and first)):
            first = False
            step = self._steps.popleft()
            step.wait()
            yield step
