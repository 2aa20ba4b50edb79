// The update's elementwise steps that PyTorch runs as several passes over large tensors, one
// pass each here (AVX-512, bfloat16 or float32 in, float32 arithmetic):
// - the sampled tokens' logprobs and the entropy from the logits [N, V] (log_softmax in float32,
//   a gather, exp, a product and a sum: five passes over [N, V] in float32, and three back),
//   and their gradient;
// - the gradient of the MLP's silu(gate) * up (silu's backward, two products: three passes);
// - the rotary embedding of queries and keys out of place, and its gradient (two products, a
//   negation, a concatenation and a sum each way).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "arft_cpu.h"
#include "vec.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
namespace {

// One row of logits: y = x * inv_t; lse = log sum exp y; lp = y[t] - lse; ent = lse - sum softmax(y) y.
template <bool BF16>
void logprob_row(const char* x, int64_t v, int64_t t, float inv_t, float* lp, float* ent, float* lse) {
    const __m512 scale = _mm512_set1_ps(inv_t), ninf = _mm512_set1_ps(-INFINITY);
    __m512 m = ninf;
    for (int64_t i = 0; i < v; i += 16) {
        __mmask16 in = first16(v - i);
        m = _mm512_mask_max_ps(m, in, m, _mm512_mul_ps(load<BF16>(x + E<BF16> * i, (int)(v - i)), scale));
    }
    float top = _mm512_reduce_max_ps(m);
    if (!isfinite(top)) top = 0;  // every logit -inf (or one +inf, NaN): the sums say so
    const __m512 mx = _mm512_set1_ps(top);
    __m512 s = _mm512_setzero_ps(), w = _mm512_setzero_ps();
    for (int64_t i = 0; i < v; i += 16) {
        __mmask16 in = first16(v - i);
        __m512 y = _mm512_mul_ps(load<BF16>(x + E<BF16> * i, (int)(v - i)), scale);
        __m512 p = _mm512_maskz_mov_ps(in, arft_exp(_mm512_sub_ps(y, mx)));
        s = _mm512_add_ps(s, p);
        w = _mm512_mask_add_ps(w, _mm512_cmp_ps_mask(p, _mm512_setzero_ps(), _CMP_NEQ_UQ), w, _mm512_mul_ps(p, y));
    }
    float total = _mm512_reduce_add_ps(s), l = top + logf(total);
    float yt = (BF16 ? load<true>(x + 2 * t, 1)[0] : ((const float*)x)[t]) * inv_t;
    *lse = l;
    *lp = yt - l;
    *ent = l - _mm512_reduce_add_ps(w) / total;
}

// dx = g * inv_t * (onehot(t) - softmax(y)), in x's dtype.
template <bool BF16>
void logprob_row_backward(const char* x, int64_t v, int64_t t, float inv_t, float lse, float g, char* dx) {
    const __m512 scale = _mm512_set1_ps(inv_t), l = _mm512_set1_ps(lse), gs = _mm512_set1_ps(-g * inv_t);
    for (int64_t i = 0; i < v; i += 16) {
        int n = v - i < 16 ? (int)(v - i) : 16;
        __m512 y = _mm512_mul_ps(load<BF16>(x + E<BF16> * i, n), scale);
        __m512 d = _mm512_mul_ps(arft_exp(_mm512_sub_ps(y, l)), gs);
        if (t >= i && t < i + 16) {
            alignas(64) float lanes[16];
            _mm512_store_ps(lanes, d);
            lanes[t - i] += g * inv_t;
            d = _mm512_load_ps(lanes);
        }
        store<BF16>(dx + E<BF16> * i, d, n);
    }
}

// d gate = dy * up * s * (1 + g * (1 - s)) and d up = dy * round(g * s), s = sigmoid(g), one rounding each.
template <bool BF16>
void silu_mul_backward(const char* gate, const char* up, const char* dy, char* dgate, char* dup, int64_t count) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < count; i += 16) {
        int n = count - i < 16 ? (int)(count - i) : 16;
        __m512 g = load<BF16>(gate + E<BF16> * i, n), u = load<BF16>(up + E<BF16> * i, n);
        __m512 d = load<BF16>(dy + E<BF16> * i, n);
        __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, arft_exp(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        __m512 act = round<BF16>(_mm512_mul_ps(g, s));
        __m512 slope = _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one));
        store<BF16>(dgate + E<BF16> * i, _mm512_mul_ps(_mm512_mul_ps(d, u), slope), n);
        store<BF16>(dup + E<BF16> * i, _mm512_mul_ps(d, act), n);
    }
}

// out[b, h, t] = x[b, h, t] rotated by cos/sin[b, t] (rope_head), strided [B, H, T, D].
template <bool BF16>
void rope(const char* x, const int64_t* sx, char* out, const int64_t* so, const char* cos, const char* sin,
          const int64_t* sc, int64_t b, int64_t h, int64_t t, int64_t d, bool inverse, int threads) {
#pragma omp parallel for num_threads(threads) collapse(2) if (b * h * t * d >= 65536)
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < h; j++)
            for (int64_t k = 0; k < t; k++)
                rope_head<BF16>(x + E<BF16> * (i * sx[0] + j * sx[1] + k * sx[2]),
                                out + E<BF16> * (i * so[0] + j * so[1] + k * so[2]), d,
                                cos + E<BF16> * (i * sc[0] + k * sc[1]), sin + E<BF16> * (i * sc[0] + k * sc[1]),
                                inverse);
}
}  // namespace
#define ARFT_TRAIN_OPS 1
#else
#define ARFT_TRAIN_OPS 0
#endif

extern "C" int arft_train_ops_caps() { return ARFT_TRAIN_OPS; }

// Per row n of logits x [N, V] (row stride sx; bfloat16 where bf16, else float32) at temperature
// 1 / inv_t: lp[n] = the logprob of targets[n], ent[n] = the entropy, lse[n] = the log-sum-exp.
// 0: done, 1: not built, 2: a target outside [0, V).
extern "C" int arft_token_logprobs(const void* x, int64_t sx, const int64_t* targets, float* lp, float* ent,
                                   float* lse, int64_t n, int64_t v, float inv_t, int bf16, int threads) {
#if ARFT_TRAIN_OPS
    for (int64_t r = 0; r < n; r++)
        if (targets[r] < 0 || targets[r] >= v) return 2;
#pragma omp parallel for num_threads(threads)
    for (int64_t r = 0; r < n; r++) {
        const char* row = (const char*)x + (bf16 ? 2 : 4) * r * sx;
        if (bf16) logprob_row<true>(row, v, targets[r], inv_t, lp + r, ent + r, lse + r);
        else logprob_row<false>(row, v, targets[r], inv_t, lp + r, ent + r, lse + r);
    }
    return 0;
#else
    (void)x; (void)sx; (void)targets; (void)lp; (void)ent; (void)lse; (void)n; (void)v; (void)inv_t; (void)bf16;
    (void)threads;
    return 1;
#endif
}

// dx [N, V] (contiguous, x's dtype) of sum_n grad[n] * lp[n], from the forward's lse.
extern "C" int arft_token_logprobs_backward(const void* x, int64_t sx, const int64_t* targets, const float* lse,
                                            const float* grad, void* dx, int64_t n, int64_t v, float inv_t, int bf16,
                                            int threads) {
#if ARFT_TRAIN_OPS
#pragma omp parallel for num_threads(threads)
    for (int64_t r = 0; r < n; r++) {
        const char* row = (const char*)x + (bf16 ? 2 : 4) * r * sx;
        char* out = (char*)dx + (bf16 ? 2 : 4) * r * v;
        if (bf16) logprob_row_backward<true>(row, v, targets[r], inv_t, lse[r], grad[r], out);
        else logprob_row_backward<false>(row, v, targets[r], inv_t, lse[r], grad[r], out);
    }
    return 0;
#else
    (void)x; (void)sx; (void)targets; (void)lse; (void)grad; (void)dx; (void)n; (void)v; (void)inv_t; (void)bf16;
    (void)threads;
    return 1;
#endif
}

// The gradients of silu(gate) * up (silu rounded to the dtype first, as the forward) with respect
// to gate and up, all contiguous [count].
extern "C" int arft_silu_mul_backward(const void* gate, const void* up, const void* dy, void* dgate, void* dup,
                                      int64_t count, int bf16, int threads) {
#if ARFT_TRAIN_OPS
    const int64_t chunk = 16 * 4096;
#pragma omp parallel for num_threads(threads) if (count >= 4 * chunk)
    for (int64_t c = 0; c < count; c += chunk) {
        int64_t n = count - c < chunk ? count - c : chunk, at = (bf16 ? 2 : 4) * c;
        if (bf16) silu_mul_backward<true>((const char*)gate + at, (const char*)up + at, (const char*)dy + at,
                                          (char*)dgate + at, (char*)dup + at, n);
        else silu_mul_backward<false>((const char*)gate + at, (const char*)up + at, (const char*)dy + at,
                                      (char*)dgate + at, (char*)dup + at, n);
    }
    return 0;
#else
    (void)gate; (void)up; (void)dy; (void)dgate; (void)dup; (void)count; (void)bf16; (void)threads;
    return 1;
#endif
}

// out [B, H, T, D] (strides so) = x (strides sx) rotated by cos and sin [B, T, D] (strides sc, one
// layout for both; the batch stride may be 0), or by -sin where inverse (the gradient).
extern "C" int arft_rope_strided(const void* x, const int64_t* sx, void* out, const int64_t* so, const void* cos,
                                 const void* sin, const int64_t* sc, int64_t b, int64_t h, int64_t t, int64_t d,
                                 int inverse, int bf16, int threads) {
#if ARFT_TRAIN_OPS
    if (d % 2) return 1;
    if (bf16) rope<true>((const char*)x, sx, (char*)out, so, (const char*)cos, (const char*)sin, sc, b, h, t, d,
                         inverse, threads);
    else rope<false>((const char*)x, sx, (char*)out, so, (const char*)cos, (const char*)sin, sc, b, h, t, d,
                     inverse, threads);
    return 0;
#else
    (void)x; (void)sx; (void)out; (void)so; (void)cos; (void)sin; (void)sc; (void)b; (void)h; (void)t; (void)d;
    (void)inverse; (void)bf16; (void)threads;
    return 1;
#endif
}
