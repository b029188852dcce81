/*
 * test_quant_q16.c - Q16_0, the 16-bit integer activation format, and its
 * kernels with Q8_0 weights (src/quant/quant_q16*.c).
 *
 * The reference is the specification, and every SIMD form must equal it
 * bit for bit (integer block sums are exact and the float steps are fixed),
 * so the kernel checks are memcmp, never a tolerance:
 * - the quantizer: AVX2 and AVX-512 against the reference on random rows
 *   with outliers, plus blocks of zeros, denormals, tiny normals whose
 *   1 / d would overflow, an infinity and a NaN;
 *   the reference against its own contract (|x - d q| <= d / 2, |q| <=
 *   MS_Q16_QMAX, a NaN block gives d = NaN);
 * - the reference dot against a double-precision sum of the dequantized
 *   values (its only error is the final f32 rounding of each block step);
 * - single and four-token dots of each ISA, and the token-lane GEMMs
 *   (AVX2: 8 lanes, AVX-512: 16) for 1..lanes tokens and 1..9 rows,
 *   against the reference dot, on random rows of 1..128 blocks with -128
 *   weights and heavy-tailed activations;
 * - the packs: 16 lanes, 256 hi + lo gives back q, qsum128 is 128 sum q;
 *   8 lanes, each token's values in its 32-bit lane pairs;
 * - the dispatch: Q8_0 has the Q16 entries in both tables, other types none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_basic.h"
#include "quant/quant_impl.h"
#include "test_cpu.h"
#include "util/mem.h"
#include "util/rng.h"

static void *xalloc(size_t n) {
    void *p = ms_aligned_alloc(MS_ALIGN, n ? n : 1);
    assert_non_null(p);
    return p;
}

static const int64_t block_counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 128};

/* n activations: normal, with every 37th value x8 and every 101st x300 */
static void fill_act(ms_rng *r, float *x, int64_t n) {
    ms_rng_fill_normal(r, x, n, 1.0f);
    for (int64_t i = 0; i < n; i += 37) x[i] *= 8.0f;
    for (int64_t i = 5; i < n; i += 101) x[i] *= 300.0f;
}

/* A Q8_0 weight row: random scales, fully random int8 codes (-128 included) */
static void make_w(ms_rng *r, int64_t nb, block_q8_0 *w) {
    for (int64_t i = 0; i < nb; i++) {
        w[i].d = ms_fp32_to_fp16((float)(0.001 + 0.02 * (double)(ms_rng_u64(r) % 1000) / 1000.0));
        for (int j = 0; j < QK8_0; j++) w[i].qs[j] = (int8_t)(uint8_t)ms_rng_u64(r);
    }
}

/* ------------------------------------------------------------------------ */

static void check_quant_equal(ms_from_float_fn q, const char *name, const float *x, int64_t n) {
    const int64_t nb = n / QK8_0;
    block_q16_0 *want = xalloc((size_t)nb * sizeof *want), *got = xalloc((size_t)nb * sizeof *got);
    ms_quant_q16_0_ref(x, want, n);
    q(x, got, n);
    for (int64_t i = 0; i < nb; i++)
        if (memcmp(&want[i], &got[i], sizeof want[i]))
            fail_msg("%s: block %lld differs from the reference (d %.9g vs %.9g)", name, (long long)i,
                     (double)got[i].d, (double)want[i].d);
    ms_free(want), ms_free(got);
}

static void test_quantize(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0x16a0c0deull);
    const int64_t nb = 64, n = nb * QK8_0;
    float *x = xalloc((size_t)n * sizeof(float));
    fill_act(&r, x, n);
    /* special blocks: zeros, denormals, an infinity, a NaN, exact halves */
    for (int j = 0; j < QK8_0; j++) x[QK8_0 * 3 + j] = 0.0f;
    for (int j = 0; j < QK8_0; j++) x[QK8_0 * 4 + j] = (float)(j - 16) * 1e-41f;
    x[QK8_0 * 5 + 7] = INFINITY;
    x[QK8_0 * 6 + 30] = NAN;
    for (int j = 0; j < QK8_0; j++) x[QK8_0 * 7 + j] = (float)(j - 16) * 0.5f;
    x[QK8_0 * 7] = (float)MS_Q16_QMAX; /* d = 1: the halves are ties */
    for (int j = 0; j < QK8_0; j++) x[QK8_0 * 8 + j] = (float)(j - 16) * 6e-36f; /* normal, but 1 / d overflows */
    block_q16_0 *b = xalloc((size_t)nb * sizeof *b);
    ms_quant_q16_0_ref(x, b, n);
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * QK8_0;
        if (i == 6) {
            assert_true(isnan(b[i].d));
            for (int j = 0; j < QK8_0; j++) assert_int_equal(b[i].qs[j], 0);
            continue;
        }
        if (i == 5) {
            assert_true(isinf(b[i].d));
            continue;
        }
        if (i == 3) assert_true(b[i].d == 0.0f);
        /* block 4's amax (1.6e-40) makes d a denormal of two significant bits:
         * its values saturate (checked against SIMD only); block 8's tiny but
         * normal amax keeps the bound */
        if (i == 4) continue;
        for (int j = 0; j < QK8_0; j++) {
            assert_true(b[i].qs[j] >= -MS_Q16_QMAX && b[i].qs[j] <= MS_Q16_QMAX);
            const double err = fabs((double)xb[j] - (double)b[i].d * b[i].qs[j]);
            if (!(err <= 0.51 * (double)b[i].d)) /* half a step, plus x * (1 / d)'s rounding */
                fail_msg("block %lld elem %d: x %.9g, d q %.9g", (long long)i, j, (double)xb[j],
                         (double)b[i].d * b[i].qs[j]);
        }
    }
    assert_int_equal(b[7].qs[1], -8);  /* -15 * 0.5 = -7.5: nearest even */
    assert_int_equal(b[7].qs[3], -6);  /* -6.5 */
    assert_int_equal(b[7].qs[17], 0);  /* 0.5 */
    assert_int_equal(b[7].qs[19], 2);  /* 1.5 */
    if (cpu_avx2()) check_quant_equal(ms_quant_q16_0_avx2, "avx2", x, n);
    if (cpu_avx512()) check_quant_equal(ms_quant_q16_0_avx512, "avx512", x, n);
    ms_free(x), ms_free(b);
}

/* The reference dot against the double sum of the dequantized values. */
static void test_ref_dot_accuracy(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0x5eed16ull);
    for (size_t li = 0; li < sizeof block_counts / sizeof block_counts[0]; li++) {
        const int64_t nb = block_counts[li], n = nb * QK8_0;
        block_q8_0 *w = xalloc((size_t)nb * sizeof *w);
        block_q16_0 *a = xalloc((size_t)nb * sizeof *a);
        float *x = xalloc((size_t)n * sizeof(float));
        make_w(&r, nb, w);
        fill_act(&r, x, n);
        ms_quant_q16_0_ref(x, a, n);
        double exact = 0, mag = 0, vs_f32 = 0;
        for (int64_t i = 0; i < nb; i++)
            for (int j = 0; j < QK8_0; j++) {
                const double wv = (double)ms_fp16_to_fp32(w[i].d) * w[i].qs[j];
                exact += wv * (double)a[i].d * a[i].qs[j];
                vs_f32 += wv * (double)x[i * QK8_0 + j];
                mag += fabs(wv * (double)x[i * QK8_0 + j]);
            }
        float s;
        ms_dot_q8_0_q16_0_ref(n, &s, w, a);
        /* f32 rounding of nb block steps and three sums */
        assert_true(fabs((double)s - exact) <= 1e-6 * mag);
        /* and the format itself: within 2^-14 of the block's magnitude per element */
        assert_true(fabs((double)s - vs_f32) <= 1e-4 * mag);
        assert_true(s != 0.0f);
        ms_free(w), ms_free(a), ms_free(x);
    }
}

struct dot_impl {
    const char *name;
    bool (*have)(void);
    ms_vec_dot_fn one;
    ms_vec_dot_x4_fn four;
};

static const struct dot_impl impls[] = {
    {"avx2", cpu_avx2, ms_dot_q8_0_q16_0_avx2, ms_dot_q8_0_q16_0_x4_avx2},
    {"avx512", cpu_avx512, ms_dot_q8_0_q16_0_avx512, ms_dot_q8_0_q16_0_x4_avx512},
};

static void test_dots_bit_identical(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0xd07016ull);
    int ran = 0;
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        const struct dot_impl *im = &impls[k];
        if (!im->have()) continue;
        ran++;
        for (size_t li = 0; li < sizeof block_counts / sizeof block_counts[0]; li++) {
            const int64_t nb = block_counts[li], n = nb * QK8_0;
            block_q8_0 *w = xalloc((size_t)nb * sizeof *w);
            block_q16_0 *a[4];
            float *x = xalloc((size_t)n * sizeof(float));
            make_w(&r, nb, w);
            for (int t = 0; t < 4; t++) {
                a[t] = xalloc((size_t)nb * sizeof *a[t]);
                fill_act(&r, x, n);
                ms_quant_q16_0_ref(x, a[t], n);
            }
            float want[4], one[4], four[4];
            const void *const a4[4] = {a[0], a[1], a[2], a[3]};
            im->four(n, four, w, a4);
            for (int t = 0; t < 4; t++) {
                ms_dot_q8_0_q16_0_ref(n, &want[t], w, a[t]);
                im->one(n, &one[t], w, a[t]);
                if (memcmp(&want[t], &one[t], sizeof(float)) || memcmp(&want[t], &four[t], sizeof(float)))
                    fail_msg("%s nb=%lld token %d: ref %.9g single %.9g x4 %.9g", im->name, (long long)nb, t,
                             (double)want[t], (double)one[t], (double)four[t]);
                assert_true(want[t] != 0.0f);
            }
            for (int t = 0; t < 4; t++) ms_free(a[t]);
            ms_free(w), ms_free(x);
        }
    }
    if (!ran) skip();
}

/* The AVX-512 many-rows dot (decode) against the reference, bit for bit:
 * 1-9 rows at a stride with a gap, every block count of block_counts and
 * rows longer than its stack buffer (1025 blocks: the single-dot path);
 * outputs past n_rows untouched. */
static void test_dot_rows(void **state) {
    (void)state;
    if (!cpu_avx512()) skip();
    ms_rng r;
    ms_rng_seed(&r, 0x5d07e0ull);
    enum { NR = 9 };
    int checked = 0;
    for (size_t li = 0; li <= sizeof block_counts / sizeof block_counts[0]; li++) {
        const int64_t nb = li < sizeof block_counts / sizeof block_counts[0] ? block_counts[li] : 1025, n = nb * QK8_0;
        const size_t stride = (size_t)nb * sizeof(block_q8_0) + 10;
        char *w = xalloc(stride * NR);
        block_q16_0 *a = xalloc((size_t)nb * sizeof *a);
        float *x = xalloc((size_t)n * sizeof(float));
        for (int i = 0; i < NR; i++) make_w(&r, nb, (block_q8_0 *)(w + (size_t)i * stride));
        fill_act(&r, x, n);
        ms_quant_q16_0_ref(x, a, n);
        for (int64_t rows = 1; rows <= NR; rows++) {
            float y[NR + 1], want;
            for (int k = 0; k <= NR; k++) y[k] = -1.0f;
            ms_dot_rows_q8_0_q16_0_avx512(n, y, w, stride, rows, a);
            for (int64_t i = 0; i < rows; i++) {
                ms_dot_q8_0_q16_0_ref(n, &want, w + (size_t)i * stride, a);
                if (memcmp(&want, &y[i], sizeof want))
                    fail_msg("q16 dot_rows nb=%lld rows=%lld: row %lld %.9g vs ref %.9g", (long long)nb,
                             (long long)rows, (long long)i, (double)y[i], (double)want);
                assert_true(want != 0.0f);
                checked++;
            }
            for (int64_t k = rows; k <= NR; k++) assert_true(y[k] == -1.0f);
        }
        ms_free(w), ms_free(a), ms_free(x);
    }
    assert_true(checked > 500);
}

/* pack (ms_pack_q16_0_x16 or a SIMD twin) against the layout blocks.h
 * gives block_q16_0x16, every nt; the SIMD twins also byte for byte
 * against the reference packer. */
static void check_pack16(ms_act_pack_fn pack) {
    ms_rng r;
    ms_rng_seed(&r, 0xbac16ull);
    const int64_t nb = 5, n = nb * QK8_0;
    block_q16_0 *a = xalloc(16 * (size_t)nb * sizeof *a);
    float *x = xalloc((size_t)n * sizeof(float));
    for (int t = 0; t < 16; t++) {
        fill_act(&r, x, n);
        ms_quant_q16_0_ref(x, a + t * nb, n);
    }
    a[0].qs[0] = MS_Q16_QMAX, a[0].qs[1] = -MS_Q16_QMAX, a[0].qs[2] = -128, a[0].qs[3] = 127; /* the edges */
    a[nb + 1].qs[5] = -129, a[nb + 1].qs[6] = 128, a[2 * nb].qs[31] = -MS_Q16_QMAX;
    block_q16_0x16 *p = xalloc((size_t)nb * sizeof *p), *want = xalloc((size_t)nb * sizeof *want);
    for (int nt = 1; nt <= 16; nt++) {
        memset(p, 0x5a, (size_t)nb * sizeof *p);
        pack(n, a, (size_t)nb * sizeof *a, nt, p);
        for (int64_t i = 0; i < nb; i++)
            for (int t = 0; t < 16; t++) {
                const block_q16_0 *b = &a[(t < nt ? t : nt - 1) * nb + i];
                int32_t sum = 0;
                for (int j = 0; j < QK8_0; j++) {
                    const int hi = p[i].hi[j / 4][4 * t + j % 4], lo = p[i].lo[j / 4][4 * t + j % 4];
                    assert_true(hi >= -127 && hi <= 127);
                    assert_int_equal(256 * hi + lo, b->qs[j]);
                    sum += b->qs[j];
                }
                assert_int_equal(p[i].qsum128[t], 128 * sum);
                assert_memory_equal(&p[i].d[t], &b->d, sizeof(float));
            }
        ms_pack_q16_0_x16(n, a, (size_t)nb * sizeof *a, nt, want);
        assert_memory_equal(p, want, (size_t)nb * sizeof *p);
    }
    ms_free(a), ms_free(x), ms_free(p), ms_free(want);
}

static void test_pack(void **state) {
    (void)state;
    check_pack16(ms_pack_q16_0_x16);
    if (cpu_avx512()) check_pack16(ms_pack_q16_0_x16_avx512);
}

static void test_pack_x8(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0xbac08ull);
    const int64_t nb = 5, n = nb * QK8_0;
    block_q16_0 *a = xalloc(8 * (size_t)nb * sizeof *a);
    float *x = xalloc((size_t)n * sizeof(float));
    for (int t = 0; t < 8; t++) {
        fill_act(&r, x, n);
        ms_quant_q16_0_ref(x, a + t * nb, n);
    }
    a[0].qs[0] = MS_Q16_QMAX, a[0].qs[1] = -MS_Q16_QMAX; /* the edges */
    block_q16_0x8 *p = xalloc((size_t)nb * sizeof *p);
    for (int nt = 1; nt <= 8; nt++) {
        ms_pack_q16_0_x8(n, a, (size_t)nb * sizeof *a, nt, p);
        for (int64_t i = 0; i < nb; i++)
            for (int t = 0; t < 8; t++) {
                const block_q16_0 *b = &a[(t < nt ? t : nt - 1) * nb + i];
                for (int j = 0; j < QK8_0; j++) assert_int_equal(p[i].qs[j / 2][2 * t + j % 2], b->qs[j]);
                assert_memory_equal(&p[i].d[t], &b->d, sizeof(float));
            }
    }
    ms_free(a), ms_free(x), ms_free(p);
}

/* A token-lane GEMM (lanes 8 or 16, its pack and kernel) against the
 * reference dot: every output bit for bit, for 1..lanes tokens and 1..9
 * rows (the AVX2 kernel takes rows four at a time, the AVX-512 one two),
 * over weight rows with a stride that is not a multiple of the row. */
static void check_gemm(const char *name, int lanes, size_t pack_block, ms_act_pack_fn pack_fn, ms_gemm_tok_fn gemm) {
    ms_rng r;
    ms_rng_seed(&r, 0x6e3316ull + (uint64_t)lanes);
    enum { NR = 11 }; /* past a group of four row pairs */
    for (size_t li = 0; li < sizeof block_counts / sizeof block_counts[0]; li++) {
        const int64_t nb = block_counts[li], n = nb * QK8_0;
        const size_t row = (size_t)nb * sizeof(block_q8_0), stride = row + 6;
        char *w = xalloc(stride * NR);
        block_q16_0 *a = xalloc((size_t)lanes * (size_t)nb * sizeof *a);
        float *x = xalloc((size_t)n * sizeof(float));
        void *pack = xalloc((size_t)nb * pack_block);
        for (int64_t i = 0; i < NR; i++) make_w(&r, nb, (block_q8_0 *)(w + (size_t)i * stride));
        for (int t = 0; t < lanes; t++) {
            fill_act(&r, x, n);
            ms_quant_q16_0_ref(x, a + t * nb, n);
        }
        for (int nt = 1; nt <= lanes; nt++) {
            pack_fn(n, a, (size_t)nb * sizeof *a, nt, pack);
            for (int64_t rows = 1; rows <= NR; rows++) {
                float y[16 * NR], want;
                for (size_t k = 0; k < sizeof y / sizeof y[0]; k++) y[k] = -1.0f;
                gemm(n, y, rows, w, stride, rows, pack, nt);
                for (int t = 0; t < nt; t++)
                    for (int64_t i = 0; i < rows; i++) {
                        ms_dot_q8_0_q16_0_ref(n, &want, w + (size_t)i * stride, a + t * nb);
                        if (memcmp(&want, &y[t * rows + i], sizeof want))
                            fail_msg("%s gemm nb=%lld rows=%lld nt=%d: token %d row %lld %.9g vs ref %.9g", name,
                                     (long long)nb, (long long)rows, nt, t, (long long)i,
                                     (double)y[t * rows + i], (double)want);
                        assert_true(want != 0.0f);
                    }
                for (int64_t k = nt * rows; k < 16 * rows; k++) assert_true(y[k] == -1.0f); /* untouched */
            }
        }
        ms_free(w), ms_free(a), ms_free(x), ms_free(pack);
    }
}

static void test_gemm_bit_identical(void **state) {
    (void)state;
    bool ran = false;
    if (cpu_avx2()) {
        check_gemm("avx2", 8, sizeof(block_q16_0x8), ms_pack_q16_0_x8, ms_gemm_q8_0_q16_0x8_avx2);
        ran = true;
    }
    if (cpu_avx512()) {
        check_gemm("avx512", 16, sizeof(block_q16_0x16), ms_pack_q16_0_x16_avx512, ms_gemm_q8_0_q16_0x16_avx512);
        ran = true;
    }
    if (!ran) skip();
}

/* NaN and infinite activations give a non-finite product in every form. */
static void test_non_finite(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0xbad16ull);
    const int64_t nb = 3, n = nb * QK8_0;
    block_q8_0 w[3];
    make_w(&r, nb, w);
    float x[3 * QK8_0];
    block_q16_0 a[3];
    for (int kind = 0; kind < 2; kind++) {
        fill_act(&r, x, n);
        x[40] = kind ? INFINITY : NAN;
        const struct ms_type_traits *tt = ms_type_traits(MS_TYPE_Q8_0);
        tt->q16_from_float(x, a, n);
        float s;
        tt->vec_dot_q16(n, &s, w, a);
        assert_false(isfinite(s));
        ms_dot_q8_0_q16_0_ref(n, &s, w, a);
        assert_false(isfinite(s));
    }
}

/* A fused call whose Q16_0 conversion follows a Q8_0 one of an odd byte
 * size (one block of 34 bytes, one token): the Q16_0 rows must still start
 * aligned for their f32 scales, and every result equals a separate call. */
static void test_matmul_after_odd_rows(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0x0dd16ull);
    const int64_t n = QK8_0, rows = 3;
    block_q8_0 w[3];
    make_w(&r, rows, w);
    float x[QK8_0], y0[3], y1[3], z0[3], z1[3];
    fill_act(&r, x, n);
    const struct ms_mat m = {.data = w, .type = MS_TYPE_Q8_0, .n_rows = rows, .n_cols = n,
                             .row_stride = sizeof(block_q8_0)};
    struct ms_matmul_ctx ctx = {0};
    ms_err err = {0};
    const struct ms_mm_op ops[2] = {
        {.w = &m, .x = x, .ldx = n, .n_tok = 1, .y = y0, .ldy = rows, .act = MS_ACT_QUANT},
        {.w = &m, .x = x, .ldx = n, .n_tok = 1, .y = y1, .ldy = rows, .act = MS_ACT_Q16},
    };
    assert_int_equal(ms_matmul_multi(&ctx, ops, 2, &err), 0);
    assert_int_equal(ms_matmul(&ctx, &m, x, n, 1, z0, rows, MS_ACT_QUANT, &err), 0);
    assert_int_equal(ms_matmul(&ctx, &m, x, n, 1, z1, rows, MS_ACT_Q16, &err), 0);
    assert_memory_equal(y0, z0, sizeof y0);
    assert_memory_equal(y1, z1, sizeof y1);
    ms_matmul_ctx_free(&ctx);
}

static void test_dispatch(void **state) {
    (void)state;
    for (int tab = 0; tab < 2; tab++) {
        const struct ms_type_traits *(*get)(enum ms_type) = tab ? ms_type_traits : ms_type_traits_ref;
        const struct ms_type_traits *q8 = get(MS_TYPE_Q8_0);
        assert_non_null(q8->q16_from_float);
        assert_non_null(q8->vec_dot_q16);
        const enum ms_type others[] = {MS_TYPE_F32, MS_TYPE_F16, MS_TYPE_BF16, MS_TYPE_Q4_K,
                                       MS_TYPE_Q2_K, MS_TYPE_IQ2_XXS, MS_TYPE_MXFP4, MS_TYPE_Q6_K};
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
            assert_null(get(others[i])->vec_dot_q16);
            assert_null(get(others[i])->gemm_tok_q16);
        }
    }
    const struct ms_type_traits *ref = ms_type_traits_ref(MS_TYPE_Q8_0), *act = ms_type_traits(MS_TYPE_Q8_0);
    assert_true(ref->vec_dot_q16 == ms_dot_q8_0_q16_0_ref);
    assert_null(ref->vec_dot_q16_x4);
    assert_null(ref->gemm_tok_q16);
    if (!strcmp(ms_quant_isa(), "avx512")) {
        /* a split AVX-512 part takes the AVX2 single and four-token dots
         * (quant_dispatch.c), the wide many-rows dot and GEMM */
        const bool split = ms_quant_avx512_split();
        assert_true(act->vec_dot_q16 == (split ? ms_dot_q8_0_q16_0_avx2 : ms_dot_q8_0_q16_0_avx512));
        assert_true(act->vec_dot_q16_x4 == (split ? ms_dot_q8_0_q16_0_x4_avx2 : ms_dot_q8_0_q16_0_x4_avx512));
        assert_true(act->vec_dot_q16_rows == ms_dot_rows_q8_0_q16_0_avx512);
        assert_true(act->gemm_tok_q16 == ms_gemm_q8_0_q16_0x16_avx512);
        assert_true(act->q16_pack == ms_pack_q16_0_x16_avx512);
        assert_int_equal(act->gemm_tok_q16_lanes, 16);
    } else if (!strcmp(ms_quant_isa(), "avx2")) {
        assert_true(act->vec_dot_q16 == ms_dot_q8_0_q16_0_avx2);
        assert_true(act->vec_dot_q16_rows == ms_dot_rows_q8_0_q16_0_avx2);
        assert_true(act->gemm_tok_q16 == ms_gemm_q8_0_q16_0x8_avx2);
        assert_true(act->q16_pack == ms_pack_q16_0_x8);
        assert_int_equal(act->gemm_tok_q16_lanes, 8);
        assert_int_equal(act->q16_pack_block, sizeof(block_q16_0x8));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_ref_dot_accuracy),
        cmocka_unit_test(test_dots_bit_identical),
        cmocka_unit_test(test_dot_rows),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_pack_x8),
        cmocka_unit_test(test_gemm_bit_identical),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_matmul_after_odd_rows),
        cmocka_unit_test(test_dispatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
