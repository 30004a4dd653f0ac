"""Fused weights and the per-step math of the fast path.

At load, each decoder layer's q/k/v projections become one [(Hq + 2 Hkv) D, H] matrix and
gate/up one [2 I, H] matrix: one GEMV instead of three (two) per layer, which matters because
at batch sizes up to dozens every projection is bound by reading its weights.
The math is the reference's (`model/layers.py`); tests check the two agree.

A decode step runs either in plain torch (`decoder_step_torch`, the reference of the fast path)
or through the Triton kernels of `tts_engine/kernels` (`decoder_step_triton`). Both read RoPE from
cos/sin tables built once (`rope_table`) instead of recomputing them in every layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..kernels.backend import PDL_EARLY
from ..kernels.gemv import gemv
from ..kernels.qk_norm_rope import qk_norm_rope
from ..kernels.rms_norm import add_rms_norm, split_k_partials
from ..kernels.rms_norm import rms_norm as rms_norm_kernel
from ..kernels.silu_mul import silu_mul, silu_mul_of_partials
from ..model.layers import DecoderStack


@dataclass
class FusedLayer:
    w_qkv: torch.Tensor  # [(Hq + 2 Hkv) D, H]
    w_o: torch.Tensor  # [H, Hq D]
    w_gate_up: torch.Tensor  # [2 I, H]
    w_down: torch.Tensor  # [H, I]
    ln_in: torch.Tensor  # [H]
    ln_post: torch.Tensor  # [H]
    q_norm: torch.Tensor  # [D]
    k_norm: torch.Tensor  # [D]


@dataclass
class FusedStack:
    layers: list[FusedLayer]
    norm: torch.Tensor
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    inv_freq: torch.Tensor  # [D / 2] fp32

    @classmethod
    def from_stack(cls, stack: DecoderStack) -> FusedStack:
        cfg = stack.cfg
        layers = []
        for layer in stack.layers:
            a, m = layer.self_attn, layer.mlp
            layers.append(FusedLayer(
                w_qkv=torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)).contiguous(),
                w_o=a.o_proj.weight, w_gate_up=torch.cat((m.gate_proj.weight, m.up_proj.weight)).contiguous(),
                w_down=m.down_proj.weight, ln_in=layer.input_layernorm.weight,
                ln_post=layer.post_attention_layernorm.weight, q_norm=a.q_norm.weight, k_norm=a.k_norm.weight))
        device = stack.norm.weight.device
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim))
        return cls(layers, stack.norm.weight, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                   cfg.intermediate_size, cfg.rms_norm_eps, inv_freq)

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rope_table(stack: FusedStack, num_positions: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [P, D] for positions 0 .. P-1, computed as `layers.rope_cos_sin` does (fp32, then cast).
    Built once: a step gathers its rows instead of recomputing them in every layer."""
    positions = torch.arange(num_positions, device=stack.inv_freq.device)
    freqs = positions.float()[:, None] * stack.inv_freq  # [P, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., T, heads, D] with cos/sin [..., T, D]."""
    cos, sin = cos[..., None, :], sin[..., None, :]
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def qkv(stack: FusedStack, layer: FusedLayer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """x [..., T, H], cos/sin [..., T, D] -> q [..., T, Hq, D], k/v [..., T, Hkv, D] (normed, RoPE applied)."""
    h = rms_norm(x, layer.ln_in, stack.eps)
    q, k, v = F.linear(h, layer.w_qkv).split((stack.q_size, stack.kv_size, stack.kv_size), dim=-1)
    d = stack.head_dim
    q = rms_norm(q.unflatten(-1, (stack.num_heads, d)), layer.q_norm, stack.eps)
    k = rms_norm(k.unflatten(-1, (stack.num_kv_heads, d)), layer.k_norm, stack.eps)
    return rope(q, cos, sin), rope(k, cos, sin), v.unflatten(-1, (-1, d))


def finish_layer(stack: FusedStack, layer: FusedLayer, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """Residual + o_proj, then the SwiGLU MLP. attn [..., Hq * D]."""
    x = x + F.linear(attn, layer.w_o)
    gate, up = F.linear(rms_norm(x, layer.ln_post, stack.eps), layer.w_gate_up).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, layer.w_down)


@dataclass(frozen=True)
class SplitK:
    """The cuBLAS steps' products made as this many fp32 split-K partials (kernels/rms_norm.py `split_k_partials`,
    one batched cuBLAS launch each) that the launch after them sums (o's and down's: the norm after them; gate/up's:
    SiLU-mul), in place of cuBLAS' own product; 0: cuBLAS' (at 8-64 rows its down is a split-K product and a reduce
    launch of its own). Each must divide its product's K."""
    o: int = 0
    gate_up: int = 0
    down: int = 0


def _product(x: torch.Tensor, w: torch.Tensor, splits: int) -> torch.Tensor:
    """x @ w.T, or its split-K partials [S, rows, N] fp32 (splits > 0)."""
    return split_k_partials(x, w, splits) if splits else F.linear(x, w)


# (layer index, q [..., T, Hq, D], k/v [..., T, Hkv, D]) -> attention output [..., T, Hq D];
# stores k/v in that layer's cache first.
TorchAttend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# (layer index, q [N, Hq, D]) -> [N, Hq, D]; k/v of the new tokens are already in the cache.
TritonAttend = Callable[[int, torch.Tensor], torch.Tensor]
# (layer index, layer, qkv [N, (Hq + 2 Hkv) D]) -> [N, Hq, D]: the q/k norm, RoPE and the new K/V's store
# done by the attention's own launch (the code predictor's `cp_qk_attention`).
QkvAttend = Callable[[int, FusedLayer, torch.Tensor], torch.Tensor]
# (layer index, layer, qkv [N, (Hq + 2 Hkv) D]) -> o_sum [>= N, H] int64: the attention and its o product in one
# launch, the product summed into o_sum in 2^-32 units (the code predictor's `cp_attention_o`); o_sum is zero
# before and after each layer (the layer's down product zeroes it once read).
AttentionO = Callable[[int, FusedLayer, torch.Tensor], torch.Tensor]


def _attention(stack: FusedStack, i: int, layer: FusedLayer, qkv_out: torch.Tensor, rope_cos, rope_sin, positions,
               rows, k_caches, v_caches, attend: TritonAttend, qkv_attend: QkvAttend | None,
               pdl: bool = False) -> torch.Tensor:
    """qkv_out [N, (Hq + 2 Hkv) D] -> attention output [N, Hq D], in one launch with qkv_attend, else two."""
    if qkv_attend is not None:
        return qkv_attend(i, layer, qkv_out).flatten(1)
    q = qk_norm_rope(qkv_out, layer.q_norm, layer.k_norm, rope_cos, rope_sin, positions, rows, k_caches[i],
                     v_caches[i], stack.eps, stack.num_heads, stack.num_kv_heads, pdl=pdl)  # [N, Hq, D]
    return attend(i, q).flatten(1)


def decoder_step_torch(stack: FusedStack, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       attend: TorchAttend) -> torch.Tensor:
    """The reference step: x [..., T, H] -> final-norm hidden [..., T, H]."""
    for i, layer in enumerate(stack.layers):
        q, k, v = qkv(stack, layer, x, cos, sin)
        x = finish_layer(stack, layer, x, attend(i, q, k, v).flatten(-2))
    return rms_norm(x, stack.norm, stack.eps)


def decoder_step_triton(stack: FusedStack, x: torch.Tensor, rope_cos: torch.Tensor, rope_sin: torch.Tensor,
                        positions: torch.Tensor, rows: torch.Tensor, k_caches: torch.Tensor, v_caches: torch.Tensor,
                        attend: TritonAttend, qkv_attend: QkvAttend | None = None,
                        first_qkv: torch.Tensor | None = None, split_k: SplitK = SplitK(),
                        rows_product=None, pdl: bool = False, early: frozenset[str] = frozenset()) -> torch.Tensor:
    """The same step through the Triton kernels, 9 launches a layer (10 with split attention, 8 with
    qkv_attend): the four cuBLAS products (qkv, o, gate/up, down), two norms, q/k norm + RoPE + cache
    store, attention, SiLU-mul. x [N, H] new tokens at `positions` [N] of cache rows `rows` [N];
    rope_cos/sin [P, D] tables; k_caches/v_caches [layers, R, Hkv, L, D] -> final-norm hidden [N, H].
    first_qkv [N, (Hq + 2 Hkv) D]: the first layer's qkv product of x, already made (the code predictor's
    table, gathered by its draw): that layer's input norm and product are not launched. split_k: the o, gate/up and
    down products as split-K partials summed by the launch after them (`SplitK`). rows_product: a stand-in for the
    products it takes (`.takes(x, w, silu_mul=, partials=)`: kernels/cp_gemv.py's rows on the tensor cores), o's and
    down's as split-K partials of its own where it makes them, gate/up with SwiGLU in its epilogue (no SiLU-mul
    launch). pdl: the norms and rows_product's products launched with programmatic dependent launch (`attend` and
    `qkv_attend` say for themselves; cuBLAS' products are launched as they are); early: those of them ("norm", "o",
    "gate_up", "down"; with pdl) that let the next launch start before their own wait (`backend.PDL_EARLY`).

    The residual add after each MLP is fused with the next layer's input norm (the last with the
    final norm), the one after attention with the post-attention norm."""
    eps = stack.eps
    res, delta = x, None

    def trigger(name: str) -> bool | int:
        return PDL_EARLY if pdl and name in early else pdl

    def tensor_cores(x: torch.Tensor, w: torch.Tensor, name: str, **kw) -> torch.Tensor | None:  # None: not taken
        if rows_product is None or not rows_product.takes(x, w, **kw):
            return None
        return rows_product(x, w, **kw, pdl=trigger(name))

    for i, layer in enumerate(stack.layers):
        if i == 0 and first_qkv is not None:
            qkv_out = first_qkv
        else:
            if delta is None:
                h = rms_norm_kernel(res, layer.ln_in, eps, pdl=trigger("norm"))
            else:
                res, h = add_rms_norm(res, delta, layer.ln_in, eps, pdl=trigger("norm"))
            qkv_out = tensor_cores(h, layer.w_qkv, "qkv")
            qkv_out = F.linear(h, layer.w_qkv) if qkv_out is None else qkv_out
        attn = _attention(stack, i, layer, qkv_out, rope_cos, rope_sin, positions, rows, k_caches, v_caches, attend,
                          qkv_attend, pdl=pdl)
        o = tensor_cores(attn, layer.w_o, "o", partials=True)
        o = _product(attn, layer.w_o, split_k.o) if o is None else o
        res, h = add_rms_norm(res, o, layer.ln_post, eps, pdl=trigger("norm"))
        act = tensor_cores(h, layer.w_gate_up, "gate_up", silu_mul=True)
        if act is None:
            gate_up = _product(h, layer.w_gate_up, split_k.gate_up)
            act = silu_mul_of_partials(gate_up, h.dtype) if split_k.gate_up else silu_mul(gate_up)
        delta = tensor_cores(act, layer.w_down, "down", partials=True)
        delta = _product(act, layer.w_down, split_k.down) if delta is None else delta
    return add_rms_norm(res, delta, stack.norm, eps, pdl=trigger("norm"))[1]


def decoder_step_gemv(stack: FusedStack, x: torch.Tensor, rope_cos: torch.Tensor, rope_sin: torch.Tensor,
                      positions: torch.Tensor, rows: torch.Tensor, k_caches: torch.Tensor, v_caches: torch.Tensor,
                      attend: TritonAttend, launch: dict[str, dict], pdl: bool = False,
                      qkv_attend: QkvAttend | None = None, first_qkv: torch.Tensor | None = None,
                      attention_o: AttentionO | None = None, product: Callable | None = None) -> torch.Tensor:
    """`decoder_step_triton` for a few tokens (as many as the launch's kernel holds), 6 launches a
    layer (5 with qkv_attend): the products are kernels/gemv.py's, with each RMSNorm in the prologue of
    the product after it and the residual adds in the epilogues (qkv, q/k norm + RoPE + cache store, attention, o +
    residual, gate/up + SwiGLU, down + residual). launch: each product's launch configuration ("qkv",
    "o", "gate_up", "down"); pdl: q/k norm + RoPE launched with PDL too (the GEMVs' launch says for
    them, `attend` for itself). Returns the residual stream [N, H] *before* the final norm: the
    caller's next product takes it in its prologue (`gemv(x, w, norm=(stack.norm, stack.eps))`).
    first_qkv: as `decoder_step_triton`'s (the first layer's qkv product not launched). attention_o: the
    attention and o in one launch (4 launches a layer), whose fixed-point sum gate/up adds to its input and down
    to its residual (gemv's x_delta, residual_delta), as the reference adds o's product to the residual.
    product: what computes the products with `gemv`'s signature (kernels/cp_gemv.py's one-row kernel); None: `gemv`."""
    eps, res = stack.eps, x
    product = product or gemv
    for i, layer in enumerate(stack.layers):
        qkv_out = first_qkv if i == 0 and first_qkv is not None else \
            product(res, layer.w_qkv, norm=(layer.ln_in, eps), **launch["qkv"])
        if attention_o is not None:
            o_sum = attention_o(i, layer, qkv_out)
            act = product(res, layer.w_gate_up, norm=(layer.ln_post, eps), silu_mul=True, x_delta=o_sum,
                          **launch["gate_up"])
            res = product(act, layer.w_down, residual=res, residual_delta=o_sum, **launch["down"])
            continue
        attn = _attention(stack, i, layer, qkv_out, rope_cos, rope_sin, positions, rows, k_caches, v_caches, attend,
                          qkv_attend, pdl=pdl)
        res = product(attn, layer.w_o, residual=res, **launch["o"])
        act = product(res, layer.w_gate_up, norm=(layer.ln_post, eps), silu_mul=True, **launch["gate_up"])
        res = product(act, layer.w_down, residual=res, **launch["down"])
    return res
