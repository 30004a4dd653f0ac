"""A prompt's prefill, a part of ModelRunner: its rows embedded (text and codec tracks), run through
the talker from position 0 for one slot, filling the slot's KV cache, final-norm hidden state and
codebook-0 logits. The state is ModelRunner's.

On CUDA `prefill_prompt` is one graph per prompt-length bucket that embeds the ids too: the host writes
the ids, slot and last row into a pinned staging buffer and queues one copy and one replay. Embedding
outside the graph takes ~0.2 ms of host time and ~10 small launches before the prefill can start (the
largest host gaps before an idle request's first audio).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.decode_attention import decode_attention
from .fused import decoder_step_triton, finish_layer, qkv, rms_norm
from .host import to_device
from .progress import Phase

# Prompt lengths with a captured prefill graph (rows padded up to the bucket). A CustomVoice
# prompt is ~10 rows + the text's tokens in the non-streaming layout, ~11 in the streaming one.
PREFILL_BUCKETS = (16, 32, 64, 128, 256)
PROMPT_RING = 4  # prompts whose pinned staging may still be waiting for its copy to the device
NO_ID = -1  # a prompt row with no id on that track (text or codec)


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

    def embed_ids(self, text_ids: torch.Tensor, codec_ids: torch.Tensor) -> torch.Tensor:
        """`embed_prompt` on the device, graph-safe: ids [T] i64 per track, NO_ID where a row has none
        -> [T, H]. Every row goes through both tracks and the missing ones are zeroed, so a row of
        two NO_IDs (the padding of a bucket) is a zero row; the sum rounds as embed_prompt's does."""
        t_ok, c_ok = (text_ids != NO_ID)[:, None], (codec_ids != NO_ID)[:, None]
        text = torch.where(t_ok, self.text_embed(text_ids.clamp(min=0)), 0)
        return text + torch.where(c_ok, self.codec_embedding[codec_ids.clamp(min=0)], 0)

    @torch.inference_mode()
    def prefill_prompt(self, slot: int, text_ids: list[int | None], codec_ids: list[int | None]) -> None:
        """Embed a prompt's rows (text id | None, codec id | None) and prefill `slot` with them: on CUDA
        with captured graphs one pinned copy and one replay of the bucket's graph (rows padded with
        zero rows: causal attention keeps the padding out of the real rows, and the K/V it writes past
        T are overwritten by the decode steps before any step reads them); otherwise eagerly."""
        t_len = len(text_ids)
        if len(codec_ids) != t_len:
            raise ValueError(f"a prompt's tracks must have one id (or None) a row, got {t_len} text and "
                             f"{len(codec_ids)} codec rows")
        if t_len >= self.max_context:
            raise ValueError(f"prompt of {t_len} rows exceeds the context of {self.max_context}")
        bucket = next((b for b in sorted(self.prefill_graphs) if b >= t_len), None)
        if bucket is None:
            self.prefill(slot, self.embed_prompt(text_ids, codec_ids))
            return
        graph, ids = self.prefill_graphs[bucket]
        ring = self._prompt_ring = (self._prompt_ring + 1) % PROMPT_RING
        self._prompt_copied[ring].synchronize()  # its last copy has left the buffer (it has, PROMPT_RING ago)
        staged = self._prompt_staging[ring]  # pinned [2 max_bucket + 2]
        row = staged.numpy()
        row[: 2 * bucket] = NO_ID
        row[:t_len] = [NO_ID if v is None else v for v in text_ids]
        row[bucket: bucket + t_len] = [NO_ID if v is None else v for v in codec_ids]
        row[2 * bucket: 2 * bucket + 2] = slot, t_len - 1
        ids.copy_(staged[: 2 * bucket + 2], non_blocking=True)  # pinned: no wait for the steps in flight
        self._prompt_copied[ring].record()
        graph.replay()

    @torch.inference_mode()
    def prefill(self, slot: int, x: torch.Tensor) -> None:
        """Run prompt rows x [T, H] for `slot` from position 0, eagerly; fills its cache, hidden, logits.
        (The engine's prompts go through `prefill_prompt`, which has graphs.)"""
        t_len = x.shape[0]
        if t_len >= self.max_context:
            raise ValueError(f"prompt of {t_len} rows exceeds the context of {self.max_context}")
        # pinned copies: a pageable one would wait for the steps in flight
        self._prefill(x, to_device([slot], self.device), to_device([t_len - 1], self.device))

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
                return decode_attention(q, self.k_cache[i], self.v_cache[i], rows, lengths)

            args = (st, x, *self.rope, positions, rows, self.k_cache, self.v_cache, attend)
            out = decoder_step_triton(*args, split_k=self.prefill_split_k).index_select(0, last)  # [1, H], normed
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
    def capture_prefill_graphs(self, buckets: tuple[int, ...] = PREFILL_BUCKETS) -> None:
        """One prefill graph per prompt-length bucket, the prompt's embedding included (`prefill_prompt`);
        the warm-up and capture write the scratch slot. With the prefill stream, its own capture stream
        and memory pool: its graphs replay beside the frame steps' (one pool assumes graphs replay one at
        a time), and graphs captured on one stream share its cuBLAS workspace."""
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        capture_stream, pool = None, self._pool
        if self.prefill_stream is not None:
            capture_stream, pool = self._prefill_capture, torch.cuda.graph_pool_handle()
        buckets = tuple(b for b in sorted(buckets, reverse=True) if b < self.max_context)
        width = 2 * max(buckets, default=0) + 2
        self._prompt_staging = [torch.zeros(width, dtype=torch.long).pin_memory() for _ in range(PROMPT_RING)]
        self._prompt_copied = [torch.cuda.Event() for _ in range(PROMPT_RING)]
        for e in self._prompt_copied:
            e.record()
        self._prompt_ring = 0
        with Phase("prefill graphs", len(buckets)) as phase:
            for bucket in buckets:
                # text ids [bucket], codec ids [bucket], slot, last row: one copy from the pinned staging
                ids = torch.full((2 * bucket + 2,), NO_ID, device=self.device, dtype=torch.long)
                ids[-2:] = torch.tensor([self.scratch, bucket - 1])

                def run(ids=ids, bucket=bucket):
                    text, codec, slot, last = ids.split([bucket, bucket, 1, 1])
                    self._prefill(self.embed_ids(text, codec), slot, last)

                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(2):
                        run()
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=capture_stream):
                    run()
                self.prefill_graphs[bucket] = (graph, ids)
                phase.step(f"{bucket} rows")
            torch.cuda.synchronize()
