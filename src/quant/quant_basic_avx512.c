/*
 * quant_basic_avx512.c - AVX-512 (F, BW, VL, DQ) + FMA + F16C kernels for F32,
 * F16, BF16, Q8_0 and MXFP4. Compiled with the matching -m flags (CMake, by
 * file name) and only called after quant_dispatch.c has checked the CPU.
 *
 * Same contracts as the scalar reference (quant_basic_ref.c); conversions and
 * quantizers are bit-identical to it, dots differ only by f32 summation order.
 * Float-row tails use masked loads/stores instead of scalar loops. Quantized
 * dots take two 32-element blocks per 512-bit register; the int8 products use
 * maddubs(|w|, a negated where w < 0), exact as long as the activation has no
 * -128 (ms_quant_q8_0 never produces one). No VNNI is required.
 */
#include <immintrin.h>
#include <math.h>

#include "quant/blocks.h"
#include "quant/quant_basic.h"
#include "quant/quant_impl.h"
#include "quant/quant_simd.h"

static inline __mmask16 tail_mask(int64_t r) { return (__mmask16)((1u << r) - 1u); }

/* 16 int8 -> 16 f32 */
static inline __m512 i8x16_to_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

/* Same for two blocks at once: lanes 0..7 belong to the block in the low 256
 * bits, lanes 8..15 to the high one. */
static inline __m512 dot_i8x64(__m512i w, __m512i a) {
    const __mmask64 neg = _mm512_movepi8_mask(w);
    const __m512i sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
    const __m512i p16 = _mm512_maddubs_epi16(_mm512_abs_epi8(w), sa);
    return _mm512_cvtepi32_ps(_mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
}

static inline __m512 scale_2x8(float d0, float d1) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1);
}

/* Two consecutive MXFP4 blocks' values: [b0 lo | b0 hi | b1 lo | b1 hi]. */
static inline __m512i mxfp4_values_2(const block_mxfp4 *b) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ms_kvalues_mxfp4));
    const __m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)b[1].qs),
                                       _mm_loadu_si128((const __m128i *)b[0].qs));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(q, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    /* lanes [b0 lo, b1 lo, b0 hi, b1 hi] -> [b0 lo, b0 hi, b1 lo, b1 hi] */
    __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    idx = _mm512_shuffle_i64x2(idx, idx, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm512_shuffle_epi8(lut, idx);
}

/* ---- f32 ---------------------------------------------------------------- */

MS_DECL_DOT(f32, f32, avx512) {
    const float *a = x, *b = y;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

/* ---- f16 and bf16 -------------------------------------------------------
 * The two 16-bit float formats share their loops; bf16 selects the format
 * (a constant at every call, folded away by forced inlining). */

/* 16 halves -> 16 f32 */
MS_SIMD_INLINE __m512 half16_to_ps(__m256i h, bool bf16) {
    if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

MS_SIMD_INLINE __m512 load_half16(const uint16_t *p, bool bf16) {
    return half16_to_ps(_mm256_loadu_si256((const __m256i *)p), bf16);
}

/* The lanes of m only (the others read as 0). */
MS_SIMD_INLINE __m512 load_half16_mask(const uint16_t *p, __mmask16 m, bool bf16) {
    return half16_to_ps(_mm256_maskz_loadu_epi16(m, p), bf16);
}

/* NaN lanes become the canonical quiet NaN (sign kept) before conversion, so
 * the output is 0x7e00 | sign as in the reference. */
static inline __m256i f32x16_to_f16(__m512 v) {
    const __mmask16 isnan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i u = _mm512_castps_si512(v);
    const __m512i canon = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)),
                                          _mm512_set1_epi32(0x7fc00000));
    v = _mm512_castsi512_ps(_mm512_mask_mov_epi32(u, isnan, canon));
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
}

/* Round to nearest even on the bit pattern; NaN keeps its top bits and gets
 * the quiet bit (as the reference). */
static inline __m256i f32x16_to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 isnan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i nanv = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, isnan, nanv));
}

MS_SIMD_INLINE __m256i f32x16_to_half(__m512 v, bool bf16) { return bf16 ? f32x16_to_bf16(v) : f32x16_to_f16(v); }

MS_SIMD_INLINE void dequant_half(const uint16_t *restrict h, float *restrict y, int64_t n, bool bf16) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, load_half16(h + i, bf16));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, load_half16_mask(h + i, m, bf16));
    }
}

MS_SIMD_INLINE void quant_half(const float *restrict x, uint16_t *restrict h, int64_t n, bool bf16) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(h + i), f32x16_to_half(_mm512_loadu_ps(x + i), bf16));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(h + i, m, f32x16_to_half(_mm512_maskz_loadu_ps(m, x + i), bf16));
    }
}

MS_SIMD_INLINE float dot_half_half(const uint16_t *a, const uint16_t *b, int64_t n, bool bf16) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(load_half16(a + i, bf16), load_half16(b + i, bf16), acc0);
        acc1 = _mm512_fmadd_ps(load_half16(a + i + 16, bf16), load_half16(b + i + 16, bf16), acc1);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(load_half16(a + i, bf16), load_half16(b + i, bf16), acc0);
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        acc1 = _mm512_fmadd_ps(load_half16_mask(a + i, m, bf16), load_half16_mask(b + i, m, bf16), acc1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

MS_SIMD_INLINE float dot_half_f32(const uint16_t *a, const float *b, int64_t n, bool bf16) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(load_half16(a + i, bf16), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(load_half16(a + i + 16, bf16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(load_half16(a + i, bf16), _mm512_loadu_ps(b + i), acc0);
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        acc1 = _mm512_fmadd_ps(load_half16_mask(a + i, m, bf16), _mm512_maskz_loadu_ps(m, b + i), acc1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

MS_DECL_DEQUANT(f16, avx512) { dequant_half(x, y, n, false); }
MS_DECL_QUANT(f16, avx512) { quant_half(x, y, n, false); }
MS_DECL_DOT(f16, f16, avx512) { *s = dot_half_half(x, y, n, false); }
MS_DECL_DOT(f16, f32, avx512) { *s = dot_half_f32(x, y, n, false); }
MS_DECL_DEQUANT(bf16, avx512) { dequant_half(x, y, n, true); }
MS_DECL_QUANT(bf16, avx512) { quant_half(x, y, n, true); }
MS_DECL_DOT(bf16, bf16, avx512) { *s = dot_half_half(x, y, n, true); }
MS_DECL_DOT(bf16, f32, avx512) { *s = dot_half_f32(x, y, n, true); }

/* ---- q8_0 --------------------------------------------------------------- */

MS_DECL_DEQUANT(q8_0, avx512) {
    const block_q8_0 *b = x;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m512 d = _mm512_set1_ps(fp16_scale(b[i].d));
        _mm512_storeu_ps(y + i * QK8_0, _mm512_mul_ps(d, i8x16_to_ps(_mm_loadu_si128((const __m128i *)b[i].qs))));
        _mm512_storeu_ps(y + i * QK8_0 + 16,
                         _mm512_mul_ps(d, i8x16_to_ps(_mm_loadu_si128((const __m128i *)(b[i].qs + 16)))));
    }
}

/* roundf (ties away from zero) of integral-range v, exactly. */
static inline __m512 roundf_ps(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u));
    const __m512 step = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_castps_si512(_mm512_set1_ps(1.0f))));
    return _mm512_mask_add_ps(t, up, t, step);
}

MS_DECL_QUANT(q8_0, avx512) {
    block_q8_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m512 v0 = _mm512_loadu_ps(x + i * QK8_0), v1 = _mm512_loadu_ps(x + i * QK8_0 + 16);
        /* max(|v|, acc) returns acc when |v| is NaN: NaNs are skipped */
        __m512 amax = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps());
        amax = _mm512_max_ps(_mm512_abs_ps(v1), amax);
        const float d = _mm512_reduce_max_ps(amax) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = ms_fp16_from_f32_inline(d);
        const __m512 idv = _mm512_set1_ps(id);
        __m512 s0 = _mm512_mul_ps(v0, idv), s1 = _mm512_mul_ps(v1, idv);
        s0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s0, s0, _CMP_ORD_Q), s0); /* NaN -> 0 */
        s1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s1, s1, _CMP_ORD_Q), s1);
        _mm_storeu_si128((__m128i *)b[i].qs, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(roundf_ps(s0))));
        _mm_storeu_si128((__m128i *)(b[i].qs + 16), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(roundf_ps(s1))));
    }
}

/* Blocks i and i + 1 of a Q8_0 row (mx false) or an MXFP4 row (mx true) as
 * one register (w32_values of each, low block in the low half). */
MS_SIMD_INLINE __m512i w64_values(const void *w, int64_t i, bool mx) {
    if (mx) return mxfp4_values_2(&((const block_mxfp4 *)w)[i]);
    const block_q8_0 *q = w;
    return load2x32(q[i].qs, q[i + 1].qs);
}

/* nb blocks of w dotted with nb Q8_0 blocks b, four blocks per step. */
MS_SIMD_INLINE float dot_w32_q8_0(const void *w, const block_q8_0 *b, int64_t nb, bool mx) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512 d01 = scale_2x8(w32_scale(w, i, mx) * fp16_scale(b[i].d),
                                     w32_scale(w, i + 1, mx) * fp16_scale(b[i + 1].d));
        const __m512 d23 = scale_2x8(w32_scale(w, i + 2, mx) * fp16_scale(b[i + 2].d),
                                     w32_scale(w, i + 3, mx) * fp16_scale(b[i + 3].d));
        const __m512 p01 = dot_i8x64(w64_values(w, i, mx), load2x32(b[i].qs, b[i + 1].qs));
        const __m512 p23 = dot_i8x64(w64_values(w, i + 2, mx), load2x32(b[i + 2].qs, b[i + 3].qs));
        acc0 = _mm512_fmadd_ps(d01, p01, acc0);
        acc1 = _mm512_fmadd_ps(d23, p23, acc1);
    }
    for (; i + 2 <= nb; i += 2) {
        const __m512 d01 = scale_2x8(w32_scale(w, i, mx) * fp16_scale(b[i].d),
                                     w32_scale(w, i + 1, mx) * fp16_scale(b[i + 1].d));
        acc0 = _mm512_fmadd_ps(d01, dot_i8x64(w64_values(w, i, mx), load2x32(b[i].qs, b[i + 1].qs)), acc0);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    if (i < nb) {
        const __m256 p = dot_i8x32(w32_values(w, i, mx), _mm256_loadu_si256((const __m256i *)b[i].qs));
        sum += hsum256_f32(p) * (w32_scale(w, i, mx) * fp16_scale(b[i].d));
    }
    return sum;
}

MS_DECL_DOT(q8_0, q8_0, avx512) { *s = dot_w32_q8_0(x, y, n / QK8_0, false); }

MS_DECL_DOT(q8_0, f32, avx512) {
    const block_q8_0 *a = x;
    const float *b = y;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m512 d = _mm512_set1_ps(fp16_scale(a[i].d));
        const float *yb = b + i * QK8_0;
        const __m512 w0 = i8x16_to_ps(_mm_loadu_si128((const __m128i *)a[i].qs));
        const __m512 w1 = i8x16_to_ps(_mm_loadu_si128((const __m128i *)(a[i].qs + 16)));
        acc0 = _mm512_fmadd_ps(_mm512_mul_ps(d, w0), _mm512_loadu_ps(yb), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_mul_ps(d, w1), _mm512_loadu_ps(yb + 16), acc1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* ---- mxfp4 -------------------------------------------------------------- */

MS_DECL_DEQUANT(mxfp4, avx512) {
    const block_mxfp4 *b = x;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const __m512 d = _mm512_set1_ps(ms_e8m0_to_f32_half(b[i].e));
        const __m256i v = mxfp4_values(&b[i]);
        _mm512_storeu_ps(y + i * QK_MXFP4, _mm512_mul_ps(d, i8x16_to_ps(_mm256_castsi256_si128(v))));
        _mm512_storeu_ps(y + i * QK_MXFP4 + 16, _mm512_mul_ps(d, i8x16_to_ps(_mm256_extracti128_si256(v, 1))));
    }
}

MS_DECL_DOT(mxfp4, q8_0, avx512) { *s = dot_w32_q8_0(x, y, n / QK_MXFP4, true); }

MS_DECL_DOT(mxfp4, f32, avx512) {
    const block_mxfp4 *a = x;
    const float *b = y;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const __m512 d = _mm512_set1_ps(ms_e8m0_to_f32_half(a[i].e));
        const float *yb = b + i * QK_MXFP4;
        const __m256i v = mxfp4_values(&a[i]);
        const __m512 w0 = i8x16_to_ps(_mm256_castsi256_si128(v));
        const __m512 w1 = i8x16_to_ps(_mm256_extracti128_si256(v, 1));
        acc0 = _mm512_fmadd_ps(_mm512_mul_ps(d, w0), _mm512_loadu_ps(yb), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_mul_ps(d, w1), _mm512_loadu_ps(yb + 16), acc1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* ---- four-token dots -----------------------------------------------------
 * Each repeats its single-token kernel above per token k: the same float
 * operations on the same values, in the same order, into accumulators of its
 * own, so s[k] is bit-identical to the single call. What is shared is the
 * weight side only: loads, nibble decoding, int8 sign/abs preparation (exact
 * integer work) and, in the f32 dots, the scaled weights d * w (one product,
 * identical in both forms). */

MS_DECL_DOT_X4(f32, f32, avx512) {
    const float *a = x, *b[4] = {y[0], y[1], y[2], y[3]};
    __m512 acc0[4], acc1[4], acc2[4], acc3[4];
    MS_X4(k, acc0[k] = acc1[k] = acc2[k] = acc3[k] = _mm512_setzero_ps(););
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512 w0 = _mm512_loadu_ps(a + i), w1 = _mm512_loadu_ps(a + i + 16);
        const __m512 w2 = _mm512_loadu_ps(a + i + 32), w3 = _mm512_loadu_ps(a + i + 48);
        MS_X4(k, acc0[k] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(b[k] + i), acc0[k]);
              acc1[k] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(b[k] + i + 16), acc1[k]);
              acc2[k] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(b[k] + i + 32), acc2[k]);
              acc3[k] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(b[k] + i + 48), acc3[k]););
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 w0 = _mm512_loadu_ps(a + i);
        MS_X4(k, acc0[k] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(b[k] + i), acc0[k]););
    }
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 w0 = _mm512_maskz_loadu_ps(m, a + i);
        MS_X4(k, acc1[k] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, b[k] + i), acc1[k]););
    }
    MS_X4(k, s[k] = _mm512_reduce_add_ps(
                 _mm512_add_ps(_mm512_add_ps(acc0[k], acc1[k]), _mm512_add_ps(acc2[k], acc3[k]))););
}

MS_SIMD_INLINE void dot_half_f32_x4(const uint16_t *a, const void *const y[4], int64_t n, bool bf16, float *s) {
    const float *b[4] = {y[0], y[1], y[2], y[3]};
    __m512 acc0[4], acc1[4];
    MS_X4(k, acc0[k] = acc1[k] = _mm512_setzero_ps(););
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 w0 = load_half16(a + i, bf16), w1 = load_half16(a + i + 16, bf16);
        MS_X4(k, acc0[k] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(b[k] + i), acc0[k]);
              acc1[k] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(b[k] + i + 16), acc1[k]););
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 w0 = load_half16(a + i, bf16);
        MS_X4(k, acc0[k] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(b[k] + i), acc0[k]););
    }
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 w0 = load_half16_mask(a + i, m, bf16);
        MS_X4(k, acc1[k] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, b[k] + i), acc1[k]););
    }
    MS_X4(k, s[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[k], acc1[k])););
}

MS_DECL_DOT_X4(f16, f32, avx512) { dot_half_f32_x4(x, y, n, false, s); }
MS_DECL_DOT_X4(bf16, f32, avx512) { dot_half_f32_x4(x, y, n, true, s); }

/* dot_i8x64 split: the weight half (|w| and its sign mask) once per block
 * pair, the activation half per token; integer work, so exact either way. */
struct w64_prep {
    __m512i absw;
    __mmask64 neg;
};

static inline struct w64_prep w64_prepare(__m512i w) {
    return (struct w64_prep){_mm512_abs_epi8(w), _mm512_movepi8_mask(w)};
}

static inline __m512 dot_i8x64_prep(struct w64_prep w, __m512i a) {
    const __m512i sa = _mm512_mask_sub_epi8(a, w.neg, _mm512_setzero_si512(), a);
    const __m512i p16 = _mm512_maddubs_epi16(w.absw, sa);
    return _mm512_cvtepi32_ps(_mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
}

/* dot_w32_q8_0 for four activation rows b[k]. */
MS_SIMD_INLINE void dot_w32_q8_0_x4(const void *w, const void *const y[4], int64_t nb, bool mx, float *s) {
    const block_q8_0 *b[4] = {y[0], y[1], y[2], y[3]};
    __m512 acc0[4], acc1[4];
    MS_X4(k, acc0[k] = acc1[k] = _mm512_setzero_ps(););
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const float ws0 = w32_scale(w, i, mx), ws1 = w32_scale(w, i + 1, mx);
        const float ws2 = w32_scale(w, i + 2, mx), ws3 = w32_scale(w, i + 3, mx);
        const struct w64_prep w01 = w64_prepare(w64_values(w, i, mx));
        const struct w64_prep w23 = w64_prepare(w64_values(w, i + 2, mx));
        MS_X4(k, const block_q8_0 *bk = b[k];
              const __m512 d01 = scale_2x8(ws0 * fp16_scale(bk[i].d), ws1 * fp16_scale(bk[i + 1].d));
              const __m512 d23 = scale_2x8(ws2 * fp16_scale(bk[i + 2].d), ws3 * fp16_scale(bk[i + 3].d));
              const __m512 p01 = dot_i8x64_prep(w01, load2x32(bk[i].qs, bk[i + 1].qs));
              const __m512 p23 = dot_i8x64_prep(w23, load2x32(bk[i + 2].qs, bk[i + 3].qs));
              acc0[k] = _mm512_fmadd_ps(d01, p01, acc0[k]);
              acc1[k] = _mm512_fmadd_ps(d23, p23, acc1[k]););
    }
    for (; i + 2 <= nb; i += 2) {
        const float ws0 = w32_scale(w, i, mx), ws1 = w32_scale(w, i + 1, mx);
        const struct w64_prep w01 = w64_prepare(w64_values(w, i, mx));
        MS_X4(k, const block_q8_0 *bk = b[k];
              const __m512 d01 = scale_2x8(ws0 * fp16_scale(bk[i].d), ws1 * fp16_scale(bk[i + 1].d));
              acc0[k] = _mm512_fmadd_ps(d01, dot_i8x64_prep(w01, load2x32(bk[i].qs, bk[i + 1].qs)), acc0[k]););
    }
    MS_X4(k, s[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[k], acc1[k])););
    if (i < nb) {
        const __m256i wv = w32_values(w, i, mx);
        const float ws = w32_scale(w, i, mx);
        MS_X4(k, const __m256 p = dot_i8x32(wv, _mm256_loadu_si256((const __m256i *)b[k][i].qs));
              s[k] += hsum256_f32(p) * (ws * fp16_scale(b[k][i].d)););
    }
}

MS_DECL_DOT_X4(q8_0, q8_0, avx512) { dot_w32_q8_0_x4(x, y, n / QK8_0, false, s); }
MS_DECL_DOT_X4(mxfp4, q8_0, avx512) { dot_w32_q8_0_x4(x, y, n / QK_MXFP4, true, s); }

MS_DECL_DOT_X4(q8_0, f32, avx512) {
    const block_q8_0 *a = x;
    const float *b[4] = {y[0], y[1], y[2], y[3]};
    __m512 acc0[4], acc1[4];
    MS_X4(k, acc0[k] = acc1[k] = _mm512_setzero_ps(););
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m512 d = _mm512_set1_ps(fp16_scale(a[i].d));
        const __m512 dw0 = _mm512_mul_ps(d, i8x16_to_ps(_mm_loadu_si128((const __m128i *)a[i].qs)));
        const __m512 dw1 = _mm512_mul_ps(d, i8x16_to_ps(_mm_loadu_si128((const __m128i *)(a[i].qs + 16))));
        MS_X4(k, const float *yb = b[k] + i * QK8_0;
              acc0[k] = _mm512_fmadd_ps(dw0, _mm512_loadu_ps(yb), acc0[k]);
              acc1[k] = _mm512_fmadd_ps(dw1, _mm512_loadu_ps(yb + 16), acc1[k]););
    }
    MS_X4(k, s[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[k], acc1[k])););
}
