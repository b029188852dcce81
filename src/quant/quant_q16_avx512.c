/*
 * quant_q16_avx512.c - AVX-512 (F, BW, VL, DQ, VNNI) kernels for Q16_0
 * activations against Q8_0 weights: the quantizer, the single and
 * four-token dots and a 16-lane token-lane GEMM for prefill. Numerics are
 * quant_q16_ref.c's, bit for bit (integer block sums are exact; the float
 * steps are the reference's, in its order).
 *
 * Dots: a block's 32 weights are widened to int16 once (shared by the
 * tokens of a four-token call) and pmaddwd'd with the 32 activations; two
 * blocks' 16 + 16 partial sums fold into one register (8 lanes a block),
 * and block_sums16 (quant_simd.h, as in the Q8_0 x Q8_0 dot) brings 16
 * blocks to one register, block j in lane j, for one vector float step
 * (add_by4) per 16 blocks.
 *
 * GEMM: tokens in the 32-bit lanes (block_q16_0x16): four weights of a row,
 * offset by 128 to be unsigned, are broadcast to every lane, and vpdpbusd
 * multiplies them with the four hi and the four lo bytes of each token:
 * sum w q = 256 (sum (w + 128) hi) + sum (w + 128) lo - 128 sum q, exact in
 * int32. Two vpdpbusd per four products and token: half the Q8_0 GEMM's
 * rate, twice the f32 GEMM's.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant_basic.h"
#include "quant/quant_impl.h"
#include "quant/quant_simd.h"

MS_DECL_QUANT(q16_0, avx512) {
    block_q16_0 *b = y;
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 qmax = _mm512_set1_ps((float)MS_Q16_QMAX), qmin = _mm512_set1_ps(-(float)MS_Q16_QMAX);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m512 x0 = _mm512_loadu_ps(x + i * QK8_0), x1 = _mm512_loadu_ps(x + i * QK8_0 + 16);
        const __mmask16 nan = _mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(x1, x1, _CMP_UNORD_Q);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, absmask), _mm512_and_ps(x1, absmask)));
        const float d = nan ? NAN : amax / (float)MS_Q16_QMAX;
        b[i].d = d;
        const bool zero = nan || d == 0.0f;
        const __m512 vd = _mm512_set1_ps(zero ? 1.0f : d);
        __m512 v0 = _mm512_div_ps(x0, vd), v1 = _mm512_div_ps(x1, vd);
        if (zero) v0 = v1 = _mm512_setzero_ps();
        /* inf / inf -> NaN -> 0, as the reference; then the clamp */
        v0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v0, v0, _CMP_ORD_Q), v0);
        v1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v1, v1, _CMP_ORD_Q), v1);
        v0 = _mm512_min_ps(_mm512_max_ps(v0, qmin), qmax);
        v1 = _mm512_min_ps(_mm512_max_ps(v1, qmin), qmax);
        _mm256_storeu_si256((__m256i *)b[i].qs, _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(v0)));
        _mm256_storeu_si256((__m256i *)(b[i].qs + 16), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(v1)));
    }
}

/* Weight block i widened to 32 int16 (zeros past the row's end). */
static inline __m512i w16_load(const block_q8_0 *w, int64_t i, int64_t nb) {
    if (i >= nb) return _mm512_setzero_si512();
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)w[i].qs));
}

static inline __m512i a16_load(const block_q16_0 *a, int64_t i, int64_t nb) {
    if (i >= nb) return _mm512_setzero_si512();
    return _mm512_loadu_si512((const void *)a[i].qs);
}

/* Lanes 0-7: block-i partials (its 16 pair sums folded to 8), lanes 8-15:
 * block i + 1's. */
static inline __m512i fold2(__m512i p0, __m512i p1) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(p0, p1, _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_i32x4(p0, p1, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* The scales of blocks c .. c + nc - 1 (nc <= 16; +0 past them), by
 * gather: a scalar fill of a stored vector would stall on store
 * forwarding once per 16 blocks. The fp16 weight scale is the low half of
 * the dword at each block's start (34-byte stride), the Q16_0 scale the
 * dword at its start (68-byte stride). */
static inline __m512 w_scales16(const block_q8_0 *w, int64_t nc) {
    const __m512i off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)sizeof(block_q8_0)));
    const __mmask16 m = nc >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nc) - 1u);
    const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, off, (const void *)w, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
}

static inline __m512 a_scales16(const block_q16_0 *a, int64_t nc) {
    const __m512i off = _mm512_setr_epi32(0, 17, 34, 51, 68, 85, 102, 119, 136, 153, 170, 187, 204, 221, 238, 255);
    const __mmask16 m = nc >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nc) - 1u);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, off, (const void *)&a->d, 4);
}

/* One body for one and four tokens (MS_XN), so both perform the same float
 * operations: per 16 blocks, the exact block sums, one vector of scale
 * products and one add_by4. */
MS_SIMD_INLINE void dot_q8_0_q16_0_n(const block_q8_0 *w, const block_q16_0 *const a[4], int nt, int64_t nb,
                                     float *s) {
    __m128 acc[4];
    MS_XN(k, nt, acc[k] = _mm_setzero_ps(););
    for (int64_t c = 0; c < nb; c += 16) {
        const int64_t nc = nb - c < 16 ? nb - c : 16;
        const __m512 ws = w_scales16(w + c, nc);
        __m512i wv[16];
        _Pragma("GCC unroll 16")
        for (int q = 0; q < 16; q++) wv[q] = w16_load(w, c + q, nb);
        MS_XN(k, nt, {
            const block_q16_0 *ak = a[k];
            __m512i part[8];
            _Pragma("GCC unroll 8")
            for (int q = 0; q < 8; q++) {
                const int64_t i = c + 2 * q;
                part[q] = fold2(_mm512_madd_epi16(wv[2 * q], a16_load(ak, i, nb)),
                                _mm512_madd_epi16(wv[2 * q + 1], a16_load(ak, i + 1, nb)));
            }
            acc[k] = q8_0_step16(acc[k], block_sums16(part), ws, a_scales16(ak + c, nc));
        });
    }
    MS_XN(k, nt, s[k] = reduce_by4(acc[k]););
}

MS_DECL_DOT(q8_0, q16_0, avx512) {
    const block_q16_0 *a[4] = {y, NULL, NULL, NULL};
    dot_q8_0_q16_0_n(x, a, 1, n / QK8_0, s);
}

MS_DECL_DOT_X4(q8_0, q16_0, avx512) {
    const block_q16_0 *a[4] = {y[0], y[1], y[2], y[3]};
    dot_q8_0_q16_0_n(x, a, 4, n / QK8_0, s);
}

/* One activation row against n_rows weight rows (decode), or up to four
 * (a step that checks a draft, a prefill's last tokens): the activations'
 * scales are converted once per call (16 blocks a vector, into a small
 * stack buffer), the weights' by word inserts (q8_0_scales16: the same f32
 * values as the gather, measured faster), a row's weights are widened
 * once for all its tokens, and each (row, token) takes the single dot's
 * operations, so every result is its value bit for bit. Rows longer than
 * Q16_ROWS_MAX_BLOCKS blocks go through the single dot. */
#define Q16_ROWS_MAX_BLOCKS 1024

/* s[k * lds + r] for rows r < n_rows and tokens a[k], k < nt (1..4, a
 * constant); da[k] token k's scales as f32. */
MS_SIMD_INLINE void q16_rows_n(int64_t nb, float *s, int64_t lds, const void *x, size_t x_stride, int64_t n_rows,
                               const block_q16_0 *const a[4], const float (*da)[Q16_ROWS_MAX_BLOCKS], const int nt) {
    for (int64_t r = 0; r < n_rows; r++) {
        const block_q8_0 *w = (const block_q8_0 *)((const char *)x + (size_t)r * x_stride);
        __m128 acc[4];
        for (int k = 0; k < nt; k++) acc[k] = _mm_setzero_ps();
        for (int64_t c = 0; c < nb; c += 16) {
            const int64_t nc = nb - c < 16 ? nb - c : 16;
            const __m512 ws = q8_0_scales16(w + c, nc);
            if (nt == 1) { /* the weights widened as they are used */
                __m512i part[8];
                _Pragma("GCC unroll 8")
                for (int q = 0; q < 8; q++) {
                    const int64_t i = c + 2 * q;
                    part[q] = fold2(_mm512_madd_epi16(w16_load(w, i, nb), a16_load(a[0], i, nb)),
                                    _mm512_madd_epi16(w16_load(w, i + 1, nb), a16_load(a[0], i + 1, nb)));
                }
                acc[0] = q8_0_step16(acc[0], block_sums16(part), ws, _mm512_load_ps(da[0] + c));
                continue;
            }
            /* several tokens' work a byte: the stream would wait on
             * memory without a lead (16 blocks, 544 bytes, 9 lines) */
            prefetch_ahead(w + c, 9);
            __m512i wv[16];
            _Pragma("GCC unroll 16")
            for (int q = 0; q < 16; q++) wv[q] = w16_load(w, c + q, nb);
            for (int k = 0; k < nt; k++) {
                __m512i part[8];
                _Pragma("GCC unroll 8")
                for (int q = 0; q < 8; q++) {
                    const int64_t i = c + 2 * q;
                    part[q] = fold2(_mm512_madd_epi16(wv[2 * q], a16_load(a[k], i, nb)),
                                    _mm512_madd_epi16(wv[2 * q + 1], a16_load(a[k], i + 1, nb)));
                }
                acc[k] = q8_0_step16(acc[k], block_sums16(part), ws, _mm512_load_ps(da[k] + c));
            }
        }
        for (int k = 0; k < nt; k++) s[k * lds + r] = reduce_by4(acc[k]);
    }
}

static void q16_rows_scales(const block_q16_0 *a, int64_t nb, float *da) {
    for (int64_t c = 0; c < nb; c += 16) _mm512_store_ps(da + c, a_scales16(a + c, nb - c < 16 ? nb - c : 16));
}

void ms_dot_rows_q8_0_q16_0_avx512(int64_t n, float *restrict s, const void *restrict x, size_t x_stride,
                                   int64_t n_rows, const void *restrict y) {
    const int64_t nb = n / QK8_0;
    if (nb > Q16_ROWS_MAX_BLOCKS || nb == 0) {
        for (int64_t r = 0; r < n_rows; r++)
            ms_dot_q8_0_q16_0_avx512(n, s + r, (const char *)x + (size_t)r * x_stride, y);
        return;
    }
    float da[1][Q16_ROWS_MAX_BLOCKS] __attribute__((aligned(64)));
    const block_q16_0 *a[4] = {y, NULL, NULL, NULL};
    q16_rows_scales(a[0], nb, da[0]);
    q16_rows_n(nb, s, 0, x, x_stride, n_rows, a, da, 1);
}

MS_DECL_DOT_ROWS_N(q8_0, q16_0, avx512) {
    const int64_t nb = n / QK8_0;
    if (nb > Q16_ROWS_MAX_BLOCKS || nb == 0) {
        for (int k = 0; k < nt; k++)
            for (int64_t r = 0; r < n_rows; r++)
                ms_dot_q8_0_q16_0_avx512(n, s + k * lds + r, (const char *)x + (size_t)r * x_stride, y[k]);
        return;
    }
    float da[4][Q16_ROWS_MAX_BLOCKS] __attribute__((aligned(64)));
    const block_q16_0 *a[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < nt; k++) {
        a[k] = y[k];
        q16_rows_scales(a[k], nb, da[k]);
    }
    switch (nt) {
    case 1: q16_rows_n(nb, s, lds, x, x_stride, n_rows, a, da, 1); break;
    case 2: q16_rows_n(nb, s, lds, x, x_stride, n_rows, a, da, 2); break;
    case 3: q16_rows_n(nb, s, lds, x, x_stride, n_rows, a, da, 3); break;
    default: q16_rows_n(nb, s, lds, x, x_stride, n_rows, a, da, 4); break;
    }
}

/* ---- packing 16 tokens (block_q16_0x16) ----------------------------------- */

/* r[e] <- the 16 x 16 matrix of 32-bit words r[t] (row t, word e)
 * transposed: word t of the result row e is word e of input row t. Two
 * unpack stages gather each 128-bit lane's 4 x 4 sub-block, two 128-bit
 * lane shuffles move the sub-blocks into place. */
static inline void transpose16x16_epi32(__m512i r[16]) {
    __m512i a[16], c[16];
    for (int k = 0; k < 8; k++) {
        a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    /* c[4 m + x], 128-bit lane L: word 4 L + x of rows 4 m .. 4 m + 3 */
    for (int m = 0; m < 4; m++) {
        const __m512i *p = &a[4 * m];
        c[4 * m + 0] = _mm512_unpacklo_epi64(p[0], p[2]);
        c[4 * m + 1] = _mm512_unpackhi_epi64(p[0], p[2]);
        c[4 * m + 2] = _mm512_unpacklo_epi64(p[1], p[3]);
        c[4 * m + 3] = _mm512_unpackhi_epi64(p[1], p[3]);
    }
    /* result row 4 L + x, lane m: c[4 m + x]'s lane L */
    for (int x = 0; x < 4; x++) {
        const __m512i d0 = _mm512_shuffle_i32x4(c[x], c[4 + x], 0x44);
        const __m512i d1 = _mm512_shuffle_i32x4(c[x], c[4 + x], 0xee);
        const __m512i d2 = _mm512_shuffle_i32x4(c[8 + x], c[12 + x], 0x44);
        const __m512i d3 = _mm512_shuffle_i32x4(c[8 + x], c[12 + x], 0xee);
        r[x] = _mm512_shuffle_i32x4(d0, d2, 0x88);
        r[4 + x] = _mm512_shuffle_i32x4(d0, d2, 0xdd);
        r[8 + x] = _mm512_shuffle_i32x4(d1, d3, 0x88);
        r[12 + x] = _mm512_shuffle_i32x4(d1, d3, 0xdd);
    }
}

/* Each token's block is split in registers (hi = (q + 128) >> 8, lo = q -
 * 256 hi, the reference's arithmetic in int16 lanes, narrowed to bytes)
 * into one 64-byte row, its hi words then its lo words; the 16 rows
 * transposed are hi[0..7] and lo[0..7] of the packed block, which lie
 * contiguous. The scalar form spent about a third of the time of the GEMM
 * that reads its output on a Flash-shaped HC mix (4096 columns, 24 rows). */
void ms_pack_q16_0_x16_avx512(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    block_q16_0x16 *o = dst;
    const block_q16_0 *rows[16];
    for (int t = 0; t < 16; t++)
        rows[t] = (const block_q16_0 *)((const char *)a + (size_t)(t < nt ? t : nt - 1) * a_stride);
    const __m512i c128 = _mm512_set1_epi16(128), ones = _mm512_set1_epi16(1);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m512i r[16];
        __m512i sums = _mm512_setzero_si512();
        for (int t = 0; t < 16; t++) {
            const __m512i q = _mm512_loadu_si512((const void *)rows[t][i].qs);
            const __m512i h = _mm512_srai_epi16(_mm512_add_epi16(q, c128), 8);
            const __m512i lo = _mm512_sub_epi16(q, _mm512_slli_epi16(h, 8));
            r[t] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(h)), _mm512_cvtepi16_epi8(lo), 1);
            /* the 32 values' sum, 128 times, in lane t (exact: |128 sum| < 2^27) */
            const int32_t sum = _mm512_reduce_add_epi32(_mm512_madd_epi16(q, ones));
            sums = _mm512_mask_set1_epi32(sums, (__mmask16)(1u << t), 128 * sum);
            o[i].d[t] = rows[t][i].d;
        }
        transpose16x16_epi32(r);
        for (int e = 0; e < 16; e++) _mm512_storeu_si512((void *)((char *)&o[i] + 64 * e), r[e]);
        _mm512_storeu_si512((void *)o[i].qsum128, sums);
    }
}

/* ---- token-lane GEMM: Q8_0 rows x 16 packed Q16_0 tokens ---------------- */

/* Block i of R (1 or 2) rows against the pack's 16 tokens: accp[k][0] +=
 * (float)sumi * (d_w * d_a) lane by lane, the reference's float step. */
MS_SIMD_INLINE void q16_block_x16(const block_q8_0 *const w[2], int64_t i, const block_q16_0x16 *const abp[2],
                                  __m512 accp[2][2], const int R, const int P) {
    (void)P; /* one pack a call (MS_DEFINE_GEMM_Q8_0_X16's PMAX 1): each broadcast already feeds two vpdpbusd */
    const block_q16_0x16 *ab = abp[0];
    uint8_t wu[2][32] __attribute__((aligned(32)));
    for (int k = 0; k < R; k++)
        _mm256_store_si256((__m256i *)wu[k], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)w[k][i].qs),
                                                              _mm256_set1_epi8((char)0x80)));
    __m512i th[2][2], tl[2][2];
    for (int k = 0; k < R; k++) th[k][0] = th[k][1] = tl[k][0] = tl[k][1] = _mm512_setzero_si512();
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++) {
        const __m512i ah = _mm512_load_si512((const void *)ab->hi[j]);
        const __m512i al = _mm512_load_si512((const void *)ab->lo[j]);
        for (int k = 0; k < R; k++) {
            uint32_t wv;
            memcpy(&wv, wu[k] + 4 * j, 4);
            const __m512i bw = _mm512_set1_epi32((int)wv);
            th[k][j % 2] = _mm512_dpbusd_epi32(th[k][j % 2], bw, ah);
            tl[k][j % 2] = _mm512_dpbusd_epi32(tl[k][j % 2], bw, al);
        }
    }
    const __m512i corr = _mm512_load_si512((const void *)ab->qsum128);
    const __m512 da = _mm512_load_ps(ab->d);
    for (int k = 0; k < R; k++) {
        const __m512i hi = _mm512_slli_epi32(_mm512_add_epi32(th[k][0], th[k][1]), 8);
        const __m512i sumi = _mm512_sub_epi32(_mm512_add_epi32(hi, _mm512_add_epi32(tl[k][0], tl[k][1])), corr);
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(fp16_scale(w[k][i].d)), da);
        accp[k][0] = _mm512_add_ps(accp[k][0], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), d));
    }
}

/* no prefetch: it serves dense products, whose tile of rows stays in cache
 * for every pack of the prompt after the first */
MS_DEFINE_GEMM_Q8_0_X16(ms_gemm_q8_0_q16_0x16_avx512, block_q16_0x16, q16_block_x16, 1, 0)
