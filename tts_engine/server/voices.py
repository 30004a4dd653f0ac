"""`/v1/voices`: clone a voice from reference audio (Base models), list and delete cloned voices.

  POST   /v1/voices        multipart form: `audio` (WAV, FLAC or OGG file, 1-30 s of speech),
                           optional `text` (its transcript: in-context cloning, closer to the
                           reference) and `name` -> 201 {"id": "voice_...", ...}
  GET    /v1/voices        {"object": "list", "data": [voice, ...]}
  GET    /v1/voices/{id}   one voice
  DELETE /v1/voices/{id}   {"id": ..., "object": "voice", "deleted": true}

The prompt is computed once, on a worker thread, by the checkpoint's speaker and codec encoders
(loaded on first use), and kept in the engine's VoiceStore: the id is then usable as `voice`
wherever a voice name is (HTTP and WebSocket). Bad audio is a 4xx naming the problem: 415 for a
format that cannot be read, 422 for too short, too long or silent audio, 413 past MAX_UPLOAD_BYTES.

Voices belong to the client that made them (its API key, else its address: quota.client_of): a client
lists, reads and deletes only its own (another's voice is a 404, so its ids are not confirmed either),
and keeps at most `max_voices_per_client` voices and `max_voice_seconds_per_client` seconds of
reference audio (403 `voice_quota` past either, checked before the encoder runs). An id is a 64-bit
secret, so speaking with a voice needs no owner check: whoever holds the id may use it. Voices put in
the store by other means (no owner) are shared: every client sees them, none deletes them.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from fastapi import APIRouter
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..voices.audio import SAMPLE_RATE, ReferenceAudioError, load_reference
from ..voices.store import VoiceStore
from .config import ServerConfig
from .errors import ApiError
from .quota import client_of

log = logging.getLogger(__name__)
ENDPOINT = "/v1/voices"
MAX_UPLOAD_BYTES = 8 * 1024 * 1024  # 30 s of 48 kHz stereo 16-bit WAV is 5.8 MB
MAX_NAME_CHARS = 64
MAX_TEXT_CHARS = 1000


def engine_voices(engine) -> VoiceStore:
    """The engine's VoiceStore, created on first use: the speech endpoints look ids up in it."""
    store = getattr(engine, "voices", None)
    if store is None:
        store = VoiceStore()
        engine.voices = store
    return store


class _Encoder:
    """The Base checkpoint's voice encoder, loaded once on the first clone."""

    def __init__(self, engine):
        self.engine = engine
        self._encoder = None
        self._lock = threading.Lock()

    def clone(self, wav, text: str | None):
        from ..voices.encoder import VoiceEncoder

        with self._lock:
            if self._encoder is None:
                device = getattr(self.engine, "device", "cpu")
                self._encoder = VoiceEncoder.from_checkpoint(self.engine.path, device=device,
                                                             tokenizer=getattr(self.engine, "tokenizer", None))
            return self._encoder.clone(wav, text)


class VoiceOwners:
    """Who made each voice, and what each client holds: voices and reference seconds, uploads under way
    included (reserved before the encoder runs, so concurrent uploads cannot pass the caps together)."""

    def __init__(self, max_voices: int, max_seconds: float):
        self.max_voices, self.max_seconds = max_voices, max_seconds
        self.owner: dict[str, str] = {}  # voice id -> client
        self.held: dict[str, tuple[int, float]] = {}  # client -> (voices, seconds)

    def reserve(self, client: str, seconds: float) -> None:
        voices, held_s = self.held.get(client, (0, 0.0))
        if voices + 1 > self.max_voices or held_s + seconds > self.max_seconds:
            raise ApiError("voice_quota", f"this client keeps {voices} voices ({held_s:.1f} s of reference audio); "
                           f"the limit per client is {self.max_voices} voices and {self.max_seconds:g} s, and this "
                           f"reference is {seconds:.1f} s: delete one of its voices first (DELETE {ENDPOINT}/<id>)")
        self.held[client] = (voices + 1, held_s + seconds)

    def release(self, client: str, seconds: float) -> None:
        voices, held_s = self.held.get(client, (1, seconds))
        if voices <= 1:
            self.held.pop(client, None)
        else:
            self.held[client] = (voices - 1, max(0.0, held_s - seconds))

    def sees(self, client: str, voice_id: str) -> bool:
        owner = self.owner.get(voice_id)
        return owner is None or owner == client


def voices_router(engine, cfg: ServerConfig | None = None) -> APIRouter:
    cfg = cfg or ServerConfig()
    router = APIRouter()
    store = engine_voices(engine)
    encoder = _Encoder(engine)
    owners = VoiceOwners(cfg.max_voices_per_client, cfg.max_voice_seconds_per_client)

    async def create_voice(request: Request) -> JSONResponse:
        if engine.model_config.tts_model_type != "base":
            raise ApiError("invalid_request", f"this server runs a {engine.model_config.tts_model_type} model; "
                           "voice cloning needs a Base model (e.g. Qwen/Qwen3-TTS-12Hz-1.7B-Base)")
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            raise ApiError("unsupported_media_type", "send the reference audio as multipart/form-data with a "
                           "file field `audio` (and optional `text`, `name`)")
        async with request.form(max_files=1, max_fields=4, max_part_size=MAX_UPLOAD_BYTES) as form:
            audio = form.get("audio")
            text, name = _text_field(form, "text", MAX_TEXT_CHARS), _text_field(form, "name", MAX_NAME_CHARS)
            if not isinstance(audio, UploadFile):
                raise ApiError("invalid_request", "the form has no file field `audio`", param="audio")
            data = await audio.read(MAX_UPLOAD_BYTES + 1)
        if len(data) > MAX_UPLOAD_BYTES:
            raise ApiError("payload_too_large", f"the reference audio is over {MAX_UPLOAD_BYTES // 2**20} MiB")
        try:
            wav = load_reference(data)
        except ReferenceAudioError as e:
            code = "unsupported_media_type" if e.kind == "format" else "invalid_request"
            raise ApiError(code, str(e), param="audio") from None
        client, seconds = client_of(request.scope), len(wav) / SAMPLE_RATE
        owners.reserve(client, seconds)
        try:
            prompt = await asyncio.to_thread(encoder.clone, wav, text)
            voice = store.add(prompt, name=name, seconds=seconds)
        except OverflowError as e:
            owners.release(client, seconds)
            raise ApiError("invalid_request", str(e)) from None
        except BaseException:
            owners.release(client, seconds)
            raise
        owners.owner[voice.voice_id] = client
        log.info("cloned voice %s (%s, %.1f s)", voice.voice_id, voice.describe()["mode"], voice.seconds)
        return JSONResponse(voice.describe(), 201)

    def own_voice(request: Request, voice_id: str):
        """The voice, if this client may see it; else a 404 that does not say whether it exists."""
        voice = store.get(voice_id)
        if voice is None or not owners.sees(client_of(request.scope), voice_id):
            raise ApiError("not_found", f"no voice {voice_id!r} of this client")
        return voice

    async def list_voices(request: Request) -> JSONResponse:
        client = client_of(request.scope)
        return JSONResponse({"object": "list", "data": [v.describe() for v in store.list()
                                                        if owners.sees(client, v.voice_id)]})

    async def get_voice(request: Request, voice_id: str) -> JSONResponse:
        return JSONResponse(own_voice(request, voice_id).describe())

    async def delete_voice(request: Request, voice_id: str) -> JSONResponse:
        voice = own_voice(request, voice_id)
        client = owners.owner.get(voice_id)
        if client is None:
            raise ApiError("not_found", f"voice {voice_id!r} is the server's, shared by every client: it is not "
                           "deleted through the API")
        if store.delete(voice_id):
            owners.owner.pop(voice_id, None)
            owners.release(client, voice.seconds)
        return JSONResponse({"id": voice_id, "object": "voice", "deleted": True})

    router.add_api_route(ENDPOINT, create_voice, methods=["POST"], status_code=201,
                         summary="Clone a voice from reference audio (Base models)")
    router.add_api_route(ENDPOINT, list_voices, methods=["GET"], summary="List cloned voices")
    router.add_api_route(ENDPOINT + "/{voice_id}", get_voice, methods=["GET"], summary="One cloned voice")
    router.add_api_route(ENDPOINT + "/{voice_id}", delete_voice, methods=["DELETE"], summary="Delete a cloned voice")
    return router


def _text_field(form, key: str, limit: int) -> str | None:
    value = form.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError("invalid_request", f"`{key}` must be a text field", param=key)
    value = value.strip()
    if len(value) > limit:
        raise ApiError("invalid_request", f"`{key}` is over {limit} characters", param=key)
    return value or None
