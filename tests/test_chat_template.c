/*
 * test_chat_template.c - src/text/chat_template.c against renderings worked
 * out by hand from DeepSeek V4's published chat template
 * (models/templates/deepseek-ai-DeepSeek-V4.jinja in llama.cpp, from the
 * model's tokenizer_config.json): BOS, system prompt first, "<｜User｜>" /
 * "<｜Assistant｜>" markers, "</think>" opening a non-thinking assistant turn,
 * "<think>" opening a thinking one, earlier reasoning dropped, consecutive
 * user messages joined by a blank line, tool results.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "text/chat_template.h"

#define BOS "<｜begin▁of▁sentence｜>"
#define EOS "<｜end▁of▁sentence｜>"
#define U "<｜User｜>"
#define A "<｜Assistant｜>"

static void expect(const struct ms_chat_msg *m, size_t n, bool gen, bool think, const char *want) {
    char *out = NULL;
    size_t len = 0;
    ms_err err;
    assert_int_equal(ms_chat_render(m, n, gen, think, &out, &len, &err), 0);
    assert_string_equal(out, want);
    assert_int_equal(len, strlen(want));
    free(out);
}

static void test_one_turn(void **state) {
    (void)state;
    const struct ms_chat_msg m[] = {{"user", "Hello", NULL}};
    expect(m, 1, true, false, BOS U "Hello" A "</think>");
    expect(m, 1, true, true, BOS U "Hello" A "<think>");
    expect(m, 1, false, true, BOS U "Hello");
}

static void test_system(void **state) {
    (void)state;
    const struct ms_chat_msg m[] = {{"system", "You are terse.", NULL}, {"user", "Hi", NULL}};
    expect(m, 2, true, false, BOS "You are terse." U "Hi" A "</think>");
    /* every system message goes first, joined by a blank line */
    const struct ms_chat_msg m2[] = {
        {"system", "S1", NULL}, {"user", "Hi", NULL}, {"system", "S2", NULL}};
    expect(m2, 3, true, true, BOS "S1\n\nS2" U "Hi" A "<think>");
}

static void test_three_turns(void **state) {
    (void)state;
    const struct ms_chat_msg m[] = {
        {"system", "sys", NULL},      {"user", "u1", NULL}, {"assistant", "a1", "r1"},
        {"user", "u2", NULL},         {"assistant", "a2", "r2"}, {"user", "u3", NULL}};
    /* earlier reasoning is dropped in both modes: each past turn opens with </think> */
    expect(m, 6, true, true,
           BOS "sys" U "u1" A "</think>a1" EOS U "u2" A "</think>a2" EOS U "u3" A "<think>");
    expect(m, 6, true, false,
           BOS "sys" U "u1" A "</think>a1" EOS U "u2" A "</think>a2" EOS U "u3" A "</think>");
    /* no system prompt */
    expect(m + 1, 5, true, false,
           BOS U "u1" A "</think>a1" EOS U "u2" A "</think>a2" EOS U "u3" A "</think>");
}

static void test_last_assistant_keeps_reasoning(void **state) {
    (void)state;
    const struct ms_chat_msg m[] = {
        {"user", "u1", NULL}, {"assistant", "a1", "r1"}, {"user", "u2", NULL},
        {"assistant", "a2", "r2"}};
    expect(m, 4, false, true, BOS U "u1" A "</think>a1" EOS U "u2" A "<think>r2</think>a2" EOS);
    expect(m, 4, false, false, BOS U "u1" A "</think>a1" EOS U "u2" A "</think>a2" EOS);
    const struct ms_chat_msg no_r[] = {{"user", "u", NULL}, {"assistant", "a", NULL}};
    expect(no_r, 2, false, true, BOS U "u" A "<think></think>a" EOS);
}

static void test_joined_users_and_tools(void **state) {
    (void)state;
    const struct ms_chat_msg m[] = {{"user", "a", NULL}, {"developer", "b", NULL}};
    expect(m, 2, true, false, BOS U "a\n\nb" A "</think>");
    /* a tool result keeps every assistant turn's reasoning in thinking mode */
    const struct ms_chat_msg t[] = {
        {"user", "q", NULL}, {"assistant", "calling", "r1"}, {"tool", "42", NULL}};
    expect(t, 3, true, true,
           BOS U "q" A "<think>r1</think>calling" EOS U "<tool_result>42</tool_result>" A "<think>");
    expect(t, 3, true, false,
           BOS U "q" A "</think>calling" EOS U "<tool_result>42</tool_result>" A "</think>");
}

static void test_empty_and_errors(void **state) {
    (void)state;
    expect(NULL, 0, true, false, BOS A "</think>");
    expect(NULL, 0, false, false, BOS);
    const struct ms_chat_msg m[] = {{"user", NULL, NULL}, {"assistant", "", NULL}};
    expect(m, 2, false, false, BOS U A "</think>" EOS);
    const struct ms_chat_msg bad[] = {{"user", "x", NULL}, {"robot", "y", NULL}};
    char *out = (char *)1;
    size_t len;
    ms_err err;
    assert_int_equal(ms_chat_render(bad, 2, true, false, &out, &len, &err), -1);
    assert_null(out);
    assert_non_null(strstr(err.msg, "robot"));
}

/* In non-thinking mode a prompt plus the answer is a prefix of the next
 * turn's rendering: what lets `chat` evaluate only a turn's new tokens. */
static void test_nothink_prefix(void **state) {
    (void)state;
    const struct ms_chat_msg m[] = {
        {"user", "u1", NULL}, {"assistant", "a1", NULL}, {"user", "u2", NULL}};
    char *p1, *p2;
    size_t l1, l2;
    ms_err err;
    assert_int_equal(ms_chat_render(m, 1, true, false, &p1, &l1, &err), 0);
    assert_int_equal(ms_chat_render(m, 3, true, false, &p2, &l2, &err), 0);
    assert_true(l2 > l1 + 2);
    assert_memory_equal(p1, p2, l1);
    assert_memory_equal(p2 + l1, "a1" EOS U, strlen("a1" EOS U));
    free(p1);
    free(p2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_turn),
        cmocka_unit_test(test_system),
        cmocka_unit_test(test_three_turns),
        cmocka_unit_test(test_last_assistant_keeps_reasoning),
        cmocka_unit_test(test_joined_users_and_tools),
        cmocka_unit_test(test_empty_and_errors),
        cmocka_unit_test(test_nothink_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
