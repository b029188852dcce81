/*
 * err.h - errors as values.
 *
 * Every fallible function in moestream returns an int status (0 on success,
 * -1 on failure) and, on failure, writes one human-readable line into a
 * caller-owned struct ms_err. The message names the problem and the object
 * (file, tensor, key) so the CLI can print it as is and the server can put it
 * in an API error object. Nothing in the library aborts on bad input.
 */
#ifndef MS_UTIL_ERR_H
#define MS_UTIL_ERR_H

#include <stddef.h>

#define MS_ERR_MSG_MAX 512

typedef struct ms_err {
    char msg[MS_ERR_MSG_MAX];
} ms_err;

/* Formats a message into *e (if e is non-NULL). Always returns -1, so a
 * failing function can `return ms_err_set(err, "...", ...);`. */
int ms_err_set(ms_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the message already in *e (context on the way up).
 * Returns -1. */
int ms_err_prefix(ms_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like ms_err_set, appending ": strerror(errnum)". Returns -1. */
int ms_err_errno(ms_err *e, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
