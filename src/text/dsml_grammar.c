/*
 * dsml_grammar.c - a tool-call block's grammar from the tools' schemas
 * (see dsml_grammar.h).
 *
 * The markup is written here; every JSON value goes through one
 * ms_json_schema_set, so the tools' schemas share the JSON rules. Raw
 * (string="true") values have rules of their own: the template tells the
 * model to write strings that way, so a schema that admits strings keeps
 * the model's usual spelling rather than forcing JSON on it.
 *
 * Rule names here all hold "_" (dsml_...), which the schema converter's
 * generated names never do.
 */
#include "text/dsml_grammar.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/lark.h"
#include "text/utf8.h"

#define WS "dsml_ws"
#define MAX_RAW_ENUM 256 /* raw enum values as alternatives; more: JSON only */
#define FULLWIDTH_BAR 0xFF5Cu /* "｜", which every DSML tag holds */

/* Raw text as the wrapper rules below take it: any text without "<｜" or
 * "</｜" (a right-linear grammar of the automaton that tracks "<" and
 * "</"), and a key of a parameter the schema does not list. */
static const char raw_rules[] = "dsml_raw ::= ( [^<] dsml_raw | \"<\" dsml_raw_lt )?\n"
                                "dsml_raw_lt ::= ( [^</｜] dsml_raw | \"<\" dsml_raw_lt | \"/\" dsml_raw_sl )?\n"
                                "dsml_raw_sl ::= ( [^<｜] dsml_raw | \"<\" dsml_raw_lt )?\n";
static const char any_rules[] = "dsml_any_param ::= \"" MS_DSML_PARAM_OPEN " name=\\\"\" [^\"｜]{1,256} \"\\\" string=\\\"\" "
                                "( \"true\\\">\" dsml_raw | \"false\\\">\" dsml_any_json ) \"" MS_DSML_PARAM_CLOSE
                                "\" " WS "\n";

/* What raw text a schema admits: alternatives, each any text of a
 * length (in characters, max -1: none) or one of some strings. */
#define RAW_MAX_ALTS 8
struct raw {
    int n_text;
    long long min[RAW_MAX_ALTS], max[RAW_MAX_ALTS];
    json_t *vals; /* the strings (owned; NULL: none) */
    bool none;    /* some branch's raw text cannot be told: JSON only */
};
struct tg {
    struct ms_json_schema_set *set;
    struct ms_buf rules; /* the markup's rules */
    bool oom, need_raw, need_any;
    ms_dsml_grammar_warn_fn warn;
    void *warn_ctx;
    const char *tool; /* the tool being written (warnings) */
};

static void warnf(struct tg *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warnf(struct tg *t, const char *fmt, ...) {
    if (!t->warn) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->warn(t->warn_ctx, t->tool, msg);
}

static void schema_warn(void *ctx, const char *keyword, const char *where) {
    warnf(ctx, "'%s' at %s is not enforced", keyword, *where ? where : "/");
}

static void put(struct tg *t, struct ms_buf *b, const char *s) {
    if (ms_buf_puts(b, s)) t->oom = true;
}

static void putf(struct tg *t, struct ms_buf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void putf(struct tg *t, struct ms_buf *b, const char *fmt, ...) {
    char s[256];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof s) t->oom = true;
    else put(t, b, s);
}

static void lit(struct tg *t, struct ms_buf *b, const char *s) {
    if (ms_grammar_put_literal(b, s, strlen(s))) t->oom = true;
}

/* ---- which raw text a property's schema admits ---- */

/* The schema a local $ref names inside root, or NULL. */
static const json_t *resolve(const json_t *root, const char *ref) {
    const char *why;
    return ms_json_schema_ref(root, ref, &why);
}

static bool has(const json_t *s, const char *k) { return json_object_get(s, k) != NULL; }

/* Whether type (a string or a list of them) names "string"; *any when no
 * type is given. */
static bool type_has_string(const json_t *s, bool *any) {
    const json_t *ty = json_object_get(s, "type");
    *any = ty == NULL;
    if (json_is_string(ty)) return !strcmp(json_string_value(ty), "string");
    for (size_t i = 0; i < json_array_size(ty); i++)
        if (json_is_string(json_array_get(ty, i)) && !strcmp(json_string_value(json_array_get(ty, i)), "string"))
            return true;
    return false;
}

/* A count keyword (minLength, maxLength): an integer, or a real with no
 * fraction, >= 0; def when absent or not one. */
static long long count_kw(const json_t *s, const char *k, long long def) {
    const json_t *v = json_object_get(s, k);
    const double d = json_is_number(v) ? json_number_value(v) : -1;
    return d >= 0 && d == (double)(long long)d ? (long long)d : def;
}

/* Whether keyword k is neither one of those named (space-separated) nor
 * an annotation (nor a vendor's "x-..."). */
static bool is_other(const char *k, const char *named) {
    static const char annotations[] = " title description default examples $comment deprecated readOnly writeOnly "
                                      "$id $schema $anchor $defs definitions strict ";
    char w[72];
    snprintf(w, sizeof w, " %.64s ", k);
    return !strstr(named, w) && !strstr(annotations, w) && strncmp(k, "x-", 2);
}

/* Whether s has a keyword other than those named: one raw text could not
 * be checked against. */
static bool has_other(const json_t *s, const char *named) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (is_other(k, named)) return true;
    }
    return false;
}

static void raw_add_text(struct raw *r, long long min, long long max) {
    if (r->n_text == RAW_MAX_ALTS) r->none = true;
    else r->min[r->n_text] = min, r->max[r->n_text++] = max;
}

/* The raw text schema s (inside root) admits, added to *r. */
static void raw_of(const json_t *root, const json_t *s, int depth, struct raw *r) {
    if (depth > 8) {
        r->none = true;
        return;
    }
    if (json_is_true(s)) {
        raw_add_text(r, 0, -1);
        return;
    }
    if (!json_is_object(s)) return;
    bool any;
    const bool str = type_has_string(s, &any);
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        /* the strings, where the type and lengths beside them keep them */
        if (has_other(s, " enum const type minLength maxLength ") || (!any && !str)) return;
        const long long mn = count_kw(s, "minLength", 0), mx = count_kw(s, "maxLength", -1);
        for (size_t i = 0; i < (cn ? 1 : json_array_size(en)); i++) {
            const json_t *v = cn ? cn : json_array_get(en, i);
            if (!json_is_string(v)) continue;
            const size_t chars = ms_utf8_count(json_string_value(v), json_string_length(v));
            if ((long long)chars < mn || (mx >= 0 && (long long)chars > mx)) continue;
            if (!r->vals && !(r->vals = json_array())) {
                r->none = true;
                return;
            }
            json_array_append(r->vals, (json_t *)v);
        }
        return;
    }
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (ref) {
        const json_t *target = resolve(root, ref);
        if (target && !has_other(s, " $ref ")) raw_of(root, target, depth + 1, r);
        else r->none = true;
        return;
    }
    const json_t *alts = json_object_get(s, "anyOf");
    if (!alts) alts = json_object_get(s, "oneOf");
    if (json_is_array(alts)) {
        /* keywords beside the branches apply to each: too much to follow */
        if (has_other(s, " anyOf oneOf ")) r->none = true;
        for (size_t i = 0; !r->none && i < json_array_size(alts); i++) raw_of(root, json_array_get(alts, i), depth + 1, r);
        return;
    }
    if (has(s, "allOf") || has(s, "not")) { /* JSON only: the converter merges them */
        r->none = true;
        return;
    }
    const bool other = has(s, "properties") || has(s, "items") || has(s, "minimum") || has(s, "maximum") ||
                       has(s, "prefixItems") || has(s, "additionalProperties");
    if (!str && !(any && !other)) return;
    if (has(s, "pattern") || has(s, "format")) return; /* JSON only: the converter checks them */
    raw_add_text(r, count_kw(s, "minLength", 0), count_kw(s, "maxLength", -1));
}

/* The raw alternatives of a value ("" when there are none): the text
 * after string="true"> up to the closing tag. */
static void put_raw(struct tg *t, struct ms_buf *e, const struct raw *r, const char *key) {
    if (r->none) return;
    struct ms_buf alts = {0};
    int n = 0;
    for (int i = 0; i < r->n_text; i++) {
        long long mn = r->min[i], mx = r->max[i];
        if (mx >= 0 && mx < mn) continue; /* admits no string */
        put(t, &alts, n++ ? " | " : "");
        if (mn == 0 && mx < 0) {
            t->need_raw = true;
            put(t, &alts, "dsml_raw");
            continue;
        }
        if (mn > MS_GRAMMAR_MAX_REPEAT || mx > MS_GRAMMAR_MAX_REPEAT) {
            warnf(t, "a length past %d at /properties/%s is not enforced on raw text", MS_GRAMMAR_MAX_REPEAT, key);
            if (mn > MS_GRAMMAR_MAX_REPEAT) mn = MS_GRAMMAR_MAX_REPEAT;
            if (mx > MS_GRAMMAR_MAX_REPEAT) mx = -1;
        }
        /* counted characters without "｜" cannot form a tag */
        if (mx >= 0) putf(t, &alts, "[^｜]{%lld,%lld}", mn, mx);
        else putf(t, &alts, "[^｜]{%lld,}", mn);
    }
    size_t n_vals = 0;
    for (size_t i = 0; i < json_array_size(r->vals); i++) {
        const char *v = json_string_value(json_array_get(r->vals, i));
        if (strstr(v, "<｜") || strstr(v, "</｜")) continue; /* JSON only */
        if (++n_vals > MAX_RAW_ENUM) {
            warnf(t, "/properties/%s has more than %d values: JSON only", key, MAX_RAW_ENUM);
            ms_buf_free(&alts);
            return;
        }
        put(t, &alts, n++ ? " | " : "");
        lit(t, &alts, v);
    }
    if (n) put(t, e, "( "), put(t, e, alts.p), put(t, e, " )");
    ms_buf_free(&alts);
}

/* ---- tools ---- */

/* Whether a parameter's or tool's name reads back through the parser's
 * attribute (quote-terminated) and is not empty, and holds no tag's start
 * (which would end the call early). */
static bool name_ok(const char *s) { return *s && !strchr(s, '"') && !strstr(s, "<｜") && !strstr(s, "</｜"); }

/* The rule of parameter k of tool i: its tag, a raw or JSON value, its
 * close. schema at /properties/KEY of params. 0, or -1 with err (the
 * converter refused the schema). */
static int put_param(struct tg *t, struct ms_buf *rules, int i, int k, const char *key, const json_t *params,
                     const json_t *schema, ms_err *err) {
    char vname[48], ptr[300];
    snprintf(vname, sizeof vname, "dsml_t%d_v%d", i, k);
    snprintf(ptr, sizeof ptr, "/properties/%s", key);
    if (ms_json_schema_set_add(t->set, params, schema, ptr, vname, key, err)) return -1;
    struct raw r = {0};
    raw_of(params, schema, 0, &r);
    struct ms_buf raw = {0};
    put_raw(t, &raw, &r, key);
    json_decref(r.vals);
    putf(t, rules, "dsml_t%d_p%d ::= \"" MS_DSML_PARAM_OPEN " name=\\\"\" ", i, k);
    lit(t, rules, key);
    put(t, rules, " \"\\\" string=\\\"\" ( ");
    if (raw.len) put(t, rules, "\"true\\\">\" "), put(t, rules, raw.p), put(t, rules, " | ");
    putf(t, rules, "\"false\\\">\" %s ) \"" MS_DSML_PARAM_CLOSE "\" " WS "\n", vname);
    ms_buf_free(&raw);
    return 0;
}

/* The rule of a custom tool's text, parameter k of tool i, raw text in
 * the grammar fmt ({"syntax": "lark" | "regex", "definition"}). false,
 * warned, when that grammar cannot be used (the caller writes the
 * parameter as any other). */
static bool put_custom_param(struct tg *t, struct ms_buf *rules, int i, int k, const char *key, const json_t *fmt) {
    const char *syn = json_string_value(json_object_get(fmt, "syntax"));
    const json_t *def = json_object_get(fmt, "definition");
    struct ms_buf g = {0}, expr = {0};
    ms_err err = {0};
    char prefix[48];
    snprintf(prefix, sizeof prefix, "dsml_t%d_g_", i);
    int rc = -1;
    if (!syn || !json_is_string(def))
        ms_err_set(&err, "no syntax and definition");
    else if (!strcmp(syn, "lark"))
        rc = ms_lark_gbnf(json_string_value(def), json_string_length(def), prefix, FULLWIDTH_BAR, &g, &err);
    else if (!strcmp(syn, "regex"))
        rc = ms_regex_gbnf(json_string_value(def), json_string_length(def), FULLWIDTH_BAR, &expr, &err);
    else
        ms_err_set(&err, "syntax '%s' is not lark or regex", syn);
    if (!rc && g.len) {
        /* what GBNF refuses (left recursion, which Lark allows) is refused
         * here, for this tool alone */
        char root[64];
        struct ms_grammar *alone = NULL;
        snprintf(root, sizeof root, "%sstart", prefix);
        rc = ms_grammar_parse_root(&alone, g.p, g.len, root, &err);
        ms_grammar_free(alone);
    }
    if (rc) {
        warnf(t, "its %s grammar is not enforced: %s", syn ? syn : "", err.msg);
    } else {
        putf(t, rules, "dsml_t%d_p%d ::= \"" MS_DSML_PARAM_OPEN " name=\\\"\" ", i, k);
        lit(t, rules, key);
        put(t, rules, " \"\\\" string=\\\"true\\\">\" ");
        if (expr.len) put(t, rules, "( "), put(t, rules, expr.p), put(t, rules, " )");
        else putf(t, rules, "%sstart", prefix);
        put(t, rules, " \"" MS_DSML_PARAM_CLOSE "\" " WS "\n");
        put(t, rules, g.p ? g.p : "");
    }
    ms_buf_free(&g);
    ms_buf_free(&expr);
    return rc == 0;
}

/* The rules of tool i, name, parameters schema params (NULL: none) into
 * rules; fmt: a custom tool's grammar (NULL: none). 0, or -1 with err:
 * the schema cannot be enforced (the caller lets the tool take any
 * parameters). */
static int put_tool(struct tg *t, struct ms_buf *rules, int i, const char *name, const json_t *params,
                    const json_t *obj, const json_t *fmt, ms_err *err) {
    const json_t *props = json_object_get(obj, "properties"), *req = json_object_get(obj, "required");
    struct ms_buf body = {0};
    putf(t, &body, "dsml_t%d ::= \"" MS_DSML_INVOKE_OPEN " name=\\\"\" ", i);
    lit(t, &body, name);
    put(t, &body, " \"\\\">\" " WS);
    int k = 0, rc = 0;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        bool required = false;
        for (size_t r = 0; r < json_array_size(req); r++)
            required |= json_is_string(json_array_get(req, r)) && !strcmp(json_string_value(json_array_get(req, r)), key);
        if (json_is_false(v) && !required) continue;
        if (!name_ok(key)) {
            if (required) {
                rc = ms_err_set(err, "required parameter '%s' cannot be written in a tag", key);
                break;
            }
            warnf(t, "parameter '%s' cannot be written in a tag (left out)", key);
            continue;
        }
        if (!(fmt && !strcmp(key, "input") && put_custom_param(t, rules, i, k, key, fmt)) &&
            put_param(t, rules, i, k, key, params, v, err)) {
            rc = -1;
            break;
        }
        putf(t, &body, " dsml_t%d_p%d%s", i, k++, required ? "" : "?");
    }
    /* required keys the properties do not describe: any value */
    for (size_t r = 0; !rc && r < json_array_size(req); r++) {
        const char *rk = json_string_value(json_array_get(req, r));
        if (!rk || json_object_get(props, rk)) continue;
        if (!name_ok(rk)) {
            rc = ms_err_set(err, "required parameter '%s' cannot be written in a tag", rk);
            break;
        }
        if (put_param(t, rules, i, k, rk, params, json_true(), err)) {
            rc = -1;
            break;
        }
        putf(t, &body, " dsml_t%d_p%d", i, k++);
    }
    put(t, &body, " \"" MS_DSML_INVOKE_CLOSE "\"\n");
    if (!rc) put(t, rules, body.p);
    ms_buf_free(&body);
    return rc;
}

/* A tool that takes any parameters (its schema names none, or cannot be
 * enforced). */
static void put_tool_any(struct tg *t, struct ms_buf *rules, int i, const char *name) {
    t->need_any = t->need_raw = true;
    putf(t, rules, "dsml_t%d ::= \"" MS_DSML_INVOKE_OPEN " name=\\\"\" ", i);
    lit(t, rules, name);
    put(t, rules, " \"\\\">\" " WS " dsml_any_param* \"" MS_DSML_INVOKE_CLOSE "\"\n");
}

/* The object schema that lists the properties of a tool's parameters
 * schema params: params itself, or where a local $ref at its top leads.
 * NULL when it names none: *none then says whether it takes no
 * parameters (additionalProperties false) or any (an open object, or a
 * schema that is not an object's properties: warned). Keywords beside
 * the properties that the grammar does not enforce are warned. */
static const json_t *params_object(struct tg *t, const json_t *params, bool *none) {
    const json_t *obj = params;
    *none = false;
    for (int hops = 0; hops < 8 && json_is_object(obj) && json_is_string(json_object_get(obj, "$ref")) &&
                       !has(obj, "properties");
         hops++)
        obj = resolve(params, json_string_value(json_object_get(obj, "$ref")));
    const json_t *ty = json_object_get(obj, "type");
    if (!json_is_object(obj) || (ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "object"))) ||
        has(obj, "anyOf") || has(obj, "oneOf") || has(obj, "allOf") || has(obj, "$ref")) {
        warnf(t, "its parameters are not an object's properties (a type other than object, anyOf, oneOf, allOf, "
                 "or a $ref that leads nowhere): any parameters are accepted");
        return NULL;
    }
    for (const json_t *o = params;; o = obj) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)o, k, v) {
            if (is_other(k, " type properties required additionalProperties $ref ")) warnf(t, "'%s' at / is not enforced", k);
        }
        if (o == obj) break;
    }
    if (json_is_object(json_object_get(obj, "properties"))) return obj;
    *none = json_is_false(json_object_get(obj, "additionalProperties"));
    return NULL;
}

int ms_dsml_tools_grammar(const json_t *tools, const json_t *formats, bool one_call, struct ms_buf *out,
                          ms_dsml_grammar_warn_fn warn, void *warn_ctx, ms_err *err) {
    struct tg t = {.warn = warn, .warn_ctx = warn_ctx};
    struct ms_buf calls = {0}, g = {0};
    int rc = -1, n = 0;
    if (ms_json_schema_set_new(&t.set, schema_warn, &t, err)) return -1;
    ms_json_schema_set_no_raw(t.set, FULLWIDTH_BAR);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name) continue;
        t.tool = name;
        if (!name_ok(name)) {
            warnf(&t, "the name cannot be written in a tag: the tool is left out");
            continue;
        }
        const json_t *params = json_object_get(fn, "parameters");
        const int id = n;
        /* no parameters schema: none (OpenAI's reading) */
        bool none = !params || json_is_null(params);
        const json_t *obj = none ? NULL : params_object(&t, params, &none);
        if (!obj && !none) {
            put_tool_any(&t, &t.rules, id, name);
        } else {
            struct ms_buf mine = {0};
            ms_err why;
            if (put_tool(&t, &mine, id, name, params, obj, json_object_get(formats, name), &why)) {
                warnf(&t, "its schema cannot be enforced (%s): any parameters are accepted", why.msg);
                put_tool_any(&t, &t.rules, id, name);
            } else {
                put(&t, &t.rules, mine.p ? mine.p : "");
            }
            ms_buf_free(&mine);
        }
        putf(&t, &calls, "%sdsml_t%d", n++ ? " | " : "", id);
    }
    if (!n) {
        ms_err_set(err, "none of the tools can be called by name");
        goto done;
    }
    put(&t, &g, MS_DSML_GRAMMAR_ROOT " ::= \"" MS_DSML_CALLS_OPEN "\" " WS " dsml_call ");
    put(&t, &g, one_call ? "" : "( " WS " dsml_call )* ");
    put(&t, &g, WS " \"" MS_DSML_CALLS_CLOSE "\"\n");
    put(&t, &g, "dsml_call ::= "), put(&t, &g, calls.p), put(&t, &g, "\n");
    put(&t, &g, WS " ::= [ \\t\\r\\n]{0,4}\n");
    put(&t, &g, t.rules.p ? t.rules.p : "");
    if (t.need_raw) put(&t, &g, raw_rules);
    if (t.need_any) {
        put(&t, &g, any_rules);
        t.tool = "";
        if (ms_json_schema_set_add(t.set, json_true(), json_true(), "", "dsml_any_json", "", err)) goto done;
    }
    if (t.oom || ms_json_schema_set_finish(t.set, &g, err)) goto done_oom;
    if (ms_buf_put(out, g.p, g.len)) goto done_oom;
    rc = 0;
    goto done;
done_oom:
    ms_err_set(err, "out of memory building the tool-call grammar");
done:
    ms_json_schema_set_free(t.set);
    ms_buf_free(&t.rules);
    ms_buf_free(&calls);
    ms_buf_free(&g);
    return rc;
}
