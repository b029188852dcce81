/*
 * test_stream_source.c - streamed experts give the same logits as resident
 * ones, bit for bit: with the smallest cache that holds one token's experts
 * (every step evicts, the case where slot reuse bugs show), on a file whose
 * last layers' experts are larger (mixed types), across a switch between
 * prompts under a tight budget (checked at every install), and after an
 * injected read error (an error for that step, then normal service).
 * Decode prefetch: with it (the default) logits stay identical, the budget
 * holds at every install, and a failed prefetch read is only a miss.
 * Read-ahead of a prompt through a small cache: the same, group by group;
 * ordering a ubatch's experts cache-first reads less, with the same logits.
 * Models come from `$MS_BIN mkmodel`.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "model/model.h"
#include "test_model_util.h"
#include "model/session.h"
#include "stream/expert_source.h"
#include "util/rng.h"

static char g_tiny[600], g_mixed[600], g_dir[512];

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("MS_TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s", tmp ? tmp : ".");
    mkdir(g_dir, 0755);
    snprintf(g_tiny, sizeof g_tiny, "%s/stream_tiny_q4k.gguf", g_dir);
    snprintf(g_mixed, sizeof g_mixed, "%s/stream_mixed.gguf", g_dir);
    if (test_mkmodel(g_tiny, "--preset tiny --experts-type q4_K")) return -1;
    return test_mkmodel(g_mixed, "--preset tiny --experts-type q2_K --experts-type-last-layers q4_K:2");
}

/* Logits [n][n_vocab] of tokens evaluated in steps of n_ubatch, through
 * whatever expert source m has now. */
static float *eval(const struct dsv4_model *m, const int32_t *tok, int64_t n, int64_t n_ubatch) {
    struct dsv4_session *s = NULL;
    struct dsv4_session_params p = {.n_ctx = 128, .n_batch = n_ubatch};
    ms_err e = {{0}};
    if (dsv4_session_new(&s, m, &p, &e)) fail_msg("%s", e.msg);
    float *lg = malloc((size_t)n * m->hp.n_vocab * sizeof *lg);
    if (dsv4_session_eval(s, tok, n, lg, &e)) fail_msg("%s", e.msg);
    dsv4_session_free(s);
    return lg;
}

/* Smallest cache: every decode step replaces most of it. */
static void check_min_cache(const char *path, bool mixed) {
    struct dsv4_model *m = test_load_model(path);
    const struct dsv4_expert_source resident = m->experts;
    enum { N = 20 };
    int32_t tok[N];
    random_tokens(tok, N, 3, (uint32_t)m->hp.n_vocab - 3, 11);
    float *want = eval(m, tok, N, 1);

    const uint64_t budget = ms_stream_min_budget(m);
    if (mixed) /* the last layers' slots are bigger */
        assert_true(ms_stream_slot_bytes(m, m->n_layer - 1) > ms_stream_slot_bytes(m, 0));
    assert_int_equal(budget, m->hp.n_expert_used * ms_stream_slot_bytes(m, m->n_layer - 1));
    struct ms_stream_source *src = stream_on(m, budget);
    float *got = eval(m, tok, N, 1);
    assert_same(want, got, (size_t)N * m->hp.n_vocab, path);

    const struct ms_cache_stats *st = ms_expert_cache_stats(ms_stream_source_cache(src));
    print_message("%s: %s; hits %llu misses %llu evictions %llu, %llu bytes read, peak %llu of "
                  "%llu\n", path, ms_io_describe(ms_stream_source_io(src)),
                  (unsigned long long)st->hits, (unsigned long long)st->misses,
                  (unsigned long long)st->evictions, (unsigned long long)st->bytes_read,
                  (unsigned long long)st->peak_resident_bytes, (unsigned long long)budget);
    assert_int_equal(st->hits + st->misses, (uint64_t)N * m->n_layer * m->hp.n_expert_used);
    assert_true(st->evictions > 0);
    assert_true(st->peak_resident_bytes <= budget);
    assert_true(st->bytes_read >= st->misses * 3 * 1); /* every miss was read */
    /* A budget below one token's experts is refused up front. */
    struct ms_stream_source *bad = NULL;
    struct ms_stream_params p = {.budget_bytes = budget - 1};
    ms_err e = {{0}};
    assert_int_equal(ms_stream_source_new(&bad, m, &p, &e), -1);
    assert_non_null(strstr(e.msg, "one token"));

    m->experts = resident;
    ms_stream_source_free(src);
    free(want);
    free(got);
    dsv4_model_free(m);
}

static void test_min_cache_identity(void **state) {
    (void)state;
    check_min_cache(g_tiny, false);
}

static void test_mixed_sizes_identity(void **state) {
    (void)state;
    check_min_cache(g_mixed, true);
}

struct budget_check {
    uint64_t n;
};
static void on_install(void *ctx, uint64_t resident, uint64_t budget) {
    ((struct budget_check *)ctx)->n++;
    if (resident > budget)
        fail_msg("resident expert bytes %llu exceed the budget %llu",
                 (unsigned long long)resident, (unsigned long long)budget);
}

/* Two prompts over different token ranges (hash layers route by token id,
 * so they select different experts), ubatches of 4, a budget of one layer's
 * experts of the largest layer (1/n_layer of them all). */
static void test_prompt_switch(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_mixed);
    const struct dsv4_expert_source resident = m->experts;
    enum { N = 16 };
    int32_t a[N], b[N];
    random_tokens(a, N, 3, 100, 21);
    random_tokens(b, N, 300, 200, 22);
    float *want_a = eval(m, a, N, 4), *want_b = eval(m, b, N, 4);

    const uint64_t budget = m->hp.n_expert * ms_stream_slot_bytes(m, m->n_layer - 1);
    struct ms_stream_source *src = stream_on(m, budget);
    struct ms_expert_cache *c = ms_stream_source_cache(src);
    struct budget_check bc = {0};
    ms_expert_cache_set_install_hook(c, on_install, &bc);
    for (int round = 0; round < 2; round++) {
        float *got_a = eval(m, a, N, 4);
        assert_same(want_a, got_a, (size_t)N * m->hp.n_vocab, "prompt A");
        float *got_b = eval(m, b, N, 4);
        assert_same(want_b, got_b, (size_t)N * m->hp.n_vocab, "prompt B");
        free(got_a);
        free(got_b);
    }
    const struct ms_cache_stats *st = ms_expert_cache_stats(c);
    assert_true(bc.n > 0);
    assert_true(st->evictions > 0);
    assert_true(st->peak_resident_bytes <= budget);
    m->experts = resident;
    ms_stream_source_free(src);
    free(want_a);
    free(want_b);
    dsv4_model_free(m);
}

static long fail_nth(void *ctx, uint64_t seq, long res) {
    return seq == *(uint64_t *)ctx ? -EIO : res;
}

/* A read error fails the evaluation with a message, not the process; the
 * next evaluation is served normally and is still exact. */
static void test_read_error(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_tiny);
    const struct dsv4_expert_source resident = m->experts;
    enum { N = 6 };
    int32_t tok[N];
    random_tokens(tok, N, 3, 400, 31);
    float *want = eval(m, tok, N, 1);
    struct ms_stream_source *src = stream_on(m, ms_stream_min_budget(m));
    uint64_t nth = 7;
    ms_io_set_fault_hook(ms_stream_source_io(src), fail_nth, &nth);
    struct dsv4_session *s = NULL;
    struct dsv4_session_params p = {.n_ctx = 64, .n_batch = 1};
    ms_err e = {{0}};
    if (dsv4_session_new(&s, m, &p, &e)) fail_msg("%s", e.msg);
    assert_int_equal(dsv4_session_eval(s, tok, N, NULL, &e), -1);
    assert_non_null(strstr(e.msg, strerror(EIO)));
    assert_non_null(strstr(e.msg, "layer"));
    dsv4_session_free(s);
    ms_io_set_fault_hook(ms_stream_source_io(src), NULL, NULL);
    float *got = eval(m, tok, N, 1);
    assert_same(want, got, (size_t)N * m->hp.n_vocab, "after a read error");
    m->experts = resident;
    ms_stream_source_free(src);
    free(want);
    free(got);
    dsv4_model_free(m);
}

static long fail_all(void *ctx, uint64_t seq, long res) {
    (void)seq, (void)res;
    (*(uint64_t *)ctx)++;
    return -EIO;
}

/* Decode (ubatch 1) with room to spare: the next layer's guessed experts
 * are read in the background; logits equal the resident ones, the budget
 * holds at every install, the guesses are scored. Then every prefetch read
 * fails: the evaluation still succeeds, exactly, the failed experts being
 * read again as misses. */
static void test_prefetch(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_mixed);
    const struct dsv4_expert_source resident = m->experts;
    enum { N = 24 };
    int32_t tok[N];
    random_tokens(tok, N, 3, (uint32_t)m->hp.n_vocab - 3, 41);
    float *want = eval(m, tok, N, 1);
    const uint64_t budget = 3 * ms_stream_min_budget(m);
    struct ms_stream_source *src = stream_on(m, budget);
    assert_non_null(m->experts.prefetch);
    struct ms_expert_cache *c = ms_stream_source_cache(src);
    struct budget_check bc = {0};
    ms_expert_cache_set_install_hook(c, on_install, &bc);
    float *got = eval(m, tok, N, 1);
    assert_same(want, got, (size_t)N * m->hp.n_vocab, "decode with prefetch");
    const struct ms_stream_counters *ctr = ms_stream_source_counters(src);
    const struct ms_cache_stats *st = ms_expert_cache_stats(c);
    print_message("prefetch: %llu read, %llu used, guessed %llu of %llu; hits %llu misses %llu\n",
                  (unsigned long long)ctr->prefetched, (unsigned long long)ctr->prefetch_used,
                  (unsigned long long)ctr->predicted_right,
                  (unsigned long long)ctr->predicted_selected, (unsigned long long)st->hits,
                  (unsigned long long)st->misses);
    assert_true(ctr->prefetched > 0);
    assert_true(ctr->prefetch_used > 0);
    assert_true(ctr->prefetch_used <= ctr->prefetched);
    assert_int_equal(st->prefetched, ctr->prefetched);
    /* every layer after the first non-hash one had a guess, every step */
    assert_int_equal(ctr->predicted_selected,
                     (uint64_t)N * (m->n_layer - m->hp.n_hash_layer - (m->hp.n_hash_layer ? 0 : 1)) *
                         m->hp.n_expert_used);
    assert_true(ctr->predicted_right <= ctr->predicted_selected);
    assert_true(st->peak_resident_bytes <= budget);
    assert_int_equal(ctr->prefetch_failed, 0);

    uint64_t failed = 0;
    ms_io_set_fault_hook(ms_stream_source_prefetch_io(src), fail_all, &failed);
    int32_t other[N];
    random_tokens(other, N, 3, (uint32_t)m->hp.n_vocab - 3, 42);
    float *want2 = NULL, *got2 = NULL;
    m->experts = resident;
    want2 = eval(m, other, N, 1);
    m->experts = ms_stream_source_iface(src);
    const uint64_t misses0 = st->misses;
    got2 = eval(m, other, N, 1);
    assert_same(want2, got2, (size_t)N * m->hp.n_vocab, "decode with failing prefetch reads");
    assert_true(failed > 0);
    assert_true(ctr->prefetch_failed > 0);
    assert_true(st->misses > misses0);
    assert_true(st->peak_resident_bytes <= budget);
    ms_io_set_fault_hook(ms_stream_source_prefetch_io(src), NULL, NULL);

    m->experts = resident;
    ms_stream_source_free(src);
    free(want);
    free(got);
    free(want2);
    free(got2);
    dsv4_model_free(m);
}

/* Short ubatches (selected-only mode): hash layers' experts are known from
 * the token ids, so prepare reads them ahead; logits unchanged. With
 * no_prefetch nothing is read ahead. */
static void test_hash_prepare(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_tiny);
    if (!m->hp.n_hash_layer) skip();
    const struct dsv4_expert_source resident = m->experts;
    enum { N = 12 };
    int32_t tok[N];
    random_tokens(tok, N, 3, 500, 51);
    float *want = eval(m, tok, N, 4);
    for (int off = 0; off < 2; off++) {
        struct ms_stream_source *src = NULL;
        struct ms_stream_params p = {.budget_bytes = m->hp.n_expert * ms_stream_slot_bytes(m, 0),
                                     .whole_layer_min_tokens = -1, .no_prefetch = off};
        ms_err e = {{0}};
        if (ms_stream_source_new(&src, m, &p, &e)) fail_msg("%s", e.msg);
        m->experts = ms_stream_source_iface(src);
        assert_true(off ? !m->experts.prepare && !m->experts.prefetch : !!m->experts.prepare);
        float *got = eval(m, tok, N, 4);
        assert_same(want, got, (size_t)N * m->hp.n_vocab, "hash layers read in prepare");
        const struct ms_stream_counters *ctr = ms_stream_source_counters(src);
        if (off) {
            assert_int_equal(ctr->prefetched, 0);
        } else {
            assert_true(ctr->prefetched > 0);
            assert_true(ctr->prefetch_used > 0);
            assert_int_equal(ctr->predicted_selected, 0); /* no router guesses for ubatch 4 */
        }
        m->experts = resident;
        ms_stream_source_free(src);
        free(got);
    }
    free(want);
    dsv4_model_free(m);
}

/* --full-layers: the first layers are read whole at creation and served
 * from there; logits unchanged, and those layers never reach the cache (no
 * hits, misses or residents), in decode and in short ubatches. */
static void test_full_layers(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_mixed);
    const struct dsv4_expert_source resident = m->experts;
    enum { N = 16, FULL = 2 };
    int32_t tok[N];
    random_tokens(tok, N, 3, (uint32_t)m->hp.n_vocab - 3, 61);
    float *want1 = eval(m, tok, N, 1), *want4 = eval(m, tok, N, 4);
    assert_true(ms_stream_full_layer_bytes(m, FULL) >=
                (uint64_t)FULL * m->hp.n_expert * ms_stream_slot_bytes(m, 0) / 2);
    assert_int_equal(ms_stream_full_layer_bytes(m, 0), 0);
    struct ms_stream_source *src = NULL;
    struct ms_stream_params p = {.budget_bytes = ms_stream_min_budget(m), .full_layers = FULL,
                                 .whole_layer_min_tokens = -1};
    ms_err e = {{0}};
    if (ms_stream_source_new(&src, m, &p, &e)) fail_msg("%s", e.msg);
    m->experts = ms_stream_source_iface(src);
    struct ms_expert_cache *c = ms_stream_source_cache(src);
    const struct ms_cache_stats *st = ms_expert_cache_stats(c);
    const uint64_t read0 = st->bytes_read;
    assert_true(read0 >= ms_stream_full_layer_bytes(m, FULL) / 2);
    float *got1 = eval(m, tok, N, 1);
    assert_same(want1, got1, (size_t)N * m->hp.n_vocab, "full layers, decode");
    assert_int_equal(st->hits + st->misses, (uint64_t)N * (m->n_layer - FULL) * m->hp.n_expert_used);
    float *got4 = eval(m, tok, N, 4);
    assert_same(want4, got4, (size_t)N * m->hp.n_vocab, "full layers, ubatch 4");
    for (uint32_t il = 0; il < FULL; il++)
        for (uint32_t x = 0; x < m->hp.n_expert; x++)
            assert_false(ms_expert_cache_contains(c, il, x));
    assert_true(st->peak_resident_bytes <= ms_stream_min_budget(m));
    m->experts = resident;
    ms_stream_source_free(src);
    free(want1);
    free(want4);
    free(got1);
    free(got4);
    dsv4_model_free(m);
}

/* A hotlist is loaded and validated at creation. */
static void test_hotlist_seed(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_tiny);
    char good[700], bad[700];
    snprintf(good, sizeof good, "%s/stream_hot_good.txt", g_dir);
    snprintf(bad, sizeof bad, "%s/stream_hot_bad.txt", g_dir);
    FILE *f = fopen(good, "w");
    fprintf(f, "# moestream expert hotlist v1\n0 1 10 1.0\n3 7 5 0.5\n");
    fclose(f);
    f = fopen(bad, "w");
    fprintf(f, "# moestream expert hotlist v1\n0 1 10 1.0\n9 7 5 0.5\n");
    fclose(f);
    struct ms_stream_source *src = NULL;
    struct ms_stream_params p = {.hotlist_path = good};
    ms_err e = {{0}};
    if (ms_stream_source_new(&src, m, &p, &e)) fail_msg("%s", e.msg);
    ms_stream_source_free(src);
    p.hotlist_path = bad;
    assert_int_equal(ms_stream_source_new(&src, m, &p, &e), -1);
    assert_non_null(strstr(e.msg, ":3:"));
    dsv4_model_free(m);
}

/* A whole prompt in one step through a cache that holds a fraction of a
 * layer (no layer buffers: the plan's fallback when two layers do not
 * fit): each layer's experts are acquired in groups, the next group is
 * read while the current one computes and the first one during the
 * layer's attention. Logits equal the resident ones, the budget holds at
 * every install, nothing is read on demand; read-ahead reads that all
 * fail only turn into misses (still exact). */
static void test_read_ahead(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_tiny);
    const struct dsv4_expert_source resident = m->experts;
    enum { N = 48 };
    int32_t tok[N];
    random_tokens(tok, N, 3, (uint32_t)m->hp.n_vocab - 3, 41);
    float *want = eval(m, tok, N, DSV4_BATCH_WHOLE);
    const uint64_t budget = ms_stream_min_budget(m);
    struct ms_stream_source *src = NULL;
    struct ms_stream_params p = {.budget_bytes = budget, .whole_layer_min_tokens = -1};
    ms_err e = {{0}};
    if (ms_stream_source_new(&src, m, &p, &e)) fail_msg("%s", e.msg);
    m->experts = ms_stream_source_iface(src);
    assert_non_null(m->experts.read_ahead);
    assert_true(m->experts.max_per_acquire < (int)m->hp.n_expert); /* several groups */
    struct ms_expert_cache *c = ms_stream_source_cache(src);
    struct budget_check bc = {0};
    ms_expert_cache_set_install_hook(c, on_install, &bc);
    float *got = eval(m, tok, N, DSV4_BATCH_WHOLE);
    assert_same(want, got, (size_t)N * m->hp.n_vocab, "prompt through a small cache");
    free(got);
    const struct ms_stream_counters *ctr = ms_stream_source_counters(src);
    const struct ms_cache_stats *st = ms_expert_cache_stats(c);
    print_message("read ahead: %llu experts read ahead, %llu used; hits %llu misses %llu\n",
                  (unsigned long long)ctr->prefetched, (unsigned long long)ctr->prefetch_used,
                  (unsigned long long)st->hits, (unsigned long long)st->misses);
    /* all but the first group of a layer come from read-ahead (without it:
     * 1 of 32 on this model, a hash layer's prefetch) */
    assert_true(ctr->prefetch_used >= (st->hits + st->misses) / 2);
    /* and each layer's first group was read during its attention: from
     * tid2eid on hash layers, as the lowest ids not held on the others (a
     * 48-token step selects nearly all 8 experts; 3 misses without it) */
    assert_int_equal(st->misses, 0);
    assert_true(ctr->prefetch_used <= ctr->prefetched);
    assert_true(st->peak_resident_bytes <= budget);
    assert_true(bc.n > 0);

    uint64_t failed = 0;
    ms_io_set_fault_hook(ms_stream_source_prefetch_io(src), fail_all, &failed);
    int32_t tok2[N];
    random_tokens(tok2, N, 3, (uint32_t)m->hp.n_vocab - 3, 42);
    m->experts = resident;
    float *want2 = eval(m, tok2, N, DSV4_BATCH_WHOLE);
    m->experts = ms_stream_source_iface(src);
    got = eval(m, tok2, N, DSV4_BATCH_WHOLE);
    assert_same(want2, got, (size_t)N * m->hp.n_vocab, "every read-ahead failing");
    assert_true(failed > 0);
    assert_true(ctr->prefetch_failed > 0);
    ms_io_set_fault_hook(ms_stream_source_prefetch_io(src), NULL, NULL);
    m->experts = resident;
    ms_stream_source_free(src);
    free(want);
    free(want2);
    free(got);
    dsv4_model_free(m);
}

/* One pass of 48 tokens in ubatches of 12 through the smallest cache: each
 * ubatch selects nearly every expert of a layer, which the cache cannot
 * hold, so each ubatch reads the layer again. Ordering a ubatch's experts
 * with those the cache holds first (the order hook) uses the previous
 * ubatch's leftovers before they are evicted: fewer bytes read than in
 * ascending order, and the same logits as resident either way. */
static uint64_t ubatch_pass_bytes(struct dsv4_model *m, const int32_t *tok, int64_t n,
                                  const float *want, bool order) {
    const struct dsv4_expert_source resident = m->experts;
    struct ms_stream_source *src = NULL;
    struct ms_stream_params p = {.budget_bytes = ms_stream_min_budget(m),
                                 .whole_layer_min_tokens = -1};
    ms_err e = {{0}};
    if (ms_stream_source_new(&src, m, &p, &e)) fail_msg("%s", e.msg);
    m->experts = ms_stream_source_iface(src);
    assert_non_null(m->experts.order);
    if (!order) m->experts.order = NULL;
    struct dsv4_session *s = NULL;
    struct dsv4_session_params sp = {.n_ctx = 128, .n_batch = DSV4_BATCH_WHOLE, .n_ubatch = 12};
    if (dsv4_session_new(&s, m, &sp, &e)) fail_msg("%s", e.msg);
    float *got = malloc((size_t)n * m->hp.n_vocab * sizeof *got);
    if (dsv4_session_eval(s, tok, n, got, &e)) fail_msg("%s", e.msg);
    assert_same(want, got, (size_t)n * m->hp.n_vocab, order ? "ordered" : "ascending");
    const uint64_t bytes = ms_expert_cache_stats(ms_stream_source_cache(src))->bytes_read;
    free(got);
    dsv4_session_free(s);
    m->experts = resident;
    ms_stream_source_free(src);
    return bytes;
}

static void test_order(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_tiny);
    enum { N = 48 };
    int32_t tok[N];
    random_tokens(tok, N, 3, (uint32_t)m->hp.n_vocab - 3, 43);
    float *want = eval(m, tok, N, DSV4_BATCH_WHOLE);
    const uint64_t ordered = ubatch_pass_bytes(m, tok, N, want, true);
    const uint64_t ascending = ubatch_pass_bytes(m, tok, N, want, false);
    print_message("ubatches through the cache: %llu bytes read with the order hook, %llu "
                  "without\n", (unsigned long long)ordered, (unsigned long long)ascending);
    assert_true(ordered < ascending);
    free(want);
    dsv4_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_min_cache_identity),
        cmocka_unit_test(test_mixed_sizes_identity),
        cmocka_unit_test(test_prompt_switch),
        cmocka_unit_test(test_read_error),
        cmocka_unit_test(test_hotlist_seed),
        cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_hash_prepare),
        cmocka_unit_test(test_full_layers),
        cmocka_unit_test(test_read_ahead),
        cmocka_unit_test(test_order),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
