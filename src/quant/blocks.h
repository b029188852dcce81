/*
 * blocks.h - byte layouts of the block formats moestream computes with.
 *
 * Identical to ggml's ggml-common.h so GGUF files are interchangeable with
 * llama.cpp. Each struct is followed by a static size check; all fields are
 * little-endian. `d`/`dmin` are IEEE half unless stated.
 */
#ifndef MS_QUANT_BLOCKS_H
#define MS_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#define QK8_0 32
#define QK_MXFP4 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* Q8_0: 32 int8 values, one half scale. x = d * q. */
typedef struct {
    uint16_t d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

/* MXFP4 (OCP microscaling): 32 E2M1 values, one E8M0 shared exponent.
 * qs[j] low nibble = element j, high nibble = element j + 16. */
typedef struct {
    uint8_t e;
    uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4;
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

/* Q4_K: 256 values in 8 sub-blocks of 32; 6-bit scales and mins packed in
 * 12 bytes; x = d * sc * q - dmin * m. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

/* Q2_K: 256 values in 16 sub-blocks of 16; 4-bit scale and min per sub-block
 * (scales[i] = sc | m << 4); x = d * sc * q - dmin * m. */
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

/* Q3_K: 256 values in 16 sub-blocks of 16; q = 2 low bits (qs, laid out as
 * Q2_K's) + a high bit (hmask: bit j of hmask[l] belongs to element
 * 32 j + l), x = d * (sc - 32) * (q - 4) with 6-bit scales packed in 12
 * bytes (ggml's kmask unpacking; see quant_kq.h). */
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[K_SCALE_SIZE];
    uint16_t d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

/* Q5_K: Q4_K with a fifth bit per value (qh: bit j of qh[l] belongs to
 * element 32 j + l): x = d * sc * q - dmin * m, q in [0, 31]. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

/* Q6_K: 256 values in 16 sub-blocks of 16 with int8 scales; q = 4 low bits
 * (ql) + 2 high bits (qh), x = d * sc * (q - 32). */
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

/* IQ2_XXS: 256 values, 2.0625 bits each; per 32 values two uint32 words:
 * four 8-bit indices into the 256-entry E8 lattice grid, then 4x7 sign bits
 * and a 4-bit scale. */
typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];
} block_iq2_xxs;
static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs size");

/* IQ4_NL: 32 values, fp16 d and 16 bytes of 4-bit indices into the fixed
 * non-linear table ms_kvalues_iq4nl (quant_iq4.h): byte j holds element j
 * (low nibble) and element j + 16 (high nibble); x = d * table[q]. */
#define QK4_NL 32
typedef struct {
    uint16_t d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

/* IQ4_XS: 256 values in 8 sub-blocks of 32, each with a 6-bit scale stored
 * + 32 (low 4 bits in a nibble of scales_l, top 2 bits in scales_h), and
 * IQ4_NL's indices: x = d * (ls - 32) * table[q]. */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

/* Q8_K: activation format for K-quants: 256 int8 values, f32 scale, and the
 * sums of each group of 16 values (used by the min terms). */
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

/* moestream's own (not a ggml format): one Q8_K block of 8 tokens packed for
 * the token-lane GEMM, tokens in 32-bit lanes. qs[s][j] holds token t's
 * values 32 s + 4 j .. 32 s + 4 j + 3 at bytes 4 t .. 4 t + 3; bsp[p] holds
 * token t's (bsub[2p], bsub[2p + 1]) at int16 2 t, 2 t + 1, with bsub[s] =
 * bsums[2 s] + bsums[2 s + 1] (the sum of its 32 values of sub-block s, at
 * most 32 * 128 in magnitude); bs16[q] holds its (bsums[2q], bsums[2q + 1])
 * the same way; d[t] its scale. */
typedef struct {
    int8_t qs[8][8][32];
    int16_t bsp[4][16];
    int16_t bs16[8][16];
    float d[8];
} block_q8_Kx8;
static_assert(sizeof(block_q8_Kx8) == 2464, "block_q8_Kx8 size");

/* moestream's own: one Q8_K block of 8 tokens widened to int16 for the
 * AVX2 IQ2_XXS token-lane GEMM (pmaddwd): qs[j][2 t + e] is token t's
 * value 2 j + e, d[t] its scale. */
typedef struct {
    int16_t qs[QK_K / 2][16];
    float d[8];
} block_q8_Kx8w;
static_assert(sizeof(block_q8_Kx8w) == 4128, "block_q8_Kx8w size");

/* moestream's own: block_q8_Kx8's layout for 16 tokens (the AVX-512
 * token-lane GEMMs, one token per 32-bit lane of a 64-byte vector):
 * qs[s][j] holds token t's values 32 s + 4 j .. + 3 at bytes 4 t .. 4 t + 3,
 * bsp, bs16 and d as in block_q8_Kx8 with 16 tokens. */
typedef struct {
    int8_t qs[8][8][64];
    int16_t bsp[4][32];
    int16_t bs16[8][32];
    float d[16];
} block_q8_Kx16;
static_assert(sizeof(block_q8_Kx16) == 4928, "block_q8_Kx16 size");

/* moestream's own: one Q8_0 block of 16 tokens packed for the AVX-512
 * token-lane GEMM: qs[j] holds token t's values 4 j .. 4 j + 3 at bytes
 * 4 t .. 4 t + 3, asum128[t] is 128 times the sum of its 32 values, d[t]
 * its scale as f32. */
typedef struct {
    int8_t qs[8][64];
    int32_t asum128[16];
    float d[16];
} block_q8_0x16;
static_assert(sizeof(block_q8_0x16) == 640, "block_q8_0x16 size");

/* moestream's own activation format (never stored in a file): 32 int16
 * values and an f32 scale, x = d * q with |q| <= MS_Q16_QMAX. Fast mode's
 * dense products that int8 activations would make measurably less accurate
 * take it (docs/model.md, "Numerics and modes"): about 15 significant bits
 * per block against int8's 7, at half the dot product work of f32. */
#define MS_Q16_QMAX 32639
typedef struct {
    float d;
    int16_t qs[QK8_0];
} block_q16_0;
static_assert(sizeof(block_q16_0) == 68, "block_q16_0 size");

/* moestream's own: one Q16_0 block of 16 tokens packed for the AVX-512
 * token-lane GEMM. Each value is split as q = 256 hi + lo, hi in [-127,
 * 127] and lo in [-128, 127] (MS_Q16_QMAX = 127 * 256 + 127 keeps hi an
 * int8), so that two unsigned-by-signed byte products (vpdpbusd) make it:
 * hi[j] and lo[j] hold token t's values 4 j .. 4 j + 3 at bytes 4 t ..
 * 4 t + 3, qsum128[t] is 128 times the sum of its 32 values, d[t] its
 * scale. */
typedef struct {
    int8_t hi[8][64];
    int8_t lo[8][64];
    int32_t qsum128[16];
    float d[16];
} block_q16_0x16;
static_assert(sizeof(block_q16_0x16) == 1152, "block_q16_0x16 size");

/* moestream's own: one Q16_0 block of 8 tokens packed for the AVX2
 * token-lane GEMM (pmaddwd, one token per 32-bit lane of a 32-byte
 * vector): qs[j][2 t + e] is token t's value 2 j + e, d[t] its scale. */
typedef struct {
    int16_t qs[16][16];
    float d[8];
} block_q16_0x8;
static_assert(sizeof(block_q16_0x8) == 544, "block_q16_0x8 size");

#endif
