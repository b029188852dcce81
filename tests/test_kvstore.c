/*
 * test_kvstore.c - the disk KV cache (src/kvstore/, docs/kv-cache.md):
 *
 * - restore-then-continue equals the uninterrupted run: the logits at the
 *   restore point and after 64 greedy tokens bit for bit, the same tokens,
 *   for restore points on and around every boundary (window 32, ratios 4
 *   and 128, the 2048 alignment), resident and streaming; a prefill split
 *   at the 2048 cold point gives the one-call prefill's logits bit for bit;
 * - ms_kv_prefill's checkpoints come from one pass (captures): each
 *   restores to the logits of a prefill that stopped there and continues
 *   alike, resident, streamed whole layers and in spans, with no more
 *   routed reads than a prefill without checkpoints; more stops than one
 *   eval captures end it at every 17th;
 * - the longest byte-prefix checkpoint wins; a shorter prompt never takes a
 *   longer checkpoint;
 * - fault injection: truncation at every offset class, flipped bytes, a
 *   foreign model's file, ENOSPC during the write, kill -9 during the write:
 *   no crash, the bad file is never used, the previous checkpoint loads;
 * - the reference engine's failure modes: deep restores are not deleted by
 *   the budget; a restored unaligned checkpoint prefilled in chunks still
 *   writes a continued checkpoint; the second conversation's shutdown
 *   checkpoint is found after a restart; a checkpoint that mismatches the
 *   canonical tokens at the same depth twice is dropped;
 * - named checkpoints keep their aux bytes; files are 0600, the directory
 *   0700.
 * Models come from `$MS_BIN mkmodel` (tiny preset: window 32, ratios 0, 4,
 * 128, 4, context 4096).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_internal.h"
#include "kvstore/kvstore.h"
#include "text/utf8.h"
#include "moestream.h"
#include "test_model_util.h"
#include "test_util.h"
#include "util/log.h"
#include "util/rng.h"

static char g_tiny[1200], g_other[1200];

static int setup(void **state) {
    (void)state;
    if (test_tmp_setup("kvstore")) return -1;
    snprintf(g_tiny, sizeof g_tiny, "%s", tmp_path("tiny.gguf"));
    snprintf(g_other, sizeof g_other, "%s", tmp_path("other.gguf"));
    ms_log_set_level(MS_LOG_ERROR); /* the skipped-file warnings are expected */
    if (test_mkmodel(g_tiny, "--preset tiny --seed 21")) return -1;
    return test_mkmodel(g_other, "--preset tiny --seed 22");
}

static struct ms_engine *load(const char *path, int stream) {
    struct ms_engine_params ep = ms_engine_params_default(path);
    ep.n_threads = 1; /* tiny model: hand-offs cost more than they save */
    ep.stream = stream;
    ms_err e = {{0}};
    struct ms_engine *eng = NULL;
    if (ms_engine_load(&eng, &ep, &e)) fail_msg("%s", e.msg);
    return eng;
}

static struct ms_session *new_session(struct ms_engine *eng) {
    struct ms_session *s = NULL;
    ms_err e = {{0}};
    if (ms_session_new(&s, eng, 4096, &e)) fail_msg("%s", e.msg);
    return s;
}

/* A fresh, empty store directory dir/<name>. */
static struct ms_kvstore *open_store(struct ms_engine *eng, const char *name,
                                     struct ms_kv_params *pp) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_path(name));
    assert_int_equal(system(cmd), 0);
    struct ms_kv_params p = pp ? *pp : ms_kv_params_default(NULL);
    p.dir = tmp_path(name);
    struct ms_kvstore *kv = NULL;
    ms_err e = {{0}};
    if (ms_kv_open(&kv, eng, &p, &e)) fail_msg("%s", e.msg);
    return kv;
}

static struct ms_kvstore *reopen(struct ms_engine *eng, const char *name, struct ms_kv_params *pp) {
    struct ms_kv_params p = pp ? *pp : ms_kv_params_default(NULL);
    p.dir = tmp_path(name);
    struct ms_kvstore *kv = NULL;
    ms_err e = {{0}};
    if (ms_kv_open(&kv, eng, &p, &e)) fail_msg("%s", e.msg);
    return kv;
}

/* Whether s[0..n) is valid UTF-8 throughout. */
static bool utf8_whole(const char *s, size_t n) {
    for (size_t i = 0, l; i < n; i += l)
        if (!(l = ms_utf8_valid_len(s + i, n - i))) return false;
    return true;
}

/* n token ids of NORMAL tokens with non-empty text that is whole UTF-8
 * characters (so every prefix has its own text and file name, and ends
 * where a character ends: the store cuts checkpoints only there). */
static void text_tokens(struct ms_engine *eng, int32_t *t, int64_t n, uint64_t seed) {
    const struct ms_tokenizer *tok = ms_engine_tokenizer(eng);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    ms_rng r;
    ms_rng_seed(&r, seed);
    for (int64_t i = 0; i < n;) {
        const int32_t id = (int32_t)(ms_rng_u64(&r) % V);
        const char *piece;
        size_t len;
        ms_tokenizer_piece(tok, id, true, &piece, &len);
        if (ms_tokenizer_token_type(tok, id) != MS_TOKEN_NORMAL || len == 0 || !utf8_whole(piece, len))
            continue;
        t[i++] = id;
    }
}

/* The text of tokens[0..n) (malloc'd). */
static char *text_of(struct ms_engine *eng, const int32_t *t, int64_t n, size_t *len) {
    char *s = NULL;
    ms_err e = {{0}};
    if (ms_tokenizer_decode(ms_engine_tokenizer(eng), t, (size_t)n, true, &s, len, &e))
        fail_msg("%s", e.msg);
    return s;
}

static void eval(struct ms_session *s, const int32_t *t, int64_t n) {
    ms_err e = {{0}};
    if (ms_session_eval(s, t, n, NULL, &e)) fail_msg("%s", e.msg);
}

static int32_t argmax(const float *x, uint32_t n) {
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int32_t)b;
}

enum { N_GREEDY = 64 };

/* Greedy-decodes N_GREEDY tokens from s into out; copies the final logits. */
static void greedy(struct ms_session *s, uint32_t V, int32_t *out, float *final) {
    for (int i = 0; i < N_GREEDY; i++) {
        out[i] = argmax(ms_session_logits(s), V);
        eval(s, &out[i], 1);
    }
    memcpy(final, ms_session_logits(s), V * sizeof(float));
}

static int64_t restore(struct ms_kvstore *kv, struct ms_session *s, const char *text, size_t len) {
    struct ms_kv_restored r;
    ms_err e = {{0}};
    if (ms_kv_restore_prefix(kv, s, text, len, NULL, 0, &r, &e)) fail_msg("%s", e.msg);
    return r.n_tokens;
}

static void save(struct ms_kvstore *kv, struct ms_session *s, enum ms_kv_reason why) {
    ms_err e = {{0}};
    if (ms_kv_save(kv, s, why, &e)) fail_msg("%s", e.msg);
}

/* Restore points on and around every boundary of the tiny model. */
static const int64_t k_points[] = {3, 4, 5, 31, 32, 33, 127, 128, 129, 2047, 2048, 2049};
/* streaming changes only where expert weights come from: one point below,
 * on and above each boundary class, to keep the test short */
static const int64_t k_points_stream[] = {3, 33, 127, 128, 2048, 2049};
#define N_POINTS_MAX (sizeof k_points / sizeof k_points[0])
#define N_MAX 2049

static void restore_equals_run(int stream) {
    const int64_t *points = stream ? k_points_stream : k_points;
    const size_t N_POINTS = stream ? sizeof k_points_stream / sizeof k_points_stream[0]
                                   : N_POINTS_MAX;
    struct ms_engine *eng = load(g_tiny, stream);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    struct ms_kvstore *kv = open_store(eng, stream ? "eq_stream" : "eq_resident", NULL);
    int32_t *tok = malloc(N_MAX * sizeof *tok);
    text_tokens(eng, tok, N_MAX, 77);
    struct ms_session *a = new_session(eng), *b = new_session(eng);
    float *lg = malloc((size_t)V * 4 * 2 * N_POINTS_MAX);
    int32_t ref[N_POINTS_MAX][N_GREEDY], got[N_GREEDY];
    /* one prefill in pieces ending at each point: save there, and note the
     * uninterrupted run's logits and greedy continuation from there (a
     * snapshot brings the prefill back to the point to go on) */
    int64_t at = 0;
    for (size_t i = 0; i < N_POINTS; i++) {
        eval(a, tok + at, points[i] - at);
        at = points[i];
        save(kv, a, MS_KV_COLD);
        struct ms_snapshot *snap = ms_session_snapshot(a);
        assert_non_null(snap);
        float *li = lg + (size_t)V * 2 * i;
        memcpy(li, ms_session_logits(a), V * 4);
        greedy(a, V, ref[i], li + V);
        ms_err e = {{0}};
        if (ms_session_restore(a, snap, &e)) fail_msg("%s", e.msg);
        assert_int_equal(ms_session_n_past(a), at);
        assert_memory_equal(ms_session_logits(a), li, V * 4);
        ms_snapshot_free(snap);
    }
    for (size_t i = 0; i < N_POINTS; i++) {
        const int64_t m = points[i];
        const float *li = lg + (size_t)V * 2 * i;
        /* a fresh session restored from disk by the text of m tokens plus more */
        size_t len;
        char *text = text_of(eng, tok, N_MAX, &len);
        size_t mlen;
        char *mtext = text_of(eng, tok, m, &mlen);
        ms_session_reset(b);
        assert_int_equal(restore(kv, b, text, mlen), m);
        assert_int_equal(ms_session_n_past(b), m);
        assert_memory_equal(ms_session_logits(b), li, V * 4);
        float fin[4096];
        assert_true(V <= 4096);
        greedy(b, V, got, fin);
        assert_memory_equal(got, ref[i], sizeof got);
        assert_memory_equal(fin, li + V, V * 4);
        free(text);
        free(mtext);
    }
    /* the 2048 cold point: split prefill == one-call prefill, bit for bit */
    ms_session_reset(a);
    ms_session_reset(b);
    eval(a, tok, N_MAX);
    eval(b, tok, 2048);
    eval(b, tok + 2048, N_MAX - 2048);
    assert_memory_equal(ms_session_logits(a), ms_session_logits(b), V * 4);
    free(lg);
    free(tok);
    ms_session_free(a);
    ms_session_free(b);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

static void test_restore_equals_run_resident(void **state) {
    (void)state;
    restore_equals_run(MS_STREAM_OFF);
}

static void test_restore_equals_run_streaming(void **state) {
    (void)state;
    restore_equals_run(MS_STREAM_ON);
}

/* Snapshots are marks on the session's own history: a restore brings the
 * session back bit for bit (again after other tokens), and a snapshot is
 * refused, leaving the session as it was, once the session was reset,
 * restored to another mark, loaded from disk, or for another session. */
static void test_snapshot_marks(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    struct ms_kvstore *kv = open_store(eng, "marks", NULL);
    int32_t tok[400];
    text_tokens(eng, tok, 400, 11);
    struct ms_session *a = new_session(eng), *b = new_session(eng);
    float *l100 = malloc((size_t)V * 4), *l250 = malloc((size_t)V * 4);
    ms_err e = {{0}};
    /* past a ratio-128 row and many ratio-4 rows after the mark */
    eval(a, tok, 100);
    memcpy(l100, ms_session_logits(a), V * 4);
    struct ms_snapshot *m1 = ms_session_snapshot(a);
    assert_non_null(m1);
    eval(a, tok + 100, 150);
    memcpy(l250, ms_session_logits(a), V * 4);
    assert_true(ms_snapshot_valid(a, m1));
    if (ms_session_restore(a, m1, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ms_session_n_past(a), 100);
    assert_memory_equal(ms_session_logits(a), l100, V * 4);
    eval(a, tok + 100, 150);
    assert_memory_equal(ms_session_logits(a), l250, V * 4);
    eval(b, tok, 250); /* one call: the same logits */
    assert_memory_equal(ms_session_logits(b), l250, V * 4);
    /* other tokens after the mark, a second mark there, back to the first:
     * the second is stale, and refusing it changes nothing */
    if (ms_session_restore(a, m1, &e)) fail_msg("%s", e.msg);
    eval(a, tok + 300, 60);
    struct ms_snapshot *m2 = ms_session_snapshot(a);
    assert_non_null(m2);
    /* a refused eval (a token outside the vocabulary) keeps both valid */
    const int32_t bad = (int32_t)V;
    assert_int_equal(ms_session_eval(a, &bad, 1, NULL, &e), -1);
    assert_true(ms_snapshot_valid(a, m1) && ms_snapshot_valid(a, m2));
    if (ms_session_restore(a, m1, &e)) fail_msg("%s", e.msg);
    assert_false(ms_snapshot_valid(a, m2));
    assert_int_equal(ms_session_restore(a, m2, &e), -1);
    assert_non_null(strstr(e.msg, "stale"));
    assert_int_equal(ms_session_n_past(a), 100);
    assert_memory_equal(ms_session_logits(a), l100, V * 4);
    /* another session's mark */
    assert_false(ms_snapshot_valid(b, m1));
    assert_int_equal(ms_session_restore(b, m1, &e), -1);
    assert_int_equal(ms_session_n_past(b), 250);
    assert_memory_equal(ms_session_logits(b), l250, V * 4);
    /* a load from the disk KV cache, then a reset */
    eval(a, tok + 100, 150);
    save(kv, a, MS_KV_COLD);
    assert_true(ms_snapshot_valid(a, m1));
    size_t len;
    char *text = text_of(eng, tok, 250, &len);
    assert_int_equal(restore(kv, a, text, len), 250);
    assert_false(ms_snapshot_valid(a, m1));
    assert_int_equal(ms_session_restore(a, m1, &e), -1);
    assert_memory_equal(ms_session_logits(a), l250, V * 4);
    ms_snapshot_free(m2);
    m2 = ms_session_snapshot(a);
    ms_session_reset(a);
    assert_false(ms_snapshot_valid(a, m2));
    assert_int_equal(ms_session_restore(a, m2, &e), -1);
    assert_int_equal(ms_session_n_past(a), 0);
    free(text);
    free(l100);
    free(l250);
    ms_session_free(a);
    ms_session_free(b);
    ms_kv_close(kv);
    ms_engine_free(eng);
    /* snapshots may outlive their session and engine (ASan checks) */
    ms_snapshot_free(m1);
    ms_snapshot_free(m2);
}

/* A session's whole state as bytes (ms_session_state_save / _load, what
 * serve keeps in memory beside its live session): a load brings back the
 * saved session exactly (the same logits, the same continuation as one
 * uninterrupted eval), in another session too, and makes snapshots
 * stale; damaged, truncated or too long states are refused and leave the
 * session empty; an empty session has no state. */
static void test_state_bytes(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    int32_t tok[300];
    text_tokens(eng, tok, 300, 5);
    struct ms_session *a = new_session(eng), *b = new_session(eng), *ref = new_session(eng);
    ms_err e = {{0}};
    assert_int_equal(ms_session_state_bytes(a), 0);
    assert_int_equal(ms_session_state_save(a, &e, sizeof e, &e), -1);
    eval(a, tok, 170); /* past a ratio-128 row */
    const uint64_t n = ms_session_state_bytes(a);
    /* at least the KV state of 170 positions and the logits */
    assert_true(n >= ms_engine_kv_bytes(eng, 170) / 2 + (uint64_t)V * 4);
    uint8_t *buf = malloc(n + 1);
    assert_int_equal(ms_session_state_save(a, buf, n - 1, &e), -1);
    if (ms_session_state_save(a, buf, n, &e)) fail_msg("%s", e.msg);
    float *l170 = malloc((size_t)V * 4);
    memcpy(l170, ms_session_logits(a), V * 4);
    eval(ref, tok, 300);
    eval(a, tok + 170, 40);
    struct ms_snapshot *m = ms_session_snapshot(a);
    if (ms_session_state_load(a, buf, n, &e)) fail_msg("%s", e.msg);
    assert_false(ms_snapshot_valid(a, m));
    assert_int_equal(ms_session_n_past(a), 170);
    assert_memory_equal(ms_session_tokens(a), tok, 170 * sizeof *tok);
    assert_memory_equal(ms_session_logits(a), l170, V * 4);
    eval(a, tok + 170, 130);
    assert_memory_equal(ms_session_logits(a), ms_session_logits(ref), V * 4);
    if (ms_session_state_load(b, buf, n, &e)) fail_msg("%s", e.msg);
    eval(b, tok + 170, 130);
    assert_memory_equal(ms_session_logits(b), ms_session_logits(ref), V * 4);
    /* truncated, a damaged header, one byte too many, a short context */
    assert_int_equal(ms_session_state_load(b, buf, n - 1, &e), -1);
    assert_int_equal(ms_session_n_past(b), 0);
    eval(b, tok, 10);
    buf[0] ^= 0x40;
    assert_int_equal(ms_session_state_load(b, buf, n, &e), -1);
    assert_int_equal(ms_session_n_past(b), 0);
    buf[0] ^= 0x40;
    assert_int_equal(ms_session_state_load(b, buf, n + 1, &e), -1);
    struct ms_session *small = NULL;
    if (ms_session_new(&small, eng, 100, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ms_session_state_load(small, buf, n, &e), -1);
    assert_int_equal(ms_session_n_past(small), 0);
    ms_snapshot_free(m);
    free(buf);
    free(l170);
    ms_session_free(a);
    ms_session_free(b);
    ms_session_free(ref);
    ms_session_free(small);
    ms_engine_free(eng);
}

/* Whether the text of ids[0..n) ends where a character ends. */
static bool ends_char(struct ms_engine *eng, const int32_t *ids, int64_t n) {
    size_t len;
    char *t = text_of(eng, ids, n, &len);
    const bool ok = ms_utf8_partial_tail(t, len) == 0;
    free(t);
    return ok;
}

/* Byte-level BPE splits rare characters over byte tokens ("à" here is
 * two), so a checkpoint stop can fall inside one. The store cuts each
 * checkpoint where a character ends instead: a stop inside one moves back
 * (prefill) or waits for its end (generation), and a save there fails. A
 * prompt that goes on from such a checkpoint restores only whole
 * characters, so the rest tokenizes to the prompt's own text. */
static void test_utf8_cuts(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    const struct ms_tokenizer *tok = ms_engine_tokenizer(eng);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    char text[4096];
    size_t len = 0;
    for (int i = 0; i < 40; i++) len += (size_t)snprintf(text + len, sizeof text - len, "sea sky ");
    len += (size_t)snprintf(text + len, sizeof text - len, "ab Voil\xc3\xa0 le caf\xc3\xa9 \xc3\xa9t\xc3\xa9");
    int32_t *ids = NULL;
    size_t n = 0;
    ms_err e = {{0}};
    if (ms_tokenizer_encode(tok, text, len, false, false, &ids, &n, &e)) fail_msg("%s", e.msg);
    /* the first token that starts with a continuation byte: a cut before it
     * ends inside a character */
    int64_t p = -1;
    for (size_t i = 0; i < n && p < 0; i++) {
        const char *piece;
        size_t pl;
        ms_tokenizer_piece(tok, ids[i], true, &piece, &pl);
        if (pl && ((unsigned char)piece[0] >> 6) == 2) p = (int64_t)i;
    }
    assert_true(p > 8); /* the vocabulary splits "à": else the test means nothing */
    /* the clean cut before p, and the first after it */
    int64_t before = p - 1, after = p + 1;
    while (before > 0 && !ends_char(eng, ids, before)) before--;
    while (!ends_char(eng, ids, after)) after++;
    struct ms_kv_params kp = ms_kv_params_default(NULL);
    kp.min_tokens = 1;
    kp.align_tokens = 1;
    kp.interval_tokens = 0;
    kp.trim_tokens = (int64_t)n - p; /* the cold stop falls inside "à" */
    struct ms_kvstore *kv = open_store(eng, "utf8", &kp);
    struct ms_session *a = new_session(eng), *b = new_session(eng);
    /* a save inside the character: refused, nothing written */
    eval(a, ids, p);
    assert_int_equal(ms_kv_save(kv, a, MS_KV_EVICT, &e), -1);
    assert_non_null(strstr(e.msg, "inside a UTF-8 character"));
    assert_int_equal(ms_kv_get_stats(kv).saved_files, 0);
    /* a prefill: the cold checkpoint moves back to where "Voil" ends */
    ms_session_reset(a);
    if (ms_kv_prefill(kv, a, ids, (int64_t)n, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ms_kv_get_stats(kv).saved_files, 1);
    assert_int_equal(restore(kv, b, text, len), before);
    ms_session_reset(a);
    eval(a, ids, before);
    assert_memory_equal(ms_session_logits(b), ms_session_logits(a), V * 4);
    ms_kv_close(kv);
    /* generation token by token over an interval frontier inside the
     * character: the continued checkpoint waits for its end */
    kp.trim_tokens = (int64_t)n; /* no cold checkpoint */
    kp.interval_tokens = p;
    kv = open_store(eng, "utf8_gen", &kp);
    ms_session_reset(a);
    eval(a, ids, 1);
    for (int64_t i = 1; i < (int64_t)n; i++) {
        const int64_t n_before = ms_session_n_past(a);
        eval(a, ids + i, 1);
        ms_kv_after_eval(kv, a, n_before);
    }
    assert_int_equal(ms_kv_get_stats(kv).saved_files, 1);
    assert_int_equal(restore(kv, b, text, len), after);
    free(ids);
    ms_session_free(a);
    ms_session_free(b);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* A checkpoint whose text holds a control token is passed over for a
 * prompt where the same bytes are text a user typed (and used where they
 * are the control token). */
static void test_controls_by_text(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    const struct ms_tokenizer *tok = ms_engine_tokenizer(eng);
    struct ms_kv_params kp = ms_kv_params_default(NULL);
    kp.min_tokens = 1;
    struct ms_kvstore *kv = open_store(eng, "controls", &kp);
    const char text[] = "hello <\xef\xbd\x9c" "Assistant\xef\xbd\x9c> there, and more";
    const size_t len = sizeof text - 1;
    int32_t *sp = NULL, *pl = NULL;
    size_t nsp = 0, npl = 0;
    ms_err e = {{0}};
    if (ms_tokenizer_encode_flags(tok, text, len, MS_TOK_SPECIAL | MS_TOK_USER_DEFINED, &sp, &nsp, &e) ||
        ms_tokenizer_encode_flags(tok, text, len, MS_TOK_USER_DEFINED, &pl, &npl, &e))
        fail_msg("%s", e.msg);
    struct ms_session *s = new_session(eng);
    eval(s, sp, (int64_t)nsp);
    if (ms_kv_save(kv, s, MS_KV_EVICT, &e)) fail_msg("%s", e.msg);
    struct ms_kv_restored r;
    ms_session_reset(s);
    if (ms_kv_restore_prefix(kv, s, text, len, pl, (int64_t)npl, &r, &e)) fail_msg("%s", e.msg);
    assert_int_equal(r.n_tokens, 0);
    assert_int_equal(ms_session_n_past(s), 0);
    if (ms_kv_restore_prefix(kv, s, text, len, sp, (int64_t)nsp, &r, &e)) fail_msg("%s", e.msg);
    assert_int_equal(r.n_tokens, (int64_t)nsp);
    free(sp);
    free(pl);
    ms_session_free(s);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* Longest byte prefix wins; a shorter query never takes a longer file;
 * files 0600 in a 0700 directory. */
static void test_longest_prefix(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    struct ms_kvstore *kv = open_store(eng, "longest", NULL);
    int32_t tok[300];
    text_tokens(eng, tok, 300, 5);
    struct ms_session *s = new_session(eng);
    eval(s, tok, 100);
    save(kv, s, MS_KV_COLD);
    eval(s, tok + 100, 100);
    save(kv, s, MS_KV_CONTINUED);
    size_t l100, l200, l300;
    char *t100 = text_of(eng, tok, 100, &l100), *t200 = text_of(eng, tok, 200, &l200);
    char *t300 = text_of(eng, tok, 300, &l300);
    struct ms_session *r = new_session(eng);
    assert_int_equal(restore(kv, r, t300, l300), 200);
    assert_int_equal(restore(kv, r, t200, l200), 200);
    assert_int_equal(restore(kv, r, t200, l200 - 1), 100);
    assert_int_equal(restore(kv, r, t100, l100 - 1), 0);
    /* another prompt entirely */
    char other[] = "completely unrelated text";
    assert_int_equal(restore(kv, r, other, sizeof other - 1), 0);
    struct stat sb;
    assert_int_equal(stat(tmp_path("longest"), &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    DIR *d = opendir(tmp_path("longest"));
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", tmp_path("longest"), de->d_name);
        assert_int_equal(stat(p, &sb), 0);
        assert_int_equal(sb.st_mode & 0777, 0600);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 2);
    free(t100);
    free(t200);
    free(t300);
    ms_session_free(s);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* The path of the only *.kv file of text t in dir `name`. */
static void ckpt_path(struct ms_engine *eng, const char *name, const int32_t *t, int64_t n,
                      char *out, size_t cap) {
    DIR *d = opendir(tmp_path(name));
    struct dirent *de;
    size_t len;
    char *text = text_of(eng, t, n, &len);
    out[0] = 0;
    while ((de = readdir(d))) {
        if (strlen(de->d_name) != 43) continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", tmp_path(name), de->d_name);
        FILE *f = fopen(p, "rb");
        unsigned char h[128];
        if (f && fread(h, 1, 128, f) == 128) {
            uint64_t tl = 0;
            for (int i = 0; i < 8; i++) tl |= (uint64_t)h[40 + i] << (8 * i);
            if (tl == len) snprintf(out, cap, "%s", p);
        }
        if (f) fclose(f);
    }
    closedir(d);
    free(text);
    assert_true(out[0]);
}

static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *p, const unsigned char *b, size_t n) {
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Truncations and flipped bytes of the longer checkpoint B: never used (the
 * shorter A restores, with A's logits); a flip in the counters only resets
 * the counters. A foreign model's file is skipped. */
static void test_corrupt_files(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    struct ms_kvstore *kv = open_store(eng, "corrupt", NULL);
    int32_t tok[200];
    text_tokens(eng, tok, 200, 9);
    struct ms_session *s = new_session(eng), *r = new_session(eng);
    eval(s, tok, 60);
    save(kv, s, MS_KV_COLD);
    float *la = malloc(V * 4);
    memcpy(la, ms_session_logits(s), V * 4);
    eval(s, tok + 60, 140); /* B: 200 tokens, window and both ratios past */
    save(kv, s, MS_KV_CONTINUED);
    char pb[1400];
    ckpt_path(eng, "corrupt", tok, 200, pb, sizeof pb);
    size_t nb;
    unsigned char *good = slurp(pb, &nb);
    size_t len;
    char *text = text_of(eng, tok, 200, &len);
    /* offsets: inside the header, at its end, text, payload header, tokens,
     * logits, layer rows, the last byte */
    const size_t payload = 128 + len;
    const size_t cuts[] = {0,           1,          4,           64,          127,
                           128,         128 + 1,    payload,     payload + 20, payload + 48 + 64,
                           payload + 200, payload + 48 + 64 + 800 + 100, nb / 2, nb - 1000, nb - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spit(pb, good, cuts[i]);
        ms_session_reset(r);
        assert_int_equal(restore(kv, r, text, len), 60);
        assert_memory_equal(ms_session_logits(r), la, V * 4);
    }
    /* one byte too many */
    unsigned char *more = malloc(nb + 1);
    memcpy(more, good, nb);
    more[nb] = 0;
    spit(pb, more, nb + 1);
    assert_int_equal(restore(kv, r, text, len), 60);
    free(more);
    /* flipped bytes anywhere outside the counters (bytes 104..127) */
    const size_t flips[] = {0, 3, 5, 9, 17, 25, 33, 41, 49, 57, 70, 96, 100,
                            128, payload - 1, payload, payload + 8, payload + 30, payload + 44,
                            payload + 60, payload + 300, nb / 3, nb / 2, nb - 1};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        unsigned char *bad = malloc(nb);
        memcpy(bad, good, nb);
        bad[flips[i]] ^= 0x10;
        spit(pb, bad, nb);
        free(bad);
        ms_session_reset(r);
        assert_int_equal(restore(kv, r, text, len), 60);
        assert_memory_equal(ms_session_logits(r), la, V * 4);
    }
    /* counters: a flip there loads (they reset) */
    unsigned char *bad = malloc(nb);
    memcpy(bad, good, nb);
    bad[112] ^= 0xff;
    spit(pb, bad, nb);
    assert_int_equal(restore(kv, r, text, len), 200);
    /* the pristine file loads */
    spit(pb, good, nb);
    assert_int_equal(restore(kv, r, text, len), 200);
    assert_true(ms_kv_get_stats(kv).skipped_files >= 30);
    /* another model's store skips both as foreign */
    struct ms_engine *eng2 = load(g_other, MS_STREAM_OFF);
    struct ms_kvstore *kv2 = reopen(eng2, "corrupt", NULL);
    struct ms_session *r2 = new_session(eng2);
    assert_int_equal(restore(kv2, r2, text, len), 0);
    assert_int_equal(ms_kv_get_stats(kv2).skipped_files, 2);
    ms_session_free(r2);
    ms_kv_close(kv2);
    ms_engine_free(eng2);
    free(bad);
    free(good);
    free(text);
    free(la);
    ms_session_free(s);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

static int count_files(const char *name, const char *prefix) {
    DIR *d = opendir(tmp_path(name));
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

/* ENOSPC at several points of a save: a clean error, no temporary file,
 * the older checkpoint of the same text still loads with its logits. */
static void test_enospc(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    struct ms_kvstore *kv = open_store(eng, "enospc", NULL);
    int32_t tok[150];
    text_tokens(eng, tok, 150, 11);
    struct ms_session *s = new_session(eng), *r = new_session(eng);
    eval(s, tok, 150);
    save(kv, s, MS_KV_COLD);
    float *lg = malloc(V * 4);
    memcpy(lg, ms_session_logits(s), V * 4);
    size_t len;
    char *text = text_of(eng, tok, 150, &len);
    const uint64_t at[] = {1, 100, 128, 1000, 50000, 200000};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        ms_kv_test_faults(kv, at[i], ENOSPC, 0);
        ms_err e = {{0}};
        assert_int_equal(ms_kv_save(kv, s, MS_KV_SHUTDOWN, &e), -1);
        assert_non_null(strstr(e.msg, "No space"));
        assert_int_equal(count_files("enospc", ".tmp"), 0);
        assert_int_equal(count_files("enospc", ""), 3); /* ., .., the checkpoint */
    }
    ms_kv_test_faults(kv, 0, 0, 0);
    assert_int_equal(restore(kv, r, text, len), 150);
    assert_memory_equal(ms_session_logits(r), lg, V * 4);
    /* a new text's save fails too: nothing of it remains */
    eval(s, tok, 1);
    ms_kv_test_faults(kv, 5000, ENOSPC, 0);
    ms_err e = {{0}};
    assert_int_equal(ms_kv_save(kv, s, MS_KV_COLD, &e), -1);
    assert_int_equal(count_files("enospc", ""), 3);
    free(lg);
    free(text);
    ms_session_free(s);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* kill -9 in the middle of a save: the half-written temporary file is never
 * read, the previous checkpoint loads, the next open removes the leftover. */
static void test_kill9(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    struct ms_kvstore *kv = open_store(eng, "kill9", NULL);
    int32_t tok[150];
    text_tokens(eng, tok, 150, 13);
    struct ms_session *s = new_session(eng), *r = new_session(eng);
    eval(s, tok, 150);
    save(kv, s, MS_KV_COLD);
    float *lg = malloc(V * 4);
    memcpy(lg, ms_session_logits(s), V * 4);
    size_t len;
    char *text = text_of(eng, tok, 150, &len);
    const uint64_t at[] = {10, 129, 40000};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        fflush(NULL);
        const pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) { /* the writer: same text, killed half way */
            ms_kv_test_faults(kv, 0, 0, at[i]);
            ms_err e;
            ms_kv_save(kv, s, MS_KV_SHUTDOWN, &e);
            _exit(3); /* not reached */
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        assert_int_equal(count_files("kill9", ".tmp"), 1);
        ms_session_reset(r);
        assert_int_equal(restore(kv, r, text, len), 150);
        assert_memory_equal(ms_session_logits(r), lg, V * 4);
        struct ms_kvstore *kv2 = reopen(eng, "kill9", NULL); /* cleans the leftover */
        assert_int_equal(count_files("kill9", ".tmp"), 0);
        ms_kv_close(kv2);
    }
    free(lg);
    free(text);
    ms_session_free(s);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* The budget evicts by score after a save, never on load, never the
 * checkpoint restored last (a deep restore is not single-use); a checkpoint
 * larger than the whole budget is not written. */
static void test_budget(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    struct ms_kv_params p = ms_kv_params_default(NULL);
    struct ms_kvstore *kv = open_store(eng, "budget", &p);
    int32_t tok[400];
    text_tokens(eng, tok, 400, 17);
    struct ms_session *s = new_session(eng), *r = new_session(eng);
    eval(s, tok, 300); /* the deep one */
    save(kv, s, MS_KV_COLD);
    ms_session_reset(s);
    uint64_t one = 0;
    {
        char pth[1400];
        ckpt_path(eng, "budget", tok, 300, pth, sizeof pth);
        struct stat sb;
        stat(pth, &sb);
        one = (uint64_t)sb.st_size;
    }
    ms_kv_close(kv);
    /* budget: about two deep checkpoints */
    p.budget_bytes = 2 * one + one / 2;
    kv = reopen(eng, "budget", &p);
    size_t l300;
    char *t300 = text_of(eng, tok, 300, &l300);
    for (int k = 0; k < 3; k++) { /* loading never deletes */
        assert_int_equal(restore(kv, r, t300, l300), 300);
        assert_int_equal(count_files("budget", ""), 3);
    }
    /* other prompts' checkpoints: the restored one stays */
    for (int k = 0; k < 4; k++) {
        int32_t other[300];
        text_tokens(eng, other, 300, 100 + (uint64_t)k);
        ms_session_reset(s);
        eval(s, other, 300);
        save(kv, s, MS_KV_CONTINUED);
    }
    assert_true(count_files("budget", "") - 2 <= 2);
    assert_true(ms_kv_get_stats(kv).evicted_files >= 3);
    assert_int_equal(restore(kv, r, t300, l300), 300);
    ms_kv_close(kv);
    /* a checkpoint larger than the whole budget is not written at all */
    p.budget_bytes = one / 2;
    kv = reopen(eng, "budget", &p);
    const int files = count_files("budget", "");
    ms_session_reset(s);
    eval(s, tok + 50, 300);
    ms_err e = {{0}};
    assert_int_equal(ms_kv_save(kv, s, MS_KV_COLD, &e), -1);
    assert_non_null(strstr(e.msg, "more than the whole budget"));
    assert_int_equal(ms_kv_get_stats(kv).saved_files, 0);
    assert_int_equal(count_files("budget", ""), files);
    free(t300);
    ms_session_free(s);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* What a progress function saw: calls, the last done, every total equal,
 * done growing. */
struct seen_progress {
    int calls;
    int64_t done, total;
    bool ok;
};

static bool see_progress(void *ctx, int64_t done, int64_t total) {
    struct seen_progress *p = ctx;
    if (p->calls++ && (total != p->total || done <= p->done)) p->ok = false;
    p->done = done;
    p->total = total;
    return true;
}

/* A restored unaligned checkpoint prefilled in chunks writes a continued
 * checkpoint when a frontier is crossed (ms_kv_after_eval), and
 * ms_kv_prefill stops on the frontier itself; cold saves trim and align; a
 * progress function on the session sees its pieces as one evaluation. */
static void test_frontiers(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    struct ms_kv_params p = ms_kv_params_default(NULL);
    p.min_tokens = 16;
    p.interval_tokens = 64;
    p.align_tokens = 32;
    struct ms_kvstore *kv = open_store(eng, "frontier", &p);
    assert_int_equal(ms_kv_cold_len(kv, 300), 256); /* 300 - 32 = 268 -> 256 */
    assert_int_equal(ms_kv_cold_len(kv, 40), 0);    /* 8 < min 16 */
    int32_t tok[400];
    text_tokens(eng, tok, 400, 19);
    struct ms_session *s = new_session(eng), *r = new_session(eng);
    eval(s, tok, 97);
    save(kv, s, MS_KV_COLD);
    size_t len;
    char *text = text_of(eng, tok, 400, &len);
    assert_int_equal(restore(kv, r, text, len), 97);
    const int64_t saved0 = ms_kv_get_stats(kv).saved_files;
    /* chunks of 7 from 97: 97 + 5 * 7 = 132 crosses 128 */
    for (int64_t at = 97; at < 160; at += 7) {
        eval(r, tok + at, 7);
        ms_kv_after_eval(kv, r, at);
    }
    assert_int_equal(ms_kv_get_stats(kv).saved_files, saved0 + 1);
    struct ms_session *q = new_session(eng);
    assert_int_equal(restore(kv, q, text, len), 132);
    /* ms_kv_prefill from 132 to 400: cold at 400-32=368 -> 352, frontiers
     * 192, 256, 320, 384 */
    ms_err e = {{0}};
    struct seen_progress sp = {.ok = true};
    ms_session_set_progress(q, see_progress, &sp);
    if (ms_kv_prefill(kv, q, tok + 132, 400 - 132, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ms_kv_get_stats(kv).saved_files, saved0 + 1 + 5);
    const int64_t n_layer = ms_engine_info(eng).n_layer;
    assert_true(sp.ok);
    assert_int_equal(sp.calls, n_layer); /* one pass: the stops are captured in it */
    assert_int_equal(sp.total, (400 - 132) * n_layer);
    assert_int_equal(sp.done, sp.total);
    /* the session's own function is back: one more token, one more call */
    eval(q, tok, 1);
    assert_int_equal(sp.calls, 2 * n_layer);
    ms_session_set_progress(q, NULL, NULL);
    size_t l;
    char *t;
    const int64_t depths[] = {192, 256, 320, 352, 384};
    for (size_t i = 0; i < 5; i++) {
        t = text_of(eng, tok, depths[i], &l);
        assert_int_equal(restore(kv, r, t, l), depths[i]);
        free(t);
    }
    free(text);
    ms_session_free(s);
    ms_session_free(r);
    ms_session_free(q);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* How test_prefill_one_pass runs the model. */
enum prefill_mode { PM_RESIDENT, PM_WHOLE_LAYERS, PM_SPANS };

/* ms_kv_prefill of a 1100-token prompt keeps its checkpoints (continued at
 * 256, 512, 768, 1024, cold at 1100 - 37 = 1063: inside ubatches, spans
 * and compressor blocks) from one pass: each restores to the logits of a
 * prefill that stopped there, bit for bit, and continues as it would; the
 * prompt's own logits are those of a plain eval; streamed, the routed
 * weights are read once. */
static void prefill_one_pass(enum prefill_mode mode) {
    struct ms_engine_params ep = ms_engine_params_default(g_tiny);
    ep.n_threads = 1;
    ep.stream = mode == PM_RESIDENT ? MS_STREAM_OFF : MS_STREAM_ON;
    if (mode == PM_SPANS) { /* a cache of 4 experts, never whole layers: spans */
        ep.cache_experts = 4;
        ep.whole_layer_min_tokens = -1;
    }
    ms_err e = {{0}};
    struct ms_engine *eng = NULL;
    if (ms_engine_load(&eng, &ep, &e)) fail_msg("%s", e.msg);
    struct ms_kv_params p = ms_kv_params_default(NULL);
    p.min_tokens = 16;
    p.interval_tokens = 256;
    p.align_tokens = 1;
    p.trim_tokens = 37;
    struct ms_kvstore *kv = open_store(eng, "onepass", &p);
    enum { N = 1100, N_STOPS = 5, N_MORE = 8 };
    const int64_t stops[N_STOPS] = {256, 512, 768, 1024, 1063};
    const uint32_t V = ms_engine_info(eng).n_vocab;
    int32_t tok[N];
    text_tokens(eng, tok, N, 41);
    struct ms_session *s = new_session(eng), *d = new_session(eng), *r = new_session(eng);
    const struct ms_stream_stats st0 = ms_engine_stream_stats(eng);
    if (ms_kv_prefill(kv, s, tok, N, &e)) fail_msg("%s", e.msg);
    const struct ms_stream_stats st1 = ms_engine_stream_stats(eng);
    assert_int_equal(ms_kv_get_stats(kv).saved_files, N_STOPS);
    assert_int_equal(ms_kv_get_stats(kv).saved_by_reason[MS_KV_COLD], 1);
    eval(d, tok, N);
    const struct ms_stream_stats st2 = ms_engine_stream_stats(eng);
    assert_memory_equal(ms_session_logits(s), ms_session_logits(d), V * 4);
    if (mode != PM_RESIDENT) { /* the plain eval's reads, not one more pass per stop */
        const double routed = (double)ms_engine_info(eng).routed_bytes;
        const double kv_passes = (double)(st1.bytes_read - st0.bytes_read) / routed;
        const double plain = (double)(st2.bytes_read - st1.bytes_read) / routed;
        print_message("mode %d: %.3f passes over the routed weights, %.3f without the "
                      "checkpoints\n", (int)mode, kv_passes, plain);
        assert_true(plain >= 0.95 && kv_passes <= plain * 1.02);
    }
    float *want = malloc((size_t)V * 4), *got = malloc((size_t)V * 4);
    int32_t wt[N_MORE], gt[N_MORE];
    for (int i = 0; i < N_STOPS; i++) {
        size_t len;
        char *text = text_of(eng, tok, stops[i], &len);
        ms_session_reset(d);
        eval(d, tok, stops[i]);
        assert_int_equal(restore(kv, r, text, len), stops[i]);
        assert_memory_equal(ms_session_logits(r), ms_session_logits(d), V * 4);
        for (int j = 0; j < N_MORE; j++) { /* both continue alike */
            wt[j] = argmax(ms_session_logits(d), V);
            gt[j] = argmax(ms_session_logits(r), V);
            eval(d, &wt[j], 1);
            eval(r, &gt[j], 1);
        }
        assert_memory_equal(gt, wt, sizeof wt);
        memcpy(want, ms_session_logits(d), (size_t)V * 4);
        memcpy(got, ms_session_logits(r), (size_t)V * 4);
        assert_memory_equal(got, want, (size_t)V * 4);
        free(text);
    }
    free(want);
    free(got);
    ms_session_free(s);
    ms_session_free(d);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

static void test_prefill_one_pass_resident(void **state) {
    (void)state;
    prefill_one_pass(PM_RESIDENT);
}
static void test_prefill_one_pass_whole_layers(void **state) {
    (void)state;
    prefill_one_pass(PM_WHOLE_LAYERS);
}
static void test_prefill_one_pass_spans(void **state) {
    (void)state;
    prefill_one_pass(PM_SPANS);
}

/* More stops than one eval captures (25 at an interval of 16 over 400
 * tokens, DSV4_CAPTURE_MAX 16): the prefill ends its first eval at the
 * 17th stop (16 captured, the 17th its end) and goes on; every checkpoint
 * is written and restores to the logits of a prefill that stopped there. */
static void test_prefill_many_stops(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    struct ms_kv_params p = ms_kv_params_default(NULL);
    p.min_tokens = 16;
    p.interval_tokens = 16;
    p.align_tokens = 1;
    p.trim_tokens = 0;
    p.budget_bytes = 1ull << 32;
    struct ms_kvstore *kv = open_store(eng, "manystops", &p);
    enum { N = 400 };
    int32_t tok[N];
    text_tokens(eng, tok, N, 43);
    struct ms_session *s = new_session(eng), *d = new_session(eng), *r = new_session(eng);
    struct seen_progress sp = {.ok = true};
    ms_session_set_progress(s, see_progress, &sp);
    ms_err e = {{0}};
    if (ms_kv_prefill(kv, s, tok, N, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ms_kv_get_stats(kv).saved_files, N / 16);
    /* evals to 272 (17 stops) and 400 (the last 8) */
    assert_int_equal(sp.calls, 2 * (int)ms_engine_info(eng).n_layer);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    const int64_t depths[] = {16, 256, 272, 288, 400};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
        size_t len;
        char *text = text_of(eng, tok, depths[i], &len);
        ms_session_reset(d);
        eval(d, tok, depths[i]);
        assert_int_equal(restore(kv, r, text, len), depths[i]);
        assert_memory_equal(ms_session_logits(r), ms_session_logits(d), V * 4);
        free(text);
    }
    ms_session_free(s);
    ms_session_free(d);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* The memory plan counts the states a caller keeps beside its session: a
 * snapshot is a copy of n_ctx positions' state, and a disk KV cache's
 * prefill holds a capture per stop a prompt of n_ctx tokens can have (its
 * interval frontiers and the cold one), at most DSV4_CAPTURE_MAX. */
static void test_plan_kept_states(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    struct ms_engine_params p = ms_engine_params_default(g_tiny);
    p.n_ctx = 4096;
    p.mem_bytes = 8ull << 30;
    struct ms_plan base, snap, cap;
    char line[512];
    ms_err e = {{0}};
    if (ms_engine_plan(&p, &base, line, sizeof line, &e)) fail_msg("%s", e.msg);
    p.n_snapshots = 1;
    if (ms_engine_plan(&p, &snap, line, sizeof line, &e)) fail_msg("%s", e.msg);
    p.kv_captures = true;
    p.kv_interval = 1024;
    if (ms_engine_plan(&p, &cap, line, sizeof line, &e)) fail_msg("%s", e.msg);
    /* a snapshot: a capture's copies, whatever the length (it shares the
     * session's compressed rows) */
    const uint64_t one = dsv4_capture_bytes(ms_engine_model(eng));
    assert_int_equal(snap.kv_bytes - base.kv_bytes, dsv4_snapshot_bytes(ms_engine_model(eng)));
    assert_int_equal(dsv4_snapshot_bytes(ms_engine_model(eng)), one);
    assert_int_equal(cap.kv_bytes - snap.kv_bytes, (4096 / 1024 + 1) * one);
    p.kv_interval = 16; /* 257 stops: the cap */
    struct ms_plan many;
    if (ms_engine_plan(&p, &many, line, sizeof line, &e)) fail_msg("%s", e.msg);
    assert_int_equal(many.kv_bytes - snap.kv_bytes, DSV4_CAPTURE_MAX * one);
    /* kept session states: planned as given, or fitted (a tenth of the
     * usable memory at most, halved while the plan does not fit) */
    struct ms_engine_params k = ms_engine_params_default(g_tiny);
    k.n_ctx = 4096;
    k.mem_bytes = 8ull << 30;
    k.kept_state_bytes = 1ull << 30;
    struct ms_plan kp;
    if (ms_engine_plan(&k, &kp, line, sizeof line, &e)) fail_msg("%s", e.msg);
    assert_int_equal(kp.kept_state_bytes, 1ull << 30);
    assert_int_equal(kp.kv_bytes - base.kv_bytes, 1ull << 30);
    k.mem_bytes = 1ull << 30; /* usable 0.8 GiB: 1 GiB cannot fit */
    assert_int_equal(ms_engine_plan(&k, &kp, line, sizeof line, &e), -1);
    k.kept_state_fit = true;
    if (ms_engine_plan(&k, &kp, line, sizeof line, &e)) fail_msg("%s", e.msg);
    assert_true(kp.kept_state_bytes > 0 && kp.kept_state_bytes <= kp.usable_bytes / 10);
    /* a capture: every layer's ring (window 32 x head 128 here) at least */
    assert_true(dsv4_capture_bytes(ms_engine_model(eng)) >=
                (uint64_t)ms_engine_info(eng).n_layer * 32 * 128 * 4);
    ms_engine_free(eng);
}

/* Two conversations in one process: the second one's shutdown checkpoint
 * is found after a restart. */
static void test_two_conversations(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    struct ms_kvstore *kv = open_store(eng, "twoconv", NULL);
    int32_t a[120], b[140];
    text_tokens(eng, a, 120, 31);
    text_tokens(eng, b, 140, 32);
    struct ms_session *s = new_session(eng);
    eval(s, a, 100);
    save(kv, s, MS_KV_EVICT); /* replaced by the second conversation */
    ms_session_reset(s);
    eval(s, b, 130);
    save(kv, s, MS_KV_SHUTDOWN);
    ms_kv_close(kv);
    kv = reopen(eng, "twoconv", NULL);
    struct ms_session *r = new_session(eng);
    size_t la, lb;
    char *ta = text_of(eng, a, 120, &la), *tb = text_of(eng, b, 140, &lb);
    assert_int_equal(restore(kv, r, tb, lb), 130);
    assert_int_equal(restore(kv, r, ta, la), 100);
    free(ta);
    free(tb);
    ms_session_free(s);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* A checkpoint whose ids differ from the canonical tokenization restores
 * once (recorded), and is dropped the second time at the same depth. */
static void test_mismatch_dropped(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    struct ms_kvstore *kv = open_store(eng, "mismatch", NULL);
    int32_t tok[100], canon[100];
    text_tokens(eng, tok, 100, 41);
    memcpy(canon, tok, sizeof tok);
    canon[70] = tok[70] == 5 ? 6 : 5; /* the canonical ids differ at depth 70 */
    struct ms_session *s = new_session(eng), *r = new_session(eng);
    eval(s, tok, 40);
    save(kv, s, MS_KV_COLD);
    eval(s, tok + 40, 60);
    save(kv, s, MS_KV_COLD);
    size_t len;
    char *text = text_of(eng, tok, 100, &len);
    struct ms_kv_restored res;
    ms_err e = {{0}};
    assert_int_equal(ms_kv_restore_prefix(kv, r, text, len, canon, 100, &res, &e), 0);
    assert_int_equal(res.n_tokens, 100);
    assert_true(res.mismatch);
    assert_int_equal(ms_kv_restore_prefix(kv, r, text, len, canon, 100, &res, &e), 0);
    assert_int_equal(res.n_tokens, 40); /* the 100-token file is gone */
    assert_false(res.mismatch);
    assert_int_equal(count_files("mismatch", ""), 3);
    /* the matching canonical tokens never count as a mismatch */
    assert_int_equal(ms_kv_restore_prefix(kv, r, text, len, tok, 100, &res, &e), 0);
    assert_int_equal(ms_kv_restore_prefix(kv, r, text, len, tok, 100, &res, &e), 0);
    assert_int_equal(res.n_tokens, 40);
    free(text);
    ms_session_free(s);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

/* Named checkpoints: aux bytes and text round-trip; bad names are errors. */
static void test_named(void **state) {
    (void)state;
    struct ms_engine *eng = load(g_tiny, MS_STREAM_OFF);
    const uint32_t V = ms_engine_info(eng).n_vocab;
    struct ms_kvstore *kv = open_store(eng, "named", NULL);
    int32_t tok[50];
    text_tokens(eng, tok, 50, 51);
    struct ms_session *s = new_session(eng), *r = new_session(eng);
    eval(s, tok, 50);
    ms_err e = {{0}};
    const char aux[] = "messages\0with a nul";
    assert_int_equal(ms_kv_save_named(kv, s, "my-chat_1", aux, sizeof aux, &e), 0);
    assert_int_equal(ms_kv_save_named(kv, s, "../x", aux, sizeof aux, &e), -1);
    assert_int_equal(ms_kv_save_named(kv, s, ".hidden", NULL, 0, &e), -1);
    char *text = NULL;
    void *a = NULL;
    size_t tl = 0, al = 0;
    assert_int_equal(ms_kv_load_named(kv, r, "my-chat_1", &text, &tl, &a, &al, &e), 0);
    assert_int_equal(al, sizeof aux);
    assert_memory_equal(a, aux, sizeof aux);
    size_t len;
    char *want = text_of(eng, tok, 50, &len);
    assert_int_equal(tl, len);
    assert_memory_equal(text, want, len);
    assert_int_equal(ms_session_n_past(r), 50);
    assert_memory_equal(ms_session_logits(r), ms_session_logits(s), V * 4);
    assert_int_equal(ms_kv_load_named(kv, r, "missing", &text, &tl, &a, &al, &e), -1);
    /* named files are outside the prefix lookup */
    assert_int_equal(restore(kv, r, want, len), 0);
    free(text);
    free(a);
    free(want);
    ms_session_free(s);
    ms_session_free(r);
    ms_kv_close(kv);
    ms_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_marks),
        cmocka_unit_test(test_state_bytes),
        cmocka_unit_test(test_utf8_cuts),
        cmocka_unit_test(test_controls_by_text),
        cmocka_unit_test(test_longest_prefix),
        cmocka_unit_test(test_corrupt_files),
        cmocka_unit_test(test_enospc),
        cmocka_unit_test(test_kill9),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_frontiers),
        cmocka_unit_test(test_prefill_one_pass_resident),
        cmocka_unit_test(test_prefill_one_pass_whole_layers),
        cmocka_unit_test(test_prefill_one_pass_spans),
        cmocka_unit_test(test_prefill_many_stops),
        cmocka_unit_test(test_plan_kept_states),
        cmocka_unit_test(test_two_conversations),
        cmocka_unit_test(test_mismatch_dropped),
        cmocka_unit_test(test_named),
        cmocka_unit_test(test_restore_equals_run_resident),
        cmocka_unit_test(test_restore_equals_run_streaming),
    };
    const char *only = getenv("MS_TEST_FILTER"); /* e.g. "test_budget" */
    if (only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, setup, NULL);
}
