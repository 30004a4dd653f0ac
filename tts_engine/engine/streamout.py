"""What one stream sends: trimmed PCM chunks and word timings. No torch.

Word timings come from the streaming layout's schedule: content token t_i (1-based) is fed to the
talker with the step that produces frame i-1, so a word starts at the frame of its first token.
Times are in the stream's emitted audio: dropped frame 0 and trimmed leading silence removed.
"""

from __future__ import annotations

import numpy as np

from ..text import TextTokenizer
from .api import SAMPLE_RATE, SAMPLES_PER_FRAME, AudioEvent, WordTiming
from .audio import OnsetTrimmer, to_s16le


class StreamOutput:
    def __init__(self, stream_id: str, silence_threshold_dbfs: float | None):
        self.stream_id = stream_id
        self.trimmer = OnsetTrimmer(silence_threshold_dbfs)
        self.index = 0
        self.samples_sent = 0
        # (first token index, token ids) of each word; a word closes when the next one starts.
        self.words: list[tuple[int, list[int]]] = []
        self.tokenizer: TextTokenizer | None = None
        self.tokens = 0
        self.words_sent = 0
        self.timings_enabled = True

    @property
    def audio_s(self) -> float:
        return self.samples_sent / SAMPLE_RATE

    def add_tokens(self, ids: list[int], tokenizer: TextTokenizer) -> None:
        if not self.timings_enabled:  # no token decoded on the engine thread before the prefill's launch
            return
        self.tokenizer = tokenizer
        for token in ids:
            piece = tokenizer.decode([token])
            if not self.words or (piece[:1].isspace() and piece.strip()):
                self.words.append((self.tokens, [token]))
            else:
                self.words[-1][1].append(token)
            self.tokens += 1

    def _frame_time(self, frame: int, first_audible_frame: int) -> float:
        frames = frame - first_audible_frame
        return (frames * SAMPLES_PER_FRAME - self.trimmer.trimmed_samples) / SAMPLE_RATE

    def audio(self, s16: np.ndarray, first_frame: int, num_frames: int, *, final: bool,
              first_audible_frame: int = 1) -> AudioEvent | None:
        """int16 PCM (`audio.to_s16`) of frames [first_frame, first_frame + num_frames) -> an event, or None
        while the stream is still silent. Sent as it is once the onset trimmer passes audio through; until
        then the trimmer looks at it as float (s16 / 32767), whose s16 is the same samples again."""
        if self.trimmer.started:
            data, samples = s16.tobytes(), len(s16)
        else:
            out = self.trimmer.push(s16.astype(np.float32) / np.float32(32767.0))
            if len(out) == 0:
                return None
            data, samples = to_s16le(out), len(out)
        start_s = self.audio_s
        self.samples_sent += samples
        end_frame = first_frame + num_frames
        words = []
        # Token i belongs to frame i; a word is sent once its start frame has been emitted and the
        # next word has begun (or the stream is ending), so its end time is known.
        while self.words_sent < len(self.words):
            first_token, token_ids = self.words[self.words_sent]
            closed = self.words_sent + 1 < len(self.words) or final
            if first_token >= end_frame or not closed:
                break
            following = self.words_sent + 1
            next_first = self.words[following][0] if following < len(self.words) else None
            start = max(0.0, self._frame_time(first_token, first_audible_frame))
            end = self._frame_time(next_first, first_audible_frame) if next_first is not None else self.audio_s
            text = self.tokenizer.decode(token_ids).strip()
            words.append(WordTiming(text, round(start, 3), round(max(start, min(end, self.audio_s)), 3)))
            self.words_sent += 1
        event = AudioEvent(self.stream_id, self.index, data, round(start_s, 6),
                           tuple(words) if self.timings_enabled else ())
        self.index += 1
        return event
