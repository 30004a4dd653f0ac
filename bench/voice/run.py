"""`run_voice_bench`: start `cadence demo` (or use a running agent), put the questions through a
client, write the report. `python -m bench.voice` is its command line."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.child import child_process

from . import report
from .turns import questions

REPO = Path(__file__).resolve().parents[2]
CLIENTS = ("browser", "aiortc")


@contextlib.contextmanager
def demo_process(args: list[str], *, timeout_s: float = 300) -> Iterator[str]:
    """`cadence demo --port 0 ARGS` as a child; yields its URL once it says it is ready."""
    cmd = [sys.executable, "-m", "agent.cli", "--port", "0", *args]  # no installed entry points needed
    with child_process(cmd, r"cadence demo: ready at (http://\S+/)", what="cadence demo", timeout_s=timeout_s,
                       cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}) as (ready, _lines):
        yield ready.group(1)


def run_voice_bench(*, client: str = "browser", turns: int = 10, url: str | None = None,
                    demo_args: tuple[str, ...] = (), out: Path = Path("voice-bench")) -> dict:
    """N turns through `client` against the agent at `url` (None: a `cadence demo` started here
    with `demo_args`); writes voice-bench.json and voice-bench.png into `out`; returns the report."""
    if client not in CLIENTS:
        raise ValueError(f"client must be one of {', '.join(CLIENTS)}, got {client!r}")
    texts = questions(turns)
    if client == "browser":
        from .browser import require_browser
        from .browser import run_browser as drive
        require_browser()
    else:
        from .client import run_aiortc as drive
    with contextlib.ExitStack() as stack:
        loading = time.monotonic()
        target = url or stack.enter_context(demo_process(list(demo_args)))
        print(f"voice-bench: the agent at {target} ({time.monotonic() - loading:.1f} s to ready); {turns} turns",
              file=sys.stderr, flush=True)  # a run cut short still says how far it got
        began = time.time()
        records, extra = drive(target, texts)
    meta = {"client": "headless Chromium" if client == "browser" else "aiortc client",
            "url": url or "cadence demo " + " ".join(demo_args), "started_unix": round(began),
            "cpu_count": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2), **extra}
    result = report.summarise(records, meta)
    report.write(result, out)
    return result
