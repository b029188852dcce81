/*
 * test_vec.c - the AVX2 and AVX-512 f32 dot/axpy against the scalar
 * reference on random data of lengths with every tail, and against a
 * double-precision sum with the textbook bound.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/vec.h"
#include "util/rng.h"

static int isa_max(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
    return 0;
}

static void test_dot(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 21);
    float x[300], y[300];
    ms_rng_fill_normal(&r, x, 300, 1.0f);
    ms_rng_fill_normal(&r, y, 300, 1.0f);
    for (int n = 1; n <= 300; n += (n < 70 ? 1 : 37)) {
        double ref = 0, mag = 0;
        for (int i = 0; i < n; i++) {
            ref += (double)x[i] * y[i];
            mag += fabs((double)x[i] * y[i]);
        }
        const double bound = (n + 2) * 0x1p-24 * mag; /* f32 summation of n terms */
        for (int isa = 0; isa <= isa_max(); isa++)
            assert_true(fabs(ms_vec_dot_isa(isa, n, x, y) - ref) <= bound);
        assert_true(fabs(ms_vec_dot(n, x, y) - ref) <= bound);
    }
}

static void test_axpy(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 22);
    float x[300], y0[300], y[300];
    ms_rng_fill_normal(&r, x, 300, 1.0f);
    ms_rng_fill_normal(&r, y0, 300, 1.0f);
    for (int n = 1; n <= 300; n += (n < 40 ? 1 : 41)) {
        for (int isa = 0; isa <= isa_max(); isa++) {
            for (int i = 0; i < 300; i++) y[i] = y0[i];
            ms_vec_axpy_isa(isa, n, 0.37f, x, y);
            for (int i = 0; i < 300; i++) {
                const double want = i < n ? (double)y0[i] + 0.37 * x[i] : y0[i];
                /* one FMA or a rounded multiply then add: within 2 ulps */
                assert_true(fabs(y[i] - want) <= 2 * 0x1p-24 * (fabs(want) + fabs(0.37 * x[i])));
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot),
        cmocka_unit_test(test_axpy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
