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

#endif
