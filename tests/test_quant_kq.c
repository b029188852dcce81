/*
 * test_quant_kq.c - Q6_K, Q5_K, Q4_K, Q3_K, Q2_K, IQ2_XXS, IQ4_XS weights and Q8_K
 * activations (src/quant/quant_kq_*.c, quant_q35k_*.c, quant_q6k_*.c): the
 * IQ2_XXS tables, hand-packed known-answer blocks worked out from the format
 * definitions, AVX2 / AVX-512 kernels
 * against the scalar reference, the Q8_K dots against an f64 dot of the
 * dequantized weights with a proven error bound, and the quantizers'
 * round-trip error on Gaussian data.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_cpu.h"
#include "quant/blocks.h"
#include "quant/iq2_grid.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "util/rng.h"

enum { ISA_REF, ISA_AVX2, ISA_AVX512, N_ISA };
static const char *const isa_name[N_ISA] = {"ref", "avx2", "avx512"};

static int isa_ok(int isa) {
    if (isa == ISA_REF) return 1;
    return isa == ISA_AVX2 ? cpu_avx2() : cpu_avx512();
}

/* Block counts: one, a few, and an odd count past any unrolling. */
static const int64_t k_blocks[] = {1, 2, 3, 7};
#define N_BLOCKS_CASES (sizeof k_blocks / sizeof k_blocks[0])

/* ---- the formats under test */

struct kq_fmt {
    const char *name;
    size_t bsize;
    ms_to_float_fn dequant[N_ISA];
    ms_vec_dot_fn dot[N_ISA];     /* x q8_K */
    ms_vec_dot_fn dot_f32[N_ISA]; /* x f32 */
    ms_from_float_fn quant;
    void (*randomize)(ms_rng *r, void *blk);
    void (*zero_codes)(void *blk); /* leaves only the scales: dequant = -min */
};

static uint16_t rand_scale(ms_rng *r) { return ms_fp32_to_fp16(ms_rng_uniform_f(r, 1e-3f, 1e-2f)); }

static void rand_bytes(ms_rng *r, void *p, size_t n) {
    for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)ms_rng_u64(r);
}

static void rand_q4_K(ms_rng *r, void *blk) {
    block_q4_K *b = blk;
    rand_bytes(r, b->scales, sizeof b->scales);
    rand_bytes(r, b->qs, sizeof b->qs);
    b->d = rand_scale(r);
    b->dmin = rand_scale(r);
}
static void zero_q4_K(void *blk) { memset(((block_q4_K *)blk)->qs, 0, sizeof ((block_q4_K *)blk)->qs); }

static void rand_q2_K(ms_rng *r, void *blk) {
    block_q2_K *b = blk;
    rand_bytes(r, b->scales, sizeof b->scales);
    rand_bytes(r, b->qs, sizeof b->qs);
    b->d = rand_scale(r);
    b->dmin = rand_scale(r);
}
static void zero_q2_K(void *blk) { memset(((block_q2_K *)blk)->qs, 0, sizeof ((block_q2_K *)blk)->qs); }

static void rand_q5_K(ms_rng *r, void *blk) {
    block_q5_K *b = blk;
    rand_bytes(r, b->scales, sizeof b->scales);
    rand_bytes(r, b->qh, sizeof b->qh);
    rand_bytes(r, b->qs, sizeof b->qs);
    b->d = rand_scale(r);
    b->dmin = rand_scale(r);
}
static void zero_q5_K(void *blk) {
    block_q5_K *b = blk;
    memset(b->qs, 0, sizeof b->qs);
    memset(b->qh, 0, sizeof b->qh);
}

static void rand_q3_K(ms_rng *r, void *blk) {
    block_q3_K *b = blk;
    rand_bytes(r, b->hmask, sizeof b->hmask);
    rand_bytes(r, b->qs, sizeof b->qs);
    rand_bytes(r, b->scales, sizeof b->scales);
    b->d = rand_scale(r);
}
/* codes 0: every value d * sc * -4, the offset term alone */
static void zero_q3_K(void *blk) {
    block_q3_K *b = blk;
    memset(b->qs, 0, sizeof b->qs);
    memset(b->hmask, 0, sizeof b->hmask);
}

static void rand_iq2_xxs(ms_rng *r, void *blk) {
    block_iq2_xxs *b = blk;
    rand_bytes(r, b->qs, sizeof b->qs); /* every bit pattern is a valid block */
    b->d = rand_scale(r);
}

static void rand_q6_K(ms_rng *r, void *blk) {
    block_q6_K *b = blk;
    rand_bytes(r, b->ql, sizeof b->ql);
    rand_bytes(r, b->qh, sizeof b->qh);
    rand_bytes(r, b->scales, sizeof b->scales); /* int8 scales, -128 included */
    b->d = rand_scale(r);
}

static void rand_iq4_xs(ms_rng *r, void *blk) {
    block_iq4_xs *b = blk;
    rand_bytes(r, b, sizeof *b); /* every bit pattern is a valid block */
    b->d = rand_scale(r);
}

#define FMT(f, blk, zero)                                                                              \
    {#f, sizeof(blk), {ms_dequant_##f##_ref, ms_dequant_##f##_avx2, ms_dequant_##f##_avx512},          \
     {ms_dot_##f##_q8_K_ref, ms_dot_##f##_q8_K_avx2, ms_dot_##f##_q8_K_avx512},                        \
     {ms_dot_##f##_f32_ref, ms_dot_##f##_f32_avx2, ms_dot_##f##_f32_avx512}, ms_quant_##f##_ref,       \
     rand_##f, zero}

static const struct kq_fmt k_fmts[] = {
    FMT(q4_K, block_q4_K, zero_q4_K),
    FMT(q2_K, block_q2_K, zero_q2_K),
    FMT(iq2_xxs, block_iq2_xxs, NULL),
    FMT(q5_K, block_q5_K, zero_q5_K),
    FMT(q3_K, block_q3_K, zero_q3_K),
    FMT(q6_K, block_q6_K, NULL),
    FMT(iq4_xs, block_iq4_xs, NULL),
};
enum { FMT_Q5_K = 3, FMT_Q3_K = 4, FMT_Q6_K = 5, FMT_IQ4_XS = 6 };
#define N_FMTS (sizeof k_fmts / sizeof k_fmts[0])

static const ms_from_float_fn k_q8K_quant[N_ISA] = {ms_quant_q8_K_ref, ms_quant_q8_K_avx2, ms_quant_q8_K_avx512};

static void *rand_weights(const struct kq_fmt *f, ms_rng *r, int64_t nb) {
    uint8_t *w = malloc(f->bsize * (size_t)nb);
    assert_non_null(w);
    for (int64_t i = 0; i < nb; i++) f->randomize(r, w + f->bsize * (size_t)i);
    return w;
}

static float *normal(ms_rng *r, int64_t n, float stddev) {
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    ms_rng_fill_normal(r, x, n, stddev);
    return x;
}

/* ---- tables */

static void test_tables(void **state) {
    (void)state;
    /* ksigns: the low 7 bits are the index, bit 7 their parity */
    for (int i = 0; i < 128; i++) {
        assert_int_equal(ms_iq2_ksigns[i] & 127, i);
        assert_int_equal(__builtin_popcount(ms_iq2_ksigns[i]) % 2, 0);
        for (int j = 0; j < 8; j++) /* the expanded form: -1 where the bit is set */
            assert_int_equal((int8_t)(ms_iq2_signs64[i] >> (8 * j)), (ms_iq2_ksigns[i] >> j) & 1 ? -1 : 1);
    }
    /* the grid as 2-bit levels: the same magnitudes, level 3 unused */
    static const int mag[3] = {8, 25, 43};
    for (int g = 0; g < 256; g++)
        for (int j = 0; j < 8; j++) {
            const int l = (ms_iq2xxs_levels[g] >> (2 * j)) & 3;
            assert_true(l < 3);
            assert_int_equal(mag[l], ms_iq2xxs_grid_val((unsigned)g, j));
            /* the same levels in two byte tables */
            assert_int_equal((ms_iq2xxs_level_bytes[j / 4][g] >> (2 * (j % 4))) & 3, l);
        }
    /* grid: 256 distinct points, ascending as in ggml, every byte 8/25/43 */
    for (int g = 0; g < 256; g++) {
        if (g) assert_true(ms_iq2xxs_grid[g] > ms_iq2xxs_grid[g - 1]);
        for (int j = 0; j < 8; j++) {
            const int v = ms_iq2xxs_grid_val((unsigned)g, j);
            assert_true(v == 8 || v == 25 || v == 43);
        }
    }
    /* spot values and a checksum of ggml-common.h's iq2xxs_grid */
    assert_true(ms_iq2xxs_grid[0] == 0x0808080808080808ull);
    assert_true(ms_iq2xxs_grid[1] == 0x080808080808082bull);
    assert_true(ms_iq2xxs_grid[132] == 0x1908080808080819ull);
    assert_true(ms_iq2xxs_grid[255] == 0x2b2b2b1908081908ull);
    uint64_t sum = 0;
    for (int g = 0; g < 256; g++) sum += ms_iq2xxs_grid[g];
    assert_true(sum == 10026840302681211747ull);
}

/* ---- Q8_K */

static void test_q8_K_known(void **state) {
    (void)state;
    float x[QK_K];
    /* largest magnitude is +2 (first at 10): it maps to -127, d = -2/127 */
    for (int j = 0; j < QK_K; j++) x[j] = (float)((j % 5) - 2) * 0.5f; /* -1 .. 1 */
    x[10] = 2.0f;
    x[20] = -2.0f;
    block_q8_K b;
    ms_quant_q8_K_ref(x, &b, QK_K);
    assert_true(b.d == -2.0f / 127.0f);
    assert_int_equal(b.qs[10], -127);
    assert_int_equal(b.qs[20], 127);
    for (int j = 0; j < QK_K; j++) {
        if (j == 10 || j == 20) continue;
        /* -127/2 * {-1, -0.5, 0, 0.5, 1} = {63.5, 31.75, 0, ...}; 63.5 ties to even 64 */
        static const int expect[5] = {64, 32, 0, -32, -64};
        assert_int_equal(b.qs[j], expect[j % 5]);
    }
    for (int k = 0; k < QK_K / 16; k++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += b.qs[16 * k + j];
        assert_int_equal(b.bsums[k], s);
    }
    /* all-zero block */
    memset(x, 0, sizeof x);
    memset(&b, 0x55, sizeof b);
    ms_quant_q8_K_ref(x, &b, QK_K);
    assert_true(b.d == 0.0f);
    for (int j = 0; j < QK_K; j++) assert_int_equal(b.qs[j], 0);
    for (int k = 0; k < QK_K / 16; k++) assert_int_equal(b.bsums[k], 0);
}

/* The SIMD quantizers must write the same bytes (same rounding). */
static void test_q8_K_simd_exact(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 81);
    for (size_t c = 0; c < N_BLOCKS_CASES; c++) {
        const int64_t nb = k_blocks[c], n = nb * QK_K;
        float *x = normal(&r, n, 3.0f);
        if (nb > 1) memset(x + QK_K, 0, sizeof(float) * QK_K); /* all-zero block */
        if (nb > 2) {                                         /* tie: +5 first, -5 later */
            x[2 * QK_K + 7] = 5e-3f * 1000.0f;
            x[2 * QK_K + 99] = -5.0f;
        }
        block_q8_K *ref = calloc((size_t)nb, sizeof *ref), *got = calloc((size_t)nb, sizeof *got);
        assert_true(ref && got);
        ms_quant_q8_K_ref(x, ref, n);
        for (int64_t i = 0; i < nb; i++) {
            float dq[QK_K];
            ms_dequant_q8_K_ref(&ref[i], dq, QK_K);
            for (int j = 0; j < QK_K; j++) assert_true(fabsf(dq[j] - x[i * QK_K + j]) <= fabsf(ref[i].d) * 0.5001f);
        }
        for (int isa = ISA_AVX2; isa < N_ISA; isa++) {
            if (!isa_ok(isa)) continue;
            memset(got, 0xa5, sizeof *got * (size_t)nb);
            k_q8K_quant[isa](x, got, n);
            for (int64_t i = 0; i < nb; i++) {
                if (memcmp(&ref[i], &got[i], sizeof *ref)) fail_msg("q8_K %s block %lld differs", isa_name[isa], (long long)i);
            }
        }
        free(x), free(ref), free(got);
    }
}

/* Non-finite activations: a NaN value, and infinities (which make the
 * block's scale infinite and every other product 0 * inf = NaN). Every
 * ISA's quantizer gives the reference's bytes, and no value is -128 (the
 * sign-trick dots could not negate it, and the exact token-lane GEMMs
 * would then disagree with them). */
static void test_q8_K_non_finite(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 29);
    const int64_t nb = 4, n = nb * QK_K;
    float *x = normal(&r, n, 1.0f);
    x[5] = NAN;                             /* block 0: one NaN */
    x[QK_K + 17] = INFINITY;                /* block 1: +inf */
    x[2 * QK_K + 200] = -INFINITY;          /* block 2: -inf and a NaN */
    x[2 * QK_K + 3] = NAN;
    for (int j = 0; j < QK_K; j += 3) x[3 * QK_K + j] = NAN; /* block 3: many NaNs */
    block_q8_K *ref = calloc((size_t)nb, sizeof *ref), *got = calloc((size_t)nb, sizeof *got);
    assert_true(ref && got);
    ms_quant_q8_K_ref(x, ref, n);
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < QK_K; j++) assert_true(ref[i].qs[j] >= -127);
    assert_int_equal(ref[0].qs[5], 0);
    for (int isa = ISA_AVX2; isa < N_ISA; isa++) {
        if (!isa_ok(isa)) continue;
        memset(got, 0xa5, sizeof *got * (size_t)nb);
        k_q8K_quant[isa](x, got, n);
        for (int64_t i = 0; i < nb; i++)
            if (memcmp(&ref[i], &got[i], sizeof *ref)) fail_msg("q8_K %s non-finite block %lld differs", isa_name[isa], (long long)i);
    }
    free(x), free(ref), free(got);
}

/* The AVX2 IQ2_XXS token-lane GEMM called directly (the dispatched one is
 * the AVX-512 kernel on an AVX-512 machine): every output equals the
 * reference dot bit for bit, for 1..8 tokens and 1..9 rows. */
static void test_gemm_iq2_xxs_avx2(void **state) {
    (void)state;
    if (!cpu_avx2()) skip();
    ms_rng r;
    ms_rng_seed(&r, 31);
    const struct kq_fmt *f = NULL;
    for (size_t k = 0; k < N_FMTS; k++)
        if (!strcmp(k_fmts[k].name, "iq2_xxs")) f = &k_fmts[k];
    assert_non_null(f);
    enum { NR = 9 };
    for (size_t c = 0; c < N_BLOCKS_CASES; c++) {
        const int64_t nb = k_blocks[c], n = nb * QK_K;
        const size_t stride = f->bsize * (size_t)nb + 10;
        uint8_t *w = malloc(stride * NR);
        block_q8_K *a = malloc(sizeof *a * (size_t)nb * 8);
        void *pack = aligned_alloc(64, (sizeof(block_q8_Kx8w) * (size_t)nb + 63) / 64 * 64);
        assert_true(w && a && pack);
        for (int64_t i = 0; i < NR; i++)
            for (int64_t b = 0; b < nb; b++) f->randomize(&r, w + (size_t)i * stride + f->bsize * (size_t)b);
        for (int t = 0; t < 8; t++) {
            float *x = normal(&r, n, 1.0f);
            ms_quant_q8_K_ref(x, a + (size_t)t * (size_t)nb, n);
            free(x);
        }
        for (int nt = 1; nt <= 8; nt++) {
            ms_pack_q8_K_x8w(n, a, sizeof *a * (size_t)nb, nt, pack);
            for (int64_t rows = 1; rows <= NR; rows++) {
                float y[8 * NR], want;
                for (size_t k = 0; k < sizeof y / sizeof y[0]; k++) y[k] = NAN;
                ms_gemm_iq2_xxs_q8_Kx8w_avx2(n, y, rows, w, stride, rows, pack, nt);
                for (int t = 0; t < nt; t++)
                    for (int64_t i = 0; i < rows; i++) {
                        ms_dot_iq2_xxs_q8_K_ref(n, &want, w + (size_t)i * stride, a + (size_t)t * (size_t)nb);
                        if (memcmp(&want, &y[t * rows + i], sizeof want))
                            fail_msg("iq2_xxs avx2 gemm nb=%lld rows=%lld nt=%d: token %d row %lld %.9g vs ref %.9g",
                                     (long long)nb, (long long)rows, nt, t, (long long)i, y[t * rows + i], want);
                    }
                for (int64_t k = nt * rows; k < 8 * rows; k++) assert_true(isnan(y[k]));
            }
        }
        free(w), free(a), free(pack);
    }
}

/* The AVX2 Q6_K, Q5_K and Q3_K token-lane GEMMs called directly (an AVX-512
 * machine dispatches the 16-lane ones): every output equals the reference
 * dot bit for bit, for 1..8 tokens (normal and heavy-tailed activations)
 * and 1..9 rows read at a stride with a gap. */
static void test_gemm_kq_avx2(void **state) {
    (void)state;
    if (!cpu_avx2()) skip();
    static const struct {
        size_t fmt;
        ms_gemm_tok_fn gemm;
    } cases[] = {{FMT_Q5_K, ms_gemm_q5_K_q8_Kx8_avx2},
                   {FMT_Q3_K, ms_gemm_q3_K_q8_Kx8_avx2},
                   {FMT_Q6_K, ms_gemm_q6_K_q8_Kx8_avx2},
                   {FMT_IQ4_XS, ms_gemm_iq4_xs_q8_Kx8_avx2}};
    ms_rng r;
    ms_rng_seed(&r, 37);
    enum { NR = 9 };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct kq_fmt *f = &k_fmts[cases[ci].fmt];
        for (size_t c = 0; c < N_BLOCKS_CASES; c++) {
            const int64_t nb = k_blocks[c], n = nb * QK_K;
            const size_t stride = f->bsize * (size_t)nb + 10;
            uint8_t *w = malloc(stride * NR);
            block_q8_K *a = malloc(sizeof *a * (size_t)nb * 8);
            void *pack = aligned_alloc(64, (sizeof(block_q8_Kx8) * (size_t)nb + 63) / 64 * 64);
            assert_true(w && a && pack);
            for (int64_t i = 0; i < NR; i++)
                for (int64_t b = 0; b < nb; b++) f->randomize(&r, w + (size_t)i * stride + f->bsize * (size_t)b);
            for (int t = 0; t < 8; t++) {
                float *x = normal(&r, n, 1.0f);
                if (t % 2)
                    for (int64_t j = 0; j < n; j += 1 + (int64_t)(ms_rng_u64(&r) % 23)) x[j] *= 40.0f;
                ms_quant_q8_K_ref(x, a + (size_t)t * (size_t)nb, n);
                free(x);
            }
            for (int nt = 1; nt <= 8; nt++) {
                ms_pack_q8_K_x8(n, a, sizeof *a * (size_t)nb, nt, pack);
                for (int64_t rows = 1; rows <= NR; rows++) {
                    float y[8 * NR], want;
                    for (size_t k = 0; k < sizeof y / sizeof y[0]; k++) y[k] = NAN;
                    cases[ci].gemm(n, y, rows, w, stride, rows, pack, nt);
                    for (int t = 0; t < nt; t++)
                        for (int64_t i = 0; i < rows; i++) {
                            f->dot[ISA_REF](n, &want, w + (size_t)i * stride, a + (size_t)t * (size_t)nb);
                            if (memcmp(&want, &y[t * rows + i], sizeof want))
                                fail_msg("%s avx2 gemm nb=%lld rows=%lld nt=%d: token %d row %lld %.9g vs ref %.9g",
                                         f->name, (long long)nb, (long long)rows, nt, t, (long long)i,
                                         y[t * rows + i], want);
                        }
                    for (int64_t k = nt * rows; k < 8 * rows; k++) assert_true(isnan(y[k]));
                }
            }
            free(w), free(a), free(pack);
        }
    }
}

/* ---- known answers, worked out from the format definitions */

/* Q4_K: d = 0.5, dmin = 0.25, scales/mins chosen to exercise the high bits of
 * the 6-bit packing; element 64 g + l (l < 32) = 0.5 * sc[2g] * (l % 16) -
 * 0.25 * m[2g], element 64 g + 32 + l = 0.5 * sc[2g+1] * (15 - l % 16) -
 * 0.25 * m[2g+1]. All values are multiples of 1/4: exact in f32. */
static void test_q4_K_known(void **state) {
    (void)state;
    static const int sc[8] = {1, 2, 3, 4, 17, 33, 63, 5};
    static const int m[8] = {0, 1, 2, 3, 20, 40, 7, 63};
    block_q4_K b;
    b.d = 0x3800;    /* 0.5 */
    b.dmin = 0x3400; /* 0.25 */
    /* bytes 0..3: sc[j] | (sc[j+4] >> 4) << 6; 4..7: m[j] | (m[j+4] >> 4) << 6;
     * 8..11: (sc[j+4] & 15) | (m[j+4] & 15) << 4 - computed by hand: */
    static const uint8_t packed[12] = {65, 130, 195, 4, 64, 129, 2, 195, 65, 129, 127, 245};
    memcpy(b.scales, packed, 12);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) b.qs[32 * g + l] = (uint8_t)((l % 16) | (15 - l % 16) << 4);
    float expect[QK_K], a[QK_K];
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            expect[64 * g + l] = 0.5f * (float)(sc[2 * g] * (l % 16)) - 0.25f * (float)m[2 * g];
            expect[64 * g + 32 + l] = 0.5f * (float)(sc[2 * g + 1] * (15 - l % 16)) - 0.25f * (float)m[2 * g + 1];
        }
    /* activations d = 1, q8 in [-3, 3]: the dot is an exact small sum */
    block_q8_K act = {.d = 1.0f};
    double dot = 0.0;
    for (int j = 0; j < QK_K; j++) {
        act.qs[j] = (int8_t)((j * 7) % 7 - 3 + (j % 3));
        a[j] = (float)act.qs[j];
        dot += (double)expect[j] * a[j];
    }
    for (int k = 0; k < 16; k++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += act.qs[16 * k + j];
        act.bsums[k] = (int16_t)s;
    }
    for (int isa = 0; isa < N_ISA; isa++) {
        if (!isa_ok(isa)) continue;
        float y[QK_K], s = 0.0f, sf = 0.0f;
        k_fmts[0].dequant[isa](&b, y, QK_K);
        for (int j = 0; j < QK_K; j++)
            if (y[j] != expect[j]) fail_msg("q4_K %s element %d: %g, expected %g", isa_name[isa], j, y[j], expect[j]);
        k_fmts[0].dot[isa](QK_K, &s, &b, &act);
        k_fmts[0].dot_f32[isa](QK_K, &sf, &b, a);
        assert_float_equal(s, dot, 1e-6 * fabs(dot) + 1e-3);
        assert_float_equal(sf, dot, 1e-6 * fabs(dot) + 1e-3);
    }
}

/* Q2_K: d = 0.5, dmin = 0.25; scales[k] = (k + 1) & 15 | ((7 k) & 15) << 4.
 * Element e: h = e / 128, j = (e % 128) / 32, l = e % 32; code =
 * (qs[32 h + l] >> 2 j) & 3; value = 0.5 * (sc & 15) * code - 0.25 * (sc >> 4)
 * with sc = scales[e / 16]. */
static void test_q2_K_known(void **state) {
    (void)state;
    block_q2_K b;
    b.d = 0x3800;
    b.dmin = 0x3400;
    for (int k = 0; k < 16; k++) b.scales[k] = (uint8_t)(((k + 1) & 15) | ((7 * k) & 15) << 4);
    for (int i = 0; i < 64; i++) b.qs[i] = (uint8_t)(i * 37 + 11);
    float expect[QK_K], a[QK_K];
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        const int code = (b.qs[32 * h + l] >> (2 * j)) & 3, sc = b.scales[e / 16];
        expect[e] = 0.5f * (float)((sc & 15) * code) - 0.25f * (float)(sc >> 4);
    }
    block_q8_K act = {.d = 0.5f};
    double dot = 0.0;
    for (int j = 0; j < QK_K; j++) {
        act.qs[j] = (int8_t)((j % 11) - 5);
        a[j] = 0.5f * (float)act.qs[j];
        dot += (double)expect[j] * a[j];
    }
    for (int k = 0; k < 16; k++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += act.qs[16 * k + j];
        act.bsums[k] = (int16_t)s;
    }
    for (int isa = 0; isa < N_ISA; isa++) {
        if (!isa_ok(isa)) continue;
        float y[QK_K], s = 0.0f, sf = 0.0f;
        k_fmts[1].dequant[isa](&b, y, QK_K);
        for (int j = 0; j < QK_K; j++)
            if (y[j] != expect[j]) fail_msg("q2_K %s element %d: %g, expected %g", isa_name[isa], j, y[j], expect[j]);
        k_fmts[1].dot[isa](QK_K, &s, &b, &act);
        k_fmts[1].dot_f32[isa](QK_K, &sf, &b, a);
        assert_float_equal(s, dot, 1e-6 * fabs(dot) + 1e-3);
        assert_float_equal(sf, dot, 1e-6 * fabs(dot) + 1e-3);
    }
}

/* IQ2_XXS: d = 1. Sub-block 0, scale 3 (db = (0.5 + 3) / 4 = 0.875):
 *   group 0: grid 1 = bytes {43, 8, 8, 8, 8, 8, 8, 8}, sign index 3 -> signs
 *            0b00000011 (even parity): elements 0 and 1 negative;
 *   group 1: grid 255 = 0x2b2b2b1908081908 -> bytes {8, 25, 8, 8, 25, 43,
 *            43, 43}, sign index 1 -> ksigns 129: elements 0 and 7 negative;
 *   groups 2, 3: grid 0 (all 8), no signs.
 * Sub-blocks 1..7 are all-zero words: grid 0, no signs, scale 0 ->
 *   db = 0.125, every value 0.125 * 8 = 1. */
static void test_iq2_xxs_known(void **state) {
    (void)state;
    block_iq2_xxs b;
    memset(&b, 0, sizeof b);
    b.d = 0x3c00;
    b.qs[0] = 1 | 255 << 8;      /* grid indices of groups 0 and 1 */
    b.qs[1] = 0;                 /* groups 2 and 3 */
    b.qs[2] = 3 | 1 << 7;        /* sign indices 3 (group 0), 1 (group 1) */
    b.qs[3] = 3 << 12;           /* scale 3 in bits 28..31 of the word */
    const float expect0[16] = {-37.625f, -7.0f,   7.0f,    7.0f,    7.0f, 7.0f,    7.0f,    7.0f,
                               -7.0f,    21.875f, 7.0f,    7.0f,    21.875f, 37.625f, 37.625f, -37.625f};
    float expect[QK_K], a[QK_K];
    for (int j = 0; j < QK_K; j++) expect[j] = j < 16 ? expect0[j] : j < 32 ? 7.0f : 1.0f;
    block_q8_K act = {.d = 0.25f};
    double dot = 0.0;
    for (int j = 0; j < QK_K; j++) {
        act.qs[j] = (int8_t)(((j * 5) % 9) - 4);
        a[j] = 0.25f * (float)act.qs[j];
        dot += (double)expect[j] * a[j];
    }
    for (int isa = 0; isa < N_ISA; isa++) {
        if (!isa_ok(isa)) continue;
        float y[QK_K], s = 0.0f, sf = 0.0f;
        k_fmts[2].dequant[isa](&b, y, QK_K);
        for (int j = 0; j < QK_K; j++)
            if (y[j] != expect[j]) fail_msg("iq2_xxs %s element %d: %g, expected %g", isa_name[isa], j, y[j], expect[j]);
        k_fmts[2].dot[isa](QK_K, &s, &b, &act);
        k_fmts[2].dot_f32[isa](QK_K, &sf, &b, a);
        assert_float_equal(s, dot, 1e-6 * fabs(dot) + 1e-3);
        assert_float_equal(sf, dot, 1e-6 * fabs(dot) + 1e-3);
    }
}

/* The checks of a known-answer block: every ISA's dequantization equals
 * expect[] exactly, and the Q8_K and f32 dots the f64 dot of expect[] with
 * the activations act (d = 1, small codes: an exact small sum). */
static void check_known(size_t f, const void *b, const float expect[QK_K]) {
    block_q8_K act = {.d = 1.0f};
    float a[QK_K];
    double dot = 0.0;
    for (int j = 0; j < QK_K; j++) {
        act.qs[j] = (int8_t)((j * 5) % 7 - 3);
        a[j] = (float)act.qs[j];
        dot += (double)expect[j] * a[j];
    }
    for (int k = 0; k < 16; k++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += act.qs[16 * k + j];
        act.bsums[k] = (int16_t)s;
    }
    for (int isa = 0; isa < N_ISA; isa++) {
        if (!isa_ok(isa)) continue;
        float y[QK_K], s = 0.0f, sf = 0.0f;
        k_fmts[f].dequant[isa](b, y, QK_K);
        for (int j = 0; j < QK_K; j++)
            if (y[j] != expect[j])
                fail_msg("%s %s element %d: %g, expected %g", k_fmts[f].name, isa_name[isa], j, y[j], expect[j]);
        k_fmts[f].dot[isa](QK_K, &s, b, &act);
        k_fmts[f].dot_f32[isa](QK_K, &sf, b, a);
        assert_float_equal(s, dot, 1e-6 * fabs(dot) + 1e-3);
        assert_float_equal(sf, dot, 1e-6 * fabs(dot) + 1e-3);
    }
}

/* Q5_K: Q4_K's scales and mins (test_q4_K_known's packing, d = 0.5, dmin =
 * 0.25) and 5-bit codes: element e = 32 s + l (sub-block s) has code
 * q = l % 16 + 16 * [(l + s) % 3 == 0], its low 4 bits in the low (s even)
 * or high (s odd) nibble of qs[32 (s / 2) + l], its fifth bit as bit s of
 * qh[l]; value 0.5 * sc[s] * q - 0.25 * m[s] (multiples of 1/4, exact). */
static void test_q5_K_known(void **state) {
    (void)state;
    static const int sc[8] = {1, 2, 3, 4, 17, 33, 63, 5};
    static const int m[8] = {0, 1, 2, 3, 20, 40, 7, 63};
    static const uint8_t packed[12] = {65, 130, 195, 4, 64, 129, 2, 195, 65, 129, 127, 245};
    block_q5_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800;    /* 0.5 */
    b.dmin = 0x3400; /* 0.25 */
    memcpy(b.scales, packed, 12);
    float expect[QK_K];
    for (int sb = 0; sb < 8; sb++)
        for (int l = 0; l < 32; l++) {
            const int q = l % 16 + 16 * ((l + sb) % 3 == 0);
            b.qs[32 * (sb / 2) + l] |= (uint8_t)((q & 15) << (sb % 2 ? 4 : 0));
            b.qh[l] |= (uint8_t)((q >> 4) << sb);
            expect[32 * sb + l] = 0.5f * (float)(sc[sb] * q) - 0.25f * (float)m[sb];
        }
    check_known(FMT_Q5_K, &b, expect);
}

/* Q3_K: d = 0.5, the 16 scales below (stored + 32 in 6 bits: low 4 bits of
 * scale k in the low (k < 8) or high nibble of byte k % 8, top 2 bits at
 * bit 2 (k / 4) of byte 8 + k % 4, packed by hand), and element e = 128 h
 * + 32 j + l with code q = (5 e + e / 16) % 8: q & 3 in bits 2 j of
 * qs[32 h + l], q >> 2 in bit 4 h + j of hmask[l]; value 0.5 * sc[e / 16]
 * * (q - 4) (multiples of 1/2, exact). */
static void test_q3_K_known(void **state) {
    (void)state;
    static const int sc[16] = {-32, -1, 0, 1, 31, 5, -7, 13, 17, -20, 2, 3, -4, 8, 30, -16};
    static const uint8_t packed[12] = {16, 207, 32, 49, 207, 133, 233, 13, 124, 137, 230, 106};
    block_q3_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5 */
    memcpy(b.scales, packed, 12);
    float expect[QK_K];
    for (int e = 0; e < QK_K; e++) {
        const int q = (5 * e + e / 16) % 8, h = e / 128, j = (e % 128) / 32, l = e % 32;
        b.qs[32 * h + l] |= (uint8_t)((q & 3) << (2 * j));
        b.hmask[l] |= (uint8_t)((q >> 2) << (4 * h + j));
        expect[e] = 0.5f * (float)(sc[e / 16] * (q - 4));
    }
    check_known(FMT_Q3_K, &b, expect);
}

/* Q6_K: d = 0.5; element e = 128 h + 32 j + l has the 2-bit high part
 * hb = (j + l + h) % 4 and the low nibble lo = (l + 5 j + 3 h) % 16, code
 * q = 16 hb + lo, and value 0.5 * sc[e / 16] * (q - 32), with the int8
 * scales below (both signs, -128 and 127). Packed by the definition:
 * ql[64 h + l] holds lo of j = 0 (low nibble) and j = 2 (high),
 * ql[64 h + 32 + l] those of j = 1 and j = 3, qh[32 h + l] the four hb in
 * bits 2 j, 2 j + 1. Every value is a multiple of 1/2 below 2^11: exact. */
static void test_q6_K_known(void **state) {
    (void)state;
    static const int8_t sc[16] = {1, -2, 3, -4, 5, 127, -128, 7, -1, 2, 64, -64, 9, 10, -11, 12};
    block_q6_K b;
    b.d = 0x3800; /* 0.5 */
    memcpy(b.scales, sc, sizeof sc);
    float expect[QK_K];
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            int qh = 0;
            for (int j = 0; j < 4; j++) {
                const int hb = (j + l + h) % 4, lo = (l + 5 * j + 3 * h) % 16, e = 128 * h + 32 * j + l;
                qh |= hb << (2 * j);
                expect[e] = 0.5f * (float)(sc[e / 16] * (16 * hb + lo - 32));
            }
            b.qh[32 * h + l] = (uint8_t)qh;
            b.ql[64 * h + l] = (uint8_t)((l + 3 * h) % 16 | ((l + 10 + 3 * h) % 16) << 4);
            b.ql[64 * h + 32 + l] = (uint8_t)((l + 5 + 3 * h) % 16 | ((l + 15 + 3 * h) % 16) << 4);
        }
    check_known(FMT_Q6_K, &b, expect);
}

/* IQ4_XS: d = 0.5; sub-block s has ls - 32 = sc[s] (both ends, -32 and
 * 31, and 0), stored + 32 (low nibble in scales_l[s / 2], nibble s % 2;
 * top two bits at bit 2 s of scales_h, packed by hand below); element
 * 32 s + l has index q = (3 l + s) % 16 (low nibble of qs[16 s + l] for l <
 * 16, high nibble of qs[16 s + l - 16] otherwise) and value 0.5 * sc[s] *
 * level[q], the levels written out from ggml's table. Every value is a
 * multiple of 1/2 below 2^12: exact. */
static void test_iq4_xs_known(void **state) {
    (void)state;
    static const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    static const int sc[8] = {-32, 31, 0, 1, -1, 17, -20, 5};
    /* stored 0, 63, 32, 33, 31, 49, 12, 37: low nibbles 0 f 0 1 f 1 c 5,
     * high bits 0 3 2 2 1 3 0 2 */
    static const uint8_t scales_l[4] = {0xf0, 0x10, 0x1f, 0x5c};
    const uint16_t scales_h = 0 | 3 << 2 | 2 << 4 | 2 << 6 | 1 << 8 | 3 << 10 | 0 << 12 | 2 << 14;
    block_iq4_xs b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5 */
    b.scales_h = scales_h;
    memcpy(b.scales_l, scales_l, sizeof scales_l);
    float expect[QK_K];
    for (int s = 0; s < 8; s++)
        for (int l = 0; l < 32; l++) {
            const int q = (3 * l + s) % 16;
            b.qs[16 * s + l % 16] |= (uint8_t)(q << (l < 16 ? 0 : 4));
            expect[32 * s + l] = 0.5f * (float)(sc[s] * levels[q]);
        }
    check_known(FMT_IQ4_XS, &b, expect);
}

/* ---- SIMD against the reference on random blocks */

/* Dequantization does the same f32 operations in every ISA; the allowance
 * is one rounding of d * q - m fused into an FMA by a compiler: 2^-23 of the
 * magnitudes involved. */
static void test_dequant_simd(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 7);
    for (size_t f = 0; f < N_FMTS; f++)
        for (size_t c = 0; c < N_BLOCKS_CASES; c++) {
            const int64_t nb = k_blocks[c], n = nb * QK_K;
            void *w = rand_weights(&k_fmts[f], &r, nb);
            float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
            assert_true(ref && got);
            k_fmts[f].dequant[ISA_REF](w, ref, n);
            float amax = 0.0f;
            for (int64_t j = 0; j < n; j++) amax = fmaxf(amax, fabsf(ref[j]));
            assert_true(amax > 0.0f);
            for (int isa = ISA_AVX2; isa < N_ISA; isa++) {
                if (!isa_ok(isa)) continue;
                k_fmts[f].dequant[isa](w, got, n);
                for (int64_t j = 0; j < n; j++)
                    if (fabsf(got[j] - ref[j]) > 2.0f * FLT_EPSILON * amax)
                        fail_msg("%s dequant %s nb=%lld j=%lld: %g vs %g", k_fmts[f].name, isa_name[isa], (long long)nb,
                                 (long long)j, got[j], ref[j]);
            }
            free(w), free(ref), free(got);
        }
}

/* sum_j |w_j a_j| + |w0_j a_j|, w0 = the block with its codes zeroed (the
 * min term). Each block's float terms d * sumi and dmin * summ are bounded by
 * it, so it bounds the rounding of the per-block float arithmetic. */
static double dot_magnitude(const struct kq_fmt *f, const void *w, const float *a, int64_t nb) {
    float y[QK_K];
    double mag = 0.0;
    uint8_t blk[512];
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *wi = (const uint8_t *)w + f->bsize * (size_t)i;
        f->dequant[ISA_REF](wi, y, QK_K);
        for (int j = 0; j < QK_K; j++) mag += fabs((double)y[j] * a[i * QK_K + j]);
        if (!f->zero_codes) continue;
        memcpy(blk, wi, f->bsize);
        f->zero_codes(blk);
        f->dequant[ISA_REF](blk, y, QK_K);
        for (int j = 0; j < QK_K; j++) mag += fabs((double)y[j] * a[i * QK_K + j]);
    }
    return mag;
}

/* dot(w, q8_K(x)) for every ISA: (1) against the reference, bit for bit
 * (the integer sums are exact in both and the f32 per-block step and running
 * sum are the reference's); (2) the reference against the f64 dot of
 * the dequantized weights with x itself: each activation is within d_a / 2 of
 * x, so the error is at most sum_blocks |d_a| / 2 * sum |w| plus rounding. */
static void test_dot_q8_K(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 11);
    for (size_t f = 0; f < N_FMTS; f++)
        for (size_t c = 0; c < N_BLOCKS_CASES; c++) {
            const int64_t nb = k_blocks[c], n = nb * QK_K;
            void *w = rand_weights(&k_fmts[f], &r, nb);
            float *x = normal(&r, n, 1.0f), *wf = malloc(sizeof(float) * (size_t)n), *aq = malloc(sizeof(float) * (size_t)n);
            block_q8_K *a = malloc(sizeof *a * (size_t)nb);
            assert_true(wf && a && aq);
            /* heavy tails on every other case: a few outliers take the
             * activations' +-127 codes, the rest are small */
            if (c % 2)
                for (int64_t j = 0; j < n; j += 1 + (int64_t)(ms_rng_u64(&r) % 23)) x[j] *= 40.0f;
            ms_quant_q8_K_ref(x, a, n);
            ms_dequant_q8_K_ref(a, aq, n);
            k_fmts[f].dequant[ISA_REF](w, wf, n);
            double exact = 0.0, qbound = 0.0;
            for (int64_t i = 0; i < nb; i++) {
                double sw = 0.0;
                for (int j = 0; j < QK_K; j++) {
                    exact += (double)wf[i * QK_K + j] * x[i * QK_K + j];
                    sw += fabs(wf[i * QK_K + j]);
                }
                qbound += 0.5 * fabs(a[i].d) * sw;
            }
            const double mag = dot_magnitude(&k_fmts[f], w, aq, nb);
            const double ftol = (double)(nb + 4) * FLT_EPSILON * mag;
            float ref = 0.0f;
            k_fmts[f].dot[ISA_REF](n, &ref, w, a);
            if (fabs(ref - exact) > qbound + ftol)
                fail_msg("%s ref dot nb=%lld: %g vs f64 %g (bound %g)", k_fmts[f].name, (long long)nb, ref, exact,
                         qbound + ftol);
            for (int isa = ISA_AVX2; isa < N_ISA; isa++) {
                if (!isa_ok(isa)) continue;
                float got = 0.0f;
                k_fmts[f].dot[isa](n, &got, w, a);
                /* integer block sums are exact and the float step per block
                 * is the reference's, in its order: equal bit for bit */
                if (memcmp(&got, &ref, sizeof got))
                    fail_msg("%s dot %s nb=%lld: %.9g vs ref %.9g (must be identical)", k_fmts[f].name,
                             isa_name[isa], (long long)nb, got, ref);
            }
            /* IQ2_XXS's VBMI form (its own file and flags), the same way */
            if (!strcmp(k_fmts[f].name, "iq2_xxs") && cpu_avx512vbmi()) {
                float got = 0.0f;
                ms_dot_iq2_xxs_q8_K_avx512vbmi(n, &got, w, a);
                if (memcmp(&got, &ref, sizeof got))
                    fail_msg("iq2_xxs dot avx512vbmi nb=%lld: %.9g vs ref %.9g (must be identical)", (long long)nb,
                             got, ref);
            }
            free(w), free(x), free(wf), free(a), free(aq);
        }
}

/* dot(w, x) with f32 x: exact products of the stored weights, summed in f32.
 * Recursive summation of n terms errs by at most (n + 1) eps sum |w x|
 * (Higham, Accuracy and Stability, 2002, 3.1), for every ISA's order. */
static void test_dot_f32(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 13);
    for (size_t f = 0; f < N_FMTS; f++)
        for (size_t c = 0; c < N_BLOCKS_CASES; c++) {
            const int64_t nb = k_blocks[c], n = nb * QK_K;
            void *w = rand_weights(&k_fmts[f], &r, nb);
            float *x = normal(&r, n, 1.0f), *wf = malloc(sizeof(float) * (size_t)n);
            assert_non_null(wf);
            k_fmts[f].dequant[ISA_REF](w, wf, n);
            double exact = 0.0, mag = 0.0;
            for (int64_t j = 0; j < n; j++) {
                exact += (double)wf[j] * x[j];
                mag += fabs((double)wf[j] * x[j]);
            }
            const double tol = (double)(n + 1) * FLT_EPSILON * mag;
            for (int isa = 0; isa < N_ISA; isa++) {
                if (!isa_ok(isa)) continue;
                float got = 0.0f;
                k_fmts[f].dot_f32[isa](n, &got, w, x);
                if (fabs((double)got - exact) > tol)
                    fail_msg("%s dot_f32 %s nb=%lld: %.9g vs f64 %.9g (tol %g)", k_fmts[f].name, isa_name[isa],
                             (long long)nb, got, exact, tol);
            }
            free(w), free(x), free(wf);
        }
}

/* ---- quantizers */

/* Relative RMS error sqrt(sum (x - y)^2 / sum x^2) of quantize -> dequantize. */
static double roundtrip_rel_rms(const struct kq_fmt *f, const float *x, int64_t n) {
    const int64_t nb = n / QK_K;
    void *w = malloc(f->bsize * (size_t)nb);
    void *w2 = malloc(f->bsize * (size_t)nb);
    float *y = malloc(sizeof(float) * (size_t)n);
    assert_true(w && w2 && y);
    f->quant(x, w, n);
    f->quant(x, w2, n);
    assert_memory_equal(w, w2, f->bsize * (size_t)nb); /* deterministic */
    f->dequant[ISA_REF](w, y, n);
    double e2 = 0.0, x2 = 0.0;
    for (int64_t j = 0; j < n; j++) {
        e2 += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
        x2 += (double)x[j] * x[j];
    }
    free(w), free(w2), free(y);
    return sqrt(e2 / x2);
}

/* Measured on this data (seeded): q4_K 0.071, q2_K 0.299, iq2_xxs 0.328,
 * q5_K 0.036, q3_K 0.151, q6_K 0.0177 -
 * the same as ggml's own quantizers give for q4_K / q2_K (0.071 / 0.297 on
 * N(0,1)) and better than its unweighted iq2_xxs (0.344); on 2^20 N(0,1)
 * values q5_K 0.0361 as ggml's algorithm, q3_K 0.1504 against its 0.1509,
 * q6_K 0.0177 as ggml's method (quantize_row_q6_K_ref; 0.0177 on this data
 * for both); iq4_xs 0.0766 (shifted 0.0751), not yet compared with
 * ggml's quantize_iq4_xs on the same data. Bounds leave ~15% for legitimate changes to the searches. */
/* The token-lane GEMMs (traits gemm_tok, act_pack): every output equals
 * the reference single dot bit for bit, for 1..gemm_tok_lanes tokens per
 * packed group (spare lanes repeat the last token) and up to
 * gemm_tok_groups groups a call, row counts that are
 * not multiples of anything, block counts past the unrolling, normal and
 * heavy-tailed activations, and rows read at a stride larger than a row. */
static void test_gemm_tok(void **state) {
    (void)state;
    ms_quant_init();
    ms_rng r;
    ms_rng_seed(&r, 23);
    int tested = 0;
    for (size_t f = 0; f < N_FMTS; f++) {
        enum ms_type type;
        assert_int_equal(ms_type_from_name(k_fmts[f].name, &type), 0);
        const struct ms_type_traits *tt = ms_type_traits(type);
        if (!tt->gemm_tok) continue;
        assert_non_null(tt->act_pack);
        const int lanes = tt->gemm_tok_lanes, groups = tt->gemm_tok_groups;
        assert_true(lanes == 8 || lanes == 16);
        assert_true(groups == 1 || (groups == 2 && lanes == 16));
        /* IQ2_XXS's AVX2 GEMM takes int16-widened activations */
        const size_t want_block = lanes == 16                ? sizeof(block_q8_Kx16)
                                  : type == MS_TYPE_IQ2_XXS ? sizeof(block_q8_Kx8w)
                                                            : sizeof(block_q8_Kx8);
        assert_int_equal(tt->act_pack_block, want_block);
        assert_true(tt->gemm_tok_min >= 1 && tt->gemm_tok_min <= lanes);
        static const int64_t rows_cases[] = {1, 2, 3, 4, 6, 7, 13, 19};
        for (size_t c = 0; c < N_BLOCKS_CASES; c++)
            for (size_t rc = 0; rc < sizeof rows_cases / sizeof rows_cases[0]; rc++) {
                const int64_t nb = k_blocks[c], n = nb * QK_K, nr = rows_cases[rc];
                const size_t stride = k_fmts[f].bsize * (size_t)nb + 32; /* a gap between rows */
                uint8_t *w = malloc(stride * (size_t)nr);
                assert_non_null(w);
                for (int64_t i = 0; i < nr; i++)
                    for (int64_t b = 0; b < nb; b++) k_fmts[f].randomize(&r, w + (size_t)i * stride + k_fmts[f].bsize * (size_t)b);
                const int max_nt = lanes * groups;
                const size_t group_bytes = tt->act_pack_block * (size_t)nb; /* a multiple of 64 */
                block_q8_K *a = malloc(sizeof *a * (size_t)nb * (size_t)max_nt);
                void *pack = aligned_alloc(64, group_bytes * (size_t)groups);
                float y[32 * 19], want;
                assert_true(a && pack);
                for (int t = 0; t < max_nt; t++) {
                    float *x = normal(&r, n, 1.0f);
                    if ((t + (int)c) % 2)
                        for (int64_t j = 0; j < n; j += 1 + (int64_t)(ms_rng_u64(&r) % 23)) x[j] *= 40.0f;
                    ms_quant_q8_K_ref(x, a + (size_t)t * (size_t)nb, n);
                    free(x);
                }
                for (int nt = 1; nt <= max_nt; nt++) {
                    /* the groups one after another, as ms_matmul packs them */
                    for (int g = 0; g * lanes < nt; g++)
                        tt->act_pack(n, a + (size_t)(g * lanes) * (size_t)nb, sizeof *a * (size_t)nb,
                                     nt - g * lanes < lanes ? nt - g * lanes : lanes, (char *)pack + (size_t)g * group_bytes);
                    for (size_t k = 0; k < sizeof y / sizeof y[0]; k++) y[k] = NAN;
                    tt->gemm_tok(n, y, nr, w, stride, nr, pack, nt);
                    for (int t = 0; t < nt; t++)
                        for (int64_t i = 0; i < nr; i++) {
                            k_fmts[f].dot[ISA_REF](n, &want, w + (size_t)i * stride, a + (size_t)t * (size_t)nb);
                            if (memcmp(&want, &y[t * nr + i], sizeof want))
                                fail_msg("%s gemm_tok nb=%lld rows=%lld nt=%d: token %d row %lld %.9g vs ref %.9g",
                                         k_fmts[f].name, (long long)nb, (long long)nr, nt, t, (long long)i,
                                         y[t * nr + i], want);
                        }
                    /* outputs past nt tokens are left alone */
                    for (int64_t k = nt * nr; k < 32 * nr; k++) assert_true(isnan(y[k]));
                    tested++;
                }
                free(w), free(a), free(pack);
            }
    }
    /* SIMD machines must have exercised at least Q4_K */
    if (cpu_avx2() && !getenv("MS_ISA")) assert_true(tested > 0);
}

static void test_quant_roundtrip(void **state) {
    (void)state;
    static const double bound[N_FMTS] = {0.085, 0.34, 0.37, 0.042, 0.175, 0.0205, 0.088};
    ms_rng r;
    ms_rng_seed(&r, 17);
    const int64_t n = 64 * QK_K;
    float *x = normal(&r, n, 0.02f);
    float *xs = malloc(sizeof(float) * (size_t)n);
    assert_non_null(xs);
    for (int64_t j = 0; j < n; j++) xs[j] = x[j] + 0.01f; /* shifted: exercises the mins */
    for (size_t f = 0; f < N_FMTS; f++) {
        const double e = roundtrip_rel_rms(&k_fmts[f], x, n), es = roundtrip_rel_rms(&k_fmts[f], xs, n);
        print_message("%-8s rel RMS %.4f (shifted %.4f)\n", k_fmts[f].name, e, es);
        assert_true(e < bound[f]);
        assert_true(es < bound[f]);
        assert_true(e > 0.0);
    }
    free(x), free(xs);
}

/* Zero blocks quantize to zeros; a non-finite value spoils at most its own
 * block (never crashes, never touches the neighbours). */
static void test_quant_special(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 19);
    const int64_t n = 3 * QK_K;
    float *x = normal(&r, n, 1.0f), y[3 * QK_K];
    for (size_t f = 0; f < N_FMTS; f++) {
        const struct kq_fmt *fm = &k_fmts[f];
        uint8_t *w = malloc(fm->bsize * 3), *w1 = malloc(fm->bsize);
        assert_true(w && w1);
        float saved[QK_K];
        memcpy(saved, x + QK_K, sizeof saved);
        memset(x + QK_K, 0, sizeof saved);
        fm->quant(x, w, n);
        fm->dequant[ISA_REF](w, y, n);
        for (int j = 0; j < QK_K; j++) assert_true(y[QK_K + j] == 0.0f);
        memcpy(x + QK_K, saved, sizeof saved);
        x[QK_K + 3] = NAN;
        x[QK_K + 9] = INFINITY;
        fm->quant(x, w, n);
        fm->quant(x + 2 * QK_K, w1, QK_K);
        assert_memory_equal(w + 2 * fm->bsize, w1, fm->bsize);
        free(w), free(w1);
    }
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),          cmocka_unit_test(test_q8_K_known),
        cmocka_unit_test(test_q8_K_simd_exact), cmocka_unit_test(test_q4_K_known),
        cmocka_unit_test(test_q2_K_known),      cmocka_unit_test(test_iq2_xxs_known),
        cmocka_unit_test(test_q5_K_known),      cmocka_unit_test(test_q3_K_known),
        cmocka_unit_test(test_q6_K_known),      cmocka_unit_test(test_iq4_xs_known),
        cmocka_unit_test(test_dequant_simd),    cmocka_unit_test(test_dot_q8_K),
        cmocka_unit_test(test_dot_f32),         cmocka_unit_test(test_quant_roundtrip),
        cmocka_unit_test(test_quant_special),
        cmocka_unit_test(test_gemm_tok),
        cmocka_unit_test(test_gemm_iq2_xxs_avx2),
        cmocka_unit_test(test_gemm_kq_avx2),
        cmocka_unit_test(test_q8_K_non_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
