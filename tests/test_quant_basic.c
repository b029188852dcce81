/*
 * test_quant_basic.c - F32 / F16 / BF16 / Q8_0 / MXFP4 kernels, the dispatch,
 * one-token ms_matmul (the decode product) and the type table helpers.
 *
 * - known answers worked out by hand from the format definitions (IEEE 754
 *   binary16 / bfloat16, ggml's Q8_0 and MXFP4 block layouts);
 * - the AVX2 and AVX-512 kernels (called directly when the CPU has them)
 *   against the scalar reference on random data whose lengths leave tails
 *   (not multiples of the unroll widths): conversions and quantizers must be
 *   bit-identical, dots within a rounding-error bound (see dot_tolerance);
 * - quantize / dequantize round-trip error bounds;
 * - ms_matmul of one token in fast and quality mode against a
 *   double-precision product.
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
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/matmul.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "moestream.h"
#include "test_cpu.h"
#include "util/mem.h"
#include "util/rng.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static float f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}


static void *xalloc(size_t n) {
    void *p = ms_aligned_alloc(MS_ALIGN, n);
    assert_non_null(p);
    return p;
}

/* Random f32 data: normal(0, scale) with a few larger outliers. */
static void fill_floats(ms_rng *r, float *x, int64_t n, float scale) {
    ms_rng_fill_normal(r, x, n, scale);
    for (int64_t i = 0; i < n; i += 37) x[i] *= 8.0f;
}

/* A random weight row of n elements in `type` (bytes in out). Q8_0 gets
 * quantized scales but fully random int8 values (-128 included), MXFP4 fully
 * random codes with exponents around 2^0: every bit pattern a file may hold. */
static void make_row(ms_rng *r, enum ms_type type, int64_t n, void *out) {
    float *tmp = xalloc((size_t)n * sizeof(float));
    fill_floats(r, tmp, n, 1.0f);
    if (type == MS_TYPE_F32) {
        memcpy(out, tmp, (size_t)n * sizeof(float));
    } else if (type == MS_TYPE_MXFP4) {
        block_mxfp4 *b = out;
        for (int64_t i = 0; i < n / QK_MXFP4; i++) {
            b[i].e = (uint8_t)(117 + ms_rng_u64(r) % 21);
            for (int j = 0; j < QK_MXFP4 / 2; j++) b[i].qs[j] = (uint8_t)ms_rng_u64(r);
        }
    } else {
        ms_type_traits_ref(type)->from_float(tmp, out, n);
        if (type == MS_TYPE_Q8_0) {
            block_q8_0 *b = out;
            for (int64_t i = 0; i < n / QK8_0; i++)
                for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)(uint8_t)ms_rng_u64(r);
        }
    }
    ms_free(tmp);
}

/* Row of `type` -> double, through the reference dequantizer. */
static void row_to_double(enum ms_type type, const void *row, int64_t n, double *out) {
    float *tmp = xalloc((size_t)n * sizeof(float));
    ms_type_traits_ref(type)->to_float(row, tmp, n);
    for (int64_t i = 0; i < n; i++) out[i] = tmp[i];
    ms_free(tmp);
}

/*
 * Bound for |fast - ref| of a dot product. The reference sums in double and
 * rounds once to f32 (error <= u |s| <= u S, u = 2^-24, S = sum |w_i a_i|).
 * A fast kernel forms each term with at most one rounding (f32 multiply or
 * FMA; quantized kernels: exact integer block sum times an f32 scale, two
 * roundings) and adds `m` terms in some order; any summation order of m
 * terms is within gamma_m S ~ m u S of the exact sum (Higham, Accuracy and
 * Stability of Numerical Algorithms, 2nd ed., sec. 3.1). With m = number of
 * additions the bound is (m + 3) u S. It is a worst-case bound; a wrong
 * element order or scale gives errors of order S / sqrt(n), far above it.
 */
static double dot_tolerance(int64_t m, double S) { return (double)(m + 3) * 0x1p-24 * S + 1e-30; }

/* ------------------------------------------------------------------------ */
/* Type table and dispatch                                                   */

/* Runs first, before anything in this process selects kernels: children
 * set MS_ISA and check that it caps the choice (the selection is once per
 * process, so a fork is the only way to see another one). */
static void test_isa_env_cap(void **state) {
    (void)state;
    const char *want[] = {"scalar", "avx2", "avx512", "bogus"};
    for (int k = 0; k < 4; k++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            setenv("MS_ISA", want[k], 1);
            const char *got = ms_quant_isa();
            const char *expect = !strcmp(want[k], "scalar") ? "scalar"
                                 : !strcmp(want[k], "avx2") ? (cpu_avx2() ? "avx2" : "scalar")
                                 : cpu_avx512()             ? "avx512"
                                 : cpu_avx2()               ? "avx2"
                                                            : "scalar";
            /* the active table must hold the ISA's kernels too */
            bool table_ok = true;
            if (!strcmp(expect, "scalar"))
                table_ok = ms_type_traits(MS_TYPE_Q8_0)->vec_dot == ms_dot_q8_0_q8_0_ref;
            else if (!strcmp(expect, "avx2"))
                table_ok = ms_type_traits(MS_TYPE_Q8_0)->vec_dot == ms_dot_q8_0_q8_0_avx2;
            else
                table_ok = ms_type_traits(MS_TYPE_Q8_0)->vec_dot == ms_dot_q8_0_q8_0_avx512;
            _exit(strcmp(got, expect) == 0 && table_ok ? 0 : 1);
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
}

/* MS_AVX512_SPLIT=1 moves the split-part entries (quant_dispatch.c's
 * split_isa: the Q2_K and IQ2_XXS single dots, the Q8_0 x Q16_0 single and
 * four-token dots) to the AVX2 kernels and =0 keeps them on AVX-512, while
 * the entries that stay wide on every part (the many-rows dots, the other
 * four-token dots, the GEMMs) keep their AVX-512 kernels. Forked like the
 * test above; only meaningful where the AVX-512 set is picked. */
static void test_isa_avx512_split(void **state) {
    (void)state;
    if (!cpu_avx512() || getenv("MS_ISA")) skip();
    for (int split = 0; split < 2; split++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            setenv("MS_AVX512_SPLIT", split ? "1" : "0", 1);
            setenv("MS_AVX512_VBMI", "0", 1); /* the VBMI-less forms; test_isa_avx512_vbmi has the others */
            const struct ms_type_traits *q8 = ms_type_traits(MS_TYPE_Q8_0);
            const struct ms_type_traits *q2 = ms_type_traits(MS_TYPE_Q2_K);
            const struct ms_type_traits *iq2 = ms_type_traits(MS_TYPE_IQ2_XXS);
            const bool ok = !strcmp(ms_quant_isa(), "avx512") && ms_quant_avx512_split() == (split == 1) &&
                            !ms_quant_avx512_vbmi() && q8->vec_dot == ms_dot_q8_0_q8_0_avx512 &&
                            q8->gemm_tok == ms_gemm_q8_0_q8_0x16_avx512 &&
                            q8->vec_dot_q16 == (split ? ms_dot_q8_0_q16_0_avx2 : ms_dot_q8_0_q16_0_avx512) &&
                            q8->vec_dot_q16_x4 == (split ? ms_dot_q8_0_q16_0_x4_avx2 : ms_dot_q8_0_q16_0_x4_avx512) &&
                            q8->gemm_tok_q16 == ms_gemm_q8_0_q16_0x16_avx512 && q8->gemm_tok_q16_lanes == 16 &&
                            q8->vec_dot_x4 == ms_dot_q8_0_q8_0_x4_avx512 &&
                            q2->vec_dot == (split ? ms_dot_q2_K_q8_K_avx2 : ms_dot_q2_K_q8_K_avx512) &&
                            q2->vec_dot_rows == ms_dot_rows_q2_K_q8_K_avx512 &&
                            q2->gemm_tok == ms_gemm_q2_K_q8_Kx16_avx512 &&
                            iq2->gemm_tok == ms_gemm_iq2_xxs_q8_Kx16_avx512 &&
                            q8->vec_dot_rows == ms_dot_rows_q8_0_q8_0_avx512 &&
                            q8->vec_dot_q16_rows == ms_dot_rows_q8_0_q16_0_avx512 &&
                            iq2->vec_dot == (split ? ms_dot_iq2_xxs_q8_K_avx2 : ms_dot_iq2_xxs_q8_K_avx512) &&
                            iq2->vec_dot_x4 == ms_dot_iq2_xxs_q8_K_x4_avx512 &&
                            iq2->vec_dot_rows == ms_dot_rows_iq2_xxs_q8_K_avx512;
            _exit(ok ? 0 : 1);
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
}

/* The IQ2_XXS dots and token-lane GEMM take the VBMI forms on an AVX-512
 * part with VBMI, whether its 512-bit operations split or not; none with
 * MS_AVX512_VBMI=0. Forked like the tests above. */
static void test_isa_avx512_vbmi(void **state) {
    (void)state;
    if (!cpu_avx512() || getenv("MS_ISA") || getenv("MS_AVX512_SPLIT") || getenv("MS_AVX512_VBMI")) skip();
    for (int c = 0; c < 3; c++) { /* c: 0 detected, 1 MS_AVX512_VBMI=0, 2 split part */
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            setenv("MS_AVX512_SPLIT", c == 2 ? "1" : "0", 1);
            if (c == 1) setenv("MS_AVX512_VBMI", "0", 1);
            const bool want = c != 1 && cpu_avx512vbmi(); /* every form, the GEMM too */
            const struct ms_type_traits *iq2 = ms_type_traits(MS_TYPE_IQ2_XXS);
            const bool ok = ms_quant_avx512_vbmi() == want &&
                            !strcmp(ms_kernels_isa(), c == 2 ? "avx512-split" : want ? "avx512-vbmi" : "avx512") &&
                            (iq2->vec_dot == ms_dot_iq2_xxs_q8_K_avx512vbmi) == want &&
                            (iq2->vec_dot_x4 == ms_dot_iq2_xxs_q8_K_x4_avx512vbmi) == want &&
                            (iq2->vec_dot_rows == (c == 2 ? ms_dot_rows8_iq2_xxs_q8_K_avx512vbmi
                                                          : ms_dot_rows_iq2_xxs_q8_K_avx512vbmi)) == want &&
                            iq2->gemm_tok == (want ? ms_gemm_iq2_xxs_q8_Kx16_avx512vbmi
                                                   : ms_gemm_iq2_xxs_q8_Kx16_avx512);
            _exit(ok ? 0 : 1);
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
}

static void test_type_table(void **state) {
    (void)state;
    enum ms_type t;
    assert_int_equal(ms_type_from_name("Q4_K", &t), 0);
    assert_int_equal(t, MS_TYPE_Q4_K);
    assert_int_equal(ms_type_from_name("q4_k", &t), 0);
    assert_int_equal(t, MS_TYPE_Q4_K);
    assert_int_equal(ms_type_from_name("MXFP4", &t), 0);
    assert_int_equal(t, MS_TYPE_MXFP4);
    assert_int_equal(t, 39);
    assert_int_equal(ms_type_from_name("bf16", &t), 0);
    assert_int_equal(t, MS_TYPE_BF16);
    assert_int_equal(ms_type_from_name("iq2_xxs", &t), 0);
    assert_int_equal(t, MS_TYPE_IQ2_XXS);
    assert_int_equal(ms_type_from_name("q8", &t), -1);
    assert_int_equal(ms_type_from_name("", &t), -1);
    assert_string_equal(ms_type_name(MS_TYPE_MXFP4), "mxfp4");
    assert_string_equal(ms_type_name(MS_TYPE_Q2_K), "q2_K");
    assert_null(ms_type_name((enum ms_type)4)); /* removed ggml type id */
    assert_null(ms_type_traits((enum ms_type)4));
    assert_null(ms_type_traits(MS_TYPE_COUNT));

    assert_int_equal(ms_row_size(MS_TYPE_Q8_0, 64), 68);
    assert_int_equal(ms_row_size(MS_TYPE_Q8_0, 33), 0);
    assert_int_equal(ms_row_size(MS_TYPE_MXFP4, 4096), 4096 / 32 * 17);
    assert_int_equal(ms_row_size(MS_TYPE_F16, 7), 14);
    assert_int_equal(ms_row_size(MS_TYPE_BF16, 3), 6);
    assert_int_equal(ms_row_size(MS_TYPE_F32, 5), 20);
    assert_int_equal(ms_row_size(MS_TYPE_Q4_K, 512), 288);
    assert_int_equal(ms_row_size(MS_TYPE_Q4_K, 128), 0);
    assert_int_equal(ms_row_size(MS_TYPE_Q8_0, -32), 0);
    assert_int_equal(ms_row_size((enum ms_type)5, 32), 0);

    /* kernels and activation formats as ggml pairs them */
    const struct {
        enum ms_type w, act;
    } pairs[] = {{MS_TYPE_F32, MS_TYPE_F32},   {MS_TYPE_F16, MS_TYPE_F16},   {MS_TYPE_BF16, MS_TYPE_BF16},
                 {MS_TYPE_Q8_0, MS_TYPE_Q8_0}, {MS_TYPE_MXFP4, MS_TYPE_Q8_0}, {MS_TYPE_Q4_K, MS_TYPE_Q8_K},
                 {MS_TYPE_Q2_K, MS_TYPE_Q8_K}, {MS_TYPE_IQ2_XXS, MS_TYPE_Q8_K},
                 {MS_TYPE_Q6_K, MS_TYPE_Q8_K}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        for (int tab = 0; tab < 2; tab++) {
            const struct ms_type_traits *tt = tab ? ms_type_traits(pairs[i].w) : ms_type_traits_ref(pairs[i].w);
            assert_true(tt->has_kernels);
            assert_int_equal(tt->vec_dot_type, pairs[i].act);
            assert_non_null(tt->to_float);
            assert_non_null(tt->from_float);
            assert_non_null(tt->vec_dot);
            assert_non_null(tt->vec_dot_f32);
        }
    }
    assert_non_null(ms_type_traits(MS_TYPE_Q8_K)->from_float);
    assert_false(ms_type_traits(MS_TYPE_Q8_K)->has_kernels);
    assert_false(ms_type_traits(MS_TYPE_Q4_0)->has_kernels);
    assert_true(ms_type_traits_ref(MS_TYPE_Q8_0)->vec_dot == ms_dot_q8_0_q8_0_ref);

    /* The selected set is the best the CPU has (MS_ISA unset in ctest). */
    const char *isa = ms_quant_isa();
    if (!getenv("MS_ISA")) assert_string_equal(isa, cpu_avx512() ? "avx512" : cpu_avx2() ? "avx2" : "scalar");
}

/* ------------------------------------------------------------------------ */
/* Known answers: fp16, bf16                                                 */

static void test_fp16_known(void **state) {
    (void)state;
    const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.1f, 0x2e66}, /* 0.0999755859375, nearest to 0.1 */
        {65504.0f, 0x7bff},            /* largest finite half */
        {65519.0f, 0x7bff},            /* below the midpoint 65520 */
        {65520.0f, 0x7c00},            /* midpoint, 0x7bff is odd: rounds to inf */
        {1e6f, 0x7c00},                /* overflow */
        {0x1p-14f, 0x0400},            /* 6.1035e-5, smallest normal */
        {0x1p-14f - 0x1p-24f, 0x03ff}, /* largest subnormal */
        {0x1p-24f, 0x0001},            /* smallest subnormal */
        {0x1p-25f, 0x0000},            /* half of it: tie to even (0) */
        {0x1.8p-25f, 0x0001},          /* above the tie */
        {0x1.8p-24f, 0x0002},          /* 1.5 ulp: tie between 1 and 2 -> 2 */
        {0x1p-30f, 0x0000},
        {1.0f + 0x1p-11f, 0x3c00},                /* tie, 0x3c00 even */
        {1.0f + 0x1.8p-10f, 0x3c02},              /* tie between 0x3c01 and 0x3c02 */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},     /* just above the tie */
        {-0.0f, 0x8000},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {f32_bits(0x00000001), 0x0000}, /* f32 subnormal */
        {2047.0f + 0.5f, 0x6800},        /* 2047.5: ulp 1 -> tie to 2048 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (ms_fp32_to_fp16(cases[i].f) != cases[i].h)
            fail_msg("fp16(%a) = 0x%04x, want 0x%04x", (double)cases[i].f, ms_fp32_to_fp16(cases[i].f), cases[i].h);
    }
    const uint16_t nan_h = ms_fp32_to_fp16(NAN);
    assert_int_equal(nan_h & 0x7c00, 0x7c00);
    assert_int_not_equal(nan_h & 0x03ff, 0);
    assert_int_equal(ms_fp32_to_fp16(-NAN) & 0x8000, 0x8000);

    assert_true(ms_fp16_to_fp32(0x7bff) == 65504.0f);
    assert_true(ms_fp16_to_fp32(0x0001) == 0x1p-24f);
    assert_true(ms_fp16_to_fp32(0x0400) == 0x1p-14f);
    assert_true(ms_fp16_to_fp32(0x3555) == 0x1.554p-2f);
    assert_true(isinf(ms_fp16_to_fp32(0xfc00)) && ms_fp16_to_fp32(0xfc00) < 0);
    assert_true(isnan(ms_fp16_to_fp32(0x7e00)));
    assert_true(signbit(ms_fp16_to_fp32(0x8000)) && ms_fp16_to_fp32(0x8000) == 0.0f);

    /* Every non-NaN half survives half -> f32 -> half. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float f = ms_fp16_to_fp32((uint16_t)h);
        if (isnan(f)) {
            assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
            continue;
        }
        if (ms_fp32_to_fp16(f) != h) fail_msg("half 0x%04x does not round-trip", h);
    }
}

static void test_bf16_known(void **state) {
    (void)state;
    const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3f80},
        {3.140625f, 0x4049},
        {1.0f + 0x1p-8f, 0x3f80},           /* tie, 0x3f80 even */
        {1.0f + 0x1.8p-7f, 0x3f82},         /* tie between 0x3f81 and 0x3f82 */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81}, /* above the tie */
        {-0.0f, 0x8000},
        {INFINITY, 0x7f80},
        {-INFINITY, 0xff80},
        {f32_bits(0x7f7fffff), 0x7f80}, /* FLT_MAX rounds up to inf */
        {f32_bits(0x00010000), 0x0001}, /* f32 subnormal kept as bf16 subnormal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (ms_fp32_to_bf16(cases[i].f) != cases[i].h)
            fail_msg("bf16(%a) = 0x%04x, want 0x%04x", (double)cases[i].f, ms_fp32_to_bf16(cases[i].f), cases[i].h);
    }
    /* NaN whose top 16 bits look like inf must stay NaN (quiet bit forced). */
    assert_int_equal(ms_fp32_to_bf16(f32_bits(0x7f800001)), 0x7fc0);
    assert_true(isnan(ms_bf16_to_fp32(ms_fp32_to_bf16(NAN))));
    assert_true(ms_bf16_to_fp32(0x4049) == 3.140625f);
    assert_true(ms_bf16_to_fp32(0xc000) == -2.0f);
}

/* ------------------------------------------------------------------------ */
/* Known answers: Q8_0, MXFP4                                                */

static void test_q8_0_known(void **state) {
    (void)state;
    /* dequantize: d = 0.5 (fp16 0x3800), q_j = j - 16 -> x_j = (j - 16) / 2 */
    block_q8_0 b;
    b.d = 0x3800;
    for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)(j - 16);
    float y[32];
    ms_dequant_q8_0_ref(&b, y, 32);
    for (int j = 0; j < 32; j++) assert_true(y[j] == (float)(j - 16) * 0.5f);

    /* quantize: amax 127 -> d = 1 (0x3c00), q = roundf(x): ties away from
     * zero (0.5 -> 1, 2.5 -> 3, -0.5 -> -1), unlike round-half-even. */
    float x[32] = {127.0f, -63.5f, 0.5f, 1.5f, -0.5f, 2.5f, -2.5f, 0.49f, 126.5f, -127.0f, 3.0f};
    const int8_t want[32] = {127, -64, 1, 2, -1, 3, -3, 0, 127, -127, 3};
    ms_quant_q8_0_ref(x, &b, 32);
    assert_int_equal(b.d, 0x3c00);
    assert_memory_equal(b.qs, want, 32);

    /* all-zero block: d = 0 and no division by zero */
    memset(x, 0, sizeof x);
    ms_quant_q8_0_ref(x, &b, 32);
    assert_int_equal(b.d, 0);
    for (int j = 0; j < 32; j++) assert_int_equal(b.qs[j], 0);

    /* dot: two blocks (d 0.5 and 2) against (d 1 and 0.25): x.y by hand */
    block_q8_0 w[2], a[2];
    w[0].d = 0x3800; /* 0.5 */
    w[1].d = 0x4000; /* 2 */
    a[0].d = 0x3c00; /* 1 */
    a[1].d = 0x3400; /* 0.25 */
    for (int j = 0; j < 32; j++) {
        w[0].qs[j] = (int8_t)(j - 16);
        w[1].qs[j] = (int8_t)(j % 3 - 1);
        a[0].qs[j] = 2;
        a[1].qs[j] = (int8_t)(j < 16 ? 4 : -4);
    }
    /* block 0: 0.5 * 1 * 2 * sum_j (j - 16) = 496 - 512 = -16
     * block 1: 2 * 0.25 * 4 * (sum_{j<16}(j%3-1) - sum_{j>=16}(j%3-1))
     *        = 2 * (-1 - 0) = -2: over 0..14 and 16..30 the pattern
     *        (-1, 0, 1) cancels; j = 15 adds -1, j = 31 adds 0. */
    float s = 0;
    ms_dot_q8_0_q8_0_ref(64, &s, w, a);
    assert_true(s == -18.0f);
}

static void test_mxfp4_known(void **state) {
    (void)state;
    /* e = 127 + 2: scale 2^2 on E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6,
     * then the same negated). qs[j] = j | (15 - j) << 4, so element j has
     * code j and element 16 + j has code 15 - j. */
    block_mxfp4 b;
    b.e = 129;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    const float want[32] = {0, 2,  4,  6,  8,  12,  16,  24,  -0, -2, -4, -6, -8, -12, -16, -24,
                            -24, -16, -12, -8, -6, -4, -2, -0, 24, 16, 12, 8,  6,  4,   2,   0};
    float y[32];
    ms_dequant_mxfp4_ref(&b, y, 32);
    for (int j = 0; j < 32; j++)
        if (y[j] != want[j]) fail_msg("mxfp4 element %d = %g, want %g", j, (double)y[j], (double)want[j]);

    /* Scale bytes 0 and 1 give the f32 subnormal steps 2^-128 and 2^-127
     * (ggml's halved convention): they must not flush to zero. */
    b.e = 0;
    ms_dequant_mxfp4_ref(&b, y, 32);
    assert_true(y[7] == 12.0f * 0x1p-128f && y[7] > 0.0f);
    b.e = 1;
    ms_dequant_mxfp4_ref(&b, y, 32);
    assert_true(y[7] == 12.0f * 0x1p-127f);

    /* quantize: amax 6 -> e = floor(log2 6) - 2 + 127 = 127, step 2^-1 on
     * doubled codes: representable 0, .5, 1, 1.5, 2, 3, 4, 6. Ties take the
     * lower code: 0.25 -> 0, 5 -> 4 (code 6), -5 -> -4 (code 14), 2.5 -> 2. */
    float x[32] = {6.0f, -6.0f, 0.25f, 5.0f, -5.0f, 2.5f, 1.2f, -0.1f, 3.4f, 0.75f};
    const uint8_t codes[32] = {7, 15, 0, 6, 14, 4, 2, 0, 5, 1};
    ms_quant_mxfp4_ref(x, &b, 32);
    assert_int_equal(b.e, 127);
    for (int j = 0; j < 32; j++) {
        const int code = j < 16 ? (b.qs[j] & 15) : (b.qs[j - 16] >> 4);
        if (code != codes[j]) fail_msg("mxfp4 code %d = %d, want %d", j, code, codes[j]);
    }
    /* -0.1 is nearer 0 than -0.5; it takes code 0 (+0), the first match. */

    /* degenerate blocks: zeros, tiny (below the E8M0 range), inf, NaN */
    memset(x, 0, sizeof x);
    ms_quant_mxfp4_ref(x, &b, 32);
    assert_int_equal(b.e, 0);
    x[3] = 1e-42f;
    ms_quant_mxfp4_ref(x, &b, 32);
    assert_int_equal(b.e, 0);
    x[3] = INFINITY;
    x[4] = NAN;
    ms_quant_mxfp4_ref(x, &b, 32);
    assert_int_equal(b.e, 255);
    assert_int_equal(b.qs[4] & 15, 0);

    /* dot against Q8_0: codes 0..15 (e = 129, step 2) with activation
     * d = 1, q = 1 everywhere: sum of the 32 values listed above = 0; with
     * q = 1 on the first 16 and 0 after: 2 * (0+1+2+3+4+6+8+12) * (1 - 1) = 0
     * is too weak, so use q_j = j + 1 on the first half:
     * sum_{j<8} 2*k_j*(j+1) - sum_{j<8} 2*k_j*(j+9) = -2 * 8 * 36 = -576. */
    b.e = 129;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    block_q8_0 a;
    a.d = 0x3c00;
    for (int j = 0; j < 32; j++) a.qs[j] = (int8_t)(j < 16 ? j + 1 : 0);
    float s = 0;
    ms_dot_mxfp4_q8_0_ref(32, &s, &b, &a);
    assert_true(s == -576.0f);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                               */

static void test_roundtrip_bounds(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 11);
    const int64_t n = 32 * 97;
    float *x = xalloc(n * sizeof(float)), *y = xalloc(n * sizeof(float));
    void *q = xalloc(ms_row_size(MS_TYPE_F32, n));
    fill_floats(&r, x, n, 3.0f);

    /* Q8_0: q = round(x / d) with f32 d, read back with the fp16 d'. Error
     * <= d/2 (rounding) + 127 |d - d'| (the scale's own rounding), plus a
     * few f32 ulps of |x| for x * (1/d). */
    ms_quant_q8_0_ref(x, q, n);
    ms_dequant_q8_0_ref(q, y, n);
    const block_q8_0 *bq = q;
    for (int64_t i = 0; i < n; i++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[i / 32 * 32 + j]));
        const double d = amax / 127.0f, dh = ms_fp16_to_fp32(bq[i / 32].d);
        const double bound = d / 2 + 127 * fabs(d - dh) + 4e-7 * fabs(x[i]);
        if (fabs((double)x[i] - y[i]) > bound) fail_msg("q8_0 element %lld off by %g", (long long)i, fabs(x[i] - y[i]));
    }

    /* MXFP4: every element must decode to the nearest representable value
     * of its block (checked against all 16), and within 4 steps of it: amax
     * is in [8, 16) steps, the largest code is 12 steps. */
    ms_quant_mxfp4_ref(x, q, n);
    ms_dequant_mxfp4_ref(q, y, n);
    const block_mxfp4 *bm = q;
    for (int64_t i = 0; i < n; i++) {
        const float d = ldexpf(1.0f, bm[i / 32].e - 128);
        for (int k = 0; k < 8; k++) {
            const float g = (float)(k < 4 ? k : k == 4 ? 4 : k == 5 ? 6 : k == 6 ? 8 : 12) * d;
            assert_true(fabsf(x[i] - y[i]) <= fabsf(x[i] - g));
            assert_true(fabsf(x[i] - y[i]) <= fabsf(x[i] + g));
        }
        assert_true(fabsf(x[i] - y[i]) <= 4 * d);
    }

    /* F16: relative error <= 2^-11 in the normal range. BF16: <= 2^-8. */
    ms_quant_f16_ref(x, q, n);
    ms_dequant_f16_ref(q, y, n);
    for (int64_t i = 0; i < n; i++) /* + half a subnormal step below 2^-14 */
        assert_true(fabsf(x[i] - y[i]) <= 0x1p-11f * fabsf(x[i]) + 0x1p-25f);
    ms_quant_bf16_ref(x, q, n);
    ms_dequant_bf16_ref(q, y, n);
    for (int64_t i = 0; i < n; i++) assert_true(fabsf(x[i] - y[i]) <= 0x1p-8f * fabsf(x[i]));
    ms_free(x);
    ms_free(y);
    ms_free(q);
}

/* ------------------------------------------------------------------------ */
/* Fast kernels vs the reference                                             */

struct deq_k {
    enum ms_type type;
    ms_to_float_fn f[3]; /* ref, avx2, avx512 */
};
struct q_k {
    enum ms_type type;
    ms_from_float_fn f[3];
};
struct dot_k {
    const char *name;
    enum ms_type w, a; /* weight and activation formats */
    ms_vec_dot_fn f[3];
};

static const struct deq_k deq_kernels[] = {
    {MS_TYPE_F16, {ms_dequant_f16_ref, ms_dequant_f16_avx2, ms_dequant_f16_avx512}},
    {MS_TYPE_BF16, {ms_dequant_bf16_ref, ms_dequant_bf16_avx2, ms_dequant_bf16_avx512}},
    {MS_TYPE_Q8_0, {ms_dequant_q8_0_ref, ms_dequant_q8_0_avx2, ms_dequant_q8_0_avx512}},
    {MS_TYPE_MXFP4, {ms_dequant_mxfp4_ref, ms_dequant_mxfp4_avx2, ms_dequant_mxfp4_avx512}},
};
static const struct q_k q_kernels[] = {
    {MS_TYPE_F16, {ms_quant_f16_ref, ms_quant_f16_avx2, ms_quant_f16_avx512}},
    {MS_TYPE_BF16, {ms_quant_bf16_ref, ms_quant_bf16_avx2, ms_quant_bf16_avx512}},
    {MS_TYPE_Q8_0, {ms_quant_q8_0_ref, ms_quant_q8_0_avx2, ms_quant_q8_0_avx512}},
};
static const struct dot_k dot_kernels[] = {
    {"f32.f32", MS_TYPE_F32, MS_TYPE_F32, {ms_dot_f32_f32_ref, ms_dot_f32_f32_avx2, ms_dot_f32_f32_avx512}},
    {"f16.f16", MS_TYPE_F16, MS_TYPE_F16, {ms_dot_f16_f16_ref, ms_dot_f16_f16_avx2, ms_dot_f16_f16_avx512}},
    {"f16.f32", MS_TYPE_F16, MS_TYPE_F32, {ms_dot_f16_f32_ref, ms_dot_f16_f32_avx2, ms_dot_f16_f32_avx512}},
    {"bf16.bf16", MS_TYPE_BF16, MS_TYPE_BF16, {ms_dot_bf16_bf16_ref, ms_dot_bf16_bf16_avx2, ms_dot_bf16_bf16_avx512}},
    {"bf16.f32", MS_TYPE_BF16, MS_TYPE_F32, {ms_dot_bf16_f32_ref, ms_dot_bf16_f32_avx2, ms_dot_bf16_f32_avx512}},
    {"q8_0.q8_0", MS_TYPE_Q8_0, MS_TYPE_Q8_0, {ms_dot_q8_0_q8_0_ref, ms_dot_q8_0_q8_0_avx2, ms_dot_q8_0_q8_0_avx512}},
    {"q8_0.f32", MS_TYPE_Q8_0, MS_TYPE_F32, {ms_dot_q8_0_f32_ref, ms_dot_q8_0_f32_avx2, ms_dot_q8_0_f32_avx512}},
    {"mxfp4.q8_0", MS_TYPE_MXFP4, MS_TYPE_Q8_0, {ms_dot_mxfp4_q8_0_ref, ms_dot_mxfp4_q8_0_avx2, ms_dot_mxfp4_q8_0_avx512}},
    {"mxfp4.f32", MS_TYPE_MXFP4, MS_TYPE_F32, {ms_dot_mxfp4_f32_ref, ms_dot_mxfp4_f32_avx2, ms_dot_mxfp4_f32_avx512}},
};

/* Element counts: for float rows odd tails around 8/16/32/64 lanes; for
 * 32-element blocks, block counts that leave 1..3 blocks after the 2- and
 * 4-block unrolls. */
static const int64_t float_lengths[] = {1, 7, 8, 15, 17, 31, 33, 63, 65, 100, 257, 1001, 4099};
static const int64_t block_counts[] = {1, 2, 3, 5, 6, 7, 9, 11, 33, 129};

static int n_isas(void) { return cpu_avx512() ? 3 : cpu_avx2() ? 2 : 1; }
static const char *const isa_name[] = {"ref", "avx2", "avx512"};

static size_t n_lengths(enum ms_type t) {
    return ms_type_traits(t)->blck_size > 1 ? sizeof block_counts / sizeof block_counts[0]
                                            : sizeof float_lengths / sizeof float_lengths[0];
}
static int64_t length_at(enum ms_type t, size_t k) {
    return ms_type_traits(t)->blck_size > 1 ? block_counts[k] * 32 : float_lengths[k];
}

static void test_fast_dequant(void **state) {
    (void)state;
    if (n_isas() == 1) skip();
    ms_rng r;
    ms_rng_seed(&r, 21);
    for (size_t t = 0; t < sizeof deq_kernels / sizeof deq_kernels[0]; t++) {
        const struct deq_k *k = &deq_kernels[t];
        for (size_t li = 0; li < n_lengths(k->type); li++) {
            const int64_t n = length_at(k->type, li);
            void *row = xalloc(ms_row_size(k->type, n) + 64);
            if (k->type == MS_TYPE_F16 || k->type == MS_TYPE_BF16) {
                uint16_t *h = row; /* every bit pattern, NaN/inf/subnormal included */
                for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)ms_rng_u64(&r);
            } else {
                make_row(&r, k->type, n, row);
            }
            float *y0 = xalloc((size_t)(n + 1) * 4), *y1 = xalloc((size_t)(n + 1) * 4);
            k->f[0](row, y0, n);
            for (int isa = 1; isa < n_isas(); isa++) {
                y1[n] = 12345.0f; /* the kernel must not write past n */
                k->f[isa](row, y1, n);
                if (memcmp(y0, y1, (size_t)n * 4))
                    fail_msg("dequant %s %s n=%lld differs", ms_type_name(k->type), isa_name[isa], (long long)n);
                assert_true(y1[n] == 12345.0f);
            }
            ms_free(row);
            ms_free(y0);
            ms_free(y1);
        }
    }
}

static void test_fast_quant(void **state) {
    (void)state;
    if (n_isas() == 1) skip();
    ms_rng r;
    ms_rng_seed(&r, 22);
    for (size_t t = 0; t < sizeof q_kernels / sizeof q_kernels[0]; t++) {
        const struct q_k *k = &q_kernels[t];
        for (size_t li = 0; li < n_lengths(k->type); li++) {
            const int64_t n = length_at(k->type, li);
            float *x = xalloc((size_t)n * 4);
            if (k->type == MS_TYPE_Q8_0) {
                fill_floats(&r, x, n, 2.0f);
                /* exact ties of roundf (d = 1 block), zeros, inf and NaN */
                if (n >= 96) {
                    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) + 0.5f;
                    x[0] = 127.0f;
                    memset(x + 32, 0, 32 * 4);
                    x[70] = INFINITY;
                    x[80] = NAN;
                }
            } else {
                uint32_t *u = (uint32_t *)x; /* every bit pattern */
                for (int64_t i = 0; i < n; i++) u[i] = (uint32_t)ms_rng_u64(&r);
                /* plus exact rounding ties of both formats */
                for (int64_t i = 0; i < n; i += 5) u[i] = (u[i] & 0xffff8000u) | (i & 2 ? 0x8000u : 0x1000u);
            }
            const size_t sz = ms_row_size(k->type, n);
            uint8_t *q0 = xalloc(sz + 1), *q1 = xalloc(sz + 1);
            k->f[0](x, q0, n);
            for (int isa = 1; isa < n_isas(); isa++) {
                q1[sz] = 0xa5;
                k->f[isa](x, q1, n);
                if (memcmp(q0, q1, sz))
                    fail_msg("quant %s %s n=%lld differs", ms_type_name(k->type), isa_name[isa], (long long)n);
                assert_int_equal(q1[sz], 0xa5);
            }
            ms_free(x);
            ms_free(q0);
            ms_free(q1);
        }
    }
}

static void test_fast_dot(void **state) {
    (void)state;
    if (n_isas() == 1) skip();
    ms_rng r;
    ms_rng_seed(&r, 23);
    for (size_t t = 0; t < sizeof dot_kernels / sizeof dot_kernels[0]; t++) {
        const struct dot_k *k = &dot_kernels[t];
        for (size_t li = 0; li < n_lengths(k->w); li++) {
            const int64_t n = length_at(k->w, li);
            for (int rep = 0; rep < 3; rep++) {
                void *w = xalloc(ms_row_size(k->w, n)), *a = xalloc(ms_row_size(k->a, n));
                make_row(&r, k->w, n, w);
                float *xa = xalloc((size_t)n * 4);
                fill_floats(&r, xa, n, 1.0f);
                ms_type_traits_ref(k->a)->from_float(xa, a, n);

                double *wd = xalloc((size_t)n * 8), *ad = xalloc((size_t)n * 8);
                row_to_double(k->w, w, n, wd);
                row_to_double(k->a, a, n, ad);
                double S = 0;
                for (int64_t i = 0; i < n; i++) S += fabs(wd[i] * ad[i]);
                /* terms added: one per element for float formats, one per
                 * block (exact integer sums inside) for quantized pairs */
                const int64_t m = k->a == MS_TYPE_Q8_0 ? n / 32 : n;

                float s0 = 0;
                k->f[0](n, &s0, w, a);
                for (int isa = 1; isa < n_isas(); isa++) {
                    float s1 = -1;
                    k->f[isa](n, &s1, w, a);
                    if (fabs((double)s1 - s0) > dot_tolerance(m, S))
                        fail_msg("dot %s %s n=%lld: %.9g vs ref %.9g (S %g)", k->name, isa_name[isa], (long long)n,
                                 (double)s1, (double)s0, S);
                }
                ms_free(w);
                ms_free(a);
                ms_free(xa);
                ms_free(wd);
                ms_free(ad);
            }
        }
    }
}

/* The reference dots themselves against a double-precision sum over the
 * dequantized rows (so the comparison above is anchored to the math). */
static void test_ref_dot_exact(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 24);
    for (size_t t = 0; t < sizeof dot_kernels / sizeof dot_kernels[0]; t++) {
        const struct dot_k *k = &dot_kernels[t];
        const int64_t n = 32 * 37;
        void *w = xalloc(ms_row_size(k->w, n)), *a = xalloc(ms_row_size(k->a, n));
        make_row(&r, k->w, n, w);
        float *xa = xalloc((size_t)n * 4);
        fill_floats(&r, xa, n, 1.0f);
        ms_type_traits_ref(k->a)->from_float(xa, a, n);
        double *wd = xalloc((size_t)n * 8), *ad = xalloc((size_t)n * 8);
        row_to_double(k->w, w, n, wd);
        row_to_double(k->a, a, n, ad);
        double exact = 0, S = 0;
        for (int64_t i = 0; i < n; i++) {
            exact += wd[i] * ad[i];
            S += fabs(wd[i] * ad[i]);
        }
        float s = 0;
        k->f[0](n, &s, w, a);
        /* double sum + one f32 rounding per block scale (quantized) */
        if (fabs((double)s - exact) > dot_tolerance(4, S))
            fail_msg("ref dot %s: %.9g vs exact %.9g", k->name, (double)s, exact);
        ms_free(w);
        ms_free(a);
        ms_free(xa);
        ms_free(wd);
        ms_free(ad);
    }
}

/* ------------------------------------------------------------------------ */
/* ms_matmul of one token (decode's product)                                  */

/* y = W x for one token through the real matmul (no pool: single thread). */
static int matvec(enum ms_type type, const void *w, int64_t n_rows, int64_t n_cols,
                  const float *x, float *y, bool quality) {
    struct ms_matmul_ctx ctx = {0};
    const struct ms_mat m = {.data = w, .type = type, .n_rows = n_rows, .n_cols = n_cols,
                             .row_stride = ms_row_size(type, n_cols)};
    ms_err err = {{0}};
    const int rc = ms_matmul(&ctx, &m, x, n_cols, 1, y, n_rows, quality ? MS_ACT_F32 : MS_ACT_QUANT, &err);
    ms_matmul_ctx_free(&ctx);
    return rc;
}

static void test_matvec(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 31);
    const enum ms_type types[] = {MS_TYPE_F32, MS_TYPE_F16, MS_TYPE_BF16, MS_TYPE_Q8_0, MS_TYPE_MXFP4};
    const int64_t n_rows = 13, n_cols = 32 * 11;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct ms_type_traits *tt = ms_type_traits(types[t]);
        const size_t row = ms_row_size(types[t], n_cols);
        uint8_t *w = xalloc(row * n_rows);
        for (int64_t i = 0; i < n_rows; i++) make_row(&r, types[t], n_cols, w + i * row);
        float *x = xalloc(n_cols * 4), *y = xalloc(n_rows * 4);
        fill_floats(&r, x, n_cols, 1.0f);

        /* x as the fast mode sees it: quantized to vec_dot_type and back */
        double *xq = xalloc(n_cols * 8), *wd = xalloc(n_cols * 8);
        void *aq = xalloc(ms_row_size(tt->vec_dot_type, n_cols));
        ms_type_traits_ref(tt->vec_dot_type)->from_float(x, aq, n_cols);
        row_to_double(tt->vec_dot_type, aq, n_cols, xq);

        for (int quality = 0; quality < 2; quality++) {
            assert_int_equal(matvec(types[t], w, n_rows, n_cols, x, y, quality), 0);
            for (int64_t i = 0; i < n_rows; i++) {
                row_to_double(types[t], w + i * row, n_cols, wd);
                double exact = 0, S = 0;
                for (int64_t c = 0; c < n_cols; c++) {
                    const double xv = quality ? (double)x[c] : xq[c];
                    exact += wd[c] * xv;
                    S += fabs(wd[c] * xv);
                }
                if (fabs((double)y[i] - exact) > dot_tolerance(n_cols, S))
                    fail_msg("matvec %s quality=%d row %lld: %.9g vs %.9g", tt->name, quality, (long long)i,
                             (double)y[i], exact);
            }
        }
        ms_free(w);
        ms_free(x);
        ms_free(y);
        ms_free(xq);
        ms_free(wd);
        ms_free(aq);
    }

    /* guards: a type without kernels, an unknown type */
    float x[64] = {1}, y[2];
    uint8_t w[2 * 68] = {0};
    assert_int_equal(matvec(MS_TYPE_Q4_0, w, 1, 32, x, y, false), -1);
    assert_int_equal(matvec((enum ms_type)4, w, 1, 32, x, y, true), -1);
    assert_int_equal(matvec(MS_TYPE_Q8_0, w, 0, 64, x, y, false), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_env_cap), /* must stay first: see comment */
        cmocka_unit_test(test_isa_avx512_split), /* forks before any selection too */
        cmocka_unit_test(test_isa_avx512_vbmi),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_fp16_known),
        cmocka_unit_test(test_bf16_known),
        cmocka_unit_test(test_q8_0_known),
        cmocka_unit_test(test_mxfp4_known),
        cmocka_unit_test(test_roundtrip_bounds),
        cmocka_unit_test(test_fast_dequant),
        cmocka_unit_test(test_fast_quant),
        cmocka_unit_test(test_fast_dot),
        cmocka_unit_test(test_ref_dot_exact),
        cmocka_unit_test(test_matvec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
