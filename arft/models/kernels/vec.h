// Shared by arft's CPU kernels (decode_attention.cpp, small_ops.cpp): exp on AVX-512.
#pragma once
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
