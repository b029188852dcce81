/*
 * quant_q6k_quantize.c - the reference quantizer for Q6_K weights (the
 * from_float entry of the traits table; moestream mkmodel writes test
 * models with it).
 *
 * It writes ggml's byte layout (quant_q6k.h), so any reader decodes it,
 * but its bytes are not ggml's (they need not be: only the decoded values
 * matter). Deterministic: plain scalar code, no data-dependent order.
 *
 * Method, per block of 256:
 *  1. Each sub-block of 16 is fitted as x ~ s * L with integer codes L in
 *     [-32, 31] (code q = L + 32), weighted by x^2 (ggml's weighting for
 *     this format, quantize_row_q6_K_ref: the large values matter most).
 *     The candidate roundings map the largest magnitude near -32 (the side
 *     with the extra level): L = round(-(32 + 0.1 k) x / max), k = -9..9;
 *     for each, s is the weighted least-squares scale sum w x L / sum w L^2,
 *     and one more rounding against the best s is tried. The fit with the
 *     least weighted squared error wins.
 *  2. The block scale d = -s_max / 128, with s_max the sub-block scale of
 *     largest magnitude, so that it takes the int8 scale -128; d is stored
 *     as fp16 and read back.
 *  3. Each sub-block's int8 scale is the nearest to s / d, or one either
 *     side of it, whichever gives the least weighted error once the codes
 *     are re-rounded against the stored d * sc (ggml takes the nearest
 *     alone; the neighbours cost 3 roundings of 16 values and make up for
 *     part of the scale's rounding).
 * Round-trip error on N(0, 1) data: see tests/test_quant_kq.c.
 */
#include <math.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "quant/quant_q6k.h"

/* Codes L[l] = clamp(round(x[l] * iscale), -32, 31) for the 16 values;
 * returns sum w x L in *sxl and sum w L^2 in *sll. */
static void round16(const float *x, const float *w, float iscale, int8_t *L, float *sxl, float *sll) {
    float a = 0.0f, b = 0.0f;
    for (int l = 0; l < 16; l++) {
        const int q = ms_clampi(ms_nearest_int(iscale * x[l]), -32, 31);
        L[l] = (int8_t)q;
        a += w[l] * x[l] * (float)q;
        b += w[l] * (float)(q * q);
    }
    *sxl = a;
    *sll = b;
}

/* Step 1: the scale s of x[0..15] ~ s * L, L in [-32, 31]; 0 for a block
 * without a positive magnitude (all zero, or NaN). */
static float fit16(const float *x, const float *w) {
    float amax = 0.0f, max = 0.0f;
    for (int l = 0; l < 16; l++)
        if (fabsf(x[l]) > amax) {
            amax = fabsf(x[l]);
            max = x[l];
        }
    if (!(amax > 0.0f)) return 0.0f;
    int8_t L[16];
    /* the weighted error is sum w x^2 - sxl^2 / sll at s = sxl / sll: the
     * best fit has the largest sxl^2 / sll */
    float best_s = 0.0f, best_g = -1.0f;
    for (int k = -9; k <= 9; k++) {
        float sxl, sll;
        round16(x, w, -(32.0f + 0.1f * (float)k) / max, L, &sxl, &sll);
        if (!(sll > 0.0f)) continue;
        const float g = sxl * sxl / sll;
        if (g > best_g) {
            best_g = g;
            best_s = sxl / sll;
        }
    }
    if (best_s != 0.0f) {
        float sxl, sll;
        round16(x, w, 1.0f / best_s, L, &sxl, &sll);
        if (sll > 0.0f && sxl * sxl / sll > best_g) best_s = sxl / sll;
    }
    return best_s;
}

/* The weighted squared error of x[0..15] against codes rounded for the
 * stored step ds = d * sc (ds == 0: every code 0, the values 0). */
static float err16(const float *x, const float *w, float ds) {
    float e = 0.0f;
    for (int l = 0; l < 16; l++) {
        const float v = ds != 0.0f ? ds * (float)ms_clampi(ms_nearest_int(x[l] / ds), -32, 31) : 0.0f;
        e += w[l] * (x[l] - v) * (x[l] - v);
    }
    return e;
}

MS_DECL_QUANT(q6_K, ref) {
    block_q6_K *b = y;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float w[QK_K], scales[QK_K / 16];
        for (int j = 0; j < QK_K; j++) w[j] = x[j] * x[j];
        float smax = 0.0f, samax = 0.0f;
        for (int s = 0; s < QK_K / 16; s++) {
            scales[s] = fit16(x + 16 * s, w + 16 * s);
            if (fabsf(scales[s]) > samax) {
                samax = fabsf(scales[s]);
                smax = scales[s];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = ms_fp32_to_fp16(-smax / 128.0f);
        const float d = ms_fp16_to_fp32(b[i].d);
        if (!(samax > 0.0f) || !(fabsf(d) > 0.0f) || !isfinite(d)) {
            b[i].d = 0; /* an all-zero (or unrepresentable) block: d = 0, sc = 0, every value 0 */
            continue;
        }
        uint8_t q[QK_K];
        for (int s = 0; s < QK_K / 16; s++) {
            const float *xs = x + 16 * s, *ws = w + 16 * s;
            const int sc0 = ms_clampi(ms_nearest_int(scales[s] / d), -128, 127);
            int best = sc0;
            float best_e = err16(xs, ws, d * (float)sc0);
            for (int c = sc0 - 1; c <= sc0 + 1; c += 2) {
                if (c < -128 || c > 127) continue;
                const float e = err16(xs, ws, d * (float)c);
                if (e < best_e) {
                    best_e = e;
                    best = c;
                }
            }
            b[i].scales[s] = (int8_t)best;
            const float ds = d * (float)best;
            for (int l = 0; l < 16; l++)
                q[16 * s + l] = (uint8_t)(ds != 0.0f ? ms_clampi(ms_nearest_int(xs[l] / ds), -32, 31) + 32 : 32);
        }
        /* pack: the inverse of quant_q6k.h's layout */
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            uint8_t *lo = &b[i].ql[64 * h + 32 * (j % 2) + l];
            *lo = (uint8_t)(j < 2 ? (*lo & 0xf0) | (q[e] & 0x0f) : (*lo & 0x0f) | (q[e] & 0x0f) << 4);
            b[i].qh[32 * h + l] = (uint8_t)((b[i].qh[32 * h + l] & ~(3u << (2 * j))) | (q[e] >> 4) << (2 * j));
        }
    }
}
