// A decode step's attention on the CPU: one query token per row, G query heads per key/value head,
// against that row's own keys and values (arft/cpu/build.py builds this file into its own library).
//
// PyTorch's CPU flash-attention kernel runs a decode step as small matrix products of G (here 3)
// query rows, which reads a row's keys and values at half the bandwidth this loop reaches. Here
// each (row, key/value head) is one task: its G queries stream the keys and values once, 16
// columns a block (the next block's keys prefetched), with an online softmax in float32; blocks whose columns are all masked are
// not read (a row's holes). The state may start from an earlier part's output and log-sum-exp
// (the shared prefix, read once for all rows), so the merge of the two parts happens here too.
// bfloat16 runs its products on AVX512-BF16 (vdpbf16ps: the probabilities are rounded to
// bfloat16 for the value product, as PyTorch's kernel does), float32 on AVX-512F, or on AVX2
// (decode_attention_avx2.cpp) where there is no AVX-512. Built without any of them,
// arft_decode_attention_caps() says so and the caller keeps PyTorch's kernel.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "arft_cpu.h"
#include "vec.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#define ARFT_F32 1
#else
#define ARFT_F32 0
#endif
#if ARFT_F32 && defined(__AVX512BF16__)
#define ARFT_BF16 1
#else
#define ARFT_BF16 0
#endif

namespace {
#if ARFT_F32
constexpr int BLOCK = 16;

inline __m512 reduce16(const __m512* a) {  // lane j: the sum of a[j]'s lanes
    __m512 x[8], u[4], w[2];
    for (int i = 0; i < 8; i++)
        x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d p = _mm512_castps_pd(x[2 * i]), q = _mm512_castps_pd(x[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p, q)), _mm512_castpd_ps(_mm512_unpackhi_pd(p, q)));
    }
    for (int i = 0; i < 2; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

template <bool BF16> inline float scalar(const void* base, int64_t i) {
    if constexpr (BF16) {
        uint32_t u = (uint32_t)((const uint16_t*)base)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    } else {
        return ((const float*)base)[i];
    }
}

template <bool BF16> inline __m512 load_mask(const void* mask, int64_t off, __mmask16 live) {
    if constexpr (BF16) {
        __m256i raw = _mm256_maskz_loadu_epi16(live, (const uint16_t*)mask + off);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    } else {
        return _mm512_maskz_loadu_ps(live, (const float*)mask + off);
    }
}

// The accumulator's order of a head's D values: float32 keeps it; bfloat16's pair interleave
// (vpunpck{l,h}wd within 128-bit lanes) puts d = 32c + 8l + m (+4 for the high half) at lane
// 4l + m of vector 2c (2c + 1).
template <bool BF16> inline int slot(int d) {
    if constexpr (BF16) {
        int c = d / 32, l = (d % 32) / 8, m = d % 8;
        return (2 * c + m / 4) * 16 + 4 * l + m % 4;
    } else {
        return d;
    }
}

template <bool BF16, int G, int D> struct Head {
    static constexpr int NACC = D / 16;
    __m512 acc[G][NACC];
    float mx[G], sum[G];

    // Start from an earlier part (its output o and log-sum-exp lse), or from nothing.
    void seed(const void* prior, int64_t p_off, int64_t p_sg, const float* lse, int64_t l_off, int64_t l_sg) {
        for (int i = 0; i < G; i++) {
            alignas(64) float buf[D];
            float l = lse ? lse[l_off + i * l_sg] : -INFINITY;
            for (int d = 0; d < D; d++) buf[slot<BF16>(d)] = l == -INFINITY ? 0.0f : scalar<BF16>(prior, p_off + i * p_sg + d);
            for (int c = 0; c < NACC; c++) acc[i][c] = _mm512_load_ps(buf + 16 * c);
            mx[i] = l;
            sum[i] = l == -INFINITY ? 0.0f : 1.0f;
        }
    }

    // The softmax of a block's scores (part: each column's partial products, add: the mask):
    // rescales the state (acc: the caller's copy of it, kept in registers) to the new maximum;
    // p: the block's weights. false: nothing to add.
    bool softmax(const __m512 (*part)[BLOCK], __m512 add, __mmask16 live, float scale, __m512* p,
                 __m512 (*acc)[NACC]) {
        const __m512 ninf = _mm512_set1_ps(-INFINITY);
        bool any = false;
        for (int i = 0; i < G; i++) {
            __m512 sc = _mm512_mask_blend_ps(live, ninf, _mm512_fmadd_ps(reduce16(part[i]), _mm512_set1_ps(scale), add));
            float top = _mm512_reduce_max_ps(sc);
            if (top == -INFINITY) {
                p[i] = _mm512_setzero_ps();
                continue;
            }
            any = true;
            if (top > mx[i]) {
                float c0 = mx[i] == -INFINITY ? 0.0f : expf(mx[i] - top);
                sum[i] *= c0;
                for (int c = 0; c < NACC; c++) acc[i][c] = _mm512_mul_ps(acc[i][c], _mm512_set1_ps(c0));
                mx[i] = top;
            }
            p[i] = arft_exp(_mm512_sub_ps(sc, _mm512_set1_ps(mx[i])));
            sum[i] += _mm512_reduce_add_ps(p[i]);
        }
        return any;
    }

    void finish(void* out, float* lse) {
        for (int i = 0; i < G; i++) {
            alignas(64) float buf[D];
            float inv = sum[i] > 0.0f ? 1.0f / sum[i] : 0.0f;
            for (int c = 0; c < NACC; c++) _mm512_store_ps(buf + 16 * c, _mm512_mul_ps(acc[i][c], _mm512_set1_ps(inv)));
            alignas(64) float row[D];
            for (int d = 0; d < D; d++) row[d] = buf[slot<BF16>(d)];
            for (int c = 0; c < NACC; c++) {
                __m512 x = _mm512_load_ps(row + 16 * c);
                if constexpr (BF16) {
#if ARFT_BF16
                    _mm256_storeu_si256((__m256i*)((uint16_t*)out + i * D + 16 * c), (__m256i)_mm512_cvtneps_pbh(x));
#endif
                } else {
                    _mm512_storeu_ps((float*)out + i * D + 16 * c, x);
                }
            }
            if (lse) lse[i] = sum[i] > 0.0f ? mx[i] + logf(sum[i]) : -INFINITY;
        }
    }
};

// The products of one dtype: a key's partial dot products with the G queries (16 lanes each,
// summed by reduce16), and a block's weighted values added to the accumulator.
template <bool BF16, int G, int D> struct Products;

template <int G, int D> struct Products<false, G, D> {
    using T = float;
    static constexpr int C = D / 16;
    __m512 qv[G][C];
    explicit Products(const T* q, int64_t q_sg) {
        for (int i = 0; i < G; i++)
            for (int c = 0; c < C; c++) qv[i][c] = _mm512_loadu_ps(q + i * q_sg + 16 * c);
    }
    void key(const T* row, __m512 (*part)[BLOCK], int j) const {
        __m512 kr[C];
        for (int c = 0; c < C; c++) kr[c] = _mm512_loadu_ps(row + 16 * c);
        for (int i = 0; i < G; i++) {
            __m512 d = _mm512_mul_ps(qv[i][0], kr[0]);
            for (int c = 1; c < C; c++) d = _mm512_fmadd_ps(qv[i][c], kr[c], d);
            part[i][j] = d;
        }
    }
    static void values(__m512 (*acc)[D / 16], const __m512* p, const T* v, int64_t v_st, int n) {
        alignas(64) float pf[G][BLOCK];
        for (int i = 0; i < G; i++) _mm512_store_ps(pf[i], p[i]);
        for (int j = 0; j < n; j++) {
            __m512 vr[C];
            for (int c = 0; c < C; c++) vr[c] = _mm512_loadu_ps(v + j * v_st + 16 * c);
            for (int i = 0; i < G; i++) {
                __m512 w = _mm512_set1_ps(pf[i][j]);
                for (int c = 0; c < C; c++) acc[i][c] = _mm512_fmadd_ps(w, vr[c], acc[i][c]);
            }
        }
    }
};

#if ARFT_BF16
template <int G, int D> struct Products<true, G, D> {
    using T = uint16_t;
    static constexpr int C = D / 32;  // 32 bfloat16 a vector
    __m512bh qv[G][C];
    explicit Products(const T* q, int64_t q_sg) {
        for (int i = 0; i < G; i++)
            for (int c = 0; c < C; c++) qv[i][c] = (__m512bh)_mm512_loadu_si512(q + i * q_sg + 32 * c);
    }
    void key(const T* row, __m512 (*part)[BLOCK], int j) const {
        __m512bh kr[C];
        for (int c = 0; c < C; c++) kr[c] = (__m512bh)_mm512_loadu_si512(row + 32 * c);
        for (int i = 0; i < G; i++) {
            __m512 d = _mm512_dpbf16_ps(_mm512_setzero_ps(), qv[i][0], kr[0]);
            for (int c = 1; c < C; c++) d = _mm512_dpbf16_ps(d, qv[i][c], kr[c]);
            part[i][j] = d;
        }
    }
    // Two columns a step: their values interleaved in pairs (the accumulator's order, ``slot``).
    static void values(__m512 (*acc)[D / 16], const __m512* p, const T* v, int64_t v_st, int n) {
        alignas(64) uint16_t pb[G][BLOCK];
        for (int i = 0; i < G; i++) _mm256_store_si256((__m256i*)pb[i], (__m256i)_mm512_cvtneps_pbh(p[i]));
        for (int j = 0; j < n; j += 2) {
            const T* a = v + j * v_st;
            __m512i vp[2 * C];
            for (int c = 0; c < C; c++) {
                __m512i x = _mm512_loadu_si512(a + 32 * c);
                __m512i y = j + 1 < n ? _mm512_loadu_si512(a + v_st + 32 * c) : _mm512_setzero_si512();
                vp[2 * c] = _mm512_unpacklo_epi16(x, y);
                vp[2 * c + 1] = _mm512_unpackhi_epi16(x, y);
            }
            for (int i = 0; i < G; i++) {
                uint32_t pair;
                memcpy(&pair, &pb[i][j], 4);  // pb[i][n] (past the end of a short block) is 0
                __m512bh w = (__m512bh)_mm512_set1_epi32((int)pair);
                for (int c = 0; c < 2 * C; c++) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], (__m512bh)vp[c], w);
            }
        }
    }
};
#endif

// One (row, key/value head): its queries over the columns [0, t), 16 a block; a block whose
// columns are all masked (a hole) is not read.
template <bool BF16, int G, int D>
void stream(Head<BF16, G, D>& h, const void* q, int64_t q_sg, const void* k, int64_t k_st, const void* v,
            int64_t v_st, const void* mask, int64_t t, float scale) {
    using P = Products<BF16, G, D>;
    using T = typename P::T;
    constexpr int LINES = D * (int)sizeof(T) / 64;
    const P products((const T*)q, q_sg);
    const T *keys = (const T*)k, *values = (const T*)v;
    __m512 acc[G][D / 16];  // the state's accumulator, kept in registers
    memcpy(acc, h.acc, sizeof acc);
    for (int64_t t0 = 0; t0 < t; t0 += BLOCK) {
        int n = t - t0 < BLOCK ? (int)(t - t0) : BLOCK;
        __mmask16 live = (__mmask16)((1u << n) - 1);
        __m512 add = _mm512_setzero_ps();
        if (mask) {
            add = load_mask<BF16>(mask, t0, live);
            if (!_mm512_mask_cmp_ps_mask(live, add, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ)) continue;
        }
        __m512 part[G][BLOCK];
        for (int j = 0; j < BLOCK; j++) {
            if (j >= n) {
                for (int i = 0; i < G; i++) part[i][j] = _mm512_setzero_ps();
                continue;
            }
            for (int c = 0; c < LINES; c++) {  // the next block's keys and this block's values on their way
                _mm_prefetch((const char*)(keys + (t0 + j + BLOCK) * k_st) + 64 * c, _MM_HINT_T0);
                _mm_prefetch((const char*)(values + (t0 + j) * v_st) + 64 * c, _MM_HINT_T0);
            }
            products.key(keys + (t0 + j) * k_st, part, j);
        }
        __m512 p[G];
        if (h.softmax(part, add, live, scale, p, acc)) P::values(acc, p, values + t0 * v_st, v_st, n);
    }
    memcpy(h.acc, acc, sizeof acc);
}

struct Args {
    const void *q, *k, *v, *mask, *prior;
    const float* prior_lse;
    void* out;
    float* lse;
    int64_t q_sb, q_sh, q_sg, k_sb, k_sh, k_st, v_sb, v_sh, v_st, m_sb, p_sb, p_sh, p_sg, l_sb, l_sh, l_sg;
    int64_t b, h, t;
    float scale;
};

template <bool BF16, int G, int D> void run(const Args& a, int threads) {
    constexpr int64_t E = BF16 ? 2 : 4;  // bytes an element
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t task = 0; task < a.b * a.h; task++) {
        int64_t r = task / a.h, y = task % a.h;
        Head<BF16, G, D> head;
        head.seed(a.prior, r * a.p_sb + y * a.p_sh, a.p_sg, a.prior_lse, r * a.l_sb + y * a.l_sh, a.l_sg);
        const char* q = (const char*)a.q + E * (r * a.q_sb + y * a.q_sh);
        const char* k = (const char*)a.k + E * (r * a.k_sb + y * a.k_sh);
        const char* v = (const char*)a.v + E * (r * a.v_sb + y * a.v_sh);
        const void* mask = a.mask ? (const char*)a.mask + E * r * a.m_sb : nullptr;
        stream<BF16, G, D>(head, q, a.q_sg, k, a.k_st, v, a.v_st, mask, a.t, a.scale);
        head.finish((char*)a.out + E * task * G * D, a.lse ? a.lse + task * G : nullptr);
    }
}

template <bool BF16, int G> bool by_dim(const Args& a, int64_t d, int threads) {
    if (d == 32) run<BF16, G, 32>(a, threads);
    else if (d == 64) run<BF16, G, 64>(a, threads);
    else if (d == 128) run<BF16, G, 128>(a, threads);
    else return false;
    return true;
}

template <bool BF16> bool by_group(const Args& a, int64_t g, int64_t d, int threads) {
    switch (g) {
        case 1: return by_dim<BF16, 1>(a, d, threads);
        case 2: return by_dim<BF16, 2>(a, d, threads);
        case 3: return by_dim<BF16, 3>(a, d, threads);
        case 4: return by_dim<BF16, 4>(a, d, threads);
        case 5: return by_dim<BF16, 5>(a, d, threads);
        case 6: return by_dim<BF16, 6>(a, d, threads);
        case 7: return by_dim<BF16, 7>(a, d, threads);
        case 8: return by_dim<BF16, 8>(a, d, threads);
        default: return false;
    }
}
#endif
}  // namespace

// Bit 0: float32 is supported, bit 1: bfloat16. Without AVX-512 neither: the AVX2 library
// (decode_attention_avx2.cpp) runs float32 where it loads (arft.cpu.kernels chooses).
extern "C" int arft_decode_attention_caps() { return ARFT_F32 | (ARFT_BF16 << 1); }

// q [B, H, G, D], k and v [B, H, T, D], mask [B, T] (additive, or null), prior [B, H, G, D] (or
// null) in bfloat16 (bf16 = 1) or float32, each with the strides given (in elements; the last
// dimension contiguous); prior_lse [B, H, G] float32 with its strides. Writes out [B, H, G, D] (contiguous, the
// inputs' dtype) and lse [B, H, G] (contiguous float32, or null). 0: done; 1: not supported here.
extern "C" int arft_decode_attention(const void* q, int64_t q_sb, int64_t q_sh, int64_t q_sg, const void* k,
                                     int64_t k_sb, int64_t k_sh, int64_t k_st, const void* v, int64_t v_sb,
                                     int64_t v_sh, int64_t v_st, const void* mask, int64_t m_sb, const void* prior,
                                     int64_t p_sb, int64_t p_sh, int64_t p_sg, const float* prior_lse, int64_t l_sb,
                                     int64_t l_sh, int64_t l_sg, void* out, float* lse, int64_t b, int64_t h, int64_t g, int64_t t,
                                     int64_t d, float scale, int bf16, int threads) {
#if ARFT_F32
    Args a{q, k, v, mask, prior, prior_lse, out, lse, q_sb, q_sh, q_sg, k_sb, k_sh, k_st, v_sb, v_sh, v_st,
           m_sb, p_sb, p_sh, p_sg, l_sb, l_sh, l_sg, b, h, t, scale};
    if (threads < 1) threads = 1;
#if ARFT_BF16
    if (bf16) return by_group<true>(a, g, d, threads) ? 0 : 1;
#else
    if (bf16) return 1;
#endif
    return by_group<false>(a, g, d, threads) ? 0 : 1;
#else
    (void)q; (void)q_sb; (void)q_sh; (void)q_sg; (void)k; (void)k_sb; (void)k_sh; (void)k_st; (void)v; (void)v_sb;
    (void)v_sh; (void)v_st; (void)mask; (void)m_sb; (void)prior; (void)p_sb; (void)p_sh; (void)p_sg; (void)prior_lse;
    (void)l_sb; (void)l_sh; (void)l_sg; (void)out; (void)lse; (void)b; (void)h; (void)g; (void)t; (void)d;
    (void)scale; (void)bf16; (void)threads;
    return 1;
#endif
}
