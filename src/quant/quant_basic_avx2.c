/*
 * quant_basic_avx2.c - AVX2 + FMA + F16C kernels for F32, F16, BF16, Q8_0 and
 * MXFP4. Compiled with -mavx2 -mfma -mf16c (CMake, by file name) and only
 * called after quant_dispatch.c has checked the CPU.
 *
 * Same contracts as the scalar reference (quant_basic_ref.c); conversions and
 * quantizers are bit-identical to it, dots differ only by f32 summation order.
 * Integer dots use ggml's sign trick: maddubs(|w|, sign(a, w)) multiplies
 * unsigned |w| (<= 128) by signed a; exact as long as the activation has no
 * -128, which ms_quant_q8_0 never produces.
 */
#include <immintrin.h>
#include <math.h>

#include "quant/blocks.h"
#include "quant/quant_basic.h"
#include "quant/quant_impl.h"
#include "quant/quant_simd.h"

/* 8 int8 -> 8 f32 */
static inline __m256 load_i8x8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* ---- f32 ---------------------------------------------------------------- */

MS_DECL_DOT(f32, f32, avx2) {
    const float *a = x, *b = y;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float sum = hsum256_f32(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++) sum += a[i] * b[i];
    *s = sum;
}

/* ---- f16 and bf16 -------------------------------------------------------
 * The two 16-bit float formats share their loops; bf16 selects the format
 * (a constant at every call, folded away by forced inlining). */

MS_SIMD_INLINE __m256 load_half8(const uint16_t *p, bool bf16) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

MS_SIMD_INLINE float half_to_f32(uint16_t h, bool bf16) {
    return bf16 ? ms_bf16_to_f32_inline(h) : ms_fp16_to_f32_inline(h);
}

MS_SIMD_INLINE void dequant_half(const uint16_t *restrict h, float *restrict y, int64_t n, bool bf16) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_half8(h + i, bf16));
    for (; i < n; i++) y[i] = half_to_f32(h[i], bf16);
}

MS_SIMD_INLINE float dot_half_half(const uint16_t *a, const uint16_t *b, int64_t n, bool bf16) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(load_half8(a + i, bf16), load_half8(b + i, bf16), acc0);
        acc1 = _mm256_fmadd_ps(load_half8(a + i + 8, bf16), load_half8(b + i + 8, bf16), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_half8(a + i, bf16), load_half8(b + i, bf16), acc0);
    float sum = hsum256_f32(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += half_to_f32(a[i], bf16) * half_to_f32(b[i], bf16);
    return sum;
}

MS_SIMD_INLINE float dot_half_f32(const uint16_t *a, const float *b, int64_t n, bool bf16) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (i % 32 == 0) prefetch_ahead(a + i, 1); /* a line every 32 values */
        acc0 = _mm256_fmadd_ps(load_half8(a + i, bf16), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(load_half8(a + i + 8, bf16), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_half8(a + i, bf16), _mm256_loadu_ps(b + i), acc0);
    float sum = hsum256_f32(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += half_to_f32(a[i], bf16) * b[i];
    return sum;
}

MS_DECL_DEQUANT(f16, avx2) { dequant_half(x, y, n, false); }
MS_DECL_DOT(f16, f16, avx2) { *s = dot_half_half(x, y, n, false); }
MS_DECL_DOT(f16, f32, avx2) { *s = dot_half_f32(x, y, n, false); }
MS_DECL_DEQUANT(bf16, avx2) { dequant_half(x, y, n, true); }
MS_DECL_DOT(bf16, bf16, avx2) { *s = dot_half_half(x, y, n, true); }
MS_DECL_DOT(bf16, f32, avx2) { *s = dot_half_f32(x, y, n, true); }

MS_DECL_QUANT(f16, avx2) {
    uint16_t *h = y;
    /* NaN lanes are replaced by the canonical quiet NaN (sign kept) so the
     * result is 0x7e00 | sign as in the reference, not a truncated payload. */
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        const __m256 isnan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        v = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), qnan), isnan);
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) h[i] = ms_fp16_from_f32_inline(x[i]);
}

MS_DECL_QUANT(bf16, avx2) {
    uint16_t *h = y;
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
        const __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet), isnan);
        /* 8 x u32 (all <= 0xffff) -> 8 x u16 in order */
        r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
        _mm_storeu_si128((__m128i *)(h + i), _mm256_castsi256_si128(r));
    }
    for (; i < n; i++) h[i] = ms_bf16_from_f32_inline(x[i]);
}

/* ---- q8_0 --------------------------------------------------------------- */

MS_DECL_DEQUANT(q8_0, avx2) {
    const block_q8_0 *b = x;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256 d = _mm256_set1_ps(fp16_scale(b[i].d));
        for (int j = 0; j < QK8_0; j += 8)
            _mm256_storeu_ps(y + i * QK8_0 + j, _mm256_mul_ps(d, load_i8x8(b[i].qs + j)));
    }
}

/* roundf (ties away from zero) of integral-range v, exactly: truncate, then
 * step away from zero when the dropped fraction is >= 0.5. */
static inline __m256 roundf_ps(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 step = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
    return _mm256_add_ps(t, _mm256_and_ps(up, step));
}

MS_DECL_QUANT(q8_0, avx2) {
    block_q8_0 *b = y;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *xb = x + i * QK8_0;
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            /* max(|v|, amax) returns amax when |v| is NaN: NaNs are skipped */
            amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), amax);
        }
        const float d = hmax256_f32(amax) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = ms_fp16_from_f32_inline(d);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            __m256 s = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
            s = _mm256_and_ps(s, _mm256_cmp_ps(s, s, _CMP_ORD_Q)); /* NaN -> 0 */
            q[k] = _mm256_cvtps_epi32(roundf_ps(s));
        }
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
        const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
        const __m256i p = _mm256_packs_epi16(p01, p23);
        const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        _mm256_storeu_si256((__m256i *)b[i].qs, _mm256_permutevar8x32_epi32(p, order));
    }
}

/* nb blocks of w (as w32_values: MXFP4 here, Q8_0 weights have their own
 * order below) dotted with nb Q8_0 blocks b: one accumulator, block by
 * block (the four-token kernel below repeats exactly these float
 * operations per token, so the order is fixed here). */
MS_SIMD_INLINE float dot_w32_q8_0(const void *w, const block_q8_0 *b, int64_t nb, bool mx) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256 d = _mm256_set1_ps(w32_scale(w, i, mx) * fp16_scale(b[i].d));
        acc = _mm256_fmadd_ps(d, dot_i8x32(w32_values(w, i, mx), _mm256_loadu_si256((const __m256i *)b[i].qs)),
                              acc);
    }
    return hsum256_f32(acc);
}

/*
 * Q8_0 x Q8_0: the AVX-512 set's numerics (quant_basic_avx512.c), which a
 * token-lane GEMM can keep: per block i the exact int32 dot sumi_i, then
 * p_i = (float)sumi_i * (d_w[i] * d_a[i]) added to acc[i % 4] in block
 * order, and the result (acc[0] + acc[2]) + (acc[1] + acc[3]). Single,
 * four-token and the 8-lane GEMM (Q16_0's, over Q8_0 activations widened
 * by ms_pack_q8_0_x8) perform exactly these float operations, so they
 * agree bit for bit, and with the AVX-512 set. Eight blocks at a time:
 * sign-trick byte dots give 8 partial sums a block, block_sums8 one
 * register with block j's sum in lane j, and one vector float step.
 */
MS_SIMD_INLINE void dot_q8_0_q8_0_n(const block_q8_0 *w, const block_q8_0 *const a[4], int nt, int64_t nb,
                                    float *s) {
    __m128 acc[4];
    MS_XN(k, nt, acc[k] = _mm_setzero_ps(););
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t c = 0; c < nb; c += 8) {
        const int64_t nc = nb - c < 8 ? nb - c : 8;
        prefetch_ahead(w + c, 5); /* 8 blocks: 272 bytes */
        const __m256 wsv = q8_0_scales8_ins(w + c, nc);
        __m256i wv[8];
        _Pragma("GCC unroll 8")
        for (int q = 0; q < 8; q++)
            wv[q] = q < nc ? _mm256_loadu_si256((const __m256i *)w[c + q].qs) : _mm256_setzero_si256();
        MS_XN(k, nt, {
            const block_q8_0 *ak = a[k];
            __m256i part[8];
            _Pragma("GCC unroll 8")
            for (int q = 0; q < 8; q++) {
                const __m256i av = q < nc ? _mm256_loadu_si256((const __m256i *)ak[c + q].qs) : _mm256_setzero_si256();
                part[q] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv[q], wv[q]), _mm256_sign_epi8(av, wv[q])),
                                            ones);
            }
            const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(block_sums8(part)),
                                           _mm256_mul_ps(wsv, q8_0_scales8_ins(ak + c, nc)));
            acc[k] = add8_by4(acc[k], p);
        });
    }
    MS_XN(k, nt, s[k] = reduce_by4(acc[k]););
}

MS_DECL_DOT(q8_0, q8_0, avx2) {
    const block_q8_0 *a[4] = {y, NULL, NULL, NULL};
    dot_q8_0_q8_0_n(x, a, 1, n / QK8_0, s);
}
MS_DEFINE_DOT_ROWS(q8_0, q8_0, avx2)
MS_DEFINE_DOT_ROWS_N(ms_dot_rows_n_q8_0_q8_0_avx2, block_q8_0, block_q8_0, QK8_0, dot_q8_0_q8_0_n)

MS_DECL_DOT(q8_0, f32, avx2) {
    const block_q8_0 *a = x;
    const float *b = y;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *yb = b + i * QK8_0;
        __m256 t = _mm256_mul_ps(load_i8x8(a[i].qs), _mm256_loadu_ps(yb));
        t = _mm256_fmadd_ps(load_i8x8(a[i].qs + 8), _mm256_loadu_ps(yb + 8), t);
        t = _mm256_fmadd_ps(load_i8x8(a[i].qs + 16), _mm256_loadu_ps(yb + 16), t);
        t = _mm256_fmadd_ps(load_i8x8(a[i].qs + 24), _mm256_loadu_ps(yb + 24), t);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16_scale(a[i].d)), t, acc);
    }
    *s = hsum256_f32(acc);
}

/* ---- mxfp4 -------------------------------------------------------------- */

MS_DECL_DEQUANT(mxfp4, avx2) {
    const block_mxfp4 *b = x;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const __m256 d = _mm256_set1_ps(ms_e8m0_to_f32_half(b[i].e));
        const __m256i v = mxfp4_values(&b[i]);
        const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        float *yb = y + i * QK_MXFP4;
        _mm256_storeu_ps(yb, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
        _mm256_storeu_ps(yb + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
        _mm256_storeu_ps(yb + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
        _mm256_storeu_ps(yb + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
    }
}

MS_DECL_DOT(mxfp4, q8_0, avx2) { *s = dot_w32_q8_0(x, y, n / QK_MXFP4, true); }

MS_DECL_DOT(mxfp4, f32, avx2) {
    const block_mxfp4 *a = x;
    const float *b = y;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const float *yb = b + i * QK_MXFP4;
        const __m256i v = mxfp4_values(&a[i]);
        const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_loadu_ps(yb));
        t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))),
                            _mm256_loadu_ps(yb + 8), t);
        t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_loadu_ps(yb + 16), t);
        t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))),
                            _mm256_loadu_ps(yb + 24), t);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(ms_e8m0_to_f32_half(a[i].e)), t, acc);
    }
    *s = hsum256_f32(acc);
}

/* ---- four-token dots -----------------------------------------------------
 * Each repeats its single-token kernel above per token k: the same float
 * operations on the same values, in the same order, into accumulators of its
 * own, so s[k] is bit-identical to the single call. What is shared is the
 * weight side only: loads, conversions, nibble decoding and the int8 |w|
 * (exact integer work). */

MS_DECL_DOT_X4(f32, f32, avx2) {
    const float *a = x, *b[4] = {y[0], y[1], y[2], y[3]};
    __m256 acc0[4], acc1[4], acc2[4], acc3[4];
    MS_X4(k, acc0[k] = acc1[k] = acc2[k] = acc3[k] = _mm256_setzero_ps(););
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 w0 = _mm256_loadu_ps(a + i), w1 = _mm256_loadu_ps(a + i + 8);
        const __m256 w2 = _mm256_loadu_ps(a + i + 16), w3 = _mm256_loadu_ps(a + i + 24);
        MS_X4(k, acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(b[k] + i), acc0[k]);
              acc1[k] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(b[k] + i + 8), acc1[k]);
              acc2[k] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(b[k] + i + 16), acc2[k]);
              acc3[k] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(b[k] + i + 24), acc3[k]););
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 w0 = _mm256_loadu_ps(a + i);
        MS_X4(k, acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(b[k] + i), acc0[k]););
    }
    MS_X4(k, float sum = hsum256_f32(_mm256_add_ps(_mm256_add_ps(acc0[k], acc1[k]), _mm256_add_ps(acc2[k], acc3[k])));
          for (int64_t j = i; j < n; j++) sum += a[j] * b[k][j];
          s[k] = sum;);
}

MS_SIMD_INLINE void dot_half_f32_x4(const uint16_t *a, const void *const y[4], int64_t n, bool bf16, float *s) {
    const float *b[4] = {y[0], y[1], y[2], y[3]};
    __m256 acc0[4], acc1[4];
    MS_X4(k, acc0[k] = acc1[k] = _mm256_setzero_ps(););
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = load_half8(a + i, bf16), w1 = load_half8(a + i + 8, bf16);
        MS_X4(k, acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(b[k] + i), acc0[k]);
              acc1[k] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(b[k] + i + 8), acc1[k]););
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 w0 = load_half8(a + i, bf16);
        MS_X4(k, acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(b[k] + i), acc0[k]););
    }
    MS_X4(k, float sum = hsum256_f32(_mm256_add_ps(acc0[k], acc1[k]));
          for (int64_t j = i; j < n; j++) sum += half_to_f32(a[j], bf16) * b[k][j];
          s[k] = sum;);
}

MS_DECL_DOT_X4(f16, f32, avx2) { dot_half_f32_x4(x, y, n, false, s); }
MS_DECL_DOT_X4(bf16, f32, avx2) { dot_half_f32_x4(x, y, n, true, s); }

/* dot_i8x32 with the weight's |w| computed once: sign(a, w) still needs w. */
static inline __m256 dot_i8x32_abs(__m256i w, __m256i absw, __m256i a) {
    const __m256i p16 = _mm256_maddubs_epi16(absw, _mm256_sign_epi8(a, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* dot_w32_q8_0 for four activation rows b[k]. The four tokens' block
 * scales are converted together (one vcvtph2ps, one multiply by the weight's
 * scale: each lane is the single kernel's ws * da, the same f32 product) and
 * broadcast to token k with an in-lane permute; one accumulator per token
 * keeps every register live without spills. */
MS_SIMD_INLINE void dot_w32_q8_0_x4(const void *w, const void *const y[4], int64_t nb, bool mx, float *s) {
    const block_q8_0 *b0 = y[0], *b1 = y[1], *b2 = y[2], *b3 = y[3];
    __m256 acc[4];
    MS_X4(k, acc[k] = _mm256_setzero_ps(););
    for (int64_t i = 0; i < nb; i++) {
        const __m256i w0 = w32_values(w, i, mx), a0 = _mm256_sign_epi8(w0, w0);
        const __m128i h = _mm_setr_epi16((short)b0[i].d, (short)b1[i].d, (short)b2[i].d, (short)b3[i].d, 0, 0, 0, 0);
        const __m128 d4 = _mm_mul_ps(_mm_cvtph_ps(h), _mm_set1_ps(w32_scale(w, i, mx)));
        const __m256 d8 = _mm256_set_m128(d4, d4);
        const __m256 p0 = dot_i8x32_abs(w0, a0, _mm256_loadu_si256((const __m256i *)b0[i].qs));
        const __m256 p1 = dot_i8x32_abs(w0, a0, _mm256_loadu_si256((const __m256i *)b1[i].qs));
        const __m256 p2 = dot_i8x32_abs(w0, a0, _mm256_loadu_si256((const __m256i *)b2[i].qs));
        const __m256 p3 = dot_i8x32_abs(w0, a0, _mm256_loadu_si256((const __m256i *)b3[i].qs));
        acc[0] = _mm256_fmadd_ps(_mm256_permute_ps(d8, 0x00), p0, acc[0]);
        acc[1] = _mm256_fmadd_ps(_mm256_permute_ps(d8, 0x55), p1, acc[1]);
        acc[2] = _mm256_fmadd_ps(_mm256_permute_ps(d8, 0xaa), p2, acc[2]);
        acc[3] = _mm256_fmadd_ps(_mm256_permute_ps(d8, 0xff), p3, acc[3]);
    }
    MS_X4(k, s[k] = hsum256_f32(acc[k]););
}

MS_DECL_DOT_X4(q8_0, q8_0, avx2) {
    const block_q8_0 *a[4] = {y[0], y[1], y[2], y[3]};
    dot_q8_0_q8_0_n(x, a, 4, n / QK8_0, s);
}
MS_DECL_DOT_X4(mxfp4, q8_0, avx2) { dot_w32_q8_0_x4(x, y, n / QK_MXFP4, true, s); }

MS_DECL_DOT_X4(q8_0, f32, avx2) {
    const block_q8_0 *a = x;
    const float *b[4] = {y[0], y[1], y[2], y[3]};
    __m256 acc[4];
    MS_X4(k, acc[k] = _mm256_setzero_ps(););
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256 w0 = load_i8x8(a[i].qs), w1 = load_i8x8(a[i].qs + 8);
        const __m256 w2 = load_i8x8(a[i].qs + 16), w3 = load_i8x8(a[i].qs + 24);
        const __m256 d = _mm256_set1_ps(fp16_scale(a[i].d));
        MS_X4(k, const float *yb = b[k] + i * QK8_0;
              __m256 t = _mm256_mul_ps(w0, _mm256_loadu_ps(yb));
              t = _mm256_fmadd_ps(w1, _mm256_loadu_ps(yb + 8), t);
              t = _mm256_fmadd_ps(w2, _mm256_loadu_ps(yb + 16), t);
              t = _mm256_fmadd_ps(w3, _mm256_loadu_ps(yb + 24), t);
              acc[k] = _mm256_fmadd_ps(d, t, acc[k]););
    }
    MS_X4(k, s[k] = hsum256_f32(acc[k]););
}
