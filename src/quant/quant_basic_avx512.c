/*
 * quant_basic_avx512.c - AVX-512 (F, BW, VL, DQ) + FMA + F16C kernels for F32,
 * F16, BF16, Q8_0 and MXFP4. Compiled with the matching -m flags (CMake, by
 * file name) and only called after quant_dispatch.c has checked the CPU.
 *
 * Same contracts as the scalar reference (quant_basic_ref.c); conversions and
 * quantizers are bit-identical to it, dots differ only by f32 summation order.
 * Float-row tails use masked loads/stores instead of scalar loops. Quantized
 * dots take two 32-element blocks per 512-bit register; the int8 products use
 * VNNI's vpdpbusd(|w|, a negated where w < 0), exact as long as the
 * activation has no -128 (ms_quant_q8_0 never produces one). Block scales are
 * gathered and converted 16 at a time.
 */
#include <immintrin.h>
#include <math.h>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_basic.h"
#include "quant/quant_impl.h"
#include "quant/quant_simd.h"

static inline __mmask16 tail_mask(int64_t r) { return (__mmask16)((1u << r) - 1u); }

/* 16 int8 -> 16 f32 */
static inline __m512 i8x16_to_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

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

/* ms_e8m0_to_f32_half per lane: e < 2 ? 0x00200000 << e : (e - 1) << 23. */
MS_SIMD_INLINE __m512 mxfp4_scales16(const block_mxfp4 *b, int64_t nc) {
    __m128i v = _mm_setzero_si128();
#define INS8(j) v = _mm_insert_epi8(v, b[j].e, j)
    if (nc == 16) {
        INS8(0); INS8(1); INS8(2); INS8(3); INS8(4); INS8(5); INS8(6); INS8(7);
        INS8(8); INS8(9); INS8(10); INS8(11); INS8(12); INS8(13); INS8(14); INS8(15);
    } else {
        INS8(0); /* nc >= 1 */
        if (nc > 1) INS8(1);
        if (nc > 2) INS8(2);
        if (nc > 3) INS8(3);
        if (nc > 4) INS8(4);
        if (nc > 5) INS8(5);
        if (nc > 6) INS8(6);
        if (nc > 7) INS8(7);
        if (nc > 8) INS8(8);
        if (nc > 9) INS8(9);
        if (nc > 10) INS8(10);
        if (nc > 11) INS8(11);
        if (nc > 12) INS8(12);
        if (nc > 13) INS8(13);
        if (nc > 14) INS8(14);
    }
#undef INS8
    const __m512i e = _mm512_cvtepu8_epi32(v);
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 lt2 = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    const __m512i bits = _mm512_mask_mov_epi32(normal, lt2, tiny);
    return _mm512_castsi512_ps(_mm512_maskz_mov_epi32(tail_mask(nc), bits));
}

MS_SIMD_INLINE __m512 w32_scales16(const void *w, int64_t i, int64_t nc, bool mx) {
    if (mx) return mxfp4_scales16(&((const block_mxfp4 *)w)[i], nc);
    return q8_0_scales16(&((const block_q8_0 *)w)[i], nc);
}

/* Lanes 0..7 = lane 2p of a 16-scale vector, lanes 8..15 = lane 2p + 1: the
 * scales of block pair p in the layout of a two-block product (dot_i8x64).
 * Stepped by adding 2 to every lane. */
static inline __m512i pair_sel0(void) { return _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1); }

/* The weight half of a two-block int8 product, prepared once per block pair
 * and shared by the tokens: |w| as u8 and w's sign mask. */
struct w64_prep {
    __m512i absw;
    __mmask64 neg;
};

static inline struct w64_prep w64_prepare(__m512i w) {
    return (struct w64_prep){_mm512_abs_epi8(w), _mm512_movepi8_mask(w)};
}

/* Sum of w * a over each 4 consecutive int8 pairs, as 16 f32 lanes (lanes
 * 0..7 the low block, 8..15 the high one): vpdpbusd(|w|, a with w's sign),
 * exact as long as a has no -128 (ms_quant_q8_0 never produces one). */
static inline __m512 dot_i8x64(struct w64_prep w, __m512i a) {
    const __m512i sa = _mm512_mask_sub_epi8(a, w.neg, _mm512_setzero_si512(), a);
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w.absw, sa));
}

/*
 * nb blocks of w (Q8_0 or MXFP4) dotted with nb Q8_0 blocks of each of nt
 * activation rows b[k] (nt = 1 or 4), into s[k]. Blocks go 16 at a time: the
 * 16 weight scales and each row's 16 activation scales are converted
 * together and multiplied as vectors (the same f32 products ws * da as
 * block by block), then each block pair takes its two scales with one
 * permute. One body for both token counts, so the single and the
 * four-token entries perform the same float operations in the same order.
 */
MS_SIMD_INLINE void dot_w32_q8_0_n(const void *w, const block_q8_0 *const b[4], int nt, int64_t nb, bool mx,
                                   float *s) {
    __m512 acc0[4], acc1[4];
    MS_XN(k, nt, acc0[k] = acc1[k] = _mm512_setzero_ps(););
    const __m512i two = _mm512_set1_epi32(2);
    for (int64_t c = 0; c < nb; c += 16) {
        const int64_t end = nb - c < 16 ? nb : c + 16;
        const __m512 ws = w32_scales16(w, c, end - c, mx);
        __m512 d[4];
        MS_XN(k, nt, d[k] = _mm512_mul_ps(ws, q8_0_scales16(b[k] + c, end - c)););
        __m512i sel = pair_sel0();
        int64_t i = c;
        for (; i + 4 <= end; i += 4) {
            const struct w64_prep w01 = w64_prepare(w64_values(w, i, mx));
            const struct w64_prep w23 = w64_prepare(w64_values(w, i + 2, mx));
            const __m512i sel23 = _mm512_add_epi32(sel, two);
            MS_XN(k, nt, const block_q8_0 *bk = b[k];
                  const __m512 p01 = dot_i8x64(w01, load2x32(bk[i].qs, bk[i + 1].qs));
                  const __m512 p23 = dot_i8x64(w23, load2x32(bk[i + 2].qs, bk[i + 3].qs));
                  acc0[k] = _mm512_fmadd_ps(p01, _mm512_permutexvar_ps(sel, d[k]), acc0[k]);
                  acc1[k] = _mm512_fmadd_ps(p23, _mm512_permutexvar_ps(sel23, d[k]), acc1[k]););
            sel = _mm512_add_epi32(sel23, two);
        }
        if (i + 2 <= end) {
            const struct w64_prep w01 = w64_prepare(w64_values(w, i, mx));
            MS_XN(k, nt, const __m512 p01 = dot_i8x64(w01, load2x32(b[k][i].qs, b[k][i + 1].qs));
                  acc0[k] = _mm512_fmadd_ps(p01, _mm512_permutexvar_ps(sel, d[k]), acc0[k]););
            sel = _mm512_add_epi32(sel, two);
            i += 2;
        }
        if (i < end) { /* an odd last block: the high half is zeros */
            const struct w64_prep w0 = w64_prepare(_mm512_zextsi256_si512(w32_values(w, i, mx)));
            MS_XN(k, nt,
                  const __m512 p0 =
                      dot_i8x64(w0, _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)b[k][i].qs)));
                  acc1[k] = _mm512_fmadd_ps(p0, _mm512_permutexvar_ps(sel, d[k]), acc1[k]););
        }
    }
    MS_XN(k, nt, s[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[k], acc1[k])););
}

/*
 * Q8_0 x Q8_0, the AVX-512 set's numerics (single, x4 and the token-lane
 * GEMM below perform exactly these float operations, so they agree bit for
 * bit): per block i the exact int32 dot sumi_i, then
 *     p_i = (float)sumi_i * (d_w[i] * d_a[i])
 * added to acc[i % 4] in block order, and the result is
 * (acc[0] + acc[2]) + (acc[1] + acc[3]). Four sums in block order are what
 * a token-lane kernel can keep per token (four registers per row), and
 * enough independent chains for the single-token form, which makes 16
 * blocks' sums at a time: vpdpbusd(|w|, a with w's sign) over block pairs,
 * then three rounds of pairwise lane sums bring 8 registers of 8 partial
 * sums per block down to one register with block j's sum in lane j.
 */
/* int32 partial sums of w * a, 8 lanes per block (low block in lanes 0-7) */
static inline __m512i dot_i8x64_i32(struct w64_prep w, __m512i a) {
    const __m512i sa = _mm512_mask_sub_epi8(a, w.neg, _mm512_setzero_si512(), a);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.absw, sa);
}

MS_SIMD_INLINE void dot_q8_0_q8_0_n(const block_q8_0 *w, const block_q8_0 *const b[4], int nt, int64_t nb,
                                    float *s) {
    __m128 acc[4];
    MS_XN(k, nt, acc[k] = _mm_setzero_ps(););
    for (int64_t c = 0; c < nb; c += 16) {
        const int64_t nc = nb - c < 16 ? nb - c : 16;
        const __m512 ws = q8_0_scales16(w + c, nc);
        struct w64_prep wp[8];
        _Pragma("GCC unroll 8")
        for (int q = 0; q < 8; q++) {
            /* a lone last block takes zeros in the high half, and block
             * pairs past the end zeros in both */
            const int64_t i = c + 2 * q;
            wp[q] = w64_prepare(i + 1 < nb   ? load2x32(w[i].qs, w[i + 1].qs)
                                : i < nb     ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)w[i].qs))
                                             : _mm512_setzero_si512());
        }
        MS_XN(k, nt, {
            const block_q8_0 *bk = b[k];
            __m512i part[8];
            _Pragma("GCC unroll 8")
            for (int q = 0; q < 8; q++) {
                const int64_t i = c + 2 * q;
                part[q] = dot_i8x64_i32(
                    wp[q], i + 1 < nb ? load2x32(bk[i].qs, bk[i + 1].qs)
                           : i < nb   ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)bk[i].qs))
                                      : _mm512_setzero_si512());
            }
            acc[k] = q8_0_step16(acc[k], block_sums16(part), ws, q8_0_scales16(bk + c, nc));
        });
    }
    MS_XN(k, nt, s[k] = reduce_by4(acc[k]););
}

MS_DECL_DOT(q8_0, q8_0, avx512) {
    const block_q8_0 *b[4] = {y, NULL, NULL, NULL};
    dot_q8_0_q8_0_n(x, b, 1, n / QK8_0, s);
}

/*
 * The same dot for one activation row against n_rows weight rows (decode's
 * single-token matmuls), or for up to four (a decode step that checks a
 * draft, the last tokens of a prefill): what depends only on the
 * activations is made once per call, into a small stack buffer: their
 * scales as f32 (16 blocks a vector), their values in 64-byte block pairs,
 * and 128 times each block's sum of values. Each row's values then go in
 * offset by 128, as the unsigned operand of vpdpbusd, against the
 * activations as they are: sum (w + 128) a - 128 sum a is the exact int32
 * block sum the single dot gets from |w| and the activations with w's
 * sign, one xor a block pair instead of an abs, a sign mask and a masked
 * negate; with several tokens a row's values are loaded and offset once
 * for all of them. The float steps are the single dot's, so every result
 * is its value bit for bit. Rows longer than ROWS_MAX_BLOCKS blocks go
 * through the single dot.
 */
#define ROWS_MAX_BLOCKS 512

/* Token k's activations a[k] laid out for the rows form. */
struct q8_0_rows_act {
    int8_t aq[ROWS_MAX_BLOCKS * QK8_0] __attribute__((aligned(64)));
    float da[ROWS_MAX_BLOCKS] __attribute__((aligned(64)));
    int32_t corr[ROWS_MAX_BLOCKS] __attribute__((aligned(64)));
};

static void q8_0_rows_act(const block_q8_0 *a, int64_t nb, struct q8_0_rows_act *o) {
    const int64_t nbr = (nb + 15) / 16 * 16;
    const __m256i bias8 = _mm256_set1_epi8((char)0x80);
    for (int64_t i = 0; i < nbr; i++) {
        if (i % 16 == 0) _mm512_store_ps(o->da + i, q8_0_scales16(a + i, nb - i < 16 ? nb - i : 16));
        if (i < nb) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)a[i].qs);
            _mm256_store_si256((__m256i *)(o->aq + QK8_0 * i), v);
            /* sum of (a + 128) by sad against zero, in four 64-bit lanes */
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, bias8), _mm256_setzero_si256());
            const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
            const int32_t sum = (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 128 * QK8_0;
            o->corr[i] = 128 * sum;
        } else {
            _mm256_store_si256((__m256i *)(o->aq + QK8_0 * i), _mm256_setzero_si256());
            o->corr[i] = 0;
        }
    }
}

/* s[k * lds + r] for rows r < n_rows and tokens k < nt (1..4, a
 * constant), the activations laid out in t[k]. */
MS_SIMD_INLINE void q8_0_rows_n(int64_t nb, float *s, int64_t lds, const void *x, size_t x_stride, int64_t n_rows,
                                const struct q8_0_rows_act *t, const int nt) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int64_t r = 0; r < n_rows; r++) {
        const block_q8_0 *w = (const block_q8_0 *)((const char *)x + (size_t)r * x_stride);
        __m128 acc[4];
        for (int k = 0; k < nt; k++) acc[k] = _mm_setzero_ps();
        for (int64_t c = 0; c < nb; c += 16) {
            const int64_t nc = nb - c < 16 ? nb - c : 16;
            const __m512 ws = q8_0_scales16(w + c, nc);
            /* with several tokens, more work a byte: a lead on the stream
             * (16 blocks, 544 bytes, 9 lines) */
            if (nt > 1) prefetch_ahead(w + c, 9);
            __m512i wv[8];
            _Pragma("GCC unroll 8")
            for (int q = 0; q < 8; q++) {
                /* past the row's end: weights 0 (+128 after the xor)
                 * against activations 0 */
                const int64_t i = c + 2 * q;
                wv[q] = _mm512_xor_si512(i + 1 < nb ? load2x32(w[i].qs, w[i + 1].qs)
                                         : i < nb ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)w[i].qs))
                                                  : _mm512_setzero_si512(),
                                         bias);
            }
            for (int k = 0; k < nt; k++) {
                __m512i part[8];
                _Pragma("GCC unroll 8")
                for (int q = 0; q < 8; q++)
                    part[q] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[q],
                                                  _mm512_load_si512((const void *)(t[k].aq + QK8_0 * (c + 2 * q))));
                const __m512i sumi =
                    _mm512_sub_epi32(block_sums16(part), _mm512_load_si512((const void *)(t[k].corr + c)));
                acc[k] = q8_0_step16(acc[k], sumi, ws, _mm512_load_ps(t[k].da + c));
            }
        }
        for (int k = 0; k < nt; k++) s[k * lds + r] = reduce_by4(acc[k]);
    }
}

void ms_dot_rows_q8_0_q8_0_avx512(int64_t n, float *restrict s, const void *restrict x, size_t x_stride,
                                  int64_t n_rows, const void *restrict y) {
    const int64_t nb = n / QK8_0;
    if (nb > ROWS_MAX_BLOCKS || nb == 0) {
        for (int64_t r = 0; r < n_rows; r++) ms_dot_q8_0_q8_0_avx512(n, s + r, (const char *)x + (size_t)r * x_stride, y);
        return;
    }
    struct q8_0_rows_act t;
    q8_0_rows_act(y, nb, &t);
    q8_0_rows_n(nb, s, 0, x, x_stride, n_rows, &t, 1);
}

MS_DECL_DOT_ROWS_N(q8_0, q8_0, avx512) {
    const int64_t nb = n / QK8_0;
    if (nb > ROWS_MAX_BLOCKS || nb == 0) {
        for (int k = 0; k < nt; k++)
            for (int64_t r = 0; r < n_rows; r++)
                ms_dot_q8_0_q8_0_avx512(n, s + k * lds + r, (const char *)x + (size_t)r * x_stride, y[k]);
        return;
    }
    struct q8_0_rows_act t[4];
    for (int k = 0; k < nt; k++) q8_0_rows_act(y[k], nb, &t[k]);
    switch (nt) {
    case 1: q8_0_rows_n(nb, s, lds, x, x_stride, n_rows, t, 1); break;
    case 2: q8_0_rows_n(nb, s, lds, x, x_stride, n_rows, t, 2); break;
    case 3: q8_0_rows_n(nb, s, lds, x, x_stride, n_rows, t, 3); break;
    default: q8_0_rows_n(nb, s, lds, x, x_stride, n_rows, t, 4); break;
    }
}

/*
 * Q8_0 weights times f32 activations, for nt rows b[k] (nt = 1 or 4): each
 * block's scaled weights d * w (exact in f32: 11 by 8 significant bits) are
 * made once and shared by the tokens, whose work is two FMAs per block.
 * With four tokens this runs at the FMA and load bound (two FMAs and two
 * 64-byte loads per token and block, plus the two shared multiplies);
 * measured slower: scales 16 at a time by permute or by broadcast from a
 * stored vector, and four accumulators per token (which would only help the
 * latency-bound single-token form).
 */
MS_SIMD_INLINE void dot_q8_0_f32_n(const block_q8_0 *a, const float *const b[4], int nt, int64_t nb, float *s) {
    __m512 acc0[4], acc1[4];
    MS_XN(k, nt, acc0[k] = acc1[k] = _mm512_setzero_ps(););
    for (int64_t i = 0; i < nb; i++) {
        const __m512 d = _mm512_set1_ps(fp16_scale(a[i].d));
        const __m512 dw0 = _mm512_mul_ps(d, i8x16_to_ps(_mm_loadu_si128((const __m128i *)a[i].qs)));
        const __m512 dw1 = _mm512_mul_ps(d, i8x16_to_ps(_mm_loadu_si128((const __m128i *)(a[i].qs + 16))));
        MS_XN(k, nt, const float *yb = b[k] + i * QK8_0;
              acc0[k] = _mm512_fmadd_ps(dw0, _mm512_loadu_ps(yb), acc0[k]);
              acc1[k] = _mm512_fmadd_ps(dw1, _mm512_loadu_ps(yb + 16), acc1[k]););
    }
    MS_XN(k, nt, s[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[k], acc1[k])););
}

MS_DECL_DOT(q8_0, f32, avx512) {
    const float *b[4] = {y, NULL, NULL, NULL};
    dot_q8_0_f32_n(x, b, 1, n / QK8_0, s);
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

MS_DECL_DOT(mxfp4, q8_0, avx512) {
    const block_q8_0 *b[4] = {y, NULL, NULL, NULL};
    dot_w32_q8_0_n(x, b, 1, n / QK_MXFP4, true, s);
}

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
 * identical in both forms). The Q8_0 and MXFP4 dots go further: single and
 * four-token entries are one forced-inline body (MS_XN), instantiated for
 * one and for four tokens. */

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

MS_DECL_DOT_X4(q8_0, q8_0, avx512) {
    const block_q8_0 *b[4] = {y[0], y[1], y[2], y[3]};
    dot_q8_0_q8_0_n(x, b, 4, n / QK8_0, s);
}

MS_DECL_DOT_X4(mxfp4, q8_0, avx512) {
    const block_q8_0 *b[4] = {y[0], y[1], y[2], y[3]};
    dot_w32_q8_0_n(x, b, 4, n / QK_MXFP4, true, s);
}

MS_DECL_DOT_X4(q8_0, f32, avx512) {
    const float *b[4] = {y[0], y[1], y[2], y[3]};
    dot_q8_0_f32_n(x, b, 4, n / QK8_0, s);
}

/* ---- token-lane GEMM (prefill): Q8_0 rows x 16 packed Q8_0 tokens
 *
 * Tokens in the 32-bit lanes (block_q8_0x16): four weights of the row are
 * broadcast to every lane and one vpdpbusd adds each token's four products
 * into int32. vpdpbusd multiplies unsigned by signed bytes, so the weights
 * go in as w + 128 (each broadcast from the block, its top bits flipped by
 * one xor) and the pack's 128 * sum(a) per token is subtracted from the
 * block's sum: exact for any int8 weight and activation. The flipped block
 * used to be stored and the broadcasts loaded from that copy, which made
 * them wait on its store: 2048 x 4096 against 512 tokens on Zen 4, 184-188
 * -> 201-205 GFLOPS (bench_kernels -t 1 --batches 512 --working-set 0,
 * three interleaved runs). The Q8_0 x Q16_0 GEMM (quant_q16_avx512.c),
 * which uses each broadcast twice, keeps the copy: with the xor it ran
 * 117-127 against 132-141. The float step is the single kernel's, lane by lane (see
 * dot_q8_0_q8_0_n). Two rows share each activation load, two packs each
 * broadcast (MS_DEFINE_GEMM_Q8_0_X16).
 */
MS_SIMD_INLINE void q8_0_block_x16(const block_q8_0 *const w[2], int64_t i, const block_q8_0x16 *const ab[2],
                                   __m512 acc[2][2], const int R, const int P) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i t[2][2][2];
    for (int k = 0; k < R; k++)
        for (int q = 0; q < P; q++) t[k][q][0] = t[k][q][1] = _mm512_setzero_si512();
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++) {
        __m512i av[2];
        for (int q = 0; q < P; q++) av[q] = load_act512(ab[q]->qs[j]);
        for (int k = 0; k < R; k++) {
            uint32_t wv;
            memcpy(&wv, w[k][i].qs + 4 * j, 4);
            const __m512i wb = _mm512_xor_si512(_mm512_set1_epi32((int)wv), flip);
            for (int q = 0; q < P; q++) t[k][q][j % 2] = _mm512_dpbusd_epi32(t[k][q][j % 2], wb, av[q]);
        }
    }
    for (int q = 0; q < P; q++) {
        const __m512i corr = _mm512_load_si512((const void *)ab[q]->asum128);
        const __m512 da = _mm512_load_ps(ab[q]->d);
        for (int k = 0; k < R; k++) {
            const __m512i sumi = _mm512_sub_epi32(_mm512_add_epi32(t[k][q][0], t[k][q][1]), corr);
            const __m512 d = _mm512_mul_ps(_mm512_set1_ps(fp16_scale(w[k][i].d)), da);
            acc[k][q] = _mm512_add_ps(acc[k][q], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), d));
        }
    }
}

MS_DEFINE_GEMM_Q8_0_X16(ms_gemm_q8_0_q8_0x16_avx512, block_q8_0x16, q8_0_block_x16, 2, 1)

/* ---- token-lane GEMM with f32 activations (exact mode and the dense
 * products fast mode keeps in f32): Q8_0 rows x 16 tokens
 *
 * The AVX-512 set computes these products with the AVX2 kernels
 * (quant_dispatch.c), whose per-token operations this repeats lane by
 * lane, so every output is bit for bit ms_dot_q8_0_f32_avx2's: per block,
 * eight partial sums t_l = w_l x_l + w_{l+8} x_{l+8} + w_{l+16} x_{l+16} +
 * w_{l+24} x_{l+24} (a multiply, then three FMAs), acc_l = fma(d, t_l,
 * acc_l), and at the end hsum256_f32's tree, (acc_0 + acc_4) + (acc_2 +
 * acc_6) + ... With the tokens in lanes (the activations packed [column]
 * [16 tokens] by ms_pack_f32_x16) the eight acc_l are eight registers per
 * row, the weights (converted to f32 once per block) are broadcast from
 * memory, and two rows share each activation load.
 */
MS_SIMD_INLINE void q8_0_f32_block_x16(const block_q8_0 *const w[2], int64_t b, const float *xb, __m512 acc[2][8],
                                       const int R) {
    float wf[2][32] __attribute__((aligned(64)));
    __m512 d[2];
    for (int k = 0; k < R; k++) {
        _mm512_store_ps(wf[k], i8x16_to_ps(_mm_loadu_si128((const __m128i *)w[k][b].qs)));
        _mm512_store_ps(wf[k] + 16, i8x16_to_ps(_mm_loadu_si128((const __m128i *)(w[k][b].qs + 16))));
        d[k] = _mm512_set1_ps(fp16_scale(w[k][b].d));
    }
    _Pragma("GCC unroll 8")
    for (int l = 0; l < 8; l++) {
        const __m512 x0 = _mm512_load_ps(xb + 16 * l), x1 = _mm512_load_ps(xb + 16 * (l + 8));
        const __m512 x2 = _mm512_load_ps(xb + 16 * (l + 16)), x3 = _mm512_load_ps(xb + 16 * (l + 24));
        for (int k = 0; k < R; k++) {
            __m512 t = _mm512_mul_ps(_mm512_set1_ps(wf[k][l]), x0);
            t = _mm512_fmadd_ps(_mm512_set1_ps(wf[k][l + 8]), x1, t);
            t = _mm512_fmadd_ps(_mm512_set1_ps(wf[k][l + 16]), x2, t);
            t = _mm512_fmadd_ps(_mm512_set1_ps(wf[k][l + 24]), x3, t);
            acc[k][l] = _mm512_fmadd_ps(d[k], t, acc[k][l]);
        }
    }
}

/* hsum256_f32's tree, lane by lane: (a0 + a4) + (a2 + a6), (a1 + a5) + (a3 + a7), then their sum */
static inline __m512 hsum8_lanes(const __m512 a[8]) {
    const __m512 s0 = _mm512_add_ps(a[0], a[4]), s1 = _mm512_add_ps(a[1], a[5]);
    const __m512 s2 = _mm512_add_ps(a[2], a[6]), s3 = _mm512_add_ps(a[3], a[7]);
    return _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
}

void ms_gemm_q8_0_f32x16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                size_t w_stride, int64_t n_rows, const void *restrict pack, int nt) {
    const int64_t nb = n / QK8_0;
    const float *x = pack;
    for (int64_t r = 0; r < n_rows; r += 2) {
        const int R = r + 1 < n_rows ? 2 : 1;
        const block_q8_0 *w0 = (const block_q8_0 *)((const char *)w + (size_t)r * w_stride);
        const block_q8_0 *const wr[2] = {w0, R == 2 ? (const block_q8_0 *)((const char *)w0 + w_stride) : w0};
        __m512 acc[2][8];
        for (int k = 0; k < 2; k++)
            for (int l = 0; l < 8; l++) acc[k][l] = _mm512_setzero_ps();
        if (R == 2)
            for (int64_t b = 0; b < nb; b++) q8_0_f32_block_x16(wr, b, x + (size_t)b * QK8_0 * 16, acc, 2);
        else
            for (int64_t b = 0; b < nb; b++) q8_0_f32_block_x16(wr, b, x + (size_t)b * QK8_0 * 16, acc, 1);
        for (int k = 0; k < R; k++) x16_store(y, ldy, r + k, hsum8_lanes(acc[k]), nt);
    }
}

/* ---- token GEMM with f32 activations: F16 and BF16 rows x 16 tokens
 *
 * The AVX-512 set computes F16 and BF16 products with the AVX2 dot
 * (quant_dispatch.c, dot_f32_isa): per row and token two 8-lane
 * accumulators, acc0 over values 16 i + l and acc1 over 16 i + 8 + l (one
 * FMA each per 16 values), then a last 8 values into acc0, then
 * hsum256_f32(acc0 + acc1), then the last n % 8 values one by one. One
 * 512-bit register holds both accumulators: its lane l < 8 is acc0's lane
 * l and lane 8 + l is acc1's, so an FMA of 16 consecutive weights with 16
 * consecutive activations is both of the dot's FMAs, a last 8 values go to
 * lanes 0-7 (masked, the others kept as they are), and the reduction and
 * tail are the dot's: every output is ms_dot_f16_f32_avx2's (or bf16's)
 * bit for bit.
 *
 * The x4 dot this replaces in prefill loads four activation vectors and a
 * weight vector for four FMAs. Here a 4 x 4 block of rows and tokens keeps
 * 16 accumulators in registers, and each 16 values take 4 weight
 * conversions and 4 activation loads for 16 FMAs. The tokens are read
 * where they are (struct ms_f32_rows, no copy): a prefill's activations
 * are megabytes a matmul, and a packed copy would be a serial pass over
 * them before every F16 product.
 */

/* 16 (or, masked, 8) F16 / BF16 values at p as f32. */
MS_SIMD_INLINE __m512 half16_ps(const uint16_t *p, const bool bf16) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

MS_SIMD_INLINE __m512 half8_ps(const uint16_t *p, const bool bf16) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_castsi128_si256(h)), 16));
    return _mm512_castps256_ps512(_mm256_cvtph_ps(h));
}

/* Columns [c0, c1) (multiples of 16) of rows w[0 .. R) x tokens x[0 .. T)
 * (R, T <= 4, constants) into their accumulators acc[k][t]: the dot's
 * 16-value steps. */
MS_SIMD_INLINE void half_f32_steps(int64_t c0, int64_t c1, const uint16_t *const w[4], const float *const x[4],
                                   __m512 *acc, const int R, const int T, const bool bf16) {
    __m512 a[4][4];
    for (int k = 0; k < R; k++)
        for (int t = 0; t < T; t++) a[k][t] = acc[4 * k + t];
    for (int64_t i = c0; i < c1; i += 16) {
        __m512 wv[4];
        for (int k = 0; k < R; k++) {
            if (i % 32 == 0) prefetch_ahead(w[k] + i, 2);
            wv[k] = half16_ps(w[k] + i, bf16);
        }
        for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_loadu_ps(x[t] + i);
            for (int k = 0; k < R; k++) a[k][t] = _mm512_fmadd_ps(wv[k], xv, a[k][t]);
        }
    }
    for (int k = 0; k < R; k++)
        for (int t = 0; t < T; t++) acc[4 * k + t] = a[k][t];
}

/* The dot's end for rows w[0 .. R) x tokens x[0 .. T) from column n16 (n
 * rounded down to 16): a last 8 values into lanes 0-7, the reduction, the
 * last n % 8 values one by one; y[t * ldy + k] = the result. */
MS_SIMD_INLINE void half_f32_finish(int64_t n, int64_t n16, float *y, int64_t ldy, const uint16_t *const w[4],
                                    const float *const x[4], __m512 *acc, const int R, const int T,
                                    const bool bf16) {
    int64_t i = n16;
    if (i + 8 <= n) {
        for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_castps256_ps512(_mm256_loadu_ps(x[t] + i));
            for (int k = 0; k < R; k++)
                acc[4 * k + t] = _mm512_mask3_fmadd_ps(half8_ps(w[k] + i, bf16), xv, acc[4 * k + t], 0x00ff);
        }
        i += 8;
    }
    for (int k = 0; k < R; k++)
        for (int t = 0; t < T; t++) {
            const __m512 a = acc[4 * k + t];
            float sum = hsum256_f32(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
            for (int64_t j = i; j < n; j++)
                sum += (bf16 ? ms_bf16_to_f32_inline(w[k][j]) : ms_fp16_to_f32_inline(w[k][j])) * x[t][j];
            y[t * ldy + k] = sum;
        }
}

/* Rows and tokens a call keeps accumulators for: HALF_ROWS rows x 4
 * tokens, 8 KiB on the stack. */
#define HALF_ROWS 32
/* Columns a pass: four tokens' activations of a pass (16 KiB) stay in L1
 * while every row of the group streams its share past them. */
#define HALF_COLS 1024

/* Rows [r0, r0 + nr) (nr <= HALF_ROWS) x tokens x[0 .. T), T a constant. */
MS_SIMD_INLINE void half_f32_group(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int64_t r0,
                                   int64_t nr, const float *const x[4], const int T, const bool bf16) {
    __m512 acc[HALF_ROWS * 4];
    for (int64_t k = 0; k < 4 * nr; k++) acc[k] = _mm512_setzero_ps();
    const int64_t n16 = n / 16 * 16;
    for (int pass = 0;; pass++) {
        const int64_t c0 = pass * (int64_t)HALF_COLS;
        const int64_t c1 = c0 + HALF_COLS < n16 ? c0 + HALF_COLS : n16;
        const bool last = c1 == n16;
        for (int64_t r = 0; r < nr; r += 4) {
            const int R = nr - r < 4 ? (int)(nr - r) : 4;
            const uint16_t *wr[4];
            for (int k = 0; k < 4; k++)
                wr[k] = (const uint16_t *)((const char *)w + (size_t)(r0 + r + (k < R ? k : 0)) * w_stride);
            __m512 *a = acc + 4 * r;
            float *yr = y + r0 + r;
#define HALF_R(RR)                                                                                                 do {                                                                                                               if (c1 > c0) half_f32_steps(c0, c1, wr, x, a, RR, T, bf16);                                                    if (last) half_f32_finish(n, n16, yr, ldy, wr, x, a, RR, T, bf16);                                         } while (0)
            switch (R) {
            case 1: HALF_R(1); break;
            case 2: HALF_R(2); break;
            case 3: HALF_R(3); break;
            default: HALF_R(4); break;
            }
#undef HALF_R
        }
        if (last) break;
    }
}

/* Four tokens at a time against every row, HALF_ROWS rows a group, in
 * passes of HALF_COLS columns. */
MS_SIMD_INLINE void gemm_half_f32(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int64_t n_rows,
                                  const void *pack, int nt, const bool bf16) {
    const struct ms_f32_rows *xr = pack;
    for (int t0 = 0; t0 < nt; t0 += 4) {
        const float *x[4];
        for (int t = 0; t < 4; t++)
            x[t] = (const float *)((const char *)xr->x + (size_t)(t0 + t < nt ? t0 + t : t0) * xr->stride);
        float *yt = y + (size_t)t0 * (size_t)ldy;
        for (int64_t r0 = 0; r0 < n_rows; r0 += HALF_ROWS) {
            const int64_t nr = n_rows - r0 < HALF_ROWS ? n_rows - r0 : HALF_ROWS;
            switch (nt - t0 < 4 ? nt - t0 : 4) {
            case 1: half_f32_group(n, yt, ldy, w, w_stride, r0, nr, x, 1, bf16); break;
            case 2: half_f32_group(n, yt, ldy, w, w_stride, r0, nr, x, 2, bf16); break;
            case 3: half_f32_group(n, yt, ldy, w, w_stride, r0, nr, x, 3, bf16); break;
            default: half_f32_group(n, yt, ldy, w, w_stride, r0, nr, x, 4, bf16); break;
            }
        }
    }
}

void ms_gemm_f16_f32x16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w, size_t w_stride,
                               int64_t n_rows, const void *restrict pack, int nt) {
    gemm_half_f32(n, y, ldy, w, w_stride, n_rows, pack, nt, false);
}

void ms_gemm_bf16_f32x16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                size_t w_stride, int64_t n_rows, const void *restrict pack, int nt) {
    gemm_half_f32(n, y, ldy, w, w_stride, n_rows, pack, nt, true);
}
