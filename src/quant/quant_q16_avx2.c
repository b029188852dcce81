/*
 * quant_q16_avx2.c - AVX2 kernels for Q16_0 activations against Q8_0
 * weights: the quantizer, the single and four-token dots and an 8-lane
 * token-lane GEMM for prefill. Numerics are quant_q16_ref.c's, bit for
 * bit.
 *
 * A block's 32 weights are widened to int16 once (shared by the tokens of a
 * four-token call) and pmaddwd'd with the 32 activations: exact int32 pair
 * sums, eight per block. Eight blocks' partials are reduced together, block
 * j in lane j (block_sums8), so the float step is one vector multiply and
 * two four-lane adds (acc[i % 4] in block order) per eight blocks.
 *
 * GEMM (prefill): tokens in the 32-bit lanes (block_q16_0x8, 8 tokens): a
 * pair of a row's weights, widened to int16, is broadcast to every lane
 * and pmaddwd'd with each token's pair of activations; 16 of them make the
 * exact block sums of 8 tokens at once. Up to four rows share each
 * activation load, and the float step per block is the reference's, lane
 * by lane. The same kernel computes Q8_0 x Q8_0 on AVX2, over Q8_0
 * activations widened into this layout (ms_pack_q8_0_x8).
 */
#include <immintrin.h>
#include <math.h>

#include "quant/blocks.h"
#include "quant/quant_basic.h"
#include "quant/quant_impl.h"
#include "quant/quant_simd.h"

MS_DECL_QUANT(q16_0, avx2) {
    block_q16_0 *b = y;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 qmax = _mm256_set1_ps((float)MS_Q16_QMAX), qmin = _mm256_set1_ps(-(float)MS_Q16_QMAX);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256 v[4];
        __m256 unord = _mm256_setzero_ps(), m = _mm256_setzero_ps();
        for (int q = 0; q < 4; q++) {
            v[q] = _mm256_loadu_ps(x + i * QK8_0 + 8 * q);
            unord = _mm256_or_ps(unord, _mm256_cmp_ps(v[q], v[q], _CMP_UNORD_Q));
            m = _mm256_max_ps(m, _mm256_and_ps(v[q], absmask));
        }
        const bool nan = _mm256_movemask_ps(unord) != 0;
        const float amax = hmax256_f32(m);
        const float d = nan ? NAN : amax / (float)MS_Q16_QMAX;
        b[i].d = d;
        const bool zero = nan || d == 0.0f;
        const __m256 vd = _mm256_set1_ps(zero ? 1.0f : d);
        __m256i q32[4];
        for (int q = 0; q < 4; q++) {
            __m256 t = zero ? _mm256_setzero_ps() : _mm256_div_ps(v[q], vd);
            t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q)); /* inf / inf -> 0 */
            t = _mm256_min_ps(_mm256_max_ps(t, qmin), qmax);
            q32[q] = _mm256_cvtps_epi32(t);
        }
        /* packs interleave the 128-bit lanes: put them back in order */
        const __m256i p01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q32[0], q32[1]), 0xd8);
        const __m256i p23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q32[2], q32[3]), 0xd8);
        _mm256_storeu_si256((__m256i *)b[i].qs, p01);
        _mm256_storeu_si256((__m256i *)(b[i].qs + 16), p23);
    }
}

/* One block's 32 weights as two registers of 16 int16 (zeros past the row). */
struct w16 {
    __m256i lo, hi;
};

static inline struct w16 w16_load(const block_q8_0 *w, int64_t i, int64_t nb) {
    if (i >= nb) return (struct w16){_mm256_setzero_si256(), _mm256_setzero_si256()};
    return (struct w16){_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].qs)),
                        _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[i].qs + 16)))};
}

static inline __m256i block_part(struct w16 wv, const block_q16_0 *a, int64_t i, int64_t nb) {
    if (i >= nb) return _mm256_setzero_si256();
    return _mm256_add_epi32(_mm256_madd_epi16(wv.lo, _mm256_loadu_si256((const __m256i *)a[i].qs)),
                            _mm256_madd_epi16(wv.hi, _mm256_loadu_si256((const __m256i *)(a[i].qs + 16))));
}

static inline __m256 a_scales8(const block_q16_0 *a, __m256i live) {
    const __m256i idx = _mm256_setr_epi32(0, 17, 34, 51, 68, 85, 102, 119);
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), &a->d, idx, _mm256_castsi256_ps(live), 4);
}

MS_SIMD_INLINE void dot_q8_0_q16_0_n(const block_q8_0 *w, const block_q16_0 *const a[4], int nt, int64_t nb,
                                     float *s) {
    __m128 acc[4];
    MS_XN(k, nt, acc[k] = _mm_setzero_ps(););
    for (int64_t c = 0; c < nb; c += 8) {
        const int64_t nc = nb - c < 8 ? nb - c : 8;
        const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nc), lanes);
        prefetch_ahead(w + c, 5); /* 8 blocks: 272 bytes */
        const __m256 wsv = q8_0_scales8_ins(w + c, nc);
        struct w16 wv[8];
        _Pragma("GCC unroll 8")
        for (int q = 0; q < 8; q++) wv[q] = w16_load(w, c + q, nb);
        MS_XN(k, nt, {
            const block_q16_0 *ak = a[k];
            __m256i part[8];
            _Pragma("GCC unroll 8")
            for (int q = 0; q < 8; q++) part[q] = block_part(wv[q], ak, c + q, nb);
            const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(block_sums8(part)),
                                           _mm256_mul_ps(wsv, a_scales8(ak + c, live)));
            acc[k] = add8_by4(acc[k], p);
        });
    }
    MS_XN(k, nt, s[k] = reduce_by4(acc[k]););
}

MS_DECL_DOT(q8_0, q16_0, avx2) {
    const block_q16_0 *a[4] = {y, NULL, NULL, NULL};
    dot_q8_0_q16_0_n(x, a, 1, n / QK8_0, s);
}
MS_DEFINE_DOT_ROWS(q8_0, q16_0, avx2)
MS_DEFINE_DOT_ROWS_N(ms_dot_rows_n_q8_0_q16_0_avx2, block_q8_0, block_q16_0, QK8_0, dot_q8_0_q16_0_n)

MS_DECL_DOT_X4(q8_0, q16_0, avx2) {
    const block_q16_0 *a[4] = {y[0], y[1], y[2], y[3]};
    dot_q8_0_q16_0_n(x, a, 4, n / QK8_0, s);
}

/* ---- token-lane GEMM: Q8_0 rows x 8 packed Q16_0 tokens ----------------- */

/* Block i of R (1 to 4) rows' weights widened to int16, into ww[k]. */
MS_SIMD_INLINE void q16_widen_x8(const block_q8_0 *const w[4], int64_t i, int16_t ww[4][32], const int R) {
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++) {
        _mm256_store_si256((__m256i *)ww[k], _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[k][i].qs)));
        _mm256_store_si256((__m256i *)(ww[k] + 16),
                           _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[k][i].qs + 16))));
    }
}

/* Block i of R (1 to 4, a constant) rows, widened in ww, against the
 * pack's 8 tokens: acc[k] += (float)sumi * (d_w * d_a) lane by lane, the
 * reference's float step. */
MS_SIMD_INLINE void q16_block_x8(const block_q8_0 *const w[4], int64_t i, int16_t ww[4][32],
                                 const block_q16_0x8 *ab, __m256 acc[4], const int R) {
    __m256i p[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++) p[k] = _mm256_setzero_si256();
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 16; j++) {
        __m256i av = _mm256_load_si256((const __m256i *)ab->qs[j]);
        __asm__("" : "+x"(av)); /* one load for the R rows, not one folded into each multiply */
        _Pragma("GCC unroll 4")
        for (int k = 0; k < R; k++) {
            p[k] = _mm256_add_epi32(p[k], _mm256_madd_epi16(bcast32(ww[k] + 2 * j), av));
            /* one running sum: gcc would otherwise reassociate the adds into
             * a tree whose live products spill */
            __asm__("" : "+x"(p[k]));
        }
    }
    const __m256 da = _mm256_load_ps(ab->d);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++) {
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(fp16_scale(w[k][i].d)), da);
        acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_cvtepi32_ps(p[k]), d));
    }
}

/* R (1 to 4) rows against one pack: four sums per row by block index
 * modulo 4, combined as (s0 + s2) + (s1 + s3), the reference's order.
 * Four rows share each activation load: the loads, not the multiplies,
 * bound two rows (Zen 3 takes two 256-bit loads a cycle). The weights are
 * widened one block ahead into the other of two buffers, so the broadcast
 * loads never wait on the stores just made (a 32-bit load from inside a
 * 256-bit store not yet retired: that stall halved the rate). */
MS_SIMD_INLINE void q16_rows_x8(const block_q8_0 *const w[4], int64_t nb, const block_q16_0x8 *a, __m256 out[4],
                                const int R) {
    __m256 acc[4][4];
    int16_t ww[2][4][32] __attribute__((aligned(32)));
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 4; k++) acc[q][k] = _mm256_setzero_ps();
    if (nb > 0) q16_widen_x8(w, 0, ww[0], R);
    _Pragma("GCC unroll 1")
    for (int64_t i = 0; i < nb; i++) {
        if (i + 1 < nb) q16_widen_x8(w, i + 1, ww[(i + 1) & 1], R);
        q16_block_x8(w, i, ww[i & 1], &a[i], acc[i & 3], R);
    }
    for (int k = 0; k < R; k++)
        out[k] = _mm256_add_ps(_mm256_add_ps(acc[0][k], acc[2][k]), _mm256_add_ps(acc[1][k], acc[3][k]));
}


MS_DEFINE_GEMM_X8_ROWS4(ms_gemm_q8_0_q16_0x8_avx2, block_q8_0, QK8_0, q16_rows_x8)
