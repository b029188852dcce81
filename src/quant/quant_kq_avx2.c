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
#include "quant/quant_kq_iq2.h"
#include "quant/quant_simd.h"

/* ---- Q8_K: same rounding as the reference (cvtps rounds to nearest even
 * under the default MXCSR; the saturating packs are its cap at 127). */
/* iscale * x for 8 values, a NaN product as 0 (the reference's rule:
 * vcvtps2dq would make it INT_MIN, which the packs saturate to -128) */
static inline __m256 q8k_scaled(__m256 vs, const float *x) {
    const __m256 p = _mm256_mul_ps(vs, _mm256_loadu_ps(x));
    return _mm256_and_ps(p, _mm256_cmp_ps(p, p, _CMP_ORD_Q));
}

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
            const __m256i v0 = _mm256_cvtps_epi32(q8k_scaled(vs, x + j));
            const __m256i v1 = _mm256_cvtps_epi32(q8k_scaled(vs, x + j + 8));
            const __m256i v2 = _mm256_cvtps_epi32(q8k_scaled(vs, x + j + 16));
            const __m256i v3 = _mm256_cvtps_epi32(q8k_scaled(vs, x + j + 24));
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
 * Q4_K and Q2_K: the codes of a block are unpacked into 32-byte vectors lined
 * up with activation bytes 32c..32c+31 and multiplied right away (maddubs:
 * u8 codes x s8 activations into int16 pairs, madd: times the int16 scale of
 * each pair into int32); the min term is the bsums times the mins. One body
 * serves one and four tokens (MS_XN: the four-token form decodes each block
 * once for its four tokens). Integer sums are exact and the float step per
 * block and token is the reference's (ms_kq_block_sum_f32), in its order,
 * so every form is bit-identical to the reference. Decoding a whole block
 * into a struct of vectors first (the earlier form) kept them on the stack
 * under gcc: the direct form is 1.7x faster single-token (bench/limits). */

/* The block's float step: ms_kq_block_add (quant_kq.h). */

/* Q4_K: byte group g (qs[32g..32g+31]) holds sub-block 2g in its low and
 * 2g+1 in its high nibbles; scale j is picked from the eight unpacked scales
 * (int16, both 128-bit lanes) with a constant byte shuffle. */
#define Q4K_PICK(j) {2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, \
                     2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, \
                     2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, \
                     2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1}
static const int8_t k_q4k_pick[8][32] = {Q4K_PICK(0), Q4K_PICK(1), Q4K_PICK(2), Q4K_PICK(3),
                                         Q4K_PICK(4), Q4K_PICK(5), Q4K_PICK(6), Q4K_PICK(7)};
#undef Q4K_PICK

MS_SIMD_INLINE void q4k_dot_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q4_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    __m128 sum1 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 3); /* 144 bytes a block */
        uint64_t scw, mw;
        ms_q4k_unpack_scales_u64(w[i].scales, &scw, &mw);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)scw)));
        const __m256i mins = q4k_mins16_u64(mw);
        __m256i v[8]; /* v[k]: sumi lanes of token k, v[4 + k]: its summ lanes */
        MS_XN(k, nt, v[k] = _mm256_setzero_si256();
              v[4 + k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k][i].bsums), mins););
        for (int k = nt; k < 4; k++) v[k] = v[4 + k] = _mm256_setzero_si256(); /* the reduction takes four */
        _Pragma("GCC unroll 4")
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * g));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i s_lo = _mm256_shuffle_epi8(sc16, _mm256_loadu_si256((const __m256i *)k_q4k_pick[2 * g]));
            const __m256i s_hi = _mm256_shuffle_epi8(sc16, _mm256_loadu_si256((const __m256i *)k_q4k_pick[2 * g + 1]));
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

MS_DECL_DOT(q4_K, q8_K, avx2) {
    const void *y1[1] = {y};
    q4k_dot_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(q4_K, q8_K, avx2) { q4k_dot_n(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q4_K_q8_K_avx2, q4k_dot_n)
MS_DEFINE_DOT_ROWS(q4_K, q8_K, avx2)

/* Q2_K: element 128h + 32j + l has code (qs[32h + l] >> 2j) & 3 and scale
 * (128h + 32j + l) / 16: code vector c = 4h + j takes scale 2c in its low
 * 128-bit lane and 2c + 1 in its high one (k_q2k_pick[c] selects them from
 * the 16 scale bytes, zero-extended to int16). The codes and scales are
 * worked out inside the loop over c, and the sum and min terms reduced in
 * one horizontal pass: the prep-struct form (all eight code and scale
 * vectors first) kept them on the stack, 35 -> 20 ns per block single-token
 * on a Zen 1 core. Single and four-token share the body (MS_XN), so they
 * perform the same operations per token. */
#define Q2K_PICK(c)                                                                              \
    {2 * (c), -128, 2 * (c), -128, 2 * (c), -128, 2 * (c), -128, 2 * (c), -128, 2 * (c), -128,   \
     2 * (c), -128, 2 * (c), -128, 2 * (c) + 1, -128, 2 * (c) + 1, -128, 2 * (c) + 1, -128,      \
     2 * (c) + 1, -128, 2 * (c) + 1, -128, 2 * (c) + 1, -128, 2 * (c) + 1, -128, 2 * (c) + 1, -128}
static const int8_t k_q2k_pick[8][32] = {Q2K_PICK(0), Q2K_PICK(1), Q2K_PICK(2), Q2K_PICK(3),
                                         Q2K_PICK(4), Q2K_PICK(5), Q2K_PICK(6), Q2K_PICK(7)};
#undef Q2K_PICK

/* Block b's integer sums for nt tokens (a[k][i], k < nt): v[k] token k's
 * sumi lanes, v[4 + k] its summ lanes (ms_kq_block_add's input). */
MS_SIMD_INLINE void q2k_block_v(const block_q2_K *b, const block_q8_K *const *a, int64_t i, __m256i v[8],
                                const int nt) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i scb = _mm_loadu_si128((const __m128i *)b->scales);
    const __m256i sc8 = _mm256_broadcastsi128_si256(_mm_and_si128(scb, m4));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4));
    MS_XN(k, nt, v[k] = _mm256_setzero_si256();
          v[4 + k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k][i].bsums), mins););
    for (int k = nt; k < 4; k++) v[k] = v[4 + k] = _mm256_setzero_si256(); /* the reduction takes four */
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            const int c = 4 * h + j;
            const __m256i wc = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
            const __m256i sc = _mm256_shuffle_epi8(sc8, _mm256_loadu_si256((const __m256i *)k_q2k_pick[c]));
            MS_XN(k, nt,
                  const __m256i p = _mm256_maddubs_epi16(wc, _mm256_loadu_si256((const __m256i *)(a[k][i].qs + 32 * c)));
                  v[k] = _mm256_add_epi32(v[k], _mm256_madd_epi16(p, sc)););
        }
    }
}

MS_SIMD_INLINE void q2k_dot_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_q2_K *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    __m128 sum1 = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_ahead(&w[i], 2); /* 84 bytes a block */
        __m256i v[8]; /* v[k]: sumi lanes of token k, v[4 + k]: its summ lanes */
        q2k_block_v(&w[i], a, i, v, nt);
        ms_kq_block_add(&sum1, sumf, v, a, i, &w[i].d, nt);
    }
    if (nt == 1) sumf[0] = _mm_cvtss_f32(sum1);
    MS_XN(k, nt, s[k] = sumf[k];);
}

MS_DECL_DOT(q2_K, q8_K, avx2) {
    const void *y1[1] = {y};
    q2k_dot_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(q2_K, q8_K, avx2) { q2k_dot_n(n, s, x, y, 4); }
/* and for up to four tokens against many rows: the four-token body row by
 * row, for the tokens given only */
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_q2_K_q8_K_avx2, q2k_dot_n)

/* Many rows against one token, short rows (MS_ROWS_LANES_MAX_BYTES) eight
 * at a time, one a lane: block i of rows r .. r + 7, then block i + 1,
 * their sums reduced together and their float steps in eight lanes
 * (ms_kq_rows8_add), each row's sum taking its blocks in order from 0.0f,
 * so every row is its single dot's value bit for bit; the rows left take
 * the single dot. Q2_K is bound by its per-block work, which the single
 * dot in a loop over rows ends with a horizontal reduction and a scalar
 * float step each: 12.2-12.3 -> 15.3 GB/s best, 11.7 -> 13.5 mean (Zen 4,
 * MS_ISA=avx2 bench_kernels -t 1 --types q2_K --rows 512 --cols 1024
 * --batches 1 --working-set 512 --order random). Q4_K keeps the loop: its
 * dot waits on memory more than on its work, and eight interleaved row
 * streams lose the linear prefetch that one row's stream gets; rows in
 * lanes took its best repetition from 20.7 to 24.2 GB/s but the Q4_K bench
 * model's decode from 84 to 74 tok/s (82 with the next group prefetched
 * linearly). */
MS_DECL_DOT_ROWS(q2_K, q8_K, avx2) {
    const int64_t nb = n / QK_K;
    const block_q8_K *a[1] = {y};
    int64_t r = 0;
    if (8 * x_stride <= MS_ROWS_LANES_MAX_BYTES) {
        const __m256i row_off = ms_kq_row_offsets8(x_stride);
        for (; r + 8 <= n_rows; r += 8) {
            const block_q2_K *w = (const block_q2_K *)((const char *)x + (size_t)r * x_stride);
            __m256 sumf = _mm256_setzero_ps();
            for (int64_t i = 0; i < nb; i++) {
                __m256i vi[8], vm[8];
                for (int k = 0; k < 8; k++) {
                    const block_q2_K *b = (const block_q2_K *)((const char *)w + (size_t)k * x_stride) + i;
                    __m256i v[8];
                    prefetch_ahead(b, 2);
                    q2k_block_v(b, a, i, v, 1);
                    vi[k] = v[0];
                    vm[k] = v[4];
                }
                sumf = ms_kq_rows8_add(sumf, vi, vm, &w[i].d, row_off, a[0][i].d);
            }
            _mm256_storeu_ps(s + r, sumf);
        }
    }
    for (; r < n_rows; r++) ms_dot_q2_K_q8_K_avx2(n, s + r, (const char *)x + (size_t)r * x_stride, y);
}

/* ---- token-lane GEMM (prefill): Q4_K rows x 8 packed Q8_K tokens
 *
 * The x4 dot above spends one vpmaddwd (the sub-block scale) per
 * vpmaddubsw and ends every block in a horizontal sum per token. With the
 * tokens in lanes (block_q8_Kx8: dword t = 4 values of token t), four codes
 * of the row are broadcast to every lane and one vpmaddubsw gives two int16
 * pair sums per token; the eight groups of a 32-value sub-block add up in
 * int16 (codes <= 15, |q8| <= 128: a pair is at most 3840 in magnitude and
 * eight of them 30720, so the int16 sums are exact), and one vpmaddwd per
 * sub-block weights them by its scale into int32. The block's float step
 * runs on 8 tokens at once, lane by lane the reference's operations in its
 * order (ad * d, ad * dmin, then sd * sumi - smin * summ added to the sum),
 * so every output is bit-identical to the single kernel. A row's codes are
 * unpacked once per block into a 256-byte buffer (low and high nibbles in
 * value order) that the broadcasts read. Measured on a Zen 1 core
 * (cache-resident rows, 4096 columns): 9.9 ns per block and token against
 * 18.9 for the x4 dot. */
/* Q4_K: a block unpacked into quant_simd.h's struct kq_x8_buf8. */
MS_SIMD_INLINE void q4k_expand_x8(const block_q4_K *b, struct kq_x8_buf8 *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    _Pragma("GCC unroll 4")
    for (int g = 0; g < 4; g++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * g));
        _mm256_store_si256((__m256i *)u->codes[2 * g], _mm256_and_si256(q, m4));
        _mm256_store_si256((__m256i *)u->codes[2 * g + 1], _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    }
    uint64_t scw, mw;
    ms_q4k_unpack_scales_u64(b->scales, &scw, &mw);
    const __m256i s32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)scw));
    _mm256_store_si256((__m256i *)u->scp, _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16)));
    _mm_store_si128((__m128i *)u->mp, _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mw)));
}

MS_SIMD_INLINE __m256 q4k_products_x8(const struct kq_x8_buf8 *u, const block_q4_K *b, const block_q8_Kx8 *ab,
                                      __m256 accf) {
    __m256i acc = _mm256_setzero_si256();
    _Pragma("GCC unroll 8")
    for (int s = 0; s < 8; s++) acc = _mm256_add_epi32(acc, kq_x8_sub(u->codes[s], ab->qs[s], 8, u->scp[s]));
    return kq_x8_block_add(accf, ab->d, b->d, b->dmin, acc, kq_x8_mins(ab->bsp, u->mp, 4));
}

/* Q2_K the same way: the codes of a row's block are unpacked to bytes in
 * value order (value 128 h + 32 j + l is (qs[32 h + l] >> 2 j) & 3), each
 * 16-value sub-block k sums four vpmaddubsw in int16 (codes <= 3: eight
 * pairs at most 8 * 768) and takes its 4-bit scale with one vpmaddwd; the
 * min term is the 16 bsums times the 4-bit mins (bs16 pairs). scp[k] is
 * the scale of sub-block k in both int16 halves, mp[q] the mins of
 * sub-blocks 2q, 2q + 1 as an int16 pair. */
struct q2k_x8_buf {
    uint8_t codes[8][32] __attribute__((aligned(32)));
    uint32_t scp[16] __attribute__((aligned(32)));
    uint32_t mp[8] __attribute__((aligned(32)));
};

MS_SIMD_INLINE void q2k_expand_x8(const block_q2_K *b, struct q2k_x8_buf *u) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        _mm256_store_si256((__m256i *)u->codes[4 * h], _mm256_and_si256(q, m3));
        _mm256_store_si256((__m256i *)u->codes[4 * h + 1], _mm256_and_si256(_mm256_srli_epi16(q, 2), m3));
        _mm256_store_si256((__m256i *)u->codes[4 * h + 2], _mm256_and_si256(_mm256_srli_epi16(q, 4), m3));
        _mm256_store_si256((__m256i *)u->codes[4 * h + 3], _mm256_and_si256(_mm256_srli_epi16(q, 6), m3));
    }
    const __m128i scb = _mm_loadu_si128((const __m128i *)b->scales);
    const __m128i sc8 = _mm_and_si128(scb, m4);
    const __m256i s0 = _mm256_cvtepu8_epi32(sc8), s1 = _mm256_cvtepu8_epi32(_mm_srli_si128(sc8, 8));
    _mm256_store_si256((__m256i *)u->scp, _mm256_or_si256(s0, _mm256_slli_epi32(s0, 16)));
    _mm256_store_si256((__m256i *)(u->scp + 8), _mm256_or_si256(s1, _mm256_slli_epi32(s1, 16)));
    _mm256_store_si256((__m256i *)u->mp, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4)));
}

MS_SIMD_INLINE __m256 q2k_products_x8(const struct q2k_x8_buf *u, const block_q2_K *b, const block_q8_Kx8 *ab,
                                      __m256 accf) {
    __m256i acc = _mm256_setzero_si256();
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 16; k++)
        acc = _mm256_add_epi32(acc, kq_x8_sub(&u->codes[k / 2][16 * (k % 2)], &ab->qs[k / 2][4 * (k % 2)], 4,
                                              u->scp[k]));
    return kq_x8_block_add(accf, ab->d, b->d, b->dmin, acc, kq_x8_mins(ab->bs16, u->mp, 8));
}

MS_DEFINE_GEMM_KQ_X8(ms_gemm_q4_K_q8_Kx8_avx2, block_q4_K, struct kq_x8_buf8, q4k_expand_x8, q4k_products_x8)
MS_DEFINE_GEMM_KQ_X8(ms_gemm_q2_K_q8_Kx8_avx2, block_q2_K, struct q2k_x8_buf, q2k_expand_x8, q2k_products_x8)

/* IQ2_XXS, AVX2 set: grid rows and +-1 sign rows read from tables
 * (quant_kq_iq2.h's), the signs moved onto the activations, in 128-bit
 * halves, two 8-value groups per register. A Zen 1 core splits 256-bit
 * integer operations in two anyway, and the halves save the cross-lane
 * insert per sub-block; the two halves' int16 pair sums (at most 2 * 43 *
 * 127 each) are added in int16 before the one vpmaddwd by the sub-block's
 * scale, and each table row pair is one 8-byte load and one load into the
 * high half. Measured (cache-resident rows, 4096 columns, Zen 1): 37 -> 32
 * ns per block single-token. */
static inline __m128i iq2_rows2(const uint64_t *tab, unsigned i0, unsigned i1) {
    return _mm_castpd_si128(_mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)(tab + i0))),
                                         (const double *)(tab + i1)));
}

MS_SIMD_INLINE void iq2xxs_dot_n_avx2(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_iq2_xxs *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    __m128 sumv[4];
    MS_XN(k, nt, sumv[k] = _mm_setzero_ps(););
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = (const uint8_t *)w[i].qs;
        uint32_t ls[8];
        iq2xxs_scales(q, ls);
        __m128i acc[4];
        MS_XN(k, nt, acc[k] = _mm_setzero_si128(););
        _Pragma("GCC unroll 8")
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t s32;
            memcpy(&s32, q + 8 * ib + 4, 4);
            const __m128i g0 = iq2_rows2(ms_iq2xxs_grid, q[8 * ib], q[8 * ib + 1]);
            const __m128i g1 = iq2_rows2(ms_iq2xxs_grid, q[8 * ib + 2], q[8 * ib + 3]);
            const __m128i s0 = iq2_rows2(ms_iq2_signs64, s32 & 127, (s32 >> 7) & 127);
            const __m128i s1 = iq2_rows2(ms_iq2_signs64, (s32 >> 14) & 127, (s32 >> 21) & 127);
            const __m128i sc = _mm_set1_epi32((int)ls[ib]);
            MS_XN(k, nt, const int8_t *q8 = a[k][i].qs + 32 * ib;
                  const __m128i p0 = _mm_maddubs_epi16(g0, _mm_sign_epi8(_mm_loadu_si128((const __m128i *)q8), s0));
                  const __m128i p1 =
                      _mm_maddubs_epi16(g1, _mm_sign_epi8(_mm_loadu_si128((const __m128i *)(q8 + 16)), s1));
                  acc[k] = _mm_add_epi32(acc[k], _mm_madd_epi16(_mm_add_epi16(p0, p1), sc)););
        }
        /* the reference's ad * d * sumi added to the sum, in vector
         * registers (a round trip through a general register for sumi cost
         * more than its arithmetic; see ms_kq_block_add) */
        const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128(w[i].d));
        MS_XN(k, nt, {
            __m128i h = _mm_add_epi32(acc[k], _mm_shuffle_epi32(acc[k], 0x4e));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
            sumv[k] = _mm_add_ss(sumv[k], _mm_mul_ss(_mm_mul_ss(_mm_set_ss(a[k][i].d), d), _mm_cvtepi32_ps(h)));
        });
    }
    MS_XN(k, nt, s[k] = 0.125f * _mm_cvtss_f32(sumv[k]););
}

MS_DECL_DOT(iq2_xxs, q8_K, avx2) {
    const void *y1[1] = {y};
    iq2xxs_dot_n_avx2(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(iq2_xxs, q8_K, avx2) { iq2xxs_dot_n_avx2(n, s, x, y, 4); }
MS_DEFINE_DOT_ROWS(iq2_xxs, q8_K, avx2)
MS_DEFINE_DOT_ROWS_N_FROM(ms_dot_rows_n_iq2_xxs_q8_K_avx2, iq2xxs_dot_n_avx2)

/* ---- token-lane GEMM (prefill): IQ2_XXS rows x 8 widened Q8_K tokens
 *
 * The grid values with their signs (-43..43) times the sub-block's odd
 * scale ls (<= 31) are at most 1333 in magnitude: as int16 they pair with
 * the int16-widened activations (block_q8_Kx8w) in vpmaddwd, two products
 * per token lane, and 128 of those sum to the block's sum_ib ls_ib *
 * sumi_ib exactly in int32 (at most 256 * 1333 * 128). A pair of a row's
 * values is broadcast to every lane per step (a broadcast load: see
 * bcast32), four rows share each activation load, and the float step per
 * block is the reference's ((ad * d) * bsum added to the row's sum, 0.125
 * times it at the end), lane by lane: bit for bit the single kernel. A
 * block's values are decoded one block ahead into the other of two
 * buffers, so the broadcast loads never wait on the stores just made. */

/* Block i of R (1 to 4) rows decoded to int16 w * ls, into ww[k]. */
MS_SIMD_INLINE void iq2xxs_widen_x8(const block_iq2_xxs *const b[4], int64_t i, int16_t ww[4][QK_K], const int R) {
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++) {
        const uint8_t *q = (const uint8_t *)b[k][i].qs;
        uint32_t ls[8];
        iq2xxs_scales(q, ls);
        _Pragma("GCC unroll 8")
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t s32;
            memcpy(&s32, q + 8 * ib + 4, 4);
            const __m256i v = _mm256_sign_epi8(iq2xxs_grid4(q + 8 * ib), iq2xxs_signs4(s32));
            const __m256i sc = _mm256_set1_epi32((int)ls[ib]); /* ls in both int16 halves */
            _mm256_store_si256((__m256i *)(ww[k] + 32 * ib),
                               _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), sc));
            _mm256_store_si256((__m256i *)(ww[k] + 32 * ib + 16),
                               _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)), sc));
        }
    }
}

/* Block i of R rows, decoded in ww, against the pack's 8 tokens: accf[k]
 * += (ad * d_k) * bsum lane by lane. */
MS_SIMD_INLINE void iq2xxs_block_x8(const block_iq2_xxs *const b[4], int64_t i, const int16_t ww[4][QK_K],
                                    const block_q8_Kx8w *ab, __m256 accf[4], const int R) {
    __m256i p[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++) p[k] = _mm256_setzero_si256();
    for (int j0 = 0; j0 < QK_K / 2; j0 += 16) {
        _Pragma("GCC unroll 16")
        for (int j = j0; j < j0 + 16; j++) {
            __m256i av = _mm256_load_si256((const __m256i *)ab->qs[j]);
            __asm__("" : "+x"(av)); /* one load for the R rows */
            _Pragma("GCC unroll 4")
            for (int k = 0; k < R; k++) {
                p[k] = _mm256_add_epi32(p[k], _mm256_madd_epi16(bcast32(ww[k] + 2 * j), av));
                __asm__("" : "+x"(p[k])); /* a running sum, not a tree of spilled products */
            }
        }
    }
    const __m256 ad = _mm256_load_ps(ab->d);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < R; k++)
        accf[k] = _mm256_add_ps(accf[k], _mm256_mul_ps(_mm256_mul_ps(ad, _mm256_set1_ps(fp16_scale(b[k][i].d))),
                                                       _mm256_cvtepi32_ps(p[k])));
}

MS_SIMD_INLINE void iq2xxs_rows_x8(const block_iq2_xxs *const b[4], int64_t nb, const block_q8_Kx8w *a, __m256 out[4],
                                   const int R) {
    __m256 accf[4];
    int16_t ww[2][4][QK_K] __attribute__((aligned(32)));
    for (int k = 0; k < 4; k++) accf[k] = _mm256_setzero_ps();
    if (nb > 0) iq2xxs_widen_x8(b, 0, ww[0], R);
    _Pragma("GCC unroll 1")
    for (int64_t i = 0; i < nb; i++) {
        if (i + 1 < nb) iq2xxs_widen_x8(b, i + 1, ww[(i + 1) & 1], R);
        iq2xxs_block_x8(b, i, (const int16_t(*)[QK_K])ww[i & 1], &a[i], accf, R);
    }
    for (int k = 0; k < R; k++) out[k] = _mm256_mul_ps(_mm256_set1_ps(0.125f), accf[k]);
}

MS_DEFINE_GEMM_X8_ROWS4(ms_gemm_iq2_xxs_q8_Kx8w_avx2, block_iq2_xxs, QK_K, iq2xxs_rows_x8)

/* ---- dots with f32 activations (quant_simd.h's MS_DEFINE_DOT_F32_AVX2) */

MS_DEFINE_DOT_F32_AVX2(q4_K, block_q4_K)
MS_DEFINE_DOT_F32_AVX2(q2_K, block_q2_K)
MS_DEFINE_DOT_F32_AVX2(iq2_xxs, block_iq2_xxs)
