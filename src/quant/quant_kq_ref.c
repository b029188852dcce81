/*
 * quant_kq_ref.c - scalar reference kernels for Q4_K, Q2_K, IQ2_XXS weights
 * and the Q8_K activation format: dequantization, Q8_K quantization and the
 * dot products. These are the specification that the AVX2 / AVX-512 kernels
 * are tested against; the weight quantizers are in quant_kq_quantize.c.
 *
 * Formulas (ggml's ggml-quants.c, dequantize_row_* and ggml_vec_dot_*_q8_K):
 *   Q8_K     a = d * q                         d f32, q int8 in [-127, 127]
 *   Q4_K     w = d * sc[s] * q - dmin * m[s]   s = sub-block of 32, q 4 bits
 *   Q2_K     w = d * (sc & 15) * q - dmin * (sc >> 4)   sub-block of 16, q 2 bits
 *   IQ2_XXS  w = d * (0.5 + ls) / 4 * grid * sign       sub-block of 32
 * The Q8_K dots ("fast mode") sum integer products per block and apply the
 * float scales once per block, the Q4_K/Q2_K min terms through Q8_K's bsums
 * (sum of each 16 activations), exactly as ggml does. The *_f32 dots
 * dequantize and accumulate w * x in f32.
 */
#include <math.h>

#include "quant/iq2_grid.h"
#include "quant/quant_impl.h"
#include "quant/quant_kq.h"

/* ---- Q8_K */

/* ggml's quantize_row_q8_K_ref: the element of largest magnitude, max
 * (signed, first one on ties), maps to -127: d = -max / 127, q = round(x / d)
 * (to nearest, ties to even, as ggml's nearest_int), capped at 127. An
 * all-zero block stores d = 0, q = 0 and zero bsums. */
MS_DECL_QUANT(q8_K, ref) {
    block_q8_K *b = y;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        memset(b[i].bsums, 0, sizeof b[i].bsums);
        if (amax == 0.0f) {
            b[i].d = 0.0f;
            memset(b[i].qs, 0, sizeof b[i].qs);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            /* a NaN product (a NaN value, or an infinite one in a block whose
             * largest magnitude is infinite: iscale = -0) is 0, as in ggml
             * and the SIMD forms; never -128, which the sign-trick dots
             * cannot negate */
            const float p = iscale * x[j];
            const long v = p == p ? lrintf(p) : 0;
            b[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < QK_K; j++) b[i].bsums[j / 16] = (int16_t)(b[i].bsums[j / 16] + b[i].qs[j]);
        b[i].d = 1.0f / iscale;
    }
}

MS_DECL_DEQUANT(q8_K, ref) {
    const block_q8_K *b = x;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++) *y++ = b[i].d * (float)b[i].qs[j];
}

/* ---- Q4_K: qs[32 g + l] holds element 64 g + l (low nibble) and
 * 64 g + 32 + l (high nibble); sub-block 2 g and 2 g + 1. */

MS_DECL_DEQUANT(q4_K, ref) {
    const block_q4_K *b = x;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(b[i].scales, sc, m);
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = b[i].qs + 32 * g;
            const float d1 = d * sc[2 * g], m1 = dmin * m[2 * g];
            const float d2 = d * sc[2 * g + 1], m2 = dmin * m[2 * g + 1];
            for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)(q[l] >> 4) - m2;
            y += 64;
        }
    }
}

MS_DECL_DOT(q4_K, q8_K, ref) {
    const block_q4_K *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        ms_q4k_unpack_scales(w[i].scales, sc, m);
        int32_t sumi = 0, summ = 0;
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = w[i].qs + 32 * g;
            const int8_t *q8 = a[i].qs + 64 * g;
            int32_t s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += (q[l] & 0x0f) * q8[l];
                s2 += (q[l] >> 4) * q8[32 + l];
            }
            sumi += sc[2 * g] * s1 + sc[2 * g + 1] * s2;
        }
        for (int j = 0; j < 8; j++) summ += m[j] * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        sumf += ms_kq_block_sum(a[i].d, w[i].d, w[i].dmin, sumi, summ);
    }
    *s = sumf;
}

/* ---- Q2_K: qs[32 h + l] holds elements 128 h + 32 j + l in bits 2j..2j+1;
 * scales[k] belongs to elements 16 k .. 16 k + 15. */

MS_DECL_DEQUANT(q2_K, ref) {
    const block_q2_K *b = x;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        for (int k = 0; k < QK_K / 16; k++) {
            const uint8_t *q = b[i].qs + 32 * (k / 8) + 16 * (k % 2);
            const int shift = 2 * ((k % 8) / 2);
            const float dl = d * (float)(b[i].scales[k] & 0x0f), ml = dmin * (float)(b[i].scales[k] >> 4);
            for (int l = 0; l < 16; l++) y[l] = dl * (float)((q[l] >> shift) & 3) - ml;
            y += 16;
        }
    }
}

MS_DECL_DOT(q2_K, q8_K, ref) {
    const block_q2_K *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumi = 0, summ = 0;
        for (int k = 0; k < QK_K / 16; k++) {
            const uint8_t *q = w[i].qs + 32 * (k / 8) + 16 * (k % 2);
            const int shift = 2 * ((k % 8) / 2);
            const int8_t *q8 = a[i].qs + 16 * k;
            int32_t sk = 0;
            for (int l = 0; l < 16; l++) sk += ((q[l] >> shift) & 3) * q8[l];
            sumi += (w[i].scales[k] & 0x0f) * sk;
            summ += (w[i].scales[k] >> 4) * a[i].bsums[k];
        }
        sumf += ms_kq_block_sum(a[i].d, w[i].d, w[i].dmin, sumi, summ);
    }
    *s = sumf;
}

/* ---- IQ2_XXS */

MS_DECL_DEQUANT(iq2_xxs, ref) {
    const block_iq2_xxs *b = x;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ms_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t aux[2];
            ms_iq2xxs_aux(&b[i], ib, aux);
            const float db = d * (0.5f + (float)(aux[1] >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const unsigned idx = (aux[0] >> (8 * l)) & 0xff;
                const unsigned signs = ms_iq2_ksigns[(aux[1] >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) {
                    const float v = db * (float)ms_iq2xxs_grid_val(idx, j);
                    y[j] = (signs >> j) & 1 ? -v : v;
                }
                y += 8;
            }
        }
    }
}

/* As ggml: per sub-block the integer sum of grid * sign * q8 times
 * ls = 2 * scale + 1; the factor 1/8 (= 0.25 * 0.5) is applied at the end. */
MS_DECL_DOT(iq2_xxs, q8_K, ref) {
    const block_iq2_xxs *w = x;
    const block_q8_K *a = y;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = a[i].qs;
        int32_t bsum = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t aux[2];
            ms_iq2xxs_aux(&w[i], ib, aux);
            const int32_t ls = 2 * (int32_t)(aux[1] >> 28) + 1;
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++) {
                const unsigned idx = (aux[0] >> (8 * l)) & 0xff;
                const unsigned signs = ms_iq2_ksigns[(aux[1] >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) {
                    const int32_t p = ms_iq2xxs_grid_val(idx, j) * q8[j];
                    sumi += (signs >> j) & 1 ? -p : p;
                }
                q8 += 8;
            }
            bsum += sumi * ls;
        }
        sumf += a[i].d * ms_fp16_to_fp32(w[i].d) * (float)bsum;
    }
    *s = 0.125f * sumf;
}

/* ---- dots with f32 activations: quant_impl.h's MS_DEFINE_DOT_F32_REF */

MS_DEFINE_DOT_F32_REF(q4_K, block_q4_K)
MS_DEFINE_DOT_F32_REF(q2_K, block_q2_K)
MS_DEFINE_DOT_F32_REF(iq2_xxs, block_iq2_xxs)

/* ---- Q8_K rows packed for the token-lane GEMMs (block_q8_Kx8, blocks.h).
 * Plain C for every ISA: a product packs its activations once and runs
 * every weight row against them, so this costs a small fraction of it. */
/* nt rows of Q8_K, a[t] at a + t * a_stride, into groups of `lanes` tokens
 * laid out as block_q8_Kx8 (lanes 8) or block_q8_Kx16 (lanes 16): the
 * field offsets scale with the lane count. */
static void pack_q8_K_lanes(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst,
                            const int lanes) {
    const size_t qs_b = (size_t)64 * 4 * lanes, bsp_b = (size_t)4 * 2 * lanes * 2, bs16_b = (size_t)8 * 2 * lanes * 2;
    const size_t blk = qs_b + bsp_b + bs16_b + (size_t)lanes * sizeof(float);
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t *qs = (int8_t *)dst + (size_t)i * blk;
        int16_t *bsp = (int16_t *)(qs + qs_b), *bs16 = (int16_t *)(qs + qs_b + bsp_b);
        float *d = (float *)(qs + qs_b + bsp_b + bs16_b);
        for (int t = 0; t < lanes; t++) {
            const int src = t < nt ? t : nt - 1; /* spare lanes repeat the last token */
            const block_q8_K *b = (const block_q8_K *)((const char *)a + (size_t)src * a_stride) + i;
            d[t] = b->d;
            for (int s = 0; s < 8; s++)
                for (int j = 0; j < 8; j++) memcpy(qs + ((size_t)(8 * s + j) * lanes + t) * 4, b->qs + 32 * s + 4 * j, 4);
            for (int p = 0; p < 4; p++) {
                const int16_t *bs = b->bsums + 4 * p;
                bsp[p * 2 * lanes + 2 * t] = (int16_t)(bs[0] + bs[1]);
                bsp[p * 2 * lanes + 2 * t + 1] = (int16_t)(bs[2] + bs[3]);
            }
            for (int q = 0; q < 8; q++) {
                bs16[q * 2 * lanes + 2 * t] = b->bsums[2 * q];
                bs16[q * 2 * lanes + 2 * t + 1] = b->bsums[2 * q + 1];
            }
        }
    }
}

void ms_pack_q8_K_x8(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    static_assert(sizeof(block_q8_Kx8) == 64 * 4 * 8 + 4 * 2 * 8 * 2 + 8 * 2 * 8 * 2 + 8 * sizeof(float),
                  "block_q8_Kx8 is pack_q8_K_lanes' layout for 8 lanes");
    pack_q8_K_lanes(n, a, a_stride, nt, dst, 8);
}

/* Q8_K rows -> block_q8_Kx8w (values widened to int16, in pairs per
 * token lane); spare lanes repeat the last token. */
void ms_pack_q8_K_x8w(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    block_q8_Kx8w *o = dst;
    for (int t = 0; t < 8; t++) {
        const block_q8_K *row = (const block_q8_K *)((const char *)a + (size_t)(t < nt ? t : nt - 1) * a_stride);
        for (int64_t i = 0; i < n / QK_K; i++) {
            for (int j = 0; j < QK_K; j++) o[i].qs[j / 2][2 * t + j % 2] = row[i].qs[j];
            o[i].d[t] = row[i].d;
        }
    }
}

void ms_pack_q8_K_x16(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    static_assert(sizeof(block_q8_Kx16) == 64 * 4 * 16 + 4 * 2 * 16 * 2 + 8 * 2 * 16 * 2 + 16 * sizeof(float),
                  "block_q8_Kx16 is pack_q8_K_lanes' layout for 16 lanes");
    pack_q8_K_lanes(n, a, a_stride, nt, dst, 16);
}
