/*
 * quant_q6k_ref.c - scalar reference kernels for Q6_K weights: dequantize,
 * the dot with Q8_K activations and the dot with f32 activations. These
 * are the specification that the AVX2 / AVX-512 kernels
 * (quant_q6k_avx2.c, quant_q6k_avx512.c) are tested against; the weight
 * quantizer is in quant_q6k_quantize.c, the element layout in quant_q6k.h.
 *
 * Format (ggml's ggml-quants.c, dequantize_row_q6_K):
 *   x = d * sc[s] * (q - 32)    s = sub-block of 16, sc int8, q 6 bits,
 *                               d the block's fp16 scale.
 */
#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "quant/quant_q6k.h"

/* Each value is d times the exact integer sc * (q - 32) (at most 128 * 32
 * in magnitude, so exact in f32): one rounding per value. (ggml rounds
 * twice, (d * sc) * (q - 32); the two differ by at most an ulp.) */
MS_DECL_DEQUANT(q6_K, ref) {
    const block_q6_K *b = x;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d);
        for (int e = 0; e < QK_K; e++)
            y[e] = d * (float)(b[i].scales[e / 16] * (ms_q6k_code(&b[i], e) - 32));
        y += QK_K;
    }
}

/* The dot with Q8_K activations (fast mode). Per block, exact in int32:
 *   sumi = sum_s sc[s] * sum_{l<16} q[16 s + l] * a[16 s + l]   (q in [0, 63])
 *   summ = sum_s sc[s] * bsums[s]                               (Q8_K's sums of 16)
 *   isum = sumi - 32 * summ  = sum_e sc * (q - 32) * a,
 * the -32 offset taken through the activation sums (|isum| < 2^29: 256
 * products of at most 128 * 63 * 128, and 32 times 16 of 128 * 2032).
 * Then one float step per block, in block order from sumf = 0:
 *   sumf += (ad * d) * (float)isum    (ms_q6k_block_sum)
 * with ad the activation block's f32 scale and d the weight block's. This
 * order is the specification: every SIMD form (single, four-token,
 * many-rows, token-lane GEMM) computes the same integers and repeats these
 * float operations bit for bit. */
MS_DECL_DOT(q6_K, q8_K, ref) {
    const block_q6_K *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumi = 0, summ = 0;
        for (int sb = 0; sb < QK_K / 16; sb++) {
            int32_t ss = 0;
            for (int l = 0; l < 16; l++) ss += ms_q6k_code(&w[i], 16 * sb + l) * a[i].qs[16 * sb + l];
            sumi += w[i].scales[sb] * ss;
            summ += w[i].scales[sb] * a[i].bsums[sb];
        }
        sumf += ms_q6k_block_sum(a[i].d, ms_fp16_to_fp32(w[i].d), sumi - 32 * summ);
    }
    *s = sumf;
}

/* The dot with f32 activations (exact mode): quant_impl.h's MS_DEFINE_DOT_F32_REF. */
MS_DEFINE_DOT_F32_REF(q6_K, block_q6_K)
