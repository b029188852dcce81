/*
 * quant_iq4.h - internal: the IQ4_XS / IQ4_NL value table and IQ4_XS's
 * scale layout, shared by their scalar, AVX2 and AVX-512 kernels
 * (quant_iq4_*.c). Only quant/ includes this header.
 *
 * Layout (ggml's ggml-common.h block_iq4_xs / block_iq4_nl and
 * ggml-quants.c's dequantize_row_iq4_xs): sub-block s (32 values) of an
 * IQ4_XS block takes 16 bytes qs[16 s .. 16 s + 15]; byte j holds the
 * index of element 32 s + j in its low nibble and of 32 s + 16 + j in its
 * high nibble. Its scale ls in [0, 63] is the nibble s % 2 of scales_l[s /
 * 2] with bits 2 s, 2 s + 1 of scales_h on top; value
 *   x = d * (ls - 32) * ms_kvalues_iq4nl[q],  d the block's fp16 scale.
 */
#ifndef MS_QUANT_IQ4_H
#define MS_QUANT_IQ4_H

#include <stdint.h>

#include "quant/blocks.h"

/* The 16 non-linear levels (ggml-common.h's kvalues_iq4nl), ascending. */
static const int8_t ms_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

/* Sub-block s's signed scale ls - 32, in [-32, 31]. */
static inline int ms_iq4xs_scale(const block_iq4_xs *b, int s) {
    const int lo = (b->scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
    const int hi = (b->scales_h >> (2 * s)) & 3;
    return (lo | hi << 4) - 32;
}

/* The 4-bit index of element e (0..255) of block b. */
static inline int ms_iq4xs_code(const block_iq4_xs *b, int e) {
    const uint8_t q = b->qs[16 * (e / 32) + e % 16];
    return (e % 32) < 16 ? q & 0x0f : q >> 4;
}

/* One block's share of a dot with Q8_K activations, the float step every
 * IQ4_XS kernel repeats (quant_iq4_ref.c): the activation scale times the
 * weight scale, then times the exact integer sum isum converted to float.
 * The same operations as Q6_K's ms_q6k_block_sum, so the SIMD kernels use
 * its vector form ms_q6k_block_add. */
static inline float ms_iq4xs_block_sum(float ad, float d, int32_t isum) { return (ad * d) * (float)isum; }

#endif
