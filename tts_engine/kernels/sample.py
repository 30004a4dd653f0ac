"""One kernel per codebook draw: logit processors, temperature, top-k, top-p, inverse-CDF pick.

    sample_rows(logits [B, V], settings [B] each, frame [B], codebook) -> ids written to out [B]

The torch sampler (`runtime/sampler.py`) spends ~22 launches per codebook (sorts or topk, softmax,
cumsum, searchsorted, a counter hash); with 16 codebooks a frame that was ~2.2 ms of the 4.6 ms
code-predictor frame on the H200. Here one program per row holds the whole row (V <= 4096) in
registers and does it all:
  - codebook 0 only: repetition penalty over the slot's `seen` ids, EOS masked before
    min_new_tokens or for forced-length rows, suppression of the control ids, and the picked id
    marked in `seen`;
  - top-k as an exact selection: the k-th largest score, the same threshold a sort gives, found by
    halvings of the scores' value range and a walk down the window left (`_top_k_window`, the
    default), or by bisection over the fp32 scores' order-preserving int32 keys (33 counting passes);
  - top-p as a bisection over the same keys for the largest score whose ascending mass stays
    <= 1 - top_p (the tokens a sorted cumsum drops);
  - the uniform is the counter hash of (seed, frame, codebook) computed in the kernel (bit-identical
    to `sampling.counter_uniform`), the pick is the inverse CDF in id order.
Every row's settings are read from tensors, so one captured graph serves any mix of requests, and
a row's id depends only on its own logits and settings (batch-position invariant).

Exactness: the kept set and the uniform are exactly the reference's; the CDF is summed in another
order and `exp` is another implementation, so an id can differ from the torch sampler's only when
the uniform falls within float rounding of a CDF boundary (same distribution; tests check the
picked id against a float64 CDF). Greedy rows take the argmax of the processed logits: exact.
Optionally the picked id's embedding row is gathered into `x_out` (the code predictor's next input).
"""

from __future__ import annotations

import math

import torch

from .backend import HAVE_TRITON, next_pow2, pdl_launch

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start

_MASK64 = (1 << 64) - 1

# Every draw's launch, unless a call names its own: a row's program's warps (they set the order of
# its sums, so one setting serves every batch: a seeded request's codes may not depend on its batch)
# and the top-k search (window 0: the key bisection; n: n passes of `_top_k_window`, each cutting the
# range in `top_k_ways` parts). Module-level so a benchmark can try another before the engine's graphs are
# captured. The fastest of 4 / 8 / 16 warps x 10 / 12 / 14 halvings x 2 / 3 ways timed as the batch-1
# code-predictor frame (H200): a draw at batch 1 / 64 takes 8.1-8.4 / 8.8-9.1 µs with 10-12 halvings against
# 12.8 / 13.1 with the key bisection; 2 and 1 warps are slower (a warp's 64 scores a thread are summed serially).
DRAW_LAUNCH = {"num_warps": 8, "top_k_window": 10, "top_k_ways": 2}
# A draw's gathers (the code predictor's next input row, 1,024 wide, and its first-layer qkv row from the table, 4,096):
# up to GATHER_BLOCK columns a load, and with GATHER_TOGETHER both rows' first blocks loaded before either is stored,
# so that the two rows (read from DRAM: the table is 235 MB) cost one round trip, not five (1,024-column blocks in
# turn, each load waiting for the store before it). Read at every launch.
GATHER_BLOCK = 4096
GATHER_TOGETHER = True


if HAVE_TRITON:

    @triton.jit
    def _splitmix64(x):
        x = x + 0x9E3779B97F4A7C15
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB
        return x ^ (x >> 31)

    @triton.jit
    def _order_key(s):
        """fp32 -> int64 keys with the same order (as signed ints); -inf is the smallest finite key."""
        bits = s.to(tl.int32, bitcast=True)
        return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)

    @triton.jit
    def _top_k_window(s, valid, top_k, COARSE: tl.constexpr, WAYS: tl.constexpr):
        """s [BLOCK] fp32 (-inf: masked) -> s with the scores below the k-th largest set to -inf, the
        same kept set as the key bisection, in fewer block-wide reductions: COARSE passes over the finite
        scores' value range keep count(s >= lo) >= k > count(s >= hi), each cutting [lo, hi) into WAYS
        parts at WAYS - 1 thresholds whose counts share one sum (2: a halving, an int32 count; 3: two
        16-bit counts in an int32; 4: three in an int64; a count is at most 4096), then the window left
        (~1 score after 4096-fold narrowing of 2048 spread ones) is walked down from hi by distinct value
        until k scores are reached (ties counted at once). Exact: every score is compared, none rounded.
        The invariant holds whatever the thresholds' rounding, and it implies lo < hi."""
        neg_inf = float("-inf")
        finite = valid & (s > neg_inf)
        lo = tl.min(tl.where(finite, s, float("inf")), axis=0)
        hi = tl.max(tl.where(finite, s, neg_inf), axis=0)
        for _ in range(COARSE):
            if WAYS == 2:
                mid = lo * 0.5 + hi * 0.5  # no overflow at +-3e38
                enough = tl.sum((finite & (s >= mid)).to(tl.int32), axis=0) >= top_k
                lo = tl.where(enough, mid, lo)
                hi = tl.where(enough, hi, mid)
            elif WAYS == 3:
                t1 = lo * (2.0 / 3.0) + hi * (1.0 / 3.0)
                t2 = lo * (1.0 / 3.0) + hi * (2.0 / 3.0)
                packed = tl.sum((finite & (s >= t1)).to(tl.int32) + ((finite & (s >= t2)).to(tl.int32) << 16), axis=0)
                c1, c2 = packed & 0xFFFF, packed >> 16
                new_lo = tl.where(c2 >= top_k, t2, tl.where(c1 >= top_k, t1, lo))
                hi = tl.where(c2 >= top_k, hi, tl.where(c1 >= top_k, t2, t1))
                lo = new_lo
            else:
                t1 = lo * 0.75 + hi * 0.25
                t2 = lo * 0.5 + hi * 0.5
                t3 = lo * 0.25 + hi * 0.75
                packed = tl.sum((finite & (s >= t1)).to(tl.int64) + ((finite & (s >= t2)).to(tl.int64) << 16)
                                + ((finite & (s >= t3)).to(tl.int64) << 32), axis=0)
                c1, c2, c3 = packed & 0xFFFF, (packed >> 16) & 0xFFFF, packed >> 32
                new_lo = tl.where(c3 >= top_k, t3, tl.where(c2 >= top_k, t2, tl.where(c1 >= top_k, t1, lo)))
                hi = tl.where(c3 >= top_k, hi, tl.where(c2 >= top_k, t3, tl.where(c1 >= top_k, t2, t1)))
                lo = new_lo
        # Fewer than k scores >= hi (or hi the maximum with k of them: then the walk takes nothing).
        need = top_k - tl.sum((finite & (s >= hi)).to(tl.int32), axis=0)
        kth = hi
        while (need > 0) & (kth > lo):
            kth = tl.max(tl.where(finite & (s < kth), s, neg_inf), axis=0)
            need -= tl.sum((finite & (s == kth)).to(tl.int32), axis=0)
        return tl.where(s >= kth, s, neg_inf)

    @triton.jit
    def _sample_kernel(logits_ptr, logits_stride, n_vocab,
                       do_sample_ptr, temperature_ptr, top_k_ptr, top_p_ptr, seed_ptr, frame_ptr, codebook,
                       penalty_ptr, min_new_ptr, eos_ok_ptr, slot_ptr, seen_ptr, suppress_ptr, eos_id,
                       out_ptr, out_stride, emb_ptr, emb_dim, x_ptr, x_stride, emb2_ptr, emb2_dim, x2_ptr, x2_stride,
                       CODEBOOK0: tl.constexpr, GATHER: tl.constexpr, GATHER2: tl.constexpr, BLOCK: tl.constexpr,
                       EMB_BLOCK: tl.constexpr, EMB2_BLOCK: tl.constexpr, PDL: tl.constexpr, TOPK_WINDOW: tl.constexpr,
                       TOPK_WAYS: tl.constexpr, GATHER_TOGETHER: tl.constexpr):
        """Program b draws row b (`_draw`)."""
        row = tl.program_id(0).to(tl.int64)
        _draw(row, logits_ptr, logits_stride, n_vocab, do_sample_ptr, temperature_ptr, top_k_ptr, top_p_ptr,
              seed_ptr, frame_ptr, codebook, penalty_ptr, min_new_ptr, eos_ok_ptr, slot_ptr, seen_ptr, suppress_ptr,
              eos_id, out_ptr, out_stride, emb_ptr, emb_dim, x_ptr, x_stride, emb2_ptr, emb2_dim, x2_ptr,
              x2_stride, CODEBOOK0, GATHER, GATHER2, BLOCK, EMB_BLOCK, EMB2_BLOCK, PDL, TOPK_WINDOW, TOPK_WAYS,
              GATHER_TOGETHER)

    @triton.jit
    def _draw(row, logits_ptr, logits_stride, n_vocab, do_sample_ptr, temperature_ptr, top_k_ptr, top_p_ptr, seed_ptr,
              frame_ptr, codebook, penalty_ptr, min_new_ptr, eos_ok_ptr, slot_ptr, seen_ptr, suppress_ptr, eos_id,
              out_ptr, out_stride, emb_ptr, emb_dim, x_ptr, x_stride, emb2_ptr, emb2_dim, x2_ptr, x2_stride,
              CODEBOOK0: tl.constexpr, GATHER: tl.constexpr, GATHER2: tl.constexpr, BLOCK: tl.constexpr,
              EMB_BLOCK: tl.constexpr, EMB2_BLOCK: tl.constexpr, PDL: tl.constexpr, TOPK_WINDOW: tl.constexpr,
              TOPK_WAYS: tl.constexpr, GATHER_TOGETHER: tl.constexpr):
        ids = tl.arange(0, BLOCK)
        valid = ids < n_vocab
        neg_inf = float("-inf")
        # The row's settings (gathered at the start of the step's codes graph) and frame, `seen` (an earlier
        # step's) and `suppress` (never written) are not the logits kernel's outputs: read before the wait for
        # it, under PDL they arrive while it finishes instead of one dependent round trip after another behind
        # the wait. That holds for the code predictor's draws (PDL, the gathers many launches back); the
        # codebook-0 draw, right after those gathers, is launched without PDL, so it waits for them anyway.
        do_sample = tl.load(do_sample_ptr + row)
        t = tl.load(temperature_ptr + row)
        top_k = tl.load(top_k_ptr + row)
        top_p = tl.load(top_p_ptr + row)
        seed = tl.load(seed_ptr + row).to(tl.uint64)
        frame0 = tl.load(frame_ptr + row)
        if CODEBOOK0:
            slot = tl.load(slot_ptr + row).to(tl.int64)
            seen = tl.load(seen_ptr + slot * n_vocab + ids, mask=valid, other=0) != 0
            p = tl.load(penalty_ptr + row)
            block_eos = (frame0 < tl.load(min_new_ptr + row)) | (tl.load(eos_ok_ptr + row) == 0)
            suppressed = tl.load(suppress_ptr + ids, mask=valid, other=1) != 0
        pdl_start(PDL)
        s = tl.load(logits_ptr + row * logits_stride + ids, mask=valid, other=neg_inf).to(tl.float32)
        if CODEBOOK0:
            s = tl.where(seen, tl.where(s < 0, s * p, tl.math.div_rn(s, p + tl.zeros_like(s))), s)
            s = tl.where((ids == eos_id) & block_eos, neg_inf, s)
            s = tl.where(suppressed, neg_inf, s)
        if do_sample == 0:
            code = tl.argmax(s, axis=0).to(tl.int64)  # greedy rows alone: two block-wide reductions
        else:
            s = tl.math.div_rn(s, t + tl.zeros_like(s))
            key = tl.where(valid, _order_key(s), -(1 << 40))
            if (top_k > 0) & (top_k < n_vocab):
                if TOPK_WINDOW > 0:
                    s = _top_k_window(s, valid, top_k, TOPK_WINDOW, TOPK_WAYS)
                else:
                    # Largest key with at least k keys >= it: the k-th largest score. These 33 passes are
                    # ~10 of the kernel's ~14 us at batch 1; a 16-way search (8 passes
                    # of 16 int64 counts over a [16, V] compare) was slower there: 23 us.
                    lo = tl.min(tl.where(valid, key, 1 << 40), axis=0)
                    hi = tl.max(key, axis=0)
                    for _ in range(33):
                        mid = lo + (hi - lo + 1) // 2
                        enough = tl.sum(((key >= mid) & valid).to(tl.int32), axis=0) >= top_k
                        lo = tl.where(enough, mid, lo)
                        hi = tl.where(enough, hi, mid - 1)
                    s = tl.where(key >= lo, s, neg_inf)
                key = tl.where(valid, _order_key(s), -(1 << 40))
            if top_p < 1.0:
                m = tl.max(s, axis=0)
                e = tl.where(s > neg_inf, tl.exp(s - m), 0.0)
                budget = (1.0 - top_p) * tl.sum(e, axis=0)
                # Largest key whose ascending mass (keys <= it) stays within the budget: drop <= it.
                lo = tl.min(tl.where(valid, key, 1 << 40), axis=0) - 1
                hi = tl.max(key, axis=0)
                for _ in range(34):
                    mid = lo + (hi - lo + 1) // 2
                    fits = tl.sum(tl.where(key <= mid, e, 0.0), axis=0) <= budget
                    lo = tl.where(fits, mid, lo)
                    hi = tl.where(fits, hi, mid - 1)
                s = tl.where(key > lo, s, neg_inf)
            kept = (s > neg_inf) & valid
            m = tl.max(s, axis=0)
            e = tl.where(kept, tl.exp(s - m), 0.0)
            cdf = tl.cumsum(e, axis=0)
            total = tl.max(cdf, axis=0)
            frame = frame0.to(tl.uint64)
            cb = frame * 0 + codebook  # a uint64 even when Triton passes codebook as a constexpr
            h = _splitmix64(_splitmix64(_splitmix64(seed) ^ frame) ^ cb)
            u = (h >> 11).to(tl.float64) * (1.0 / 9007199254740992.0)
            target = (u * total.to(tl.float64)).to(tl.float32)
            idx = tl.minimum(tl.sum(((cdf <= target) & valid).to(tl.int32), axis=0), n_vocab - 1)
            # Rounding at the top of the CDF can point past the last kept id: step back to it.
            code = tl.max(tl.where(kept & (ids <= idx), ids, -1), axis=0).to(tl.int64)
        tl.store(out_ptr + row * out_stride, code)
        if CODEBOOK0:
            tl.store(seen_ptr + slot * n_vocab + code, 1)
        if GATHER and GATHER2 and GATHER_TOGETHER:
            _gather_two_rows(emb_ptr, emb_dim, x_ptr + row * x_stride, emb2_ptr, emb2_dim, x2_ptr + row * x2_stride,
                             code, EMB_BLOCK, EMB2_BLOCK)
        else:
            if GATHER:
                _gather_row(emb_ptr, emb_dim, x_ptr + row * x_stride, code, 0, EMB_BLOCK)
            if GATHER2:
                _gather_row(emb2_ptr, emb2_dim, x2_ptr + row * x2_stride, code, 0, EMB2_BLOCK)

    @triton.jit
    def _gather_row(table_ptr, dim, out_ptr, code, first, BLOCK: tl.constexpr):
        """Columns first .. dim - 1 of row `code` of a contiguous table [V, dim] copied to out_ptr, BLOCK columns at a
        time."""
        for start in range(first, dim, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            ok = cols < dim
            tl.store(out_ptr + cols, tl.load(table_ptr + code * dim + cols, mask=ok), mask=ok)

    @triton.jit
    def _gather_two_rows(t1_ptr, dim1, out1_ptr, t2_ptr, dim2, out2_ptr, code, BLOCK1: tl.constexpr,
                         BLOCK2: tl.constexpr):
        """`_gather_row` of two tables, the first block of each loaded before either is stored: one memory round
        trip for both rows (at most GATHER_BLOCK columns each), not one a block in turn."""
        c1, c2 = tl.arange(0, BLOCK1), tl.arange(0, BLOCK2)
        r1 = tl.load(t1_ptr + code * dim1 + c1, mask=c1 < dim1)
        r2 = tl.load(t2_ptr + code * dim2 + c2, mask=c2 < dim2)
        tl.store(out1_ptr + c1, r1, mask=c1 < dim1)
        tl.store(out2_ptr + c2, r2, mask=c2 < dim2)
        _gather_row(t1_ptr, dim1, out1_ptr, code, BLOCK1, BLOCK1)
        _gather_row(t2_ptr, dim2, out2_ptr, code, BLOCK2, BLOCK2)


def sample_rows(logits: torch.Tensor, out: torch.Tensor, *, do_sample: torch.Tensor, temperature: torch.Tensor,
                top_k: torch.Tensor, top_p: torch.Tensor, seed: torch.Tensor, frame: torch.Tensor, codebook: int,
                codebook0: dict | None = None, gather: tuple[torch.Tensor, torch.Tensor] | None = None,
                pdl: bool = False, num_warps: int | None = None, top_k_window: int | None = None,
                top_k_ways: int | None = None, gather2: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """logits [B, V] (any float dtype, last dim contiguous); settings [B] tensors (do_sample bool,
    temperature/top_p f32, top_k/seed/frame i64); out: i64 [B] view (any stride) for the ids.

    codebook0: dict(penalty [B] f32, min_new [B] i64, eos_ok [B] bool, slots [B] i64, seen [S, V]
    bool (read, and the picked ids set), suppress [V] bool, eos_id int) for the talker's codebook.
    gather: (table [V, H], x_out [B, H] view with contiguous rows): x_out[b] = table[id[b]].
    gather2: a second (table [V, W], out [B, W] view with contiguous rows) gathered the same way (the code
    predictor's first-layer qkv rows, `CodePredictorRunner.qkv_table`).
    num_warps: a row's program's warps (they set the order of its sums).
    top_k_window: 0, top-k's threshold by the 33-pass key bisection; n > 0, by n halvings of the value
    range and a walk down the window left (`_top_k_window`; the same kept set). top_k_ways: 2, 3 or 4 parts
    a pass of the window search cuts the range into (one packed count a pass; 3 and 4 untimed on the GPU).
    None: DRAW_LAUNCH's."""
    num_warps = DRAW_LAUNCH["num_warps"] if num_warps is None else num_warps
    top_k_window = DRAW_LAUNCH["top_k_window"] if top_k_window is None else top_k_window
    top_k_ways = DRAW_LAUNCH["top_k_ways"] if top_k_ways is None else top_k_ways
    if top_k_ways not in (2, 3, 4):
        raise ValueError(f"top_k_ways must be 2, 3 or 4, got {top_k_ways}")
    b, v = logits.shape
    if v > 4096:
        raise ValueError(f"sample_rows holds a row in registers: vocab {v} > 4096")
    if logits.stride(1) != 1:
        raise ValueError("logits rows must be contiguous")
    c0 = codebook0 or {}
    dummy = seed
    seen = c0.get("seen")
    table, x_out = gather if gather is not None else (logits, logits)
    emb_dim = table.shape[1] if gather is not None else 0
    table2, x2_out = gather2 if gather2 is not None else (logits, logits)
    emb2_dim = table2.shape[1] if gather2 is not None else 0
    for name, pair in (("gather", gather), ("gather2", gather2)):
        if pair is not None and (not pair[0].is_contiguous() or pair[1].stride(-1) != 1
                                 or tuple(pair[1].shape) != (b, pair[0].shape[1])):
            raise ValueError(f"sample_rows: {name} takes a contiguous table [V, W] and an out view [B, W] with "
                             f"contiguous rows, got {tuple(pair[0].shape)} / {tuple(pair[1].shape)}")
    _sample_kernel[(b,)](
        logits, logits.stride(0), v, do_sample, temperature, top_k, top_p, seed, frame, codebook,
        c0.get("penalty", dummy), c0.get("min_new", dummy), c0.get("eos_ok", dummy), c0.get("slots", dummy),
        seen if seen is not None else dummy, c0.get("suppress", dummy), c0.get("eos_id", 0),
        out, out.stride(0), table, emb_dim, x_out, x_out.stride(0) if gather is not None else 0,
        table2, emb2_dim, x2_out, x2_out.stride(0) if gather2 is not None else 0,
        CODEBOOK0=codebook0 is not None, GATHER=gather is not None, GATHER2=gather2 is not None, BLOCK=next_pow2(v),
        EMB_BLOCK=min(GATHER_BLOCK, next_pow2(max(emb_dim, 1))),
        EMB2_BLOCK=min(GATHER_BLOCK, next_pow2(max(emb2_dim, 1))), GATHER_TOGETHER=GATHER_TOGETHER,
        num_warps=num_warps, PDL=pdl, TOPK_WINDOW=top_k_window, TOPK_WAYS=top_k_ways, **pdl_launch(pdl))


def sample_rows_ref(logits: torch.Tensor, *, do_sample, temperature, top_k, top_p, seed, frame, codebook: int,
                    codebook0: dict | None = None) -> tuple[torch.Tensor, ...]:
    """Plain torch, float64 where it matters: -> (greedy ids [B], kept mask [B, V], cdf64 [B, V], u [B])
    with the reference's processors and warps, to check `sample_rows` against."""
    from ..sampling import counter_uniform, warp

    s = logits.float().clone()
    if codebook0 is not None:
        c0 = codebook0
        p = c0["penalty"][:, None]
        seen = c0["seen"][c0["slots"]]
        s = torch.where(seen, torch.where(s < 0, s * p, s / p), s)
        block = (frame < c0["min_new"]) | ~c0["eos_ok"]
        s[:, c0["eos_id"]] = s[:, c0["eos_id"]].masked_fill(block, -math.inf)
        s = s.masked_fill(c0["suppress"], -math.inf)
    greedy = s.argmax(-1)
    kept, cdfs, us = [], [], []
    for r in range(s.shape[0]):
        w = warp(s[r], float(temperature[r]), int(top_k[r]), float(top_p[r]))
        kept.append(w > -math.inf)
        cdfs.append(w.double().softmax(-1).cumsum(-1))
        us.append(counter_uniform(int(seed[r]) & _MASK64, int(frame[r]), codebook))
    return greedy, torch.stack(kept), torch.stack(cdfs), torch.tensor(us, dtype=torch.float64)
