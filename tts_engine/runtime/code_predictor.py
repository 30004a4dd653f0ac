"""CodePredictorRunner: the code predictor's fast path, codebooks 1..15 of a frame.

State (rows = batch positions of the current frame step, not slots: the code predictor starts
afresh every frame, so it needs no per-stream state):
  k, v        [layers, max_batch, Hkv, 16, D]   its 16-position KV cache ([h, C(c0)] + 14 fed codebooks)
  inputs      proj(C(c0)) [3072, h] and proj(E_j[c]) [15, 2048, h]: embeddings pre-projected through
              small_to_mtp_projection at load, so a step's input is one gather
`predict(hidden, c0, frames, rows)` runs the 2-position prefill and the 14 one-position steps with a
draw after each, entirely on the device (captured inside the runner's frame-step graph).
With `use_triton` the layers run through the Triton kernels and each draw is the fused sampling
kernel (which also gathers the next input row): on an sm90 GPU with nvcc the CUDA one (`cuda_draw`, kernels/cp_draw.py),
else Triton's (kernels/sample.py); otherwise plain torch and the torch sampler.
With `use_triton`, a pass over at most `gemv_rows` token rows (b for a one-position step, 2 b for the
prefill) runs its products through the fused small-batch GEMV (`fused.decoder_step_gemv`: 5 launches
a layer instead of 9, the final norm in the head's prologue), with `pdl` (the default on sm90+) the
smallest of them with programmatic dependent launch; larger ones through cuBLAS, their down and o products as
fp32 split-K partials that the norm after them sums (`split_k`: no reduce launch of cuBLAS'). Every pass (with
`fused_attention`, the default) takes its q/k norm + RoPE + K/V store inside the attention kernel
(`cp_qk_attention`); on the GEMV passes (with `attention_o`, the default) that attention and the o product are one
launch (`cp_attention_o`: 4 a layer), and passes 1-14 gather their first layer's qkv product from a table made at
load (`qkv_table`, the default). On an sm90 GPU with nvcc the products of the one-row PDL passes and the heads run
on the tensor cores as a CUDA kernel (`cuda_gemv`, kernels/cp_gemv.py), and with it the products and heads of the
passes past the GEMV ones of up to 32 rows (`gemv_kernel_rows`; o and down as its own split-K partials), every launch
of those passes under PDL (`rows_pdl`), all but qkv letting the next start before their own wait (`rows_early`, with
`early_trigger`). Every choice comes from one `FastPathOptions`. The launch tables are runtime/cp_launch.py's,
looked up in this module's globals when a runner is built or a pass runs (a test may set its own here).
"""

from __future__ import annotations

import copy
import logging

import torch
import torch.nn.functional as F

from ..kernels.cp_attention import cp_attention, cp_attention_ref, cp_qk_attention
from ..kernels.cp_attention_o import cp_attention_o
from ..kernels.cp_draw import CpDrawKernel
from ..kernels.cp_draw import unsupported as cp_draw_unsupported
from ..kernels.cp_gemv import CpGemv
from ..kernels.cp_gemv import unsupported as cp_gemv_unsupported
from ..kernels.gemv import gemv
from ..kernels.sample import sample_rows
from ..model.qwen3_tts import Talker
from .cp_launch import (
    ATTENTION_O_LAUNCH,
    EARLY_TRIGGER_LAUNCHES,
    GEMV_KERNEL_ROWS,
    GEMV_LAUNCH,
    PDL_LAUNCH,
    PDL_ROWS,
    ROWS_EARLY_LAUNCHES,
    attention_warps,
)
from .cp_routing import PassRouting
from .fused import (
    FusedStack,
    SplitK,
    decoder_step_gemv,
    decoder_step_torch,
    decoder_step_triton,
    rms_norm,
    rope_table,
)
from .options import FastPathOptions, split_k_for
from .sampler import GENERAL, SamplerVariant, SamplingRows, WarpRows, counter_uniform, sample_codebook

log = logging.getLogger(__name__)

CP_POSITIONS = 16  # [h, C(c0)] + 14 fed codebooks


def _cuda_kernel(build, why: str | None, required: bool, what: str, instead: str):
    """build() where nothing says why it cannot run (`why` None) and it builds; else RuntimeError (required) or None,
    logged with what runs `instead`."""
    if why is None:
        try:
            return build()
        except RuntimeError as e:
            why = str(e)
    if required:
        raise RuntimeError(f"{what} cannot run: {why}")
    log.info("code predictor: %s (%s: %s)", instead, what, why)
    return None


class CodePredictorRunner(PassRouting):
    def __init__(self, talker: Talker, codec_embedding: torch.Tensor, max_batch: int, *, use_triton: bool,
                 options: FastPathOptions | None = None, pdl: bool = False):
        """options: its cp_* fields (the splits also checked against the model's shapes here). pdl: whether its PDL
        passes launch with PDL, `options.cp_pdl` resolved for the device (ModelRunner)."""
        opts = (options or FastPathOptions()).validate()
        cp = talker.code_predictor
        self.stack = c = FusedStack.from_stack(cp.model)
        self.use_triton = use_triton
        self.gemv_rows = opts.cp_gemv_rows if use_triton else 0
        self.gemv_launch = GEMV_LAUNCH
        self.pdl = pdl and self.gemv_rows > 0
        fused_attention = opts.cp_fused_attention
        # Read at every pass (a benchmark may time the alternatives): the fused attention in passes
        # without PDL and in PDL passes (FastPathOptions.cp_fused_attention, both), its warps a program
        # (None: `attention_warps`).
        self.fused_attention = self.fused_attention_pdl = fused_attention
        self.fused_attention_warps: int | None = None
        self.vocab_size = talker.cfg.code_predictor.vocab_size
        p = cp.lm_head[0].weight
        self.device, self.dtype = p.device, p.dtype
        self.feedback = torch.stack([t.weight for t in cp.model.codec_embedding])  # [15, 2048, H]
        self.heads = torch.stack([h.weight for h in cp.lm_head])  # [15, 2048, h]
        self.proj = cp.small_to_mtp_projection
        with torch.no_grad():
            self.in_c0 = self.proj(codec_embedding)  # [3072, h]
            self.inputs = self.proj(self.feedback)  # [15, 2048, h]
        f = dict(device=self.device, dtype=self.dtype)
        self.k = torch.zeros(len(c.layers), max_batch, c.num_kv_heads, CP_POSITIONS, c.head_dim, **f)
        self.v = torch.zeros_like(self.k)
        self.rope = rope_table(c, CP_POSITIONS, self.dtype)  # cos, sin [16, D]
        # Static row/position indices: a graph bakes each step's start position in.
        i = dict(device=self.device, dtype=torch.long)
        self.rows = torch.arange(max_batch, **i)
        self.pos = torch.arange(CP_POSITIONS, **i)[:, None].expand(-1, max_batch).contiguous()  # [16, B]: row p = p
        self.prefill_rows = torch.arange(max_batch, **i).repeat_interleave(2)  # tokens (row, 0), (row, 1), ...
        self.prefill_pos = torch.arange(2, **i).repeat(max_batch)
        self.codebook_ids = torch.arange(16, **i)
        # Passes 1-14's first-layer qkv products, one row a (pass, code), or None: made by every pass
        # (`first_layer_qkv_table`; read at every pass, so a benchmark may set or clear it between graphs).
        self.qkv_table = self.first_layer_qkv_table() if opts.cp_qkv_table and use_triton else None
        # GEMV passes with the fused attention run it and o as one launch (`cp_attention_o`), its o product summed
        # into o_sum (zero between layers); read at every pass, like the table.
        self.attention_o = opts.cp_attention_o and self.gemv_rows > 0
        self.attention_o_launch = ATTENTION_O_LAUNCH
        self.o_sum = torch.zeros(max(1, self.gemv_rows), c.layers[0].w_o.shape[0],
                                 dtype=torch.int64, device=self.device)
        # The cuBLAS passes' products as fp32 split-K partials summed by the launch after them (`fused.SplitK`: the
        # down and o products by default, cp_down_splits and cp_o_splits). Read at every pass.
        split_k = split_k_for(c, opts.cp_down_splits, opts.cp_o_splits, ("cp_down_splits", "cp_o_splits"),
                              self.device.type)
        self.split_k = split_k if use_triton else SplitK()
        # The PDL passes' launches (of EARLY_TRIGGER_LAUNCHES) that let the next one start before their own wait, so
        # that two launches ahead load their weights at once: all of them with `early_trigger`. Read at every pass.
        self.early_trigger: tuple[str, ...] = EARLY_TRIGGER_LAUNCHES if opts.cp_early_trigger else ()
        # The draws of codebooks 1-15 as a CUDA kernel (kernels/cp_draw.py), or None: the Triton draw (`sample_rows`).
        # Read at every draw.
        self.draw_kernel: CpDrawKernel | None = None
        if opts.cp_cuda_draw is not False:
            self.draw_kernel = self.cuda_draw_kernel(required=bool(opts.cp_cuda_draw))
        # The PDL passes' one-row products as a CUDA kernel on the tensor cores (kernels/cp_gemv.py), or None: the
        # Triton GEMVs. Read at every pass.
        self.gemv_kernel: CpGemv | None = None
        # ... and the products of the passes past the GEMV ones of up to this many token rows (`cp_gemm_rows`: plain,
        # o's and down's as split-K partials, gate/up with SwiGLU, the heads; 0: none; at most kernels/cp_gemv.py's
        # MAX_ROWS, 64), with `rows_pdl` every launch of those passes under PDL. Read at every pass.
        self.gemv_kernel_rows = GEMV_KERNEL_ROWS
        self.rows_pdl = opts.cp_rows_pdl
        # ... and which of their launches let the next one start before their own wait (cp_launch.ROWS_EARLY_LAUNCHES
        # says which may; all of them with `early_trigger`). Read at every pass.
        self.rows_early: tuple[str, ...] = ROWS_EARLY_LAUNCHES if opts.cp_early_trigger else ()
        if opts.cp_cuda_gemv is not False:
            self.gemv_kernel = self.cuda_gemv_kernel(required=bool(opts.cp_cuda_gemv))

    def cuda_draw_kernel(self, required: bool = True, macros: tuple[str, ...] = ()) -> CpDrawKernel | None:
        """The CUDA draw for this runner's codebooks (built with kernels/cuda/cp_draw.cu's `macros`); where it
        cannot run, RuntimeError (required) or None (logged)."""
        why = cp_draw_unsupported(self.device, self.vocab_size) if self.use_triton else "the torch path"
        if why is None and self.dtype != torch.bfloat16:
            why = f"it takes bf16 logits, the model is {self.dtype}"
        return _cuda_kernel(lambda: CpDrawKernel(self.vocab_size, self.device, macros), why, required,
                            "the CUDA code-predictor draw", "Triton draws")

    def cuda_gemv_kernel(self, required: bool = True, macros: tuple[str, ...] = ()) -> CpGemv | None:
        """The tensor-core products, one row and rows (built with kernels/cuda/cp_gemv.cu's `macros`); where they
        cannot run, RuntimeError (required) or None (logged)."""
        why = cp_gemv_unsupported(self.device) if self.use_triton else "the torch path"
        if why is None and not (self.pdl and self.dtype == torch.bfloat16):
            why = "it takes the PDL passes and bf16 weights"
        return _cuda_kernel(lambda: CpGemv(self.device, macros=macros), why, required,
                            "the CUDA code-predictor products", "Triton GEMVs")

    def first_layer_qkv_table(self) -> torch.Tensor:
        """-> [14, 2048, (Hq + 2 Hkv) D]: row [j, c] is the first layer's qkv product of pass j + 1's input when
        it follows code c (`inputs[j][c]`, a function of (j, c) alone), in the reference's arithmetic (the
        input norm rounded as `fused.rms_norm` does, one product in the model's dtype; cuBLAS on a GPU), as
        `decoder_step_triton` computes it. 235 MB at bf16 for both model sizes; the same for random and real
        weights. The draw that picks c gathers the row (`sample_rows` gather2), so a pass launches no qkv
        product for its first layer."""
        layer = self.stack.layers[0]
        with torch.no_grad():
            return torch.stack([F.linear(rms_norm(x, layer.ln_in, self.stack.eps), layer.w_qkv)
                                for x in self.inputs[:14]]).contiguous()

    def with_own_cache(self, max_batch: int) -> CodePredictorRunner:
        """A runner over the same weights and tables with a KV cache of its own for `max_batch` rows
        (the one state a pass writes), whose graphs may replay beside this one's. Its row and position
        index tables are this runner's, read as their first rows."""
        layers, rows, *rest = self.k.shape
        if max_batch > rows:
            raise ValueError(f"max_batch {max_batch} exceeds this runner's {rows}")
        other = copy.copy(self)
        other.k = self.k.new_zeros(layers, max_batch, *rest)
        other.v = torch.zeros_like(other.k)
        other.o_sum = torch.zeros_like(self.o_sum)
        return other

    def layers(self, h: torch.Tensor, b: int, start: int,
               first_qkv: torch.Tensor | None = None) -> tuple[torch.Tensor, bool]:
        """New positions start .. start + n - 1 of rows 0..b-1; h [b, n, h] -> (hidden of the last
        position [b, h], normed): final-norm hidden, or on the GEMV path the residual stream before
        the final norm (normed False), which `logits` applies. first_qkv [b, (Hq + 2 Hkv) D]: the first
        layer's qkv product of h (n 1, Triton paths), gathered from `qkv_table` by the draw."""
        c = self.stack
        n = h.shape[1]
        if self.use_triton:
            if n == 2:
                rows, positions = self.prefill_rows[:2 * b], self.prefill_pos[:2 * b]
            elif n == 1:
                rows, positions = self.rows[:b], self.pos[start, :b]
            else:
                raise ValueError(f"the code predictor takes 1 or 2 new positions, got {n}")

            pdl = self.pass_pdl(b * n)
            gemv_pass = b * n <= self.gemv_rows
            attention_pdl = pdl if gemv_pass else self.rows_trigger("attention", pdl)

            def attend(i, q):  # q [b n, Hq, D]
                return cp_attention(q.view(b, n, *q.shape[1:]), self.k[i], self.v[i], start,
                                    pdl=attention_pdl).flatten(0, 1)

            def qkv_attend(i, layer, qkv):  # qkv [b n, (Hq + 2 Hkv) D] -> [b n, Hq, D]
                return cp_qk_attention(qkv, layer.q_norm, layer.k_norm, *self.rope, self.k[i], self.v[i], start, n,
                                       c.eps, c.num_heads, c.num_kv_heads, pdl=attention_pdl,
                                       num_warps=self.fused_attention_warps or attention_warps(b * n, pdl and
                                                                                              b * n <= PDL_ROWS))

            def attention_o(i, layer, qkv):  # qkv [b n, (Hq + 2 Hkv) D] -> o_sum [>= b n, H]
                cp_attention_o(qkv, layer.q_norm, layer.k_norm, *self.rope, self.k[i], self.v[i], layer.w_o,
                               self.o_sum, start, n, c.eps, c.num_heads, c.num_kv_heads,
                               pdl=self.trigger("attention_o", pdl), **self.attention_o_launch[n])
                return self.o_sum

            fuse = self.fused_attention_pdl if pdl else self.fused_attention
            fused = dict(qkv_attend=qkv_attend if fuse else None, first_qkv=first_qkv)
            args = (c, h.flatten(0, 1), *self.rope, positions, rows, self.k, self.v, attend)
            if gemv_pass:
                if fuse and self.attention_o:
                    fused["attention_o"] = attention_o
                out = decoder_step_gemv(*args, self.launch(b * n), pdl=pdl, **fused, product=self.product(b * n))
                return out.view(b, n, -1)[:, -1], False
            out = decoder_step_triton(*args, **fused, split_k=self.split_k, rows_product=self.rows_product(b * n),
                                      pdl=pdl, early=frozenset(self.rows_early))
            return out.view(b, n, -1)[:, -1], True  # [b n, h] -> last position

        def attend_torch(i, q, k, v):  # q [b, n, Hq, D], k/v [b, n, Hkv, D]
            self.k[i, :b, :, start:start + n] = k.transpose(1, 2)
            self.v[i, :b, :, start:start + n] = v.transpose(1, 2)
            return cp_attention_ref(q, self.k[i], self.v[i], start)

        cos, sin = (t[start:start + n] for t in self.rope)  # [n, D]: static slices
        return decoder_step_torch(c, h, cos, sin, attend_torch)[:, -1], True

    def launch(self, rows: int) -> dict[str, dict]:
        """The GEMVs' launch configurations for a GEMV pass of `rows` token rows (at most `gemv_rows`)."""
        if not self.uses_pdl(rows):
            return self.gemv_launch
        return {name: {**cfg, "pdl": self.trigger(name, True)} for name, cfg in PDL_LAUNCH.items()}

    def logits(self, out: torch.Tensor, normed: bool, j: int) -> torch.Tensor:
        """`layers`' output [b, h] -> codebook j + 1's logits [b, 2048]."""
        if normed:
            rows = self.rows_product(out.shape[0])
            if rows is not None and rows.takes(out, self.heads[j]):
                return rows(out, self.heads[j], pdl=self.rows_trigger("head", self.pass_pdl(out.shape[0])))
            return F.linear(out, self.heads[j])
        product = self.product(out.shape[0]) or gemv
        return product(out, self.heads[j], norm=(self.stack.norm, self.stack.eps), **self.launch(out.shape[0])["head"])

    def predict(self, hidden, c0, frames, rows: SamplingRows, u: torch.Tensor | None = None,
                variant: SamplerVariant = GENERAL) -> torch.Tensor:
        """hidden [B, H], c0 [B] -> codebooks 1..15 [B, 15]. u: the frame's uniforms [B, 16] if drawn
        (torch sampler only; the fused kernel draws its own)."""
        if self.use_triton:
            return self._predict_fused(hidden, c0, frames, rows)
        b = hidden.shape[0]
        if u is None:
            u = counter_uniform(rows.seed[:, None], frames[:, None], self.codebook_ids)
        warp_rows = WarpRows.of(rows.sub_temperature, rows.sub_top_k, rows.sub_top_p, self.vocab_size, variant)
        out, _ = self.layers(torch.stack((self.proj(hidden), self.in_c0[c0]), dim=1), b, 0)  # [B, 2, h] in
        codes = []
        for j in range(15):
            code = sample_codebook(F.linear(out, self.heads[j]).float(), frames, j + 1, rows, u=u[:, j + 1],
                                   variant=variant, warp_rows=warp_rows)
            codes.append(code)
            if j < 14:
                out, _ = self.layers(self.inputs[j][code][:, None], b, j + 2)
        return torch.stack(codes, dim=1)

    def _predict_fused(self, hidden, c0, frames, rows: SamplingRows) -> torch.Tensor:
        """`predict` with the fused sampler: each draw also gathers the next input row."""
        b = hidden.shape[0]
        codes = torch.empty(b, 15, dtype=torch.long, device=self.device)
        x = torch.empty(b, 1, self.inputs.shape[-1], dtype=self.dtype, device=self.device)
        table = self.qkv_table
        first_qkv = None if table is None else torch.empty(b, table.shape[-1], dtype=self.dtype, device=self.device)
        out, normed = self.layers(torch.stack((self.proj(hidden), self.in_c0[c0]), dim=1), b, 0)
        settings = dict(do_sample=rows.sub_do_sample, temperature=rows.sub_temperature, top_k=rows.sub_top_k,
                        top_p=rows.sub_top_p, seed=rows.seed, frame=frames)
        pdl = self.pass_pdl(b)
        logits = self.logits(out, normed, 0)
        for j in range(15):
            last = j == 14
            self._draw(logits, codes[:, j], codebook=j + 1,
                       gather=None if last else (self.inputs[j], x[:, 0]),
                       gather2=None if last or table is None else (table[j], first_qkv),
                       pdl=self.draw_pdl(b, pdl, last),
                       **settings)
            if last:
                break
            out, normed = self.layers(x, b, j + 2, first_qkv)
            logits = self.logits(out, normed, j + 1)
        return codes

    def _draw(self, logits: torch.Tensor, out: torch.Tensor, **kw) -> None:
        """A codebook's draw: the CUDA kernel where it takes these logits, else `sample_rows`."""
        kernel = self.draw_kernel
        if kernel is not None and kernel.takes(logits):
            kernel.draw(logits, out, **kw)
        else:
            sample_rows(logits, out, **kw)
