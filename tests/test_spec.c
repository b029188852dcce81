/*
 * test_spec.c - speculative decoding (spec/spec.h): the prompt lookup on a
 * table of histories; a generation through the stepper is the plain one
 * bit for bit (every token, every logits row the sampler sees), greedy and
 * sampled, with guesses made whenever the lookup finds some, kept and cut;
 * the hooks see every accepted token in order and, where they ask for it,
 * the session holding exactly the accepted tokens (plain decoding's
 * state, so a disk checkpoint lands where it would without guesses);
 * the context's end; the cost model on a machine where guesses never pay.
 * On the tiny mkmodel model.
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
#include "sample/sampler.h"
#include "spec/spec.h"
#include "test_util.h"

static const char *g_path;

static int setup(void **state) {
    (void)state;
    return test_tiny_model_setup("test_spec", &g_path);
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    return 0;
}

/* Loads the tiny model (threads, streaming mode) and a session of n_ctx
 * positions, or fails the test. */
static void open_tiny(enum ms_stream_mode mode, int threads, int64_t n_ctx, struct ms_engine **e,
                      struct ms_session **s) {
    struct ms_engine_params p = ms_engine_params_default(g_path);
    p.n_threads = threads;
    p.stream = mode;
    p.n_ctx = n_ctx;
    ms_err err;
    if (ms_engine_load(e, &p, &err) || ms_session_new(s, *e, n_ctx, &err)) fail_msg("%s", err.msg);
}

static void test_lookup(void **state) {
    (void)state;
    int32_t out[8];
    int m;
    /* the 4-gram 1 2 3 4 occurs earlier: what followed it (9 8 ...) */
    const int32_t a[] = {1, 2, 3, 4, 9, 8, 7, 5, 2, 3, 4, 6, 1, 2, 3, 4};
    assert_int_equal(ms_spec_lookup(a, 16, 2, out, 3, &m), 3);
    assert_int_equal(m, 4);
    assert_int_equal(out[0], 9);
    assert_int_equal(out[1], 8);
    assert_int_equal(out[2], 7);
    /* without the 4-gram: 2 3 4 latest at index 9 -> 6 1 2 3 4 (up to the end) */
    const int32_t b[] = {7, 2, 3, 4, 9, 8, 7, 5, 2, 3, 4, 6, 1, 2, 3, 4};
    assert_int_equal(ms_spec_lookup(b, 16, 2, out, 8, &m), 5);
    assert_int_equal(m, 3);
    const int32_t want_b[] = {6, 1, 2, 3, 4};
    assert_memory_equal(out, want_b, sizeof want_b);
    /* a bigram only, refused when ngram_min is 3 */
    const int32_t c[] = {5, 6, 1, 9, 9, 5, 6};
    assert_int_equal(ms_spec_lookup(c, 7, 3, out, 8, &m), 0);
    assert_int_equal(m, 0);
    assert_int_equal(ms_spec_lookup(c, 7, 2, out, 8, &m), 5);
    assert_int_equal(m, 2);
    assert_int_equal(out[0], 1);
    /* a loop: the guesses run to the history's end */
    const int32_t d[] = {3, 4, 3, 4, 3, 4};
    assert_int_equal(ms_spec_lookup(d, 6, 2, out, 8, &m), 2);
    assert_int_equal(m, 4);
    assert_int_equal(out[0], 3);
    assert_int_equal(out[1], 4);
    /* nothing before, too short, max_out 0 */
    const int32_t e[] = {1, 2, 3, 4, 5};
    assert_int_equal(ms_spec_lookup(e, 5, 1, out, 8, &m), 0);
    assert_int_equal(ms_spec_lookup(e, 1, 1, out, 8, &m), 0);
    assert_int_equal(ms_spec_lookup(d, 6, 2, out, 0, &m), 0);
    /* a unigram with ngram_min 1 */
    const int32_t f[] = {8, 1, 2, 8};
    assert_int_equal(ms_spec_lookup(f, 4, 1, out, 8, &m), 3);
    assert_int_equal(m, 1);
}

static void test_cost_model(void **state) {
    (void)state;
    const double linear[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    const double flat[10] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const double half[10] = {0, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5};
    const double unmeasured[10] = {0};
    const double only_one[10] = {0, 1};
    const double ends[10] = {0, 1, 0, 0, 0, 0, 0, 0, 0, 5.5};
    /* each guess costs a whole token: never, even when always right */
    assert_int_equal(ms_spec_best_k(linear, 8, 9, 0.99), 0);
    /* free guesses: all of them, unless never kept; n_max bounds them */
    assert_int_equal(ms_spec_best_k(flat, 8, 9, 0.5), 8);
    assert_int_equal(ms_spec_best_k(flat, 3, 9, 0.5), 3);
    assert_int_equal(ms_spec_best_k(flat, 8, 5, 0.5), 4);
    assert_int_equal(ms_spec_best_k(flat, 8, 9, 0.0), 0);
    /* half a token each: (2 - 0.5^k) / (1 + k / 2) never beats 1 at a = 0.5
     * (k = 1 ties), at a = 0.9 k = 3 is best (3.439 / 2.5) */
    assert_int_equal(ms_spec_best_k(half, 8, 9, 0.5), 0);
    assert_int_equal(ms_spec_best_k(half, 8, 9, 0.9), 3);
    /* plain decode not measured yet: no guesses */
    assert_int_equal(ms_spec_best_k(unmeasured, 8, 9, 0.9), 0);
    /* only one token measured: the longest step is tried first */
    assert_int_equal(ms_spec_best_k(only_one, 8, 9, 0.5), 8);
    /* both ends measured, 9 tokens costing 5.5: the lengths between on the
     * line 1 + 0.5625 (n - 1); at a = 0.5 none pays, at a = 0.95 the
     * rates run 1.248, 1.342, 1.380, 1.392, 1.390 for k = 1 .. 5: k = 4 */
    assert_int_equal(ms_spec_best_k(ends, 8, 9, 0.5), 0);
    assert_int_equal(ms_spec_best_k(ends, 8, 9, 0.95), 4);
}

/* The hooks' view: due sees every accepted token once, in order, with the
 * plain run's ids; every `every`-th is asked for, and commit must then find the
 * session holding exactly those tokens, with plain decoding's logits. */
struct commit_check {
    const int32_t *want;  /* the plain run's tokens */
    const float *rows;    /* its logits before generated token i, [n_rows][V] */
    int64_t n_rows;
    int64_t n_prompt, V, last, due_at, calls, commits;
    int64_t every; /* ask for the state every this many tokens (0: never) */
    struct ms_session *s;
    bool ok;
};

static bool on_due(void *ctx, const int32_t *hist, int64_t n) {
    struct commit_check *c = ctx;
    if (n != c->last + 1 || memcmp(hist, c->want, (size_t)n * sizeof(int32_t))) c->ok = false;
    c->last = n;
    c->calls++;
    c->due_at = c->every && n % c->every == 0 ? n : -1;
    return c->due_at > 0;
}

static void on_commit(void *ctx, struct ms_session *s) {
    struct commit_check *c = ctx;
    const int64_t n = ms_session_n_past(s), i = n - c->n_prompt;
    if (s != c->s || n != c->due_at || memcmp(ms_session_tokens(s), c->want, (size_t)n * sizeof(int32_t)) ||
        (i < c->n_rows && memcmp(ms_session_logits(s), c->rows + i * c->V, (size_t)c->V * sizeof(float))))
        c->ok = false;
    c->commits++;
}

#define N_PROMPT 24
#define N_GEN 120

/* Plain decode, then the stepper with guesses whenever found, same seed:
 * the same tokens and the same rows under the sampler. */
static void same_as_plain(float temp, enum ms_stream_mode mode, int ngram_min, int64_t every) {
    struct ms_engine *e;
    struct ms_session *s;
    ms_err err;
    open_tiny(mode, 2, 256, &e, &s);
    const int32_t V = (int32_t)ms_engine_info(e).n_vocab;
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)((i % 6) * 37 + 5); /* a loop to copy */
    struct ms_sampler_params sp = ms_sampler_defaults(42);
    sp.temp = temp;
    int32_t plain[N_PROMPT + N_GEN];
    float *rows = malloc((size_t)N_GEN * (size_t)V * sizeof *rows);
    assert_non_null(rows);
    memcpy(plain, prompt, sizeof prompt);
    struct ms_sampler *smp;
    assert_int_equal(ms_sampler_new(&smp, &sp, V, &err), 0);
    assert_int_equal(ms_session_eval(s, prompt, N_PROMPT, NULL, &err), 0);
    for (int i = 0; i < N_GEN; i++) {
        memcpy(rows + (size_t)i * V, ms_session_logits(s), (size_t)V * sizeof(float));
        plain[N_PROMPT + i] = ms_sampler_sample(smp, ms_session_logits(s));
        assert_int_equal(ms_session_eval(s, &plain[N_PROMPT + i], 1, NULL, &err), 0);
    }
    ms_sampler_free(smp);

    ms_session_reset(s);
    assert_int_equal(ms_sampler_new(&smp, &sp, V, &err), 0);
    assert_int_equal(ms_session_eval(s, prompt, N_PROMPT, NULL, &err), 0);
    struct ms_spec_params q = ms_spec_defaults();
    q.always = true;
    q.ngram_min = ngram_min;
    struct commit_check cc = {.want = plain, .rows = rows, .n_rows = N_GEN, .n_prompt = N_PROMPT, .V = V, .last = N_PROMPT,
                              .s = s, .every = every, .ok = true};
    const struct ms_spec_hooks hooks = {.due = on_due, .commit = on_commit, .ctx = &cc};
    struct ms_spec *st;
    assert_int_equal(ms_spec_new(&st, s, V, &q, &hooks, &err), 0);
    for (int i = 0; i < N_GEN; i++) {
        const float *lg = ms_spec_logits(st);
        if (memcmp(lg, rows + (size_t)i * V, (size_t)V * sizeof(float)))
            fail_msg("the logits before generated token %d differ from plain decoding", i);
        const int32_t tok = ms_sampler_sample(smp, lg);
        if (tok != plain[N_PROMPT + i]) fail_msg("token %d: %d, plain decoding %d", i, tok, plain[N_PROMPT + i]);
        assert_int_equal(ms_spec_accept(st, tok, &err), 0);
        assert_int_equal(ms_spec_n_past(st), N_PROMPT + i + 1);
        assert_true(ms_session_n_past(s) >= ms_spec_n_past(st));
    }
    assert_int_equal(ms_spec_finish(st, &err), 0);
    assert_int_equal(ms_spec_finish(st, &err), 0); /* idempotent */
    assert_int_equal(ms_session_n_past(s), N_PROMPT + N_GEN);
    assert_memory_equal(ms_session_tokens(s), plain, sizeof plain);
    assert_true(cc.ok);
    assert_int_equal(cc.last, N_PROMPT + N_GEN);
    assert_int_equal(cc.calls, N_GEN);
    if (every) assert_int_equal(cc.commits, (N_PROMPT + N_GEN) / every - N_PROMPT / every);
    const struct ms_spec_stats stats = ms_spec_get_stats(st);
    print_message("temp %.1f ngram_min %d: %lld evals for %d tokens, %lld drafts, %lld of %lld guesses kept\n",
                  (double)temp, ngram_min, (long long)stats.evals, N_GEN, (long long)stats.drafts,
                  (long long)stats.accepted, (long long)stats.guessed);
    assert_true(stats.drafts > 0);
    assert_true(stats.accepted < stats.guessed); /* some were cut */
    assert_int_equal(stats.evals, N_GEN - stats.accepted);
    if (temp <= 0) assert_true(stats.accepted > 0); /* the greedy runs repeat themselves */
    ms_spec_free(st);
    ms_sampler_free(smp);
    free(rows);
    ms_session_free(s);
    ms_engine_free(e);
}

static void test_greedy(void **state) {
    (void)state;
    same_as_plain(0.0f, MS_STREAM_OFF, 2, 0);
}

static void test_sampled(void **state) {
    (void)state;
    same_as_plain(1.0f, MS_STREAM_OFF, 1, 3);
}

static void test_streamed(void **state) {
    (void)state;
    same_as_plain(0.0f, MS_STREAM_ON, 1, 5);
}

/* Tokens the caller forces (a written tool call), here a loop broken every
 * few tokens: guesses kept and cut over and over, and the logits at every
 * step are those of one eval of the whole sequence. */
static void test_forced(void **state) {
    (void)state;
    struct ms_engine *e;
    struct ms_session *s;
    ms_err err;
    open_tiny(MS_STREAM_OFF, 2, 256, &e, &s);
    const int32_t V = (int32_t)ms_engine_info(e).n_vocab;
    enum { N = 230 };
    int32_t seq[N];
    for (int i = 0; i < N; i++) seq[i] = (int32_t)((i % 7) * 41 + 3 + (i % 11 == 10 ? 1 : 0));
    float *ref = malloc((size_t)N * (size_t)V * sizeof *ref);
    assert_non_null(ref);
    assert_int_equal(ms_session_eval(s, seq, N, ref, &err), 0);
    ms_session_reset(s);
    assert_int_equal(ms_session_eval(s, seq, 10, NULL, &err), 0);
    struct ms_spec_params q = ms_spec_defaults();
    q.always = true;
    /* the state asked for every 7 tokens, often inside a draft */
    struct commit_check cc = {.want = seq, .rows = ref + (size_t)9 * V, .n_rows = N - 9, .n_prompt = 10, .V = V, .last = 10,
                              .s = s, .every = 7, .ok = true};
    const struct ms_spec_hooks hooks = {.due = on_due, .commit = on_commit, .ctx = &cc};
    struct ms_spec *st;
    assert_int_equal(ms_spec_new(&st, s, V, &q, &hooks, &err), 0);
    for (int i = 10; i < N; i++) {
        if (memcmp(ms_spec_logits(st), ref + (size_t)(i - 1) * V, (size_t)V * sizeof(float)))
            fail_msg("the logits after position %d differ from one eval's", i - 1);
        assert_int_equal(ms_spec_accept(st, seq[i], &err), 0);
    }
    if (memcmp(ms_spec_logits(st), ref + (size_t)(N - 1) * V, (size_t)V * sizeof(float)))
        fail_msg("the last logits differ from one eval's");
    const struct ms_spec_stats stats = ms_spec_get_stats(st);
    print_message("forced: %lld evals for %d tokens, %lld of %lld guesses kept\n", (long long)stats.evals,
                  N - 10, (long long)stats.accepted, (long long)stats.guessed);
    assert_true(cc.ok);
    assert_int_equal(cc.commits, N / 7 - 10 / 7);
    assert_true(stats.accepted > (N - 10) / 2);
    assert_true(stats.accepted < stats.guessed);
    assert_int_equal(stats.evals + stats.accepted, N - 10);
    ms_spec_free(st);
    assert_int_equal(ms_session_n_past(s), N);
    free(ref);
    ms_session_free(s);
    ms_engine_free(e);
}

/* One slow measurement must not turn guessing off for good: a step of 8
 * tokens seeded at 8.2 one-token steps makes every guess look too dear,
 * and after SKIPS_BEFORE_RETRY (256) lookups whose guesses a copy would
 * have kept, the longest step is measured afresh. (Without the retry no
 * step of guesses is ever made again.) */
static void test_slow_sample_retried(void **state) {
    (void)state;
    struct ms_engine *e;
    struct ms_session *s;
    ms_err err;
    open_tiny(MS_STREAM_OFF, 2, 720, &e, &s);
    const int32_t V = (int32_t)ms_engine_info(e).n_vocab;
    enum { N = 700 };
    int32_t seq[N];
    for (int i = 0; i < N; i++) seq[i] = (int32_t)((i % 9) * 29 + 7);
    assert_int_equal(ms_session_eval(s, seq, 20, NULL, &err), 0);
    struct ms_spec *st;
    assert_int_equal(ms_spec_new(&st, s, V, NULL, NULL, &err), 0);
    const double slow[9] = {0, 0.001, 0, 0, 0, 0, 0, 0, 0.0082};
    assert_int_equal(ms_spec_seed_costs(st, slow, 8), 0);
    /* a lookup finds guesses at every token from the first: 256 of them
     * by token 276 */
    for (int i = 20; i < 270; i++) assert_int_equal(ms_spec_accept(st, seq[i], &err), 0);
    const int64_t locked = ms_spec_get_stats(st).drafts;
    for (int i = 270; i < N; i++) assert_int_equal(ms_spec_accept(st, seq[i], &err), 0);
    const struct ms_spec_stats stats = ms_spec_get_stats(st);
    print_message("slow sample: %lld drafts in the first 250 tokens, %lld in all, %lld of %lld guesses kept\n",
                  (long long)locked, (long long)stats.drafts, (long long)stats.accepted, (long long)stats.guessed);
    /* locked whatever this machine's timing (8.2 > 1 + 7 * 1.03): no
     * guess can pay; then the retry's step of 8 is made, its 7 guesses
     * kept (whether later steps guess depends on the timing it measures:
     * fewer on a slow build such as ASan's) */
    assert_int_equal(locked, 0);
    assert_true(stats.drafts > locked);
    assert_true(stats.accepted >= 7);
    assert_int_equal(ms_spec_finish(st, &err), 0);
    assert_memory_equal(ms_session_tokens(s), seq, sizeof seq);
    const double bad[2] = {0, 0};
    assert_int_equal(ms_spec_seed_costs(st, bad, 1), -1);
    ms_spec_free(st);
    ms_session_free(s);
    ms_engine_free(e);
}

/* The context's last positions: guesses never run past it, and a token
 * past it is refused with nothing changed. */
static void test_context_end(void **state) {
    (void)state;
    struct ms_engine *e;
    struct ms_session *s;
    ms_err err;
    open_tiny(MS_STREAM_OFF, 1, 40, &e, &s);
    const int32_t V = (int32_t)ms_engine_info(e).n_vocab;
    int32_t loop[36];
    for (int i = 0; i < 36; i++) loop[i] = (int32_t)(i % 3 + 10);
    assert_int_equal(ms_session_eval(s, loop, 33, NULL, &err), 0);
    struct ms_spec_params q = ms_spec_defaults();
    q.always = true;
    struct ms_spec *st;
    assert_int_equal(ms_spec_new(&st, s, V, &q, NULL, &err), 0);
    /* the loop goes on: each accept may guess, but never past 40 */
    for (int i = 33; i < 40; i++) {
        assert_int_equal(ms_spec_accept(st, loop[i % 36], &err), 0);
        assert_true(ms_session_n_past(s) <= 40);
    }
    assert_int_equal(ms_spec_n_past(st), 40);
    assert_int_not_equal(ms_spec_accept(st, 10, &err), 0);
    assert_non_null(strstr(err.msg, "context full"));
    assert_int_equal(ms_spec_n_past(st), 40);
    assert_int_equal(ms_spec_finish(st, &err), 0);
    assert_int_equal(ms_session_n_past(s), 40);
    assert_true(ms_spec_get_stats(st).accepted > 0);
    ms_spec_free(st);
    /* a stepper with draft_max 0 is plain decode */
    ms_session_reset(s);
    assert_int_equal(ms_session_eval(s, loop, 30, NULL, &err), 0);
    q.draft_max = 0;
    assert_int_equal(ms_spec_new(&st, s, V, &q, NULL, &err), 0);
    for (int i = 30; i < 36; i++) assert_int_equal(ms_spec_accept(st, loop[i], &err), 0);
    assert_int_equal(ms_spec_get_stats(st).drafts, 0);
    assert_int_equal(ms_spec_get_stats(st).evals, 6);
    ms_spec_free(st);
    /* bad parameters */
    q.draft_max = -1;
    assert_int_not_equal(ms_spec_new(&st, s, V, &q, NULL, &err), 0);
    q.draft_max = 3;
    q.ngram_min = 0;
    assert_int_not_equal(ms_spec_new(&st, s, V, &q, NULL, &err), 0);
    ms_session_free(s);
    ms_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_cost_model),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_sampled),
        cmocka_unit_test(test_streamed),
        cmocka_unit_test(test_forced),
        cmocka_unit_test(test_slow_sample_retried),
        cmocka_unit_test(test_context_end),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
