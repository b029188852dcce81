/*
 * test_utf8.c - text/utf8.h: which byte sequences are valid UTF-8 (RFC
 * 3629: lengths 1-4, no overlong forms, no surrogates, nothing past
 * U+10FFFF, no truncated or stray continuation bytes), the U+FFFD
 * replacement of each bad byte, and JSON strings of arbitrary bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "text/utf8.h"

static void test_valid_len(void **state) {
    (void)state;
    static const struct {
        const char *s;
        size_t n, want;
    } cases[] = {
        {"a", 1, 1},
        {"\xC3\xA9", 2, 2},             /* U+00E9 */
        {"\xE2\x82\xAC", 3, 3},         /* U+20AC */
        {"\xF0\x9F\x98\x80", 4, 4},     /* U+1F600 */
        {"\xF4\x8F\xBF\xBF", 4, 4},     /* U+10FFFF, the last */
        {"\xC0\x80", 2, 0},             /* overlong NUL */
        {"\xE0\x80\xAF", 3, 0},         /* overlong '/' */
        {"\xED\xA0\x80", 3, 0},         /* surrogate U+D800 */
        {"\xF4\x90\x80\x80", 4, 0},     /* U+110000 */
        {"\xE2\x82", 2, 0},             /* truncated */
        {"\x80", 1, 0},                 /* stray continuation */
        {"\xC3\x28", 2, 0},             /* bad continuation */
        {"\xFF", 1, 0},                 /* never a lead byte */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (ms_utf8_valid_len(cases[i].s, cases[i].n) != cases[i].want)
            fail_msg("case %zu: got %zu, want %zu", i,
                     ms_utf8_valid_len(cases[i].s, cases[i].n), cases[i].want);
}

static void test_clean_and_json(void **state) {
    (void)state;
    struct ms_buf b = {0};
    const char in[] = "a\xC3\xA9\xFF" "b\xE2\x82" "c\xED\xA0\x80";
    assert_int_equal(ms_utf8_clean(&b, in, sizeof in - 1), 0);
    const char want[] = "a\xC3\xA9\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD"
                        "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD";
    assert_int_equal(b.len, sizeof want - 1);
    assert_memory_equal(b.p, want, sizeof want);
    ms_buf_free(&b);

    json_t *j = ms_json_text(in, sizeof in - 1);
    assert_non_null(j);
    assert_int_equal(json_string_length(j), sizeof want - 1);
    assert_memory_equal(json_string_value(j), want, sizeof want - 1);
    json_decref(j);
    j = ms_json_text("x\0y", 3); /* NUL kept */
    assert_int_equal(json_string_length(j), 3);
    json_decref(j);
    j = ms_json_text(NULL, 0);
    assert_string_equal(json_string_value(j), "");
    json_decref(j);
}

/* Text for clients: bad bytes and NULs each become U+FFFD. */
static void test_clean_text(void **state) {
    (void)state;
    struct ms_buf b = {0};
    static const char in[] = "a\0b\xff" "c\0\0\xc3\xa9\0";
    assert_int_equal(ms_utf8_clean_text(&b, in, sizeof in - 1), 0);
    static const char want[] = "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD\xc3\xa9\xEF\xBF\xBD";
    assert_int_equal(b.len, sizeof want - 1);
    assert_memory_equal(b.p, want, sizeof want - 1);
    ms_buf_free(&b);
    json_t *j = ms_json_client_text("x\0y\xff", 4);
    assert_non_null(j);
    assert_string_equal(json_string_value(j), "x\xEF\xBF\xBDy\xEF\xBF\xBD");
    json_decref(j);
    assert_int_equal(ms_utf8_clean_text(&b, "", 0), 0);
    assert_non_null(b.p);
    assert_int_equal(b.len, 0);
    ms_buf_free(&b);
}

/* A tail that begins a character it does not finish, and every tail that
 * does not. */
static void test_partial_tail(void **state) {
    (void)state;
    static const struct {
        const char *s;
        size_t want;
    } cases[] = {
        {"", 0},
        {"abc", 0},
        {"caf\xc3", 1},               /* 2-byte lead alone */
        {"caf\xc3\xa9", 0},           /* é whole */
        {"\xe2\x82", 2},              /* 3-byte lead, one continuation */
        {"x\xe2\x82\xac", 0},        /* € whole */
        {"\xf0\x9f\x98", 3},          /* 4-byte lead, two continuations */
        {"\xf0\x9f\x98\x80", 0},      /* a whole emoji */
        {"\xf0", 1},
        {"a\x80", 0},                  /* a stray continuation byte: not a start */
        {"\x80\x80\x80", 0},          /* nothing to finish within reach */
        {"\xff", 0},                   /* not a lead byte */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (ms_utf8_partial_tail(cases[i].s, strlen(cases[i].s)) != cases[i].want)
            fail_msg("case %zu: got %zu, want %zu", i, ms_utf8_partial_tail(cases[i].s, strlen(cases[i].s)),
                     cases[i].want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_len),
        cmocka_unit_test(test_clean_and_json),
        cmocka_unit_test(test_partial_tail),
        cmocka_unit_test(test_clean_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
