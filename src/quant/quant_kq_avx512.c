/*
 * quant_kq_avx512.c - AVX-512 (F, BW, VL, DQ) kernels for Q4_K, Q2_K,
 * IQ2_XXS weights and Q8_K activations. Same method and same results as the
 * AVX2 kernels (quant_kq_avx2.c), 64 bytes at a time: two Q4_K nibble
 * groups, both Q2_K 128-value halves, two IQ2_XXS sub-blocks, whose 64 sign
 * bits become one mask register applied with a masked subtract.
 */
#include <immintrin.h>
#include <math.h>

#include "quant/iq2_grid.h"
#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_simd.h"

/* ---- Q8_K (rounding as the reference; cvtsepi32_epi8 saturates to 127) */
MS_DECL_QUANT(q8_K, avx512) {
    block_q8_K *b = y;
    const __m512i cap = _mm512_set1_epi32(127);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m512 vmax = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16) vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + j)), vmax);
        const float amax = _mm512_reduce_max_ps(vmax);
        if (!(amax > 0.0f)) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float max = 0.0f;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        const float iscale = -127.0f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 16) {
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + j)));
            v = _mm512_min_epi32(v, cap);
            _mm_storeu_si128((__m128i *)(b[i].qs + j), _mm512_cvtsepi32_epi8(v));
            b[i].bsums[j / 16] = (int16_t)_mm512_reduce_add_epi32(v);
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---- dequantization */

static inline __m512 u8x16_to_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }

MS_DECL_DEQUANT(q4_K, avx512) {
    const block_q4_K *b = x;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(b[i].scales, sc, m);
        for (int g = 0; g < 4; g++) {
            const __m512 d1 = _mm512_set1_ps(d * sc[2 * g]), m1 = _mm512_set1_ps(dmin * m[2 * g]);
            const __m512 d2 = _mm512_set1_ps(d * sc[2 * g + 1]), m2 = _mm512_set1_ps(dmin * m[2 * g + 1]);
            for (int k = 0; k < 2; k++) {
                const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * g + 16 * k));
                const __m512 lo = u8x16_to_ps(_mm_and_si128(q, m4));
                const __m512 hi = u8x16_to_ps(_mm_and_si128(_mm_srli_epi16(q, 4), m4));
                _mm512_storeu_ps(y + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d1, lo), m1));
                _mm512_storeu_ps(y + 32 + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d2, hi), m2));
            }
            y += 64;
        }
    }
}

MS_DECL_DEQUANT(q2_K, avx512) {
    const block_q2_K *b = x;
    const __m128i m3 = _mm_set1_epi8(3);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        for (int k = 0; k < QK_K / 16; k++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * (k / 8) + 16 * (k % 2)));
            const __m128i v = _mm_and_si128(_mm_srl_epi16(q, _mm_cvtsi32_si128(2 * ((k % 8) / 2))), m3);
            const __m512 dl = _mm512_set1_ps(d * (float)(b[i].scales[k] & 0x0f));
            const __m512 ml = _mm512_set1_ps(dmin * (float)(b[i].scales[k] >> 4));
            _mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(dl, u8x16_to_ps(v)), ml));
            y += 16;
        }
    }
}

MS_DECL_DEQUANT(iq2_xxs, avx512) {
    const block_iq2_xxs *b = x;
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t aux[2];
            ms_iq2xxs_aux(&b[i], ib, aux);
            const __m512 db = _mm512_set1_ps(d * (0.5f + (float)(aux[1] >> 28)) * 0.25f);
            for (int l = 0; l < 4; l += 2) {
                const uint64_t g0 = ms_iq2xxs_grid[(aux[0] >> (8 * l)) & 0xff];
                const uint64_t g1 = ms_iq2xxs_grid[(aux[0] >> (8 * l + 8)) & 0xff];
                const __mmask16 neg = (__mmask16)(ms_iq2_ksigns[(aux[1] >> (7 * l)) & 127] |
                                                  ms_iq2_ksigns[(aux[1] >> (7 * l + 7)) & 127] << 8);
                const __m512i v = _mm512_castps_si512(
                    _mm512_mul_ps(db, u8x16_to_ps(_mm_set_epi64x((long long)g1, (long long)g0))));
                _mm512_storeu_ps(y, _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, neg, v, sign)));
                y += 16;
            }
        }
    }
}

/* ---- dots with Q8_K activations */

MS_DECL_DOT(q4_K, q8_K, avx512) {
    const block_q4_K *w = x;
    const block_q8_K *a = y;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(w[i].scales, sc, m);
        __m512i acc = _mm512_setzero_si512();
        for (int p = 0; p < 2; p++) { /* nibble groups g = 2p (low half) and 2p + 1 */
            const __m512i q = _mm512_loadu_si512(w[i].qs + 64 * p);
            const __m512i lo = _mm512_and_si512(q, m4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            const int8_t *q8 = a[i].qs + 128 * p;
            const __m512i a_lo = load2x32(q8, q8 + 64), a_hi = load2x32(q8 + 32, q8 + 96);
            const __m512i s_lo = cat256(_mm256_set1_epi16(sc[4 * p]), _mm256_set1_epi16(sc[4 * p + 2]));
            const __m512i s_hi = cat256(_mm256_set1_epi16(sc[4 * p + 1]), _mm256_set1_epi16(sc[4 * p + 3]));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(lo, a_lo), s_lo));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(hi, a_hi), s_hi));
        }
        const int32_t summ = q8k_bsums_dot(a[i].bsums, q4k_mins16(m));
        const int32_t sumi = _mm512_reduce_add_epi32(acc);
        sumf += ms_kq_block_sum(a[i].d, w[i].d, w[i].dmin, sumi, summ);
    }
    *s = sumf;
}

/* For shift 2j, the 64 codes of both halves use scales 2j, 2j+1 (half 0)
 * and 8+2j, 9+2j (half 1), one per 16 codes = one per 128-bit lane, i.e. per
 * 8 int16 pair sums after maddubs. */
static const int16_t k_q2k_scale_idx[4][32] = {
#define Q2K_IDX(j) {2 * (j), 2 * (j), 2 * (j), 2 * (j), 2 * (j), 2 * (j), 2 * (j), 2 * (j),                       \
                    2 * (j) + 1, 2 * (j) + 1, 2 * (j) + 1, 2 * (j) + 1, 2 * (j) + 1, 2 * (j) + 1, 2 * (j) + 1, 2 * (j) + 1, \
                    8 + 2 * (j), 8 + 2 * (j), 8 + 2 * (j), 8 + 2 * (j), 8 + 2 * (j), 8 + 2 * (j), 8 + 2 * (j), 8 + 2 * (j), \
                    9 + 2 * (j), 9 + 2 * (j), 9 + 2 * (j), 9 + 2 * (j), 9 + 2 * (j), 9 + 2 * (j), 9 + 2 * (j), 9 + 2 * (j)}
    Q2K_IDX(0), Q2K_IDX(1), Q2K_IDX(2), Q2K_IDX(3)
#undef Q2K_IDX
};

MS_DECL_DOT(q2_K, q8_K, avx512) {
    const block_q2_K *w = x;
    const block_q8_K *a = y;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m512i idx[4];
    for (int j = 0; j < 4; j++) idx[j] = _mm512_loadu_si512(k_q2k_scale_idx[j]);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i scb = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(scb, m4)));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4));
        const int32_t summ = q8k_bsums_dot(a[i].bsums, mn16);
        const __m512i q = _mm512_loadu_si512(w[i].qs);
        __m512i acc = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_and_si512(_mm512_srl_epi16(q, _mm_cvtsi32_si128(2 * j)), m3);
            const __m512i q8 = load2x32(a[i].qs + 32 * j, a[i].qs + 128 + 32 * j);
            const __m512i scv = _mm512_permutexvar_epi16(idx[j], sc16);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(v, q8), scv));
        }
        const int32_t sumi = _mm512_reduce_add_epi32(acc);
        sumf += ms_kq_block_sum(a[i].d, w[i].d, w[i].dmin, sumi, summ);
    }
    *s = sumf;
}

MS_DECL_DOT(iq2_xxs, q8_K, avx512) {
    const block_iq2_xxs *w = x;
    const block_q8_K *a = y;
    const __m512i zero = _mm512_setzero_si512();
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i acc = _mm512_setzero_si512();
        for (int ib = 0; ib < QK_K / 32; ib += 2) {
            uint32_t a0[2], a1[2];
            ms_iq2xxs_aux(&w[i], ib, a0);
            ms_iq2xxs_aux(&w[i], ib + 1, a1);
            const __m512i grid = _mm512_set_epi64(
                (long long)ms_iq2xxs_grid[a1[0] >> 24], (long long)ms_iq2xxs_grid[(a1[0] >> 16) & 0xff],
                (long long)ms_iq2xxs_grid[(a1[0] >> 8) & 0xff], (long long)ms_iq2xxs_grid[a1[0] & 0xff],
                (long long)ms_iq2xxs_grid[a0[0] >> 24], (long long)ms_iq2xxs_grid[(a0[0] >> 16) & 0xff],
                (long long)ms_iq2xxs_grid[(a0[0] >> 8) & 0xff], (long long)ms_iq2xxs_grid[a0[0] & 0xff]);
            uint64_t sw = 0;
            for (int l = 0; l < 4; l++) {
                sw |= (uint64_t)ms_iq2_ksigns[(a0[1] >> (7 * l)) & 127] << (8 * l);
                sw |= (uint64_t)ms_iq2_ksigns[(a1[1] >> (7 * l)) & 127] << (8 * l + 32);
            }
            __m512i q8 = _mm512_loadu_si512(a[i].qs + 32 * ib);
            q8 = _mm512_mask_sub_epi8(q8, (__mmask64)sw, zero, q8);
            const __m512i ls = cat256(_mm256_set1_epi16((short)(2 * (a0[1] >> 28) + 1)),
                                      _mm256_set1_epi16((short)(2 * (a1[1] >> 28) + 1)));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(grid, q8), ls));
        }
        sumf += a[i].d * ms_fp16_to_fp32(w[i].d) * (float)_mm512_reduce_add_epi32(acc);
    }
    *s = 0.125f * sumf;
}

/* ---- dots with f32 activations (dequantize a block, 16-lane f32 FMAs) */

static inline __m512 fma_block(const float *w, const float *x, __m512 acc) {
    for (int j = 0; j < QK_K; j += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(x + j), acc);
    return acc;
}

#define MS_DEFINE_DOT_F32_AVX512(fmt, blk)                                       \
    MS_DECL_DOT(fmt, f32, avx512) {                                               \
        const blk *w = x;                                                         \
        const float *a = y;                                                       \
        float tmp[QK_K];                                                          \
        __m512 acc = _mm512_setzero_ps();                                         \
        for (int64_t i = 0; i < n / QK_K; i++) {                                  \
            ms_dequant_##fmt##_avx512(&w[i], tmp, QK_K);                          \
            acc = fma_block(tmp, a + i * QK_K, acc);                              \
        }                                                                         \
        *s = _mm512_reduce_add_ps(acc);                                           \
    }

MS_DEFINE_DOT_F32_AVX512(q4_K, block_q4_K)
MS_DEFINE_DOT_F32_AVX512(q2_K, block_q2_K)
MS_DEFINE_DOT_F32_AVX512(iq2_xxs, block_iq2_xxs)
