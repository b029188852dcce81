/*
 * tools.c - the tools of a request, in the three dialects, as the chat
 * template's one kind of tool: a function with a JSON schema, called by
 * name inside a DSML block.
 *
 * OpenAI chat sends functions and custom tools, Responses the same flat
 * plus namespaces that group them, Anthropic its own shape (server tools
 * are left out: the server has nothing to run them with). Each becomes a
 * function under the name the model sees; the job's tool_map takes a call
 * back to the shape the client declared. tool_choice is read here too:
 * "none" drops the tools, a forced call becomes the text that opens it
 * (written for the model by the worker), and one call a turn a flag.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/conv.h"

/* ---- tools the model sees under another name or shape ----
 *
 * The chat template knows one kind of tool, a function with a JSON schema,
 * called by name. OpenAI's APIs have two more that clients send (Codex
 * among them): a namespace, which groups functions (a call names the
 * function and its namespace), and a custom tool, which takes free-form
 * text (a patch, a query) instead of JSON arguments, optionally constrained
 * by a grammar. Both are rendered as functions: a namespaced one as
 * "namespace.name", a custom one with one string parameter "input" that
 * carries its format. The job's tool_map takes each call back to the shape
 * the client declared. */

/* The name the model sees for tool `name` in namespace ns (NULL: none);
 * malloc'd, NULL when out of memory. */
static char *tool_rendered_name(const char *ns, const char *name) {
    struct ms_buf b = {0};
    if (ns) ms_buf_printf(&b, "%s.", ns);
    ms_buf_puts(&b, name);
    return b.p;
}

/* Records that the model's `rendered` is the client's `name` (in ns,
 * NULL: none), a free-form tool when `custom`, whose text follows the
 * grammar `format` ({"type": "grammar", "syntax", "definition"}; NULL:
 * none). */
static int tool_map_add(struct conv *c, const char *rendered, const char *name, const char *ns, bool custom,
                        const json_t *format, struct http_err *e) {
    if (!c->tool_map && !(c->tool_map = json_object())) return http_fail(e, 500, "out of memory");
    json_t *m = json_pack("{s:s, s:b}", "name", name, "custom", custom);
    if (m && ns) json_object_set_new(m, "namespace", json_string(ns));
    if (m && format) json_object_set(m, "format", (json_t *)format);
    if (!m || json_object_set_new(c->tool_map, rendered, m)) return http_fail(e, 500, "out of memory");
    return 0;
}

/* Claims the name the model will see for the tool at `field`: not empty,
 * and not another tool's (a call must map back to one tool). */
static int tool_name_claim(struct conv *c, const char *rendered, const char *field, struct http_err *e) {
    if (!*rendered) return http_fail(e, 400, "'%s.name' must not be empty", field);
    if (!c->names && !(c->names = json_object())) return http_fail(e, 500, "out of memory");
    if (json_object_get(c->names, rendered))
        return http_fail(e, 400, "'%s.name': another tool is also called '%s'", field, rendered);
    if (json_object_set_new(c->names, rendered, json_true())) return http_fail(e, 500, "out of memory");
    return 0;
}

/* Adds a function or custom tool t (Responses' flat shape, or chat's
 * "custom" object when t is its inner object) to c->tools in the chat
 * shape, in namespace ns (NULL: none; ns_desc its description or NULL).
 * custom: t is a custom tool ({name, description?, format?}, format
 * {"type": "text"} or {"type": "grammar", "syntax", "definition"}).
 * Errors: 400 naming `field` for a missing name or a bad format. */
static int add_tool(struct conv *c, const json_t *t, bool custom, const char *ns, const char *ns_desc,
                    const char *field, struct http_err *e) {
    const char *name = json_string_value(json_object_get(t, "name"));
    if (!name) return http_fail(e, 400, "'%s.name' must be a string", field);
    if (!*name) return http_fail(e, 400, "'%s.name' must not be empty", field);
    const json_t *pj = json_object_get(t, "parameters");
    if (!custom && pj && !json_is_null(pj) && !json_is_object(pj))
        return http_fail(e, 400, "'%s.parameters' must be an object", field);
    const json_t *d = json_object_get(t, "description");
    if (d && !json_is_null(d) && !json_is_string(d))
        return http_fail(e, 400, "'%s.description' must be a string", field);
    struct ms_buf desc = {0};
    if (ns_desc && *ns_desc) ms_buf_printf(&desc, "(%s: %s)", ns, ns_desc);
    if (json_is_string(d) && json_string_length(d)) {
        if (desc.len) ms_buf_puts(&desc, "\n\n");
        ms_buf_put(&desc, json_string_value(d), json_string_length(d));
    }
    json_t *params = NULL;
    if (custom) {
        /* the format goes where the model reads the argument it fills */
        const json_t *f = json_object_get(t, "format");
        const char *ft = json_is_object(f) ? json_string_value(json_object_get(f, "type")) : NULL;
        struct ms_buf in = {0};
        ms_buf_puts(&in, "The tool's input, as free-form text (not JSON)");
        if (f && !json_is_null(f) && (!ft || (strcmp(ft, "text") && strcmp(ft, "grammar")))) {
            ms_buf_free(&desc);
            ms_buf_free(&in);
            return http_fail(e, 400, "'%s.format.type' must be \"text\" or \"grammar\"", field);
        }
        if (ft && !strcmp(ft, "grammar")) {
            const char *syn = json_string_value(json_object_get(f, "syntax"));
            const char *def = json_string_value(json_object_get(f, "definition"));
            if (!syn || !def) {
                ms_buf_free(&desc);
                ms_buf_free(&in);
                return http_fail(e, 400, "'%s.format' needs a string 'syntax' and 'definition'", field);
            }
            ms_buf_printf(&in, ", matching this %s grammar:\n%s", syn, def);
        } else {
            ms_buf_puts(&in, ".");
        }
        params = json_pack("{s:s, s:{s:{s:s, s:s}}, s:[s]}", "type", "object", "properties", "input", "type",
                           "string", "description", in.p ? in.p : "", "required", "input");
        ms_buf_free(&in);
    } else {
        params = json_is_object(pj) ? json_incref((json_t *)pj) : NULL;
    }
    char *rendered = tool_rendered_name(ns, name);
    if (rendered && tool_name_claim(c, rendered, field, e)) {
        json_decref(params);
        ms_buf_free(&desc);
        free(rendered);
        return -1;
    }
    json_t *fn = rendered ? json_pack("{s:s}", "name", rendered) : NULL;
    if (fn && desc.len) json_object_set_new(fn, "description", json_stringn(desc.p, desc.len));
    if (fn && params) json_object_set(fn, "parameters", params);
    json_decref(params);
    ms_buf_free(&desc);
    int rc = !fn || json_array_append_new(c->tools, json_pack("{s:s, s:o}", "type", "function", "function", fn))
                 ? http_fail(e, 500, "out of memory")
                 : 0;
    const json_t *f = custom ? json_object_get(t, "format") : NULL;
    const char *ft = json_string_value(json_object_get(f, "type"));
    if (!rc && (custom || ns)) rc = tool_map_add(c, rendered, name, ns, custom, ft && !strcmp(ft, "grammar") ? f : NULL, e);
    free(rendered);
    return rc;
}

/* A call of the client's tool `name` (in ns, NULL: none) from the history,
 * added to message i under the name the model sees (a custom tool's args:
 * {"input": its text}). */
int add_history_call(struct conv *c, size_t i, const char *id, const char *ns, const char *name,
                     json_t *args, struct http_err *e) {
    char *rendered = tool_rendered_name(ns, name);
    const int rc = rendered ? add_call(c, i, id, rendered, args, e) : http_fail(e, 500, "out of memory");
    free(rendered);
    return rc;
}

/* tool_choice, in the three dialects. "none" drops the tools. "required"
 * (OpenAI) or {"type": "any"} (Anthropic) forces a call of some tool; a
 * named choice forces a call of that tool: OpenAI chat {"type":
 * "function", "function": {"name"}} or {"type": "custom", "custom":
 * {"name"}}, Responses {"type": "function" or "custom", "name",
 * "namespace"?}, Anthropic {"type": "tool", "name"}. A forced call is the
 * text that opens the tool-call block (and the named tool's invoke), in
 * c->force: the worker writes it for the model where the answer starts
 * (after "</think>" when it thinks), as the template renders a call.
 * "auto", and choices the server cannot honour (allowed_tools, hosted
 * tools), leave the choice to the model. Call after the tools are parsed.
 * Errors: 400 for a malformed choice, a forced call without tools, or a
 * name that is not among them. */
static int parse_tool_choice(const json_t *req, enum api_kind k, struct conv *c, struct http_err *e) {
    /* one call a turn: OpenAI's parallel_tool_calls false, Anthropic's
     * tool_choice.disable_parallel_tool_use true */
    const json_t *tc = json_object_get(req, "tool_choice");
    const json_t *pc = k == API_MESSAGES ? json_object_get(tc, "disable_parallel_tool_use")
                                         : json_object_get(req, "parallel_tool_calls");
    const char *pcf = k == API_MESSAGES ? "tool_choice.disable_parallel_tool_use" : "parallel_tool_calls";
    if (pc && !json_is_null(pc) && !json_is_boolean(pc)) return http_fail(e, 400, "'%s' must be a boolean", pcf);
    c->one_call = k == API_MESSAGES ? json_is_true(pc) : json_is_false(pc);
    if (!tc || json_is_null(tc)) return 0;
    const char *mode, *name = NULL, *ns = NULL;
    if (json_is_string(tc) && k != API_MESSAGES) {
        mode = json_string_value(tc);
        if (strcmp(mode, "auto") && strcmp(mode, "none") && strcmp(mode, "required"))
            return http_fail(e, 400, "'tool_choice' must be \"auto\", \"none\", \"required\" or an object");
    } else if (json_is_object(tc)) {
        mode = json_string_value(json_object_get(tc, "type"));
        if (!mode) return http_fail(e, 400, "'tool_choice.type' must be a string");
        /* chat nests the name in an object named by the type */
        const json_t *named = k == API_CHAT ? json_object_get(tc, mode) : tc;
        name = json_string_value(json_object_get(named, "name"));
        const json_t *nsj = k == API_RESPONSES ? json_object_get(tc, "namespace") : NULL;
        if (nsj && !json_is_null(nsj) && !json_is_string(nsj))
            return http_fail(e, 400, "'tool_choice.namespace' must be a string");
        ns = json_string_value(nsj);
        if (ns && !*ns) ns = NULL;
    } else {
        return http_fail(e, 400, k == API_MESSAGES ? "'tool_choice' must be an object"
                                                   : "'tool_choice' must be a string or an object");
    }
    if (!strcmp(mode, "none")) {
        json_decref(c->tools);
        c->tools = NULL;
        return 0;
    }
    if (k == API_MESSAGES && strcmp(mode, "auto") && strcmp(mode, "any") && strcmp(mode, "tool"))
        return http_fail(e, 400, "'tool_choice.type' must be auto, any, tool or none");
    const bool any = !strcmp(mode, "required") || !strcmp(mode, "any");
    const bool one = !strcmp(mode, "function") || !strcmp(mode, "custom") || !strcmp(mode, "tool");
    if (!any && !one) return 0;
    if (!c->tools || !json_array_size(c->tools))
        return http_fail(e, 400, "'tool_choice' forces a tool call, but the request has no tools the server can "
                                 "offer (hosted and server tools are left out)");
    if (one && !name) return http_fail(e, 400, "'tool_choice' of type '%s' needs the tool's name", mode);
    struct ms_buf f = {0};
    ms_buf_puts(&f, "\n\n<" MS_DSML "tool_calls>\n");
    if (one) {
        char *r = tool_rendered_name(ns, name);
        bool found = false;
        for (size_t i = 0; r && i < json_array_size(c->tools) && !found; i++) {
            const char *ti = json_string_value(
                json_object_get(json_object_get(json_array_get(c->tools, i), "function"), "name"));
            found = ti && !strcmp(ti, r);
        }
        /* the name goes into the forced text, read with special tokens: it
         * must not carry markup */
        const int rc = !r                                ? http_fail(e, 500, "out of memory")
                       : !found                          ? http_fail(e, 400, "'tool_choice' names '%s', which is not among the tools", r)
                       : strpbrk(r, "<>\"\n\r")          ? http_fail(e, 400, "'tool_choice': the tool name '%s' cannot be forced", r)
                                                         : 0;
        if (!rc) ms_buf_printf(&f, "<" MS_DSML "invoke name=\"%s\">\n", r);
        free(r);
        if (rc) {
            ms_buf_free(&f);
            return -1;
        }
    }
    if (!f.p) return http_fail(e, 500, "out of memory");
    free(c->force);
    c->force = f.p;
    return 0;
}

/* Chat's tools[i]: {"type": "function", "function": {"name", ...}} or a
 * custom tool {"type": "custom", "custom": {"name", "format", ...}}. */
static int chat_tool(struct conv *c, const json_t *t, size_t i, struct http_err *e) {
    const json_t *type = json_object_get(t, "type");
    if (json_is_string(type) && !strcmp(json_string_value(type), "custom")) {
        char field[64];
        snprintf(field, sizeof field, "tools[%zu].custom", i);
        const json_t *ct = json_object_get(t, "custom");
        if (!json_is_object(ct)) return http_fail(e, 400, "'%s' must be an object", field);
        return add_tool(c, ct, true, NULL, NULL, field, e);
    }
    const json_t *fn = json_object_get(t, "function");
    if (!json_is_object(t) || !json_is_object(fn) ||
        !json_is_string(json_object_get(fn, "name")))
        return http_fail(e, 400, "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function")))
        return http_fail(e, 400, "'tools[%zu].type' must be \"function\" or \"custom\"", i);
    char field[64];
    snprintf(field, sizeof field, "tools[%zu].function", i);
    const json_t *pj = json_object_get(fn, "parameters"), *dj = json_object_get(fn, "description");
    if (pj && !json_is_null(pj) && !json_is_object(pj))
        return http_fail(e, 400, "'%s.parameters' must be an object", field);
    if (dj && !json_is_null(dj) && !json_is_string(dj))
        return http_fail(e, 400, "'%s.description' must be a string", field);
    if (tool_name_claim(c, json_string_value(json_object_get(fn, "name")), field, e)) return -1;
    json_t *copy = json_pack("{s:s, s:O}", "type", "function", "function", fn);
    json_array_append_new(c->tools, copy);
    return 0;
}

/* Anthropic's tools[i]: {"name", "description", "input_schema"} (type
 * "custom" or none); server tools (web search, code execution, ...) are
 * not ours to run and are left out. */
static int anthropic_tool(struct conv *c, const json_t *t, size_t i, struct http_err *e) {
    if (!json_is_object(t)) return http_fail(e, 400, "tools.%zu: must be an object", i);
    const json_t *tj = json_object_get(t, "type");
    if (tj && !json_is_null(tj) && !json_is_string(tj)) return http_fail(e, 400, "tools.%zu.type: must be a string", i);
    const char *type = json_string_value(tj);
    if (type && strcmp(type, "custom")) return 0; /* server tools: not ours to run */
    const char *name = json_string_value(json_object_get(t, "name"));
    const json_t *schema = json_object_get(t, "input_schema");
    if (!name || !json_is_object(schema))
        return http_fail(e, 400, "tools.%zu: needs 'name' and an object 'input_schema'", i);
    char field[32];
    snprintf(field, sizeof field, "tools.%zu", i);
    if (tool_name_claim(c, name, field, e)) return -1;
    json_t *fn = json_pack("{s:s}", "name", name);
    const json_t *d = json_object_get(t, "description");
    if (json_is_string(d)) json_object_set(fn, "description", (json_t *)d);
    json_object_set(fn, "parameters", (json_t *)schema);
    json_array_append_new(c->tools, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    return 0;
}

/* Responses' tools[i]: a function or custom tool, flat or a namespace of
 * them ({"type": "namespace", "name", "description", "tools"}); hosted
 * tools (web_search, file_search, ...) are not ours to run and are left
 * out. */
static int responses_tool(struct conv *c, const json_t *t, size_t i, struct http_err *e) {
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!json_is_object(t) || !type) return http_fail(e, 400, "'tools[%zu]' needs a type", i);
    char field[96];
    snprintf(field, sizeof field, "tools[%zu]", i);
    if (!strcmp(type, "function") || !strcmp(type, "custom"))
        return add_tool(c, t, !strcmp(type, "custom"), NULL, NULL, field, e);
    if (strcmp(type, "namespace")) return 0;
    const char *ns = json_string_value(json_object_get(t, "name"));
    const json_t *inner = json_object_get(t, "tools");
    if (!ns || !*ns || !json_is_array(inner))
        return http_fail(e, 400, "'tools[%zu]': a namespace needs a name and an array 'tools'", i);
    const json_t *nd = json_object_get(t, "description");
    if (nd && !json_is_null(nd) && !json_is_string(nd))
        return http_fail(e, 400, "'tools[%zu].description' must be a string", i);
    const char *ns_desc = json_string_value(nd);
    for (size_t k = 0; k < json_array_size(inner); k++) {
        const json_t *u = json_array_get(inner, k);
        const char *ut = json_string_value(json_object_get(u, "type"));
        snprintf(field, sizeof field, "tools[%zu].tools[%zu]", i, k);
        if (!json_is_object(u) || !ut) return http_fail(e, 400, "'%s' needs a type", field);
        if (!strcmp(ut, "namespace")) return http_fail(e, 400, "'%s': namespaces do not nest", field);
        if ((!strcmp(ut, "function") || !strcmp(ut, "custom")) &&
            add_tool(c, u, !strcmp(ut, "custom"), ns, ns_desc, field, e))
            return -1;
    }
    return 0;
}

int tools_parse(const json_t *req, enum api_kind k, struct conv *c, struct http_err *e) {
    const json_t *tools = json_object_get(req, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return http_fail(e, 400, k == API_MESSAGES ? "tools: must be an array" : "'tools' must be an array");
        if (!(c->tools = json_array())) return http_fail(e, 500, "out of memory");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            const json_t *t = json_array_get(tools, i);
            const int rc = k == API_CHAT       ? chat_tool(c, t, i, e)
                           : k == API_MESSAGES ? anthropic_tool(c, t, i, e)
                                               : responses_tool(c, t, i, e);
            if (rc) return -1;
        }
    }
    return parse_tool_choice(req, k, c, e);
}
