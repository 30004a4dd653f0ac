// The code predictor's draw (a codebook 1-15 id a row) as one CTA a row, its block-wide sums in single barriers.
//
// Why: the Triton draw (kernels/sample.py `_draw`) takes ~8 µs back to back (the top-k search
// ~4.0 of it, the weighted pick ~1.4, the gathers ~0.8), its time in block-wide reductions, ~20 of them, each a tree
// of shuffles, a shared-memory round trip and a broadcast. Here a reduction is a warp's `redux.sync` (one instruction
// for an int sum, min or max) or five shuffles for a float, one word a warp in shared memory and one barrier
// (`Exchange`); the top-k search cuts the value range into 8 parts a pass (7 counts in one exchange), so 3 passes
// narrow it 512-fold (the Triton draw's 10 halvings 1,024-fold), and the walk after them takes the rest: the
// code-predictor frame 0.010-0.018 ms shorter at batches 1-32; in the frame PDL hides most of a draw (its bounds,
// CD_BOUND: a draw that only read the logits would leave the batch-1 frame at 1.321 ms against 1.365-1.373).
//
// What a row computes is the Triton draw's, for the code predictor's codebooks (no repetition penalty, EOS or
// suppression: those are codebook 0's, which stays on the Triton kernel):
//   s = logits / temperature (IEEE division, as torch divides);
//   top-k (0 < k < V): the scores >= the k-th largest, found exactly: passes keep count(s >= lo) >= k > count(s >= hi)
//     over [lo, hi), then the window left is walked down by distinct values until k scores are reached (ties at once);
//   top-p (< 1): the largest order key whose ascending mass stays within (1 - top_p) of the total, by bisection over
//     int64 keys (34 exchanges: rare settings pay for it, the default 1.0 skips it);
//   the pick: the inverse CDF in id order at the counter uniform of (seed, frame, codebook)
//     (`sampling.counter_uniform`, bit for bit), the CDF an fp32 scan in id order (summed in another order than the
//     Triton draw's or torch's: an id can differ only where the uniform falls within rounding of a CDF boundary);
//   greedy rows (do_sample 0): the first id of the largest score, exact.
// Then the picked id's rows of up to two tables are copied to the next pass's inputs (the projected embedding and the
// first layer's qkv row), every load issued before any store.
//
// Shapes as macros (kernels/cp_draw.py compiles this per model): CD_V codes a row, CD_THREADS threads a CTA; a thread
// holds CD_V / CD_THREADS consecutive ids (a multiple of 8: one 16-byte load of bf16 logits each 8).

#include <cuda_bf16.h>
#include <stdint.h>

#if !defined(CD_V)
#error "cp_draw.cu needs CD_V"
#endif
#ifndef CD_THREADS
#define CD_THREADS 256
#endif
#ifndef CD_PASSES
#define CD_PASSES 3  // top-k's 8-way passes over the value range before the walk (3 beat 4 and 5 in the frame)
#endif
// Bounds for benchmarks, never for use (wrong ids): CD_BOUND 1 no top-k or top-p (every id kept), 2 no draw at all (id
// 0 for every row after the logits are read), 3 as 2 without the gathers.
#ifndef CD_BOUND
#define CD_BOUND 0
#endif

constexpr int V = CD_V;
constexpr int THREADS = CD_THREADS;
constexpr int WARPS = THREADS / 32;
constexpr int PER = V / THREADS;  // ids a thread: t * PER .. t * PER + PER - 1
constexpr int WAYS = 8;
constexpr unsigned FULL = 0xffffffffu;
static_assert(PER * THREADS == V && PER % 8 == 0 && PER <= 32, "a thread holds a multiple of 8 ids, at most 32");
static_assert(THREADS % 32 == 0 && WARPS <= 32, "whole warps, at most 32");
static_assert(V < 65536, "a count fits 16 bits (two in a word)");

struct CpDrawParams {
    const __nv_bfloat16* logits;  // [B, V], row stride logits_stride
    long long logits_stride;
    const unsigned char* do_sample;  // [B] bool
    const float* temperature;        // [B]
    const long long* top_k;          // [B], 0: off
    const float* top_p;              // [B], 1: off
    const long long* seed;           // [B]
    const long long* frame;          // [B]
    long long* out;                  // [B] ids, stride out_stride
    long long out_stride;
    const __nv_bfloat16* table;  // [V, dim]: row id -> x (the next pass's input); dim 0: no gather
    __nv_bfloat16* x;
    long long x_stride;
    const __nv_bfloat16* table2;  // [V, dim2] -> x2 (the next pass's first-layer qkv product); dim2 0: none
    __nv_bfloat16* x2;
    long long x2_stride;
    int dim;
    int dim2;
    int codebook;
    int early;  // 1: the next launch may start before this one's wait (PDL_EARLY), else after it
};

__device__ __forceinline__ int order_key(float s) {  // fp32 -> int32 with the same order
    const int bits = __float_as_int(s);
    return bits < 0 ? bits ^ 0x7fffffff : bits;
}

__device__ __forceinline__ float key_value(int key) { return __int_as_float(key < 0 ? key ^ 0x7fffffff : key); }

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Block-wide reductions: a warp's value in one word of shared memory, one barrier, every thread reads all WARPS words
// and combines them in warp order (the same result in every thread). Two buffers alternate, so a round's words are not
// overwritten before every thread has read them (a thread writes round r + 2's only after round r + 1's barrier).
// Every thread counts the exchanges it has made in a register of its own (`Round`): all run the same sequence.
struct Exchange {
    int word[2][WARPS][4];
    float real[2][WARPS];
};

struct Round {
    Exchange& x;
    int n;
};

__device__ __forceinline__ void sum4(Round& x, int v[4]) {  // four int sums at once
    const int warp = threadIdx.x / 32;
    int* w = x.x.word[x.n & 1][warp];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __reduce_add_sync(FULL, v[i]);
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = v[i];
    }
    __syncthreads();
    int (*all)[4] = x.x.word[x.n++ & 1];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = 0;
    for (int k = 0; k < WARPS; ++k) {
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] += all[k][i];
    }
}

__device__ __forceinline__ int sum1(Round& x, int v) {
    int four[4] = {v, 0, 0, 0};
    sum4(x, four);
    return four[0];
}

// min of a, max of b (ints), in one exchange
__device__ __forceinline__ void min_max(Round& x, int& a, int& b) {
    const int warp = threadIdx.x / 32;
    a = __reduce_min_sync(FULL, a);
    b = __reduce_max_sync(FULL, b);
    if (threadIdx.x % 32 == 0) {
        x.x.word[x.n & 1][warp][0] = a;
        x.x.word[x.n & 1][warp][1] = b;
    }
    __syncthreads();
    int (*all)[4] = x.x.word[x.n++ & 1];
    a = all[0][0];
    b = all[0][1];
    for (int k = 1; k < WARPS; ++k) {
        a = min(a, all[k][0]);
        b = max(b, all[k][1]);
    }
}

__device__ __forceinline__ int max1(Round& x, int v) {
    int lo = v, hi = v;
    min_max(x, lo, hi);
    return hi;
}

__device__ __forceinline__ float sum_real(Round& x, float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    if (threadIdx.x % 32 == 0) x.x.real[x.n & 1][threadIdx.x / 32] = v;
    __syncthreads();
    const float* all = x.x.real[x.n++ & 1];
    float total = 0.f;
    for (int k = 0; k < WARPS; ++k) total += all[k];
    return total;
}

// The k-th largest of the row's finite scores (k < their count; else the least of them): `_top_k_window`'s kept set.
__device__ __forceinline__ float top_k_threshold(Round& x, const float (&s)[PER], int k, float lo, float hi) {
    for (int pass = 0; pass < CD_PASSES; ++pass) {
        float t[WAYS + 1];
#pragma unroll
        for (int j = 0; j <= WAYS; ++j) t[j] = lo * (1.f - j / float(WAYS)) + hi * (j / float(WAYS));
        t[WAYS] = hi;
        int c[4] = {0, 0, 0, 0};  // counts of s >= t[1..7], two to a word
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const bool fin = s[i] > -INFINITY;
#pragma unroll
            for (int j = 1; j < WAYS; ++j) c[(j - 1) / 2] += int(fin && s[i] >= t[j]) << (16 * ((j - 1) % 2));
        }
        sum4(x, c);
        // count(s >= lo) >= k > count(s >= hi): the largest cut with k or more above it is the new lo, the next the
        // new hi (whatever the cuts' rounding, the invariant holds, and with it lo < hi)
        float new_lo = lo, new_hi = t[1];
#pragma unroll
        for (int j = 1; j < WAYS; ++j) {
            if (((c[(j - 1) / 2] >> (16 * ((j - 1) % 2))) & 0xffff) >= k) {
                new_lo = t[j];
                new_hi = t[j + 1];
            }
        }
        lo = new_lo;
        hi = new_hi;
    }
    int above = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) above += int(s[i] > -INFINITY && s[i] >= hi);
    int need = k - sum1(x, above);
    float kth = hi;
    while (need > 0 && kth > lo) {  // the window's scores, by distinct value, down from hi
        int below = INT_MIN;
#pragma unroll
        for (int i = 0; i < PER; ++i)
            if (s[i] > -INFINITY && s[i] < kth) below = max(below, order_key(s[i]));
        const int next = max1(x, below);
        if (next == INT_MIN) break;  // nothing finite below: every finite score is kept
        kth = key_value(next);
        int equal = 0;
#pragma unroll
        for (int i = 0; i < PER; ++i) equal += int(s[i] == kth);
        need -= sum1(x, equal);
    }
    return kth;
}

// Top-p over the kept scores (-inf: dropped): the Triton draw's bisection over int64 order keys.
__device__ __forceinline__ void top_p_filter(Round& x, float (&s)[PER], float top_p, int kept_max_key) {
    const float m = key_value(kept_max_key);
    float e[PER];
    long long key[PER];
    float mass = 0.f;
    int kmin = INT_MAX, kmax = INT_MIN;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        e[i] = s[i] > -INFINITY ? __expf(s[i] - m) : 0.f;
        mass += e[i];
        key[i] = order_key(s[i]);
        kmin = min(kmin, int(key[i]));
        kmax = max(kmax, int(key[i]));
    }
    const float budget = (1.f - top_p) * sum_real(x, mass);
    min_max(x, kmin, kmax);
    long long lo = (long long)kmin - 1, hi = kmax;
    for (int pass = 0; pass < 34; ++pass) {  // the largest key whose ascending mass (keys <= it) fits the budget
        const long long mid = lo + (hi - lo + 1) / 2;
        float part = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) part += key[i] <= mid ? e[i] : 0.f;
        const bool fits = sum_real(x, part) <= budget;
        lo = fits ? mid : lo;
        hi = fits ? hi : mid - 1;
    }
#pragma unroll
    for (int i = 0; i < PER; ++i)
        if (key[i] <= lo) s[i] = -INFINITY;
}

// Row `id`'s columns of a [V, dim] table to out: every thread's 16-byte loads issued before its stores.
template <int MAX_PER_THREAD>
__device__ __forceinline__ void gather_rows(const CpDrawParams& p, int row, long long id) {
    const int n1 = p.dim / 8, n2 = p.dim2 / 8;  // 16-byte words
    const uint4* t1 = reinterpret_cast<const uint4*>(p.table + id * p.dim);
    const uint4* t2 = reinterpret_cast<const uint4*>(p.table2 + id * p.dim2);
    uint4* o1 = reinterpret_cast<uint4*>(p.x + row * p.x_stride);
    uint4* o2 = reinterpret_cast<uint4*>(p.x2 + row * p.x2_stride);
    for (int first = 0; first < n1 + n2; first += MAX_PER_THREAD * THREADS) {
        uint4 v[MAX_PER_THREAD];
#pragma unroll
        for (int i = 0; i < MAX_PER_THREAD; ++i) {
            const int w = first + i * THREADS + threadIdx.x;
            if (w < n1) v[i] = t1[w];
            else if (w < n1 + n2) v[i] = t2[w - n1];
        }
#pragma unroll
        for (int i = 0; i < MAX_PER_THREAD; ++i) {
            const int w = first + i * THREADS + threadIdx.x;
            if (w < n1) o1[w] = v[i];
            else if (w < n1 + n2) o2[w - n1] = v[i];
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) cp_draw(const CpDrawParams p) {
    __shared__ Exchange exchange;
    Round x{exchange, 0};
    const int row = blockIdx.x;
    // The row's settings were written at the step's start, many launches back: read before the wait, they arrive while
    // the logits' launch finishes.
    const bool sample = p.do_sample[row] != 0;
    const float temperature = p.temperature[row];
    const long long top_k = p.top_k[row];
    const float top_p = p.top_p[row];
    const unsigned long long seed = (unsigned long long)p.seed[row];
    const unsigned long long frame = (unsigned long long)p.frame[row];
    if (p.early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!p.early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

    const int first = threadIdx.x * PER;
    float s[PER];
#pragma unroll
    for (int i = 0; i < PER; i += 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(p.logits + row * p.logits_stride + first + i);
        const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(pair[j]);
            s[i + 2 * j] = f.x;
            s[i + 2 * j + 1] = f.y;
        }
    }

    long long code;
    if (CD_BOUND >= 2) {
        code = s[0] == 12345.f;  // 0 unless a score is exactly that: the logits' load is kept
        if (CD_BOUND == 3) {
            if (threadIdx.x == 0) p.out[row * p.out_stride] = code;
            return;
        }
    } else if (!sample) {
        int best = INT_MIN;
#pragma unroll
        for (int i = 0; i < PER; ++i) best = max(best, order_key(s[i]));
        best = max1(x, best);
        int at = V, unused = INT_MIN;
#pragma unroll
        for (int i = PER - 1; i >= 0; --i)
            if (order_key(s[i]) == best) at = first + i;
        min_max(x, at, unused);  // the first id holding it
        code = at;
    } else {
        int lo_key = INT_MAX, hi_key = INT_MIN;  // over the finite scores
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            s[i] = __fdiv_rn(s[i], temperature);
            if (s[i] > -INFINITY) {
                lo_key = min(lo_key, order_key(s[i]));
                hi_key = max(hi_key, order_key(s[i]));
            }
        }
        min_max(x, lo_key, hi_key);
        if (top_k > 0 && top_k < V && hi_key != INT_MIN && CD_BOUND == 0) {
            const float kth = top_k_threshold(x, s, int(top_k), key_value(lo_key), key_value(hi_key));
#pragma unroll
            for (int i = 0; i < PER; ++i)
                if (!(s[i] >= kth)) s[i] = -INFINITY;
        }
        if (top_p < 1.f && CD_BOUND == 0) {
            top_p_filter(x, s, top_p, hi_key);  // top-k keeps the largest score: the shift is the row's max
            int unused = INT_MAX, kept_max = INT_MIN;
#pragma unroll
            for (int i = 0; i < PER; ++i)
                if (s[i] > -INFINITY) kept_max = max(kept_max, order_key(s[i]));
            min_max(x, unused, kept_max);
            hi_key = kept_max;
        }
        // The CDF in id order: a thread's running sum, shifted by the earlier threads' and warps' totals.
        const float m = key_value(hi_key);
        float cdf[PER], run = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            run += s[i] > -INFINITY ? __expf(s[i] - m) : 0.f;
            cdf[i] = run;
        }
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        float incl = run;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float up = __shfl_up_sync(FULL, incl, o);
            if (lane >= o) incl += up;
        }
        if (lane == 31) exchange.real[x.n & 1][warp] = incl;
        __syncthreads();
        const float* totals = exchange.real[x.n++ & 1];
        float before = incl - run, total = 0.f;
        for (int k = 0; k < WARPS; ++k) {
            if (k < warp) before += totals[k];
            total += totals[k];
        }
        const unsigned long long h = splitmix64(splitmix64(splitmix64(seed) ^ frame) ^ (unsigned long long)p.codebook);
        const double u = double(h >> 11) * (1.0 / 9007199254740992.0);
        const float target = float(u * double(total));
        int below = 0;  // ids whose CDF is <= the target: up to the picked id
#pragma unroll
        for (int i = 0; i < PER; ++i) below += int(before + cdf[i] <= target);
        const int idx = min(sum1(x, below), V - 1);
        // Rounding at the top of the CDF can point past the last kept id: the last kept id at or before idx.
        int pick = -1, unused = INT_MAX;
#pragma unroll
        for (int i = 0; i < PER; ++i)
            if (s[i] > -INFINITY && first + i <= idx) pick = first + i;
        min_max(x, unused, pick);
        code = pick;
    }
    if (threadIdx.x == 0) p.out[row * p.out_stride] = code;
    if (p.dim + p.dim2 > 0) gather_rows<4>(p, row, code);
}
