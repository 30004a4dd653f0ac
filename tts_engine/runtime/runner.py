"""ModelRunner: owns every tensor of the fast path.

State lives in per-slot device buffers, so a step can run any subset of requests:
  k_cache, v_cache   [layers, slots + 1, Hkv, max_context, D]   talker KV (last slot = scratch)
  hidden             [slots + 1, H]       final-norm talker state that produced the next c0
  logits             [slots + 1, 3072]    fp32 codebook-0 logits waiting to be sampled
  seen               [slots + 1, 3072]    codebook-0 ids generated so far (repetition penalty)
  rows               per-slot sampling settings (SamplingRows)

`prefill_prompt(slot, text_ids, codec_ids)` fills a slot from its prompt (on CUDA through a graph per
prompt-length bucket that embeds the ids too, rows zero-padded; prefill.py).
`frame_step_async(slots, frames, positions, step_text)` produces one frame for each given slot
entirely on the device: sample c0, run the 15 code-predictor steps
(`code_predictor.CodePredictorRunner`; the codes half), feed the frame back through the talker
for one position (the talker half). On CUDA each half is a captured graph per (batch bucket,
sampler variant), inputs staged through pinned memory, the codes copied to a pinned ring between
the halves; padded rows point at the scratch slot.

`use_triton` runs decode steps and prefills through the Triton kernels (`fused.decoder_step_triton`;
steps of at most `FastPathOptions.talker_gemv_rows` rows on the fused GEMVs, `fused.decoder_step_gemv`)
and samples with the fused kernel (`kernels/sample.py`: same distribution as the torch sampler, any
settings, so one variant); without it they run in plain torch (`fused.decoder_step_torch`, SDPA
prefill, the torch sampler), the reference the fast path is tested against. On that path the
sampler variant is picked per step from the rows' settings: the fast one (top-k by `torch.topk`,
no top-p sort) when it serves every row, else the general one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..kernels.backend import pdl_supported, runs_on
from ..kernels.decode_attention import decode_attention, decode_attention_ref
from ..kernels.rms_norm import rms_norm as rms_norm_kernel
from ..kernels.sample import sample_rows
from ..kernels.talker_attention import decode_qk_attention
from ..model.qwen3_tts import Qwen3TTS
from ..sampling import SamplingParams, suppress_mask
from .code_predictor import CodePredictorRunner
from .fused import (
    FusedStack,
    SplitK,
    decoder_step_gemv,
    decoder_step_torch,
    decoder_step_triton,
    rope_table,
)
from .host import to_device
from .options import FastPathOptions, split_k_for
from .prefill import PromptPrefill
from .progress import Phase
from .sampler import (
    FAST,
    GENERAL,
    SamplerVariant,
    SamplingRows,
    counter_uniform,
    sample_codebook0,
)
from .talker_launch import TALKER_GEMV_LAUNCH, TALKER_PDL_LAUNCH, TALKER_QK_ATTENTION_LAUNCH

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
# The CUDA priority (lower = higher) of the prefill stream (ModelRunner's prefill_stream): its kernels
# go first when SMs free up.
HIGH_PRIORITY = -1
STEP_RING = 4  # frame steps that may be queued on the device at once (pinned staging buffers)


@dataclass
class StepCodes:
    """One frame step's codes [B, 16]: `device` (valid until the next step), `host_buffer` (pinned,
    filled when `ready` fires, None = already there; reused STEP_RING steps later, so read it
    before queuing that many more steps)."""

    device: torch.Tensor
    host_buffer: torch.Tensor
    ready: torch.cuda.Event | None

    def host(self) -> torch.Tensor:
        """Waits for the copy (not for the rest of the step) -> codes on the CPU."""
        if self.ready is not None:
            self.ready.synchronize()
        return self.host_buffer


class ModelRunner(PromptPrefill):
    def __init__(self, model: Qwen3TTS, *, max_slots: int = 64, max_context: int = 2048,
                 use_triton: bool | None = None, use_graphs: bool | None = None,
                 buckets: tuple[int, ...] = BUCKETS, options: FastPathOptions | None = None,
                 prefill_stream: bool = False):
        """prefill_stream (CUDA): prefills are queued on a high-priority CUDA stream of their own
        (`self.prefill_stream`, None when off), captured on their own capture stream and memory pool,
        so that a new stream's prefill runs beside the frame steps in flight instead of after them.
        The caller orders it: the prefill stream waits for the slot's previous work, and the frame
        step that reads the slot's hidden state and logits waits for the prefill (StepExecutor)."""
        talker = model.talker
        self.cfg = talker.cfg
        p = talker.codec_head.weight
        self.device, self.dtype = p.device, p.dtype
        on_cuda = self.device.type == "cuda"
        self.use_triton = (on_cuda and runs_on(self.device)) if use_triton is None else use_triton
        if self.use_triton and not runs_on(self.device):
            raise ValueError(f"use_triton: the Triton kernels cannot run on {self.device} here (no triton, or "
                             "a CPU without TRITON_INTERPRET=1 set before triton was imported)")
        self.use_graphs = on_cuda if use_graphs is None else use_graphs
        if prefill_stream and not on_cuda:
            raise ValueError(f"prefill_stream: a CUDA stream of its own needs a CUDA device, not {self.device}")
        self.prefill_stream = torch.cuda.Stream(self.device, priority=HIGH_PRIORITY) if prefill_stream else None
        self._prefill_capture = torch.cuda.Stream(self.device) if prefill_stream else None
        self.options = opts = (options or FastPathOptions()).validate()
        pdl_here = self.use_triton and pdl_supported(self.device)
        if opts.cp_pdl and not pdl_here:
            raise ValueError(f"cp_pdl: programmatic dependent launch needs the Triton path on an sm90+ GPU, "
                             f"not {self.device}")
        cp_pdl = pdl_here if opts.cp_pdl is None else opts.cp_pdl
        if opts.talker_pdl and not pdl_here:
            raise ValueError(f"talker_pdl: programmatic dependent launch needs the Triton path on an sm90+ GPU, "
                             f"not {self.device}")
        # Read at every step (the stage bench switches them to time one path against another).
        self.talker_gemv_rows = opts.talker_gemv_rows if self.use_triton else 0
        self.talker_launch = TALKER_GEMV_LAUNCH
        self.talker_pdl = pdl_here if opts.talker_pdl is None else opts.talker_pdl  # steps of <= talker_gemv_rows rows
        self.talker_pdl_launch = TALKER_PDL_LAUNCH
        # In those GEMV steps: the q/k norm + RoPE + K/V store and the attention over the whole context in
        # one launch a layer, one program a kv head (kernels/talker_attention.py; no merge, no q/k norm
        # launch), for the steps whose rows all attend to at most `qk_attention_context` positions (graphs: a
        # feed graph of their own); `talker_qk_attention` says whether the step being issued does.
        self.qk_attention_context = opts.talker_qk_attention_context if self.use_triton else 0
        self.talker_qk_attention = False
        self.talker_qk_attention_launch = TALKER_QK_ATTENTION_LAUNCH
        # The Triton path samples with one fused kernel per codebook (kernels/sample.py: same
        # distribution as the torch sampler, every setting served), so it needs one variant.
        self.fused_sampler = self.use_triton
        self.variants = (GENERAL,) if self.fused_sampler else (FAST, GENERAL)
        self.max_slots, self.max_context = max_slots, max_context
        self.scratch = max_slots
        # The largest bucket holds every slot: past the list's last one (a server with more slots than it), the
        # slot count is a bucket of its own, so no batch the scheduler may form is refused.
        self.buckets = (*(b for b in buckets if b < max_slots), max_slots)

        self.talker = FusedStack.from_stack(talker.model)
        # Steps past the GEMV ones: products as fp32 split-K partials summed by the launch after them (`fused.SplitK`:
        # the down and o products by default, talker_down_splits and talker_o_splits).
        split_k = split_k_for(self.talker, opts.talker_down_splits, opts.talker_o_splits,
                              ("talker_down_splits", "talker_o_splits"), self.device.type)
        self.talker_split_k = split_k if self.use_triton else SplitK()
        # The prefill's cuBLAS products as split-K partials too (`fused.SplitK`), read when a prefill runs or is
        # captured: the talker steps' splits, ~0.1 ms off a 12-row prompt's prefill.
        self.prefill_split_k = self.talker_split_k
        self.codec_head = talker.codec_head.weight
        self.codec_embedding = talker.model.codec_embedding.weight  # [3072, H]
        self.text_embedding = talker.model.text_embedding.weight
        self.text_projection = talker.text_projection
        self.code_predictor = CodePredictorRunner(
            talker, self.codec_embedding, max(self.buckets), use_triton=self.use_triton, options=opts, pdl=cp_pdl)

        t, n = self.talker, max_slots + 1
        f = dict(device=self.device, dtype=self.dtype)
        self.k_cache = torch.zeros(len(t.layers), n, t.num_kv_heads, max_context, t.head_dim, **f)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.hidden = torch.zeros(n, self.cfg.hidden_size, **f)
        self.logits = torch.zeros(n, self.cfg.vocab_size, device=self.device)
        self.seen = torch.zeros(n, self.cfg.vocab_size, dtype=torch.bool, device=self.device)
        self.eos_allowed = torch.ones(n, dtype=torch.bool, device=self.device)
        self._true = torch.ones((), dtype=torch.bool, device=self.device)
        self.rows = SamplingRows.empty(n, self.device)
        self.rope = rope_table(t, max_context, self.dtype)  # cos, sin [max_context, D]: rows = positions
        i = dict(device=self.device, dtype=torch.long)
        self.codebook_ids = torch.arange(16, **i)
        self.prefill_positions = torch.arange(max_context, **i)
        self.suppress = suppress_mask(self.cfg.vocab_size, self.cfg.codec_eos_token_id).to(self.device)
        self.slot_fast = [True] * n  # host copy: does the FAST sampler variant serve this slot's settings?
        self._ring_pos = 0
        self.prefill_graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # bucket -> graph, its ids
        self._pool = None
        # (bucket, variant) -> (codes graph, talker graph, inputs [4, bucket], codes out [bucket, 16])
        self.graphs: dict[tuple[int, SamplerVariant],
                          tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        # (bucket, variant) -> the talker half with the fused attention, for steps of short contexts
        self.short_feed_graphs: dict[tuple[int, SamplerVariant], torch.cuda.CUDAGraph] = {}

    # -- slots ---------------------------------------------------------------------------------
    def start_slot(self, slot: int, params: SamplingParams, seed: int, eos_allowed: bool) -> None:
        self.rows.set_row(slot, params, seed)
        self.slot_fast[slot] = FAST.serves(params, self.cfg.vocab_size, self.cfg.code_predictor.vocab_size)
        self.seen[slot].zero_()  # fill_, not `[slot] = v`: no blocking host copy (SamplingRows.set_row)
        self.eos_allowed[slot].fill_(eos_allowed)

    # -- one frame -------------------------------------------------------------------------------
    def qk_attention_serves(self, rows: int, max_position: int) -> bool:
        """Does a step of `rows` rows, the furthest writing `max_position`, run kernels/talker_attention.py?"""
        return rows <= self.talker_gemv_rows and max_position < self.qk_attention_context

    def _talker_decode(self, slots, x, positions):
        """x [B, H] at positions [B] -> final-norm hidden [B, H]; writes each slot's K/V."""
        st = self.talker
        lengths = positions + 1
        if self.use_triton:
            gemv_step = x.shape[0] <= self.talker_gemv_rows
            pdl = gemv_step and self.talker_pdl

            def attend(i, q):
                return decode_attention(q, self.k_cache[i], self.v_cache[i], slots, lengths, pdl=pdl)

            def qkv_attend(i, layer, qkv):
                return decode_qk_attention(qkv, layer.q_norm, layer.k_norm, *self.rope, positions, slots,
                                           self.k_cache[i], self.v_cache[i], st.eps, st.num_heads, st.num_kv_heads,
                                           pdl=pdl, **self.talker_qk_attention_launch)

            args = (st, x, *self.rope, positions, slots, self.k_cache, self.v_cache, attend)
            if gemv_step:  # the residual stream before the final norm
                launch = self.talker_pdl_launch if pdl else self.talker_launch
                fused = qkv_attend if self.talker_qk_attention else None
                return rms_norm_kernel(decoder_step_gemv(*args, launch, pdl=pdl, qkv_attend=fused), st.norm, st.eps,
                                       pdl=pdl)
            return decoder_step_triton(*args, split_k=self.talker_split_k)

        def attend_torch(i, q, k, v):  # q [B, 1, Hq, D], k/v [B, 1, Hkv, D]
            self.k_cache[i][slots, :, positions] = k[:, 0]
            self.v_cache[i][slots, :, positions] = v[:, 0]
            return decode_attention_ref(q[:, 0], self.k_cache[i], self.v_cache[i], slots, lengths)[:, None]

        cos, sin = (t[positions][:, None] for t in self.rope)  # [B, 1, D], once per step
        return decoder_step_torch(st, x[:, None], cos, sin, attend_torch)[:, 0]

    def _sample_c0(self, slots, frames, rows: SamplingRows, u, variant: SamplerVariant) -> torch.Tensor:
        if not self.fused_sampler:
            c0 = sample_codebook0(self.logits[slots], self.seen[slots], frames, rows, self.cfg.codec_eos_token_id,
                                  self.suppress, self.eos_allowed[slots], u=u[:, 0], variant=variant)
            self.seen.index_put_((slots, c0), self._true)  # a device scalar: no host copy in a graph
            return c0
        c0 = torch.empty(slots.shape[0], dtype=torch.long, device=self.device)
        sample_rows(self.logits[slots], c0, do_sample=rows.do_sample, temperature=rows.temperature,
                    top_k=rows.top_k, top_p=rows.top_p, seed=rows.seed, frame=frames, codebook=0,
                    codebook0=dict(penalty=rows.repetition_penalty, min_new=rows.min_new_tokens,
                                   eos_ok=self.eos_allowed[slots], slots=slots, seen=self.seen,
                                   suppress=self.suppress, eos_id=self.cfg.codec_eos_token_id))
        return c0

    def _frame_codes(self, slots, frames, variant: SamplerVariant = GENERAL) -> torch.Tensor:
        """First half of a frame step: sample c0 from the slots' logits, run the 15 code-predictor
        steps -> codes [B, 16]. The frame's audio needs only this half."""
        rows = self.rows.gather(slots)
        u = None
        if not self.fused_sampler:  # [B, 16]: all codebooks at once
            u = counter_uniform(rows.seed[:, None], frames[:, None], self.codebook_ids)
        c0 = self._sample_c0(slots, frames, rows, u, variant)
        rest = self.code_predictor.predict(self.hidden[slots], c0, frames, rows, u, variant)
        return torch.cat((c0[:, None], rest), dim=1)

    def _frame_feed(self, slots, positions, step_text, codes) -> None:
        """Second half: the frame's codes (+ the step's text id) through the talker at `positions`
        -> the slots' next hidden state and codebook-0 logits."""
        c0, rest = codes[:, 0], codes[:, 1:]
        feedback = self.codec_embedding[c0] + self.code_predictor.feedback[self.codebook_ids[:15], rest].sum(1)
        hidden = self._talker_decode(slots, feedback + self.text_embed(step_text), positions)
        self.hidden[slots] = hidden
        self.logits[slots] = F.linear(hidden, self.codec_head).float()

    def _frame_step(self, slots, frames, positions, step_text, variant: SamplerVariant = GENERAL,
                    after_codes: Callable[[torch.Tensor], None] | None = None) -> torch.Tensor:
        codes = self._frame_codes(slots, frames, variant)
        if after_codes is not None:
            after_codes(codes)
        self._frame_feed(slots, positions, step_text, codes)
        return codes

    @torch.inference_mode()
    def frame_step(self, slots: list[int], frames: list[int], positions: list[int],
                   step_text: list[int]) -> torch.Tensor:
        """One frame for each slot -> codes [B, 16] (device tensor; EOS rows have c0 == EOS; with
        graphs a view of a static buffer that the next step overwrites).

        frames[i]: index of the frame being produced for slots[i]; positions[i]: the talker
        position its feedback is written at; step_text[i]: text-track id added to that step."""
        return self.frame_step_async(slots, frames, positions, step_text).device

    @torch.inference_mode()
    def frame_step_async(self, slots: list[int], frames: list[int], positions: list[int],
                         step_text: list[int], after_codes: Callable[[torch.Tensor], None] | None = None) -> StepCodes:
        """`frame_step` without waiting: returns as soon as the step is queued on the device. The
        codes are copied to pinned host memory right after the code predictor, before the talker
        half runs, so `StepCodes.host()` is ready ~a talker step before the step ends.

        after_codes(codes [B, 16] on the device): called between the two halves, so that work queued
        there (the codec chunks holding this step's frames) runs before the talker half, not after."""
        b = len(slots)
        if b > max(self.buckets):
            raise ValueError(f"batch of {b} exceeds the largest bucket {max(self.buckets)}")
        variant = FAST if not self.fused_sampler and all(self.slot_fast[s] for s in slots) else GENERAL
        self.talker_qk_attention = self.qk_attention_serves(b, max(positions))
        if not (self.use_graphs and self.graphs):
            t = lambda v: to_device(v, self.device)  # noqa: E731
            codes = self._frame_step(t(slots), t(frames), t(positions), t(step_text), variant, after_codes)
            if self.device.type != "cuda":
                return StepCodes(codes, codes, None)
            ready = torch.cuda.Event()
            host = codes.to("cpu", non_blocking=True)  # pinned (caching host allocator): no sync
            ready.record()
            return StepCodes(codes, host, ready)
        bucket = next(x for x in self.buckets if x >= b)
        codes_graph, feed_graph, inputs, out = self.graphs[(bucket, variant)]
        ring = self._ring_next()
        staging = self._staging[ring][: 4 * bucket].view(4, bucket)  # contiguous: one pinned DMA
        host = self._codes_host[ring]
        pad = bucket - b
        for row, (vals, fill) in enumerate(zip((slots, frames, positions, step_text), (self.scratch, 0, 0, 0))):
            staging[row] = torch.tensor(vals + [fill] * pad)
        inputs.copy_(staging, non_blocking=True)  # pinned: no stream sync
        codes_graph.replay()
        host[:b].copy_(out[:b], non_blocking=True)
        ready = self._ring_events[ring]
        ready.record()
        if after_codes is not None:
            after_codes(out[:b])
        short_feed = self.short_feed_graphs.get((bucket, variant)) if self.talker_qk_attention else None
        (short_feed or feed_graph).replay()
        return StepCodes(out[:b], host[:b], ready)

    def _ring_next(self) -> int:
        """Next pinned staging slot; waits only if the step that used it RING steps ago is unfinished."""
        self._ring_pos = (self._ring_pos + 1) % len(self._staging)
        self._ring_events[self._ring_pos].synchronize()
        return self._ring_pos

    @torch.inference_mode()
    def capture_graphs(self) -> None:
        """Capture two graphs per (bucket, sampler variant), largest first, sharing one memory pool:
        the codes half and the talker half of a frame step."""
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        pool = self._pool = torch.cuda.graph_pool_handle()
        # the split attention's graphs whatever step ran last (an eager step sets the flag for its positions)
        self.talker_qk_attention, self.short_feed_graphs = False, {}
        bmax = max(self.buckets)
        self._staging = [torch.zeros(4 * bmax, dtype=torch.long).pin_memory() for _ in range(STEP_RING)]
        self._codes_host = [torch.zeros(bmax, 16, dtype=torch.long).pin_memory() for _ in range(STEP_RING)]
        self._ring_events = [torch.cuda.Event() for _ in range(STEP_RING)]
        for e in self._ring_events:
            e.record()
        combos = [(b, v) for b in sorted(self.buckets, reverse=True) for v in self.variants]
        # The first steps also build the Triton and CUDA kernels (at their first launch): a cold start's minute.
        with Phase("talker graphs", len(combos)) as phase:
            for bucket, variant in combos:
                # slots, frames, positions, text
                inputs = torch.zeros(4, bucket, dtype=torch.long, device=self.device)
                inputs[0] = self.scratch
                inputs[3] = self.cfg.code_predictor.vocab_size
                slots, frames, positions, text = inputs
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(2):
                        self._frame_step(slots, frames, positions, text, variant)
                torch.cuda.current_stream().wait_stream(stream)
                codes_graph, feed_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
                with torch.cuda.graph(codes_graph, pool=pool):
                    out = self._frame_codes(slots, frames, variant)
                with torch.cuda.graph(feed_graph, pool=pool):
                    self._frame_feed(slots, positions, text, out)
                self.graphs[(bucket, variant)] = (codes_graph, feed_graph, inputs, out)
                if bucket <= self.talker_gemv_rows and self.qk_attention_context:
                    self.talker_qk_attention = True
                    try:
                        stream.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(stream):  # compiled and warmed before its capture
                            self._frame_feed(slots, positions, text, out)
                        torch.cuda.current_stream().wait_stream(stream)
                        short_feed = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(short_feed, pool=pool):
                            self._frame_feed(slots, positions, text, out)
                        self.short_feed_graphs[(bucket, variant)] = short_feed
                    finally:
                        self.talker_qk_attention = False
                phase.step(f"bucket {bucket}, {'general' if variant == GENERAL else 'fast'} sampler")
            torch.cuda.synchronize()
        self.capture_prefill_graphs()
