/*
 * byte_level.h - GPT-2's byte-level alphabet: every byte of text stands for
 * one Unicode code point, so that any byte string is a printable string of
 * BPE symbols. The tokenizer maps text into it before BPE and back after;
 * mkmodel's vocabulary builder writes its tokens in it.
 *
 * The mapping is GPT-2's bytes_to_unicode (Radford et al., 2019, the
 * encoder.py of openai/gpt-2; llama.cpp's unicode_byte_to_utf8 is the same
 * table): the 188 printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand
 * for themselves; the other 68 (0x00..0x20, 0x7F..0xA0, 0xAD) stand, in byte
 * order, for U+0100..U+0143. Every code point is below MS_BYTE_LEVEL_CP_END,
 * so its UTF-8 is one or two bytes.
 */
#ifndef MS_TEXT_BYTE_LEVEL_H
#define MS_TEXT_BYTE_LEVEL_H

#include <stddef.h>
#include <stdint.h>

/* One past the largest code point of the alphabet (U+0143). */
#define MS_BYTE_LEVEL_CP_END 0x144u

/* The code point byte b stands for. */
static inline uint32_t ms_byte_level_cp(uint8_t b) {
    if (b <= 0x20) return 0x100u + b;                 /* 33 control and space bytes */
    if (b >= 0x7F && b <= 0xA0) return 0x121u + (b - 0x7Fu); /* next 34 */
    if (b == 0xAD) return 0x143u;                     /* soft hyphen, the last */
    return b;
}

/* Writes the UTF-8 of byte b's code point to out (1 or 2 bytes, no NUL) and
 * returns its length. */
static inline size_t ms_byte_level_utf8(uint8_t b, char out[2]) {
    const uint32_t cp = ms_byte_level_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

#endif
