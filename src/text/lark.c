/*
 * lark.c - Lark grammars as GBNF (see lark.h): a recursive-descent reader
 * of Lark's notation that writes each rule's GBNF as it reads it.
 */
#include "text/lark.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/utf8.h"

#define MAX_DEPTH 64
#define LK_NAME 255 /* the longest name read */

/* Lark's common terminals (common.lark), written out as GBNF bodies. */
static const struct {
    const char *name, *body;
} COMMON[] = {
    {"LF", "\"\\n\""},
    {"CR", "\"\\r\""},
    {"NEWLINE", "( \"\\r\"? \"\\n\" )+"},
    {"WS", "[ \\t\\x0C\\r\\n]+"},
    {"WS_INLINE", "[ \\t]+"},
    {"DIGIT", "[0-9]"},
    {"HEXDIGIT", "[a-fA-F0-9]"},
    {"INT", "[0-9]+"},
    {"SIGNED_INT", "[+-]? [0-9]+"},
    {"DECIMAL", "( [0-9]+ \".\" [0-9]* | \".\" [0-9]+ )"},
    {"FLOAT", "( [0-9]+ [eE] [+-]? [0-9]+ | ( [0-9]+ \".\" [0-9]* | \".\" [0-9]+ ) ( [eE] [+-]? [0-9]+ )? )"},
    {"SIGNED_FLOAT",
     "[+-]? ( [0-9]+ [eE] [+-]? [0-9]+ | ( [0-9]+ \".\" [0-9]* | \".\" [0-9]+ ) ( [eE] [+-]? [0-9]+ )? )"},
    {"NUMBER", "( [0-9]+ [eE] [+-]? [0-9]+ | ( [0-9]+ \".\" [0-9]* | \".\" [0-9]+ ) ( [eE] [+-]? [0-9]+ )? | [0-9]+ )"},
    {"SIGNED_NUMBER",
     "[+-]? ( [0-9]+ [eE] [+-]? [0-9]+ | ( [0-9]+ \".\" [0-9]* | \".\" [0-9]+ ) ( [eE] [+-]? [0-9]+ )? | [0-9]+ )"},
    {"LETTER", "[a-zA-Z]"},
    {"LCASE_LETTER", "[a-z]"},
    {"UCASE_LETTER", "[A-Z]"},
    {"WORD", "[a-zA-Z]+"},
    {"CNAME", "[_a-zA-Z] [_a-zA-Z0-9]*"},
    /* a string's characters: anything on one line, backslash escapes */
    {"ESCAPED_STRING", "\"\\\"\" ( [^\"\\\\\\n@] | \"\\\\\" [^\\n@] )* \"\\\"\""},
};
#define N_COMMON (sizeof COMMON / sizeof COMMON[0])

struct lk {
    const char *p, *end;
    int line;
    int depth; /* open ( and [: newlines are spaces inside them */
    const char *prefix;
    uint32_t excl;
    struct ms_buf rules;
    json_t *defined, *used; /* name -> line (objects used as sets) */
    bool oom;
    ms_err *err;
};

static int fail(struct lk *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct lk *k, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ms_err_set(k->err, "lark grammar, line %d: %s", k->line, msg);
}

static void put(struct lk *k, struct ms_buf *b, const char *s) {
    if (ms_buf_puts(b, s)) k->oom = true;
}

static bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

/* Spaces and comments; a newline too inside a group, or before a line
 * that goes on with "|". */
static void skip(struct lk *k) {
    for (;;) {
        while (k->p < k->end && (*k->p == ' ' || *k->p == '\t' || *k->p == '\r')) k->p++;
        if (k->p < k->end && (*k->p == '#' || (*k->p == '/' && k->p + 1 < k->end && k->p[1] == '/'))) {
            while (k->p < k->end && *k->p != '\n') k->p++;
            continue;
        }
        if (k->p < k->end && *k->p == '\n') {
            const char *q = k->p;
            int lines = 0;
            for (;;) { /* blank and comment lines between a rule and its "|" line */
                while (q < k->end && (*q == '\n' || *q == ' ' || *q == '\t' || *q == '\r')) lines += *q++ == '\n';
                if (!(q < k->end && (*q == '#' || (*q == '/' && q + 1 < k->end && q[1] == '/')))) break;
                while (q < k->end && *q != '\n') q++;
            }
            if (k->depth > 0 || (q < k->end && *q == '|')) {
                k->p = q;
                k->line += lines;
                continue;
            }
        }
        return;
    }
}

/* A name at k->p into out (at most LK_NAME bytes); false when none. */
static bool read_name(struct lk *k, char out[LK_NAME + 1]) {
    size_t n = 0;
    if (k->p >= k->end || !name_start(*k->p)) return false;
    while (k->p < k->end && name_char(*k->p)) {
        if (n == LK_NAME) return false;
        out[n++] = *k->p++;
    }
    out[n] = 0;
    return true;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* A "string" literal at k->p (on its opening quote), decoded into b
 * (Python's escapes; an unknown one stays as written). */
static int read_string(struct lk *k, struct ms_buf *b) {
    k->p++;
    while (k->p < k->end && *k->p != '"' && *k->p != '\n') {
        char c = *k->p++;
        if (c != '\\') {
            if (ms_buf_put(b, &c, 1)) k->oom = true;
            continue;
        }
        if (k->p >= k->end) break;
        c = *k->p++;
        static const char esc[] = "n\nt\tr\r0\0\\\\\"\"''a\ab\bf\fv\v";
        const char *e = NULL;
        for (size_t i = 0; i + 1 < sizeof esc; i += 2)
            if (esc[i] == c) e = esc + i + 1;
        if (e) {
            if (ms_buf_put(b, e, 1)) k->oom = true;
        } else if (c == 'x' || c == 'u' || c == 'U') {
            const int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int i = 0; i < digits; i++) {
                const int v = k->p < k->end ? hexval(*k->p) : -1;
                if (v < 0) return fail(k, "bad \\%c escape in a string", c);
                cp = cp << 4 | (uint32_t)v, k->p++;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return fail(k, "bad \\%c escape in a string", c);
            char u[4];
            if (ms_buf_put(b, u, ms_utf8_encode(cp, u))) k->oom = true;
        } else {
            const char two[2] = {'\\', c};
            if (ms_buf_put(b, two, 2)) k->oom = true;
        }
    }
    if (k->p >= k->end || *k->p != '"') return fail(k, "a string is not closed");
    k->p++;
    if (k->p < k->end && *k->p == 'i') return fail(k, "case-insensitive strings (\"...\"i) are not supported");
    return 0;
}

/* The one code point of a decoded string, or -1. */
static long one_cp(const struct ms_buf *b) {
    if (!b->len) return -1;
    const unsigned char *s = (const unsigned char *)b->p;
    const size_t n = s[0] < 0x80 ? 1 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : 4;
    if (n != b->len) return -1;
    long cp = n == 1 ? s[0] : s[0] & (0x7F >> n);
    for (size_t i = 1; i < n; i++) cp = cp << 6 | (s[i] & 63);
    return cp;
}

static int expansions(struct lk *k, struct ms_buf *out);

/* Whether the UTF-8 text b holds code point cp. */
static bool contains_cp(const struct ms_buf *b, uint32_t cp) {
    char u[4];
    const size_t n = ms_utf8_encode(cp, u);
    return b->len && memmem(b->p, b->len, u, n) != NULL;
}

/* Decimal digits at k->p into *v (at most 9 of them); false when none. */
static bool read_count(struct lk *k, long *v) {
    const char *start = k->p;
    *v = 0;
    while (k->p < k->end && *k->p >= '0' && *k->p <= '9' && k->p - start < 9) *v = *v * 10 + (*k->p++ - '0');
    return k->p > start;
}

/* One atom, with its quantifier, into out. */
static int expr(struct lk *k, struct ms_buf *out) {
    struct ms_buf a = {0};
    int rc = 0;
    const char c = *k->p;
    if (c == '(' || c == '[') {
        if (++k->depth > MAX_DEPTH) return fail(k, "groups nested deeper than %d", MAX_DEPTH);
        k->p++;
        struct ms_buf in = {0};
        rc = expansions(k, &in);
        skip(k);
        const char close = c == '(' ? ')' : ']';
        if (!rc && (k->p >= k->end || *k->p != close)) rc = fail(k, "missing '%c'", close);
        if (!rc) {
            k->p++;
            put(k, &a, "( "), put(k, &a, in.len ? in.p : "\"\""), put(k, &a, c == '[' ? " )?" : " )");
        }
        ms_buf_free(&in);
        k->depth--;
    } else if (c == '"') {
        struct ms_buf s = {0};
        rc = read_string(k, &s);
        const char *q = k->p;
        while (q < k->end && (*q == ' ' || *q == '\t')) q++;
        if (!rc && k->end - q >= 2 && q[0] == '.' && q[1] == '.') { /* "a".."z" */
            k->p = q + 2;
            while (k->p < k->end && (*k->p == ' ' || *k->p == '\t')) k->p++;
            struct ms_buf s2 = {0};
            rc = k->p < k->end && *k->p == '"' ? read_string(k, &s2) : fail(k, "a range needs a string after '..'");
            const long lo = one_cp(&s), hi = one_cp(&s2);
            if (!rc && (lo < 0 || hi < 0 || hi < lo)) rc = fail(k, "a range's ends must be single characters in order");
            const unsigned long x = k->excl;
            if (!rc && x && lo == (long)x && hi == (long)x) rc = fail(k, "a range of U+%04lX alone, which the text cannot hold", x);
            if (!rc) {
                /* the range less excl */
                char cls[96] = "[";
                const unsigned long l = (unsigned long)lo, h = (unsigned long)hi;
                size_t w = 1;
                if (!x || x < l || x > h) w += (size_t)snprintf(cls + w, sizeof cls - w, "\\U%08lX-\\U%08lX", l, h);
                if (x && x >= l && x <= h && l < x) w += (size_t)snprintf(cls + w, sizeof cls - w, "\\U%08lX-\\U%08lX", l, x - 1);
                if (x && x >= l && x <= h && x < h) w += (size_t)snprintf(cls + w, sizeof cls - w, "\\U%08lX-\\U%08lX", x + 1, h);
                snprintf(cls + w, sizeof cls - w, "]");
                put(k, &a, cls);
            }
            ms_buf_free(&s2);
        } else if (!rc && k->excl && contains_cp(&s, k->excl)) {
            rc = fail(k, "a string holds U+%04X, which the text cannot", (unsigned)k->excl);
        } else if (!rc && ms_grammar_put_literal(&a, s.p ? s.p : "", s.len)) {
            k->oom = true;
        }
        ms_buf_free(&s);
    } else if (c == '/') {
        struct ms_buf re = {0};
        k->p++;
        while (k->p < k->end && *k->p != '/' && *k->p != '\n') {
            if (*k->p == '\\' && k->p + 1 < k->end && k->p[1] == '/') k->p++; /* "\/": a slash */
            else if (*k->p == '\\' && k->p + 1 < k->end && ms_buf_put(&re, k->p++, 1)) k->oom = true;
            if (ms_buf_put(&re, k->p++, 1)) k->oom = true;
        }
        if (k->p >= k->end || *k->p != '/') rc = fail(k, "a regex is not closed");
        else if (k->p++, k->p < k->end && name_char(*k->p)) rc = fail(k, "regex flags are not supported");
        if (!rc) {
            ms_err e;
            struct ms_buf g = {0};
            if (ms_regex_gbnf(re.p ? re.p : "", re.len, k->excl, &g, &e)) rc = fail(k, "/%s/: %s", re.p ? re.p : "", e.msg);
            else put(k, &a, "( "), put(k, &a, g.p), put(k, &a, " )");
            ms_buf_free(&g);
        }
        ms_buf_free(&re);
    } else {
        char name[LK_NAME + 1];
        if (!read_name(k, name)) return fail(k, "unexpected '%c'", c);
        if (json_object_get(k->used, name) == NULL && json_object_set_new(k->used, name, json_integer(k->line)))
            k->oom = true;
        put(k, &a, k->prefix), put(k, &a, name);
    }
    if (rc) {
        ms_buf_free(&a);
        return rc;
    }
    /* a quantifier */
    while (k->p < k->end && (*k->p == ' ' || *k->p == '\t')) k->p++;
    const char last = a.len ? a.p[a.len - 1] : 0;
    if (k->p < k->end && strchr("?*+~", *k->p) && (last == '?' || last == '*' || last == '+' || last == '}')) {
        /* "[x]?", "x+*": GBNF takes one operator a primary */
        struct ms_buf w = {0};
        put(k, &w, "( "), put(k, &w, a.p), put(k, &w, " )");
        ms_buf_free(&a);
        a = w;
    }
    if (k->p < k->end && (*k->p == '?' || *k->p == '*' || *k->p == '+')) {
        const char q[2] = {*k->p++, 0};
        put(k, &a, q);
    } else if (k->p < k->end && *k->p == '~') {
        k->p++;
        while (k->p < k->end && *k->p == ' ') k->p++;
        long m = -1, n;
        if (!read_count(k, &m)) rc = fail(k, "'~' needs a count");
        n = m;
        const char *dots = k->p;
        while (dots < k->end && (*dots == ' ' || *dots == '\t')) dots++;
        if (!rc && k->end - dots >= 2 && dots[0] == '.' && dots[1] == '.') {
            k->p = dots + 2;
            while (k->p < k->end && (*k->p == ' ' || *k->p == '\t')) k->p++;
            if (!read_count(k, &n) || n < m) rc = fail(k, "'~ N..M' needs M >= N");
        }
        if (!rc && n > MS_GRAMMAR_MAX_REPEAT) rc = fail(k, "a count past %d", MS_GRAMMAR_MAX_REPEAT);
        if (!rc) {
            char q[48];
            snprintf(q, sizeof q, "{%ld,%ld}", m, n);
            struct ms_buf w = {0};
            put(k, &w, "( "), put(k, &w, a.p), put(k, &w, " )"), put(k, &w, q);
            ms_buf_free(&a);
            a = w;
        }
    }
    if (!rc) put(k, out, out->len ? " " : ""), put(k, out, a.p);
    ms_buf_free(&a);
    return rc;
}

/* Whether k->p ends a sequence: the end, a newline that skip() left (the
 * rule is over), "|", ")", "]" or "->". */
static bool seq_end(const struct lk *k) {
    const char c = k->p < k->end ? *k->p : '\n';
    return c == '\n' || c == '|' || c == ')' || c == ']' || (c == '-' && k->p + 1 < k->end && k->p[1] == '>');
}

/* Alternatives into out: "a | b", "( a | b )?" when one is empty. */
static int expansions(struct lk *k, struct ms_buf *out) {
    struct ms_buf alts = {0};
    int n = 0, rc = 0;
    bool empty = false;
    for (;;) {
        struct ms_buf seq = {0};
        for (skip(k); !rc && !seq_end(k); skip(k)) rc = expr(k, &seq);
        if (!rc && k->p + 1 < k->end && k->p[0] == '-' && k->p[1] == '>') { /* an alias: Lark's tree only */
            char name[LK_NAME + 1];
            k->p += 2;
            skip(k);
            if (!read_name(k, name)) rc = fail(k, "'->' needs a name");
            skip(k);
        }
        if (!rc && seq.len) put(k, &alts, n++ ? " | " : ""), put(k, &alts, seq.p);
        empty |= !seq.len;
        ms_buf_free(&seq);
        if (rc || k->p >= k->end || *k->p != '|') break;
        k->p++;
    }
    if (!rc && n) {
        const bool wrap = empty || n > 1;
        put(k, out, empty ? "( " : n > 1 ? "( " : ""), put(k, out, alts.p), put(k, out, empty ? " )?" : wrap ? " )" : "");
    }
    ms_buf_free(&alts);
    return rc;
}

/* Defines prefix + name ::= body. */
static int define(struct lk *k, const char *name, const char *body) {
    if (json_object_get(k->defined, name)) return fail(k, "'%s' is defined twice", name);
    if (json_object_set_new(k->defined, name, json_integer(k->line))) k->oom = true;
    put(k, &k->rules, k->prefix), put(k, &k->rules, name), put(k, &k->rules, " ::= "), put(k, &k->rules, body),
        put(k, &k->rules, "\n");
    return 0;
}

/* One of Lark's common terminals under name as (NULL: its own). */
static int import_common(struct lk *k, const char *name, const char *as) {
    for (size_t i = 0; i < N_COMMON; i++) {
        if (strcmp(COMMON[i].name, name)) continue;
        /* "@" in a body: where excl goes, in its classes */
        char ex[16] = "";
        if (k->excl) snprintf(ex, sizeof ex, "\\U%08X", (unsigned)k->excl);
        struct ms_buf body = {0};
        for (const char *b = COMMON[i].body; *b; b++)
            if (*b == '@' ? ms_buf_puts(&body, ex) : ms_buf_put(&body, b, 1)) k->oom = true;
        const int rc = define(k, as ? as : name, body.p ? body.p : "");
        ms_buf_free(&body);
        return rc;
    }
    return fail(k, "'common.%s' is not one of the common terminals supported", name);
}

/* A line starting with "%". */
static int directive(struct lk *k) {
    char word[LK_NAME + 1], mod[LK_NAME + 1], name[LK_NAME + 1];
    k->p++;
    if (!read_name(k, word)) return fail(k, "a directive needs a name");
    if (strcmp(word, "import")) return fail(k, "'%%%s' is not supported", word);
    skip(k);
    if (!read_name(k, mod) || strcmp(mod, "common"))
        return fail(k, "only '%%import common....' is supported");
    if (k->p < k->end && *k->p == '.') {
        k->p++;
        if (!read_name(k, name)) return fail(k, "'%%import common.' needs a name");
        skip(k);
        char as[LK_NAME + 1];
        const bool alias = k->end - k->p >= 2 && k->p[0] == '-' && k->p[1] == '>';
        if (alias) {
            k->p += 2;
            skip(k);
            if (!read_name(k, as)) return fail(k, "'->' needs a name");
        }
        return import_common(k, name, alias ? as : NULL);
    }
    skip(k);
    if (k->p >= k->end || *k->p != '(') return fail(k, "'%%import common' needs '.NAME' or '(NAMES)'");
    k->depth++;
    k->p++;
    for (skip(k); k->p < k->end && *k->p != ')'; skip(k)) {
        if (!read_name(k, name)) return fail(k, "'%%import common (...)' needs names");
        if (import_common(k, name, NULL)) return -1;
        skip(k);
        if (k->p < k->end && *k->p == ',') k->p++;
    }
    k->depth--;
    if (k->p >= k->end) return fail(k, "missing ')'");
    k->p++;
    return 0;
}

/* One rule: [?!]name[.N]: expansions. */
static int rule(struct lk *k) {
    char name[LK_NAME + 1];
    if (*k->p == '?' || *k->p == '!') k->p++;
    if (!read_name(k, name)) return fail(k, "a rule must start with a name");
    if (k->p < k->end && *k->p == '{') return fail(k, "templates are not supported");
    if (k->p < k->end && *k->p == '.') { /* a priority */
        k->p++;
        if (k->p < k->end && *k->p == '-') k->p++;
        if (k->p >= k->end || *k->p < '0' || *k->p > '9') return fail(k, "a priority must be a number");
        while (k->p < k->end && *k->p >= '0' && *k->p <= '9') k->p++;
    }
    skip(k);
    if (k->p >= k->end || *k->p != ':') return fail(k, "'%s' needs ':'", name);
    k->p++;
    struct ms_buf body = {0};
    int rc = expansions(k, &body);
    if (!rc && k->p < k->end && *k->p != '\n') rc = fail(k, "unexpected '%c'", *k->p);
    if (!rc) rc = define(k, name, body.len ? body.p : "\"\"");
    ms_buf_free(&body);
    return rc;
}

int ms_lark_gbnf(const char *src, size_t n, const char *prefix, uint32_t excl, struct ms_buf *out, ms_err *err) {
    struct lk k = {.p = src, .end = src + n, .line = 1, .prefix = prefix, .excl = excl, .err = err,
                   .defined = json_object(), .used = json_object()};
    int rc = 0;
    if (!k.defined || !k.used) k.oom = true;
    for (size_t i = 0, l = 1; !rc && i < n; i += l)
        if (!(l = ms_utf8_valid_len(src + i, n - i))) rc = ms_err_set(err, "lark grammar: not UTF-8 text");
    while (!rc && !k.oom) {
        /* blank lines and comments between rules */
        while (k.p < k.end && (*k.p == '\n' || *k.p == ' ' || *k.p == '\t' || *k.p == '\r' || *k.p == '#' ||
                               (*k.p == '/' && k.p + 1 < k.end && k.p[1] == '/'))) {
            if (*k.p == '\n') k.line++;
            if (*k.p == '#' || *k.p == '/')
                while (k.p < k.end && *k.p != '\n') k.p++;
            else
                k.p++;
        }
        if (k.p >= k.end) break;
        rc = *k.p == '%' ? directive(&k) : rule(&k);
        skip(&k);
        if (!rc && k.p < k.end && *k.p != '\n') rc = fail(&k, "unexpected '%c'", *k.p);
    }
    if (!rc && !k.oom && !json_object_get(k.defined, "start")) rc = ms_err_set(err, "lark grammar: no 'start' rule");
    const char *name;
    json_t *line;
    json_object_foreach(k.used, name, line) {
        if (rc || k.oom) break;
        if (!json_object_get(k.defined, name))
            rc = ms_err_set(err, "lark grammar, line %d: '%s' is not defined", (int)json_integer_value(line), name);
    }
    if (!rc && (k.oom || ms_buf_put(out, k.rules.p ? k.rules.p : "", k.rules.len)))
        rc = ms_err_set(err, "out of memory reading a lark grammar");
    ms_buf_free(&k.rules);
    json_decref(k.defined);
    json_decref(k.used);
    return rc ? -1 : 0;
}
