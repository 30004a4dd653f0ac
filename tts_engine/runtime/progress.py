"""Start-up phases made visible: a tqdm bar per phase when stderr is a terminal, otherwise one INFO
line per step and one when the phase ends, each with the seconds since the phase began.

Loading the weights (loading.py), capturing the CUDA graphs (the runners' `capture*`, during which
Triton and nvcc build their kernels at first launch) and the first codec call each report here, so
a cold GPU start that takes a minute says where that minute goes. The lines have one shape, which
bench/startup.py reads back per phase:

    start-up: talker graphs 3/8 (bucket 16, general) 12.4 s
    start-up: talker graphs done in 20.1 s
"""

from __future__ import annotations

import logging
import os
import sys
import time
from types import TracebackType

log = logging.getLogger("tts_engine.startup")
PREFIX = "start-up: "


def shows_bar(bar: bool | None = None) -> bool:
    """A tqdm bar (stderr is a terminal, unless `bar` says) or log lines."""
    return sys.stderr.isatty() if bar is None else bar


class Phase:
    """One start-up phase of `total` steps (None: unknown). `step(what)` after each; `close()` (or the
    `with` block's end) logs the phase's seconds. A phase that fails says so and how far it got."""

    def __init__(self, name: str, total: int | None = None, *, bar: bool | None = None):
        self.name, self.total, self.done = name, total, 0
        self.started = time.monotonic()
        self._bar = None
        self._closed = False
        if shows_bar(bar):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=name, unit="step", leave=True)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def step(self, what: str = "") -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.set_postfix_str(what, refresh=False)
            self._bar.update(1)
            return
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        log.info("%s%s %s%s %.1f s", PREFIX, self.name, count, f" ({what})" if what else "", self.seconds)

    def close(self, failed: bool = False) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        if failed:
            log.warning("%s%s failed after %d steps, %.1f s", PREFIX, self.name, self.done, self.seconds)
        else:
            log.info("%s%s done in %.1f s", PREFIX, self.name, self.seconds)

    def __enter__(self) -> Phase:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close(failed=kind is not None)


def log_to_stderr(level: str | int = "info") -> None:
    """Start-up and engine lines of the `tts_engine` loggers on stderr at `level` (a server's log level), once:
    a process that configured logging itself (a handler on the root logger) keeps its own."""
    logger = logging.getLogger("tts_engine")
    if logging.getLogger().handlers or any(getattr(h, "_cadence", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    handler._cadence = True
    logger.addHandler(handler)
    logger.setLevel(level.upper() if isinstance(level, str) else level)



def kernel_caches() -> str:
    """Where compiled kernels outlive the process: nvcc's cubins (kernels/cuda_build.py) and Triton's own
    cache ($TRITON_CACHE_DIR, else under ~/.triton), which the engine leaves as Triton configures it."""
    from ..kernels.cuda_build import cache_dir

    try:
        from triton import knobs

        triton = knobs.cache.dir
    except ImportError:
        triton = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    return f"CUDA {cache_dir()}, Triton {triton}"
