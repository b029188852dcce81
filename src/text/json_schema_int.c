/*
 * json_schema_int.c - integer bounds (minimum, maximum and their exclusive
 * forms) as exact decimal grammars, for json_schema.c's walk.
 *
 * Constrained decoding has only the grammar to go by, and a grammar cannot
 * compare numbers, only spell them: so a range becomes, for each length of
 * decimal between its ends, the digits split where the ends' digits part
 * (the regex range construction). A bound past 18 digits is no bound (an
 * error where it would leave nothing), which keeps the arithmetic inside
 * long long; an open end runs to the 16 digits of an unbounded integer
 * (json_schema.h), or the other end's if longer. Apart from the shared
 * helpers this file stands alone.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "text/json_schema_impl.h"

#define INT_DIGITS 16                  /* longest unbounded integer part */
#define MAX_BOUND 999999999999999999LL /* integer bounds past 18 digits count as absent */

static void digit_class(struct js_conv *c, struct ms_buf *e, char a, char b) {
    if (a == b)
        js_putf(c, e, "\"%c\"", a);
    else
        js_putf(c, e, "[%c-%c]", a, b);
}

static void any_digits(struct js_conv *c, struct ms_buf *e, size_t n) {
    if (n) js_putf(c, e, n == 1 ? " [0-9]" : " [0-9]{%zu}", n);
}

static bool all_of(const char *s, char ch, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ch) return false;
    return true;
}

/* The decimals from x to y, both n digits (x <= y): a shared leading digit,
 * else the lowest first digit's range, the full middle ones, the highest's. */
static void same_len(struct js_conv *c, struct ms_buf *e, const char *x, const char *y, size_t n) {
    static const char zeros[] = "0000000000000000000000", nines[] = "9999999999999999999999";
    if (x[0] == y[0]) {
        digit_class(c, e, x[0], x[0]);
        if (n > 1) js_put(c, e, " "), same_len(c, e, x + 1, y + 1, n - 1);
        return;
    }
    const bool low = all_of(x + 1, '0', n - 1), high = all_of(y + 1, '9', n - 1);
    const char a = low ? x[0] : (char)(x[0] + 1), b = high ? y[0] : (char)(y[0] - 1);
    int alts = 0;
    js_put(c, e, "( ");
    if (!low) {
        digit_class(c, e, x[0], x[0]);
        js_put(c, e, " "), same_len(c, e, x + 1, nines, n - 1), alts++;
    }
    if (a <= b) {
        js_put(c, e, alts++ ? " | " : "");
        digit_class(c, e, a, b), any_digits(c, e, n - 1);
    }
    if (!high) {
        js_put(c, e, alts++ ? " | " : "");
        digit_class(c, e, y[0], y[0]);
        js_put(c, e, " "), same_len(c, e, zeros, y + 1, n - 1);
    }
    js_put(c, e, " )");
}

/* The decimals (no leading zeros) from a to b, or to INT_DIGITS+ digits
 * when open. */
static void urange(struct js_conv *c, struct ms_buf *e, uint64_t a, uint64_t b, bool open) {
    char xs[24], ys[24];
    const size_t la = (size_t)snprintf(xs, sizeof xs, "%" PRIu64, a);
    const size_t lb = open ? la : (size_t)snprintf(ys, sizeof ys, "%" PRIu64, b);
    const size_t cap = la > INT_DIGITS ? la : INT_DIGITS;
    js_put(c, e, "( ");
    for (size_t len = la; len <= lb; len++) {
        uint64_t p10 = 1;
        for (size_t k = 1; k < len; k++) p10 *= 10;
        const uint64_t lo = len == la ? a : p10, hi = !open && len == lb ? b : p10 * 10 - 1;
        snprintf(xs, sizeof xs, "%" PRIu64, lo);
        snprintf(ys, sizeof ys, "%" PRIu64, hi);
        js_put(c, e, len > la ? " | " : "");
        same_len(c, e, xs, ys, len);
    }
    if (open && la < cap) js_putf(c, e, " | [1-9] [0-9]{%zu,%zu}", la, cap - 1);
    js_put(c, e, " )");
}

/* An integer bound: 0 with *has and *v (the nearest integer inside it), or
 * -1. excl: the bound excludes its value. lower: a minimum (round up). */
static int bound(struct js_conv *c, const json_t *j, const char *k, const char *ptr, bool lower, bool excl, bool *has,
                 long long *v) {
    if (!json_is_number(j)) return js_fail(c, ptr, "'%s' must be a number", k);
    const double d = json_number_value(j);
    if (d < -(double)MAX_BOUND || d > (double)MAX_BOUND) {
        if ((lower && d > 0) || (!lower && d < 0))
            return js_fail(c, ptr, "'%s' is past the 18 digits integers may have here", k);
        return 0; /* looser than any bound a grammar can spell: none */
    }
    long long x = json_is_integer(j) ? (long long)json_integer_value(j) : (long long)(lower ? ceil(d) : floor(d));
    if (excl && (!json_is_real(j) || d == (double)x)) x += lower ? 1 : -1;
    if (!*has || (lower ? x > *v : x < *v)) *v = x;
    *has = true;
    return 0;
}

/* Both bound keyword forms: draft 4 (exclusiveX: true on minimum) and
 * draft 6 (exclusiveX: the bound itself); both given: the tighter one. */
static int bounds(struct js_conv *c, const json_t *s, const char *ptr, bool lower, bool *has, long long *v) {
    const char *k = lower ? "minimum" : "maximum", *xk = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_t *j = json_object_get(s, k), *x = json_object_get(s, xk);
    *has = false;
    if (x && !json_is_boolean(x) && bound(c, x, xk, ptr, lower, true, has, v)) return -1;
    return j ? bound(c, j, k, ptr, lower, json_is_true(x), has, v) : 0;
}

int js_gen_integer(struct js_conv *c, const json_t *s, const char *ptr, struct ms_buf *e) {
    bool hlo, hhi;
    long long lo = 0, hi = 0;
    if (bounds(c, s, ptr, true, &hlo, &lo) || bounds(c, s, ptr, false, &hhi, &hi)) return -1;
    if (!hlo && !hhi) return js_put_prim(c, e, JS_PRIM_INTEGER), 0;
    if (hlo && hhi && lo > hi) return js_fail(c, ptr, "schema allows nothing (integer range %lld..%lld)", lo, hi);
    int alts = 0;
    if (!hlo || lo < 0) { /* negatives, by magnitude */
        js_put(c, e, "\"-\" "), alts++;
        urange(c, e, hhi && hi < 0 ? (uint64_t)-hi : 1, hlo ? (uint64_t)-lo : 0, !hlo);
    }
    if (!hhi || hi >= 0) {
        js_put(c, e, alts ? " | " : "");
        urange(c, e, hlo && lo > 0 ? (uint64_t)lo : 0, hhi ? (uint64_t)hi : 0, !hhi);
    }
    return 0;
}
