"""The client side of our WebSocket `/v1/stream` protocol, independent of pipecat's service
machinery: language and error-code tables, per-context options, what the client knows of a
context, and the engine's timed words as pipecat words. See docs/streaming-api.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pipecat.utils.errors import ErrorCategory

SAMPLE_RATE = 24000  # the engine's output: 24 kHz mono s16le

# pipecat's language codes (their base part) -> the engine's language names.
LANGUAGES = {"zh": "chinese", "en": "english", "fr": "french", "de": "german", "it": "italian",
             "ja": "japanese", "ko": "korean", "pt": "portuguese", "ru": "russian", "es": "spanish"}

# Server error codes -> why, for pipecat (a permanent category makes the service unusable).
ERROR_CATEGORIES = {
    "invalid_request": ErrorCategory.INVALID_REQUEST,  # e.g. an unknown voice: retrying won't help
    "text_too_long": ErrorCategory.APPLICATION,
    "overloaded": ErrorCategory.RATE_LIMIT,
    "engine_error": ErrorCategory.SERVER,
    "internal_error": ErrorCategory.SERVER,
}
# Errors after which the server holds no such context, so no `done` will come for it: a refused
# `open` (the only message these answer), or a message for a context the server does not know.
CONTEXT_GONE = frozenset({"overloaded", "too_many_contexts", "duplicate_context", "unknown_context"})
ENGINE_LANGUAGES = frozenset({"auto", *LANGUAGES.values()})


@dataclass(frozen=True)
class CadenceStreamOptions:
    """Per-context engine options sent with `open` (None: the server's default)."""

    seed: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    chunk_schedule: tuple[int, ...] | None = None
    max_frames: int | None = None

    def fields(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if v is not None}


@dataclass
class EngineContext:
    """What the service knows of one context on the server."""

    id: str
    has_text: bool = False  # non-whitespace text was appended
    ended: bool = False  # `end` sent
    cancelled: bool = False  # `cancel` sent: drop everything until its `done`
    gone: bool = False  # the server refused or lost it: the rest of its text is dropped
    audio_s: float = 0.0  # audio received
    resampler: object | None = None  # agent/resample.py's, where the output rate is not the engine's


def split_words(words: list[dict]) -> list[tuple[str, float]]:
    """The engine's timed words, one pipecat word each: an engine word can span spaces ("the
    engine", when one token covers both); its parts share its time span in order."""
    out = []
    for w in words:
        parts = str(w["word"]).split()
        start, end = float(w["start_s"]), float(w["end_s"])
        out += [(part, start + (end - start) * i / len(parts)) for i, part in enumerate(parts)]
    return out
