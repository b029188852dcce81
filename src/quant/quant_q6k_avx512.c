/*
 * quant_q6k_avx512.c - AVX-512 (F, BW, VL, DQ, VNNI) kernels for Q6_K
 * weights: dequantize, the dot with Q8_K activations (single, four-token
 * and many-rows forms), the dot with f32 activations, and the 16-lane
 * token-lane GEMM (prefill). The Q8_K dots and the GEMM equal the
 * reference (quant_q6k_ref.c) bit for bit: exact integer sums, then its
 * float step per block (ms_q6k_block_sum) in its order.
 *
 * The dots assemble a block's codes 64 at a time, lined up with
 * activation bytes 64 c .. 64 c + 63 (c = 0..3): half h = c / 2 of the
 * block, its 64 ql bytes as loaded (low nibbles for c even, high for c
 * odd) and its 32 qh bytes in both 256-bit halves, shifted per half by
 * vpsllvw / vpsrlvw to bits 4-5 (quant_q6k.h's layout). vpmaddubsw makes
 * int16 pairs (at most 2 * 63 * 128), VNNI's vpdpwssd weights them by
 * their sub-block's int8 scale (int16 pair p of vector c belongs to
 * sub-block 4 c + p / 8) and accumulates; the -32 offset goes through
 * Q8_K's sums of 16, as in the AVX2 kernels.
 */
#include <immintrin.h>

#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_q6k.h"
#include "quant/quant_simd.h"

/* int16 pair p of a 64-byte vector: the quarter (p / 8) of the vector it
 * lies in, the sub-block offset within the vector's four */
static const int16_t k_q6k_lane_quarter[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};

/* The two code vectors of half h: q[0] = elements 128 h + 0..63 (j = 0,
 * 1), q[1] = 128 h + 64..127 (j = 2, 3), codes 0..63. */
MS_SIMD_INLINE void q6k_codes64(const block_q6_K *b, int h, __m512i q[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    /* j = 0: qh << 4, j = 1: qh << 2, j = 2: qh, j = 3: qh >> 2, then & 0x30
     * (16-bit shifts: bits crossing into the neighbouring byte are masked) */
    const __m512i sl = cat256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i sr = cat256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i l = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
    q[0] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, sl), m30));
    q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                           _mm512_and_si512(_mm512_srlv_epi16(hb, sr), m30));
}

/* The int16 scale of every pair of code vector c (sc16: the 16 scales
 * sign-extended, in the low 256 bits). */
static inline __m512i q6k_pair_scales(__m512i sc16, __m512i quarter, int c) {
    return _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, _mm512_set1_epi16((short)(4 * c))), sc16);
}

/* ---- dequantization: sc * (q - 32) exact in int16, then d times it */

MS_DECL_DEQUANT(q6_K, avx512) {
    const block_q6_K *b = x;
    const __m512i off = _mm512_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m512 d = _mm512_set1_ps(fp16_scale(b[i].d));
        for (int h = 0; h < 2; h++) {
            __m512i q[2];
            q6k_codes64(&b[i], h, q);
            for (int c2 = 0; c2 < 2; c2++) {
                int8_t v[64] __attribute__((aligned(64)));
                _mm512_store_si512((void *)v, _mm512_sub_epi8(q[c2], off)); /* -32 .. 31 */
                for (int k = 0; k < 4; k++) { /* sub-block 8 h + 4 c2 + k: 16 values */
                    const int sb = 8 * h + 4 * c2 + k;
                    const __m512i p = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(v + 16 * k))),
                                                         _mm512_set1_epi32(b[i].scales[sb]));
                    _mm512_storeu_ps(y + 16 * sb, _mm512_mul_ps(d, _mm512_cvtepi32_ps(p)));
                }
            }
        }
        y += QK_K;
    }
}

/* ---- dots with Q8_K activations: one body for one and four tokens
 * (MS_XN), the codes and scales made once a block for all of them */
MS_SIMD_INLINE void q6k_dot512_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q6_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    const __m512i quarter = _mm512_loadu_si512((const void *)k_q6k_lane_quarter);
    __m128 sum1 = _mm_setzero_ps(), sum4 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 4); /* 210 bytes a block */
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        const __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i acc[4];
        __m256i mn[4];
        MS_XN(k, nt, acc[k] = _mm512_setzero_si512();
              mn[k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k][i].bsums), sc16););
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m512i q[2];
            q6k_codes64(&w[i], h, q);
            _Pragma("GCC unroll 2")
            for (int c2 = 0; c2 < 2; c2++) {
                const int c = 2 * h + c2;
                const __m512i sc = q6k_pair_scales(sc512, quarter, c);
                MS_XN(k, nt,
                      const __m512i p = _mm512_maddubs_epi16(q[c2], _mm512_loadu_si512((const void *)(a[k][i].qs + 64 * c)));
                      acc[k] = _mm512_dpwssd_epi32(acc[k], p, sc););
            }
        }
        /* isum lanes: the products folded to 8 lanes, less 32 times the min term */
        __m256i v[4];
        MS_XN(k, nt, v[k] = _mm256_sub_epi32(fold256_i32(acc[k]), _mm256_slli_epi32(mn[k], 5)););
        for (int k = nt; k < 4; k++) v[k] = _mm256_setzero_si256(); /* the reduction takes four */
        ms_kq_isum_block_add(&sum1, &sum4, v, a, i, w[i].d, nt);
    }
    if (nt == 1) s[0] = _mm_cvtss_f32(sum1);
    else _mm_storeu_ps(s, sum4);
}

MS_DECL_DOT(q6_K, q8_K, avx512) {
    const void *y1[1] = {y};
    q6k_dot512_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(q6_K, q8_K, avx512) { q6k_dot512_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q6_K_q8_K_avx512, q6k_dot512_n)

/* Many rows: the single dot inlined in the loop over rows (rows of 4096
 * span 3360 bytes: too long for rows in lanes, MS_ROWS_LANES_MAX_BYTES).
 * Two rows at a time, block by block (their integer sums reduced
 * together), measured slower where it matters, weights from memory: 12-13
 * against 22-23 GB/s mean (Zen 4, bench_kernels -t 1 --types q6_K --rows
 * 1024 --cols 4096 --batches 1 --working-set 512; Q8_0's many-rows dot
 * 21-26 in the same runs): two interleaved streams lose the linear
 * prefetch of one, as quant_kq_avx2.c notes for Q4_K. */
MS_DEFINE_DOT_ROWS(q6_K, q8_K, avx512)

/* ---- dot with f32 activations (quant_simd.h's MS_DEFINE_DOT_F32_AVX512) */
MS_DEFINE_DOT_F32_AVX512(q6_K, block_q6_K)

/* ---- token-lane GEMM (prefill): Q6_K rows x 16 packed Q8_K tokens
 *
 * As the Q2_K form (quant_kq_avx512.c): a row's block is unpacked one
 * block ahead into its 256 codes in value order (the dots' 64-byte code
 * vectors, stored), then each 16-value sub-block takes four vpdpbusd steps
 * (four codes broadcast to every lane as the unsigned operand, the
 * block_q8_Kx16 activations, a token a 32-bit lane, as the signed one:
 * exact in int32) and its int8 scale by vpmullo. The min term is the 16
 * sums of 16 (bs16 pairs) times the scale pairs, and lane t's isum =
 * sumi - 32 summ is the reference's for token t; the float step is
 * ms_q6k_block_sum's operations lane by lane, so every output is the
 * single dot's bit for bit. Two rows share each activation load. */
struct q6k_x16_buf {
    uint8_t codes[2][QK_K] __attribute__((aligned(64)));
};

MS_SIMD_INLINE void q6k_expand_x16(const block_q6_K *const b[2], struct q6k_x16_buf *buf, const int R) {
    for (int k = 0; k < R; k++) {
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m512i q[2];
            q6k_codes64(b[k], h, q);
            _mm512_store_si512((void *)(buf->codes[k] + 128 * h), q[0]);
            _mm512_store_si512((void *)(buf->codes[k] + 128 * h + 64), q[1]);
        }
    }
}

MS_SIMD_INLINE void q6k_products_x16(const struct q6k_x16_buf *buf, const block_q6_K *const b[2],
                                     const block_q8_Kx16 *const ab[2], __m512 accf[2][2], const int R, const int P) {
    const uint8_t *const codes[2] = {buf->codes[0], buf->codes[1]};
    const int8_t *const sc[2] = {b[0]->scales, b[1]->scales};
    const uint16_t d[2] = {b[0]->d, b[1]->d};
    kq_x16_products16(codes, sc, d, 5, ab, accf, R, P);
}

MS_DEFINE_GEMM_KQ_X16(ms_gemm_q6_K_q8_Kx16_avx512, block_q6_K, struct q6k_x16_buf, q6k_expand_x16, q6k_products_x16,
                      1, kq_x16_final)
