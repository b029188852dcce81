/*
 * test_stream_prefill.c - the one-pass layer-major streaming prefill: a
 * whole-prompt ubatch reads every layer whole, once (passes <= 1.05, one
 * layer read per layer), also in ubatches smaller than the prompt (two-level
 * prefill), gives the resident logits bit for bit (prefill and
 * the decode steps after it), seeds the decode cache from the layer buffers
 * without ever exceeding the budget, turns an injected EIO in a layer read
 * into an error for that request only, and the routing profiler writes a
 * hotlist the parser accepts with n_tokens * n_expert_used hits per layer;
 * --preload-experts fills the cache from a hotlist within the budget; the
 * per-layer progress callback reports a one-pass prefill and can stop it;
 * captures inside an eval hold the state of an eval that stopped there and
 * are handed over as their passes end.
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "model/model.h"
#include "test_model_util.h"
#include "model/session.h"
#include "model/session_io.h"
#include "moestream.h"
#include "stream/expert_source.h"
#include "stream/hotlist.h"
#include "util/rng.h"

static char g_tiny[600], g_small[600], g_small2[600], g_dir[512];

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("MS_TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s", tmp ? tmp : ".");
    mkdir(g_dir, 0755);
    snprintf(g_tiny, sizeof g_tiny, "%s/prefill_tiny.gguf", g_dir);
    snprintf(g_small, sizeof g_small, "%s/prefill_small.gguf", g_dir);
    snprintf(g_small2, sizeof g_small2, "%s/prefill_small2.gguf", g_dir);
    if (test_mkmodel(g_tiny, "--preset tiny --experts-type q4_K --seed 5")) return -1;
    if (test_mkmodel(g_small2, "--preset small --layers 2 --experts-type q4_K --seed 6")) return -1;
    return test_mkmodel(g_small, "--preset small --experts-type q4_K --seed 6");
}

enum { N_PROMPT = 64, N_DECODE = 6, N_ALL = N_PROMPT + N_DECODE };

/* Logits [N_ALL][n_vocab]: the prompt in one whole-call step, then the
 * decode tokens one by one. 0, or -1 with err when an eval failed. */
static int prefill_decode(const struct dsv4_model *m, const int32_t *tok, float *lg, ms_err *e) {
    struct dsv4_session *s = NULL;
    struct dsv4_session_params p = {.n_ctx = 128, .n_batch = DSV4_BATCH_WHOLE};
    if (dsv4_session_new(&s, m, &p, e)) fail_msg("%s", e->msg);
    const int64_t V = m->hp.n_vocab;
    int rc = dsv4_session_eval(s, tok, N_PROMPT, lg, e);
    for (int64_t i = N_PROMPT; i < N_ALL && !rc; i++)
        rc = dsv4_session_eval(s, tok + i, 1, lg + i * V, e);
    dsv4_session_free(s);
    return rc;
}

struct budget_check {
    uint64_t installs, worst;
    bool over;
};
static void on_install(void *ctx, uint64_t resident, uint64_t budget) {
    struct budget_check *b = ctx;
    b->installs++;
    if (resident > b->worst) b->worst = resident;
    if (resident > budget) b->over = true;
}

/* Streamed whole-layer prefill + decode == resident, bit for bit; one
 * layer read per layer; seeding within the budget at every install. */
static void test_whole_layer_identity(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_tiny);
    const struct dsv4_expert_source resident = m->experts;
    int32_t tok[N_ALL];
    random_tokens(tok, N_ALL, 3, (uint32_t)m->hp.n_vocab - 3, 21);
    const size_t nl = (size_t)N_ALL * m->hp.n_vocab;
    float *want = malloc(nl * sizeof *want), *got = malloc(nl * sizeof *got);
    ms_err e = {{0}};
    if (prefill_decode(m, tok, want, &e)) fail_msg("%s", e.msg);

    /* room for 2 seeded experts per layer beside one token's experts */
    const uint64_t max_slot = ms_stream_max_slot_bytes(m);
    uint64_t largest = 0; /* the same figure, taken layer by layer */
    for (uint32_t il = 0; il < m->n_layer; il++)
        if (ms_stream_slot_bytes(m, il) > largest) largest = ms_stream_slot_bytes(m, il);
    assert_int_equal(max_slot, largest);
    const uint64_t budget = 2 * m->n_layer * max_slot > ms_stream_min_budget(m)
                                ? 2 * m->n_layer * max_slot
                                : ms_stream_min_budget(m);
    struct ms_stream_source *src = stream_on(m, budget);
    struct budget_check bc = {0};
    ms_expert_cache_set_install_hook(ms_stream_source_cache(src), on_install, &bc);
    assert_true(ms_stream_source_whole_min_tokens(src) <= N_PROMPT);
    if (prefill_decode(m, tok, got, &e)) fail_msg("%s", e.msg);
    assert_same(want, got, nl, "whole-layer prefill + decode");

    const struct ms_stream_counters *c = ms_stream_source_counters(src);
    const struct ms_cache_stats *cs = ms_expert_cache_stats(ms_stream_source_cache(src));
    print_message("tiny: %llu layer reads, %llu bytes, %llu seeded, %llu installs (worst %llu "
                  "of %llu), decode hits %llu misses %llu\n",
                  (unsigned long long)c->layer_reads, (unsigned long long)c->layer_bytes,
                  (unsigned long long)c->seeded, (unsigned long long)bc.installs,
                  (unsigned long long)bc.worst, (unsigned long long)budget,
                  (unsigned long long)cs->hits, (unsigned long long)cs->misses);
    assert_int_equal(c->layer_reads, m->n_layer);
    assert_true(c->seeded > 0 && c->seeded <= 2ull * m->n_layer);
    assert_false(bc.over);
    assert_true(cs->peak_resident_bytes <= budget);
    /* the decode steps went through the cache; the seeds gave some hits */
    assert_int_equal(cs->hits + cs->misses, (uint64_t)N_DECODE * m->n_layer * m->hp.n_expert_used);
    assert_true(cs->hits > 0);
    m->experts = resident;
    ms_stream_source_free(src);
    free(want);
    free(got);
    dsv4_model_free(m);
}

/* A whole-prompt prefill reads the routed weights once; 16-token chunks
 * (still whole-layer steps) read them once per chunk. */
static void test_one_pass(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_small);
    const struct dsv4_expert_source resident = m->experts;
    const double routed = (double)dsv4_model_routed_bytes(m);
    int32_t tok[N_PROMPT];
    random_tokens(tok, N_PROMPT, 3, (uint32_t)m->hp.n_vocab - 3, 33);
    const int64_t chunks[] = {DSV4_BATCH_WHOLE, 16};
    for (size_t i = 0; i < 2; i++) {
        struct ms_stream_source *src = stream_on(m, ms_stream_min_budget(m));
        struct dsv4_session *s = NULL;
        struct dsv4_session_params p = {.n_ctx = 128, .n_batch = chunks[i]};
        ms_err e = {{0}};
        if (dsv4_session_new(&s, m, &p, &e)) fail_msg("%s", e.msg);
        if (dsv4_session_eval(s, tok, N_PROMPT, NULL, &e)) fail_msg("%s", e.msg);
        const struct ms_cache_stats *cs = ms_expert_cache_stats(ms_stream_source_cache(src));
        const double passes = (double)cs->bytes_read / routed;
        print_message("small, ubatch %lld: passes %.4f (%llu of %.0f bytes), io wait %.4f s\n",
                      (long long)chunks[i], passes, (unsigned long long)cs->bytes_read, routed,
                      cs->io_wait_seconds);
        if (chunks[i] == DSV4_BATCH_WHOLE) {
            assert_true(passes >= 1.0 && passes <= 1.05);
            assert_int_equal(ms_stream_source_counters(src)->layer_reads, m->n_layer);
        } else {
            assert_true(passes > 3.0); /* 4 chunks: the model read about 4 times */
        }
        dsv4_session_free(s);
        m->experts = resident;
        ms_stream_source_free(src);
    }
    dsv4_model_free(m);
}

/* Two-level prefill: logits [N_PROMPT][n_vocab] of the prompt evaluated with
 * passes of n_batch tokens and ubatches of n_ubatch inside each layer. */
static void eval_batches(const struct dsv4_model *m, const int32_t *tok, int64_t n_batch,
                         int64_t n_ubatch, float *lg) {
    struct dsv4_session *s = NULL;
    struct dsv4_session_params p = {.n_ctx = 128, .n_batch = n_batch, .n_ubatch = n_ubatch};
    ms_err e = {{0}};
    if (dsv4_session_new(&s, m, &p, &e)) fail_msg("%s", e.msg);
    if (dsv4_session_eval(s, tok, N_PROMPT, lg, &e)) fail_msg("%s", e.msg);
    dsv4_session_free(s);
}

/* The resident reference of the two-level and span cases: the small
 * model (returned, the caller's to free), random prompt tokens
 * tok[N_PROMPT] (seed), their logits want[N_PROMPT][n_vocab] from one
 * whole pass, and got of the same size for the case's own run (both the
 * caller's to free); *nl = N_PROMPT x n_vocab. */
static struct dsv4_model *resident_want(int32_t *tok, uint64_t seed, float **want, float **got,
                                        size_t *nl_out) {
    struct dsv4_model *m = test_load_model(g_small);
    const size_t nl = (size_t)N_PROMPT * m->hp.n_vocab;
    *nl_out = nl;
    *want = malloc(nl * sizeof **want);
    *got = malloc(nl * sizeof **got);
    assert_non_null(*want);
    assert_non_null(*got);
    random_tokens(tok, N_PROMPT, 3, (uint32_t)m->hp.n_vocab - 3, seed);
    eval_batches(m, tok, DSV4_BATCH_WHOLE, 0, *want);
    return m;
}

/* A whole-prompt pass in ubatches of 10 (not a multiple of the compression
 * ratio 4, so compressed blocks straddle ubatches) gives the logits of a
 * one-ubatch pass and of 10-token chunks bit for bit, resident and
 * streamed, and streamed it still reads the routed weights once. */
static void test_two_level(void **state) {
    (void)state;
    int32_t tok[N_PROMPT];
    float *want, *got;
    size_t nl;
    struct dsv4_model *m = resident_want(tok, 35, &want, &got, &nl);
    const struct dsv4_expert_source resident = m->experts;
    eval_batches(m, tok, DSV4_BATCH_WHOLE, 10, got);
    assert_same(want, got, nl, "resident, whole pass in ubatches of 10");
    eval_batches(m, tok, 10, 0, got);
    assert_same(want, got, nl, "resident, chunks of 10");
    struct ms_stream_source *src = stream_on(m, ms_stream_min_budget(m));
    eval_batches(m, tok, DSV4_BATCH_WHOLE, 10, got);
    assert_same(want, got, nl, "streamed, whole pass in ubatches of 10");
    const double passes = (double)ms_expert_cache_stats(ms_stream_source_cache(src))->bytes_read /
                          (double)dsv4_model_routed_bytes(m);
    print_message("small, whole pass in ubatches of 10: passes %.4f\n", passes);
    assert_true(passes >= 1.0 && passes <= 1.05);
    assert_int_equal(ms_stream_source_counters(src)->layer_reads, m->n_layer);
    m->experts = resident;
    ms_stream_source_free(src);
    free(want);
    free(got);
    dsv4_model_free(m);
}

/* A streaming source for m whose cache holds ms_stream_min_budget (a
 * fraction of a layer) and which never reads whole layers, installed as
 * m's expert source (the caller restores the old one and frees it). */
static struct ms_stream_source *cache_only_on(struct dsv4_model *m) {
    struct ms_stream_source *src = NULL;
    struct ms_stream_params sp = {.budget_bytes = ms_stream_min_budget(m),
                                  .whole_layer_min_tokens = -1};
    ms_err e = {{0}};
    if (ms_stream_source_new(&src, m, &sp, &e)) fail_msg("%s", e.msg);
    m->experts = ms_stream_source_iface(src);
    return src;
}

/* A session of whole-call passes in ubatches of 16 and spans of n_span. */
static struct dsv4_session *span_session(const struct dsv4_model *m, int64_t n_span) {
    struct dsv4_session *s = NULL;
    struct dsv4_session_params p = {.n_ctx = 128, .n_batch = DSV4_BATCH_WHOLE, .n_ubatch = 16,
                                    .n_span = n_span};
    ms_err e = {{0}};
    if (dsv4_session_new(&s, m, &p, &e)) fail_msg("%s", e.msg);
    return s;
}

/* Logits [N_PROMPT][n_vocab] of the prompt in one span_session pass
 * through a new cache_only_on source; returns the passes over the routed
 * weights it read. */
static double eval_spans(struct dsv4_model *m, const int32_t *tok, int64_t n_span, float *lg) {
    const struct dsv4_expert_source resident = m->experts;
    struct ms_stream_source *src = cache_only_on(m);
    struct dsv4_session *s = span_session(m, n_span);
    ms_err e = {{0}};
    if (dsv4_session_eval(s, tok, N_PROMPT, lg, &e)) fail_msg("%s", e.msg);
    dsv4_session_free(s);
    const uint64_t read = ms_expert_cache_stats(ms_stream_source_cache(src))->bytes_read;
    m->experts = resident;
    ms_stream_source_free(src);
    return (double)read / (double)dsv4_model_routed_bytes(m);
}

/* Spans: through a cache that holds a fraction of a layer (no whole-layer
 * reads), a pass in ubatches reads most experts again per ubatch; with
 * spans each selected expert is read once per span (one pass with one
 * span over the prompt, about two with two), and the logits
 * are the resident ones bit for bit. Spans are whole ubatches and at most
 * n_ubatch x n_expert_used tokens (k = 4 here: 100 -> 64, 40 -> 32). */
static void test_spans(void **state) {
    (void)state;
    int32_t tok[N_PROMPT];
    float *want, *got;
    size_t nl;
    struct dsv4_model *m = resident_want(tok, 36, &want, &got, &nl);
    assert_int_equal(m->hp.n_expert_used, 4);
    /* 48: a span of three ubatches, then one of one (the plain path) */
    const int64_t spans[] = {0, 40, 100, 48};
    double passes[4];
    for (int i = 0; i < 4; i++) {
        passes[i] = eval_spans(m, tok, spans[i], got);
        print_message("small through the cache, ubatches of 16, span %lld: passes %.4f\n",
                      (long long)spans[i], passes[i]);
        char what[64];
        snprintf(what, sizeof what, "span %lld", (long long)spans[i]);
        assert_same(want, got, nl, what);
    }
    assert_true(passes[0] > 2.0);            /* the cost spans remove */
    /* one span: each expert once, plus the 4 KiB rounding of direct I/O
     * per expert part, about 5% on this model's small parts */
    assert_true(passes[2] > 0.5 && passes[2] <= 1.1);
    assert_true(passes[1] > passes[2] && passes[1] <= 2.1 * passes[2]);
    free(want);
    free(got);
    dsv4_model_free(m);
}

/* Headroom returned to the decode cache: prefills and decode steps of
 * random lengths; at every cache install and after every eval, cache
 * buffers + layer buffers <= budget + headroom; decode steps run with the
 * larger budget and use it. */
struct headroom_check {
    struct ms_stream_source *src;
    uint64_t total, max_decode;
    bool decoding;
};
static void on_install_headroom(void *ctx, uint64_t resident, uint64_t budget) {
    struct headroom_check *h = ctx;
    const uint64_t held = resident + ms_stream_source_layer_buffer_bytes(h->src);
    if (held > h->total)
        fail_msg("cache %llu + layer buffers %llu > %llu (budget %llu)",
                 (unsigned long long)resident,
                 (unsigned long long)ms_stream_source_layer_buffer_bytes(h->src),
                 (unsigned long long)h->total, (unsigned long long)budget);
    if (h->decoding && resident > h->max_decode) h->max_decode = resident;
}

static void test_headroom(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_small);
    const struct dsv4_expert_source resident = m->experts;
    uint64_t max_layer = 0;
    for (uint32_t il = 0; il < m->n_layer; il++)
        if (ms_stream_slot_bytes(m, il) * m->hp.n_expert > max_layer)
            max_layer = ms_stream_slot_bytes(m, il) * m->hp.n_expert;
    const uint64_t base = ms_stream_min_budget(m), headroom = 2 * max_layer;
    struct ms_stream_source *src = NULL;
    struct ms_stream_params sp = {.budget_bytes = base, .headroom_bytes = headroom};
    ms_err e = {{0}};
    if (ms_stream_source_new(&src, m, &sp, &e)) fail_msg("%s", e.msg);
    m->experts = ms_stream_source_iface(src);
    struct ms_expert_cache *c = ms_stream_source_cache(src);
    struct headroom_check h = {.src = src, .total = base + headroom};
    ms_expert_cache_set_install_hook(c, on_install_headroom, &h);
    struct dsv4_session *s = NULL;
    struct dsv4_session_params p = {.n_ctx = 1024, .n_batch = DSV4_BATCH_WHOLE};
    if (dsv4_session_new(&s, m, &p, &e)) fail_msg("%s", e.msg);
    ms_rng r;
    ms_rng_seed(&r, 77);
    int32_t tok[80];
    for (int round = 0; round < 4; round++) {
        const int64_t n_prompt = 30 + (int64_t)(ms_rng_u64(&r) % 50);
        const int n_decode = 4 + (int)(ms_rng_u64(&r) % 12);
        random_tokens(tok, n_prompt, 3, (uint32_t)m->hp.n_vocab - 3, 100 + (uint64_t)round);
        h.decoding = false;
        struct rusage ru0, ru1;
        getrusage(RUSAGE_SELF, &ru0);
        if (dsv4_session_eval(s, tok, n_prompt, NULL, &e)) fail_msg("%s", e.msg);
        getrusage(RUSAGE_SELF, &ru1);
        /* the layer buffers were faulted in at creation and lent to the
         * cache since: the prefill takes them back without touching a
         * fresh page (it faulted all of them in when they were freed and
         * allocated again around each prefill). The first prefill also
         * touches the session's scratch for the first time (under ASan,
         * with fresh shadow pages: 930 faults once), so the count is
         * checked from the second on. */
        const long faults = ru1.ru_minflt - ru0.ru_minflt;
        const long buffer_pages = (long)(ms_stream_source_layer_buffer_bytes(src) / 4096);
        print_message("prefill %d: %ld minor faults, layer buffers %ld pages\n", round, faults,
                      buffer_pages);
        assert_true(buffer_pages > 0);
        if (round > 0) assert_true(faults < buffer_pages / 4);
        assert_int_equal(ms_expert_cache_stats(c)->budget_bytes, base);
        assert_int_equal(ms_expert_cache_lent_bytes(c), 0);
        h.decoding = true;
        for (int i = 0; i < n_decode; i++) {
            if (dsv4_session_eval(s, tok + i, 1, NULL, &e)) fail_msg("%s", e.msg);
            assert_int_equal(ms_stream_source_layer_buffer_bytes(src), 0);
            const uint64_t lent = ms_expert_cache_lent_bytes(c);
            assert_true(lent > 0 && lent <= headroom);
            assert_int_equal(ms_expert_cache_stats(c)->budget_bytes, base + lent);
            assert_true(ms_expert_cache_stats(c)->resident_bytes <= base + headroom);
        }
    }
    print_message("headroom: base %llu + %llu, decode cache peak %llu\n",
                  (unsigned long long)base, (unsigned long long)headroom,
                  (unsigned long long)h.max_decode);
    assert_true(h.max_decode > base); /* decode used the headroom */
    dsv4_session_free(s);
    m->experts = resident;
    ms_stream_source_free(src);
    dsv4_model_free(m);
}

struct fault {
    uint64_t fail_seq;
    int hits;
};
static long fail_once(void *ctx, uint64_t seq, long res) {
    struct fault *f = ctx;
    if (seq == f->fail_seq) {
        f->hits++;
        return -EIO;
    }
    return res;
}

/* EIO in a whole-layer read: that eval fails cleanly, the next one works. */
static void test_layer_read_eio(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_tiny);
    const struct dsv4_expert_source resident = m->experts;
    int32_t tok[N_ALL];
    random_tokens(tok, N_ALL, 3, (uint32_t)m->hp.n_vocab - 3, 44);
    const size_t nl = (size_t)N_ALL * m->hp.n_vocab;
    float *want = malloc(nl * sizeof *want), *got = malloc(nl * sizeof *got);
    ms_err e = {{0}};
    if (prefill_decode(m, tok, want, &e)) fail_msg("%s", e.msg);
    struct ms_stream_source *src = stream_on(m, ms_stream_min_budget(m));
    struct ms_io *lio = ms_stream_source_layer_io(src);
    assert_non_null(lio);
    for (uint64_t seq = 0; seq < 3; seq++) { /* first read, and a later layer's */
        struct fault f = {.fail_seq = seq * 2};
        ms_io_set_fault_hook(lio, fail_once, &f);
        memset(&e, 0, sizeof e);
        assert_int_equal(prefill_decode(m, tok, got, &e), -1);
        assert_int_equal(f.hits, 1);
        assert_non_null(strstr(e.msg, "whole-layer read"));
        print_message("injected EIO at read %llu: %s\n", (unsigned long long)f.fail_seq, e.msg);
        ms_io_set_fault_hook(lio, NULL, NULL);
        if (prefill_decode(m, tok, got, &e)) fail_msg("after EIO: %s", e.msg);
        assert_same(want, got, nl, "after an injected EIO");
    }
    m->experts = resident;
    ms_stream_source_free(src);
    free(want);
    free(got);
    dsv4_model_free(m);
}

static long fail_all(void *ctx, uint64_t seq, long res) {
    (void)ctx;
    (void)seq;
    (void)res;
    return -EIO;
}

/* EIO in a span's expert read (through the cache, read-aheads failing too,
 * so the acquires read and meet the error): that eval fails with the
 * read's error and resets the session; the next eval, without faults,
 * gives the resident logits bit for bit. */
static void test_span_eio(void **state) {
    (void)state;
    int32_t tok[N_PROMPT];
    float *want, *got;
    size_t nl;
    struct dsv4_model *m = resident_want(tok, 37, &want, &got, &nl);
    const struct dsv4_expert_source resident = m->experts;
    struct ms_stream_source *src = cache_only_on(m);
    struct dsv4_session *s = span_session(m, 64);
    ms_err e = {{0}};
    struct ms_io *pio = ms_stream_source_prefetch_io(src);
    const uint64_t seqs[] = {0, 150, 400}; /* the first read, and later layers' (3 a slot) */
    for (int i = 0; i < 3; i++) {
        const uint64_t seq = seqs[i];
        struct fault f = {.fail_seq = seq};
        ms_io_set_fault_hook(ms_stream_source_io(src), fail_once, &f);
        if (pio) ms_io_set_fault_hook(pio, fail_all, NULL);
        memset(&e, 0, sizeof e);
        assert_int_equal(dsv4_session_eval(s, tok, N_PROMPT, got, &e), -1);
        assert_int_equal(f.hits, 1);
        assert_int_equal(dsv4_session_n_past(s), 0);
        assert_non_null(strstr(e.msg, "Input/output error"));
        print_message("span, injected EIO at read %llu: %s\n", (unsigned long long)seq, e.msg);
        ms_io_set_fault_hook(ms_stream_source_io(src), NULL, NULL);
        if (pio) ms_io_set_fault_hook(pio, NULL, NULL);
        if (dsv4_session_eval(s, tok, N_PROMPT, got, &e)) fail_msg("after EIO: %s", e.msg);
        assert_same(want, got, nl, "span, after an injected EIO");
        dsv4_session_reset(s);
    }
    dsv4_session_free(s);
    m->experts = resident;
    ms_stream_source_free(src);
    free(want);
    free(got);
    dsv4_model_free(m);
}

/* A slow layer read: every read of the layer reader's engine takes 2 ms. */
static long slow_read(void *ctx, uint64_t seq, long res) {
    (void)ctx;
    (void)seq;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    return res;
}

/* Speculative whole-layer reads with dropping: a short prompt (n k / E
 * below 1) read as whole layers in runs of one expert, one read in flight,
 * each read slow, so routing arrives while most of each layer is still to
 * read: the runs nobody selected are withdrawn (less than the routed bytes
 * read), the logits of prompt and decode are the resident ones bit for
 * bit, and the same without dropping (every layer read whole). n_batch > 0:
 * the prompt in passes of n_batch tokens (on a 2-layer model a pass finds
 * the previous pass's partly read layers in the buffers: they must be read
 * again). */
static void check_layer_drop(const char *path, int64_t n_prompt, int64_t n_batch) {
    struct dsv4_model *m = test_load_model(path);
    const struct dsv4_expert_source resident = m->experts;
    const double routed = (double)dsv4_model_routed_bytes(m);
    int32_t tok[N_ALL];
    random_tokens(tok, N_ALL, 3, (uint32_t)m->hp.n_vocab - 3, 57);
    const int64_t V = m->hp.n_vocab;
    const int64_t n_all = n_prompt + N_DECODE;
    const size_t nl = (size_t)n_all * V;
    float *want = malloc(nl * sizeof *want), *got = malloc(nl * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    for (int pass = 0; pass < 3; pass++) {
        const bool streamed = pass > 0, drop = pass == 1;
        struct ms_stream_source *src = NULL;
        if (streamed) {
            struct ms_stream_params sp = {.budget_bytes = ms_stream_min_budget(m),
                                          .whole_layer_min_tokens = 2,
                                          .layer_run_experts = 1,
                                          .no_layer_drop = !drop,
                                          .io = {.queue_depth = 1}};
            ms_err e = {{0}};
            if (ms_stream_source_new(&src, m, &sp, &e)) fail_msg("%s", e.msg);
            m->experts = ms_stream_source_iface(src);
            ms_io_set_fault_hook(ms_stream_source_layer_io(src), slow_read, NULL);
        }
        struct dsv4_session *s = NULL;
        struct dsv4_session_params p = {.n_ctx = 128,
                                        .n_batch = n_batch ? n_batch : DSV4_BATCH_WHOLE};
        ms_err e = {{0}};
        if (dsv4_session_new(&s, m, &p, &e)) fail_msg("%s", e.msg);
        float *lg = streamed ? got : want;
        int rc = dsv4_session_eval(s, tok, n_prompt, lg, &e);
        double passes = 0.0;
        if (streamed) {
            passes = (double)ms_stream_source_counters(src)->layer_bytes / routed;
            /* the layer reads still running end with the buffers' drop */
        }
        for (int64_t i = n_prompt; i < n_all && !rc; i++)
            rc = dsv4_session_eval(s, tok + i, 1, lg + i * V, &e);
        if (rc) fail_msg("%s", e.msg);
        dsv4_session_free(s);
        if (!streamed) continue;
        const struct ms_stream_counters *c = ms_stream_source_counters(src);
        print_message("small, %lld-token prompt, whole layers %s dropping: %.4f passes after the "
                      "prefill, %.4f in all, %llu layers served\n",
                      (long long)n_prompt, drop ? "with" : "without", passes,
                      (double)c->layer_bytes / routed, (unsigned long long)c->layer_reads);
        assert_same(want, got, nl, drop ? "whole layers, unselected runs dropped"
                                        : "whole layers, nothing dropped");
        if (!n_batch) { /* in passes, layers are read per pass: identity is the point */
            assert_int_equal(c->layer_reads, m->n_layer);
            if (drop) assert_true(passes < 0.9);
            else assert_true((double)c->layer_bytes >= routed);
        }
        m->experts = resident;
        ms_stream_source_free(src);
    }
    free(want);
    free(got);
    dsv4_model_free(m);
}

static void test_layer_drop(void **state) {
    (void)state;
    check_layer_drop(g_small, 2, 0);
    check_layer_drop(g_small2, 6, 2);
}

/* The routing profile is a valid hotlist with n_tokens * k hits per layer. */
static void test_routing_profile(void **state) {
    (void)state;
    struct ms_engine_params ep = ms_engine_params_default(g_small);
    ep.n_threads = 1;
    ep.stream = MS_STREAM_ON;
    ep.profile_routing = true;
    ms_err e = {{0}};
    struct ms_engine *eng = NULL;
    if (ms_engine_load(&eng, &ep, &e)) fail_msg("%s", e.msg);
    const struct ms_model_info info = ms_engine_info(eng);
    struct ms_session *s = NULL;
    if (ms_session_new(&s, eng, 128, &e)) fail_msg("%s", e.msg);
    int32_t tok[N_PROMPT + 3];
    random_tokens(tok, N_PROMPT + 3, 3, info.n_vocab - 3, 55);
    if (ms_session_eval(s, tok, N_PROMPT, NULL, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < 3; i++)
        if (ms_session_eval(s, tok + N_PROMPT + i, 1, NULL, &e)) fail_msg("%s", e.msg);
    assert_true(ms_engine_stream_stats(eng).layer_reads > 0);
    char path[700];
    snprintf(path, sizeof path, "%s/prefill_profile.hot", g_dir);
    if (ms_engine_write_routing_profile(eng, path, &e)) fail_msg("%s", e.msg);
    struct ms_hotlist h;
    if (ms_hotlist_load(&h, path, info.n_layer, info.n_expert, &e)) fail_msg("%s", e.msg);
    uint64_t *sum = calloc(info.n_layer, sizeof *sum);
    for (size_t i = 0; i < h.n; i++) {
        assert_true(h.e[i].hits > 0 && h.e[i].weight > 0.0);
        sum[h.e[i].layer] += h.e[i].hits;
    }
    for (uint32_t il = 0; il < info.n_layer; il++)
        assert_int_equal(sum[il], (uint64_t)(N_PROMPT + 3) * info.n_expert_used);
    free(sum);
    ms_hotlist_free(&h);
    ms_session_free(s);
    ms_engine_free(eng);
    /* without profile_routing there is nothing to write */
    ep.profile_routing = false;
    if (ms_engine_load(&eng, &ep, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ms_engine_write_routing_profile(eng, path, &e), -1);
    ms_engine_free(eng);
}

/* Progress of an eval, recorded by on_progress. */
struct progress_log {
    int calls;
    int64_t last_done, total;
    int stop_after; /* return false on this call (0: never) */
    bool monotone;
};

static bool on_progress(void *ctx, int64_t done, int64_t total) {
    struct progress_log *g = ctx;
    g->calls++;
    if (done <= g->last_done || done > total) g->monotone = false;
    g->last_done = done;
    g->total = total;
    return g->calls != g->stop_after;
}

/* The progress callback of a streamed whole-prompt prefill: one call per
 * layer, done growing to n x n_layer, the prompt still read once; a false
 * return stops the eval with "interrupted" and an empty session, which then
 * evaluates the prompt to the logits of a session never interrupted. */
static void test_progress(void **state) {
    (void)state;
    struct ms_engine_params ep = ms_engine_params_default(g_small);
    ep.n_threads = 1;
    ep.stream = MS_STREAM_ON;
    ms_err e = {{0}};
    struct ms_engine *eng = NULL;
    if (ms_engine_load(&eng, &ep, &e)) fail_msg("%s", e.msg);
    const struct ms_model_info info = ms_engine_info(eng);
    int32_t tok[N_PROMPT];
    random_tokens(tok, N_PROMPT, 3, info.n_vocab - 3, 77);
    const size_t V = (size_t)info.n_vocab;
    float *want = malloc(V * sizeof *want);
    assert_non_null(want);

    struct ms_session *s = NULL;
    if (ms_session_new(&s, eng, 128, &e)) fail_msg("%s", e.msg);
    struct progress_log g = {.monotone = true};
    ms_session_set_progress(s, on_progress, &g);
    const int64_t reads0 = ms_engine_stream_stats(eng).layer_reads;
    if (ms_session_eval(s, tok, N_PROMPT, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(g.calls, (int)info.n_layer);
    assert_true(g.monotone);
    assert_int_equal(g.total, (int64_t)N_PROMPT * info.n_layer);
    assert_int_equal(g.last_done, g.total);
    assert_int_equal(ms_engine_stream_stats(eng).layer_reads - reads0, (int64_t)info.n_layer);
    memcpy(want, ms_session_logits(s), V * sizeof *want);

    /* interrupted after the second layer, then the same prompt again */
    ms_session_reset(s);
    g = (struct progress_log){.monotone = true, .stop_after = 2};
    assert_int_equal(ms_session_eval(s, tok, N_PROMPT, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "interrupted"));
    assert_int_equal(g.calls, 2);
    assert_int_equal(ms_session_n_past(s), 0);
    assert_null(ms_session_logits(s));
    ms_session_set_progress(s, NULL, NULL);
    if (ms_session_eval(s, tok, N_PROMPT, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(g.calls, 2); /* removed: not called again */
    assert_same(want, ms_session_logits(s), V, "after an interrupted eval");
    free(want);
    ms_session_free(s);
    ms_engine_free(eng);
}

/* A growing byte buffer: a dsv4_io sink. */
struct membuf {
    uint8_t *p;
    size_t n, cap;
};
static int membuf_put(void *ctx, void *buf, size_t n, ms_err *err) {
    (void)err;
    struct membuf *b = ctx;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, buf, n);
    b->n += n;
    return 0;
}

/* The payload of the state v (malloc'd in *b). */
static void payload_of(const struct dsv4_state_view *v, struct membuf *b) {
    *b = (struct membuf){0};
    const struct dsv4_io io = {membuf_put, b};
    ms_err e = {{0}};
    if (dsv4_save_payload(v, &io, &e)) fail_msg("%s", e.msg);
    assert_int_equal(b->n, dsv4_payload_bytes(v));
}

/* What a capture function received: each capture's payload and the
 * session's n_past when it came. */
struct got_captures {
    int n;
    int64_t at[8], n_past[8];
    struct membuf payload[8];
};
static void on_capture(void *ctx, const struct dsv4_state_view *v) {
    struct got_captures *g = ctx;
    assert_true(g->n < 8);
    g->at[g->n] = v->n_past;
    g->n_past[g->n] = dsv4_session_n_past(v->s);
    payload_of(v, &g->payload[g->n++]);
}
static void got_free(struct got_captures *g) {
    for (int i = 0; i < g->n; i++) free(g->payload[i].p);
    *g = (struct got_captures){0};
}

static bool stop_on_call(void *ctx, int64_t done, int64_t total) {
    (void)done;
    (void)total;
    int *left = ctx;
    return --*left > 0;
}

/* Captures: bad requests fail and change nothing; an eval with captures
 * at 7, 16, 23 and 40 (inside ubatches of 10 and compressor blocks, on a
 * pass boundary, and the eval's end), in one whole pass and in passes of
 * 16, hands over for each the payload of a session that evaluated exactly
 * that far, byte for byte, as soon as its pass ends, and gives the logits
 * of an eval without captures; an eval interrupted in its third pass of
 * 16 has handed over the captures of the first two. */
static void test_captures(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_small);
    int32_t tok[N_PROMPT];
    random_tokens(tok, N_PROMPT, 3, (uint32_t)m->hp.n_vocab - 3, 91);
    const size_t V = m->hp.n_vocab;
    const int64_t batches[] = {DSV4_BATCH_WHOLE, 16};
    for (size_t bi = 0; bi < 2; bi++) {
        struct dsv4_session_params p = {.n_ctx = 128, .n_batch = batches[bi], .n_ubatch = 10};
        struct dsv4_session *s = NULL, *d = NULL;
        ms_err e = {{0}};
        if (dsv4_session_new(&s, m, &p, &e) || dsv4_session_new(&d, m, &p, &e))
            fail_msg("%s", e.msg);
        struct got_captures g = {0};
        const int64_t none[] = {0}, dup[] = {5, 5}, past[] = {7, 50};
        int64_t many[DSV4_CAPTURE_MAX + 1];
        for (int i = 0; i <= DSV4_CAPTURE_MAX; i++) many[i] = i + 1;
        assert_int_equal(dsv4_session_capture_at(s, none, 1, on_capture, &g, &e), -1);
        assert_int_equal(dsv4_session_capture_at(s, dup, 2, on_capture, &g, &e), -1);
        assert_int_equal(dsv4_session_capture_at(s, many, DSV4_CAPTURE_MAX + 1, on_capture, &g, &e), -1);
        if (dsv4_session_capture_at(s, past, 2, on_capture, &g, &e)) fail_msg("%s", e.msg);
        assert_int_equal(dsv4_session_eval(s, tok, 40, NULL, &e), -1);
        assert_non_null(strstr(e.msg, "capture position 50"));
        assert_int_equal(dsv4_session_n_past(s), 0);
        assert_int_equal(g.n, 0);

        const int64_t at[] = {7, 16, 23, 40};
        if (dsv4_session_capture_at(s, at, 4, on_capture, &g, &e)) fail_msg("%s", e.msg);
        if (dsv4_session_eval(s, tok, 40, NULL, &e)) fail_msg("%s", e.msg);
        assert_int_equal(g.n, 4);
        if (dsv4_session_eval(d, tok, 40, NULL, &e)) fail_msg("%s", e.msg);
        assert_same(dsv4_session_logits(d), dsv4_session_logits(s), V, "eval with captures");
        for (int i = 0; i < 4; i++) {
            assert_int_equal(g.at[i], at[i]);
            /* handed over when the pass that reached it ended */
            const int64_t pass_end = bi == 0 ? 40 : (at[i] + 15) / 16 * 16;
            assert_int_equal(g.n_past[i], pass_end < 40 ? pass_end : 40);
            /* a fresh session: a reset one keeps stale frontier slots (never
             * read, but written to the payload) */
            dsv4_session_free(d);
            if (dsv4_session_new(&d, m, &p, &e) || dsv4_session_eval(d, tok, at[i], NULL, &e))
                fail_msg("%s", e.msg);
            struct membuf want;
            const struct dsv4_state_view dv = dsv4_session_view(d);
            payload_of(&dv, &want);
            assert_int_equal(g.payload[i].n, want.n);
            assert_memory_equal(g.payload[i].p, want.p, want.n);
            free(want.p);
        }
        got_free(&g);
        /* consumed: the next eval hands over nothing */
        if (dsv4_session_eval(s, tok + 40, 1, NULL, &e)) fail_msg("%s", e.msg);
        assert_int_equal(g.n, 0);
        if (bi == 1) { /* interrupted in the third pass: 7, 16 and 23 were handed over */
            dsv4_session_reset(s);
            int left = 2 * (int)m->n_layer + 1;
            dsv4_session_set_progress(s, stop_on_call, &left);
            if (dsv4_session_capture_at(s, at, 4, on_capture, &g, &e)) fail_msg("%s", e.msg);
            assert_int_equal(dsv4_session_eval(s, tok, 40, NULL, &e), -1);
            assert_int_equal(g.n, 3);
            assert_int_equal(g.at[2], 23);
            got_free(&g);
        }
        dsv4_session_free(s);
        dsv4_session_free(d);
    }
    dsv4_model_free(m);
}

/* --preload-experts: the hotlist's top experts are read at creation, as
 * many as the budget holds, and serve decode steps with the resident bytes. */
static void test_preload(void **state) {
    (void)state;
    struct dsv4_model *m = test_load_model(g_tiny);
    const struct dsv4_expert_source resident = m->experts;
    enum { N = 8 };
    int32_t tok[N];
    random_tokens(tok, N, 3, (uint32_t)m->hp.n_vocab - 3, 66);
    const size_t nl = (size_t)N * m->hp.n_vocab;
    float *want = malloc(nl * sizeof *want), *got = malloc(nl * sizeof *got);
    struct dsv4_session_params sp = {.n_ctx = 64, .n_batch = 1};
    struct dsv4_session *s = NULL;
    ms_err e = {{0}};
    if (dsv4_session_new(&s, m, &sp, &e) || dsv4_session_eval(s, tok, N, want, &e))
        fail_msg("%s", e.msg);
    dsv4_session_free(s);

    /* every expert of every layer, layer-major, hits descending */
    char path[700];
    snprintf(path, sizeof path, "%s/prefill_preload.hot", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", MS_HOTLIST_HEADER);
    const uint32_t total = m->n_layer * m->hp.n_expert;
    for (uint32_t i = 0; i < total; i++)
        fprintf(f, "%u %u %u 1.0\n", i / m->hp.n_expert, i % m->hp.n_expert, total - i);
    assert_int_equal(fclose(f), 0);
    const uint64_t slot = ms_stream_slot_bytes(m, 0), budget = ms_stream_min_budget(m) + 2 * slot;
    const uint32_t fit = (uint32_t)(budget / slot);
    const uint32_t asks[] = {3, total};
    for (int a = 0; a < 2; a++) {
        struct ms_stream_source *src = NULL;
        struct ms_stream_params p = {.budget_bytes = budget, .hotlist_path = path,
                                     .preload_experts = asks[a]};
        if (ms_stream_source_new(&src, m, &p, &e)) fail_msg("%s", e.msg);
        const struct ms_cache_stats *cs = ms_expert_cache_stats(ms_stream_source_cache(src));
        const uint32_t want_n = asks[a] < fit ? asks[a] : fit;
        assert_int_equal(cs->n_resident, want_n);
        assert_true(cs->peak_resident_bytes <= budget);
        assert_int_equal(cs->misses + cs->hits, 0);
        assert_int_equal(cs->bytes_read > 0, 1);
        for (uint32_t i = 0; i < want_n; i++) /* the top entries, in rank order */
            assert_true(ms_expert_cache_contains(ms_stream_source_cache(src),
                                                 i / m->hp.n_expert, i % m->hp.n_expert));
        m->experts = ms_stream_source_iface(src);
        if (dsv4_session_new(&s, m, &sp, &e) || dsv4_session_eval(s, tok, N, got, &e))
            fail_msg("%s", e.msg);
        dsv4_session_free(s);
        assert_same(want, got, nl, "after a preload");
        m->experts = resident;
        ms_stream_source_free(src);
    }
    free(want);
    free(got);
    dsv4_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_layer_identity),
        cmocka_unit_test(test_one_pass),
        cmocka_unit_test(test_two_level),
        cmocka_unit_test(test_spans),
        cmocka_unit_test(test_span_eio),
        cmocka_unit_test(test_headroom),
        cmocka_unit_test(test_layer_read_eio),
        cmocka_unit_test(test_layer_drop),
        cmocka_unit_test(test_routing_profile),
        cmocka_unit_test(test_preload),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_captures),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
