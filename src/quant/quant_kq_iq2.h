/*
 * quant_kq_iq2.h - internal: IQ2_XXS helpers in 256-bit vectors shared by
 * quant_kq_avx2.c and quant_kq_avx512.c (each compiles them with its own
 * ISA flags): a block's eight sub-block scales, and a sub-block's 32
 * signed weights as its four grid rows (four 8-byte loads from the 2 KiB,
 * L1-resident grid) and its four +-1 sign rows (from ms_iq2_signs64,
 * parity included), which the token-lane GEMMs expand once per row and
 * block. The AVX2 single-token and four-token dots use the same tables in
 * 128-bit halves (quant_kq_avx2.c); the AVX-512 ones look the grid up in
 * registers instead (quant_kq_avx512.c). The 512-bit section has the
 * 16-lane GEMMs' products over expanded weights, shared by the VBMI-less
 * expansion (quant_kq_avx512.c) and the byte-permute one
 * (quant_iq2_avx512vbmi.c).
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

#ifdef __AVX512F__
/* The products of IQ2_XXS block i of R (1 or 2, a constant) rows with a
 * pack of 16 tokens (the AVX-512 token-lane GEMMs), unpacked in buf (one
 * block of two rows; MS_DEFINE_GEMM_KQ_X16's BUF): wu[k] holds row k's
 * 256 signed weights in value order, offset by 128 (the unsigned operand
 * of vpdpbusd), ls[k][ib] sub-block ib's 2 s + 1 in its low int16, b[k]
 * the block (its d). Four weights of a row are broadcast per step against
 * the 16 tokens' activations; a 32-value sub-block's sum per token then
 * holds 128 times the sum of its activations too, which the pack already
 * has (bsp: bsub[ib] = bsums[2 ib] + bsums[2 ib + 1]): the block's sum_ib
 * ls_ib * sumi_ib is sum_ib ls_ib * T_ib minus 128 * sum_ib ls_ib *
 * bsub_ib, all exact in int32 (|T_ib| <= 32 * 171 * 128, ls_ib <= 31).
 * The float step is the reference's, (ad * d) * bsum added to accf[k];
 * iq2xxs_x16_finish applies its 0.125 at the row's end. */
struct iq2xxs_x16_buf {
    uint8_t wu[2][QK_K] __attribute__((aligned(64)));
    uint32_t ls[2][8] __attribute__((aligned(64)));
};

MS_SIMD_INLINE void iq2xxs_x16_products(const struct iq2xxs_x16_buf *buf, const block_iq2_xxs *const b[2],
                                        const block_q8_Kx16 *const ab[2], __m512 accf[2][2], const int R, const int P) {
    const uint8_t(*wu)[QK_K] = buf->wu;
    const uint32_t(*ls)[8] = buf->ls;
    const int U = MS_KQ_X16_SPAN(2, R, P); /* sub-blocks interleaved: 1, 2 or 4 */
    __m512i sumi[2][2];
    for (int k = 0; k < R; k++)
        for (int q = 0; q < P; q++) sumi[k][q] = _mm512_setzero_si512();
    _Pragma("GCC unroll 1")
    for (int ib0 = 0; ib0 < 8; ib0 += U) {
        __m512i t[4][2][2][2];
        for (int u = 0; u < U; u++)
            for (int k = 0; k < R; k++)
                for (int q = 0; q < P; q++) t[u][k][q][0] = t[u][k][q][1] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            _Pragma("GCC unroll 4")
            for (int u = 0; u < U; u++) {
                const int ib = ib0 + u;
                __m512i av[2];
                for (int q = 0; q < P; q++) av[q] = load_act512(ab[q]->qs[ib][j]);
                for (int k = 0; k < R; k++) {
                    uint32_t wv;
                    memcpy(&wv, wu[k] + 32 * ib + 4 * j, 4);
                    const __m512i wb = _mm512_set1_epi32((int)wv);
                    for (int q = 0; q < P; q++) t[u][k][q][j % 2] = _mm512_dpbusd_epi32(t[u][k][q][j % 2], wb, av[q]);
                }
            }
        }
        for (int u = 0; u < U; u++)
            for (int k = 0; k < R; k++) {
                const __m512i lsv = _mm512_set1_epi32((int)(ls[k][ib0 + u] & 0xffff));
                for (int q = 0; q < P; q++)
                    sumi[k][q] = _mm512_add_epi32(sumi[k][q], _mm512_mullo_epi32(_mm512_add_epi32(t[u][k][q][0], t[u][k][q][1]), lsv));
            }
    }
    for (int q = 0; q < P; q++) {
        const __m512 ad = _mm512_load_ps(ab[q]->d);
        for (int k = 0; k < R; k++) {
            /* 128 * sum_ib ls_ib * bsub_ib: bsp[p] pairs (bsub[2p], bsub[2p + 1]) */
            __m512i corr = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++) {
                const int lp = (int)((ls[k][2 * p] & 0xffff) | (ls[k][2 * p + 1] << 16));
                corr = _mm512_add_epi32(corr, _mm512_madd_epi16(_mm512_load_si512((const void *)ab[q]->bsp[p]), _mm512_set1_epi32(lp)));
            }
            const __m512i bsum = _mm512_sub_epi32(sumi[k][q], _mm512_slli_epi32(corr, 7));
            accf[k][q] = _mm512_add_ps(accf[k][q], _mm512_mul_ps(_mm512_mul_ps(ad, _mm512_set1_ps(fp16_scale(b[k]->d))),
                                                                 _mm512_cvtepi32_ps(bsum)));
        }
    }
}

/* A row's 16 token sums -> its results: the grid is 8 x its values (the
 * reference's 0.125 * sumf). */
static inline __m512 iq2xxs_x16_finish(__m512 v) { return _mm512_mul_ps(_mm512_set1_ps(0.125f), v); }
#endif

#endif
