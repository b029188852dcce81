/*
 * test_quant_kq_fit.c - the Q4_K / Q5_K / Q2_K quantizers' lane-parallel fit
 * (src/quant/quant_kq_quantize.c) must write exactly the bytes of the scalar
 * fit_scale_min, in the baseline build and in the AVX2 build, on Gaussian
 * data and on awkward blocks (constant, all positive, zeros, huge, tiny,
 * subnormal, inf, NaN); and the fast normal generator must be normal and
 * reproducible.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "util/rng.h"

/* Defined in quant_kq_quantize.c for this test only: 0 auto, 1 scalar fit,
 * 2 baseline lanes, 3 AVX2 lanes. */
void ms_quant_kq_force_fit(int kind);

#define NB 96 /* super-blocks per trial */

/* Gaussian blocks, then each block but the first few given one oddity. */
static void fill(ms_rng *r, float *x, int64_t n) {
    ms_rng_fill_normal(r, x, n, 0.02f);
    for (int b = 0; b < NB; b++) {
        float *v = x + 256 * b;
        switch (b % 16) {
        case 1: for (int i = 0; i < 256; i++) v[i] = 0.25f; break;            /* constant */
        case 2: for (int i = 0; i < 256; i++) v[i] = fabsf(v[i]) + 1.0f; break; /* min > 0 */
        case 3: for (int i = 0; i < 256; i += 2) v[i] = 0.0f; break;
        case 4: v[17] = 3e38f; v[40] = -3e38f; break;                         /* range overflows */
        case 5: for (int i = 0; i < 256; i++) v[i] *= 1e-36f; break;          /* tiny/subnormal */
        case 6: v[5] = INFINITY; break;
        case 7: v[77] = NAN; v[200] = -INFINITY; break;
        case 8: for (int i = 0; i < 256; i++) v[i] = (float)(i % 3) - 1.0f; break;
        case 9: for (int i = 32; i < 64; i++) v[i] = -v[i] * 1e3f; break;
        default: break;
        }
    }
}

static void check_type(enum ms_type t, ms_from_float_fn quant, size_t blk) {
    const int64_t n = 256 * NB;
    float *x = malloc((size_t)n * sizeof *x);
    uint8_t *want = malloc(NB * blk), *got = malloc(NB * blk);
    assert_non_null(x);
    assert_non_null(want);
    assert_non_null(got);
    ms_rng r;
    ms_rng_seed(&r, 0x5eed + (uint64_t)t);
    for (int trial = 0; trial < 8; trial++) {
        fill(&r, x, n);
        ms_quant_kq_force_fit(1);
        memset(want, 0xa5, NB * blk);
        quant(x, want, n);
        for (int kind = 2; kind <= 3; kind++) {
            ms_quant_kq_force_fit(kind);
            memset(got, 0x5a, NB * blk);
            quant(x, got, n);
            for (int b = 0; b < NB; b++)
                if (memcmp(want + b * blk, got + b * blk, blk))
                    fail_msg("type %d fit %d trial %d: block %d differs from the scalar fit", (int)t,
                             kind, trial, b);
        }
        /* The data quantized to something: not every block zero. */
        int nonzero = 0;
        for (size_t i = 0; i < NB * blk; i++) nonzero |= want[i];
        assert_true(nonzero);
    }
    ms_quant_kq_force_fit(0);
    free(x);
    free(want);
    free(got);
}

static void test_q4_K_lanes(void **state) {
    (void)state;
    check_type(MS_TYPE_Q4_K, ms_quant_q4_K_ref, sizeof(block_q4_K));
}

static void test_q5_K_lanes(void **state) {
    (void)state;
    check_type(MS_TYPE_Q5_K, ms_quant_q5_K_ref, sizeof(block_q5_K));
}

static void test_q2_K_lanes(void **state) {
    (void)state;
    check_type(MS_TYPE_Q2_K, ms_quant_q2_K_ref, sizeof(block_q2_K));
}

/* Moments of the fast generator, its determinism for a seed, odd lengths
 * (a prefix of the even-length output), and the stddev argument. */
static void test_fill_normal_fast(void **state) {
    (void)state;
    const int64_t n = 1 << 20;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    ms_rng r;
    ms_rng_seed(&r, 42);
    ms_rng_fill_normal_fast(&r, x, n, 1.0f);
    double m = 0, v = 0, k4 = 0, lag = 0;
    int64_t tail = 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = x[i];
        assert_true(isfinite(a) && fabs(a) < 5.8);
        m += a;
        v += a * a;
        k4 += a * a * a * a;
        if (fabs(a) > 2.0) tail++;
        if (i + 1 < n) lag += a * x[i + 1];
    }
    m /= (double)n, v /= (double)n, k4 /= (double)n, lag /= (double)n;
    assert_true(fabs(m) < 0.005);          /* sd of the mean: 0.001 */
    assert_true(fabs(v - 1.0) < 0.01);     /* sd: 0.0014 */
    assert_true(fabs(k4 / (v * v) - 3.0) < 0.05);
    assert_true(fabs((double)tail / (double)n - 0.0455) < 0.002); /* P(|z| > 2) */
    assert_true(fabs(lag) < 0.005);        /* the pair's cos and sin are independent */

    const int64_t odd = 1001;
    ms_rng_seed(&r, 42);
    ms_rng_fill_normal_fast(&r, y, odd, 3.0f);
    for (int64_t i = 0; i < odd; i++) assert_true(fabsf(y[i] - 3.0f * x[i]) <= 1e-6f * fabsf(y[i]) + 1e-30f);
    ms_rng_seed(&r, 43);
    ms_rng_fill_normal_fast(&r, y, odd, 1.0f);
    assert_true(memcmp(x, y, (size_t)odd * sizeof *x) != 0);
    free(x);
    free(y);
}

int main(void) {
    ms_quant_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_K_lanes),
        cmocka_unit_test(test_q2_K_lanes),
        cmocka_unit_test(test_q5_K_lanes),
        cmocka_unit_test(test_fill_normal_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
