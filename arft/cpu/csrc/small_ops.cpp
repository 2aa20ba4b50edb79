// The small steps around a decode step's products, one call each instead of 2-10 PyTorch
// operations (each costs more to dispatch than to run at decode's few rows): Llama's RMSNorm
// (after the residual add it follows), the rotary embedding of queries and keys, and the MLP's
// silu(gate) * up. Each gives Hugging Face's results: the same operations, rounded to the dtype
// where PyTorch rounds them (bfloat16 products rounded before they are summed; no fused
// multiply-add where PyTorch has none); silu's exp is arft's polynomial (within an ulp of
// PyTorch's). Its own library (arft/cpu/build.py).
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "arft_cpu.h"
#include "vec.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
namespace {

// One row: h = x (+ delta, rounded), written to hidden if given; out = w * round(h * rsqrt(mean(h^2) + eps)).
template <bool BF16>
void norm_row(const char* x, const char* delta, char* hidden, const char* w, char* out, int64_t dim, float eps,
              float* rstd) {
    float buf[ARFT_RMS_NORM_MAX_DIM];
    __m512 ss = _mm512_setzero_ps();
    for (int64_t i = 0; i < dim; i += 16) {
        int n = dim - i < 16 ? (int)(dim - i) : 16;
        __m512 h = load<BF16>(x + E<BF16> * i, n);
        if (delta) {
            h = round<BF16>(_mm512_add_ps(h, load<BF16>(delta + E<BF16> * i, n)));
            if (hidden) store<BF16>(hidden + E<BF16> * i, h, n);
        }
        _mm512_storeu_ps(buf + i, h);  // buf has room for a whole last vector
        ss = _mm512_add_ps(ss, _mm512_mul_ps(h, h));
    }
    float r = 1.0f / sqrtf(_mm512_reduce_add_ps(ss) / (float)dim + eps);
    if (rstd) *rstd = r;
    for (int64_t i = 0; i < dim; i += 16) {
        int n = dim - i < 16 ? (int)(dim - i) : 16;
        __m512 h = round<BF16>(_mm512_mul_ps(_mm512_loadu_ps(buf + i), _mm512_set1_ps(r)));
        store<BF16>(out + E<BF16> * i, _mm512_mul_ps(load<BF16>(w + E<BF16> * i, n), h), n);
    }
}

template <bool BF16>
void norm(const void* x, int64_t x_s, const void* delta, int64_t d_s, void* hidden, int64_t h_s, const void* w,
          void* out, int64_t o_s, int64_t rows, int64_t dim, float eps, float* rstd, int threads) {
#pragma omp parallel for num_threads(threads) if (rows * dim >= 262144)
    for (int64_t r = 0; r < rows; r++)
        norm_row<BF16>((const char*)x + E<BF16> * r * x_s, delta ? (const char*)delta + E<BF16> * r * d_s : nullptr,
                       hidden ? (char*)hidden + E<BF16> * r * h_s : nullptr, (const char*)w,
                       (char*)out + E<BF16> * r * o_s, dim, eps, rstd ? rstd + r : nullptr);
}

// The gradient of y = w * (x * r) (r = rsqrt(mean(x^2) + eps) per row, from the forward) with
// respect to x, in float32 from the dtype's values, rounded once:
// dx = r * (w * dy) - x * r^3 / dim * sum(w * dy * x).
template <bool BF16>
void norm_backward(const void* dy, const void* x, const void* w, const float* rstd, void* dx, int64_t rows,
                   int64_t dim, int threads) {
#pragma omp parallel for num_threads(threads) if (rows * dim >= 65536)
    for (int64_t r = 0; r < rows; r++) {
        const char *g = (const char*)dy + E<BF16> * r * dim, *xr = (const char*)x + E<BF16> * r * dim;
        const char* wc = (const char*)w;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < dim; i += 16) {
            __m512 wg = _mm512_mul_ps(load<BF16>(wc + E<BF16> * i), load<BF16>(g + E<BF16> * i));
            acc = _mm512_fmadd_ps(wg, load<BF16>(xr + E<BF16> * i), acc);
        }
        float rs = rstd[r], c = rs * rs * rs * _mm512_reduce_add_ps(acc) / (float)dim;
        for (int64_t i = 0; i < dim; i += 16) {
            __m512 wg = _mm512_mul_ps(load<BF16>(wc + E<BF16> * i), load<BF16>(g + E<BF16> * i));
            __m512 d = _mm512_fnmadd_ps(load<BF16>(xr + E<BF16> * i), _mm512_set1_ps(c), _mm512_mul_ps(wg, _mm512_set1_ps(rs)));
            store<BF16>((char*)dx + E<BF16> * (r * dim + i), d);
        }
    }
}

// Heads [heads, D] of one row rotated in place (rope_head).
template <bool BF16>
void rope_row(char* x, int64_t heads, int64_t d, const char* cos, const char* sin) {
    for (int64_t h = 0; h < heads; h++) rope_head<BF16>(x + E<BF16> * h * d, x + E<BF16> * h * d, d, cos, sin, false);
}

template <bool BF16>
void rope(void* x, int64_t x_s, int64_t heads, int64_t d, const void* cos, const void* sin, int64_t c_s,
          int64_t rows, int threads) {
#pragma omp parallel for num_threads(threads) if (rows * heads * d >= 262144)
    for (int64_t r = 0; r < rows; r++)
        rope_row<BF16>((char*)x + E<BF16> * r * x_s, heads, d, (const char*)cos + E<BF16> * r * c_s,
                       (const char*)sin + E<BF16> * r * c_s);
}

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)) rounded to the dtype, then the product.
template <bool BF16>
void silu_mul(const void* gate, int64_t g_s, const void* up, int64_t u_s, void* out, int64_t rows, int64_t n,
              int threads) {
#pragma omp parallel for num_threads(threads) if (rows * n >= 262144)
    for (int64_t r = 0; r < rows; r++) {
        const char *g = (const char*)gate + E<BF16> * r * g_s, *u = (const char*)up + E<BF16> * r * u_s;
        char* o = (char*)out + E<BF16> * r * n;
        for (int64_t i = 0; i < n; i += 16) {
            int m = n - i < 16 ? (int)(n - i) : 16;
            __m512 x = load<BF16>(g + E<BF16> * i, m);
            __m512 s = round<BF16>(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f),
                                                                   arft_exp(_mm512_sub_ps(_mm512_setzero_ps(), x)))));
            store<BF16>(o + E<BF16> * i, _mm512_mul_ps(s, load<BF16>(u + E<BF16> * i, m)), m);
        }
    }
}
}  // namespace
#define ARFT_OPS 1
#else
#define ARFT_OPS 0
#endif

// 1: built (AVX-512), 0: not.
extern "C" int arft_small_ops_caps() { return ARFT_OPS; }
extern "C" int64_t arft_rms_norm_max_dim() { return ARFT_RMS_NORM_MAX_DIM; }

// rows of x [rows, dim] (row stride x_s; delta, hidden, out alike) in bfloat16 (bf16 = 1) or
// float32: with delta, hidden = x + delta (written where hidden is not null) is what is
// normalised; out = weight * norm; rstd (if not null) gets each row's rsqrt(mean + eps).
// 0: done, 1: not supported.
extern "C" int arft_rms_norm(const void* x, int64_t x_s, const void* delta, int64_t d_s, void* hidden, int64_t h_s,
                             const void* weight, void* out, int64_t o_s, int64_t rows, int64_t dim, float eps,
                             float* rstd, int bf16, int threads) {
#if ARFT_OPS
    if (dim > ARFT_RMS_NORM_MAX_DIM || dim % 16) return 1;
    if (bf16) norm<true>(x, x_s, delta, d_s, hidden, h_s, weight, out, o_s, rows, dim, eps, rstd, threads);
    else norm<false>(x, x_s, delta, d_s, hidden, h_s, weight, out, o_s, rows, dim, eps, rstd, threads);
    return 0;
#else
    (void)x; (void)x_s; (void)delta; (void)d_s; (void)hidden; (void)h_s; (void)weight; (void)out; (void)o_s;
    (void)rows; (void)dim; (void)eps; (void)rstd; (void)bf16; (void)threads;
    return 1;
#endif
}

// dx [rows, dim] of RMSNorm's forward (its rstd [rows] float32 given): dy, x, weight and dx
// contiguous, bfloat16 (bf16 = 1) or float32.
extern "C" int arft_rms_norm_backward(const void* dy, const void* x, const void* weight, const float* rstd,
                                      void* dx, int64_t rows, int64_t dim, int bf16, int threads) {
#if ARFT_OPS
    if (dim % 16) return 1;
    if (bf16) norm_backward<true>(dy, x, weight, rstd, dx, rows, dim, threads);
    else norm_backward<false>(dy, x, weight, rstd, dx, rows, dim, threads);
    return 0;
#else
    (void)dy; (void)x; (void)weight; (void)rstd; (void)dx; (void)rows; (void)dim; (void)bf16; (void)threads;
    return 1;
#endif
}

// The first `heads` heads of each row of x [rows, >= heads * d] (row stride x_s) rotated in
// place by cos and sin [rows, d] (row stride c_s). 0: done, 1: not supported.
extern "C" int arft_rope(void* x, int64_t x_s, int64_t heads, int64_t d, const void* cos, const void* sin,
                         int64_t c_s, int64_t rows, int bf16, int threads) {
#if ARFT_OPS
    if (d % 2) return 1;
    if (bf16) rope<true>(x, x_s, heads, d, cos, sin, c_s, rows, threads);
    else rope<false>(x, x_s, heads, d, cos, sin, c_s, rows, threads);
    return 0;
#else
    (void)x; (void)x_s; (void)heads; (void)d; (void)cos; (void)sin; (void)c_s; (void)rows; (void)bf16; (void)threads;
    return 1;
#endif
}

// out [rows, n] (contiguous) = silu(gate) * up, gate and up [rows, n] with row strides g_s, u_s.
extern "C" int arft_silu_mul(const void* gate, int64_t g_s, const void* up, int64_t u_s, void* out, int64_t rows,
                             int64_t n, int bf16, int threads) {
#if ARFT_OPS
    if (bf16) silu_mul<true>(gate, g_s, up, u_s, out, rows, n, threads);
    else silu_mul<false>(gate, g_s, up, u_s, out, rows, n, threads);
    return 0;
#else
    (void)gate; (void)g_s; (void)up; (void)u_s; (void)out; (void)rows; (void)n; (void)bf16; (void)threads;
    return 1;
#endif
}
