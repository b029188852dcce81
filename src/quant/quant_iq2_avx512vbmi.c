/*
 * quant_iq2_avx512vbmi.c - IQ2_XXS x Q8_K single-token, four-token and
 * many-rows dots for AVX-512 parts with VBMI and BITALG (Ice Lake, Zen 4
 * and later; not Skylake-X or Cascade Lake, which keep quant_kq_avx512.c's
 * forms).
 *
 * A decode step's IQ2_XXS matmuls are bound by the work of expanding the
 * 2.06-bit codes, not by the bytes read: the VBMI-less 512-bit dot spends
 * about 130 instructions a 256-value block, half of them in scalar code
 * that turns each group's 7 stored sign bits into 8 (pdep and a parity
 * fold, four times a block) and most of the rest in 16-bit table lookups.
 * VBMI's byte permutes (vpermb, vpermi2b) and vpmultishiftqb take both
 * expansions to a few vector instructions, and work on two blocks at once:
 *
 * - a block pair's 64 grid indices are gathered by one vpermi2b, and
 *   looked up in ms_iq2xxs_level_bytes (two 256-byte tables in eight
 *   registers: four vpermi2b and two blends) as each point's 2-bit levels
 *   in two bytes, elements 0-3 and 4-7;
 * - each 64-value register (eight points) then takes those two bytes of
 *   each point into its qword (one vpermi2b), the 2-bit fields into bytes
 *   (one vpmultishiftqb) and the magnitudes {8, 25, 43} from them (one
 *   vpermb);
 * - the signs: vpmultishiftqb pulls every group's 7 stored sign bits into
 *   a byte, a gather like the indices' packs the pair's 64 groups (as an
 *   8 x 8 transpose: qword q holds groups q, 8 + q, ..., 56 + q), and one
 *   vpermi2b looks them up in ms_iq2_ksigns (parity included). A register
 *   takes its 64 sign bits as a mask register by one vpshufbitqmb (BITALG,
 *   on every VBMI part but Cannon Lake), which picks byte r of each qword.
 *
 * The rest is the VBMI-less form's arithmetic: the activations negated by
 * a masked subtract, vpmaddubsw, and VNNI's vpdpwssd with the sub-block
 * scales. The integer sums are exact and the float step is the
 * reference's, in its order, so every result is ms_dot_iq2_xxs_q8_K_ref's,
 * bit for bit. The many-rows form (decode, below) shares the expansion
 * but not the products: it transposes the activations once a call, so
 * that a register takes three instructions instead of about ten.
 */
#include <immintrin.h>
#include <string.h>

#include "quant/iq2_grid.h"
#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_kq_iq2.h"
#include "quant/quant_simd.h"

/* Byte p of a block pair's gather: block p / 32's group p % 32, the byte
 * p % 4 of its sub-block (p % 32) / 4's first word (bit 6 picks the second
 * block's register). The grid indices sit there in the blocks, the sign
 * fields in the multishifted words, so one map gathers both. */
static const uint8_t k_pair_bytes[64] = {
    0,  1,  2,  3,  8,  9,  10, 11, 16, 17, 18, 19, 24, 25, 26, 27, 32, 33, 34, 35, 40, 41,
    42, 43, 48, 49, 50, 51, 56, 57, 58, 59, 64, 65, 66, 67, 72, 73, 74, 75, 80, 81, 82, 83,
    88, 89, 90, 91, 96, 97, 98, 99, 104, 105, 106, 107, 112, 113, 114, 115, 120, 121, 122, 123};

/* The same gather with the groups transposed as 8 x 8 bytes: byte 8 q + b
 * takes group 8 b + q's sign field, so that qword q holds groups q, 8 + q,
 * ..., 56 + q, and register r's 64 sign bits (groups 8 r .. 8 r + 7, one
 * a qword) are byte r of every qword: what vpshufbitqmb picks. */
static const uint8_t k_pair_bytes_t[64] = {
    0, 16, 32, 48, 64, 80, 96, 112, 1, 17, 33, 49, 65, 81, 97, 113,
    2, 18, 34, 50, 66, 82, 98, 114, 3, 19, 35, 51, 67, 83, 99, 115,
    8, 24, 40, 56, 72, 88, 104, 120, 9, 25, 41, 57, 73, 89, 105, 121,
    10, 26, 42, 58, 74, 90, 106, 122, 11, 27, 43, 59, 75, 91, 107, 123};

/* The sign fields: byte g < 4 of each qword takes bits 32 + 7 g (group g's
 * 7 stored sign bits, the low 28 bits of the sub-block's second word);
 * bytes 4-7 are not used. */
static const uint8_t k_sign_shift[64] = {
    32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0,
    0,  0,  32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0,  0,  32, 39, 46, 53,
    0,  0,  0,  0,  32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0, 0};

/* Register r = 4 blk + v of a pair (values 64 v .. 64 v + 63 of block
 * blk, the pair's points 8 r .. 8 r + 7): k_lev_map[r] gathers point 8 r +
 * j's two level bytes into qword j (lev[0] at even bytes, lev[1] at odd),
 * and k_scale_map[r] sub-block 2 v + l / 8's scale into dword l. */
static const uint8_t k_lev_map[8][64] = {
    {0, 64, 0, 64, 0, 64, 0, 64, 1, 65, 1, 65, 1, 65, 1, 65,
     2, 66, 2, 66, 2, 66, 2, 66, 3, 67, 3, 67, 3, 67, 3, 67,
     4, 68, 4, 68, 4, 68, 4, 68, 5, 69, 5, 69, 5, 69, 5, 69,
     6, 70, 6, 70, 6, 70, 6, 70, 7, 71, 7, 71, 7, 71, 7, 71},
    {8, 72, 8, 72, 8, 72, 8, 72, 9, 73, 9, 73, 9, 73, 9, 73,
     10, 74, 10, 74, 10, 74, 10, 74, 11, 75, 11, 75, 11, 75, 11, 75,
     12, 76, 12, 76, 12, 76, 12, 76, 13, 77, 13, 77, 13, 77, 13, 77,
     14, 78, 14, 78, 14, 78, 14, 78, 15, 79, 15, 79, 15, 79, 15, 79},
    {16, 80, 16, 80, 16, 80, 16, 80, 17, 81, 17, 81, 17, 81, 17, 81,
     18, 82, 18, 82, 18, 82, 18, 82, 19, 83, 19, 83, 19, 83, 19, 83,
     20, 84, 20, 84, 20, 84, 20, 84, 21, 85, 21, 85, 21, 85, 21, 85,
     22, 86, 22, 86, 22, 86, 22, 86, 23, 87, 23, 87, 23, 87, 23, 87},
    {24, 88, 24, 88, 24, 88, 24, 88, 25, 89, 25, 89, 25, 89, 25, 89,
     26, 90, 26, 90, 26, 90, 26, 90, 27, 91, 27, 91, 27, 91, 27, 91,
     28, 92, 28, 92, 28, 92, 28, 92, 29, 93, 29, 93, 29, 93, 29, 93,
     30, 94, 30, 94, 30, 94, 30, 94, 31, 95, 31, 95, 31, 95, 31, 95},
    {32, 96, 32, 96, 32, 96, 32, 96, 33, 97, 33, 97, 33, 97, 33, 97,
     34, 98, 34, 98, 34, 98, 34, 98, 35, 99, 35, 99, 35, 99, 35, 99,
     36, 100, 36, 100, 36, 100, 36, 100, 37, 101, 37, 101, 37, 101, 37, 101,
     38, 102, 38, 102, 38, 102, 38, 102, 39, 103, 39, 103, 39, 103, 39, 103},
    {40, 104, 40, 104, 40, 104, 40, 104, 41, 105, 41, 105, 41, 105, 41, 105,
     42, 106, 42, 106, 42, 106, 42, 106, 43, 107, 43, 107, 43, 107, 43, 107,
     44, 108, 44, 108, 44, 108, 44, 108, 45, 109, 45, 109, 45, 109, 45, 109,
     46, 110, 46, 110, 46, 110, 46, 110, 47, 111, 47, 111, 47, 111, 47, 111},
    {48, 112, 48, 112, 48, 112, 48, 112, 49, 113, 49, 113, 49, 113, 49, 113,
     50, 114, 50, 114, 50, 114, 50, 114, 51, 115, 51, 115, 51, 115, 51, 115,
     52, 116, 52, 116, 52, 116, 52, 116, 53, 117, 53, 117, 53, 117, 53, 117,
     54, 118, 54, 118, 54, 118, 54, 118, 55, 119, 55, 119, 55, 119, 55, 119},
    {56, 120, 56, 120, 56, 120, 56, 120, 57, 121, 57, 121, 57, 121, 57, 121,
     58, 122, 58, 122, 58, 122, 58, 122, 59, 123, 59, 123, 59, 123, 59, 123,
     60, 124, 60, 124, 60, 124, 60, 124, 61, 125, 61, 125, 61, 125, 61, 125,
     62, 126, 62, 126, 62, 126, 62, 126, 63, 127, 63, 127, 63, 127, 63, 127},
};
static const uint32_t k_scale_map[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

/* The registers of a block pair, made once for its two blocks and the nt
 * tokens: byte p of lev[h] holds the levels of elements 4 h .. 4 h + 3 of
 * the pair's point p (32 a block, as the gather orders them), byte 8 q + b
 * of sgn the sign bits of group 8 b + q (k_pair_bytes_t), and dword 8 blk
 * + s of ls block blk's sub-block s scale 2 s + 1 in both int16 halves. */
struct iq2_pair {
    __m512i lev[2], sgn, ls;
};

struct iq2_consts {
    __m512i lb[2][4]; /* ms_iq2xxs_level_bytes[h], 64 entries a register */
    __m512i ks_lo, ks_hi, pair_bytes, pair_bytes_t, sign_shift;
};

MS_SIMD_INLINE void iq2_consts_load(struct iq2_consts *c) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            c->lb[h][k] = _mm512_loadu_si512((const void *)(ms_iq2xxs_level_bytes[h] + 64 * k));
    c->ks_lo = _mm512_loadu_si512((const void *)ms_iq2_ksigns);
    c->ks_hi = _mm512_loadu_si512((const void *)(ms_iq2_ksigns + 64));
    c->pair_bytes = _mm512_loadu_si512((const void *)k_pair_bytes);
    c->pair_bytes_t = _mm512_loadu_si512((const void *)k_pair_bytes_t);
    c->sign_shift = _mm512_loadu_si512((const void *)k_sign_shift);
}

/* The pair registers of blocks b0 and b1, the sign bytes gathered by
 * sign_map (k_pair_bytes_t for iq2_pair_block, k_pair_bytes for the
 * many-rows form's point order) and each scale in both int16 halves of its
 * dword when ls16 (vpdpwssd's operand), else as an int32. */
MS_SIMD_INLINE void iq2_pair_expand_as(const struct iq2_consts *c, const block_iq2_xxs *b0,
                                       const block_iq2_xxs *b1, struct iq2_pair *e, const __m512i sign_map,
                                       const bool ls16) {
    const __m512i q0 = _mm512_loadu_si512((const void *)b0->qs);
    const __m512i q1 = _mm512_loadu_si512((const void *)b1->qs);
    /* the 64 grid indices; bit 7 picks each table's upper 128 entries */
    const __m512i idx = _mm512_permutex2var_epi8(q0, c->pair_bytes, q1);
    const __mmask64 upper = _mm512_movepi8_mask(idx);
    for (int h = 0; h < 2; h++)
        e->lev[h] = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(c->lb[h][0], idx, c->lb[h][1]),
                                           _mm512_permutex2var_epi8(c->lb[h][2], idx, c->lb[h][3]));
    /* ksigns of the 7-bit fields (vpermi2b ignores the index's bit 7) */
    const __m512i f = _mm512_permutex2var_epi8(_mm512_multishift_epi64_epi8(c->sign_shift, q0), sign_map,
                                               _mm512_multishift_epi64_epi8(c->sign_shift, q1));
    e->sgn = _mm512_permutex2var_epi8(c->ks_lo, f, c->ks_hi);
    /* the sub-blocks' second words: (w >> 27) | 1 = 2 s + 1 for s = w >> 28 */
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i ls =
        _mm512_or_si512(_mm512_srli_epi32(_mm512_permutex2var_epi32(q0, odd, q1), 27), _mm512_set1_epi32(1));
    e->ls = ls16 ? _mm512_or_si512(ls, _mm512_slli_epi32(ls, 16)) : ls;
}

/* The pair registers of blocks b0 and b1 (the same block for a last odd one). */
MS_SIMD_INLINE void iq2_pair_expand(const struct iq2_consts *c, const block_iq2_xxs *b0, const block_iq2_xxs *b1,
                                    struct iq2_pair *e) {
    iq2_pair_expand_as(c, b0, b1, e, c->pair_bytes_t, true);
}

/* acc[k] += the integer dot of the pair's block blk (0 or 1, a constant)
 * with token k's activations a[k][i] (k < nt) */
MS_SIMD_INLINE void iq2_pair_block(const struct iq2_pair *e, const int blk, const block_q8_K *const *a, int64_t i,
                                   __m512i acc[4], const int nt) {
    /* byte b of a qword of level bytes: element b's 2-bit field */
    const __m512i lev_shift = _mm512_set1_epi64(0x0e0c0a0806040200ll);
    const __m512i mag_lut = _mm512_set1_epi32(0x002b1908); /* byte i: {8, 25, 43, -}[i % 4] */
    /* value j of register r: bit 8 r + j % 8 of qword j / 8 of sgn */
    const __m512i sign_bit = _mm512_set1_epi64(0x0706050403020100ll);
    _Pragma("GCC unroll 4")
    for (int v = 0; v < 4; v++) {
        const int r = 4 * blk + v;
        const __m512i lmap = _mm512_loadu_si512((const void *)k_lev_map[r]);
        const __m512i lb = _mm512_permutex2var_epi8(e->lev[0], lmap, e->lev[1]);
        const __m512i mag = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(lev_shift, lb), mag_lut);
        const __mmask64 neg =
            _mm512_bitshuffle_epi64_mask(e->sgn, _mm512_add_epi8(sign_bit, _mm512_set1_epi8((char)(8 * r))));
        const __m512i sc = _mm512_permutexvar_epi32(_mm512_loadu_si512((const void *)k_scale_map[r]), e->ls);
        MS_XN(k, nt, const __m512i a8 = _mm512_loadu_si512((const void *)(a[k][i].qs + 64 * v));
              const __m512i av = _mm512_mask_sub_epi8(a8, neg, _mm512_setzero_si512(), a8);
              acc[k] = _mm512_dpwssd_epi32(acc[k], _mm512_maddubs_epi16(mag, av), sc););
    }
}

/* s[k] = dot(row x, activations y[k]) for k < nt (1 or 4, a constant). */
MS_SIMD_INLINE void iq2xxs_dot_vbmi_n(int64_t n, float *s, const void *x, const void *const *y, const int nt) {
    const block_iq2_xxs *w = x;
    const block_q8_K *a[4] = {y[0], y[nt > 1 ? 1 : 0], y[nt > 1 ? 2 : 0], y[nt > 1 ? 3 : 0]};
    struct iq2_consts c;
    iq2_consts_load(&c);
    float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t nb = n / QK_K;
    /* the next pair is expanded before this one's products: its permutes
     * then run beside them rather than ahead of them */
    struct iq2_pair e[2];
    if (nb > 0) iq2_pair_expand(&c, &w[0], &w[nb > 1 ? 1 : 0], &e[0]);
    for (int64_t i = 0; i < nb; i += 2) {
        const int pair = i + 1 < nb ? 2 : 1;
        const struct iq2_pair *cur = &e[(i >> 1) & 1];
        if (i + 2 < nb) iq2_pair_expand(&c, &w[i + 2], &w[i + 3 < nb ? i + 3 : i + 2], &e[((i >> 1) + 1) & 1]);
        if (pair == 2) {
            __m512i acc0[4], acc1[4];
            MS_XN(k, nt, acc0[k] = _mm512_setzero_si512(); acc1[k] = _mm512_setzero_si512(););
            iq2_pair_block(cur, 0, a, i, acc0, nt);
            iq2_pair_block(cur, 1, a, i + 1, acc1, nt);
            const float d0 = fp16_scale(w[i].d), d1 = fp16_scale(w[i + 1].d);
            MS_XN(k, nt, int32_t t0, t1; hsum2x256_i32(fold256_i32(acc0[k]), fold256_i32(acc1[k]), &t0, &t1);
                  sumf[k] += a[k][i].d * d0 * (float)t0; sumf[k] += a[k][i + 1].d * d1 * (float)t1;);
        } else {
            __m512i acc[4];
            MS_XN(k, nt, acc[k] = _mm512_setzero_si512(););
            iq2_pair_block(cur, 0, a, i, acc, nt);
            const float d = fp16_scale(w[i].d);
            MS_XN(k, nt, sumf[k] += a[k][i].d * d * (float)_mm512_reduce_add_epi32(acc[k]););
        }
    }
    MS_XN(k, nt, s[k] = 0.125f * sumf[k];);
}

MS_DECL_DOT(iq2_xxs, q8_K, avx512vbmi) {
    const void *y1[1] = {y};
    iq2xxs_dot_vbmi_n(n, s, x, y1, 1);
}

MS_DECL_DOT_X4(iq2_xxs, q8_K, avx512vbmi) { iq2xxs_dot_vbmi_n(n, s, x, y, 4); }
/* ---- The many-rows form (decode): activations transposed once a call.
 *
 * iq2_pair_block spends about ten vector instructions a 64-value
 * register: a gather of level bytes, a field extraction and a magnitude
 * lookup, a sign mask, the scales' permute, the negation, vpmaddubsw and
 * vpdpwssd. With the activations laid out element-major (register e of a
 * block pair holds element e of each of its 64 points, e = 0..7), three do:
 *
 * - a point's grid index is its byte p in every register, so the level
 *   bytes of the expansion are used where they stand: element e's 2-bit
 *   field is at bits 2 (e % 4) of lev[e / 4] (shifted down by 2 for e % 4
 *   = 3, so that it falls in the six bits vpermb reads), and its sign at
 *   bit e of sgn (sgn << 2 for e = 0, sgn >> 4 for 6 and 7). One vpternlogd
 *   puts the sign bit into the field's byte, one vpermb maps the pair to
 *   the weight in offset binary, 64 + sign * magnitude (a 64-entry table a
 *   field and sign position: k_w_lut);
 * - vpdpbusd multiplies those unsigned bytes with the signed activations
 *   and adds each 4 products into a dword. Dword l of every register then
 *   covers points 4 l .. 4 l + 3, which is sub-block l % 8 of block l / 8:
 *   the eight registers share their accumulators (two, for vpdpbusd's
 *   latency), and the scales multiply the sum once a pair (vpmulld),
 *   after the offset is taken off: 64 times each sub-block's activation
 *   sum, from Q8_K's bsums.
 *
 * The integer sums are the reference's exactly (the largest dword, 8 * 4 *
 * 107 * 128 before the scale of 31, is far from overflow), and the float
 * step is its own, so every row's result is ms_dot_iq2_xxs_q8_K_ref's bit
 * for bit. The transpose costs about 40 vector instructions a block pair,
 * once a call; the matmul calls this once a cache tile (tens to hundreds
 * of rows). */

/* Activation pairs kept on the stack: rows of up to 16 pairs (8192
 * values; n_embd is 4096 in DeepSeek V4 Flash). Longer rows take the
 * single dot. */
#define IQ2_ROWS_MAX_PAIRS 16

/* One activation block pair, element-major: byte p of e[k] is value 8 p +
 * k of the pair (blocks 2 q and 2 q + 1 in a row, 512 values), and dword l
 * of corr is 64 times the sum of sub-block l % 8 of block l / 8. */
struct iq2_act_pair {
    __m512i e[8];
    __m512i corr;
};

/* Byte i of k_w_lut[t]: MS_IQ2_W_OFFSET(i, f, s) for table t's (f, s) as
 * listed below; the other bits of i are ignored. */
#define IQ2_W(i, f, s) MS_IQ2_W_OFFSET(i, f, s)
#define IQ2_W8(b, f, s)                                                                                      \
    IQ2_W(b, f, s), IQ2_W(b + 1, f, s), IQ2_W(b + 2, f, s), IQ2_W(b + 3, f, s), IQ2_W(b + 4, f, s),         \
        IQ2_W(b + 5, f, s), IQ2_W(b + 6, f, s), IQ2_W(b + 7, f, s)
#define IQ2_W64(f, s)                                                                                        \
    {IQ2_W8(0, f, s),  IQ2_W8(8, f, s),  IQ2_W8(16, f, s), IQ2_W8(24, f, s),                                 \
     IQ2_W8(32, f, s), IQ2_W8(40, f, s), IQ2_W8(48, f, s), IQ2_W8(56, f, s)}
/* (f, s) of elements 0..7 as the products read them: e 0 (0, 2), 1 (2, 1),
 * 2 and 6 (4, 2), 3 and 7 (4, 3), 4 (0, 4), 5 (2, 5) */
static const uint8_t k_w_lut[6][64] __attribute__((aligned(64))) = {
    IQ2_W64(0, 2), IQ2_W64(2, 1), IQ2_W64(4, 2), IQ2_W64(4, 3), IQ2_W64(0, 4), IQ2_W64(2, 5)};

/* Byte 8 k + j takes byte 8 j + k: within a 64-value register of 8 points,
 * qword k gathers element k of each point. */
static const uint8_t k_elem_major[64] = {
    0, 8,  16, 24, 32, 40, 48, 56, 1, 9,  17, 25, 33, 41, 49, 57, 2, 10, 18, 26, 34, 42,
    50, 58, 3, 11, 19, 27, 35, 43, 51, 59, 4, 12, 20, 28, 36, 44, 52, 60, 5, 13, 21, 29,
    37, 45, 53, 61, 6, 14, 22, 30, 38, 46, 54, 62, 7, 15, 23, 31, 39, 47, 55, 63};

/* One butterfly of an 8 x 8 qword transpose: registers i and i | b (i & b
 * = 0) trade the qwords q whose bit b differs from the register's, so that
 * register and qword index swap bit b. The permute picks qword q of the
 * pair as q & b ? (i | b)'s q ^ b : i's q for register i, q & b ? (i |
 * b)'s q : i's q ^ b for register i | b. */
MS_SIMD_INLINE void qword_butterfly(__m512i r[8], const int b) {
    int64_t lo[8], hi[8];
    for (int q = 0; q < 8; q++) {
        lo[q] = q & b ? 8 + (q ^ b) : q;
        hi[q] = q & b ? 8 + q : q ^ b;
    }
    const __m512i il = _mm512_loadu_si512((const void *)lo), ih = _mm512_loadu_si512((const void *)hi);
    for (int i = 0; i < 8; i++) {
        if (i & b) continue;
        const __m512i x = r[i], y = r[i | b];
        r[i] = _mm512_permutex2var_epi64(x, il, y);
        r[i | b] = _mm512_permutex2var_epi64(x, ih, y);
    }
}

/* The np activation pairs of a (2 np blocks) into t, element-major: each
 * register's bytes gathered by element (qword k: element k of its 8
 * points), then the qwords transposed across the pair's 8 registers. */
MS_SIMD_INLINE void iq2_act_transpose(const block_q8_K *a, int64_t np, struct iq2_act_pair *t) {
    const __m512i em = _mm512_loadu_si512((const void *)k_elem_major);
    const __m256i sixty_four = _mm256_set1_epi16(64);
    for (int64_t q = 0; q < np; q++) {
        __m512i r[8];
        for (int v = 0; v < 8; v++)
            r[v] = _mm512_permutexvar_epi8(em, _mm512_loadu_si512((const void *)(a[2 * q + v / 4].qs + 64 * (v % 4))));
        qword_butterfly(r, 1);
        qword_butterfly(r, 2);
        qword_butterfly(r, 4);
        for (int k = 0; k < 8; k++) t[q].e[k] = r[k];
        /* 64 (bsums[2 s] + bsums[2 s + 1]) = sub-block s's sum, times 64 */
        const __m256i c0 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[2 * q].bsums), sixty_four);
        const __m256i c1 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[2 * q + 1].bsums), sixty_four);
        t[q].corr = cat256(c0, c1);
    }
}

/* An expanded pair's level and sign registers, shifted as the weights of
 * its eight elements take them (iq2_em_weight). */
struct iq2_em_src {
    __m512i l0, l1, l0s, l1s, s, sl, sr;
};

MS_SIMD_INLINE struct iq2_em_src iq2_em_src(const struct iq2_pair *e) {
    return (struct iq2_em_src){.l0 = e->lev[0],
                               .l1 = e->lev[1],
                               .l0s = _mm512_srli_epi16(e->lev[0], 2),
                               .l1s = _mm512_srli_epi16(e->lev[1], 2),
                               .s = e->sgn,
                               .sl = _mm512_slli_epi16(e->sgn, 2),
                               .sr = _mm512_srli_epi16(e->sgn, 4)};
}

/* Element k's (0..7, a constant) weights of a pair as the products read
 * them: byte p is element k of the pair's point p (k_pair_bytes order) in
 * offset binary, 64 + sign * magnitude, vpdpbusd's unsigned operand. One
 * vpternlogd takes the sign bit (mask bit sb) from S and the rest from L,
 * (M & S) | (~M & L), and one vpermb maps the byte through k_w_lut. They
 * depend on the row alone: a call with several tokens makes them once for
 * all (iq2_rows_n). */
MS_SIMD_INLINE __m512i iq2_em_weight(const struct iq2_em_src *e, const int k) {
#define IQ2_EM(L, S, sb, tab)                                                                       \
    _mm512_permutexvar_epi8(_mm512_ternarylogic_epi32(L, S, _mm512_set1_epi8(1 << (sb)), 0xd8), \
                            _mm512_load_si512((const void *)k_w_lut[tab]))
    switch (k) {
    case 0: return IQ2_EM(e->l0, e->sl, 2, 0);
    case 1: return IQ2_EM(e->l0, e->s, 1, 1);
    case 2: return IQ2_EM(e->l0, e->s, 2, 2);
    case 3: return IQ2_EM(e->l0s, e->s, 3, 3);
    case 4: return IQ2_EM(e->l1, e->s, 4, 4);
    case 5: return IQ2_EM(e->l1, e->s, 5, 5);
    case 6: return IQ2_EM(e->l1, e->sr, 2, 2);
    default: return IQ2_EM(e->l1s, e->sr, 3, 3);
    }
#undef IQ2_EM
}

/* Sub-block sums acc (int32, with the offset) to the scaled sums: the
 * offset is taken off (64 times each sub-block's activation sum) and the
 * scales ls (int32) applied. */
MS_SIMD_INLINE __m512i iq2_em_finish(__m512i acc, const struct iq2_act_pair *t, __m512i ls) {
    return _mm512_mullo_epi32(_mm512_sub_epi32(acc, t->corr), ls);
}

/* The scaled sub-block sums of one expanded pair (k_pair_bytes point
 * order, int32 scales) against its element-major activations t: dword l
 * is sub-block l % 8 of block l / 8, so the pair's first block's bsum (the
 * reference's) is the sum of dwords 0-7 and its second's of 8-15. */
MS_SIMD_INLINE __m512i iq2_pair_dot_em(const struct iq2_pair *e, const struct iq2_act_pair *t) {
    const struct iq2_em_src src = iq2_em_src(e);
    /* two accumulators: vpdpbusd's latency (4-5 cycles) times eight in one
     * chain would be longer than the pair's other work */
    __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 8; k++) acc[k & 1] = _mm512_dpbusd_epi32(acc[k & 1], iq2_em_weight(&src, k), t->e[k]);
    return iq2_em_finish(_mm512_add_epi32(acc[0], acc[1]), t, e->ls);
}

/* The four block sums of two pairs' iq2_pair_dot_em results, converted
 * to float as the reference's (float) cast does (round to nearest), in
 * 128-bit lane k: va's blocks in lanes 0 and 1, vb's in 2 and 3, a lane's
 * four floats equal. Two pairs at once take half the shuffles of one
 * reduction a pair (in cache, 512 x 1024: 16.5-16.8 GB/s one a pair,
 * 18.6-18.9 this way). */
MS_SIMD_INLINE __m512 iq2_block_sums4(__m512i va, __m512i vb) {
    return lane_sums_i32_ps(lane_pairs_add_i32(va, vb));
}

/* The pair after (*r, *p) in the many-rows sequence (the row's next, or
 * the next row's first); false when none is left. */
MS_SIMD_INLINE bool iq2_rows_next(int64_t np, int64_t n_rows, int64_t *r, int64_t *p) {
    if (++*p == np) ++*r, *p = 0;
    return *r < n_rows;
}

/* Expands pair p of row r into e, its stream prefetched 2 KiB ahead. */
MS_SIMD_INLINE void iq2_rows_expand(const struct iq2_consts *c, const char *x, size_t x_stride, int64_t r,
                                    int64_t p, struct iq2_pair *e) {
    const block_iq2_xxs *w = (const block_iq2_xxs *)(x + (size_t)r * x_stride);
    prefetch_ahead(&w[2 * p], 3); /* 132 bytes a pair */
    iq2_pair_expand_as(c, &w[2 * p], &w[2 * p + 1], e, c->pair_bytes, false);
}

/* Adds pair p of row r's two block terms (sums from f's lanes lo and lo + 1)
 * to *sumf in the reference's order; at the row's last pair (last) the
 * row's result goes to s[r]. */
MS_SIMD_INLINE void iq2_rows_float(const char *x, size_t x_stride, const block_q8_K *a, float *s, int64_t r,
                                   int64_t p, __m128 f0, __m128 f1, bool last, float *sumf) {
    const block_iq2_xxs *w = (const block_iq2_xxs *)(x + (size_t)r * x_stride);
    const int64_t i = 2 * p;
    *sumf += a[i].d * fp16_scale(w[i].d) * _mm_cvtss_f32(f0);
    *sumf += a[i + 1].d * fp16_scale(w[i + 1].d) * _mm_cvtss_f32(f1);
    if (last) {
        s[r] = 0.125f * *sumf;
        *sumf = 0.0f;
    }
}

/* Many rows against nt tokens (2..4, a constant), t[k] token k's
 * element-major activations: row by row, each pair expanded and its
 * weights made once (iq2_em_weight) for the nt tokens' products, the
 * block sums of two tokens reduced at once (iq2_block_sums4) and each
 * token's float steps the single dot's, in its order. Results to s[k *
 * lds + r]. */
MS_SIMD_INLINE void iq2_rows_n(const struct iq2_consts *c, int64_t np, float *s, int64_t lds, const char *x,
                               size_t x_stride, int64_t n_rows, const struct iq2_act_pair *const t[4],
                               const block_q8_K *const a[4], const int nt) {
    for (int64_t r = 0; r < n_rows; r++) {
        const block_iq2_xxs *w = (const block_iq2_xxs *)(x + (size_t)r * x_stride);
        float sumf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t p = 0; p < np; p++) {
            struct iq2_pair e;
            iq2_rows_expand(c, x, x_stride, r, p, &e);
            const struct iq2_em_src src = iq2_em_src(&e);
            __m512i acc[4][2];
            MS_XN(k, nt, acc[k][0] = acc[k][1] = _mm512_setzero_si512(););
            _Pragma("GCC unroll 8")
            for (int el = 0; el < 8; el++) {
                const __m512i wv = iq2_em_weight(&src, el);
                MS_XN(k, nt, acc[k][el & 1] = _mm512_dpbusd_epi32(acc[k][el & 1], wv, t[k][p].e[el]););
            }
            __m512i v[4];
            MS_XN(k, nt, v[k] = iq2_em_finish(_mm512_add_epi32(acc[k][0], acc[k][1]), &t[k][p], e.ls););
            /* token 2 h + j's block b in 128-bit lane 2 j + b of f[h] */
            __m512 f[2];
            f[0] = iq2_block_sums4(v[0], nt > 1 ? v[1] : v[0]);
            f[1] = nt > 2 ? iq2_block_sums4(v[2], nt > 3 ? v[3] : v[2]) : f[0];
            const float d0 = fp16_scale(w[2 * p].d), d1 = fp16_scale(w[2 * p + 1].d);
            float o[2][16];
            _mm512_storeu_ps(o[0], f[0]);
            _mm512_storeu_ps(o[1], f[1]);
            MS_XN(k, nt, const float *ok = o[k / 2] + 8 * (k % 2);
                  sumf[k] += a[k][2 * p].d * d0 * ok[0]; sumf[k] += a[k][2 * p + 1].d * d1 * ok[4];);
        }
        MS_XN(k, nt, s[k * lds + r] = 0.125f * sumf[k];);
    }
}

/* Eight rows at once, one a lane: pair p of rows 0 .. 7 (from x), then
 * pair p + 1. The sixteen block sums of a pair's eight rows reduce
 * together (lane pairs, then a 4 x 4 transpose-add in each 128-bit lane:
 * lane 2 (k % 2) + b holds block b of rows k = 0, 2, 4, 6 or 1, 3, 5, 7)
 * and their float steps run in those lanes, each row's sum taking its
 * blocks in the reference's order from 0.0f; rows' results to s[0 .. 7].
 * Each row's pair is expanded before the previous row's products, as in
 * the sequence below. Against that sequence alone (a scalar float step a
 * block and a row-end test a pair): 11.5 -> 12.6 GB/s from DRAM, 12.2 ->
 * 13.4 in cache (Zen 4, bench_kernels -t 1 --types iq2_xxs, 512 x 1024
 * --working-set 512 --order random and 2048 x 4096 --working-set 0,
 * three interleaved runs); without the expansion ahead it was slower than
 * the sequence (11.3). */
MS_SIMD_INLINE void iq2_rows8(const struct iq2_consts *c, const char *x, size_t x_stride, int64_t np,
                              const struct iq2_act_pair *t, const block_q8_K *a, float *s) {
    __m512 sumf = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        __m512i v[8];
        uint16_t dh[16];
        struct iq2_pair e[2];
        iq2_rows_expand(c, x, x_stride, 0, p, &e[0]);
        _Pragma("GCC unroll 8")
        for (int k = 0; k < 8; k++) {
            if (k < 7) iq2_rows_expand(c, x, x_stride, k + 1, p, &e[(k + 1) & 1]);
            v[k] = iq2_pair_dot_em(&e[k & 1], &t[p]);
            const block_iq2_xxs *w = (const block_iq2_xxs *)(x + (size_t)k * x_stride) + 2 * p;
            dh[4 * (2 * (k % 2)) + k / 2] = w[0].d;
            dh[4 * (2 * (k % 2) + 1) + k / 2] = w[1].d;
        }
        __m512i u[4];
        for (int k = 0; k < 4; k++) u[k] = lane_pairs_add_i32(v[2 * k], v[2 * k + 1]);
        const __m512i x01 = _mm512_add_epi32(_mm512_unpacklo_epi32(u[0], u[1]), _mm512_unpackhi_epi32(u[0], u[1]));
        const __m512i x23 = _mm512_add_epi32(_mm512_unpacklo_epi32(u[2], u[3]), _mm512_unpackhi_epi32(u[2], u[3]));
        const __m512i z = _mm512_add_epi32(_mm512_unpacklo_epi64(x01, x23), _mm512_unpackhi_epi64(x01, x23));
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
        const __m512 ad = _mm512_mask_blend_ps(0xf0f0, _mm512_set1_ps(a[2 * p].d), _mm512_set1_ps(a[2 * p + 1].d));
        const __m512 f = _mm512_mul_ps(_mm512_mul_ps(ad, d), _mm512_cvtepi32_ps(z));
        /* block 2 p in lanes 0 and 2, then block 2 p + 1 (lanes 1 and 3) */
        sumf = _mm512_add_ps(sumf, f);
        sumf = _mm512_add_ps(sumf, _mm512_shuffle_f32x4(f, f, 0xf5));
    }
    float o[16];
    _mm512_storeu_ps(o, sumf);
    for (int e = 0; e < 4; e++) {
        s[2 * e] = 0.125f * o[e];
        s[2 * e + 1] = 0.125f * o[8 + e];
    }
}

/* Many rows against one token: eight at a time (iq2_rows8) when `by8`,
 * then the rows left as one sequence of pairs (a row of n_embd 1024 is
 * only two), each pair's successor (the next row's first, at a row's end)
 * expanded before its products, two pairs a turn so that both expansions
 * stay in registers. Rows of an odd block count, or longer than
 * IQ2_ROWS_MAX_PAIRS pairs, take the single dot. */
MS_SIMD_INLINE void iq2_dot_rows(int64_t n, float *restrict s, const void *restrict x, size_t x_stride,
                                 int64_t n_rows, const void *restrict y, const bool by8) {
    const int64_t nb = n / QK_K, np = nb / 2;
    if (nb == 0 || nb % 2 || np > IQ2_ROWS_MAX_PAIRS) {
        for (int64_t r = 0; r < n_rows; r++)
            ms_dot_iq2_xxs_q8_K_avx512vbmi(n, s + r, (const char *)x + (size_t)r * x_stride, y);
        return;
    }
    if (n_rows <= 0) return;
    struct iq2_act_pair t[IQ2_ROWS_MAX_PAIRS];
    iq2_act_transpose(y, np, t);
    struct iq2_consts c;
    iq2_consts_load(&c);
    int64_t r8 = 0;
    for (; by8 && 8 * x_stride <= MS_ROWS_LANES_MAX_BYTES && r8 + 8 <= n_rows; r8 += 8)
        iq2_rows8(&c, (const char *)x + (size_t)r8 * x_stride, x_stride, np, t, y, s + r8);
    if (r8 == n_rows) return;
    x = (const char *)x + (size_t)r8 * x_stride;
    s += r8;
    n_rows -= r8;
    /* two pairs a turn, A in e[0] and B (its successor) in e[1], each
     * pair's successor expanded before its products and both pairs' block
     * sums reduced at once */
    struct iq2_pair e[2];
    iq2_rows_expand(&c, x, x_stride, 0, 0, &e[0]);
    float sumf = 0.0f;
    int64_t ra = 0, pa = 0;
    for (;;) {
        int64_t rb = ra, pb = pa, rc, pc;
        const bool has_b = iq2_rows_next(np, n_rows, &rb, &pb);
        if (has_b) iq2_rows_expand(&c, x, x_stride, rb, pb, &e[1]);
        const __m512i va = iq2_pair_dot_em(&e[0], &t[pa]);
        rc = rb, pc = pb;
        const bool has_c = has_b && iq2_rows_next(np, n_rows, &rc, &pc);
        if (has_c) iq2_rows_expand(&c, x, x_stride, rc, pc, &e[0]);
        const __m512i vb = has_b ? iq2_pair_dot_em(&e[1], &t[pb]) : _mm512_setzero_si512();
        const __m512 f = iq2_block_sums4(va, vb);
        /* a pair is its row's last when its successor starts a row */
        iq2_rows_float(x, x_stride, y, s, ra, pa, _mm512_castps512_ps128(f), _mm512_extractf32x4_ps(f, 1), pb == 0,
                       &sumf);
        if (!has_b) break;
        iq2_rows_float(x, x_stride, y, s, rb, pb, _mm512_extractf32x4_ps(f, 2), _mm512_extractf32x4_ps(f, 3), pc == 0,
                       &sumf);
        if (!has_c) break;
        ra = rc, pa = pc;
    }
}

/* The sequence alone: full-width parts (Zen 5, Intel), where the kernel
 * runs near the memory's speed and eight interleaved row streams may cost
 * more than they save (as they did Q4_K's dot on Zen 4: the AVX2 Q2_K
 * many-rows dot's comment, quant_kq_avx2.c); unmeasured there. */
MS_DECL_DOT_ROWS(iq2_xxs, q8_K, avx512vbmi) { iq2_dot_rows(n, s, x, x_stride, n_rows, y, false); }

/* Up to four tokens against many rows (ms_vec_dot_rows_n_fn): the
 * many-rows sequence for one token, iq2_rows_n for more. */
MS_DECL_DOT_ROWS_N(iq2_xxs, q8_K, avx512vbmi) {
    const int64_t nb = n / QK_K, np = nb / 2;
    if (nt == 1 || nb == 0 || nb % 2 || np > IQ2_ROWS_MAX_PAIRS) {
        for (int k = 0; k < nt; k++) iq2_dot_rows(n, s + k * lds, x, x_stride, n_rows, y[k], false);
        return;
    }
    struct iq2_act_pair t[4][IQ2_ROWS_MAX_PAIRS];
    const struct iq2_act_pair *tk[4];
    const block_q8_K *a[4];
    for (int k = 0; k < nt; k++) {
        a[k] = y[k];
        iq2_act_transpose(a[k], np, t[k]);
        tk[k] = t[k];
    }
    struct iq2_consts c;
    iq2_consts_load(&c);
    switch (nt) {
    case 2: iq2_rows_n(&c, np, s, lds, x, x_stride, n_rows, tk, a, 2); break;
    case 3: iq2_rows_n(&c, np, s, lds, x, x_stride, n_rows, tk, a, 3); break;
    default: iq2_rows_n(&c, np, s, lds, x, x_stride, n_rows, tk, a, 4); break;
    }
}

/* Eight rows at a time first: parts that split 512-bit operations (Zen 4),
 * where the kernel is bound by its work (11.5 -> 12.6 GB/s, iq2_rows8). */
void ms_dot_rows8_iq2_xxs_q8_K_avx512vbmi(int64_t n, float *restrict s, const void *restrict x, size_t x_stride,
                                          int64_t n_rows, const void *restrict y) {
    iq2_dot_rows(n, s, x, x_stride, n_rows, y, true);
}

/* ---- The 16-lane token GEMM (prefill): the weights expanded by byte
 * permutes.
 *
 * The AVX-512 token-lane GEMM (quant_kq_avx512.c) expands each row's block
 * once per pack of 16 tokens into 256 offset-binary weights, then runs 64
 * broadcast vpdpbusd against the pack. Its expansion, by 8-byte grid and
 * sign-row loads and inserts, is about 240 instructions a block and row,
 * as many as the products; a routed expert in prefill sees one or two
 * packs (12-48 tokens of a 512-2048-token prompt for 256 experts, top 6),
 * so the expansion is not amortized. Here the pair expansion above takes a
 * block of each of the GEMM's two rows (iq2_pair_expand), and each
 * 64-value register of weights is five instructions from it: the level
 * bytes' permute, vpmultishiftqb for the 2-bit fields, one vpermb for the
 * positive weights, vpshufbitqmb for the sign mask and a masked vpermb for
 * the negative ones (both tables hold 128 + {8, 25, 43} and 128 - them).
 * The products are quant_kq_iq2.h's, shared with the VBMI-less form, so
 * the results are the same bits: the reference's. */

/* Row blk's (0 or 1) block of the pair e, as 256 weights in value order
 * offset by 128, into wu. */
MS_SIMD_INLINE void iq2_pair_weights_u8(const struct iq2_pair *e, const int blk, uint8_t wu[QK_K]) {
    const __m512i lev_shift = _mm512_set1_epi64(0x0e0c0a0806040200ll);
    const __m512i pos = _mm512_set1_epi32((int)0x80ab9988u); /* byte i: 128 + {8, 25, 43, -}[i % 4] */
    const __m512i neg = _mm512_set1_epi32((int)0x80556778u); /* 128 - {8, 25, 43, -}[i % 4] */
    const __m512i sign_bit = _mm512_set1_epi64(0x0706050403020100ll);
    _Pragma("GCC unroll 4")
    for (int v = 0; v < 4; v++) {
        const int r = 4 * blk + v;
        const __m512i lb =
            _mm512_permutex2var_epi8(e->lev[0], _mm512_loadu_si512((const void *)k_lev_map[r]), e->lev[1]);
        const __m512i f = _mm512_multishift_epi64_epi8(lev_shift, lb);
        const __mmask64 m =
            _mm512_bitshuffle_epi64_mask(e->sgn, _mm512_add_epi8(sign_bit, _mm512_set1_epi8((char)(8 * r))));
        _mm512_store_si512((void *)(wu + 64 * v),
                           _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(f, pos), m, f, neg));
    }
}

/* Block i of R (1 or 2, a constant) rows b[k] into buf (the GEMM's EXPAND):
 * the pair expansion takes a block of each row. */
MS_SIMD_INLINE void iq2xxs_expand_x16_vbmi(const block_iq2_xxs *const b[2], struct iq2xxs_x16_buf *buf,
                                           const int R) {
    struct iq2_consts c;
    iq2_consts_load(&c);
    struct iq2_pair e;
    iq2_pair_expand(&c, b[0], b[R > 1 ? 1 : 0], &e);
    _mm512_store_si512((void *)buf->ls, e.ls); /* dword 8 blk + s: block blk's sub-block s */
    for (int k = 0; k < R; k++) iq2_pair_weights_u8(&e, k, buf->wu[k]);
}

MS_DEFINE_GEMM_KQ_X16(ms_gemm_iq2_xxs_q8_Kx16_avx512vbmi, block_iq2_xxs, struct iq2xxs_x16_buf,
                      iq2xxs_expand_x16_vbmi, iq2xxs_x16_products, 1, iq2xxs_x16_finish)
