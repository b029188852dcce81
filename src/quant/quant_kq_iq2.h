/*
 * quant_kq_iq2.h - internal: IQ2_XXS helpers in 256-bit vectors shared by
 * quant_kq_avx2.c and quant_kq_avx512.c (each compiles them with its own
 * ISA flags): a block's eight sub-block scales, and a sub-block's 32
 * signed weights as its four grid rows (four 8-byte loads from the 2 KiB,
 * L1-resident grid) and its four +-1 sign rows (from ms_iq2_signs64,
 * parity included), which the token-lane GEMMs expand once per row and
 * block. The AVX2 single-token and four-token dots use the same tables in
 * 128-bit halves (quant_kq_avx2.c); the AVX-512 ones look the grid up in
 * registers instead (quant_kq_avx512.c).
 */
#ifndef MS_QUANT_KQ_IQ2_H
#define MS_QUANT_KQ_IQ2_H

#include <immintrin.h>
#include <string.h>

#include "quant/iq2_grid.h"
#include "quant/quant_kq.h"
#include "quant/quant_simd.h"

/* ls[ib] = (2 s_ib + 1) in both int16 halves, s_ib the 4-bit scale in the
 * top bits of sub-block ib's second word (q = the block's qs bytes). */
MS_SIMD_INLINE void iq2xxs_scales(const uint8_t *q, uint32_t ls[8]) {
    const __m256 lo = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)q));
    const __m256 hi = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(q + 32)));
    /* odd dwords: sub-blocks 0 1 4 5 | 2 3 6 7, then in order */
    __m256i v = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, 0xdd));
    v = _mm256_permute4x64_epi64(v, 0xd8);
    v = _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(v, 28), 1), _mm256_set1_epi32(1));
    _mm256_storeu_si256((__m256i *)ls, _mm256_or_si256(v, _mm256_slli_epi32(v, 16)));
}

/* The four grid rows of a sub-block (its first four bytes index them). */
MS_SIMD_INLINE __m256i iq2xxs_grid4(const uint8_t *q) {
    return _mm256_set_epi64x((long long)ms_iq2xxs_grid[q[3]], (long long)ms_iq2xxs_grid[q[2]],
                             (long long)ms_iq2xxs_grid[q[1]], (long long)ms_iq2xxs_grid[q[0]]);
}

/* The +-1 multipliers of a sub-block from its second word's 4 x 7 bits. */
MS_SIMD_INLINE __m256i iq2xxs_signs4(uint32_t s32) {
    return _mm256_set_epi64x((long long)ms_iq2_signs64[(s32 >> 21) & 127],
                             (long long)ms_iq2_signs64[(s32 >> 14) & 127],
                             (long long)ms_iq2_signs64[(s32 >> 7) & 127],
                             (long long)ms_iq2_signs64[s32 & 127]);
}

#endif
