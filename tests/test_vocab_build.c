/*
 * test_vocab_build.c - the BPE vocabulary mkmodel writes into models
 * (src/mkmodel/vocab_build.c): exact size, determinism, the 256 byte tokens in
 * GPT-2's byte-to-unicode encoding, merge consistency, DeepSeek's special
 * tokens as CONTROL, and the size limits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkmodel/vocab_build.h"

/* Sizes around the interesting points: the minimum, small test vocabularies,
 * and DeepSeek V4's real size (far past what the corpus can fill). */
static const uint32_t sizes[] = {MS_VOCAB_MIN_SIZE, MS_VOCAB_MIN_SIZE + 1, 300, 512, 1000, 2048, 129280};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

static int32_t find_in(const struct ms_vocab_spec *v, const char *text, uint32_t limit) {
    for (uint32_t i = 0; i < limit && i < v->n_tokens; i++)
        if (!strcmp(v->tokens[i], text)) return (int32_t)i;
    return -1;
}

static int32_t find_token(const struct ms_vocab_spec *v, const char *text) {
    return find_in(v, text, v->n_tokens);
}

/* Decodes one UTF-8 code point; returns its length or 0 if malformed. */
static int utf8_decode(const unsigned char *s, uint32_t *cp) {
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80) {
        *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    return 0;
}

/* GPT-2 byte-level decoding of one code point, from the definition: printable
 * Latin-1 stands for itself, U+0100.. stand for the other bytes in order. */
static int byte_of_codepoint(uint32_t cp) {
    static int table[512];
    static int ready;
    if (!ready) {
        for (int i = 0; i < 512; i++) table[i] = -1;
        int next = 256;
        for (int b = 0; b < 256; b++) {
            int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            table[printable ? b : next++] = b;
        }
        ready = 1;
    }
    return cp < 512 ? table[cp] : -1;
}

/* Raw bytes of a byte-level token text; returns the length or -1. */
static int decode_token(const char *text, unsigned char *out, int cap) {
    int n = 0;
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        uint32_t cp;
        int l = utf8_decode(s, &cp);
        if (!l || n == cap) return -1;
        int b = byte_of_codepoint(cp);
        if (b < 0) return -1;
        out[n++] = (unsigned char)b;
        s += l;
    }
    return n;
}

static void build(uint32_t n, struct ms_vocab_spec *v) {
    ms_err err = {{0}};
    int rc = ms_vocab_build(n, v, &err);
    if (rc) fail_msg("ms_vocab_build(%u): %s", n, err.msg);
}

static void test_exact_size(void **state) {
    (void)state;
    for (size_t k = 0; k < N_SIZES; k++) {
        struct ms_vocab_spec v;
        build(sizes[k], &v);
        assert_int_equal(v.n_tokens, sizes[k]);
        uint32_t n_normal = 0, n_control = 0;
        for (uint32_t i = 0; i < v.n_tokens; i++) {
            assert_non_null(v.tokens[i]);
            assert_true(v.tokens[i][0] != '\0');
            assert_true(v.token_type[i] == MS_TOKEN_NORMAL || v.token_type[i] == MS_TOKEN_CONTROL);
            n_normal += v.token_type[i] == MS_TOKEN_NORMAL;
            n_control += v.token_type[i] == MS_TOKEN_CONTROL;
        }
        assert_int_equal(n_normal + n_control, v.n_tokens);
        /* Every normal token past the bytes comes from exactly one merge. */
        assert_int_equal(v.n_merges, n_normal - 256);
        assert_true(v.n_merges >= 1);
        ms_vocab_spec_free(&v);
    }
}

static void test_tokens_unique(void **state) {
    (void)state;
    struct ms_vocab_spec v;
    build(2048, &v);
    for (uint32_t i = 0; i < v.n_tokens; i++)
        for (uint32_t j = i + 1; j < v.n_tokens; j++)
            if (!strcmp(v.tokens[i], v.tokens[j])) fail_msg("tokens %u and %u are both '%s'", i, j, v.tokens[i]);
    ms_vocab_spec_free(&v);
}

static void test_deterministic(void **state) {
    (void)state;
    struct ms_vocab_spec a, b, big;
    build(1000, &a);
    build(1000, &b);
    build(2048, &big);
    assert_int_equal(a.n_tokens, b.n_tokens);
    assert_int_equal(a.n_merges, b.n_merges);
    for (uint32_t i = 0; i < a.n_tokens; i++) {
        assert_string_equal(a.tokens[i], b.tokens[i]);
        assert_int_equal(a.token_type[i], b.token_type[i]);
    }
    for (uint32_t i = 0; i < a.n_merges; i++) assert_string_equal(a.merges[i], b.merges[i]);
    assert_int_equal(a.bos_id, b.bos_id);
    assert_int_equal(a.eos_id, b.eos_id);
    assert_int_equal(a.pad_id, b.pad_id);
    /* A larger vocabulary continues the same training: same merges first. */
    assert_true(big.n_merges > a.n_merges);
    for (uint32_t i = 0; i < a.n_merges; i++) assert_string_equal(a.merges[i], big.merges[i]);
    ms_vocab_spec_free(&a);
    ms_vocab_spec_free(&b);
    ms_vocab_spec_free(&big);
}

static void test_all_bytes(void **state) {
    (void)state;
    struct ms_vocab_spec v;
    build(512, &v);
    int seen[256] = {0};
    for (uint32_t i = 0; i < v.n_tokens; i++) {
        if (v.token_type[i] != MS_TOKEN_NORMAL) continue;
        unsigned char raw[256];
        int n = decode_token(v.tokens[i], raw, (int)sizeof raw);
        if (n < 1) fail_msg("token %u '%s' is not byte-level text", i, v.tokens[i]);
        if (n == 1) seen[raw[0]]++;
    }
    for (int b = 0; b < 256; b++)
        if (seen[b] != 1) fail_msg("byte 0x%02x has %d tokens", b, seen[b]);
    /* Spot checks of GPT-2's mapping: space is U+0120, newline U+010A,
     * NUL U+0100, printable ASCII itself. */
    assert_true(find_token(&v, "\xC4\xA0") >= 0);
    assert_true(find_token(&v, "\xC4\x8A") >= 0);
    assert_true(find_token(&v, "\xC4\x80") >= 0);
    assert_true(find_token(&v, "a") >= 0);
    assert_true(find_token(&v, " ") < 0);
    assert_true(find_token(&v, "\n") < 0);
    ms_vocab_spec_free(&v);
}

static void test_merges_consistent(void **state) {
    (void)state;
    for (size_t k = 0; k < N_SIZES; k++) {
        struct ms_vocab_spec v;
        build(sizes[k], &v);
        /* Normal tokens all sit before the place-holders and the specials. */
        uint32_t lim = 3 + 256 + v.n_merges;
        for (uint32_t m = 0; m < v.n_merges; m++) {
            const char *s = v.merges[m];
            const char *sp = strchr(s, ' ');
            assert_non_null(sp);
            assert_null(strchr(sp + 1, ' '));
            size_t ll = (size_t)(sp - s);
            char left[512], right[512], joined[1024];
            assert_true(ll > 0 && ll < sizeof left && strlen(sp + 1) > 0 && strlen(sp + 1) < sizeof right);
            memcpy(left, s, ll);
            left[ll] = '\0';
            strcpy(right, sp + 1);
            snprintf(joined, sizeof joined, "%s%s", left, right);
            int32_t il = find_in(&v, left, lim), ir = find_in(&v, right, lim), ij = find_in(&v, joined, lim);
            if (il < 0 || ir < 0 || ij < 0) fail_msg("merge %u '%s': a part or the result is not a token", m, s);
            if (il >= ij || ir >= ij) fail_msg("merge %u '%s': parts %d %d not before result %d", m, s, il, ir, ij);
            assert_int_equal(v.token_type[il], MS_TOKEN_NORMAL);
            assert_int_equal(v.token_type[ir], MS_TOKEN_NORMAL);
            assert_int_equal(v.token_type[ij], MS_TOKEN_NORMAL);
            /* Merges come in token order. */
            if (m > 0) {
                char prev[1024];
                const char *ps = v.merges[m - 1], *psp = strchr(ps, ' ');
                snprintf(prev, sizeof prev, "%.*s%s", (int)(psp - ps), ps, psp + 1);
                assert_true(find_in(&v, prev, lim) < ij);
            }
        }
        ms_vocab_spec_free(&v);
    }
}

/* Training must learn the corpus's frequent words, not only byte pairs. */
static void test_learns_words(void **state) {
    (void)state;
    struct ms_vocab_spec v;
    build(2048, &v);
    assert_true(find_token(&v, "\xC4\xA0" "the") >= 0);  /* " the" */
    assert_true(find_token(&v, "\xC4\xA0" "and") >= 0);  /* " and" */
    assert_true(find_token(&v, "\xC4\xA0\xC4\xA0\xC4\xA0") >= 0); /* indentation */
    ms_vocab_spec_free(&v);
}

static void test_specials(void **state) {
    (void)state;
    static const char *const names[] = {
        "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>",
        "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "<|EOT|>",
        "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>",
        "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
        "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁sep｜>", "｜DSML｜",
    };
    assert_int_equal(sizeof names / sizeof names[0], MS_VOCAB_N_SPECIAL);
    for (size_t k = 0; k < N_SIZES; k++) {
        struct ms_vocab_spec v;
        build(sizes[k], &v);
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            int32_t id = find_token(&v, names[i]);
            if (id < 0) fail_msg("n_vocab %u: special '%s' missing", sizes[k], names[i]);
            assert_int_equal(v.token_type[id], MS_TOKEN_CONTROL);
        }
        assert_string_equal(v.tokens[v.bos_id], "<｜begin▁of▁sentence｜>");
        assert_string_equal(v.tokens[v.eos_id], "<｜end▁of▁sentence｜>");
        assert_string_equal(v.tokens[v.pad_id], "<｜▁pad▁｜>");
        /* The V4 tool-call marker is the last token, as DeepSeek appends. */
        assert_string_equal(v.tokens[v.n_tokens - 1], "｜DSML｜");
        /* Control tokens other than specials are DeepSeek's place-holders. */
        uint32_t n_control = 0;
        for (uint32_t i = 0; i < v.n_tokens; i++) {
            if (v.token_type[i] != MS_TOKEN_CONTROL) continue;
            n_control++;
            int special = 0;
            for (size_t j = 0; j < sizeof names / sizeof names[0]; j++) special |= !strcmp(v.tokens[i], names[j]);
            if (!special) assert_non_null(strstr(v.tokens[i], "<｜place▁holder▁no▁"));
        }
        assert_true(n_control >= MS_VOCAB_N_SPECIAL);
        ms_vocab_spec_free(&v);
    }
}

/* Past what the corpus can fill, the gap is place-holders, and the merges
 * stop where the corpus ran out (same count as any larger size). */
static void test_fill(void **state) {
    (void)state;
    struct ms_vocab_spec a, b;
    build(129280, &a);
    build(200000, &b);
    assert_int_equal(a.n_merges, b.n_merges);
    assert_true(a.n_merges < 129280 - 256 - MS_VOCAB_N_SPECIAL);
    uint32_t first_ph = 3 + 256 + a.n_merges;
    assert_string_equal(a.tokens[first_ph], "<｜place▁holder▁no▁0｜>");
    assert_int_equal(a.token_type[first_ph], MS_TOKEN_CONTROL);
    assert_int_equal(a.token_type[first_ph - 1], MS_TOKEN_NORMAL);
    ms_vocab_spec_free(&a);
    ms_vocab_spec_free(&b);
}

static void test_size_limits(void **state) {
    (void)state;
    const uint32_t bad[] = {0, 1, 256, 256 + MS_VOCAB_N_SPECIAL, MS_VOCAB_MIN_SIZE - 1, MS_VOCAB_MAX_SIZE + 1, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ms_vocab_spec v;
        memset(&v, 0x5A, sizeof v);
        ms_err err = {{0}};
        assert_int_equal(ms_vocab_build(bad[i], &v, &err), -1);
        assert_non_null(strstr(err.msg, "n_vocab"));
        assert_null(v.tokens);
        ms_vocab_spec_free(&v); /* a failed build leaves a spec safe to free */
    }
    struct ms_vocab_spec v;
    build(MS_VOCAB_MIN_SIZE, &v);
    assert_int_equal(v.n_merges, 1);
    ms_vocab_spec_free(&v);
    ms_vocab_spec_free(&v); /* freeing twice is harmless: free zeroes */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_size),   cmocka_unit_test(test_tokens_unique),
        cmocka_unit_test(test_deterministic), cmocka_unit_test(test_all_bytes),
        cmocka_unit_test(test_merges_consistent), cmocka_unit_test(test_learns_words),
        cmocka_unit_test(test_specials),     cmocka_unit_test(test_fill),
        cmocka_unit_test(test_size_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
