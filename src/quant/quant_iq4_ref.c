/*
 * quant_iq4_ref.c - scalar reference kernels for IQ4_XS weights:
 * dequantize, the dot with Q8_K activations, the dot with f32 activations
 * and the quantizer from f32. These are the specification that the AVX2 /
 * AVX-512 kernels (quant_iq4_avx2.c, quant_iq4_avx512.c) are tested
 * against; the element layout and the value table are in quant_iq4.h.
 *
 * Format (ggml's ggml-quants.c, dequantize_row_iq4_xs):
 *   x = d * (ls - 32) * table[q]   ls 6 bits a sub-block of 32, q 4 bits,
 *                                  d the block's fp16 scale.
 */
#include <math.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "quant/quant_iq4.h"

/* Each value is d times the exact integer (ls - 32) * table[q] (at most
 * 32 * 127 in magnitude, exact in f32): one rounding per value. (ggml
 * rounds twice, (d * (ls - 32)) * table[q]; the two differ by at most an
 * ulp.) */
MS_DECL_DEQUANT(iq4_xs, ref) {
    const block_iq4_xs *b = x;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d);
        for (int e = 0; e < QK_K; e++)
            y[e] = d * (float)(ms_iq4xs_scale(&b[i], e / 32) * ms_kvalues_iq4nl[ms_iq4xs_code(&b[i], e)]);
        y += QK_K;
    }
}

/* The dot with Q8_K activations (fast mode). Per block, exact in int32:
 *   isum = sum_s (ls_s - 32) * sum_{l<32} table[q[32 s + l]] * a[32 s + l]
 * (|isum| <= 8 * 32 * 32 * 127 * 128 < 2^28). Then one float step per
 * block, in block order from sumf = 0:
 *   sumf += (ad * d) * (float)isum    (ms_iq4xs_block_sum)
 * with ad the activation block's f32 scale and d the weight block's. This
 * order is the specification: every SIMD form (single, four-token,
 * many-rows) computes the same integers and repeats these float
 * operations bit for bit. */
MS_DECL_DOT(iq4_xs, q8_K, ref) {
    const block_iq4_xs *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t isum = 0;
        for (int sb = 0; sb < QK_K / 32; sb++) {
            int32_t ss = 0;
            for (int l = 0; l < 32; l++)
                ss += ms_kvalues_iq4nl[ms_iq4xs_code(&w[i], 32 * sb + l)] * a[i].qs[32 * sb + l];
            isum += ms_iq4xs_scale(&w[i], sb) * ss;
        }
        sumf += ms_iq4xs_block_sum(a[i].d, ms_fp16_to_fp32(w[i].d), isum);
    }
    *s = sumf;
}

/* The dot with f32 activations (exact mode): quant_impl.h's MS_DEFINE_DOT_F32_REF. */
MS_DEFINE_DOT_F32_REF(iq4_xs, block_iq4_xs)

/* ---- quantizer */

/* The table index whose level is nearest to v (levels in units of the
 * scale); on a tie the lower index. A NaN v compares false everywhere and
 * gets index 0. */
static int iq4_best_index(float v) {
    int best = 0;
    float best_err = fabsf(v - (float)ms_kvalues_iq4nl[0]);
    for (int k = 1; k < 16; k++) {
        const float err = fabsf(v - (float)ms_kvalues_iq4nl[k]);
        if (err < best_err) best = k, best_err = err;
    }
    return best;
}

/* One sub-block's best scale for weights w (the method of ggml's
 * quantize_row_iq4_nl_impl): the scale that maps the value of largest
 * magnitude to 127 (nearest level 113), then 2 ntry + 1 more
 * candidate inverse scales (itry + table[0]) / max; each candidate's
 * indices are the nearest levels, and its least-squares scale sum w x q /
 * sum w q^2 is kept where it lowers the weighted squared error (raises
 * (sum w x q)^2 / sum w q^2). Returns 0 for an all-zero (or all tiny)
 * sub-block. */
static float iq4_sub_scale(const float *x, const float *w, int len, int ntry) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < len; j++) {
        const float a = fabsf(x[j]);
        if (amax < a) amax = a, max = x[j];
    }
    if (!(amax > 1e-15f)) return 0.0f;
    float best_d = 0.0f, best = 0.0f;
    for (int itry = -ntry - 1; itry <= ntry; itry++) {
        /* itry = -ntry - 1 is the first guess, max -> 127 */
        const float id = itry < -ntry ? -(float)ms_kvalues_iq4nl[0] / max : ((float)itry + ms_kvalues_iq4nl[0]) / max;
        float sumqx = 0.0f, sumq2 = 0.0f;
        for (int j = 0; j < len; j++) {
            const float q = (float)ms_kvalues_iq4nl[iq4_best_index(id * x[j])];
            sumqx += w[j] * q * x[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0.0f && (best_d == 0.0f ? 1 : sumqx * sumqx > best * sumq2)) {
            best_d = sumqx / sumq2;
            best = best_d * sumqx;
        }
    }
    return best_d;
}

/* IQ4_XS from f32, a block at a time (the method of ggml's quantize_iq4_xs
 * without importance weights): each sub-block's own best scale
 * (iq4_sub_scale, weights x^2, 7 tries each way), then the block scale d
 * = -(largest-magnitude sub-block scale) / 32, each sub-block's ls - 32 =
 * nearest(scale / d) in [-32, 31], and every index the nearest level at
 * the stored scale fp16(d) * (ls - 32). Deterministic; a block of zeros
 * gives zeros; a NaN or infinity spoils only its own block. */
MS_DECL_QUANT(iq4_xs, ref) {
    block_iq4_xs *b = y;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *xb = x + i * QK_K;
        float w[32], scales[QK_K / 32], max_scale = 0.0f, amax_scale = 0.0f;
        for (int s = 0; s < QK_K / 32; s++) {
            for (int j = 0; j < 32; j++) w[j] = xb[32 * s + j] * xb[32 * s + j];
            scales[s] = iq4_sub_scale(xb + 32 * s, w, 32, 7);
            if (fabsf(scales[s]) > amax_scale) amax_scale = fabsf(scales[s]), max_scale = scales[s];
        }
        memset(&b[i], 0, sizeof b[i]);
        if (!(amax_scale > 0.0f)) {
            /* every ls - 32 = 0: the block decodes to zeros */
            b[i].scales_h = 0xaaaa; /* ls = 32: low nibbles 0, high bits 2 */
            continue;
        }
        const float d = -max_scale / 32.0f, id = 1.0f / d;
        b[i].d = ms_fp32_to_fp16(d);
        const float ds = ms_fp16_to_fp32(b[i].d);
        for (int s = 0; s < QK_K / 32; s++) {
            const int l = ms_clampi(ms_nearest_int(id * scales[s]), -32, 31);
            b[i].scales_l[s / 2] |= (uint8_t)(((l + 32) & 0x0f) << (4 * (s % 2)));
            b[i].scales_h |= (uint16_t)(((l + 32) >> 4) << (2 * s));
            const float dl = ds * (float)l, idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int j = 0; j < 16; j++) {
                const int lo = iq4_best_index(idl * xb[32 * s + j]);
                const int hi = iq4_best_index(idl * xb[32 * s + 16 + j]);
                b[i].qs[16 * s + j] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}
