/*
 * quant_basic_ref.c - scalar reference kernels for F32, F16, BF16, Q8_0 and
 * MXFP4 (the specification the AVX2 / AVX-512 versions are tested against).
 *
 * Layouts and formulas are ggml's (ggml-common.h block structs,
 * ggml-quants.c quantize_row_*_ref / dequantize_row_*, ggml-cpu quants.c
 * vec_dot_*_generic):
 *   Q8_0   x[j] = fp16(d) * qs[j]
 *   MXFP4  x[j] = kvalues_mxfp4[code_j] * 2^(e-128); code_j is the low
 *          nibble of qs[j] for j < 16 and the high nibble of qs[j-16] after
 * Dot products accumulate in double here (the fast kernels use f32 lanes and
 * are compared with a rounding-error bound); quantized dots multiply each
 * block's exact integer sum by its f32 scale product, as ggml does.
 * Every n is a multiple of the format's block size (callers check).
 */
#include <math.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_basic.h"
#include "quant/quant_impl.h"

/* ---- f32 ---------------------------------------------------------------- */

MS_DECL_DOT(f32, f32, ref) {
    const float *a = x, *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)a[i] * (double)b[i];
    *s = (float)sum;
}

/* ---- f16 ---------------------------------------------------------------- */

MS_DECL_DEQUANT(f16, ref) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = ms_fp16_to_f32_inline(h[i]);
}

MS_DECL_QUANT(f16, ref) {
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = ms_fp16_from_f32_inline(x[i]);
}

MS_DECL_DOT(f16, f16, ref) {
    const uint16_t *a = x, *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)ms_fp16_to_f32_inline(a[i]) * (double)ms_fp16_to_f32_inline(b[i]);
    *s = (float)sum;
}

MS_DECL_DOT(f16, f32, ref) {
    const uint16_t *a = x;
    const float *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)ms_fp16_to_f32_inline(a[i]) * (double)b[i];
    *s = (float)sum;
}

/* ---- bf16 --------------------------------------------------------------- */

MS_DECL_DEQUANT(bf16, ref) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = ms_bf16_to_f32_inline(h[i]);
}

MS_DECL_QUANT(bf16, ref) {
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = ms_bf16_from_f32_inline(x[i]);
}

MS_DECL_DOT(bf16, bf16, ref) {
    const uint16_t *a = x, *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)ms_bf16_to_f32_inline(a[i]) * (double)ms_bf16_to_f32_inline(b[i]);
    *s = (float)sum;
}

MS_DECL_DOT(bf16, f32, ref) {
    const uint16_t *a = x;
    const float *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)ms_bf16_to_f32_inline(a[i]) * (double)b[i];
    *s = (float)sum;
}

/* ---- q8_0 --------------------------------------------------------------- */

MS_DECL_DEQUANT(q8_0, ref) {
    const block_q8_0 *b = x;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = ms_fp16_to_f32_inline(b[i].d);
        for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = d * (float)b[i].qs[j];
    }
}

/* ggml's quantize_row_q8_0_ref: d = amax / 127 (stored as fp16), q =
 * roundf(x * (1/d)) with the f32 d, ties away from zero. Two guards ggml
 * lacks, so hostile input cannot reach an undefined float->int conversion:
 * NaN elements are skipped by amax and quantize to 0. (With an infinite
 * element d = inf, 1/d = 0, and that element gives NaN -> 0.) */
MS_DECL_QUANT(q8_0, ref) {
    block_q8_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *xb = x + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) {
            const float a = fabsf(xb[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = ms_fp16_from_f32_inline(d);
        for (int j = 0; j < QK8_0; j++) {
            float v = xb[j] * id;
            if (v != v) v = 0.0f;
            b[i].qs[j] = (int8_t)roundf(v); /* |v| <= 127 (+ rounding) */
        }
    }
}

/* The activation must come from ms_quant_q8_0 (values in [-127, 127]); the
 * SIMD versions rely on it (ggml makes the same assumption). */
MS_DECL_DOT(q8_0, q8_0, ref) {
    const block_q8_0 *a = x, *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += (int32_t)a[i].qs[j] * (int32_t)b[i].qs[j];
        const float d = ms_fp16_to_f32_inline(a[i].d) * ms_fp16_to_f32_inline(b[i].d);
        sum += (double)((float)sumi * d);
    }
    *s = (float)sum;
}

void ms_pack_f32_x16(int64_t n, const float *restrict x, size_t x_stride, int nt, float *restrict dst) {
    for (int t = 0; t < 16; t++) {
        const float *xt = (const float *)((const char *)x + (size_t)(t < nt ? t : nt - 1) * x_stride);
        for (int64_t c = 0; c < n; c++) dst[16 * c + t] = xt[c];
    }
}

void ms_pack_f32_rows(int64_t n, const void *restrict x, size_t x_stride, int nt, void *restrict dst) {
    (void)n, (void)nt;
    const struct ms_f32_rows r = {.x = x, .stride = x_stride};
    memcpy(dst, &r, sizeof r);
}

/* Q8_0 rows packed for the AVX2 token-lane GEMM, widened to int16 in
 * Q16_0's 8-lane layout (block_q16_0x8, blocks.h) with each scale as f32
 * (exact): the Q8_0 x Q16_0 GEMM then computes the Q8_0 x Q8_0 dot of that
 * set. Spare lanes repeat the last token. */
void ms_pack_q8_0_x8(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    block_q16_0x8 *o = dst;
    for (int t = 0; t < 8; t++) {
        const block_q8_0 *row = (const block_q8_0 *)((const char *)a + (size_t)(t < nt ? t : nt - 1) * a_stride);
        for (int64_t i = 0; i < n / QK8_0; i++) {
            for (int j = 0; j < QK8_0; j++) o[i].qs[j / 2][2 * t + j % 2] = row[i].qs[j];
            o[i].d[t] = ms_fp16_to_f32_inline(row[i].d);
        }
    }
}

/* Q8_0 rows packed for the token-lane GEMM (block_q8_0x16, blocks.h); spare
 * lanes repeat the last token. */
void ms_pack_q8_0_x16(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    block_q8_0x16 *o = dst;
    for (int64_t i = 0; i < n / QK8_0; i++)
        for (int t = 0; t < 16; t++) {
            const block_q8_0 *b = (const block_q8_0 *)((const char *)a + (size_t)(t < nt ? t : nt - 1) * a_stride) + i;
            int32_t sum = 0;
            for (int j = 0; j < QK8_0; j++) sum += b->qs[j];
            for (int j = 0; j < 8; j++) memcpy(&o[i].qs[j][4 * t], b->qs + 4 * j, 4);
            o[i].asum128[t] = 128 * sum;
            o[i].d[t] = ms_fp16_to_f32_inline(b->d);
        }
}

MS_DECL_DOT(q8_0, f32, ref) {
    const block_q8_0 *a = x;
    const float *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = ms_fp16_to_f32_inline(a[i].d);
        for (int j = 0; j < QK8_0; j++)
            sum += (double)(d * (float)a[i].qs[j]) * (double)b[i * QK8_0 + j];
    }
    *s = (float)sum;
}

/* ---- mxfp4 -------------------------------------------------------------- */

MS_DECL_DEQUANT(mxfp4, ref) {
    const block_mxfp4 *b = x;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const float d = ms_e8m0_to_f32_half(b[i].e);
        float *yb = y + i * QK_MXFP4;
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            yb[j] = d * (float)ms_kvalues_mxfp4[b[i].qs[j] & 0x0f];
            yb[j + QK_MXFP4 / 2] = d * (float)ms_kvalues_mxfp4[b[i].qs[j] >> 4];
        }
    }
}

/* Nearest table value to x at scale d; on a tie the lower code wins (ggml's
 * best_index_mxfp4 scans codes in order with a strict <). */
static int mxfp4_best_code(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)ms_kvalues_mxfp4[0] * d - x);
    for (int k = 1; k < 16; k++) {
        const float err = fabsf((float)ms_kvalues_mxfp4[k] * d - x);
        if (err < best_err) {
            best = k;
            best_err = err;
        }
    }
    return best;
}

/* ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (so amax
 * lands in the top binade of E2M1, [4, 8) times 2^(e-127)), then each element
 * takes the nearest E2M1 value. ggml converts that float to uint8 unchecked;
 * here it is clamped to [0, 255] (only reachable for amax < 2^-125 or inf),
 * and NaN elements are skipped by amax and encode as code 0. */
MS_DECL_QUANT(mxfp4, ref) {
    block_mxfp4 *b = y;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const float *xb = x + i * QK_MXFP4;
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++) {
            const float a = fabsf(xb[j]);
            if (amax < a) amax = a;
        }
        uint8_t e = 0;
        if (amax > 0.0f) {
            const float ef = floorf(log2f(amax)) - 2.0f + 127.0f;
            e = ef <= 0.0f ? 0 : ef >= 255.0f ? 255 : (uint8_t)ef;
        }
        const float d = ms_e8m0_to_f32_half(e);
        b[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            const int lo = mxfp4_best_code(xb[j], d);
            const int hi = mxfp4_best_code(xb[j + QK_MXFP4 / 2], d);
            b[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

MS_DECL_DOT(mxfp4, q8_0, ref) {
    const block_mxfp4 *a = x;
    const block_q8_0 *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            sumi += ms_kvalues_mxfp4[a[i].qs[j] & 0x0f] * b[i].qs[j];
            sumi += ms_kvalues_mxfp4[a[i].qs[j] >> 4] * b[i].qs[j + QK_MXFP4 / 2];
        }
        const float d = ms_e8m0_to_f32_half(a[i].e) * ms_fp16_to_f32_inline(b[i].d);
        sum += (double)((float)sumi * d);
    }
    *s = (float)sum;
}

MS_DECL_DOT(mxfp4, f32, ref) {
    const block_mxfp4 *a = x;
    const float *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const float d = ms_e8m0_to_f32_half(a[i].e);
        const float *yb = b + i * QK_MXFP4;
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            sum += (double)(d * (float)ms_kvalues_mxfp4[a[i].qs[j] & 0x0f]) * (double)yb[j];
            sum += (double)(d * (float)ms_kvalues_mxfp4[a[i].qs[j] >> 4]) * (double)yb[j + QK_MXFP4 / 2];
        }
    }
    *s = (float)sum;
}
