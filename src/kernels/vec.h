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

/* The implementations, for tests: isa 0 scalar, 1 AVX2, 2 AVX-512. */
float ms_vec_dot_isa(int isa, int64_t n, const float *x, const float *y);
void ms_vec_axpy_isa(int isa, int64_t n, float a, const float *x, float *y);

#endif
