/*
 * structured.c - structured output: the grammar a reply must follow, from
 * whichever field the client's API names it with.
 *
 *   OpenAI chat         response_format {"type": "json_object"} or
 *                       {"type": "json_schema", "json_schema": {"schema"}}
 *   Responses           text.format {"type": "json_object" | "json_schema", "schema"}
 *   Anthropic           output_config.format {"type": "json_schema", "schema"}
 *   llama.cpp's server  "json_schema" (a schema) or "grammar" (GBNF), on
 *                       chat and completions
 *
 * A schema becomes GBNF through text/json_schema.h, the GBNF a grammar
 * through text/grammar.h; both happen while the request is parsed, so a
 * schema or grammar that cannot be used is a 400 before anything runs.
 * Keywords the grammar cannot enforce are logged, once per request.
 *
 * The chat template also tells the model the format (as DeepSeek's own
 * template does), so a model follows it on its own; the grammar makes
 * sure of it. It applies to the answer only: reasoning is free. When the
 * request has tools, a tool-call block may start where the answer would
 * (the model calls tools first and answers in the format later), so the
 * grammar the worker runs is the client's with that one alternative added.
 */
#include <stdio.h>
#include <string.h>

#include "server/internal.h"
#include "text/dsml_grammar.h"
#include "text/grammar.h"
#include "text/json_schema.h"

/* The start rule of the wrapper: the client's root, or a tool-call block
 * (whitespace, then the block's opening tag, then anything: the DSML
 * parser reads the block, and the worker applies the grammar to the answer
 * only, so not past the tag). A client grammar that defines this name gets
 * "defined twice". */
#define TOOLS_ROOT "moestream-reply-or-tool-call"
static const char tools_alt[] = TOOLS_ROOT " ::= root | [ \\t\\n]{0,20} \"" MS_DSML_CALLS_OPEN "\" [^\\x00]*\n";

struct warn_ctx {
    const struct job *j;
    int n;
};

static void warn_kw(void *ctx, const char *keyword, const char *where) {
    struct warn_ctx *w = ctx;
    if (w->n++ < 8)
        fprintf(stderr, "serve: %s: response schema: '%s' at '%s' is not enforced by the grammar\n", w->j->id,
                keyword, *where ? where : "/");
}

/* Parses gbnf into j->grammar; with tools, after the wrapper rule (first,
 * on its own line, so nothing of the client's text can continue it).
 * When that fails, the client's text is parsed alone for the message, so
 * its errors name its own lines. field names the request field. */
static int set_grammar(struct job *j, const char *gbnf, size_t len, const char *field, struct http_err *e) {
    ms_err err;
    struct ms_grammar *g = NULL;
    if (!j->has_tools) {
        if (ms_grammar_parse(&g, gbnf, len, &err)) return http_fail(e, 400, "'%s': %s", field, err.msg);
    } else {
        struct ms_buf b = {0};
        if (ms_buf_puts(&b, tools_alt) || ms_buf_put(&b, gbnf, len)) {
            ms_buf_free(&b);
            return http_fail(e, 500, "out of memory");
        }
        const int rc = ms_grammar_parse_root(&g, b.p, b.len, TOOLS_ROOT, &err);
        ms_buf_free(&b);
        if (rc) {
            struct ms_grammar *alone = NULL;
            if (ms_grammar_parse(&alone, gbnf, len, &err)) return http_fail(e, 400, "'%s': %s", field, err.msg);
            ms_grammar_free(alone);
            return http_fail(e, 400, "'%s' with tools: %s", field, err.msg);
        }
    }
    ms_grammar_free(j->grammar);
    j->grammar = g;
    return 0;
}

static int set_schema(struct job *j, const json_t *schema, const char *field, struct http_err *e) {
    struct ms_buf gbnf = {0};
    struct warn_ctx w = {.j = j};
    ms_err err;
    if (ms_json_schema_grammar(schema, &gbnf, warn_kw, &w, &err)) {
        ms_buf_free(&gbnf);
        return http_fail(e, 400, "'%s': %s", field, err.msg);
    }
    const int rc = set_grammar(j, gbnf.p ? gbnf.p : "", gbnf.len, field, e);
    ms_buf_free(&gbnf);
    return rc;
}

int structured_from_format(struct job *j, const json_t *fmt, const char *field, struct http_err *e) {
    if (!json_is_object(fmt)) return 0;
    const char *t = json_string_value(json_object_get(fmt, "type"));
    if (!t) return http_fail(e, 400, "'%s.type' must be a string", field);
    if (!strcmp(t, "text")) return 0;
    char where[96];
    if (!strcmp(t, "json_object") && json_is_object(json_object_get(fmt, "schema"))) {
        snprintf(where, sizeof where, "%s.schema", field); /* llama.cpp's server takes one there */
        return set_schema(j, json_object_get(fmt, "schema"), where, e);
    }
    if (!strcmp(t, "json_object")) {
        json_t *obj = json_pack("{s:s}", "type", "object");
        if (!obj) return http_fail(e, 500, "out of memory");
        snprintf(where, sizeof where, "%s", field);
        const int rc = set_schema(j, obj, where, e);
        json_decref(obj);
        return rc;
    }
    if (strcmp(t, "json_schema")) return http_fail(e, 400, "'%s.type': unknown format \"%s\"", field, t);
    /* OpenAI chat nests it: json_schema.schema; the others: schema */
    const json_t *js = json_object_get(fmt, "json_schema");
    const json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : json_object_get(fmt, "schema");
    snprintf(where, sizeof where, "%s.%s", field, json_is_object(js) ? "json_schema.schema" : "schema");
    if (js && !json_is_null(js) && !json_is_object(js))
        return http_fail(e, 400, "'%s.json_schema' must be an object", field);
    if (!schema || json_is_null(schema)) {
        /* a format with no schema: any JSON object, as json_object */
        json_t *obj = json_pack("{s:s}", "type", "object");
        if (!obj) return http_fail(e, 500, "out of memory");
        const int rc = set_schema(j, obj, where, e);
        json_decref(obj);
        return rc;
    }
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return http_fail(e, 400, "'%s' must be a JSON Schema (an object)", where);
    return set_schema(j, schema, where, e);
}

int structured_from_fields(struct job *j, const json_t *req, struct http_err *e) {
    const json_t *gr = json_object_get(req, "grammar"), *js = json_object_get(req, "json_schema");
    const bool has_gr = gr && !json_is_null(gr) && !(json_is_string(gr) && json_string_length(gr) == 0);
    const bool has_js = js && !json_is_null(js);
    if (has_gr && has_js) return http_fail(e, 400, "'grammar' and 'json_schema' cannot both be given");
    if (has_gr) {
        if (!json_is_string(gr)) return http_fail(e, 400, "'grammar' must be a string (GBNF)");
        if (j->grammar) return http_fail(e, 400, "'grammar' and 'response_format' cannot both be given");
        return set_grammar(j, json_string_value(gr), json_string_length(gr), "grammar", e);
    }
    if (has_js) {
        if (!json_is_object(js) && !json_is_boolean(js)) return http_fail(e, 400, "'json_schema' must be an object");
        if (j->grammar) return http_fail(e, 400, "'json_schema' and 'response_format' cannot both be given");
        return set_schema(j, js, "json_schema", e);
    }
    return 0;
}

/* ---- tool calls ---- */

struct tool_warn_ctx {
    const struct job *j;
    int n;
};

static void warn_tool(void *ctx, const char *tool, const char *what) {
    struct tool_warn_ctx *w = ctx;
    if (w->n++ < 8) fprintf(stderr, "serve: %s: tool '%s': %s\n", w->j->id, tool, what);
}

void structured_tools(struct job *j, const json_t *tools) {
    struct ms_buf gbnf = {0};
    struct tool_warn_ctx w = {.j = j};
    ms_err err;
    struct ms_grammar *g = NULL;
    /* custom tools' grammars, by the name the model sees */
    json_t *formats = json_object();
    const char *rendered;
    json_t *m;
    json_object_foreach(j->tool_map, rendered, m) {
        const json_t *f = json_object_get(m, "format");
        if (f) json_object_set(formats, rendered, (json_t *)f);
    }
    const int rc = ms_dsml_tools_grammar(tools, formats, j->one_call, &gbnf, warn_tool, &w, &err);
    json_decref(formats);
    if (rc ||
        ms_grammar_parse_root(&g, gbnf.p, gbnf.len, MS_DSML_GRAMMAR_ROOT, &err))
        fprintf(stderr, "serve: %s: tool calls are not constrained: %s\n", j->id, err.msg);
    ms_buf_free(&gbnf);
    ms_grammar_free(j->tool_grammar);
    j->tool_grammar = g;
}
