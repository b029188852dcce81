/*
 * quant_q6k.h - internal: the Q6_K element layout, shared by its scalar,
 * AVX2 and AVX-512 kernels (quant_q6k_*.c). Only quant/ includes this
 * header.
 *
 * Layout (ggml's ggml-common.h block_q6_K and ggml-quants.c's
 * dequantize_row_q6_K): a block holds 256 values in two halves of 128;
 * element e = 128 h + 32 j + l (h < 2, j < 4, l < 32) has
 *   code  q = low | high << 4 in [0, 63],
 *         low  = ql[64 h + 32 (j % 2) + l], low nibble for j < 2, high for j >= 2,
 *         high = (qh[32 h + l] >> 2 j) & 3,
 *   scale sc = scales[e / 16] (int8, sub-blocks of 16 values),
 *   value x = d * sc * (q - 32), d the block's fp16 scale.
 * So the 32 codes of one (h, j) are consecutive elements, and each 16 of
 * them share a scale: vector c = 4 h + j takes scales[2 c] (l < 16) and
 * scales[2 c + 1] (l >= 16).
 */
#ifndef MS_QUANT_Q6K_H
#define MS_QUANT_Q6K_H

#include <stdint.h>

#include "quant/blocks.h"

/* The 6-bit code of element e (0..255) of block b, in [0, 63]. */
static inline int ms_q6k_code(const block_q6_K *b, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (j % 2) + l];
    const int low = j < 2 ? lo & 0x0f : lo >> 4;
    const int high = (b->qh[32 * h + l] >> (2 * j)) & 3;
    return low | high << 4;
}

/* One block's share of a dot with Q8_K activations, the float step every
 * Q6_K kernel repeats (quant_q6k_ref.c, ms_dot_q6_K_q8_K_ref): the
 * activation scale times the weight scale, then times the exact integer
 * sum isum converted to float (round to nearest). */
static inline float ms_q6k_block_sum(float ad, float d, int32_t isum) { return (ad * d) * (float)isum; }

#ifdef __AVX2__
#include <immintrin.h>

#include "quant/quant_kq.h"

/* The SIMD Q8_K dots' float step for one block (quant_q6k_avx2.c,
 * quant_q6k_avx512.c): v[k] token k's 8 int32 isum lanes (their sum the
 * reference's isum), d16 the block's fp16 scale, a[k][i] token k's
 * activation block. One token (nt 1) adds ms_q6k_block_sum's (ad * d) *
 * isum to lane 0 of *sum1, kept in vector registers; four (nt 4) reduce
 * their sums together and add token k's to lane k of *sum4. */
static inline __attribute__((always_inline)) void ms_q6k_block_add(__m128 *sum1, __m128 *sum4, const __m256i v[4],
                                                                   const block_q8_K *const *a, int64_t i,
                                                                   uint16_t d16, const int nt) {
    const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128(d16));
    if (nt == 1) {
        __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v[0]), _mm256_extracti128_si256(v[0], 1));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        *sum1 = _mm_add_ss(*sum1, _mm_mul_ss(_mm_mul_ss(_mm_set_ss(a[0][i].d), d), _mm_cvtepi32_ps(t)));
    } else {
        const __m128 ad = _mm_setr_ps(a[0][i].d, a[1][i].d, a[2][i].d, a[3][i].d);
        const __m128 dd = _mm_shuffle_ps(d, d, 0);
        *sum4 = _mm_add_ps(*sum4, _mm_mul_ps(_mm_mul_ps(ad, dd), _mm_cvtepi32_ps(ms_kq_hsum4x8_i32(v))));
    }
}
#endif

#endif
