/*
 * test_logprobs.c - src/server/logprobs.c on random logits with tails and
 * on the edges: each entry's logprob against a long-double log softmax, the
 * alternatives as the n largest (ties to the lower id), -inf read as
 * -9999, no entry when a logit is NaN or +inf or none is finite, the completions
 * shape, and its text offsets over invalid and split characters. The vocabulary is a tiny mkmodel model's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <math.h>

#include "mkmodel/mkmodel.h"
#include "server/internal.h"
#include "util/rng.h"
#include "test_util.h"

static struct ms_engine *g_e;
static const struct ms_tokenizer *g_tok;
static int32_t g_nv;

static int setup(void **state) {
    (void)state;
    if (test_tmp_setup("test_logprobs")) return -1;
    const char *path = tmp_path("m.gguf");
    struct mkmodel_opts o;
    ms_err err;
    struct ms_engine_params p;
    if (mkmodel_preset(&o, "tiny", &err) || mkmodel_write(&o, path, &err)) goto fail;
    p = ms_engine_params_default(path);
    p.n_threads = 1;
    p.stream = MS_STREAM_OFF;
    if (ms_engine_load(&g_e, &p, &err)) goto fail;
    unlink(path);
    g_tok = ms_engine_tokenizer(g_e);
    g_nv = (int32_t)ms_tokenizer_n_vocab(g_tok);
    return 0;
fail:
    unlink(path);
    return -1;
}

static int teardown(void **state) {
    (void)state;
    ms_engine_free(g_e);
    return 0;
}

/* log softmax of x[v], in long double */
static long double ref_lp(const float *x, int32_t v) {
    long double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < g_nv; i++)
        if (x[i] > mx) mx = x[i];
    for (int32_t i = 0; i < g_nv; i++) sum += expl((long double)x[i] - mx);
    return (long double)x[v] - mx - logl(sum);
}

static double num(const json_t *o, const char *k) { return json_real_value(json_object_get(o, k)); }

/* The entry's alternatives are the n largest logits in order, ties to the
 * lower id, each with its reference logprob; the token's own is right. */
static void check_entry(const float *x, int32_t tok, int n_top) {
    json_t *e = lp_entry(g_tok, x, tok, n_top);
    assert_non_null(e);
    const double want = isinf(x[tok]) ? -9999.0 : (double)ref_lp(x, tok);
    assert_true(fabs(num(e, "logprob") - want) < 1e-9);
    const json_t *alts = json_object_get(e, "top_logprobs");
    const int n_want = n_top > LP_TOP_MAX ? LP_TOP_MAX : n_top;
    assert_int_equal(json_array_size(alts), n_want < g_nv ? n_want : g_nv);
    /* the reference ranking: by value descending, then id ascending */
    int32_t *ids = malloc((size_t)g_nv * sizeof *ids);
    assert_non_null(ids);
    int32_t n = 0;
    for (int32_t i = 0; i < g_nv; i++)
        if (!isnan(x[i])) ids[n++] = i;
    for (int k = 0; k < (int)json_array_size(alts); k++) {
        int32_t best = k;
        for (int32_t i = k + 1; i < n; i++)
            if (x[ids[i]] > x[ids[best]] || (x[ids[i]] == x[ids[best]] && ids[i] < ids[best])) best = i;
        const int32_t t = ids[best];
        ids[best] = ids[k];
        ids[k] = t;
        const json_t *a = json_array_get(alts, (size_t)k);
        const char *piece;
        size_t plen;
        ms_tokenizer_piece(g_tok, t, true, &piece, &plen);
        const json_t *bytes = json_object_get(a, "bytes");
        assert_int_equal(json_array_size(bytes), plen);
        for (size_t b = 0; b < plen; b++)
            assert_int_equal(json_integer_value(json_array_get(bytes, b)), (unsigned char)piece[b]);
        const double wa = isinf(x[t]) ? -9999.0 : (double)ref_lp(x, t);
        assert_true(fabs(num(a, "logprob") - wa) < 1e-9);
    }
    free(ids);
    json_decref(e);
}

static void test_random_with_tails(void **state) {
    (void)state;
    float *x = malloc((size_t)g_nv * sizeof *x);
    assert_non_null(x);
    ms_rng r;
    ms_rng_seed(&r, 11);
    for (int round = 0; round < 20; round++) {
        ms_rng_fill_normal(&r, x, g_nv, round % 2 ? 8.0f : 1.0f);
        /* tails: a few far above and below, and some exact ties */
        x[(int32_t)(ms_rng_u64(&r) % (uint64_t)g_nv)] = 40.0f;
        x[(int32_t)(ms_rng_u64(&r) % (uint64_t)g_nv)] = -60.0f;
        const int32_t a = (int32_t)(ms_rng_u64(&r) % (uint64_t)g_nv), b = (a + 7) % g_nv;
        x[a] = x[b] = 20.0f;
        for (int n_top = 0; n_top <= 25; n_top += 5)
            check_entry(x, (int32_t)(ms_rng_u64(&r) % (uint64_t)g_nv), n_top);
    }
    free(x);
}

static void test_edges(void **state) {
    (void)state;
    float *x = malloc((size_t)g_nv * sizeof *x);
    assert_non_null(x);
    for (int32_t i = 0; i < g_nv; i++) x[i] = (float)(i % 13) * 0.25f;
    x[5] = -INFINITY;   /* ruled out: -9999 */
    x[g_nv - 1] = 9.0f; /* the most likely */
    check_entry(x, 5, 4);
    check_entry(x, g_nv - 1, 20);
    /* equal logits: a uniform distribution, alternatives in id order */
    for (int32_t i = 0; i < g_nv; i++) x[i] = 1.5f;
    json_t *e = lp_entry(g_tok, x, 7, 3);
    assert_true(fabs(num(e, "logprob") + log((double)g_nv)) < 1e-9);
    const char *p0;
    size_t n0;
    ms_tokenizer_piece(g_tok, 0, true, &p0, &n0);
    assert_int_equal(json_array_size(json_object_get(json_array_get(json_object_get(e, "top_logprobs"), 0), "bytes")),
                     n0);
    json_decref(e);
    /* one NaN or +inf logit anywhere: the weights hold them, no entry */
    x[3] = NAN;
    assert_null(lp_entry(g_tok, x, 0, 3));
    x[3] = INFINITY;
    assert_null(lp_entry(g_tok, x, 0, 0));
    /* every token ruled out: no distribution */
    for (int32_t i = 0; i < g_nv; i++) x[i] = -INFINITY;
    assert_null(lp_entry(g_tok, x, 0, 3));
    free(x);
}

static void test_completions_shape(void **state) {
    (void)state;
    float *x = malloc((size_t)g_nv * sizeof *x);
    assert_non_null(x);
    for (int32_t i = 0; i < g_nv; i++) x[i] = (float)((i * 37) % 101) * 0.1f;
    json_t *entries = json_array();
    json_array_append_new(entries, lp_entry_first(g_tok, 10));
    json_array_append_new(entries, lp_entry(g_tok, x, 11, 2));
    json_array_append_new(entries, lp_entry(g_tok, x, 12, 0));
    struct lp_text t = {0};
    json_t *c = lp_completions(entries, &t);
    assert_non_null(c);
    const json_t *tl = json_object_get(c, "token_logprobs"), *tops = json_object_get(c, "top_logprobs");
    assert_int_equal(json_array_size(tl), 3);
    assert_true(json_is_null(json_array_get(tl, 0)));
    assert_true(json_is_null(json_array_get(tops, 0)));
    assert_int_equal(json_object_size(json_array_get(tops, 1)), 2);
    assert_int_equal(json_object_size(json_array_get(tops, 2)), 0);
    assert_int_equal(json_array_size(json_object_get(c, "text_offset")), 3);
    json_decref(c);
    json_decref(entries);
    ms_buf_free(&t.raw);
    free(x);
}

/* Entries with the given bytes (token text and logprob do not matter). */
static json_t *byte_entries(const char *const *pieces, const size_t *lens, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *b = json_array();
        for (size_t k = 0; k < lens[i]; k++) json_array_append_new(b, json_integer((unsigned char)pieces[i][k]));
        json_array_append_new(a, json_pack("{s:s, s:f, s:o, s:[]}", "token", "?", "logprob", -1.0, "bytes", b,
                                           "top_logprobs"));
    }
    return a;
}

/* text_offset counts bytes of the reply's text, where invalid bytes and
 * NUL are U+FFFD (3 bytes) and a character split between tokens is one:
 * "ab" | E4 BD | A0 (together U+4F60) | FF | "c" | NUL reads "ab" U+4F60
 * U+FFFD "c" U+FFFD, the second token of the split character at its start;
 * split over two calls (a stream's chunks) the offsets run on. */
static void test_text_offsets(void **state) {
    (void)state;
    static const char *const pieces[] = {"ab", "\xe4\xbd", "\xa0", "\xff", "c", "\0"};
    static const size_t lens[] = {2, 2, 1, 1, 1, 1};
    static const json_int_t want[] = {0, 2, 2, 5, 8, 9};
    for (size_t split = 0; split <= 6; split += 2) {
        struct lp_text t = {0};
        json_t *a = byte_entries(pieces, lens, split), *b = byte_entries(pieces + split, lens + split, 6 - split);
        json_t *ca = lp_completions(a, &t), *cb = lp_completions(b, &t);
        assert_non_null(ca);
        assert_non_null(cb);
        for (size_t i = 0; i < 6; i++) {
            const json_t *offs = json_object_get(i < split ? ca : cb, "text_offset");
            assert_int_equal(json_integer_value(json_array_get(offs, i < split ? i : i - split)), want[i]);
        }
        json_decref(ca);
        json_decref(cb);
        json_decref(a);
        json_decref(b);
        ms_buf_free(&t.raw);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_with_tails),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_completions_shape),
        cmocka_unit_test(test_text_offsets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
