"""A prompt's prefill, a part of ModelRunner: its rows embedded (text and codec tracks), run through
the talker from position 0 for one slot (on CUDA through a graph per prompt-length bucket), filling
the slot's KV cache, final-norm hidden state and codebook-0 logits. The state is ModelRunner's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.decode_attention import decode_attention
from .fused import decoder_step_triton, finish_layer, qkv, rms_norm
from .host import to_device

# Prompt lengths with a captured prefill graph (rows padded up to the bucket). A CustomVoice
# prompt is ~10 rows + the text's tokens in the non-streaming layout, ~11 in the streaming one.
PREFILL_BUCKETS = (16, 32, 64, 128, 256)


class PromptPrefill:
    """ModelRunner's prefill methods (they use its weights, per-slot state, graph pool and streams)."""

    @torch.inference_mode()
    def embed_prompt(self, text_ids: list[int | None], codec_ids: list[int | None]) -> torch.Tensor:
        """Prompt rows (text id | None, codec id | None) -> [T, H]."""
        x = torch.zeros(len(text_ids), self.cfg.hidden_size, device=self.device, dtype=self.dtype)
        t_rows = [i for i, v in enumerate(text_ids) if v is not None]
        c_rows = [i for i, v in enumerate(codec_ids) if v is not None]
        # One pinned copy of every index (rows and ids of both tracks), split on the device.
        nt, nc = len(t_rows), len(c_rows)
        idx = to_device(t_rows + [text_ids[i] for i in t_rows] + c_rows + [codec_ids[i] for i in c_rows], self.device)
        t_at, t_id, c_at, c_id = idx.split([nt, nt, nc, nc])
        if nt:
            x.index_copy_(0, t_at, self.text_embed(t_id))
        if nc:
            x.index_add_(0, c_at, self.codec_embedding[c_id])
        return x

    def text_embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.text_projection(self.text_embedding[ids])

    @torch.inference_mode()
    def prefill(self, slot: int, x: torch.Tensor) -> None:
        """Run prompt rows x [T, H] for `slot` from position 0; fills its cache, hidden, logits.

        With captured prefill graphs, x is padded with zero rows to the next bucket: causal
        attention keeps the padding out of the real rows, and the K/V it writes past T are
        overwritten by the decode steps before any step reads them."""
        t_len = x.shape[0]
        if t_len >= self.max_context:
            raise ValueError(f"prompt of {t_len} rows exceeds the context of {self.max_context}")
        bucket = next((b for b in sorted(self.prefill_graphs) if b >= t_len), None)
        if bucket is None:  # pinned copies: a pageable one would wait for the steps in flight
            self._prefill(x, to_device([slot], self.device), to_device([t_len - 1], self.device))
            return
        graph, (x_buf, slot_buf, last_buf) = self.prefill_graphs[bucket]
        x_buf[t_len:].zero_()
        x_buf[:t_len].copy_(x)
        slot_buf.fill_(slot)
        last_buf.fill_(t_len - 1)
        graph.replay()

    def _prefill(self, x: torch.Tensor, slot: torch.Tensor, last: torch.Tensor) -> None:
        """x [T, H] rows of one prompt; slot, last: [1] i64 device tensors (graph inputs)."""
        t_len = x.shape[0]
        st = self.talker
        if self.use_triton:
            # The prompt as T decode queries of one slot: row i at position i reads keys 0..i,
            # which is causal attention; 9-10 launches a layer instead of ~20.
            positions = self.prefill_positions[:t_len]
            rows = slot.expand(t_len).contiguous()  # the kernels index rows[n]
            lengths = positions + 1

            def attend(i, q):
                return decode_attention(q, self.k_cache[i], self.v_cache[i], rows, lengths,
                                        version=self.attention_version)

            h = decoder_step_triton(st, x, *self.rope, positions, rows, self.k_cache, self.v_cache, attend)
            out = h.index_select(0, last)  # [1, H], final norm applied
        else:
            cos, sin = (t[:t_len] for t in self.rope)  # [T, D]
            rep = st.num_heads // st.num_kv_heads
            h = x[None]
            for i, layer in enumerate(st.layers):
                q, k, v = qkv(st, layer, h, cos, sin)  # [1, T, heads, D]
                self.k_cache[i, :, :, :t_len].index_copy_(0, slot, k.transpose(1, 2))
                self.v_cache[i, :, :, :t_len].index_copy_(0, slot, v.transpose(1, 2))
                attn = F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(rep, 1),
                    v.transpose(1, 2).repeat_interleave(rep, 1), is_causal=True)  # [1, Hq, T, D]
                h = finish_layer(st, layer, h, attn.transpose(1, 2).flatten(2))
            out = rms_norm(h[0].index_select(0, last), st.norm, st.eps)  # [1, H]
        self.hidden.index_copy_(0, slot, out)
        self.logits.index_copy_(0, slot, F.linear(out, self.codec_head).float())

    @torch.inference_mode()
    def capture_prefill_graphs(self, buckets: tuple[int, ...] = PREFILL_BUCKETS,
                               capture_stream: torch.cuda.Stream | None = None) -> None:
        """One prefill graph per prompt-length bucket; the warm-up and capture write the scratch slot.
        capture_stream: see `capture_graphs`. With the prefill stream, its own capture stream and memory
        pool: its graphs replay beside the frame steps' (one pool assumes graphs replay one at a time)."""
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        pool = self._pool
        if self.prefill_stream is not None:
            capture_stream, pool = self._prefill_capture, torch.cuda.graph_pool_handle()
        i = dict(device=self.device, dtype=torch.long)
        for bucket in (b for b in sorted(buckets, reverse=True) if b < self.max_context):
            inputs = (torch.zeros(bucket, self.cfg.hidden_size, device=self.device, dtype=self.dtype),
                      torch.full((1,), self.scratch, **i), torch.full((1,), bucket - 1, **i))
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._prefill(*inputs)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=capture_stream):
                self._prefill(*inputs)
            self.prefill_graphs[bucket] = (graph, inputs)
        torch.cuda.synchronize()
