"""Where the engine thread's time goes under load (`cadence serve --profile-engine PATH`). No torch.

Two views of one window, which opens at the first busy iteration after warm-up and closes `seconds`
later (or when the engine stops):
- PATH: a cProfile (`python -m pstats PATH`, snakeviz). From Python 3.12 cProfile records every
  thread (sys.monitoring), so the server's event-loop functions show beside the engine's, and wall
  times include waits for the GIL; profiling also slows Python-heavy code, so a profiled run's
  latencies are not measurements.
- PATH.stacks (collapsed stacks, "a;b;c count" per line, for flamegraph tools) and PATH.top.txt (the
  functions by share of samples, where the thread was and what it was inside): a sampler thread
  reads the engine thread's stack every `interval_s`, so these hold the engine thread alone,
  waiting included (a sample inside a CUDA wait or a blocked copy lands on that call).
The always-on, cheap view is /metrics (`cadence_engine_host_*_s`).
"""

from __future__ import annotations

import cProfile
import logging
import sys
import threading
import time
from collections import Counter
from pathlib import Path

log = logging.getLogger(__name__)

TOP = 40  # functions listed in PATH.top.txt, per view


class StackSampler:
    """Samples one thread's Python stack every `interval_s` from a thread of its own."""

    def __init__(self, thread_id: int, interval_s: float = 1e-3):
        self.thread_id, self.interval_s = thread_id, interval_s
        self.stacks: Counter[tuple[str, ...]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cadence-profile-sampler", daemon=True)

    def start(self) -> StackSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            frame = sys._current_frames().get(self.thread_id)
            stack = []
            while frame is not None:
                code = frame.f_code
                stack.append(f"{Path(code.co_filename).stem}.{code.co_name}")
                frame = frame.f_back
            if stack:
                self.stacks[tuple(reversed(stack))] += 1  # root first

    def collapsed(self) -> str:
        return "".join(f"{';'.join(stack)} {n}\n" for stack, n in self.stacks.most_common())

    def top(self, n: int = TOP) -> str:
        total = sum(self.stacks.values())
        if not total:
            return "no samples\n"
        leaf: Counter[str] = Counter()
        inside: Counter[str] = Counter()
        for stack, count in self.stacks.items():
            leaf[stack[-1]] += count
            for name in set(stack):
                inside[name] += count
        lines = [f"{total} samples of the engine thread, every {self.interval_s * 1e3:g} ms", "",
                 "where it was (leaf function), % of samples:"]
        lines += [f"{c / total * 100:6.1f}  {name}" for name, c in leaf.most_common(n)]
        lines += ["", "what it was inside (anywhere on the stack), % of samples:"]
        lines += [f"{c / total * 100:6.1f}  {name}" for name, c in inside.most_common(n)]
        return "\n".join(lines) + "\n"


class EngineProfile:
    def __init__(self, path: str | Path, seconds: float, interval_s: float = 1e-3):
        if not seconds > 0:
            raise ValueError(f"profile seconds must be > 0, got {seconds}")
        self.path, self.seconds, self.interval_s = Path(path), seconds, interval_s
        self._profile: cProfile.Profile | None = None
        self._sampler: StackSampler | None = None
        self._started: float | None = None
        self.done = False

    def tick(self, busy: bool) -> None:
        """After every engine iteration, on the engine thread (both views follow the calling thread)."""
        if self.done:
            return
        if self._profile is None:
            if busy:
                self._sampler = StackSampler(threading.get_ident(), self.interval_s).start()
                self._profile = cProfile.Profile()
                self._started = time.monotonic()
                self._profile.enable()
            return
        if time.monotonic() - self._started >= self.seconds:
            self.close()

    def close(self) -> None:
        """Stop and write both views (engine thread); a window that never opened writes nothing."""
        if self.done or self._profile is None:
            self.done = True
            return
        self._profile.disable()
        self._sampler.stop()
        self._profile.dump_stats(str(self.path))
        self.path.with_name(self.path.name + ".stacks").write_text(self._sampler.collapsed())
        self.path.with_name(self.path.name + ".top.txt").write_text(self._sampler.top())
        self.done = True
        log.info("engine profile: %.1f s written to %s (+ .stacks, .top.txt)", time.monotonic() - self._started,
                 self.path)
