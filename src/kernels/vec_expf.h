/*
 * vec_expf.h - the constants of ms_expf (vec.h), shared by its scalar,
 * AVX2 and AVX-512 forms so that all three perform the same operations.
 * Range reduction after Cody and Waite; the polynomial is Cephes' expf
 * (S. L. Moshier, Cephes Math Library, expf.c), exp(r) ~ 1 + r + r^2 P(r)
 * on |r| <= ln(2) / 2.
 */
#ifndef MS_KERNELS_VEC_EXPF_H
#define MS_KERNELS_VEC_EXPF_H

#define MS_EXPF_LO (-104.0f) /* exp below it is 0 in float */
#define MS_EXPF_HI 89.0f     /* exp above it is +inf in float */
#define MS_EXPF_LOG2E 1.44269504088896341f
#define MS_EXPF_C1 0.693359375f    /* ln 2 = C1 - C2, C1 with 9 significant bits */
#define MS_EXPF_C2 (-2.12194440e-4f)
#define MS_EXPF_P0 1.9875691500e-4f
#define MS_EXPF_P1 1.3981999507e-3f
#define MS_EXPF_P2 8.3334519073e-3f
#define MS_EXPF_P3 4.1665795894e-2f
#define MS_EXPF_P4 1.6666665459e-1f
#define MS_EXPF_P5 5.0000001201e-1f

#endif
