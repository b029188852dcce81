/*
 * quant_iq2_avx512.c - the IQ2_XXS x Q8_K many-rows dot (decode's form: one
 * token against a tile of rows) for AVX-512 parts without VBMI (Skylake-SP,
 * Cascade Lake): the element-major idea of quant_iq2_avx512vbmi.c with
 * AVX-512BW's word permutes and in-lane byte shuffles in place of vpermb.
 *
 * The single-token dot of this set (quant_kq_avx512.c) spends about 130
 * instructions a 256-value block, most of them making each 64-value
 * register's levels (a word permute, a shift and a merge per register) and
 * its signs (scalar pdep and a parity fold, a masked negate). Here the
 * activations are laid out once a call so that a block's points need none
 * of that:
 *
 * - word p of a register is point p of the block (its 8-value group p);
 *   the points' 2-bit levels come from ms_iq2xxs_levels in eight registers
 *   (four vpermt2w and three blends for the 32 indices), so word p holds
 *   elements 0-3 of the point in its low byte and 4-7 in its high byte,
 *   element j at bits 2 (j % 4) of its byte.
 * - the activations are transposed to match: register k holds in word p
 *   the values of elements k (low byte) and k + 4 (high byte) of point p.
 * - the signs (ksigns: the 7 stored bits and their parity) are computed
 *   for the 32 points at once in the same word layout, elements 0-3 at
 *   bits 0-3 of the low byte and 4-7 at bits 0-3 of the high byte.
 * - register k's weights are then one vpternlogd (the sign bit into the
 *   level byte) and one vpshufb (a 16-entry table giving 64 + sign *
 *   magnitude, offset binary for vpdpbusd's unsigned operand), and the
 *   product one vpdpbusd: dword d sums points 2 d and 2 d + 1, both of
 *   sub-block d / 2, so the four registers share one accumulator, the
 *   offset comes off as 64 times Q8_K's bsums[d] (the sum of exactly those
 *   16 values), and the scales multiply once a block.
 *
 * About 70 instructions a block as compiled. Measured on a Zen 5 core
 * with MS_AVX512_VBMI=0 (bench_kernels -t 1 --types iq2_xxs --batches 1,
 * best GB/s): 512 x 1024 in cache 9.5-10.4 against the single dot's
 * 6.2-6.5, from DRAM in random order 9.3-9.5 against 6.0-6.2, 2048 x 4096
 * 9.8-10.0 against 6.4-6.5 (bench/RESULTS.md). The integer sums are the
 * reference's exactly (a dword is at most 4 * 4 * 107 * 127 before its
 * scale of 31) and the float step is its own, so every row's result is
 * ms_dot_iq2_xxs_q8_K_ref's bit for bit.
 */
#include <immintrin.h>

#include "quant/iq2_grid.h"
#include "quant/quant_impl.h"
#include "quant/quant_kq.h"
#include "quant/quant_simd.h"

/* Activation blocks kept on the stack: rows of up to 32 blocks (8192
 * values; n_embd is 4096 in DeepSeek V4 Flash). Longer rows take the
 * single dot. */
#define IQ2W_ROWS_MAX_BLOCKS 32

/* One block of the token, element-major: word p of e[k] holds the values
 * of elements k and k + 4 of point p (values 8 p + k and 8 p + k + 4);
 * dword d of corr is 64 times bsums[d] (the sum of values 16 d .. 16 d +
 * 15: points 2 d and 2 d + 1). */
struct iq2w_act {
    __m512i e[4];
    __m512i corr;
};

/* The nb blocks of a into t. Each 64-value register (points 8 v .. 8 v + 7,
 * two a lane) is shuffled in its lanes so that dword k of a lane holds
 * elements k, k + 4 of the lane's two points; register k then gathers
 * dword k of every lane, in point order. */
static void iq2w_act_transpose(const block_q8_K *a, int64_t nb, struct iq2w_act *t) {
    const __m512i pairs = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    for (int64_t i = 0; i < nb; i++) {
        __m512i z[4];
        for (int v = 0; v < 4; v++)
            z[v] = _mm512_shuffle_epi8(_mm512_loadu_si512((const void *)(a[i].qs + 64 * v)), pairs);
        for (int k = 0; k < 4; k++) {
            /* dword 4 v + l of the result: lane l of z[v], its dword k */
            const __m512i lo = _mm512_setr_epi32(k, 4 + k, 8 + k, 12 + k, 16 + k, 20 + k, 24 + k, 28 + k, 0, 0, 0,
                                                 0, 0, 0, 0, 0);
            const __m512i z01 = _mm512_permutex2var_epi32(z[0], lo, z[1]);
            const __m512i z23 = _mm512_permutex2var_epi32(z[2], lo, z[3]);
            t[i].e[k] = _mm512_shuffle_i64x2(z01, z23, 0x44);
        }
        t[i].corr =
            _mm512_slli_epi32(_mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)a[i].bsums)), 6);
    }
}

/* A 16-entry table of MS_IQ2_W_OFFSET: level field at bits f, f + 1,
 * sign at bit sb. Table A: f 0, sign bit 2; table B: f 2, sign bit 1. */
#define IQ2W_W(i, f, sb) (char)MS_IQ2_W_OFFSET(i, f, sb)
#define IQ2W_LUT(f, sb)                                                                                      \
    _mm_setr_epi8(IQ2W_W(0, f, sb), IQ2W_W(1, f, sb), IQ2W_W(2, f, sb), IQ2W_W(3, f, sb), IQ2W_W(4, f, sb), \
                  IQ2W_W(5, f, sb), IQ2W_W(6, f, sb), IQ2W_W(7, f, sb), IQ2W_W(8, f, sb), IQ2W_W(9, f, sb), \
                  IQ2W_W(10, f, sb), IQ2W_W(11, f, sb), IQ2W_W(12, f, sb), IQ2W_W(13, f, sb),               \
                  IQ2W_W(14, f, sb), IQ2W_W(15, f, sb))

struct iq2w_consts {
    __m512i lev[8]; /* ms_iq2xxs_levels, 32 words a register */
    __m512i lut_a, lut_b, par, even, odd2, sshift, bit1, bit2;
};

static void iq2w_consts_load(struct iq2w_consts *c) {
    for (int k = 0; k < 8; k++) c->lev[k] = _mm512_loadu_si512((const void *)(ms_iq2xxs_levels + 32 * k));
    c->lut_a = _mm512_broadcast_i32x4(IQ2W_LUT(0, 2));
    c->lut_b = _mm512_broadcast_i32x4(IQ2W_LUT(2, 1));
    /* byte n < 16: the parity of n at bit 7 */
    c->par = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0));
    c->even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    /* dword d: sub-block d / 2's second word (dword 2 (d / 2) + 1 of the block) */
    c->odd2 = _mm512_setr_epi32(1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15);
    /* dword d holds points 2 d, 2 d + 1: groups 2 (d % 2), 2 (d % 2) + 1 */
    c->sshift = _mm512_setr_epi32(0, 14, 0, 14, 0, 14, 0, 14, 0, 14, 0, 14, 0, 14, 0, 14);
    c->bit1 = _mm512_set1_epi8(2);
    c->bit2 = _mm512_set1_epi8(4);
}

/* Block b's scaled sub-block sums (the reference's bsum is the sum of the
 * 16 dwords) against its element-major activations t. */
MS_SIMD_INLINE __m512i iq2w_block(const struct iq2w_consts *c, const block_iq2_xxs *b, const struct iq2w_act *t) {
    const __m512i qv = _mm512_loadu_si512((const void *)b->qs);
    /* the 32 grid indices (each sub-block's first word) as words, and their levels */
    const __m512i idx = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(_mm512_permutexvar_epi32(c->even, qv)));
    const __m512i r0 = _mm512_permutex2var_epi16(c->lev[0], idx, c->lev[1]);
    const __m512i r1 = _mm512_permutex2var_epi16(c->lev[2], idx, c->lev[3]);
    const __m512i r2 = _mm512_permutex2var_epi16(c->lev[4], idx, c->lev[5]);
    const __m512i r3 = _mm512_permutex2var_epi16(c->lev[6], idx, c->lev[7]);
    const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(64));
    const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(128));
    const __m512i lv =
        _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, r0, r1), _mm512_mask_blend_epi16(b6, r2, r3));
    /* dword d: the second word of sub-block d / 2, its scale 2 s + 1 */
    const __m512i v = _mm512_permutexvar_epi32(c->odd2, qv);
    const __m512i ls = _mm512_or_si512(_mm512_srli_epi32(v, 27), _mm512_set1_epi32(1));
    /* the points' 7-bit sign fields into the low bytes of their words */
    const __m512i v2 = _mm512_srlv_epi32(v, c->sshift);
    const __m512i s7 = _mm512_and_si512(_mm512_mask_blend_epi16(0xaaaaaaaau, v2, _mm512_slli_epi32(v2, 9)),
                                        _mm512_set1_epi16(0x7f));
    /* ksigns: the parity of the 7 bits as the eighth */
    const __m512i m0f = _mm512_set1_epi8(0x0f);
    const __m512i p = _mm512_ternarylogic_epi32(s7, _mm512_shuffle_epi8(c->par, _mm512_and_si512(s7, m0f)),
                                                _mm512_shuffle_epi8(c->par, _mm512_srli_epi16(s7, 4)), 0xf6);
    /* signs of elements 0-3 at bits 0-3 of the low byte, 4-7 of the high one */
    const __m512i sw = _mm512_or_si512(p, _mm512_slli_epi16(p, 4));
    const __m512i z = _mm512_and_si512(lv, _mm512_set1_epi8(0x7f));
    const __m512i zh = _mm512_and_si512(_mm512_srli_epi16(lv, 4), m0f);
    const __m512i sl = _mm512_slli_epi16(sw, 2), sr = _mm512_srli_epi16(sw, 2);
    /* (M & S) | (~M & L): the sign bit from S, the level field from L */
#define IQ2W_EM(k, L, S, bit, lut) \
    acc = _mm512_dpbusd_epi32(acc, _mm512_shuffle_epi8(lut, _mm512_ternarylogic_epi32(L, S, bit, 0xd8)), t->e[k])
    __m512i acc = _mm512_setzero_si512();
    IQ2W_EM(0, z, sl, c->bit2, c->lut_a);
    IQ2W_EM(1, z, sw, c->bit1, c->lut_b);
    IQ2W_EM(2, zh, sw, c->bit2, c->lut_a);
    IQ2W_EM(3, zh, sr, c->bit1, c->lut_b);
#undef IQ2W_EM
    return _mm512_mullo_epi32(_mm512_sub_epi32(acc, t->corr), ls);
}

/* The sums of four blocks' iq2w_block results, as floats (the reference's
 * (float) cast of the int32 sum) in 128-bit lane k for block k (all four
 * floats of a lane equal). */
MS_SIMD_INLINE __m512 iq2w_sums4(__m512i r0, __m512i r1, __m512i r2, __m512i r3) {
    return lane_sums_i32_ps(lane_pairs_add_i32(lane_pairs_add_i32(r0, r1), lane_pairs_add_i32(r2, r3)));
}

/* One turn of the many-rows sequence: its next m blocks (m 1..4, a
 * constant, so that the four results stay in registers), from row *r's
 * block *i on; each block's float term goes to its row's sum *sumf in
 * block order (the reference's), and a finished row's result to s. */
MS_SIMD_INLINE void iq2w_turn(const struct iq2w_consts *c, const char *x, size_t x_stride, const block_q8_K *a,
                              const struct iq2w_act *t, int64_t nb, float *s, int64_t *r, int64_t *i, float *sumf,
                              const int m) {
    const block_iq2_xxs *wb[4];
    int64_t ib[4];
    __m512i v[4];
    int64_t rr = *r, ii = *i;
    for (int k = 0; k < 4; k++) {
        v[k] = _mm512_setzero_si512();
        if (k >= m) continue;
        wb[k] = (const block_iq2_xxs *)(x + (size_t)rr * x_stride) + ii;
        ib[k] = ii;
        prefetch_ahead(wb[k], 2); /* 66 bytes a block */
        v[k] = iq2w_block(c, wb[k], &t[ii]);
        if (++ii == nb) ii = 0, rr++;
    }
    const __m512 f = iq2w_sums4(v[0], v[1], v[2], v[3]);
    const __m128 fk[4] = {_mm512_castps512_ps128(f), _mm512_extractf32x4_ps(f, 1), _mm512_extractf32x4_ps(f, 2),
                          _mm512_extractf32x4_ps(f, 3)};
    for (int k = 0; k < m; k++) {
        *sumf += a[ib[k]].d * fp16_scale(wb[k]->d) * _mm_cvtss_f32(fk[k]);
        if (++*i == nb) {
            s[(*r)++] = 0.125f * *sumf;
            *sumf = 0.0f;
            *i = 0;
        }
    }
}

/* Many rows against one token. The blocks of all rows are one sequence,
 * taken four at a time (their sums reduced together); a short row (four
 * blocks at n_embd 1024) is then one turn. Rows longer than
 * IQ2W_ROWS_MAX_BLOCKS blocks take the single dot. */
MS_DECL_DOT_ROWS(iq2_xxs, q8_K, avx512) {
    const int64_t nb = n / QK_K;
    if (nb == 0 || nb > IQ2W_ROWS_MAX_BLOCKS) {
        for (int64_t r = 0; r < n_rows; r++)
            ms_dot_iq2_xxs_q8_K_avx512(n, s + r, (const char *)x + (size_t)r * x_stride, y);
        return;
    }
    if (n_rows <= 0) return;
    const block_q8_K *a = y;
    struct iq2w_act t[IQ2W_ROWS_MAX_BLOCKS];
    iq2w_act_transpose(a, nb, t);
    struct iq2w_consts c;
    iq2w_consts_load(&c);
    const int64_t total = n_rows * nb;
    int64_t r = 0, i = 0, u = 0;
    float sumf = 0.0f;
    for (; u + 4 <= total; u += 4) iq2w_turn(&c, x, x_stride, a, t, nb, s, &r, &i, &sumf, 4);
    switch (total - u) {
    case 3: iq2w_turn(&c, x, x_stride, a, t, nb, s, &r, &i, &sumf, 3); break;
    case 2: iq2w_turn(&c, x, x_stride, a, t, nb, s, &r, &i, &sumf, 2); break;
    case 1: iq2w_turn(&c, x, x_stride, a, t, nb, s, &r, &i, &sumf, 1); break;
    default: break;
    }
}
