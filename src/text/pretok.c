/*
 * pretok.c - the "deepseek-v3" pre-tokenizer (regexes in pretok.h), made to
 * cut words exactly where llama.cpp cuts them.
 *
 * llama.cpp does not run these regexes with Unicode properties. It "collapses"
 * the text to one byte per code point: ASCII stays itself, a non-ASCII
 * White_Space code point becomes \v, and every other code point becomes a
 * byte naming its category (0xD1 number, 0xD2 letter, 0xD3 punctuation,
 * 0xD4 mark, 0xD5 symbol, 0xD0 anything else). \p{X} in the regex becomes a
 * class of that byte plus the ASCII members of X, and an ECMAScript
 * backtracking matcher runs on the collapsed bytes. We do the same with PCRE2
 * (8-bit, no UTF: also backtracking, leftmost alternative first, the same
 * \s = [\t\n\v\f\r ]), so the categories, the whitespace set and the regex
 * semantics all agree. Regex 2 has no \p{..} and is a plain run of code
 * points in three ranges; llama.cpp matches it on the code points, and so do
 * we, with a loop.
 *
 * Each regex runs on each piece separately (the subject ends at the piece's
 * end, which is what (?!\S) sees), and the text between matches is kept as
 * pieces of its own.
 */
#include "text/pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "text/unicode_cat.h"
#include "text/utf8.h"

/* Collapsed bytes of the non-ASCII categories. */
#define C_OTHER 0xD0
#define C_NUMBER 0xD1
#define C_LETTER 0xD2
#define C_PUNCT 0xD3
#define C_MARK 0xD4
#define C_SYMBOL 0xD5
#define C_SPACE 0x0B

/* The ASCII members of \p{P} and \p{S}, inside a character class. */
#define P_ASCII "!-#%-*,-/:;?@\\[-\\]_{}"
#define S_ASCII "$+<->^`|~"
#define L_ASCII "A-Za-z"

static const char re_digits[] = "[\\xD1" "0-9]{1,3}";
static const char re_words[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\\r\\n\\xD2" L_ASCII "\\xD3" P_ASCII "\\xD5" S_ASCII "]?[\\xD2" L_ASCII "\\xD4]+"
    "| ?[\\xD3" P_ASCII "\\xD5" S_ASCII "]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

struct ms_pretok {
    pcre2_code *digits;
    pcre2_code *words;
};

size_t ms_utf8_decode_llama(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    size_t len;
    uint32_t c;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b < 0xC0) {
        len = 0;
    } else if (b < 0xE0) {
        len = 2, c = b & 0x1Fu;
    } else if (b < 0xF0) {
        len = 3, c = b & 0x0Fu;
    } else if (b < 0xF8) {
        len = 4, c = b & 0x07u;
    } else {
        len = 0;
    }
    if (len == 0 || len > n) {
        *cp = 0xFFFD;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = 0xFFFD;
            return 1;
        }
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    if (c > 0x10FFFF) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return len;
}

static uint8_t collapse(uint32_t c) {
    if (c < 0x80) return (uint8_t)c;
    if (ms_unicode_is_space(c)) return C_SPACE;
    switch (ms_unicode_cat(c)) {
    case MS_UCAT_NUMBER: return C_NUMBER;
    case MS_UCAT_LETTER: return C_LETTER;
    case MS_UCAT_PUNCT: return C_PUNCT;
    case MS_UCAT_MARK: return C_MARK;
    case MS_UCAT_SYMBOL: return C_SYMBOL;
    default: return C_OTHER;
    }
}

static pcre2_code *compile(const char *re, ms_err *err) {
    int code;
    PCRE2_SIZE at;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, 0, &code, &at, NULL);
    if (!c) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        ms_err_set(err, "pretok: regex does not compile at %zu: %s", (size_t)at, (char *)msg);
        return NULL;
    }
    (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* an optimisation only */
    return c;
}

int ms_pretok_new(struct ms_pretok **out, ms_err *err) {
    *out = NULL;
    struct ms_pretok *p = calloc(1, sizeof *p);
    if (!p) return ms_err_set(err, "pretok: out of memory");
    if (!(p->digits = compile(re_digits, err)) || !(p->words = compile(re_words, err))) {
        ms_pretok_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

void ms_pretok_free(struct ms_pretok *p) {
    if (!p) return;
    pcre2_code_free(p->digits);
    pcre2_code_free(p->words);
    free(p);
}

void ms_pretok_words_free(struct ms_pretok_words *w) {
    free(w->text);
    free(w->ends);
    memset(w, 0, sizeof *w);
}

/* Piece lengths, in code points. */
struct pieces {
    size_t *len;
    size_t n, cap;
};

static int push(struct pieces *p, size_t len) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        size_t *l = realloc(p->len, cap * sizeof *l);
        if (!l) return -1;
        p->len = l, p->cap = cap;
    }
    p->len[p->n++] = len;
    return 0;
}

/* Splits every piece of `in` by the regex on the collapsed text. */
static int split_regex(const pcre2_code *re, const uint8_t *col, const struct pieces *in,
                       struct pieces *out, ms_err *err) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return ms_err_set(err, "pretok: out of memory");
    size_t start = 0;
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        size_t len = in->len[i], at = 0, done = 0;
        while (at < len) {
            int m = pcre2_match(re, col + start, len, at, 0, md, NULL);
            if (m == PCRE2_ERROR_NOMATCH) break;
            if (m < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(m, msg, sizeof msg);
                rc = ms_err_set(err, "pretok: regex match failed: %s", (char *)msg);
                break;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* no alternative can match empty; be safe anyway */
                at = me + 1;
                continue;
            }
            if ((ms > done && push(out, ms - done)) || push(out, me - ms)) {
                rc = ms_err_set(err, "pretok: out of memory");
                break;
            }
            done = at = me;
        }
        if (rc == 0 && done < len && push(out, len - done)) rc = ms_err_set(err, "pretok: out of memory");
        start += len;
    }
    pcre2_match_data_free(md);
    return rc;
}

static bool is_kana_han(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x309F) ||
           (c >= 0x30A0 && c <= 0x30FF);
}

/* Regex 2: runs of Han/kana code points become pieces of their own. */
static int split_cjk(const uint32_t *cpts, const struct pieces *in, struct pieces *out,
                     ms_err *err) {
    size_t start = 0;
    for (size_t i = 0; i < in->n; i++) {
        size_t len = in->len[i], j = 0;
        while (j < len) {
            bool k = is_kana_han(cpts[start + j]);
            size_t e = j + 1;
            while (e < len && is_kana_han(cpts[start + e]) == k) e++;
            if (push(out, e - j)) return ms_err_set(err, "pretok: out of memory");
            j = e;
        }
        start += len;
    }
    return 0;
}

int ms_pretok_split(const struct ms_pretok *p, const char *text, size_t n,
                    struct ms_pretok_words *out, ms_err *err) {
    memset(out, 0, sizeof *out);
    const uint8_t *s = (const uint8_t *)text;
    uint32_t *cpts = malloc((n ? n : 1) * sizeof *cpts);
    uint8_t *col = malloc(n ? n : 1);
    struct pieces a = {0}, b = {0};
    int rc = -1;
    if (!cpts || !col) {
        ms_err_set(err, "pretok: out of memory");
        goto done;
    }
    size_t nc = 0;
    for (size_t i = 0; i < n; nc++) {
        i += ms_utf8_decode_llama(s + i, n - i, &cpts[nc]);
        col[nc] = collapse(cpts[nc]);
    }
    if (nc > 0 && push(&a, nc)) {
        ms_err_set(err, "pretok: out of memory");
        goto done;
    }
    if (split_regex(p->digits, col, &a, &b, err)) goto done;
    a.n = 0;
    if (split_cjk(cpts, &b, &a, err)) goto done;
    b.n = 0;
    if (split_regex(p->words, col, &a, &b, err)) goto done;

    /* Re-encode: at most 4 bytes per code point (3 for U+FFFD from 1 byte). */
    out->text = malloc(4 * nc + 1);
    out->ends = malloc((b.n ? b.n : 1) * sizeof *out->ends);
    if (!out->text || !out->ends) {
        ms_err_set(err, "pretok: out of memory");
        goto done;
    }
    size_t k = 0, c = 0;
    for (size_t w = 0; w < b.n; w++) {
        for (size_t e = c + b.len[w]; c < e; c++) k += ms_utf8_encode(cpts[c], out->text + k);
        out->ends[w] = k;
    }
    out->text[k] = '\0';
    out->len = k;
    out->n = b.n;
    rc = 0;
done:
    if (rc) ms_pretok_words_free(out);
    free(cpts);
    free(col);
    free(a.len);
    free(b.len);
    return rc;
}
