/*
 * lark.h - Lark grammars (the notation of Python's Lark parser, which
 * OpenAI's custom tools take as {"syntax": "lark"}) as GBNF, so that a
 * custom tool's free-form input can be held to its grammar while it is
 * sampled (text/dsml_grammar.h).
 *
 * Supported: rules and terminals ("name: ..." and "NAME: ...", with the
 * "?" / "!" / "_" markers and ".N" priorities, which change only Lark's
 * tree, read and dropped), alternatives ("|", also at the start of a
 * continuation line), sequences, ( groups ), [ optional ], the
 * quantifiers ?, *, + and ~ N / ~ N..M, "string" literals (Python
 * escapes), "a".."z" ranges, /regex/ literals (text/json_schema.h's
 * ms_regex_gbnf subset, no flags), "-> alias" (dropped), comments ("//" and
 * "#" to the end of the line), and "%import common.NAME" (or "common
 * (A, B)", "-> ALIAS") for Lark's common terminals: LF, CR, NEWLINE, WS,
 * WS_INLINE, DIGIT, HEXDIGIT, INT, SIGNED_INT, DECIMAL, FLOAT,
 * SIGNED_FLOAT, NUMBER, SIGNED_NUMBER, LETTER, LCASE_LETTER,
 * UCASE_LETTER, WORD, CNAME, ESCAPED_STRING.
 *
 * Refused (an error, so that the caller leaves the text free rather than
 * hold it to the wrong language): %ignore (it lets whitespace in between
 * any two tokens), %declare and the other directives, templates,
 * case-insensitive strings ("..."i), regex flags, imports from other
 * modules, undefined names, a string that holds excl (below). Left
 * recursion, which Lark allows, comes out as GBNF that text/grammar.h
 * refuses: the caller parses the result before using it.
 *
 * The language is the grammar read as a context-free grammar over
 * characters: Lark's lexer (longest match, terminal priorities) can only
 * refuse texts that this accepts, not the other way round, and the
 * grammars tools publish (a patch format, a query language) do not lean
 * on it.
 */
#ifndef MS_TEXT_LARK_H
#define MS_TEXT_LARK_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

/*
 * Appends to out one GBNF rule per rule, terminal and imported terminal of
 * the Lark grammar src[0..n), each named prefix + its name (prefix: [A-Za-z0-9_-]*);
 * the start rule is prefix + "start". excl (0: none) is left out of every
 * regex class and "." (as ms_regex_gbnf does), for text that must never
 * hold it. 0, or -1 with err naming the line: text that is not UTF-8, a
 * syntax error, what lark.h lists as refused, no "start" rule, a rule defined twice, nesting past 64
 * groups, OOM; out is then unchanged.
 */
int ms_lark_gbnf(const char *src, size_t n, const char *prefix, uint32_t excl, struct ms_buf *out, ms_err *err);

#endif
