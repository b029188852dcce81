/*
 * test_dsml_grammar.c - src/text/dsml_grammar.c: the grammar of a
 * tool-call block built from the tools' schemas, run by text/grammar.h's
 * matcher and read back by text/dsml.h's parser.
 *
 *   - a table of tools and blocks that must match (raw and JSON values,
 *     optional and required parameters, enums raw and as JSON, bounded raw
 *     text, several calls, a tool without parameters, a free-form tool)
 *     and blocks that must not (an unknown tool or parameter, a missing
 *     required one, a wrong type, raw text for a number, raw text for a
 *     pattern, parameters out of order, markup inside a value, a block
 *     with no call, text after the close);
 *   - every block that matches parses with the DSML parser into the
 *     arguments it spells;
 *   - the chat template's rendering of calls is a sentence of the grammar
 *     (the two spell the markup alike);
 *   - random sentences of the grammar (a walk that feeds random pieces and
 *     keeps those the matcher allows) all parse, and their arguments follow
 *     the schemas: required keys present, no unknown keys, types and enums
 *     and lengths kept;
 *   - tools that cannot be written are left out or accept anything, with a
 *     warning; no callable tool at all is an error that leaves out alone;
 *   - JSON values jansson would refuse (past a double, \u0000, lone
 *     surrogates) are refused, raw text the keywords beside an enum or an
 *     anyOf rule out is refused, "properties": {} with additionalProperties
 *     false takes no parameters, a $ref at the top is followed, and one
 *     call a turn closes the block after its call;
 *   - a custom tool's text follows its Lark or regex grammar, raw only, and
 *     a grammar that cannot be read leaves the text free, warned.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "text/chat_template.h"
#include "text/dsml.h"
#include "text/dsml_grammar.h"
#include "text/grammar.h"

#define OPEN MS_DSML_CALLS_OPEN "\n"
#define CLOSE MS_DSML_CALLS_CLOSE
#define INV(n) MS_DSML_INVOKE_OPEN " name=\"" n "\">\n"
#define END_INV MS_DSML_INVOKE_CLOSE "\n"
#define PS(k, v) MS_DSML_PARAM_OPEN " name=\"" k "\" string=\"true\">" v MS_DSML_PARAM_CLOSE "\n"
#define PJ(k, v) MS_DSML_PARAM_OPEN " name=\"" k "\" string=\"false\">" v MS_DSML_PARAM_CLOSE "\n"

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]},"
    " \"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 14}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"edit\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"path\": {\"type\": \"string\", \"maxLength\": 12}, \"lines\": {\"type\": \"array\","
    " \"items\": {\"type\": \"integer\"}, \"maxItems\": 3}, \"dry\": {\"type\": \"boolean\"},"
    " \"tag\": {\"type\": \"string\", \"pattern\": \"^v[0-9]$\"}, \"mode\": {\"$ref\": \"#/$defs/Mode\"},"
    " \"note\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}},"
    " \"required\": [\"path\", \"lines\"], \"$defs\": {\"Mode\": {\"type\": \"string\", \"enum\": [\"a\", \"b\"]}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\"}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"free\", \"parameters\": {\"type\": \"object\"}}}]";

struct warns {
    char log[4096];
};

static void on_warn(void *ctx, const char *tool, const char *what) {
    struct warns *w = ctx;
    const size_t n = strlen(w->log);
    snprintf(w->log + n, sizeof w->log - n, "%s: %s;", tool, what);
}

static json_t *load(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j) fail_msg("bad test JSON: %s (%s)", je.text, s);
    return j;
}

static struct ms_grammar *build(const char *tools_json, struct warns *w) {
    json_t *tools = load(tools_json);
    struct ms_buf b = {0};
    ms_err err;
    if (ms_dsml_tools_grammar(tools, NULL, false, &b, on_warn, w, &err)) fail_msg("grammar: %s", err.msg);
    struct ms_grammar *g = NULL;
    if (ms_grammar_parse_root(&g, b.p, b.len, MS_DSML_GRAMMAR_ROOT, &err))
        fail_msg("parse: %s\n%s", err.msg, b.p);
    ms_buf_free(&b);
    json_decref(tools);
    return g;
}

/* ---- the DSML parser's reading of a block ---- */

struct calls {
    json_t *list; /* [{"name", "args"}] */
    int errors, ends;
};

static void on_ev(void *ctx, const struct ms_dsml_ev *ev) {
    struct calls *c = ctx;
    if (ev->type == MS_DSML_EV_TOOL_CALL) {
        json_t *args = json_loads(ev->args, 0, NULL);
        assert_non_null(args);
        json_array_append_new(c->list, json_pack("{s:s, s:o}", "name", ev->name, "args", args));
    }
    if (ev->type == MS_DSML_EV_ERROR) c->errors++;
    if (ev->type == MS_DSML_EV_TOOLS_END) c->ends++;
}

/* The calls the parser reads from an answer that is the block. */
static json_t *parse_block(const char *text, size_t n) {
    struct calls c = {.list = json_array()};
    struct ms_dsml p;
    ms_dsml_init(&p, false, on_ev, &c);
    ms_dsml_feed(&p, text, n);
    ms_dsml_finish(&p);
    ms_dsml_free(&p);
    if (c.errors || c.ends != 1) fail_msg("the parser did not read the block (%d errors): %.*s", c.errors, (int)n, text);
    return c.list;
}

static int match(const struct ms_grammar *g, const char *s) {
    ms_err err;
    const int rc = ms_grammar_match(g, s, strlen(s), &err);
    if (rc < 0) fail_msg("match: %s", err.msg);
    return rc;
}

/* ---- the table ---- */

struct tcase {
    const char *text;
    const char *calls; /* NULL: must not match; else the parser's reading */
};

static const struct tcase CASES[] = {
    {OPEN INV("get_weather") PS("city", "Paris") END_INV CLOSE,
     "[{'name': 'get_weather', 'args': {'city': 'Paris'}}]"},
    {OPEN INV("get_weather") PS("city", "a < b </ c \"q\" ｜x") PS("unit", "celsius") PJ("days", "3") END_INV CLOSE,
     "[{'name': 'get_weather', 'args': {'city': 'a < b </ c \\'q\\' ｜x', 'unit': 'celsius', 'days': 3}}]"},
    {OPEN INV("get_weather") PJ("city", "\"Oslo\"") PJ("unit", "\"fahrenheit\"") END_INV CLOSE,
     "[{'name': 'get_weather', 'args': {'city': 'Oslo', 'unit': 'fahrenheit'}}]"},
    {OPEN INV("get_weather") PS("city", "") END_INV INV("now") "\n" END_INV CLOSE,
     "[{'name': 'get_weather', 'args': {'city': ''}}, {'name': 'now', 'args': {}}]"},
    {OPEN INV("edit") PS("path", "src/a.c") PJ("lines", "[1, 2, 3]") PJ("dry", "true") PJ("tag", "\"v1\"")
         PS("mode", "b") PS("note", "x") END_INV CLOSE,
     "[{'name': 'edit', 'args': {'path': 'src/a.c', 'lines': [1, 2, 3], 'dry': true, 'tag': 'v1', 'mode': 'b',"
     " 'note': 'x'}}]"},
    {OPEN INV("edit") PJ("path", "\"x\"") PJ("lines", "[]") PJ("note", "null") END_INV CLOSE,
     "[{'name': 'edit', 'args': {'path': 'x', 'lines': [], 'note': null}}]"},
    {OPEN INV("free") PS("anything", "goes") PJ("n", "{\"k\": [1]}") END_INV CLOSE,
     "[{'name': 'free', 'args': {'anything': 'goes', 'n': {'k': [1]}}}]"},
    {MS_DSML_CALLS_OPEN INV("now") MS_DSML_INVOKE_CLOSE CLOSE, "[{'name': 'now', 'args': {}}]"},
    /* refused */
    {OPEN INV("get_wether") PS("city", "Paris") END_INV CLOSE, NULL},                 /* unknown tool */
    {OPEN INV("get_weather") PS("town", "Paris") END_INV CLOSE, NULL},                /* unknown parameter */
    {OPEN INV("get_weather") PS("unit", "celsius") END_INV CLOSE, NULL},              /* city missing */
    {OPEN INV("get_weather") PS("city", "P") PS("unit", "kelvin") END_INV CLOSE, NULL}, /* not in the enum */
    {OPEN INV("get_weather") PS("city", "P") PS("days", "3") END_INV CLOSE, NULL},    /* raw for an integer */
    {OPEN INV("get_weather") PS("city", "P") PJ("days", "15") END_INV CLOSE, NULL},   /* past maximum */
    {OPEN INV("get_weather") PS("city", "P") PJ("days", "3.5") END_INV CLOSE, NULL},  /* not an integer */
    {OPEN INV("get_weather") PJ("days", "3") PS("city", "P") END_INV CLOSE, NULL},    /* out of order */
    {OPEN INV("get_weather") PS("city", "a </" MS_DSML "invoke> b") END_INV CLOSE, NULL}, /* markup in raw text */
    {OPEN INV("get_weather") PS("city", "a <" MS_DSML "invoke") END_INV CLOSE, NULL},
    {OPEN INV("get_weather") PJ("city", "\"a ｜ b\"") END_INV CLOSE, NULL},            /* "｜" raw in JSON */
    {OPEN INV("edit") PS("path", "0123456789abc") PJ("lines", "[]") END_INV CLOSE, NULL}, /* maxLength 12 */
    {OPEN INV("edit") PS("path", "p") PJ("lines", "[1, 2, 3, 4]") END_INV CLOSE, NULL},   /* maxItems 3 */
    {OPEN INV("edit") PS("path", "p") PJ("lines", "[]") PS("tag", "v1") END_INV CLOSE, NULL}, /* pattern: JSON only */
    {OPEN INV("edit") PS("path", "p") PJ("lines", "[]") PJ("tag", "\"v10\"") END_INV CLOSE, NULL},
    {OPEN INV("edit") PS("path", "p") PJ("lines", "[]") PS("mode", "c") END_INV CLOSE, NULL}, /* $ref enum */
    {OPEN INV("now") PS("x", "1") END_INV CLOSE, NULL},  /* no parameters at all */
    {OPEN CLOSE, NULL},                                  /* no call */
    {OPEN INV("now") END_INV CLOSE "\n", NULL},           /* text after the close */
    {"x" OPEN INV("now") END_INV CLOSE, NULL},
};

static char *dq(const char *s) {
    char *t = strdup(s);
    assert_non_null(t);
    for (char *p = t; *p; p++)
        if (*p == '\'') *p = '"';
        else if (*p == '\\' && p[1] == '\'') *p = '\\', p[1] = '"', p++;
    return t;
}

static void test_cases(void **state) {
    (void)state;
    struct warns w = {0};
    struct ms_grammar *g = build(TOOLS, &w);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const struct tcase *c = &CASES[i];
        const int m = match(g, c->text);
        if (m != (c->calls != NULL)) fail_msg("case %zu: expected %s: %s", i, c->calls ? "a match" : "no match", c->text);
        if (!c->calls) continue;
        json_t *got = parse_block(c->text, strlen(c->text));
        char *want_s = dq(c->calls);
        json_t *want = load(want_s);
        if (!json_equal(got, want)) {
            char *gs = json_dumps(got, JSON_COMPACT);
            fail_msg("case %zu: parsed %s, expected %s", i, gs, want_s);
        }
        json_decref(got);
        json_decref(want);
        free(want_s);
    }
    /* the pattern is enforced (by the converter), so nothing was dropped */
    assert_null(strstr(w.log, "pattern"));
    ms_grammar_free(g);
}

/* ---- the template spells calls as the grammar does ---- */

static void test_template_calls(void **state) {
    (void)state;
    struct warns w = {0};
    struct ms_grammar *g = build(TOOLS, &w);
    json_t *calls = load("[{\"id\": \"a\", \"function\": {\"name\": \"get_weather\", \"arguments\":"
                         " {\"city\": \"Rome <b>\", \"unit\": \"celsius\", \"days\": 2}}},"
                         " {\"id\": \"b\", \"function\": {\"name\": \"edit\", \"arguments\":"
                         " \"{\\\"path\\\": \\\"x.c\\\", \\\"lines\\\": [4, 5], \\\"dry\\\": false,"
                         " \\\"note\\\": null}\"}},"
                         " {\"id\": \"c\", \"function\": {\"name\": \"now\", \"arguments\": {}}}]");
    const struct ms_chat_message msgs[] = {{.role = "user", .content = "hi"},
                                           {.role = "assistant", .content = "", .tool_calls = calls}};
    json_t *tools = load(TOOLS);
    const struct ms_chat_opts o = {.tools = tools};
    struct ms_chat_out out;
    ms_err err;
    assert_int_equal(ms_chat_render_ex(msgs, 2, &o, &out, &err), 0);
    /* the assistant's block, the last one (the system prompt shows one) */
    const char *a = NULL;
    for (const char *p = strstr(out.text, "\n\n" MS_DSML_CALLS_OPEN); p; p = strstr(p + 1, "\n\n" MS_DSML_CALLS_OPEN))
        a = p + 2;
    assert_non_null(a);
    const char *b = strstr(a, MS_DSML_CALLS_CLOSE);
    assert_non_null(b);
    const size_t n = (size_t)(b - a) + strlen(MS_DSML_CALLS_CLOSE);
    if (ms_grammar_match(g, a, n, &err) != 1) fail_msg("the template's block is refused:\n%.*s", (int)n, a);
    json_t *got = parse_block(a, n);
    assert_int_equal(json_array_size(got), 3);
    json_decref(got);
    ms_chat_out_free(&out);
    json_decref(tools);
    json_decref(calls);
    ms_grammar_free(g);
}

/* ---- random sentences ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Pieces the walk feeds: the markup, names, values, and characters that
 * test the edges (quotes, escapes, "<", "/", "｜", newlines). */
static const char *const PIECES[] = {
    MS_DSML_CALLS_OPEN, MS_DSML_CALLS_CLOSE, MS_DSML_INVOKE_OPEN, MS_DSML_INVOKE_CLOSE, MS_DSML_PARAM_OPEN,
    MS_DSML_PARAM_CLOSE, "<", "</", "/", "｜", MS_DSML, " name=\"", "\"", "\">", " string=\"", "true\">",
    "false\">", "get_weather", "edit", "now", "free", "city", "unit", "days", "path", "lines", "dry", "tag",
    "mode", "note", "celsius", "fahrenheit", "a", "b", "v", "1", "3", "7", "14", "0", "-", ".", "e", "[", "]",
    "{", "}", ",", ":", " ", "\n", "null", "true", "false", "\\", "\\n", "\\u00e9", "\\uff5c", "x", "é", "\t",
};
#define N_PIECES (sizeof PIECES / sizeof PIECES[0])
/* what ends values, calls and the block, tried first more and more often
 * as a walk grows, so that walks finish */
static const char *const ENDS[] = {MS_DSML_CALLS_CLOSE, MS_DSML_INVOKE_CLOSE, MS_DSML_PARAM_CLOSE, "\"", "]", "}", "1"};
#define N_ENDS (sizeof ENDS / sizeof ENDS[0])

/* Whether the arguments of a call follow TOOLS' schemas (what each
 * property allows, written out by hand). */
/* Code points in UTF-8 s[0..n). */
static size_t n_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static void check_call(const json_t *call, const char *text) {
    const char *name = json_string_value(json_object_get(call, "name"));
    const json_t *args = json_object_get(call, "args");
    const char *k;
    json_t *v;
#define BAD(why) fail_msg("call %s: %s in %s", name, why, text)
    if (!strcmp(name, "get_weather")) {
        if (!json_is_string(json_object_get(args, "city"))) BAD("no string city");
        json_object_foreach((json_t *)args, k, v) {
            if (!strcmp(k, "city")) continue;
            if (!strcmp(k, "unit")) {
                if (!json_is_string(v) || (strcmp(json_string_value(v), "celsius") && strcmp(json_string_value(v), "fahrenheit")))
                    BAD("unit");
            } else if (!strcmp(k, "days")) {
                if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 14) BAD("days");
            } else {
                BAD("unknown key");
            }
        }
    } else if (!strcmp(name, "edit")) {
        const json_t *p = json_object_get(args, "path"), *l = json_object_get(args, "lines");
        if (!json_is_string(p) || n_chars(json_string_value(p), json_string_length(p)) > 12) BAD("path");
        if (!json_is_array(l) || json_array_size(l) > 3) BAD("lines");
        for (size_t i = 0; i < json_array_size(l); i++)
            if (!json_is_integer(json_array_get(l, i))) BAD("lines item");
        json_object_foreach((json_t *)args, k, v) {
            if (!strcmp(k, "path") || !strcmp(k, "lines")) continue;
            if (!strcmp(k, "dry")) {
                if (!json_is_boolean(v)) BAD("dry");
            } else if (!strcmp(k, "tag")) {
                const char *s = json_string_value(v);
                if (!s || strlen(s) != 2 || s[0] != 'v' || s[1] < '0' || s[1] > '9') BAD("tag");
            } else if (!strcmp(k, "mode")) {
                if (!json_is_string(v) || (strcmp(json_string_value(v), "a") && strcmp(json_string_value(v), "b")))
                    BAD("mode");
            } else if (!strcmp(k, "note")) {
                if (!json_is_string(v) && !json_is_null(v)) BAD("note");
            } else {
                BAD("unknown key");
            }
        }
    } else if (!strcmp(name, "now")) {
        if (json_object_size(args)) BAD("arguments");
    } else if (strcmp(name, "free")) {
        BAD("unknown tool");
    }
#undef BAD
}

static void test_random_sentences(void **state) {
    (void)state;
    struct warns w = {0};
    struct ms_grammar *g = build(TOOLS, &w);
    ms_err err;
    int sentences = 0, calls = 0;
    for (int walk = 0; walk < 3000; walk++) {
        struct ms_grammar_matcher *m = NULL;
        assert_int_equal(ms_grammar_matcher_new(&m, g, &err), 0);
        char text[4096];
        size_t n = 0;
        for (int step = 0; step < 400; step++) {
            if (ms_grammar_matcher_complete(m)) break;
            /* a few tries at a random piece, then the first one allowed */
            const char *pick = NULL;
            for (size_t e = 0; rnd(100) < (uint32_t)step && e < N_ENDS && !pick; e++)
                if (n + strlen(ENDS[e]) < sizeof text && ms_grammar_matcher_accept(m, ENDS[e], strlen(ENDS[e]), &err) == 1)
                    pick = ENDS[e];
            for (int t = 0; t < 2 * (int)N_PIECES && !pick; t++) {
                const char *p = t < 8 ? PIECES[rnd(N_PIECES)] : PIECES[t % N_PIECES];
                if (n + strlen(p) < sizeof text && ms_grammar_matcher_accept(m, p, strlen(p), &err) == 1) pick = p;
            }
            /* else one character, any that is allowed */
            char one[2] = {0};
            for (int ch = 0x20 + (int)rnd(95), t = 0; !pick && t < 96; t++, ch = ch == 0x7E ? '\n' : ch == '\n' ? 0x20 : ch + 1)
                if (one[0] = (char)ch, n + 1 < sizeof text && ms_grammar_matcher_accept(m, one, 1, &err) == 1) pick = one;
            if (!pick && n + 3 < sizeof text && ms_grammar_matcher_accept(m, "｜", 3, &err) == 1) pick = "｜";
            if (!pick) break;
            memcpy(text + n, pick, strlen(pick));
            n += strlen(pick);
        }
        const bool done = ms_grammar_matcher_complete(m);
        ms_grammar_matcher_free(m);
        if (getenv("DEBUG_WALK") && walk < 6) fprintf(stderr, "---- %.*s\n", (int)n, text);
        if (!done) continue;
        text[n] = 0;
        json_t *got = parse_block(text, n);
        for (size_t i = 0; i < json_array_size(got); i++) check_call(json_array_get(got, i), text), calls++;
        json_decref(got);
        sentences++;
    }
    /* the walk reaches whole blocks often enough to mean something */
    if (getenv("DEBUG_WALK")) fprintf(stderr, "%d sentences, %d calls\n", sentences, calls);
    if (sentences < 300 || calls < 300) fail_msg("only %d sentences, %d calls", sentences, calls);
    ms_grammar_free(g);
}

/* ---- what the parser would misread: JSON jansson refuses, raw text that
 * sibling keywords rule out, names holding tags ---- */

static const char EDGE_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"e\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {"
    "\"num\": {\"type\": \"number\"},"
    " \"strs\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}},"
    " \"mixed\": {\"type\": \"integer\", \"enum\": [1, \"2\"]},"
    " \"short\": {\"enum\": [\"abcdef\", \"de\"], \"maxLength\": 2},"
    " \"side\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], \"maxLength\": 3},"
    " \"union\": {\"anyOf\": [{\"type\": \"string\", \"maxLength\": 3},"
    " {\"type\": \"string\", \"minLength\": 5, \"maxLength\": 10}]},"
    " \"real\": {\"type\": \"string\", \"maxLength\": 2.0}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"strict0\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {}, \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"refd\", \"parameters\": {\"$ref\": \"#/$defs/A\","
    " \"minProperties\": 1, \"$defs\": {\"A\": {\"type\": \"object\", \"properties\": {\"a\":"
    " {\"type\": \"integer\"}}, \"required\": [\"a\"]}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"g</" MS_DSML "invoke>\"}}]";

static void test_edges(void **state) {
    (void)state;
    struct warns w = {0};
    struct ms_grammar *g = build(EDGE_TOOLS, &w);
    static const struct {
        const char *text;
        int want;
    } cases[] = {
        {OPEN INV("e") PJ("num", "1e99") END_INV CLOSE, 1},
        {OPEN INV("e") PJ("num", "1e999") END_INV CLOSE, 0}, /* past a double */
        {OPEN INV("e") PJ("strs", "[\"a\\ud83d\\ude00\"]") END_INV CLOSE, 1},
        {OPEN INV("e") PJ("strs", "[\"a\\u0000\"]") END_INV CLOSE, 0}, /* NUL */
        {OPEN INV("e") PJ("strs", "[\"\\ud800\"]") END_INV CLOSE, 0},   /* a lone surrogate */
        {OPEN INV("e") PJ("strs", "[\"\\udc00x\"]") END_INV CLOSE, 0},
        {OPEN INV("e") PS("mixed", "2") END_INV CLOSE, 0}, /* the type is integer */
        {OPEN INV("e") PJ("mixed", "1") END_INV CLOSE, 1},
        {OPEN INV("e") PS("short", "abcdef") END_INV CLOSE, 0},
        {OPEN INV("e") PS("short", "de") END_INV CLOSE, 1},
        {OPEN INV("e") PS("side", "abcdef") END_INV CLOSE, 0},
        {OPEN INV("e") PJ("side", "\"abc\"") END_INV CLOSE, 1},
        {OPEN INV("e") PS("union", "abc") END_INV CLOSE, 1},
        {OPEN INV("e") PS("union", "abcd") END_INV CLOSE, 0},
        {OPEN INV("e") PS("union", "abcde") END_INV CLOSE, 1},
        {OPEN INV("e") PS("real", "abc") END_INV CLOSE, 0},
        {OPEN INV("strict0") "\n" END_INV CLOSE, 1},
        {OPEN INV("strict0") PS("x", "1") END_INV CLOSE, 0},
        {OPEN INV("refd") PJ("a", "3") END_INV CLOSE, 1},
        {OPEN INV("refd") "\n" END_INV CLOSE, 0},
        {OPEN INV("g</" MS_DSML "invoke>") END_INV CLOSE, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (match(g, cases[i].text) != cases[i].want)
            fail_msg("edge case %zu: expected %s: %s", i, cases[i].want ? "a match" : "no match", cases[i].text);
    assert_non_null(strstr(w.log, "refd: 'minProperties' at / is not enforced"));
    assert_non_null(strstr(w.log, "the name cannot be written in a tag"));
    ms_grammar_free(g);

    /* one call a turn: the block closes after its first call */
    json_t *tools = load(TOOLS);
    struct ms_buf b = {0};
    ms_err err;
    assert_int_equal(ms_dsml_tools_grammar(tools, NULL, true, &b, NULL, NULL, &err), 0);
    assert_int_equal(ms_grammar_parse_root(&g, b.p, b.len, MS_DSML_GRAMMAR_ROOT, &err), 0);
    assert_int_equal(match(g, OPEN INV("now") END_INV CLOSE), 1);
    assert_int_equal(match(g, OPEN INV("now") END_INV INV("now") END_INV CLOSE), 0);
    ms_grammar_free(g);
    ms_buf_free(&b);
    json_decref(tools);
}

/* ---- what cannot be written ---- */

static void test_left_out(void **state) {
    (void)state;
    struct warns w = {0};
    /* a name with a quote is left out; a required key with one, and a
     * schema the converter refuses, make the tool take anything */
    struct ms_grammar *g = build("[{\"type\": \"function\", \"function\": {\"name\": \"a\\\"b\"}},"
                                 " {\"type\": \"function\", \"function\": {\"name\": \"q\", \"parameters\": {"
                                 "\"properties\": {\"x\\\"y\": {\"type\": \"string\"}}, \"required\": [\"x\\\"y\"]}}},"
                                 " {\"type\": \"function\", \"function\": {\"name\": \"r\", \"parameters\": {"
                                 "\"properties\": {\"z\": {\"$ref\": \"#/nowhere\"}}}}}]",
                                 &w);
    assert_non_null(strstr(w.log, "a\"b: the name cannot be written"));
    assert_non_null(strstr(w.log, "q: its schema cannot be enforced"));
    assert_non_null(strstr(w.log, "r: its schema cannot be enforced"));
    assert_int_equal(match(g, OPEN INV("q") PS("k", "v") END_INV CLOSE), 1);
    assert_int_equal(match(g, OPEN INV("r") PJ("z", "[1]") END_INV CLOSE), 1);
    assert_int_equal(match(g, OPEN INV("a\"b") END_INV CLOSE), 0);
    ms_grammar_free(g);

    /* no tool left: an error, out untouched */
    json_t *tools = load("[{\"type\": \"function\", \"function\": {\"name\": \"\"}}]");
    struct ms_buf b = {0};
    ms_buf_puts(&b, "keep");
    ms_err err;
    assert_int_equal(ms_dsml_tools_grammar(tools, NULL, false, &b, NULL, NULL, &err), -1);
    assert_string_equal(b.p, "keep");
    assert_non_null(strstr(err.msg, "none of the tools"));
    ms_buf_free(&b);
    json_decref(tools);
}

/* ---- custom tools: their text in their own grammar ---- */

static void test_custom_grammars(void **state) {
    (void)state;
    json_t *tools = load("[{\"type\": \"function\", \"function\": {\"name\": \"patch\", \"parameters\": {"
                         "\"type\": \"object\", \"properties\": {\"input\": {\"type\": \"string\"}},"
                         " \"required\": [\"input\"]}}},"
                         " {\"type\": \"function\", \"function\": {\"name\": \"version\", \"parameters\": {"
                         "\"type\": \"object\", \"properties\": {\"input\": {\"type\": \"string\"}},"
                         " \"required\": [\"input\"]}}},"
                         " {\"type\": \"function\", \"function\": {\"name\": \"leftrec\", \"parameters\": {"
                         "\"type\": \"object\", \"properties\": {\"input\": {\"type\": \"string\"}},"
                         " \"required\": [\"input\"]}}},"
                         " {\"type\": \"function\", \"function\": {\"name\": \"loose\", \"parameters\": {"
                         "\"type\": \"object\", \"properties\": {\"input\": {\"type\": \"string\"}},"
                         " \"required\": [\"input\"]}}}]");
    json_t *formats = load("{\"patch\": {\"syntax\": \"lark\", \"definition\": \"start: \\\"BEGIN\\\" LF"
                           " (\\\"+\\\" /.*/ LF)+ \\\"END\\\"\\n%import common.LF\\n\"},"
                           " \"version\": {\"syntax\": \"regex\", \"definition\": \"v[0-9]+(\\\\.[0-9]+)?\"},"
                           " \"loose\": {\"syntax\": \"lark\", \"definition\": \"start: WS\\n%ignore WS\"},"
                           " \"leftrec\": {\"syntax\": \"lark\", \"definition\": \"start: start \\\"x\\\" | \\\"y\\\"\"}}");
    struct ms_buf b = {0};
    ms_err err;
    struct warns w = {0};
    assert_int_equal(ms_dsml_tools_grammar(tools, formats, false, &b, on_warn, &w, &err), 0);
    struct ms_grammar *g = NULL;
    if (ms_grammar_parse_root(&g, b.p, b.len, MS_DSML_GRAMMAR_ROOT, &err)) fail_msg("%s\n%s", err.msg, b.p);
    assert_int_equal(match(g, OPEN INV("patch") PS("input", "BEGIN\n+a line <b>\n+\nEND") END_INV CLOSE), 1);
    assert_int_equal(match(g, OPEN INV("patch") PS("input", "BEGIN\nEND") END_INV CLOSE), 0);
    assert_int_equal(match(g, OPEN INV("patch") PS("input", "BEGIN\n+x｜y\nEND") END_INV CLOSE), 0);
    assert_int_equal(match(g, OPEN INV("patch") PJ("input", "\"BEGIN\\n+x\\nEND\"") END_INV CLOSE), 0);
    assert_int_equal(match(g, OPEN INV("version") PS("input", "v1.25") END_INV CLOSE), 1);
    assert_int_equal(match(g, OPEN INV("version") PS("input", "v1.") END_INV CLOSE), 0);
    assert_int_equal(match(g, OPEN INV("loose") PS("input", "anything at all") END_INV CLOSE), 1);
    assert_non_null(strstr(w.log, "loose: its lark grammar is not enforced: lark grammar, line 2: '%ignore'"));
    /* Lark allows left recursion, GBNF does not: that tool's text is free */
    assert_non_null(strstr(w.log, "leftrec: its lark grammar is not enforced"));
    assert_int_equal(match(g, OPEN INV("leftrec") PS("input", "free text") END_INV CLOSE), 1);
    json_t *got = parse_block(OPEN INV("patch") PS("input", "BEGIN\n+a\nEND") END_INV CLOSE,
                              strlen(OPEN INV("patch") PS("input", "BEGIN\n+a\nEND") END_INV CLOSE));
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(got, 0), "args"), "input")),
                        "BEGIN\n+a\nEND");
    json_decref(got);
    ms_grammar_free(g);
    ms_buf_free(&b);
    json_decref(tools);
    json_decref(formats);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_template_calls),
        cmocka_unit_test(test_random_sentences),
        cmocka_unit_test(test_left_out),
        cmocka_unit_test(test_custom_grammars),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
