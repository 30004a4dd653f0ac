"""Request bodies and WebSocket client messages, validated with pydantic.

Types are strict (`"1"` is not a number, `1` is not a bool, NaN is not a float); unknown fields
are ignored, as OpenAI-compatible clients send extras. A failed validation becomes one
`ApiError("invalid_request", "<field>: <reason>", param=<field>)`. Checks that need the model
(voice, language) happen in `SynthesisFields.stream_options`.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import replace
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import ModelConfig
from ..engine.api import StreamOptions
from ..prompt import VoiceSpec, resolve_voice
from ..sampling import SamplingParams
from .errors import ApiError

CONTEXT_ID_MAX_CHARS = 128
_KEEP_CONTROLS = frozenset("\t\n\r")


def clean_text(text: str) -> str:
    """Remove control characters (Unicode category Cc, except tab, LF, CR) and lone surrogates.

    Both come from JSON escapes (`"\\u0000"`, `"\\ud800"`), mean nothing to a speaker and break the
    tokenizer (surrogates cannot be encoded). Format characters (zero-width joiners in emoji,
    bidi marks) are kept.
    """
    if text.isprintable():  # fast path: no Cc, Cs (nor any other non-printable) character
        return text
    return "".join(c for c in text if c in _KEEP_CONTROLS or unicodedata.category(c) not in ("Cc", "Cs"))


_STRICT = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)
_Positive = Annotated[int, Field(ge=1, le=2**31 - 1)]


class SynthesisFields(BaseModel):
    """Who speaks and how: shared by `POST /v1/audio/speech` and the WebSocket `open` message."""

    model_config = _STRICT

    voice: str | None = Field(None, max_length=64)
    language: str = Field("auto", max_length=64)
    instructions: str | None = Field(None, max_length=2000)
    seed: int | None = Field(None, ge=0, lt=2**63)
    temperature: float | None = None
    top_k: int | None = Field(None, ge=0, le=1_000_000)
    top_p: float | None = None
    repetition_penalty: float | None = None
    chunk_schedule: list[int] | None = Field(None, min_length=1, max_length=64)
    max_frames: _Positive | None = None

    def stream_options(self, cfg: ModelConfig, voices=None) -> StreamOptions:
        """Build and check the engine's options. Raises ApiError(invalid_request). `voices`: the
        engine's VoiceStore, where a cloned voice's id finds its prompt."""
        instruct = clean_text(self.instructions).strip() if self.instructions else None
        voice = VoiceSpec(self.voice, self.language, instruct or None)
        if voices is not None:
            voice = voices.attach(voice)
        try:
            resolve_voice(cfg, voice)
        except ValueError as e:
            param = "language" if str(e).startswith("unknown language") else "voice"
            raise ApiError("invalid_request", str(e), param=param) from None
        overrides = {"seed": self.seed, "temperature": self.temperature, "top_k": self.top_k,
                     "top_p": self.top_p, "repetition_penalty": self.repetition_penalty}
        params = replace(SamplingParams(), **{k: v for k, v in overrides.items() if v is not None})
        options = StreamOptions(voice=voice, params=params, max_frames=self.max_frames)
        if self.chunk_schedule is not None:
            options = replace(options, chunk_schedule=tuple(self.chunk_schedule))
        try:
            return options.validate()
        except ValueError as e:
            message = str(e)
            raise ApiError("invalid_request", message, param=message.split(" ", 1)[0]) from None


class SpeechRequest(SynthesisFields):
    """`POST /v1/audio/speech` (OpenAI-compatible, plus the engine's sampling fields)."""

    model: str | None = Field(None, max_length=256)
    input: str
    response_format: str = "pcm"
    stream_format: str = "audio"
    speed: float = 1.0
    stream: bool = True


RESPONSE_FORMATS = ("pcm", "wav")
STREAM_FORMATS = ("audio", "sse")


def check_speech_request(req: SpeechRequest, max_text_chars: int, why: str = "max_text_chars") -> str:
    """Checks beyond field types. Returns the text to speak (control characters removed)."""
    if req.response_format not in RESPONSE_FORMATS:
        raise ApiError("invalid_request", f"response_format {req.response_format!r} is not supported; "
                       f"supported: {', '.join(RESPONSE_FORMATS)}", param="response_format")
    if req.stream_format not in STREAM_FORMATS:
        raise ApiError("invalid_request", f"stream_format {req.stream_format!r} is not supported; "
                       f"supported: {', '.join(STREAM_FORMATS)}", param="stream_format")
    if req.stream_format == "sse" and not req.stream:
        raise ApiError("invalid_request", "stream_format 'sse' needs stream: true", param="stream_format")
    if req.speed != 1.0:
        raise ApiError("invalid_request", f"speed {req.speed} is not supported: only 1.0 is, for now",
                       param="speed")
    return check_text(req.input, max_text_chars, param="input", empty_ok=False, why=why)


def check_text(text: str, max_chars: int, *, param: str, empty_ok: bool, why: str = "max_text_chars") -> str:
    if len(text) > max_chars:
        raise ApiError("text_too_long", f"{param} has {len(text)} characters; the limit is {max_chars} ({why})",
                       param=param)
    text = clean_text(text)
    if not empty_ok and not speakable(text):
        raise ApiError("invalid_request", f"{param} is empty (nothing to speak)", param=param)
    return text


def speakable(text: str) -> bool:
    """Anything to speak: a character that is not white space nor a format character (zero-width
    spaces and joiners, bidi marks, BOM: category Cf), which alone would be spoken as noise."""
    return any(not c.isspace() and unicodedata.category(c) != "Cf" for c in text)


# --- WebSocket client messages ---------------------------------------------------------------

ContextId = Annotated[str, Field(min_length=1, max_length=CONTEXT_ID_MAX_CHARS)]


class OpenMessage(SynthesisFields):
    type: Literal["open"]
    context_id: ContextId
    text: str = ""
    end: bool = False
    timestamps: bool = True


class AppendMessage(BaseModel):
    model_config = _STRICT
    type: Literal["append"]
    context_id: ContextId
    text: str


class ContextMessage(BaseModel):
    """`flush`, `end` and `cancel`: a context id and nothing else."""

    model_config = _STRICT
    type: Literal["flush", "end", "cancel"]
    context_id: ContextId


class PlayoutMessage(BaseModel):
    model_config = _STRICT
    type: Literal["playout"]
    context_id: ContextId
    played_s: float = Field(ge=0)
    at_ms: float | None = None


ClientMessage = OpenMessage | AppendMessage | ContextMessage | PlayoutMessage
MESSAGE_TYPES: dict[str, type[BaseModel]] = {
    "open": OpenMessage, "append": AppendMessage, "flush": ContextMessage, "end": ContextMessage,
    "cancel": ContextMessage, "playout": PlayoutMessage,
}


M = TypeVar("M", bound=BaseModel)


def parse_json_object(data: bytes | str, what: str) -> dict[str, Any]:
    """Strict UTF-8 JSON object, or ApiError(invalid_json)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ApiError("invalid_json", f"{what} is not valid UTF-8 (byte {e.start})") from None
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as e:
        raise ApiError("invalid_json", f"{what} is not valid JSON: {e.msg} at position {e.pos}") from None
    except RecursionError:
        raise ApiError("invalid_json", f"{what} is nested too deeply") from None
    except ValueError as e:  # e.g. an integer past Python's 4300-digit conversion limit
        raise ApiError("invalid_json", f"{what} is not acceptable JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ApiError("invalid_json", f"{what} must be a JSON object, got {type(obj).__name__}")
    return obj


def validate_model(cls: type[M], obj: dict[str, Any]) -> M:
    try:
        return cls.model_validate(obj)
    except ValidationError as e:
        message, param = _first_error(e)
        raise ApiError("invalid_request", message, param=param) from None


def parse_client_message(obj: dict[str, Any]) -> ClientMessage:
    kind = obj.get("type")
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ApiError("unknown_type", f"unknown message type {kind!r}; expected one of: "
                       f"{', '.join(MESSAGE_TYPES)}", param="type")
    return validate_model(cls, obj)


def _first_error(e: ValidationError) -> tuple[str, str]:
    """-> (message, param) from pydantic's first error, e.g. ("temperature: Input should be a
    valid number", "temperature")."""
    err = e.errors(include_url=False)[0]
    param = ".".join(str(p) for p in err["loc"]) or None
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = "field required"
    return (f"{param}: {msg}" if param else msg), param
