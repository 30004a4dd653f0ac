// One code-predictor pass at batch 1 (passes 1-14 of a frame: one new position) as one persistent kernel.
//
// Why: a batch-1 pass through the Triton kernels is 21 dependent launches of ~4 µs of critical path each, and with
// weights that cost nothing it would still take 1.24 ms a frame (run 27): the launches' chain, not the bytes, is
// what stands between the frame and its 1.2 ms target. Here one CTA an SM runs the pass's 20 steps
//
//     layer 0: attention + o, gate/up + SwiGLU, down        (its qkv product comes from the table, `qkv0`)
//     layer l: qkv, attention + o, gate/up + SwiGLU, down   (l = 1 .. L-1)
//     head (final norm in its prologue)
//
// with no launch boundary between steps (a step's outputs travel as tagged words that the next step polls: below), and
// each CTA's slice of every step's weights streamed into shared memory by the bulk-copy engine two steps ahead (the
// weights are constants: nothing waits for them but the product that reads them; CP_REG_WEIGHTS: other ways, below).
// A step's work after its wait is: read the step's input vector from L2 (bf16, a few KB), the RMSNorm's one block
// reduction, one warp-wide dot product a weight row, the epilogue. The attention is computed by every CTA for all
// heads (a few hundred FMAs a lane), so that attention + o needs no wait between them; the earlier positions' keys
// and values are read before the step's wait.
//
// Arithmetic and rounding are the reference's (and the Triton path's): every product in fp32 rounded to bf16, the
// RMSNorm as `fused.rms_norm` rounds it, q/k norm + RoPE as `qk_norm_rope_ref`, the residual adds and SwiGLU rounded
// where torch rounds them. Sums run in another order than cuBLAS' or Triton's: a few outputs differ by one ulp.
//
// Shapes come in as macros (kernels/cp_pass.py compiles this file per model): CP_H hidden, CP_I intermediate,
// CP_HQ / CP_HKV heads, CP_D head dim (128: a lane holds 4 of a head's dims), CP_L layers, CP_V codes, CP_P cache
// positions (16). A warp a kv head: CP_HKV warps, its CP_HQ / CP_HKV query heads.
//
// Run 28 (docs/benchmarks.md): correct, and slower than the Triton passes (1.765 ms a frame against 1.41; 1.405 with no
// weights copied at all): a step here costs ~4 µs of chain, as a launch does. Run 29 traced it (CP_TRACE): 1.787 ms
// at best (CP_REG_WEIGHTS=1) against 1.38; the attention + o step is ~10 µs of a ~22 µs layer, and without the
// attention the frame would still take 1.21-1.24 ms. Opt-in (`cp_persistent`).
//
// Grid: one CTA an SM (CP_CTAS of them, compiled in), all resident at once (each takes > half an SM's shared memory).
// The runner never launches two of these at once (the newcomer lane keeps the Triton passes), so the CTAs never wait
// on CTAs that cannot start.

#include <cuda_bf16.h>
#include <stdint.h>

#if !defined(CP_H) || !defined(CP_I) || !defined(CP_HQ) || !defined(CP_HKV) || !defined(CP_D) || !defined(CP_L) || \
    !defined(CP_V) || !defined(CP_P)
#error "cp_pass.cu needs CP_H, CP_I, CP_HQ, CP_HKV, CP_D, CP_L, CP_V, CP_P"
#endif

#ifndef CP_POLL_PAUSE_NS
#define CP_POLL_PAUSE_NS 0  // after a poll that found a word not yet written (below); run 28: 0-256 tie
#endif
#ifndef CP_VOLATILE
#define CP_VOLATILE 0
#endif
// Bounds for benchmarks, never for use (garbage out): CP_NO_WEIGHTS no weight is copied or waited for; CP_NO_WAIT a
// step reads its input words once, whether written yet or not; CP_NO_ATTN no attention (o multiplies zeros);
// CP_EMPTY_STEPS no step does anything.
#ifndef CP_NO_WEIGHTS
#define CP_NO_WEIGHTS 0
#endif
#ifndef CP_NO_WAIT
#define CP_NO_WAIT 0
#endif
#ifndef CP_NO_ATTN
#define CP_NO_ATTN 0
#endif
#ifndef CP_EMPTY_STEPS
#define CP_EMPTY_STEPS 0
#endif
// Run 29's variants. CP_REG_WEIGHTS 1: each thread loads its rows of step s + 1's weights into registers as step s
// ends (before it waits for step s + 1's input), as the Triton kernels hold theirs, instead of the dot products reading
// the bulk copies in shared memory; 2: the bulk copies stream into shared memory three steps ahead and each thread
// moves its rows of step s + 1's into registers as step s ends (staged: the products read registers, the bytes are
// asked for early); CP_L2_AHEAD k > 0: thread 0 asks the L2 for its CTA's slice of step s + k's weights
// (`cp.async.bulk.prefetch.L2`) as step s ends. CP_EARLY_RES: the residual word a warp adds after its product is
// loaded before the step's wait (it was written two steps before), not after the product; CP_ATT_ONE_POLL: a warp's
// k, v and query words are polled together, not one after another. CP_TRACE: CTA 0 stamps each step's phases into
// `trace` (clock64; %globaltimer at the launch's start and end to convert).
#ifndef CP_REG_WEIGHTS
#define CP_REG_WEIGHTS 0
#endif
// the cache in shared memory where the weights are in registers (which leave too few for it)
#define CACHE_IN_SMEM (CP_REG_WEIGHTS != 0)
#ifndef CP_L2_AHEAD
#define CP_L2_AHEAD 0
#endif
#ifndef CP_EARLY_RES
#define CP_EARLY_RES 1
#endif
#ifndef CP_ATT_ONE_POLL
#define CP_ATT_ONE_POLL 1
#endif
#ifndef CP_TRACE
#define CP_TRACE 0
#endif
#ifndef CP_CTAS
#error "cp_pass.cu needs CP_CTAS, the grid's CTAs (one an SM)"
#endif

#define WARPS CP_HKV
#define THREADS (WARPS * 32)
#define GROUP (CP_HQ / CP_HKV)
#define QKV_N ((CP_HQ + 2 * CP_HKV) * CP_D)
#define XS_MAX (CP_I > CP_HQ * CP_D ? (CP_I > CP_H ? CP_I : CP_H) : (CP_HQ * CP_D > CP_H ? CP_HQ * CP_D : CP_H))
#define FULL 0xffffffffu

static_assert(CP_D == 128, "a lane holds 4 dims of a 128-dim head");
static_assert(CP_HQ % CP_HKV == 0 && GROUP <= 4, "query heads a kv head");
static_assert(CP_P == 16, "the score reduction below is written for 16 positions");
static_assert(CP_H % (THREADS * 2) == 0 && CP_H % 256 == 0 && CP_I % 256 == 0 && (CP_HQ * CP_D) % 256 == 0,
              "rows are read as 16-byte chunks, 32 a warp-wide round");

typedef __nv_bfloat16 bf16;

struct CpLayer {
    const bf16* w_qkv;   // [QKV_N, H]
    const bf16* w_o;     // [H, HQ D]
    const bf16* w_gu;    // [2 I, H]: gate rows, then up rows
    const bf16* w_down;  // [H, I]
    const bf16* ln_in;   // [H]
    const bf16* ln_post; // [H]
    const bf16* q_norm;  // [D]
    const bf16* k_norm;  // [D]
    bf16* k_cache;       // row 0's [HKV, P, D]
    bf16* v_cache;
};

struct CpPassParams {
    CpLayer layer[CP_L];
    const bf16* x_in;    // [H]      the pass's input: its position's embedding, projected (the draw's gather)
    const bf16* qkv0;    // [QKV_N]  layer 0's qkv product of x_in (the table row the draw gathered)
    const bf16* norm;    // [H]      the final norm
    const bf16* head;    // [V, H]   this pass's codebook head
    const bf16* cos;     // [D]      RoPE row of `pos`
    const bf16* sin;
    uint64_t* qkv;       // [QKV_N]  scratch, tagged words (below): layers 1.. qkv products
    uint64_t* res0;      // [H]      scratch, tagged: the residual stream, two buffers in turn
    uint64_t* res1;
    uint64_t* act;       // [I]      scratch, tagged: SwiGLU's output
    bf16* logits;        // [V]      out
    unsigned* launches;  // [1]      launches so far (kept across launches: the tags are made of it)
    unsigned* error;     // [1]      set when a wait for other CTAs' outputs timed out (then the outputs are garbage)
    uint64_t* trace;     // [P - 2, TRACE_WORDS] CP_TRACE's stamps, a row a pass (by position)
    int pos;             // the new position (2 .. P-1)
    float eps;
    float scale;         // log2(e) / sqrt(D): scores in base 2
    unsigned slot1_at;   // shared memory: weight slot 0 (even steps' slices) at 0, slot 1 (odd steps') here,
    unsigned cache_at;   //   the cache (CACHE_IN_SMEM) here, [2, HKV, P, 32 lanes] uint2, then the input vectors
};

enum StepKind { QKV = 0, ATT = 1, GU = 2, DOWN = 3, HEAD = 4 };
#define STEPS (4 * CP_L)  // layer 0's three, 4 a later layer, the head
// A pass's trace row: %globaltimer at the start and the end, clock64 at the start and after the wait for the launch
// before, then each step's: its input words arrived (thread 0's), the cache's copies arrived (attention; else the
// same),
// its input ready (normed in shared memory; attention + o: the attention done), its weights ready, the step done.
#define TRACE_STEP 5
#define TRACE_WORDS (4 + TRACE_STEP * STEPS)

__device__ __forceinline__ int step_kind(int s) {
    if (s == STEPS - 1) return HEAD;
    return s < 3 ? s + 1 : (s - 3) % 4;
}
__device__ __forceinline__ int step_layer(int s) { return s < 3 ? 0 : 1 + (s - 3) / 4; }

__device__ __forceinline__ float rb(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

// ---- the bulk-copy engine and its barriers -------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)));
}

__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = CP_NO_WEIGHTS;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    }
}

// ---- step outputs that other CTAs read: tagged words ----------------------------------------------------------------
//
// Each value a step writes for other CTAs travels as one 8-byte word: the fp32 bits of the (bf16-rounded) value and
// the step's tag (launches * STEPS + step + 1). A reader polls the words it needs until each carries its step's tag.
// There is no barrier, flag or fence between steps: an 8-byte store is seen whole or not at all, so the value's
// arrival is its own signal, and the poll that sees it is the load that reads it (NCCL's LL protocol). Every step
// reads all CTAs' outputs of the step before, so no CTA runs more than a step ahead of another, and a buffer written
// again two steps or more after its readers read it (each below) is never overwritten under a reader.

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// CP_VOLATILE: st/ld.volatile (NCCL's LL) rather than .relaxed.gpu
__device__ __forceinline__ void tagged_store(uint64_t* at, float v, unsigned tag) {
    const uint64_t w = (static_cast<uint64_t>(tag) << 32) | __float_as_uint(v);
#if CP_VOLATILE
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(at), "l"(w) : "memory");
#else
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(at), "l"(w) : "memory");
#endif
}

__device__ __forceinline__ uint64_t tagged_word(const uint64_t* at) {
    uint64_t w;
#if CP_VOLATILE
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(w) : "l"(at) : "memory");
#else
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(at) : "memory");
#endif
    return w;
}

// Words at[0 .. N) -> their values, once every one carries `tag`. A wait over a second means CTAs that cannot start
// (which the runner never makes happen): the error word is set and the pass finishes with garbage rather than hang the
// stream.
template <int N>
__device__ __forceinline__ void tagged_gather(const uint64_t* const (&at)[N], unsigned tag, float (&out)[N],
                                              unsigned* error) {
    uint64_t w[N];
    uint64_t t0 = 0;
    unsigned polls = 0;
    for (;;) {
        bool ready = true;
#pragma unroll
        for (int i = 0; i < N; ++i) w[i] = tagged_word(at[i]);
#pragma unroll
        for (int i = 0; i < N; ++i) ready &= static_cast<unsigned>(w[i] >> 32) == tag;
        if (ready || CP_NO_WAIT) break;
        // optionally a pause before the next poll (would 132 CTAs re-reading KBs of words crowd the L2? run 28: no,
        // 0-256 ns tie)
        if (CP_POLL_PAUSE_NS) __nanosleep(CP_POLL_PAUSE_NS);
        // the clock is read every 256 empty polls, not each: a read of %globaltimer is not free
        if ((++polls & 255) == 0) {
            const uint64_t now = global_ns();
            if (!t0) {
                t0 = now;
            } else if (now - t0 > 1000000000ull) {
                atomicExch(error, 1u);
                break;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = __uint_as_float(static_cast<unsigned>(w[i]));
}

// Words at, at + STRIDE, .. (N of them), as tagged_gather.
template <int N, int STRIDE = 1>
__device__ __forceinline__ void tagged_read(const uint64_t* at, unsigned tag, float (&out)[N], unsigned* error) {
    const uint64_t* each[N];
#pragma unroll
    for (int i = 0; i < N; ++i) each[i] = at + i * STRIDE;
    tagged_gather<N>(each, tag, out, error);
}

// A word loaded earlier (w, from at): its value if it carried `tag`, else (never expected) the value once it does.
__device__ __forceinline__ float tagged_value(uint64_t w, const uint64_t* at, unsigned tag, unsigned* error) {
    if (static_cast<unsigned>(w >> 32) == tag || CP_NO_WAIT) return __uint_as_float(static_cast<unsigned>(w));
    float v[1];
    tagged_read<1>(at, tag, v, error);
    return v[0];
}

// ---- products ------------------------------------------------------------------------------------------------------

__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
    const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 a = __bfloat1622float2(wp[i]);
        const float2 b = __bfloat1622float2(xp[i]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
    return acc;
}

// Rows a and b (bf16 [K] in shared memory) against x (bf16 [K] in shared memory): whole-warp sums in every lane.
template <int K>
__device__ __forceinline__ float2 warp_dot2(const bf16* a, const bf16* b, const bf16* x, int lane) {
    const uint4* a4 = reinterpret_cast<const uint4*>(a);
    const uint4* b4 = reinterpret_cast<const uint4*>(b);
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    float sa = 0.f, sb = 0.f;
#pragma unroll
    for (int i = 0; i < K / 256; ++i) {
        const int c = lane + 32 * i;
        const uint4 xv = x4[c];
        sa += dot8(a4[c], xv);
        sb += dot8(b4[c], xv);
    }
    return make_float2(warp_sum(sa), warp_sum(sb));
}

template <int K>
__device__ __forceinline__ float warp_dot(const bf16* a, const bf16* x, int lane) {
    const uint4* a4 = reinterpret_cast<const uint4*>(a);
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < K / 256; ++i) s += dot8(a4[lane + 32 * i], x4[lane + 32 * i]);
    return warp_sum(s);
}

// The step's input vector (tagged words [N]) into xs as bf16; with ln, RMS-normalised as `fused.rms_norm` rounds it:
// ln * bf16(x * rsqrt(mean(x^2) + eps)), rounded. Thread t holds elements t, t + THREADS, ..: a warp's poll reads 256
// consecutive bytes.
template <int N>
__device__ void load_x(const uint64_t* src, unsigned tag, const bf16* ln, float eps, bf16* xs, float* red,
                       unsigned* error, uint64_t* stamp) {
    constexpr int PER = N / THREADS;
    static_assert(N % THREADS == 0, "whole rounds of the CTA");
    const int t = threadIdx.x;
    float v[PER];
    tagged_read<PER, THREADS>(src + t, tag, v, error);
    if (stamp) stamp[0] = stamp[1] = clock64();
    if (ln != nullptr) {
        float ss = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) ss = fmaf(v[i], v[i], ss);
        ss = warp_sum(ss);
        if ((t & 31) == 0) red[t >> 5] = ss;
        __syncthreads();
        float total = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) total += red[w];
        const float inv = rsqrtf(total / N + eps);
#pragma unroll
        for (int i = 0; i < PER; ++i) v[i] = rb(__bfloat162float(ln[t + i * THREADS]) * rb(v[i] * inv));
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) xs[t + i * THREADS] = __float2bfloat16_rn(v[i]);
    __syncthreads();
}

__device__ __forceinline__ int part(int n, int c, int g) { return static_cast<int>((static_cast<long>(n) * c) / g); }

// This CTA's rows of a step's weights: up to two contiguous runs (gate/up: the gate rows, then the up rows), into a
// slot as [rows, K].
struct Slice {
    const bf16* src0;
    const bf16* src1;
    uint32_t bytes0;
    uint32_t bytes1;
};

__device__ Slice step_slice(const CpPassParams& p, int s) {
    const int c = blockIdx.x, g = gridDim.x;
    const CpLayer& L = p.layer[step_layer(s)];
    Slice sl = {nullptr, nullptr, 0, 0};
    switch (step_kind(s)) {
        case QKV: {
            const int r0 = part(QKV_N, c, g), r1 = part(QKV_N, c + 1, g);
            sl.src0 = L.w_qkv + static_cast<long>(r0) * CP_H;
            sl.bytes0 = (r1 - r0) * CP_H * 2;
            break;
        }
        case ATT: {
            const int r0 = part(CP_H, c, g), r1 = part(CP_H, c + 1, g);
            sl.src0 = L.w_o + static_cast<long>(r0) * (CP_HQ * CP_D);
            sl.bytes0 = (r1 - r0) * CP_HQ * CP_D * 2;
            break;
        }
        case GU: {
            const int f0 = part(CP_I, c, g), f1 = part(CP_I, c + 1, g);
            sl.src0 = L.w_gu + static_cast<long>(f0) * CP_H;
            sl.src1 = L.w_gu + static_cast<long>(CP_I + f0) * CP_H;
            sl.bytes0 = sl.bytes1 = (f1 - f0) * CP_H * 2;
            break;
        }
        case DOWN: {
            const int r0 = part(CP_H, c, g), r1 = part(CP_H, c + 1, g);
            sl.src0 = L.w_down + static_cast<long>(r0) * CP_I;
            sl.bytes0 = (r1 - r0) * CP_I * 2;
            break;
        }
        default: {
            const int r0 = part(CP_V, c, g), r1 = part(CP_V, c + 1, g);
            sl.src0 = p.head + static_cast<long>(r0) * CP_H;
            sl.bytes0 = (r1 - r0) * CP_H * 2;
        }
    }
    return sl;
}

// Thread 0: step s's weights into slot s % 2, completing barrier s % 2's next phase.
__device__ void issue_weights(const CpPassParams& p, int s, unsigned char* slots, uint64_t* bars) {
    if (s >= STEPS || CP_NO_WEIGHTS) return;
    const Slice sl = step_slice(p, s);
    unsigned char* dst = slots + ((s & 1) ? p.slot1_at : 0);
    uint64_t* bar = bars + (s & 1);
    // the slot's last readers were generic loads, the copy is the async proxy's
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    mbar_expect(bar, sl.bytes0 + sl.bytes1);
    if (sl.bytes0) bulk_load(dst, sl.src0, sl.bytes0, bar);
    if (sl.bytes1) bulk_load(dst + sl.bytes0, sl.src1, sl.bytes1, bar);
}

// Thread 0: its CTA's slice of step s's weights asked of the L2 (CP_L2_AHEAD), nothing waiting for it.
__device__ void prefetch_weights_l2(const CpPassParams& p, int s) {
    if (s >= STEPS || CP_NO_WEIGHTS) return;
    const Slice sl = step_slice(p, s);
    if (sl.bytes0) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(sl.src0), "r"(sl.bytes0) : "memory");
    }
    if (sl.bytes1) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(sl.src1), "r"(sl.bytes1) : "memory");
    }
}

// ---- weights in registers (CP_REG_WEIGHTS) -------------------------------------------------------------------------
//
// A CTA's rows of a step go to its warps in turn (row r to warp r % WARPS), a lane holding 16-byte chunks lane,
// lane + 32, .. of each of its rows: ROWS rows at most a warp, K / 256 chunks a row.

#define WARP_ROWS(n) ((((n) + CP_CTAS - 1) / CP_CTAS + WARPS - 1) / WARPS)
constexpr int QKV_ROWS = WARP_ROWS(QKV_N), O_ROWS = WARP_ROWS(CP_H), GU_ROWS = WARP_ROWS(CP_I),
              DOWN_ROWS = WARP_ROWS(CP_H), HEAD_ROWS = WARP_ROWS(CP_V);
constexpr int cmax(int a, int b) { return a > b ? a : b; }
// uint4 registers a thread holds: the largest step's (1.7B on 132 SMs: gate/up, 3 rows' gate and up, 24)
constexpr int WREGS = cmax(cmax(QKV_ROWS * CP_H / 256, O_ROWS * CP_HQ * CP_D / 256),
                           cmax(cmax(2 * GU_ROWS * CP_H / 256, DOWN_ROWS * CP_I / 256), HEAD_ROWS * CP_H / 256));

// Rows warp, warp + WARPS, .. (ROWS of them; zeros past n) of w [n, K] (global memory, or a slot in shared memory)
// -> wr [ROWS, K / 256], this lane's chunks.
template <int ROWS, int K, bool SLOT>
__device__ __forceinline__ void rows_to_regs(const bf16* w, int n, uint4* wr, int warp, int lane) {
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const int r = warp + j * WARPS;
#pragma unroll
        for (int i = 0; i < K / 256; ++i) {
            const uint4* at = w4 + static_cast<long>(r) * (K / 8) + lane + 32 * i;
            wr[j * (K / 256) + i] = r >= n ? make_uint4(0, 0, 0, 0) : SLOT ? *at : __ldg(at);
        }
    }
}

template <int KIND>
struct Kind {
    static constexpr int value = KIND;
};

// Every thread: its rows of layer l's (the head's) KIND weights into wr (gate/up: the gate rows, then the up rows),
// from global memory or (slot) from the step's slot in shared memory, laid out as issue_weights copies it. The kind
// is a compile-time constant at every call, so that the registers live at each step are that step's alone.
template <int KIND>
__device__ __forceinline__ void weights_to_regs(const CpPassParams& p, int l, uint4 (&wr)[WREGS],
                                                const bf16* slot = nullptr) {
    if (CP_NO_WEIGHTS) return;
    const int c = blockIdx.x, g = gridDim.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const CpLayer& L = p.layer[l];
    auto rows = [&](auto rows_c, auto k_c, const bf16* global, int n, int slot_row0, uint4* out) {
        constexpr int ROWS = decltype(rows_c)::value, K = decltype(k_c)::value;
        if (slot != nullptr) {
            rows_to_regs<ROWS, K, true>(slot + static_cast<long>(slot_row0) * K, n, out, warp, lane);
        } else {
            rows_to_regs<ROWS, K, false>(global, n, out, warp, lane);
        }
    };
    if constexpr (KIND == QKV) {
        const int r0 = part(QKV_N, c, g), n = part(QKV_N, c + 1, g) - r0;
        rows(Kind<QKV_ROWS>{}, Kind<CP_H>{}, L.w_qkv + static_cast<long>(r0) * CP_H, n, 0, wr);
    } else if constexpr (KIND == ATT) {
        const int r0 = part(CP_H, c, g), n = part(CP_H, c + 1, g) - r0;
        rows(Kind<O_ROWS>{}, Kind<CP_HQ * CP_D>{}, L.w_o + static_cast<long>(r0) * (CP_HQ * CP_D), n, 0, wr);
    } else if constexpr (KIND == GU) {
        const int f0 = part(CP_I, c, g), n = part(CP_I, c + 1, g) - f0;
        rows(Kind<GU_ROWS>{}, Kind<CP_H>{}, L.w_gu + static_cast<long>(f0) * CP_H, n, 0, wr);
        rows(Kind<GU_ROWS>{}, Kind<CP_H>{}, L.w_gu + static_cast<long>(CP_I + f0) * CP_H, n, n,
             wr + GU_ROWS * (CP_H / 256));
    } else if constexpr (KIND == DOWN) {
        const int r0 = part(CP_H, c, g), n = part(CP_H, c + 1, g) - r0;
        rows(Kind<DOWN_ROWS>{}, Kind<CP_I>{}, L.w_down + static_cast<long>(r0) * CP_I, n, 0, wr);
    } else {
        const int r0 = part(CP_V, c, g), n = part(CP_V, c + 1, g) - r0;
        rows(Kind<HEAD_ROWS>{}, Kind<CP_H>{}, p.head + static_cast<long>(r0) * CP_H, n, 0, wr);
    }
}

// wr's ROWS rows (K / 256 chunks a lane each) against xs (bf16 [K] in shared memory): the warp's sums, in every lane.
template <int ROWS, int K>
__device__ __forceinline__ void reg_dots(const uint4* wr, const bf16* xs, int lane, float (&out)[ROWS]) {
    const uint4* x4 = reinterpret_cast<const uint4*>(xs);
#pragma unroll
    for (int j = 0; j < ROWS; ++j) out[j] = 0.f;
#pragma unroll
    for (int i = 0; i < K / 256; ++i) {
        const uint4 xv = x4[lane + 32 * i];
#pragma unroll
        for (int j = 0; j < ROWS; ++j) out[j] += dot8(wr[j * (K / 256) + i], xv);
    }
#pragma unroll
    for (int j = 0; j < ROWS; ++j) out[j] = warp_sum(out[j]);
}

// ---- attention -----------------------------------------------------------------------------------------------------

// One butterfly round: a lane keeps the half of its HALF * 2 values that its lane bit (8 / HALF: 1, 2, 4, 8) names, and
// adds the partner lane's copy of that half to it. Templated so that every index is a constant: with the rounds as
// a loop (run 28's kernel) nvcc kept the 16 values in local memory (a 64-byte stack frame, ~240 local loads and
// stores).
template <int HALF>
__device__ __forceinline__ void butterfly_round(float (&v)[16], int lane) {
    const bool upper = lane & (8 / HALF);
#pragma unroll
    for (int i = 0; i < HALF; ++i) {
        const float send = upper ? v[i] : v[i + HALF];
        const float keep = upper ? v[i + HALF] : v[i];
        v[i] = keep + __shfl_xor_sync(FULL, send, 8 / HALF);
    }
}

// 16 per-lane partial sums (this lane's 4 dims of every position) -> the whole warp's sum for position
// `butterfly_position(lane)`, in 16 shuffles: each round halves the values a lane holds.
__device__ __forceinline__ float reduce_positions(float (&v)[16], int lane) {
    butterfly_round<8>(v, lane);
    butterfly_round<4>(v, lane);
    butterfly_round<2>(v, lane);
    butterfly_round<1>(v, lane);
    return v[0] + __shfl_xor_sync(FULL, v[0], 16);
}

__device__ __forceinline__ int butterfly_position(int lane) {
    return ((lane & 1) << 3) | ((lane & 2) << 1) | ((lane & 4) >> 1) | ((lane & 8) >> 3);
}

// bf16 [4] of a head at this lane's dims, RMS-normed with weight w (this lane's 4 weights and the partner lane's, the
// dims rotate_half brings here) and rotated: `qk_norm_rope_ref`'s rounding.
__device__ __forceinline__ void norm_rope(float (&x)[4], const float (&w)[4], const float (&c)[4], const float (&sn)[4],
                                          float eps, int lane) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) ss = fmaf(x[j], x[j], ss);
    const float r = rsqrtf(warp_sum(ss) / CP_D + eps);
    float n[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) n[j] = rb(rb(x[j] * r) * w[j]);
    const float sign = lane < 16 ? -1.f : 1.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float nr = __shfl_xor_sync(FULL, n[j], 16);  // dim d +- D/2 lives 16 lanes away
        x[j] = rb(rb(n[j] * c[j]) + rb(sign * nr * sn[j]));
    }
}

__device__ __forceinline__ void load4(const bf16* src, float (&out)[4]) {
    const uint2 u = __ldcg(reinterpret_cast<const uint2*>(src));
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
}

__device__ __forceinline__ void unpack4(uint2 u, float (&out)[4]) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
}

__device__ __forceinline__ uint2 pack4(const float (&v)[4]) {
    uint2 u;
    *reinterpret_cast<__nv_bfloat162*>(&u.x) = __floats2bfloat162_rn(v[0], v[1]);
    *reinterpret_cast<__nv_bfloat162*>(&u.y) = __floats2bfloat162_rn(v[2], v[3]);
    return u;
}

// The earlier positions' keys and values of this warp's kv head (written by earlier launches), this lane's 4 dims of
// each (zeros from `pos` on). In registers; with the weights in registers straight from global memory (CP_REG_WEIGHTS
// 1), which leave them too few, in shared memory instead, copied there by `cp.async` (no register holds them on the
// way), [HKV, P, 32 lanes] uint2.
#if CACHE_IN_SMEM
struct Cache {
    uint2* k;  // this lane's column: k[q * 32] is position q's 4 dims
    uint2* v;
};

__device__ __forceinline__ void copy8(uint2* dst, const void* src, bool real) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(real ? 8 : 0)
                 : "memory");
}

__device__ __forceinline__ void read_cache(const CpLayer& L, int pos, Cache& cache) {
    const int lane = threadIdx.x & 31, kvh = threadIdx.x >> 5;
    const long base = static_cast<long>(kvh) * CP_P * CP_D + lane * 4;
#pragma unroll
    for (int q = 0; q < CP_P; ++q) {
        copy8(cache.k + q * 32, L.k_cache + base + q * CP_D, q < pos);
        copy8(cache.v + q * 32, L.v_cache + base + q * CP_D, q < pos);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

__device__ __forceinline__ void cache_ready() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ uint2 cache_k(const Cache& cache, int q) { return cache.k[q * 32]; }
__device__ __forceinline__ uint2 cache_v(const Cache& cache, int q) { return cache.v[q * 32]; }
#else
struct Cache {
    uint2 k[CP_P];
    uint2 v[CP_P];
};

__device__ __forceinline__ void read_cache(const CpLayer& L, int pos, Cache& cache) {
    const int lane = threadIdx.x & 31, kvh = threadIdx.x >> 5;
    const long base = static_cast<long>(kvh) * CP_P * CP_D + lane * 4;
#pragma unroll
    for (int q = 0; q < CP_P; ++q) {
        cache.k[q] = make_uint2(0, 0);
        cache.v[q] = make_uint2(0, 0);
        if (q < pos) {
            cache.k[q] = *reinterpret_cast<const uint2*>(L.k_cache + base + q * CP_D);
            cache.v[q] = *reinterpret_cast<const uint2*>(L.v_cache + base + q * CP_D);
        }
    }
}

__device__ __forceinline__ void cache_ready() {}
__device__ __forceinline__ uint2 cache_k(const Cache& cache, int q) { return cache.k[q]; }
__device__ __forceinline__ uint2 cache_v(const Cache& cache, int q) { return cache.v[q]; }
#endif

// 4 values of the qkv product at idx: layer 0's from the table row (plain bf16, the draw's), later layers' tagged.
__device__ __forceinline__ void load_qkv4(const bf16* plain, const uint64_t* tagged, unsigned tag, int idx,
                                          float (&out)[4], unsigned* error) {
    if (tagged != nullptr) {
        tagged_read<4>(tagged + idx, tag, out, error);
    } else {
        load4(plain + idx, out);
    }
}

// Warp kvh: its GROUP query heads' attention over positions 0 .. pos -> xs [HQ D] (bf16, the o product's input); the
// new key (normed, rotated) and value into the cache by CTA 0. The qkv product: qkv0 (plain) or tagged with `tag`.
__device__ void attend(const CpPassParams& p, const CpLayer& L, const uint64_t* tagged, unsigned tag,
                       const Cache& cache, bf16* xs, uint64_t* stamp) {
    const int lane = threadIdx.x & 31, kvh = threadIdx.x >> 5, d0 = lane * 4;
    if (CP_NO_ATTN) {
        if (stamp) stamp[0] = stamp[1] = clock64();
        for (int i = threadIdx.x; i < CP_HQ * CP_D; i += THREADS) xs[i] = __float2bfloat16_rn(0.f);
        __syncthreads();
        return;
    }
    float c[4], sn[4], kw[4], qw[4];
    load4(p.cos + d0, c);
    load4(p.sin + d0, sn);
    load4(L.k_norm + d0, kw);
    load4(L.q_norm + d0, qw);
    // this warp's key and value and its GROUP queries, this lane's 4 dims of each
    const int at_k = (CP_HQ + kvh) * CP_D + d0, at_v = (CP_HQ + CP_HKV + kvh) * CP_D + d0;
    float k[4], v[4], qs[GROUP][4];
    if (tagged != nullptr && CP_ATT_ONE_POLL) {
        const uint64_t* at[(2 + GROUP) * 4];
        float got[(2 + GROUP) * 4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            at[j] = tagged + at_k + j;
            at[4 + j] = tagged + at_v + j;
#pragma unroll
            for (int g = 0; g < GROUP; ++g) at[8 + 4 * g + j] = tagged + (kvh * GROUP + g) * CP_D + d0 + j;
        }
        tagged_gather<(2 + GROUP) * 4>(at, tag, got, p.error);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            k[j] = got[j];
            v[j] = got[4 + j];
#pragma unroll
            for (int g = 0; g < GROUP; ++g) qs[g][j] = got[8 + 4 * g + j];
        }
    } else {  // layer 0's plain table row, or (CP_ATT_ONE_POLL 0) a poll each, one after another
        load_qkv4(p.qkv0, tagged, tag, at_k, k, p.error);
        load_qkv4(p.qkv0, tagged, tag, at_v, v, p.error);
#pragma unroll
        for (int g = 0; g < GROUP; ++g) load_qkv4(p.qkv0, tagged, tag, (kvh * GROUP + g) * CP_D + d0, qs[g], p.error);
    }
    if (stamp) stamp[0] = clock64();
    norm_rope(k, kw, c, sn, p.eps, lane);
    const int pos = p.pos;
    if (blockIdx.x == 0) {
        const long at = static_cast<long>(kvh) * CP_P * CP_D + static_cast<long>(pos) * CP_D + d0;
        *reinterpret_cast<uint2*>(L.k_cache + at) = pack4(k);
        *reinterpret_cast<uint2*>(L.v_cache + at) = pack4(v);
    }
    cache_ready();
    if (stamp) stamp[1] = clock64();
    const int mine = butterfly_position(lane);
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        const int h = kvh * GROUP + g;
        float q[4] = {qs[g][0], qs[g][1], qs[g][2], qs[g][3]};
        norm_rope(q, qw, c, sn, p.eps, lane);
#pragma unroll
        for (int j = 0; j < 4; ++j) q[j] *= p.scale;
        float part[CP_P];
#pragma unroll
        for (int t = 0; t < CP_P; ++t) {
            float kt[4];
            unpack4(cache_k(cache, t), kt);
            if (t == pos) {
#pragma unroll
                for (int j = 0; j < 4; ++j) kt[j] = k[j];
            }
            part[t] = q[0] * kt[0] + q[1] * kt[1] + q[2] * kt[2] + q[3] * kt[3];
        }
        float s = reduce_positions(part, lane);
        s = mine <= pos ? s : -INFINITY;
        float m = s;
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) m = fmaxf(m, __shfl_xor_sync(FULL, m, o));
        const float e = mine <= pos ? exp2f(s - m) : 0.f;
        float sum = e;
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) sum += __shfl_xor_sync(FULL, sum, o);
        float out[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int t = 0; t < CP_P; ++t) {
            // position t's weight lives in the lane whose butterfly position is t (the map is its own inverse)
            const float w = __shfl_sync(FULL, e, butterfly_position(t));
            float vt[4];
            unpack4(cache_v(cache, t), vt);
            if (t == pos) {
#pragma unroll
                for (int j = 0; j < 4; ++j) vt[j] = v[j];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) out[j] = fmaf(w, vt[j], out[j]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) out[j] = out[j] / sum;
        *reinterpret_cast<uint2*>(xs + h * CP_D + d0) = pack4(out);
    }
    __syncthreads();
}

// ---- the pass ------------------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(THREADS, 1) cp_pass(const __grid_constant__ CpPassParams p) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* slots = smem;                                          // the two weight slots
    bf16* xs_buf = reinterpret_cast<bf16*>(smem + p.cache_at + 2 * CP_HKV * CP_P * CP_D * 2);  // [2, XS_MAX] inputs
    float* red = reinterpret_cast<float*>(xs_buf + 2 * XS_MAX);           // [WARPS]
    uint64_t* bars = reinterpret_cast<uint64_t*>(red + 32);               // [2]
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int c = blockIdx.x, g = gridDim.x;
    if (g != CP_CTAS) {  // the register layout is compiled for this many CTAs
        if (t == 0) atomicExch(p.error, 1u);
        return;
    }
    uint64_t* trace = CP_TRACE && c == 0 && t == 0 ? p.trace + static_cast<long>(p.pos - 2) * TRACE_WORDS : nullptr;
    if (trace) {
        trace[0] = global_ns();
        trace[2] = clock64();
    }

    // before the wait for the launch before (the draw): constants and what earlier launches wrote
    const unsigned launch = __ldcg(p.launches);
    const unsigned tag0 = launch * STEPS + 1;  // step s's outputs carry tag0 + s
    uint4 wr[WREGS];
    if (CP_NO_WEIGHTS) {  // a bound's products multiply zeros (garbage registers could make the draws' scores NaN)
#pragma unroll
        for (int i = 0; i < WREGS; ++i) wr[i] = make_uint4(0, 0, 0, 0);
    }
    if (CP_REG_WEIGHTS == 1) {
        weights_to_regs<ATT>(p, 0, wr);
    } else {
        if (t == 0) {
            mbar_init(bars);
            mbar_init(bars + 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            issue_weights(p, 0, slots, bars);
            issue_weights(p, 1, slots, bars);
        }
        if (CP_REG_WEIGHTS == 2) {  // step 0's into registers, and its slot refilled with step 2's
            __syncthreads();          // the barriers' init
            mbar_wait(bars, 0);
            weights_to_regs<ATT>(p, 0, wr, reinterpret_cast<const bf16*>(slots));
            __syncthreads();
            if (t == 0) issue_weights(p, 2, slots, bars);
        }
    }
    if (CP_L2_AHEAD && t == 0) {
        for (int s = 1; s <= CP_L2_AHEAD; ++s) prefetch_weights_l2(p, s);  // steps 1 .. k ahead of step 0
    }
    Cache cache;
#if CACHE_IN_SMEM
    cache.k = reinterpret_cast<uint2*>(smem + p.cache_at) + warp * CP_P * 32 + lane;
    cache.v = cache.k + CP_HKV * CP_P * 32;
#endif
    read_cache(p.layer[0], p.pos, cache);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    __syncthreads();
    if (trace) trace[3] = clock64();

    // The residual stream: x_in (plain, the draw's) until layer 0's o product, then the tagged buffers in turn. o
    // writes one at step s (read by gate/up at s + 1, by down at s + 2), down the other (read by qkv and o), each
    // written again 4 steps later.
    const uint64_t* res = nullptr;
    unsigned res_tag = 0;
    int flip = 0;
    const int h0 = part(CP_H, c, g), hn = part(CP_H, c + 1, g) - h0;  // this CTA's rows of o and down

    // Step s, of kind KIND (a compile-time constant: each kind's code and registers are its own), layer l.
    auto step = [&](auto kind_c, int s, int l) {
        constexpr int kind = decltype(kind_c)::value;
        const unsigned tag = tag0 + s, before = tag - 1;  // this step's outputs, the step before's
        const CpLayer& L = p.layer[l];
        // with the weights in registers no barrier ends a step: its input goes to the other buffer than the last's
        bf16* xs = xs_buf + (CP_REG_WEIGHTS == 1 ? (s & 1) * XS_MAX : 0);
        uint64_t* stamp = trace ? trace + 4 + TRACE_STEP * s : nullptr;
        if (kind == ATT && s > 0) read_cache(L, p.pos, cache);  // earlier launches wrote it
        if (kind == HEAD) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        // o and down add the residual's word of each row to their product: the warp's first row's, written two steps
        // before (the step before read it whole), is loaded now, before the wait (CP_EARLY_RES)
        float res_plain = 0.f;
        uint64_t res_word = 0;
        if (CP_EARLY_RES && (kind == ATT || kind == DOWN) && lane == 0 && warp < hn) {
            if (res == nullptr) {
                res_plain = __bfloat162float(__ldcg(p.x_in + h0 + warp));
            } else {
                res_word = tagged_word(res + h0 + warp);
            }
        }
        auto residual = [&](int r) -> float {
            if (res == nullptr) {
                return CP_EARLY_RES && r == warp ? res_plain : __bfloat162float(__ldcg(p.x_in + h0 + r));
            }
            if (CP_EARLY_RES && r == warp) return tagged_value(res_word, res + h0 + r, res_tag, p.error);
            float v[1];
            tagged_read<1>(res + h0 + r, res_tag, v, p.error);
            return v[0];
        };
        const bf16* w = reinterpret_cast<const bf16*>(slots + ((s & 1) ? p.slot1_at : 0));
        auto weights_ready = [&]() {
            if (stamp) stamp[2] = clock64();
            if (!CP_REG_WEIGHTS) mbar_wait(bars + (s & 1), (s >> 1) & 1);
            if (stamp) stamp[3] = clock64();
        };
        // o and down: this CTA's rows of a K-wide product (ROWS a warp at most, in registers) plus the residual, into
        // the residual buffer not being read, which becomes the residual stream
        auto add_to_residual = [&](auto rows_c, auto k_c) {
            constexpr int ROWS = decltype(rows_c)::value, K = decltype(k_c)::value;
            uint64_t* out = flip ? p.res1 : p.res0;
            if (CP_REG_WEIGHTS) {
                float y[ROWS];
                reg_dots<ROWS, K>(wr, xs, lane, y);
#pragma unroll
                for (int j = 0; j < ROWS; ++j) {
                    const int r = warp + j * WARPS;
                    if (lane == 0 && r < hn) tagged_store(out + h0 + r, rb(residual(r) + rb(y[j])), tag);
                }
            } else {
                for (int r = warp; r < hn; r += WARPS) {
                    const float y = warp_dot<K>(w + r * K, xs, lane);
                    if (lane == 0) tagged_store(out + h0 + r, rb(residual(r) + rb(y)), tag);
                }
            }
            res = out;
            res_tag = tag;
            flip ^= 1;
        };
        if (CP_EMPTY_STEPS) {
        } else if constexpr (kind == QKV) {
            load_x<CP_H>(res, res_tag, L.ln_in, p.eps, xs, red, p.error, stamp);
            weights_ready();
            const int r0 = part(QKV_N, c, g), n = part(QKV_N, c + 1, g) - r0;
            if (CP_REG_WEIGHTS) {
                float y[QKV_ROWS];
                reg_dots<QKV_ROWS, CP_H>(wr, xs, lane, y);
#pragma unroll
                for (int j = 0; j < QKV_ROWS; ++j) {
                    if (lane == 0 && warp + j * WARPS < n) tagged_store(p.qkv + r0 + warp + j * WARPS, rb(y[j]), tag);
                }
            } else {
                for (int r = warp; r < n; r += 2 * WARPS) {
                    if (r + WARPS < n) {
                        const float2 y = warp_dot2<CP_H>(w + r * CP_H, w + (r + WARPS) * CP_H, xs, lane);
                        if (lane == 0) {
                            tagged_store(p.qkv + r0 + r, rb(y.x), tag);
                            tagged_store(p.qkv + r0 + r + WARPS, rb(y.y), tag);
                        }
                    } else {
                        const float y = warp_dot<CP_H>(w + r * CP_H, xs, lane);
                        if (lane == 0) tagged_store(p.qkv + r0 + r, rb(y), tag);
                    }
                }
            }
        } else if constexpr (kind == ATT) {
            attend(p, L, l == 0 ? nullptr : p.qkv, before, cache, xs, stamp);
            weights_ready();
            add_to_residual(Kind<O_ROWS>{}, Kind<CP_HQ * CP_D>{});
        } else if constexpr (kind == GU) {
            load_x<CP_H>(res, res_tag, L.ln_post, p.eps, xs, red, p.error, stamp);
            weights_ready();
            const int f0 = part(CP_I, c, g), n = part(CP_I, c + 1, g) - f0;
            auto swiglu = [&](int f, float gate_dot, float up_dot) {
                const float gate = rb(gate_dot);
                const float a = rb(gate / (1.f + __expf(-gate)));
                tagged_store(p.act + f0 + f, rb(a * rb(up_dot)), tag);
            };
            if (CP_REG_WEIGHTS) {
                float y[2 * GU_ROWS];
                reg_dots<2 * GU_ROWS, CP_H>(wr, xs, lane, y);
#pragma unroll
                for (int j = 0; j < GU_ROWS; ++j) {
                    if (lane == 0 && warp + j * WARPS < n) swiglu(warp + j * WARPS, y[j], y[GU_ROWS + j]);
                }
            } else {
                for (int f = warp; f < n; f += WARPS) {
                    const float2 y = warp_dot2<CP_H>(w + f * CP_H, w + (n + f) * CP_H, xs, lane);
                    if (lane == 0) swiglu(f, y.x, y.y);
                }
            }
        } else if constexpr (kind == DOWN) {
            load_x<CP_I>(p.act, before, nullptr, p.eps, xs, red, p.error, stamp);
            weights_ready();
            add_to_residual(Kind<DOWN_ROWS>{}, Kind<CP_I>{});
        } else {
            load_x<CP_H>(res, res_tag, p.norm, p.eps, xs, red, p.error, stamp);
            weights_ready();
            const int r0 = part(CP_V, c, g), n = part(CP_V, c + 1, g) - r0;
            if (CP_REG_WEIGHTS) {
                float y[HEAD_ROWS];
                reg_dots<HEAD_ROWS, CP_H>(wr, xs, lane, y);
#pragma unroll
                for (int j = 0; j < HEAD_ROWS; ++j) {
                    if (lane == 0 && warp + j * WARPS < n) p.logits[r0 + warp + j * WARPS] = __float2bfloat16_rn(y[j]);
                }
            } else {
                for (int r = warp; r < n; r += WARPS) {
                    const float y = warp_dot<CP_H>(w + r * CP_H, xs, lane);
                    if (lane == 0) p.logits[r0 + r] = __float2bfloat16_rn(y);
                }
            }
        }
        if (CP_REG_WEIGHTS) {  // the next step's weights into registers, while it waits for its input
            const bf16* slot = nullptr;  // from global memory, or (2) from step s + 1's slot
            if (CP_REG_WEIGHTS == 2 && kind != HEAD) {
                mbar_wait(bars + ((s + 1) & 1), ((s + 1) >> 1) & 1);
                slot = reinterpret_cast<const bf16*>(slots + (((s + 1) & 1) ? p.slot1_at : 0));
            }
            if constexpr (kind == ATT) {
                weights_to_regs<GU>(p, l, wr, slot);
            } else if constexpr (kind == GU) {
                weights_to_regs<DOWN>(p, l, wr, slot);
            } else if constexpr (kind == QKV) {
                weights_to_regs<ATT>(p, l, wr, slot);
            } else if constexpr (kind == DOWN) {
                if (l + 1 < CP_L) {
                    weights_to_regs<QKV>(p, l + 1, wr, slot);
                } else {
                    weights_to_regs<HEAD>(p, 0, wr, slot);
                }
            }
        }
        if (CP_REG_WEIGHTS != 1) __syncthreads();  // the slot is read (2: step s + 1's, moved to registers)
        if (t == 0) {
            if (CP_REG_WEIGHTS == 0) issue_weights(p, s + 2, slots, bars);
            if (CP_REG_WEIGHTS == 2) issue_weights(p, s + 3, slots, bars);  // into step s + 1's slot
            if (CP_L2_AHEAD) prefetch_weights_l2(p, s + 1 + CP_L2_AHEAD);  // the far edge: k steps past the next
            // every CTA has read `launch`: this head step read every CTA's last down outputs
            if (kind == HEAD && c == 0) atomicExch(p.launches, launch + 1);
        }
        if (stamp) stamp[4] = clock64();
    };

    step(Kind<ATT>{}, 0, 0);  // layer 0: its qkv product is the table row
    step(Kind<GU>{}, 1, 0);
    step(Kind<DOWN>{}, 2, 0);
    for (int l = 1; l < CP_L; ++l) {
        const int s = 4 * l - 1;
        step(Kind<QKV>{}, s, l);
        step(Kind<ATT>{}, s + 1, l);
        step(Kind<GU>{}, s + 2, l);
        step(Kind<DOWN>{}, s + 3, l);
    }
    step(Kind<HEAD>{}, STEPS - 1, 0);
    if (trace) trace[1] = global_ns();
}
