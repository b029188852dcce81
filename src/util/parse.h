/*
 * parse.h - strict parsers of numbers given as text (command-line values,
 * size targets). Each takes the whole string: an empty string, trailing
 * characters or a value out of range is an error (-1), and *out is only
 * written on success.
 */
#ifndef MS_UTIL_PARSE_H
#define MS_UTIL_PARSE_H

#include <stdint.h>

/* Parses a decimal integer in [lo, hi] into *out (leading white space and
 * a sign are accepted, as strtol does). -1 when s is empty, not a whole
 * decimal integer, or outside [lo, hi]. */
int ms_parse_long(const char *s, long lo, long hi, long *out);

/* Parses "12GB", "512MiB", "3000000" (bytes; K/M/G/T with optional B or iB,
 * all binary multiples). -1 on a malformed or overflowing size. */
int ms_parse_size(const char *s, uint64_t *out);

#endif
