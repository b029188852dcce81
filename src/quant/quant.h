/*
 * quant.h - tensor element types, block formats and dot-product kernels.
 *
 * One table describes every ggml tensor type that a GGUF may hold (the type
 * ids, block sizes and bytes per block are ggml's, so files are byte-for-byte
 * interchangeable with llama.cpp). For the types moestream computes with it
 * also holds the kernels:
 *
 *   to_float     dequantize n elements (n a multiple of blck_size)
 *   from_float   quantize n elements (reference quantizer, deterministic)
 *   vec_dot      dot(weight row, activation row in vec_dot_type)   (fast mode)
 *   vec_dot_f32  dot(weight row, f32 activation row)               (--quality:
 *                exact math on the stored weights, accumulated in f32/f64)
 *   vec_dot_x4, vec_dot_f32_x4   optional: the same dots for four activation
 *                rows at once, bit-identical to four single calls
 *
 * Nothing else in the engine switches on the type. Each kernel has a scalar
 * reference; ms_quant_init() swaps in AVX2 or AVX-512 versions once, at start,
 * after a CPU feature check. ms_type_traits_ref() always returns the scalar
 * table (tests compare the two on random data).
 *
 * Weight formats with kernels: F32, F16, BF16, Q8_0, Q6_K, Q5_K, Q4_K, Q3_K,
 * Q2_K, IQ2_XXS, MXFP4.
 * Activation formats: Q8_0 (for Q8_0 and MXFP4 weights), Q8_K (for Q6_K,
 * Q5_K, Q4_K, Q3_K, Q2_K, IQ2_XXS), F16 (for F16), BF16 (for BF16), F32 (for F32) - as in ggml - and
 * moestream's own Q16_0 (16-bit integers, for Q8_0 weights; not a ggml type,
 * so not in the table: the traits of the weight carry its kernels).
 * Block layouts follow ggml's ggml-common.h definitions (cited per format in
 * the implementation).
 */
#ifndef MS_QUANT_QUANT_H
#define MS_QUANT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ggml's type ids (ggml.h `enum ggml_type`); gaps are removed types. */
enum ms_type {
    MS_TYPE_F32 = 0,
    MS_TYPE_F16 = 1,
    MS_TYPE_Q4_0 = 2,
    MS_TYPE_Q4_1 = 3,
    MS_TYPE_Q5_0 = 6,
    MS_TYPE_Q5_1 = 7,
    MS_TYPE_Q8_0 = 8,
    MS_TYPE_Q8_1 = 9,
    MS_TYPE_Q2_K = 10,
    MS_TYPE_Q3_K = 11,
    MS_TYPE_Q4_K = 12,
    MS_TYPE_Q5_K = 13,
    MS_TYPE_Q6_K = 14,
    MS_TYPE_Q8_K = 15,
    MS_TYPE_IQ2_XXS = 16,
    MS_TYPE_IQ2_XS = 17,
    MS_TYPE_IQ3_XXS = 18,
    MS_TYPE_IQ1_S = 19,
    MS_TYPE_IQ4_NL = 20,
    MS_TYPE_IQ3_S = 21,
    MS_TYPE_IQ2_S = 22,
    MS_TYPE_IQ4_XS = 23,
    MS_TYPE_I8 = 24,
    MS_TYPE_I16 = 25,
    MS_TYPE_I32 = 26,
    MS_TYPE_I64 = 27,
    MS_TYPE_F64 = 28,
    MS_TYPE_IQ1_M = 29,
    MS_TYPE_BF16 = 30,
    MS_TYPE_TQ1_0 = 34,
    MS_TYPE_TQ2_0 = 35,
    MS_TYPE_MXFP4 = 39,
    MS_TYPE_COUNT = 40
};

typedef void (*ms_to_float_fn)(const void *restrict x, float *restrict y, int64_t n);
typedef void (*ms_from_float_fn)(const float *restrict x, void *restrict y, int64_t n);
/* *s = dot(x, y) over n elements; x and y are rows in their own formats. */
typedef void (*ms_vec_dot_fn)(int64_t n, float *restrict s, const void *restrict x,
                              const void *restrict y);
/* s[k] = dot(x, y[k]) for k = 0..3: one weight row against four activation
 * rows, loading and decoding each weight block once. Each s[k] is bit-for-bit
 * the value the matching ms_vec_dot_fn gives for (x, y[k]) (the x4 kernels
 * repeat the single kernel's float operations per output, in its order), so
 * batching never changes a result. */
typedef void (*ms_vec_dot_x4_fn)(int64_t n, float *restrict s, const void *restrict x,
                                 const void *const y[4]);
/* s[r] = dot(row r, y) for r < n_rows, row r at x + r * x_stride bytes: one
 * activation row against many weight rows (the single-token matmul of
 * decode), with what depends only on y prepared once per call. Each s[r]
 * is bit for bit the matching ms_vec_dot_fn's value for (row r, y). */
typedef void (*ms_vec_dot_rows_fn)(int64_t n, float *restrict s, const void *restrict x, size_t x_stride,
                                   int64_t n_rows, const void *restrict y);

/* The many-rows form for up to four tokens: s[t * lds + r] = dot(row r,
 * token t) for r < n_rows (row r at x + r * x_stride bytes) and t < nt
 * (1..4, token t's activations at y[t]), each the single dot's value bit
 * for bit. A row's weights are read (and decoded) once for all nt tokens:
 * a decode step that checks a draft of a few tokens, or a prefill's last
 * tokens, reads them at the speed of a one-token step's many-rows dot. */
typedef void (*ms_vec_dot_rows_n_fn)(int64_t n, float *restrict s, int64_t lds, const void *restrict x,
                                     size_t x_stride, int64_t n_rows, const void *const *y, int nt);

/* Token-lane GEMM for prefill (optional; see struct ms_type_traits): the
 * activations of a group of up to gemm_tok_lanes tokens (8 or 16, at most
 * MS_GEMM_TOK_MAX) are packed once per product so that SIMD lanes hold
 * tokens, then every weight row is multiplied against the whole group.
 *
 * ms_act_pack_fn: packs nt (1..gemm_tok_lanes) activation rows of n elements
 *   in vec_dot_type format, a[t] at a + t * a_stride bytes, into dst
 *   (act_pack_block bytes per blck_size of vec_dot_type elements, 32 for
 *   Q8_0 and 256 for Q8_K; lanes nt.. repeat the last
 *   token, so every lane holds valid data).
 * ms_gemm_tok_fn: y[t * ldy + r] = dot(row r, token t) for r < n_rows
 *   (row r at w + r * w_stride bytes) and t < nt, pack from act_pack:
 *   nt is 1 .. gemm_tok_groups * gemm_tok_lanes, the groups past the first
 *   (tokens lanes.., 2 lanes..) packed right after it.
 *   Each output is bit for bit the value vec_dot gives for (row r, token t):
 *   the integer sums are exact and the float step per block is the
 *   single kernel's, in its order. */
#define MS_GEMM_TOK_MAX 16
typedef void (*ms_act_pack_fn)(int64_t n, const void *restrict a, size_t a_stride, int nt,
                               void *restrict dst);
typedef void (*ms_gemm_tok_fn)(int64_t n, float *restrict y, int64_t ldy, const void *restrict w,
                               size_t w_stride, int64_t n_rows, const void *restrict pack, int nt);

/* f32 activation rows x[t] (at x + t * x_stride bytes, t < nt <= 16) ->
 * dst[16 c + t] for c < n (lanes nt.. repeat the last token). */
typedef void (*ms_pack_f32x16_fn)(int64_t n, const float *restrict x, size_t x_stride, int nt,
                                  float *restrict dst);
void ms_pack_f32_x16(int64_t n, const float *restrict x, size_t x_stride, int nt, float *restrict dst);

/* The activations of a token GEMM that reads its tokens where they are
 * (gemm_tok_f32_rows): token t's n f32 values at (char *)x + t * stride,
 * t < nt. */
struct ms_f32_rows {
    const float *x;
    size_t stride; /* bytes */
};

/* The "pack" of such a GEMM (ms_act_pack_fn): writes a struct ms_f32_rows
 * for x and x_stride to dst; n and nt are not needed (the GEMM gets nt). */
void ms_pack_f32_rows(int64_t n, const void *restrict x, size_t x_stride, int nt, void *restrict dst);

struct ms_type_traits {
    const char *name;          /* ggml's name, lower case: "q4_K", "mxfp4", ... */
    int64_t blck_size;         /* elements per block */
    size_t type_size;          /* bytes per block */
    bool is_quantized;
    bool has_kernels;          /* to_float/from_float/vec_dot* are set */
    enum ms_type vec_dot_type; /* activation format vec_dot expects */
    ms_to_float_fn to_float;
    ms_from_float_fn from_float;
    ms_vec_dot_fn vec_dot;     /* (weight row, vec_dot_type row) */
    ms_vec_dot_fn vec_dot_f32; /* (weight row, f32 row) */
    /* Optional four-token forms of vec_dot and vec_dot_f32 (see
     * ms_vec_dot_x4_fn); NULL where there is none: call the single kernel. */
    ms_vec_dot_x4_fn vec_dot_x4;
    ms_vec_dot_x4_fn vec_dot_f32_x4;
    /* Optional many-rows form of vec_dot (ms_vec_dot_rows_fn); NULL where
     * there is none: call vec_dot row by row. */
    ms_vec_dot_rows_fn vec_dot_rows;
    /* Optional many-rows form for up to four tokens (ms_vec_dot_rows_n_fn);
     * where set, the matmul takes tokens it does not give the token-lane
     * GEMM four at a time through it instead of the x4 and single dots. */
    ms_vec_dot_rows_n_fn vec_dot_rows_n;
    /* Optional token-lane GEMM (fast mode, see ms_gemm_tok_fn): NULL where
     * there is none; act_pack_block is the packed bytes per blck_size of
     * vec_dot_type elements of one group of gemm_tok_lanes tokens; a last
     * group of fewer tokens goes through it when it has at least
     * gemm_tok_min (fewer are cheaper through the x4 / single dots). */
    ms_act_pack_fn act_pack;
    ms_gemm_tok_fn gemm_tok;
    size_t act_pack_block;
    int gemm_tok_lanes;
    int gemm_tok_min;
    /* packed groups one gemm_tok call takes (1, or 2 for the AVX-512
     * K-quant GEMMs, which share each code broadcast between two groups) */
    int gemm_tok_groups;
    /* with gemm_tok_groups 2, the least tokens a last partial group needs
     * when it shares its call with a full group: its lanes ride on the
     * full group's code broadcasts, so it costs far less than a call of
     * its own and gemm_tok_min does not apply */
    int gemm_tok_min_paired;
    /* Optional token-lane GEMM with f32 activations (exact mode, and the
     * dense products fast mode keeps in f32): 16 tokens packed as [n][16]
     * f32 (ms_pack_f32x16_fn); each output bit for bit vec_dot_f32's. A
     * last group of fewer tokens goes through it from gemm_tok_f32_min. */
    ms_gemm_tok_fn gemm_tok_f32;
    int gemm_tok_f32_min;
    /* gemm_tok_f32 reads its tokens in place from a struct ms_f32_rows
     * (ms_pack_f32_rows) instead of the [n][16] copy */
    bool gemm_tok_f32_rows;
    /* Optional dots with 16-bit integer activations (block_q16_0, blocks.h:
     * fast mode's dense products that int8 activations would make less
     * accurate; NULL where the weight type has none, and those products then
     * take f32 activations). q16_from_float makes the activation rows (n a
     * multiple of 32), vec_dot_q16 / vec_dot_q16_x4 are the single and
     * four-token dots, vec_dot_q16_rows (optional) the many-rows form
     * (ms_vec_dot_rows_fn), gemm_tok_q16 (optional) a token-lane GEMM over groups
     * of gemm_tok_q16_lanes (8 or 16) tokens packed by q16_pack
     * (ms_pack_q16_0_x8 / _x16, q16_pack_block bytes per 32 elements of a
     * group), run from gemm_tok_q16_min tokens.
     * All forms, in every kernel set, give the same result bit for bit:
     * exact int32 block sums, then ms_dot_q8_0_q16_0_ref's float steps. */
    ms_from_float_fn q16_from_float;
    ms_vec_dot_fn vec_dot_q16;
    ms_vec_dot_x4_fn vec_dot_q16_x4;
    ms_vec_dot_rows_fn vec_dot_q16_rows; /* optional, as vec_dot_rows */
    ms_vec_dot_rows_n_fn vec_dot_q16_rows_n; /* optional, as vec_dot_rows_n */
    ms_act_pack_fn q16_pack;
    ms_gemm_tok_fn gemm_tok_q16;
    size_t q16_pack_block;
    int gemm_tok_q16_lanes;
    int gemm_tok_q16_min;
};

/* Q16_0 rows (n elements, a[t] at a + t * a_stride bytes, t < nt <= 16) ->
 * n / 32 block_q16_0x16 at dst (spare lanes repeat the last token). */
void ms_pack_q16_0_x16(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst);
/* The same for 8 tokens: n / 32 block_q16_0x8 at dst (nt <= 8). */
void ms_pack_q16_0_x8(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst);

/* Selects the fastest kernels this CPU supports (AVX-512 > AVX2 > scalar).
 * Idempotent and thread-safe; every entry point below calls it lazily, so an
 * explicit call only fixes the moment of selection. MS_ISA=scalar|avx2|avx512
 * in the environment caps the choice (tests and benchmarks). */
void ms_quant_init(void);
/* Name of the kernel set in use: "scalar", "avx2" or "avx512". */
const char *ms_quant_isa(void);
/* Whether the AVX-512 set in use runs some entries on AVX2 kernels because
 * this CPU splits 512-bit operations in two (AMD Zen 4; quant_dispatch.c,
 * split_isa; MS_AVX512_SPLIT=0|1 overrides). False for the other sets. */
bool ms_quant_avx512_split(void);
/* Whether the AVX-512 set in use runs IQ2_XXS dots on the VBMI kernels
 * (a part that reports AVX512_VBMI: all three forms on a full-width part,
 * the many-rows form alone on a split one; quant_dispatch.c, attach_vbmi;
 * MS_AVX512_VBMI=0 turns them off). False for the other sets. */
bool ms_quant_avx512_vbmi(void);

/* Traits of a type, or NULL for an id that is not a ggml type. The active
 * table (fast kernels where available) and the scalar reference table. */
const struct ms_type_traits *ms_type_traits(enum ms_type type);
const struct ms_type_traits *ms_type_traits_ref(enum ms_type type);
/* Type name ("q8_0") or NULL. Parsing accepts any case ("Q4_K", "q4_k"). */
const char *ms_type_name(enum ms_type type);
int ms_type_from_name(const char *name, enum ms_type *out); /* 0 or -1 */

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
size_t ms_row_size(enum ms_type type, int64_t n);

/* IEEE half / bfloat16 / E8M0 conversions (round to nearest even, as ggml). */
uint16_t ms_fp32_to_fp16(float f);
float ms_fp16_to_fp32(uint16_t h);
uint16_t ms_fp32_to_bf16(float f);
float ms_bf16_to_fp32(uint16_t h);

#endif
