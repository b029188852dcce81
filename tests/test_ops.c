/*
 * test_ops.c - the scalar operators of kernels/ops.h against independent
 * double-precision formulations and hand-worked values.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/ops.h"
#include "util/rng.h"

static void test_rmsnorm_matches_double(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 11);
    enum { N = 1000 };
    float x[N], w[N], y[N];
    ms_rng_fill_normal(&r, x, N, 3.0f);
    ms_rng_fill_normal(&r, w, N, 1.0f);
    ms_rmsnorm(y, x, w, N, 1e-6f);
    double ss = 0;
    for (int i = 0; i < N; i++) ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / N + 1e-6);
    for (int i = 0; i < N; i++) assert_true(fabs(y[i] - x[i] * scale * w[i]) <= 1e-5 * (1 + fabs(y[i])));
    /* no weight, in place */
    memcpy(y, x, sizeof x);
    ms_rmsnorm(y, y, NULL, N, 1e-6f);
    for (int i = 0; i < N; i++) assert_true(fabs(y[i] - x[i] * scale) <= 1e-5 * (1 + fabs(y[i])));
}

static void test_softmax(void **state) {
    (void)state;
    float x[5] = {1.0f, 2.0f, -INFINITY, 3.0f, 1000.0f};
    ms_softmax(x, 4);
    double e1 = exp(-2.0), e2 = exp(-1.0), sum = e1 + e2 + 1.0;
    assert_true(fabs(x[0] - e1 / sum) < 1e-7);
    assert_true(fabs(x[1] - e2 / sum) < 1e-7);
    assert_true(x[2] == 0.0f);
    assert_true(fabs(x[3] - 1.0 / sum) < 1e-7);
    assert_true(x[4] == 1000.0f); /* untouched past n */
}

static void test_softplus(void **state) {
    (void)state;
    assert_true(ms_softplus(25.0f) == 25.0f);
    assert_true(fabsf(ms_softplus(0.0f) - logf(2.0f)) < 1e-7f);
    assert_true(fabsf(ms_softplus(-3.0f) - logf(1.0f + expf(-3.0f))) < 1e-7f);
}

/* V4-Flash compressed-layer RoPE: base 160000, s = 1/16, YaRN ramp over pairs
 * 15..25 (the worked constants of docs/model.md's RoPE with b = 160000,
 * s = 1/16: c(32) = 15.45, c(1) = 24.71), magnitude cancelled by a. A pair (1, 0)
 * rotated at position p must come out at angle theta_ext (i <= 15) or
 * theta_ext / 16 (i >= 25), with unit length. */
static void test_rope_yarn_flash_constants(void **state) {
    (void)state;
    struct ms_rope_params p = {.n_rot = 64, .freq_base = 160000.0f, .freq_scale = 1.0f / 16,
                               .ext_factor = 1.0f, .n_ctx_orig = 65536, .beta_fast = 32.0f,
                               .beta_slow = 1.0f};
    p.attn_factor = 1.0f / (1.0f + 0.1f * logf(16.0f));
    const int64_t pos = 37;
    float x[64 + 8];
    for (int i = 0; i < 72; i++) x[i] = (i >= 8 && (i - 8) % 2 == 0) ? 1.0f : 0.0f;
    for (int i = 0; i < 8; i++) x[i] = (float)i; /* the non-rotated head part */
    ms_rope_tail(x, 72, pos, &p, false);
    for (int i = 0; i < 8; i++) assert_true(x[i] == (float)i);
    for (int i = 0; i < 32; i++) {
        double theta_ext = pos * pow(160000.0, -2.0 * i / 64);
        double want = i <= 15 ? theta_ext : i >= 25 ? theta_ext / 16 : NAN;
        double c = x[8 + 2 * i], s = x[8 + 2 * i + 1];
        assert_true(fabs(hypot(c, s) - 1.0) < 1e-5);
        if (!isnan(want)) {
            assert_true(fabs(c - cos(want)) < 2e-4);
            assert_true(fabs(s - sin(want)) < 2e-4);
        } else { /* blended: strictly between the two angles' cosines */
            double lo = cos(theta_ext), hi = cos(theta_ext / 16);
            assert_true(c >= fmin(lo, hi) - 1e-4 && c <= fmax(lo, hi) + 1e-4);
        }
    }
}

/* Plain RoPE (ratio-0 layers): forward then inverse is the identity, and a
 * forward rotation preserves each pair's norm. */
static void test_rope_inverse_roundtrip(void **state) {
    (void)state;
    struct ms_rope_params p = {.n_rot = 16, .freq_base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f};
    ms_rng r;
    ms_rng_seed(&r, 5);
    float x[48], y[48];
    ms_rng_fill_normal(&r, x, 48, 1.0f);
    memcpy(y, x, sizeof x);
    ms_rope_tail(y, 48, 1234, &p, false);
    for (int i = 0; i < 32; i++) assert_true(y[i] == x[i]);
    for (int i = 32; i < 48; i += 2)
        assert_true(fabs(hypot(y[i], y[i + 1]) - hypot(x[i], x[i + 1])) < 1e-5);
    int changed = 0;
    for (int i = 32; i < 48; i++) changed += fabsf(y[i] - x[i]) > 1e-3f;
    assert_true(changed > 8);
    ms_rope_tail(y, 48, 1234, &p, true);
    for (int i = 0; i < 48; i++) assert_true(fabsf(y[i] - x[i]) < 1e-5f);
}

static void test_swiglu_clamp(void **state) {
    (void)state;
    float g[4] = {12.0f, -30.0f, 0.5f, 3.0f}, u[4] = {20.0f, -20.0f, 2.0f, -4.0f}, o[4];
    ms_swiglu_clamped(o, g, u, 4, 10.0f);
    /* gate clamped above only, before SiLU; up clamped both ways */
    assert_true(fabs(o[0] - (10.0 / (1 + exp(-10.0))) * 10.0) < 1e-4);
    assert_true(fabs(o[1] - (-30.0 / (1 + exp(30.0))) * -10.0) < 1e-9);
    assert_true(fabs(o[2] - (0.5 / (1 + exp(-0.5))) * 2.0) < 1e-6);
    ms_swiglu_clamped(o, g, u, 4, 0.0f); /* limit 0: no clamp */
    assert_true(fabs(o[0] - (12.0 / (1 + exp(-12.0))) * 20.0) < 1e-3);
}

/* Double-precision Sinkhorn written from docs/model.md ("Hyper-connections")
 * independently of ops.c. */
static void sinkhorn_ref(double c[4][4] /* [d][s] */, const float z[16], int iters, double eps) {
    for (int s = 0; s < 4; s++) {
        double m = -1e300, sum = 0;
        for (int d = 0; d < 4; d++) m = fmax(m, z[d + 4 * s]);
        for (int d = 0; d < 4; d++) sum += exp(z[d + 4 * s] - m);
        for (int d = 0; d < 4; d++) c[d][s] = exp(z[d + 4 * s] - m) / sum + eps;
    }
    for (int pass = 0; pass < 2 * iters - 1; pass++) {
        int rows = (pass % 2) == 0; /* passes 0, 2, 4 ...: destination rows */
        for (int a = 0; a < 4; a++) {
            double sum = 0;
            for (int b = 0; b < 4; b++) sum += rows ? c[a][b] : c[b][a];
            for (int b = 0; b < 4; b++) {
                if (rows) c[a][b] /= sum + eps;
                else c[b][a] /= sum + eps;
            }
        }
    }
}

static void test_sinkhorn(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 3);
    for (int iters = 1; iters <= 20; iters += (iters < 3 ? 1 : 17)) {
        for (int trial = 0; trial < 5; trial++) {
            float z[16], c[16];
            ms_rng_fill_normal(&r, z, 16, 2.0f);
            const float eps = trial == 0 ? 0.2f : 1e-6f;
            ms_sinkhorn4(c, z, iters, eps);
            double ref[4][4];
            sinkhorn_ref(ref, z, iters, eps);
            for (int d = 0; d < 4; d++)
                for (int s = 0; s < 4; s++) assert_true(fabs(c[d + 4 * s] - ref[d][s]) < 1e-6);
            /* Transposed reading must differ: guards the axis convention. */
            if (iters <= 2) {
                double diff = 0;
                for (int d = 0; d < 4; d++)
                    for (int s = 0; s < 4; s++) diff += fabs(c[s + 4 * d] - ref[d][s]);
                assert_true(diff > 1e-3);
            }
        }
    }
}

/* Expected sets recorded from g++ 12 / libstdc++ std::partial_sort with
 * comparator s[a] > s[b] (the tie order llama.cpp's CPU top-k inherits). */
static const struct {
    int n, k;
    float s[24];
    int sel[24];
} topk_cases[] = {
    {20, 13, {1, 2, 4, 0, 3, 3, 2, 1, 0, 3, 0, 0, 1, 0, 0, 2, 3, 0, 0, 0}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16}},
    {21, 4, {0, 0, 1, 0, 2, 4, 2, 4, 2, 0, 0, 2, 0, 2, 2, 0, 0, 4, 4, 2, 0}, {5, 7, 17, 18}},
    {12, 5, {1, 3, 1, 0, 4, 2, 0, 4, 3, 2, 1, 3}, {1, 4, 7, 8, 11}},
    {12, 7, {1, 4, 2, 2, 0, 0, 0, 2, 0, 4, 2, 0}, {0, 1, 2, 3, 7, 9, 10}},
    {6, 5, {4, 0, 0, 0, 1, 1}, {0, 1, 3, 4, 5}},
    {16, 8, {4, 2, 1, 0, 0, 0, 1, 2, 4, 1, 1, 4, 0, 0, 0, 3}, {0, 1, 7, 8, 9, 10, 11, 15}},
    {21, 3, {2, 4, 0, 4, 3, 0, 4, 4, 4, 1, 0, 3, 0, 0, 3, 0, 0, 3, 0, 4, 0}, {1, 3, 6}},
    {6, 3, {2, 0, 4, 2, 0, 0}, {0, 2, 3}},
    {6, 1, {1, 3, 4, 0, 1, 0}, {2}},
    {21, 11, {2, 0, 2, 0, 3, 0, 2, 0, 0, 4, 0, 1, 4, 2, 1, 1, 3, 0, 0, 3, 2}, {0, 2, 4, 6, 9, 12, 13, 14, 16, 19, 20}},
    {12, 11, {0, 4, 1, 0, 4, 0, 0, 2, 0, 0, 2, 0}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
    {21, 11, {3, 0, 1, 0, 0, 0, 0, 1, 0, 4, 3, 0, 0, 1, 2, 0, 0, 3, 1, 2, 4}, {0, 2, 7, 9, 10, 13, 14, 17, 18, 19, 20}},
};

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void test_topk_heap_tie_order(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof topk_cases / sizeof topk_cases[0]; c++) {
        int idx[24];
        ms_topk_heap(topk_cases[c].s, topk_cases[c].n, topk_cases[c].k, idx);
        qsort(idx, (size_t)topk_cases[c].k, sizeof(int), cmp_int);
        for (int i = 0; i < topk_cases[c].k; i++) assert_int_equal(idx[i], topk_cases[c].sel[i]);
    }
}

/* Without ties the selection is exactly the k largest. */
static void test_topk_heap_distinct(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 9);
    enum { N = 300 };
    float s[N];
    int idx[N];
    for (int trial = 0; trial < 50; trial++) {
        ms_rng_fill_normal(&r, s, N, 1.0f);
        int k = 1 + (int)(ms_rng_u64(&r) % N);
        ms_topk_heap(s, N, k, idx);
        float min_sel = INFINITY;
        char in[N] = {0};
        for (int i = 0; i < k; i++) {
            in[idx[i]] = 1;
            min_sel = fminf(min_sel, s[idx[i]]);
        }
        for (int i = 0; i < N; i++)
            if (!in[i]) assert_true(s[i] < min_sel);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_matches_double),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_softplus),
        cmocka_unit_test(test_rope_yarn_flash_constants),
        cmocka_unit_test(test_rope_inverse_roundtrip),
        cmocka_unit_test(test_swiglu_clamp),
        cmocka_unit_test(test_sinkhorn),
        cmocka_unit_test(test_topk_heap_tie_order),
        cmocka_unit_test(test_topk_heap_distinct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
