"""Engine steps in flight, oldest first. No torch: the same logic runs on CPU and on CUDA.

Depth 2 (CUDA): after step k+1 is launched, step k is read (its event waited for) while the GPU
runs k+1, and the next plan is made before k+1 is read, so the GPU never waits for Python. Depth 1
(CPU, where every call is synchronous): each step is read right after its launch. A step is read
early only when nothing new was launched (`must_wait`), never because it happens to be done: so
depth 2 behaves the same on CPU, where its in-flight logic is tested, as on a GPU.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol


class Launched(Protocol):
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

    def completed(self, must_wait: bool = False, before_wait: Callable[[Launched], None] | None = None,
                  depth: int | None = None, wait: Callable[[Launched], bool] | None = None) -> Iterator[Launched]:
        """Steps to read now, oldest first: the oldest while `depth` are in flight, or while
        nothing was launched this iteration (`must_wait`), so results keep coming when idle.
        depth: this iteration's, at most the pipeline's (the engine's lookahead, 1 when no stream
        needs it). before_wait(step): called on a step about to be waited for (early audio).
        wait(step) -> bool, if given, waits instead (before_wait is then its business) while fewer
        than the pipeline's depth are in flight, i.e. while another step could still be launched
        beside this one: False means it was cut short (a new stream to plan at once), and the step
        stays in flight, to be read in a later iteration."""
        depth = self.depth if depth is None else max(1, min(depth, self.depth))
        while self._steps and (len(self._steps) >= depth or must_wait):
            must_wait = False
            step = self._steps[0]
            if wait is not None and len(self._steps) < self.depth:
                if not wait(step):
                    return
            else:
                if before_wait is not None:
                    before_wait(step)
                step.wait()
            self._steps.popleft()
            yield step
