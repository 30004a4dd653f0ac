"""Triton kernels of the fast path, one file each with its torch reference (`*_ref`) and shapes in
its docstring. The decoder steps: rms_norm (+ fused residual add), qk_norm_rope (+ KV-cache store),
silu_mul, gemv (small-batch products with norm prologues and residual / SwiGLU epilogues),
decode_attention (talker, split over keys), cp_attention (code predictor's 16-position cache), sample
(the fused draw). The codec: snake (SnakeBeta), codec_rope_kv (the window transformer's RoPE and K/V
window), conv_window (a streaming conv's input window and history). `backend` says how they run on CPU
(Triton's interpreter)."""
