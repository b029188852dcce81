/*
 * quant_q6k.h - internal: the Q6_K element layout, shared by its scalar,
 * AVX2 and AVX-512 kernels (quant_q6k_*.c). Only quant/ includes this
 * header.
 *
 * Layout (ggml's ggml-common.h block_q6_K and ggml-quants.c's
 * dequantize_row_q6_K): a block holds 256 values in two halves of 128;
 * element e = 128 h + 32 j + l (h < 2, j < 4, l < 32) has
 *   code  q = low | high << 4 in [0, 63],
 *         low  = ql[64 h + 32 (j % 2) + l], low nibble for j < 2, high for j >= 2,
 *         high = (qh[32 h + l] >> 2 j) & 3,
 *   scale sc = scales[e / 16] (int8, sub-blocks of 16 values),
 *   value x = d * sc * (q - 32), d the block's fp16 scale.
 * So the 32 codes of one (h, j) are consecutive elements, and each 16 of
 * them share a scale: vector c = 4 h + j takes scales[2 c] (l < 16) and
 * scales[2 c + 1] (l >= 16).
 */
#ifndef MS_QUANT_Q6K_H
#define MS_QUANT_Q6K_H

#include <stdint.h>

#include "quant/blocks.h"

/* The 6-bit code of element e (0..255) of block b, in [0, 63]. */
static inline int ms_q6k_code(const block_q6_K *b, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (j % 2) + l];
    const int low = j < 2 ? lo & 0x0f : lo >> 4;
    const int high = (b->qh[32 * h + l] >> (2 * j)) & 3;
    return low | high << 4;
}

/* One block's share of a dot with Q8_K activations, the float step every
 * Q6_K kernel repeats (quant_q6k_ref.c, ms_dot_q6_K_q8_K_ref): the
 * activation scale times the weight scale, then times the exact integer
 * sum isum converted to float (round to nearest). */
static inline float ms_q6k_block_sum(float ad, float d, int32_t isum) { return (ad * d) * (float)isum; }

#endif
