/*
 * quant_kq_iq2.h - internal: the IQ2_XXS x Q8_K dot (single token and four
 * tokens) in 256-bit vectors, included by quant_kq_avx2.c and
 * quant_kq_avx512.c. Each file compiles it with its own ISA flags; the
 * AVX-512 set uses it as is because its 512-bit form (two sub-blocks per
 * register, mask negation) spent its time assembling registers from
 * scalar lookups (8% of memory bandwidth at batch 1).
 *
 * Per 32-value sub-block: the four grid rows are four 8-byte loads (the
 * grid is 2 KiB, L1-resident); the signs are four 8-byte loads from
 * ms_iq2_signs64 (+-1 bytes, parity included), moved onto the activations
 * with sign_epi8 (Q8_K has no -128, so negation is exact); maddubs takes the
 * unsigned magnitudes (<= 43) times the activations into int16 pairs (<= 2 *
 * 43 * 127), madd weights them by the sub-block's odd scale 2s + 1 into
 * int32. The eight scales of a block are worked out together with vector
 * shifts and read back per sub-block as one broadcast load. Measured on an
 * AVX2-only Zen 1 core (bench/limits, cache-resident rows): 64 -> 36 ns per
 * block; the sign expansion in registers (shuffle, compare, psadbw parity)
 * took 44.
 *
 * The integer sums are exact and the float step per block and token is the
 * reference's (ad * d * sumi, the row's 0.125 * sum, in that order), so the
 * single, the four-token and the scalar kernel agree bit for bit.
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

/* s[k] = dot(row x, activations y[k]) for k < nt (1 or 4, a constant). */
MS_SIMD_INLINE void iq2xxs_dot_n(int64_t n, float *s, const void *x, const void *const *y,
                                 const int nt) {
    const block_iq2_xxs *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = (const uint8_t *)w[i].qs;
        uint32_t ls[8];
        iq2xxs_scales(q, ls);
        __m256i acc[4];
        MS_XN(k, nt, acc[k] = _mm256_setzero_si256(););
        _Pragma("GCC unroll 8")
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t s32;
            memcpy(&s32, q + 8 * ib + 4, 4);
            const __m256i g = iq2xxs_grid4(q + 8 * ib);
            const __m256i sg = iq2xxs_signs4(s32);
            const __m256i sc = _mm256_set1_epi32((int)ls[ib]);
            MS_XN(k, nt,
                  const __m256i av = _mm256_sign_epi8(
                      _mm256_loadu_si256((const __m256i *)(a[k][i].qs + 32 * ib)), sg);
                  acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(g, av), sc)););
        }
        const float d = fp16_scale(w[i].d);
        if (nt == 1) {
            sumf[0] += a[0][i].d * d * (float)hsum256_i32(acc[0]);
        } else {
            int32_t r[4];
            _mm_storeu_si128((__m128i *)r, ms_kq_hsum4x8_i32(acc));
            MS_X4(k, sumf[k] += a[k][i].d * d * (float)r[k];);
        }
    }
    MS_XN(k, nt, s[k] = 0.125f * sumf[k];);
}

#endif
