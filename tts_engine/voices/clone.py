"""A cloned voice's prompt: what every request in that voice adds to the talker's prompt.

Two modes, as the official Base models define them:
- speaker embedding only (x-vector): the embedding replaces a built-in speaker's codec row;
- in context: also the reference audio's codes and the tokenised transcript, so the talker
  continues the reference utterance (closer to the reference voice, longer prompt).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, eq=False)
class ClonePrompt:
    speaker_embedding: torch.Tensor  # [H] fp32, H = the talker's width
    ref_codes: torch.Tensor | None = None  # [frames, 16] long: in-context mode only
    ref_text_ids: tuple[int, ...] = ()  # the transcript's tokens (in-context mode)
    ref_text: str | None = None

    def __post_init__(self):
        if self.speaker_embedding.ndim != 1:
            raise ValueError("speaker_embedding must be one vector")
        if (self.ref_codes is None) != (not self.ref_text_ids):
            raise ValueError("in-context cloning needs both the reference codes and its transcript")
        if self.ref_codes is not None and (self.ref_codes.ndim != 2 or self.ref_codes.shape[1] != 16):
            raise ValueError("ref_codes must be [frames, 16]")

    @property
    def in_context(self) -> bool:
        return self.ref_codes is not None


def ref_text_template(text: str) -> str:
    """The transcript is tokenised as its own assistant turn; its content tokens are kept."""
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def ref_text_ids(tokenizer, text: str) -> tuple[int, ...]:
    """Content tokens of the transcript: the turn without its 3 role and 2 closing tokens."""
    ids = tokenizer.encode(ref_text_template(text))
    return tuple(ids[3:-2])
