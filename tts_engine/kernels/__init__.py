"""Triton kernels of the fast path, one file each with its torch reference (`*_ref`) and shapes in
its docstring: rms_norm (+ fused residual add), qk_norm_rope (+ KV-cache store), silu_mul,
decode_attention (talker, split over keys), cp_attention (code predictor's 16-position cache).
`backend` says how they run on CPU (Triton's interpreter)."""
