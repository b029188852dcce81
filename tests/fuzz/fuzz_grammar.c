/*
 * fuzz_grammar.c - libFuzzer harness for structured output: the GBNF parser
 * and matcher (text/grammar.h) and the JSON Schema converter
 * (text/json_schema.h), and the tool-call grammar (text/dsml_grammar.h).
 * The input is a split byte, a source, a NUL byte, then a text. A source
 * starting with '{' or 't'/'f' (true/false) is a JSON Schema, one starting
 * with '[' a tools array (OpenAI chat's shape), one starting with "%lark\n" a
 * Lark grammar (text/lark.h); else it is GBNF.
 * Invariants checked (abort on a violation, so libFuzzer reports it):
 *   - every grammar the converters write parses (they never emit left
 *     recursion, bad escapes or undefined rules);
 *   - a text the tool-call grammar accepts whole is a block the DSML
 *     parser reads without an error;
 *   - feeding the text in two pieces, split where the input says, accepts
 *     exactly what feeding it whole accepts, and leaves the same answer to
 *     "complete";
 *   - a refused piece leaves the matcher unchanged: feeding the rest after
 *     a refusal gives what feeding it to a fresh matcher gives.
 * Parse errors and "too ambiguous" are fine (clear errors, not crashes).
 * Build: make fuzz-grammar (clang -fsanitize=fuzzer,address,undefined);
 * seeds: tests/fuzz/corpus_grammar/.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/dsml.h"
#include "text/dsml_grammar.h"
#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/lark.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 1 accepted whole, 0 refused, -1 error; *complete after it. */
static int feed(const struct ms_grammar *g, const char *t, size_t n, size_t split, bool *complete) {
    struct ms_grammar_matcher *m;
    ms_err err;
    if (ms_grammar_matcher_new(&m, g, &err)) return -1;
    int rc = ms_grammar_matcher_accept(m, t, split, &err);
    if (rc == 1) rc = ms_grammar_matcher_accept(m, t + split, n - split, &err);
    *complete = rc == 1 && ms_grammar_matcher_complete(m);
    if (rc == 1 && ms_grammar_matcher_complete(m) == false && ms_grammar_matcher_can_continue(m) == false) {
        fprintf(stderr, "the matcher took the text (split at %zu) but can neither end nor go on\n", split);
        abort();
    }
    ms_grammar_matcher_free(m);
    return rc;
}

static void on_dsml(void *ctx, const struct ms_dsml_ev *ev) {
    int *bad = ctx;
    if (ev->type == MS_DSML_EV_ERROR) *bad = 1;
    if (ev->type == MS_DSML_EV_TOOLS_END) *bad = *bad ? *bad : -1;
}

/* A tool-call block the grammar took whole must parse. */
static void check_block(const char *t, size_t n) {
    struct ms_dsml p;
    int state = 0; /* 0 no end yet, -1 ended well, 1 an error */
    ms_dsml_init(&p, false, on_dsml, &state);
    ms_dsml_feed(&p, t, n);
    ms_dsml_finish(&p);
    ms_dsml_free(&p);
    if (state != -1) {
        fprintf(stderr, "the tool-call grammar took a block the parser refuses:\n%.*s\n", (int)n, t);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const uint8_t split_byte = data[0];
    const char *src = (const char *)data + 1;
    const char *nul = memchr(src, '\0', size - 1);
    const size_t src_len = nul ? (size_t)(nul - src) : size - 1;
    const char *text = nul ? nul + 1 : "";
    const size_t text_len = nul ? size - 1 - src_len - 1 : 0;
    if (text_len > 4096) return 0; /* long texts only slow the search down */

    struct ms_buf gbnf = {0};
    ms_err err;
    bool is_schema = src_len > 0 && (src[0] == '{' || src[0] == 't' || src[0] == 'f');
    const bool is_tools = src_len > 0 && src[0] == '[';
    const bool is_lark = src_len >= 6 && !memcmp(src, "%lark\n", 6);
    if (is_lark) {
        if (ms_lark_gbnf(src + 6, src_len - 6, "lk_", 0xFF5C, &gbnf, &err)) return 0;
        is_schema = true; /* a converter's grammar: it must parse */
    } else if (is_tools) {
        json_t *tools = json_loadb(src, src_len, 0, NULL);
        if (!tools) return 0;
        const int rc = ms_dsml_tools_grammar(tools, NULL, src_len % 2 == 0, &gbnf, NULL, NULL, &err);
        json_decref(tools);
        if (rc) return 0;
        is_schema = true; /* a converter's grammar: it must parse */
    } else if (is_schema) {
        json_t *schema = json_loadb(src, src_len, JSON_DECODE_ANY, NULL);
        if (!schema) return 0;
        const int rc = ms_json_schema_grammar(schema, &gbnf, NULL, NULL, &err);
        json_decref(schema);
        if (rc) return 0;
    } else if (ms_buf_put(&gbnf, src, src_len)) {
        return 0;
    }
    struct ms_grammar *g = NULL;
    if (ms_grammar_parse_root(&g, gbnf.p ? gbnf.p : "", gbnf.len, is_tools ? MS_DSML_GRAMMAR_ROOT : is_lark ? "lk_start" : "root", &err)) {
        if (is_schema && !strstr(err.msg, "out of memory")) {
            fprintf(stderr, "the converter's grammar does not parse: %s\n%s\n", err.msg, gbnf.p);
            abort();
        }
        ms_buf_free(&gbnf);
        return 0;
    }
    ms_buf_free(&gbnf);
    bool c_whole, c_split;
    const int whole = feed(g, text, text_len, 0, &c_whole);
    const int split = feed(g, text, text_len, text_len ? split_byte % (text_len + 1) : 0, &c_split);
    if (whole >= 0 && split >= 0 && (whole != split || c_whole != c_split)) {
        fprintf(stderr, "whole %d/%d, split %d/%d\n", whole, c_whole, split, c_split);
        abort();
    }
    if (is_tools && whole == 1 && c_whole) check_block(text, text_len);
    /* a refusal changes nothing: refuse a byte, then feed the text */
    struct ms_grammar_matcher *m;
    if (whole >= 0 && !ms_grammar_matcher_new(&m, g, &err)) {
        const char bad = '\x80'; /* never valid UTF-8 on its own */
        const int bad_rc = ms_grammar_matcher_accept(m, &bad, 1, &err);
        if (bad_rc != 0) {
            fprintf(stderr, "a lone 0x80 byte gave %d, not a refusal (%s)\n", bad_rc, bad_rc < 0 ? err.msg : "taken");
            abort();
        }
        const int again = ms_grammar_matcher_accept(m, text, text_len, &err);
        if (again >= 0 && (again != whole || (again == 1 && ms_grammar_matcher_complete(m) != c_whole))) {
            fprintf(stderr, "after a refused byte: %d/%d, fresh: %d/%d\n", again,
                    again == 1 && ms_grammar_matcher_complete(m), whole, c_whole);
            abort();
        }
        ms_grammar_matcher_free(m);
    }
    ms_grammar_free(g);
    return 0;
}
