"""The newcomer lane's engine side (SchedulerConfig.newcomer_lane): a newcomer's prefill, first frames
and first chunk run as lane steps on a high-priority CUDA stream of their own, through runners with
batch-1 graphs of their own (ModelRunner.lane_runner, CodecRunner.lane_runner) over the same weights
and per-slot state, beside the main steps in flight instead of queued behind them.

Lane steps complete when they complete: the engine delivers their early first audio and reads them
as soon as they are done, whatever the main steps are doing (the scheduler keeps each lane's order).
Work for one slot on two streams is ordered by the executors' shared SlotFences. On CPU the lane's
steps run through the main runners, synchronously, so the same logic is tested there.

bench.lanes (run 12, H200): the newcomer's path to its PCM 8.3 ms alone, 11.6 ms beside batch-8
steps with a codec tick (which it slows ~0.5 ms each), against ~34 ms queued behind four of them. Under
load (run 12, a pair on one host): audible TTFA p50 -1.6 ms at 10 req/s but the p95 unchanged, and p95
+5.6 ms at 40 req/s; so it is off by default (`--newcomer-lane`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch

from ..runtime.codec_runner import CodecRunner
from ..runtime.runner import HIGH_PRIORITY, ModelRunner
from ..scheduler.plan import StepPlan
from .entry import StreamEntry
from .executor import LaunchedStep, SlotFences, StepExecutor


class NewcomerLane:
    def __init__(self, runner: ModelRunner, codec_runner: CodecRunner, fences: SlotFences, *, eos_allowed: bool,
                 max_first_chunk: int):
        stream = None
        if runner.device.type == "cuda":
            runner = runner.lane_runner()
            codec_runner = codec_runner.lane_runner(tuple(range(1, max_first_chunk + 1)))
            stream = torch.cuda.Stream(runner.device, priority=HIGH_PRIORITY)
        self.runner, self.codec_runner = runner, codec_runner
        self.executor = StepExecutor(runner, codec_runner, eos_allowed=eos_allowed, stream=stream, fences=fences)
        self.steps: deque[LaunchedStep] = deque()  # launched, not yet read; launch order

    def __len__(self) -> int:
        return len(self.steps)

    def capture(self) -> None:
        """Its CUDA graphs (warm-up, after the main runners'), on a capture stream of their own: graphs
        captured on one stream share its cuBLAS workspace, and the lane's replay beside the main ones."""
        if self.executor.stream is None:
            return
        if self.runner.use_graphs:
            self.runner.capture_graphs(capture_stream=torch.cuda.Stream(self.runner.device))
        if self.codec_runner.use_graphs:
            self.codec_runner.capture()

    def launch(self, plan: StepPlan, entries: dict[str, StreamEntry]) -> None:
        self.steps.append(self.executor.launch(plan, entries))

    def service(self, deliver_early: Callable[[LaunchedStep], None], read: Callable[[LaunchedStep], None]) -> bool:
        """Never blocks: the oldest lane step's first audio goes out once its early event fired, and
        completed lane steps are read, oldest first. Only the oldest: a first chunk may go early only
        once the steps before it are read (an EOS among their frames would cut it). True if anything
        was done."""
        did = False
        while self.steps:
            step = self.steps[0]
            if not step.early_delivered and step.early_ready():
                deliver_early(step)
                did = True
            if not (step.early_delivered and step.ready()):
                break
            read(self.steps.popleft())
            did = True
        return did
