"""ModelRunner: owns every tensor of the fast path.

State lives in per-slot device buffers, so a step can run any subset of requests:
  k_cache, v_cache   [layers, slots + 1, Hkv, max_context, D]   talker KV (last slot = scratch)
  hidden             [slots + 1, H]       final-norm talker state that produced the next c0
  logits             [slots + 1, 3072]    fp32 codebook-0 logits waiting to be sampled
  seen               [slots + 1, 3072]    codebook-0 ids generated so far (repetition penalty)
  rows               per-slot sampling settings (SamplingRows)

`prefill(slot, x)` fills a slot from its prompt rows. `frame_step(slots, frames, positions,
step_text)` produces one frame for each given slot entirely on the device: sample c0, run the 15
code-predictor steps, feed the frame back through the talker for one position. On CUDA each
batch bucket's frame step is one captured graph; padded rows point at the scratch slot.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.decode_attention import decode_attention, decode_attention_ref
from ..model.qwen3_tts import Qwen3TTS
from ..sampling import SamplingParams, suppress_mask
from .fused import FusedStack, finish_layer, qkv, rms_norm
from .sampler import SamplingRows, sample_codebook, sample_codebook0

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
CP_POSITIONS = 16  # [h, C(c0)] + 14 fed codebooks


class ModelRunner:
    def __init__(self, model: Qwen3TTS, *, max_slots: int = 64, max_context: int = 2048,
                 use_triton: bool | None = None, use_graphs: bool | None = None,
                 buckets: tuple[int, ...] = BUCKETS):
        talker = model.talker
        self.cfg = talker.cfg
        p = talker.codec_head.weight
        self.device, self.dtype = p.device, p.dtype
        on_cuda = self.device.type == "cuda"
        self.use_triton = on_cuda if use_triton is None else use_triton
        self.use_graphs = on_cuda if use_graphs is None else use_graphs
        self.max_slots, self.max_context = max_slots, max_context
        self.scratch = max_slots
        self.buckets = tuple(b for b in buckets if b <= max_slots) or (max_slots,)

        self.talker = FusedStack.from_stack(talker.model)
        self.cp = FusedStack.from_stack(talker.code_predictor.model)
        self.codec_head = talker.codec_head.weight
        self.codec_embedding = talker.model.codec_embedding.weight  # [3072, H]
        self.text_embedding = talker.model.text_embedding.weight
        self.text_projection = talker.text_projection
        cp = talker.code_predictor
        self.cp_feedback = torch.stack([t.weight for t in cp.model.codec_embedding])  # [15, 2048, H]
        self.cp_heads = torch.stack([h.weight for h in cp.lm_head])  # [15, 2048, h]
        with torch.no_grad():
            proj = cp.small_to_mtp_projection
            # Pre-projected inputs of the code predictor: proj(C(c0)) and proj(E_j[c]).
            self.cp_in_c0 = proj(self.codec_embedding)  # [3072, h]
            self.cp_in = proj(self.cp_feedback)  # [15, 2048, h]
        self.cp_proj = proj

        t, c, n = self.talker, self.cp, max_slots + 1
        f = dict(device=self.device, dtype=self.dtype)
        self.k_cache = torch.zeros(len(t.layers), n, t.num_kv_heads, max_context, t.head_dim, **f)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.hidden = torch.zeros(n, self.cfg.hidden_size, **f)
        self.logits = torch.zeros(n, self.cfg.vocab_size, device=self.device)
        self.seen = torch.zeros(n, self.cfg.vocab_size, dtype=torch.bool, device=self.device)
        self.eos_allowed = torch.ones(n, dtype=torch.bool, device=self.device)
        self._true = torch.ones((), dtype=torch.bool, device=self.device)
        self.rows = SamplingRows.empty(n, self.device)
        bmax = max(self.buckets)
        self.cp_k = torch.zeros(len(c.layers), bmax, c.num_kv_heads, CP_POSITIONS, c.head_dim, **f)
        self.cp_v = torch.zeros_like(self.cp_k)
        self.cp_rows = torch.arange(bmax, device=self.device)
        self.suppress = suppress_mask(self.cfg.vocab_size, self.cfg.codec_eos_token_id).to(self.device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...], torch.Tensor]] = {}

    # -- attention ---------------------------------------------------------------------------
    def _attend(self, q, k_cache, v_cache, rows, lengths):
        fn = decode_attention if self.use_triton else decode_attention_ref
        return fn(q, k_cache, v_cache, rows, lengths)

    # -- slots ---------------------------------------------------------------------------------
    def start_slot(self, slot: int, params: SamplingParams, seed: int, eos_allowed: bool) -> None:
        self.rows.set_row(slot, params, seed)
        self.seen[slot] = False
        self.eos_allowed[slot] = eos_allowed

    @torch.inference_mode()
    def embed_prompt(self, text_ids: list[int | None], codec_ids: list[int | None]) -> torch.Tensor:
        """Prompt rows (text id | None, codec id | None) -> [T, H]."""
        x = torch.zeros(len(text_ids), self.cfg.hidden_size, device=self.device, dtype=self.dtype)
        t_rows = [i for i, v in enumerate(text_ids) if v is not None]
        c_rows = [i for i, v in enumerate(codec_ids) if v is not None]
        if t_rows:
            x[t_rows] = self.text_embed(torch.tensor([text_ids[i] for i in t_rows], device=self.device))
        if c_rows:
            x[c_rows] += self.codec_embedding[torch.tensor([codec_ids[i] for i in c_rows], device=self.device)]
        return x

    def text_embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.text_projection(self.text_embedding[ids])

    @torch.inference_mode()
    def prefill(self, slot: int, x: torch.Tensor) -> None:
        """Run prompt rows x [T, H] for `slot` from position 0; fills its cache, hidden, logits."""
        t_len = x.shape[0]
        if t_len >= self.max_context:
            raise ValueError(f"prompt of {t_len} rows exceeds the context of {self.max_context}")
        st = self.talker
        positions = torch.arange(t_len, device=self.device)
        rep = st.num_heads // st.num_kv_heads
        h = x[None]
        for i, layer in enumerate(st.layers):
            q, k, v = qkv(st, layer, h, positions[None])  # [1, T, heads, D]
            self.k_cache[i, slot, :, :t_len] = k[0].transpose(0, 1)
            self.v_cache[i, slot, :, :t_len] = v[0].transpose(0, 1)
            attn = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(rep, 1),
                v.transpose(1, 2).repeat_interleave(rep, 1), is_causal=True)  # [1, Hq, T, D]
            h = finish_layer(st, layer, h, attn.transpose(1, 2).flatten(2))
        last = rms_norm(h[0, -1], st.norm, st.eps)
        self.hidden[slot] = last
        self.logits[slot] = F.linear(last, self.codec_head).float()

    # -- one frame -------------------------------------------------------------------------------
    def _talker_decode(self, slots, x, positions):
        """x [B, H] at positions [B] -> final-norm hidden [B, H]; writes each slot's K/V."""
        st = self.talker
        h = x[:, None]
        for i, layer in enumerate(st.layers):
            q, k, v = qkv(st, layer, h, positions[:, None])  # [B, 1, heads, D]
            self.k_cache[i][slots, :, positions] = k[:, 0]
            self.v_cache[i][slots, :, positions] = v[:, 0]
            attn = self._attend(q[:, 0], self.k_cache[i], self.v_cache[i], slots, positions + 1)
            h = finish_layer(st, layer, h, attn.flatten(1)[:, None])
        return rms_norm(h[:, 0], st.norm, st.eps)

    def _cp_layer_stack(self, h, positions, b, start):
        """Code predictor over new positions start .. start + n - 1 for rows 0..b-1; h [b, n, h]."""
        c = self.cp
        n = h.shape[1]
        rep = c.num_heads // c.num_kv_heads
        for i, layer in enumerate(c.layers):
            q, k, v = qkv(c, layer, h, positions)
            self.cp_k[i, :b, :, start:start + n] = k.transpose(1, 2)
            self.cp_v[i, :b, :, start:start + n] = v.transpose(1, 2)
            if n > 1:  # the two prefill positions: plain causal attention between them
                attn = F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(rep, 1),
                    v.transpose(1, 2).repeat_interleave(rep, 1), is_causal=True).transpose(1, 2)
            else:
                lengths = torch.full((b,), start + 1, device=self.device)
                attn = self._attend(q[:, 0], self.cp_k[i], self.cp_v[i], self.cp_rows[:b], lengths)[:, None]
            h = finish_layer(c, layer, h, attn.flatten(2))
        return rms_norm(h[:, -1], c.norm, c.eps)

    def _code_predict(self, hidden, c0, frames, rows: SamplingRows) -> torch.Tensor:
        """hidden [B, H], c0 [B] -> codebooks 1..15 [B, 15]."""
        b = hidden.shape[0]
        x = torch.stack((self.cp_proj(hidden), self.cp_in_c0[c0]), dim=1)  # [B, 2, h]
        positions = torch.arange(2, device=self.device).expand(b, 2)
        out = self._cp_layer_stack(x, positions, b, 0)
        codes = []
        for j in range(15):
            code = sample_codebook(F.linear(out, self.cp_heads[j]).float(), frames, j + 1, rows)
            codes.append(code)
            if j < 14:
                pos = torch.full((b, 1), j + 2, device=self.device)
                out = self._cp_layer_stack(self.cp_in[j][code][:, None], pos, b, j + 2)
        return torch.stack(codes, dim=1)

    def _frame_step(self, slots, frames, positions, step_text) -> torch.Tensor:
        rows = self.rows.gather(slots)
        c0 = sample_codebook0(self.logits[slots], self.seen[slots], frames, rows,
                              self.cfg.codec_eos_token_id, self.suppress, self.eos_allowed[slots])
        self.seen.index_put_((slots, c0), self._true)  # a device scalar: no host copy in a graph
        rest = self._code_predict(self.hidden[slots], c0, frames, rows)
        codes = torch.cat((c0[:, None], rest), dim=1)  # [B, 16]
        feedback = self.codec_embedding[c0] + self.cp_feedback[torch.arange(15, device=self.device), rest].sum(1)
        hidden = self._talker_decode(slots, feedback + self.text_embed(step_text), positions)
        self.hidden[slots] = hidden
        self.logits[slots] = F.linear(hidden, self.codec_head).float()
        return codes

    @torch.inference_mode()
    def frame_step(self, slots: list[int], frames: list[int], positions: list[int],
                   step_text: list[int]) -> torch.Tensor:
        """One frame for each slot -> codes [B, 16] (device tensor; EOS rows have c0 == EOS).

        frames[i]: index of the frame being produced for slots[i]; positions[i]: the talker
        position its feedback is written at; step_text[i]: text-track id added to that step."""
        b = len(slots)
        if b > max(self.buckets):
            raise ValueError(f"batch of {b} exceeds the largest bucket {max(self.buckets)}")
        if self.use_graphs and self.graphs:
            bucket = next(x for x in self.buckets if x >= b)
            graph, inputs, out = self.graphs[bucket]
            pad = bucket - b
            for buf, vals, fill in zip(inputs, (slots, frames, positions, step_text), (self.scratch, 0, 0, 0)):
                buf.copy_(torch.tensor(vals + [fill] * pad), non_blocking=True)
            graph.replay()
            return out[:b]
        t = lambda v: torch.tensor(v, device=self.device)  # noqa: E731
        return self._frame_step(t(slots), t(frames), t(positions), t(step_text))

    @torch.inference_mode()
    def capture_graphs(self) -> None:
        """Capture one frame-step graph per bucket, largest first, sharing one memory pool."""
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        pool = torch.cuda.graph_pool_handle()
        for bucket in sorted(self.buckets, reverse=True):
            inputs = (torch.full((bucket,), self.scratch, device=self.device),
                      torch.zeros(bucket, dtype=torch.long, device=self.device),
                      torch.zeros(bucket, dtype=torch.long, device=self.device),
                      torch.full((bucket,), self.cfg.code_predictor.vocab_size, device=self.device))
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._frame_step(*inputs)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                out = self._frame_step(*inputs)
            self.graphs[bucket] = (graph, inputs, out)
        torch.cuda.synchronize()
