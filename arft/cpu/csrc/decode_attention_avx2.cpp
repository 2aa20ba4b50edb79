// decode_attention.cpp's kernel for CPUs with AVX2 and FMA but no AVX-512 (most laptops, AMD Zen 2
// and 3): float32 only, 8 columns a block, the same online softmax, hole skipping and prior merge.
// Its own library, built on every CPU; where AVX-512 is there, decode_attention.cpp runs its own and
// this is a stub.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "arft_cpu.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#if !(defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)) && defined(__AVX2__) && defined(__FMA__)
#define ARFT_AVX2 1
#else
#define ARFT_AVX2 0
#endif

#if ARFT_AVX2
namespace {
constexpr int BLOCK = 8;

inline __m256 exp8(__m256 x) {  // exp(x) (Cephes' polynomial): 0 below -87.3, inf above 88.7, NaN for NaN
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.72283f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), over);
    return _mm256_blendv_ps(y, x, nan);
}

inline __m256 reduce8(const __m256* a) {  // lane j: the sum of a[j]'s lanes
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // [a0..a3 | a0..a3] halves, [a4..a7 | ..]
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

inline float hsum8(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float hmax8(__m256 x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

struct Args {
    const float *q, *k, *v, *mask, *prior, *prior_lse;
    float *out, *lse;
    int64_t q_sb, q_sh, q_sg, k_sb, k_sh, k_st, v_sb, v_sh, v_st, m_sb, p_sb, p_sh, p_sg, l_sb, l_sh, l_sg;
    int64_t b, h, t;
    float scale;
};

// One (row, key/value head): the G queries over the columns [0, t), 8 a block, masked blocks skipped.
template <int G, int D>
void head(const Args& a, int64_t r, int64_t y, int64_t task) {
    constexpr int C = D / 8;
    const float *q = a.q + r * a.q_sb + y * a.q_sh, *k = a.k + r * a.k_sb + y * a.k_sh;
    const float *v = a.v + r * a.v_sb + y * a.v_sh, *mask = a.mask ? a.mask + r * a.m_sb : nullptr;
    alignas(32) float acc[G][D], pf[G][BLOCK];
    float mx[G], sum[G];
    for (int i = 0; i < G; i++) {  // the state: empty, or an earlier part's output and log-sum-exp
        float l = a.prior_lse ? a.prior_lse[r * a.l_sb + y * a.l_sh + i * a.l_sg] : -INFINITY;
        for (int d = 0; d < D; d++) acc[i][d] = l == -INFINITY ? 0.0f : a.prior[r * a.p_sb + y * a.p_sh + i * a.p_sg + d];
        mx[i] = l;
        sum[i] = l == -INFINITY ? 0.0f : 1.0f;
    }
    for (int64_t t0 = 0; t0 < a.t; t0 += BLOCK) {
        int n = a.t - t0 < BLOCK ? (int)(a.t - t0) : BLOCK;
        alignas(32) float add[BLOCK];
        bool any = false;
        for (int j = 0; j < BLOCK; j++) {
            add[j] = j < n ? (mask ? mask[t0 + j] : 0.0f) : -INFINITY;
            any |= add[j] != -INFINITY;
        }
        if (!any) continue;  // a hole
        bool live = false;
        for (int i = 0; i < G; i++) {
            __m256 part[BLOCK];
            for (int j = 0; j < BLOCK; j++) {
                __m256 s = _mm256_setzero_ps();
                if (j < n)
                    for (int c = 0; c < C; c++)
                        s = _mm256_fmadd_ps(_mm256_loadu_ps(q + i * a.q_sg + 8 * c), _mm256_loadu_ps(k + (t0 + j) * a.k_st + 8 * c), s);
                part[j] = s;
            }
            __m256 sc = _mm256_fmadd_ps(reduce8(part), _mm256_set1_ps(a.scale), _mm256_load_ps(add));
            float top = hmax8(sc);
            if (top == -INFINITY) {
                _mm256_store_ps(pf[i], _mm256_setzero_ps());
                continue;
            }
            live = true;
            if (top > mx[i]) {
                float c0 = mx[i] == -INFINITY ? 0.0f : expf(mx[i] - top);
                sum[i] *= c0;
                for (int d = 0; d < D; d += 8) _mm256_store_ps(acc[i] + d, _mm256_mul_ps(_mm256_load_ps(acc[i] + d), _mm256_set1_ps(c0)));
                mx[i] = top;
            }
            __m256 p = exp8(_mm256_sub_ps(sc, _mm256_set1_ps(mx[i])));
            sum[i] += hsum8(p);
            _mm256_store_ps(pf[i], p);
        }
        if (!live) continue;
        for (int i = 0; i < G; i++) {  // the weighted values, each query's accumulator in registers
            __m256 o[C];
            for (int c = 0; c < C; c++) o[c] = _mm256_load_ps(acc[i] + 8 * c);
            for (int j = 0; j < n; j++) {
                __m256 w = _mm256_set1_ps(pf[i][j]);
                for (int c = 0; c < C; c++) o[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + (t0 + j) * a.v_st + 8 * c), o[c]);
            }
            for (int c = 0; c < C; c++) _mm256_store_ps(acc[i] + 8 * c, o[c]);
        }
    }
    for (int i = 0; i < G; i++) {
        float inv = sum[i] > 0.0f ? 1.0f / sum[i] : 0.0f;
        for (int d = 0; d < D; d++) a.out[(task * G + i) * D + d] = acc[i][d] * inv;
        if (a.lse) a.lse[task * G + i] = sum[i] > 0.0f ? mx[i] + logf(sum[i]) : -INFINITY;
    }
}

template <int G, int D> void run(const Args& a, int threads) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t task = 0; task < a.b * a.h; task++) head<G, D>(a, task / a.h, task % a.h, task);
}

template <int G> bool by_dim(const Args& a, int64_t d, int threads) {
    if (d == 32) run<G, 32>(a, threads);
    else if (d == 64) run<G, 64>(a, threads);
    else if (d == 128) run<G, 128>(a, threads);
    else return false;
    return true;
}
}  // namespace
#endif

// arft_decode_attention's float32 work on AVX2 (same arguments, strides in elements); 1 where this
// build has no AVX2 kernel (an AVX-512 build runs its own).
extern "C" int arft_decode_attention_avx2(const float* q, int64_t q_sb, int64_t q_sh, int64_t q_sg, const float* k,
                                          int64_t k_sb, int64_t k_sh, int64_t k_st, const float* v, int64_t v_sb,
                                          int64_t v_sh, int64_t v_st, const float* mask, int64_t m_sb,
                                          const float* prior, int64_t p_sb, int64_t p_sh, int64_t p_sg,
                                          const float* prior_lse, int64_t l_sb, int64_t l_sh, int64_t l_sg, float* out,
                                          float* lse, int64_t b, int64_t h, int64_t g, int64_t t, int64_t d,
                                          float scale, int threads) {
#if ARFT_AVX2
    Args a{q, k, v, mask, prior, prior_lse, out, lse, q_sb, q_sh, q_sg, k_sb, k_sh, k_st, v_sb, v_sh, v_st,
           m_sb, p_sb, p_sh, p_sg, l_sb, l_sh, l_sg, b, h, t, scale};
    if (threads < 1) threads = 1;
    switch (g) {
        case 1: return by_dim<1>(a, d, threads) ? 0 : 1;
        case 2: return by_dim<2>(a, d, threads) ? 0 : 1;
        case 3: return by_dim<3>(a, d, threads) ? 0 : 1;
        case 4: return by_dim<4>(a, d, threads) ? 0 : 1;
        case 5: return by_dim<5>(a, d, threads) ? 0 : 1;
        case 6: return by_dim<6>(a, d, threads) ? 0 : 1;
        case 7: return by_dim<7>(a, d, threads) ? 0 : 1;
        case 8: return by_dim<8>(a, d, threads) ? 0 : 1;
        default: return 1;
    }
#else
    (void)q; (void)q_sb; (void)q_sh; (void)q_sg; (void)k; (void)k_sb; (void)k_sh; (void)k_st; (void)v; (void)v_sb;
    (void)v_sh; (void)v_st; (void)mask; (void)m_sb; (void)prior; (void)p_sb; (void)p_sh; (void)p_sg;
    (void)prior_lse; (void)l_sb; (void)l_sh; (void)l_sg; (void)out; (void)lse; (void)b; (void)h; (void)g; (void)t;
    (void)d; (void)scale; (void)threads;
    return 1;
#endif
}

// 1: this build runs float32 decode attention on AVX2 (arft.cpu.kernels then calls it for float32).
extern "C" int arft_decode_attention_avx2_caps() { return ARFT_AVX2; }
