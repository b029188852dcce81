/*
 * test_sampler.c - src/sample/sampler.c: greedy is the argmax, top_k = 1 is
 * greedy, top_p and min_p keep exactly the sets worked out by hand on small
 * distributions (and in llama.cpp's order: top_p sees the probabilities
 * renormalised over what top_k kept), temperature reshapes the final set,
 * seeded draws are reproducible and their frequencies match the
 * distribution (chi-square with a fixed seed, so the test cannot flake).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sample/sampler.h"
#include "util/rng.h"

static struct ms_sampler *mk(float temp, int top_k, float top_p, float min_p, uint64_t seed,
                             int32_t n_vocab) {
    const struct ms_sampler_params p = {.temp = temp, .top_k = top_k, .top_p = top_p,
                                        .min_p = min_p, .seed = seed};
    struct ms_sampler *s = NULL;
    ms_err err;
    assert_int_equal(ms_sampler_new(&s, &p, n_vocab, &err), 0);
    return s;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void test_greedy_is_argmax(void **state) {
    (void)state;
    enum { V = 1000 };
    static float logits[V];
    ms_rng r;
    ms_rng_seed(&r, 7);
    struct ms_sampler *s = mk(0.0f, 40, 0.95f, 0.05f, 1, V);
    struct ms_sampler *neg = mk(-1.0f, 0, 1.0f, 0.0f, 2, V);
    for (int t = 0; t < 50; t++) {
        ms_rng_fill_normal(&r, logits, V, 3.0f);
        assert_int_equal(ms_sampler_sample(s, logits), argmax(logits, V));
        assert_int_equal(ms_sampler_sample(neg, logits), argmax(logits, V));
    }
    /* ties go to the lowest id */
    for (int i = 0; i < V; i++) logits[i] = (float)(i % 10);
    assert_int_equal(ms_sampler_sample(s, logits), 9);
    ms_sampler_free(s);
    ms_sampler_free(neg);
}

static void test_top_k_1_is_greedy(void **state) {
    (void)state;
    enum { V = 777 };
    static float logits[V];
    ms_rng r;
    ms_rng_seed(&r, 11);
    struct ms_sampler *s = mk(1.5f, 1, 1.0f, 0.0f, 3, V);
    for (int t = 0; t < 50; t++) {
        ms_rng_fill_normal(&r, logits, V, 0.5f); /* flat: a real draw would rarely hit the max */
        assert_int_equal(ms_sampler_sample(s, logits), argmax(logits, V));
    }
    ms_sampler_free(s);
}

/* logits = log(p) for ids in a shuffled order; returns the candidate set. */
static int32_t cands(struct ms_sampler *s, const double *p, const int32_t *ids, int n, int32_t *out,
                     double *prob) {
    float logits[16];
    for (int i = 0; i < n; i++) logits[ids[i]] = (float)log(p[i]);
    int32_t m;
    ms_sampler_candidates(s, logits, out, prob, &m);
    return m;
}

static void test_top_p_sets(void **state) {
    (void)state;
    const double p[4] = {0.5, 0.3, 0.15, 0.05};
    const int32_t ids[4] = {2, 0, 3, 1};
    int32_t out[4];
    double prob[4];
    /* cumulative 0.5, 0.8, 0.95, 1.0: the smallest prefix reaching top_p */
    const struct { float top_p; int n; } cases[] = {{0.4f, 1}, {0.45f, 1}, {0.75f, 2}, {0.85f, 3},
                                                    {0.97f, 4}, {1.0f, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct ms_sampler *s = mk(1.0f, 0, cases[c].top_p, 0.0f, 1, 4);
        const int32_t m = cands(s, p, ids, 4, out, prob);
        assert_int_equal(m, cases[c].n);
        double kept = 0.0;
        for (int i = 0; i < m; i++) {
            assert_int_equal(out[i], ids[i]);
            kept += p[i];
        }
        for (int i = 0; i < m; i++) assert_true(fabs(prob[i] - p[i] / kept) < 1e-6);
        ms_sampler_free(s);
    }
}

static void test_min_p_sets(void **state) {
    (void)state;
    const double p[5] = {0.4, 0.3, 0.2, 0.06, 0.04};
    const int32_t ids[5] = {4, 1, 0, 3, 2};
    int32_t out[5];
    double prob[5];
    /* keeps p_i >= min_p * 0.4 */
    const struct { float min_p; int n; } cases[] = {{0.05f, 5}, {0.12f, 4}, {0.2f, 3}, {0.6f, 2},
                                                    {0.9f, 1}, {0.0f, 5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct ms_sampler *s = mk(1.0f, 0, 1.0f, cases[c].min_p, 1, 5);
        const int32_t m = cands(s, p, ids, 5, out, prob);
        assert_int_equal(m, cases[c].n);
        for (int i = 0; i < m; i++) assert_int_equal(out[i], ids[i]);
        ms_sampler_free(s);
    }
}

static void test_order_and_temperature(void **state) {
    (void)state;
    const double p[4] = {0.4, 0.3, 0.2, 0.1};
    const int32_t ids[4] = {1, 3, 0, 2};
    int32_t out[4];
    double prob[4];
    /* top_k 2 leaves {0.4, 0.3} -> renormalised {4/7, 3/7}; top_p 0.55 then
     * keeps one token (on the unnormalised 0.4 it would keep two). */
    struct ms_sampler *s = mk(1.0f, 2, 0.55f, 0.0f, 1, 4);
    assert_int_equal(cands(s, p, ids, 4, out, prob), 1);
    assert_int_equal(out[0], 1);
    ms_sampler_free(s);
    /* top_k 3, top_p 0.6: {4/9, 3/9, 2/9} -> cumulative 0.44, 0.78: two */
    s = mk(1.0f, 3, 0.6f, 0.0f, 1, 4);
    assert_int_equal(cands(s, p, ids, 4, out, prob), 2);
    ms_sampler_free(s);
    /* min_p after top_p: top_p 0.95 keeps 4 tokens (0.9 < 0.95), min_p 0.4
     * (threshold 0.16) then keeps 3; temperature 0.5 squares the kept
     * probabilities: 0.16, 0.09, 0.04 over 0.29. */
    s = mk(0.5f, 0, 0.95f, 0.4f, 1, 4);
    assert_int_equal(cands(s, p, ids, 4, out, prob), 3);
    const double want[3] = {0.16 / 0.29, 0.09 / 0.29, 0.04 / 0.29};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i], ids[i]);
        assert_true(fabs(prob[i] - want[i]) < 1e-6);
    }
    ms_sampler_free(s);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    enum { V = 64, N = 500 };
    float logits[V];
    ms_rng r;
    ms_rng_seed(&r, 5);
    ms_rng_fill_normal(&r, logits, V, 1.0f);
    struct ms_sampler *a = mk(1.0f, 0, 1.0f, 0.0f, 42, V);
    struct ms_sampler *b = mk(1.0f, 0, 1.0f, 0.0f, 42, V);
    struct ms_sampler *c = mk(1.0f, 0, 1.0f, 0.0f, 43, V);
    int same_c = 0, distinct = 0, seen[V] = {0};
    for (int i = 0; i < N; i++) {
        const int32_t x = ms_sampler_sample(a, logits);
        assert_int_equal(x, ms_sampler_sample(b, logits));
        same_c += x == ms_sampler_sample(c, logits);
        distinct += !seen[x]++;
    }
    assert_true(same_c < N);     /* another seed gives another sequence */
    assert_true(distinct > 10);  /* and the draws are not stuck on one token */
    ms_sampler_free(a);
    ms_sampler_free(b);
    ms_sampler_free(c);
}

static void test_frequencies_chi_square(void **state) {
    (void)state;
    const double p[3] = {0.5, 0.3, 0.2};
    float logits[3];
    for (int i = 0; i < 3; i++) logits[i] = (float)log(p[i]) + 1.25f; /* shift-invariant */
    enum { N = 30000 };
    struct ms_sampler *s = mk(1.0f, 0, 1.0f, 0.0f, 1234, 3);
    long cnt[3] = {0};
    for (int i = 0; i < N; i++) cnt[ms_sampler_sample(s, logits)]++;
    double chi2 = 0.0;
    for (int i = 0; i < 3; i++) chi2 += (cnt[i] - N * p[i]) * (cnt[i] - N * p[i]) / (N * p[i]);
    /* 2 degrees of freedom: P(chi2 > 13.82) = 0.001 for a correct sampler */
    assert_true(chi2 < 13.82);
    ms_sampler_free(s);
    /* the same at temperature 2: p_i^(1/2) normalised */
    s = mk(2.0f, 0, 1.0f, 0.0f, 99, 3);
    double q[3], zq = 0.0;
    for (int i = 0; i < 3; i++) zq += q[i] = sqrt(p[i]);
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < N; i++) cnt[ms_sampler_sample(s, logits)]++;
    chi2 = 0.0;
    for (int i = 0; i < 3; i++) {
        const double e = N * q[i] / zq;
        chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
    }
    assert_true(chi2 < 13.82);
    ms_sampler_free(s);
}

static void test_non_finite_and_errors(void **state) {
    (void)state;
    float logits[4] = {NAN, -INFINITY, 0.5f, NAN};
    struct ms_sampler *s = mk(1.0f, 0, 1.0f, 0.0f, 1, 4);
    for (int i = 0; i < 20; i++) assert_int_equal(ms_sampler_sample(s, logits), 2);
    logits[1] = INFINITY;
    for (int i = 0; i < 20; i++) assert_int_equal(ms_sampler_sample(s, logits), 1);
    ms_sampler_free(s);
    struct ms_sampler *bad = NULL;
    ms_err err;
    const struct ms_sampler_params p = ms_sampler_defaults(1);
    assert_int_equal(ms_sampler_new(&bad, &p, 0, &err), -1);
    assert_null(bad);
    struct ms_sampler_params q = p;
    q.top_p = NAN;
    assert_int_equal(ms_sampler_new(&bad, &q, 10, &err), -1);
}

/* ms_log_sum_exp against a long-double sum on random logits with tails
 * and ruled-out (-inf) tokens; NaN, +inf and all -inf give false. */
static void test_log_sum_exp(void **state) {
    (void)state;
    enum { N = 5000 };
    static float x[N];
    ms_rng r;
    ms_rng_seed(&r, 5);
    for (int round = 0; round < 10; round++) {
        ms_rng_fill_normal(&r, x, N, round % 2 ? 10.0f : 1.0f);
        x[ms_rng_u64(&r) % N] = 60.0f;
        x[ms_rng_u64(&r) % N] = -INFINITY;
        long double mx = -INFINITY, sum = 0;
        for (int i = 0; i < N; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < N; i++) sum += expl((long double)x[i] - mx);
        double lse;
        assert_true(ms_log_sum_exp(x, N, &lse));
        assert_true(fabsl((long double)lse - (mx + logl(sum))) < 1e-9L);
    }
    x[7] = NAN;
    double lse;
    assert_false(ms_log_sum_exp(x, N, &lse));
    x[7] = INFINITY;
    assert_false(ms_log_sum_exp(x, N, &lse));
    for (int i = 0; i < N; i++) x[i] = -INFINITY;
    assert_false(ms_log_sum_exp(x, N, &lse));
}

/* How many tokens a mask must find for each sampler (text/grammar.h). */
static void test_first_cut(void **state) {
    (void)state;
    const struct ms_sampler_params greedy = {.temp = 0.0f, .top_k = 40}, k40 = {.temp = 0.8f, .top_k = 40},
                                    off = {.temp = 0.8f, .top_k = 0}, neg = {.temp = 1.0f, .top_k = -3};
    assert_int_equal(ms_sampler_first_cut(&greedy), 1);
    assert_int_equal(ms_sampler_first_cut(&k40), 40);
    assert_int_equal(ms_sampler_first_cut(&off), 0);
    assert_int_equal(ms_sampler_first_cut(&neg), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_cut),
        cmocka_unit_test(test_greedy_is_argmax),     cmocka_unit_test(test_top_k_1_is_greedy),
        cmocka_unit_test(test_top_p_sets),           cmocka_unit_test(test_min_p_sets),
        cmocka_unit_test(test_order_and_temperature), cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_frequencies_chi_square), cmocka_unit_test(test_non_finite_and_errors), cmocka_unit_test(test_log_sum_exp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
