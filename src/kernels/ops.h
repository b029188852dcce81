/*
 * ops.h - the small elementwise and reduction operators of the DeepSeek V4
 * forward pass: RMSNorm, softmax, tail RoPE with YaRN, clamped SwiGLU,
 * sqrt-softplus, the hyper-connection Sinkhorn normalisation, and top-k with
 * llama.cpp's tie order.
 *
 * All are f32 code with double accumulation where the references
 * accumulate in double. They are O(n) next to the matmuls and mostly
 * scalar; RMSNorm's loops run on the vec.h primitives (a prefill runs it
 * on every token's 4 x n_embd hyper-connection state). Formulas and their
 * sources are cited per function; the derivations are in docs/model.md.
 */
#ifndef MS_KERNELS_OPS_H
#define MS_KERNELS_OPS_H

#include <stdbool.h>
#include <stdint.h>

/* y[i] = x[i] / sqrt(mean(x^2) + eps) * (w ? w[i] : 1), i < n. The sum of
 * squares is accumulated in double (as ggml and ds4 do; in eight
 * interleaved sums, the same for every n and call). y may alias x. */
void ms_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* In-place softmax over x[0..n); returns the max. -INFINITY entries get 0.
 * n >= 1 and at least one finite entry. */
float ms_softmax(float *x, int64_t n);

/* llama.cpp's CPU softplus: x > 20 ? x : log(1 + exp(x)) (ds4's log1p form
 * differs for very negative x; docs/model.md, "Numerics and modes"). */
float ms_softplus(float x);

/* Parameters of the "tail RoPE" of docs/model.md, "RoPE" (ggml rope_ext,
 * NORM mode:
 * consecutive pairs). ext_factor 0 disables YaRN's ramp. */
struct ms_rope_params {
    int n_rot;            /* d_r: rotated tail length (even) */
    float freq_base;      /* b */
    float freq_scale;     /* s = 1/factor */
    float ext_factor;     /* e */
    float attn_factor;    /* a */
    int n_ctx_orig;       /* N0 */
    float beta_fast;      /* YaRN beta_fast */
    float beta_slow;      /* YaRN beta_slow */
};

/* Rotates the last p->n_rot entries of x[0..n) at position pos (ggml's
 * rope_ext with YaRN, Peng et al. 2023; formula in docs/model.md, "RoPE").
 * inverse=true applies the inverse rotation (sin -> -sin, same magnitude),
 * as ggml's rope_ext_back. theta advances by repeated f32 multiplication,
 * as in ggml and ds4. */
void ms_rope_tail(float *x, int64_t n, int64_t pos, const struct ms_rope_params *p, bool inverse);

/* Longest rotated tail ms_rope_tail handles (hparams checks n_rot <= it). */
#define MS_ROPE_MAX_ROT 512

/* ms_rope_tail in two steps, for the many rows that share a position (a
 * token's heads): cs[0..p->n_rot) receives the rotation of pair i as
 * cs[2i] = cos(theta_i) * mscale, cs[2i + 1] = +-sin(theta_i) * mscale
 * (the sign: inverse), and ms_rope_apply rotates the last n_rot entries of
 * x[0..n) by it. ms_rope_cs then ms_rope_apply gives ms_rope_tail's result
 * bit for bit (ms_rope_tail is exactly these two calls). */
void ms_rope_cs(float *cs, int64_t pos, const struct ms_rope_params *p, bool inverse);
void ms_rope_apply(float *x, int64_t n, int n_rot, const float *cs);

/* Clamped SwiGLU (llama.cpp's deepseek4 experts; docs/model.md, "Routed
 * experts and the shared expert"): for i < n,
 *   g = gate[i], u = up[i]; if limit > 1e-6: g = min(g, limit), u = clamp(u, ±limit)
 *   out[i] = silu(g) * u = g / (1 + exp(-g)) * u
 * out may alias gate or up. This is ms_vec_swiglu (kernels/vec.h: SIMD,
 * with ms_expf, the same bits in every ISA). */
void ms_swiglu_clamped(float *out, const float *gate, const float *up, int64_t n, float limit);

/* Sinkhorn normalisation of the 4x4 hyper-connection combination matrix
 * (docs/model.md, "Hyper-connections"). z[d + 4*s] are the logits for destination d, source s (the
 * destination index is the fast one); c receives C[d][s] in the same layout.
 * Softmax over destinations per source, +eps, then a destination (row) pass,
 * then iters-1 (source, destination) pairs, every denominator + eps. */
void ms_sinkhorn4(float c[16], const float z[16], int iters, float eps);

/* Top-k indices of s[0..n) (largest first is not guaranteed: the order is
 * the heap's), reproducing llama.cpp's CPU top-k (std::partial_sort over
 * 0..n-1 with comparator s[a] > s[b], libstdc++'s heap selection), so that
 * exact ties are broken the way the reference breaks them (docs/model.md,
 * "Attention": the lightning indexer).
 * idx is scratch of n ints; the selected k (k <= n) indices end up in
 * idx[0..k). */
void ms_topk_heap(const float *s, int n, int k, int *idx);

#endif
