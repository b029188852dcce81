/* err.c - formatting for ms_err (see err.h). */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* dst = a + ": " + b, truncated to the buffer (truncation is intended: a
 * message is one line for a human). */
static void join(char *dst, size_t cap, const char *a, const char *b) {
    size_t n = 0;
    for (const char *parts[3] = {a, ": ", b}, **p = parts; p < parts + 3; p++)
        for (const char *c = *p; *c && n + 1 < cap; c++) dst[n++] = *c;
    dst[n] = '\0';
}

int ms_err_set(ms_err *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int ms_err_prefix(ms_err *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[MS_ERR_MSG_MAX], old[MS_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    join(e->msg, sizeof e->msg, prefix, old);
    return -1;
}

int ms_err_errno(ms_err *e, int errnum, const char *fmt, ...) {
    if (!e) return -1;
    char head[MS_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    join(e->msg, sizeof e->msg, head, strerror(errnum));
    return -1;
}
