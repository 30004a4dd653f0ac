"""`python -m tests.server.serve_fake GRACE_S FRAME_S [FAULT]`: the real serve() (drain, signals, uvicorn,
the exit on an engine fault) over the fake engine, on a free loopback port, which it prints as `port N`.

FAULT: `mid-step`: 1 s after the first stream opens, the engine fails as its thread would (every open
stream gets an error event, `alive` turns false); `oom-warmup`: warm-up raises CUDA's out-of-memory error
(a stand-in: no GPU here)."""

from __future__ import annotations

import asyncio
import contextlib
import sys

from tts_engine.server import ServerConfig
from tts_engine.server.run import bind, serve

from .fake_engine import FakeEngine


class FaultyEngine(FakeEngine):
    def __init__(self, fault: str, **kw):
        super().__init__(**kw)
        self.fault_kind = fault
        self.fault = None

    async def start(self) -> None:
        if self.fault_kind == "oom-warmup":
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB total capacity)")
        await super().start()

    def open_stream(self, *args, **kwargs):
        stream = super().open_stream(*args, **kwargs)
        if self.fault_kind == "mid-step" and len(self.opened) == 1:
            asyncio.get_running_loop().call_later(1.0, self._fail)
        return stream

    def _fail(self) -> None:
        self.fault = RuntimeError("injected fault in the engine step")
        self.fail_after_frames = 0  # every stream's next step fails
        self.alive = False


def main() -> int:
    grace_s, frame_s = float(sys.argv[1]), float(sys.argv[2])
    fault = sys.argv[3] if len(sys.argv) > 3 else None
    cfg = ServerConfig(port=0, drain_grace_s=grace_s, log_level="warning").validate()
    sock = bind(cfg)
    print("port", sock.getsockname()[1], flush=True)
    engine = FaultyEngine(fault, frame_s=frame_s) if fault else FakeEngine(frame_s=frame_s)
    with contextlib.suppress(KeyboardInterrupt):  # how serve() ends on SIGINT/SIGTERM, as in the CLI
        serve(engine, cfg, sock)
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
