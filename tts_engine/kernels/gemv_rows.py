"""The whole-row GEMV's two variants for rows that are long or many (kernels/gemv.py dispatches to them):

    _gemv_row_slices_kernel   each row held as 2-3 power-of-two slices (gemv `row_chunks`), not padded to the next
                              power of two
    _gemv_row_stream_kernel   a program streams several blocks of rows in turn (gemv `row_blocks`), the next
                              block's weights loading while the last one's are summed

and the row-slice helpers they share. Same arguments, rounding and epilogue as `gemv._gemv_rows_kernel` (no
fixed-point deltas); the talker's batch-1 launches use the streamed one (talker_launch.TALKER_PDL_LAUNCH).
"""

from __future__ import annotations

from .backend import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, round_to
    from .gemv_epilogue import epilogue

    @triton.jit
    def _gemv_row_slices_kernel(x_ptr, w_ptr, r_ptr, ln_ptr, y_ptr, m, n_out, k, s_x, s_w, s_r, s_y, eps,
                                MODE: tl.constexpr, NORM: tl.constexpr, M_P: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr, CHUNKS: tl.constexpr, PDL: tl.constexpr,
                                RES_EARLY: tl.constexpr):
        """`_gemv_rows_kernel` with each row held as CHUNKS (2-3) power-of-two slices of BLOCK_K >= K / CHUNKS,
        so that a row of 3 * 2^n columns is not padded to 4 * 2^n (the talker's down, 6,144 wide: a quarter of
        the one-slice kernel's registers hold masked zeros). A kernel of its own so that the one-slice
        kernel stays as it was; in the launch sweeps it tied or lost, so no table uses it."""
        feats = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        rows = tl.arange(0, M_P)
        r_ok = rows < m
        # constants, safe before the wait
        w0, w1, w2, u0, u1, u2, res = _row_block(w_ptr, r_ptr, feats, rows, r_ok, k, n_out, s_w, s_r, MODE,
                                                 RES_EARLY, M_P, BLOCK_N, BLOCK_K, CHUNKS)
        ln0, ln1, ln2 = _norm_slices(ln_ptr, k, NORM, BLOCK_K, CHUNKS)
        pdl_start(PDL)
        x0, x1, x2 = _x_slices(x_ptr, rows, r_ok, s_x, k, eps, ln0, ln1, ln2, NORM, BLOCK_K, CHUNKS)
        acc = _rows_dot(x0, x1, x2, w0, w1, w2, CHUNKS)
        acc_up = acc
        if MODE == 2:
            acc_up = _rows_dot(x0, x1, x2, u0, u1, u2, CHUNKS)
        epilogue(acc, acc_up, r_ptr, y_ptr, rows, feats, r_ok, feats < n_out, s_r, s_y, MODE, res, RES_EARLY, y_ptr,
                      0, 0)

    @triton.jit
    def _gemv_row_stream_kernel(x_ptr, w_ptr, r_ptr, ln_ptr, y_ptr, m, n_out, k, s_x, s_w, s_r, s_y, eps,
                                MODE: tl.constexpr, NORM: tl.constexpr, M_P: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr, CHUNKS: tl.constexpr, BLOCKS: tl.constexpr,
                                PDL: tl.constexpr, RES_EARLY: tl.constexpr):
        """`_gemv_row_slices_kernel` (rows as CHUNKS power-of-two slices, 1-3) over BLOCKS consecutive blocks of
        BLOCK_N rows a program, in turn: block j + 1's weights are loaded before block j's products are summed and
        stored, so two blocks are in registers and a program's loads never stop; the first block loads before
        the PDL wait. With a grid of about one wave, the weights past the first wave no longer wait for a program
        to exit and a new one to start (the whole-row kernel's later waves); the next kernel's programs, resident
        beside these once they have all passed their wait, prefetch their own weights meanwhile. RES_EARLY: the
        first block's residual before the wait, every later one's with its weights. The talker's batch-1 launches
        (talker_launch.TALKER_PDL_LAUNCH)."""
        first = tl.program_id(0) * (BLOCKS * BLOCK_N)
        rows = tl.arange(0, M_P)
        r_ok = rows < m
        feats = first + tl.arange(0, BLOCK_N)
        w0, w1, w2, u0, u1, u2, res = _row_block(w_ptr, r_ptr, feats, rows, r_ok, k, n_out, s_w, s_r, MODE,
                                                 RES_EARLY, M_P, BLOCK_N, BLOCK_K, CHUNKS)
        ln0, ln1, ln2 = _norm_slices(ln_ptr, k, NORM, BLOCK_K, CHUNKS)
        pdl_start(PDL)
        x0, x1, x2 = _x_slices(x_ptr, rows, r_ok, s_x, k, eps, ln0, ln1, ln2, NORM, BLOCK_K, CHUNKS)
        for _ in range(BLOCKS):
            # past the last block (of this program or of w) the masks are all false: no memory is read
            ahead = feats + BLOCK_N
            n0, n1, n2, v0, v1, v2, r_next = _row_block(
                w_ptr, r_ptr, tl.where(ahead < first + BLOCKS * BLOCK_N, ahead, n_out), rows, r_ok, k, n_out, s_w,
                s_r, MODE, RES_EARLY, M_P, BLOCK_N, BLOCK_K, CHUNKS)
            acc = _rows_dot(x0, x1, x2, w0, w1, w2, CHUNKS)
            acc_up = acc
            if MODE == 2:
                acc_up = _rows_dot(x0, x1, x2, u0, u1, u2, CHUNKS)
            epilogue(acc, acc_up, r_ptr, y_ptr, rows, feats, r_ok, feats < n_out, s_r, s_y, MODE, res, RES_EARLY,
                      y_ptr, 0, 0)
            w0, w1, w2, u0, u1, u2, res, feats = n0, n1, n2, v0, v1, v2, r_next, ahead

    @triton.jit
    def _row_slice(ptr, idx, ok, stride, k, start, WIDTH: tl.constexpr):
        """Columns start .. start + WIDTH - 1 (those < k) of rows idx [R] (ok: which exist) -> [R, WIDTH]."""
        ks = start + tl.arange(0, WIDTH)
        return tl.load(ptr + idx[:, None].to(tl.int64) * stride + ks[None, :], mask=ok[:, None] & (ks < k)[None, :],
                       other=0.0)

    @triton.jit
    def _row_slices(ptr, idx, ok, stride, k, BLOCK_K: tl.constexpr, CHUNKS: tl.constexpr):
        """Rows idx [R] as CHUNKS [R, BLOCK_K] slices, three returned (those past CHUNKS repeat the first)."""
        s0 = _row_slice(ptr, idx, ok, stride, k, 0, BLOCK_K)
        s1, s2 = s0, s0
        if CHUNKS > 1:
            s1 = _row_slice(ptr, idx, ok, stride, k, BLOCK_K, BLOCK_K)
        if CHUNKS > 2:
            s2 = _row_slice(ptr, idx, ok, stride, k, 2 * BLOCK_K, BLOCK_K)
        return s0, s1, s2

    @triton.jit
    def _row_block(w_ptr, r_ptr, feats, rows, r_ok, k, n_out, s_w, s_r, MODE: tl.constexpr, RES: tl.constexpr,
                   M_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CHUNKS: tl.constexpr):
        """Rows feats [BLOCK_N] of w (those < n_out) as slices [BLOCK_N, BLOCK_K], their up rows' slices (MODE 2,
        else the same), and RES: their residual [M_P, BLOCK_N] in fp32 (else zeros)."""
        f_ok = feats < n_out
        w0, w1, w2 = _row_slices(w_ptr, feats, f_ok, s_w, k, BLOCK_K, CHUNKS)
        u0, u1, u2 = w0, w1, w2
        if MODE == 2:
            u0, u1, u2 = _row_slices(w_ptr + n_out * s_w, feats, f_ok, s_w, k, BLOCK_K, CHUNKS)
        res = tl.zeros((M_P, BLOCK_N), dtype=tl.float32)
        if RES:
            res = tl.load(r_ptr + rows[:, None] * s_r + feats[None, :], mask=r_ok[:, None] & f_ok[None, :],
                          other=0.0).to(tl.float32)
        return w0, w1, w2, u0, u1, u2, res

    @triton.jit
    def _norm_slices(ln_ptr, k, NORM: tl.constexpr, BLOCK_K: tl.constexpr, CHUNKS: tl.constexpr):
        """The norm weight [K] as CHUNKS one-row slices [1, BLOCK_K] in fp32 (zeros without NORM)."""
        ln0 = tl.zeros((1, BLOCK_K), dtype=tl.float32)
        ln1, ln2 = ln0, ln0
        if NORM:
            row0 = tl.full((1,), 0, tl.int32)
            ln0, ln1, ln2 = _row_slices(ln_ptr, row0, row0 == 0, 0, k, BLOCK_K, CHUNKS)
            ln0, ln1, ln2 = ln0.to(tl.float32), ln1.to(tl.float32), ln2.to(tl.float32)
        return ln0, ln1, ln2

    @triton.jit
    def _x_slices(x_ptr, rows, r_ok, s_x, k, eps, ln0, ln1, ln2, NORM: tl.constexpr, BLOCK_K: tl.constexpr,
                  CHUNKS: tl.constexpr):
        """x's rows as CHUNKS fp32 slices [M_P, BLOCK_K], RMS-normalised with the norm slices ln* (NORM) and
        rounded as the reference rounds them."""
        x_dt = x_ptr.dtype.element_ty
        x0, x1, x2 = _row_slices(x_ptr, rows, r_ok, s_x, k, BLOCK_K, CHUNKS)
        x0, x1, x2 = x0.to(tl.float32), x1.to(tl.float32), x2.to(tl.float32)
        if NORM:
            sum_sq = tl.sum(x0 * x0, axis=1)
            if CHUNKS > 1:
                sum_sq += tl.sum(x1 * x1, axis=1)
            if CHUNKS > 2:
                sum_sq += tl.sum(x2 * x2, axis=1)
            inv_rms = tl.rsqrt(sum_sq / k + eps)[:, None]
            x0 = round_to(ln0 * round_to(x0 * inv_rms, x_dt), x_dt)
            x1 = round_to(ln1 * round_to(x1 * inv_rms, x_dt), x_dt)
            x2 = round_to(ln2 * round_to(x2 * inv_rms, x_dt), x_dt)
        return x0, x1, x2

    @triton.jit
    def _rows_dot(x0, x1, x2, w0, w1, w2, CHUNKS: tl.constexpr):
        """x slices [M_P, BLOCK_K] against weight slices [BLOCK_N, BLOCK_K] -> fp32 products [M_P, BLOCK_N]."""
        acc = tl.sum(x0[:, None, :] * w0.to(tl.float32)[None, :, :], axis=2)
        if CHUNKS > 1:
            acc += tl.sum(x1[:, None, :] * w1.to(tl.float32)[None, :, :], axis=2)
        if CHUNKS > 2:
            acc += tl.sum(x2[:, None, :] * w2.to(tl.float32)[None, :, :], axis=2)
        return acc
