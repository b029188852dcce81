/*
 * quant_iq4_avx512.c - AVX-512 (F, BW, VL, DQ, VNNI) kernels for IQ4_XS
 * weights: dequantize, the dot with Q8_K activations (single, four-token
 * and many-rows forms) and the dot with f32 activations. The Q8_K dots
 * equal the reference (quant_iq4_ref.c) bit for bit: exact integer sums,
 * then its float step per block (ms_kq_isum_block_add, the operations of
 * ms_iq4xs_block_sum) in its order.
 *
 * The dots take two sub-blocks (64 values) a vector: their 32 index bytes
 * split into nibbles, the 128-bit lanes put in element order, and vpshufb
 * of the table offset by +128 (levels 1 .. 241, unsigned) makes VNNI's
 * unsigned operand; vpdpbusd sums four products a lane against the int8
 * activations, exactly. The offset comes back out through Q8_K's sums of
 * 16: isum = sum_s (ls_s - 32) * (dp_s - 128 * (bsums[2 s] + bsums[2 s + 1])),
 * the second term one vpmaddwd a block. AVX-512 has no vpsignb, so the
 * AVX2 kernels' sign trick would cost a mask and a masked subtract more.
 */
#include <immintrin.h>

#include "quant/quant_impl.h"
#include "quant/quant_iq4.h"
#include "quant/quant_kq.h"
#include "quant/quant_simd.h"

/* The table plus 128, as unsigned bytes. */
static const uint8_t k_iq4_levels_u8[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};

/* The 64 indices of sub-blocks 2 c and 2 c + 1 in element order. */
MS_SIMD_INLINE __m512i iq4xs_idx64(const block_iq4_xs *b, int c) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
    const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
                                         _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
    /* lanes (lo 2c, lo 2c+1, hi 2c, hi 2c+1) -> (lo 2c, hi 2c, lo 2c+1, hi 2c+1) */
    return _mm512_shuffle_i64x2(t, t, 0xd8);
}

/* ---- dequantization: (ls - 32) * level exact in int32, then d times it */

MS_DECL_DEQUANT(iq4_xs, avx512) {
    const block_iq4_xs *b = x;
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ms_kvalues_iq4nl));
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m512 d = _mm512_set1_ps(fp16_scale(b[i].d));
        for (int c = 0; c < QK_K / 64; c++) {
            int8_t v[64] __attribute__((aligned(64)));
            _mm512_store_si512((void *)v, _mm512_shuffle_epi8(lut, iq4xs_idx64(&b[i], c)));
            for (int k = 0; k < 4; k++) {
                const __m512i sc = _mm512_set1_epi32(ms_iq4xs_scale(&b[i], 2 * c + k / 2));
                const __m512i p = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(v + 16 * k))), sc);
                _mm512_storeu_ps(y + 64 * c + 16 * k, _mm512_mul_ps(d, _mm512_cvtepi32_ps(p)));
            }
        }
        y += QK_K;
    }
}

/* ---- dots with Q8_K activations: one body for one and four tokens (MS_XN) */
MS_SIMD_INLINE void iq4xs_dot512_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_iq4_xs *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k_iq4_levels_u8));
    __m128 sum1 = _mm_setzero_ps(), sum4 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 3); /* 136 bytes a block */
        int16_t sc[QK_K / 32];
        for (int sb = 0; sb < QK_K / 32; sb++) sc[sb] = (int16_t)ms_iq4xs_scale(&w[i], sb);
        /* each scale twice: it covers two sums of 16 */
        const __m128i s8 = _mm_loadu_si128((const __m128i *)sc);
        const __m256i sc16 = _mm256_set_m128i(_mm_unpackhi_epi16(s8, s8), _mm_unpacklo_epi16(s8, s8));
        __m512i acc[4];
        __m256i mn[4];
        MS_XN(k, nt, acc[k] = _mm512_setzero_si512();
              mn[k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k][i].bsums), sc16););
        _Pragma("GCC unroll 4")
        for (int c = 0; c < QK_K / 64; c++) {
            const __m512i u = _mm512_shuffle_epi8(lut, iq4xs_idx64(&w[i], c));
            const __m512i scv = _mm512_inserti64x4(_mm512_set1_epi32(sc[2 * c]), _mm256_set1_epi32(sc[2 * c + 1]), 1);
            MS_XN(k, nt,
                  const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u,
                                                         _mm512_loadu_si512((const void *)(a[k][i].qs + 64 * c)));
                  acc[k] = _mm512_add_epi32(acc[k], _mm512_mullo_epi32(dp, scv)););
        }
        __m256i v[4];
        MS_XN(k, nt, v[k] = _mm256_sub_epi32(fold256_i32(acc[k]), _mm256_slli_epi32(mn[k], 7)););
        for (int k = nt; k < 4; k++) v[k] = _mm256_setzero_si256(); /* the reduction takes four */
        ms_kq_isum_block_add(&sum1, &sum4, v, a, i, w[i].d, nt);
    }
    if (nt == 1) s[0] = _mm_cvtss_f32(sum1);
    else _mm_storeu_ps(s, sum4);
}

MS_DECL_DOT(iq4_xs, q8_K, avx512) {
    const void *y1[1] = {y};
    iq4xs_dot512_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(iq4_xs, q8_K, avx512) { iq4xs_dot512_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_iq4_xs_q8_K_avx512, iq4xs_dot512_n)

/* Many rows: the single dot inlined in the loop over rows. */
MS_DEFINE_DOT_ROWS(iq4_xs, q8_K, avx512)

/* ---- dot with f32 activations (quant_simd.h's MS_DEFINE_DOT_F32_AVX512) */
MS_DEFINE_DOT_F32_AVX512(iq4_xs, block_iq4_xs)

/* ---- token-lane GEMM (prefill): IQ4_XS rows x 16 packed Q8_K tokens
 *
 * Q6_K's form (quant_q6k_avx512.c, MS_DEFINE_GEMM_KQ_X16 over
 * quant_simd.h's kq_x16_products16): a row's block is unpacked one block
 * ahead into its 256 levels plus 128 (1 .. 241, the dots' unsigned
 * operand) in value order, and each sub-block's scale ls - 32 is written
 * twice, once for each of its halves of 16, which kq_x16_products16 takes
 * as 16 sub-blocks of 16. Four codes broadcast against the
 * block_q8_Kx16 activations (vpdpbusd, exact in int32), times the scale;
 * the offset comes back out through the bs16 pairs times the scale pairs,
 * shifted by 7: lane t's isum = sumi - 128 summ is the reference's for
 * token t (|sumi| <= 8 * 32 * 241 * 127 * 32 < 2^31), and its float step
 * (ad * d) * isum is ms_iq4xs_block_sum's, lane by lane in block order:
 * every output is the single dot's bit for bit. Two rows share each
 * activation load. */
struct iq4xs_x16_buf {
    uint8_t codes[2][QK_K] __attribute__((aligned(64)));
    int8_t sc[2][QK_K / 16];
};

MS_SIMD_INLINE void iq4xs_expand_x16(const block_iq4_xs *const b[2], struct iq4xs_x16_buf *buf, const int R) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k_iq4_levels_u8));
    for (int k = 0; k < R; k++) {
        _Pragma("GCC unroll 4")
        for (int c = 0; c < QK_K / 64; c++)
            _mm512_store_si512((void *)(buf->codes[k] + 64 * c), _mm512_shuffle_epi8(lut, iq4xs_idx64(b[k], c)));
        for (int s = 0; s < QK_K / 32; s++) buf->sc[k][2 * s] = buf->sc[k][2 * s + 1] = (int8_t)ms_iq4xs_scale(b[k], s);
    }
}

MS_SIMD_INLINE void iq4xs_products_x16(const struct iq4xs_x16_buf *buf, const block_iq4_xs *const b[2],
                                       const block_q8_Kx16 *const ab[2], __m512 accf[2][2], const int R, const int P) {
    const uint8_t *const codes[2] = {buf->codes[0], buf->codes[1]};
    const int8_t *const sc[2] = {buf->sc[0], buf->sc[1]};
    const uint16_t d[2] = {b[0]->d, b[1]->d};
    kq_x16_products16(codes, sc, d, 7, ab, accf, R, P);
}

MS_DEFINE_GEMM_KQ_X16(ms_gemm_iq4_xs_q8_Kx16_avx512, block_iq4_xs, struct iq4xs_x16_buf, iq4xs_expand_x16,
                      iq4xs_products_x16, 1, kq_x16_final)
