// One row of x times a weight matrix on the tensor cores, for the code predictor's batch-1 passes: the products of
// kernels/gemv.py's whole-row PDL kernel (`_gemv_rows_kernel`) with its fusions (the RMSNorm before, the residual add
// or SwiGLU after, the attention + o launch's fixed-point sum added to x or to the residual).
//
// Why: in a batch-1 pass every product's work after its PDL wait lands on all SMs at once, and the Triton kernel's is
// ~970 instructions a thread (compiled offline): each weight converted to fp32, FMUL + FADD trees, 9 block-wide
// reductions. A gate/up launch puts ~12 of its 2-warp programs on an SM, ~11,000 warp-instructions, ~2,800 issue cycles
// (1.4 µs) after the wait. Here a warp's weights stay packed bf16 in registers as the A operand of
// `mma.sync.m16n8k16` (16 weight rows by 16 columns), x is the B operand (every one of its 8 columns the same x,
// output column 0 used), and the tensor core does the multiply and the sum over K: ~16 MMAs and a few dozen other
// instructions a warp after the wait, and two barriers a CTA (the norm's sum of squares, the warps' partial products).
// The order of the columns inside a dot product is free, so a lane's 16-byte load of 8 consecutive weights of a row
// feeds two MMAs as it is, and x is laid out to match (`x_fragment`).
//
// A CTA: 16 weight rows (mode 0 / 1: output features f0 .. f0 + 15; mode 2: the gate rows of features f0 .. f0 + 7
// in A's rows 0-7 and their up rows in 8-15, so one lane holds a feature's gate and up sums), K / KW warps, warp w
// the columns w KW .. w KW + KW - 1. Lane (g, c) = (lane / 4, lane % 4) holds A's rows g and g + 8: for each 32-column
// block j of its warp's columns, the 8 weights at j 32 + c 8 of both rows (A's fragment of two MMAs).
//
// Rounding is the reference's, as gemv.py's kernels round: x plus the fixed-point delta rounded to bf16 and added,
// the norm rounded twice (`rms_norm_ref`), the product rounded to bf16, then the residual add or SwiGLU rounded as
// torch rounds them. The tensor core's fp32 sum runs in its own order (a few outputs may differ by one bf16 ulp from
// the Triton kernel's or cuBLAS'); the order is fixed, so a replay gives the same bits.
//
// Shapes as macros (kernels/cp_gemv.py compiles one cubin a product): CG_K columns, CG_KW columns a warp, CG_MODE 0
// plain, 1 + residual, 2 SwiGLU; CG_NORM 1: RMSNorm of x with ln first; CG_DELTA 1: x (modes 0, 2) or the residual
// (mode 1) plus the int64 multiples of 2^-32 at delta (kernels/cp_attention_o.py's o_sum), a residual's delta zeroed
// once read. CG_ROWS 1 builds `cp_gemm_rows` (below) instead of `cp_gemv`: CG_NT tiles of 8 rows of x, a CTA CG_RB
// blocks of 16 rows of w on the columns of one of CG_SPLIT slices of K (KW may then be any multiple of 32), with the
// norm (CG_NORM) or the residual add (mode 1) of its own.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if !defined(CG_K) || !defined(CG_MODE)
#error "cp_gemv.cu needs CG_K and CG_MODE"
#endif
#ifndef CG_KW
#define CG_KW 256
#endif
#ifndef CG_NORM
#define CG_NORM 0
#endif
#ifndef CG_DELTA
#define CG_DELTA 0
#endif
#ifndef CG_ROWS
#define CG_ROWS 0
#endif
#ifndef CG_NT
#define CG_NT 1  // `cp_gemm_rows`: 8-row tiles of x (up to 8 CG_NT rows)
#endif
#ifndef CG_SPLIT
#define CG_SPLIT 1  // `cp_gemm_rows`: slices of K, a CTA each
#endif
#ifndef CG_RB
#define CG_RB 1  // `cp_gemm_rows`: 16-row blocks of w a CTA
#endif
#ifndef CG_STAGES
#define CG_STAGES 1  // `cp_gemm_rows`: groups of x's columns copied in turn, each one's products begun once it is in
#endif
#ifndef CG_BOUND
#define CG_BOUND 0  // experiments only (wrong results, bench/latency_cuda.py): 1 the norm's arithmetic left out
#endif

constexpr int K = CG_K;
constexpr int KW = CG_KW;
constexpr int MODE = CG_MODE;
constexpr bool NORM = CG_NORM != 0;
constexpr bool DELTA = CG_DELTA != 0;
constexpr int SPLIT = CG_SPLIT;
constexpr int CTA_K = K / SPLIT;  // a CTA's columns
constexpr int RB = CG_RB;  // `cp_gemm_rows`: 16-row blocks of w a CTA, whose warps share x's copy
constexpr int WARPS_K = CTA_K / KW;  // warps along a block's columns
constexpr int WARPS = WARPS_K * RB;
constexpr int THREADS = WARPS * 32;
constexpr int J = KW / 32;       // 32-column blocks of a warp's columns: 2 MMAs each
constexpr int GROUPS = KW / 256;  // `cp_gemv`: x's 8-column groups a lane loads (its warp's columns over 32 lanes)
constexpr int CHAINS = J < 2 ? 2 * J : 4;  // independent MMA accumulators (the tensor core's latency hidden)
constexpr int NT = CG_NT;
constexpr unsigned FULL = 0xffffffffu;
static_assert(KW % 32 == 0 && SPLIT * CTA_K == K && WARPS_K * KW == CTA_K && THREADS <= 1024,
              "K whole warps of KW columns");
static_assert(CG_ROWS || (KW % 256 == 0 && SPLIT == 1 && RB == 1), "cp_gemv: KW a multiple of 256, one block");
static_assert(MODE >= 0 && MODE <= 2, "mode 0 plain, 1 residual, 2 SwiGLU");
static_assert(!(NORM && MODE == 1), "a residual product takes no norm (the o and down products)");
static_assert((2 * J) % CHAINS == 0, "MMAs spread over the chains evenly");
static_assert(NT >= 1 && NT <= 8, "1-8 tiles of 8 rows of x (the accumulators stay in registers)");
constexpr int TILE_CHAINS = NT < 4 ? 2 : 1;  // `cp_gemm_rows`: accumulator chains a tile (the MMAs' latency hidden)
constexpr int STAGES = CG_STAGES;
static_assert(STAGES >= 1 && STAGES <= 4 && J % STAGES == 0, "1-4 stages, each whole blocks of 32 columns");

struct CpGemvParams {
    const __nv_bfloat16* x;         // [K]
    const __nv_bfloat16* w;         // [N, K] (mode 2: gate rows 0 .. n_out - 1, up rows n_out .. 2 n_out - 1)
    const __nv_bfloat16* ln;        // [K] (CG_NORM)
    const __nv_bfloat16* residual;  // [n_out] (mode 1)
    long long* delta;               // CG_DELTA: [K] added to x (modes 0, 2) or [n_out] to the residual (mode 1)
    __nv_bfloat16* y;               // [n_out]; `cp_gemm_rows` [m, n_out], with CG_SPLIT > 1 fp32 partials
    int n_out;
    float eps;
    int early;           // 1: the next launch may start before this one's wait (PDL_EARLY), else after it
    int residual_early;  // mode 1: the residual and its delta read before the wait (written two launches back or more)
    int m;               // `cp_gemm_rows`: rows of x and y (at most 8 CG_NT)
    long long x_stride;  // `cp_gemm_rows`: elements between rows of x, of y
    long long y_stride;
    long long r_stride;  // `cp_gemm_rows` mode 1: elements between rows of the residual
};

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// int64 multiples of 2^-32 -> fp32 holding the value rounded to bf16 (backend.from_fixed)
__device__ __forceinline__ float from_fixed(long long q) { return round_bf16(__ll2float_rn(q) * 2.3283064365386963e-10f); }

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}

// mode 1: residual f plus its delta, as the reference rounds the sum (gemv's `residual_of`)
__device__ __forceinline__ float read_residual(const CpGemvParams& p, int f) {
    float r = __bfloat162float(p.residual[f]);
    if constexpr (DELTA) r = round_bf16(r + from_fixed(p.delta[f]));
    return r;
}

// D += A B: A the 16 x 16 weight fragment (a0-a3), B the 16 x 8 x fragment (b0, b1), D fp32 16 x 8.
__device__ __forceinline__ void mma(float d[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

// A warp's weight fragments of 16-row block `block`, loaded before the wait (constants): lane (g, c) holds A's rows g
// and g + 8 (mode 2: the gate and up rows of feature block 8 + g), block j: columns col0 + 32 j + 8 c .. + 7.
__device__ __forceinline__ void load_weights(const CpGemvParams& p, int block, int g, int c, int col0, uint4 (&wa)[J],
                                             uint4 (&wb)[J]) {
    const long long row_g = MODE == 2 ? (long long)block * 8 + g : (long long)block * 16 + g;
    const long long row_g8 = MODE == 2 ? row_g + p.n_out : row_g + 8;
#pragma unroll
    for (int j = 0; j < J; ++j) {
        wa[j] = *reinterpret_cast<const uint4*>(p.w + row_g * K + col0 + 32 * j + 8 * c);
        wb[j] = *reinterpret_cast<const uint4*>(p.w + row_g8 * K + col0 + 32 * j + 8 * c);
    }
}

// 16 bytes from global to shared memory, asynchronously (cached in L1: the CTAs of an SM read the same x)
__device__ __forceinline__ void copy_async(uint4* to, const __nv_bfloat16* from) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(to));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(from) : "memory");
}

// Until at most `pending` groups of this thread's copies are in flight (an immediate operand: unrolled callers).
__device__ __forceinline__ void wait_copies(int pending) {
    switch (pending) {
        case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
        case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
        case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
        default: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    }
}

// The PDL wait for the launch ahead; early: the next launch may start before it (PDL_EARLY), else after it.
__device__ __forceinline__ void pdl_wait(int early) {
    if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

#if !CG_ROWS
extern "C" __global__ void __launch_bounds__(THREADS) cp_gemv(const CpGemvParams p) {
    __shared__ __align__(16) __nv_bfloat16 xs[K];  // x as the products take it (normed, rounded), for B's layout
    __shared__ float partial[WARPS][16];           // each warp's sums of the 16 rows
    __shared__ float squares[WARPS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int col0 = warp * KW;

    // Before the wait, what no launch ahead writes: the weights (constants), the norm's weights, and with
    // residual_early a residual's row with its delta (the launch ahead has passed its own wait on them).
    uint4 wa[J], wb[J];
    load_weights(p, blockIdx.x, g, c, col0, wa, wb);
    float ln[GROUPS][8];
    if constexpr (NORM) {
#pragma unroll
        for (int q = 0; q < GROUPS; ++q) {
            const uint4 raw = *reinterpret_cast<const uint4*>(p.ln + col0 + 8 * (lane + 32 * q));
            const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
            for (int i = 0; i < 8; ++i) ln[q][i] = __bfloat162float(v[i]);
        }
    }
    const int out_row = threadIdx.x;  // modes 0 / 1: threads 0-15 finish rows 0-15
    float residual = 0.f;
    if constexpr (MODE == 1) {
        if (out_row < 16 && p.residual_early) residual = read_residual(p, blockIdx.x * 16 + out_row);
    }
    pdl_wait(p.early);

    // x into shared memory as the products take it: lane l of warp w holds groups l + 32 q of its 8 columns.
    if constexpr (NORM || (DELTA && MODE != 1)) {
        float v[GROUPS][8];
        float ss = 0.f;
#pragma unroll
        for (int q = 0; q < GROUPS; ++q) {
            const int at = col0 + 8 * (lane + 32 * q);
            const uint4 raw = *reinterpret_cast<const uint4*>(p.x + at);
            const __nv_bfloat16* xv = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
            for (int i = 0; i < 8; ++i) v[q][i] = __bfloat162float(xv[i]);
            if constexpr (DELTA && MODE != 1) {
#pragma unroll
                for (int i = 0; i < 8; i += 2) {
                    const longlong2 d = *reinterpret_cast<const longlong2*>(p.delta + at + i);
                    v[q][i] = round_bf16(v[q][i] + from_fixed(d.x));
                    v[q][i + 1] = round_bf16(v[q][i + 1] + from_fixed(d.y));
                }
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) ss = fmaf(v[q][i], v[q][i], ss);
        }
        if constexpr (NORM) {
            ss = warp_sum(ss);
            if (lane == 0) squares[warp] = ss;
            __syncthreads();
            float total = 0.f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) total += squares[w];
            const float inv = rsqrtf(total / K + p.eps);
#pragma unroll
            for (int q = 0; q < GROUPS; ++q)
#pragma unroll
                for (int i = 0; i < 8; ++i) v[q][i] = round_bf16(ln[q][i] * round_bf16(v[q][i] * inv));
        }
#pragma unroll
        for (int q = 0; q < GROUPS; ++q) {
            uint4 packed;
            packed.x = pack_bf16(v[q][0], v[q][1]);
            packed.y = pack_bf16(v[q][2], v[q][3]);
            packed.z = pack_bf16(v[q][4], v[q][5]);
            packed.w = pack_bf16(v[q][6], v[q][7]);
            *reinterpret_cast<uint4*>(xs + col0 + 8 * (lane + 32 * q)) = packed;
        }
        __syncwarp();
    }

    // The products: block j's 8 columns of lane (g, c) are two MMAs' k pairs (2c, 2c + 1) and (2c + 8, 2c + 9), in
    // A and B alike; every lane's B column is the same x.
    float acc[CHAINS][4];
#pragma unroll
    for (int i = 0; i < CHAINS; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const int at = col0 + 32 * j + 8 * c;
        uint4 b;
        if constexpr (NORM || (DELTA && MODE != 1)) {
            b = *reinterpret_cast<const uint4*>(xs + at);
        } else {
            b = *reinterpret_cast<const uint4*>(p.x + at);
        }
        mma(acc[(2 * j) % CHAINS], wa[j].x, wb[j].x, wa[j].y, wb[j].y, b.x, b.y);
        mma(acc[(2 * j + 1) % CHAINS], wa[j].z, wb[j].z, wa[j].w, wb[j].w, b.z, b.w);
    }
    float top = 0.f, bottom = 0.f;  // rows g and g + 8 (D's column 2c: every column holds the same sums)
#pragma unroll
    for (int i = 0; i < CHAINS; ++i) {
        top += acc[i][0];
        bottom += acc[i][2];
    }
    if (c == 0) {
        partial[warp][g] = top;
        partial[warp][g + 8] = bottom;
    }
    __syncthreads();

    // The epilogue: the warps' sums added in warp order, rounded as the reference rounds, stored.
    if constexpr (MODE == 2) {
        if (threadIdx.x < 8) {
            const int r = threadIdx.x;
            float gate = 0.f, up = 0.f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) {
                gate += partial[w][r];
                up += partial[w][r + 8];
            }
            const float gr = round_bf16(gate);
            const float act = round_bf16(gr / (1.f + expf(-gr)));
            p.y[blockIdx.x * 8 + r] = __float2bfloat16_rn(act * round_bf16(up));
        }
    } else {
        if (out_row < 16) {
            const int r = out_row;
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) sum += partial[w][r];
            float out = round_bf16(sum);
            const int f = blockIdx.x * 16 + r;
            if constexpr (MODE == 1) {
                if (!p.residual_early) residual = read_residual(p, f);
                out = residual + out;
                if constexpr (DELTA) p.delta[f] = 0;
            }
            p.y[f] = __float2bfloat16_rn(out);
        }
    }
}

#endif

// Rows 1 .. 8 NT of x (`cp_gemm_rows`, CG_ROWS: the code predictor's passes of 2-64 token rows). The same weight
// fragments; B's column n of tile t is x's row 8 t + n (rows past m repeat x's last row, and their D columns are not
// read), so D's columns are x's rows: lane (g, c) holds weight rows g and g + 8 against x's rows 8 t + 2c, 8 t + 2c + 1.
// Each tile keeps two accumulator chains (one from 4 tiles).
// A CTA: CG_RB blocks of 16 rows of w on CTA_K = K / CG_SPLIT of the columns (blockIdx.y the slice), a warp a block and
// KW columns. Its warps on the same columns share one copy of x in shared memory, so L2 sends each SM 2 / CG_RB bytes
// of x a byte of weights at 32 rows. Every fragment of x is copied at once after the wait (cp.async), one round trip to
// L2: loaded as the MMAs go (ptxas spreads plain loads between the MMAs whatever their order in the source), they
// cost ~8 round trips in a row at 4 tiles and lose to cuBLAS at 32 rows.
// The norms of a pass need no launches of their own (a norm launch is ~2.4 µs of a ~29 µs layer at 32 rows):
// - CG_NORM (one slice: the CTA holds x's whole rows): x is the residual stream, RMS-normalised in shared memory
//   before the products, each row's sum of squares added up from its fragments. Every CTA redoes it (all of x: 32K
//   values at 32 rows, ~400 instructions a thread), so it loses to the norm launch at 8 and 32 rows (the runner does not use it);
// - mode 1: y = residual + the product, rounded as the reference rounds `x + o_proj(...)`. With CG_SPLIT > 1 the
//   CG_SPLIT CTAs of a column of w are one thread block cluster (kernels/cp_gemv.py launches it so): each leaves its
//   slice's sums in its shared memory, and the first reads the others' there (distributed shared memory: no round
//   trip to L2) and adds them in slice order (kernels/rms_norm.py `partials_sum_ref`'s order) and the residual.
// Mode 0 with CG_SPLIT > 1: y is the fp32 partial sums [CG_SPLIT, m, n_out] (the norm after o and down sums them,
// kernels/rms_norm.py), else the bf16 product.
#if CG_ROWS
static_assert(!DELTA && !(NORM && MODE == 1), "the rows kernel: no delta; a norm before plain or SwiGLU products");
static_assert(SPLIT == 1 || MODE != 2, "split-K slices of plain or residual products only (SwiGLU takes whole sums)");
static_assert(!NORM || (SPLIT == 1 && STAGES == 1), "the norm takes x's whole rows, copied at once");
constexpr int SQ_ROWS = 8 * NT;  // CG_NORM: the rows of each warp column's sums of squares
// CG_NORM: the fragments of x this thread copied, RMS-normalised in place as `rms_norm_ref` rounds them (ln[4 j]: the
// norm's weights of its columns col0 + 32 j + 8 c). A row's sum of squares: this thread's 8 J columns, then the row's 4
// lanes (c), then the WARPS_K warps' columns in order; so every CTA, and every replay, sums a row alike.
__device__ __forceinline__ void normalize_rows(const CpGemvParams& p, uint4* staged, const uint4* ln,
                                               float (*squares)[SQ_ROWS], int rb, int wk, int g, int c) {
    wait_copies(0);
    if constexpr (CG_BOUND == 1) {
        __syncthreads();
        return;
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        if (t % RB != rb) continue;  // the same for the whole warp
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const uint4 v = staged[(t * J + j) * 32];
            const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = __bfloat1622float2(h[i]);
                ss = fmaf(f.y, f.y, fmaf(f.x, f.x, ss));
            }
        }
        ss += __shfl_xor_sync(FULL, ss, 1);
        ss += __shfl_xor_sync(FULL, ss, 2);
        if (c == 0) squares[wk][8 * t + g] = ss;
    }
    __syncthreads();  // the sums of squares, and the norm's weights copied by the warps of block 0
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        if (t % RB != rb) continue;
        float total = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS_K; ++w) total += squares[w][8 * t + g];
        const float inv = rsqrtf(total / K + p.eps);
#pragma unroll
        for (int j = 0; j < J; ++j) {
            uint4 v = staged[(t * J + j) * 32];
            const uint4 weight = ln[4 * j];
            __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
            const __nv_bfloat162* lw = reinterpret_cast<const __nv_bfloat162*>(&weight);
#pragma unroll
            for (int i = 0; i < 4; ++i) {  // round(ln round(x inv)): ln's product with a bf16 is exact before rounding
                const float2 f = __bfloat1622float2(h[i]);
                h[i] = __hmul2(lw[i], __floats2bfloat162_rn(f.x * inv, f.y * inv));
            }
            staged[(t * J + j) * 32] = v;
        }
    }
    __syncthreads();  // every normalised fragment, for the warps of the other blocks
}

extern "C" __global__ void __launch_bounds__(THREADS) cp_gemm_rows(const CpGemvParams p) {
    // Dynamic shared memory (kernels/cp_gemv.py `rows_shared`): x's fragments [WARPS_K][NT][J][32 lanes], then the
    // warps' sums [WARPS][16][8 NT + 1] (+1: the epilogue's reads down a column hit 16 banks); with CG_NORM then the
    // norm's weights of the CTA's columns [CTA_K] and the sums of squares [WARPS_K][8 NT].
    extern __shared__ __align__(16) uint4 x_stage[];
    float(*partial)[16][8 * NT + 1] = reinterpret_cast<float(*)[16][8 * NT + 1]>(x_stage + WARPS_K * NT * J * 32);
    uint4* ln_stage = reinterpret_cast<uint4*>(&partial[WARPS][0][0]);
    float(*squares)[SQ_ROWS] = reinterpret_cast<float(*)[SQ_ROWS]>(ln_stage + CTA_K / 8);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int rb = warp / WARPS_K, wk = warp % WARPS_K;  // the warp's block of rows, its columns
    const int col0 = blockIdx.y * CTA_K + wk * KW;
    uint4 wa[J], wb[J];
    load_weights(p, blockIdx.x * RB + rb, g, c, col0, wa, wb);
    if constexpr (NORM) {  // the norm's weights (constants) in their own group, before the wait
        if (rb == 0)
            for (int i = lane; i < KW / 8; i += 32) copy_async(ln_stage + wk * KW / 8 + i, p.ln + col0 + 8 * i);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    pdl_wait(p.early);
    constexpr int FEATURES = MODE == 2 ? 8 : 16;  // a block's
    constexpr int ITER = (FEATURES * RB * 8 * NT + THREADS - 1) / THREADS;  // the epilogue's outputs a thread at most
    const int outputs = FEATURES * RB * p.m, f0 = blockIdx.x * FEATURES * RB;  // the CTA's, its first feature
    float residual[MODE == 1 ? ITER : 1];  // mode 1: the epilogue's residuals, read while the products run
    if constexpr (MODE == 1) {
        if (blockIdx.y == 0) {
#pragma unroll
            for (int i = 0; i < ITER; ++i) {
                const int o = threadIdx.x + i * THREADS;
                const int f = o % (FEATURES * RB), xr = o / (FEATURES * RB);
                if (o < outputs) residual[i] = __bfloat162float(p.residual[xr * p.r_stride + f0 + f]);
            }
        }
    }

    // x's fragments as lane (g, c) of any warp on these columns takes them: copied asynchronously all at once (the
    // tiles shared out among the RB warps on the same columns; ptxas issues plain loads a few at a time between the
    // MMAs, however they are written), in STAGES groups of columns j, each group's MMAs started once it is in.
    uint4* staged = x_stage + wk * NT * J * 32 + lane;
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t % RB != rb) continue;
            const int row = min(8 * t + g, p.m - 1);  // rows past m repeat the last: their D columns are not read
            const __nv_bfloat16* x = p.x + (long long)row * p.x_stride + col0 + 8 * c;
#pragma unroll
            for (int j = s * J / STAGES; j < (s + 1) * J / STAGES; ++j)
                copy_async(staged + (t * J + j) * 32, x + 32 * j);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    if constexpr (NORM) normalize_rows(p, staged, ln_stage + wk * KW / 8 + c, squares, rb, wk, g, c);
    float acc[NT][TILE_CHAINS][4];
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[t][0][i] = acc[t][TILE_CHAINS - 1][i] = 0.f;
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
        if constexpr (!NORM) {
            wait_copies(STAGES - 1 - s);
            if constexpr (RB > 1) __syncthreads();
        }
#pragma unroll
        for (int j = s * J / STAGES; j < (s + 1) * J / STAGES; ++j)
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const uint4 b = staged[(t * J + j) * 32];
                mma(acc[t][0], wa[j].x, wb[j].x, wa[j].y, wb[j].y, b.x, b.y);
                mma(acc[t][TILE_CHAINS - 1], wa[j].z, wb[j].z, wa[j].w, wb[j].w, b.z, b.w);
            }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        float sum[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sum[i] = acc[t][0][i];
            if constexpr (TILE_CHAINS == 2) sum[i] += acc[t][TILE_CHAINS - 1][i];
        }
        partial[warp][g][8 * t + 2 * c] = sum[0];
        partial[warp][g][8 * t + 2 * c + 1] = sum[1];
        partial[warp][g + 8][8 * t + 2 * c] = sum[2];
        partial[warp][g + 8][8 * t + 2 * c + 1] = sum[3];
    }
    __syncthreads();

    // An output a thread at a time: (x row, feature of the CTA's RB blocks), the sums of the warps on the feature's
    // block added in warp order.
    constexpr bool SLICES = MODE == 1 && SPLIT > 1;  // the cluster's first CTA finishes the residual add
    static_assert(!SLICES || CTA_K * 8 * NT * 2 >= FEATURES * RB * 8 * NT * 4, "the slice's sums fit x's stage");
    float* sums = reinterpret_cast<float*>(x_stage);  // SLICES: [outputs], x's stage read by every MMA already
#pragma unroll
    for (int i = 0; i < ITER; ++i) {
        const int o = threadIdx.x + i * THREADS;
        if (o >= outputs) break;
        const int f = o % (FEATURES * RB), xr = o / (FEATURES * RB);
        const int r = f % FEATURES, first = f / FEATURES * WARPS_K;
        float sum = 0.f, up = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS_K; ++w) {
            sum += partial[first + w][r][xr];
            if constexpr (MODE == 2) up += partial[first + w][r + 8][xr];
        }
        const long long at = xr * p.y_stride + f0 + f;
        if constexpr (SLICES) {
            sums[o] = sum;
        } else if constexpr (SPLIT > 1) {
            reinterpret_cast<float*>(p.y)[blockIdx.y * p.m * p.y_stride + at] = sum;
        } else {
            float out = round_bf16(sum);
            if constexpr (MODE == 2) out = round_bf16(out / (1.f + expf(-out))) * round_bf16(up);
            if constexpr (MODE == 1) out = residual[i] + out;
            p.y[at] = __float2bfloat16_rn(out);
        }
    }
    if constexpr (SLICES) {
        namespace cg = cooperative_groups;
        const cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();  // every slice's sums in its CTA's shared memory
        if (cluster.block_rank() == 0) {
            const float* slice[SPLIT];
#pragma unroll
            for (int s = 0; s < SPLIT; ++s) slice[s] = cluster.map_shared_rank(sums, s);
#pragma unroll
            for (int i = 0; i < ITER; ++i) {
                const int o = threadIdx.x + i * THREADS;
                if (o >= outputs) break;
                float sum = 0.f;
#pragma unroll
                for (int s = 0; s < SPLIT; ++s) sum += slice[s][o];
                const int f = o % (FEATURES * RB), xr = o / (FEATURES * RB);
                p.y[xr * p.y_stride + f0 + f] = __float2bfloat16_rn(residual[i] + round_bf16(sum));
            }
        }
        cluster.sync();  // the other CTAs' shared memory kept until the first has read it
    }
}
#endif
