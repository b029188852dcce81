/*
 * json_schema.c - JSON Schema to GBNF (see json_schema.h).
 *
 * Each subschema becomes an expression; one that is not a single rule name
 * becomes a rule named after where it sits (property names sanitized), so
 * the grammar reads like the schema. Shared rules (value, string, ...) are
 * written once at the end, only those used. Output is built with sticky
 * OOM: appends record a failure and the result is refused at the end,
 * which keeps the generators free of per-append checks.
 */
#include "text/json_schema.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "text/utf8.h"

#define MAX_DEPTH 64                   /* nested subschemas, $ref hops included */
#define NAME_LEN 64                    /* rule names, with their suffixes */
#define HINT_LEN 40                    /* the readable part of a name */
#define PTR_LEN 256                    /* JSON pointers (messages only: truncation is harmless) */
#define INT_DIGITS 16                  /* longest unbounded integer part */
#define MAX_BOUND 999999999999999999LL /* integer bounds past 18 digits count as absent */
#define RX_DEPTH 32                    /* nested regex groups */
#define CSET_MAX 128                   /* ranges in one regex class */
#define MAX_STEPS 50000                /* subschemas expanded: allOf / anyOf inlining can multiply them */

enum prim {
    P_VALUE = 1,
    P_OBJECT = 2,
    P_ARRAY = 4,
    P_STRING = 8,
    P_CHAR = 16,
    P_NUMBER = 32,
    P_INTEGER = 64,
    P_BOOLEAN = 128,
    P_NULL = 256,
    P_DATE = 512,
    P_TIME = 1024,
    P_KCHAR = 2048,
    P_KESC = 4096
};

static const struct {
    const char *name, *body;
    unsigned needs;
} PRIMS[] = {
    {"value", "object | array | string | number | boolean | null",
     P_OBJECT | P_ARRAY | P_STRING | P_NUMBER | P_BOOLEAN | P_NULL},
    {"object", "\"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"",
     P_STRING | P_VALUE},
    {"array", "\"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"", P_VALUE},
    {"string", "\"\\\"\" char* \"\\\"\"", P_CHAR},
    {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )", 0},
    {"number", "integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?", P_INTEGER},
    {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )", 0},
    {"boolean", "\"true\" | \"false\"", 0},
    {"null", "\"null\"", 0},
    {"fmt-date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )", 0},
    {"fmt-time",
     "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) "
     "( \".\" [0-9]{1,9} )? ( [Zz] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
     0},
    /* a character of an object key in canonical form (json_schema.h), and its escapes */
    {"kchar", "[^\"\\\\\\x00-\\x1F] | kesc", P_KESC},
    {"kesc", "\"\\\\\" [\"\\\\bfnrt] | \"\\\\u00\" ( \"0\" [0-7bef] | \"1\" [0-9a-f] )", 0},
};
#define N_PRIMS (sizeof PRIMS / sizeof PRIMS[0])

/* Keyword classes: annotations are ignored, KNOWN ones are enforced (or
 * warned about where they are used), anything else is warned and dropped. */
static const char ANNOTATIONS[] = " title description $schema $id id default examples $comment deprecated readOnly "
                                  "writeOnly strict contentMediaType contentEncoding $anchor $defs definitions ";
static const char KNOWN[] = " type enum const properties required additionalProperties items prefixItems "
                            "additionalItems minItems maxItems minLength maxLength format pattern anyOf oneOf allOf "
                            "$ref nullable minimum maximum exclusiveMinimum exclusiveMaximum ";

struct conv {
    const json_t *root;
    struct ms_buf rules;                /* the generated rules, one a line */
    json_t *names;                      /* rule names taken (an object used as a set) */
    json_t *refs;                       /* $ref string -> its rule name */
    json_t *others;                     /* key_other's rules: body -> name */
    const char *pending[MAX_DEPTH + 1]; /* $refs being expanded, outermost first */
    int n_pending, base;                /* pending[base..] were entered without any text consumed since */
    unsigned prims;                     /* shared rules used */
    int depth, steps;
    bool oom;
    ms_json_schema_warn_fn warn;
    void *warn_ctx;
    ms_err *err;
};

static int gen(struct conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e);

/* ---- output helpers --------------------------------------------------- */

static void put(struct conv *c, struct ms_buf *b, const char *s) {
    if (ms_buf_puts(b, s)) c->oom = true;
}

static void __attribute__((format(printf, 3, 4))) putf(struct conv *c, struct ms_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp || ms_buf_put(b, tmp, (size_t)n)) c->oom = true;
}

static void prim(struct conv *c, struct ms_buf *e, unsigned p) {
    c->prims |= p;
    for (size_t i = 0; i < N_PRIMS; i++)
        if (p == 1u << i) put(c, e, PRIMS[i].name);
}

/* A GBNF literal holding the bytes s[0..n). */
static void put_lit(struct conv *c, struct ms_buf *e, const char *s, size_t n) {
    put(c, e, "\"");
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            putf(c, e, "\\%c", ch);
        else if (ch < 0x20)
            putf(c, e, "\\x%02X", ch);
        else if (ms_buf_put(e, (const char *)&ch, 1))
            c->oom = true;
    }
    put(c, e, "\"");
}

/* How JSON writes code point cp inside a string (UTF-8, NUL-terminated). */
static void json_char(char out[8], uint32_t cp) {
    static const char short_esc[] = "\bb\ff\nn\rr\tt\"\"\\\\";
    for (const char *p = short_esc; *p; p += 2)
        if ((uint32_t)(unsigned char)p[0] == cp) {
            out[0] = '\\', out[1] = p[1], out[2] = 0;
            return;
        }
    const int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; /* UTF-8 */
    if (cp < 0x20) {
        snprintf(out, 8, "\\u%04x", (unsigned)cp); /* lower case, as JSON.stringify */
        return;
    }
    for (int i = n - 1; i > 0; i--) out[i] = (char)(0x80 | (cp & 63)), cp >>= 6;
    out[0] = (char)(unsigned char)(n == 1 ? cp : (0xF00u >> n & 0xFF) | cp);
    out[n] = 0;
}

/* s[0..n) as a JSON string literal (quotes included); bytes past ASCII stay raw. */
static void put_json_str(struct conv *c, struct ms_buf *b, const char *s, size_t n) {
    put(c, b, "\"");
    for (size_t i = 0; i < n; i++) {
        char t[8] = {s[i], 0};
        if ((unsigned char)s[i] < 0x80) json_char(t, (unsigned char)s[i]);
        put(c, b, t);
    }
    put(c, b, "\"");
}

/* Whether s[0..n) is valid UTF-8. */
static bool utf8_ok(const char *s, size_t n) {
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = ms_utf8_valid_len(s + i, n - i))) return false;
    return true;
}

/* The compact serialization of v. Reals take the shortest form that reads
 * back the same (jansson's %.17g would demand 0.10000000000000001). */
static void dump(struct conv *c, struct ms_buf *b, const json_t *v) {
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        int first = 1;
        put(c, b, "{");
        json_object_foreach((json_t *)v, k, x) {
            put(c, b, first ? "" : ",");
            put_json_str(c, b, k, strlen(k));
            put(c, b, ":");
            dump(c, b, x);
            first = 0;
        }
        put(c, b, "}");
    } else if (json_is_array(v)) {
        put(c, b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            put(c, b, i ? "," : "");
            dump(c, b, json_array_get(v, i));
        }
        put(c, b, "]");
    } else if (json_is_string(v)) {
        put_json_str(c, b, json_string_value(v), json_string_length(v));
    } else if (json_is_integer(v)) {
        putf(c, b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        char t[40];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(t, sizeof t, "%.*g", prec, json_real_value(v));
            if (strtod(t, NULL) == json_real_value(v)) break;
        }
        put(c, b, t);
        if (!strpbrk(t, ".eE")) put(c, b, ".0");
    } else {
        put(c, b, json_is_true(v) ? "true" : json_is_false(v) ? "false" : "null");
    }
}

/* ---- names, pointers, messages ---------------------------------------- */

static const char *where(const char *ptr) { return *ptr ? ptr : "(root)"; }

static int __attribute__((format(printf, 3, 4))) fail(struct conv *c, const char *ptr, const char *fmt, ...) {
    char msg[MS_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ms_err_set(c->err, "%s: %s", where(ptr), msg);
}

static void warn(struct conv *c, const char *kw, const char *ptr) {
    if (c->warn) c->warn(c->warn_ctx, kw, ptr);
}

/* ptr + "/" + seg, seg escaped as JSON pointers require (~0, ~1). */
static void ptr_join(char out[PTR_LEN], const char *ptr, const char *seg) {
    size_t n = (size_t)snprintf(out, PTR_LEN, "%s/", ptr);
    for (; *seg && n + 3 < PTR_LEN; seg++) {
        if (*seg == '~' || *seg == '/')
            out[n++] = '~', out[n++] = *seg == '~' ? '0' : '1';
        else
            out[n++] = *seg;
    }
    out[n < PTR_LEN ? n : PTR_LEN - 1] = 0;
}

static void ptr_index(char out[PTR_LEN], const char *ptr, const char *key, size_t i) {
    snprintf(out, PTR_LEN, "%s/%s/%zu", ptr, key, i);
}

/* parent-seg with seg reduced to [A-Za-z0-9-] (runs of others become one
 * "-"), cut to HINT_LEN so that suffixes still fit in NAME_LEN. */
static void hint_join(char out[NAME_LEN], const char *parent, const char *seg) {
    size_t n = (size_t)snprintf(out, HINT_LEN, "%s%s", parent, *parent ? "-" : "");
    if (n >= HINT_LEN) n = HINT_LEN - 1;
    for (; *seg && n + 1 < HINT_LEN; seg++) {
        const char ch = *seg;
        const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (ok)
            out[n++] = ch;
        else if (n && out[n - 1] != '-')
            out[n++] = '-';
    }
    while (n && out[n - 1] == '-') n--;
    out[n] = 0;
    if (!n) snprintf(out, NAME_LEN, "p");
}

/* A rule name not taken yet: hint (or "anon"), then hint-2, hint-3, ...
 * names[base] keeps the last suffix tried, so that many rules of one base
 * do not rescan the taken ones. */
static void new_name(struct conv *c, const char *hint, const char *suffix, char out[NAME_LEN]) {
    char base[NAME_LEN];
    snprintf(base, sizeof base, "%s%s%s", *hint ? hint : "anon", *hint && *suffix ? "-" : "", suffix);
    const json_t *seen = json_object_get(c->names, base);
    json_int_t k = seen ? json_integer_value(seen) : 1;
    snprintf(out, NAME_LEN, "%s", base);
    while (json_object_get(c->names, out)) snprintf(out, NAME_LEN, "%.*s-%d", HINT_LEN + 12, base, (int)++k);
    if (json_object_set_new(c->names, base, json_integer(k))) c->oom = true;
    if (strcmp(out, base) && json_object_set_new(c->names, out, json_integer(1))) c->oom = true;
}

static bool is_name(const char *s) {
    if (!s || !*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_'))
            return false;
    return true;
}

/* Whether k is one of the space-separated words. */
static bool in_list(const char *words, const char *k) {
    const size_t n = strlen(k);
    if (!n || strchr(k, ' ')) return false;
    for (const char *p = strstr(words, k); p; p = strstr(p + 1, k))
        if (p[-1] == ' ' && p[n] == ' ') return true;
    return false;
}

/* Warns about each keyword of s that is neither an annotation nor known. */
static void check_keywords(struct conv *c, const json_t *s, const char *ptr) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!in_list(ANNOTATIONS, k) && !in_list(KNOWN, k)) warn(c, k, ptr);
    }
}

static void put_rule(struct conv *c, const char *name, const char *body) {
    put(c, &c->rules, name), put(c, &c->rules, " ::= "), put(c, &c->rules, body ? body : ""), put(c, &c->rules, "\n");
}

/* Defines a new rule named after hint with the given body; name gets it. */
static void add_rule(struct conv *c, const char *hint, const char *body, char name[NAME_LEN]) {
    new_name(c, hint, "", name);
    put_rule(c, name, body);
}

/* Expression e as a rule name: itself when it is one, else a new rule. */
static void as_name(struct conv *c, const struct ms_buf *e, const char *hint, char name[NAME_LEN]) {
    if (is_name(e->p) && e->len < NAME_LEN)
        memcpy(name, e->p, e->len + 1);
    else
        add_rule(c, hint, e->p, name);
}

/* A schema as a rule name. */
static int visit(struct conv *c, const json_t *s, const char *ptr, const char *hint, char name[NAME_LEN]) {
    struct ms_buf e = {0};
    const int rc = gen(c, s, ptr, hint, &e);
    if (!rc) as_name(c, &e, hint, name);
    ms_buf_free(&e);
    return rc;
}

/* e gets "{m,n}"-style repetition (n < 0: unbounded); counts past the
 * grammar's limit are loosened with a warning on kmin / kmax. */
static void put_rep(struct conv *c, struct ms_buf *e, long long m, long long n, const char *ptr, const char *kmin,
                    const char *kmax) {
    if (n > MS_GRAMMAR_MAX_REPEAT) n = -1, warn(c, kmax, ptr);
    if (m > MS_GRAMMAR_MAX_REPEAT) m = MS_GRAMMAR_MAX_REPEAT, warn(c, kmin, ptr);
    if (n < 0 && m < 2)
        put(c, e, m ? "+" : "*");
    else if (n < 0)
        putf(c, e, "{%lld,}", m);
    else if (m == 0 && n == 1)
        put(c, e, "?");
    else if (m == n && m != 1)
        putf(c, e, "{%lld}", m);
    else if (m != n)
        putf(c, e, "{%lld,%lld}", m, n);
}

/* A non-negative integer keyword: 0 with *v (def when absent), or -1. */
static int count_kw(struct conv *c, const json_t *s, const char *k, const char *ptr, long long def, long long *v) {
    const json_t *j = json_object_get(s, k);
    *v = def;
    if (!j) return 0;
    const double d = json_number_value(j); /* 5.0 is an integer too */
    if (!json_is_number(j) || d < 0 || d != floor(d)) return fail(c, ptr, "'%s' must be a non-negative integer", k);
    *v = d > 1e15 ? (long long)1e15 : (long long)d;
    return 0;
}

/* ---- $ref --------------------------------------------------------------- */

/* The schema a local $ref names, or NULL with err set. */
static const json_t *resolve(struct conv *c, const char *ref, const char *ptr) {
    if (ref[0] != '#' || (ref[1] && ref[1] != '/'))
        return fail(c, ptr, "$ref '%s' is not a local JSON pointer ('#', '#/$defs/NAME', ...)", ref), NULL;
    const json_t *cur = c->root;
    char *seg = malloc(strlen(ref) + 1);
    if (!seg) return c->oom = true, fail(c, ptr, "out of memory"), NULL;
    for (const char *p = ref + 1; cur && *p == '/';) {
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            unsigned hex;
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1'))
                seg[n++] = p[1] == '0' ? '~' : '/', p++;
            else if (p[0] == '%' && sscanf(p + 1, "%2x", &hex) == 1 && p[1] && p[2])
                seg[n++] = (char)hex, p += 2;
            else
                seg[n++] = *p;
        }
        seg[n] = 0;
        /* a segment is a key or an index: %00 would cut it short, and
         * other bytes that are not UTF-8 name nothing a schema can hold */
        if (memchr(seg, 0, n) || (n && !utf8_ok(seg, n))) {
            free(seg);
            return fail(c, ptr, "$ref '%s' has a segment that decodes to a NUL or to invalid UTF-8", ref), NULL;
        }
        char *end;
        const unsigned long i = strtoul(seg, &end, 10);
        cur = json_is_object(cur)                ? json_object_get(cur, seg)
              : json_is_array(cur) && n && !*end ? json_array_get(cur, i)
                                                 : NULL;
    }
    free(seg);
    if (!cur) fail(c, ptr, "$ref '%s' not found", ref);
    return cur;
}

/* Warns about the keywords beside $ref that it overrides. */
static void ref_siblings(struct conv *c, const json_t *s, const char *ptr) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (strcmp(k, "$ref") && strcmp(k, "nullable") && in_list(KNOWN, k)) warn(c, k, ptr);
    }
}

static int gen_ref(struct conv *c, const json_t *s, const char *ptr, struct ms_buf *e) {
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) return fail(c, ptr, "'$ref' must be a string");
    ref_siblings(c, s, ptr);
    const char *done = json_string_value(json_object_get(c->refs, ref));
    if (done) {
        /* reaching a $ref under expansion before any text would make the
         * rule left-recursive: {"$ref": "#"}, or anyOf [itself, ...] */
        for (int i = c->base; i < c->n_pending; i++)
            if (!strcmp(c->pending[i], ref))
                return fail(c, ptr, "$ref '%s' refers back to itself before any JSON text", ref);
        put(c, e, done);
        return 0;
    }
    const json_t *target = resolve(c, ref, ptr);
    if (!target) return -1;
    const char *last = strrchr(ref, '/');
    char hint[NAME_LEN], name[NAME_LEN];
    hint_join(hint, "", last ? last + 1 : "schema");
    new_name(c, hint, "", name);
    if (json_object_set_new(c->refs, ref, json_string(name))) c->oom = true;
    c->pending[c->n_pending++] = ref;
    struct ms_buf body = {0};
    const int rc = gen(c, target, ref + 1, name, &body);
    c->n_pending--;
    if (!rc) put_rule(c, name, body.p), put(c, e, name);
    ms_buf_free(&body);
    return rc;
}

/* ---- allOf / anyOf -------------------------------------------------------- */

/* A new object holding the known keywords of s but skip, nullable and $ref. */
static json_t *siblings(struct conv *c, const json_t *s, const char *skip) {
    json_t *o = json_object();
    const char *k;
    json_t *v;
    if (!o) c->oom = true;
    json_object_foreach((json_t *)s, k, v) {
        const bool keep = in_list(KNOWN, k) && strcmp(k, skip) && strcmp(k, "nullable") && strcmp(k, "$ref");
        if (o && keep && json_object_set(o, k, v)) c->oom = true;
    }
    return o;
}

/* Follows $ref until a schema that is not one; NULL with err on failure. */
static const json_t *deref(struct conv *c, const json_t *s, const char *ptr, char tptr[PTR_LEN]) {
    snprintf(tptr, PTR_LEN, "%s", ptr);
    for (int hops = 0; json_is_object(s) && json_object_get(s, "$ref"); hops++) {
        const char *ref = json_string_value(json_object_get(s, "$ref"));
        if (!ref) return fail(c, tptr, "'$ref' must be a string"), NULL;
        if (hops == MAX_DEPTH) return fail(c, ptr, "$ref chain longer than %d (a cycle?)", MAX_DEPTH), NULL;
        ref_siblings(c, s, tptr);
        if (!(s = resolve(c, ref, tptr))) return NULL;
        snprintf(tptr, PTR_LEN, "%s", ref + 1);
    }
    return s;
}

/* Merges member t into m: properties (a property in both must match
 * both: allOf of the two) and required join; other keywords: the first
 * wins, and a conflict is warned once (*warned). */
static void merge_into(struct conv *c, json_t *m, const json_t *t, const char *ptr, bool *warned) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)t, k, v) {
        json_t *old = json_object_get(m, k);
        if (!in_list(KNOWN, k) || !strcmp(k, "$ref")) continue;
        if (!strcmp(k, "properties") && json_is_object(v) && (!old || json_is_object(old))) {
            json_t *p = json_object();
            const char *pk;
            json_t *pv;
            if (!p || (old && json_object_update(p, old))) c->oom = true;
            json_object_foreach(v, pk, pv) {
                json_t *prev = json_object_get(p, pk);
                json_t *both = prev && !json_equal(prev, pv) ? json_pack("{s:[OO]}", "allOf", prev, pv) : NULL;
                if (p && json_object_set(p, pk, both ? both : prev ? prev : pv)) c->oom = true;
                json_decref(both);
            }
            if (json_object_set_new(m, k, p)) c->oom = true;
        } else if (!strcmp(k, "required") && json_is_array(v) && (!old || json_is_array(old))) {
            json_t *r = old ? json_copy(old) : json_array();
            if (!r || json_array_extend(r, v) || json_object_set_new(m, k, r)) c->oom = true;
        } else if (!old) {
            if (json_object_set(m, k, v)) c->oom = true;
        } else if (!json_equal(old, v) && !*warned) {
            *warned = true;
            warn(c, "allOf", ptr);
        }
    }
}

/* The schema "base and every member of items (an array, or one schema)". */
static int gen_merged(struct conv *c, json_t *base, const json_t *items, const char *ptr, const char *key, size_t first,
                      const char *hint, struct ms_buf *e) {
    bool warned = false;
    const size_t n = json_is_array(items) ? json_array_size(items) : 1;
    for (size_t i = 0; i < n; i++) {
        char iptr[PTR_LEN], tptr[PTR_LEN];
        ptr_index(iptr, ptr, key, first + i);
        const json_t *t = deref(c, json_is_array(items) ? json_array_get(items, i) : items, iptr, tptr);
        if (!t) return -1;
        if (json_is_false(t)) return fail(c, tptr, "schema allows nothing (false)");
        if (json_is_true(t)) continue;
        if (!json_is_object(t)) return fail(c, tptr, "a schema must be an object or a boolean");
        check_keywords(c, t, tptr);
        merge_into(c, base, t, ptr, &warned);
    }
    return gen(c, base, ptr, hint, e);
}

static int gen_allof(struct conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    const json_t *all = json_object_get(s, "allOf");
    if (!json_is_array(all) || !json_array_size(all)) return fail(c, ptr, "'allOf' must be a non-empty array");
    json_t *base = siblings(c, s, "allOf");
    if (!base) return fail(c, ptr, "out of memory");
    int rc;
    if (!json_object_size(base) && json_array_size(all) == 1) {
        char iptr[PTR_LEN];
        ptr_index(iptr, ptr, "allOf", 0);
        rc = gen(c, json_array_get(all, 0), iptr, hint, e); /* keeps its own pointers */
    } else {
        rc = gen_merged(c, base, all, ptr, "allOf", 0, hint, e);
    }
    json_decref(base);
    return rc;
}

/* anyOf / oneOf: one alternative per branch; keywords beside it go into
 * every branch (A and (B or C) = (A and B) or (A and C)). */
static int gen_anyof(struct conv *c, const json_t *s, const char *key, const char *ptr, const char *hint,
                     struct ms_buf *e) {
    const json_t *any = json_object_get(s, key);
    if (!json_is_array(any) || !json_array_size(any)) return fail(c, ptr, "'%s' must be a non-empty array", key);
    if (!strcmp(key, "oneOf")) warn(c, "oneOf", ptr); /* exclusivity is not enforced */
    json_t *sib = siblings(c, s, key);
    if (!sib) return fail(c, ptr, "out of memory");
    const bool alone = !json_object_size(sib);
    json_decref(sib);
    int n = 0;
    for (size_t i = 0; i < json_array_size(any); i++) {
        const json_t *item = json_array_get(any, i);
        char iptr[PTR_LEN], ihint[NAME_LEN], name[NAME_LEN];
        if (json_is_false(item)) continue;
        ptr_index(iptr, ptr, key, i);
        snprintf(ihint, sizeof ihint, "%.*s-%zu", HINT_LEN, *hint ? hint : "alt", i);
        int rc;
        if (alone) {
            rc = visit(c, item, iptr, ihint, name);
        } else {
            struct ms_buf b = {0};
            json_t *base = siblings(c, s, key);
            rc = base ? gen_merged(c, base, item, ptr, key, i, ihint, &b) : fail(c, ptr, "out of memory");
            json_decref(base);
            if (!rc) as_name(c, &b, ihint, name);
            ms_buf_free(&b);
        }
        if (rc) return rc;
        put(c, e, n++ ? " | " : "");
        put(c, e, name);
    }
    return n ? 0 : fail(c, ptr, "schema allows nothing (every '%s' branch is false)", key);
}

/* ---- integers ------------------------------------------------------------- */

static void digit_class(struct conv *c, struct ms_buf *e, char a, char b) {
    if (a == b)
        putf(c, e, "\"%c\"", a);
    else
        putf(c, e, "[%c-%c]", a, b);
}

static void any_digits(struct conv *c, struct ms_buf *e, size_t n) {
    if (n) putf(c, e, n == 1 ? " [0-9]" : " [0-9]{%zu}", n);
}

static bool all_of(const char *s, char ch, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ch) return false;
    return true;
}

/* The decimals from x to y, both n digits (x <= y): a shared leading digit,
 * else the lowest first digit's range, the full middle ones, the highest's. */
static void same_len(struct conv *c, struct ms_buf *e, const char *x, const char *y, size_t n) {
    static const char zeros[] = "0000000000000000000000", nines[] = "9999999999999999999999";
    if (x[0] == y[0]) {
        digit_class(c, e, x[0], x[0]);
        if (n > 1) put(c, e, " "), same_len(c, e, x + 1, y + 1, n - 1);
        return;
    }
    const bool low = all_of(x + 1, '0', n - 1), high = all_of(y + 1, '9', n - 1);
    const char a = low ? x[0] : (char)(x[0] + 1), b = high ? y[0] : (char)(y[0] - 1);
    int alts = 0;
    put(c, e, "( ");
    if (!low) {
        digit_class(c, e, x[0], x[0]);
        put(c, e, " "), same_len(c, e, x + 1, nines, n - 1), alts++;
    }
    if (a <= b) {
        put(c, e, alts++ ? " | " : "");
        digit_class(c, e, a, b), any_digits(c, e, n - 1);
    }
    if (!high) {
        put(c, e, alts++ ? " | " : "");
        digit_class(c, e, y[0], y[0]);
        put(c, e, " "), same_len(c, e, zeros, y + 1, n - 1);
    }
    put(c, e, " )");
}

/* The decimals (no leading zeros) from a to b, or to INT_DIGITS+ digits
 * when open. */
static void urange(struct conv *c, struct ms_buf *e, uint64_t a, uint64_t b, bool open) {
    char xs[24], ys[24];
    const size_t la = (size_t)snprintf(xs, sizeof xs, "%" PRIu64, a);
    const size_t lb = open ? la : (size_t)snprintf(ys, sizeof ys, "%" PRIu64, b);
    const size_t cap = la > INT_DIGITS ? la : INT_DIGITS;
    put(c, e, "( ");
    for (size_t len = la; len <= lb; len++) {
        uint64_t p10 = 1;
        for (size_t k = 1; k < len; k++) p10 *= 10;
        const uint64_t lo = len == la ? a : p10, hi = !open && len == lb ? b : p10 * 10 - 1;
        snprintf(xs, sizeof xs, "%" PRIu64, lo);
        snprintf(ys, sizeof ys, "%" PRIu64, hi);
        put(c, e, len > la ? " | " : "");
        same_len(c, e, xs, ys, len);
    }
    if (open && la < cap) putf(c, e, " | [1-9] [0-9]{%zu,%zu}", la, cap - 1);
    put(c, e, " )");
}

/* An integer bound: 0 with *has and *v (the nearest integer inside it), or
 * -1. excl: the bound excludes its value. lower: a minimum (round up). */
static int bound(struct conv *c, const json_t *j, const char *k, const char *ptr, bool lower, bool excl, bool *has,
                 long long *v) {
    if (!json_is_number(j)) return fail(c, ptr, "'%s' must be a number", k);
    const double d = json_number_value(j);
    if (d < -(double)MAX_BOUND || d > (double)MAX_BOUND) {
        if ((lower && d > 0) || (!lower && d < 0))
            return fail(c, ptr, "'%s' is past the 18 digits integers may have here", k);
        return 0; /* looser than any bound a grammar can spell: none */
    }
    long long x = json_is_integer(j) ? (long long)json_integer_value(j) : (long long)(lower ? ceil(d) : floor(d));
    if (excl && (!json_is_real(j) || d == (double)x)) x += lower ? 1 : -1;
    if (!*has || (lower ? x > *v : x < *v)) *v = x;
    *has = true;
    return 0;
}

/* Both bound keyword forms: draft 4 (exclusiveX: true on minimum) and
 * draft 6 (exclusiveX: the bound itself); both given: the tighter one. */
static int bounds(struct conv *c, const json_t *s, const char *ptr, bool lower, bool *has, long long *v) {
    const char *k = lower ? "minimum" : "maximum", *xk = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_t *j = json_object_get(s, k), *x = json_object_get(s, xk);
    *has = false;
    if (x && !json_is_boolean(x) && bound(c, x, xk, ptr, lower, true, has, v)) return -1;
    return j ? bound(c, j, k, ptr, lower, json_is_true(x), has, v) : 0;
}

static int gen_integer(struct conv *c, const json_t *s, const char *ptr, struct ms_buf *e) {
    bool hlo, hhi;
    long long lo = 0, hi = 0;
    if (bounds(c, s, ptr, true, &hlo, &lo) || bounds(c, s, ptr, false, &hhi, &hi)) return -1;
    if (!hlo && !hhi) return prim(c, e, P_INTEGER), 0;
    if (hlo && hhi && lo > hi) return fail(c, ptr, "schema allows nothing (integer range %lld..%lld)", lo, hi);
    int alts = 0;
    if (!hlo || lo < 0) { /* negatives, by magnitude */
        put(c, e, "\"-\" "), alts++;
        urange(c, e, hhi && hi < 0 ? (uint64_t)-hi : 1, hlo ? (uint64_t)-lo : 0, !hlo);
    }
    if (!hhi || hi >= 0) {
        put(c, e, alts ? " | " : "");
        urange(c, e, hlo && lo > 0 ? (uint64_t)lo : 0, hhi ? (uint64_t)hi : 0, !hhi);
    }
    return 0;
}

/* ---- patterns (ECMA-262 subset) --------------------------------------------
 * A regex over a string's characters becomes GBNF over their JSON text:
 * classes are code point ranges, and ", \ and controls turn into their
 * escapes. Unsupported constructs stop the conversion (the pattern is then
 * dropped with a warning); malformed ones are errors. */

struct cset {
    int n;
    bool full; /* more ranges than fit: unsupported */
    uint32_t lo[CSET_MAX], hi[CSET_MAX];
};

struct rx {
    struct conv *c;
    const char *p, *end;
    int depth;
    const char *bad;  /* a syntax error */
    bool unsupported; /* a construct a grammar cannot express */
    bool loosened;    /* a count past MS_GRAMMAR_MAX_REPEAT became unbounded */
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

/* \d \w \s (upper case: negated), added to s. */
static void cs_escape(struct cset *s, char kind) {
    static const uint32_t d[] = {'0', '9'}, w[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'},
                          sp[] = {9,      13,     32,     32,     0xA0,   0xA0,   0x1680, 0x1680, 0x2000, 0x200A,
                                  0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
    const char k = (char)(kind | 0x20);
    const uint32_t *r = k == 'd' ? d : k == 'w' ? w : sp;
    const size_t n = k == 'd' ? 2 : k == 'w' ? 8 : 20;
    struct cset t = {0};
    for (size_t i = 0; i < n; i += 2) cs_add(&t, r[i], r[i + 1]);
    cs_norm(&t, kind != k);
    for (int i = 0; i < t.n; i++) cs_add(s, t.lo[i], t.hi[i]);
}

static void put_class_cp(struct conv *c, struct ms_buf *e, uint32_t cp) {
    const bool alnum = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9');
    if (alnum)
        putf(c, e, "%c", (char)cp);
    else if (cp < 0x80)
        putf(c, e, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000)
        putf(c, e, "\\u%04X", (unsigned)cp);
    else
        putf(c, e, "\\U%08X", (unsigned)cp);
}

/* A normalized set as one GBNF primary over JSON text; false if empty. */
static bool put_set(struct conv *c, struct ms_buf *e, const struct cset *s) {
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
            put(c, &alt, plain ? "" : "[");
            put_class_cp(c, &alt, lo);
            if (hi > lo) put(c, &alt, "-"), put_class_cp(c, &alt, hi);
            plain = true;
            lo = hi + 1;
        }
    if (plain) put(c, &alt, "]"), n++;
    for (uint32_t cp = 0; cp < 0x20; cp++) ctl += cs_has(s, cp);
    for (uint32_t cp = 0; cp < 0x5D; cp++) {
        char j[8];
        if (!cs_has(s, cp) || (cp >= 0x20 && cp != '"' && cp != '\\') || (cp < 0x20 && ctl == 0x20)) continue;
        json_char(j, cp);
        put(c, &alt, n++ ? " | " : "");
        put_lit(c, &alt, j, strlen(j));
    }
    if (ctl == 0x20) put(c, &alt, n++ ? " | " : ""), put(c, &alt, "\"\\\\\" [bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F]");
    if (n) {
        put(c, e, n > 1 || ctl == 0x20 ? "( " : "");
        put(c, e, alt.p);
        put(c, e, n > 1 || ctl == 0x20 ? " )" : "");
    }
    ms_buf_free(&alt);
    return n > 0;
}

/* The code point at *p (before end; jansson strings are valid UTF-8), *p moved past it. */
static uint32_t utf8_cp(const char **p, const char *end) {
    const size_t n = ms_utf8_valid_len(*p, (size_t)(end - *p));
    const unsigned char *u = (const unsigned char *)*p;
    *p += n ? n : 1;
    if (n <= 1) return u[0];
    uint32_t cp = u[0] & (0x7Fu >> n);
    for (size_t k = 1; k < n; k++) cp = cp << 6 | (u[k] & 0x3Fu);
    return cp;
}

static uint32_t rx_cp(struct rx *r) { return utf8_cp(&r->p, r->end); }

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
    if (ch && strchr("dDwWsS", ch)) return r->p++, cs_escape(s, ch), 2;
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
    if (k == 1) return 2;
    if (!put_set(r->c, o, &s)) return r->unsupported = true, 0; /* matches nothing */
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
        if (k == 2) json_char(j, cp);
        if (k == 2 && !q) {
            put(r->c, &lit, j);
        } else if (k) {
            if (lit.len) put_lit(r->c, o, lit.p, lit.len), put(r->c, o, " "), lit.len = 0;
            if (k == 2) put_lit(r->c, &a, j, strlen(j));
            if (q && n >= 0 && m > n) ok = false, r->bad = "quantifier {m,n} with m > n";
            if (q && m > MS_GRAMMAR_MAX_REPEAT) ok = false, r->unsupported = true;
            if (q && n > MS_GRAMMAR_MAX_REPEAT) n = -1, r->loosened = true;
            if (ok && n != 0 && a.len) {                             /* x{0}: nothing */
                const bool wrap = q && a.p[a.len - 1] == '?';
                put(r->c, o, wrap ? "( " : ""), put(r->c, o, a.p), put(r->c, o, wrap ? " )" : "");
                if (q) put_rep(r->c, o, m, n, "", "", "");
                put(r->c, o, " ");
            }
        }
        ms_buf_free(&a);
    }
    if (lit.len) put_lit(r->c, o, lit.p, lit.len);
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
        if (ok && top && s.len) { /* any characters on each unanchored side */
            struct ms_buf t = {0};
            put(r->c, &t, a_start ? "" : "char* "), put(r->c, &t, s.p), put(r->c, &t, a_end ? "" : " char*");
            ms_buf_free(&s), s = t;
        } else if (ok && top && !(a_start && a_end)) {
            put(r->c, &s, "char*");
        }
        if (ok && s.len) put(r->c, &alts, n++ ? " | " : ""), put(r->c, &alts, s.p);
        empty |= !s.len;
        ms_buf_free(&s);
        if (!ok || r->p >= r->end || *r->p != '|') break;
        r->p++;
    }
    if (ok && top && r->p < r->end) ok = false, r->bad = "unmatched ')'";
    if (ok && n) put(r->c, o, "( "), put(r->c, o, alts.p), put(r->c, o, empty ? " )?" : " )");
    ms_buf_free(&alts);
    return ok;
}

/* The string rule body for pattern pat: 0, 1 when unsupported (warned by
 * the caller), -1 with err on a malformed pattern. */
static int gen_pattern(struct conv *c, const json_t *pat, const char *ptr, struct ms_buf *e) {
    struct rx r = {.c = c, .p = json_string_value(pat), .end = json_string_value(pat) + json_string_length(pat)};
    struct ms_buf o = {0};
    bool null = false;
    const bool ok = rx_alts(&r, &o, true, &null);
    if (ok) {
        put(c, e, "\"\\\"\" "), put(c, e, o.len ? o.p : ""), put(c, e, o.len ? " \"\\\"\"" : "\"\\\"\"");
        if (strstr(o.p ? o.p : "", "char*")) c->prims |= P_CHAR;
        if (r.loosened) warn(c, "pattern", ptr);
    }
    ms_buf_free(&o);
    if (!ok && r.bad) return fail(c, ptr, "'pattern' is not a valid regex: %s", r.bad);
    return ok ? 0 : 1;
}

/* ---- strings ----------------------------------------------------------------- */

static int gen_string(struct conv *c, const json_t *s, const char *ptr, struct ms_buf *e) {
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long long lo, hi;
    if (count_kw(c, s, "minLength", ptr, 0, &lo) || count_kw(c, s, "maxLength", ptr, -1, &hi)) return -1;
    if (hi >= 0 && lo > hi) return fail(c, ptr, "schema allows nothing (minLength > maxLength)");
    if (pat && !json_is_string(pat)) return fail(c, ptr, "'pattern' must be a string");
    if (fmt && !json_is_string(fmt)) return fail(c, ptr, "'format' must be a string");
    bool done = false;
    if (pat) {
        const int rc = gen_pattern(c, pat, ptr, e);
        if (rc < 0) return -1;
        if (rc > 0) warn(c, "pattern", ptr);
        done = rc == 0;
    }
    const char *f = fmt ? json_string_value(fmt) : "";
    if (fmt && done) {
        warn(c, "format", ptr); /* the pattern is the stricter of the two, usually */
    } else if (!strcmp(f, "date") || !strcmp(f, "time") || !strcmp(f, "date-time")) {
        put(c, e, "\"\\\"\" ");
        if (strcmp(f, "time")) prim(c, e, P_DATE);
        if (!strcmp(f, "date-time")) put(c, e, " [Tt] ");
        if (strcmp(f, "date")) prim(c, e, P_TIME);
        put(c, e, " \"\\\"\""), done = true;
    } else if (!strcmp(f, "uuid")) {
        put(c, e,
            "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
            "[0-9a-fA-F]{12} \"\\\"\"");
        done = true;
    } else if (fmt) {
        warn(c, "format", ptr);
    }
    if (done) {
        if (json_object_get(s, "minLength")) warn(c, "minLength", ptr);
        if (json_object_get(s, "maxLength")) warn(c, "maxLength", ptr);
    } else if (lo == 0 && hi < 0) {
        prim(c, e, P_STRING);
    } else if (hi == 0) {
        put(c, e, "\"\\\"\\\"\"");
    } else {
        put(c, e, "\"\\\"\" ");
        prim(c, e, P_CHAR);
        put_rep(c, e, lo, hi, ptr, "minLength", "maxLength");
        put(c, e, " \"\\\"\"");
    }
    return 0;
}

/* ---- tries -------------------------------------------------------------------
 * Alternatives that begin alike (the values of an enum, the keys that may
 * come next in an object) are written as a trie: "\"" ( "a" ( "b" | "c" )
 * | "d" ) rather than "\"ab" | "\"ac" | "\"d". The matcher follows each
 * alternative the next character may start on its own, at most
 * MS_GRAMMAR_MAX_STACKS of them, so a plain list of values fails past that
 * many; in a trie as many are live as it branches at that point. It is a
 * radix tree (edges hold runs of characters, cut between characters only)
 * built from the sorted texts without recursion, then written children
 * first; children whose edges differ in their first character only and
 * lead on alike share one class ("[a-c] \"x\"" for "ax", "bx", "cx"). */

#define TRIE_NEST 8 /* groups nested in one rule before a node becomes a rule of its own */

struct titem {
    const char *s; /* the text (valid UTF-8) */
    size_t len;
    const char *pay; /* what follows the text: a rule name, or "" */
};

struct tnode {
    size_t depth;              /* bytes of the prefix it stands for */
    size_t src;                /* an item whose text runs through it */
    int64_t child, last, next; /* first and last child, next sibling; -1: none */
    int64_t end;               /* the item whose text ends here, or -1 */
};

struct trie {
    struct tnode *n;
    size_t len, cap;
};

static int by_text(const void *a, const void *b) {
    const struct titem *x = a, *y = b;
    const int d = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return d ? d : (x->len > y->len) - (x->len < y->len);
}

/* Sorts it[0..*m) by their bytes (code point order) and keeps one of each text. */
static void titems_sort(struct titem *it, size_t *m) {
    qsort(it, *m, sizeof *it, by_text);
    size_t k = 0;
    for (size_t i = 0; i < *m; i++)
        if (!k || by_text(&it[k - 1], &it[i])) it[k++] = it[i];
    *m = k;
}

static int64_t tnode_new(struct conv *c, struct trie *t, size_t depth, size_t src, int64_t end) {
    if (t->len == t->cap) {
        const size_t cap = t->cap ? 2 * t->cap : 64;
        struct tnode *q = realloc(t->n, cap * sizeof *q);
        if (!q) return c->oom = true, -1;
        t->n = q, t->cap = cap;
    }
    t->n[t->len] = (struct tnode){depth, src, -1, -1, -1, end};
    return (int64_t)t->len++;
}

/* The bytes two texts begin with alike, cut back to a character boundary. */
static size_t common_prefix(const struct titem *a, const struct titem *b) {
    const size_t m = a->len < b->len ? a->len : b->len;
    size_t n = 0;
    while (n < m && a->s[n] == b->s[n]) n++;
    while (n && ((n < a->len && (a->s[n] & 0xC0) == 0x80) || (n < b->len && (b->s[n] & 0xC0) == 0x80))) n--;
    return n;
}

/* The radix tree of it[0..m) (sorted, distinct) into t, the root at 0. A
 * stack holds the path to the last text; the next one leaves it where the
 * two part, splitting the edge there when no node is. -1 on OOM. */
static int trie_build(struct conv *c, struct trie *t, const struct titem *it, size_t m) {
    int64_t *st = malloc((2 * m + 2) * sizeof *st); /* a path has at most a leaf and a fork per text */
    size_t sp = 0;
    if (!st || tnode_new(c, t, 0, 0, -1) < 0) return free(st), c->oom = true, -1;
    st[sp++] = 0;
    for (size_t i = 0; i < m && !c->oom; i++) {
        const size_t l = i ? common_prefix(&it[i - 1], &it[i]) : 0;
        int64_t last = -1;
        while (t->n[st[sp - 1]].depth > l) last = st[--sp];
        if (t->n[st[sp - 1]].depth < l) { /* last, the top's last child, becomes the fork at l */
            const int64_t z = tnode_new(c, t, 0, 0, -1);
            if (z < 0) break;
            t->n[z] = t->n[last];
            t->n[last] = (struct tnode){l, t->n[z].src, z, z, -1, -1};
            st[sp++] = last;
        }
        if (l == it[i].len) { /* the empty text */
            t->n[st[sp - 1]].end = (int64_t)i;
            continue;
        }
        const int64_t y = tnode_new(c, t, it[i].len, i, (int64_t)i);
        if (y < 0) break;
        struct tnode *p = &t->n[st[sp - 1]];
        if (p->last < 0)
            p->child = y;
        else
            t->n[p->last].next = y;
        p->last = y;
        st[sp++] = y;
    }
    free(st);
    return c->oom ? -1 : 0;
}

/* The nodes, each before its children: walked backwards, children come
 * first. NULL on OOM. */
static int64_t *trie_order(struct conv *c, const struct trie *t) {
    int64_t *ord = malloc(t->len * sizeof *ord), *st = malloc(t->len * sizeof *st);
    size_t k = 0, sp = 0;
    if (!ord || !st) {
        free(ord), free(st), c->oom = true;
        return NULL;
    }
    st[sp++] = 0;
    while (sp) {
        const int64_t x = st[--sp];
        ord[k++] = x;
        for (int64_t ch = t->n[x].child; ch >= 0; ch = t->n[ch].next) st[sp++] = ch;
    }
    free(st);
    return ord;
}

/* A node written: its alternatives. */
struct tex {
    struct ms_buf s;
    int alts, depth; /* how many; groups nested in them */
    bool opt;        /* a text ends here too: an empty alternative */
};

/* An edge to a child, and what follows. */
struct talt {
    const char *lab;     /* the edge's text */
    size_t len, first;   /* its length, its first character's */
    uint32_t cp;         /* the first character */
    struct ms_buf ref;   /* the child */
    struct ms_buf tail;  /* the rest of the edge and the child: children alike share a class */
    size_t run, run_end; /* lead (the lowest character of its tail): its run in the sorted edges */
    bool lead;
};

static int by_tail(const void *a, const void *b) {
    const struct talt *x = *(const struct talt *const *)a, *y = *(const struct talt *const *)b;
    const int d = strcmp(x->tail.p ? x->tail.p : "", y->tail.p ? y->tail.p : "");
    return d ? d : (x->cp > y->cp) - (x->cp < y->cp);
}

/* How node id's parent refers to it: a sequence (a leaf: its payload,
 * maybe empty), a group, or a new rule (named, or groups nested too deep). */
static void trie_ref(struct conv *c, const struct trie *t, const struct titem *it, struct tex *tx, int64_t id,
                     bool named, const char *hint, struct ms_buf *ref, int *depth) {
    const struct tnode *nd = &t->n[id];
    struct tex *x = &tx[id];
    const char *body = x->s.p ? x->s.p : "";
    *depth = 0;
    if (nd->child < 0) {
        put(c, ref, it[nd->end].pay);
    } else if (x->alts == 1 && !x->opt) {
        put(c, ref, body), *depth = x->depth;
    } else if (named || x->depth + 1 > TRIE_NEST) {
        struct ms_buf b = {0};
        char name[NAME_LEN];
        put(c, &b, x->opt ? "( " : ""), put(c, &b, body), put(c, &b, x->opt ? " )?" : "");
        add_rule(c, hint, b.p ? b.p : "", name);
        put(c, ref, name);
        ms_buf_free(&b);
    } else {
        put(c, ref, "( "), put(c, ref, body), put(c, ref, x->opt ? " )?" : " )");
        *depth = x->depth + 1;
    }
    ms_buf_free(&x->s);
}

/* Writes the alternatives of node id (one with children; theirs written). */
static void trie_node(struct conv *c, const struct trie *t, const struct titem *it, struct tex *tx, int64_t id,
                      bool named, const char *hint) {
    const struct tnode *nd = &t->n[id];
    struct tex *x = &tx[id];
    size_t k = 0;
    for (int64_t ch = nd->child; ch >= 0; ch = t->n[ch].next) k++;
    struct talt *a = calloc(k, sizeof *a), **srt = malloc(k * sizeof *srt);
    if (!a || !srt) {
        free(a), free(srt), c->oom = true;
        return;
    }
    size_t i = 0;
    for (int64_t ch = nd->child; ch >= 0; ch = t->n[ch].next, i++) {
        struct talt *al = &a[i];
        int d;
        al->lab = it[t->n[ch].src].s + nd->depth, al->len = t->n[ch].depth - nd->depth;
        const char *q = al->lab;
        al->cp = utf8_cp(&q, al->lab + al->len);
        al->first = (size_t)(q - al->lab);
        trie_ref(c, t, it, tx, ch, named, hint, &al->ref, &d);
        if (d > x->depth) x->depth = d;
        if (al->len > al->first) put_lit(c, &al->tail, al->lab + al->first, al->len - al->first);
        if (al->ref.len) put(c, &al->tail, al->tail.len ? " " : ""), put(c, &al->tail, al->ref.p);
        srt[i] = al;
    }
    if (nd->end >= 0 && *it[nd->end].pay)
        put(c, &x->s, it[nd->end].pay), x->alts++;
    else if (nd->end >= 0)
        x->opt = true;
    qsort(srt, k, sizeof *srt, by_tail);
    for (size_t r = 0, e; r < k; r = e) {
        const char *tr = srt[r]->tail.p ? srt[r]->tail.p : "";
        for (e = r + 1; e < k && !strcmp(tr, srt[e]->tail.p ? srt[e]->tail.p : "");) e++;
        srt[r]->lead = true, srt[r]->run = r, srt[r]->run_end = e;
    }
    for (i = 0; i < k; i++) {
        const struct talt *al = &a[i];
        if (!al->lead) continue;
        put(c, &x->s, x->alts++ ? " | " : "");
        if (al->run_end - al->run == 1) {
            put_lit(c, &x->s, al->lab, al->len);
            if (al->ref.len) put(c, &x->s, " "), put(c, &x->s, al->ref.p);
            continue;
        }
        put(c, &x->s, "[");
        for (size_t j = al->run; j < al->run_end;) {
            const uint32_t lo = srt[j]->cp;
            uint32_t hi = lo;
            for (j++; j < al->run_end && srt[j]->cp == hi + 1; j++) hi++;
            put_class_cp(c, &x->s, lo);
            if (hi > lo) put(c, &x->s, hi > lo + 1 ? "-" : ""), put_class_cp(c, &x->s, hi);
        }
        put(c, &x->s, "]");
        if (al->tail.len) put(c, &x->s, " "), put(c, &x->s, al->tail.p);
    }
    for (i = 0; i < k; i++) ms_buf_free(&a[i].ref), ms_buf_free(&a[i].tail);
    free(a);
    free(srt);
}

/* The texts it[0..m) (sorted, distinct, m > 0), each followed by its
 * payload, as a trie into e: top-level alternatives. named: every node
 * with alternatives is a rule, so that rules only ever refer to rules
 * written before them and no group stands between (the grammar parser
 * settles which rules match some text in one pass then, however long the
 * chain of pairs in an object). */
static void put_trie(struct conv *c, struct ms_buf *e, const struct titem *it, size_t m, bool named, const char *hint) {
    struct trie t = {0};
    int64_t *ord = NULL;
    struct tex *tx = NULL;
    if (trie_build(c, &t, it, m) || !(ord = trie_order(c, &t)) || !(tx = calloc(t.len, sizeof *tx))) {
        c->oom = true;
    } else {
        for (size_t i = t.len; i-- > 0;)
            if (t.n[ord[i]].child >= 0) trie_node(c, &t, it, tx, ord[i], named, hint);
        if (t.n[0].child < 0) { /* only the empty text */
            put(c, e, it[0].pay);
        } else {
            put(c, e, tx[0].opt ? "( " : ""), put(c, e, tx[0].s.p ? tx[0].s.p : ""), put(c, e, tx[0].opt ? " )?" : "");
        }
    }
    for (size_t i = 0; tx && i < t.len; i++) ms_buf_free(&tx[i].s);
    free(tx);
    free(ord);
    free(t.n);
}

/* ---- objects ----------------------------------------------------------------- */

/* The rule of one character of a key (in canonical form: see
 * json_schema.h) whose code point is none of ex[0..n), then the rest of
 * the key to its closing quote; one rule per set, shared. */
static void key_other(struct conv *c, const uint32_t *ex, size_t n, char name[NAME_LEN]) {
    static const char short_cp[] = "\"\\\b\f\n\r\t", short_ch[] = "\"\\bfnrt", hex[] = "0123456789abcdef";
    static const char *const lead[] = {"\\", "\\u000", "\\u001"};
    struct ms_buf b = {0};
    char cls[3][20];
    size_t nc[3] = {0};
    bool esc = false;
    put(c, &b, "[^\"\\\\\\x00-\\x1F");
    for (size_t i = 0; i < n; i++) {
        if (ex[i] >= 0x20 && ex[i] != '"' && ex[i] != '\\')
            put_class_cp(c, &b, ex[i]);
        else
            esc = true;
    }
    put(c, &b, "] kchar* \"\\\"\"");
    c->prims |= P_KCHAR;
    for (uint32_t cp = 0; cp <= '\\' && esc; cp++) { /* the escapes left: \x \u000x \u001x */
        bool skip = cp >= 0x20 && cp != '"' && cp != '\\';
        for (size_t i = 0; i < n && !skip; i++) skip = ex[i] == cp;
        if (skip) continue;
        const char *sh = cp ? memchr(short_cp, (int)cp, sizeof short_cp - 1) : NULL;
        const int k = sh ? 0 : cp < 0x10 ? 1 : 2;
        cls[k][nc[k]++] = sh ? short_ch[sh - short_cp] : hex[cp & 15];
    }
    for (int k = 0; k < 3; k++) {
        if (!nc[k]) continue;
        put(c, &b, " | "), put_lit(c, &b, lead[k], strlen(lead[k])), put(c, &b, " [");
        for (size_t i = 0; i < nc[k]; i++) put_class_cp(c, &b, (unsigned char)cls[k][i]);
        put(c, &b, "] kchar* \"\\\"\"");
    }
    if (!esc) put(c, &b, " | kesc kchar* \"\\\"\"");
    const char *done = json_string_value(json_object_get(c->others, b.p ? b.p : ""));
    if (done) {
        snprintf(name, NAME_LEN, "%s", done);
    } else {
        add_rule(c, "key-not", b.p ? b.p : "", name);
        if (json_object_set_new(c->others, b.p ? b.p : "", json_string(name))) c->oom = true;
    }
    ms_buf_free(&b);
}

/* The rest of a key string after its opening quote that is none of the
 * keys it[0..m) (sorted, distinct; their characters, unescaped) into e.
 * Over a trie of the keys: a rule per character position they share,
 * where each next character of theirs leads on, any other key character
 * ends the danger, and the closing quote may come unless a key ends
 * there. Keys are spelled canonically, so no other spelling of a listed
 * key is left. */
static void key_trie(struct conv *c, const struct titem *it, size_t m, const char *hint, struct ms_buf *e) {
    static const char more[] = "kchar+ \"\\\"\""; /* past a listed key: a character at least */
    struct trie t = {0};
    int64_t *ord = NULL;
    char(*nm)[NAME_LEN] = NULL;
    c->prims |= P_KCHAR;
    if (trie_build(c, &t, it, m) || !(ord = trie_order(c, &t)) || !(nm = calloc(t.len, sizeof *nm))) {
        c->oom = true;
        goto done;
    }
    for (size_t i = t.len; i-- > 0 && !c->oom;) {
        const struct tnode *nd = &t.n[ord[i]];
        if (nd->child < 0) continue;
        size_t k = 0;
        for (int64_t ch = nd->child; ch >= 0; ch = t.n[ch].next) k++;
        uint32_t *ex = malloc(k * sizeof *ex);
        struct ms_buf b = {0};
        char other[NAME_LEN], jc[8];
        if (!ex) {
            c->oom = true;
            break;
        }
        k = 0;
        for (int64_t ch = nd->child; ch >= 0; ch = t.n[ch].next) {
            const char *p = it[t.n[ch].src].s + nd->depth, *end = it[t.n[ch].src].s + t.n[ch].depth;
            uint32_t *cps = malloc((size_t)(end - p) * sizeof *cps);
            struct ms_buf cur = {0};
            size_t n = 0;
            if (!cps) {
                c->oom = true;
                break;
            }
            while (p < end) cps[n++] = utf8_cp(&p, end);
            put(c, &cur, t.n[ch].child < 0 ? more : nm[ch]);
            for (size_t j = n; j-- > 1;) { /* inside the edge: after cps[0..j), cps[j] leads on */
                struct ms_buf r = {0};
                char name[NAME_LEN];
                json_char(jc, cps[j]);
                key_other(c, &cps[j], 1, other);
                put_lit(c, &r, jc, strlen(jc)), put(c, &r, " "), put(c, &r, cur.p ? cur.p : "");
                put(c, &r, " | \"\\\"\" | "), put(c, &r, other);
                add_rule(c, hint, r.p ? r.p : "", name);
                cur.len = 0;
                put(c, &cur, name);
                ms_buf_free(&r);
            }
            json_char(jc, cps[0]);
            put(c, &b, k ? " | " : ""), put_lit(c, &b, jc, strlen(jc)), put(c, &b, " "), put(c, &b, cur.p ? cur.p : "");
            ex[k++] = cps[0];
            ms_buf_free(&cur);
            free(cps);
        }
        if (nd->end < 0) put(c, &b, " | \"\\\"\"");
        key_other(c, ex, k, other);
        put(c, &b, " | "), put(c, &b, other);
        add_rule(c, hint, b.p ? b.p : "", nm[ord[i]]);
        ms_buf_free(&b);
        free(ex);
    }
    put(c, e, t.n[0].child < 0 ? more : nm[0]);
done:
    free(nm);
    free(ord);
    free(t.n);
}

/* The rule of a pair whose key is not one of the n keys (any key if n is
 * 0) and whose value is vname. */
static void extra_rule(struct conv *c, const char *hint, const char **keys, size_t n, const char *vname,
                       char name[NAME_LEN]) {
    struct ms_buf b = {0};
    if (n) {
        struct titem *it = malloc(n * sizeof *it);
        char h[NAME_LEN];
        if (!it) {
            c->oom = true;
            return;
        }
        for (size_t i = 0; i < n; i++) it[i] = (struct titem){keys[i], strlen(keys[i]), ""};
        titems_sort(it, &n);
        hint_join(h, hint, "key");
        put(c, &b, "\"\\\"\" ");
        key_trie(c, it, n, h, &b);
        free(it);
    } else {
        prim(c, &b, P_STRING);
    }
    put(c, &b, " ws \":\" ws "), put(c, &b, vname), put(c, &b, " ws");
    new_name(c, hint, "kv", name);
    put_rule(c, name, b.p);
    ms_buf_free(&b);
}

/*
 * An object's pairs: the listed ones (properties in order, then required
 * keys not among them) in that order, each optional one present or not,
 * then extra pairs when allowed and no required one is left.
 *
 * After a pair the next may be pair a, a+1, ..., up to the first required
 * one from a on, or an extra pair when none is required. Their keys form a
 * trie (see put_trie); one trie for each a would make the grammar
 * quadratic, so the choice from a on is "from-a ::= keys of pairs a..a+s-1
 * | from-(a+s)", the block a..a+s-1 as long as a power of two that divides
 * a and fits before the required pair (or the end): O(n log n) text for n
 * pairs, at most about 2 log2 n blocks live at a key's first character,
 * each as many as its trie branches.
 */
struct obj {
    const char *hint;
    size_t n;
    const char **key;
    char (*val)[NAME_LEN]; /* each pair's value rule */
    char (*kv)[NAME_LEN];  /* each pair after its key: ":", the value, what may follow */
    struct ms_buf *spell;  /* each key's JSON text, quotes included */
    struct ms_buf *from;   /* from[a]: the choice of the next pair from pair a on (n + 1 of them; "": none) */
    bool *req;
    char extras[NAME_LEN]; /* one or more extra pairs, or "" when none may come */
};

/* from[a], end the first required pair from a on (or n). */
static void choice(struct conv *c, struct obj *o, size_t a, size_t end) {
    struct ms_buf *x = &o->from[a], b = {0};
    if (a == o->n) {
        put(c, x, o->extras);
        return;
    }
    if (o->req[a]) {
        put_lit(c, x, o->spell[a].p ? o->spell[a].p : "", o->spell[a].len), put(c, x, " "), put(c, x, o->kv[a]);
        return;
    }
    size_t s = 1;
    while (a % (2 * s) == 0 && a + 2 * s <= end) s *= 2;
    if (s == 1) {
        put_lit(c, &b, o->spell[a].p ? o->spell[a].p : "", o->spell[a].len), put(c, &b, " "), put(c, &b, o->kv[a]);
    } else {
        struct titem *it = malloc(s * sizeof *it);
        struct ms_buf body = {0};
        char h[NAME_LEN], name[NAME_LEN];
        size_t m = s;
        if (!it) {
            c->oom = true;
            return;
        }
        for (size_t i = 0; i < s; i++)
            it[i] = (struct titem){o->spell[a + i].p ? o->spell[a + i].p : "", o->spell[a + i].len, o->kv[a + i]};
        titems_sort(it, &m);
        hint_join(h, o->hint, "keys");
        put_trie(c, &body, it, m, true, h);
        add_rule(c, h, body.p ? body.p : "", name);
        put(c, &b, name);
        ms_buf_free(&body);
        free(it);
    }
    if (o->from[a + s].len) {
        char h[NAME_LEN], name[NAME_LEN];
        put(c, &b, " | "), put(c, &b, o->from[a + s].p);
        hint_join(h, o->hint, o->key[a]);
        new_name(c, h, "from", name);
        put_rule(c, name, b.p);
        put(c, x, name);
    } else {
        put(c, x, b.p ? b.p : "");
    }
    ms_buf_free(&b);
}

/* The rules of the pairs after their keys and of the choices, last pair
 * first (each refers to later ones only); then the object into e. */
static void put_object(struct conv *c, struct obj *o, struct ms_buf *e) {
    size_t next = o->n; /* the first required pair after a */
    choice(c, o, o->n, o->n);
    for (size_t a = o->n; a-- > 0;) {
        struct ms_buf b = {0};
        const char *after = o->from[a + 1].p ? o->from[a + 1].p : "";
        char h[NAME_LEN];
        put(c, &b, "ws \":\" ws "), put(c, &b, o->val[a]), put(c, &b, " ws");
        if (next < o->n)
            put(c, &b, " \",\" ws "), put(c, &b, after);
        else if (*after)
            put(c, &b, " ( \",\" ws "), put(c, &b, after), put(c, &b, " )?");
        hint_join(h, o->hint, o->key[a]);
        new_name(c, h, "kv", o->kv[a]);
        put_rule(c, o->kv[a], b.p);
        ms_buf_free(&b);
        if (o->req[a]) next = a;
        choice(c, o, a, next);
    }
    const char *first = o->from[0].p ? o->from[0].p : "";
    put(c, e, "\"{\" ws ");
    if (next < o->n)
        put(c, e, first), put(c, e, " ");
    else if (*first)
        put(c, e, "( "), put(c, e, first), put(c, e, " )? ");
    put(c, e, "\"}\"");
}

static void add_pair(struct conv *c, struct obj *o, const char *k, const char *vname, bool req) {
    o->key[o->n] = k;
    o->req[o->n] = req;
    snprintf(o->val[o->n], NAME_LEN, "%s", vname);
    put_json_str(c, &o->spell[o->n], k, strlen(k));
    o->n++;
}

/* The pairs: properties in order, then required keys not among them
 * (values per additionalProperties); keys gets every listed key (false
 * properties too), *nk their count. o and keys have room for all. */
static int object_pairs(struct conv *c, const json_t *s, const char *ptr, const char *hint, struct obj *o,
                        const char **keys, size_t *nk) {
    const json_t *props = json_object_get(s, "properties"), *reqs = json_object_get(s, "required"),
                 *ap = json_object_get(s, "additionalProperties");
    json_t *rset = json_object(); /* the required keys, as a set */
    const char *k;
    json_t *v;
    int rc = 0;
    if (!rset) return c->oom = true, fail(c, ptr, "out of memory");
    for (size_t i = 0; i < json_array_size(reqs); i++)
        if (json_object_set(rset, json_string_value(json_array_get(reqs, i)), json_true())) c->oom = true;
    json_object_foreach((json_t *)props, k, v) {
        char p[PTR_LEN], pp[PTR_LEN], h[NAME_LEN], vname[NAME_LEN];
        ptr_join(pp, ptr, "properties"), ptr_join(p, pp, k), hint_join(h, hint, k);
        const bool req = json_object_get(rset, k) != NULL;
        keys[(*nk)++] = k;
        if (json_is_false(v) && req) {
            rc = fail(c, p, "schema allows nothing (required, and false)");
            break;
        }
        if (json_is_false(v)) continue; /* the key may not appear */
        if ((rc = visit(c, v, p, h, vname))) break;
        add_pair(c, o, k, vname, req);
    }
    for (size_t i = 0; !rc && i < json_array_size(reqs); i++) {
        const char *rk = json_string_value(json_array_get(reqs, i));
        char h[NAME_LEN], vname[NAME_LEN], ap_ptr[PTR_LEN];
        if (json_object_get(props, rk) || !json_object_get(rset, rk)) continue;
        json_object_del(rset, rk); /* once: the array may repeat it */
        if (json_is_false(ap)) {
            rc = fail(c, ptr,
                      "schema allows nothing (required '%s' is not in 'properties' and "
                      "additionalProperties is false)",
                      rk);
            break;
        }
        hint_join(h, hint, rk), ptr_join(ap_ptr, ptr, "additionalProperties");
        if ((rc = visit(c, ap ? ap : json_true(), ap_ptr, h, vname))) break;
        keys[(*nk)++] = rk;
        add_pair(c, o, rk, vname, true);
    }
    json_decref(rset);
    return rc;
}

static int gen_object(struct conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    const json_t *props = json_object_get(s, "properties"), *reqs = json_object_get(s, "required"),
                 *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, ptr, "'properties' must be an object");
    if (reqs && !json_is_array(reqs)) return fail(c, ptr, "'required' must be an array of strings");
    for (size_t i = 0; i < json_array_size(reqs); i++)
        if (!json_is_string(json_array_get(reqs, i))) return fail(c, ptr, "'required' must be an array of strings");
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return fail(c, ptr, "'additionalProperties' must be a schema");
    if (!json_object_size(props) && !json_array_size(reqs) && (!ap || json_is_true(ap))) return prim(c, e, P_OBJECT), 0;

    const size_t cap = json_object_size(props) + json_array_size(reqs) + 1;
    struct obj o = {.hint = hint,
                    .key = malloc(cap * sizeof *o.key),
                    .val = malloc(cap * sizeof *o.val),
                    .kv = malloc(cap * sizeof *o.kv),
                    .spell = calloc(cap, sizeof *o.spell),
                    .from = calloc(cap + 1, sizeof *o.from),
                    .req = malloc(cap * sizeof *o.req)};
    const char **keys = malloc(cap * sizeof *keys);
    size_t nk = 0;
    const int saved = c->base;
    c->base = c->n_pending; /* "{" comes first: recursion below is progress */
    int rc = !o.key || !o.val || !o.kv || !o.spell || !o.from || !o.req || !keys
                 ? (c->oom = true, fail(c, ptr, "out of memory"))
                 : object_pairs(c, s, ptr, hint, &o, keys, &nk);
    if (!rc && !json_is_false(ap)) {
        char h[NAME_LEN], p[PTR_LEN], vname[NAME_LEN], extra[NAME_LEN];
        hint_join(h, hint, "extra"), ptr_join(p, ptr, "additionalProperties");
        rc = visit(c, ap ? ap : json_true(), p, h, vname);
        if (!rc) {
            struct ms_buf b = {0};
            extra_rule(c, h, keys, nk, vname, extra);
            put(c, &b, extra), put(c, &b, " ( \",\" ws "), put(c, &b, extra), put(c, &b, " )*");
            new_name(c, h, "s", o.extras);
            put_rule(c, o.extras, b.p);
            ms_buf_free(&b);
        }
    }
    c->base = saved;
    if (!rc) put_object(c, &o, e);
    for (size_t i = 0; o.spell && i < o.n; i++) ms_buf_free(&o.spell[i]);
    for (size_t i = 0; o.from && i <= o.n; i++) ms_buf_free(&o.from[i]);
    free(o.key);
    free(o.val);
    free(o.kv);
    free(o.spell);
    free(o.from);
    free(o.req);
    free(keys);
    return rc;
}

/* ---- arrays ------------------------------------------------------------------ */

/* The item schemas: prefix (a tuple: prefixItems, or draft 4-7 items as an
 * array) and rest (the items after it: a schema, or NULL for none). */
static int array_items(struct conv *c, const json_t *s, const char *ptr, const json_t **prefix, const json_t **rest,
                       const char **rest_key) {
    const json_t *pi = json_object_get(s, "prefixItems"), *it = json_object_get(s, "items"),
                 *ai = json_object_get(s, "additionalItems");
    if (pi && !json_is_array(pi)) return fail(c, ptr, "'prefixItems' must be an array of schemas");
    *prefix = pi ? pi : json_is_array(it) ? it : NULL;
    *rest = pi || !json_is_array(it) ? it : ai;
    *rest_key = pi || !json_is_array(it) ? "items" : "additionalItems";
    if (*rest && !json_is_object(*rest) && !json_is_boolean(*rest))
        return fail(c, ptr, "'%s' must be a schema", *rest_key);
    if (!*rest) *rest = json_true();
    if (json_is_false(*rest)) *rest = NULL;
    return 0;
}

/* "[" items "]": the first lo required, later ones each optional after the
 * one before, the rest repeated up to hi (-1: unbounded) in all. */
static int put_array(struct conv *c, struct ms_buf *e, const json_t *prefix, const char *rname, long long lo,
                     long long hi, const char *ptr, const char *hint) {
    const size_t k = json_array_size(prefix);
    int opened = 0;
    put(c, e, "\"[\" ws ");
    if (hi == 0) {
        put(c, e, "\"]\"");
        return 0;
    }
    if (lo == 0) put(c, e, "( "), opened++;
    long long i = 0;
    for (; (size_t)i < k && (hi < 0 || i < hi); i++) {
        char p[PTR_LEN], h[NAME_LEN], name[NAME_LEN], idx[24];
        snprintf(idx, sizeof idx, "%lld", i);
        ptr_index(p, ptr, "prefixItems", (size_t)i), hint_join(h, hint, idx);
        if (visit(c, json_array_get(prefix, (size_t)i), p, h, name)) return -1;
        if (i && i >= lo) put(c, e, "( "), opened++;
        putf(c, e, "%s%s ws ", i ? "\",\" ws " : "", name);
    }
    if (rname && (hi < 0 || hi > i)) {
        const long long m = lo > i ? lo - i : 0, n = hi < 0 ? -1 : hi - i;
        if (i == 0) { /* the first item is not after a comma */
            putf(c, e, "%s ws ", rname);
            put(c, e, "( \",\" ws "), put(c, e, rname), put(c, e, " ws )");
            put_rep(c, e, m ? m - 1 : 0, n < 0 ? -1 : n - 1, ptr, "minItems", "maxItems"), put(c, e, " ");
        } else {
            put(c, e, "( \",\" ws "), put(c, e, rname), put(c, e, " ws )");
            put_rep(c, e, m, n, ptr, "minItems", "maxItems"), put(c, e, " ");
        }
    }
    while (opened--) put(c, e, ")? ");
    put(c, e, "\"]\"");
    return 0;
}

static int gen_array(struct conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    const json_t *prefix = NULL, *rest = NULL;
    const char *rest_key = "items";
    long long lo, hi;
    if (array_items(c, s, ptr, &prefix, &rest, &rest_key) || count_kw(c, s, "minItems", ptr, 0, &lo) ||
        count_kw(c, s, "maxItems", ptr, -1, &hi))
        return -1;
    const long long k = (long long)json_array_size(prefix);
    if (!rest && (hi < 0 || hi > k)) hi = k;
    if (hi >= 0 && lo > hi) return fail(c, ptr, "schema allows nothing (minItems > maxItems or the items allowed)");
    if (!k && json_is_true(rest) && !lo && hi < 0) return prim(c, e, P_ARRAY), 0;
    char rname[NAME_LEN] = "";
    const int saved = c->base;
    c->base = c->n_pending; /* "[" comes first: recursion below is progress */
    int rc = 0;
    if (rest && (hi < 0 || hi > k)) {
        char p[PTR_LEN], h[NAME_LEN];
        ptr_join(p, ptr, rest_key), hint_join(h, hint, "item");
        rc = visit(c, rest, p, h, rname);
    }
    if (!rc) rc = put_array(c, e, prefix, *rname ? rname : NULL, lo, hi, ptr, hint);
    c->base = saved;
    return rc;
}

/* ---- dispatch ---------------------------------------------------------------- */

/* The type a schema without "type" means, from its keywords ("" any). */
static const char *infer_type(const json_t *s) {
    static const char *const by[][5] = {
        {"object", "properties", "required", "additionalProperties", NULL},
        {"array", "items", "prefixItems", "minItems", "maxItems"},
        {"string", "minLength", "maxLength", "pattern", "format"},
        {"number", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    };
    for (size_t t = 0; t < sizeof by / sizeof by[0]; t++)
        for (size_t k = 1; k < 5 && by[t][k]; k++)
            if (json_object_get(s, by[t][k])) return by[t][0];
    return "";
}

static int gen_type(struct conv *c, const json_t *s, const char *t, const char *ptr, const char *hint,
                    struct ms_buf *e) {
    if (!strcmp(t, "string")) return gen_string(c, s, ptr, e);
    if (!strcmp(t, "integer")) return gen_integer(c, s, ptr, e);
    if (!strcmp(t, "object")) return gen_object(c, s, ptr, hint, e);
    if (!strcmp(t, "array")) return gen_array(c, s, ptr, hint, e);
    if (!strcmp(t, "number")) {
        static const char *const b[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        for (size_t i = 0; i < 4; i++)
            if (json_object_get(s, b[i])) warn(c, b[i], ptr);
        return prim(c, e, P_NUMBER), 0;
    }
    if (!strcmp(t, "boolean")) return prim(c, e, P_BOOLEAN), 0;
    if (!strcmp(t, "null")) return prim(c, e, P_NULL), 0;
    if (!*t) return prim(c, e, P_VALUE), 0;
    return fail(c, ptr, "unknown type '%s'", t);
}

static int gen_types(struct conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    const json_t *t = json_object_get(s, "type");
    if (!t) return gen_type(c, s, infer_type(s), ptr, hint, e);
    if (json_is_string(t)) return gen_type(c, s, json_string_value(t), ptr, hint, e);
    if (!json_is_array(t) || !json_array_size(t)) return fail(c, ptr, "'type' must be a string or a non-empty array");
    for (size_t i = 0; i < json_array_size(t); i++) {
        const char *ti = json_string_value(json_array_get(t, i));
        if (!ti) return fail(c, ptr, "'type' must be a string or an array of strings");
        put(c, e, i ? " | " : "");
        if (gen_type(c, s, ti, ptr, hint, e)) return -1;
    }
    return 0;
}

static int gen_value(struct conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    if (json_object_get(s, "$ref")) return gen_ref(c, s, ptr, e);
    if (json_object_get(s, "allOf")) return gen_allof(c, s, ptr, hint, e);
    if (json_object_get(s, "anyOf")) return gen_anyof(c, s, "anyOf", ptr, hint, e);
    if (json_object_get(s, "oneOf")) return gen_anyof(c, s, "oneOf", ptr, hint, e);
    const json_t *cv = json_object_get(s, "const"), *ev = json_object_get(s, "enum");
    if (!cv && ev && (!json_is_array(ev) || !json_array_size(ev)))
        return fail(c, ptr, "'enum' must be a non-empty array");
    const size_t nv = cv ? 1 : json_array_size(ev); /* const: a one-value enum */
    if (!nv) return gen_types(c, s, ptr, hint, e);
    struct ms_buf *b = calloc(nv, sizeof *b);
    struct titem *it = malloc(nv * sizeof *it);
    size_t m = nv;
    if (!b || !it) {
        free(b), free(it), c->oom = true;
        return fail(c, ptr, "out of memory");
    }
    for (size_t i = 0; i < nv; i++) {
        dump(c, &b[i], cv ? cv : json_array_get(ev, i));
        it[i] = (struct titem){b[i].p ? b[i].p : "", b[i].len, ""};
    }
    char h[NAME_LEN];
    hint_join(h, hint, "enum");
    titems_sort(it, &m);
    put_trie(c, e, it, m, false, h);
    for (size_t i = 0; i < nv; i++) ms_buf_free(&b[i]);
    free(b);
    free(it);
    return 0;
}

/* The expression of schema s at ptr into e (a rule body: may hold "|"). */
static int gen(struct conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    if (json_is_true(s)) return prim(c, e, P_VALUE), 0;
    if (json_is_false(s)) return fail(c, ptr, "schema allows nothing (false)");
    if (!json_is_object(s)) return fail(c, ptr, "a schema must be an object or a boolean");
    if (c->depth == MAX_DEPTH) return fail(c, ptr, "schemas nested deeper than %d", MAX_DEPTH);
    if (++c->steps > MAX_STEPS) return fail(c, ptr, "schema too large: more than %d subschemas to expand", MAX_STEPS);
    const json_t *nl = json_object_get(s, "nullable");
    if (nl && !json_is_boolean(nl)) return fail(c, ptr, "'nullable' must be a boolean");
    check_keywords(c, s, ptr);
    c->depth++;
    const int rc = gen_value(c, s, ptr, hint, e);
    c->depth--;
    if (!rc && json_is_true(nl)) put(c, e, " | "), prim(c, e, P_NULL);
    return rc;
}

int ms_json_schema_grammar(const json_t *schema, struct ms_buf *out, ms_json_schema_warn_fn warn_fn, void *warn_ctx,
                           ms_err *err) {
    struct conv c = {.root = schema,
                     .names = json_object(),
                     .refs = json_object(),
                     .others = json_object(),
                     .warn = warn_fn,
                     .warn_ctx = warn_ctx,
                     .err = err};
    struct ms_buf e = {0}, g = {0};
    int rc = -1;
    if (!c.names || !c.refs || !c.others) goto oom;
    for (size_t i = 0; i < N_PRIMS; i++)
        if (json_object_set_new(c.names, PRIMS[i].name, json_integer(1))) goto oom;
    if (json_object_set_new(c.names, "root", json_integer(1)) || json_object_set_new(c.names, "ws", json_integer(1)))
        goto oom;
    if (!schema) {
        ms_err_set(err, "(root): no schema");
        goto done;
    }
    if (gen(&c, schema, "", "", &e)) goto done;
    put(&c, &g, is_name(e.p) ? "root ::= ws " : "root ::= ws ( ");
    put(&c, &g, e.p ? e.p : "");
    put(&c, &g, is_name(e.p) ? "\n" : " )\n");
    put(&c, &g, c.rules.p ? c.rules.p : "");
    put(&c, &g, "ws ::= [ \\t\\n]{0,20}\n");
    for (int again = 1; again;) { /* close over what the shared rules use */
        again = 0;
        for (size_t i = 0; i < N_PRIMS; i++)
            if ((c.prims >> i & 1) && (c.prims | PRIMS[i].needs) != c.prims) c.prims |= PRIMS[i].needs, again = 1;
    }
    for (size_t i = 0; i < N_PRIMS; i++)
        if (c.prims >> i & 1) putf(&c, &g, "%s ::= %s\n", PRIMS[i].name, PRIMS[i].body);
    if (c.oom) goto oom;
    if (ms_buf_put(out, g.p, g.len)) goto oom;
    rc = 0;
    goto done;
oom:
    ms_err_set(err, "out of memory converting a JSON schema to a grammar");
done:
    ms_buf_free(&e);
    ms_buf_free(&g);
    ms_buf_free(&c.rules);
    json_decref(c.names);
    json_decref(c.refs);
    json_decref(c.others);
    return rc;
}
