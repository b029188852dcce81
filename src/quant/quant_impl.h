/*
 * quant_impl.h - internal: the per-format kernels behind the traits table.
 *
 * Naming: ms_<op>_<weight>[_<activation>]_<isa>, isa in {ref, avx2, avx512}.
 *   dequant  (to_float)      void (const void *x, float *y, int64_t n)
 *   quant    (from_float)    void (const float *x, void *y, int64_t n)
 *   dot      (vec_dot)       void (int64_t n, float *s, const void *w, const void *a)
 * n is a multiple of the format's block size. The ref versions are the
 * specification; the SIMD versions must agree with them (tests/test_quant.c).
 * Only quant/ includes this header.
 */
#ifndef MS_QUANT_IMPL_H
#define MS_QUANT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MS_DECL_DEQUANT(fmt, isa) void ms_dequant_##fmt##_##isa(const void *restrict x, float *restrict y, int64_t n)
#define MS_DECL_QUANT(fmt, isa) void ms_quant_##fmt##_##isa(const float *restrict x, void *restrict y, int64_t n)
#define MS_DECL_DOT(w, a, isa) void ms_dot_##w##_##a##_##isa(int64_t n, float *restrict s, const void *restrict x, const void *restrict y)
/* Four-token form (ms_vec_dot_x4_fn): s[k] = ms_dot_<w>_<a>_<isa>(x, y[k]), bit for bit. */
/* The many-rows form of a single-token dot (ms_vec_dot_rows_fn), where one
 * exists: quant_simd.h's MS_DEFINE_DOT_ROWS or a kernel of its own. */
#define MS_DECL_DOT_ROWS(w, a, isa)                                                                      \
    void ms_dot_rows_##w##_##a##_##isa(int64_t n, float *restrict s, const void *restrict x, size_t x_stride, \
                                       int64_t n_rows, const void *restrict y)
/* The many-rows form for up to four tokens (ms_vec_dot_rows_n_fn). */
#define MS_DECL_DOT_ROWS_N(w, a, isa)                                                                      \
    void ms_dot_rows_n_##w##_##a##_##isa(int64_t n, float *restrict s, int64_t lds, const void *restrict x, \
                                         size_t x_stride, int64_t n_rows, const void *const *y, int nt)
#define MS_DECL_DOT_X4(w, a, isa) \
    void ms_dot_##w##_##a##_x4_##isa(int64_t n, float *restrict s, const void *restrict x, const void *const y[4])

/* The scalar dot of a QK_K-block format fmt (block type blk) with f32
 * activations, the reference every SIMD f32 dot is held to: each block
 * dequantized to the stack by ms_dequant_<fmt>_ref, its QK_K products
 * summed in f32 in element order from 0.0f, and that block sum added to
 * the running sum (from 0.0f, blocks in order). One definition for every
 * K-quant, so they all round the same way. */
#define MS_DEFINE_DOT_F32_REF(fmt, blk)                                           \
    MS_DECL_DOT(fmt, f32, ref) {                                                  \
        const blk *w = x;                                                         \
        const float *a = y;                                                       \
        float tmp[QK_K], sum = 0.0f;                                              \
        for (int64_t i = 0; i < n / QK_K; i++) {                                  \
            ms_dequant_##fmt##_ref(&w[i], tmp, QK_K);                             \
            float bs = 0.0f;                                                      \
            for (int j = 0; j < QK_K; j++) bs += tmp[j] * a[i * QK_K + j];        \
            sum += bs;                                                            \
        }                                                                         \
        *s = sum;                                                                 \
    }

/* Round to nearest, ties to even, for |f| < 2^22 (values beyond come out
 * wrong but finite; callers clamp): the K-quant quantizers' rounding.
 * Bit arithmetic only (adding 1.5 * 2^23 leaves the integer in the low
 * mantissa bits), so a NaN or infinite input cannot trap or be undefined
 * behaviour. */
static inline int ms_nearest_int(float f) {
    const float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* v clamped to [lo, hi] (lo <= hi). */
static inline int ms_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- f32 / f16 / bf16 / q8_0 / mxfp4 / q8_0 activations (quant_basic*.c) */
MS_DECL_DOT(f32, f32, ref);   MS_DECL_DOT(f32, f32, avx2);   MS_DECL_DOT(f32, f32, avx512);
MS_DECL_DEQUANT(f16, ref);    MS_DECL_DEQUANT(f16, avx2);    MS_DECL_DEQUANT(f16, avx512);
MS_DECL_QUANT(f16, ref);      MS_DECL_QUANT(f16, avx2);      MS_DECL_QUANT(f16, avx512);
MS_DECL_DOT(f16, f16, ref);   MS_DECL_DOT(f16, f16, avx2);   MS_DECL_DOT(f16, f16, avx512);
MS_DECL_DOT(f16, f32, ref);   MS_DECL_DOT(f16, f32, avx2);   MS_DECL_DOT(f16, f32, avx512);
MS_DECL_DEQUANT(bf16, ref);   MS_DECL_DEQUANT(bf16, avx2);   MS_DECL_DEQUANT(bf16, avx512);
MS_DECL_QUANT(bf16, ref);     MS_DECL_QUANT(bf16, avx2);     MS_DECL_QUANT(bf16, avx512);
MS_DECL_DOT(bf16, bf16, ref); MS_DECL_DOT(bf16, bf16, avx2); MS_DECL_DOT(bf16, bf16, avx512);
MS_DECL_DOT(bf16, f32, ref);  MS_DECL_DOT(bf16, f32, avx2);  MS_DECL_DOT(bf16, f32, avx512);
MS_DECL_DEQUANT(q8_0, ref);   MS_DECL_DEQUANT(q8_0, avx2);   MS_DECL_DEQUANT(q8_0, avx512);
MS_DECL_QUANT(q8_0, ref);     MS_DECL_QUANT(q8_0, avx2);     MS_DECL_QUANT(q8_0, avx512);
MS_DECL_DOT(q8_0, q8_0, ref); MS_DECL_DOT(q8_0, q8_0, avx2); MS_DECL_DOT(q8_0, q8_0, avx512);
MS_DECL_DOT_ROWS(q8_0, q8_0, avx2); MS_DECL_DOT_ROWS(q8_0, q8_0, avx512);
MS_DECL_DOT(q8_0, f32, ref);  MS_DECL_DOT(q8_0, f32, avx2);  MS_DECL_DOT(q8_0, f32, avx512);
MS_DECL_DEQUANT(mxfp4, ref);  MS_DECL_DEQUANT(mxfp4, avx2);  MS_DECL_DEQUANT(mxfp4, avx512);
MS_DECL_QUANT(mxfp4, ref);
MS_DECL_DOT(mxfp4, q8_0, ref); MS_DECL_DOT(mxfp4, q8_0, avx2); MS_DECL_DOT(mxfp4, q8_0, avx512);
MS_DECL_DOT(mxfp4, f32, ref);  MS_DECL_DOT(mxfp4, f32, avx2);  MS_DECL_DOT(mxfp4, f32, avx512);

/* Q8_0 rows -> block_q8_0x16 (ms_act_pack_fn); plain C, any ISA */
void ms_pack_q8_0_x16(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst);
void ms_pack_q8_0_x8(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst);
void ms_gemm_q8_0_q8_0x16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                 size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);

/* the many-rows Q8_0 dots for up to four tokens (ms_vec_dot_rows_n_fn), AVX-512
 * and AVX2 */
MS_DECL_DOT_ROWS_N(q8_0, q8_0, avx512);
MS_DECL_DOT_ROWS_N(q8_0, q16_0, avx512);
MS_DECL_DOT_ROWS_N(q8_0, q8_0, avx2);
MS_DECL_DOT_ROWS_N(q8_0, q16_0, avx2);

void ms_gemm_q8_0_f32x16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);

/* F16 / BF16 rows x up to 16 tokens read in place (pack: struct
 * ms_f32_rows), each output ms_dot_f16_f32_avx2's / bf16's bit for bit */
void ms_gemm_f16_f32x16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                               size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_bf16_f32x16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);

/* ---- q16_0 activations for q8_0 weights (quant_q16*.c) */
MS_DECL_QUANT(q16_0, ref);      MS_DECL_QUANT(q16_0, avx2);      MS_DECL_QUANT(q16_0, avx512);
MS_DECL_DOT(q8_0, q16_0, ref);  MS_DECL_DOT(q8_0, q16_0, avx2);  MS_DECL_DOT(q8_0, q16_0, avx512);
MS_DECL_DOT_X4(q8_0, q16_0, avx2); MS_DECL_DOT_X4(q8_0, q16_0, avx512);
MS_DECL_DOT_ROWS(q8_0, q16_0, avx2); MS_DECL_DOT_ROWS(q8_0, q16_0, avx512);
void ms_gemm_q8_0_q16_0x8_avx2(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                               size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_q8_0_q16_0x16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                  size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
/* ms_pack_q16_0_x16 (quant.h) in AVX-512, the same bytes */
void ms_pack_q16_0_x16_avx512(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst);

/* ---- four-token dots (SIMD only; the scalar table has none) */
MS_DECL_DOT_X4(f32, f32, avx2);    MS_DECL_DOT_X4(f32, f32, avx512);
MS_DECL_DOT_X4(f16, f32, avx2);    MS_DECL_DOT_X4(f16, f32, avx512);
MS_DECL_DOT_X4(bf16, f32, avx2);   MS_DECL_DOT_X4(bf16, f32, avx512);
MS_DECL_DOT_X4(q8_0, q8_0, avx2);  MS_DECL_DOT_X4(q8_0, q8_0, avx512);
MS_DECL_DOT_X4(q8_0, f32, avx2);   MS_DECL_DOT_X4(q8_0, f32, avx512);
MS_DECL_DOT_X4(mxfp4, q8_0, avx2); MS_DECL_DOT_X4(mxfp4, q8_0, avx512);
MS_DECL_DOT_X4(q4_K, q8_K, avx2);  MS_DECL_DOT_X4(q4_K, q8_K, avx512);
MS_DECL_DOT_X4(q2_K, q8_K, avx2);  MS_DECL_DOT_X4(q2_K, q8_K, avx512);
MS_DECL_DOT_X4(iq2_xxs, q8_K, avx2); MS_DECL_DOT_X4(iq2_xxs, q8_K, avx512);
MS_DECL_DOT_ROWS(q4_K, q8_K, avx2);
MS_DECL_DOT_ROWS(q2_K, q8_K, avx2); MS_DECL_DOT_ROWS(q2_K, q8_K, avx512);
MS_DECL_DOT_ROWS_N(q2_K, q8_K, avx2); MS_DECL_DOT_ROWS_N(q2_K, q8_K, avx512);
MS_DECL_DOT_ROWS(iq2_xxs, q8_K, avx2); MS_DECL_DOT_ROWS(iq2_xxs, q8_K, avx512);
MS_DECL_DOT_ROWS_N(iq2_xxs, q8_K, avx2); MS_DECL_DOT_ROWS_N(iq2_xxs, q8_K, avx512);
/* the many-rows dots for up to four tokens of the other k-quants and
 * IQ4_XS (ms_vec_dot_rows_n_fn): their four-token bodies row by row */
MS_DECL_DOT_ROWS_N(iq4_xs, q8_K, avx2); MS_DECL_DOT_ROWS_N(iq4_xs, q8_K, avx512);
MS_DECL_DOT_ROWS_N(q3_K, q8_K, avx2); MS_DECL_DOT_ROWS_N(q3_K, q8_K, avx512);
MS_DECL_DOT_ROWS_N(q4_K, q8_K, avx2); MS_DECL_DOT_ROWS_N(q4_K, q8_K, avx512);
MS_DECL_DOT_ROWS_N(q5_K, q8_K, avx2); MS_DECL_DOT_ROWS_N(q5_K, q8_K, avx512);
MS_DECL_DOT_ROWS_N(q6_K, q8_K, avx2); MS_DECL_DOT_ROWS_N(q6_K, q8_K, avx512);
/* IQ2_XXS on AVX-512 parts with VBMI (quant_iq2_avx512vbmi.c) */
MS_DECL_DOT(iq2_xxs, q8_K, avx512vbmi); MS_DECL_DOT_X4(iq2_xxs, q8_K, avx512vbmi);
MS_DECL_DOT_ROWS(iq2_xxs, q8_K, avx512vbmi);
MS_DECL_DOT_ROWS_N(iq2_xxs, q8_K, avx512vbmi);
void ms_dot_rows8_iq2_xxs_q8_K_avx512vbmi(int64_t n, float *restrict s, const void *restrict x, size_t x_stride,
                                          int64_t n_rows, const void *restrict y);
void ms_gemm_iq2_xxs_q8_Kx16_avx512vbmi(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                        size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);

/* ---- k-quants, iq2_xxs, q8_K activations (quant_kq*.c) */
MS_DECL_DEQUANT(q8_K, ref);
/* Q8_K rows -> block_q8_Kx8 (ms_act_pack_fn); plain C, any ISA */
void ms_pack_q8_K_x8(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst);
void ms_pack_q8_K_x8w(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst);
void ms_gemm_iq2_xxs_q8_Kx8w_avx2(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                  size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
/* Q8_K rows -> block_q8_Kx16 */
void ms_pack_q8_K_x16(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst);
/* token-lane GEMMs (ms_gemm_tok_fn) */
void ms_gemm_q2_K_q8_Kx8_avx2(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                              size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_q4_K_q8_Kx8_avx2(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                              size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_q4_K_q8_Kx16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                 size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_q2_K_q8_Kx16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                 size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_iq2_xxs_q8_Kx16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                    size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
MS_DECL_QUANT(q8_K, ref);     MS_DECL_QUANT(q8_K, avx2);     MS_DECL_QUANT(q8_K, avx512);
MS_DECL_DEQUANT(q4_K, ref);   MS_DECL_DEQUANT(q4_K, avx2);   MS_DECL_DEQUANT(q4_K, avx512);
MS_DECL_QUANT(q4_K, ref);
MS_DECL_DOT(q4_K, q8_K, ref); MS_DECL_DOT(q4_K, q8_K, avx2); MS_DECL_DOT(q4_K, q8_K, avx512);
MS_DECL_DOT(q4_K, f32, ref);  MS_DECL_DOT(q4_K, f32, avx2);  MS_DECL_DOT(q4_K, f32, avx512);
MS_DECL_DEQUANT(q2_K, ref);   MS_DECL_DEQUANT(q2_K, avx2);   MS_DECL_DEQUANT(q2_K, avx512);
MS_DECL_QUANT(q2_K, ref);
MS_DECL_DOT(q2_K, q8_K, ref); MS_DECL_DOT(q2_K, q8_K, avx2); MS_DECL_DOT(q2_K, q8_K, avx512);
MS_DECL_DOT(q2_K, f32, ref);  MS_DECL_DOT(q2_K, f32, avx2);  MS_DECL_DOT(q2_K, f32, avx512);
MS_DECL_DEQUANT(iq2_xxs, ref); MS_DECL_DEQUANT(iq2_xxs, avx2); MS_DECL_DEQUANT(iq2_xxs, avx512);
MS_DECL_QUANT(iq2_xxs, ref);
MS_DECL_DOT(iq2_xxs, q8_K, ref); MS_DECL_DOT(iq2_xxs, q8_K, avx2); MS_DECL_DOT(iq2_xxs, q8_K, avx512);
MS_DECL_DOT(iq2_xxs, f32, ref);  MS_DECL_DOT(iq2_xxs, f32, avx2);  MS_DECL_DOT(iq2_xxs, f32, avx512);

/* ---- Q5_K and Q3_K weights, q8_K activations (quant_q35k_*.c; quantizers:
 * Q5_K in quant_kq_quantize.c, Q3_K in quant_q35k_ref.c) */
MS_DECL_DEQUANT(q5_K, ref);   MS_DECL_DEQUANT(q5_K, avx2);   MS_DECL_DEQUANT(q5_K, avx512);
MS_DECL_QUANT(q5_K, ref);
MS_DECL_DOT(q5_K, q8_K, ref); MS_DECL_DOT(q5_K, q8_K, avx2); MS_DECL_DOT(q5_K, q8_K, avx512);
MS_DECL_DOT(q5_K, f32, ref);  MS_DECL_DOT(q5_K, f32, avx2);  MS_DECL_DOT(q5_K, f32, avx512);
MS_DECL_DEQUANT(q3_K, ref);   MS_DECL_DEQUANT(q3_K, avx2);   MS_DECL_DEQUANT(q3_K, avx512);
MS_DECL_QUANT(q3_K, ref);
MS_DECL_DOT(q3_K, q8_K, ref); MS_DECL_DOT(q3_K, q8_K, avx2); MS_DECL_DOT(q3_K, q8_K, avx512);
MS_DECL_DOT(q3_K, f32, ref);  MS_DECL_DOT(q3_K, f32, avx2);  MS_DECL_DOT(q3_K, f32, avx512);
MS_DECL_DOT_X4(q5_K, q8_K, avx2); MS_DECL_DOT_X4(q5_K, q8_K, avx512);
MS_DECL_DOT_X4(q3_K, q8_K, avx2); MS_DECL_DOT_X4(q3_K, q8_K, avx512);
MS_DECL_DOT_ROWS(q5_K, q8_K, avx2); MS_DECL_DOT_ROWS(q5_K, q8_K, avx512);
MS_DECL_DOT_ROWS(q3_K, q8_K, avx2); MS_DECL_DOT_ROWS(q3_K, q8_K, avx512);
void ms_gemm_q5_K_q8_Kx16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                 size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_q3_K_q8_Kx16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                 size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_q5_K_q8_Kx8_avx2(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                              size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_q3_K_q8_Kx8_avx2(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                              size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
/* ---- q6_K weights, q8_K activations (quant_q6k*.c) */
MS_DECL_DEQUANT(q6_K, ref);   MS_DECL_DEQUANT(q6_K, avx2);   MS_DECL_DEQUANT(q6_K, avx512);
MS_DECL_QUANT(q6_K, ref);
MS_DECL_DOT(q6_K, q8_K, ref); MS_DECL_DOT(q6_K, q8_K, avx2); MS_DECL_DOT(q6_K, q8_K, avx512);
MS_DECL_DOT_X4(q6_K, q8_K, avx2); MS_DECL_DOT_X4(q6_K, q8_K, avx512);
MS_DECL_DOT_ROWS(q6_K, q8_K, avx2); MS_DECL_DOT_ROWS(q6_K, q8_K, avx512);
MS_DECL_DOT(q6_K, f32, ref);  MS_DECL_DOT(q6_K, f32, avx2);  MS_DECL_DOT(q6_K, f32, avx512);
void ms_gemm_q6_K_q8_Kx8_avx2(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                              size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_q6_K_q8_Kx16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                 size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);

/* ---- iq4_xs weights, q8_K activations (quant_iq4*.c) */
MS_DECL_DEQUANT(iq4_xs, ref);   MS_DECL_DEQUANT(iq4_xs, avx2);   MS_DECL_DEQUANT(iq4_xs, avx512);
MS_DECL_QUANT(iq4_xs, ref);
MS_DECL_DOT(iq4_xs, q8_K, ref); MS_DECL_DOT(iq4_xs, q8_K, avx2); MS_DECL_DOT(iq4_xs, q8_K, avx512);
MS_DECL_DOT_X4(iq4_xs, q8_K, avx2); MS_DECL_DOT_X4(iq4_xs, q8_K, avx512);
MS_DECL_DOT_ROWS(iq4_xs, q8_K, avx2); MS_DECL_DOT_ROWS(iq4_xs, q8_K, avx512);
MS_DECL_DOT(iq4_xs, f32, ref);  MS_DECL_DOT(iq4_xs, f32, avx2);  MS_DECL_DOT(iq4_xs, f32, avx512);
void ms_gemm_iq4_xs_q8_Kx8_avx2(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);
void ms_gemm_iq4_xs_q8_Kx16_avx512(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                                   size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);

#endif
