/*
 * quant_q16_ref.c - Q16_0, moestream's 16-bit integer activation format
 * (block_q16_0, blocks.h), and its dot with Q8_0 weights: the scalar
 * reference, which is also the specification the AVX2 and AVX-512 kernels
 * equal bit for bit (quant_q16_avx2.c, quant_q16_avx512.c).
 *
 * Why a format of our own: fast mode keeps the attention queries/keys, the
 * shared expert and the other small dense products off int8 activations,
 * which measurably move the output (docs/model.md, "Numerics and modes"),
 * and f32 dots run at a fraction of the int8 ones. 16-bit integers per
 * 32-element block keep ~15 significant bits (the quantization error is at
 * most 1.5e-5 of the block's largest magnitude) and let the products run on
 * integer multiply-adds: pmaddwd pairs of int16 on AVX2, VNNI byte dots of
 * the two halves on AVX-512.
 *
 * Numerics (every form, every kernel set):
 *   quantize   amax = max |x_j| over the block; d = amax / MS_Q16_QMAX;
 *              q_j = nearest-even(x_j / d) clamped to +-MS_Q16_QMAX
 *              (q = 0 when d = 0); a block with a NaN gets d = NaN, q = 0,
 *              so a NaN activation still gives a NaN product
 *   dot        sumi_i = sum_j w_ij q_ij, exact in int32 (|sumi| < 2^27);
 *              acc[i % 4] += (float)sumi_i * (fp16(d_w,i) * d_a,i) in block
 *              order (a multiply, then an add: no FMA); the result is
 *              (acc[0] + acc[2]) + (acc[1] + acc[3]), the order the AVX-512
 *              Q8_0 x Q8_0 dot uses, which a token-lane GEMM can keep.
 */
#include <math.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_basic.h"
#include "quant/quant_impl.h"

MS_DECL_QUANT(q16_0, ref) {
    block_q16_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *xb = x + i * QK8_0;
        float amax = 0.0f;
        bool nan = false;
        for (int j = 0; j < QK8_0; j++) {
            const float a = fabsf(xb[j]);
            nan |= a != a;
            if (a > amax) amax = a;
        }
        const float d = nan ? NAN : amax / (float)MS_Q16_QMAX;
        b[i].d = d;
        for (int j = 0; j < QK8_0; j++) {
            /* a division, not x * (1 / d): 1 / d overflows for a normal d
             * below 3e-39 (amax < 1e-34), and x / d is at most QMAX */
            float v = nan || d == 0.0f ? 0.0f : xb[j] / d; /* NaN only for inf / inf */
            if (v != v) v = 0.0f;
            v = fminf(fmaxf(v, -(float)MS_Q16_QMAX), (float)MS_Q16_QMAX);
            b[i].qs[j] = (int16_t)lrintf(v);
        }
    }
}

MS_DECL_DOT(q8_0, q16_0, ref) {
    const block_q8_0 *w = x;
    const block_q16_0 *a = y;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += (int32_t)w[i].qs[j] * (int32_t)a[i].qs[j];
        const float d = ms_fp16_to_f32_inline(w[i].d) * a[i].d;
        acc[i % 4] += (float)sumi * d;
    }
    *s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

/* Q16_0 rows -> block_q16_0x16. q = 256 hi + lo with lo in [-128, 127]:
 * hi = (q + 128) >> 8, an arithmetic shift (q + 128 <= 32767 fits int16:
 * MS_Q16_QMAX is chosen so), lo = q - 256 hi. Each token's block is split
 * in a straight loop the compiler vectorizes, then its 4-byte groups go to
 * their lanes. */
void ms_pack_q16_0_x16(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    block_q16_0x16 *o = dst;
    for (int t = 0; t < 16; t++) {
        const block_q16_0 *row = (const block_q16_0 *)((const char *)a + (size_t)(t < nt ? t : nt - 1) * a_stride);
        for (int64_t i = 0; i < n / QK8_0; i++) {
            const block_q16_0 *b = &row[i];
            int8_t hi[QK8_0], lo[QK8_0];
            int32_t sum = 0;
            for (int j = 0; j < QK8_0; j++) {
                const int16_t q = b->qs[j];
                const int16_t h = (int16_t)((int16_t)(q + 128) >> 8);
                hi[j] = (int8_t)h;
                lo[j] = (int8_t)(q - 256 * h);
                sum += q;
            }
            for (int j = 0; j < 8; j++) {
                memcpy(&o[i].hi[j][4 * t], hi + 4 * j, 4);
                memcpy(&o[i].lo[j][4 * t], lo + 4 * j, 4);
            }
            o[i].qsum128[t] = 128 * sum;
            o[i].d[t] = b->d;
        }
    }
}

/* Q16_0 rows -> block_q16_0x8: each token's values in pairs, pair j of
 * token t in the 32-bit lane t of qs[j] (the order pmaddwd multiplies a
 * broadcast pair of weights in). */
void ms_pack_q16_0_x8(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    block_q16_0x8 *o = dst;
    for (int t = 0; t < 8; t++) {
        const block_q16_0 *row = (const block_q16_0 *)((const char *)a + (size_t)(t < nt ? t : nt - 1) * a_stride);
        for (int64_t i = 0; i < n / QK8_0; i++) {
            for (int j = 0; j < QK8_0 / 2; j++) memcpy(&o[i].qs[j][2 * t], &row[i].qs[2 * j], 2 * sizeof(int16_t));
            o[i].d[t] = row[i].d;
        }
    }
}
