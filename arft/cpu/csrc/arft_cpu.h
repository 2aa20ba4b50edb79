// arft's CPU kernels: every function the libraries export, and their limits (docs/cpu.md).
//
// Each source file is its own shared library (arft/cpu/build.py); the "library:" lines below say
// which functions each one exports. Every source includes this header, so the compiler checks
// each definition against its prototype here, and arft/cpu/abi.py reads the same prototypes to
// call them from Python: the argument types, the tensor dtypes (float: float32, arft_bf16:
// bfloat16, int64_t: int64, void: float32 or bfloat16 as the bf16 argument says) and two marks
// that expand to nothing in C++:
//   ARFT_CONTIGUOUS  the tensor must be contiguous (the kernel indexes it without strides);
//   ARFT_OPTIONAL    the pointer may be null.
// Keep to the types the reader knows (int, int64_t, float, void, arft_bf16, pointers, const):
// a new one fails the reader's tests rather than a call.
#pragma once
#include <stdint.h>

#define ARFT_CONTIGUOUS
#define ARFT_OPTIONAL

typedef uint16_t arft_bf16;  // bfloat16's bits

// Queries x keys a head at most for train attention: the backward keeps a head's dSᵀ, 2 bytes a
// score, per thread; longer sequences run PyTorch's sdpa.
#define ARFT_ATTENTION_MAX_SCORES ((int64_t)1 << 24)
// Values a row at most for RMSNorm: a row's float32 copy lives on the stack.
#define ARFT_RMS_NORM_MAX_DIM 8192

#ifdef __cplusplus
extern "C" {
#endif

// library: decode_attention
// Bit 0: float32 runs here (AVX-512F), bit 1: bfloat16 (AVX512-BF16).
int arft_decode_attention_caps(void);
// q [B, H, G, D], k and v [B, H, T, D], mask [B, T] (additive, or null), prior [B, H, G, D] (or
// null) in bfloat16 (bf16 = 1) or float32, each with the strides given (in elements; the last
// dimension contiguous); prior_lse [B, H, G] float32 with its strides. Writes out [B, H, G, D]
// (contiguous, the inputs' dtype) and lse [B, H, G] (contiguous float32, or null). 0: done; 1:
// not supported here.
int arft_decode_attention(const void* q, int64_t q_sb, int64_t q_sh, int64_t q_sg, const void* k, int64_t k_sb,
                          int64_t k_sh, int64_t k_st, const void* v, int64_t v_sb, int64_t v_sh, int64_t v_st,
                          const void* ARFT_OPTIONAL mask, int64_t m_sb, const void* ARFT_OPTIONAL prior, int64_t p_sb,
                          int64_t p_sh, int64_t p_sg, const float* ARFT_OPTIONAL prior_lse, int64_t l_sb,
                          int64_t l_sh, int64_t l_sg, void* ARFT_CONTIGUOUS out,
                          float* ARFT_OPTIONAL ARFT_CONTIGUOUS lse, int64_t b, int64_t h, int64_t g, int64_t t,
                          int64_t d, float scale, int bf16, int threads);

// library: decode_attention_avx2
// 1 where this build runs float32 attention on AVX2 and FMA without AVX-512 (else a stub).
int arft_decode_attention_avx2_caps(void);
// arft_decode_attention's float32 work on AVX2 (the same arguments but bf16).
int arft_decode_attention_avx2(const float* q, int64_t q_sb, int64_t q_sh, int64_t q_sg, const float* k,
                               int64_t k_sb, int64_t k_sh, int64_t k_st, const float* v, int64_t v_sb, int64_t v_sh,
                               int64_t v_st, const float* ARFT_OPTIONAL mask, int64_t m_sb,
                               const float* ARFT_OPTIONAL prior, int64_t p_sb, int64_t p_sh, int64_t p_sg,
                               const float* ARFT_OPTIONAL prior_lse, int64_t l_sb, int64_t l_sh, int64_t l_sg,
                               float* ARFT_CONTIGUOUS out, float* ARFT_OPTIONAL ARFT_CONTIGUOUS lse, int64_t b,
                               int64_t h, int64_t g, int64_t t, int64_t d, float scale, int threads);

// library: small_ops
// 1: built (AVX-512), 0: not.
int arft_small_ops_caps(void);
// ARFT_RMS_NORM_MAX_DIM.
int64_t arft_rms_norm_max_dim(void);
// Rows of x [rows, dim] (row stride x_s; delta, hidden, out alike) in bfloat16 (bf16 = 1) or
// float32: with delta, hidden = x + delta (written where hidden is not null) is what is
// normalised; out = weight * norm; rstd (if not null) gets each row's rsqrt(mean + eps).
// 0: done, 1: not supported.
int arft_rms_norm(const void* x, int64_t x_s, const void* ARFT_OPTIONAL delta, int64_t d_s,
                  void* ARFT_OPTIONAL hidden, int64_t h_s, const void* ARFT_CONTIGUOUS weight, void* out, int64_t o_s,
                  int64_t rows, int64_t dim, float eps, float* ARFT_OPTIONAL ARFT_CONTIGUOUS rstd, int bf16,
                  int threads);
// dx of rms_norm without delta from its rstd: every tensor contiguous [rows, dim].
int arft_rms_norm_backward(const void* ARFT_CONTIGUOUS dy, const void* ARFT_CONTIGUOUS x,
                           const void* ARFT_CONTIGUOUS weight, const float* ARFT_CONTIGUOUS rstd,
                           void* ARFT_CONTIGUOUS dx, int64_t rows, int64_t dim, int bf16, int threads);
// The first heads heads of each row of x (row stride x_s) rotated in place by cos/sin (row
// stride c_s), as Hugging Face's apply_rotary_pos_emb.
int arft_rope(void* x, int64_t x_s, int64_t heads, int64_t d, const void* cos, const void* sin, int64_t c_s,
              int64_t rows, int bf16, int threads);
// out [rows, n] (contiguous) = silu(gate) * up, gate and up with row strides g_s and u_s.
int arft_silu_mul(const void* gate, int64_t g_s, const void* up, int64_t u_s, void* ARFT_CONTIGUOUS out,
                  int64_t rows, int64_t n, int bf16, int threads);

// library: train_attention
// 1 where the forward and backward run here (AMX with bfloat16, and Linux lent its tiles).
int arft_attention_backward_caps(void);
// ARFT_ATTENTION_MAX_SCORES.
int64_t arft_attention_max_scores(void);
// out [B, Hq, Tq, D] (strided) and lse [B, Hq, Tq] (float32, contiguous) of causal softmax
// attention: q [B, Hq, Tq, D], k, v [B, Hk, Tk, D] bfloat16 strided (sq, sk, sv, so: the first
// three strides), lens int64 [B] or null. 0, or 1 where it cannot run.
int arft_attention_forward(const arft_bf16* q, const int64_t* sq, const arft_bf16* k, const int64_t* sk,
                           const arft_bf16* v, const int64_t* sv, const int64_t* ARFT_OPTIONAL ARFT_CONTIGUOUS lens,
                           arft_bf16* out, const int64_t* so, float* ARFT_CONTIGUOUS lse, int64_t b, int64_t hq,
                           int64_t hk, int64_t tq, int64_t tk, int64_t d, float scale, int threads);
// dq, dk, dv of causal softmax attention (train_attention.cpp): q, o, go, gq [B, Hq, Tq, D]; k,
// v, gk, gv [B, Hk, Tk, D] bfloat16 strided; lse float32 [B, Hq, Tq] strided; lens int64 [B] or
// null. 0, or 1 where it cannot run (no AMX, a shape it does not take).
int arft_attention_backward(const arft_bf16* q, const int64_t* sq, const arft_bf16* k, const int64_t* sk,
                            const arft_bf16* v, const int64_t* sv, const arft_bf16* o, const int64_t* so,
                            const arft_bf16* go, const int64_t* sgo, const float* lse, const int64_t* slse,
                            const int64_t* ARFT_OPTIONAL ARFT_CONTIGUOUS lens, arft_bf16* gq, const int64_t* sgq,
                            arft_bf16* gk, const int64_t* sgk, arft_bf16* gv, const int64_t* sgv, int64_t b,
                            int64_t hq, int64_t hk, int64_t tq, int64_t tk, int64_t d, float scale, int threads);

// library: train_ops
// 1: built (AVX-512), 0: not.
int arft_train_ops_caps(void);
// Per row n of logits x [N, V] (row stride sx; bfloat16 where bf16, else float32) at temperature
// 1 / inv_t: lp[n] = the logprob of targets[n], ent[n] = the entropy, lse[n] = the log-sum-exp.
// 0: done, 1: not built, 2: a target outside [0, V).
int arft_token_logprobs(const void* x, int64_t sx, const int64_t* ARFT_CONTIGUOUS targets,
                        float* ARFT_CONTIGUOUS lp, float* ARFT_CONTIGUOUS ent, float* ARFT_CONTIGUOUS lse, int64_t n,
                        int64_t v, float inv_t, int bf16, int threads);
// dx [N, V] (contiguous, x's dtype) of sum_n grad[n] * lp[n], from the forward's lse.
int arft_token_logprobs_backward(const void* x, int64_t sx, const int64_t* ARFT_CONTIGUOUS targets,
                                 const float* ARFT_CONTIGUOUS lse, const float* ARFT_CONTIGUOUS grad,
                                 void* ARFT_CONTIGUOUS dx, int64_t n, int64_t v, float inv_t, int bf16, int threads);
// The gradients of silu(gate) * up (silu rounded to the dtype first, as the forward) with respect
// to gate and up, all contiguous [count].
int arft_silu_mul_backward(const void* ARFT_CONTIGUOUS gate, const void* ARFT_CONTIGUOUS up,
                           const void* ARFT_CONTIGUOUS dy, void* ARFT_CONTIGUOUS dgate, void* ARFT_CONTIGUOUS dup,
                           int64_t count, int bf16, int threads);
// out [B, H, T, D] (strides so) = x (strides sx) rotated by cos and sin [B, T, D] (strides sc, one
// layout for both; the batch stride may be 0), or by -sin where inverse (the gradient).
int arft_rope_strided(const void* x, const int64_t* sx, void* out, const int64_t* so, const void* cos,
                      const void* sin, const int64_t* sc, int64_t b, int64_t h, int64_t t, int64_t d, int inverse,
                      int bf16, int threads);

#ifdef __cplusplus
}
#endif
