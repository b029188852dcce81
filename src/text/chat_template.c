/*
 * chat_template.c - DeepSeek V4's chat template in C (see chat_template.h;
 * the rules follow models/templates/deepseek-ai-DeepSeek-V4.jinja line by
 * line, with drop_thinking at its default, true). tests/test_chat_template_ref.c
 * checks the output byte for byte against renderings of that template by a
 * Jinja engine (tests/data/chat_template/).
 */
#include "text/chat_template.h"

#include "text/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"

struct sbuf {
    struct ms_buf text;
    bool oom;
    struct ms_chat_span *spans;
    size_t n_spans, cap_spans;
};

static void putn(struct sbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (ms_buf_put(&b->text, s, n)) b->oom = true;
}

static void put(struct sbuf *b, const char *s) { putn(b, s, s ? strlen(s) : 0); }

/* Data from the request: recorded as a plain-text span (merged with an
 * adjacent one). */
static void put_plain(struct sbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    const size_t off = b->text.len;
    putn(b, s, n);
    if (b->oom) return;
    if (b->n_spans && b->spans[b->n_spans - 1].off + b->spans[b->n_spans - 1].len == off) {
        b->spans[b->n_spans - 1].len += n;
        return;
    }
    if (b->n_spans == b->cap_spans) {
        const size_t cap = b->cap_spans ? 2 * b->cap_spans : 16;
        struct ms_chat_span *ns = realloc(b->spans, cap * sizeof *ns);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->spans = ns;
        b->cap_spans = cap;
    }
    b->spans[b->n_spans++] = (struct ms_chat_span){off, n};
}

static void put_plain_s(struct sbuf *b, const char *s) { put_plain(b, s, s ? strlen(s) : 0); }

static bool is(const char *role, const char *name) { return !strcmp(role, name); }

static bool user_like(const char *role) { return is(role, "user") || is(role, "developer"); }

/* ---- tojson (JSON.stringify with Python-style separators) ---- */

static void json_str(struct sbuf *b, const char *s, size_t n) {
    putn(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) continue;
        putn(b, s + run, i - run);
        put(b, esc);
        run = i + 1;
    }
    putn(b, s + run, n - run);
    putn(b, "\"", 1);
}

/* A double as JavaScript's Number#toString writes it: the shortest digits
 * that read back the same; exponent form from 1e21 up and below 1e-6. */
static void json_real_js(struct sbuf *b, double x) {
    char tmp[40];
    if (!isfinite(x)) {
        put(b, "null");
        return;
    }
    if (x == 0) {
        put(b, "0");
        return;
    }
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp = [-]d.ddde[+-]XX with prec significant digits */
    char digits[32];
    size_t nd = 0;
    const char *p = tmp;
    const bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    const int e10 = atoi(p + 1); /* x = 0.d1d2... * 10^(e10+1) */
    const int k = (int)nd, n = e10 + 1;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (k <= n && n <= 21) {
        memcpy(out + o, digits, (size_t)k);
        o += (size_t)k;
        for (int i = 0; i < n - k; i++) out[o++] = '0';
    } else if (0 < n && n <= 21) {
        memcpy(out + o, digits, (size_t)n);
        o += (size_t)n;
        out[o++] = '.';
        memcpy(out + o, digits + n, (size_t)(k - n));
        o += (size_t)(k - n);
    } else if (-6 < n && n <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -n; i++) out[o++] = '0';
        memcpy(out + o, digits, (size_t)k);
        o += (size_t)k;
    } else {
        out[o++] = digits[0];
        if (k > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, (size_t)(k - 1));
            o += (size_t)(k - 1);
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%d", n - 1 >= 0 ? '+' : '-',
                              abs(n - 1));
    }
    putn(b, out, o);
}

static void tojson(struct sbuf *b, const json_t *v, int depth) {
    if (depth > 512) {
        put(b, "null");
        return;
    }
    char tmp[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        put(b, "{");
        const char *key;
        json_t *val;
        bool first = true;
        json_object_foreach((json_t *)v, key, val) {
            if (!first) put(b, ", ");
            first = false;
            json_str(b, key, strlen(key));
            put(b, ": ");
            tojson(b, val, depth + 1);
        }
        put(b, "}");
        break;
    }
    case JSON_ARRAY: {
        put(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) put(b, ", ");
            tojson(b, json_array_get(v, i), depth + 1);
        }
        put(b, "]");
        break;
    }
    case JSON_STRING: json_str(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        put(b, tmp);
        break;
    case JSON_REAL: json_real_js(b, json_real_value(v)); break;
    case JSON_TRUE: put(b, "true"); break;
    case JSON_FALSE: put(b, "false"); break;
    case JSON_NULL: put(b, "null"); break;
    }
}

char *ms_chat_tojson(const json_t *v) {
    struct sbuf b = {0};
    tojson(&b, v, 0);
    put(&b, "");
    if (b.oom || !b.text.p) {
        free(b.text.p);
        return b.oom ? NULL : strdup("");
    }
    return b.text.p;
}

/* tojson of v as plain text of the rendering. */
static void put_json_plain(struct sbuf *b, const json_t *v) {
    char *s = ms_chat_tojson(v);
    if (!s) {
        b->oom = true;
        return;
    }
    put_plain_s(b, s);
    free(s);
}

/* ---- the template ---- */

static const char tools_header[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
    "invoke tools by writing a \"<" MS_DSML "tool_calls>\" block like the following:\n\n<" MS_DSML
    "tool_calls>\n<" MS_DSML "invoke name=\"$TOOL_NAME\">\n<" MS_DSML
    "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" MS_DSML
    "parameter>\n...\n</" MS_DSML "invoke>\n<" MS_DSML "invoke name=\"$TOOL_NAME2\">\n...\n</" MS_DSML
    "invoke>\n</" MS_DSML "tool_calls>\n\nString parameters should be specified as is and set "
    "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in "
    "JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by "
    "<think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool "
    "calls or final response.\n\nOtherwise, output directly after </think> with tool calls or "
    "final response.\n\n### Available Tool Schemas\n\n";
static const char tools_footer[] =
    "\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";
static const char effort_max_text[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough "
    "in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and "
    "adversarial scenarios.\nExplicitly write out your entire deliberation process, documenting "
    "every intermediate step, considered alternative, and rejected hypothesis to ensure "
    "absolutely no assumption is left unchecked.\n\n";
static const char response_format_text[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

/* Renders one assistant message's tool calls from their JSON. */
static int put_tool_calls(struct sbuf *b, const json_t *calls, size_t msg, ms_err *err) {
    put(b, "\n\n<" MS_DSML "tool_calls>\n");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i);
        const json_t *fn = json_object_get(tc, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name) return ms_err_set(err, "message %zu: tool call %zu has no function name", msg, i);
        put(b, "<" MS_DSML "invoke name=\"");
        put_plain_s(b, name);
        put(b, "\">\n");
        const json_t *args = json_object_get(fn, "arguments");
        json_t *parsed = NULL;
        if (json_is_string(args)) {
            parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY,
                                NULL);
            args = parsed;
        }
        if (!json_is_object(args)) {
            json_decref(parsed);
            return ms_err_set(err, "message %zu: tool call %zu: arguments are not a JSON object",
                              msg, i);
        }
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)args, key, val) {
            put(b, "<" MS_DSML "parameter name=\"");
            put_plain_s(b, key);
            if (json_is_string(val)) {
                put(b, "\" string=\"true\">");
                put_plain(b, json_string_value(val), json_string_length(val));
            } else {
                put(b, "\" string=\"false\">");
                put_json_plain(b, val);
            }
            put(b, "</" MS_DSML "parameter>\n");
        }
        if (json_object_size(args) == 0) put(b, "\n");
        json_decref(parsed);
        put(b, "</" MS_DSML "invoke>\n");
    }
    put(b, "</" MS_DSML "tool_calls>");
    return 0;
}

int ms_chat_render_ex(const struct ms_chat_message *msgs, size_t n, const struct ms_chat_opts *o,
                      struct ms_chat_out *out, ms_err *err) {
    memset(out, 0, sizeof *out);
    size_t last_user = (size_t)-1;
    bool has_tool_results = false;
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role ? msgs[i].role : "";
        if (!user_like(r) && !is(r, "tool") && !is(r, "assistant") && !is(r, "system"))
            return ms_err_set(err, "chat template: message %zu has unknown role '%s'", i, r);
        if (user_like(r) || is(r, "tool")) last_user = i;
        if (is(r, "tool")) has_tool_results = true;
    }
    const bool has_tools = o->tools && json_is_array(o->tools) && json_array_size(o->tools) > 0;
    struct sbuf b = {0};
    put(&b, MS_CHAT_BOS);
    if (n > 0 && o->thinking && o->effort_max) put(&b, effort_max_text);
    /* the system prompt: system messages, then tools, then response_format */
    const size_t sp_start = b.text.len;
    bool first_sp = true;
    for (size_t i = 0; i < n; i++) {
        if (!is(msgs[i].role, "system")) continue;
        if (!first_sp) put(&b, "\n\n");
        put_plain_s(&b, msgs[i].content);
        first_sp = false;
    }
    if (has_tools) {
        if (b.text.len > sp_start) put(&b, "\n\n");
        put(&b, tools_header);
        for (size_t i = 0; i < json_array_size(o->tools); i++) {
            const json_t *t = json_array_get(o->tools, i);
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!type || strcmp(type, "function")) continue;
            const json_t *fn = json_object_get(t, "function");
            if (!fn) continue; /* the server rejects such tools before rendering */
            put_json_plain(&b, fn);
            put(&b, "\n");
        }
        put(&b, tools_footer);
    }
    if (o->response_format) {
        if (b.text.len > sp_start) put(&b, "\n\n");
        put(&b, response_format_text);
        put_json_plain(&b, o->response_format);
    }
    bool in_user = false;
    for (size_t i = 0; i < n; i++) {
        const struct ms_chat_message *m = &msgs[i];
        if (user_like(m->role) || is(m->role, "tool")) {
            put(&b, in_user ? "\n\n" : MS_CHAT_USER);
            in_user = true;
            if (is(m->role, "tool")) put(&b, "<tool_result>");
            put_plain_s(&b, m->content);
            if (is(m->role, "tool")) put(&b, "</tool_result>");
        } else if (is(m->role, "assistant")) {
            in_user = false;
            put(&b, MS_CHAT_ASSISTANT);
            const bool after_last_user = last_user == (size_t)-1 || i > last_user;
            const bool think = o->thinking && (has_tools || after_last_user || has_tool_results);
            const bool calls = m->tool_calls && json_array_size(m->tool_calls) > 0;
            size_t rlen = 0;
            bool in_reasoning = false;
            const char *stored = NULL;
            const char *raw =
                calls && o->replay ? o->replay(o->replay_ctx, m->tool_calls, m->reasoning, &rlen,
                                               &in_reasoning, &stored)
                                   : NULL;
            const char *reasoning = raw && stored && (!m->reasoning || !*m->reasoning) ? stored : m->reasoning;
            if (think) {
                put(&b, MS_CHAT_THINK);
                put_plain_s(&b, reasoning);
            }
            /* a replayed block opened inside the reasoning closed it there,
             * as the live session holds it */
            if (!(raw && in_reasoning && think && (!m->content || !*m->content)))
                put(&b, MS_CHAT_END_THINK);
            put_plain_s(&b, m->content);
            if (calls) {
                if (raw) {
                    putn(&b, raw, rlen);
                } else if (put_tool_calls(&b, m->tool_calls, i, err)) {
                    free(b.text.p);
                    free(b.spans);
                    return -1;
                }
            }
            put(&b, MS_CHAT_EOS);
        }
    }
    if (o->add_generation_prompt) {
        put(&b, MS_CHAT_ASSISTANT);
        put(&b, o->thinking ? MS_CHAT_THINK : MS_CHAT_END_THINK);
    }
    if (b.oom) {
        free(b.text.p);
        free(b.spans);
        return ms_err_set(err, "chat template: out of memory");
    }
    out->text = b.text.p;
    out->len = b.text.len;
    out->plain = b.spans;
    out->n_plain = b.n_spans;
    return 0;
}

void ms_chat_out_free(struct ms_chat_out *out) {
    if (!out) return;
    free(out->text);
    free(out->plain);
    memset(out, 0, sizeof *out);
}

/* Renders plain role/content/reasoning messages (no tools) through
 * ms_chat_render_ex: the common step of ms_chat_render and
 * ms_chat_render_segs. r is filled as ms_chat_render_ex fills it. */
static int render_simple(const struct ms_chat_msg *msgs, size_t n, bool add_generation_prompt,
                         bool thinking, struct ms_chat_out *r, ms_err *err) {
    struct ms_chat_message *m = calloc(n ? n : 1, sizeof *m);
    if (!m) return ms_err_set(err, "chat template: out of memory");
    for (size_t i = 0; i < n; i++)
        m[i] = (struct ms_chat_message){msgs[i].role ? msgs[i].role : "", msgs[i].content,
                                        msgs[i].reasoning, NULL};
    const struct ms_chat_opts o = {.add_generation_prompt = add_generation_prompt,
                                   .thinking = thinking};
    const int rc = ms_chat_render_ex(m, n, &o, r, err);
    free(m);
    return rc ? -1 : 0;
}

int ms_chat_render(const struct ms_chat_msg *msgs, size_t n, bool add_generation_prompt,
                   bool thinking, char **out, size_t *len, ms_err *err) {
    *out = NULL;
    *len = 0;
    struct ms_chat_out r;
    if (render_simple(msgs, n, add_generation_prompt, thinking, &r, err)) return -1;
    free(r.plain);
    *out = r.text;
    *len = r.len;
    return 0;
}

/* Appends a run; false on OOM. */
static bool seg_push(struct ms_chat_seg **v, size_t *n, size_t *cap, struct ms_chat_seg sg) {
    if (sg.len == 0) return true;
    if (*n == *cap) {
        const size_t nc = *cap ? 2 * *cap : 32;
        struct ms_chat_seg *nv = realloc(*v, nc * sizeof *nv);
        if (!nv) return false;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = sg;
    return true;
}

/* The scaffolding [a, b) of text as runs, cut where a marker starts. */
static bool scaffold_runs(const char *text, size_t a, size_t b, struct ms_chat_seg **v,
                          size_t *n, size_t *cap) {
    static const char *const markers[] = {MS_CHAT_BOS,       MS_CHAT_EOS,   MS_CHAT_USER,
                                          MS_CHAT_ASSISTANT, MS_CHAT_THINK, MS_CHAT_END_THINK};
    size_t start = a;
    for (size_t i = a; i < b; i++) {
        for (size_t k = 0; k < sizeof markers / sizeof markers[0]; k++) {
            const size_t ml = strlen(markers[k]);
            if (i > start && ml <= b - i && !memcmp(text + i, markers[k], ml)) {
                if (!seg_push(v, n, cap, (struct ms_chat_seg){start, i - start, true}))
                    return false;
                start = i;
                break;
            }
        }
    }
    return seg_push(v, n, cap, (struct ms_chat_seg){start, b - start, true});
}

int ms_chat_render_segs(const struct ms_chat_msg *msgs, size_t n, bool add_generation_prompt,
                        bool thinking, char **out, size_t *len, struct ms_chat_seg **segs,
                        size_t *n_segs, ms_err *err) {
    *out = NULL;
    *len = 0;
    *segs = NULL;
    *n_segs = 0;
    struct ms_chat_out r;
    if (render_simple(msgs, n, add_generation_prompt, thinking, &r, err)) return -1;
    struct ms_chat_seg *v = NULL;
    size_t nv = 0, cap = 0, pos = 0;
    bool ok = true;
    for (size_t k = 0; k < r.n_plain && ok; k++) {
        ok = scaffold_runs(r.text, pos, r.plain[k].off, &v, &nv, &cap) &&
             seg_push(&v, &nv, &cap, (struct ms_chat_seg){r.plain[k].off, r.plain[k].len, false});
        pos = r.plain[k].off + r.plain[k].len;
    }
    ok = ok && scaffold_runs(r.text, pos, r.len, &v, &nv, &cap);
    free(r.plain);
    if (!ok) {
        free(v);
        free(r.text);
        return ms_err_set(err, "chat template: out of memory");
    }
    *out = r.text;
    *len = r.len;
    *segs = v;
    *n_segs = nv;
    return 0;
}

int ms_chat_encode(const struct ms_tokenizer *t, const char *text, const struct ms_chat_seg *segs,
                   size_t n_segs, size_t from, int32_t **ids, size_t *n_ids, ms_err *err) {
    *ids = NULL;
    *n_ids = 0;
    int32_t *all = NULL;
    size_t n = 0;
    for (size_t i = 0; i < n_segs; i++) {
        const struct ms_chat_seg *sg = &segs[i];
        if (sg->off + sg->len <= from) continue;
        if (sg->off < from) {
            free(all);
            return ms_err_set(err, "chat template: offset %zu is inside a run", from);
        }
        int32_t *part = NULL;
        size_t np = 0;
        /* scaffolding: every special token; content: plain text only */
        const unsigned flags = sg->scaffold ? MS_TOK_SPECIAL | MS_TOK_USER_DEFINED : 0;
        if (ms_tokenizer_encode_flags(t, text + sg->off, sg->len, flags, &part, &np, err)) {
            free(all);
            return -1;
        }
        if (np) {
            int32_t *na = realloc(all, (n + np) * sizeof *na);
            if (!na) {
                free(part);
                free(all);
                return ms_err_set(err, "chat template: out of memory");
            }
            all = na;
            memcpy(all + n, part, np * sizeof *part);
            n += np;
        }
        free(part);
    }
    *ids = all;
    *n_ids = n;
    return 0;
}
