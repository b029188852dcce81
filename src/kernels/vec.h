/*
 * vec.h - f32 vector primitives of the attention core: dot product and
 * axpy, with scalar, AVX2 and AVX-512 versions chosen once at run time (the
 * same ISA choice as the quant kernels, so MS_ISA caps both).
 */
#ifndef MS_KERNELS_VEC_H
#define MS_KERNELS_VEC_H

#include <stdint.h>

/* sum_i x[i] * y[i] over n floats. */
float ms_vec_dot(int64_t n, const float *x, const float *y);
/* y[i] += a * x[i] for i < n. */
void ms_vec_axpy(int64_t n, float a, const float *x, float *y);

/* out[k] = ms_vec_dot(n, x, rows[k]) for k < n_rows, bit for bit (each
 * row's operations are the single call's; loads of x are shared). out:
 * [n_rows]. */
void ms_vec_dot_rows(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out);
/* y[i] += w[k] * rows[k][i] for k = 0 .. n_rows - 1 in that order, i < n:
 * bit for bit n_rows calls of ms_vec_axpy, with y held in registers across
 * the rows instead of loaded and stored per row. w: [n_rows]. */
void ms_vec_axpy_rows(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y);

/* out[h][k] = ms_vec_dot(n, x[h], rows[k]) for h < 4, k < n_rows, bit for
 * bit: each row's loads shared by four queries (attention heads). */
void ms_vec_dot_rows_x4(int64_t n, const float *const x[4], const float *const *rows, int64_t n_rows,
                        float *const out[4]);
/* ms_vec_axpy_rows(n, w[h], rows, n_rows, y[h]) for h < 2, bit for bit,
 * each row's loads shared by the two outputs. */
void ms_vec_axpy_rows_x2(int64_t n, const float *const w[2], const float *const *rows, int64_t n_rows,
                         float *const y[2]);

/* Lightning-indexer scores of n_keys key rows against one token's queries,
 * heads in SIMD lanes (docs/model.md, "Attention"):
 *     out[m] = sum_h w[h] * max(0, q_h . key_m),   m < n_keys.
 * qT: [d][hp] the token's queries transposed (qT[c * hp + h] = q_h[c]),
 * hp a multiple of 16 (heads padded with zero queries and zero weights);
 * w: [hp]; key m: d floats at keys + m * key_stride. Per (key, head) one
 * FMA chain over c = 0 .. d - 1 in order; then max(., 0) times w[h]; the
 * heads summed lane by lane over the groups of 16 in group order, and the
 * 16 lanes by the tree (l + 8), (l + 4), (l + 2), (l + 1): the same
 * operations in every ISA, so all agree bit for bit. */
void ms_vec_relu_scores(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                        int64_t key_stride, int64_t n_keys, float *out);

/* exp(x) by one method in every ISA, so the vector forms below agree with
 * it bit for bit: n = rint(x log2(e)) (x clamped to [-104, 89] first, NaN
 * returned as is), r = x - n ln2 in two FMA steps (Cody and Waite's split
 * ln2 = 0.693359375 - 2.12194440e-4), exp(r) = 1 + r + r^2 P(r) with
 * Cephes' degree-5 expf polynomial in Horner form by FMAs, then times
 * 2^(n >> 1) and 2^(n - (n >> 1)), so results down to the subnormals and
 * the overflow to +inf come out of ordinary multiplies. Within 2 ulp of
 * exp over the float range (tests/test_vec.c). */
float ms_expf(float x);

/* Softmax numerator and denominator: x[i] = ms_expf(x[i] - m) for i < n,
 * and returns their sum in one order for every ISA: element i added to
 * partial sum i % 16 in index order, the 16 sums then combined lane l with
 * l + 8, l + 4, l + 2, l + 1 (as ms_vec_relu_scores). x: [n], n >= 0. */
float ms_vec_exp_sum(int64_t n, float *x, float m);

/* Clamped SwiGLU (docs/model.md, "Routed experts and the shared expert"):
 * for i < n, g = gate[i], u = up[i]; when limit > 1e-6, g = min(g, limit)
 * and u = min(max(u, -limit), limit) (a NaN takes the limit, as fminf and
 * fmaxf do); out[i] = (g / (1 + ms_expf(-g))) * u. out may alias gate or
 * up. */
void ms_vec_swiglu(int64_t n, float *out, const float *gate, const float *up, float limit);

/* Sum of squares for RMSNorm: each square x[i] * x[i] rounded in f32,
 * converted to double and added to partial sum i % 8 in index order; the
 * eight combined as ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)).
 * One order for every ISA (a vector of eight doubles is that order), so
 * all agree bit for bit. x: [n], n >= 0. */
double ms_vec_sum_sq(int64_t n, const float *x);

/* y[i] = (x[i] * a) * w[i], or x[i] * a when w is NULL, i < n: two f32
 * multiplies in that order (RMSNorm's scale, then its weight). y may
 * alias x. */
void ms_vec_scale(int64_t n, float *y, const float *x, float a, const float *w);

/* The hyper-connection mixes (docs/model.md, "Hyper-connections"): for
 * i < n,
 *     y[i] = ((a * f[i] + c[0] * x_0[i]) + c[1] * x_1[i]) + ...
 * over k < n_k, x_k = x + k * x_stride, each product and each sum rounded
 * in f32 (no FMA), left to right; with f NULL the sum starts from 0.0f
 * instead of a * f[i]. c: [n_k]. y must not overlap f or any x_k. */
void ms_vec_mix_rows(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                     int64_t x_stride, int n_k);

/* The implementations, for tests: isa 0 scalar, 1 AVX2, 2 AVX-512. */
float ms_vec_dot_isa(int isa, int64_t n, const float *x, const float *y);
void ms_vec_axpy_isa(int isa, int64_t n, float a, const float *x, float *y);
void ms_vec_dot_rows_isa(int isa, int64_t n, const float *x, const float *const *rows, int64_t n_rows,
                         float *out);
void ms_vec_axpy_rows_isa(int isa, int64_t n, const float *w, const float *const *rows, int64_t n_rows,
                          float *y);
void ms_vec_dot_rows_x4_isa(int isa, int64_t n, const float *const x[4], const float *const *rows,
                            int64_t n_rows, float *const out[4]);
void ms_vec_axpy_rows_x2_isa(int isa, int64_t n, const float *const w[2], const float *const *rows,
                             int64_t n_rows, float *const y[2]);
void ms_vec_relu_scores_isa(int isa, int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                            int64_t key_stride, int64_t n_keys, float *out);

float ms_vec_exp_sum_isa(int isa, int64_t n, float *x, float m);
void ms_vec_swiglu_isa(int isa, int64_t n, float *out, const float *gate, const float *up, float limit);
double ms_vec_sum_sq_isa(int isa, int64_t n, const float *x);
void ms_vec_scale_isa(int isa, int64_t n, float *y, const float *x, float a, const float *w);
void ms_vec_mix_rows_isa(int isa, int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                         int64_t x_stride, int n_k);
#endif
