/*
 * quant_iq4_avx2.c - AVX2 kernels for IQ4_XS weights: dequantize, the dot
 * with Q8_K activations (single, four-token and many-rows forms) and the
 * dot with f32 activations. The Q8_K dots equal the reference
 * (quant_iq4_ref.c) bit for bit: exact integer sums, then its float step
 * per block in its order (ms_kq_isum_block_add, the same operations as
 * ms_iq4xs_block_sum); dequantize rounds as the reference (one rounding a
 * value); the f32 dot differs from it only in the order of its f32 sums.
 *
 * A sub-block's 32 values come from one 16-byte load: the low and high
 * nibbles are its first and last 16 indices, and vpshufb of the 16-entry
 * table turns each into its int8 level (quant_iq4.h's layout). The
 * products use ggml's sign trick, vpmaddubsw(|w|, sign(a, w)) (pairs at
 * most 2 * 127 * 127: never saturates; Q8_K has no -128), and vpmaddwd
 * weights the pairs by the sub-block's signed scale into int32.
 */
#include <immintrin.h>

#include "quant/quant_impl.h"
#include "quant/quant_iq4.h"
#include "quant/quant_kq.h"
#include "quant/quant_simd.h"

/* Sub-block s's 32 levels in element order (int8). */
MS_SIMD_INLINE __m256i iq4xs_values(const block_iq4_xs *b, int s) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)ms_kvalues_iq4nl);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i q = _mm_loadu_si128((const __m128i *)(b->qs + 16 * s));
    const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    return _mm256_set_m128i(hi, lo);
}

/* ---- dequantization: (ls - 32) * level exact in int32, then d times it */

MS_DECL_DEQUANT(iq4_xs, avx2) {
    const block_iq4_xs *b = x;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256 d = _mm256_set1_ps(fp16_scale(b[i].d));
        for (int s = 0; s < QK_K / 32; s++) {
            const __m256i v = iq4xs_values(&b[i], s);
            const __m256i sc = _mm256_set1_epi32(ms_iq4xs_scale(&b[i], s));
            const __m128i h[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
            for (int k = 0; k < 4; k++) {
                const __m128i part = k % 2 ? _mm_srli_si128(h[k / 2], 8) : h[k / 2];
                const __m256i p = _mm256_mullo_epi32(_mm256_cvtepi8_epi32(part), sc);
                _mm256_storeu_ps(y + 32 * s + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(p)));
            }
        }
        y += QK_K;
    }
}

/* ---- dots with Q8_K activations: one body for one and four tokens
 * (MS_XN), each sub-block's levels made once for all of them; v[k]'s lane
 * sum is token k's isum. */
MS_SIMD_INLINE void iq4xs_dot_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_iq4_xs *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    __m128 sum1 = _mm_setzero_ps(), sum4 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 3); /* 136 bytes a block */
        __m256i v[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()}; /* all four: the reduction takes four */
        _Pragma("GCC unroll 8")
        for (int sb = 0; sb < QK_K / 32; sb++) {
            const __m256i q = iq4xs_values(&w[i], sb), aq = _mm256_sign_epi8(q, q);
            const __m256i sc = _mm256_set1_epi16((short)ms_iq4xs_scale(&w[i], sb));
            MS_XN(k, nt,
                  const __m256i p = _mm256_maddubs_epi16(
                      aq, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(a[k][i].qs + 32 * sb)), q));
                  v[k] = _mm256_add_epi32(v[k], _mm256_madd_epi16(p, sc)););
        }
        ms_kq_isum_block_add(&sum1, &sum4, v, a, i, w[i].d, nt);
    }
    if (nt == 1) s[0] = _mm_cvtss_f32(sum1);
    else _mm_storeu_ps(s, sum4);
}

MS_DECL_DOT(iq4_xs, q8_K, avx2) {
    const void *y1[1] = {y};
    iq4xs_dot_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(iq4_xs, q8_K, avx2) { iq4xs_dot_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_iq4_xs_q8_K_avx2, iq4xs_dot_n)

/* Many rows: the single dot inlined in the loop over rows (rows of 4096
 * are 2176 bytes; one linear stream a row, as Q6_K). */
MS_DEFINE_DOT_ROWS(iq4_xs, q8_K, avx2)

/* ---- dot with f32 activations (quant_simd.h's MS_DEFINE_DOT_F32_AVX2) */
MS_DEFINE_DOT_F32_AVX2(iq4_xs, block_iq4_xs)

/* ---- token-lane GEMM (prefill): IQ4_XS rows x 8 packed Q8_K tokens
 *
 * Q3_K's form (quant_q35k_avx2.c, MS_DEFINE_GEMM_KQ_X8): tokens in 32-bit
 * lanes (block_q8_Kx8), four levels of the row broadcast to every lane,
 * one vpmaddubsw two int16 pair sums per token, one vpmaddwd by the
 * sub-block's scale into int32. The levels stay signed: offset to
 * unsigned (1 .. 241) a pair would reach 2 * 241 * 127, past vpmaddubsw's
 * int16 saturation, so each step takes the dots' sign trick instead,
 * vpmaddubsw(|w|, sign(a, w)) (a pair at most 2 * 127 * 127; Q8_K has
 * no -128), and goes to int32 alone (two such pairs could exceed int16).
 * Both w and |w| are unpacked once a block and broadcast from there: an
 * abs a step measured a few per cent slower. Lane t's sum is the reference's exact isum
 * for token t, and the block's float step (ad * d) * isum is
 * ms_iq4xs_block_sum's lane by lane in block order: every output equals
 * the single dot bit for bit. A row's levels are unpacked one block ahead
 * into the other of two buffers (the broadcast loads would wait on fresh
 * stores). */
struct iq4xs_x8_buf {
    int8_t codes[QK_K / 32][32] __attribute__((aligned(32)));
    uint8_t mags[QK_K / 32][32] __attribute__((aligned(32))); /* |codes| */
    uint32_t scp[QK_K / 32]; /* sub-block s's scale in both int16 halves */
};

MS_SIMD_INLINE void iq4xs_expand_x8(const block_iq4_xs *b, struct iq4xs_x8_buf *u) {
    _Pragma("GCC unroll 8")
    for (int s = 0; s < QK_K / 32; s++) {
        const __m256i v = iq4xs_values(b, s);
        _mm256_store_si256((__m256i *)u->codes[s], v);
        _mm256_store_si256((__m256i *)u->mags[s], _mm256_sign_epi8(v, v));
        const uint32_t sc = (uint16_t)(int16_t)ms_iq4xs_scale(b, s);
        u->scp[s] = sc | sc << 16;
    }
}

MS_SIMD_INLINE __m256 iq4xs_products_x8(const struct iq4xs_x8_buf *u, const block_iq4_xs *b, const block_q8_Kx8 *ab,
                                        __m256 accf) {
    __m256i acc = _mm256_setzero_si256();
    _Pragma("GCC unroll 8")
    for (int s = 0; s < QK_K / 32; s++) {
        const __m256i sc = _mm256_set1_epi32((int)u->scp[s]);
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            const __m256i wv = bcast32(u->codes[s] + 4 * j);
            const __m256i p = _mm256_maddubs_epi16(bcast32(u->mags[s] + 4 * j),
                                                   _mm256_sign_epi8(_mm256_load_si256((const __m256i *)ab->qs[s][j]), wv));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc));
        }
    }
    /* the reference's (ad * d) * isum, added */
    const __m256 sd = _mm256_mul_ps(_mm256_load_ps(ab->d), _mm256_set1_ps(fp16_scale(b->d)));
    return _mm256_add_ps(accf, _mm256_mul_ps(sd, _mm256_cvtepi32_ps(acc)));
}

MS_DEFINE_GEMM_KQ_X8(ms_gemm_iq4_xs_q8_Kx8_avx2, block_iq4_xs, struct iq4xs_x8_buf, iq4xs_expand_x8, iq4xs_products_x8)
