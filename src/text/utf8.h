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
#include <stdint.h>

#include <jansson.h>

#include "util/buf.h"

/* Length (1-4) of the valid UTF-8 sequence at s[0..n), or 0 when s does
 * not start one (a bad lead or continuation byte, a truncated, overlong or
 * surrogate sequence, a code point past U+10FFFF). n >= 1. */
size_t ms_utf8_valid_len(const char *s, size_t n);

/* How many bytes at the end of s[0..n) begin a character that s does not
 * finish: 1-3 when the last lead byte within three bytes of the end
 * announces more continuation bytes than follow it, else 0 (s ends where
 * a character ends, or its tail is not UTF-8 at all). Byte-level BPE
 * splits rare characters over several tokens, so a token count can end
 * mid-character; the disk KV cache keys checkpoints by text and uses this
 * to cut them only where a character ends. */
size_t ms_utf8_partial_tail(const char *s, size_t n);

/* cp (at most U+10FFFF, not a surrogate) as UTF-8 into out[0..4);
 * returns its length, 1-4. */
size_t ms_utf8_encode(uint32_t cp, char out[4]);

/* Code points in s[0..n), counted by their lead bytes (s is valid UTF-8:
 * the length a JSON Schema minLength / maxLength counts). */
size_t ms_utf8_count(const char *s, size_t n);

/* Appends s[0..n) to out with every invalid byte replaced by U+FFFD.
 * 0, or -1 on OOM. */
int ms_utf8_clean(struct ms_buf *out, const char *s, size_t n);

/* As ms_utf8_clean, and each NUL byte becomes U+FFFD too: text for API
 * clients, who send it back in later requests, where the JSON parser
 * refuses \u0000 (a NUL would end the C strings the requests are read
 * as). 0, or -1 on OOM. */
int ms_utf8_clean_text(struct ms_buf *out, const char *s, size_t n);

/* A new JSON string (the caller owns the reference) holding s[0..n)
 * cleaned as above; embedded NULs are kept (jansson escapes them). NULL on
 * OOM. */
json_t *ms_json_text(const char *s, size_t n);

/* As ms_json_text, with each NUL as U+FFFD too (ms_utf8_clean_text): text
 * for API clients, which they may send back. NULL on OOM. */
json_t *ms_json_client_text(const char *s, size_t n);

#endif
