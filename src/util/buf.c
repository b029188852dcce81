/*
 * buf.c - growable byte strings (see buf.h).
 */
#include "util/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ms_buf_put(struct ms_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int ms_buf_puts(struct ms_buf *b, const char *s) { return ms_buf_put(b, s, strlen(s)); }

int ms_buf_printf(struct ms_buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof tmp) return ms_buf_put(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    const int rc = ms_buf_put(b, big, (size_t)n);
    free(big);
    return rc;
}

int ms_buf_read_file(struct ms_buf *b, const char *path, size_t max_bytes, ms_err *err) {
    const bool std_in = !strcmp(path, "-");
    const char *name = std_in ? "standard input" : path;
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f) return ms_err_errno(err, errno, "cannot open %s", path);
    char chunk[1 << 16];
    size_t total = 0;
    int rc = 0;
    for (;;) {
        const size_t n = fread(chunk, 1, sizeof chunk, f);
        if (n > max_bytes - total) {
            rc = ms_err_set(err, "%s holds more than %zu bytes", name, max_bytes);
            break;
        }
        total += n;
        if (n && ms_buf_put(b, chunk, n)) {
            rc = ms_err_set(err, "out of memory reading %s", name);
            break;
        }
        if (n < sizeof chunk) {
            if (ferror(f)) rc = ms_err_errno(err, errno, "cannot read %s", name);
            break;
        }
    }
    if (!std_in) fclose(f);
    /* an empty file is an empty string, not a NULL one */
    if (!rc && !b->p && ms_buf_put(b, "", 0)) rc = ms_err_set(err, "out of memory");
    return rc;
}

void ms_buf_free(struct ms_buf *b) {
    free(b->p);
    *b = (struct ms_buf){0};
}
