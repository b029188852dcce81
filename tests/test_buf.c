/*
 * test_buf.c - util/buf.h: appends of any bytes keep the text
 * NUL-terminated, capacity grows past the first allocation, printf output
 * longer than its stack buffer (1 KiB) is appended whole, and free returns
 * the buffer to the empty state.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/buf.h"

static void test_put_puts(void **state) {
    (void)state;
    struct ms_buf b = {0};
    assert_int_equal(ms_buf_put(&b, "", 0), 0); /* an empty append still gives a string */
    assert_non_null(b.p);
    assert_string_equal(b.p, "");
    assert_int_equal(ms_buf_puts(&b, "abc"), 0);
    assert_int_equal(ms_buf_put(&b, "d\0e", 3), 0); /* any bytes, NUL included */
    assert_int_equal(b.len, 6);
    assert_memory_equal(b.p, "abcd\0e", 7);
    for (int i = 0; i < 1000; i++) assert_int_equal(ms_buf_puts(&b, "xyz"), 0);
    assert_int_equal(b.len, 3006);
    assert_true(b.cap > b.len);
    assert_int_equal(b.p[b.len], '\0');
    assert_memory_equal(b.p + 3003, "xyz", 4);
    ms_buf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

static void test_printf(void **state) {
    (void)state;
    struct ms_buf b = {0};
    assert_int_equal(ms_buf_printf(&b, "%d-%s", 42, "x"), 0);
    assert_string_equal(b.p, "42-x");
    char big[3000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(ms_buf_printf(&b, "[%s]", big), 0); /* longer than 1 KiB */
    assert_int_equal(b.len, 4 + 2 + sizeof big - 1);
    assert_int_equal(b.p[4], '[');
    assert_int_equal(b.p[b.len - 1], ']');
    assert_int_equal(strspn(b.p + 5, "q"), sizeof big - 1);
    ms_buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_puts),
        cmocka_unit_test(test_printf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
