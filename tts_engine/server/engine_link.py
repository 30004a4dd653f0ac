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


# Speech frames per character of text, with room for slow voices (12.5 frames/s at 12 characters/s; 14.5 is
# typical), plus the prompt's text tokens per character and its fixed rows.
_FRAMES_PER_CHAR = 12.5 / 12.0
_TOKENS_PER_CHAR = 0.3
_PROMPT_ROWS = 64


def text_limit(engine: ServedEngine, max_text_chars: int) -> tuple[int, str]:
    """(characters one stream may carry, why): max_text_chars, or less where the engine's context (prompt
    plus speech frames) would run out first, so long text is refused up front instead of cut short."""
    positions = getattr(getattr(engine, "intake", None), "max_context", None)
    if not isinstance(positions, int):
        return max_text_chars, "max_text_chars"
    fits = max(1, int((positions - _PROMPT_ROWS) / (_FRAMES_PER_CHAR + _TOKENS_PER_CHAR)))
    if fits >= max_text_chars:
        return max_text_chars, "max_text_chars"
    return fits, f"the engine's context of {positions} positions holds the speech of about that much text"


def truncated(reason: str, frames: int, max_frames: int | None) -> bool:
    """A `length` end the client did not ask for: the engine's context ran out before the text did."""
    return reason == "length" and (max_frames is None or frames + 1 < max_frames)


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
