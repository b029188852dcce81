/*
 * quant_q35k_ref.c - scalar reference kernels for Q5_K and Q3_K weights:
 * dequantization, the dots with Q8_K and with f32 activations, and the
 * Q3_K quantizer (Q5_K's shares Q4_K's fit, quant_kq_quantize.c). These
 * are the specification that the AVX2 / AVX-512 kernels
 * (quant_q35k_avx2.c, quant_q35k_avx512.c) are tested against.
 *
 * Formulas (ggml's ggml-quants.c, dequantize_row_q5_K / _q3_K):
 *   Q5_K  w = d * sc[s] * q - dmin * m[s]   s = sub-block of 32, q in [0, 31]
 *         (Q4_K's scales and nibbles, the fifth bit from qh)
 *   Q3_K  w = d * sc[k] * (q - 4)           k = sub-block of 16, sc in
 *         [-32, 31] (stored + 32, 6 bits), q in [0, 7]: 2 low bits laid out
 *         as Q2_K's, the third from hmask
 *
 * The Q8_K dots sum integer products per block exactly and apply the float
 * scales once per block, in this order (every SIMD form repeats it bit for
 * bit):
 *   Q5_K  sumi = sum_s sc[s] * sum_{j in s} q_j a_j,
 *         summ = sum_s m[s] * (bsums[2 s] + bsums[2 s + 1]),
 *         sumf += ms_kq_block_sum(ad, d, dmin, sumi, summ)   (Q4_K's step:
 *         (ad * d) * sumi - (ad * dmin) * summ)
 *   Q3_K  isum = sum_k sc[k] * (sum_{j in k} q_j a_j - 4 * bsums[k]),
 *         sumf += (ad * d) * (float)isum
 * with ad the activation block's scale and d, dmin the weight block's fp16
 * scales as f32; the sum starts at 0.0f and takes the blocks in order.
 * The integer sums fit int32: Q5_K as Q4_K's (codes < 32), Q3_K at most 16
 * sub-blocks * 32 * (16 * 7 * 127 + 4 * 16 * 127) < 2^24.
 */
#include <math.h>

#include "quant/quant_impl.h"
#include "quant/quant_kq.h"

/* ---- Q5_K: qs[32 g + l] holds the low 4 bits of element 64 g + l (low
 * nibble) and of 64 g + 32 + l (high nibble); bit j of qh[l] is the fifth
 * bit of element 32 j + l. */

static inline int q5k_code(const block_q5_K *b, int e) {
    const int g = e / 64, l = e % 32, hi = (e % 64) / 32;
    const int low = hi ? b->qs[32 * g + l] >> 4 : b->qs[32 * g + l] & 0x0f;
    return low | ((b->qh[l] >> (e / 32)) & 1) << 4;
}

MS_DECL_DEQUANT(q5_K, ref) {
    const block_q5_K *b = x;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(b[i].scales, sc, m);
        for (int s = 0; s < 8; s++) {
            const float ds = d * sc[s], ms = dmin * m[s];
            for (int l = 0; l < 32; l++) y[l] = ds * (float)q5k_code(&b[i], 32 * s + l) - ms;
            y += 32;
        }
    }
}

MS_DECL_DOT(q5_K, q8_K, ref) {
    const block_q5_K *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(w[i].scales, sc, m);
        int32_t sumi = 0, summ = 0;
        for (int sb = 0; sb < 8; sb++) {
            int32_t ss = 0;
            for (int l = 0; l < 32; l++) ss += q5k_code(&w[i], 32 * sb + l) * a[i].qs[32 * sb + l];
            sumi += sc[sb] * ss;
            summ += m[sb] * (a[i].bsums[2 * sb] + a[i].bsums[2 * sb + 1]);
        }
        sumf += ms_kq_block_sum(a[i].d, w[i].d, w[i].dmin, sumi, summ);
    }
    *s = sumf;
}

/* ---- Q3_K: element e = 128 h + 32 j + l (l < 32) has low bits
 * (qs[32 h + l] >> 2 j) & 3 and high bit (hmask[l] >> (4 h + j)) & 1,
 * sub-block e / 16. */

static inline int q3k_code(const block_q3_K *b, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    return ((b->qs[32 * h + l] >> (2 * j)) & 3) | ((b->hmask[l] >> (e / 32)) & 1) << 2;
}

MS_DECL_DEQUANT(q3_K, ref) {
    const block_q3_K *b = x;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d);
        int8_t sc[16];
        ms_q3k_unpack_scales(b[i].scales, sc);
        for (int k = 0; k < 16; k++) {
            const float dl = d * (float)sc[k];
            for (int l = 0; l < 16; l++) y[l] = dl * (float)(q3k_code(&b[i], 16 * k + l) - 4);
            y += 16;
        }
    }
}

MS_DECL_DOT(q3_K, q8_K, ref) {
    const block_q3_K *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        ms_q3k_unpack_scales(w[i].scales, sc);
        int32_t isum = 0;
        for (int k = 0; k < 16; k++) {
            int32_t sk = 0;
            for (int l = 0; l < 16; l++) sk += q3k_code(&w[i], 16 * k + l) * a[i].qs[16 * k + l];
            isum += sc[k] * (sk - 4 * a[i].bsums[k]);
        }
        sumf += (a[i].d * ms_fp16_to_fp32(w[i].d)) * (float)isum;
    }
    *s = sumf;
}

/* ---- dots with f32 activations: quant_impl.h's MS_DEFINE_DOT_F32_REF */

MS_DEFINE_DOT_F32_REF(q5_K, block_q5_K)
MS_DEFINE_DOT_F32_REF(q3_K, block_q3_K)

/* ---- Q3_K quantizer
 *
 * Per sub-block of 16 a signed scale s with codes L in [-4, 3] (x ~= s * L)
 * is fitted by weighted least squares, the weights x^2 (ggml's choice for
 * this format: large values matter most): the codes start from the scale
 * max / -4, max the signed value of largest magnitude (so that it takes the
 * extra level -4); then each code in turn moves to the one nearest x / s,
 * s the least-squares scale sum w x L / sum w L^2 of the other codes, where
 * that lowers the weighted error sum w x^2 - (sum w x L)^2 / sum w L^2, for
 * up to five passes; s is the final codes' least-squares scale. (A sweep
 * of 19 starting scales, as ggml's make_qx_quants, measured worse in RMS
 * on N(0, 1): 0.153 against 0.150.)
 * The block's d maps the scale of largest magnitude onto -32 (the 6-bit
 * codes are [-32, 31]); every scale is rounded to d's grid and the codes
 * re-rounded against the scales as stored. Deterministic. */

static float q3k_fit(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int l = 0; l < 16; l++)
        if (fabsf(x[l]) > amax) {
            amax = fabsf(x[l]);
            max = x[l];
        }
    if (!(amax > 0.0f) || !isfinite(amax)) return 0.0f;
    const float iscale = -4.0f / max;
    /* code by code: each value takes the code nearest x / s, s the
     * least-squares scale of the others' codes, where that raises the
     * gain (sum w x L)^2 / sum w L^2 (the weighted error's reduction) */
    int L[16];
    float sxl = 0.0f, sl2 = 0.0f;
    for (int l = 0; l < 16; l++) {
        L[l] = ms_clampi(ms_nearest_int(iscale * x[l]), -4, 3);
        const float w = x[l] * x[l];
        sxl += w * x[l] * (float)L[l];
        sl2 += w * (float)(L[l] * L[l]);
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int l = 0; l < 16; l++) {
            const float w = x[l] * x[l];
            const float oxl = sxl - w * x[l] * (float)L[l], ol2 = sl2 - w * (float)(L[l] * L[l]);
            if (!(oxl * x[l] != 0.0f) || !(ol2 > 0.0f)) continue;
            const int c = ms_clampi(ms_nearest_int(x[l] * ol2 / oxl), -4, 3);
            if (c == L[l]) continue;
            const float nxl = oxl + w * x[l] * (float)c, nl2 = ol2 + w * (float)(c * c);
            if (nl2 > 0.0f && nxl * nxl * sl2 > sxl * sxl * nl2) {
                L[l] = c, sxl = nxl, sl2 = nl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    return sl2 > 0.0f ? sxl / sl2 : 0.0f;
}

MS_DECL_QUANT(q3_K, ref) {
    block_q3_K *b = y;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float scales[16], max_scale = 0.0f, amax = 0.0f;
        for (int k = 0; k < 16; k++) {
            scales[k] = q3k_fit(x + 16 * k);
            if (fabsf(scales[k]) > amax) {
                amax = fabsf(scales[k]);
                max_scale = scales[k];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        int8_t sc[16] = {0};
        float d = 0.0f;
        if (amax > 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int k = 0; k < 16; k++) sc[k] = (int8_t)ms_clampi(ms_nearest_int(iscale * scales[k]), -32, 31);
            b[i].d = ms_fp32_to_fp16(1.0f / iscale);
            d = ms_fp16_to_fp32(b[i].d);
        }
        ms_q3k_pack_scales(sc, b[i].scales);
        for (int k = 0; k < 16; k++) {
            const float dl = d * (float)sc[k];
            for (int l = 0; l < 16; l++) {
                const int e = 16 * k + l;
                const int L = dl != 0.0f && isfinite(dl) ? ms_clampi(ms_nearest_int(x[e] / dl), -4, 3) + 4 : 4;
                const int h = e / 128, j = (e % 128) / 32, p = e % 32;
                b[i].qs[32 * h + p] |= (uint8_t)((L & 3) << (2 * j));
                b[i].hmask[p] |= (uint8_t)((L >> 2) << (e / 32));
            }
        }
    }
}
