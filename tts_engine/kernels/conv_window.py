"""A streaming causal conv's input window in one launch, where torch takes two or three copies.

    history  [B, C, n]   the conv's last n = (k - 1) * dilation inputs (any strides: rows of the codec's
                         state, so the batch stride is not C * n); updated in place to the last n
                         positions of cat(history, x) (it keeps its address: CUDA graphs)
    x        [B, C, t]   the new inputs (any strides)

    conv_columns(history, x, k, dilation) -> [B, C * k, t]: the dense conv's GEMM operand (the codec's
        `CausalConv1d._columns` of the concatenation): row c * k + j, column tau = tap j of channel c for
        output tau, which reads position tau + j * dilation of cat(history, x)
    conv_history_cat(history, x, channels_last, snake) -> [B, C, n + t]: cat(history, x), the input of a conv
        left to cuDNN, laid out channels-first or channels-last; with `snake` x through SnakeBeta first

Values are copied, never converted: the outputs are bit-identical to the references (`*_ref`, the codec's
torch path), in any dtype (history and x share one). SnakeBeta is computed as kernels/snake.py's kernel
computes it (bit for bit that kernel's output; the torch reference rounds after each op).

Grid (position tiles, channel blocks, B). Only a tile-0 program touches the history: it reads its
(row, channel block) of the old history, writes the outputs that read it, then, after a block barrier,
stores the shifted history. When t < n the new history is old positions t.. followed by x, an in-place
shift: every old value is loaded by this one program before any is overwritten. Programs of later
tiles read x only: the columns' tile is at least min(t, n) positions long, so every column that reads
the history (tau < n) is in tile 0; the concatenation's history part is written by tile 0 alone.
"""

from __future__ import annotations

import torch

from .backend import HAVE_TRITON, next_pow2
from .snake import as_channels_last, snake_beta_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import round_to

# A program's [channels, positions] tile: (most elements, most channels, fewest positions). On the GPU
# small ones, many programs; Triton's interpreter costs a few ms of Python a program whatever its size (and
# the codec's tests stream thousands of positions through every conv), so there few, large ones.
_GPU_TILES = (2048, 64, 128)
_INTERPRETER_TILES = (1 << 18, 1 << 12, 128)


def _blocks(device: torch.device, c: int, t: int, n: int, min_t: int = 1,
            channels_first: bool = True) -> tuple[int, int, int]:
    """(BLOCK_C, BLOCK_T, BLOCK_N): the contiguous axis first (positions channels-first, channels channels-last),
    at least min_t positions."""
    most, most_c, fewest_t = _GPU_TILES if device.type == "cuda" else _INTERPRETER_TILES
    block_n, c_pow2 = next_pow2(n), next_pow2(c)
    if not channels_first:
        block_c = min(c_pow2, max(1, most // block_n), 2 * most_c if device.type == "cuda" else c_pow2)
        return block_c, min(next_pow2(max(t, 1)), max(min_t, most // block_c)), block_n
    block_t = min(next_pow2(max(t, 1)), max(fewest_t, min_t, most // min(c_pow2, most_c)))
    block_c = min(c_pow2, most_c, max(1, most // block_t), max(1, most // block_n))
    return block_c, block_t, block_n


def window_columns(xcat: torch.Tensor, kernel_size: int, dilation: int) -> torch.Tensor:
    """xcat [B, C, n + t] (history first) -> [B, C * k, t]: row c * k + j = tap j of channel c, as a conv
    weight's `view(C_out, C_in * k)` orders its columns; output tau reads position tau + j * dilation. One copy."""
    b, c, length = xcat.shape
    n = (kernel_size - 1) * dilation
    taps = xcat.unfold(-1, n + 1, 1)[..., ::dilation]  # [B, C, t, k]: each output's receptive field
    return taps.transpose(2, 3).reshape(b, c * kernel_size, length - n)


def conv_history_cat_ref(history: torch.Tensor, x: torch.Tensor, channels_last: bool = False,
                         snake: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The codec's torch path: cat(history, x), and the history shifted in place (state buffers keep
    their addresses: CUDA graphs); `channels_last`: the concatenation laid out so; `snake` (alpha, beta):
    x through SnakeBeta first."""
    if snake is not None:
        x = snake_beta_ref(x, *snake)
    xcat = torch.cat([history, x], dim=-1)  # [B, C, n + t]
    if channels_last:
        xcat = as_channels_last(xcat)
    history.copy_(xcat[..., -history.shape[-1]:])
    return xcat


def conv_columns_ref(history: torch.Tensor, x: torch.Tensor, kernel_size: int, dilation: int) -> torch.Tensor:
    """The codec's torch path: concatenate, shift the history, lay the input windows side by side."""
    return window_columns(conv_history_cat_ref(history, x), kernel_size, dilation)


if HAVE_TRITON:

    @triton.jit
    def _snake(v, c, C, alpha_ptr, beta_ptr, SNAKE: tl.constexpr):
        """Where SNAKE, SnakeBeta of loaded inputs v [BLOCK_C, *] of channels c, as kernels/snake.py computes it."""
        if SNAKE:
            freq = tl.exp(tl.load(alpha_ptr + c, mask=c < C, other=0.0).to(tl.float32))
            inv_mag = 1.0 / (tl.exp(tl.load(beta_ptr + c, mask=c < C, other=0.0).to(tl.float32)) + 1e-9)
            vf = v.to(tl.float32)
            s = tl.sin(vf * freq)
            v = round_to(vf + inv_mag * (s * s), v.dtype).to(v.dtype)
        return v

    @triton.jit
    def _shift_history(hist, xb, cat, C, T, N, c0, s_hc, s_hn, s_xc, s_xt, s_cc, s_ci, alpha_ptr, beta_ptr,
                       BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, CAT: tl.constexpr, SNAKE: tl.constexpr):
        """One (row, channel block): [cat[:, :n] = old history,] then history = the last N positions of
        cat(history, x). All loads come before the barrier, all history stores after it."""
        c = c0 + tl.arange(0, BLOCK_C)[:, None]
        i = tl.arange(0, BLOCK_N)[None, :]
        ok = (c < C) & (i < N)
        if CAT:
            tl.store(cat + c * s_cc + i * s_ci, tl.load(hist + c * s_hc + i * s_hn, mask=ok), mask=ok)
        src = i + T  # new history position i is position i + t of cat(history, x)
        old = src < N
        new = tl.where(old, tl.load(hist + c * s_hc + src * s_hn, mask=ok & old),
                       _snake(tl.load(xb + c * s_xc + (src - N) * s_xt, mask=ok & (src >= N)), c, C,
                              alpha_ptr, beta_ptr, SNAKE))
        tl.debug_barrier()  # every old value this program needs is read before any is overwritten
        tl.store(hist + c * s_hc + i * s_hn, new, mask=ok)

    @triton.jit
    def _conv_columns_kernel(hist_ptr, x_ptr, cols_ptr, C, T, N, DIL, s_hb, s_hc, s_hn, s_xb, s_xc, s_xt,
                             K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr,
                             BLOCK_N: tl.constexpr):
        tile = tl.program_id(0)
        c0 = tl.program_id(1) * BLOCK_C
        b = tl.program_id(2).to(tl.int64)
        hist = hist_ptr + b * s_hb
        xb = x_ptr + b * s_xb
        c = c0 + tl.arange(0, BLOCK_C)[:, None]
        tau = tile * BLOCK_T + tl.arange(0, BLOCK_T)[None, :]
        ok = (c < C) & (tau < T)
        out = cols_ptr + (b * C + c) * K * T + tau  # row c * K + j, column tau
        for j in tl.static_range(K):
            p = tau + j * DIL  # position in cat(history, x); < N only in tile 0 (BLOCK_T >= min(T, N))
            old = p < N
            v = tl.where(old, tl.load(hist + c * s_hc + p * s_hn, mask=ok & old),
                         tl.load(xb + c * s_xc + (p - N) * s_xt, mask=ok & (p >= N)))
            tl.store(out + j * T, v, mask=ok)
        if tile == 0:
            _shift_history(hist, xb, cols_ptr, C, T, N, c0, s_hc, s_hn, s_xc, s_xt, 0, 0, hist, hist,
                           BLOCK_C, BLOCK_N, False, False)

    @triton.jit
    def _conv_history_cat_kernel(hist_ptr, x_ptr, cat_ptr, C, T, N, s_hb, s_hc, s_hn, s_xb, s_xc, s_xt,
                                 s_cb, s_cc, s_ci, alpha_ptr, beta_ptr, SNAKE: tl.constexpr,
                                 BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr):
        tile = tl.program_id(0)
        c0 = tl.program_id(1) * BLOCK_C
        b = tl.program_id(2).to(tl.int64)
        xb = x_ptr + b * s_xb
        cat = cat_ptr + b * s_cb
        c = c0 + tl.arange(0, BLOCK_C)[:, None]
        i = tile * BLOCK_T + tl.arange(0, BLOCK_T)[None, :]
        ok = (c < C) & (i < T)
        x = _snake(tl.load(xb + c * s_xc + i * s_xt, mask=ok), c, C, alpha_ptr, beta_ptr, SNAKE)
        tl.store(cat + c * s_cc + (N + i) * s_ci, x, mask=ok)
        if tile == 0:
            _shift_history(hist_ptr + b * s_hb, xb, cat, C, T, N, c0, s_hc, s_hn, s_xc, s_xt, s_cc, s_ci,
                           alpha_ptr, beta_ptr, BLOCK_C, BLOCK_N, True, SNAKE)


def _check(history: torch.Tensor, x: torch.Tensor, what: str) -> None:
    if history.dim() != 3 or x.dim() != 3 or history.shape[:2] != x.shape[:2]:
        raise ValueError(f"{what}: history [B, C, n] and x [B, C, t] must share B and C, "
                         f"got {tuple(history.shape)} and {tuple(x.shape)}")
    if history.shape[2] == 0:
        raise ValueError(f"{what}: the history holds no position (a conv without state needs no window)")
    if history.dtype != x.dtype or history.device != x.device:
        raise ValueError(f"{what}: history and x must share dtype and device, got {history.dtype} on "
                         f"{history.device} and {x.dtype} on {x.device}")


def _strides(history: torch.Tensor, x: torch.Tensor) -> tuple[int, ...]:
    return (*history.stride(), *x.stride())


def conv_columns(history: torch.Tensor, x: torch.Tensor, kernel_size: int, dilation: int) -> torch.Tensor:
    """-> [B, C * k, t] contiguous, and history shifted in place: `conv_columns_ref` in one launch."""
    if not HAVE_TRITON:
        return conv_columns_ref(history, x, kernel_size, dilation)
    _check(history, x, "conv_columns")
    if kernel_size < 2 or dilation < 1 or history.shape[2] != (kernel_size - 1) * dilation:
        raise ValueError(f"conv_columns: the history must hold (kernel_size - 1) * dilation positions, got "
                         f"{history.shape[2]} for kernel_size {kernel_size}, dilation {dilation}")
    b, c, t = x.shape
    n = history.shape[2]
    cols = torch.empty(b, c * kernel_size, t, device=x.device, dtype=x.dtype)
    if b == 0 or c == 0:
        return cols
    # At least min(t, n) positions a tile: the columns that read the history are all tile 0's.
    block_c, block_t, block_n = _blocks(x.device, c, t, n, min_t=next_pow2(n))
    grid = (max(1, triton.cdiv(t, block_t)), triton.cdiv(c, block_c), b)  # one tile 0 even at t = 0
    _conv_columns_kernel[grid](history, x, cols, c, t, n, dilation, *_strides(history, x), K=kernel_size,
                               BLOCK_C=block_c, BLOCK_T=block_t, BLOCK_N=block_n, num_warps=4)
    return cols


def conv_history_cat(history: torch.Tensor, x: torch.Tensor, channels_last: bool = False,
                     snake: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """-> cat(history, x) [B, C, n + t], and history shifted in place: `conv_history_cat_ref` in one launch.
    The concatenation is contiguous, or with `channels_last` its transpose(1, 2) is. `snake` (alpha, beta):
    x through SnakeBeta on its way in (a residual unit's act1: one pass over x fewer), as kernels/snake.py's
    kernel computes it."""
    if not HAVE_TRITON:
        return conv_history_cat_ref(history, x, channels_last, snake)
    _check(history, x, "conv_history_cat")
    b, c, t = x.shape
    n = history.shape[2]
    if channels_last:
        xcat = torch.empty(b, n + t, c, device=x.device, dtype=x.dtype).transpose(1, 2)
    else:
        xcat = torch.empty(b, c, n + t, device=x.device, dtype=x.dtype)
    if b == 0 or c == 0:
        return xcat
    # Channels-last, a program's tile is few positions of many channels (the contiguous axis)
    block_c, block_t, block_n = _blocks(x.device, c, t, n, channels_first=not channels_last)
    grid = (max(1, triton.cdiv(t, block_t)), triton.cdiv(c, block_c), b)
    alpha, beta = (history, history) if snake is None else snake
    _conv_history_cat_kernel[grid](history, x, xcat, c, t, n, *_strides(history, x), *xcat.stride(), alpha, beta,
                                   SNAKE=snake is not None, BLOCK_C=block_c, BLOCK_T=block_t, BLOCK_N=block_n,
                                   num_warps=4)
    return xcat
