/*
 * quant_q6k_avx2.c - AVX2 kernels for Q6_K weights: dequantize, the dot
 * with Q8_K activations (single, four-token and many-rows forms) and the
 * dot with f32 activations. The Q8_K dots equal the reference
 * (quant_q6k_ref.c) bit for bit: the integer sums are exact and the float
 * step per block is its ms_q6k_block_sum, in its order; dequantize rounds
 * as the reference (one rounding a value); the f32 dot differs from it
 * only in the order of its f32 sums.
 *
 * A block's codes are assembled 32 at a time, one vector per (h, j) of
 * quant_q6k.h's layout (the low nibbles from ql, the two high bits from
 * qh shifted to bits 4-5), lined up with activation bytes 32 c .. 32 c + 31
 * (c = 4 h + j). vpmaddubsw multiplies the unsigned codes (<= 63) by the
 * int8 activations into int16 pairs (at most 2 * 63 * 128: never
 * saturates), vpmaddwd weights each pair by its sub-block's int8 scale,
 * sign-extended, into int32; the -32 offset is -32 times the scales
 * against Q8_K's sums of 16, one vpmaddwd a block.
 */
#include <immintrin.h>

#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_q6k.h"
#include "quant/quant_simd.h"

/* Vector c's scales as a byte shuffle of the 16 scales: scales[2 c] for
 * its first 16 codes, scales[2 c + 1] for the last 16 (sign-extended to
 * int16 afterwards, one per 16-bit lane). */
#define Q6K_PICK(c)                                                                                     \
    {2 * (c), 2 * (c), 2 * (c), 2 * (c), 2 * (c), 2 * (c), 2 * (c), 2 * (c), 2 * (c) + 1, 2 * (c) + 1, \
     2 * (c) + 1, 2 * (c) + 1, 2 * (c) + 1, 2 * (c) + 1, 2 * (c) + 1, 2 * (c) + 1}
static const int8_t k_q6k_pick[8][16] = {Q6K_PICK(0), Q6K_PICK(1), Q6K_PICK(2), Q6K_PICK(3),
                                         Q6K_PICK(4), Q6K_PICK(5), Q6K_PICK(6), Q6K_PICK(7)};
#undef Q6K_PICK

/* The four code vectors of half h (c = 4 h + j, j = 0..3), codes 0..63. */
MS_SIMD_INLINE void q6k_codes_half(const block_q6_K *b, int h, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
    const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    /* 16-bit shifts: the bits that cross into the neighbouring byte are
     * masked off */
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
}

/* ---- dequantization: sc * (q - 32) exact in int16, then d times it */

MS_DECL_DEQUANT(q6_K, avx2) {
    const block_q6_K *b = x;
    const __m256i off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256 d = _mm256_set1_ps(fp16_scale(b[i].d));
        const __m128i scb = _mm_loadu_si128((const __m128i *)b[i].scales);
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6k_codes_half(&b[i], h, q);
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                const __m256i v = _mm256_sub_epi8(q[j], off); /* -32 .. 31 */
                const __m256i sc = _mm256_cvtepi8_epi16(
                    _mm_shuffle_epi8(scb, _mm_loadu_si128((const __m128i *)k_q6k_pick[c])));
                /* 16 values of each scale: the low 16 bytes of v take
                 * sc[2 c], the high 16 sc[2 c + 1] */
                const __m256i p0 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
                                                      _mm256_permute4x64_epi64(sc, 0x44));
                const __m256i p1 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)),
                                                      _mm256_permute4x64_epi64(sc, 0xee));
                float *yc = y + 32 * c;
                _mm256_storeu_ps(yc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(p0)))));
                _mm256_storeu_ps(yc + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(p0, 1)))));
                _mm256_storeu_ps(yc + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(p1)))));
                _mm256_storeu_ps(yc + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(p1, 1)))));
            }
        }
        y += QK_K;
    }
}

/* ---- dots with Q8_K activations: one body for one and four tokens
 * (MS_XN), the codes assembled once a block for all of them. v[k] starts
 * at -32 times token k's min term and takes the scaled code products; its
 * lane sum is the reference's isum. One token keeps its float step in
 * vector registers (as quant_kq_avx2.c's kq_block_add, whose notes give
 * the measurement), four reduce their sums together and run the step in
 * four lanes, lane k token k's operations. */
MS_SIMD_INLINE void q6k_dot_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q6_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    __m128 sum1 = _mm_setzero_ps(), sum4 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 4); /* 210 bytes a block */
        const __m128i scb = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(scb);
        __m256i v[4];
        MS_XN(k, nt,
              v[k] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                      _mm256_slli_epi32(_mm256_madd_epi16(
                                                            _mm256_loadu_si256((const __m256i *)a[k][i].bsums), sc16),
                                                        5)););
        for (int k = nt; k < 4; k++) v[k] = _mm256_setzero_si256(); /* the reduction takes four */
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6k_codes_half(&w[i], h, q);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                const __m256i sc = _mm256_cvtepi8_epi16(
                    _mm_shuffle_epi8(scb, _mm_loadu_si128((const __m128i *)k_q6k_pick[c])));
                MS_XN(k, nt,
                      const __m256i p = _mm256_maddubs_epi16(q[j], _mm256_loadu_si256((const __m256i *)(a[k][i].qs + 32 * c)));
                      v[k] = _mm256_add_epi32(v[k], _mm256_madd_epi16(p, sc)););
            }
        }
        ms_kq_isum_block_add(&sum1, &sum4, v, a, i, w[i].d, nt);
    }
    if (nt == 1) s[0] = _mm_cvtss_f32(sum1);
    else _mm_storeu_ps(s, sum4);
}

MS_DECL_DOT(q6_K, q8_K, avx2) {
    const void *y1[1] = {y};
    q6k_dot_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(q6_K, q8_K, avx2) { q6k_dot_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q6_K_q8_K_avx2, q6k_dot_n)

/* Many rows: the single dot inlined in the loop over rows. Q6_K rows of
 * 4096 are 3360 bytes, so eight of them span more than the
 * MS_ROWS_LANES_MAX_BYTES that rows-in-lanes forms are kept to. */
MS_DEFINE_DOT_ROWS(q6_K, q8_K, avx2)

/* ---- token-lane GEMM (prefill): Q6_K rows x 8 packed Q8_K tokens
 *
 * Tokens in 32-bit lanes (block_q8_Kx8): four codes of a row are broadcast
 * to every lane (a broadcast load: see bcast32) and one vpmaddubsw makes
 * two int16 pair sums per token; two such steps add in int16 (codes <= 63,
 * |q8| <= 128: at most 4 * 63 * 128 = 32256, exact), and one vpmaddwd by
 * the sub-block's int8 scale, as an int16 pair, takes them to int32. The
 * min term is the 16 sums of 16 (bs16 pairs) times the scale pairs, lane t's
 * isum = sumi - 32 summ is the reference's for token t, and the float step
 * is ms_q6k_block_sum's operations lane by lane: every output is the
 * single dot's bit for bit. Four rows share each activation load; a
 * block's codes are unpacked (value order) one block ahead, into the other
 * of two buffers, so the broadcast loads never wait on the stores just
 * made. */

/* Block i of R (1 to 4) rows unpacked to codes in value order, cb[k]. */
MS_SIMD_INLINE void q6k_expand_x8(const block_q6_K *const b[4], int64_t i, uint8_t cb[4][QK_K], const int R) {
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++) {
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6k_codes_half(&b[k][i], h, q);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) _mm256_store_si256((__m256i *)(cb[k] + 128 * h + 32 * j), q[j]);
        }
    }
}

/* int8 scales x, y as the int16 pair (x, y) in one 32-bit word */
static inline int q6k_pair(int8_t x, int8_t y) { return (int)((uint32_t)(uint16_t)x | (uint32_t)(uint16_t)y << 16); }

MS_SIMD_INLINE void q6k_block_x8(const block_q6_K *const b[4], int64_t i, const uint8_t cb[4][QK_K],
                                 const block_q8_Kx8 *ab, __m256 accf[4], const int R) {
    __m256i sumi[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++) sumi[k] = _mm256_setzero_si256();
    _Pragma("GCC unroll 16")
    for (int sb = 0; sb < QK_K / 16; sb++) {
        const int8_t(*act)[32] = &ab->qs[sb / 2][4 * (sb % 2)];
        const __m256i a0 = _mm256_load_si256((const __m256i *)act[0]), a1 = _mm256_load_si256((const __m256i *)act[1]);
        const __m256i a2 = _mm256_load_si256((const __m256i *)act[2]), a3 = _mm256_load_si256((const __m256i *)act[3]);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < R; k++) {
            const uint8_t *c = cb[k] + 16 * sb;
            const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(bcast32(c), a0), _mm256_maddubs_epi16(bcast32(c + 4), a1));
            const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(bcast32(c + 8), a2), _mm256_maddubs_epi16(bcast32(c + 12), a3));
            const __m256i sc = _mm256_set1_epi32(q6k_pair(b[k][i].scales[sb], b[k][i].scales[sb]));
            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_add_epi32(_mm256_madd_epi16(p01, sc), _mm256_madd_epi16(p23, sc)));
        }
    }
    const __m256 ad = _mm256_load_ps(ab->d);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++) {
        __m256i summ = _mm256_setzero_si256();
        _Pragma("GCC unroll 8")
        for (int q = 0; q < 8; q++)
            summ = _mm256_add_epi32(summ, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)ab->bs16[q]),
                                                            _mm256_set1_epi32(q6k_pair(b[k][i].scales[2 * q],
                                                                                       b[k][i].scales[2 * q + 1]))));
        const __m256i isum = _mm256_sub_epi32(sumi[k], _mm256_slli_epi32(summ, 5));
        accf[k] = _mm256_add_ps(accf[k], _mm256_mul_ps(_mm256_mul_ps(ad, _mm256_set1_ps(fp16_scale(b[k][i].d))),
                                                       _mm256_cvtepi32_ps(isum)));
    }
}

MS_SIMD_INLINE void q6k_rows_x8(const block_q6_K *const b[4], int64_t nb, const block_q8_Kx8 *a, __m256 out[4],
                                const int R) {
    __m256 accf[4];
    uint8_t cb[2][4][QK_K] __attribute__((aligned(32)));
    for (int k = 0; k < 4; k++) accf[k] = _mm256_setzero_ps();
    if (nb > 0) q6k_expand_x8(b, 0, cb[0], R);
    _Pragma("GCC unroll 1")
    for (int64_t i = 0; i < nb; i++) {
        if (i + 1 < nb) q6k_expand_x8(b, i + 1, cb[(i + 1) & 1], R);
        q6k_block_x8(b, i, (const uint8_t(*)[QK_K])cb[i & 1], &a[i], accf, R);
    }
    for (int k = 0; k < R; k++) out[k] = accf[k];
}

MS_DEFINE_GEMM_X8_ROWS4(ms_gemm_q6_K_q8_Kx8_avx2, block_q6_K, QK_K, q6k_rows_x8)

/* ---- dot with f32 activations (quant_simd.h's MS_DEFINE_DOT_F32_AVX2) */
MS_DEFINE_DOT_F32_AVX2(q6_K, block_q6_K)
