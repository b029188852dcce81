/*
 * json_schema_regex.c - a string schema's "pattern" (an ECMA-262 subset)
 * as GBNF, for json_schema.c's walk.
 *
 * A regex over a string's characters becomes GBNF over their JSON text:
 * classes are code point ranges, and ", \ and controls turn into their
 * escapes, since what the model writes is the quoted, escaped form. The
 * translation is its own small recursive-descent parser (alternatives,
 * sequences, atoms, classes, quantifiers) that writes as it reads; it
 * knows nothing of schemas beyond the shared helpers. Unsupported
 * constructs stop it (the pattern is then dropped with a warning, so the
 * grammar is only looser); malformed ones are errors. json_schema.h lists
 * what is supported.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "text/json_schema_impl.h"

#define RX_DEPTH 32  /* nested regex groups */
#define CSET_MAX 128 /* ranges in one regex class */

struct cset {
    int n;
    bool full; /* more ranges than fit: unsupported */
    uint32_t lo[CSET_MAX], hi[CSET_MAX];
};

struct rx {
    struct js_conv *c;
    const char *p, *end;
    int depth;
    const char *bad;  /* a syntax error */
    bool unsupported; /* a construct a grammar cannot express */
    bool loosened;    /* a count past MS_GRAMMAR_MAX_REPEAT became unbounded */
    /* raw text (ms_regex_gbnf): characters as themselves, not as JSON
     * writes them; the whole text matches (no implicit ".*" on either
     * side); "." is anything but a newline (Python's re, as Lark reads
     * it); excl (0: none) is in no class */
    bool raw;
    uint32_t excl;
    bool esc_class; /* a \d \w \s escape was read (the current class) */
};

static void cs_add(struct cset *s, uint32_t lo, uint32_t hi) {
    if (s->n == CSET_MAX)
        s->full = true;
    else
        s->lo[s->n] = lo, s->hi[s->n++] = hi;
}

/* Sorts and merges the ranges; neg: takes the complement over U+0-U+10FFFF. */
static void cs_norm(struct cset *s, bool neg) {
    for (int i = 1; i < s->n; i++)
        for (int j = i; j > 0 && s->lo[j] < s->lo[j - 1]; j--) {
            uint32_t t = s->lo[j];
            s->lo[j] = s->lo[j - 1], s->lo[j - 1] = t;
            t = s->hi[j], s->hi[j] = s->hi[j - 1], s->hi[j - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->lo[i] <= s->hi[m - 1] + 1) {
            if (s->hi[i] > s->hi[m - 1]) s->hi[m - 1] = s->hi[i];
        } else {
            s->lo[m] = s->lo[i], s->hi[m++] = s->hi[i];
        }
    }
    s->n = m;
    if (!neg) return;
    struct cset t = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->lo[i] > next) cs_add(&t, next, s->lo[i] - 1);
        next = s->hi[i] + 1;
    }
    if (next <= 0x10FFFF) cs_add(&t, next, 0x10FFFF);
    t.full |= s->full;
    *s = t;
}

static bool cs_has(const struct cset *s, uint32_t cp) {
    for (int i = 0; i < s->n; i++)
        if (cp >= s->lo[i] && cp <= s->hi[i]) return true;
    return false;
}

/* \d \w \s (upper case: negated), added to s; ascii: a negated one
 * only within ASCII (Python's classes are Unicode: outside ASCII, which
 * characters they hold is not known here, so raw text keeps off them). */
static void cs_escape(struct cset *s, char kind, bool ascii) {
    static const uint32_t d[] = {'0', '9'}, w[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'},
                          sp[] = {9,      13,     32,     32,     0xA0,   0xA0,   0x1680, 0x1680, 0x2000, 0x200A,
                                  0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
    const char k = (char)(kind | 0x20);
    const uint32_t *r = k == 'd' ? d : k == 'w' ? w : sp;
    const size_t n = k == 'd' ? 2 : k == 'w' ? 8 : 20;
    struct cset t = {0};
    for (size_t i = 0; i < n; i += 2) cs_add(&t, r[i], r[i + 1]);
    cs_norm(&t, kind != k);
    for (int i = 0; i < t.n; i++)
        if (!ascii || kind == k || t.lo[i] < 0x80) cs_add(s, t.lo[i], ascii && kind != k && t.hi[i] > 0x7F ? 0x7F : t.hi[i]);
}

/* A normalized set as one GBNF class over raw text, less excl and the
 * surrogates; false if empty. */
static bool put_raw_set(struct js_conv *c, struct ms_buf *e, const struct cset *s, uint32_t excl) {
    struct ms_buf cls = {0};
    for (int i = 0; i < s->n; i++)
        for (uint32_t lo = s->lo[i]; lo <= s->hi[i];) {
            uint32_t hi = s->hi[i];
            const uint32_t skip = lo >= 0xD800 && lo <= 0xDFFF ? 0xDFFF : lo == excl && excl ? excl : 0;
            if (skip) {
                if (skip >= s->hi[i]) break;
                lo = skip + 1;
                continue;
            }
            if (lo < 0xD800 && hi >= 0xD800) hi = 0xD7FF;
            if (excl && lo < excl && hi >= excl) hi = excl - 1;
            js_put_class_cp(c, &cls, lo);
            if (hi > lo) js_put(c, &cls, "-"), js_put_class_cp(c, &cls, hi);
            if (hi == 0x10FFFF) break;
            lo = hi + 1;
        }
    const bool any = cls.len > 0;
    if (any) js_put(c, e, "["), js_put(c, e, cls.p), js_put(c, e, "]");
    ms_buf_free(&cls);
    return any;
}

/* A normalized set as one GBNF primary over JSON text; false if empty. */
static bool put_set(struct js_conv *c, struct ms_buf *e, const struct cset *s) {
    struct ms_buf alt = {0};
    int n = 0, ctl = 0;
    bool plain = false;
    for (int i = 0; i < s->n; i++) /* the class of what JSON writes raw */
        for (uint32_t lo = s->lo[i] < 0x20 ? 0x20 : s->lo[i]; lo <= s->hi[i];) {
            uint32_t hi = s->hi[i];
            if (lo == '"' || lo == '\\' || (lo >= 0xD800 && lo <= 0xDFFF)) { /* escapes; surrogates */
                lo = lo >= 0xD800 ? 0xE000 : lo + 1;
                continue;
            }
            if (lo < '"' && hi >= '"')
                hi = '"' - 1;
            else if (lo < '\\' && hi >= '\\')
                hi = '\\' - 1;
            else if (lo < 0xD800 && hi >= 0xD800)
                hi = 0xD7FF;
            js_put(c, &alt, plain ? "" : "[");
            js_put_class_cp(c, &alt, lo);
            if (hi > lo) js_put(c, &alt, "-"), js_put_class_cp(c, &alt, hi);
            plain = true;
            lo = hi + 1;
        }
    if (plain) js_put(c, &alt, "]"), n++;
    for (uint32_t cp = 0; cp < 0x20; cp++) ctl += cs_has(s, cp);
    for (uint32_t cp = 0; cp < 0x5D; cp++) {
        char j[8];
        if (!cs_has(s, cp) || (cp >= 0x20 && cp != '"' && cp != '\\') || (cp < 0x20 && ctl == 0x20)) continue;
        js_json_char(j, cp);
        js_put(c, &alt, n++ ? " | " : "");
        js_put_lit(c, &alt, j, strlen(j));
    }
    if (ctl == 0x20)
        js_put(c, &alt, n++ ? " | " : ""), js_put(c, &alt, "\"\\\\\" [bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F]");
    if (n) {
        js_put(c, e, n > 1 || ctl == 0x20 ? "( " : "");
        js_put(c, e, alt.p);
        js_put(c, e, n > 1 || ctl == 0x20 ? " )" : "");
    }
    ms_buf_free(&alt);
    return n > 0;
}

static uint32_t rx_cp(struct rx *r) { return js_utf8_cp(&r->p, r->end); }

static bool rx_hex(struct rx *r, int n, uint32_t *cp) {
    *cp = 0;
    for (int i = 0; i < n; i++, r->p++) {
        const char h = r->p < r->end ? *r->p : 0;
        const int v = h >= '0' && h <= '9'                     ? h - '0'
                      : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10
                                                               : -1;
        if (v < 0) return false;
        *cp = *cp << 4 | (uint32_t)v;
    }
    return true;
}

/* The escape after a backslash: 1 with *cp (one character), 2 with s
 * extended (\d and the like), 0 on failure (r->bad or r->unsupported). */
static int rx_escape(struct rx *r, bool in_class, uint32_t *cp, struct cset *s) {
    if (r->p >= r->end) return r->bad = "'\\' at the end", 0;
    const char ch = *r->p;
    static const char ctl[] = "n\nr\rt\tf\fv\v";
    if (ch && strchr("dDwWsS", ch)) return r->p++, r->esc_class = true, cs_escape(s, ch, r->raw), 2;
    if (r->raw && ch && strchr("AZzGN", ch)) return r->unsupported = true, 0; /* Python's anchors, \N{...} */
    if (r->raw && ch == 'U') { /* Python's \UXXXXXXXX */
        r->p++;
        return rx_hex(r, 8, cp) && *cp <= 0x10FFFF ? 1 : (r->bad = "bad \\U escape", 0);
    }
    if (ch == 'b' && in_class) return r->p++, *cp = 8, 1;
    if (ch && strchr("bBkpPc123456789", ch)) return r->unsupported = true, 0; /* boundaries, backreferences, ... */
    if (ch == '0') return r->p++, *cp = 0, 1;
    for (const char *q = ctl; *q; q += 2)
        if (ch == *q) return r->p++, *cp = (uint32_t)(unsigned char)q[1], 1;
    if (ch == 'x' || ch == 'u') {
        r->p++;
        if (ch == 'u' && r->p < r->end && *r->p == '{') {
            const char *close = memchr(r->p, '}', (size_t)(r->end - r->p));
            r->p++;
            if (!close || close == r->p || close - r->p > 6 || !rx_hex(r, (int)(close - r->p), cp) || *cp > 0x10FFFF)
                return r->bad = "bad \\u{...} escape", 0;
            return r->p++, 1;
        }
        return rx_hex(r, ch == 'x' ? 2 : 4, cp) ? 1 : (r->bad = "bad \\x or \\u escape", 0);
    }
    *cp = rx_cp(r); /* an identity escape: \. \\ \/ \- ... */
    return 1;
}

/* A class after its "[" into s (normalized). */
static bool rx_class(struct rx *r, struct cset *s) {
    const bool neg = r->p < r->end && *r->p == '^';
    r->p += neg;
    r->esc_class = false;
    if (r->raw && r->p < r->end && *r->p == ']') cs_add(s, ']', ']'), r->p++; /* Python: a "]" first is itself */
    while (r->p < r->end && *r->p != ']') {
        uint32_t lo, hi;
        int k = *r->p == '\\' ? (r->p++, rx_escape(r, true, &lo, s)) : (lo = rx_cp(r), 1);
        if (k == 0) return false;
        if (k == 2) continue;
        hi = lo;
        if (r->end - r->p >= 2 && r->p[0] == '-' && r->p[1] != ']') {
            r->p++;
            k = *r->p == '\\' ? (r->p++, rx_escape(r, true, &hi, s)) : (hi = rx_cp(r), 1);
            if (k != 1) return k == 2 ? (r->unsupported = true, false) : false;
            if (hi < lo) return r->bad = "class range out of order", false;
        }
        cs_add(s, lo, hi);
    }
    if (r->p >= r->end) return r->bad = "missing ']'", false;
    r->p++;
    cs_norm(s, neg);
    if (r->raw && neg && r->esc_class) { /* [^\w...]: within ASCII (cs_escape) */
        struct cset t = {0};
        for (int i = 0; i < s->n; i++)
            if (s->lo[i] < 0x80) cs_add(&t, s->lo[i], s->hi[i] > 0x7F ? 0x7F : s->hi[i]);
        *s = t;
    }
    return !(r->unsupported = s->full);
}

/* A quantifier at r->p: true with m and n (-1: unbounded), lazy "?" skipped. */
static bool rx_quant(struct rx *r, long *m, long *n) {
    const char *p = r->p;
    if (p >= r->end) return false;
    if (*p == '*' || *p == '+' || *p == '?') {
        *m = *p == '+', *n = *p == '?' ? 1 : -1, p++;
    } else if (*p == '{') {
        char *q;
        if (r->raw && p + 2 < r->end && p[1] == ',' && p[2] >= '0' && p[2] <= '9') { /* Python's {,n} */
            *m = 0, *n = strtol(p + 2, &q, 10);
            if (q >= r->end || *q != '}') return false;
            r->p = q + 1 + (q + 1 < r->end && q[1] == '?');
            return true;
        }
        if (p + 1 >= r->end || p[1] < '0' || p[1] > '9') return false;
        *m = strtol(p + 1, &q, 10), *n = *m;
        if (*q == ',') *n = q[1] >= '0' && q[1] <= '9' ? strtol(q + 1, &q, 10) : (q++, -1);
        if (q >= r->end || *q != '}') return false;
        p = q + 1;
    } else {
        return false;
    }
    r->p = p + (p < r->end && *p == '?');
    return true;
}

static bool rx_alts(struct rx *r, struct ms_buf *o, bool top, bool *null);

/* One atom into o as a GBNF primary; a plain character as *cp instead
 * (returns 2), so that runs of them can share one literal. */
static int rx_atom(struct rx *r, struct ms_buf *o, uint32_t *cp, bool *null) {
    struct cset s = {0};
    const char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->end - r->p >= 2 && r->p[0] == '?' && r->p[1] == ':')
            r->p += 2;
        else if (r->end - r->p >= 3 && r->p[0] == '?' && r->p[1] == '<' && r->p[2] != '=' && r->p[2] != '!') {
            const char *gt = memchr(r->p, '>', (size_t)(r->end - r->p)); /* a named group */
            if (!gt) return r->bad = "bad group name", 0;
            r->p = gt + 1;
        } else if (r->p < r->end && *r->p == '?') {
            return r->unsupported = true, 0; /* lookaround, modifiers */
        }
        if (++r->depth > RX_DEPTH) return r->unsupported = true, 0;
        if (!rx_alts(r, o, false, null)) return 0;
        r->depth--;
        if (r->p >= r->end || *r->p != ')') return r->bad = "missing ')'", 0;
        return r->p++, 1;
    }
    int k = 1;
    if (ch == '[')
        r->p++, k = rx_class(r, &s) ? 2 : 0;
    else if (ch == '.' && r->raw)
        r->p++, cs_add(&s, '\n', '\n'), cs_norm(&s, true), k = 2;
    else if (ch == '.')
        r->p++, cs_add(&s, '\n', '\n'), cs_add(&s, '\r', '\r'), cs_add(&s, 0x2028, 0x2029), cs_norm(&s, true), k = 2;
    else if (ch == '\\')
        r->p++, k = rx_escape(r, false, cp, &s), k = k == 2 ? (cs_norm(&s, false), 2) : k;
    else if (ch == '^' || ch == '$')
        return r->unsupported = true, 0; /* anchors inside */
    else if (ch && strchr("*+?", ch))
        return r->bad = "nothing to repeat", 0;
    else
        *cp = rx_cp(r);
    if (k == 0) return 0;
    if (k == 1 && r->raw && ((*cp == r->excl && r->excl) || *cp == 0)) return r->unsupported = true, 0; /* or NUL */
    if (k == 1) return 2;
    if (!(r->raw ? put_raw_set(r->c, o, &s, r->excl) : put_set(r->c, o, &s)))
        return r->unsupported = true, 0; /* matches nothing */
    return 1;
}

/* A sequence up to "|", ")" or the end (top: also a final "$", *anchored). */
static bool rx_seq(struct rx *r, struct ms_buf *o, bool top, bool *anchored, bool *null) {
    struct ms_buf lit = {0};
    bool ok = true;
    *null = true;
    while (ok && r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (top && *r->p == '$' && (r->p + 1 == r->end || r->p[1] == '|')) {
            r->p++, *anchored = true;
            break;
        }
        struct ms_buf a = {0};
        uint32_t cp = 0;
        long m = 1, n = 1;
        bool an = false; /* the atom may match nothing */
        const int k = rx_atom(r, &a, &cp, &an);
        const bool q = k && rx_quant(r, &m, &n);
        *null &= an || m == 0;
        char j[8];
        ok = k != 0;
        if (k == 2 && r->raw) js_utf8_char(j, cp);
        else if (k == 2) js_json_char(j, cp);
        if (k == 2 && !q) {
            js_put(r->c, &lit, j);
        } else if (k) {
            if (lit.len) js_put_lit(r->c, o, lit.p, lit.len), js_put(r->c, o, " "), lit.len = 0;
            if (k == 2) js_put_lit(r->c, &a, j, strlen(j));
            if (q && n >= 0 && m > n) ok = false, r->bad = "quantifier {m,n} with m > n";
            if (q && m > MS_GRAMMAR_MAX_REPEAT) ok = false, r->unsupported = true;
            if (q && n > MS_GRAMMAR_MAX_REPEAT) n = -1, r->loosened = true;
            if (ok && n != 0 && a.len) {                             /* x{0}: nothing */
                const bool wrap = q && a.p[a.len - 1] == '?';
                js_put(r->c, o, wrap ? "( " : ""), js_put(r->c, o, a.p), js_put(r->c, o, wrap ? " )" : "");
                if (q) js_put_rep(r->c, o, m, n, "", "", "");
                js_put(r->c, o, " ");
            }
        }
        ms_buf_free(&a);
    }
    if (lit.len) js_put_lit(r->c, o, lit.p, lit.len);
    ms_buf_free(&lit);
    while (o->len && o->p[o->len - 1] == ' ') o->p[--o->len] = 0;
    return ok;
}

/* Alternatives up to ")" or the end, as "( a | b )", "( a | b )?" when
 * one may be empty, or nothing when all are. At the top each side not
 * anchored by "^" / "$" admits any characters. */
static bool rx_alts(struct rx *r, struct ms_buf *o, bool top, bool *null) {
    struct ms_buf alts = {0};
    int n = 0;
    bool empty = false, ok = true;
    *null = false;
    for (;;) {
        struct ms_buf s = {0};
        bool a_start = top && r->p < r->end && *r->p == '^', a_end = false;
        r->p += a_start;
        bool sn;
        ok = rx_seq(r, &s, top, &a_end, &sn);
        *null |= sn;
        if (r->raw) {
            /* the whole text: "^" and "$" change nothing */
        } else if (ok && top && s.len) { /* any characters on each unanchored side */
            struct ms_buf t = {0};
            js_put(r->c, &t, a_start ? "" : "char* "), js_put(r->c, &t, s.p), js_put(r->c, &t, a_end ? "" : " char*");
            ms_buf_free(&s), s = t;
        } else if (ok && top && !(a_start && a_end)) {
            js_put(r->c, &s, "char*");
        }
        if (ok && s.len) js_put(r->c, &alts, n++ ? " | " : ""), js_put(r->c, &alts, s.p);
        empty |= !s.len;
        ms_buf_free(&s);
        if (!ok || r->p >= r->end || *r->p != '|') break;
        r->p++;
    }
    if (ok && top && r->p < r->end) ok = false, r->bad = "unmatched ')'";
    if (ok && n) js_put(r->c, o, "( "), js_put(r->c, o, alts.p), js_put(r->c, o, empty ? " )?" : " )");
    ms_buf_free(&alts);
    return ok;
}

int js_gen_pattern(struct js_conv *c, const json_t *pat, const char *ptr, struct ms_buf *e) {
    struct rx r = {.c = c, .p = json_string_value(pat), .end = json_string_value(pat) + json_string_length(pat)};
    struct ms_buf o = {0};
    bool null = false;
    const bool ok = rx_alts(&r, &o, true, &null);
    if (ok) {
        js_put(c, e, "\"\\\"\" "), js_put(c, e, o.len ? o.p : ""), js_put(c, e, o.len ? " \"\\\"\"" : "\"\\\"\"");
        if (strstr(o.p ? o.p : "", "char*")) c->prims |= JS_PRIM_CHAR;
        if (r.loosened) js_warn(c, "pattern", ptr);
    }
    ms_buf_free(&o);
    if (!ok && r.bad) return js_fail(c, ptr, "'pattern' is not a valid regex: %s", r.bad);
    return ok ? 0 : 1;
}

int ms_regex_gbnf(const char *re, size_t n, uint32_t excl, struct ms_buf *out, ms_err *err) {
    struct js_conv c = {.err = err};
    char *z = malloc(n + 1); /* NUL-terminated: the quantifier reader stops at one */
    if (!z) return ms_err_set(err, "out of memory");
    memcpy(z, re, n);
    z[n] = 0;
    struct rx r = {.c = &c, .p = z, .end = z + n, .raw = true, .excl = excl};
    struct ms_buf o = {0};
    bool null = false;
    const bool ok = rx_alts(&r, &o, true, &null);
    int rc = 0;
    if (!ok && r.bad)
        rc = ms_err_set(err, "not a valid regex: %s", r.bad);
    else if (!ok)
        rc = ms_err_set(err, "a regex construct grammars cannot express (lookaround, backreferences, \\b, \\p, "
                             "inner anchors, a class that matches nothing)");
    else if (c.oom || ms_buf_puts(out, o.len ? o.p : "\"\""))
        rc = ms_err_set(err, "out of memory");
    ms_buf_free(&o);
    free(z);
    return rc;
}
