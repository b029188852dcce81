/*
 * buf.h - a growable byte string: text assembled piece by piece (chat
 * prompts, JSON and SSE bodies, decoded output). The bytes are always
 * NUL-terminated after len, so p can be used as a C string when the text
 * holds no NUL. Capacity doubles from 256 bytes. A zeroed struct is an
 * empty buffer; ms_buf_free returns it to that state.
 */
#ifndef MS_UTIL_BUF_H
#define MS_UTIL_BUF_H

#include <stddef.h>

#include "util/err.h"

struct ms_buf {
    char *p;    /* NULL until the first append; owned */
    size_t len; /* bytes held, not counting the terminating NUL */
    size_t cap; /* bytes allocated */
};

/* Appends s[0..n) (any bytes). 0, or -1 when out of memory (the buffer is
 * then unchanged). */
int ms_buf_put(struct ms_buf *b, const char *s, size_t n);
/* Appends the C string s. */
int ms_buf_puts(struct ms_buf *b, const char *s);
/* Appends printf-formatted text. -1 on OOM or a formatting error. */
int ms_buf_printf(struct ms_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends the whole of the file at path ("-": standard input), which must
 * hold at most max_bytes (so that /dev/zero or an endless pipe ends in an
 * error, not in the OOM killer). 0, or -1 with err naming the file and the
 * reason (cannot open, a read error, larger than max_bytes, out of
 * memory); the bytes read before a failure stay in the buffer. */
int ms_buf_read_file(struct ms_buf *b, const char *path, size_t max_bytes, ms_err *err);
void ms_buf_free(struct ms_buf *b);

#endif
