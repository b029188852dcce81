/*
 * pretok.h - DeepSeek V3/V4's pre-tokenizer ("deepseek-v3"), exactly as
 * llama.cpp runs it: the text is cut into words before BPE sees it.
 *
 * Three regexes are applied one after the other, each splitting every piece
 * the previous one left (a piece is a match or the text between matches;
 * nothing is dropped):
 *   1. \p{N}{1,3}
 *   2. [一-龥぀-ゟ゠-ヿ]+                 (Han U+4E00..U+9FA5, hiragana, katakana)
 *   3. [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
 *      |[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*
 *      |\s*[\r\n]+|\s+(?!\S)|\s+
 * Bytes are first decoded to code points the way llama.cpp does (see
 * pretok.c); each word is then given back as the UTF-8 of its code points,
 * which differs from the input bytes where the input is not valid UTF-8.
 */
#ifndef MS_TEXT_PRETOK_H
#define MS_TEXT_PRETOK_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct ms_pretok; /* compiled regexes; read-only after ms_pretok_new */

/* The words of one text: word i is text[ends[i-1] .. ends[i]) (ends[-1] = 0);
 * text is the re-encoded UTF-8 of the input, len bytes. Owned by the caller,
 * freed with ms_pretok_words_free (which accepts a zeroed struct). */
struct ms_pretok_words {
    char *text;
    size_t len;
    size_t *ends;
    size_t n;
};

/* Compiles the regexes. -1 with err if PCRE2 rejects them or on OOM. */
int ms_pretok_new(struct ms_pretok **out, ms_err *err);
void ms_pretok_free(struct ms_pretok *p);

/* Splits text[0..n) (any bytes) into words. Thread-safe: p is only read.
 * -1 with err on OOM or a PCRE2 matching error (match limit). */
int ms_pretok_split(const struct ms_pretok *p, const char *text, size_t n,
                    struct ms_pretok_words *out, ms_err *err);
void ms_pretok_words_free(struct ms_pretok_words *w);

/* Decodes one code point at s[0..n) (n >= 1) with llama.cpp's rules and
 * returns the bytes consumed: a lead byte with the right number of
 * continuation bytes decodes without checks for overlong forms or
 * surrogates; anything else (a stray continuation byte, a truncated
 * sequence, F8..FF) is one byte that decodes to U+FFFD. A 4-byte form above
 * U+10FFFF, on which llama.cpp throws, is treated as invalid too. */
size_t ms_utf8_decode_llama(const uint8_t *s, size_t n, uint32_t *cp);

#endif
