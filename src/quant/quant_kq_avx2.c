/*
 * quant_kq_avx2.c - AVX2 kernels for Q4_K, Q2_K, IQ2_XXS weights and Q8_K
 * activations. Same results as quant_kq_ref.c: the Q8_K quantizer and the
 * dequantizers round identically, the integer parts of the Q8_K dots are
 * exact, and only the order of f32 sums differs in the *_f32 dots.
 *
 * The Q8_K dots multiply unsigned weight codes (4-bit, 2-bit, or grid
 * magnitudes up to 43) by signed int8 activations with maddubs (pairs summed
 * into int16, at most 2 * 43 * 127 in magnitude), then weight the int16
 * pairs by the sub-block scale with madd into int32 lanes; per block one
 * horizontal sum feeds the same float formula as the reference. IQ2_XXS
 * signs are moved onto the activations with sign_epi8 (ggml's Q8_K keeps q8
 * in [-127, 127] so negation cannot overflow).
 */
#include <immintrin.h>
#include <math.h>

#include "quant/iq2_grid.h"
#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_simd.h"

/* ---- Q8_K: same rounding as the reference (cvtps rounds to nearest even
 * under the default MXCSR; the saturating packs are its cap at 127). */
MS_DECL_QUANT(q8_K, avx2) {
    block_q8_K *b = y;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), vmax);
        const float amax = hmax256_f32(vmax);
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
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 32) {
            const __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j)));
            const __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8)));
            const __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 16)));
            const __m256i v3 = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 24)));
            __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
            q = _mm256_permutevar8x32_epi32(q, perm);
            _mm256_storeu_si256((__m256i *)(b[i].qs + j), q);
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s);
            b[i].bsums[j / 16] = (int16_t)_mm256_extract_epi32(s, 0);
            b[i].bsums[j / 16 + 1] = (int16_t)_mm256_extract_epi32(s, 4);
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---- dequantization */

static inline __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

MS_DECL_DEQUANT(q4_K, avx2) {
    const block_q4_K *b = x;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(b[i].scales, sc, m);
        for (int g = 0; g < 4; g++) {
            const __m256 d1 = _mm256_set1_ps(d * sc[2 * g]), m1 = _mm256_set1_ps(dmin * m[2 * g]);
            const __m256 d2 = _mm256_set1_ps(d * sc[2 * g + 1]), m2 = _mm256_set1_ps(dmin * m[2 * g + 1]);
            for (int k = 0; k < 4; k++) {
                const __m128i q = _mm_loadl_epi64((const __m128i *)(b[i].qs + 32 * g + 8 * k));
                const __m256 lo = u8x8_to_ps(_mm_and_si128(q, m4));
                const __m256 hi = u8x8_to_ps(_mm_and_si128(_mm_srli_epi16(q, 4), m4));
                _mm256_storeu_ps(y + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d1, lo), m1));
                _mm256_storeu_ps(y + 32 + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d2, hi), m2));
            }
            y += 64;
        }
    }
}

MS_DECL_DEQUANT(q2_K, avx2) {
    const block_q2_K *b = x;
    const __m128i m3 = _mm_set1_epi8(3);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        for (int k = 0; k < QK_K / 16; k++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * (k / 8) + 16 * (k % 2)));
            const __m128i v = _mm_and_si128(_mm_srl_epi16(q, _mm_cvtsi32_si128(2 * ((k % 8) / 2))), m3);
            const __m256 dl = _mm256_set1_ps(d * (float)(b[i].scales[k] & 0x0f));
            const __m256 ml = _mm256_set1_ps(dmin * (float)(b[i].scales[k] >> 4));
            _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(dl, u8x8_to_ps(v)), ml));
            _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(dl, u8x8_to_ps(_mm_srli_si128(v, 8))), ml));
            y += 16;
        }
    }
}

MS_DECL_DEQUANT(iq2_xxs, avx2) {
    const block_iq2_xxs *b = x;
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t aux[2];
            ms_iq2xxs_aux(&b[i], ib, aux);
            const __m256 db = _mm256_set1_ps(d * (0.5f + (float)(aux[1] >> 28)) * 0.25f);
            for (int l = 0; l < 4; l++) {
                const uint64_t g = ms_iq2xxs_grid[(aux[0] >> (8 * l)) & 0xff];
                const int s = ms_iq2_ksigns[(aux[1] >> (7 * l)) & 127];
                const __m256 v = _mm256_mul_ps(db, u8x8_to_ps(_mm_cvtsi64_si128((long long)g)));
                const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(s), bit), bit);
                _mm256_storeu_ps(y, _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_and_si256(neg, sign))));
                y += 8;
            }
        }
    }
}

/* ---- dots with Q8_K activations
 *
 * The weight side of a Q4_K or Q2_K block (kq_prep: codes, scales, mins) is
 * decoded once into eight 32-byte code vectors w[c] lined up with activation
 * bytes 32c..32c+31, with the int16 scale of every maddubs pair. The
 * four-token forms share it between their tokens; integer sums are exact and
 * the float formula per block and token is the single kernel's
 * (ms_kq_block_sum_f32), in its order, so the results are equal bit for bit. */

struct kq_prep {
    __m256i w[8];  /* u8 codes, vector c for activation bytes 32c..32c+31 */
    __m256i sc[8]; /* int16 scale of each maddubs pair of w[c] */
    __m256i mins;  /* 16 int16 mins, lined up with the Q8_K bsums */
    float d, dmin;
};

/* sum over the block of scale * code * q8, spread over 8 int32 lanes */
static inline __m256i kq_sumi(const struct kq_prep *p, const int8_t *q8) {
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++) {
        const __m256i p16 = _mm256_maddubs_epi16(p->w[c], _mm256_loadu_si256((const __m256i *)(q8 + 32 * c)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, p->sc[c]));
    }
    return acc;
}

/* the min term's products, summed to summ over 8 int32 lanes */
static inline __m256i kq_summ(const struct kq_prep *p, const block_q8_K *a) {
    return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), p->mins);
}

static inline float kq_block_one(const struct kq_prep *p, const block_q8_K *a) {
    return ms_kq_block_sum_f32(a->d, p->d, p->dmin, hsum256_i32(kq_sumi(p, a->qs)), hsum256_i32(kq_summ(p, a)));
}

/* One block for four tokens: sumf[k] += the block's share for token k. */
static inline void kq_block_x4(const struct kq_prep *p, const block_q8_K *const a[4], float sumf[4]) {
    __m256i v[8];
    MS_X4(k, v[k] = kq_sumi(p, a[k]->qs); v[4 + k] = kq_summ(p, a[k]););
    int32_t r[8];
    _mm256_storeu_si256((__m256i *)r, ms_kq_hsum8x8_i32(v));
    MS_X4(k, sumf[k] += ms_kq_block_sum_f32(a[k]->d, p->d, p->dmin, r[k], r[4 + k]););
}

/* Q4_K: byte group g (qs[32g..32g+31]) holds sub-block 2g in its low and
 * 2g+1 in its high nibbles. */
static inline void q4k_prep(const block_q4_K *b, struct kq_prep *p) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    uint64_t sc, m;
    ms_q4k_unpack_scales_u64(b->scales, &sc, &m);
    for (int g = 0; g < 4; g++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * g));
        p->w[2 * g] = _mm256_and_si256(q, m4);
        p->w[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
    for (int j = 0; j < 8; j++) p->sc[j] = _mm256_set1_epi16((short)((sc >> (8 * j)) & 0xff));
    p->mins = q4k_mins16_u64(m);
    p->d = fp16_scale(b->d);
    p->dmin = fp16_scale(b->dmin);
}

MS_DECL_DOT(q4_K, q8_K, avx2) {
    const block_q4_K *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct kq_prep p;
        q4k_prep(&w[i], &p);
        sumf += kq_block_one(&p, &a[i]);
    }
    *s = sumf;
}

MS_DECL_DOT_X4(q4_K, q8_K, avx2) {
    const block_q4_K *w = x;
    const block_q8_K *a[4] = {y[0], y[1], y[2], y[3]};
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct kq_prep p;
        q4k_prep(&w[i], &p);
        const block_q8_K *const ai[4] = {&a[0][i], &a[1][i], &a[2][i], &a[3][i]};
        kq_block_x4(&p, ai, sumf);
    }
    MS_X4(k, s[k] = sumf[k];);
}

/* Q2_K: element 128h + 32j + l has code (qs[32h + l] >> 2j) & 3 and scale
 * (128h + 32j + l) / 16: vector c = 4h + j takes scale 2c in its low 128-bit
 * lane and 2c + 1 in its high one. */
static inline void q2k_prep(const block_q2_K *b, struct kq_prep *p) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i scb = _mm_loadu_si128((const __m128i *)b->scales);
    /* byte 2c (low lane) or 2c + 1 (high lane) to every int16, zero-extended */
    const __m256i sc8 = _mm256_broadcastsi128_si256(_mm_and_si128(scb, m4));
    const __m256i pick = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128,
                                          1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128);
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        p->w[4 * h] = _mm256_and_si256(q, m3);
        p->w[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
        p->w[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
        p->w[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
    }
    for (int c = 0; c < 8; c++)
        p->sc[c] = _mm256_shuffle_epi8(sc8, _mm256_add_epi8(pick, _mm256_set1_epi8((char)(2 * c))));
    p->mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4));
    p->d = fp16_scale(b->d);
    p->dmin = fp16_scale(b->dmin);
}

MS_DECL_DOT(q2_K, q8_K, avx2) {
    const block_q2_K *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct kq_prep p;
        q2k_prep(&w[i], &p);
        sumf += kq_block_one(&p, &a[i]);
    }
    *s = sumf;
}

MS_DECL_DOT_X4(q2_K, q8_K, avx2) {
    const block_q2_K *w = x;
    const block_q8_K *a[4] = {y[0], y[1], y[2], y[3]};
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct kq_prep p;
        q2k_prep(&w[i], &p);
        const block_q8_K *const ai[4] = {&a[0][i], &a[1][i], &a[2][i], &a[3][i]};
        kq_block_x4(&p, ai, sumf);
    }
    MS_X4(k, s[k] = sumf[k];);
}

/* IQ2_XXS: per 32-value sub-block the grid magnitudes (u8, at most 43), the
 * signs as +-1 bytes that sign_epi8 moves onto the activations (Q8_K has no
 * -128, so negation is exact) and the odd scale 2 * s + 1. The block's value
 * is ad * d * sumi, the row's 0.125 * sum, as the reference. */
struct iq2_prep {
    __m256i grid[8], sgn[8], ls[8];
    float d;
};

static inline void iq2xxs_prep(const block_iq2_xxs *b, struct iq2_prep *p) {
    /* byte k of the 32 sign bits goes to bytes 8k .. 8k+7, tested per bit */
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i one = _mm256_set1_epi8(1);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        uint32_t aux[2];
        ms_iq2xxs_aux(b, ib, aux);
        p->grid[ib] = _mm256_set_epi64x(
            (long long)ms_iq2xxs_grid[aux[0] >> 24], (long long)ms_iq2xxs_grid[(aux[0] >> 16) & 0xff],
            (long long)ms_iq2xxs_grid[(aux[0] >> 8) & 0xff], (long long)ms_iq2xxs_grid[aux[0] & 0xff]);
        const uint32_t sw = (uint32_t)ms_iq2_ksigns[aux[1] & 127] | (uint32_t)ms_iq2_ksigns[(aux[1] >> 7) & 127] << 8 |
                            (uint32_t)ms_iq2_ksigns[(aux[1] >> 14) & 127] << 16 |
                            (uint32_t)ms_iq2_ksigns[(aux[1] >> 21) & 127] << 24;
        const __m256i sb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)sw), spread);
        p->sgn[ib] = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(sb, bits), bits), one);
        p->ls[ib] = _mm256_set1_epi16((short)(2 * (aux[1] >> 28) + 1));
    }
    p->d = fp16_scale(b->d);
}

static inline __m256i iq2xxs_sumi(const struct iq2_prep *p, const int8_t *q8) {
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const __m256i a = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(q8 + 32 * ib)), p->sgn[ib]);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(p->grid[ib], a), p->ls[ib]));
    }
    return acc;
}

MS_DECL_DOT(iq2_xxs, q8_K, avx2) {
    const block_iq2_xxs *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct iq2_prep p;
        iq2xxs_prep(&w[i], &p);
        sumf += a[i].d * p.d * (float)hsum256_i32(iq2xxs_sumi(&p, a[i].qs));
    }
    *s = 0.125f * sumf;
}

MS_DECL_DOT_X4(iq2_xxs, q8_K, avx2) {
    const block_iq2_xxs *w = x;
    const block_q8_K *a[4] = {y[0], y[1], y[2], y[3]};
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK_K; i++) {
        struct iq2_prep p;
        iq2xxs_prep(&w[i], &p);
        __m256i v[4];
        MS_X4(k, v[k] = iq2xxs_sumi(&p, a[k][i].qs););
        int32_t r[4];
        _mm_storeu_si128((__m128i *)r, ms_kq_hsum4x8_i32(v));
        MS_X4(k, sumf[k] += a[k][i].d * p.d * (float)r[k];);
    }
    MS_X4(k, s[k] = 0.125f * sumf[k];);
}

/* ---- dots with f32 activations: dequantize one block to the stack, then
 * multiply-add in 8-lane f32 accumulators. */

static inline __m256 fma_block(const float *w, const float *x, __m256 acc) {
    for (int j = 0; j < QK_K; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), acc);
    return acc;
}

#define MS_DEFINE_DOT_F32_AVX2(fmt, blk)                                         \
    MS_DECL_DOT(fmt, f32, avx2) {                                                 \
        const blk *w = x;                                                         \
        const float *a = y;                                                       \
        float tmp[QK_K];                                                          \
        __m256 acc = _mm256_setzero_ps();                                         \
        for (int64_t i = 0; i < n / QK_K; i++) {                                  \
            ms_dequant_##fmt##_avx2(&w[i], tmp, QK_K);                            \
            acc = fma_block(tmp, a + i * QK_K, acc);                              \
        }                                                                         \
        *s = hsum256_f32(acc);                                                       \
    }

MS_DEFINE_DOT_F32_AVX2(q4_K, block_q4_K)
MS_DEFINE_DOT_F32_AVX2(q2_K, block_q2_K)
MS_DEFINE_DOT_F32_AVX2(iq2_xxs, block_iq2_xxs)
