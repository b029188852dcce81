/*
 * quant_basic.h - internal: scalar number-format helpers shared by the
 * f16 / bf16 / q8_0 / mxfp4 kernels (quant_basic_*.c) and fp16.c.
 *
 * Kept as static inline so the reference kernels convert in registers; the
 * exported ms_fp32_to_fp16() & co. (quant.h) are thin wrappers over these.
 * Only quant/ includes this header.
 */
#ifndef MS_QUANT_BASIC_H
#define MS_QUANT_BASIC_H

#include <stdint.h>
#include <string.h>

static inline uint32_t ms_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float ms_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary32 -> binary16, round to nearest, ties to even (the rounding of
 * ggml's GGML_FP32_TO_FP16, in software and with F16C). Overflow gives +-inf,
 * values below half the smallest subnormal (2^-25) give +-0, NaN gives the
 * quiet NaN 0x7e00 with the sign kept (the payload is not preserved). */
static inline uint16_t ms_fp16_from_f32_inline(float f) {
    const uint32_t u = ms_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t exp = (u >> 23) & 0xffu;
    const uint32_t mant = u & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | (mant ? 0x7e00u : 0x7c00u));
    const int e = (int)exp - 127; /* unbiased; f32 subnormals land far below */
    if (e > 15) return (uint16_t)(sign | 0x7c00u);
    if (e >= -14) {
        /* Normal half: keep 10 of 23 mantissa bits. A carry out of the
         * mantissa bumps the exponent, which is the correct result (up to
         * 0x7c00 = inf for values >= 65520). */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (mant >> 13);
        const uint32_t rem = mant & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    /* Subnormal half: value = M * 2^(e-23) with M the 24-bit significand; in
     * units of 2^-24 that is M >> (-e - 1). */
    const int shift = -e - 1; /* >= 14 */
    if (shift > 24) return sign;
    const uint32_t m = mant | 0x800000u;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal: correct */
}

/* IEEE binary16 -> binary32 (exact). A NaN keeps its payload and gets the
 * quiet bit, as F16C's vcvtph2ps does, so scalar and SIMD agree bit for bit. */
static inline float ms_fp16_to_f32_inline(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in binary32 */
        const float v = (float)mant * 0x1p-24f;
        return ms_f32_from_bits(ms_f32_bits(v) | sign);
    }
    if (exp == 0x1f) return ms_f32_from_bits(sign | 0x7f800000u | (mant ? 0x400000u : 0u) | (mant << 13));
    return ms_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* binary32 -> bfloat16, round to nearest even; NaN stays NaN (quiet bit set),
 * as ggml's ggml_compute_fp32_to_bf16. */
static inline uint16_t ms_bf16_from_f32_inline(float f) {
    const uint32_t u = ms_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float ms_bf16_to_f32_inline(uint16_t h) {
    return ms_f32_from_bits((uint32_t)h << 16);
}

/* E8M0 scale byte -> 2^(e-127) / 2 = 2^(e-128). The half is ggml's convention
 * (GGML_E8M0_TO_FP32_HALF): the E2M1 table below stores doubled values so it
 * fits int8. e = 0 and 1 give the binary32 subnormals 2^-128 and 2^-127; e =
 * 255 (NaN in OCP MX) is read as 2^127 like ggml does. */
static inline float ms_e8m0_to_f32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return ms_f32_from_bits(bits);
}

/* The 16 E2M1 values times two, indexed by the 4-bit code (sign in bit 3):
 * 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (ggml's kvalues_mxfp4). */
static const int8_t ms_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

#endif
