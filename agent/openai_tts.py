"""pipecat TTS for any OpenAI-compatible `POST /v1/audio/speech` server that streams raw PCM.

For comparing engines in one pipeline: our own server over HTTP, vLLM-Omni, OpenAI itself. Text is
aggregated into sentences (one request each, since the endpoint takes whole text); each response
is streamed as it arrives (not in half-second reads), and its leading silence is cut on the
client with the engine's own onset detector, so servers that do not trim it are compared fairly.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import numpy as np
from loguru import logger
from pipecat.frames.frames import Frame, StartFrame
from pipecat.services.settings import NOT_GIVEN, NotGiven, TTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService
from pipecat.transcriptions.language import Language
from pipecat.utils.errors import ErrorCategory, classify_http_status_code

from tts_engine.engine.audio import HOP, WINDOW, find_onset

from .cadence_protocol import LANGUAGES

DEFAULT_SILENCE_THRESHOLD_DBFS = -45.0  # the level our engine trims at


class LeadingSilenceTrimmer:
    """Drops s16le audio before the first sound of a response; afterwards passes it through.

    Takes byte chunks of any length (an odd byte waits for its pair). Until the onset is found at
    most one window + hop of samples is held, so an onset across a chunk boundary is still found.
    The detector's windows are sized for 24 kHz (20 ms windows, 10 ms hop)."""

    def __init__(self, threshold_dbfs: float | None = DEFAULT_SILENCE_THRESHOLD_DBFS):
        self.threshold_dbfs = threshold_dbfs
        self.started = threshold_dbfs is None
        self.trimmed_samples = 0
        self._held = b""  # whole samples, before the onset
        self._odd = b""  # a trailing half sample

    def push(self, data: bytes) -> bytes:
        data = self._odd + data
        whole = len(data) & ~1
        data, self._odd = data[:whole], data[whole:]
        if self.started:
            return data
        buf = self._held + data
        pcm = np.frombuffer(buf, dtype="<i2").astype(np.float32) / 32768.0
        onset = find_onset(pcm, self.threshold_dbfs)
        if onset is None:
            keep = min(len(pcm), WINDOW + HOP)
            self.trimmed_samples += len(pcm) - keep
            self._held = buf[2 * (len(pcm) - keep):]
            return b""
        self.started = True
        self.trimmed_samples += onset
        self._held = b""
        return buf[2 * onset:]


@dataclass
class OpenAICompatibleTTSSettings(TTSSettings):
    """Parameters:
    instructions: style instruction, sent as `instructions` when set.
    """

    instructions: str | NotGiven | None = field(default_factory=lambda: NOT_GIVEN)


class OpenAICompatibleTTSService(TTSService):
    """Speaks each sentence with one streamed `POST {base_url}/audio/speech` (response_format pcm)."""

    Settings = OpenAICompatibleTTSSettings
    _settings: OpenAICompatibleTTSSettings

    def __init__(
        self,
        *,
        base_url: str = "http://127.0.0.1:8000/v1",
        api_key: str | None = None,
        settings: OpenAICompatibleTTSSettings | None = None,
        extra_body: dict | None = None,
        source_sample_rate: int = 24000,
        silence_threshold_dbfs: float | None = DEFAULT_SILENCE_THRESHOLD_DBFS,
        timeout_s: float = 30.0,
        text_aggregation_mode: TextAggregationMode = TextAggregationMode.SENTENCE,
        **kwargs,
    ):
        """Args:
        base_url: the API root, e.g. http://host:8000/v1 (the request goes to {base_url}/audio/speech).
        api_key: sent as a Bearer token when given.
        settings: model, voice, language, instructions (language is sent only when set).
        extra_body: more request fields (e.g. {"seed": 7} for our server).
        source_sample_rate: the server's PCM rate when it sends no X-Sample-Rate header.
        silence_threshold_dbfs: leading audio below this level is cut; None keeps it.
        timeout_s: connect and per-read timeout.
        """
        if text_aggregation_mode != TextAggregationMode.SENTENCE:
            raise ValueError("the speech endpoint takes whole text: use TextAggregationMode.SENTENCE")
        if silence_threshold_dbfs is not None and not -120 <= silence_threshold_dbfs <= 0:
            raise ValueError(f"silence_threshold_dbfs must be in [-120, 0], got {silence_threshold_dbfs}")
        default_settings = OpenAICompatibleTTSSettings(model="qwen3-tts", voice="ryan", language=None,
                                                       instructions=None)
        if settings is not None:
            default_settings.apply_update(settings)
        kwargs.setdefault("sample_rate", source_sample_rate)
        super().__init__(text_aggregation_mode=text_aggregation_mode, push_start_frame=True,
                         push_stop_frames=True, settings=default_settings, **kwargs)
        self._url = base_url.rstrip("/") + "/audio/speech"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._extra_body = dict(extra_body or {})
        self._source_sample_rate = source_sample_rate
        self._silence_threshold_dbfs = silence_threshold_dbfs
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def can_generate_metrics(self) -> bool:
        return True

    def language_to_service_language(self, language: Language) -> str | None:
        return LANGUAGES.get(str(language.value).split("-")[0].lower())

    async def start(self, frame: StartFrame):
        await super().start(frame)
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)

    async def cleanup(self):
        await super().cleanup()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _request_body(self, text: str) -> dict:
        s = self._settings
        body = {"model": s.model, "input": text, "voice": s.voice, "response_format": "pcm", "stream": True}
        if s.language:
            body["language"] = s.language
        if s.instructions:
            body["instructions"] = s.instructions
        return {**body, **self._extra_body}

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.post(self._url, json=self._request_body(text), headers=self._headers) as r:
                if r.status != 200:
                    detail = (await r.text())[:300]
                    await self.push_error(error_msg=f"{self._url} answered {r.status}: {detail}",
                                          category=classify_http_status_code(r.status))
                    return
                await self.start_tts_usage_metrics(text)
                rate = int(r.headers.get("X-Sample-Rate", self._source_sample_rate))
                wav = r.headers.get("Content-Type", "").startswith("audio/wav")
                trimmer = LeadingSilenceTrimmer(self._silence_threshold_dbfs)
                async for frame in self._stream_audio_frames_from_iterator(
                        _trimmed(r.content.iter_any(), trimmer, wav), in_sample_rate=rate, context_id=context_id):
                    yield frame
                if trimmer.trimmed_samples:
                    logger.trace(f"{self}: trimmed {trimmer.trimmed_samples / rate:.3f} s of leading silence")
        except (aiohttp.ClientError, TimeoutError) as e:
            await self.push_error(error_msg=f"speech request to {self._url} failed: {e}", exception=e,
                                  category=ErrorCategory.CONNECTIVITY)


async def _trimmed(chunks: AsyncIterator[bytes], trimmer: LeadingSilenceTrimmer, wav: bool) -> AsyncIterator[bytes]:
    header = b""
    async for chunk in chunks:
        if wav and len(header) < 44:  # a streamed WAV: skip its 44-byte header
            need = 44 - len(header)
            header, chunk = header + chunk[:need], chunk[need:]
        out = trimmer.push(chunk)
        if out:
            yield out
