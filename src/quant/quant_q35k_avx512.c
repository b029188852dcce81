/*
 * quant_q35k_avx512.c - AVX-512 (F, BW, VL, DQ, VNNI) kernels for Q5_K and
 * Q3_K weights. Same results as the reference (quant_q35k_ref.c): the Q8_K
 * dots' integer sums are exact and their float step per block is the
 * reference's, in its order, so every form equals it bit for bit.
 *
 * The Q8_K dots take 64 activation bytes a step: the codes are laid out to
 * match them (Q5_K: a 64-byte load of qs is two byte groups, the fifth bits
 * added under a byte mask from qh; Q3_K: a half of qs broadcast to both
 * 256-bit halves and shifted per half, the third bits added under a mask
 * from hmask), vpmaddubsw makes the int16 pair sums and VNNI's vpdpwssd
 * applies the int16 scales and accumulates. One body serves one and four
 * tokens (MS_XN).
 */
#include <immintrin.h>

#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_simd.h"

static inline __m512 u8x16_to_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }
static inline __m512 i8x16_to_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

/* ---- dequantization (the reference's f32 operations, 16 values a step) */

MS_DECL_DEQUANT(q5_K, avx512) {
    const block_q5_K *b = x;
    const __m128i m4 = _mm_set1_epi8(0x0f), b4 = _mm_set1_epi8(0x10);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(b[i].scales, sc, m);
        for (int g = 0; g < 4; g++) {
            const __m512 d1 = _mm512_set1_ps(d * sc[2 * g]), m1 = _mm512_set1_ps(dmin * m[2 * g]);
            const __m512 d2 = _mm512_set1_ps(d * sc[2 * g + 1]), m2 = _mm512_set1_ps(dmin * m[2 * g + 1]);
            const __m128i blo = _mm_set1_epi8((char)(1 << (2 * g))), bhi = _mm_set1_epi8((char)(2 << (2 * g)));
            for (int k = 0; k < 2; k++) {
                const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * g + 16 * k));
                const __m128i qh = _mm_loadu_si128((const __m128i *)(b[i].qh + 16 * k));
                const __m128i lo = _mm_mask_add_epi8(_mm_and_si128(q, m4), _mm_test_epi8_mask(qh, blo),
                                                     _mm_and_si128(q, m4), b4);
                const __m128i q4 = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
                const __m128i hi = _mm_mask_add_epi8(q4, _mm_test_epi8_mask(qh, bhi), q4, b4);
                _mm512_storeu_ps(y + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d1, u8x16_to_ps(lo)), m1));
                _mm512_storeu_ps(y + 32 + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d2, u8x16_to_ps(hi)), m2));
            }
            y += 64;
        }
    }
}

MS_DECL_DEQUANT(q3_K, avx512) {
    const block_q3_K *b = x;
    const __m128i m3 = _mm_set1_epi8(3), four = _mm_set1_epi8(4);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d);
        int8_t sc[16];
        ms_q3k_unpack_scales(b[i].scales, sc);
        for (int k = 0; k < 16; k++) { /* sub-block k: elements 16 k .. 16 k + 15 */
            const int c = k / 2, h = c / 4, j = c % 4, o = 16 * (k % 2);
            const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * h + o));
            const __m128i hm = _mm_loadu_si128((const __m128i *)(b[i].hmask + o));
            const __m128i low = _mm_and_si128(_mm_srl_epi16(q, _mm_cvtsi32_si128(2 * j)), m3);
            /* q - 4: low where the high bit is set, low - 4 where not */
            const __m128i v = _mm_mask_blend_epi8(_mm_test_epi8_mask(hm, _mm_set1_epi8((char)(1 << c))),
                                                  _mm_sub_epi8(low, four), low);
            _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[k]), i8x16_to_ps(v)));
            y += 16;
        }
    }
}

/* ---- dots with Q8_K activations */

/* Q5_K: a 64-byte load of qs is byte groups 2 p and 2 p + 1 (low nibbles:
 * sub-blocks 4 p and 4 p + 2, activation bytes 128 p .. + 31 and 128 p + 64
 * .. + 95; high nibbles: sub-blocks 4 p + 1 and 4 p + 3), their fifth bits
 * bits 4 p, 4 p + 2 (low) and 4 p + 1, 4 p + 3 (high) of qh, which sits in
 * both halves of a register. */
MS_SIMD_INLINE void q5k_dot512_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q5_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 3); /* 176 bytes a block */
        uint64_t scw, mw;
        ms_q4k_unpack_scales_u64(w[i].scales, &scw, &mw);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_cvtsi64_si128((long long)scw)));
        const __m256i mins = q4k_mins16_u64(mw);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)w[i].qh));
        __m512i acc[4];
        MS_XN(k, nt, acc[k] = _mm512_setzero_si512(););
        _Pragma("GCC unroll 2")
        for (int p = 0; p < 2; p++) {
            const __m512i q = _mm512_loadu_si512(w[i].qs + 64 * p);
            const __m512i sel_lo = cat256(_mm256_set1_epi8((char)(1 << (4 * p))), _mm256_set1_epi8((char)(4 << (4 * p))));
            const __m512i sel_hi = cat256(_mm256_set1_epi8((char)(2 << (4 * p))), _mm256_set1_epi8((char)(8 << (4 * p))));
            __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, sel_lo), lo, b4);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, sel_hi), hi, b4);
            /* the scales of the int16 pairs: words 4 p, 4 p + 2 (low) and 4 p + 1, 4 p + 3 (high) by halves */
            const __m512i ix_lo = cat256(_mm256_set1_epi16((short)(4 * p)), _mm256_set1_epi16((short)(4 * p + 2)));
            const __m512i ix_hi = cat256(_mm256_set1_epi16((short)(4 * p + 1)), _mm256_set1_epi16((short)(4 * p + 3)));
            const __m512i s_lo = _mm512_permutexvar_epi16(ix_lo, sc16), s_hi = _mm512_permutexvar_epi16(ix_hi, sc16);
            MS_XN(k, nt, const int8_t *q8 = a[k][i].qs + 128 * p;
                  acc[k] = _mm512_dpwssd_epi32(acc[k], _mm512_maddubs_epi16(lo, load2x32(q8, q8 + 64)), s_lo);
                  acc[k] = _mm512_dpwssd_epi32(acc[k], _mm512_maddubs_epi16(hi, load2x32(q8 + 32, q8 + 96)), s_hi););
        }
        const float d = fp16_scale(w[i].d), dmin = fp16_scale(w[i].dmin);
        if (nt == 1) {
            int32_t sumi, summ;
            hsum2x256_i32(fold256_i32(acc[0]),
                          _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[0][i].bsums), mins), &sumi, &summ);
            sumf[0] += ms_kq_block_sum_f32(a[0][i].d, d, dmin, sumi, summ);
        } else {
            __m256i v[8];
            MS_XN(k, nt, v[k] = fold256_i32(acc[k]);
                  v[4 + k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k][i].bsums), mins););
            for (int k = nt; k < 4; k++) v[k] = v[4 + k] = _mm256_setzero_si256(); /* the reduction takes four */
            int32_t r[8];
            _mm256_storeu_si256((__m256i *)r, ms_kq_hsum8x8_i32(v));
            MS_XN(k, nt, sumf[k] += ms_kq_block_sum_f32(a[k][i].d, d, dmin, r[k], r[4 + k]););
        }
    }
    MS_XN(k, nt, s[k] = sumf[k];);
}

MS_DECL_DOT(q5_K, q8_K, avx512) {
    const void *y1[1] = {y};
    q5k_dot512_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(q5_K, q8_K, avx512) { q5k_dot512_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q5_K_q8_K_avx512, q5k_dot512_n)
MS_DEFINE_DOT_ROWS(q5_K, q8_K, avx512)

/* Q3_K: vector u = 0..3 covers activation bytes 64 u .. 64 u + 63, code
 * vectors c = 2 u and 2 u + 1 (elements 32 c ..: bits 2 j, 2 j + 1 of
 * qs[32 h + l] with h = c / 4, j = c % 4, and bit c of hmask[l]); int16 pair
 * lane l of it belongs to sub-block 4 u + l / 8. The offset -4 goes through
 * the bsums (the reference's isum), all integer. */
static const int16_t k_q3k_lane_quarter[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};

MS_SIMD_INLINE void q3k_dot512_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q3_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    const __m512i quarter = _mm512_loadu_si512(k_q3k_lane_quarter);
    __m128 sum1 = _mm_setzero_ps(), sum4 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 2); /* 110 bytes a block */
        const __m256i sc16 = _mm256_cvtepi8_epi16(ms_q3k_scales_i8(w[i].scales));
        const __m512i sc512 = _mm512_castsi256_si512(sc16);
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)w[i].hmask));
        __m512i acc[4];
        MS_XN(k, nt, acc[k] = _mm512_setzero_si512(););
        _Pragma("GCC unroll 4")
        for (int u = 0; u < 4; u++) {
            const int h = u / 2, j0 = 2 * (u % 2);
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h)));
            const __m512i sh = cat256(_mm256_set1_epi16((short)(2 * j0)), _mm256_set1_epi16((short)(2 * j0 + 2)));
            const __m512i sel = cat256(_mm256_set1_epi8((char)(1 << (2 * u))), _mm256_set1_epi8((char)(2 << (2 * u))));
            __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(q, sh), m3);
            codes = _mm512_mask_add_epi8(codes, _mm512_test_epi8_mask(hm, sel), codes, four);
            const __m512i scv = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, _mm512_set1_epi16((short)(4 * u))), sc512);
            MS_XN(k, nt, acc[k] = _mm512_dpwssd_epi32(
                             acc[k], _mm512_maddubs_epi16(codes, _mm512_loadu_si512(a[k][i].qs + 64 * u)), scv););
        }
        __m256i v[4];
        MS_XN(k, nt, v[k] = _mm256_sub_epi32(fold256_i32(acc[k]),
                                             _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k][i].bsums), sc16), 2)););
        for (int k = nt; k < 4; k++) v[k] = _mm256_setzero_si256(); /* the reduction takes four */
        ms_kq_isum_block_add(&sum1, &sum4, v, a, i, w[i].d, nt);
    }
    if (nt == 1) s[0] = _mm_cvtss_f32(sum1);
    else _mm_storeu_ps(s, sum4);
}

MS_DECL_DOT(q3_K, q8_K, avx512) {
    const void *y1[1] = {y};
    q3k_dot512_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(q3_K, q8_K, avx512) { q3k_dot512_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q3_K_q8_K_avx512, q3k_dot512_n)
MS_DEFINE_DOT_ROWS(q3_K, q8_K, avx512)

/* ---- dots with f32 activations (quant_simd.h's MS_DEFINE_DOT_F32_AVX512) */

MS_DEFINE_DOT_F32_AVX512(q5_K, block_q5_K)
MS_DEFINE_DOT_F32_AVX512(q3_K, block_q3_K)

/* ---- token-lane GEMM (prefill): rows x 16 packed Q8_K tokens
 *
 * quant_kq_avx512.c's form (MS_DEFINE_GEMM_KQ_X16): a token per 32-bit lane
 * of a 64-byte vector, four codes of a row broadcast to every lane, one
 * vpdpbusd adds each token's four products straight into int32 (codes are
 * the unsigned operand: Q5_K's at most 31, Q3_K's at most 7), vpmulld
 * applies a sub-block's scale (Q3_K's signed). The min / offset term comes
 * from the pack's bsum pairs. Integer sums are exact and the float step per
 * block is the reference's, lane by lane in its order: every output equals
 * the single dot bit for bit. Rows go in pairs sharing each activation
 * load, each block unpacked one block ahead into the other of two buffers. */

/* Q5_K: Q4_K's layout (quant_simd.h's struct kq_x16_buf8) with the fifth
 * bits: codes[k][2 h] holds the low nibbles of qs[64 h .. 64 h + 63]
 * (sub-blocks 4 h, 4 h + 2), codes[k][2 h + 1] the high ones (4 h + 1,
 * 4 h + 3); scw / mw the 6-bit scales and mins a byte each. */
MS_SIMD_INLINE void q5k_expand_x16(const block_q5_K *const b[2], struct kq_x16_buf8 *buf, const int R) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    for (int k = 0; k < R; k++) {
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[k]->qh));
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_loadu_si512((const void *)(b[k]->qs + 64 * h));
            const __m512i sel_lo = cat256(_mm256_set1_epi8((char)(1 << (4 * h))), _mm256_set1_epi8((char)(4 << (4 * h))));
            const __m512i sel_hi = cat256(_mm256_set1_epi8((char)(2 << (4 * h))), _mm256_set1_epi8((char)(8 << (4 * h))));
            __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, sel_lo), lo, b4);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, sel_hi), hi, b4);
            _mm512_store_si512((void *)buf->codes[k][2 * h], lo);
            _mm512_store_si512((void *)buf->codes[k][2 * h + 1], hi);
        }
        ms_q4k_unpack_scales_u64(b[k]->scales, &buf->scw[k], &buf->mw[k]);
    }
}

/* Q4_K's products (the codes at most 31 here) */
MS_SIMD_INLINE void q5k_products_x16(const struct kq_x16_buf8 *buf, const block_q5_K *const b[2],
                                     const block_q8_Kx16 *const ab[2], __m512 accf[2][2], const int R, const int P) {
    const uint16_t d[2] = {b[0]->d, b[1]->d}, dmin[2] = {b[0]->dmin, b[1]->dmin};
    kq_x16_products8(buf, d, dmin, ab, accf, R, P);
}

/* Q3_K: codes[k][u] holds elements 64 u .. 64 u + 63 in value order
 * (as q3k_dot512_n makes them), sc[k] the 16 signed scales. */
struct q3k_x16_buf {
    uint8_t codes[2][4][64] __attribute__((aligned(64)));
    int8_t sc[2][16];
};

MS_SIMD_INLINE void q3k_expand_x16(const block_q3_K *const b[2], struct q3k_x16_buf *buf, const int R) {
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    for (int k = 0; k < R; k++) {
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[k]->hmask));
        _Pragma("GCC unroll 4")
        for (int u = 0; u < 4; u++) {
            const int j0 = 2 * (u % 2);
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[k]->qs + 32 * (u / 2))));
            const __m512i sh = cat256(_mm256_set1_epi16((short)(2 * j0)), _mm256_set1_epi16((short)(2 * j0 + 2)));
            const __m512i sel = cat256(_mm256_set1_epi8((char)(1 << (2 * u))), _mm256_set1_epi8((char)(2 << (2 * u))));
            __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(q, sh), m3);
            codes = _mm512_mask_add_epi8(codes, _mm512_test_epi8_mask(hm, sel), codes, four);
            _mm512_store_si512((void *)buf->codes[k][u], codes);
        }
        _mm_storeu_si128((__m128i *)buf->sc[k], ms_q3k_scales_i8(b[k]->scales));
    }
}

MS_SIMD_INLINE void q3k_products_x16(const struct q3k_x16_buf *buf, const block_q3_K *const b[2],
                                     const block_q8_Kx16 *const ab[2], __m512 accf[2][2], const int R, const int P) {
    const uint8_t *const codes[2] = {buf->codes[0][0], buf->codes[1][0]};
    const int8_t *const sc[2] = {buf->sc[0], buf->sc[1]};
    const uint16_t d[2] = {b[0]->d, b[1]->d};
    kq_x16_products16(codes, sc, d, 2, ab, accf, R, P);
}

MS_DEFINE_GEMM_KQ_X16(ms_gemm_q5_K_q8_Kx16_avx512, block_q5_K, struct kq_x16_buf8, q5k_expand_x16, q5k_products_x16,
                      1, kq_x16_final)
MS_DEFINE_GEMM_KQ_X16(ms_gemm_q3_K_q8_Kx16_avx512, block_q3_K, struct q3k_x16_buf, q3k_expand_x16, q3k_products_x16,
                      1, kq_x16_final)
