/*
 * utf8.c - UTF-8 checks and U+FFFD replacement (see utf8.h).
 */
#include "text/utf8.h"

#include <stdint.h>
#include <string.h>

size_t ms_utf8_encode(uint32_t cp, char out[4]) {
    const size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (size_t i = n - 1; i > 0; i--) out[i] = (char)(0x80 | (cp & 0x3F)), cp >>= 6;
    out[0] = (char)(unsigned char)(n == 1 ? cp : (0xF00u >> n & 0xFF) | cp);
    return n;
}

size_t ms_utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

size_t ms_utf8_valid_len(const char *s, size_t n) {
    const unsigned char c = (unsigned char)s[0];
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    if (len == 1) return 1;
    uint32_t cp = c & (0x7fu >> len);
    for (size_t k = 1; k < len; k++) {
        const unsigned char cc = (unsigned char)s[k];
        if ((cc >> 6) != 2) return 0;
        cp = (cp << 6) | (cc & 0x3fu);
    }
    const uint32_t min = len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u;
    return cp >= min && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff) ? len : 0;
}

size_t ms_utf8_partial_tail(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        const unsigned char c = (unsigned char)s[n - k];
        if ((c >> 6) == 2) continue; /* a continuation byte: look further back */
        const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        return len > k ? k : 0;
    }
    return 0;
}

int ms_utf8_clean(struct ms_buf *out, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const size_t len = ms_utf8_valid_len(s + i, n - i);
        if (ms_buf_put(out, len ? s + i : "\xEF\xBF\xBD", len ? len : 3)) return -1;
        i += len ? len : 1;
    }
    return ms_buf_put(out, "", 0); /* a string even when n == 0 */
}

int ms_utf8_clean_text(struct ms_buf *out, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const char *nul = memchr(s + i, '\0', n - i);
        const size_t k = nul ? (size_t)(nul - (s + i)) : n - i;
        if (ms_utf8_clean(out, s + i, k) || (nul && ms_buf_put(out, "\xEF\xBF\xBD", 3))) return -1;
        i += k + (nul != NULL);
    }
    return ms_buf_put(out, "", 0);
}

json_t *ms_json_text(const char *s, size_t n) {
    json_t *j = json_stringn(n ? s : "", n); /* the common case: already valid */
    if (j) return j;
    struct ms_buf b = {0};
    if (!ms_utf8_clean(&b, s, n)) j = json_stringn(b.p, b.len);
    ms_buf_free(&b);
    return j;
}

json_t *ms_json_client_text(const char *s, size_t n) {
    if (!n || !memchr(s, '\0', n)) return ms_json_text(s, n);
    struct ms_buf b = {0};
    json_t *j = NULL;
    if (!ms_utf8_clean_text(&b, s, n)) j = json_stringn(b.p, b.len);
    ms_buf_free(&b);
    return j;
}
