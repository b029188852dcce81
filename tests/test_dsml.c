/*
 * test_dsml.c - the incremental DSML / reasoning parser (text/dsml.h): the
 * same events for every split of the output into two feeds and for a
 * byte-at-a-time feed, tool calls before </think>, markup never in text,
 * malformed and unterminated blocks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "text/dsml.h"

/* Events as one string: adjacent text events of a kind merged. */
struct log {
    char s[16384];
    size_t n;
    int last; /* type of the last text event, -1 after a structural one */
};

static void add(struct log *l, const char *s, size_t n) {
    assert_true(l->n + n < sizeof l->s);
    memcpy(l->s + l->n, s, n);
    l->n += n;
    l->s[l->n] = '\0';
}

static void on_ev(void *ctx, const struct ms_dsml_ev *ev) {
    struct log *l = ctx;
    char tmp[64];
    switch (ev->type) {
    case MS_DSML_EV_REASONING:
    case MS_DSML_EV_CONTENT:
        assert_true(ev->len > 0);
        /* markup never reaches a text event */
        assert_null(memmem(ev->text, ev->len, "DSML", 4));
        if (l->last != (int)ev->type) add(l, ev->type == MS_DSML_EV_REASONING ? "[R]" : "[C]", 3);
        add(l, ev->text, ev->len);
        l->last = (int)ev->type;
        break;
    case MS_DSML_EV_TOOL_CALL:
        snprintf(tmp, sizeof tmp, "[T%d]", ev->index);
        add(l, tmp, strlen(tmp));
        add(l, ev->name, strlen(ev->name));
        add(l, " ", 1);
        add(l, ev->args, strlen(ev->args));
        l->last = -1;
        break;
    case MS_DSML_EV_TOOLS_END:
        snprintf(tmp, sizeof tmp, "[END %zu]", ev->len);
        add(l, tmp, strlen(tmp));
        l->last = -1;
        break;
    case MS_DSML_EV_ERROR:
        add(l, "[ERR]", 5);
        l->last = -1;
        break;
    }
}

static void run(const char *in, bool reasoning, const size_t *cuts, size_t n_cuts, struct log *l) {
    memset(l, 0, sizeof *l);
    l->last = -1;
    struct ms_dsml p;
    ms_dsml_init(&p, reasoning, on_ev, l);
    size_t at = 0;
    const size_t len = strlen(in);
    for (size_t i = 0; i <= n_cuts; i++) {
        const size_t to = i < n_cuts ? cuts[i] : len;
        ms_dsml_feed(&p, in + at, to - at);
        at = to;
    }
    ms_dsml_finish(&p);
    if (p.block_in_reasoning) add(l, "[IR]", 4); /* the block opened before </think> */
    ms_dsml_free(&p);
}

/* Every split point and a byte-at-a-time feed give the expected events. */
static void check_all_splits(const char *in, bool reasoning, const char *want) {
    struct log l;
    run(in, reasoning, NULL, 0, &l);
    if (strcmp(l.s, want)) fprintf(stderr, "whole feed:\n got  %s\n want %s\n", l.s, want);
    assert_string_equal(l.s, want);
    const size_t len = strlen(in);
    for (size_t c = 0; c <= len; c++) {
        run(in, reasoning, &c, 1, &l);
        if (strcmp(l.s, want)) fprintf(stderr, "split at %zu:\n got  %s\n want %s\n", c, l.s, want);
        assert_string_equal(l.s, want);
    }
    size_t *all = calloc(len + 1, sizeof *all);
    assert_non_null(all);
    for (size_t i = 0; i < len; i++) all[i] = i;
    run(in, reasoning, all, len, &l);
    assert_string_equal(l.s, want);
    /* three pieces: every pair of cuts on short inputs */
    if (len <= 400)
        for (size_t a = 0; a <= len; a++)
            for (size_t b = a; b <= len; b += 7) {
                const size_t cuts[2] = {a, b};
                run(in, reasoning, cuts, 2, &l);
                assert_string_equal(l.s, want);
            }
    free(all);
}

#define D "｜DSML｜"

static const char full[] =
    "Need the weather < 1 & now.</think>Let me check.\n\n<" D "tool_calls>\n"
    "<" D "invoke name=\"get_weather\">\n"
    "<" D "parameter name=\"city\" string=\"true\">Tōkyō \"東京\" a<b</" D "parameter>\n"
    "<" D "parameter name=\"days\" string=\"false\">3</" D "parameter>\n"
    "<" D "parameter name=\"opts\" string=\"false\">{\"u\": [1, 2]}</" D "parameter>\n"
    "</" D "invoke>\n"
    "<" D "invoke name=\"now\">\n\n</" D "invoke>\n"
    "</" D "tool_calls>IGNORED";

static void test_reasoning_content_tools(void **state) {
    (void)state;
    char want[1024];
    snprintf(want, sizeof want,
             "[R]Need the weather < 1 & now.[C]Let me check."
             "[T0]get_weather {\"city\":\"Tōkyō \\\"東京\\\" a<b\",\"days\":3,\"opts\":{\"u\":[1,2]}}"
             "[T1]now {}[END %zu]",
             strlen(full) - strlen("Need the weather < 1 & now.</think>Let me check.") -
                 strlen("IGNORED"));
    check_all_splits(full, true, want);
}

/* A block that starts before </think> closes the reasoning. */
static void test_call_inside_reasoning(void **state) {
    (void)state;
    const char in[] = "I will call it. \n<" D "tool_calls><" D "invoke name=\"f\"><" D
                      "parameter name=\"x\" string=\"false\">not json</" D "parameter></" D
                      "invoke></" D "tool_calls>";
    char want[256];
    snprintf(want, sizeof want, "[R]I will call it.[T0]f {\"x\":\"not json\"}[END %zu][IR]",
             strlen(in) - strlen("I will call it."));
    check_all_splits(in, true, want);
}

/* Plain answers: partial markers, '<', whitespace and UTF-8 all come out. */
static void test_plain_answer(void **state) {
    (void)state;
    check_all_splits("a <｜DS b </think> c <｜DSM_x d 日本 \n\n", false,
                     "[C]a <｜DS b </think> c <｜DSM_x d 日本 \n\n");
    check_all_splits("thinking only", true, "[R]thinking only");
    check_all_splits("r</think>", true, "[R]r");
    /* an output cut inside a block's opening (the token limit): the
     * marker's start and the whitespace before it are not text; a lone '<'
     * at the end is */
    check_all_splits("Answer\n\n<" D "tool_cal", false, "[C]Answer");
    check_all_splits("Think\n\n<" D, true, "[R]Think");
    check_all_splits("x <｜", false, "[C]x");
    check_all_splits("a <", false, "[C]a <");
}

/* A NUL in a parameter's text reaches the client as U+FFFD: the client
 * sends the arguments back, and requests cannot carry \u0000. */
static void test_nul_in_arguments(void **state) {
    (void)state;
    static const char in[] = "<" D "tool_calls><" D "invoke name=\"f\"><" D
                             "parameter name=\"k\" string=\"true\">a\0b</" D "parameter></" D
                             "invoke></" D "tool_calls>";
    struct log l;
    memset(&l, 0, sizeof l);
    l.last = -1;
    struct ms_dsml p;
    ms_dsml_init(&p, false, on_ev, &l);
    ms_dsml_feed(&p, in, sizeof in - 1);
    ms_dsml_finish(&p);
    ms_dsml_free(&p);
    static const char want[] = "[T0]f {\"k\":\"a\xEF\xBF\xBD" "b\"}[END ";
    assert_memory_equal(l.s, want, sizeof want - 1);
}

static void test_malformed(void **state) {
    (void)state;
    /* text between invokes */
    check_all_splits("x<" D "tool_calls>oops<" D "invoke name=\"f\"></" D "invoke></" D "tool_calls>",
                     false, "[C]x[ERR]");
    /* unterminated block: an error at finish, after the complete call */
    check_all_splits("<" D "tool_calls><" D "invoke name=\"f\"></" D "invoke><" D "invoke name=\"g\">",
                     false, "[T0]f {}[ERR]");
    /* a bad parameter tag */
    check_all_splits("<" D "tool_calls><" D "invoke name=\"f\"><" D "parameter nam=\"a\">1</" D
                     "parameter></" D "invoke></" D "tool_calls>",
                     false, "[ERR]");
    /* a bad string attribute, an empty name */
    check_all_splits("<" D "tool_calls><" D "invoke name=\"f\"><" D
                     "parameter name=\"a\" string=\"maybe\">1</" D "parameter></" D "invoke>",
                     false, "[ERR]");
    check_all_splits("<" D "tool_calls><" D "invoke name=\"\"></" D "invoke>", false, "[ERR]");
    /* a short tag that is no prefix of any DSML tag (found by fuzz_server:
     * it was compared past the end of the buffer) */
    check_all_splits("<" D "tool_calls>\n<calls>", false, "[ERR]");
    /* a nested invoke without its close */
    check_all_splits("<" D "tool_calls><" D "invoke name=\"f\"><" D "invoke name=\"g\"></" D "invoke>",
                     false, "[ERR]");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reasoning_content_tools),
        cmocka_unit_test(test_call_inside_reasoning),
        cmocka_unit_test(test_plain_answer),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_nul_in_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
