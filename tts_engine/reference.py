"""Reference generation loop: eager, batched, both layouts. The oracle for every fast path and
the CPU path.

Data flow for a batch of B prompts:
  prefill   rows [B, L, H] (left-padded) -> talker -> hidden [B, H], c0 logits [B, 3072]
  frame k:  pick c0_k per row (penalty, min-new, suppress, sampling)
            code predictor(hidden, C(c0_k)) -> codebooks 1..15              [B, 15]
            feedback(codes_k) + T(step text k) -> talker one position -> next hidden, logits
A row ends on EOS, at its frame budget, or (random-weight checkpoints) at its forced length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .model.qwen3_tts import Qwen3TTS
from .prompt import Prompt
from .sampling import SamplingParams, pick_codebook, pick_codebook0, suppress_mask
from .voices.rows import add_clone_rows


@dataclass(frozen=True)
class GenerationInput:
    prompt: Prompt
    params: SamplingParams
    seed: int
    max_frames: int
    # Random-weight checkpoints only: EOS is masked and the row ends after exactly this many
    # frames, so a random-weight run does the work a real one would.
    forced_frames: int | None = None


def _embed_rows(model: Qwen3TTS, prompt: Prompt, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(text id | None, codec id | None) rows, plus a cloned voice's vector rows -> [n, H]."""
    talker = model.talker
    text_ids, codec_ids = list(prompt.text_ids), list(prompt.codec_ids)
    out = torch.zeros(len(text_ids), talker.cfg.hidden_size, device=device, dtype=dtype)
    t_rows = [i for i, x in enumerate(text_ids) if x is not None]
    c_rows = [i for i, x in enumerate(codec_ids) if x is not None]
    if t_rows:
        ids = torch.tensor([text_ids[i] for i in t_rows], device=device)
        out[t_rows] = talker.text_embed(ids)
    if c_rows:
        ids = torch.tensor([codec_ids[i] for i in c_rows], device=device)
        out[c_rows] = out[c_rows] + talker.codec_embed(ids)
    return add_clone_rows(out, prompt, talker.feedback_embed)


@torch.inference_mode()
def generate_codes(model: Qwen3TTS, inputs: list[GenerationInput],
                   on_frame: Callable[[int], None] | None = None) -> list[torch.Tensor]:
    """-> per input, codes [frames, 16] (long, on CPU). `on_frame(k)` after each frame."""
    talker = model.talker
    cfg = talker.cfg
    device = talker.codec_head.weight.device
    dtype = talker.codec_head.weight.dtype
    b = len(inputs)
    lengths = [len(x.prompt) for x in inputs]
    width = max(lengths)
    pads = [width - n for n in lengths]

    x = torch.zeros(b, width, cfg.hidden_size, device=device, dtype=dtype)
    for i, inp in enumerate(inputs):
        x[i, pads[i]:] = _embed_rows(model, inp.prompt, device, dtype)
    pad_t = torch.tensor(pads, device=device)[:, None]
    positions = (torch.arange(width, device=device)[None] - pad_t).clamp(min=0)  # [B, S]
    key_ok = torch.arange(width, device=device)[None] >= pad_t  # [B, S]
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    # Padding queries attend to themselves only, which keeps their (unused) K/V finite.
    mask = (causal[None] & key_ok[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)[None]
    cache = talker.model.new_cache()
    hidden, logits = talker(x, positions, cache, mask[:, None])
    hidden, logits = hidden[:, -1], logits[:, -1].float()

    suppress = suppress_mask(cfg.vocab_size, cfg.codec_eos_token_id).to(device)
    eos = cfg.codec_eos_token_id
    frames: list[list[torch.Tensor]] = [[] for _ in inputs]
    history: list[list[int]] = [[] for _ in inputs]
    active = [True] * b
    frame = 0
    while True:
        c0 = []
        for i, inp in enumerate(inputs):
            if not active[i]:
                c0.append(0)
                continue
            forced = inp.forced_frames is not None
            if frame >= inp.max_frames or (forced and frame >= inp.forced_frames):
                active[i] = False
                c0.append(0)
                continue
            row_logits = logits[i].clone()
            if forced:
                row_logits[eos] = -torch.inf
            code = pick_codebook0(row_logits, history[i], frame, inp.params, inp.seed, eos, suppress)
            if code == eos:
                active[i] = False
            history[i].append(code)
            c0.append(code)
        if not any(active):
            break
        c0_t = torch.tensor(c0, device=device)

        def sample(cb_logits: torch.Tensor, codebook: int, _frame=frame) -> torch.Tensor:
            return torch.tensor([pick_codebook(cb_logits[i], _frame, codebook, inp.params, inp.seed)
                                 if active[i] else 0 for i, inp in enumerate(inputs)], device=device)

        rest = talker.code_predictor.predict(hidden, talker.codec_embed(c0_t), sample)
        codes = torch.cat((c0_t[:, None], rest), dim=1)  # [B, 16]
        for i in range(b):
            if active[i]:
                frames[i].append(codes[i].cpu())
        step_text = torch.tensor([inp.prompt.step_text_id(frame) for inp in inputs], device=device)
        x = (talker.feedback_embed(codes) + talker.text_embed(step_text))[:, None]  # [B, 1, H]
        key_ok = torch.cat((key_ok, torch.ones(b, 1, dtype=torch.bool, device=device)), dim=1)
        positions = torch.tensor([[lengths[i] + frame] for i in range(b)], device=device)
        hidden, logits = talker(x, positions, cache, key_ok[:, None, None, :])
        hidden, logits = hidden[:, -1], logits[:, -1].float()
        frame += 1
        if on_frame is not None:
            on_frame(frame)
    return [torch.stack(f) if f else torch.zeros(0, 16, dtype=torch.long) for f in frames]
