// Shared by arft's CPU kernels: exp on AVX-512; bfloat16/float32 loads, stores and rounding (AVX512-BW).
#pragma once
#include <stdint.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#include <math.h>

// exp(x), 16 lanes (Cephes' polynomial, within an ulp or two of libm): 0 below -87.3, inf above 88.7,
// NaN for NaN.
static inline __m512 arft_exp(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.72283f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 y = _mm512_maskz_mul_ps(~under, p, _mm512_castsi512_ps(e));
    y = _mm512_mask_blend_ps(over, y, _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);  // NaN stays NaN
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
namespace {
// float32 to bfloat16, round to nearest even (NaN stays NaN), 16 at a time: vcvtneps2bf16 where
// the CPU has AVX512-BF16, the same rounding in integer operations where it does not.
inline __m256i to_bf16(__m512 x) {
#if defined(__AVX512BF16__)
    return (__m256i)_mm512_cvtneps_pbh(x);
#else
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));  // quiet NaN
    return _mm512_cvtepi32_epi16(r);
#endif
}

// The first n of 16 lanes (all for n >= 16, none for n <= 0).
inline __mmask16 first16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

// bfloat16 or float32 values as float32, 16 at a time (n < 16: the first n, the rest 0).
template <bool BF16> inline __m512 load(const void* p, int n = 16) {
    __mmask16 m = first16(n);
    if constexpr (BF16) {
        __m256i raw = _mm256_maskz_loadu_epi16(m, p);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    } else {
        return _mm512_maskz_loadu_ps(m, p);
    }
}

template <bool BF16> inline void store(void* p, __m512 x, int n = 16) {
    __mmask16 m = first16(n);
    if constexpr (BF16) {
        _mm256_mask_storeu_epi16(p, m, to_bf16(x));
    } else {
        _mm512_mask_storeu_ps(p, m, x);
    }
}

// x rounded to the dtype (bfloat16: round to nearest even), as float32.
template <bool BF16> inline __m512 round(__m512 x) {
    if constexpr (BF16) {
        __m256i b = to_bf16(x);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    } else {
        return x;
    }
}

template <bool BF16> constexpr int64_t E = BF16 ? 2 : 4;

// One head of D values rotated into out (out may be x): x * cos + rotate_half(x) * sin, each product
// rounded to the dtype, then their sum (rotate_half(x) = [-x2, x1] for x = [x1, x2]), as Hugging
// Face's apply_rotary_pos_emb; with `inverse`, by -sin (the rotation's transpose, its gradient).
template <bool BF16>
inline void rope_head(const char* x, char* out, int64_t d, const char* cos, const char* sin, bool inverse) {
    int64_t half = d / 2;
    const __m512 sign = _mm512_set1_ps(inverse ? -1.0f : 1.0f);
    for (int64_t i = 0; i < half; i += 16) {
        int n = half - i < 16 ? (int)(half - i) : 16;
        __m512 a = load<BF16>(x + E<BF16> * i, n), b = load<BF16>(x + E<BF16> * (i + half), n);
        __m512 ca = load<BF16>(cos + E<BF16> * i, n), cb = load<BF16>(cos + E<BF16> * (i + half), n);
        __m512 sa = _mm512_mul_ps(load<BF16>(sin + E<BF16> * i, n), sign);
        __m512 sb = _mm512_mul_ps(load<BF16>(sin + E<BF16> * (i + half), n), sign);
        __m512 lo = _mm512_add_ps(round<BF16>(_mm512_mul_ps(a, ca)),
                                  round<BF16>(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), b), sa)));
        __m512 hi = _mm512_add_ps(round<BF16>(_mm512_mul_ps(b, cb)), round<BF16>(_mm512_mul_ps(a, sb)));
        store<BF16>(out + E<BF16> * i, lo, n);
        store<BF16>(out + E<BF16> * (i + half), hi, n);
    }
}
}  // namespace
#endif
