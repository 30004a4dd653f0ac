"""Talker prompts for CustomVoice, VoiceDesign and Base (cloned voices), in the non-streaming and
streaming layouts.

Every talker input row is the sum of a text-track vector `T(id) = text_projection(
text_embedding[id])` and a codec-track vector `C(id) = codec_embedding[id]`; either may be absent.
A `Prompt` lists those ids (no tensors), so prompt layout is testable without a model.

Prefill rows, in order:
  T(instruct ids)                              optional `<|im_start|>user\\n{instruct}<|im_end|>\\n`
  T(<|im_start|>) T(assistant) T(\\n)           role
  T(tts_pad) + C(ctrl_i) ...                   [think, think_bos, lang, think_eos] or
                                               [nothink, think_bos, think_eos] for `auto`
  T(tts_pad) + C(speaker)                      CustomVoice; a cloned voice puts its speaker
                                               embedding S in this row's codec track instead
  T(tts_bos) + C(codec_pad)
then
  streaming:      T(t1) + C(codec_bos); decode step k adds T(t_{k+2}), then T(tts_eos), then T(tts_pad)
  non-streaming:  T(t_i) + C(codec_pad) for every text token, T(tts_eos) + C(codec_pad),
                  T(tts_pad) + C(codec_bos); every decode step adds T(tts_pad).

A cloned voice in context mode (reference audio and its transcript) continues the reference
instead: the text track is x = (reference transcript r1..rM, t1..tN, tts_eos), the codec track
is y = (codec_bos, F(frame 1) .. F(frame R)) with F(frame) = the sum of its 16 codebook embeddings
(as a finished frame is fed back), and
  non-streaming:  T(x_i) + C(codec_pad) for every x_i, then T(tts_pad) + y_j for every y_j;
  streaming:      T(x_i) + y_i pairwise; the longer track's rest is T(x_i) per decode step, or
                  T(tts_pad) rows under the rest of y when the text is the shorter one.
Vector rows (S, F) carry no ids: `Prompt.clone` holds the tensors and the rows they go into.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from .config import ModelConfig

if TYPE_CHECKING:
    from .voices.clone import ClonePrompt


class Layout(StrEnum):
    NON_STREAMING = "non_streaming"
    STREAMING = "streaming"


@dataclass(frozen=True)
class VoiceSpec:
    """Who speaks and how: validated against the checkpoint's config."""

    speaker: str | None
    language: str = "auto"
    instruct: str | None = None
    # A cloned voice (Base models): `speaker` is its voice id, this its precomputed prompt.
    cloned: ClonePrompt | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Prompt:
    """Prefill rows as (text id, codec id) pairs, plus the text fed with each decode step."""

    text_ids: tuple[int | None, ...]
    codec_ids: tuple[int | None, ...]
    trailing_text_ids: tuple[int, ...]
    pad_text_id: int
    # Cloned voices: the speaker embedding goes into row `speaker_row`'s codec track, reference
    # frame k (in-context mode) into row `ref_frames_row + k`'s.
    clone: ClonePrompt | None = field(default=None, compare=False)
    speaker_row: int | None = None
    ref_frames_row: int | None = None

    def __post_init__(self):
        if len(self.text_ids) != len(self.codec_ids):
            raise ValueError("text and codec tracks must have one entry per prefill row")
        if (self.clone is None) != (self.speaker_row is None):
            raise ValueError("a cloned voice's prompt needs its speaker row, and only it has one")

    def __len__(self) -> int:
        return len(self.text_ids)

    def step_text_id(self, step: int) -> int:
        """Text-track id added to decode step `step` (0 = the step that consumes frame 0)."""
        return self.trailing_text_ids[step] if step < len(self.trailing_text_ids) else self.pad_text_id


def resolve_voice(cfg: ModelConfig, voice: VoiceSpec) -> tuple[int | None, int | None]:
    """-> (speaker codec id or None, language codec id or None for `auto`). Raises ValueError."""
    t = cfg.talker
    language = (voice.language or "auto").lower()
    if language not in cfg.languages:
        raise ValueError(f"unknown language {voice.language!r}; supported: {', '.join(cfg.languages)}")
    speaker_id = None
    speaker = voice.speaker.lower() if voice.speaker else None
    if cfg.tts_model_type == "base" or voice.cloned is not None:
        if cfg.tts_model_type != "base":
            raise ValueError(f"cloned voices need a Base model; this is a {cfg.tts_model_type} model")
        if voice.cloned is None:
            raise ValueError("Base models speak in cloned voices only: clone one with POST /v1/voices "
                             "(or give reference audio) and use its id as the voice")
        if voice.cloned.speaker_embedding.shape[-1] != t.hidden_size:
            raise ValueError("this cloned voice was made with another model")
        if voice.instruct:
            raise ValueError("cloned voices take no `instructions`: the reference audio sets the voice")
        return None, (None if language == "auto" else t.codec_language_id[language])
    if cfg.tts_model_type == "custom_voice":
        if speaker is None:
            raise ValueError(f"this CustomVoice model needs a voice; choose one of: "
                             f"{', '.join(cfg.speakers)}")
        if speaker not in t.spk_id:
            raise ValueError(f"unknown voice {voice.speaker!r}; choose one of: {', '.join(cfg.speakers)}")
        speaker_id = t.spk_id[speaker]
    elif speaker is not None:
        raise ValueError(f"{cfg.tts_model_type} models have no built-in voices; describe the voice in "
                         "`instructions` instead")
    elif not voice.instruct:
        raise ValueError("VoiceDesign models need `instructions` describing the voice")
    language_id = None if language == "auto" else t.codec_language_id[language]
    dialect = t.spk_is_dialect.get(speaker) if speaker else None
    if dialect and language in ("chinese", "auto"):
        language_id = t.codec_language_id[dialect]
    return speaker_id, language_id


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def build_prompt(cfg: ModelConfig, template_ids: list[int], voice: VoiceSpec, layout: Layout,
                 instruct_ids: list[int] | None = None) -> Prompt:
    """`template_ids`: the tokenised `assistant_text(text)`; its first 3 ids are the role
    (`<|im_start|>assistant\\n`), its last 5 close the turn and open the next, the rest is the
    text content t1..tN. `instruct_ids`: the tokenised `instruct_text(instruct)`, or None."""
    if len(template_ids) < 9 or template_ids[0] != cfg.im_start_token_id or \
            template_ids[-5] != cfg.im_end_token_id:
        raise ValueError("text is empty or was not tokenised from assistant_text()")
    role, text_ids = list(template_ids[:3]), list(template_ids[3:-5])
    t = cfg.talker
    speaker_id, language_id = resolve_voice(cfg, voice)
    if language_id is None:
        control = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
    else:
        control = [t.codec_think_id, t.codec_think_bos_id, language_id, t.codec_think_eos_id]
    if speaker_id is not None or voice.cloned is not None:
        control.append(speaker_id)  # None: a cloned voice's embedding row
    control.append(t.codec_pad_id)

    text: list[int | None] = []
    codec: list[int | None] = []
    if instruct_ids and cfg.supports_instruct:
        text += instruct_ids
        codec += [None] * len(instruct_ids)
    text += role
    codec += [None] * 3
    text += [cfg.tts_pad_token_id] * (len(control) - 1) + [cfg.tts_bos_token_id]
    codec += control
    speaker_row = len(codec) - 2 if voice.cloned is not None else None

    if voice.cloned is not None and voice.cloned.ref_codes is not None:
        return _in_context_prompt(cfg, text, codec, text_ids, voice.cloned, layout, speaker_row)
    if layout is Layout.STREAMING:
        text.append(text_ids[0])
        codec.append(t.codec_bos_id)
        trailing = (*text_ids[1:], cfg.tts_eos_token_id)
    else:
        text += [*text_ids, cfg.tts_eos_token_id, cfg.tts_pad_token_id]
        codec += [t.codec_pad_id] * (len(text_ids) + 1) + [t.codec_bos_id]
        trailing = ()
    return Prompt(tuple(text), tuple(codec), tuple(trailing), cfg.tts_pad_token_id, voice.cloned, speaker_row)


def _in_context_prompt(cfg: ModelConfig, text: list[int | None], codec: list[int | None],
                       text_ids: list[int], clone: ClonePrompt, layout: Layout,
                       speaker_row: int) -> Prompt:
    """Continue the reference: see the module docstring. `text`/`codec`: the rows up to codec_pad."""
    t = cfg.talker
    x = [*clone.ref_text_ids, *text_ids, cfg.tts_eos_token_id]
    frames = int(clone.ref_codes.shape[0])
    y: list[int | None] = [t.codec_bos_id, *[None] * frames]
    if layout is Layout.NON_STREAMING:
        text += [*x, *[cfg.tts_pad_token_id] * len(y)]
        codec += [*[t.codec_pad_id] * len(x), *y]
        trailing: list[int] = []
    else:
        n = len(y)
        text += x[:n] + [cfg.tts_pad_token_id] * max(0, n - len(x))
        codec += y
        trailing = x[n:]
    first_frame = len(codec) - frames
    return Prompt(tuple(text), tuple(codec), tuple(trailing), cfg.tts_pad_token_id, clone, speaker_row,
                  first_frame)

