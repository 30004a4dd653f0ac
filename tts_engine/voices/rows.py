"""A cloned voice's vector rows added to an embedded prompt: the speaker embedding in the speaker
row's codec track, and (in-context mode) each reference frame's feedback embedding in its row.
Shared by the reference loop and the engine's runner, which embed the id rows their own way."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..prompt import Prompt

# codes [T, 16] -> [T, H]: codebook 0's embedding plus the 15 code-predictor tables, as a finished
# frame is fed back into the talker.
FrameEmbed = Callable[[torch.Tensor], torch.Tensor]


def add_clone_rows(x: torch.Tensor, prompt: Prompt, frame_embed: FrameEmbed) -> torch.Tensor:
    """x [rows, H]: the prompt's id rows, embedded; adds the vector rows in place and returns x."""
    clone = prompt.clone
    if clone is None:
        return x
    x[prompt.speaker_row] += clone.speaker_embedding.to(x.device, x.dtype)
    if clone.ref_codes is not None:
        first = prompt.ref_frames_row
        x[first: first + clone.ref_codes.shape[0]] += frame_embed(clone.ref_codes.to(x.device)).to(x.dtype)
    return x


@torch.inference_mode()
def embed_clone_prompt(runner, prompt: Prompt) -> torch.Tensor:
    """The engine's runner (tts_engine/runtime): its id embedding plus the vector rows -> [rows, H]."""
    x = runner.embed_prompt(list(prompt.text_ids), list(prompt.codec_ids))

    def frame_embed(codes: torch.Tensor) -> torch.Tensor:
        tables = runner.code_predictor.feedback[runner.codebook_ids[:15], codes[:, 1:]]  # [T, 15, H]
        return runner.codec_embedding[codes[:, 0]] + tables.sum(1)

    return add_clone_rows(x, prompt, frame_embed)
