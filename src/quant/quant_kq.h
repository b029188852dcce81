/*
 * quant_kq.h - internal: small helpers shared by the Q4_K / Q2_K / IQ2_XXS /
 * Q8_K kernels (quant_kq_*.c). Only quant/ includes this header.
 */
#ifndef MS_QUANT_KQ_H
#define MS_QUANT_KQ_H

#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant.h"

/* Q4_K packs 8 six-bit scales and 8 six-bit mins in 12 bytes (ggml's
 * get_scale_min_k4): sub-blocks 0..3 keep scale and min in the low 6 bits of
 * bytes 0..3 and 4..7; sub-blocks 4..7 keep their low 4 bits in the nibbles
 * of bytes 8..11 (scale low, min high) and their top 2 bits in the top 2 bits
 * of bytes 0..3 (scale) and 4..7 (min). */
static inline void ms_q4k_unpack_scales(const uint8_t s[K_SCALE_SIZE], uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0x0f) | ((s[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* The same unpacking in 32-bit words (ggml's kmask form), for SIMD code:
 * byte j of *sc / *m is sc[j] / m[j] of ms_q4k_unpack_scales. Kept out of
 * memory: byte stores read back as one 8-byte load stall on store
 * forwarding (measured: a tenth of the four-token Q4_K dot under gcc). */
static inline void ms_q4k_unpack_scales_u64(const uint8_t s[K_SCALE_SIZE], uint64_t *sc, uint64_t *m) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    *sc = (uint64_t)sc_lo | (uint64_t)sc_hi << 32;
    *m = (uint64_t)m_lo | (uint64_t)m_hi << 32;
}

/* The inverse: sc[j], m[j] in [0, 63]. */
static inline void ms_q4k_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t s[K_SCALE_SIZE]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
    }
}

/* Q3_K packs 16 six-bit scales in 12 bytes (ggml's kmask unpacking in
 * dequantize_row_q3_K): scale k keeps its low 4 bits in the low (k < 8) or
 * high (k >= 8) nibble of byte k % 8 and its top 2 bits in bits 2 (k / 4),
 * 2 (k / 4) + 1 of byte 8 + k % 4. The stored value is the sub-block scale
 * plus 32; sc[k] is the scale itself, in [-32, 31]. */
static inline void ms_q3k_unpack_scales(const uint8_t s[K_SCALE_SIZE], int8_t sc[16]) {
    for (int k = 0; k < 16; k++) {
        const int lo = k < 8 ? s[k] & 15 : s[k - 8] >> 4;
        const int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        sc[k] = (int8_t)((lo | hi << 4) - 32);
    }
}

/* The inverse of ms_q3k_unpack_scales: sc[k] in [-32, 31]. */
static inline void ms_q3k_pack_scales(const int8_t sc[16], uint8_t s[K_SCALE_SIZE]) {
    memset(s, 0, K_SCALE_SIZE);
    for (int k = 0; k < 16; k++) {
        const int v = sc[k] + 32;
        s[k % 8] |= (uint8_t)((v & 15) << (k < 8 ? 0 : 4));
        s[8 + k % 4] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
    }
}

/* One Q4_K or Q2_K block's share of a dot with Q8_K activations (ggml's
 * formula): ad * d * sumi - ad * dmin * summ, with ad the activation scale,
 * d and dmin the block's fp16 scales, sumi the scaled code dot and summ the
 * min-weighted bsums. Each kernel adds it to its f32 sum. */
static inline float ms_kq_block_sum_f32(float ad, float d, float dmin, int32_t sumi, int32_t summ) {
    const float sd = ad * d;
    const float smin = ad * dmin;
    return sd * (float)sumi - smin * (float)summ;
}

static inline float ms_kq_block_sum(float ad, uint16_t d, uint16_t dmin, int32_t sumi, int32_t summ) {
    return ms_kq_block_sum_f32(ad, ms_fp16_to_fp32(d), ms_fp16_to_fp32(dmin), sumi, summ);
}

/* IQ2_XXS sub-block ib (32 values) as two little-endian words: aux[0] holds
 * four grid indices (byte l for group l), aux[1] holds four 7-bit sign
 * indices (bits 7l..7l+6) and the 4-bit scale (bits 28..31). */
static inline void ms_iq2xxs_aux(const block_iq2_xxs *b, int ib, uint32_t aux[2]) {
    const uint16_t *q = b->qs + 4 * ib;
    aux[0] = (uint32_t)q[0] | (uint32_t)q[1] << 16;
    aux[1] = (uint32_t)q[2] | (uint32_t)q[3] << 16;
}

#ifdef __AVX2__
#include <immintrin.h>

/* The SIMD Q8_K dots (quant_kq_avx*.c) end each block with integer lane
 * sums; the four-token forms reduce their tokens together. Integer sums are
 * exact, so any reduction order gives the single kernel's values. */

/* ms_q3k_unpack_scales in a register: byte k is sc[k] (int8), worked out
 * in vector registers. Kept out of memory: four 4-byte words stored and
 * read back as one 16-byte load stall on store forwarding, which made the
 * single-token Q3_K dot a third as fast as Q5_K's. */
static inline __m128i ms_q3k_scales_i8(const uint8_t s[K_SCALE_SIZE]) {
    uint32_t a0, a1, t;
    memcpy(&a0, s, 4);
    memcpy(&a1, s + 4, 4);
    memcpy(&t, s + 8, 4);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_setr_epi32((int)a0, (int)a1, (int)a0, (int)a1),
                                                    _mm_setr_epi32(0, 0, 4, 4)),
                                     _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)t), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(0x03));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi32(hi, 4)), _mm_set1_epi8(32));
}

/* Lane k of the result = the sum of the 8 int32 lanes of v[k], k = 0..7. */
static inline __m256i ms_kq_hsum8x8_i32(const __m256i v[8]) {
    const __m256i t0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i t1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20), _mm256_permute2x128_si256(t0, t1, 0x31));
}

/* Lane k of the result = the sum of the 8 int32 lanes of v[k], k = 0..3. */
static inline __m128i ms_kq_hsum4x8_i32(const __m256i v[4]) {
    const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

/* The block's two fp16 scales d and dmin (adjacent in block_q4_K and
 * block_q2_K and block_q5_K, dm points at d) in lanes 0 and 1. */
static inline __m128 ms_kq_d_dmin(const uint16_t *dm) {
    int32_t w;
    memcpy(&w, dm, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(w));
}

/* Adds one super-block's contribution for each of the nt tokens: v[k] holds
 * token k's scaled-code sum lanes, v[4 + k] its min-correction lanes (Q4_K,
 * Q5_K and Q2_K share this tail; dm points at the block's d, dmin). One token
 * adds to lane 0 of *sum1 and stays in vector registers: the integer sums
 * are converted there and multiplied lane-wise, [ad * d, ad * dmin] times
 * [sumi, summ], then the two lanes subtracted, ms_kq_block_sum_f32's
 * operations in its order. Its earlier form moved the sums out to general
 * registers and back (vmovd, vpextrd, vcvtsi2ss on the block's dependency
 * path): 31.7 -> 29.5 cycles per block on a Zen 3 core (cache-resident
 * rows of 4096, 14.5 -> 15.6 GB/s; 13.7 -> 14.7 from DRAM). Four tokens
 * reduce their sums together and take them as scalars. */
static inline __attribute__((always_inline)) void ms_kq_block_add(__m128 *sum1, float *sumf, const __m256i *v,
                                                                  const block_q8_K *const *a, int64_t i,
                                                                  const uint16_t *dm, int nt) {
    const __m128 dmv = ms_kq_d_dmin(dm);
    if (nt == 1) {
        const __m256i t = _mm256_hadd_epi32(v[0], v[4]); /* u01 u23 v01 v23 | u45 u67 v45 v67 */
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        h = _mm_hadd_epi32(h, h); /* sumi summ sumi summ */
        const __m128 p = _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(a[0][i].d), dmv), _mm_cvtepi32_ps(h));
        *sum1 = _mm_add_ss(*sum1, _mm_sub_ss(p, _mm_movehdup_ps(p)));
    } else {
        const float d = _mm_cvtss_f32(dmv), dmin = _mm_cvtss_f32(_mm_movehdup_ps(dmv));
        int32_t r[8];
        _mm256_storeu_si256((__m256i *)r, ms_kq_hsum8x8_i32(v));
        for (int k = 0; k < nt; k++) sumf[k] += ms_kq_block_sum_f32(a[k][i].d, d, dmin, r[k], r[4 + k]);
    }
}

/* The many-rows dots that take eight rows at once, one a lane (Q2_K,
 * quant_kq_avx2.c and quant_kq_avx512.c): the byte offsets k x_stride of
 * rows k = 0..7 (x_stride * 8 must fit an int32). */
static inline __m256i ms_kq_row_offsets8(size_t x_stride) {
    return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)x_stride));
}

/* ... and their float step for one block of each of the eight rows: lane k
 * of sumf plus ms_kq_block_sum_f32(ad, d_k, dmin_k, sumi_k, summ_k), in
 * its operations and order, with sumi_k and summ_k the sums of vi[k]'s and
 * vm[k]'s lanes, and d_k, dmin_k row k's block scales: the adjacent fp16
 * pair at dm + row_off[k] bytes (one gather for the eight rows). */
static inline __m256 ms_kq_rows8_add(__m256 sumf, const __m256i vi[8], const __m256i vm[8], const uint16_t *dm,
                                     __m256i row_off, float ad) {
    /* the low 16 bits of each int32 lane, packed (AVX2 has no vpmovdw) */
    const __m256i lo16 = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8,
                                          9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i dd = _mm256_i32gather_epi32((const int *)(const void *)dm, row_off, 1);
    const __m256i t0 = _mm256_shuffle_epi8(dd, lo16), t1 = _mm256_shuffle_epi8(_mm256_srli_epi32(dd, 16), lo16);
    const __m256 d = _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm256_castsi256_si128(t0), _mm256_extracti128_si256(t0, 1)));
    const __m256 dmin =
        _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm256_castsi256_si128(t1), _mm256_extracti128_si256(t1, 1)));
    const __m256 adv = _mm256_set1_ps(ad);
    const __m256 sd = _mm256_mul_ps(adv, d), smin = _mm256_mul_ps(adv, dmin);
    const __m256 sumi = _mm256_cvtepi32_ps(ms_kq_hsum8x8_i32(vi));
    const __m256 summ = _mm256_cvtepi32_ps(ms_kq_hsum8x8_i32(vm));
    return _mm256_add_ps(sumf, _mm256_sub_ps(_mm256_mul_ps(sd, sumi), _mm256_mul_ps(smin, summ)));
}
/* The float step for one block of the SIMD Q8_K dots whose reference adds
 * (ad * d) * (float)isum per block, with no min term (Q6_K, Q3_K, IQ4_XS):
 * v[k] token k's 8 int32 isum lanes (their sum the reference's isum), d16
 * the block's fp16 scale, a[k][i] token k's activation block. One token
 * (nt 1) adds the step to lane 0 of *sum1, kept in vector registers; four
 * (nt 4) reduce their sums together and add token k's to lane k of *sum4.
 * The same float operations as the reference, so bit for bit its value. */
static inline __attribute__((always_inline)) void ms_kq_isum_block_add(__m128 *sum1, __m128 *sum4, const __m256i v[4],
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
