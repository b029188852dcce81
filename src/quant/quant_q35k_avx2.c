/*
 * quant_q35k_avx2.c - AVX2 kernels for Q5_K and Q3_K weights (Q8_K and f32
 * activations). Same results as quant_q35k_ref.c: the dequantizers do the
 * reference's f32 operations, the integer parts of the Q8_K dots are exact
 * and their float step per block is the reference's, in its order (so the
 * dots equal it bit for bit); only the order of the f32 sums differs in the
 * *_f32 dots.
 *
 * The Q8_K dots follow the Q4_K / Q2_K ones (quant_kq_avx2.c): the codes of
 * a block are unpacked into 32-byte vectors lined up with 32 activation
 * bytes, maddubs makes int16 pair sums (unsigned codes, at most 31 for
 * Q5_K and 7 for Q3_K, times int8 activations: at most 2 * 31 * 127, no
 * saturation) and madd weights them by the sub-block scale into int32.
 * One body serves one and four tokens (MS_XN). The extra code bit (Q5_K's
 * qh, Q3_K's hmask) is moved to its place with one shift and a mask.
 */
#include <immintrin.h>

#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_simd.h"

/* Bit b (a constant 0..7) of every byte of v moved to bit `to` (2 or 4),
 * the other bits cleared. A 16-bit shift by at most 5 keeps the bit inside
 * its byte for these positions: shifted left by to - b (b < to), a byte's
 * bit `to` comes from its own bit b; shifted right by b - to, from its
 * own bit b <= 7. */
MS_SIMD_INLINE __m256i bit_to(__m256i v, const int b, const int to) {
    const __m256i t = b < to ? _mm256_slli_epi16(v, to - b) : b > to ? _mm256_srli_epi16(v, b - to) : v;
    return _mm256_and_si256(t, _mm256_set1_epi8((char)(1 << to)));
}

MS_SIMD_INLINE __m128i bit_to128(__m128i v, const int b, const int to) {
    const __m128i t = b < to ? _mm_slli_epi16(v, to - b) : b > to ? _mm_srli_epi16(v, b - to) : v;
    return _mm_and_si128(t, _mm_set1_epi8((char)(1 << to)));
}

static inline __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
static inline __m256 i8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

/* ---- dequantization */

MS_DECL_DEQUANT(q5_K, avx2) {
    const block_q5_K *b = x;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(b[i].scales, sc, m);
        _Pragma("GCC unroll 4")
        for (int g = 0; g < 4; g++) {
            const __m256 d1 = _mm256_set1_ps(d * sc[2 * g]), m1 = _mm256_set1_ps(dmin * m[2 * g]);
            const __m256 d2 = _mm256_set1_ps(d * sc[2 * g + 1]), m2 = _mm256_set1_ps(dmin * m[2 * g + 1]);
            for (int k = 0; k < 2; k++) {
                const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * g + 16 * k));
                const __m128i qh = _mm_loadu_si128((const __m128i *)(b[i].qh + 16 * k));
                const __m128i lo = _mm_or_si128(_mm_and_si128(q, m4), bit_to128(qh, 2 * g, 4));
                const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), m4), bit_to128(qh, 2 * g + 1, 4));
                float *o = y + 16 * k;
                _mm256_storeu_ps(o, _mm256_sub_ps(_mm256_mul_ps(d1, u8x8_to_ps(lo)), m1));
                _mm256_storeu_ps(o + 8, _mm256_sub_ps(_mm256_mul_ps(d1, u8x8_to_ps(_mm_srli_si128(lo, 8))), m1));
                _mm256_storeu_ps(o + 32, _mm256_sub_ps(_mm256_mul_ps(d2, u8x8_to_ps(hi)), m2));
                _mm256_storeu_ps(o + 40, _mm256_sub_ps(_mm256_mul_ps(d2, u8x8_to_ps(_mm_srli_si128(hi, 8))), m2));
            }
            y += 64;
        }
    }
}

MS_DECL_DEQUANT(q3_K, avx2) {
    const block_q3_K *b = x;
    const __m128i m3 = _mm_set1_epi8(3), four = _mm_set1_epi8(4);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d);
        int8_t sc[16];
        ms_q3k_unpack_scales(b[i].scales, sc);
        _Pragma("GCC unroll 8")
        for (int c = 0; c < 8; c++) { /* elements 32 c .. 32 c + 31: sub-blocks 2 c, 2 c + 1 */
            const int h = c / 4, j = c % 4;
            for (int k = 0; k < 2; k++) {
                const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * h + 16 * k));
                const __m128i hm = _mm_loadu_si128((const __m128i *)(b[i].hmask + 16 * k));
                const __m128i low = _mm_and_si128(_mm_srli_epi16(q, 2 * j), m3);
                const __m128i v = _mm_sub_epi8(_mm_or_si128(low, bit_to128(hm, c, 2)), four);
                const __m256 dl = _mm256_set1_ps(d * (float)sc[2 * c + k]);
                _mm256_storeu_ps(y, _mm256_mul_ps(dl, i8x8_to_ps(v)));
                _mm256_storeu_ps(y + 8, _mm256_mul_ps(dl, i8x8_to_ps(_mm_srli_si128(v, 8))));
                y += 16;
            }
        }
    }
}

/* ---- dots with Q8_K activations */

/* An int16 pick for vpshufb: word w of each 128-bit lane in every word. */
static inline __m256i word_pick(int w_lo, int w_hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)((2 * w_hi + 1) << 8 | 2 * w_hi)),
                            _mm_set1_epi16((short)((2 * w_lo + 1) << 8 | 2 * w_lo)));
}

/* Q5_K: Q4_K's body (quant_kq_avx2.c, q4k_dot_n) with the fifth bits: byte
 * group g holds sub-block 2 g in its low and 2 g + 1 in its high nibbles,
 * whose fifth bits are bits 2 g and 2 g + 1 of qh[l], l the byte's place
 * in the group. */
MS_SIMD_INLINE void q5k_dot_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q5_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    __m128 sum1 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 3); /* 176 bytes a block */
        uint64_t scw, mw;
        ms_q4k_unpack_scales_u64(w[i].scales, &scw, &mw);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)scw)));
        const __m256i mins = q4k_mins16_u64(mw);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)w[i].qh);
        __m256i v[8]; /* v[k]: sumi lanes of token k, v[4 + k]: its summ lanes */
        MS_XN(k, nt, v[k] = _mm256_setzero_si256();
              v[4 + k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k][i].bsums), mins););
        for (int k = nt; k < 4; k++) v[k] = v[4 + k] = _mm256_setzero_si256(); /* the reduction takes four */
        _Pragma("GCC unroll 4")
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * g));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), bit_to(qh, 2 * g, 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), bit_to(qh, 2 * g + 1, 4));
            const __m256i s_lo = _mm256_shuffle_epi8(sc16, word_pick(2 * g, 2 * g));
            const __m256i s_hi = _mm256_shuffle_epi8(sc16, word_pick(2 * g + 1, 2 * g + 1));
            MS_XN(k, nt, const int8_t *q8 = a[k][i].qs + 64 * g;
                  const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
                  const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
                  v[k] = _mm256_add_epi32(v[k], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo),
                                                                 _mm256_madd_epi16(p_hi, s_hi))););
        }
        ms_kq_block_add(&sum1, sumf, v, a, i, &w[i].d, nt);
    }
    if (nt == 1) sumf[0] = _mm_cvtss_f32(sum1);
    MS_XN(k, nt, s[k] = sumf[k];);
}

MS_DECL_DOT(q5_K, q8_K, avx2) {
    const void *y1[1] = {y};
    q5k_dot_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(q5_K, q8_K, avx2) { q5k_dot_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q5_K_q8_K_avx2, q5k_dot_n)
MS_DEFINE_DOT_ROWS(q5_K, q8_K, avx2)

/* Q3_K: code vector c = 4 h + j (elements 32 c .. 32 c + 31, activation
 * bytes 32 c ..) takes bits 2 j, 2 j + 1 of qs[32 h + l] and bit c of
 * hmask[l]; its low 128-bit lane is sub-block 2 c, its high one 2 c + 1.
 * The signed scales, widened to int16 (sub-blocks 0-7 in the low lane,
 * 8-15 in the high), are broadcast per lane and picked by vpshufb. The
 * offset -4 goes through the bsums: v[k] starts at -4 * sc[k] * bsums[k]
 * (lane-wise), so its lanes sum to the reference's isum. */
MS_SIMD_INLINE void q3k_dot_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q3_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    const __m256i m3 = _mm256_set1_epi8(3);
    __m128 sum1 = _mm_setzero_ps(), sum4 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 2); /* 110 bytes a block */
        const __m256i sc16 = _mm256_cvtepi8_epi16(ms_q3k_scales_i8(w[i].scales));
        const __m256i sc_a = _mm256_permute2x128_si256(sc16, sc16, 0x00); /* scales 0-7 in both lanes */
        const __m256i sc_b = _mm256_permute2x128_si256(sc16, sc16, 0x11); /* 8-15 */
        const __m256i hm = _mm256_loadu_si256((const __m256i *)w[i].hmask);
        __m256i v[4];
        MS_XN(k, nt, v[k] = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k][i].bsums),
                                                                 sc16), 2);
              v[k] = _mm256_sub_epi32(_mm256_setzero_si256(), v[k]););
        for (int k = nt; k < 4; k++) v[k] = _mm256_setzero_si256(); /* the reduction takes four */
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                const __m256i codes = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), bit_to(hm, c, 2));
                const __m256i scv = _mm256_shuffle_epi8(h ? sc_b : sc_a, word_pick(2 * j, 2 * j + 1));
                MS_XN(k, nt,
                      const __m256i p = _mm256_maddubs_epi16(codes, _mm256_loadu_si256((const __m256i *)(a[k][i].qs + 32 * c)));
                      v[k] = _mm256_add_epi32(v[k], _mm256_madd_epi16(p, scv)););
            }
        }
        ms_kq_isum_block_add(&sum1, &sum4, v, a, i, w[i].d, nt);
    }
    if (nt == 1) s[0] = _mm_cvtss_f32(sum1);
    else _mm_storeu_ps(s, sum4);
}

MS_DECL_DOT(q3_K, q8_K, avx2) {
    const void *y1[1] = {y};
    q3k_dot_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(q3_K, q8_K, avx2) { q3k_dot_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q3_K_q8_K_avx2, q3k_dot_n)
MS_DEFINE_DOT_ROWS(q3_K, q8_K, avx2)

/* ---- token-lane GEMM (prefill): rows x 8 packed Q8_K tokens
 *
 * quant_kq_avx2.c's form: tokens in 32-bit lanes (block_q8_Kx8), four codes
 * of the row broadcast to every lane, one vpmaddubsw gives each token two
 * int16 pair sums, a few steps add up in int16 and one vpmaddwd weights
 * them by the sub-block's scale into int32. Four steps at most before it:
 * a pair is at most 2 * 31 * 127 = 7874 for Q5_K, so four are 31496 (Q4_K
 * can take eight); a Q3_K sub-block of 16 values is four steps anyway. The
 * block's float step runs on the 8 tokens at once, lane by lane the
 * reference's operations in its order: every output equals the single dot
 * bit for bit. A row's codes are unpacked one block ahead into the other
 * of two buffers (the broadcast loads would wait on fresh stores). */

/* Q5_K: a block unpacked into quant_simd.h's struct kq_x8_buf8 (Q4_K's). */
MS_SIMD_INLINE void q5k_expand_x8(const block_q5_K *b, struct kq_x8_buf8 *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    _Pragma("GCC unroll 4")
    for (int g = 0; g < 4; g++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * g));
        _mm256_store_si256((__m256i *)u->codes[2 * g], _mm256_or_si256(_mm256_and_si256(q, m4), bit_to(qh, 2 * g, 4)));
        _mm256_store_si256((__m256i *)u->codes[2 * g + 1],
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), bit_to(qh, 2 * g + 1, 4)));
    }
    uint64_t scw, mw;
    ms_q4k_unpack_scales_u64(b->scales, &scw, &mw);
    const __m256i s32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)scw));
    _mm256_store_si256((__m256i *)u->scp, _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16)));
    _mm_store_si128((__m128i *)u->mp, _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mw)));
}

MS_SIMD_INLINE __m256 q5k_products_x8(const struct kq_x8_buf8 *u, const block_q5_K *b, const block_q8_Kx8 *ab,
                                      __m256 accf) {
    __m256i acc = _mm256_setzero_si256();
    _Pragma("GCC unroll 8")
    for (int sb = 0; sb < 8; sb++) {
        acc = _mm256_add_epi32(acc, kq_x8_sub(u->codes[sb], ab->qs[sb], 4, u->scp[sb]));
        acc = _mm256_add_epi32(acc, kq_x8_sub(u->codes[sb] + 16, ab->qs[sb] + 4, 4, u->scp[sb]));
    }
    return kq_x8_block_add(accf, ab->d, b->d, b->dmin, acc, kq_x8_mins(ab->bsp, u->mp, 4));
}

/* Q3_K: codes[c] elements 32 c .. 32 c + 31 in value order, scp[k] the
 * signed scale of sub-block k in both int16 halves, sp[q] the scales of
 * sub-blocks 2 q, 2 q + 1 as an int16 pair (for the bsums). */
struct q3k_x8_buf {
    uint8_t codes[8][32] __attribute__((aligned(32)));
    uint32_t scp[16] __attribute__((aligned(32)));
    uint32_t sp[8] __attribute__((aligned(32)));
};

MS_SIMD_INLINE void q3k_expand_x8(const block_q3_K *b, struct q3k_x8_buf *u) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++)
            _mm256_store_si256((__m256i *)u->codes[4 * h + j],
                               _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), bit_to(hm, 4 * h + j, 2)));
    }
    const __m128i sc8 = ms_q3k_scales_i8(b->scales);
    const __m256i s0 = _mm256_cvtepi8_epi32(sc8), s1 = _mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8));
    const __m256i lo16 = _mm256_set1_epi32(0xffff);
    _mm256_store_si256((__m256i *)u->scp, _mm256_or_si256(_mm256_and_si256(s0, lo16), _mm256_slli_epi32(s0, 16)));
    _mm256_store_si256((__m256i *)(u->scp + 8), _mm256_or_si256(_mm256_and_si256(s1, lo16), _mm256_slli_epi32(s1, 16)));
    _mm256_store_si256((__m256i *)u->sp, _mm256_cvtepi8_epi16(sc8));
}

MS_SIMD_INLINE __m256 q3k_products_x8(const struct q3k_x8_buf *u, const block_q3_K *b, const block_q8_Kx8 *ab,
                                      __m256 accf) {
    __m256i acc = _mm256_setzero_si256();
    _Pragma("GCC unroll 16")
    for (int sb = 0; sb < 16; sb++)
        acc = _mm256_add_epi32(acc, kq_x8_sub(&u->codes[sb / 2][16 * (sb % 2)], &ab->qs[sb / 2][4 * (sb % 2)], 4,
                                              u->scp[sb]));
    const __m256i summ = kq_x8_mins(ab->bs16, u->sp, 8);
    const __m256i isum = _mm256_sub_epi32(acc, _mm256_slli_epi32(summ, 2));
    /* the reference's (ad * d) * isum, added */
    const __m256 sd = _mm256_mul_ps(_mm256_load_ps(ab->d), _mm256_set1_ps(fp16_scale(b->d)));
    return _mm256_add_ps(accf, _mm256_mul_ps(sd, _mm256_cvtepi32_ps(isum)));
}

MS_DEFINE_GEMM_KQ_X8(ms_gemm_q5_K_q8_Kx8_avx2, block_q5_K, struct kq_x8_buf8, q5k_expand_x8, q5k_products_x8)
MS_DEFINE_GEMM_KQ_X8(ms_gemm_q3_K_q8_Kx8_avx2, block_q3_K, struct q3k_x8_buf, q3k_expand_x8, q3k_products_x8)

/* ---- dots with f32 activations (quant_simd.h's MS_DEFINE_DOT_F32_AVX2) */

MS_DEFINE_DOT_F32_AVX2(q5_K, block_q5_K)
MS_DEFINE_DOT_F32_AVX2(q3_K, block_q3_K)
