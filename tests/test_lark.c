/*
 * test_lark.c - src/text/lark.c (Lark grammars as GBNF) and the raw-text
 * mode of the regex converter (ms_regex_gbnf), run by text/grammar.h's
 * matcher.
 *
 *   - a patch format written in Lark (rules, literals, regexes, groups,
 *     optional and repeated items, aliases, comments, continuation lines,
 *     %import common.LF) on patches that must and must not match;
 *   - ranges, ~ counts, [optional], the common terminals (NUMBER,
 *     ESCAPED_STRING, CNAME, WS_INLINE, NEWLINE) on texts each way;
 *   - what lark.h refuses is an error naming the line, out untouched;
 *   - raw regexes against PCRE2 (anchored at both ends) on every string
 *     over a small alphabet up to length 4, that alphabet holding '"', '\'
 *     and a newline, so no JSON escaping leaks in; the excluded character
 *     is in no class and "." is anything but a newline.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/lark.h"

static struct ms_grammar *lark(const char *src) {
    struct ms_buf b = {0};
    ms_err err;
    if (ms_lark_gbnf(src, strlen(src), "lk_", 0, &b, &err)) fail_msg("lark: %s\n%s", err.msg, src);
    struct ms_grammar *g = NULL;
    if (ms_grammar_parse_root(&g, b.p, b.len, "lk_start", &err)) fail_msg("gbnf: %s\n%s", err.msg, b.p);
    ms_buf_free(&b);
    return g;
}

static void expect(const struct ms_grammar *g, const char *text, int want) {
    ms_err err;
    const int got = ms_grammar_match(g, text, strlen(text), &err);
    if (got != want) fail_msg("expected %s: %s", want ? "a match" : "no match", text);
}

/* A patch format of the kind coding agents' edit tools take. */
static const char PATCH[] =
    "// a patch: files added, removed or changed\n"
    "start: \"% begin\" LF section+ \"% end\" LF?\n"
    "section: added | removed\n"
    "       | changed   # continuation line\n"
    "added: \"% add \" path LF (\"+\" /(.*)/ LF)+ -> add\n"
    "removed: \"% remove \" path LF\n"
    "changed: \"% change \" path LF [\"% rename \" path LF] hunk*\n"
    "hunk: (\"@@\" | \"@@ \" /(.+)/) LF line+\n"
    "?line: (\"+\" | \"-\" | \" \") /[^\\n]*/ LF\n"
    "path: /[^\\s]+/\n"
    "%import common.LF\n";

static void test_patch(void **state) {
    (void)state;
    struct ms_grammar *g = lark(PATCH);
    expect(g, "% begin\n% add a.txt\n+hello\n+\n% end\n", 1);
    expect(g, "% begin\n% remove b/c.c\n% end", 1);
    expect(g, "% begin\n% change x.c\n% rename y.c\n@@\n-old\n+new\n  ctx\n@@ fn()\n x\n% end\n", 1);
    expect(g, "% begin\n% change x.c\n% end\n", 1);
    expect(g, "% begin\n% end\n", 0);                    /* no section */
    expect(g, "% begin\n% add a.txt\n% end\n", 0);       /* an add needs lines */
    expect(g, "% begin\n% add a b\n+x\n% end\n", 0);     /* a path has no space */
    expect(g, "% begin\n% change x\n@@\nold\n% end\n", 0); /* a line needs its mark */
    expect(g, "% begin\n% remove x\n% end\n\n", 0);       /* one newline at most */
    expect(g, "% begin\n% add a\n+x\n", 0);              /* no end */
    ms_grammar_free(g);
}

static void test_constructs(void **state) {
    (void)state;
    struct ms_grammar *g = lark("start: LOWER~2..3 DIGITS? [\"!\"]\nLOWER: \"a\"..\"c\"\nDIGITS: DIGIT ~ 2\n"
                                "%import common (DIGIT)\n");
    expect(g, "ab", 1);
    expect(g, "abc12!", 1);
    expect(g, "ab!", 1);
    expect(g, "a", 0);
    expect(g, "abcd", 0);
    expect(g, "ab1", 0);
    ms_grammar_free(g);
    /* a comment line before a "|" line, spaces in "~ N .. M", a long name */
    g = lark("start: x\n// the other one\n    | \"b\" ~ 1 .. 2\n"
             "x: a_rule_name_well_past_sixty_four_characters_long_enough_to_matter_here_x\n"
             "a_rule_name_well_past_sixty_four_characters_long_enough_to_matter_here_x: \"a\"\n");
    expect(g, "a", 1);
    expect(g, "bb", 1);
    expect(g, "bbb", 0);
    ms_grammar_free(g);
    g = lark("start: NUMBER WS_INLINE ESCAPED_STRING WS_INLINE CNAME NEWLINE?\n"
             "%import common.NUMBER\n%import common.ESCAPED_STRING\n%import common.CNAME\n"
             "%import common.WS_INLINE\n%import common.NEWLINE\n");
    expect(g, "12 \"a\\\"b\" _x1", 1);
    expect(g, "-1.5e3 \"\" y\r\n", 0); /* NUMBER has no sign */
    expect(g, "1.5e3 \"\" y\r\n", 1);
    expect(g, ".5 \"x\" 1y", 0);        /* a CNAME starts with a letter */
    expect(g, "5 \"a\nb\" y", 0);       /* a string is one line */
    ms_grammar_free(g);
    /* an alias of an import, a priority, "?" and "!" rules, an empty alternative */
    g = lark("start: item*\n?item.2: X | \"-\" |\n!other: \"z\"\n%import common.LF -> X\n");
    expect(g, "\n-\n", 1);
    expect(g, "", 1);
    expect(g, "z", 0); /* other is not reached from start */
    ms_grammar_free(g);
}

static void test_errors(void **state) {
    (void)state;
    static const struct {
        const char *src, *msg;
    } bad[] = {
        {"start: WS\n%import common.WS\n%ignore WS\n", "line 3: '%ignore' is not supported"},
        {"start: \"a\"i\n", "case-insensitive"},
        {"start: /a/i\n", "regex flags"},
        {"start: b\n", "'b' is not defined"},
        {"begin: \"a\"\n", "no 'start' rule"},
        {"start: \"a\"\nstart: \"b\"\n", "line 2: 'start' is defined twice"},
        {"start: \"a\n", "not closed"},
        {"start: (\"a\"\n", "missing ')'"},
        {"start: _t{x}\n", "unexpected '{'"},
        {"start: \"a\"\n%import other.X\n", "only '%import common"},
        {"start: \"a\"..\"cd\"\n", "single characters"},
        {"start: /(?=a)b/\n", "cannot express"},
        {"start: x{a}\nx: \"a\"\n", "unexpected"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ms_buf b = {0};
        ms_buf_puts(&b, "keep");
        ms_err err = {0};
        if (ms_lark_gbnf(bad[i].src, strlen(bad[i].src), "p_", 0, &b, &err) == 0)
            fail_msg("accepted: %s", bad[i].src);
        if (!strstr(err.msg, bad[i].msg)) fail_msg("%s: said '%s', expected '%s'", bad[i].src, err.msg, bad[i].msg);
        assert_string_equal(b.p, "keep");
        ms_buf_free(&b);
    }
}

/* ---- raw regexes against PCRE2 ---- */

static const char ALPHA[] = {'a', 'b', '"', '\\', '\n', '1'};
#define N_ALPHA (sizeof ALPHA)

static void test_regex_vs_pcre2(void **state) {
    (void)state;
    static const char *const res[] = {
        "a*",  "(ab|b)+1?",   "[^a]*", ".",       ".*\\\\", "[\"\\\\]{2}", "\\d+|a", "(?:a|\\n)b?",
        "^a$", "[a-b1]{1,3}", "\\S*",  "a|",      "\\\\n",  "[\\s\"]",     "b{0,2}a{2,}",
    };
    for (size_t r = 0; r < sizeof res / sizeof res[0]; r++) {
        struct ms_buf b = {0};
        ms_err err;
        if (ms_regex_gbnf(res[r], strlen(res[r]), 0, &b, &err)) fail_msg("/%s/: %s", res[r], err.msg);
        struct ms_buf src = {0};
        ms_buf_printf(&src, "root ::= %s\n", b.p);
        struct ms_grammar *g = NULL;
        const bool empty_only = !strcmp(b.p, "\"\"");
        if (!empty_only && ms_grammar_parse(&g, src.p, src.len, &err)) fail_msg("/%s/: %s\n%s", res[r], err.msg, src.p);
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)res[r], PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec,
                                       &eo, NULL);
        assert_non_null(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        char s[5];
        for (int len = 0; len <= 4; len++) {
            size_t total = 1;
            for (int i = 0; i < len; i++) total *= N_ALPHA;
            for (size_t code = 0; code < total; code++) {
                size_t c = code;
                for (int i = 0; i < len; i++) s[i] = ALPHA[c % N_ALPHA], c /= N_ALPHA;
                const bool want = pcre2_match(re, (PCRE2_SPTR)s, (size_t)len, 0, 0, md, NULL) >= 0;
                /* the grammar's root must match text, so "" is the caller's to allow */
                if (len == 0) continue;
                const int got = g ? ms_grammar_match(g, s, (size_t)len, &err) : 0;
                if (got != want) fail_msg("/%s/ on \"%.*s\": grammar %d, PCRE2 %d (%s)", res[r], len, s, got, want, b.p);
            }
        }
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        ms_grammar_free(g);
        ms_buf_free(&b);
        ms_buf_free(&src);
    }
}

static void test_regex_excl(void **state) {
    (void)state;
    struct ms_buf b = {0};
    ms_err err;
    assert_int_equal(ms_regex_gbnf(".+|[^x]", 7, 0xFF5C, &b, &err), 0);
    struct ms_buf src = {0};
    ms_buf_printf(&src, "root ::= %s\n", b.p);
    struct ms_grammar *g = NULL;
    assert_int_equal(ms_grammar_parse(&g, src.p, src.len, &err), 0);
    expect(g, "a\xef\xbd\x9c" "b", 0); /* "｜" is in no class */
    expect(g, "a\rb", 1);                  /* "." is anything but "\n" */
    expect(g, "a\nb", 0);
    ms_grammar_free(g);
    ms_buf_free(&src);
    ms_buf_free(&b);
    assert_int_equal(ms_regex_gbnf("a\xef\xbd\x9c", 4, 0xFF5C, &b, &err), -1); /* a literal of it */
    /* Python's reading where it differs from ECMA's */
    static const struct {
        const char *re, *text;
        int want;
    } py[] = {
        {"ab{,3}", "abbb", 1}, {"ab{,3}", "a", 1}, {"ab{,3}", "ab{,3}", 0},
        {"[\\U00000061-\\U00000063]{2}", "ab", 1}, {"[\\U00000061-\\U00000063]{2}", "CI", 0},
        {"[]a]+", "]a", 1}, {"[^]a]", "b", 1}, {"[^]a]", "]", 0},
        {"[^\\w\"]", "\xc3\xa9", 0}, {"[^\\w\"]", "-", 1}, {"\\W", "\xc3\xa9", 0}, {"\\w+", "a_1", 1},
    };
    for (size_t i = 0; i < sizeof py / sizeof py[0]; i++) {
        b.len = 0;
        if (ms_regex_gbnf(py[i].re, strlen(py[i].re), 0, &b, &err)) fail_msg("/%s/: %s", py[i].re, err.msg);
        struct ms_buf gs = {0};
        ms_buf_printf(&gs, "root ::= %s\n", b.p);
        struct ms_grammar *pg = NULL;
        if (ms_grammar_parse(&pg, gs.p, gs.len, &err)) fail_msg("/%s/: %s", py[i].re, err.msg);
        if (ms_grammar_match(pg, py[i].text, strlen(py[i].text), &err) != py[i].want)
            fail_msg("/%s/ on '%s': expected %d", py[i].re, py[i].text, py[i].want);
        ms_grammar_free(pg);
        ms_buf_free(&gs);
    }
    /* Python's anchors and a NUL are refused, not read as letters or lost */
    assert_int_equal(ms_regex_gbnf("a\\Z", 3, 0, &b, &err), -1);
    assert_int_equal(ms_regex_gbnf("\\Aa", 3, 0, &b, &err), -1);
    assert_int_equal(ms_regex_gbnf("a\\x00b", 6, 0, &b, &err), -1);
    /* in Lark: a literal holding the excluded character is refused, a
     * range loses it */
    ms_buf_free(&b);
    static const char bar_lit[] = "start: \"a\xef\xbd\x9c\"\n";
    assert_int_equal(ms_lark_gbnf(bar_lit, strlen(bar_lit), "p_", 0xFF5C, &b, &err), -1);
    assert_non_null(strstr(err.msg, "which the text cannot"));
    assert_int_equal(ms_lark_gbnf("start: \"\xef\xbd\x9b\"..\"\xef\xbd\x9e\"\n", 20, "p_", 0xFF5C, &b, &err), 0);
    struct ms_grammar *rg = NULL;
    assert_int_equal(ms_grammar_parse_root(&rg, b.p, b.len, "p_start", &err), 0);
    expect(rg, "\xef\xbd\x9b", 1);
    expect(rg, "\xef\xbd\x9c", 0);
    expect(rg, "\xef\xbd\x9e", 1);
    ms_grammar_free(rg);
    assert_int_equal(ms_regex_gbnf("(a", 2, 0, &b, &err), -1);
    assert_non_null(strstr(err.msg, "not a valid regex"));
    ms_buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patch),
        cmocka_unit_test(test_constructs),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_regex_vs_pcre2),
        cmocka_unit_test(test_regex_excl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
