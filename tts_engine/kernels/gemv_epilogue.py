"""What every GEMV kernel of kernels/gemv.py and kernels/gemv_rows.py does after its products (and how it reads x
when a fixed-point delta rides along): the rounding of the reference's residual add or SwiGLU, and the store.

    delta_x      x's columns, with gemv's x_delta (int64 multiples of 2^-32) added as the reference adds a product
    residual_of  a block of the residual, with gemv's residual_delta added so
    epilogue     fp32 products -> rounded, + residual or SwiGLU, stored (residual_delta zeroed once read)
"""

from __future__ import annotations

from .backend import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import from_fixed, round_to

    @triton.jit
    def _plus_fixed(ptr, d_ptr, rows, cols, ok, s, s_d, ADD: tl.constexpr):
        """A block [rows, cols] of ptr's rows in fp32; ADD: plus d_ptr's int64 multiples of 2^-32 (rounded to ptr's
        dtype), the sum rounded, as the reference's residual add `x + F.linear(...)` rounds."""
        v = tl.load(ptr + rows[:, None] * s + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        if ADD:
            dt = ptr.dtype.element_ty
            ds = tl.load(d_ptr + rows[:, None] * s_d + cols[None, :], mask=ok, other=0)
            v = round_to(v + from_fixed(ds, dt), dt)
        return v

    @triton.jit
    def delta_x(x_ptr, d_ptr, rows, ks, r_ok, k_ok, s_x, s_d, DELTA: tl.constexpr):
        """Columns ks of x's rows [M_P, BLOCK_K] in fp32; DELTA 1: x + d (`_plus_fixed`)."""
        return _plus_fixed(x_ptr, d_ptr, rows, ks, r_ok[:, None] & k_ok[None, :], s_x, s_d, DELTA == 1)

    @triton.jit
    def residual_of(r_ptr, d_ptr, rows, feats, ok, s_r, s_d, DELTA: tl.constexpr):
        """The residual [M_P, BLOCK_N] in fp32; DELTA 2: r + d (`_plus_fixed`)."""
        return _plus_fixed(r_ptr, d_ptr, rows, feats, ok, s_r, s_d, DELTA == 2)

    @triton.jit
    def epilogue(acc, acc_up, r_ptr, y_ptr, rows, feats, r_ok, f_ok, s_r, s_y, MODE: tl.constexpr, res,
                  RES_LOADED: tl.constexpr, d_ptr, s_d, DELTA: tl.constexpr):
        """fp32 products [M_P, BLOCK_N] -> rounded, the residual added or SwiGLU applied, stored.
        RES_LOADED: res holds the residual already (fp32), else it is read here. DELTA 2: the residual is
        r + d (`residual_of`), and this program's d (all of it read by now: the launch's wait has passed) is
        zeroed for the next sum into it."""
        dt = y_ptr.dtype.element_ty
        out = round_to(acc, dt)
        ok = r_ok[:, None] & f_ok[None, :]
        if MODE == 1:
            if not RES_LOADED:
                res = residual_of(r_ptr, d_ptr, rows, feats, ok, s_r, s_d, DELTA)
            out = round_to(res + out, dt)
            if DELTA == 2:
                tl.store(d_ptr + rows[:, None] * s_d + feats[None, :], tl.zeros((1, 1), tl.int64), mask=ok)
        if MODE == 2:
            act = round_to(out / (1.0 + tl.exp(-out)), dt)
            out = round_to(act * round_to(acc_up, dt), dt)
        tl.store(y_ptr + rows[:, None] * s_y + feats[None, :], out.to(dt), mask=ok)
