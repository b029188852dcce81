/*
 * test_draft.c - ms_session_eval_draft / ms_session_draft_keep: a draft
 * whose last tokens are taken back leaves the session bit for bit where an
 * eval of the kept tokens alone leaves it, at every point of the state (the
 * window ring wrapping, ratio-4 and ratio-128 compressed rows emitted by
 * dropped positions, the indexer's keys), resident and streamed; plain
 * evals between drafts; snapshots before a draft stay valid and those
 * taken inside a cut one turn stale; bad calls change nothing. On the tiny
 * mkmodel model (window 32, compressor ratios 4 and 128).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mkmodel/mkmodel.h"
#include "moestream.h"
#include "test_util.h"
#include "util/rng.h"

#define N_CTX 320
#define N_REF 300 /* past the ratio-128 layers' second compressed row (position 255) */
static const char *g_path;

static int setup(void **state) {
    (void)state;
    return test_tiny_model_setup("test_draft", &g_path);
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    return 0;
}

struct fixture {
    struct ms_engine *e;
    struct ms_session *s;
    int64_t V;
    int32_t tok[N_REF];
    float *ref; /* [N_REF][V]: one eval of tok, the reference */
};

static void fixture_open(struct fixture *f, enum ms_stream_mode mode) {
    struct ms_engine_params p = ms_engine_params_default(g_path);
    p.n_threads = 2;
    p.stream = mode;
    p.n_ctx = N_CTX;
    ms_err err;
    assert_int_equal(ms_engine_load(&f->e, &p, &err), 0);
    assert_int_equal(ms_session_new(&f->s, f->e, N_CTX, &err), 0);
    f->V = ms_engine_info(f->e).n_vocab;
    ms_rng r;
    ms_rng_seed(&r, 7);
    for (int i = 0; i < N_REF; i++) f->tok[i] = (int32_t)(ms_rng_u64(&r) % (uint64_t)f->V);
    f->ref = malloc((size_t)(N_REF * f->V) * sizeof *f->ref);
    assert_non_null(f->ref);
    assert_int_equal(ms_session_eval(f->s, f->tok, N_REF, f->ref, &err), 0);
    ms_session_reset(f->s);
}

static void fixture_close(struct fixture *f) {
    free(f->ref);
    ms_session_free(f->s);
    ms_engine_free(f->e);
}

/* Walks the reference tokens with drafts of random length whose guesses
 * go wrong at a random point (a wrong token, then random ones), now and
 * then a plain eval instead; every kept position's logits must be the
 * reference's, and so must the session's logits after each keep. */
static void walk(enum ms_stream_mode mode, uint64_t seed) {
    struct fixture f;
    fixture_open(&f, mode);
    const int64_t dmax = ms_session_draft_max(f.s);
    assert_int_equal(dmax, 8); /* the ratio-4 frontier's slots */
    float *lg = malloc((size_t)(dmax * f.V) * sizeof *lg);
    assert_non_null(lg);
    ms_rng r;
    ms_rng_seed(&r, seed);
    ms_err err;
    int64_t p = 0, cuts = 0;
    while (p < N_REF) {
        const int64_t left = N_REF - p;
        if (ms_rng_u64(&r) % 5 == 0) { /* a plain eval of 1-3 tokens */
            int64_t n = 1 + (int64_t)(ms_rng_u64(&r) % 3);
            if (n > left) n = left;
            assert_int_equal(ms_session_eval(f.s, f.tok + p, n, NULL, &err), 0);
            p += n;
        } else {
            int64_t n = 1 + (int64_t)(ms_rng_u64(&r) % (uint64_t)dmax);
            if (n > left) n = left;
            const int64_t keep = 1 + (int64_t)(ms_rng_u64(&r) % (uint64_t)n);
            int32_t d[16];
            for (int64_t i = 0; i < n; i++) {
                d[i] = i < keep ? f.tok[p + i] : (int32_t)(ms_rng_u64(&r) % (uint64_t)f.V);
                if (i == keep && d[i] == f.tok[p + i]) d[i] = (d[i] + 1) % (int32_t)f.V;
            }
            assert_int_equal(ms_session_eval_draft(f.s, d, n, lg, &err), 0);
            assert_int_equal(ms_session_n_past(f.s), p + n);
            for (int64_t i = 0; i < keep; i++) {
                char what[64];
                snprintf(what, sizeof what, "draft row %lld at position %lld", (long long)i, (long long)(p + i));
                if (memcmp(lg + i * f.V, f.ref + (p + i) * f.V, (size_t)f.V * sizeof(float)))
                    fail_msg("%s differs from the reference", what);
            }
            assert_int_equal(ms_session_draft_keep(f.s, keep, &err), 0);
            cuts += keep < n;
            p += keep;
            assert_int_equal(ms_session_n_past(f.s), p);
            assert_memory_equal(ms_session_tokens(f.s), f.tok, (size_t)p * sizeof(int32_t));
        }
        if (memcmp(ms_session_logits(f.s), f.ref + (p - 1) * f.V, (size_t)f.V * sizeof(float)))
            fail_msg("the session's logits after position %lld differ from the reference", (long long)(p - 1));
    }
    assert_true(cuts > 20);
    free(lg);
    fixture_close(&f);
}

static void test_walk_resident(void **state) {
    (void)state;
    walk(MS_STREAM_OFF, 1);
    walk(MS_STREAM_OFF, 2);
}

static void test_walk_streamed(void **state) {
    (void)state;
    walk(MS_STREAM_ON, 3);
}

/* Snapshots: one before a draft survives the cut and restores exactly;
 * one taken inside a draft kept whole is as good as any; one taken inside
 * a cut draft is stale, and the session changes lineage (every snapshot
 * of it turns stale, as after a restore). */
static void test_snapshots(void **state) {
    (void)state;
    struct fixture f;
    fixture_open(&f, MS_STREAM_OFF);
    ms_err err;
    float *lg = malloc((size_t)(8 * f.V) * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(ms_session_eval(f.s, f.tok, 40, NULL, &err), 0);
    struct ms_snapshot *before = ms_session_snapshot(f.s);
    assert_non_null(before);
    int32_t d[8];
    memcpy(d, f.tok + 40, sizeof d);
    d[3] = (d[3] + 1) % (int32_t)f.V;
    assert_int_equal(ms_session_eval_draft(f.s, d, 8, lg, &err), 0);
    assert_int_equal(ms_session_draft_keep(f.s, 3, &err), 0);
    assert_true(ms_snapshot_valid(f.s, before));
    assert_int_equal(ms_session_eval(f.s, f.tok + 43, 10, NULL, &err), 0);
    assert_int_equal(ms_session_restore(f.s, before, &err), 0);
    assert_int_equal(ms_session_n_past(f.s), 40);
    assert_memory_equal(ms_session_logits(f.s), f.ref + 39 * f.V, (size_t)f.V * sizeof(float));
    assert_int_equal(ms_session_eval(f.s, f.tok + 40, 5, NULL, &err), 0);
    assert_memory_equal(ms_session_logits(f.s), f.ref + 44 * f.V, (size_t)f.V * sizeof(float));
    /* kept whole: the snapshot inside is as good as any */
    assert_int_equal(ms_session_eval_draft(f.s, f.tok + 45, 4, lg, &err), 0);
    struct ms_snapshot *whole = ms_session_snapshot(f.s);
    assert_non_null(whole);
    assert_int_equal(ms_session_draft_keep(f.s, 4, &err), 0);
    assert_int_equal(ms_session_eval(f.s, f.tok + 49, 3, NULL, &err), 0);
    assert_int_equal(ms_session_restore(f.s, whole, &err), 0);
    assert_memory_equal(ms_session_logits(f.s), f.ref + 48 * f.V, (size_t)f.V * sizeof(float));
    /* inside a cut draft: stale, though the session grows past its length */
    struct ms_snapshot *at49 = ms_session_snapshot(f.s);
    assert_non_null(at49);
    memcpy(d, f.tok + 49, sizeof d);
    d[2] = (d[2] + 1) % (int32_t)f.V;
    assert_int_equal(ms_session_eval_draft(f.s, d, 8, lg, &err), 0);
    struct ms_snapshot *inside = ms_session_snapshot(f.s);
    assert_non_null(inside);
    assert_int_equal(ms_session_draft_keep(f.s, 2, &err), 0);
    assert_int_equal(ms_session_eval(f.s, f.tok + 51, 10, NULL, &err), 0);
    assert_false(ms_snapshot_valid(f.s, inside));
    assert_int_not_equal(ms_session_restore(f.s, inside, &err), 0);
    assert_false(ms_snapshot_valid(f.s, at49));
    assert_int_equal(ms_session_n_past(f.s), 61);
    assert_memory_equal(ms_session_logits(f.s), f.ref + 60 * f.V, (size_t)f.V * sizeof(float));
    ms_snapshot_free(before);
    ms_snapshot_free(whole);
    ms_snapshot_free(at49);
    ms_snapshot_free(inside);
    free(lg);
    fixture_close(&f);
}

/* Refused calls change nothing; any other eval closes an open draft. */
static void test_errors(void **state) {
    (void)state;
    struct fixture f;
    fixture_open(&f, MS_STREAM_OFF);
    ms_err err;
    float *lg = malloc((size_t)(9 * f.V) * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(ms_session_eval(f.s, f.tok, 10, NULL, &err), 0);
    assert_int_not_equal(ms_session_draft_keep(f.s, 1, &err), 0); /* none open */
    assert_int_not_equal(ms_session_eval_draft(f.s, f.tok + 10, 0, lg, &err), 0);
    assert_int_not_equal(ms_session_eval_draft(f.s, f.tok + 10, 9, lg, &err), 0);
    assert_int_not_equal(ms_session_eval_draft(f.s, f.tok + 10, 2, NULL, &err), 0);
    const int32_t bad[2] = {f.tok[10], (int32_t)f.V};
    assert_int_not_equal(ms_session_eval_draft(f.s, bad, 2, lg, &err), 0);
    assert_int_equal(ms_session_n_past(f.s), 10);
    assert_int_not_equal(ms_session_draft_keep(f.s, 1, &err), 0); /* the refused one is not open */
    assert_memory_equal(ms_session_logits(f.s), f.ref + 9 * f.V, (size_t)f.V * sizeof(float));
    assert_int_equal(ms_session_eval_draft(f.s, f.tok + 10, 4, lg, &err), 0);
    assert_int_not_equal(ms_session_draft_keep(f.s, 0, &err), 0);
    assert_int_not_equal(ms_session_draft_keep(f.s, 5, &err), 0);
    assert_int_equal(ms_session_n_past(f.s), 14); /* still open, unchanged */
    assert_int_equal(ms_session_eval(f.s, f.tok + 14, 1, NULL, &err), 0); /* keeps all four */
    assert_int_not_equal(ms_session_draft_keep(f.s, 2, &err), 0);
    assert_int_equal(ms_session_n_past(f.s), 15);
    assert_memory_equal(ms_session_logits(f.s), f.ref + 14 * f.V, (size_t)f.V * sizeof(float));
    /* the context's end: a draft past it is refused, unchanged */
    ms_session_reset(f.s);
    assert_int_equal(ms_session_eval(f.s, f.tok, N_REF, NULL, &err), 0);
    const int32_t *tail = f.tok;
    assert_int_equal(ms_session_eval(f.s, tail, N_CTX - N_REF - 3, NULL, &err), 0);
    assert_int_not_equal(ms_session_eval_draft(f.s, tail, 4, lg, &err), 0);
    assert_int_equal(ms_session_n_past(f.s), N_CTX - 3);
    assert_int_equal(ms_session_eval_draft(f.s, tail, 3, lg, &err), 0);
    assert_int_equal(ms_session_draft_keep(f.s, 1, &err), 0);
    assert_int_equal(ms_session_n_past(f.s), N_CTX - 2);
    free(lg);
    fixture_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_resident),
        cmocka_unit_test(test_walk_streamed),
        cmocka_unit_test(test_snapshots),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
