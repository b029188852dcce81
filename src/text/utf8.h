/*
 * utf8.h - checking UTF-8 and replacing what is not. Model output, token
 * pieces and file metadata may hold any bytes, while JSON (jansson) and the
 * API clients take only valid UTF-8; every invalid byte becomes U+FFFD,
 * one replacement character per bad byte (the rule the tokenizer applies
 * to its input, as llama.cpp does). Valid means RFC 3629: a lead byte with its
 * continuation bytes, the shortest form, no surrogates, at most U+10FFFF.
 */
#ifndef MS_TEXT_UTF8_H
#define MS_TEXT_UTF8_H

#include <stddef.h>

#include <jansson.h>

#include "util/buf.h"

/* Length (1-4) of the valid UTF-8 sequence at s[0..n), or 0 when s does
 * not start one (a bad lead or continuation byte, a truncated, overlong or
 * surrogate sequence, a code point past U+10FFFF). n >= 1. */
size_t ms_utf8_valid_len(const char *s, size_t n);

/* Appends s[0..n) to out with every invalid byte replaced by U+FFFD.
 * 0, or -1 on OOM. */
int ms_utf8_clean(struct ms_buf *out, const char *s, size_t n);

/* A new JSON string (the caller owns the reference) holding s[0..n)
 * cleaned as above; embedded NULs are kept (jansson escapes them). NULL on
 * OOM. */
json_t *ms_json_text(const char *s, size_t n);

#endif
