"""Cadence TTS for pipecat: LLM tokens in, audio out, over our WebSocket `/v1/stream`.

One engine context per turn:
  - an LLM turn (LLMFullResponseStart .. End) shares one pipecat context id; its first token
    sends `open` + `append`, every later token an `append`, and the end of the turn (pipecat's
    `flush_audio`) sends `end`. `end`, not `flush`: the turn's text is complete, and only `end`
    makes the engine finish the utterance with `done`, which closes the audio context (a
    `flush` would speak the tail and keep the context open, waiting for text that never comes).
  - text outside a Start/End pair (pipecat would open a new context per token there) joins an
    implicit turn that stays open while text keeps arriving; it ends after `implicit_turn_idle_s`
    without text, at the next LLM response, or at the pipeline's EndFrame (agent/implicit_turns.py).
  - an interruption sends `cancel` for every interrupted context; the service drops everything
    the server still sends for it, so no stale audio, word or stop frame follows.
Server events: `audio` -> TTSAudioRawFrame, `timestamps` -> word timestamps (timed TTSTextFrames,
so the assistant context holds only the words played, in the order played: agent/word_order.py),
`done` -> TTSStoppedFrame and the end of the audio context, `error` -> an ErrorFrame (and, if the
server no longer knows the context, its end). `report_playout` sends what the listener has heard
back to the engine (see playout.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import NOT_GIVEN, NotGiven, TTSSettings
from pipecat.services.tts_service import TextAggregationMode, WebsocketTTSService
from pipecat.transcriptions.language import Language
from pipecat.utils.errors import ErrorCategory
from websockets.protocol import State

from .cadence_protocol import (
    CONTEXT_GONE,
    ENGINE_LANGUAGES,
    ERROR_CATEGORIES,
    LANGUAGES,
    SAMPLE_RATE,
    CadenceStreamOptions,
    EngineContext,
    split_words,
)
from .cadence_voice import EngineUnreachable, VoiceUploadError, check_reference, upload_reference_voice
from .implicit_turns import ImplicitTurns
from .resample import UtteranceResampler
from .word_order import WordsInPlaybackOrder


@dataclass
class CadenceTTSSettings(TTSSettings):
    """Runtime-updatable settings; a change applies from the next engine context (utterance).

    Parameters:
        instructions: style instruction (VoiceDesign models need one; None for CustomVoice).
    """

    instructions: str | NotGiven | None = field(default_factory=lambda: NOT_GIVEN)


class CadenceTTSService(ImplicitTurns, WordsInPlaybackOrder, WebsocketTTSService):
    """pipecat TTS service for a Cadence server's WebSocket `/v1/stream`."""

    Settings = CadenceTTSSettings
    _settings: CadenceTTSSettings

    def __init__(
        self,
        *,
        url: str = "ws://127.0.0.1:8000/v1/stream",
        settings: CadenceTTSSettings | None = None,
        options: CadenceStreamOptions | None = None,
        text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN,
        implicit_turn_idle_s: float = 0.5,
        open_timeout_s: float = 5.0,
        voice_ref_audio: str | None = None,
        voice_ref_text: str | None = None,
        **kwargs,
    ):
        """Args:
        url: the server's WebSocket endpoint.
        settings: voice, language, instructions (defaults: ryan, English, none).
        options: seed, sampling and chunking sent with every `open`.
        text_aggregation_mode: TOKEN (default) streams LLM tokens to the engine as they arrive;
            the engine decides itself when text is final, so sentence aggregation only adds delay.
        implicit_turn_idle_s: how long text outside an LLM response may pause before its
            utterance is ended.
        open_timeout_s: how long connecting to the server may take.
        voice_ref_audio: a WAV of the voice to speak in (a Base model on the server clones it): uploaded to
            `POST /v1/voices` once per process, from the service's start on (a first turn waits for it), and its
            id replaces `settings.voice`. A missing file raises VoiceUploadError here; a refusal or an unreachable
            server is an ErrorFrame that leaves the service unusable (pipecat's permanent error).
        voice_ref_text: the WAV's transcript (in-context cloning, closer to the reference), or None.
        sample_rate: the rate of the audio pushed (default: the pipeline's output rate). The engine speaks
            24 kHz; the service resamples each utterance as it arrives (agent/resample.py says why here).
        """
        default_settings = CadenceTTSSettings(model=None, voice="ryan", language=Language.EN, instructions=None)
        if settings is not None:
            default_settings.apply_update(settings)
        super().__init__(
            text_aggregation_mode=text_aggregation_mode,
            push_text_frames=False,  # words come with timestamps, as they are played
            push_start_frame=True,
            pause_frame_processing=False,
            settings=default_settings,
            implicit_turn_idle_s=implicit_turn_idle_s,
            **kwargs,
        )
        self._url = url
        self._voice_ref = (check_reference(voice_ref_audio), voice_ref_text) if voice_ref_audio is not None else None
        # An in-context cloned voice (a reference with its transcript) needs the whole text at `open`: its turns'
        # text is held here (context id -> parts) and sent with `open` + end when the turn ends.
        self._whole_text = False
        self._held: dict[str, list[str]] = {}
        self._voice_task: asyncio.Task | None = None  # the upload, started with the service; a turn waits for it
        self._options = options or CadenceStreamOptions()
        self._open_timeout_s = open_timeout_s
        self._contexts: dict[str, EngineContext] = {}
        # Contexts the server refused or lost, recently: their later errors (one per message still
        # on its way) are expected, and reported once.
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._receive_task: asyncio.Task | None = None

    def can_generate_metrics(self) -> bool:
        return True

    def language_to_service_language(self, language: Language) -> str | None:
        return LANGUAGES.get(str(language.value).split("-")[0].lower())

    # --- connection ---------------------------------------------------------------------------

    async def start(self, frame):
        await super().start(frame)
        if self._voice_ref is not None and self._voice_task is None:
            self._voice_task = self.create_task(self._use_reference_voice(), "voice_upload")
        await self._connect()

    async def _use_reference_voice(self) -> bool:
        """Upload the reference (an ErrorFrame if that fails) -> whether the voice is there to speak in."""
        path, text = self._voice_ref
        try:
            self._settings.voice = await upload_reference_voice(self._url, path, text)
            self._whole_text = bool(text and text.strip())
        except VoiceUploadError as e:
            category = ErrorCategory.CONNECTIVITY if isinstance(e, EngineUnreachable) else ErrorCategory.INVALID_REQUEST
            await self.push_error(error_msg=str(e), exception=e, category=category, force_treat_as_permanent=True)
            return False
        logger.info(f"{self}: speaking in the voice of {path} ({self._settings.voice})")
        self._voice_ref = None  # uploaded: a restart of the service keeps the id
        return True

    async def _connect(self):
        await super()._connect()
        await self._connect_websocket()
        if self._websocket and not self._receive_task:
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))

    async def _disconnect(self):
        await super()._disconnect()
        await self._cancel_implicit_watch()
        if self._receive_task:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self):
        try:
            if self._websocket and self._websocket.state is State.OPEN:
                return
            logger.debug(f"{self}: connecting to {self._url}")
            self._websocket = await self._websocket_connect(self._url, proxy=None, open_timeout=self._open_timeout_s)
            self._contexts.clear()  # contexts live and die with their connection
            self._held.clear()
            await self._call_event_handler("on_connected")
        except Exception as e:
            self._websocket = None
            await self.push_error(error_msg=f"cannot connect to the Cadence server at {self._url}: {e}",
                                  exception=e, category=ErrorCategory.CONNECTIVITY)
            await self._call_event_handler("on_connection_error", f"{e}")

    async def _disconnect_websocket(self):
        try:
            await self.stop_all_metrics()
            if self._websocket:
                logger.debug(f"{self}: disconnecting from {self._url}")
                await self._websocket.close()
        except Exception as e:
            logger.warning(f"{self}: error closing the WebSocket: {e}")
        finally:
            self._websocket = None
            self._contexts.clear()
            self._held.clear()
            await self._call_event_handler("on_disconnected")

    async def _send(self, message: dict) -> None:
        if self._websocket is None:
            raise ConnectionError("not connected to the Cadence server")
        await self._websocket.send(json.dumps(message, separators=(",", ":")))

    # --- text in ------------------------------------------------------------------------------

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send `text` to the engine context `context_id`, opening it on first use."""
        ctx = self._contexts.get(context_id) or await self._open_context(context_id)
        if ctx.gone:
            yield None  # refused, or the server is unreachable (reported once): the turn stays silent
            return
        if ctx.ended or ctx.cancelled:
            logger.warning(f"{self}: text for context {context_id} after its end or cancel: {text!r}")
            yield None
            return
        held = self._held.get(context_id)
        try:
            if held is not None:
                held.append(text)
            else:
                await self._send({"type": "append", "context_id": context_id, "text": text})
        except Exception as e:
            await self._lose(ctx, f"sending text to the Cadence server failed: {e}", e)
            yield None
            return
        ctx.has_text = ctx.has_text or bool(text.strip())
        await self.start_tts_usage_metrics(text)
        yield None

    async def _open_context(self, context_id: str) -> EngineContext:
        """Open the engine context, connecting first if needed (once per context, not per token)."""
        if self._websocket is None or self._websocket.state is not State.OPEN:
            await self._connect()  # a failure is reported there
        ctx = self._contexts[context_id] = EngineContext(context_id)
        # The reference voice's upload, if it is still on its way (its failure was reported when it failed).
        voice_ok = self._voice_task is None or await asyncio.shield(self._voice_task)
        if self._websocket is None or not voice_ok:
            await self._lose(ctx)
            return ctx
        if self._whole_text:  # opened at the end of the turn, with its whole text
            self._held[context_id] = []
            return ctx
        try:
            await self._send(self._open_message(context_id))
        except Exception as e:
            await self._lose(ctx, f"opening a context on the Cadence server failed: {e}", e)
        return ctx

    async def _lose(self, ctx: EngineContext, error: str | None = None, exception: Exception | None = None):
        """The server does not hold `ctx` (any more): drop the rest of its text; the end of its
        turn (or now, if it has ended) closes its audio context."""
        if error is not None:
            await self.push_error(error_msg=error, exception=exception, category=ErrorCategory.CONNECTIVITY)
        ctx.gone = True
        self._gone[ctx.id] = None
        while len(self._gone) > 64:
            self._gone.popitem(last=False)
        if ctx.ended:
            self._contexts.pop(ctx.id, None)
            await self._finish_audio_context(ctx.id)

    def _open_message(self, context_id: str) -> dict:
        s = self._settings
        language = s.language if s.language in ENGINE_LANGUAGES else "auto"
        message = {"type": "open", "context_id": context_id, "voice": s.voice, "language": language,
                   "timestamps": True, **self._options.fields()}
        if s.instructions:
            message["instructions"] = s.instructions
        return message

    async def flush_audio(self, context_id: str | None = None):
        """The turn's text is complete: `end` the engine context (cancel it if it has no text)."""
        context_id = context_id or self.get_active_audio_context_id()
        ctx = self._contexts.get(context_id) if context_id else None
        if ctx is None or ctx.ended or ctx.cancelled:
            return
        ctx.ended = True
        if ctx.gone:
            self._contexts.pop(context_id, None)
            await self._finish_audio_context(context_id)
            return
        held = self._held.pop(context_id, None)
        if held is not None and not ctx.has_text:  # never opened on the server: nothing to end there
            self._contexts.pop(context_id, None)
            await self._finish_audio_context(context_id)
        elif held is not None:
            try:
                await self._send({**self._open_message(context_id), "text": "".join(held), "end": True})
            except Exception as e:
                await self._lose(ctx, f"opening a context on the Cadence server failed: {e}", e)
        else:
            # `end` needs text; a turn of whitespace only is cancelled, and its `done` closes it.
            await self._send_quietly({"type": "end" if ctx.has_text else "cancel", "context_id": context_id})

    async def on_turn_context_completed(self):
        context_id = self._turn_context_id
        await super().on_turn_context_completed()
        # The base class flushes only a turn whose audio context is open; one that timed out
        # (no audio for stop_frame_timeout_s) may still be open in the engine, waiting for text.
        if context_id is not None and not self.audio_context_available(context_id):
            await self.flush_audio(context_id)

    async def on_audio_context_interrupted(self, context_id: str):
        self.drop_sequenced(context_id)
        await self.stop_all_metrics()
        await self._cancel_context(context_id)
        await super().on_audio_context_interrupted(context_id)

    async def on_audio_context_completed(self, context_id: str):
        # Normally the context is gone (its `done` ended it). Still open means pipecat gave up
        # on it (no audio for stop_frame_timeout_s): nothing of it would be played any more.
        ctx = self._contexts.get(context_id)
        if ctx is not None and not ctx.cancelled and context_id != self._turn_context_id:
            logger.warning(f"{self}: audio context {context_id} timed out; cancelling it in the engine")
            await self._cancel_context(context_id)
        await super().on_audio_context_completed(context_id)

    async def _cancel_context(self, context_id: str) -> None:
        ctx = self._contexts.get(context_id)
        if ctx is None or ctx.cancelled:
            return
        ctx.cancelled = True
        if ctx.gone or self._held.pop(context_id, None) is not None:
            self._contexts.pop(context_id, None)  # nothing to cancel on the server
            return
        await self._send_quietly({"type": "cancel", "context_id": context_id})

    async def _send_quietly(self, message: dict) -> None:
        """Send a control message; a lost connection is the receive loop's to handle."""
        try:
            await self._send(message)
        except Exception as e:
            logger.warning(f"{self}: could not send {message['type']} for {message.get('context_id')}: {e}")

    # --- playout feedback ---------------------------------------------------------------------

    async def report_playout(self, context_id: str, played_s: float) -> None:
        """Tell the engine the listener has heard `played_s` seconds of `context_id`'s audio now.

        The server stamps the report with its own clock on arrival; reports for contexts the
        engine has finished or that were cancelled are not sent (they would inform nothing)."""
        ctx = self._contexts.get(context_id)
        if ctx is None or ctx.cancelled or ctx.gone or self._websocket is None:
            return
        await self._send_quietly({"type": "playout", "context_id": context_id,
                                  "played_s": round(max(0.0, played_s), 4), "at_ms": int(time.time() * 1000)})

    # --- events out ---------------------------------------------------------------------------

    async def _receive_messages(self):
        async for raw in self._websocket:
            try:
                message = json.loads(raw)
            except (TypeError, json.JSONDecodeError):
                logger.warning(f"{self}: ignoring a message that is not JSON: {raw!r:.80}")
                continue
            await self._handle_message(message)

    async def _handle_message(self, message: dict) -> None:
        kind = message.get("type")
        context_id = message.get("context_id")
        ctx = self._contexts.get(context_id) if isinstance(context_id, str) else None
        if kind == "audio":
            if ctx is None or ctx.cancelled or ctx.gone:
                return  # a cancelled or unknown context: stale audio is never pushed
            pcm = base64.b64decode(message["audio"])
            ctx.audio_s += len(pcm) / 2 / SAMPLE_RATE
            if self.sample_rate != SAMPLE_RATE:
                ctx.resampler = ctx.resampler or UtteranceResampler(SAMPLE_RATE, self.sample_rate)
                pcm = ctx.resampler(pcm)
            await self._push_audio(context_id, pcm)
        elif kind == "timestamps":
            if ctx is None or ctx.cancelled or ctx.gone:
                return
            await self.add_word_timestamps(split_words(message["words"]), context_id)
        elif kind == "done":
            self._contexts.pop(context_id, None)
            if ctx is not None and not ctx.cancelled:
                await self.stop_ttfb_metrics()
                if ctx.resampler is not None:
                    await self._push_audio(context_id, ctx.resampler.flush())
                await self._finish_audio_context(context_id)
        elif kind == "error":
            await self._handle_error(message, ctx)
        elif kind != "flush_done":
            logger.warning(f"{self}: ignoring unknown message type {kind!r}")

    async def _push_audio(self, context_id: str, pcm: bytes) -> None:
        if pcm:  # a resampler's first call may give nothing
            await self.append_to_audio_context(context_id, TTSAudioRawFrame(pcm, self.sample_rate, 1,
                                                                            context_id=context_id))

    async def _handle_error(self, message: dict, ctx: EngineContext | None) -> None:
        code = str(message.get("code"))
        where = f" (context {ctx.id})" if ctx is not None else ""
        if (ctx is not None and (ctx.cancelled or ctx.gone)) or message.get("context_id") in self._gone:
            return  # already reported, or the engine failed while the cancel was on its way
        await self.push_error(error_msg=f"Cadence server error {code}{where}: {message.get('message')}",
                              category=ERROR_CATEGORIES.get(code, ErrorCategory.UNKNOWN))
        if ctx is not None and code in CONTEXT_GONE:
            await self._lose(ctx)  # one audio context per turn: the turn's end closes it

    async def _finish_audio_context(self, context_id: str) -> None:
        if self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)

    # --- interruptions --------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)  # ImplicitTurns first
        if isinstance(frame, InterruptionFrame):
            # Contexts whose audio context had already ended (the engine still speaking the tail
            # of an ended turn) got no interruption hook; every interruptible one stops now.
            for context_id in list(self._contexts):
                tts_context = self._tts_contexts.get(context_id)
                if tts_context is None or tts_context.interruptible:
                    await self._cancel_context(context_id)
