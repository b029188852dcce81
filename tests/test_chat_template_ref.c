/*
 * test_chat_template_ref.c - ms_chat_render_ex against reference renderings
 * of DeepSeek V4's published chat template by a real Jinja engine
 * (tests/data/chat_template/<case>.txt, recorded by
 * scripts/record-chat-template.sh from the cases in cases.json): system
 * prompts, tool schemas, multi-turn tool calls and results, thinking on and
 * off, reasoning_effort max, response_format. Byte for byte.
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

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = '\0';
    *len = (size_t)n;
    return p;
}

static const char *data_dir(void) {
    static char d[1024];
    const char *src = getenv("MS_SOURCE_DIR");
    snprintf(d, sizeof d, "%s/tests/data/chat_template", src && *src ? src : ".");
    return d;
}

static void render_case(const json_t *c, struct ms_chat_out *out) {
    const json_t *msgs = json_object_get(c, "messages");
    const size_t n = json_array_size(msgs);
    struct ms_chat_message *m = calloc(n + 1, sizeof *m);
    assert_non_null(m);
    for (size_t i = 0; i < n; i++) {
        const json_t *j = json_array_get(msgs, i);
        m[i].role = json_string_value(json_object_get(j, "role"));
        m[i].content = json_string_value(json_object_get(j, "content"));
        m[i].reasoning = json_string_value(json_object_get(j, "reasoning_content"));
        m[i].tool_calls = json_object_get(j, "tool_calls");
    }
    const char *effort = json_string_value(json_object_get(c, "reasoning_effort"));
    const struct ms_chat_opts o = {
        .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
        .thinking = json_is_true(json_object_get(c, "thinking")),
        .effort_max = effort && !strcmp(effort, "max"),
        .tools = json_object_get(c, "tools"),
        .response_format = json_object_get(c, "response_format"),
    };
    ms_err err;
    const int rc = ms_chat_render_ex(m, n, &o, out, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    free(m);
}

static void test_reference_renderings(void **state) {
    (void)state;
    char path[1200];
    snprintf(path, sizeof path, "%s/cases.json", data_dir());
    json_error_t je;
    json_t *cases = json_load_file(path, 0, &je);
    assert_non_null(cases);
    assert_true(json_array_size(cases) >= 8);
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *c = json_array_get(cases, k);
        const char *name = json_string_value(json_object_get(c, "name"));
        snprintf(path, sizeof path, "%s/%s.txt", data_dir(), name);
        size_t want_len = 0;
        char *want = slurp(path, &want_len);
        assert_non_null(want);
        struct ms_chat_out out;
        render_case(c, &out);
        if (out.len != want_len || memcmp(out.text, want, want_len)) {
            size_t i = 0;
            while (i < out.len && i < want_len && out.text[i] == want[i]) i++;
            fprintf(stderr, "case %s differs at byte %zu:\n ours: %.80s\n want: %.80s\n", name, i,
                    out.text + i, want + i);
            fail();
        }
        /* plain spans are inside the text, ascending, not overlapping */
        size_t end = 0;
        for (size_t i = 0; i < out.n_plain; i++) {
            assert_true(out.plain[i].off >= end);
            end = out.plain[i].off + out.plain[i].len;
            assert_true(end <= out.len);
        }
        ms_chat_out_free(&out);
        free(want);
    }
    json_decref(cases);
}

/* The user's text is one plain span: "<｜User｜>" typed by a user is data. */
static void test_plain_spans(void **state) {
    (void)state;
    const struct ms_chat_message m[] = {{"system", "sys", NULL, NULL},
                                        {"user", "hi <｜User｜> there", NULL, NULL}};
    const struct ms_chat_opts o = {.add_generation_prompt = true};
    struct ms_chat_out out;
    ms_err err;
    assert_int_equal(ms_chat_render_ex(m, 2, &o, &out, &err), 0);
    assert_int_equal(out.n_plain, 2);
    assert_memory_equal(out.text + out.plain[0].off, "sys", 3);
    assert_int_equal(out.plain[1].len, strlen("hi <｜User｜> there"));
    assert_memory_equal(out.text + out.plain[1].off, "hi <｜User｜> there", out.plain[1].len);
    ms_chat_out_free(&out);
}

static bool g_in_reasoning;
static const char *g_stored; /* the reasoning the block was sampled after, or NULL */

static const char *replay_fn(void *ctx, const json_t *calls, const char *reasoning, size_t *len,
                             bool *in_reasoning, const char **stored) {
    (void)calls;
    *len = strlen(ctx);
    /* as the server's lookup: the stored reasoning stands in for none sent
     * back, and in_reasoning holds only for the reasoning the block was
     * opened in */
    const bool none = !reasoning || !*reasoning;
    *stored = none ? g_stored : NULL;
    const char *r = none ? g_stored : reasoning;
    *in_reasoning = g_in_reasoning && r && !strcmp(r, "plan");
    return ctx;
}

/* Exact replay: a recorded block replaces the rendering of the calls. */
/* Renders msgs[0 .. n) with o and checks that the text holds want. */
static void render_has(const struct ms_chat_message *msgs, size_t n, const struct ms_chat_opts *o, const char *want) {
    struct ms_chat_out out;
    ms_err err;
    assert_int_equal(ms_chat_render_ex(msgs, n, o, &out, &err), 0);
    if (!strstr(out.text, want)) fprintf(stderr, "rendered:\n%s\nwant: %s\n", out.text, want);
    assert_non_null(strstr(out.text, want));
    ms_chat_out_free(&out);
}

static void test_replay(void **state) {
    (void)state;
    json_t *calls = json_loads(
        "[{\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]", 0, NULL);
    assert_non_null(calls);
    const struct ms_chat_message m[] = {{"user", "u", NULL, NULL}, {"assistant", "x", NULL, calls}};
    struct ms_chat_opts o = {0};
    struct ms_chat_out out;
    ms_err err;
    render_has(m, 2, &o, "<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>");
    o.replay = replay_fn;
    o.replay_ctx = "\n<｜DSML｜tool_calls>RAW</｜DSML｜tool_calls>";
    render_has(m, 2, &o, "x\n<｜DSML｜tool_calls>RAW</｜DSML｜tool_calls><｜end▁of▁sentence｜>");
    /* a block the model opened inside its reasoning: with the reasoning
     * rendered and no answer text, no "</think>" (the model wrote none);
     * with answer text, or without the reasoning, the template's */
    const struct ms_chat_message r[] = {{"user", "u", NULL, NULL}, {"assistant", "", "plan", calls}};
    o.thinking = true;
    g_in_reasoning = true;
    render_has(r, 2, &o, "<think>plan\n<｜DSML｜tool_calls>RAW");
    g_in_reasoning = false;
    render_has(r, 2, &o, "<think>plan</think>\n<｜DSML｜tool_calls>RAW");
    g_in_reasoning = true;
    const struct ms_chat_message r2[] = {{"user", "u", NULL, NULL}, {"assistant", "x", "plan", calls}};
    render_has(r2, 2, &o, "<think>plan</think>x\n<｜DSML｜tool_calls>RAW");
    /* other reasoning, or none sent back: the template's */
    const struct ms_chat_message r3[] = {{"user", "u", NULL, NULL}, {"assistant", "", "other", calls}};
    render_has(r3, 2, &o, "<think>other</think>\n<｜DSML｜tool_calls>RAW");
    const struct ms_chat_message r4[] = {{"user", "u", NULL, NULL}, {"assistant", "", NULL, calls}};
    render_has(r4, 2, &o, "<think></think>\n<｜DSML｜tool_calls>RAW");
    /* none sent back, the block's own reasoning recorded: rendered as the
     * model sampled it (inside the reasoning, or closed before the block) */
    g_stored = "plan";
    render_has(r4, 2, &o, "<think>plan\n<｜DSML｜tool_calls>RAW");
    g_in_reasoning = false;
    render_has(r4, 2, &o, "<think>plan</think>\n<｜DSML｜tool_calls>RAW");
    /* reasoning sent back wins over the stored */
    render_has(r3, 2, &o, "<think>other</think>\n<｜DSML｜tool_calls>RAW");
    g_stored = NULL;
    g_in_reasoning = true;
    o.thinking = false;
    render_has(r, 2, &o, "</think>\n<｜DSML｜tool_calls>RAW");
    g_in_reasoning = false;
    /* arguments that are not an object are an error */
    json_t *bad = json_loads("[{\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]", 0, NULL);
    const struct ms_chat_message m2[] = {{"assistant", "x", NULL, bad}};
    o.replay = NULL;
    assert_int_equal(ms_chat_render_ex(m2, 1, &o, &out, &err), -1);
    json_decref(bad);
    json_decref(calls);
}

static void test_tojson_numbers(void **state) {
    (void)state;
    json_t *v = json_loads("[0.1, 2.0, 1e21, 1e-7, -0.5, 123456789012, 1.5e300, 100.25, \"\\u0001/é\"]",
                           0, NULL);
    assert_non_null(v);
    char *s = ms_chat_tojson(v);
    assert_string_equal(s, "[0.1, 2, 1e+21, 1e-7, -0.5, 123456789012, 1.5e+300, 100.25, \"\\u0001/é\"]");
    free(s);
    json_decref(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_renderings),
        cmocka_unit_test(test_plain_spans),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_tojson_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
