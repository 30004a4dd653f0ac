"""What the server needs from the engine, and the one place engine exceptions become ApiErrors."""

from __future__ import annotations

from typing import Protocol

from ..config import ModelConfig
from ..engine.api import AdmissionError, EngineUnavailable, StreamOptions, TTSStream
from .errors import ApiError


class ServedEngine(Protocol):
    """`tts_engine.engine.api.Engine` plus lifecycle, health and the checkpoint's config."""

    model_config: ModelConfig  # voices and languages requests are checked against

    @property
    def ready(self) -> bool:
        """Warm-up done: streams can be opened (`GET /ready`)."""

    @property
    def alive(self) -> bool:
        """The engine loop runs and has not faulted (`GET /health`). An engine may also offer
        `stalled` (its watchdog saw no loop progress while work was pending): /health says 503."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def open_stream(self, options: StreamOptions, text: str = "", *,
                    end_input: bool = False) -> TTSStream: ...

    def metrics(self) -> dict[str, float]: ...


def open_stream(engine: ServedEngine, options: StreamOptions, text: str, *, end_input: bool) -> TTSStream:
    """Admit a stream or raise ApiError: overloaded (503), engine_unavailable (503) or
    invalid_request (422, text or options the engine refuses)."""
    try:
        return engine.open_stream(options, text, end_input=end_input)
    except AdmissionError as e:
        raise ApiError("overloaded", str(e) or "the engine is at capacity",
                       retry_after_s=e.retry_after_s) from None
    except EngineUnavailable as e:
        raise ApiError("engine_unavailable", str(e) or "the engine is not available",
                       retry_after_s=1.0) from None
    except ValueError as e:
        raise ApiError("invalid_request", str(e)) from None


def engine_alive(engine: ServedEngine) -> bool:
    try:
        return bool(engine.alive)
    except Exception:
        return False


def engine_stalled(engine: ServedEngine) -> bool:
    """The engine's watchdog reports a loop without progress (engines without one never stall)."""
    try:
        return bool(getattr(engine, "stalled", False))
    except Exception:
        return False
