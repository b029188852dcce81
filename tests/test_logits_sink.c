/*
 * test_logits_sink.c - ms_session_set_logits_sink: the logits it hands
 * over are an eval's logits array bit for bit, for every position from the
 * one asked, in order, over several passes (a prefill chunk shorter than
 * the eval), resident and streamed; a consumer returning false interrupts
 * the eval and leaves the session empty; removing it restores plain evals.
 * On a tiny mkmodel model with random weights.
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

#define N_TOK 70
static const char *g_path;

static int setup(void **state) {
    (void)state;
    return test_tiny_model_setup("test_logits_sink", &g_path);
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    return 0;
}

struct sink {
    float *got;     /* [N_TOK][V], rows written as they come */
    int64_t V, next; /* the position expected next */
    int64_t calls, stop_after;
    bool in_order;
};

static bool take(void *ctx, int64_t pos, int64_t n, const float *logits) {
    struct sink *k = ctx;
    if (pos != k->next || n < 1 || n > 64) k->in_order = false;
    memcpy(k->got + pos * k->V, logits, (size_t)(n * k->V) * sizeof(float));
    k->next = pos + n;
    return ++k->calls != k->stop_after;
}

static void run(enum ms_stream_mode mode, int64_t prefill_chunk) {
    struct ms_engine_params p = ms_engine_params_default(g_path);
    p.n_threads = 2;
    p.stream = mode;
    p.prefill_chunk = prefill_chunk;
    p.n_ctx = 256;
    struct ms_engine *e;
    struct ms_session *s;
    ms_err err;
    assert_int_equal(ms_engine_load(&e, &p, &err), 0);
    assert_int_equal(ms_session_new(&s, e, 256, &err), 0);
    const int64_t V = ms_engine_info(e).n_vocab;
    int32_t tok[N_TOK];
    for (int i = 0; i < N_TOK; i++) tok[i] = (int32_t)((i * 7919 + 13) % V);
    float *want = malloc((size_t)(N_TOK * V) * sizeof *want), *got = calloc((size_t)(N_TOK * V), sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    assert_int_equal(ms_session_eval(s, tok, N_TOK, want, &err), 0);
    /* from position 9: two evals (the second from the first's end), the
     * sink's rows equal the logits array's bit for bit */
    for (int64_t from = 0; from <= 9; from += 9) {
        ms_session_reset(s);
        struct sink k = {.got = got, .V = V, .next = from, .in_order = true};
        assert_int_equal(ms_session_set_logits_sink(s, take, &k, from, &err), 0);
        assert_int_equal(ms_session_eval(s, tok, 40, NULL, &err), 0);
        assert_int_equal(ms_session_eval(s, tok + 40, N_TOK - 40, NULL, &err), 0);
        assert_true(k.in_order);
        assert_int_equal(k.next, N_TOK);
        assert_memory_equal(got + from * V, want + from * V, (size_t)((N_TOK - from) * V) * sizeof(float));
        /* the session's own last logits are unchanged by the sink */
        assert_memory_equal(ms_session_logits(s), want + (N_TOK - 1) * V, (size_t)V * sizeof(float));
    }
    /* a consumer that says stop interrupts the eval; the session is empty */
    ms_session_reset(s);
    struct sink k = {.got = got, .V = V, .next = 0, .in_order = true, .stop_after = 1};
    assert_int_equal(ms_session_set_logits_sink(s, take, &k, 0, &err), 0);
    assert_int_not_equal(ms_session_eval(s, tok, N_TOK, NULL, &err), 0);
    assert_non_null(strstr(err.msg, "interrupted"));
    assert_int_equal(ms_session_n_past(s), 0);
    /* removed: evals as before, nothing handed over */
    assert_int_equal(ms_session_set_logits_sink(s, NULL, NULL, 0, &err), 0);
    k.calls = 0;
    assert_int_equal(ms_session_eval(s, tok, N_TOK, NULL, &err), 0);
    assert_int_equal(k.calls, 0);
    assert_memory_equal(ms_session_logits(s), want + (N_TOK - 1) * V, (size_t)V * sizeof(float));
    free(want);
    free(got);
    ms_session_free(s);
    ms_engine_free(e);
}

static void test_resident_one_pass(void **state) {
    (void)state;
    run(MS_STREAM_OFF, 0);
}

static void test_resident_passes_of_16(void **state) {
    (void)state;
    run(MS_STREAM_OFF, 16);
}

static void test_streamed_passes_of_24(void **state) {
    (void)state;
    run(MS_STREAM_ON, 24);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resident_one_pass),
        cmocka_unit_test(test_resident_passes_of_16),
        cmocka_unit_test(test_streamed_passes_of_24),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
