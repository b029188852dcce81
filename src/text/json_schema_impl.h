/*
 * json_schema_impl.h - what the JSON Schema converter's files share: the
 * converter's state and the helpers every generator writes grammar text
 * with; not a public header (text/json_schema.h is).
 *
 * json_schema.c walks the schema, owns the state and defines the helpers;
 * the pieces that turn one keyword into grammar text without walking
 * further live beside it, each behind one entry point:
 * json_schema_regex.c (pattern), json_schema_int.c (integer bounds) and
 * json_schema_trie.c (enum values and object keys written as tries).
 *
 * Output is built with sticky OOM: a failed append sets c->oom and
 * ms_json_schema_grammar refuses the result at the end, so generators
 * append without checking. Errors are set in c->err (js_fail) and come
 * back up the walk as -1.
 */
#ifndef MS_TEXT_JSON_SCHEMA_IMPL_H
#define MS_TEXT_JSON_SCHEMA_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/json_schema.h"
#include "util/buf.h"
#include "util/err.h"

#define JS_MAX_DEPTH 64 /* nested subschemas, $ref hops included */
#define JS_NAME_LEN 64  /* rule names, with their suffixes */

/* The shared rules (value, string, ...), a bit each in js_conv.prims, in
 * the order of json_schema.c's table of their bodies. */
enum js_prim {
    JS_PRIM_VALUE = 1,
    JS_PRIM_OBJECT = 2,
    JS_PRIM_ARRAY = 4,
    JS_PRIM_STRING = 8,
    JS_PRIM_CHAR = 16,
    JS_PRIM_NUMBER = 32,
    JS_PRIM_INTEGER = 64,
    JS_PRIM_BOOLEAN = 128,
    JS_PRIM_NULL = 256,
    JS_PRIM_DATE = 512,
    JS_PRIM_TIME = 1024,
    JS_PRIM_KCHAR = 2048,
    JS_PRIM_KESC = 4096,
    JS_PRIM_UESC = 8192
};

/* One conversion's state (ms_json_schema_grammar's, freed there). */
struct js_conv {
    const json_t *root;
    struct ms_buf rules;                   /* the generated rules, one a line */
    json_t *names;                         /* rule names taken (an object used as a set) */
    json_t *refs;                          /* $ref string -> its rule name */
    json_t *others;                        /* json_schema_trie.c's rules of other keys: body -> name */
    const char *pending[JS_MAX_DEPTH + 1]; /* $refs being expanded, outermost first */
    int n_pending, base;                   /* pending[base..] were entered without any text consumed since */
    unsigned prims;                        /* shared rules used (enum js_prim) */
    int depth, steps;
    bool oom;
    ms_json_schema_warn_fn warn;
    void *warn_ctx;
    ms_err *err;
};

/* ---- helpers (json_schema.c) ------------------------------------------
 * Those that write into a buffer append to it (the text is the caller's)
 * and on OOM set c->oom instead of returning an error. */

/* Appends s to b. */
void js_put(struct js_conv *c, struct ms_buf *b, const char *s);

/* Appends the printf-style text to b; one of 512 bytes or more sets
 * c->oom (none of the formats here comes near). */
void __attribute__((format(printf, 3, 4))) js_putf(struct js_conv *c, struct ms_buf *b, const char *fmt, ...);

/* Appends the name of shared rule p (one enum js_prim bit) to e and marks
 * it used, so that the end of the grammar defines it. */
void js_put_prim(struct js_conv *c, struct ms_buf *e, unsigned p);

/* Appends a GBNF literal holding the bytes s[0..n). */
void js_put_lit(struct js_conv *c, struct ms_buf *e, const char *s, size_t n);

/* Appends code point cp as it goes inside a GBNF character class. */
void js_put_class_cp(struct js_conv *c, struct ms_buf *e, uint32_t cp);

/* Appends the repetition m to n times (n < 0: unbounded) in its shortest
 * form: nothing for exactly once, "?", "*", "+", "{m}", "{m,}", "{m,n}".
 * A count past MS_GRAMMAR_MAX_REPEAT is loosened (a max to unbounded, a
 * min to that limit), with a warning on keyword kmax / kmin at ptr. */
void js_put_rep(struct js_conv *c, struct ms_buf *e, long long m, long long n, const char *ptr, const char *kmin,
                const char *kmax);

/* Defines a new rule (in c->rules) named after hint with the given body;
 * name gets the name. */
void js_add_rule(struct js_conv *c, const char *hint, const char *body, char name[JS_NAME_LEN]);

/* How JSON writes code point cp inside a string, NUL-terminated into out:
 * the short escapes, \u00xx (lower case) for other controls, else the
 * UTF-8 bytes. */
void js_json_char(char out[8], uint32_t cp);
/* cp as UTF-8 into out, NUL-terminated. */
void js_utf8_char(char out[8], uint32_t cp);

/* The code point at *p (before end), *p moved past it. The text is meant
 * to be valid UTF-8 (jansson's strings are); a byte that does not begin a
 * valid character reads as itself. */
uint32_t js_utf8_cp(const char **p, const char *end);

/* Sets c->err to "ptr: message" ("(root)" for the root's ptr "");
 * returns -1. */
int __attribute__((format(printf, 3, 4))) js_fail(struct js_conv *c, const char *ptr, const char *fmt, ...);

/* Reports keyword kw of the subschema at ptr as dropped (the caller's
 * warn callback, if any). */
void js_warn(struct js_conv *c, const char *kw, const char *ptr);

/* ---- integer bounds (json_schema_int.c) ------------------------------- */

/* Appends the expression of the integers schema s allows (minimum,
 * maximum, exclusiveMinimum, exclusiveMaximum: exact decimal ranges).
 * Returns 0, or -1 with err set: a bound that is not a number or that
 * excludes every integer that fits 18 digits, an empty range. */
int js_gen_integer(struct js_conv *c, const json_t *s, const char *ptr, struct ms_buf *e);

/* ---- patterns (json_schema_regex.c) ----------------------------------- */

/* Appends the expression of the JSON strings (quotes included) whose
 * characters match pat, an ECMA-262 regex (a string). Returns 0; 1 when
 * it uses what a grammar cannot express, with e unchanged (the caller
 * warns and drops it); -1 with err set when pat is not a regex. A count
 * loosened to unbounded is warned here. */
int js_gen_pattern(struct js_conv *c, const json_t *pat, const char *ptr, struct ms_buf *e);

/* ---- tries (json_schema_trie.c) --------------------------------------- */

/* A text for a trie and what follows it. Both strings are borrowed. */
struct js_titem {
    const char *s; /* the text (valid UTF-8) */
    size_t len;
    const char *pay; /* what follows the text: a rule name, or "" */
};

/* Sorts it[0..*m) by their bytes (code point order) and keeps one of each
 * text, *m their new count. */
void js_titems_sort(struct js_titem *it, size_t *m);

/* Appends the texts it[0..m) (sorted, distinct, m > 0), each followed by
 * its payload, as a trie: top-level alternatives. named: every node with
 * alternatives becomes a rule, so that rules only ever refer to rules
 * written before them and no group stands between (the grammar parser
 * settles which rules match some text in one pass then, however long the
 * chain of pairs in an object). New rules are named after hint. */
void js_put_trie(struct js_conv *c, struct ms_buf *e, const struct js_titem *it, size_t m, bool named,
                 const char *hint);

/* Appends the rest of a key string after its opening quote (up to its
 * closing quote) that is none of the keys it[0..m) (sorted, distinct;
 * their characters unescaped), in canonical spelling (json_schema.h):
 * since keys have one spelling, no other spelling of a listed key is
 * left. New rules are named after hint. */
void js_key_trie(struct js_conv *c, const struct js_titem *it, size_t m, const char *hint, struct ms_buf *e);

#endif
