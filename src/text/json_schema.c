/*
 * json_schema.c - JSON Schema to GBNF (see json_schema.h): the walk over
 * the schema and the helpers its generators share.
 *
 * Each subschema becomes an expression; one that is not a single rule name
 * becomes a rule named after where it sits (property names sanitized), so
 * the grammar reads like the schema. Shared rules (value, string, ...) are
 * written once at the end, only those used. Output is built with sticky
 * OOM: appends record a failure and the result is refused at the end,
 * which keeps the generators free of per-append checks.
 *
 * The walk (types, objects, arrays, strings, anyOf / allOf / $ref, enums)
 * is here; what turns one keyword into text without walking further has a
 * file of its own behind json_schema_impl.h, so that each can be read and
 * tested against its own rules: patterns (json_schema_regex.c), integer
 * bounds (json_schema_int.c), and the tries that enum values and object
 * keys are written as (json_schema_trie.c).
 */
#include "text/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "text/json_schema_impl.h"
#include "text/utf8.h"

#define HINT_LEN 40     /* the readable part of a name */
#define PTR_LEN 256     /* JSON pointers (messages only: truncation is harmless) */
#define MAX_STEPS 50000 /* subschemas expanded: allOf / anyOf inlining can multiply them */

/* The shared rules, in the order of their enum js_prim bits. */
static const struct {
    const char *name, *body;
    unsigned needs;
} PRIMS[] = {
    {"value", "object | array | string | number | boolean | null",
     JS_PRIM_OBJECT | JS_PRIM_ARRAY | JS_PRIM_STRING | JS_PRIM_NUMBER | JS_PRIM_BOOLEAN | JS_PRIM_NULL},
    {"object", "\"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"",
     JS_PRIM_STRING | JS_PRIM_VALUE},
    {"array", "\"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"", JS_PRIM_VALUE},
    {"string", "\"\\\"\" char* \"\\\"\"", JS_PRIM_CHAR},
    {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" uesc )", JS_PRIM_UESC},
    /* at most 2 exponent digits: what any double holds (parsers refuse 1e999) */
    {"number", "integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?", JS_PRIM_INTEGER},
    {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )", 0},
    {"boolean", "\"true\" | \"false\"", 0},
    {"null", "\"null\"", 0},
    {"fmt-date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )", 0},
    {"fmt-time",
     "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) "
     "( \".\" [0-9]{1,9} )? ( [Zz] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
     0},
    /* a character of an object key in canonical form (json_schema.h), and its escapes */
    {"kchar", "[^\"\\\\\\x00-\\x1F] | kesc", JS_PRIM_KESC},
    {"kesc", "\"\\\\\" [\"\\\\bfnrt] | \"\\\\u00\" ( \"0\" [1-7bef] | \"1\" [0-9a-f] )", 0},
    /* the hex of a \u escape: not U+0000 (C consumers, jansson, refuse it)
     * and no lone surrogate (a high one comes with its low one) */
    {"uesc",
     "\"0\" ( \"0\" ( \"0\" [1-9a-fA-F] | [1-9a-fA-F] [0-9a-fA-F] ) | [1-9a-fA-F] [0-9a-fA-F]{2} ) | "
     "[1-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | "
     "[dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2}",
     0},
};
#define N_PRIMS (sizeof PRIMS / sizeof PRIMS[0])

/* Keyword classes: annotations are ignored, KNOWN ones are enforced (or
 * warned about where they are used), anything else is warned and dropped. */
static const char ANNOTATIONS[] = " title description $schema $id id default examples $comment deprecated readOnly "
                                  "writeOnly strict contentMediaType contentEncoding $anchor $defs definitions ";
static const char KNOWN[] = " type enum const properties required additionalProperties items prefixItems "
                            "additionalItems minItems maxItems minLength maxLength format pattern anyOf oneOf allOf "
                            "$ref nullable minimum maximum exclusiveMinimum exclusiveMaximum ";

static int gen(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e);

/* ---- output helpers ---------------------------------------------------
 * The js_ ones serve the other json_schema_*.c files too; their contracts
 * are in json_schema_impl.h. */

void js_put(struct js_conv *c, struct ms_buf *b, const char *s) {
    if (ms_buf_puts(b, s)) c->oom = true;
}

void __attribute__((format(printf, 3, 4))) js_putf(struct js_conv *c, struct ms_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp || ms_buf_put(b, tmp, (size_t)n)) c->oom = true;
}

void js_put_prim(struct js_conv *c, struct ms_buf *e, unsigned p) {
    c->prims |= p;
    for (size_t i = 0; i < N_PRIMS; i++)
        if (p == 1u << i) js_put(c, e, PRIMS[i].name);
}

void js_put_lit(struct js_conv *c, struct ms_buf *e, const char *s, size_t n) {
    if (ms_grammar_put_literal(e, s, n)) c->oom = true;
}

void js_put_class_cp(struct js_conv *c, struct ms_buf *e, uint32_t cp) {
    const bool alnum = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9');
    if (alnum)
        js_putf(c, e, "%c", (char)cp);
    else if (cp < 0x80)
        js_putf(c, e, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000)
        js_putf(c, e, "\\u%04X", (unsigned)cp);
    else
        js_putf(c, e, "\\U%08X", (unsigned)cp);
}

void js_utf8_char(char out[8], uint32_t cp) {
    out[ms_utf8_encode(cp, out)] = 0;
}

void js_json_char(char out[8], uint32_t cp) {
    static const char short_esc[] = "\bb\ff\nn\rr\tt\"\"\\\\";
    for (const char *p = short_esc; *p; p += 2)
        if ((uint32_t)(unsigned char)p[0] == cp) {
            out[0] = '\\', out[1] = p[1], out[2] = 0;
            return;
        }
    if (cp < 0x20)
        snprintf(out, 8, "\\u%04x", (unsigned)cp); /* lower case, as JSON.stringify */
    else
        js_utf8_char(out, cp);
}

uint32_t js_utf8_cp(const char **p, const char *end) {
    const size_t n = ms_utf8_valid_len(*p, (size_t)(end - *p));
    const unsigned char *u = (const unsigned char *)*p;
    *p += n ? n : 1;
    if (n <= 1) return u[0];
    uint32_t cp = u[0] & (0x7Fu >> n);
    for (size_t k = 1; k < n; k++) cp = cp << 6 | (u[k] & 0x3Fu);
    return cp;
}

/* s[0..n) as a JSON string literal (quotes included); bytes past ASCII stay raw. */
static void put_json_str(struct js_conv *c, struct ms_buf *b, const char *s, size_t n) {
    js_put(c, b, "\"");
    for (size_t i = 0; i < n; i++) {
        char t[8] = {s[i], 0};
        if ((unsigned char)s[i] < 0x80) js_json_char(t, (unsigned char)s[i]);
        js_put(c, b, t);
    }
    js_put(c, b, "\"");
}

/* Whether s[0..n) is valid UTF-8. */
static bool utf8_ok(const char *s, size_t n) {
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = ms_utf8_valid_len(s + i, n - i))) return false;
    return true;
}

/* The compact serialization of v. Reals take the shortest form that reads
 * back the same (jansson's %.17g would demand 0.10000000000000001). */
static void dump(struct js_conv *c, struct ms_buf *b, const json_t *v) {
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        int first = 1;
        js_put(c, b, "{");
        json_object_foreach((json_t *)v, k, x) {
            js_put(c, b, first ? "" : ",");
            put_json_str(c, b, k, strlen(k));
            js_put(c, b, ":");
            dump(c, b, x);
            first = 0;
        }
        js_put(c, b, "}");
    } else if (json_is_array(v)) {
        js_put(c, b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            js_put(c, b, i ? "," : "");
            dump(c, b, json_array_get(v, i));
        }
        js_put(c, b, "]");
    } else if (json_is_string(v)) {
        put_json_str(c, b, json_string_value(v), json_string_length(v));
    } else if (json_is_integer(v)) {
        js_putf(c, b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        char t[40];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(t, sizeof t, "%.*g", prec, json_real_value(v));
            if (strtod(t, NULL) == json_real_value(v)) break;
        }
        js_put(c, b, t);
        if (!strpbrk(t, ".eE")) js_put(c, b, ".0");
    } else {
        js_put(c, b, json_is_true(v) ? "true" : json_is_false(v) ? "false" : "null");
    }
}

/* ---- names, pointers, messages ---------------------------------------- */

static const char *where(const char *ptr) { return *ptr ? ptr : "(root)"; }

int __attribute__((format(printf, 3, 4))) js_fail(struct js_conv *c, const char *ptr, const char *fmt, ...) {
    char msg[MS_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ms_err_set(c->err, "%s: %s", where(ptr), msg);
}

void js_warn(struct js_conv *c, const char *kw, const char *ptr) {
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
 * "-"), cut to HINT_LEN so that suffixes still fit in JS_NAME_LEN. */
static void hint_join(char out[JS_NAME_LEN], const char *parent, const char *seg) {
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
    if (!n) snprintf(out, JS_NAME_LEN, "p");
}

/* A rule name not taken yet: hint (or "anon"), then hint-2, hint-3, ...
 * names[base] keeps the last suffix tried, so that many rules of one base
 * do not rescan the taken ones. */
static void new_name(struct js_conv *c, const char *hint, const char *suffix, char out[JS_NAME_LEN]) {
    char base[JS_NAME_LEN];
    snprintf(base, sizeof base, "%s%s%s", *hint ? hint : "anon", *hint && *suffix ? "-" : "", suffix);
    const json_t *seen = json_object_get(c->names, base);
    json_int_t k = seen ? json_integer_value(seen) : 1;
    snprintf(out, JS_NAME_LEN, "%s", base);
    while (json_object_get(c->names, out)) snprintf(out, JS_NAME_LEN, "%.*s-%d", HINT_LEN + 12, base, (int)++k);
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
static void check_keywords(struct js_conv *c, const json_t *s, const char *ptr) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        /* "x-...": vendor extensions, annotations by convention (OpenAPI) */
        if (!in_list(ANNOTATIONS, k) && !in_list(KNOWN, k) && strncmp(k, "x-", 2)) js_warn(c, k, ptr);
    }
}

static void put_rule(struct js_conv *c, const char *name, const char *body) {
    js_put(c, &c->rules, name), js_put(c, &c->rules, " ::= "), js_put(c, &c->rules, body ? body : ""),
        js_put(c, &c->rules, "\n");
}

void js_add_rule(struct js_conv *c, const char *hint, const char *body, char name[JS_NAME_LEN]) {
    new_name(c, hint, "", name);
    put_rule(c, name, body);
}

/* Expression e as a rule name: itself when it is one, else a new rule. */
static void as_name(struct js_conv *c, const struct ms_buf *e, const char *hint, char name[JS_NAME_LEN]) {
    if (is_name(e->p) && e->len < JS_NAME_LEN)
        memcpy(name, e->p, e->len + 1);
    else
        js_add_rule(c, hint, e->p, name);
}

/* A schema as a rule name. */
static int visit(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, char name[JS_NAME_LEN]) {
    struct ms_buf e = {0};
    const int rc = gen(c, s, ptr, hint, &e);
    if (!rc) as_name(c, &e, hint, name);
    ms_buf_free(&e);
    return rc;
}

void js_put_rep(struct js_conv *c, struct ms_buf *e, long long m, long long n, const char *ptr, const char *kmin,
                const char *kmax) {
    if (n > MS_GRAMMAR_MAX_REPEAT) n = -1, js_warn(c, kmax, ptr);
    if (m > MS_GRAMMAR_MAX_REPEAT) m = MS_GRAMMAR_MAX_REPEAT, js_warn(c, kmin, ptr);
    if (n < 0 && m < 2)
        js_put(c, e, m ? "+" : "*");
    else if (n < 0)
        js_putf(c, e, "{%lld,}", m);
    else if (m == 0 && n == 1)
        js_put(c, e, "?");
    else if (m == n && m != 1)
        js_putf(c, e, "{%lld}", m);
    else if (m != n)
        js_putf(c, e, "{%lld,%lld}", m, n);
}

/* A non-negative integer keyword: 0 with *v (def when absent), or -1. */
static int count_kw(struct js_conv *c, const json_t *s, const char *k, const char *ptr, long long def, long long *v) {
    const json_t *j = json_object_get(s, k);
    *v = def;
    if (!j) return 0;
    const double d = json_number_value(j); /* 5.0 is an integer too */
    if (!json_is_number(j) || d < 0 || d != floor(d)) return js_fail(c, ptr, "'%s' must be a non-negative integer", k);
    *v = d > 1e15 ? (long long)1e15 : (long long)d;
    return 0;
}

/* ---- $ref --------------------------------------------------------------- */

const json_t *ms_json_schema_ref(const json_t *root, const char *ref, const char **why) {
    if (ref[0] != '#' || (ref[1] && ref[1] != '/'))
        return *why = "is not a local JSON pointer ('#', '#/$defs/NAME', ...)", NULL;
    const json_t *cur = root;
    char *seg = malloc(strlen(ref) + 1);
    if (!seg) return *why = "cannot be read: out of memory", NULL;
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
            return *why = "has a segment that decodes to a NUL or to invalid UTF-8", NULL;
        }
        char *end;
        const unsigned long i = strtoul(seg, &end, 10);
        cur = json_is_object(cur)                ? json_object_get(cur, seg)
              : json_is_array(cur) && n && !*end ? json_array_get(cur, i)
                                                 : NULL;
    }
    free(seg);
    if (!cur) *why = "not found";
    return cur;
}

/* The schema a local $ref names, or NULL with err set. */
static const json_t *resolve(struct js_conv *c, const char *ref, const char *ptr) {
    const char *why = NULL;
    const json_t *t = ms_json_schema_ref(c->root, ref, &why);
    if (!t) js_fail(c, ptr, "$ref '%s' %s", ref, why);
    return t;
}

/* Warns about the keywords beside $ref that it overrides. */
static void ref_siblings(struct js_conv *c, const json_t *s, const char *ptr) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (strcmp(k, "$ref") && strcmp(k, "nullable") && in_list(KNOWN, k)) js_warn(c, k, ptr);
    }
}

static int gen_ref(struct js_conv *c, const json_t *s, const char *ptr, struct ms_buf *e) {
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) return js_fail(c, ptr, "'$ref' must be a string");
    ref_siblings(c, s, ptr);
    const char *done = json_string_value(json_object_get(c->refs, ref));
    if (done) {
        /* reaching a $ref under expansion before any text would make the
         * rule left-recursive: {"$ref": "#"}, or anyOf [itself, ...] */
        for (int i = c->base; i < c->n_pending; i++)
            if (!strcmp(c->pending[i], ref))
                return js_fail(c, ptr, "$ref '%s' refers back to itself before any JSON text", ref);
        js_put(c, e, done);
        return 0;
    }
    const json_t *target = resolve(c, ref, ptr);
    if (!target) return -1;
    const char *last = strrchr(ref, '/');
    char hint[JS_NAME_LEN], name[JS_NAME_LEN];
    hint_join(hint, "", last ? last + 1 : "schema");
    new_name(c, hint, "", name);
    if (json_object_set_new(c->refs, ref, json_string(name))) c->oom = true;
    c->pending[c->n_pending++] = ref;
    struct ms_buf body = {0};
    const int rc = gen(c, target, ref + 1, name, &body);
    c->n_pending--;
    if (!rc) put_rule(c, name, body.p), js_put(c, e, name);
    ms_buf_free(&body);
    return rc;
}

/* ---- allOf / anyOf -------------------------------------------------------- */

/* A new object holding the known keywords of s but skip, nullable and $ref. */
static json_t *siblings(struct js_conv *c, const json_t *s, const char *skip) {
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
static const json_t *deref(struct js_conv *c, const json_t *s, const char *ptr, char tptr[PTR_LEN]) {
    snprintf(tptr, PTR_LEN, "%s", ptr);
    for (int hops = 0; json_is_object(s) && json_object_get(s, "$ref"); hops++) {
        const char *ref = json_string_value(json_object_get(s, "$ref"));
        if (!ref) return js_fail(c, tptr, "'$ref' must be a string"), NULL;
        if (hops == JS_MAX_DEPTH) return js_fail(c, ptr, "$ref chain longer than %d (a cycle?)", JS_MAX_DEPTH), NULL;
        ref_siblings(c, s, tptr);
        if (!(s = resolve(c, ref, tptr))) return NULL;
        snprintf(tptr, PTR_LEN, "%s", ref + 1);
    }
    return s;
}

/* Merges member t into m: properties (a property in both must match
 * both: allOf of the two) and required join; other keywords: the first
 * wins, and a conflict is warned once (*warned). */
static void merge_into(struct js_conv *c, json_t *m, const json_t *t, const char *ptr, bool *warned) {
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
            js_warn(c, "allOf", ptr);
        }
    }
}

/* The schema "base and every member of items (an array, or one schema)". */
static int gen_merged(struct js_conv *c, json_t *base, const json_t *items, const char *ptr, const char *key,
                      size_t first, const char *hint, struct ms_buf *e) {
    bool warned = false;
    const size_t n = json_is_array(items) ? json_array_size(items) : 1;
    for (size_t i = 0; i < n; i++) {
        char iptr[PTR_LEN], tptr[PTR_LEN];
        ptr_index(iptr, ptr, key, first + i);
        const json_t *t = deref(c, json_is_array(items) ? json_array_get(items, i) : items, iptr, tptr);
        if (!t) return -1;
        if (json_is_false(t)) return js_fail(c, tptr, "schema allows nothing (false)");
        if (json_is_true(t)) continue;
        if (!json_is_object(t)) return js_fail(c, tptr, "a schema must be an object or a boolean");
        check_keywords(c, t, tptr);
        merge_into(c, base, t, ptr, &warned);
    }
    return gen(c, base, ptr, hint, e);
}

static int gen_allof(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    const json_t *all = json_object_get(s, "allOf");
    if (!json_is_array(all) || !json_array_size(all)) return js_fail(c, ptr, "'allOf' must be a non-empty array");
    json_t *base = siblings(c, s, "allOf");
    if (!base) return js_fail(c, ptr, "out of memory");
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
static int gen_anyof(struct js_conv *c, const json_t *s, const char *key, const char *ptr, const char *hint,
                     struct ms_buf *e) {
    const json_t *any = json_object_get(s, key);
    if (!json_is_array(any) || !json_array_size(any)) return js_fail(c, ptr, "'%s' must be a non-empty array", key);
    if (!strcmp(key, "oneOf")) js_warn(c, "oneOf", ptr); /* exclusivity is not enforced */
    json_t *sib = siblings(c, s, key);
    if (!sib) return js_fail(c, ptr, "out of memory");
    const bool alone = !json_object_size(sib);
    json_decref(sib);
    int n = 0;
    for (size_t i = 0; i < json_array_size(any); i++) {
        const json_t *item = json_array_get(any, i);
        char iptr[PTR_LEN], ihint[JS_NAME_LEN], name[JS_NAME_LEN];
        if (json_is_false(item)) continue;
        ptr_index(iptr, ptr, key, i);
        snprintf(ihint, sizeof ihint, "%.*s-%zu", HINT_LEN, *hint ? hint : "alt", i);
        int rc;
        if (alone) {
            rc = visit(c, item, iptr, ihint, name);
        } else {
            struct ms_buf b = {0};
            json_t *base = siblings(c, s, key);
            rc = base ? gen_merged(c, base, item, ptr, key, i, ihint, &b) : js_fail(c, ptr, "out of memory");
            json_decref(base);
            if (!rc) as_name(c, &b, ihint, name);
            ms_buf_free(&b);
        }
        if (rc) return rc;
        js_put(c, e, n++ ? " | " : "");
        js_put(c, e, name);
    }
    return n ? 0 : js_fail(c, ptr, "schema allows nothing (every '%s' branch is false)", key);
}

/* ---- strings ----------------------------------------------------------------- */

static int gen_string(struct js_conv *c, const json_t *s, const char *ptr, struct ms_buf *e) {
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long long lo, hi;
    if (count_kw(c, s, "minLength", ptr, 0, &lo) || count_kw(c, s, "maxLength", ptr, -1, &hi)) return -1;
    if (hi >= 0 && lo > hi) return js_fail(c, ptr, "schema allows nothing (minLength > maxLength)");
    if (pat && !json_is_string(pat)) return js_fail(c, ptr, "'pattern' must be a string");
    if (fmt && !json_is_string(fmt)) return js_fail(c, ptr, "'format' must be a string");
    bool done = false;
    if (pat) {
        const int rc = js_gen_pattern(c, pat, ptr, e);
        if (rc < 0) return -1;
        if (rc > 0) js_warn(c, "pattern", ptr);
        done = rc == 0;
    }
    const char *f = fmt ? json_string_value(fmt) : "";
    if (fmt && done) {
        js_warn(c, "format", ptr); /* the pattern is the stricter of the two, usually */
    } else if (!strcmp(f, "date") || !strcmp(f, "time") || !strcmp(f, "date-time")) {
        js_put(c, e, "\"\\\"\" ");
        if (strcmp(f, "time")) js_put_prim(c, e, JS_PRIM_DATE);
        if (!strcmp(f, "date-time")) js_put(c, e, " [Tt] ");
        if (strcmp(f, "date")) js_put_prim(c, e, JS_PRIM_TIME);
        js_put(c, e, " \"\\\"\""), done = true;
    } else if (!strcmp(f, "uuid")) {
        js_put(c, e,
               "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
               "[0-9a-fA-F]{12} \"\\\"\"");
        done = true;
    } else if (fmt) {
        js_warn(c, "format", ptr);
    }
    if (done) {
        if (json_object_get(s, "minLength")) js_warn(c, "minLength", ptr);
        if (json_object_get(s, "maxLength")) js_warn(c, "maxLength", ptr);
    } else if (lo == 0 && hi < 0) {
        js_put_prim(c, e, JS_PRIM_STRING);
    } else if (hi == 0) {
        js_put(c, e, "\"\\\"\\\"\"");
    } else {
        js_put(c, e, "\"\\\"\" ");
        js_put_prim(c, e, JS_PRIM_CHAR);
        js_put_rep(c, e, lo, hi, ptr, "minLength", "maxLength");
        js_put(c, e, " \"\\\"\"");
    }
    return 0;
}

/* ---- objects ----------------------------------------------------------------- */

/* The rule of a pair whose key is not one of the n keys (any key if n is
 * 0) and whose value is vname. */
static void extra_rule(struct js_conv *c, const char *hint, const char **keys, size_t n, const char *vname,
                       char name[JS_NAME_LEN]) {
    struct ms_buf b = {0};
    if (n) {
        struct js_titem *it = malloc(n * sizeof *it);
        char h[JS_NAME_LEN];
        if (!it) {
            c->oom = true;
            return;
        }
        for (size_t i = 0; i < n; i++) it[i] = (struct js_titem){keys[i], strlen(keys[i]), ""};
        js_titems_sort(it, &n);
        hint_join(h, hint, "key");
        js_put(c, &b, "\"\\\"\" ");
        js_key_trie(c, it, n, h, &b);
        free(it);
    } else {
        js_put_prim(c, &b, JS_PRIM_STRING);
    }
    js_put(c, &b, " ws \":\" ws "), js_put(c, &b, vname), js_put(c, &b, " ws");
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
 * trie (see js_put_trie); one trie for each a would make the grammar
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
    char (*val)[JS_NAME_LEN]; /* each pair's value rule */
    char (*kv)[JS_NAME_LEN];  /* each pair after its key: ":", the value, what may follow */
    struct ms_buf *spell;     /* each key's JSON text, quotes included */
    struct ms_buf *from;      /* from[a]: the choice of the next pair from pair a on (n + 1 of them; "": none) */
    bool *req;
    char extras[JS_NAME_LEN]; /* one or more extra pairs, or "" when none may come */
};

/* from[a], end the first required pair from a on (or n). */
static void choice(struct js_conv *c, struct obj *o, size_t a, size_t end) {
    struct ms_buf *x = &o->from[a], b = {0};
    if (a == o->n) {
        js_put(c, x, o->extras);
        return;
    }
    if (o->req[a]) {
        js_put_lit(c, x, o->spell[a].p ? o->spell[a].p : "", o->spell[a].len), js_put(c, x, " "),
            js_put(c, x, o->kv[a]);
        return;
    }
    size_t s = 1;
    while (a % (2 * s) == 0 && a + 2 * s <= end) s *= 2;
    if (s == 1) {
        js_put_lit(c, &b, o->spell[a].p ? o->spell[a].p : "", o->spell[a].len), js_put(c, &b, " "),
            js_put(c, &b, o->kv[a]);
    } else {
        struct js_titem *it = malloc(s * sizeof *it);
        struct ms_buf body = {0};
        char h[JS_NAME_LEN], name[JS_NAME_LEN];
        size_t m = s;
        if (!it) {
            c->oom = true;
            return;
        }
        for (size_t i = 0; i < s; i++)
            it[i] = (struct js_titem){o->spell[a + i].p ? o->spell[a + i].p : "", o->spell[a + i].len, o->kv[a + i]};
        js_titems_sort(it, &m);
        hint_join(h, o->hint, "keys");
        js_put_trie(c, &body, it, m, true, h);
        js_add_rule(c, h, body.p ? body.p : "", name);
        js_put(c, &b, name);
        ms_buf_free(&body);
        free(it);
    }
    if (o->from[a + s].len) {
        char h[JS_NAME_LEN], name[JS_NAME_LEN];
        js_put(c, &b, " | "), js_put(c, &b, o->from[a + s].p);
        hint_join(h, o->hint, o->key[a]);
        new_name(c, h, "from", name);
        put_rule(c, name, b.p);
        js_put(c, x, name);
    } else {
        js_put(c, x, b.p ? b.p : "");
    }
    ms_buf_free(&b);
}

/* The rules of the pairs after their keys and of the choices, last pair
 * first (each refers to later ones only); then the object into e. */
static void put_object(struct js_conv *c, struct obj *o, struct ms_buf *e) {
    size_t next = o->n; /* the first required pair after a */
    choice(c, o, o->n, o->n);
    for (size_t a = o->n; a-- > 0;) {
        struct ms_buf b = {0};
        const char *after = o->from[a + 1].p ? o->from[a + 1].p : "";
        char h[JS_NAME_LEN];
        js_put(c, &b, "ws \":\" ws "), js_put(c, &b, o->val[a]), js_put(c, &b, " ws");
        if (next < o->n)
            js_put(c, &b, " \",\" ws "), js_put(c, &b, after);
        else if (*after)
            js_put(c, &b, " ( \",\" ws "), js_put(c, &b, after), js_put(c, &b, " )?");
        hint_join(h, o->hint, o->key[a]);
        new_name(c, h, "kv", o->kv[a]);
        put_rule(c, o->kv[a], b.p);
        ms_buf_free(&b);
        if (o->req[a]) next = a;
        choice(c, o, a, next);
    }
    const char *first = o->from[0].p ? o->from[0].p : "";
    js_put(c, e, "\"{\" ws ");
    if (next < o->n)
        js_put(c, e, first), js_put(c, e, " ");
    else if (*first)
        js_put(c, e, "( "), js_put(c, e, first), js_put(c, e, " )? ");
    js_put(c, e, "\"}\"");
}

static void add_pair(struct js_conv *c, struct obj *o, const char *k, const char *vname, bool req) {
    o->key[o->n] = k;
    o->req[o->n] = req;
    snprintf(o->val[o->n], JS_NAME_LEN, "%s", vname);
    put_json_str(c, &o->spell[o->n], k, strlen(k));
    o->n++;
}

/* The pairs: properties in order, then required keys not among them
 * (values per additionalProperties); keys gets every listed key (false
 * properties too), *nk their count. o and keys have room for all. */
static int object_pairs(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, struct obj *o,
                        const char **keys, size_t *nk) {
    const json_t *props = json_object_get(s, "properties"), *reqs = json_object_get(s, "required"),
                 *ap = json_object_get(s, "additionalProperties");
    json_t *rset = json_object(); /* the required keys, as a set */
    const char *k;
    json_t *v;
    int rc = 0;
    if (!rset) return c->oom = true, js_fail(c, ptr, "out of memory");
    for (size_t i = 0; i < json_array_size(reqs); i++)
        if (json_object_set(rset, json_string_value(json_array_get(reqs, i)), json_true())) c->oom = true;
    json_object_foreach((json_t *)props, k, v) {
        char p[PTR_LEN], pp[PTR_LEN], h[JS_NAME_LEN], vname[JS_NAME_LEN];
        ptr_join(pp, ptr, "properties"), ptr_join(p, pp, k), hint_join(h, hint, k);
        const bool req = json_object_get(rset, k) != NULL;
        keys[(*nk)++] = k;
        if (json_is_false(v) && req) {
            rc = js_fail(c, p, "schema allows nothing (required, and false)");
            break;
        }
        if (json_is_false(v)) continue; /* the key may not appear */
        if ((rc = visit(c, v, p, h, vname))) break;
        add_pair(c, o, k, vname, req);
    }
    for (size_t i = 0; !rc && i < json_array_size(reqs); i++) {
        const char *rk = json_string_value(json_array_get(reqs, i));
        char h[JS_NAME_LEN], vname[JS_NAME_LEN], ap_ptr[PTR_LEN];
        if (json_object_get(props, rk) || !json_object_get(rset, rk)) continue;
        json_object_del(rset, rk); /* once: the array may repeat it */
        if (json_is_false(ap)) {
            rc = js_fail(c, ptr,
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

static int gen_object(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    const json_t *props = json_object_get(s, "properties"), *reqs = json_object_get(s, "required"),
                 *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return js_fail(c, ptr, "'properties' must be an object");
    if (reqs && !json_is_array(reqs)) return js_fail(c, ptr, "'required' must be an array of strings");
    for (size_t i = 0; i < json_array_size(reqs); i++)
        if (!json_is_string(json_array_get(reqs, i))) return js_fail(c, ptr, "'required' must be an array of strings");
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return js_fail(c, ptr, "'additionalProperties' must be a schema");
    if (!json_object_size(props) && !json_array_size(reqs) && (!ap || json_is_true(ap)))
        return js_put_prim(c, e, JS_PRIM_OBJECT), 0;

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
                 ? (c->oom = true, js_fail(c, ptr, "out of memory"))
                 : object_pairs(c, s, ptr, hint, &o, keys, &nk);
    if (!rc && !json_is_false(ap)) {
        char h[JS_NAME_LEN], p[PTR_LEN], vname[JS_NAME_LEN], extra[JS_NAME_LEN];
        hint_join(h, hint, "extra"), ptr_join(p, ptr, "additionalProperties");
        rc = visit(c, ap ? ap : json_true(), p, h, vname);
        if (!rc) {
            struct ms_buf b = {0};
            extra_rule(c, h, keys, nk, vname, extra);
            js_put(c, &b, extra), js_put(c, &b, " ( \",\" ws "), js_put(c, &b, extra), js_put(c, &b, " )*");
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
static int array_items(struct js_conv *c, const json_t *s, const char *ptr, const json_t **prefix, const json_t **rest,
                       const char **rest_key) {
    const json_t *pi = json_object_get(s, "prefixItems"), *it = json_object_get(s, "items"),
                 *ai = json_object_get(s, "additionalItems");
    if (pi && !json_is_array(pi)) return js_fail(c, ptr, "'prefixItems' must be an array of schemas");
    *prefix = pi ? pi : json_is_array(it) ? it : NULL;
    *rest = pi || !json_is_array(it) ? it : ai;
    *rest_key = pi || !json_is_array(it) ? "items" : "additionalItems";
    if (*rest && !json_is_object(*rest) && !json_is_boolean(*rest))
        return js_fail(c, ptr, "'%s' must be a schema", *rest_key);
    if (!*rest) *rest = json_true();
    if (json_is_false(*rest)) *rest = NULL;
    return 0;
}

/* "[" items "]": the first lo required, later ones each optional after the
 * one before, the rest repeated up to hi (-1: unbounded) in all. */
static int put_array(struct js_conv *c, struct ms_buf *e, const json_t *prefix, const char *rname, long long lo,
                     long long hi, const char *ptr, const char *hint) {
    const size_t k = json_array_size(prefix);
    int opened = 0;
    js_put(c, e, "\"[\" ws ");
    if (hi == 0) {
        js_put(c, e, "\"]\"");
        return 0;
    }
    if (lo == 0) js_put(c, e, "( "), opened++;
    long long i = 0;
    for (; (size_t)i < k && (hi < 0 || i < hi); i++) {
        char p[PTR_LEN], h[JS_NAME_LEN], name[JS_NAME_LEN], idx[24];
        snprintf(idx, sizeof idx, "%lld", i);
        ptr_index(p, ptr, "prefixItems", (size_t)i), hint_join(h, hint, idx);
        if (visit(c, json_array_get(prefix, (size_t)i), p, h, name)) return -1;
        if (i && i >= lo) js_put(c, e, "( "), opened++;
        js_putf(c, e, "%s%s ws ", i ? "\",\" ws " : "", name);
    }
    if (rname && (hi < 0 || hi > i)) {
        const long long m = lo > i ? lo - i : 0, n = hi < 0 ? -1 : hi - i;
        if (i == 0) { /* the first item is not after a comma */
            js_putf(c, e, "%s ws ", rname);
            js_put(c, e, "( \",\" ws "), js_put(c, e, rname), js_put(c, e, " ws )");
            js_put_rep(c, e, m ? m - 1 : 0, n < 0 ? -1 : n - 1, ptr, "minItems", "maxItems"), js_put(c, e, " ");
        } else {
            js_put(c, e, "( \",\" ws "), js_put(c, e, rname), js_put(c, e, " ws )");
            js_put_rep(c, e, m, n, ptr, "minItems", "maxItems"), js_put(c, e, " ");
        }
    }
    while (opened--) js_put(c, e, ")? ");
    js_put(c, e, "\"]\"");
    return 0;
}

static int gen_array(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    const json_t *prefix = NULL, *rest = NULL;
    const char *rest_key = "items";
    long long lo, hi;
    if (array_items(c, s, ptr, &prefix, &rest, &rest_key) || count_kw(c, s, "minItems", ptr, 0, &lo) ||
        count_kw(c, s, "maxItems", ptr, -1, &hi))
        return -1;
    const long long k = (long long)json_array_size(prefix);
    if (!rest && (hi < 0 || hi > k)) hi = k;
    if (hi >= 0 && lo > hi) return js_fail(c, ptr, "schema allows nothing (minItems > maxItems or the items allowed)");
    if (!k && json_is_true(rest) && !lo && hi < 0) return js_put_prim(c, e, JS_PRIM_ARRAY), 0;
    char rname[JS_NAME_LEN] = "";
    const int saved = c->base;
    c->base = c->n_pending; /* "[" comes first: recursion below is progress */
    int rc = 0;
    if (rest && (hi < 0 || hi > k)) {
        char p[PTR_LEN], h[JS_NAME_LEN];
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

static int gen_type(struct js_conv *c, const json_t *s, const char *t, const char *ptr, const char *hint,
                    struct ms_buf *e) {
    if (!strcmp(t, "string")) return gen_string(c, s, ptr, e);
    if (!strcmp(t, "integer")) return js_gen_integer(c, s, ptr, e);
    if (!strcmp(t, "object")) return gen_object(c, s, ptr, hint, e);
    if (!strcmp(t, "array")) return gen_array(c, s, ptr, hint, e);
    if (!strcmp(t, "number")) {
        static const char *const b[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        for (size_t i = 0; i < 4; i++)
            if (json_object_get(s, b[i])) js_warn(c, b[i], ptr);
        return js_put_prim(c, e, JS_PRIM_NUMBER), 0;
    }
    if (!strcmp(t, "boolean")) return js_put_prim(c, e, JS_PRIM_BOOLEAN), 0;
    if (!strcmp(t, "null")) return js_put_prim(c, e, JS_PRIM_NULL), 0;
    if (!*t) return js_put_prim(c, e, JS_PRIM_VALUE), 0;
    return js_fail(c, ptr, "unknown type '%s'", t);
}

static int gen_types(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    const json_t *t = json_object_get(s, "type");
    if (!t) return gen_type(c, s, infer_type(s), ptr, hint, e);
    if (json_is_string(t)) return gen_type(c, s, json_string_value(t), ptr, hint, e);
    if (!json_is_array(t) || !json_array_size(t))
        return js_fail(c, ptr, "'type' must be a string or a non-empty array");
    for (size_t i = 0; i < json_array_size(t); i++) {
        const char *ti = json_string_value(json_array_get(t, i));
        if (!ti) return js_fail(c, ptr, "'type' must be a string or an array of strings");
        js_put(c, e, i ? " | " : "");
        if (gen_type(c, s, ti, ptr, hint, e)) return -1;
    }
    return 0;
}

/* Whether enum / const value v passes the keywords beside it in s: the
 * type, string lengths (characters) and numeric bounds (number forms). */
static bool enum_keeps(const json_t *s, const json_t *v) {
    const json_t *ty = json_object_get(s, "type");
    if (ty) {
        bool ok = false;
        for (size_t i = 0; i < (json_is_array(ty) ? json_array_size(ty) : 1); i++) {
            const char *t = json_string_value(json_is_array(ty) ? json_array_get(ty, i) : ty);
            if (!t) continue;
            const double d = json_is_number(v) ? json_number_value(v) : 0;
            ok |= (!strcmp(t, "string") && json_is_string(v)) || (!strcmp(t, "number") && json_is_number(v)) ||
                  (!strcmp(t, "integer") && json_is_number(v) && d == floor(d)) ||
                  (!strcmp(t, "boolean") && json_is_boolean(v)) || (!strcmp(t, "null") && json_is_null(v)) ||
                  (!strcmp(t, "array") && json_is_array(v)) || (!strcmp(t, "object") && json_is_object(v));
        }
        if (!ok) return false;
    }
    if (json_is_string(v)) {
        const size_t n = ms_utf8_count(json_string_value(v), json_string_length(v));
        const json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
        if ((json_is_number(mn) && (double)n < json_number_value(mn)) ||
            (json_is_number(mx) && (double)n > json_number_value(mx)))
            return false;
    }
    if (json_is_number(v)) {
        const double d = json_number_value(v);
        const json_t *lo = json_object_get(s, "minimum"), *hi = json_object_get(s, "maximum"),
                     *xlo = json_object_get(s, "exclusiveMinimum"), *xhi = json_object_get(s, "exclusiveMaximum");
        if ((json_is_number(lo) && d < json_number_value(lo)) || (json_is_number(hi) && d > json_number_value(hi)) ||
            (json_is_number(xlo) && d <= json_number_value(xlo)) || (json_is_number(xhi) && d >= json_number_value(xhi)))
            return false;
    }
    return true;
}

/* Warns about the keywords beside enum / const that enum_keeps does not
 * apply (pattern, format, items, ...). */
static void enum_siblings(struct js_conv *c, const json_t *s, const char *ptr) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (in_list(KNOWN, k) && !in_list(" enum const type minLength maxLength minimum maximum exclusiveMinimum "
                                          "exclusiveMaximum nullable ",
                                          k))
            js_warn(c, k, ptr);
    }
}

static int gen_value(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    if (json_object_get(s, "$ref")) return gen_ref(c, s, ptr, e);
    if (json_object_get(s, "allOf")) return gen_allof(c, s, ptr, hint, e);
    if (json_object_get(s, "anyOf")) return gen_anyof(c, s, "anyOf", ptr, hint, e);
    if (json_object_get(s, "oneOf")) return gen_anyof(c, s, "oneOf", ptr, hint, e);
    const json_t *cv = json_object_get(s, "const"), *ev = json_object_get(s, "enum");
    if (!cv && ev && (!json_is_array(ev) || !json_array_size(ev)))
        return js_fail(c, ptr, "'enum' must be a non-empty array");
    const size_t nv = cv ? 1 : json_array_size(ev); /* const: a one-value enum */
    if (!nv) return gen_types(c, s, ptr, hint, e);
    enum_siblings(c, s, ptr);
    struct ms_buf *b = calloc(nv, sizeof *b);
    struct js_titem *it = malloc(nv * sizeof *it);
    size_t m = 0;
    if (!b || !it) {
        free(b), free(it), c->oom = true;
        return js_fail(c, ptr, "out of memory");
    }
    for (size_t i = 0; i < nv; i++) {
        const json_t *v = cv ? cv : json_array_get(ev, i);
        if (!enum_keeps(s, v)) continue;
        dump(c, &b[m], v);
        it[m] = (struct js_titem){b[m].p ? b[m].p : "", b[m].len, ""};
        m++;
    }
    if (!m) {
        free(b), free(it);
        return js_fail(c, ptr, "schema allows nothing (no enum / const value passes the keywords beside it)");
    }
    const size_t n_kept = m;
    char h[JS_NAME_LEN];
    hint_join(h, hint, "enum");
    js_titems_sort(it, &m);
    js_put_trie(c, e, it, m, false, h);
    for (size_t i = 0; i < n_kept; i++) ms_buf_free(&b[i]);
    free(b);
    free(it);
    return 0;
}

/* The expression of schema s at ptr into e (a rule body: may hold "|"). */
static int gen(struct js_conv *c, const json_t *s, const char *ptr, const char *hint, struct ms_buf *e) {
    if (json_is_true(s)) return js_put_prim(c, e, JS_PRIM_VALUE), 0;
    if (json_is_false(s)) return js_fail(c, ptr, "schema allows nothing (false)");
    if (!json_is_object(s)) return js_fail(c, ptr, "a schema must be an object or a boolean");
    if (c->depth == JS_MAX_DEPTH) return js_fail(c, ptr, "schemas nested deeper than %d", JS_MAX_DEPTH);
    if (++c->steps > MAX_STEPS)
        return js_fail(c, ptr, "schema too large: more than %d subschemas to expand", MAX_STEPS);
    const json_t *nl = json_object_get(s, "nullable");
    if (nl && !json_is_boolean(nl)) return js_fail(c, ptr, "'nullable' must be a boolean");
    check_keywords(c, s, ptr);
    c->depth++;
    const int rc = gen_value(c, s, ptr, hint, e);
    c->depth--;
    if (!rc && json_is_true(nl)) js_put(c, e, " | "), js_put_prim(c, e, JS_PRIM_NULL);
    return rc;
}

/* ---- several schemas in one grammar ------------------------------------- */

struct ms_json_schema_set {
    struct js_conv c;
    struct ms_buf heads; /* the rules ms_json_schema_set_add named, in order */
    uint32_t no_raw;     /* a character strings hold only as \uXXXX (0: none) */
};

void ms_json_schema_set_no_raw(struct ms_json_schema_set *set, uint32_t cp) { set->no_raw = cp; }

void ms_json_schema_set_free(struct ms_json_schema_set *set) {
    if (!set) return;
    ms_buf_free(&set->c.rules);
    ms_buf_free(&set->heads);
    json_decref(set->c.names);
    json_decref(set->c.refs);
    json_decref(set->c.others);
    free(set);
}

int ms_json_schema_set_new(struct ms_json_schema_set **out, ms_json_schema_warn_fn warn_fn, void *warn_ctx,
                           ms_err *err) {
    *out = NULL;
    struct ms_json_schema_set *set = calloc(1, sizeof *set);
    if (set) {
        set->c = (struct js_conv){.names = json_object(), .refs = json_object(), .others = json_object(),
                                  .warn = warn_fn, .warn_ctx = warn_ctx};
        bool ok = set->c.names && set->c.refs && set->c.others &&
                  !json_object_set_new(set->c.names, "ws", json_integer(1));
        for (size_t i = 0; ok && i < N_PRIMS; i++)
            ok = !json_object_set_new(set->c.names, PRIMS[i].name, json_integer(1));
        if (ok) return *out = set, 0;
    }
    ms_json_schema_set_free(set);
    return ms_err_set(err, "out of memory converting a JSON schema to a grammar");
}

int ms_json_schema_set_add(struct ms_json_schema_set *set, const json_t *root, const json_t *schema, const char *ptr,
                           const char *name, const char *hint, ms_err *err) {
    struct js_conv *c = &set->c;
    c->err = err;
    if (c->oom) return ms_err_set(err, "out of memory converting a JSON schema to a grammar");
    if (!is_name(name) || strlen(name) >= JS_NAME_LEN || json_object_get(c->names, name))
        return ms_err_set(err, "'%s' cannot name a schema's rule (not a rule name, or taken)", name);
    if (!schema) return ms_err_set(err, "%s: no schema", where(ptr));
    /* $refs name places in root: rules made for another root's are not these */
    if (root != c->root) json_object_clear(c->refs);
    c->root = root;
    c->depth = c->steps = c->n_pending = c->base = 0;
    const size_t n_rules = c->rules.len;
    if (json_object_set_new(c->names, name, json_integer(1))) c->oom = true;
    char h[JS_NAME_LEN];
    hint_join(h, "", hint ? hint : "");
    struct ms_buf e = {0};
    const int rc = gen(c, schema, ptr, hint && *hint ? h : "", &e);
    if (!rc) {
        js_put(c, &set->heads, name);
        js_put(c, &set->heads, is_name(e.p) ? " ::= ws " : " ::= ws ( ");
        js_put(c, &set->heads, e.p ? e.p : "");
        js_put(c, &set->heads, is_name(e.p) ? "\n" : " )\n");
    }
    ms_buf_free(&e);
    if (rc) {
        /* out unchanged: the failed walk's rules go, and the caches that
         * could name them */
        c->rules.len = n_rules;
        if (c->rules.p) c->rules.p[n_rules] = 0;
        json_object_clear(c->refs);
        json_object_clear(c->others);
        return -1;
    }
    if (c->oom) return ms_err_set(err, "out of memory converting a JSON schema to a grammar");
    return 0;
}

int ms_json_schema_set_finish(struct ms_json_schema_set *set, struct ms_buf *out, ms_err *err) {
    struct js_conv *c = &set->c;
    struct ms_buf g = {0};
    js_put(c, &g, set->heads.p ? set->heads.p : "");
    js_put(c, &g, c->rules.p ? c->rules.p : "");
    js_put(c, &g, "ws ::= [ \\t\\n]{0,20}\n");
    for (int again = 1; again;) { /* close over what the shared rules use */
        again = 0;
        for (size_t i = 0; i < N_PRIMS; i++)
            if ((c->prims >> i & 1) && (c->prims | PRIMS[i].needs) != c->prims) c->prims |= PRIMS[i].needs, again = 1;
    }
    for (size_t i = 0; i < N_PRIMS; i++) {
        if (!(c->prims >> i & 1)) continue;
        const unsigned bit = 1u << i;
        if (set->no_raw && (bit == JS_PRIM_CHAR || bit == JS_PRIM_KCHAR)) {
            /* the body's first class, the raw characters, loses no_raw */
            const char *b = PRIMS[i].body, *close = strchr(b, ']');
            js_putf(c, &g, "%s ::= %.*s\\U%08X%s\n", PRIMS[i].name, (int)(close - b), b, (unsigned)set->no_raw, close);
        } else
            js_putf(c, &g, "%s ::= %s\n", PRIMS[i].name, PRIMS[i].body);
    }
    const int rc = c->oom || ms_buf_put(out, g.p, g.len) ? -1 : 0;
    ms_buf_free(&g);
    if (rc) return ms_err_set(err, "out of memory converting a JSON schema to a grammar");
    return 0;
}

int ms_json_schema_grammar(const json_t *schema, struct ms_buf *out, ms_json_schema_warn_fn warn_fn, void *warn_ctx,
                           ms_err *err) {
    struct ms_json_schema_set *set = NULL;
    if (ms_json_schema_set_new(&set, warn_fn, warn_ctx, err)) return -1;
    if (!schema) {
        ms_json_schema_set_free(set);
        return ms_err_set(err, "(root): no schema");
    }
    const int rc = ms_json_schema_set_add(set, schema, schema, "", "root", "", err) ||
                   ms_json_schema_set_finish(set, out, err);
    ms_json_schema_set_free(set);
    return rc ? -1 : 0;
}
