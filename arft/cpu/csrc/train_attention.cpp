// Causal attention for training, forward and backward, on CPUs with AMX (Intel Sapphire Rapids
// and later).
//
// Forward: each block of 32 queries against all the keys it sees, as two long products
// (S = Q Kᵀ, then O = P V) around a softmax of whole rows; it returns the log-sum-exp the
// backward needs.
//
// PyTorch's CPU flash-attention backward runs its block products through small calls of the
// matrix library and converts between bfloat16 and float32 around each: on a 2-core AMX Xeon it
// reaches ~0.1 TFLOP/s, a quarter of the embedded model's update. This is the FlashAttention-2
// backward pass on AMX tiles. Each (row, query head) walks blocks of 32 keys against blocks of 32
// queries and keeps everything in the "keys as rows" layout, so that no block is transposed:
//   Sᵀ = K Qᵀ, Pᵀ = exp(scale Sᵀ - lse), dPᵀ = V dOᵀ, dSᵀ = scale Pᵀ ⊙ (dPᵀ - D),
//   dV += Pᵀ dO, dK += dSᵀ Q, dQᵀ += Kᵀ dSᵀ,
// with D = rowsum(dO ⊙ O) and lse the forward's log-sum-exp (PyTorch's flash forward returns it).
// Products take bfloat16 operands (P and dS rounded to bfloat16, as FlashAttention does) and sum
// in float32. A query sees key j iff j <= offset + i (the queries are the last Tq of Tk positions)
// and j < len (the row's real keys: right padding). Query heads share key/value heads in groups;
// each query head's dK and dV are summed over its group at the end, in float32.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "arft_cpu.h"
#include "vec.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {
typedef arft_bf16 bf16;
constexpr int BLK = 32;  // keys and queries a block (two tile rows)
constexpr int64_t MAX_SCORES = ARFT_ATTENTION_MAX_SCORES;  // queries x keys a head (arft_cpu.h)

struct TileConfig {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// Every tile 16 rows of 64 bytes; set on each thread that uses the tiles, released after.
void configure() {
    alignas(64) static const TileConfig c = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64},
                                             {16, 16, 16, 16, 16, 16, 16, 16}};
    _tile_loadconfig(&c);
}

// C [M x N] float32 (row stride ldc) = (acc ? C : 0) + A B, with A bfloat16 row-major [M x K]
// (row stride lda) and B bfloat16 in VNNI pairs: K/2 rows of N pairs (row stride ldb elements).
// M, N and K multiples of 32.
void gemm(float* C, int64_t ldc, const bf16* A, int64_t lda, const bf16* B, int64_t ldb, int M, int N, int K,
          bool acc) {
    for (int m = 0; m < M; m += 32) {
        for (int n = 0; n < N; n += 32) {
            float* c = C + m * ldc + n;
            if (acc) {
                _tile_loadd(0, c, ldc * 4);
                _tile_loadd(1, c + 16, ldc * 4);
                _tile_loadd(2, c + 16 * ldc, ldc * 4);
                _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int k = 0; k < K; k += 32) {
                _tile_loadd(4, A + m * lda + k, lda * 2);
                _tile_loadd(5, A + (m + 16) * lda + k, lda * 2);
                _tile_loadd(6, B + (k / 2) * ldb + n * 2, ldb * 2);
                _tile_loadd(7, B + (k / 2) * ldb + (n + 16) * 2, ldb * 2);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c, ldc * 4);
            _tile_stored(1, c + 16, ldc * 4);
            _tile_stored(2, c + 16 * ldc, ldc * 4);
            _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
        }
    }
}

// One strided [n x D] bfloat16 matrix (row stride s), padded with zero rows to np, packed four ways.
struct Src {
    const bf16* p;
    int64_t s;
    int n;
};

void pack_rows(bf16* dst, Src a, int np, int d) {  // [np x d] row-major
    for (int t = 0; t < np; t++) {
        if (t < a.n) memcpy(dst + (int64_t)t * d, a.p + t * a.s, d * 2);
        else memset(dst + (int64_t)t * d, 0, d * 2);
    }
}

void pack_transposed(bf16* dst, Src a, int stride, int d) {  // [d x stride]: dst[c][t] = a[t][c], 0 past a.n
    for (int t0 = 0; t0 < stride; t0 += 16)
        for (int c = 0; c < d; c++)
            for (int t = t0; t < t0 + 16; t++) dst[(int64_t)c * stride + t] = t < a.n ? a.p[t * a.s + c] : 0;
}

// 16 lanes of 32 bits from rows t0.. of a (t0 + lane < a.n, else 0) at 32-bit column c2 (a.s even).
inline __m512i column32(Src a, int t0, int c2) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __mmask16 in = first16(a.n - t0);
    __m512i idx = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(t0)), _mm512_set1_epi32((int)(a.s / 2)));
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), in, idx, (const int*)a.p + c2, 4);
}

// Two rows of 32 bfloat16 values as 32 pairs (x[i], y[i]): the pairs of rows of AMX's B.
inline void interleave32(bf16* out, __m512i x, __m512i y) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    _mm512_storeu_si512(out, _mm512_permutex2var_epi16(x, lo, y));
    _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi16(x, _mm512_add_epi16(lo, _mm512_set1_epi16(16)), y));
}

void pack_vnni_rows(bf16* dst, Src a, int np, int d) {  // [np/2][d][2]: pairs of rows (B = a)
    for (int t = 0; t < np; t += 2) {
        for (int c = 0; c < d; c += 32) {
            __m512i x = t < a.n ? _mm512_loadu_si512(a.p + t * a.s + c) : _mm512_setzero_si512();
            __m512i y = t + 1 < a.n ? _mm512_loadu_si512(a.p + (t + 1) * a.s + c) : _mm512_setzero_si512();
            interleave32(dst + (int64_t)t * d + 2 * c, x, y);
        }
    }
}

void pack_vnni_cols(bf16* dst, Src a, int np, int d) {
    for (int t0 = 0; t0 < np; t0 += BLK)
        for (int c2 = 0; c2 < d / 2; c2++)
            for (int t = t0; t < t0 + BLK; t += 16)
                _mm512_storeu_si512(dst + (int64_t)t0 * d + c2 * 2 * BLK + (t - t0) * 2, column32(a, t, c2));
}

// exp(x) for x <= ~0 to ~1e-6 (P is rounded to bfloat16): exp(-87) ~ 1.6e-38 below -87 (masked
// scores are zeroed by their callers), NaN stays NaN.
inline __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 120);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

struct Args {  // what a unit reads and writes (the keys and values arrive packed: KeyPacks)
    const bf16 *q, *o, *go;
    const float* lse;
    const int64_t* lens;
    bf16* gq;
    int64_t sq[3], so[3], sgo[3], slse[3], sgq[3];
    int64_t b, hq, hk, tq, tk, d;
    float scale;
};

// Scratch of one thread, sized for the call (row strides padded by a block: no cache aliasing).
struct Scratch {
    int tqp, tkp, tqs, tks;
    std::vector<bf16> qtv, gotv, qv, gov, pt, gst, gstv;
    std::vector<float> lse, delta, gqt, st, gpt;
    Scratch(int tq, int tk, int64_t d)
        : tqp((tq + BLK - 1) / BLK * BLK), tkp((tk + BLK - 1) / BLK * BLK), tqs(tqp + BLK), tks(tkp + BLK),
          qtv(tqp * d), gotv(tqp * d), qv(tqp * d), gov(tqp * d),
          pt((int64_t)BLK * tqs), gst((int64_t)BLK * tqs), gstv((int64_t)tkp * tqs), lse(tqp), delta(tqp),
          gqt(tqp * d), st((int64_t)BLK * tqs), gpt((int64_t)BLK * tqs) {}
};

// Pᵀ and scale dSᵀ of keys j0.. (one block) for queries from i0 on, from Sᵀ and dPᵀ, rounded to
// bfloat16 (pt, gst), and dSᵀ's pairs of rows interleaved into gstv (B of dQᵀ = Kᵀ dSᵀ).
void softmax_row(Scratch& w, const Args& a, int j0, int i0, int64_t off, int64_t len) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512 scale = _mm512_set1_ps(a.scale);
    for (int r = 0; r < BLK; r++) {
        const int64_t key = j0 + r, at = (int64_t)r * w.tqs;
        for (int c = i0; c < w.tqp; c += 16) {
            // query i sees the key iff key <= off + i, i.e. i >= key - off; no query sees a key past len
            __mmask16 seen = 0xffff;
            if (key >= len) seen = 0;
            else if (c < key - off) seen = _mm512_cmp_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(c)),
                                                                 _mm512_set1_epi32((int)(key - off)), _MM_CMPINT_NLT);
            __m512 x = _mm512_fmsub_ps(_mm512_loadu_ps(&w.st[at + c]), scale, _mm512_loadu_ps(&w.lse[c]));
            __m512 p = _mm512_maskz_mov_ps(seen, exp_neg(x));
            __m512 gp = _mm512_sub_ps(_mm512_loadu_ps(&w.gpt[at + c]), _mm512_loadu_ps(&w.delta[c]));
            __m512 gs = _mm512_mul_ps(_mm512_mul_ps(p, gp), scale);
            _mm256_storeu_si256((__m256i*)&w.pt[at + c], (__m256i)_mm512_cvtneps_pbh(p));
            _mm256_storeu_si256((__m256i*)&w.gst[at + c], (__m256i)_mm512_cvtneps_pbh(gs));
        }
    }
    for (int r = 0; r < BLK; r += 2) {
        bf16* out = &w.gstv[(int64_t)(j0 + r) / 2 * 2 * w.tqs];
        for (int c = i0; c < w.tqp; c += 32)
            interleave32(out + 2 * c, _mm512_loadu_si512(&w.gst[(int64_t)r * w.tqs + c]),
                         _mm512_loadu_si512(&w.gst[(int64_t)(r + 1) * w.tqs + c]));
    }
}

// A key/value head's keys and values as the products need them, packed once for its query heads:
// K and V row-major [tkp x d] (A of Sᵀ and dPᵀ) and Kᵀ [d x tks] (A of dQᵀ).
struct KeyPacks {
    const bf16 *kr, *vr, *kt;
};

// One query head of one row: its dQ, and its share of its key/value head's dK and dV (float32,
// [tkp x d] each at pk and pv). Per block of 32 keys: Sᵀ and dPᵀ against every query that sees
// it, then dV and dK as one product each over those queries; then dQᵀ, a product over the keys.
void unit(const Args& a, Scratch& w, const KeyPacks& kv, int64_t b, int64_t h, float* pk, float* pv) {
    const int d = (int)a.d, tq = (int)a.tq, tqp = w.tqp, tkp = w.tkp;
    const int64_t off = a.tk - a.tq;
    const int64_t len = a.lens ? (a.lens[b] < a.tk ? a.lens[b] : a.tk) : a.tk;
    Src q{a.q + b * a.sq[0] + h * a.sq[1], a.sq[2], tq}, go{a.go + b * a.sgo[0] + h * a.sgo[1], a.sgo[2], tq};
    const bf16* o = a.o + b * a.so[0] + h * a.so[1];
    pack_vnni_cols(w.qtv.data(), q, tqp, d);
    pack_vnni_cols(w.gotv.data(), go, tqp, d);
    pack_vnni_rows(w.qv.data(), q, tqp, d);
    pack_vnni_rows(w.gov.data(), go, tqp, d);
    for (int i = 0; i < tqp; i++) {
        float l = i < tq ? a.lse[b * a.slse[0] + h * a.slse[1] + i * a.slse[2]] : INFINITY;
        w.lse[i] = isfinite(l) ? l : INFINITY;  // no key seen: P = 0
        __m512 s = _mm512_setzero_ps();
        for (int c = 0; i < tq && c < d; c += 16)
            s = _mm512_fmadd_ps(load<true>(go.p + i * go.s + c), load<true>(o + i * a.so[2] + c), s);
        w.delta[i] = _mm512_reduce_add_ps(s);
    }
    for (int j0 = 0; j0 < len; j0 += BLK) {
        const int first = j0 - off < 0 ? 0 : (int)((j0 - off) / BLK * BLK);  // the first query block that sees j0
        if (first >= tq) {  // no query sees these keys
            memset(pk + j0 * d, 0, sizeof(float) * BLK * d), memset(pv + j0 * d, 0, sizeof(float) * BLK * d);
            continue;
        }
        for (int i0 = first; i0 < tqp; i0 += BLK) {
            gemm(w.st.data() + i0, w.tqs, kv.kr + j0 * d, d, w.qtv.data() + i0 * d, 2 * BLK, BLK, BLK, d, false);
            gemm(w.gpt.data() + i0, w.tqs, kv.vr + j0 * d, d, w.gotv.data() + i0 * d, 2 * BLK, BLK, BLK, d,
                 false);
        }
        softmax_row(w, a, j0, first, off, len);
        gemm(pv + j0 * d, d, w.pt.data() + first, w.tqs, w.gov.data() + first * d, 2 * d, BLK, d, tqp - first, false);
        gemm(pk + j0 * d, d, w.gst.data() + first, w.tqs, w.qv.data() + first * d, 2 * d, BLK, d, tqp - first, false);
    }
    for (int j0 = (int)(len + BLK - 1) / BLK * BLK; j0 < tkp; j0 += BLK)
        memset(pk + j0 * d, 0, sizeof(float) * BLK * d), memset(pv + j0 * d, 0, sizeof(float) * BLK * d);
    for (int i0 = 0; i0 < tqp; i0 += BLK) {  // dQᵀ of each query block, over the keys it sees
        int64_t keys = off + i0 + BLK < len ? off + i0 + BLK : len;
        keys = (keys + BLK - 1) / BLK * BLK;
        if (keys > 0)
            gemm(w.gqt.data() + i0 * d, BLK, kv.kt, w.tks, w.gstv.data() + i0 * 2, 2 * w.tqs, d, BLK, (int)keys,
                 false);
        else memset(w.gqt.data() + i0 * d, 0, sizeof(float) * BLK * d);
    }
    bf16* gq = a.gq + b * a.sgq[0] + h * a.sgq[1];
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int c = 0; c < d; c += 16) {  // dQᵀ in blocks of 32 queries: [tqp/32][d][32]
        __m512i idx = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(c)), _mm512_set1_epi32(BLK));
        for (int i = 0; i < tq; i++) {
            __m512 x = _mm512_i32gather_ps(_mm512_add_epi32(idx, _mm512_set1_epi32(i / BLK * BLK * d + i % BLK)),
                                           w.gqt.data(), 4);
            _mm256_storeu_si256((__m256i*)(gq + i * a.sgq[2] + c), (__m256i)_mm512_cvtneps_pbh(x));
        }
    }
}

// The forward pass of one block of 32 queries (i0..) of query head h of row b: out rows, lse.
struct Forward {
    const bf16 *q, *k, *v;
    const int64_t* lens;
    bf16* out;
    float* lse;
    int64_t sq[3], sk[3], sv[3], so[3];
    int64_t b, hq, hk, tq, tk, d;
    float scale;
};

void forward_block(const Forward& a, const bf16* ktv, const bf16* vv, int64_t tks, int64_t b, int64_t h, int i0,
                   float* s, bf16* p, bf16* qb, float* o) {
    const int d = (int)a.d, rows = (int)(a.tq - i0 < BLK ? a.tq - i0 : BLK);
    const int64_t off = a.tk - a.tq, len = a.lens ? (a.lens[b] < a.tk ? a.lens[b] : a.tk) : a.tk;
    float* lse = a.lse + (b * a.hq + h) * a.tq + i0;
    bf16* out = a.out + b * a.so[0] + h * a.so[1] + i0 * a.so[2];
    int64_t keys = off + i0 + BLK < len ? off + i0 + BLK : len;  // the most any query of the block sees
    if (keys <= 0) {
        for (int r = 0; r < rows; r++) lse[r] = -INFINITY, memset(out + r * a.so[2], 0, 2 * d);
        return;
    }
    const int kl = (int)((keys + BLK - 1) / BLK * BLK);
    pack_rows(qb, Src{a.q + b * a.sq[0] + h * a.sq[1] + i0 * a.sq[2], a.sq[2], rows}, BLK, d);
    for (int n = 0; n < kl; n += BLK) gemm(s + n, tks, qb, d, ktv + n * d, 2 * BLK, BLK, BLK, d, false);
    const __m512 scale = _mm512_set1_ps(a.scale);
    float norm[BLK];
    for (int r = 0; r < BLK; r++) {
        float* sr = s + r * tks;
        bf16* pr = p + r * tks;
        int64_t seen = off + i0 + r + 1 < len ? off + i0 + r + 1 : len;  // keys [0, seen)
        if (r >= rows || seen <= 0) seen = 0;
        __m512 m = _mm512_set1_ps(-INFINITY);
        for (int j = 0; j < seen; j += 16)
            m = _mm512_mask_max_ps(m, first16(seen - j), m, _mm512_mul_ps(_mm512_loadu_ps(sr + j), scale));
        const float top = seen ? _mm512_reduce_max_ps(m) : 0.0f;
        __m512 sum = _mm512_setzero_ps();
        for (int j = 0; j < kl; j += 16) {
            __m512 e = _mm512_maskz_mov_ps(first16(seen - j), exp_neg(_mm512_fmsub_ps(_mm512_loadu_ps(sr + j), scale,
                                                                                     _mm512_set1_ps(top))));
            sum = _mm512_add_ps(sum, e);
            _mm256_storeu_si256((__m256i*)(pr + j), (__m256i)_mm512_cvtneps_pbh(e));
        }
        float l = _mm512_reduce_add_ps(sum);
        norm[r] = l > 0 ? 1.0f / l : 0.0f;
        if (r < rows) lse[r] = l > 0 ? top + logf(l) : -INFINITY;
    }
    gemm(o, d, p, tks, vv, 2 * d, BLK, d, kl, false);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < d; c += 16)
            _mm256_storeu_si256((__m256i*)(out + r * a.so[2] + c),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(o + r * d + c),
                                                                          _mm512_set1_ps(norm[r]))));
}

bool amx_ready() {
    static int ready = -1;
    if (ready < 0) {
        // Linux hands AMX's tile state to a process that asks (ARCH_REQ_XCOMP_PERM, XTILEDATA)
        ready = __builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("amx-tile") &&
                syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    }
    return ready == 1;
}
}  // namespace

extern "C" int arft_attention_backward_caps() { return amx_ready() ? 1 : 0; }

// out [B, Hq, Tq, D] (strided) and lse [B, Hq, Tq] (float32, contiguous) of softmax attention
// under the backward's mask (below): q [B, Hq, Tq, D], k, v [B, Hk, Tk, D] bfloat16 strided, lens
// int64 [B] or null. 0, or 1 where it cannot run.
extern "C" int arft_attention_forward(const bf16* q, const int64_t* sq, const bf16* k, const int64_t* sk,
                                      const bf16* v, const int64_t* sv, const int64_t* lens, bf16* out,
                                      const int64_t* so, float* lse, int64_t b, int64_t hq, int64_t hk, int64_t tq,
                                      int64_t tk, int64_t d, float scale, int threads) {
    if (!amx_ready() || d % 32 || d > 256 || hk < 1 || hq % hk || tq > tk || tq < 1 || tq * tk > MAX_SCORES)
        return 1;
    Forward a{q, k, v, lens, out, lse};
    memcpy(a.sq, sq, 24), memcpy(a.sk, sk, 24), memcpy(a.sv, sv, 24), memcpy(a.so, so, 24);
    a.b = b, a.hq = hq, a.hk = hk, a.tq = tq, a.tk = tk, a.d = d, a.scale = scale;
    const int64_t tkp = (tk + BLK - 1) / BLK * BLK, tks = tkp + BLK, blocks = (tq + BLK - 1) / BLK;
    std::vector<bf16> ktv(b * hk * tkp * d), vv(b * hk * tkp * d);  // Kᵀ and V as the products' B, per head
#pragma omp parallel num_threads(threads)
    {
#pragma omp for
        for (int64_t u = 0; u < b * hk; u++) {
            int64_t bb = u / hk, g = u % hk;
            pack_vnni_cols(&ktv[u * tkp * d], Src{k + bb * sk[0] + g * sk[1], sk[2], (int)tk}, (int)tkp, (int)d);
            pack_vnni_rows(&vv[u * tkp * d], Src{v + bb * sv[0] + g * sv[1], sv[2], (int)tk}, (int)tkp, (int)d);
        }
        configure();
        std::vector<float> s(BLK * tks), o(BLK * d);
        std::vector<bf16> p(BLK * tks), qb(BLK * d);
#pragma omp for schedule(dynamic)
        for (int64_t u = 0; u < b * hq * blocks; u++) {
            int64_t bb = u / (hq * blocks), h = u / blocks % hq, kv = bb * hk + h / (hq / hk);
            forward_block(a, &ktv[kv * tkp * d], &vv[kv * tkp * d], tks, bb, h, (int)(u % blocks * BLK), s.data(),
                          p.data(), qb.data(), o.data());
        }
        _tile_release();
    }
    return 0;
}

// dq, dk, dv of softmax attention (module doc). q, o, go, gq [B, Hq, Tq, D]; k, v, gk, gv
// [B, Hk, Tk, D]: bfloat16, strided (the last dimension contiguous); lse float32 [B, Hq, Tq] (strided); lens
// int64 [B] or null (every key real). D a multiple of 32, Hq a multiple of Hk, Tq <= Tk. Returns 0,
// or 1 where it cannot run (no AMX, a shape it does not take).
extern "C" int arft_attention_backward(const bf16* q, const int64_t* sq, const bf16* k, const int64_t* sk,
                                       const bf16* v, const int64_t* sv, const bf16* o, const int64_t* so,
                                       const bf16* go, const int64_t* sgo, const float* lse, const int64_t* slse,
                                       const int64_t* lens, bf16* gq, const int64_t* sgq, bf16* gk, const int64_t* sgk,
                                       bf16* gv, const int64_t* sgv, int64_t b, int64_t hq, int64_t hk, int64_t tq,
                                       int64_t tk, int64_t d, float scale, int threads) {
    if (!amx_ready() || d % 32 || d > 256 || hk < 1 || hq % hk || tq > tk || tq < 1 || tq * tk > MAX_SCORES)
        return 1;
    Args a{q, o, go, lse, lens, gq};
    memcpy(a.sq, sq, 24), memcpy(a.so, so, 24), memcpy(a.sgo, sgo, 24), memcpy(a.slse, slse, 24);
    memcpy(a.sgq, sgq, 24);
    a.b = b, a.hq = hq, a.hk = hk, a.tq = tq, a.tk = tk, a.d = d, a.scale = scale;
    const int tkp = (int)((tk + BLK - 1) / BLK * BLK);
    const int64_t part = (int64_t)tkp * d, group = hq / hk;
    const int64_t tks = tkp + BLK;
    std::vector<float> pk(b * hq * part), pv(b * hq * part);  // each query head's dK and dV
    std::vector<bf16> kr(b * hk * part), vr(b * hk * part), kt(b * hk * d * tks);
#pragma omp parallel num_threads(threads)
    {
#pragma omp for
        for (int64_t u = 0; u < b * hk; u++) {
            Src ku{k + u / hk * sk[0] + u % hk * sk[1], sk[2], (int)tk}, vu{v + u / hk * sv[0] + u % hk * sv[1], sv[2],
                                                                            (int)tk};
            pack_rows(&kr[u * part], ku, tkp, (int)d);
            pack_rows(&vr[u * part], vu, tkp, (int)d);
            pack_transposed(&kt[u * d * tks], ku, (int)tks, (int)d);
        }
        configure();
        Scratch w((int)tq, (int)tk, (int)d);
#pragma omp for schedule(dynamic)
        for (int64_t u = 0; u < b * hq; u++) {
            int64_t kv = u / hq * hk + u % hq / group;
            unit(a, w, KeyPacks{&kr[kv * part], &vr[kv * part], &kt[kv * d * tks]}, u / hq, u % hq, &pk[u * part],
                 &pv[u * part]);
        }
        _tile_release();
    }
#pragma omp parallel for num_threads(threads) collapse(2)
    for (int64_t u = 0; u < b * hk; u++) {
        for (int64_t t = 0; t < tk; t++) {
            int64_t bb = u / hk, g = u % hk;
            bf16* gkr = gk + bb * sgk[0] + g * sgk[1] + t * sgk[2];
            bf16* gvr = gv + bb * sgv[0] + g * sgv[1] + t * sgv[2];
            for (int64_t c = 0; c < d; c += 16) {
                __m512 sk_ = _mm512_setzero_ps(), sv_ = _mm512_setzero_ps();
                for (int64_t m = 0; m < group; m++) {
                    int64_t off = (bb * hq + g * group + m) * part + t * d + c;
                    sk_ = _mm512_add_ps(sk_, _mm512_loadu_ps(&pk[off]));
                    sv_ = _mm512_add_ps(sv_, _mm512_loadu_ps(&pv[off]));
                }
                _mm256_storeu_si256((__m256i*)(gkr + c), (__m256i)_mm512_cvtneps_pbh(sk_));
                _mm256_storeu_si256((__m256i*)(gvr + c), (__m256i)_mm512_cvtneps_pbh(sv_));
            }
        }
    }
    return 0;
}
#else
extern "C" int arft_attention_backward_caps() { return 0; }
extern "C" int arft_attention_forward(const arft_bf16*, const int64_t*, const arft_bf16*, const int64_t*,
                                      const arft_bf16*, const int64_t*, const int64_t*, arft_bf16*, const int64_t*,
                                      float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, int) {
    return 1;
}
extern "C" int arft_attention_backward(const arft_bf16*, const int64_t*, const arft_bf16*, const int64_t*,
                                       const arft_bf16*, const int64_t*, const arft_bf16*, const int64_t*,
                                       const arft_bf16*, const int64_t*, const float*, const int64_t*, const int64_t*,
                                       arft_bf16*, const int64_t*, arft_bf16*, const int64_t*, arft_bf16*,
                                       const int64_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                                       int) {
    return 1;
}
#endif

extern "C" int64_t arft_attention_max_scores() { return ARFT_ATTENTION_MAX_SCORES; }
