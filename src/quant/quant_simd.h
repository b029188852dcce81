/*
 * quant_simd.h - internal: static inline SIMD helpers shared by the AVX2 and
 * AVX-512 kernel files (quant_basic_avx*.c, quant_kq_avx*.c).
 *
 * Each including file is compiled with its own ISA flags (CMake, by file
 * name), so these helpers become that file's instructions; nothing here is
 * ever called through a pointer. The 256-bit helpers need AVX2 + FMA + F16C;
 * the 512-bit section exists only in files compiled with AVX-512. Only the
 * SIMD kernel files of quant/ include this header.
 */
#ifndef MS_QUANT_SIMD_H
#define MS_QUANT_SIMD_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant_basic.h"

/* For helpers taking a constant selector (f16 or bf16, q8_0 or mxfp4): forced
 * inline so the selector folds away and each kernel keeps its own loop. */
#define MS_SIMD_INLINE static inline __attribute__((always_inline))

/* The four-token kernels (ms_vec_dot_x4_fn): MS_X4(k, body) runs body with k
 * = 0, 1, 2, 3 as constants, so per-token accumulator arrays indexed by k stay
 * in registers whatever the compiler's unrolling heuristics. */
#define MS_X4(k, ...)                                      \
    do {                                                   \
        { const int k = 0; __VA_ARGS__ }                   \
        { const int k = 1; __VA_ARGS__ }                   \
        { const int k = 2; __VA_ARGS__ }                   \
        { const int k = 3; __VA_ARGS__ }                   \
    } while (0)

/* MS_XN(k, nt, body): body for k = 0 .. nt - 1 (nt 1 to 4) as constants,
 * as MS_X4 does for four. With nt a constant of a forced-inline kernel
 * body, one body serves the single-token, four-token and many-rows
 * entries for 1-4 tokens, which then perform the same float operations by
 * construction. */
#define MS_XN(k, nt, ...)                                  \
    do {                                                   \
        { const int k = 0; __VA_ARGS__ }                   \
        if ((nt) > 1) { const int k = 1; __VA_ARGS__ }     \
        if ((nt) > 2) { const int k = 2; __VA_ARGS__ }     \
        if ((nt) > 3) { const int k = 3; __VA_ARGS__ }     \
    } while (0)

/* The many-rows form (ms_vec_dot_rows_fn) of a single-token dot defined
 * earlier in the same file: the single dot inlined into the loop over rows
 * (flatten), so a decode matmul pays one call a tile instead of one a row,
 * and every row's result is the single dot's by construction. */
#define MS_DEFINE_DOT_ROWS(w, a, isa)                                                       \
    __attribute__((flatten)) MS_DECL_DOT_ROWS(w, a, isa) {                                  \
        for (int64_t r = 0; r < n_rows; r++)                                                \
            ms_dot_##w##_##a##_##isa(n, s + r, (const char *)x + (size_t)r * x_stride, y); \
    }

/* The many-rows form for up to four tokens (ms_vec_dot_rows_n_fn) named fn,
 * from a kernel body BODY(w, a, nt, nb, s) of weight blocks WBLK and
 * activation blocks ABLK (BLCK elements each) that takes nt (1 to 4, a
 * constant) tokens a[k] through MS_XN: row by row, each row decoded once
 * for all nt tokens, every result the single dot's by construction. */
#define MS_DEFINE_DOT_ROWS_N(fn, WBLK, ABLK, BLCK, BODY)                                               \
    __attribute__((flatten)) void fn(int64_t n, float *restrict s, int64_t lds, const void *restrict x, \
                                     size_t x_stride, int64_t n_rows, const void *const *y, int nt) {    \
        const ABLK *const a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 2 ? 2 : 0], y[nt > 3 ? 3 : 0]};       \
        const int64_t nb = n / (BLCK);                                                                  \
        for (int64_t r = 0; r < n_rows; r++) {                                                          \
            const WBLK *w = (const WBLK *)((const char *)x + (size_t)r * x_stride);                     \
            float o[4];                                                                                 \
            switch (nt) {                                                                               \
            case 1: BODY(w, a, 1, nb, o); break;                                                        \
            case 2: BODY(w, a, 2, nb, o); break;                                                        \
            case 3: BODY(w, a, 3, nb, o); break;                                                        \
            default: BODY(w, a, 4, nb, o); break;                                                       \
            }                                                                                           \
            for (int k = 0; k < nt; k++) s[k * lds + r] = o[k];                                         \
        }                                                                                               \
    }

/* The same from a kernel body DOT_N(n, s, x, y, nt) that takes up to four
 * tokens through MS_XN with y four activation pointers (the four-token
 * dots' bodies: q4k_dot_n and the like). */
#define MS_DEFINE_DOT_ROWS_N_FROM(fn, DOT_N)                                                            \
    __attribute__((flatten)) void fn(int64_t n, float *restrict s, int64_t lds, const void *restrict x, \
                                     size_t x_stride, int64_t n_rows, const void *const *y, int nt) {    \
        const void *const a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 2 ? 2 : 0], y[nt > 3 ? 3 : 0]};       \
        for (int64_t r = 0; r < n_rows; r++) {                                                          \
            const void *w = (const char *)x + (size_t)r * x_stride;                                     \
            float o[4];                                                                                 \
            switch (nt) {                                                                               \
            case 1: DOT_N(n, o, w, a, 1); break;                                                        \
            case 2: DOT_N(n, o, w, a, 2); break;                                                        \
            case 3: DOT_N(n, o, w, a, 3); break;                                                        \
            default: DOT_N(n, o, w, a, 4); break;                                                       \
            }                                                                                           \
            for (int k = 0; k < nt; k++) s[k * lds + r] = o[k];                                         \
        }                                                                                               \
    }

/* fp16 block scale -> f32 with F16C: exact, and NaN handling as the
 * reference (ms_fp16_to_f32_inline), at a fraction of its cost. */
static inline float fp16_scale(uint16_t h) { return _cvtsh_ss(h); }

static inline float hsum256_f32(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax256_f32(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int32_t hsum256_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* *ta, *tb = the sums of a's and of b's eight int32 lanes, in one reduction
 * tree for both (integer sums: exact in any order). */
static inline void hsum2x256_i32(__m256i a, __m256i b, int32_t *ta, int32_t *tb) {
    /* a's four partial sums in the low 128 bits, b's in the high */
    __m256i v = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
    v = _mm256_add_epi32(v, _mm256_shuffle_epi32(v, 0x4e));
    v = _mm256_add_epi32(v, _mm256_shuffle_epi32(v, 0xb1));
    *ta = _mm256_cvtsi256_si32(v);
    *tb = _mm256_extract_epi32(v, 4);
}

/* Sum of w[j] * a[j] over 32 int8 pairs, as 8 f32 lanes (exact): ggml's sign
 * trick, maddubs(|w|, sign(a, w)), valid while a has no -128. */
static inline __m256 dot_i8x32(__m256i w, __m256i a) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* The 32 MXFP4 codes of a block as int8 values (doubled E2M1) in element
 * order: low nibbles are elements 0..15, high nibbles 16..31. */
static inline __m256i mxfp4_values(const block_mxfp4 *b) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)ms_kvalues_mxfp4);
    const __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    return _mm256_set_m128i(hi, lo);
}

/* Block i of a Q8_0 row (mx false) or an MXFP4 row (mx true), both 32 int8
 * values with one scale: the dots with Q8_0 activations share their loops. */
MS_SIMD_INLINE __m256i w32_values(const void *w, int64_t i, bool mx) {
    if (mx) return mxfp4_values(&((const block_mxfp4 *)w)[i]);
    return _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)w)[i].qs);
}

MS_SIMD_INLINE float w32_scale(const void *w, int64_t i, bool mx) {
    return mx ? ms_e8m0_to_f32_half(((const block_mxfp4 *)w)[i].e) : fp16_scale(((const block_q8_0 *)w)[i].d);
}

/* The 32 bits at p in every lane, as a broadcast load. Written as
 * _mm256_set1_epi32 of a value just stored, gcc forwards it through
 * register shuffles instead (two vector operations a broadcast, on the
 * pipes the multiplies of the pmaddwd token-lane GEMMs need). The "m"
 * operand tells the compiler the asm reads that memory, so it stays after
 * the stores. */
static inline __m256i bcast32(const void *p) {
    __m256i r;
    __asm__("vpbroadcastd %1, %0" : "=x"(r) : "m"(*(const int32_t *)p));
    return r;
}

/* Software prefetch for the single-token dots, which stream their weight
 * rows from memory in decode: `lines` cache lines starting MS_PREFETCH_AHEAD
 * bytes past p (rows of a matrix are contiguous, so the stream runs on into
 * the next row; a prefetch past the end is harmless). The hardware
 * prefetchers alone left a Zen 3 core at 14.0 GB/s for a Q8_0 row stream
 * from DRAM (read bandwidth 20.9), this gets 17.6-18.7 (bench_kernels -t 1
 * --types q8_0 --rows 1024 --cols 4096 --batches 1 --working-set 512;
 * 512 bytes ahead: 15.2, 1024: 16.4, 2048 and 4096: 17.2 in a first
 * sweep); Q4_K 11.5 -> 13.1, F16 12 -> 14.2, Q8_0 x Q16_0 13 -> 14.9,
 * and decode of the 3 GB bench models +7% (ds4 mix) to +20% (Q8_0). The
 * AVX2 single-token dots of Q8_0 (both activation formats), F16/BF16,
 * Q4_K and Q2_K use it, and the VBMI IQ2_XXS many-rows dot: bound by
 * decoding its codes in cache, it still waited on memory in decode, where
 * each routed expert is a cold stream (with matmul.c's tile-start prefetch,
 * ds4 decode +1-3%). */
#define MS_PREFETCH_AHEAD 2048

static inline void prefetch_ahead(const void *p, int lines) {
    /* asm, not _mm_prefetch: gcc 12's dead-code pass drops __builtin_prefetch
     * inside these kernels (their rows are restrict pointers) */
    for (int l = 0; l < lines; l++)
        __asm__ volatile("prefetcht0 %0" : : "m"(*((const char *)p + MS_PREFETCH_AHEAD + 64 * l)));
}

/* The most bytes a group of rows that a many-rows dot reads in lanes (eight
 * rows, block by block) may span. Past one 4 KiB page the group's eight
 * interleaved row streams lose the hardware prefetch that one row's linear
 * stream gets: on a Zen 4 core (bench_kernels -t 1 --batches 1
 * --working-set 1024 --order random, mean GB/s of the products, rows in
 * lanes against one row at a time) Q2_K rows of 336 bytes went 11.9 ->
 * 13.1, of 672 bytes 12.2 -> 8.6; IQ2_XXS rows of 528 bytes 10.7 -> 10.4,
 * of 1056 bytes 11.6 -> 7.2. */
#define MS_ROWS_LANES_MAX_BYTES 4096

/* A token-lane GEMM's row result: y[t * ldy + r] = lane t of v, t < nt. */
static inline void x8_store(float *y, int64_t ldy, int64_t r, __m256 v, int nt) {
    float o[8];
    _mm256_storeu_ps(o, v);
    for (int t = 0; t < nt; t++) y[t * ldy + r] = o[t];
}

/* An 8-lane token-lane GEMM (ms_gemm_tok_fn) named fn over rows of block
 * type BLK (QK elements a block) that takes rows four at a time:
 * ROWS(w, nb, pack, out, R) computes out[k] for the R rows w[k], R a
 * constant 1..4 in each call (a last group of fewer rows repeats row 0's
 * pointer in the unused slots, which ROWS leaves alone). */
#define MS_DEFINE_GEMM_X8_ROWS4(fn, BLK, QK, ROWS)                                                        \
    void fn(int64_t n, float *restrict y, int64_t ldy, const void *restrict w, size_t w_stride,          \
            int64_t n_rows, const void *restrict pack, int nt) {                                          \
        const int64_t nb = n / (QK);                                                                      \
        __m256 out[4];                                                                                    \
        for (int64_t r = 0; r < n_rows; r += 4) {                                                         \
            const int64_t left = n_rows - r;                                                              \
            const BLK *wr[4];                                                                             \
            for (int k = 0; k < 4; k++)                                                                   \
                wr[k] = (const BLK *)((const char *)w + (size_t)(r + (k < left ? k : 0)) * w_stride);    \
            const int R = left < 4 ? (int)left : 4;                                                       \
            switch (R) { /* R a constant in each call */                                                 \
            case 4: ROWS(wr, nb, pack, out, 4); break;                                                    \
            case 3: ROWS(wr, nb, pack, out, 3); break;                                                    \
            case 2: ROWS(wr, nb, pack, out, 2); break;                                                    \
            default: ROWS(wr, nb, pack, out, 1); break;                                                   \
            }                                                                                             \
            for (int k = 0; k < R; k++) x8_store(y, ldy, r + k, out[k], nt);                             \
        }                                                                                                 \
    }

/* The AVX2 dot (ms_vec_dot_fn) of a QK_K-block format fmt (block type
 * blk) with f32 activations, n values: each block dequantized to the stack
 * by ms_dequant_<fmt>_avx2 (QK_K floats), then multiplied by its QK_K
 * activations and added in one 8-lane f32 FMA accumulator (lane l takes
 * elements 8 j + l), reduced by hsum256_f32 at the end. Equal to the
 * reference but for the order of the f32 sums. */
#define MS_DEFINE_DOT_F32_AVX2(fmt, blk)                                                                  \
    MS_DECL_DOT(fmt, f32, avx2) {                                                                         \
        const blk *w = x;                                                                                 \
        const float *a = y;                                                                               \
        float tmp[QK_K];                                                                                  \
        __m256 acc = _mm256_setzero_ps();                                                                 \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                          \
            ms_dequant_##fmt##_avx2(&w[i], tmp, QK_K);                                                    \
            for (int j = 0; j < QK_K; j += 8)                                                             \
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(tmp + j), _mm256_loadu_ps(a + i * QK_K + j), acc);  \
        }                                                                                                 \
        *s = hsum256_f32(acc);                                                                            \
    }

/* ---- the 8-lane token-lane GEMM pieces of the K-quants (Q4_K, Q2_K in
 * quant_kq_avx2.c, Q5_K, Q3_K in quant_q35k_avx2.c): tokens in the 32-bit
 * lanes of a block_q8_Kx8, four codes of a row broadcast to every lane. */

/* One sub-block's products for the 8 tokens: steps x 4 unsigned codes
 * (codes[0 .. 4 steps - 1], each 4 broadcast to every lane) against the
 * pack's activations a[j] (step j: 4 int8 values a token), the vpmaddubsw
 * pair sums added in int16, then weighted by the scale pair scp (the
 * sub-block's scale in both int16 halves, signed or not) with one
 * vpmaddwd: lane t is token t's scale * sum of code * activation, int32.
 * The int16 sums must not saturate: steps * 2 * max code * 128 <= 32767
 * (Q4_K: 8 steps of codes <= 15; Q5_K: 4 of codes <= 31). */
MS_SIMD_INLINE __m256i kq_x8_sub(const uint8_t *codes, const int8_t (*a)[32], const int steps, uint32_t scp) {
    __m256i acc16 = _mm256_setzero_si256();
    _Pragma("GCC unroll 8")
    for (int j = 0; j < steps; j++) {
        uint32_t wv;
        memcpy(&wv, codes + 4 * j, 4);
        acc16 = _mm256_add_epi16(acc16, _mm256_maddubs_epi16(_mm256_set1_epi32((int)wv),
                                                             _mm256_load_si256((const __m256i *)a[j])));
    }
    return _mm256_madd_epi16(acc16, _mm256_set1_epi32((int)scp));
}

/* The min (or offset) term for the 8 tokens: lane t is the sum over q < n
 * of token t's int16 pair pairs[q] (two sub-block bsums: the pack's bsp or
 * bs16) times the int16 pair mp[q] (those sub-blocks' mins or scales), in
 * int32 (exact). */
MS_SIMD_INLINE __m256i kq_x8_mins(const int16_t (*pairs)[16], const uint32_t *mp, const int n) {
    __m256i summ = _mm256_setzero_si256();
    _Pragma("GCC unroll 8")
    for (int q = 0; q < n; q++)
        summ = _mm256_add_epi32(summ, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)pairs[q]),
                                                        _mm256_set1_epi32((int)mp[q])));
    return summ;
}

/* One block's float step for the 8 tokens (formats with d and dmin: Q4_K,
 * Q5_K, Q2_K): lane t of accf plus ms_kq_block_sum_f32(ad8[t], d, dmin,
 * sumi[t], summ[t]) (quant_kq.h), the reference's operations in its order
 * ((ad * d) * sumi - (ad * dmin) * summ); d, dmin the block's fp16 scales,
 * ad8 the pack's 8 activation scales (32-byte aligned). */
static inline __m256 kq_x8_block_add(__m256 accf, const float ad8[8], uint16_t d, uint16_t dmin, __m256i sumi,
                                     __m256i summ) {
    const __m256 ad = _mm256_load_ps(ad8);
    const __m256 sd = _mm256_mul_ps(ad, _mm256_set1_ps(fp16_scale(d)));
    const __m256 smin = _mm256_mul_ps(ad, _mm256_set1_ps(fp16_scale(dmin)));
    return _mm256_add_ps(accf, _mm256_sub_ps(_mm256_mul_ps(sd, _mm256_cvtepi32_ps(sumi)),
                                             _mm256_mul_ps(smin, _mm256_cvtepi32_ps(summ))));
}

/* A Q4_K or Q5_K block unpacked for the products (both have 8 sub-blocks
 * of 32 and 6-bit scales and mins): codes[s] sub-block s's 32 codes in
 * value order, scp[s] its scale in both int16 halves, mp[p] the mins of
 * sub-blocks 2 p, 2 p + 1 as an int16 pair. */
struct kq_x8_buf8 {
    uint8_t codes[8][32] __attribute__((aligned(32)));
    uint32_t scp[8] __attribute__((aligned(32)));
    uint32_t mp[4] __attribute__((aligned(16)));
};

/* An 8-lane token-lane GEMM (ms_gemm_tok_fn) named fn over rows of BLK
 * (QK_K values a block) against a block_q8_Kx8 pack, one row at a time,
 * and fn##_row, one row's 8 results: each block is unpacked (EXPAND(b,
 * &buf)) one block ahead of its products (PRODUCTS(&buf, b, &pack[i],
 * accf), returning the row's 8 sums with the block's added), into the
 * other of two BUFs: the products read the codes by 4-byte broadcast
 * loads, which wait on the stores that wrote them when both are of the
 * same block (as the AVX-512 GEMMs, MS_DEFINE_GEMM_KQ_X16). */
#define MS_DEFINE_GEMM_KQ_X8(fn, BLK, BUF, EXPAND, PRODUCTS)                                              \
    MS_SIMD_INLINE __m256 fn##_row(int64_t nb, const BLK *w, const block_q8_Kx8 *a) {                    \
        BUF buf[2];                                                                                       \
        __m256 accf = _mm256_setzero_ps();                                                                \
        if (nb > 0) EXPAND(&w[0], &buf[0]);                                                               \
        for (int64_t i = 0; i < nb; i++) {                                                                \
            if (i + 1 < nb) EXPAND(&w[i + 1], &buf[(i + 1) & 1]);                                         \
            accf = PRODUCTS(&buf[i & 1], &w[i], &a[i], accf);                                             \
        }                                                                                                 \
        return accf;                                                                                      \
    }                                                                                                     \
    void fn(int64_t n, float *restrict y, int64_t ldy, const void *restrict w, size_t w_stride,          \
            int64_t n_rows, const void *restrict pack, int nt) {                                          \
        for (int64_t r = 0; r < n_rows; r++)                                                              \
            x8_store(y, ldy, r, fn##_row(n / QK_K, (const BLK *)((const char *)w + (size_t)r * w_stride), \
                                         pack),                                                           \
                     nt);                                                                                 \
    }

/* acc[i % 4] += p_i for the nc <= 8 blocks of p (lane j = block c + j, c a
 * multiple of 4, lanes past nc +0, which leaves a sum unchanged: it starts
 * at +0 and is never -0): the float step of the Q8_0 x Q8_0 and Q8_0 x
 * Q16_0 dots of the AVX2 set. */
static inline __m128 add8_by4(__m128 acc, __m256 p) {
    acc = _mm_add_ps(acc, _mm256_castps256_ps128(p));
    return _mm_add_ps(acc, _mm256_extractf128_ps(p, 1));
}

/* (acc[0] + acc[2]) + (acc[1] + acc[3]) */
static inline float reduce_by4(__m128 acc) {
    const __m128 h = _mm_add_ps(acc, _mm_movehl_ps(acc, acc));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* Eight registers of eight int32 partial sums (p[j]: block j) to one
 * register with block j's sum in lane j. */
static inline __m256i block_sums8(const __m256i p[8]) {
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    /* lanes 0-3: blocks 0-3 (low 128-bit halves' sums), lanes 4-7: the same blocks' high halves */
    const __m256i s03 = _mm256_hadd_epi32(h01, h23), s47 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(s03, s47, 0x20), _mm256_permute2x128_si256(s03, s47, 0x31));
}

/* The fp16 scales of Q8_0 blocks b[0 .. nc - 1] (weights or activations)
 * as f32, +0 past nc <= 8, by word inserts (a short last group goes
 * through a small array). A gather measured slower on a Zen 3 core: the
 * Q8_0 x Q8_0 single-token dot 26 against 31 GFLOPS, Q8_0 x Q16_0 (its
 * weight scales) 14.3-15.0 against 16.2-16.6 GB/s from DRAM
 * (bench_kernels -t 1 --rows 1024 --cols 4096 --batches 1 --working-set
 * 512). */
static inline __m256 q8_0_scales8_ins(const block_q8_0 *b, int64_t nc) {
    __m128i h = _mm_setzero_si128();
    if (nc == 8) {
        h = _mm_insert_epi16(h, b[0].d, 0), h = _mm_insert_epi16(h, b[1].d, 1);
        h = _mm_insert_epi16(h, b[2].d, 2), h = _mm_insert_epi16(h, b[3].d, 3);
        h = _mm_insert_epi16(h, b[4].d, 4), h = _mm_insert_epi16(h, b[5].d, 5);
        h = _mm_insert_epi16(h, b[6].d, 6), h = _mm_insert_epi16(h, b[7].d, 7);
    } else {
        uint16_t v[8] = {0};
        for (int64_t q = 0; q < nc; q++) v[q] = b[q].d;
        h = _mm_loadu_si128((const __m128i *)v);
    }
    return _mm256_cvtph_ps(h);
}

/* sum_k bsums[k] * w16[k] over the 16 int16 sub-block sums of a Q8_K block:
 * the min term of the Q4_K and Q2_K dots. */
static inline int32_t q8k_bsums_dot(const int16_t bsums[16], __m256i w16) {
    return hsum256_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), w16));
}

/* The 8 Q4_K mins as 16 int16, each twice: min j covers bsums 2j and 2j+1. */
static inline __m256i q4k_mins16_u64(uint64_t m) {
    const __m128i m8 = _mm_cvtsi64_si128((long long)m);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

static inline __m256i q4k_mins16(const uint8_t m[8]) {
    const __m128i m8 = _mm_loadl_epi64((const __m128i *)m);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

/* The AVX-512 dot (ms_vec_dot_fn) of a QK_K-block format fmt (block type
 * blk) with f32 activations, n values: each block dequantized to the stack
 * by ms_dequant_<fmt>_avx512 (QK_K floats), then multiplied by its QK_K
 * activations and added in one 16-lane f32 FMA accumulator, reduced by
 * _mm512_reduce_add_ps at the end. Equal to the reference but for the
 * order of the f32 sums. */
#define MS_DEFINE_DOT_F32_AVX512(fmt, blk)                                                                \
    MS_DECL_DOT(fmt, f32, avx512) {                                                                       \
        const blk *w = x;                                                                                 \
        const float *a = y;                                                                               \
        float tmp[QK_K];                                                                                  \
        __m512 acc = _mm512_setzero_ps();                                                                 \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                          \
            ms_dequant_##fmt##_avx512(&w[i], tmp, QK_K);                                                  \
            for (int j = 0; j < QK_K; j += 16)                                                            \
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(tmp + j), _mm512_loadu_ps(a + i * QK_K + j), acc);  \
        }                                                                                                 \
        *s = _mm512_reduce_add_ps(acc);                                                                   \
    }

#ifdef __AVX512F__
/* A token pack's 64 activation bytes, loaded once into a register for the
 * rows that share them. Left to itself, GCC folds a load that several
 * vpdpbusd use into each of them as a memory operand, so a row pair read
 * the same 64 bytes twice; the empty asm makes the value a register's.
 * With two rows the token-lane GEMMs issued four loads for two vpdpbusd. */
static inline __m512i load_act512(const void *p) {
    __m512i v = _mm512_load_si512(p);
    __asm__("" : "+v"(v));
    return v;
}

/* a's 16 int32 lanes folded to 8 (lane l + lane l + 8) */
static inline __m256i fold256_i32(__m512i a) {
    return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}

/* Two 256-bit halves: lo in bits 0..255, hi in 256..511. */
static inline __m512i cat256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The 128-bit lane pairs of a and b summed (int32): lanes 0 and 1 of the
 * result hold a's lanes 0 + 1 and 2 + 3, lanes 2 and 3 b's. */
static inline __m512i lane_pairs_add_i32(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xdd));
}

/* Each 128-bit lane's four int32 summed (exactly) and converted to float
 * as a (float) cast does (round to nearest), in all four of its lanes. */
static inline __m512 lane_sums_i32_ps(__m512i z) {
    z = _mm512_add_epi32(z, _mm512_shuffle_epi32(z, 0x4e));
    z = _mm512_add_epi32(z, _mm512_shuffle_epi32(z, 0xb1));
    return _mm512_cvtepi32_ps(z);
}

static inline __m512i load2x32(const void *lo, const void *hi) {
    return cat256(_mm256_loadu_si256((const __m256i *)lo), _mm256_loadu_si256((const __m256i *)hi));
}

/* Block scales, 16 at a time (blocks 0 .. nc - 1 of b, nc <= 16): lane j
 * holds block j's scale as f32, lanes from nc on hold 0. The raw scales are
 * inserted one by one (vpinsrw / vpinsrb with a memory operand; measured
 * faster here than vpgatherdd or than a GPR shift-or) and converted all
 * at once: the same f32 values as fp16_scale and ms_e8m0_to_f32_half (mxfp4_scales16, quant_basic_avx512.c). */
#define INS16(v, b, j, l) v = _mm_insert_epi16(v, (b)[j].d, l)
#define INS16_IF(v, b, nc, j, l) \
    if ((j) < (nc)) INS16(v, b, j, l)

MS_SIMD_INLINE __m512 q8_0_scales16(const block_q8_0 *b, int64_t nc) {
    __m128i lo = _mm_setzero_si128(), hi = _mm_setzero_si128();
    if (nc == 16) { /* the usual case: no tests */
        INS16(lo, b, 0, 0); INS16(lo, b, 1, 1); INS16(lo, b, 2, 2); INS16(lo, b, 3, 3);
        INS16(lo, b, 4, 4); INS16(lo, b, 5, 5); INS16(lo, b, 6, 6); INS16(lo, b, 7, 7);
        INS16(hi, b, 8, 0); INS16(hi, b, 9, 1); INS16(hi, b, 10, 2); INS16(hi, b, 11, 3);
        INS16(hi, b, 12, 4); INS16(hi, b, 13, 5); INS16(hi, b, 14, 6); INS16(hi, b, 15, 7);
    } else {
        INS16(lo, b, 0, 0); /* nc >= 1 */
        INS16_IF(lo, b, nc, 1, 1);
        INS16_IF(lo, b, nc, 2, 2);
        INS16_IF(lo, b, nc, 3, 3);
        INS16_IF(lo, b, nc, 4, 4);
        INS16_IF(lo, b, nc, 5, 5);
        INS16_IF(lo, b, nc, 6, 6);
        INS16_IF(lo, b, nc, 7, 7);
        INS16_IF(hi, b, nc, 8, 0);
        INS16_IF(hi, b, nc, 9, 1);
        INS16_IF(hi, b, nc, 10, 2);
        INS16_IF(hi, b, nc, 11, 3);
        INS16_IF(hi, b, nc, 12, 4);
        INS16_IF(hi, b, nc, 13, 5);
        INS16_IF(hi, b, nc, 14, 6);
    }
    return _mm512_cvtph_ps(_mm256_set_m128i(hi, lo));
}

/* Eight registers of partial sums (p[q]: block 2q in lanes 0-7, block
 * 2q + 1 in lanes 8-15) to one with block j's sum in lane j: in-lane
 * unpacks add 4 partials per 128-bit lane (register B lane 4m + k is
 * 128-bit lane m of p[k]), one 128-bit shuffle pair adds the two halves of
 * each block, and a last permute puts the blocks in order. */
static inline __m512i block_sums16(const __m512i p[8]) {
    __m512i b[2];
    for (int h = 0; h < 2; h++) {
        const __m512i *q = p + 4 * h;
        const __m512i a0 = _mm512_add_epi32(_mm512_unpacklo_epi32(q[0], q[1]), _mm512_unpackhi_epi32(q[0], q[1]));
        const __m512i a1 = _mm512_add_epi32(_mm512_unpacklo_epi32(q[2], q[3]), _mm512_unpackhi_epi32(q[2], q[3]));
        b[h] = _mm512_add_epi32(_mm512_unpacklo_epi64(a0, a1), _mm512_unpackhi_epi64(a0, a1));
    }
    /* lane 4u + k: u = 0 block 2k, 1 block 2k + 1, 2 block 8 + 2k, 3 block 9 + 2k */
    const __m512i c = _mm512_add_epi32(_mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    return _mm512_permutexvar_epi32(order, c);
}

/* acc[i % 4] += p_i for the nc <= 16 blocks of p (lane j = block c + j, c a
 * multiple of 4), lanes past nc being +0 (which leaves a sum unchanged: it
 * starts at +0 and is never -0). */
static inline __m128 add_by4(__m128 acc, __m512 p) {
    acc = _mm_add_ps(acc, _mm512_castps512_ps128(p));
    acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(p, 1));
    acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(p, 2));
    return _mm_add_ps(acc, _mm512_extractf32x4_ps(p, 3));
}

/* The float step of the AVX-512 Q8_0 x Q8_0 and Q8_0 x Q16_0 dots for 16
 * blocks: acc[i % 4] += (float)sumi_i * (ws_i * da_i) (weight scale times
 * activation scale, then the block sum), lanes past the row's end +0. The
 * single, four-token and many-rows forms all take it from here. */
static inline __m128 q8_0_step16(__m128 acc, __m512i sumi, __m512 ws, __m512 da) {
    return add_by4(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(ws, da)));
}


/* A token-lane GEMM's row result: y[t * ldy + r] = lane t of v, t < nt. */
static inline void x16_store(float *y, int64_t ldy, int64_t r, __m512 v, int nt) {
    float o[16];
    _mm512_storeu_ps(o, v);
    for (int t = 0; t < nt; t++) y[t * ldy + r] = o[t];
}

/* A token-lane GEMM of Q8_0 rows (ms_gemm_tok_fn) named fn, over up to
 * PMAX (1 or 2) packs of 16 tokens of type PACK (nt up to 16 PMAX, the
 * second pack's blocks right after the first's), from its block step
 * BLOCK(w, i, ab, acc, R, P): acc[k][q] += row k's float step for block i
 * with pack q, for R (1 or 2, a constant) rows w[k] and P (1 or 2) packs
 * ab[q]. Rows go in pairs (a last odd row alone); each row keeps four sums
 * by block index modulo 4, combined as (s0 + s2) + (s1 + s3): the order of
 * the Q8_0 x Q8_0 and Q8_0 x Q16_0 single-token dots of the AVX-512 set.
 * Four blocks' steps are unrolled into one body, whose accumulator chains
 * the core overlaps. Why two packs: see MS_DEFINE_GEMM_KQ_X16 below. PF1
 * (0 or 1): whether calls of one pack prefetch their rows ahead (as the
 * K-quant GEMMs do, see there). */
#define MS_GEMM_Q8_0_X16_RUN(PACK, BLOCK, R, P, PF)                                                      \
    do {                                                                                                  \
        for (; r + (R) <= n_rows; r += (R)) {                                                             \
            const block_q8_0 *const rows[2] = {                                                           \
                (const block_q8_0 *)((const char *)w + (size_t)r * w_stride),                             \
                (const block_q8_0 *)((const char *)w + (size_t)(r + (R) - 1) * w_stride)};                \
            __m512 acc[4][2][2];                                                                          \
            for (int m = 0; m < 4; m++) acc[m][0][0] = acc[m][0][1] = acc[m][1][0] = acc[m][1][1] = _mm512_setzero_ps(); \
            for (int64_t i = 0; i < nb; i += 4) {                                                         \
                if (PF) for (int k = 0; k < (R); k++) prefetch_ahead(&rows[k][i], 3);                     \
                _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) if (i + m < nb) {                     \
                    const PACK *const ab[2] = {&a[i + m], &a[(P) > 1 ? nb + i + m : i + m]};              \
                    BLOCK(rows, i + m, ab, acc[m], R, P);                                                 \
                }                                                                                         \
            }                                                                                             \
            for (int k = 0; k < (R); k++)                                                                 \
                for (int q = 0; q < (P); q++)                                                             \
                    x16_store(y + (size_t)(16 * q) * (size_t)ldy, ldy, r + k,                             \
                              _mm512_add_ps(_mm512_add_ps(acc[0][k][q], acc[2][k][q]),                    \
                                            _mm512_add_ps(acc[1][k][q], acc[3][k][q])),                   \
                              q ? nt - 16 : nt < 16 ? nt : 16);                                           \
        }                                                                                                 \
    } while (0)

#define MS_DEFINE_GEMM_Q8_0_X16(fn, PACK, BLOCK, PMAX, PF1)                                              \
    void fn(int64_t n, float *restrict y, int64_t ldy, const void *restrict w, size_t w_stride,           \
            int64_t n_rows, const void *restrict pack, int nt) {                                          \
        const PACK *a = pack;                                                                             \
        const int64_t nb = n / QK8_0;                                                                     \
        int64_t r = 0;                                                                                    \
        if ((PMAX) > 1 && nt > 16) {                                                                      \
            MS_GEMM_Q8_0_X16_RUN(PACK, BLOCK, 2, 2, 0);                                                   \
            MS_GEMM_Q8_0_X16_RUN(PACK, BLOCK, 1, 2, 0);                                                   \
        } else {                                                                                          \
            MS_GEMM_Q8_0_X16_RUN(PACK, BLOCK, 2, 1, PF1);                                                 \
            MS_GEMM_Q8_0_X16_RUN(PACK, BLOCK, 1, 1, PF1);                                                 \
        }                                                                                                 \
    }

/* A token-lane GEMM of Q8_K-activation rows (ms_gemm_tok_fn) named fn,
 * over one or two packs of 16 tokens (block_q8_Kx16; nt up to 32, the
 * second pack's blocks right after the first's), for weight blocks of type
 * BLK: EXPAND(b, buf, R) unpacks block i of R (1 or 2, a constant) rows
 * b[k] into a BUF, PRODUCTS(buf, b, ab, acc, R, P) adds their products
 * with block i of P (1 or 2, a constant) packs ab[q] to acc[k][q], and
 * FINISH(acc) turns a row's sums into its results.
 *
 * Why two packs (Zen 5, where vpdpbusd issues two a cycle and loads, the
 * broadcasts included, two a cycle): each vpdpbusd needs its row's four
 * codes broadcast (a load) and 64 bytes of the pack (a load shared by the
 * rows). Two rows and one pack make three loads per two vpdpbusd, two rows
 * and two packs four per four; a loop of nothing else ran 447 and 712 GOPS
 * of the core's 848. So a call takes two packs where it has them.
 * Rows go in pairs (a last odd row alone), each pair over all its blocks:
 * one weight stream per row, which the hardware prefetcher follows (groups
 * of four pairs taking block i in turn kept the pack's block in L1 and ran
 * 10% faster on weights in cache, but a routed expert's cold rows, eight
 * streams at once, lost up to 30% at 16-32 tokens, software prefetch
 * included).
 *
 * A call of one pack prefetches each row's stream MS_PREFETCH_AHEAD bytes
 * ahead, a block's bytes and a line more each block: the hardware
 * prefetcher alone left a routed expert's few tokens waiting on memory.
 * Zen 5, bench_kernels -t 1 --clock cpu, medians of three interleaved
 * runs against the kernels without it, GFLOPS at 16 tokens: a bench
 * model's expert (--rows 512 --cols 1024 --working-set 256) Q4_K 199 ->
 * 291, Q6_K 166 -> 251, Q5_K 183 -> 279, Q3_K 210 -> 255, IQ4_XS 191 ->
 * 229, Q2_K 240 -> 268, IQ2_XXS 267 -> 292, Q8_0 231 -> 321 (its GEMM
 * above: three lines every four blocks, two measured 7% slower); Flash's
 * (--rows 2048 --cols 4096 --working-set 512) IQ2_XXS 237 -> 314, Q4_K
 * 240 -> 317, Q2_K 290 -> 295, Q8_0 249 -> 268; weights in cache -3% to
 * +4%. With two packs it lost 2-5% on Flash's shape (and Q8_0 14% on the
 * bench shape), so those calls do not.
 *
 * Each block is unpacked one block ahead of its products, into the other
 * of two buffers: the products read the codes by 4-byte broadcast loads,
 * which wait on the stores that just wrote them when both are of the same
 * block (Zen 4, 2048 x 4096 x 512: Q4_K 189-190 -> 199-202 GFLOPS, IQ2_XXS
 * (VBMI) 151-157 -> 165-167). The VBMI-less IQ2_XXS set keeps one block at
 * a time (quant_kq_avx512.c): AHEAD 0 unpacks each block right before its
 * products, AHEAD 1 one block ahead. */
#define MS_GEMM_KQ_X16_RUN(BLK, EXPAND, PRODUCTS, AHEAD, FINISH, R, P)                                   \
    do {                                                                                                  \
        for (; r + (R) <= n_rows; r += (R)) {                                                             \
            const BLK *const b0 = (const BLK *)((const char *)w + (size_t)r * w_stride);                  \
            const BLK *const b1 = (const BLK *)((const char *)w + (size_t)(r + (R) - 1) * w_stride);      \
            __m512 acc[2][2] = {{_mm512_setzero_ps(), _mm512_setzero_ps()},                               \
                                {_mm512_setzero_ps(), _mm512_setzero_ps()}};                              \
            if ((AHEAD) && nb > 0) {                                                                      \
                const BLK *const bb[2] = {&b0[0], &b1[0]};                                                \
                EXPAND(bb, &buf[0], R);                                                                   \
            }                                                                                             \
            for (int64_t i = 0; i < nb; i++) {                                                            \
                const BLK *const bb[2] = {&b0[i], &b1[i]};                                                \
                if ((P) == 1)                                                                             \
                    for (int k = 0; k < (R); k++) prefetch_ahead(bb[k], (int)(sizeof(BLK) / 64) + 1);     \
                if (!(AHEAD)) {                                                                           \
                    EXPAND(bb, &buf[0], R);                                                               \
                } else if (i + 1 < nb) {                                                                  \
                    const BLK *const bn[2] = {&b0[i + 1], &b1[i + 1]};                                    \
                    EXPAND(bn, &buf[(i + 1) & 1], R);                                                     \
                }                                                                                         \
                const block_q8_Kx16 *const ab[2] = {&a[i], &a[(P) > 1 ? nb + i : i]};                     \
                PRODUCTS(&buf[(AHEAD) ? i & 1 : 0], bb, ab, acc, R, P);                                   \
            }                                                                                             \
            for (int k = 0; k < (R); k++)                                                                 \
                for (int q = 0; q < (P); q++)                                                             \
                    x16_store(y + (size_t)(16 * q) * (size_t)ldy, ldy, r + k, FINISH(acc[k][q]),          \
                              q ? nt - 16 : nt < 16 ? nt : 16);                                           \
        }                                                                                                 \
    } while (0)

#define MS_DEFINE_GEMM_KQ_X16(fn, BLK, BUF, EXPAND, PRODUCTS, AHEAD, FINISH)                             \
    void fn(int64_t n, float *restrict y, int64_t ldy, const void *restrict w, size_t w_stride,           \
            int64_t n_rows, const void *restrict pack, int nt) {                                          \
        const block_q8_Kx16 *a = pack;                                                                    \
        const int64_t nb = n / QK_K;                                                                      \
        BUF buf[2];                                                                                       \
        int64_t r = 0;                                                                                    \
        if (nt > 16) {                                                                                    \
            MS_GEMM_KQ_X16_RUN(BLK, EXPAND, PRODUCTS, AHEAD, FINISH, 2, 2);                               \
            MS_GEMM_KQ_X16_RUN(BLK, EXPAND, PRODUCTS, AHEAD, FINISH, 1, 2);                               \
        } else {                                                                                          \
            MS_GEMM_KQ_X16_RUN(BLK, EXPAND, PRODUCTS, AHEAD, FINISH, 2, 1);                               \
            MS_GEMM_KQ_X16_RUN(BLK, EXPAND, PRODUCTS, AHEAD, FINISH, 1, 1);                               \
        }                                                                                                 \
    }

/* ---- the 16-lane token-lane GEMM pieces of the K-quants (MS_DEFINE_GEMM_KQ_X16's
 * PRODUCTS and FINISH: Q4_K, Q2_K in quant_kq_avx512.c, Q5_K, Q3_K in
 * quant_q35k_avx512.c, Q6_K in quant_q6k_avx512.c) */

/* FINISH for the formats whose row sums are the results. */
static inline __m512 kq_x16_final(__m512 v) { return v; }

/* One block's float step for the 16 tokens (formats with d and dmin: Q4_K,
 * Q5_K, Q2_K): lane t of accf plus ms_kq_block_sum_f32(ad[t], d, dmin,
 * sumi[t], summ[t]) (quant_kq.h), the reference's operations in its order
 * ((ad * d) * sumi - (ad * dmin) * summ); d, dmin the block's fp16 scales,
 * ad the pack's 16 activation scales. */
static inline __m512 kq_x16_block_add(__m512 accf, __m512 ad, uint16_t d, uint16_t dmin, __m512i sumi, __m512i summ) {
    const __m512 sd = _mm512_mul_ps(ad, _mm512_set1_ps(fp16_scale(d)));
    const __m512 smin = _mm512_mul_ps(ad, _mm512_set1_ps(fp16_scale(dmin)));
    return _mm512_add_ps(accf, _mm512_sub_ps(_mm512_mul_ps(sd, _mm512_cvtepi32_ps(sumi)),
                                             _mm512_mul_ps(smin, _mm512_cvtepi32_ps(summ))));
}

/* A Q4_K or Q5_K block of two rows unpacked (MS_DEFINE_GEMM_KQ_X16's BUF;
 * both formats have 8 sub-blocks of 32, 6-bit scales and mins): row k's
 * codes in value order, sub-block s at codes[k][2 (s / 4) + s % 2] + 32
 * ((s / 2) % 2) (the low nibbles of 64 bytes are the even sub-blocks, the
 * high nibbles the odd ones), the scales and mins a byte each in scw[k],
 * mw[k] (ms_q4k_unpack_scales_u64). */
struct kq_x16_buf8 {
    uint8_t codes[2][4][64] __attribute__((aligned(64)));
    uint64_t scw[2], mw[2];
};

/* Sub-blocks whose vpdpbusd steps go interleaved in the products below:
 * enough chains of accumulation (the instruction's latency is 4-5 cycles,
 * two issue a cycle) for CHAINS per sub-block, R rows and P packs. */
#define MS_KQ_X16_SPAN(CHAINS, R, P) ((CHAINS) * (R) * (P) >= 8 ? 1 : 8 / ((CHAINS) * (R) * (P)))

/* kq_x16_products8's sub-block loop (its variables in scope) */
#define KQ_X16_PRODUCTS8_STEPS                                                                                                          \
    for (int s0 = 0; s0 < 8; s0 += U) {                                                                                                 \
        __m512i t[4][2][2][2];                                                                                                          \
        for (int u = 0; u < U; u++)                                                                                                     \
            for (int k = 0; k < R; k++)                                                                                                 \
                for (int q = 0; q < P; q++) t[u][k][q][0] = t[u][k][q][1] = _mm512_setzero_si512();                                     \
        _Pragma("GCC unroll 8")                                                                                                         \
        for (int j = 0; j < 8; j++) {                                                                                                   \
            _Pragma("GCC unroll 4")                                                                                                     \
            for (int u = 0; u < U; u++) {                                                                                               \
                const int s = s0 + u, ci = 2 * (s / 4) + s % 2, co = 32 * ((s / 2) % 2);                                                \
                __m512i av[2];                                                                                                          \
                for (int q = 0; q < P; q++) av[q] = load_act512(ab[q]->qs[s][j]);                                                       \
                for (int k = 0; k < R; k++) {                                                                                           \
                    uint32_t wv;                                                                                                        \
                    memcpy(&wv, codes[k][ci] + co + 4 * j, 4);                                                                          \
                    const __m512i wb = _mm512_set1_epi32((int)wv);                                                                      \
                    for (int q = 0; q < P; q++) t[u][k][q][j % 2] = _mm512_dpbusd_epi32(t[u][k][q][j % 2], wb, av[q]);                  \
                }                                                                                                                       \
            }                                                                                                                           \
        }                                                                                                                               \
        for (int u = 0; u < U; u++)                                                                                                     \
            for (int k = 0; k < R; k++) {                                                                                               \
                const __m512i sc = _mm512_set1_epi32((int)((scw[k] >> (8 * (s0 + u))) & 0xff));                                         \
                for (int q = 0; q < P; q++)                                                                                             \
                    sumi[k][q] = _mm512_add_epi32(sumi[k][q], _mm512_mullo_epi32(_mm512_add_epi32(t[u][k][q][0], t[u][k][q][1]), sc));  \
            }                                                                                                                           \
    }

/* The products of R (1 or 2) rows' blocks, unpacked in buf, with the
 * block of P (1 or 2) packs ab[q] of 16 tokens, added to accf[k][q] (lane
 * t token t): per sub-block eight vpdpbusd steps (four codes, unsigned and
 * at most 31, broadcast to every lane against the int8 activations: exact
 * in int32), its scale by vpmulld; the min term the pack's bsp pairs times
 * the mins pairs; then kq_x16_block_add with row k's fp16 scales d[k],
 * dmin[k]. */
MS_SIMD_INLINE void kq_x16_products8(const struct kq_x16_buf8 *buf, const uint16_t d[2], const uint16_t dmin[2],
                                     const block_q8_Kx16 *const ab[2], __m512 accf[2][2], const int R, const int P) {
    const uint8_t(*const codes)[4][64] = buf->codes;
    const uint64_t *scw = buf->scw, *mw = buf->mw;
    const int U = MS_KQ_X16_SPAN(2, R, P); /* 1, 2 or 4 */
    __m512i sumi[2][2];
    for (int k = 0; k < R; k++)
        for (int q = 0; q < P; q++) sumi[k][q] = _mm512_setzero_si512();
    /* fully unrolled with one pack (the body is small enough, and cold
     * weights at 13-16 tokens ran 5-8% slower rolled), rolled with two
     * (unrolled, GCC kept finished chains in stack slots) */
    if (P == 1) {
        _Pragma("GCC unroll 4")
        KQ_X16_PRODUCTS8_STEPS
    } else {
        _Pragma("GCC unroll 1")
        KQ_X16_PRODUCTS8_STEPS
    }
    for (int q = 0; q < P; q++) {
        const __m512 ad = _mm512_load_ps(ab[q]->d);
        for (int k = 0; k < R; k++) {
            /* the min term: bsp[p] holds (bsub[2p], bsub[2p + 1]) per token,
             * times the mins of sub-blocks 2p, 2p + 1 as an int16 pair */
            __m512i summ = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++) {
                const int mp = (int)(((mw[k] >> (16 * p)) & 0xff) | (((mw[k] >> (16 * p + 8)) & 0xff) << 16));
                summ = _mm512_add_epi32(summ, _mm512_madd_epi16(_mm512_load_si512((const void *)ab[q]->bsp[p]), _mm512_set1_epi32(mp)));
            }
            accf[k][q] = kq_x16_block_add(accf[k][q], ad, d[k], dmin[k], sumi[k][q], summ);
        }
    }
}

#undef KQ_X16_PRODUCTS8_STEPS

/* The integer part of the products of R (1 or 2) rows' blocks of 16
 * sub-blocks of 16 with the block of P (1 or 2) packs ab[q]: sumi[k][q]
 * lane t = sum over sub-blocks sb of sc[k][sb] times the exact int32 dot of
 * row k's codes 16 sb .. 16 sb + 15 (codes[k], value order, unsigned) with
 * token t's activations. Four vpdpbusd steps a sub-block; sub-blocks are
 * interleaved so that eight accumulator chains run (vpdpbusd's latency is
 * 4-5 cycles). Shared by Q6_K, Q3_K, IQ4_XS (kq_x16_products16) and Q2_K. */
MS_SIMD_INLINE void kq_x16_sumi16(const uint8_t *const codes[2], const int8_t *const sc[2],
                                  const block_q8_Kx16 *const ab[2], __m512i sumi[2][2], const int R, const int P) {
    const int U = MS_KQ_X16_SPAN(1, R, P); /* 2, 4 or 8 */
    for (int k = 0; k < R; k++)
        for (int q = 0; q < P; q++) sumi[k][q] = _mm512_setzero_si512();
    _Pragma("GCC unroll 1")
    for (int sb0 = 0; sb0 < QK_K / 16; sb0 += U) {
        __m512i t[8][2][2];
        for (int u = 0; u < U; u++)
            for (int k = 0; k < R; k++)
                for (int q = 0; q < P; q++) t[u][k][q] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            _Pragma("GCC unroll 8")
            for (int u = 0; u < U; u++) {
                const int sb = sb0 + u;
                __m512i av[2];
                for (int q = 0; q < P; q++) av[q] = load_act512(ab[q]->qs[sb / 2][4 * (sb % 2) + j]);
                for (int k = 0; k < R; k++) {
                    uint32_t wv;
                    memcpy(&wv, codes[k] + 16 * sb + 4 * j, 4);
                    const __m512i wb = _mm512_set1_epi32((int)wv);
                    for (int q = 0; q < P; q++) t[u][k][q] = _mm512_dpbusd_epi32(t[u][k][q], wb, av[q]);
                }
            }
        }
        for (int u = 0; u < U; u++)
            for (int k = 0; k < R; k++) {
                const __m512i scv = _mm512_set1_epi32(sc[k][sb0 + u]);
                for (int q = 0; q < P; q++) sumi[k][q] = _mm512_add_epi32(sumi[k][q], _mm512_mullo_epi32(t[u][k][q], scv));
            }
    }
}

/* The products of R (1 or 2) rows' blocks of 16 sub-blocks of 16 with
 * signed int8 scales and an unsigned code offset by -2^shift (Q3_K: codes
 * 0..7 less 4, shift 2; Q6_K: 0..63 less 32, shift 5), with the block of
 * P (1 or 2) packs ab[q] of 16 tokens, added to accf[k][q] (lane t token
 * t): codes[k] row k's 256 codes in value order, sc[k] its 16 scales, d[k]
 * its fp16 scale. Per sub-block four vpdpbusd steps (exact in int32) and
 * its scale by vpmulld make sumi; the offset is the pack's bs16 pairs times
 * the scale pairs, shifted: lane t's isum = sumi - 2^shift summ is the
 * reference's for token t, and (ad * d) * isum is added, the reference's
 * float step in its order. */
MS_SIMD_INLINE void kq_x16_products16(const uint8_t *const codes[2], const int8_t *const sc[2], const uint16_t d[2],
                                      const int shift, const block_q8_Kx16 *const ab[2], __m512 accf[2][2],
                                      const int R, const int P) {
    __m512i sumi[2][2];
    kq_x16_sumi16(codes, sc, ab, sumi, R, P);
    for (int q = 0; q < P; q++) {
        const __m512 ad = _mm512_load_ps(ab[q]->d);
        for (int k = 0; k < R; k++) {
            /* the offset: bs16[p] holds each token's (bsums[2 p], bsums[2 p + 1]), times the scale pair */
            __m512i summ = _mm512_setzero_si512();
            _Pragma("GCC unroll 8")
            for (int p = 0; p < 8; p++) {
                const int sp = (int)((uint16_t)sc[k][2 * p] | (uint32_t)(uint16_t)sc[k][2 * p + 1] << 16);
                summ = _mm512_add_epi32(summ, _mm512_madd_epi16(_mm512_load_si512((const void *)ab[q]->bs16[p]), _mm512_set1_epi32(sp)));
            }
            const __m512i isum = _mm512_sub_epi32(sumi[k][q], _mm512_slli_epi32(summ, shift));
            accf[k][q] = _mm512_add_ps(accf[k][q], _mm512_mul_ps(_mm512_mul_ps(ad, _mm512_set1_ps(fp16_scale(d[k]))),
                                                                 _mm512_cvtepi32_ps(isum)));
        }
    }
}
#endif

#endif
