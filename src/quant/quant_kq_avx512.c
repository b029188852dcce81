/*
 * quant_kq_avx512.c - AVX-512 (F, BW, VL, DQ, VNNI) kernels for Q4_K, Q2_K,
 * IQ2_XXS weights and Q8_K activations. Same results as the AVX2 kernels
 * (quant_kq_avx2.c), 64 bytes at a time: the weight codes are rearranged so
 * that each 64-byte vector lines up with 64 consecutive activation bytes
 * (two Q4_K sub-blocks, a quarter of a Q2_K block, two IQ2_XXS sub-blocks,
 * whose 64 sign bits become one mask register applied with a masked
 * subtract); VNNI's dpwssd applies the int16 scales and accumulates.
 * Q2_K's many-rows dot (decode) turns that around: it lays the token's
 * activations out once a call to match the codes.
 */
#include <immintrin.h>
#include <math.h>

#include "quant/iq2_grid.h"
#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_kq_iq2.h"
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
            const __m512 pr = _mm512_mul_ps(vs, _mm512_loadu_ps(x + j));
            /* a NaN product is 0 (the reference's rule; the conversion would give INT_MIN) */
            __m512i v = _mm512_cvtps_epi32(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(pr, pr, _CMP_ORD_Q), pr));
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

/* ---- dots with Q8_K activations
 *
 * Q4_K and Q2_K share one shape. The weight side of a block (kq_prep: codes,
 * scales, mins) is decoded once into four 64-byte code vectors w[c] lined up
 * with activation bytes 64c..64c+63, so the activations are plain 64-byte
 * loads, plus the int16 scale of every maddubs pair. Per token, maddubs makes
 * int16 pair sums (at most 2 * 15 * 128: no saturation) and VNNI's dpwssd
 * multiplies them by their scale and accumulates in int32. The four-token
 * forms do the weight side once per block for all four tokens; the integer
 * sums are exact and the float formula per block and token is the single
 * kernel's (ms_kq_block_sum_f32), in its order, so the results are equal bit
 * for bit. */

/* The per-vector loops below must be unrolled for the prep struct's arrays
 * to live in registers (gcc keeps them on the stack otherwise). */
#define MS_UNROLL4 _Pragma("GCC unroll 4")

struct kq_prep {
    __m512i w[4];  /* u8 codes, vector c for activation bytes 64c..64c+63 */
    __m512i sc[4]; /* int16 scale of each maddubs pair of w[c] */
    __m256i mins;  /* 16 int16 mins, lined up with the Q8_K bsums */
    float d, dmin;
};

/* sum over the block of scale * code * q8, spread over 16 int32 lanes */
MS_SIMD_INLINE __m512i kq_sumi(const struct kq_prep *p, const int8_t *q8) {
    __m512i acc = _mm512_setzero_si512();
    MS_UNROLL4
    for (int c = 0; c < 4; c++)
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(p->w[c], _mm512_loadu_si512(q8 + 64 * c)), p->sc[c]);
    return acc;
}

/* the min term's products, summed to summ over 8 int32 lanes */
static inline __m256i kq_summ(const struct kq_prep *p, const block_q8_K *a) {
    return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), p->mins);
}

/* the block's sumi (16 lanes folded to 8) and summ in one reduction tree */
MS_SIMD_INLINE float kq_block_one(const struct kq_prep *p, const block_q8_K *a) {
    const __m512i acc = kq_sumi(p, a->qs);
    int32_t sumi, summ;
    hsum2x256_i32(fold256_i32(acc), kq_summ(p, a),
                  &sumi, &summ);
    return ms_kq_block_sum_f32(a->d, p->d, p->dmin, sumi, summ);
}

/* One block for nt tokens (1..4, a constant): sumf[k] += the block's
 * share for token k. */
MS_SIMD_INLINE void kq_block_n(const struct kq_prep *p, const block_q8_K *const a[4], float sumf[4], const int nt) {
    __m256i v[8];
    MS_XN(k, nt, const __m512i acc = kq_sumi(p, a[k]->qs);
          v[k] = fold256_i32(acc);
          v[4 + k] = kq_summ(p, a[k]););
    for (int k = nt; k < 4; k++) v[k] = v[4 + k] = _mm256_setzero_si256(); /* the reduction takes four */
    int32_t r[8];
    _mm256_storeu_si256((__m256i *)r, ms_kq_hsum8x8_i32(v));
    MS_XN(k, nt, sumf[k] += ms_kq_block_sum_f32(a[k]->d, p->d, p->dmin, r[k], r[4 + k]););
}

/* Q4_K: byte group c (qs[32c..32c+31]) holds sub-block 2c in its low and
 * 2c+1 in its high nibbles, i.e. exactly activation bytes 64c..64c+63. */
MS_SIMD_INLINE void q4k_prep(const block_q4_K *b, struct kq_prep *p) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    uint64_t sc, m;
    ms_q4k_unpack_scales_u64(b->scales, &sc, &m);
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    const __m512i half = cat256(_mm256_setzero_si256(), _mm256_set1_epi16(1));
    MS_UNROLL4
    for (int c = 0; c < 4; c++) {
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * c)));
        p->w[c] = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xffff0000u, q, 4), m4);
        p->sc[c] = _mm512_permutexvar_epi16(_mm512_add_epi16(half, _mm512_set1_epi16((short)(2 * c))), sc16);
    }
    p->mins = q4k_mins16_u64(m);
    p->d = fp16_scale(b->d);
    p->dmin = fp16_scale(b->dmin);
}

/* The single-token Q4_K dot does not use q4k_prep: decoding for one token
 * the way the x4 kernel decodes for four costs a third of decode speed.
 * The exact integer sums sumi and summ are the same, and the float step is
 * the same ms_kq_block_sum_f32, so results stay identical to the x4's. */
MS_DECL_DOT(q4_K, q8_K, avx512) {
    const block_q4_K *w = x;
    const block_q8_K *a = y;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint64_t scw, m;
        ms_q4k_unpack_scales_u64(w[i].scales, &scw, &m);
        uint8_t sc[8];
        for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(scw >> (8 * j));
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
        const int32_t summ = q8k_bsums_dot(a[i].bsums, q4k_mins16_u64(m));
        const int32_t sumi = _mm512_reduce_add_epi32(acc);
        sumf += ms_kq_block_sum_f32(a[i].d, fp16_scale(w[i].d), fp16_scale(w[i].dmin), sumi, summ);
    }
    *s = sumf;
}

/* The four-token dot's body for nt tokens (1..4, a constant; y[k] for k
 * < nt): each block decoded once for all of them. */
MS_SIMD_INLINE void q4k_dot512_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q4_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 2 ? 2 : 0], y[nt > 3 ? 3 : 0]};
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct kq_prep p;
        q4k_prep(&w[i], &p);
        const block_q8_K *const ai[4] = {&a[0][i], &a[1][i], &a[2][i], &a[3][i]};
        kq_block_n(&p, ai, sumf, nt);
    }
    MS_XN(k, nt, s[k] = sumf[k];);
}

MS_DECL_DOT_X4(q4_K, q8_K, avx512) { q4k_dot512_n(n, s, x, y, 4); }
/* and for up to four tokens against many rows */
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q4_K_q8_K_avx512, q4k_dot512_n)

/* Q2_K: element 128h + 32j + l has code (qs[32h + l] >> 2j) & 3 and scale
 * (128h + 32j + l) / 16, so activation bytes 64c..64c+63 take half h = c / 2
 * with shifts 4 (c % 2) and 4 (c % 2) + 2, and int16 pair lane l of vector c
 * (elements 64c + 2l, 64c + 2l + 1) scale 4c + l / 8. */
static const int16_t k_q2k_lane_quarter[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};

MS_SIMD_INLINE void q2k_prep(const block_q2_K *b, struct kq_prep *p) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i scb = _mm_loadu_si128((const __m128i *)b->scales);
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(scb, m4)));
    const __m512i quarter = _mm512_loadu_si512(k_q2k_lane_quarter);
    const __m512i sh_even = cat256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i sh_odd = cat256(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
    for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * h)));
        p->w[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(q, sh_even), m3);
        p->w[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, sh_odd), m3);
    }
    MS_UNROLL4
    for (int c = 0; c < 4; c++)
        p->sc[c] = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, _mm512_set1_epi16((short)(4 * c))), sc16);
    p->mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4));
    p->d = fp16_scale(b->d);
    p->dmin = fp16_scale(b->dmin);
}

MS_DECL_DOT(q2_K, q8_K, avx512) {
    const block_q2_K *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 2); /* 84 bytes a block */
        struct kq_prep p;
        q2k_prep(&w[i], &p);
        sumf += kq_block_one(&p, &a[i]);
    }
    *s = sumf;
}

MS_DECL_DOT_X4(q2_K, q8_K, avx512) {
    const block_q2_K *w = x;
    const block_q8_K *a[4] = {y[0], y[1], y[2], y[3]};
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct kq_prep p;
        q2k_prep(&w[i], &p);
        const block_q8_K *const ai[4] = {&a[0][i], &a[1][i], &a[2][i], &a[3][i]};
        kq_block_n(&p, ai, sumf, 4);
    }
    MS_X4(k, s[k] = sumf[k];);
}

/* IQ2_XXS single-token dot in 512-bit registers, the grid looked up in
 * registers: ms_iq2xxs_levels (the 256 points as 2-bit levels, 512 bytes)
 * sits in eight registers, and a block's 32 grid indices go through four
 * vpermt2w (64 points each, index bits 0-5) and two blends (bits 6 and
 * 7) at once. Each 64-value register then takes its eight points' levels
 * by word permute and per-word shift, and the magnitudes by one byte
 * shuffle; the signs of its two sub-blocks come as one byte mask
 * (iq2xxs_neg_mask2) and negate the activations by a masked subtract;
 * vpmaddubsw and vpmaddwd with the sub-block scales as in the 256-bit
 * form. The scalar-lookup form (four 8-byte loads and a register assembly
 * for the points and again for the signs, per 32 values) spent about 280
 * instructions a block; this one about 130, and its four-token form makes
 * the points and signs once for the four. The integer sums are exact and
 * the float step is the reference's, so the results are its bits. */
static const int16_t k_iq2_word_shift[32] = {0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12,
                                             0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12};
static const int16_t k_iq2_word_point[32] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                             4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7};

/* The signs of two sub-blocks (the low 28 bits of their second words s0
 * and s1: four 7-bit groups each) as the byte mask of their 64 values: bit
 * 8 g + j is bit j of group g for j < 7, and bit 8 g + 7 the group's parity
 * (ms_iq2_ksigns: every group of eight has an even number of negative
 * signs). */
static inline uint64_t iq2xxs_neg_mask2(uint32_t s0, uint32_t s1) {
    const uint64_t bits = (uint64_t)(s0 & 0x0fffffffu) | ((uint64_t)(s1 & 0x0fffffffu) << 28);
    const uint64_t x = _pdep_u64(bits, 0x7f7f7f7f7f7f7f7full);
    uint64_t t = (x ^ (x >> 4)) & 0x0f0f0f0f0f0f0f0full; /* per byte: the nibbles folded */
    t ^= t >> 2;
    t ^= t >> 1;
    return x | ((t & 0x0101010101010101ull) << 7);
}

/* s[k] = dot(row x, activations y[k]) for k < nt (1 or 4, a constant): the
 * grid lookup, levels and signs made once per block for the nt tokens. */
MS_SIMD_INLINE void iq2xxs_dot512_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_iq2_xxs *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    __m512i t[8];
    for (int k = 0; k < 8; k++) t[k] = _mm512_loadu_si512((const void *)(ms_iq2xxs_levels + 32 * k));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m512i shifts = _mm512_loadu_si512((const void *)k_iq2_word_shift);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(8, 25, 43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m512i m3 = _mm512_set1_epi16(3), mc = _mm512_set1_epi16(0xc);
    /* word w of register v: point 8 v + w / 4; dword j: sub-block 2 v + j / 8 */
    const __m512i point = _mm512_loadu_si512((const void *)k_iq2_word_point);
    __m512i pidx[4], ssel[4];
    for (int v = 0; v < 4; v++) {
        pidx[v] = _mm512_add_epi16(point, _mm512_set1_epi16((short)(8 * v)));
        ssel[v] = _mm512_mask_blend_epi32((__mmask16)0xff00, _mm512_set1_epi32(2 * v), _mm512_set1_epi32(2 * v + 1));
    }
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = (const uint8_t *)w[i].qs;
        const __m512i qv = _mm512_loadu_si512((const void *)q);
        /* the 32 grid indices (the first word of each sub-block), as words */
        const __m512i idx = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(_mm512_permutexvar_epi32(even, qv)));
        const __m512i r0 = _mm512_permutex2var_epi16(t[0], idx, t[1]);
        const __m512i r1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);
        const __m512i r2 = _mm512_permutex2var_epi16(t[4], idx, t[5]);
        const __m512i r3 = _mm512_permutex2var_epi16(t[6], idx, t[7]);
        const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(64));
        const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(128));
        const __m512i lv = _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, r0, r1),
                                                   _mm512_mask_blend_epi16(b6, r2, r3));
        /* the sub-block scales 2 s + 1 (top 4 bits of each second word), in both int16 halves */
        __m512i ls = _mm512_permutexvar_epi32(odd, qv);
        ls = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(ls, 28), 1), _mm512_set1_epi32(1));
        ls = _mm512_or_si512(ls, _mm512_slli_epi32(ls, 16));
        __m512i acc[4];
        MS_XN(k, nt, acc[k] = _mm512_setzero_si512(););
        _Pragma("GCC unroll 4")
        for (int v = 0; v < 4; v++) {
            uint32_t s0, s1;
            memcpy(&s0, q + 16 * v + 4, 4);
            memcpy(&s1, q + 16 * v + 12, 4);
            const __mmask64 neg = _cvtu64_mask64(iq2xxs_neg_mask2(s0, s1));
            /* word w: the levels of values 2 w and 2 w + 1 in bits 0-1 and 8-9 */
            __m512i l = _mm512_srlv_epi16(_mm512_permutexvar_epi16(pidx[v], lv), shifts);
            l = _mm512_or_si512(_mm512_and_si512(l, m3), _mm512_slli_epi16(_mm512_and_si512(l, mc), 6));
            const __m512i mag = _mm512_shuffle_epi8(lut, l);
            const __m512i sc = _mm512_permutexvar_epi32(ssel[v], ls);
            MS_XN(k, nt, const __m512i a8 = _mm512_loadu_si512((const void *)(a[k][i].qs + 64 * v));
                  const __m512i av = _mm512_mask_sub_epi8(a8, neg, _mm512_setzero_si512(), a8);
                  acc[k] = _mm512_add_epi32(acc[k], _mm512_madd_epi16(_mm512_maddubs_epi16(mag, av), sc)););
        }
        const float d = fp16_scale(w[i].d);
        MS_XN(k, nt, sumf[k] += a[k][i].d * d * (float)_mm512_reduce_add_epi32(acc[k]););
    }
    MS_XN(k, nt, s[k] = 0.125f * sumf[k];);
}

MS_DECL_DOT(iq2_xxs, q8_K, avx512) {
    const void *y1[1] = {y};
    iq2xxs_dot512_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(iq2_xxs, q8_K, avx512) { iq2xxs_dot512_n(n, s, x, y, 4); }
/* and for up to four tokens against many rows (parts without VBMI): the
 * four-token body row by row, for the tokens given only */
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_iq2_xxs_q8_K_avx512, iq2xxs_dot512_n)

/* ---- Q2_K many rows against one token (decode's routed down projection)
 *
 * The single dot lays a block's codes out to match the activations
 * (a 32-byte broadcast, vpsrlvw and a mask a 64-value register, a vpermw
 * for its scales) and reduces every block on its own. Here the
 * activations are laid out once a call to match the codes instead:
 * plane j of a block is (qs >> 2 j) & 3 over all 64 bytes (byte 32 h + l
 * holds value 128 h + 32 j + l), so each register is a shift and a mask,
 * its 128-bit lane k is one sub-block (8 (k / 2) + 2 j + k % 2) and takes
 * its scale by an in-lane vpshufb of the 16 scales. Rows go eight at a
 * time, one a lane (q2k_rows8): block i of all eight, then block i + 1,
 * their sums reduced at once and their float steps in eight lanes; the
 * fewer than eight rows left run as one sequence of their blocks, four
 * blocks a turn (q2k_rows_turn). The per-block work of that sequence (a
 * row-end test and a scalar float step a block, a reduction of four
 * blocks) cost more than the block's vector work: rows in lanes took the
 * kernel from 13.0-13.2 to 15.5-15.6 GB/s (Zen 4, bench_kernels -t 1
 * --types q2_K --rows 512 --cols 1024 --batches 1 --working-set 512
 * --order random, three interleaved runs; 13.7-13.9 to 16.2-16.3 with
 * 2048 x 2048 in cache). Integer sums and the float step are the single
 * dot's, so every row's result is its bit for bit. */

/* Activations of up to 32 blocks (8192 values) on the stack; longer rows
 * take the single dot. */
#define Q2K_ROWS_MAX_BLOCKS 32

/* Plane j's scale words: lane k's eight int16 take byte (sub-block) 8 (k /
 * 2) + 2 j + k % 2 of the scales broadcast to every lane (0x80: a zero
 * high byte). */
#define Q2K_SC_LANE(g) g, 0x80, g, 0x80, g, 0x80, g, 0x80, g, 0x80, g, 0x80, g, 0x80, g, 0x80
#define Q2K_SC_PLANE(j) \
    {Q2K_SC_LANE(2 * (j)), Q2K_SC_LANE(2 * (j) + 1), Q2K_SC_LANE(8 + 2 * (j)), Q2K_SC_LANE(9 + 2 * (j))}
static const uint8_t k_q2k_plane_sc[4][64] __attribute__((aligned(64))) = {Q2K_SC_PLANE(0), Q2K_SC_PLANE(1),
                                                                           Q2K_SC_PLANE(2), Q2K_SC_PLANE(3)};

/* What a block of a row gives every token's products: its four code
 * planes (plane j: bytes 32 h + l hold the code of value 128 h + 32 j +
 * l), their scale words and the block's eight mins pairs as int16. */
struct q2k_rows_w {
    __m512i w[4], scw[4];
    __m256i mins;
};

MS_SIMD_INLINE void q2k_rows_weights(const block_q2_K *b, struct q2k_rows_w *p) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m512i q = _mm512_loadu_si512((const void *)b->qs);
    const __m128i scb = _mm_loadu_si128((const __m128i *)b->scales);
    const __m512i sc = _mm512_broadcast_i32x4(_mm_and_si128(scb, m4));
    MS_UNROLL4
    for (int j = 0; j < 4; j++) {
        p->w[j] = _mm512_and_si512(j ? _mm512_srli_epi16(q, 2 * j) : q, m3);
        p->scw[j] = _mm512_shuffle_epi8(sc, _mm512_load_si512((const void *)k_q2k_plane_sc[j]));
    }
    p->mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4));
}

/* A block's weights p against one token's plane-major activations
 * act[0..3] (act[j] bytes 32 h + l = a->qs[128 h + 32 j + l]): *vi the
 * scaled code products and *vm the min products, 8 int32 lanes each,
 * whose sums are the single dot's sumi and summ. */
MS_SIMD_INLINE void q2k_rows_products(const struct q2k_rows_w *p, const __m512i act[4], const block_q8_K *a,
                                      __m256i *vi, __m256i *vm) {
    /* two accumulators: four vpdpwssd in one chain outlast the block */
    __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    MS_UNROLL4
    for (int j = 0; j < 4; j++)
        acc[j & 1] = _mm512_dpwssd_epi32(acc[j & 1], _mm512_maddubs_epi16(p->w[j], act[j]), p->scw[j]);
    *vi = fold256_i32(_mm512_add_epi32(acc[0], acc[1]));
    *vm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), p->mins);
}

/* One block of a row against one token (q2k_rows_weights, then
 * q2k_rows_products). */
MS_SIMD_INLINE void q2k_rows_block(const block_q2_K *b, const __m512i act[4], const block_q8_K *a, __m256i *vi,
                                   __m256i *vm) {
    struct q2k_rows_w p;
    q2k_rows_weights(b, &p);
    q2k_rows_products(&p, act, a, vi, vm);
}

/* d and dmin of four blocks (dd[k]: block k's two adjacent fp16 as one
 * 32-bit word; the deinterleave after vcvtph2ps splits them) as floats,
 * the four d in lanes 0-3 and the four dmin in 4-7. */
MS_SIMD_INLINE __m256 q2k_d_dmin4(const int32_t dd[4]) {
    const __m256i dd_split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    return _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_setr_epi32(dd[0], dd[1], dd[2], dd[3])), dd_split);
}

/* The float steps of four blocks of a row for one token, ms_kq_block_sum_f32's
 * operations in four lanes: v[0..3] the blocks' sumi vectors, v[4..7] their
 * summ, dm their d and dmin (q2k_d_dmin4), adv the token's activation
 * scales. Lane k of the result is block k's term. */
MS_SIMD_INLINE __m128 q2k_terms4(const __m256i v[8], __m256 dm, __m128 adv) {
    const __m256 t = _mm256_cvtepi32_ps(ms_kq_hsum8x8_i32(v)); /* sumi in lanes 0-3, summ in 4-7 */
    const __m128 sd = _mm_mul_ps(adv, _mm256_castps256_ps128(dm));
    const __m128 smin = _mm_mul_ps(adv, _mm256_extractf128_ps(dm, 1));
    return _mm_sub_ps(_mm_mul_ps(sd, _mm256_castps256_ps128(t)), _mm_mul_ps(smin, _mm256_extractf128_ps(t, 1)));
}

/* One turn of the many-rows sequence: its next m blocks (m = 1..4, a
 * constant), from block *i of row *r on. Their integer sums are reduced
 * at once and their float steps (the single dot's ms_kq_block_sum_f32)
 * run in four lanes, then are added to *sumf in order; a row's last block
 * puts its result in s[row]. Advances (*r, *i). */
MS_SIMD_INLINE void q2k_rows_turn(const char *x, size_t x_stride, int64_t nb, const __m512i (*act)[4],
                                  const block_q8_K *a, const float *ad, float *s, int64_t *r, int64_t *i,
                                  float *sumf, const int m) {
    __m256i v[8];
    int32_t dd[4] = {0, 0, 0, 0};
    int64_t br[4];
    const int64_t i0 = *i;
    for (int k = 0; k < 4; k++) {
        if (k >= m) {
            v[k] = v[4 + k] = _mm256_setzero_si256();
            continue;
        }
        const block_q2_K *b = (const block_q2_K *)(x + (size_t)*r * x_stride) + *i;
        prefetch_ahead(b, 2); /* 84 bytes a block */
        q2k_rows_block(b, act[*i], &a[*i], &v[k], &v[4 + k]);
        memcpy(&dd[k], &b->d, sizeof dd[k]);
        br[k] = *r;
        if (++*i == nb) *i = 0, ++*r;
    }
    float f[4];
    _mm_storeu_ps(f, q2k_terms4(v, q2k_d_dmin4(dd), _mm_loadu_ps(ad + i0)));
    for (int k = 0, p = (int)i0; k < m; k++, p++) {
        *sumf += f[k];
        if (p == nb - 1) { /* the row's last block */
            s[br[k]] = *sumf;
            *sumf = 0.0f;
            p = -1;
        }
    }
}

/* Eight rows at once, rows in lanes: block i of rows r .. r + 7, then
 * block i + 1, so that the eight blocks' integer sums reduce together (two
 * hsum8x8) and their float steps run in eight lanes, one a row, each row's
 * sum taking its blocks in order from 0.0f (ms_kq_rows8_add): the single
 * dot's float steps, without the sequence's per-block bookkeeping. */
MS_SIMD_INLINE void q2k_rows8(const char *x, size_t x_stride, int64_t nb, const __m512i (*act)[4],
                              const block_q8_K *a, float *s) {
    const __m256i row_off = ms_kq_row_offsets8(x_stride);
    const block_q2_K *w = (const block_q2_K *)x;
    __m256 sumf = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i vi[8], vm[8];
        for (int k = 0; k < 8; k++) {
            const block_q2_K *b = (const block_q2_K *)(x + (size_t)k * x_stride) + i;
            prefetch_ahead(b, 2);
            q2k_rows_block(b, act[i], &a[i], &vi[k], &vm[k]);
        }
        sumf = ms_kq_rows8_add(sumf, vi, vm, &w[i].d, row_off, a[i].d);
    }
    _mm256_storeu_ps(s, sumf);
}

/* Many rows against nt tokens (2..4, a constant): row by row, four blocks
 * a turn, each block's planes and scales made once for the nt tokens'
 * products (q2k_rows_weights), each token's four block terms reduced at
 * once and added in order from 0.0f (the single dot's float steps). act[k]
 * and ad[k] are token k's plane-major activations and scales (ad padded
 * with three zeros past nb). Results to s[k * lds + r]. */
MS_SIMD_INLINE void q2k_rows_n(int64_t nb, float *s, int64_t lds, const char *x, size_t x_stride, int64_t n_rows,
                               const __m512i (*const act[4])[4], const block_q8_K *const a[4],
                               const float *const ad[4], const int nt) {
    for (int64_t r = 0; r < n_rows; r++) {
        const block_q2_K *w = (const block_q2_K *)(x + (size_t)r * x_stride);
        float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t i = 0; i < nb; i += 4) {
            const int m = nb - i < 4 ? (int)(nb - i) : 4;
            __m256i v[4][8];
            int32_t dd[4] = {0, 0, 0, 0};
            for (int kb = 0; kb < 4; kb++) {
                if (kb >= m) {
                    MS_XN(k, nt, v[k][kb] = v[k][4 + kb] = _mm256_setzero_si256(););
                    continue;
                }
                const block_q2_K *b = w + i + kb;
                prefetch_ahead(b, 2); /* 84 bytes a block */
                struct q2k_rows_w p;
                q2k_rows_weights(b, &p);
                MS_XN(k, nt, q2k_rows_products(&p, act[k][i + kb], &a[k][i + kb], &v[k][kb], &v[k][4 + kb]););
                memcpy(&dd[kb], &b->d, sizeof dd[kb]);
            }
            const __m256 dm = q2k_d_dmin4(dd);
            MS_XN(k, nt, float f[4]; _mm_storeu_ps(f, q2k_terms4(v[k], dm, _mm_loadu_ps(ad[k] + i)));
                  for (int kb = 0; kb < m; kb++) sumf[k] += f[kb];);
        }
        MS_XN(k, nt, s[k * lds + r] = sumf[k];);
    }
}

/* Up to four tokens against many rows (ms_vec_dot_rows_n_fn): the
 * many-rows form for one token, q2k_rows_n for more. */
MS_DECL_DOT_ROWS_N(q2_K, q8_K, avx512) {
    const int64_t nb = n / QK_K;
    if (nt == 1 || nb == 0 || nb > Q2K_ROWS_MAX_BLOCKS) {
        for (int k = 0; k < nt; k++) ms_dot_rows_q2_K_q8_K_avx512(n, s + k * lds, x, x_stride, n_rows, y[k]);
        return;
    }
    __m512i act[4][Q2K_ROWS_MAX_BLOCKS][4];
    float ad[4][Q2K_ROWS_MAX_BLOCKS + 4];
    const __m512i (*actk[4])[4];
    const float *adk[4];
    const block_q8_K *a[4];
    for (int k = 0; k < nt; k++) {
        a[k] = y[k];
        for (int64_t i = 0; i < nb; i++)
            for (int j = 0; j < 4; j++) act[k][i][j] = load2x32(a[k][i].qs + 32 * j, a[k][i].qs + 128 + 32 * j);
        for (int64_t j = 0; j < nb + 4; j++) ad[k][j] = j < nb ? a[k][j].d : 0.0f;
        actk[k] = (const __m512i (*)[4])act[k];
        adk[k] = ad[k];
    }
    switch (nt) {
    case 2: q2k_rows_n(nb, s, lds, x, x_stride, n_rows, actk, a, adk, 2); break;
    case 3: q2k_rows_n(nb, s, lds, x, x_stride, n_rows, actk, a, adk, 3); break;
    default: q2k_rows_n(nb, s, lds, x, x_stride, n_rows, actk, a, adk, 4); break;
    }
}

MS_DECL_DOT_ROWS(q2_K, q8_K, avx512) {
    const int64_t nb = n / QK_K;
    const block_q8_K *a = y;
    if (nb == 0 || nb > Q2K_ROWS_MAX_BLOCKS) {
        for (int64_t r = 0; r < n_rows; r++)
            ms_dot_q2_K_q8_K_avx512(n, s + r, (const char *)x + (size_t)r * x_stride, y);
        return;
    }
    __m512i act[Q2K_ROWS_MAX_BLOCKS][4];
    /* the activation scales of blocks j mod nb, so that four consecutive
     * blocks of the sequence (which wraps at a row's end) are one load */
    float ad[Q2K_ROWS_MAX_BLOCKS + 4];
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < 4; j++) act[i][j] = load2x32(a[i].qs + 32 * j, a[i].qs + 128 + 32 * j);
    for (int64_t j = 0; j < nb + 4; j++) ad[j] = a[j % nb].d;
    int64_t r = 0;
    /* short rows only (MS_ROWS_LANES_MAX_BYTES); this also keeps the
     * gather's int32 row offsets in range */
    const int64_t groups = 8 * x_stride <= MS_ROWS_LANES_MAX_BYTES ? n_rows / 8 : 0;
    for (; r < 8 * groups; r += 8) q2k_rows8((const char *)x + (size_t)r * x_stride, x_stride, nb, act, a, s + r);
    /* the rows left (fewer than eight): one sequence of their blocks */
    float sumf = 0.0f;
    int64_t i = 0, left = n_rows > r ? (n_rows - r) * nb : 0;
    for (; left >= 4; left -= 4) q2k_rows_turn(x, x_stride, nb, act, a, ad, s, &r, &i, &sumf, 4);
    if (left == 3) q2k_rows_turn(x, x_stride, nb, act, a, ad, s, &r, &i, &sumf, 3);
    if (left == 2) q2k_rows_turn(x, x_stride, nb, act, a, ad, s, &r, &i, &sumf, 2);
    if (left == 1) q2k_rows_turn(x, x_stride, nb, act, a, ad, s, &r, &i, &sumf, 1);
}

/* ---- dots with f32 activations (quant_simd.h's MS_DEFINE_DOT_F32_AVX512) */

MS_DEFINE_DOT_F32_AVX512(q4_K, block_q4_K)
MS_DEFINE_DOT_F32_AVX512(q2_K, block_q2_K)
MS_DEFINE_DOT_F32_AVX512(iq2_xxs, block_iq2_xxs)

/* ---- token-lane GEMM (prefill): Q4_K rows x 16 packed Q8_K tokens
 *
 * The AVX2 token-lane form (quant_kq_avx2.c) with a token per 32-bit lane
 * of a 64-byte vector and VNNI: four codes of the row are broadcast to
 * every lane (codes 0..15 are the unsigned operand of vpdpbusd, the
 * packed activations the signed one), and one vpdpbusd adds the four
 * products of each token straight into int32, where the AVX2 form needs a
 * vpmaddubsw and an int16 add. A sub-block's eight steps build its int32
 * sum per token, vpmulld applies the 6-bit scale. The integer sums are
 * exact, and the float step per block is the reference's operations in its
 * order lane by lane, so every output is bit-identical to the single
 * kernel. The two rows of a pair share each activation load. */
/* Q4_K: a block of two rows unpacked into quant_simd.h's struct kq_x16_buf8. */
MS_SIMD_INLINE void q4k_expand_x16(const block_q4_K *const b[2], struct kq_x16_buf8 *buf, const int R) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int k = 0; k < R; k++) {
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_loadu_si512((const void *)(b[k]->qs + 64 * h));
            _mm512_store_si512((void *)buf->codes[k][2 * h], _mm512_and_si512(q, m4));
            _mm512_store_si512((void *)buf->codes[k][2 * h + 1], _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
        }
        ms_q4k_unpack_scales_u64(b[k]->scales, &buf->scw[k], &buf->mw[k]);
    }
}

MS_SIMD_INLINE void q4k_products_x16(const struct kq_x16_buf8 *buf, const block_q4_K *const b[2],
                                     const block_q8_Kx16 *const ab[2], __m512 accf[2][2], const int R, const int P) {
    const uint16_t d[2] = {b[0]->d, b[1]->d}, dmin[2] = {b[0]->dmin, b[1]->dmin};
    kq_x16_products8(buf, d, dmin, ab, accf, R, P);
}

/* Q2_K the same way: codes unpacked per row to bytes in value order
 * (value 128 h + 32 j + l is (qs[32 h + l] >> 2 j) & 3) and the scales'
 * low 4 bits to sc, so that the integer sums are kq_x16_sumi16's (Q6_K's);
 * the min term is the 16 bsums times the 4-bit mins (bs16 pairs). */
struct q2k_x16_buf {
    uint8_t codes[2][QK_K] __attribute__((aligned(64)));
    int8_t sc[2][16];
};

MS_SIMD_INLINE void q2k_expand_x16(const block_q2_K *const b[2], struct q2k_x16_buf *buf, const int R) {
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int k = 0; k < R; k++) {
        const __m512i q = _mm512_loadu_si512((const void *)b[k]->qs);
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            /* plane j: byte 32 h + l is value 128 h + 32 j + l */
            const __m512i p = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), m3);
            _mm256_store_si256((__m256i *)(buf->codes[k] + 32 * j), _mm512_castsi512_si256(p));
            _mm256_store_si256((__m256i *)(buf->codes[k] + 128 + 32 * j), _mm512_extracti64x4_epi64(p, 1));
        }
        _mm_storeu_si128((__m128i *)buf->sc[k], _mm_and_si128(_mm_loadu_si128((const __m128i *)b[k]->scales),
                                                              _mm_set1_epi8(15)));
    }
}

MS_SIMD_INLINE void q2k_products_x16(const struct q2k_x16_buf *buf, const block_q2_K *const b[2],
                                     const block_q8_Kx16 *const ab[2], __m512 accf[2][2], const int R, const int P) {
    const uint8_t *const codes[2] = {buf->codes[0], buf->codes[1]};
    const int8_t *const sc[2] = {buf->sc[0], buf->sc[1]};
    __m512i sumi[2][2];
    kq_x16_sumi16(codes, sc, ab, sumi, R, P);
    for (int q = 0; q < P; q++) {
        const __m512 ad = _mm512_load_ps(ab[q]->d);
        for (int k = 0; k < R; k++) {
            __m512i summ = _mm512_setzero_si512();
            _Pragma("GCC unroll 8")
            for (int p = 0; p < 8; p++) {
                const int mp = (b[k]->scales[2 * p] >> 4) | ((b[k]->scales[2 * p + 1] >> 4) << 16);
                summ = _mm512_add_epi32(summ, _mm512_madd_epi16(_mm512_load_si512((const void *)ab[q]->bs16[p]), _mm512_set1_epi32(mp)));
            }
            accf[k][q] = kq_x16_block_add(accf[k][q], ad, b[k]->d, b[k]->dmin, sumi[k][q], summ);
        }
    }
}

/* IQ2_XXS: the row's block is expanded once into signed weights (grid
 * magnitudes with their signs, -43..43) and stored offset by 128, the
 * products as quant_kq_iq2.h's iq2xxs_x16_products (the VBMI set's GEMM
 * expands by byte permutes instead, quant_iq2_avx512vbmi.c). */
MS_SIMD_INLINE void iq2xxs_expand_x16(const block_iq2_xxs *const b[2], struct iq2xxs_x16_buf *buf, const int R) {
    for (int k = 0; k < R; k++) {
        const uint8_t *q = (const uint8_t *)b[k]->qs;
        iq2xxs_scales(q, buf->ls[k]);
        _Pragma("GCC unroll 8")
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t s32;
            memcpy(&s32, q + 8 * ib + 4, 4);
            const __m256i v = _mm256_sign_epi8(iq2xxs_grid4(q + 8 * ib), iq2xxs_signs4(s32));
            _mm256_store_si256((__m256i *)(buf->wu[k] + 32 * ib), _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
        }
    }
}

/* the row's sum -> the result: Q4_K's and Q2_K's are final (kq_x16_final),
 * IQ2_XXS's grid is 8 x its values (the reference's 0.125 * sumf) */
MS_DEFINE_GEMM_KQ_X16(ms_gemm_q4_K_q8_Kx16_avx512, block_q4_K, struct kq_x16_buf8, q4k_expand_x16, q4k_products_x16,
                      1, kq_x16_final)
MS_DEFINE_GEMM_KQ_X16(ms_gemm_q2_K_q8_Kx16_avx512, block_q2_K, struct q2k_x16_buf, q2k_expand_x16, q2k_products_x16,
                      1, kq_x16_final)
/* This set's IQ2_XXS expansion (about 240 instructions a block and row,
 * its loads from the grid and sign tables) runs right before its own
 * products, not a block ahead as the others: ahead it measured 145-148
 * against 154 GFLOPS (2048 x 4096, 16 and 512 tokens, Zen 4 with
 * MS_AVX512_VBMI=0). */
MS_DEFINE_GEMM_KQ_X16(ms_gemm_iq2_xxs_q8_Kx16_avx512, block_iq2_xxs, struct iq2xxs_x16_buf, iq2xxs_expand_x16,
                      iq2xxs_x16_products, 0, iq2xxs_x16_finish)
