/*
 * api.c - the three API dialects: request parsing into a job (messages ->
 * DeepSeek V4 chat template -> tokens) and the response formatters that turn
 * the worker's events into each API's JSON or SSE stream.
 *
 *   OpenAI chat:  POST /v1/chat/completions (chat.completion / .chunk)
 *   OpenAI text:  POST /v1/completions      (text_completion)
 *   OpenAI Responses: POST /v1/responses     (response + response.* events)
 *   Anthropic:    POST /v1/messages         (message + message_start ... message_stop)
 *
 * Validation is strict about types (a wrong type is a 400 naming the field)
 * and lenient about unknown fields (ignored), as the reference servers are.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/conv.h"
#include "server/internal.h"
#include "text/grammar.h"

/* ---- small helpers ---- */

int http_fail(struct http_err *e, int status, const char *fmt, ...) {
    e->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static void rand_id(char *out, size_t cap, const char *prefix) {
    static const char hex[] = "0123456789abcdef";
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec * 6364136223846793005ull ^ (uint64_t)ts.tv_sec ^
                 (atomic_fetch_add(&counter, 1) + 1) * 0x9E3779B97F4A7C15ull;
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 24 && n + 1 < cap; i++) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 29;
        out[n++] = hex[x & 15];
    }
    out[n] = '\0';
}

static const char *err_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
    }
}

char *api_error_body(enum api_kind k, const struct http_err *e) {
    json_t *o;
    const char *type = e->type ? e->type : err_type(e->status);
    if (k == API_MESSAGES) {
        o = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type, "message",
                      ms_json_text(e->msg, strlen(e->msg)));
    } else {
        /* OpenAI: type names of its own */
        const char *ot = e->status == 401 ? "invalid_api_key"
                         : e->status >= 500 ? (e->status == 503 ? "server_overloaded" : "server_error")
                         : e->status == 404 ? "not_found_error"
                         : e->type ? e->type : "invalid_request_error";
        o = json_pack("{s:{s:o, s:s, s:n, s:o}}", "error", "message", ms_json_text(e->msg, strlen(e->msg)),
                      "type", ot, "param", "code", e->code ? json_string(e->code) : json_null());
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---- typed field access ---- */

static int get_bool(const json_t *o, const char *k, bool *out, struct http_err *e) {
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return http_fail(e, 400, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

static int get_num(const json_t *o, const char *k, double lo, double hi, float *out,
                   struct http_err *e) {
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return http_fail(e, 400, "'%s' must be a number", k);
    const double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return http_fail(e, 400, "'%s' must be in [%g, %g]", k, lo, hi);
    *out = (float)x;
    return 0;
}

static int get_int(const json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *out,
                   struct http_err *e) {
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return http_fail(e, 400, "'%s' must be an integer", k);
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return http_fail(e, 400, "'%s' must be in [%lld, %lld]", k, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

/* What stands in the prompt for a content part the model cannot read (an
 * image, a file, audio), by the part's type in any of the three dialects;
 * NULL for other types. Agents send such parts unasked (a tool that read a
 * screenshot returns it as an image), and every later turn carries the
 * part again: refusing it would end the conversation, so the model is
 * told instead, and can say so. */
static const char *media_placeholder(const char *type) {
    static const struct {
        const char *types, *text;
    } media[] = {
        {"|image|image_url|input_image|", "[image omitted: this model reads text only]"},
        {"|document|file|input_file|", "[file omitted: this model reads text only]"},
        {"|audio|input_audio|", "[audio omitted: this model reads text only]"},
    };
    char key[64];
    if (snprintf(key, sizeof key, "|%s|", type) >= (int)sizeof key) return NULL;
    for (size_t i = 0; i < sizeof media / sizeof media[0]; i++)
        if (strstr(media[i].types, key)) return media[i].text;
    return NULL;
}

/* The text of an Anthropic document block whose source is plain text
 * ({"source": {"type": "text", "data"}}); NULL for other documents. */
static const json_t *document_text(const json_t *b) {
    const json_t *src = json_object_get(b, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    const json_t *d = json_object_get(src, "data");
    return st && !strcmp(st, "text") && json_is_string(d) ? d : NULL;
}

/* Text of a content value: a string, null, or an array of parts with "text"
 * (types in ok_types, '|'-separated); parts joined by "\n\n". Images,
 * files and audio become media_placeholder's text (a text document, its
 * text). */
static int content_text(const json_t *c, const char *field, const char *ok_types, struct ms_buf *out,
                        struct http_err *e) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return ms_buf_put(out, json_string_value(c), json_string_length(c));
    if (!json_is_array(c)) return http_fail(e, 400, "'%s' must be a string or an array of parts", field);
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *p = json_array_get(c, i);
        if (json_is_string(p)) {
            if (out->len) ms_buf_puts(out, "\n\n");
            ms_buf_put(out, json_string_value(p), json_string_length(p));
            continue;
        }
        const char *type = json_string_value(json_object_get(p, "type"));
        const json_t *t = json_object_get(p, "text");
        if (!json_is_object(p) || !type)
            return http_fail(e, 400, "'%s[%zu]' must be an object with a 'type'", field, i);
        const char *media = media_placeholder(type);
        if (media) {
            const json_t *doc = document_text(p);
            if (out->len) ms_buf_puts(out, "\n\n");
            if (doc) ms_buf_put(out, json_string_value(doc), json_string_length(doc));
            else ms_buf_puts(out, media);
            continue;
        }
        char want[64];
        bool ok = false;
        for (const char *q = ok_types; *q && !ok;) {
            const char *bar = strchr(q, '|');
            const size_t n = bar ? (size_t)(bar - q) : strlen(q);
            snprintf(want, sizeof want, "%.*s", (int)n, q);
            ok = !strcmp(type, want);
            q += n + (bar ? 1 : 0);
        }
        if (!ok)
            return http_fail(e, 400, "'%s[%zu]': content part type '%s' is not supported", field, i,
                             type);
        if (!json_is_string(t)) return http_fail(e, 400, "'%s[%zu].text' must be a string", field, i);
        if (out->len) ms_buf_puts(out, "\n\n");
        ms_buf_put(out, json_string_value(t), json_string_length(t));
    }
    return 0;
}

/* ---- conversation under construction ---- */


static void conv_free(struct conv *c) {
    for (size_t i = 0; i < c->n; i++) {
        ms_buf_free(&c->texts[i]);
        ms_buf_free(&c->reasons[i]);
        json_decref(c->calls[i]);
    }
    free(c->m);
    free(c->texts);
    free(c->reasons);
    free(c->calls);
    json_decref(c->tools);
    json_decref(c->tool_map);
    free(c->force);
    json_decref(c->names);
    memset(c, 0, sizeof *c);
}

int conv_add(struct conv *c, const char *role, struct http_err *e) {
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 16;
        struct ms_chat_message *m = realloc(c->m, cap * sizeof *m);
        if (m) c->m = m;
        struct ms_buf *t = realloc(c->texts, cap * sizeof *t);
        if (t) c->texts = t;
        struct ms_buf *r = realloc(c->reasons, cap * sizeof *r);
        if (r) c->reasons = r;
        json_t **k = realloc(c->calls, cap * sizeof *k);
        if (k) c->calls = k;
        if (!m || !t || !r || !k) return http_fail(e, 500, "out of memory");
        c->cap = cap;
    }
    c->m[c->n] = (struct ms_chat_message){.role = role};
    memset(&c->texts[c->n], 0, sizeof c->texts[c->n]);
    memset(&c->reasons[c->n], 0, sizeof c->reasons[c->n]);
    c->calls[c->n] = NULL;
    c->n++;
    return 0;
}

static void conv_finish(struct conv *c) {
    for (size_t i = 0; i < c->n; i++) {
        c->m[i].content = c->texts[i].p;
        c->m[i].reasoning = c->reasons[i].p;
        c->m[i].tool_calls = c->calls[i];
    }
}

int add_call(struct conv *c, size_t i, const char *id, const char *name, json_t *args_obj,
             struct http_err *e) {
    if (!c->calls[i]) c->calls[i] = json_array();
    char *args = json_dumps(args_obj, JSON_COMPACT);
    json_t *tc = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                           "name", name, "arguments", args ? args : "{}");
    free(args);
    if (!tc || json_array_append_new(c->calls[i], tc)) return http_fail(e, 500, "out of memory");
    return 0;
}

/* Arguments given as a JSON text or an object: must be an object. */
static json_t *args_object(const json_t *a, const char *field, struct http_err *e) {
    if (json_is_object(a)) return json_incref((json_t *)a);
    if (json_is_string(a)) {
        json_t *o = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
        if (json_is_object(o)) return o;
        json_decref(o);
        if (json_string_length(a) == 0) return json_object();
    }
    http_fail(e, 400, "'%s' must be a JSON object (or its text)", field);
    return NULL;
}

/* ---- shared request pieces ---- */

struct common {
    bool thinking, effort_max;
    json_t *response_format; /* borrowed */
};

static int parse_sampling(const json_t *req, struct job *j, struct http_err *e) {
    j->sp = ms_sampler_defaults(0);
    j->sp.temp = 0.8f;
    int64_t seed = -1;
    int64_t top_k = j->sp.top_k;
    if (get_num(req, "temperature", 0, 100, &j->sp.temp, e) ||
        get_num(req, "top_p", 0, 1, &j->sp.top_p, e) || get_num(req, "min_p", 0, 1, &j->sp.min_p, e) ||
        get_int(req, "top_k", 0, 1 << 30, &top_k, e) ||
        get_int(req, "seed", INT64_MIN, INT64_MAX, &seed, e))
        return -1;
    j->sp.top_k = (int)top_k;
    if (get_bool(req, "ignore_eos", &j->ignore_eos, e)) return -1;
    if (seed == -1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        j->sp.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    } else {
        j->sp.seed = (uint64_t)seed;
    }
    /* OpenAI: temperature 0 is greedy */
    return 0;
}

static int parse_stop(const json_t *req, const char *key, struct job *j, struct http_err *e) {
    const json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        j->stop = json_array();
        json_array_append(j->stop, (json_t *)v);
    } else if (json_is_array(v)) {
        if (json_array_size(v) > 16) return http_fail(e, 400, "'%s': at most 16 stop strings", key);
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_string(json_array_get(v, i)))
                return http_fail(e, 400, "'%s[%zu]' must be a string", key, i);
        j->stop = json_copy((json_t *)v);
    } else {
        return http_fail(e, 400, "'%s' must be a string or an array of strings", key);
    }
    return 0;
}

/* Tokenizes the rendering: template text with special tokens, request data
 * as plain text; records the clean cuts (run starts, special tokens, end). */
static int tokenize_prompt(struct server *sv, struct job *j, const struct ms_chat_out *r,
                           struct http_err *e) {
    size_t cap_ids = 0, cap_cuts = 0;
    size_t pos = 0, k = 0;
    ms_err err;
    while (pos < r->len) {
        const bool plain = k < r->n_plain && r->plain[k].off == pos;
        const size_t end = plain ? pos + r->plain[k].len : (k < r->n_plain ? r->plain[k].off : r->len);
        int32_t *ids = NULL;
        size_t n = 0;
        /* request data: plain text, no special token at all (USER_DEFINED
         * markers included, which parse_special = false would still cut) */
        if (ms_tokenizer_encode_flags(sv->tok, r->text + pos, end - pos,
                                      plain ? 0 : MS_TOK_SPECIAL | MS_TOK_USER_DEFINED, &ids, &n,
                                      &err))
            return http_fail(e, 500, "tokenizer: %s", err.msg);
        if (j->n_ids + n + 1 > cap_ids) {
            cap_ids = (j->n_ids + n + 1) * 2;
            int32_t *ni = realloc(j->ids, cap_ids * sizeof *ni);
            if (!ni) {
                free(ids);
                return http_fail(e, 500, "out of memory");
            }
            j->ids = ni;
        }
        if (j->n_cuts + n + 2 > cap_cuts) {
            cap_cuts = (j->n_cuts + n + 2) * 2;
            size_t *co = realloc(j->cut_off, cap_cuts * sizeof *co);
            if (co) j->cut_off = co;
            size_t *ct = realloc(j->cut_tok, cap_cuts * sizeof *ct);
            if (ct) j->cut_tok = ct;
            if (!co || !ct) {
                free(ids);
                return http_fail(e, 500, "out of memory");
            }
        }
        /* the run's start is a cut */
        j->cut_off[j->n_cuts] = pos;
        j->cut_tok[j->n_cuts++] = j->n_ids;
        /* special tokens inside a template run, where pieces spell the run */
        size_t at = pos;
        bool exact = true;
        for (size_t i = 0; i < n && !plain; i++) {
            const char *piece;
            size_t plen;
            ms_tokenizer_piece(sv->tok, ids[i], true, &piece, &plen);
            const enum ms_token_type tt = ms_tokenizer_token_type(sv->tok, ids[i]);
            if (i > 0 && exact && (tt == MS_TOKEN_CONTROL || tt == MS_TOKEN_USER_DEFINED)) {
                j->cut_off[j->n_cuts] = at;
                j->cut_tok[j->n_cuts++] = j->n_ids + i;
            }
            if (at + plen > end || memcmp(r->text + at, piece, plen)) exact = false;
            at += plen;
        }
        memcpy(j->ids + j->n_ids, ids, n * sizeof *ids);
        j->n_ids += n;
        free(ids);
        pos = end;
        if (plain) k++;
    }
    if (!j->cut_off) {
        j->cut_off = malloc(sizeof *j->cut_off);
        j->cut_tok = malloc(sizeof *j->cut_tok);
        if (!j->cut_off || !j->cut_tok) return http_fail(e, 500, "out of memory");
    }
    j->cut_off[j->n_cuts] = r->len;
    j->cut_tok[j->n_cuts++] = j->n_ids;
    return 0;
}

/* Renders c into j's prompt and tokens; checks the context. */
static int build_prompt(struct server *sv, struct job *j, struct conv *c, const struct common *cm,
                        struct http_err *e) {
    conv_finish(c);
    struct replay_ctx rctx = {.sv = sv};
    const struct ms_chat_opts o = {.add_generation_prompt = true,
                                   .thinking = cm->thinking,
                                   .effort_max = cm->effort_max,
                                   .tools = c->tools,
                                   .response_format = cm->response_format,
                                   .replay = replay_lookup,
                                   .replay_ctx = &rctx};
    struct ms_chat_out r;
    ms_err err;
    const int rc = ms_chat_render_ex(c->m, c->n, &o, &r, &err);
    replay_ctx_free(&rctx);
    if (rc) return http_fail(e, 400, "%s", err.msg);
    j->thinking = cm->thinking;
    j->has_tools = c->tools && json_array_size(c->tools) > 0;
    j->tool_map = c->tool_map;
    c->tool_map = NULL;
    if (j->has_tools) {
        j->force_call = c->force;
        c->force = NULL;
        j->one_call = c->one_call;
        if (!sv->o.no_tool_grammar) structured_tools(j, c->tools);
    }
    j->parse_output = true;
    const int trc = tokenize_prompt(sv, j, &r, e);
    j->prompt = r.text;
    j->prompt_len = r.len;
    j->plain = r.plain; /* kept for api_tokenize_from */
    j->n_plain = r.n_plain;
    return trc;
}

int api_tokenize_from(struct server *sv, const struct job *j, size_t from, int32_t **ids,
                      size_t *n, ms_err *err) {
    *ids = NULL;
    *n = 0;
    size_t cap = 0, k = 0;
    while (k < j->n_plain && j->plain[k].off + j->plain[k].len <= from) k++;
    for (size_t pos = from; pos < j->prompt_len;) {
        /* the run holding pos: request data, or template text up to the next one */
        const bool plain = k < j->n_plain && j->plain[k].off <= pos;
        const size_t end = plain ? j->plain[k].off + j->plain[k].len
                                 : (k < j->n_plain ? j->plain[k].off : j->prompt_len);
        int32_t *part = NULL;
        size_t np = 0;
        if (ms_tokenizer_encode_flags(sv->tok, j->prompt + pos, end - pos,
                                      plain ? 0 : MS_TOK_SPECIAL | MS_TOK_USER_DEFINED, &part, &np,
                                      err))
            goto fail;
        if (*n + np > cap) {
            cap = (*n + np) * 2;
            int32_t *g = realloc(*ids, cap * sizeof *g);
            if (!g) {
                free(part);
                ms_err_set(err, "out of memory");
                goto fail;
            }
            *ids = g;
        }
        if (np) memcpy(*ids + *n, part, np * sizeof *part);
        *n += np;
        free(part);
        pos = end;
        if (plain) k++;
    }
    return 0;
fail:
    free(*ids);
    *ids = NULL;
    *n = 0;
    return -1;
}

static int check_ctx(struct server *sv, struct job *j, int64_t max_tokens, struct http_err *e) {
    if ((int64_t)j->n_ids >= sv->n_ctx) {
        /* the shapes the agents act on (they compact the conversation):
         * OpenAI's code context_length_exceeded, and for Anthropic clients
         * its message "prompt is too long: N tokens > M maximum" */
        e->code = "context_length_exceeded";
        return http_fail(e, 400, "prompt is too long: %zu tokens > %lld maximum (the server's "
                         "context is %lld positions, one kept for the answer)", j->n_ids,
                         (long long)sv->n_ctx - 1, (long long)sv->n_ctx);
    }
    const int64_t room = sv->n_ctx - (int64_t)j->n_ids;
    if (max_tokens <= 0) max_tokens = sv->o.default_max_tokens;
    j->max_tokens = max_tokens < room ? max_tokens : room;
    return 0;
}

/* thinking from the OpenAI-side knobs; default on. */
static int openai_thinking(const json_t *req, struct common *cm, struct http_err *e) {
    cm->thinking = true;
    const json_t *re = json_object_get(req, "reasoning_effort");
    const json_t *rs = json_object_get(req, "reasoning");
    if (json_is_object(rs)) re = json_object_get(rs, "effort");
    else if (rs && !json_is_null(rs)) return http_fail(e, 400, "'reasoning' must be an object");
    const char *ref = json_is_object(rs) ? "reasoning.effort" : "reasoning_effort";
    if (re && !json_is_null(re)) {
        if (!json_is_string(re)) return http_fail(e, 400, "'%s' must be a string", ref);
        const char *v = json_string_value(re);
        if (!strcmp(v, "none") || !strcmp(v, "minimal")) cm->thinking = false;
        else if (!strcmp(v, "max") || !strcmp(v, "xhigh")) cm->effort_max = true;
        else if (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high"))
            return http_fail(e, 400, "'%s' must be none, minimal, low, medium, high, xhigh or max", ref);
    }
    const json_t *th = json_object_get(req, "thinking");
    if (json_is_boolean(th)) cm->thinking = json_is_true(th);
    else if (json_is_object(th)) {
        const char *t = json_string_value(json_object_get(th, "type"));
        if (t) cm->thinking = strcmp(t, "disabled") != 0;
    } else if (th && !json_is_null(th)) {
        return http_fail(e, 400, "'thinking' must be a boolean or an object");
    }
    const json_t *kw = json_object_get(req, "chat_template_kwargs");
    if (json_is_object(kw)) {
        const json_t *t = json_object_get(kw, "thinking");
        if (!t) t = json_object_get(kw, "enable_thinking");
        if (json_is_boolean(t)) cm->thinking = json_is_true(t);
        else if (t && !json_is_null(t)) return http_fail(e, 400, "'chat_template_kwargs.thinking' must be a boolean");
    }
    return 0;
}

static struct job *job_new(struct server *sv, enum api_kind k, json_t *req) {
    struct job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->kind = k;
    j->req = json_incref(req);
    j->created = (int64_t)time(NULL);
    j->block = -1;
    j->logprobs = -1;
    j->refs = 1;
    j->calls = json_array();
    j->items = json_array();
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    rand_id(j->id, sizeof j->id,
            k == API_CHAT ? "chatcmpl-" : k == API_COMPLETIONS ? "cmpl-" : k == API_MESSAGES ? "msg_" : "resp_");
    (void)sv;
    return j;
}

void job_release(struct job *j) {
    pthread_mutex_lock(&j->mu);
    const int refs = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (refs > 0) return;
    json_decref(j->req);
    json_decref(j->stop);
    json_decref(j->calls);
    json_decref(j->items);
    json_decref(j->tool_map);
    json_decref(j->lp_pending);
    json_decref(j->lp_sent);
    json_decref(j->lp_prompt);
    free(j->lp_pend_start);
    ms_buf_free(&j->lp_text.raw);
    free(j->prompt);
    free(j->ids);
    free(j->cut_off);
    free(j->cut_tok);
    free(j->plain);
    free(j->stop_seq);
    free(j->force_call);
    ms_grammar_free(j->grammar);
    ms_grammar_free(j->tool_grammar);
    free(j->error);
    free(j->body);
    ms_buf_free(&j->reasoning);
    ms_buf_free(&j->content);
    ms_buf_free(&j->cur);
    ms_buf_free(&j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* ---- OpenAI chat ---- */

static int parse_chat_messages(const json_t *msgs, struct conv *c, struct http_err *e) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return http_fail(e, 400, "'messages' must be a non-empty array");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m)) return http_fail(e, 400, "'messages[%zu]' must be an object", i);
        const json_t *rj = json_object_get(m, "role");
        if (!json_is_string(rj)) return http_fail(e, 400, "'messages[%zu].role' must be a string", i);
        const char *role = json_string_value(rj);
        static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
        const char *r = NULL;
        for (size_t k = 0; k < 5; k++)
            if (!strcmp(role, roles[k])) r = roles[k];
        if (!r) return http_fail(e, 400, "'messages[%zu].role': unknown role '%s'", i, role);
        if (conv_add(c, r, e)) return -1;
        char field[128];
        snprintf(field, sizeof field, "messages[%zu].content", i);
        if (content_text(json_object_get(m, "content"), field, "text|input_text|output_text",
                         &c->texts[c->n - 1], e))
            return -1;
        if (!strcmp(r, "assistant")) {
            const json_t *rc = json_object_get(m, "reasoning_content");
            if (!rc) rc = json_object_get(m, "reasoning");
            if (json_is_string(rc))
                ms_buf_put(&c->reasons[c->n - 1], json_string_value(rc), json_string_length(rc));
            else if (rc && !json_is_null(rc))
                return http_fail(e, 400, "'messages[%zu].reasoning_content' must be a string", i);
            const json_t *tcs = json_object_get(m, "tool_calls");
            if (tcs && !json_is_null(tcs)) {
                if (!json_is_array(tcs))
                    return http_fail(e, 400, "'messages[%zu].tool_calls' must be an array", i);
                for (size_t k = 0; k < json_array_size(tcs); k++) {
                    const json_t *tc = json_array_get(tcs, k);
                    const char *id = json_string_value(json_object_get(tc, "id"));
                    const json_t *ct = json_object_get(tc, "custom");
                    if (json_is_object(ct)) {
                        const char *name = json_string_value(json_object_get(ct, "name"));
                        const json_t *in = json_object_get(ct, "input");
                        if (!name || !json_is_string(in))
                            return http_fail(e, 400, "'messages[%zu].tool_calls[%zu].custom' needs a string name and input", i, k);
                        json_t *args = json_pack("{s:O}", "input", in);
                        const int rc2 = add_history_call(c, c->n - 1, id ? id : "", NULL, name, args, e);
                        json_decref(args);
                        if (rc2) return -1;
                        continue;
                    }
                    const json_t *fn = json_object_get(tc, "function");
                    const char *name = json_string_value(json_object_get(fn, "name"));
                    if (!json_is_object(tc) || !json_is_object(fn) || !name)
                        return http_fail(e, 400, "'messages[%zu].tool_calls[%zu]' needs function.name", i, k);
                    snprintf(field, sizeof field, "messages[%zu].tool_calls[%zu].function.arguments", i, k);
                    json_t *args = args_object(json_object_get(fn, "arguments"), field, e);
                    if (!args) return -1;
                    const int rc2 = add_call(c, c->n - 1, id ? id : "", name, args, e);
                    json_decref(args);
                    if (rc2) return -1;
                }
            }
        }
    }
    return 0;
}

/* Chat's logprobs (a boolean) and top_logprobs (0 .. LP_TOP_MAX, only
 * with logprobs true, as OpenAI has it). */
static int parse_chat_logprobs(const json_t *req, struct job *j, struct http_err *e) {
    bool on = false;
    int64_t top = 0;
    if (get_bool(req, "logprobs", &on, e) || get_int(req, "top_logprobs", 0, LP_TOP_MAX, &top, e)) return -1;
    const json_t *t = json_object_get(req, "top_logprobs");
    if (!on && t && !json_is_null(t)) return http_fail(e, 400, "'top_logprobs' needs 'logprobs': true");
    j->logprobs = on ? (int)top : -1;
    return 0;
}

/* Responses' top_logprobs (0 .. LP_TOP_MAX), in effect when include lists
 * "message.output_text.logprobs" (Codex sends other include values, such
 * as "reasoning.encrypted_content": they are accepted and have no effect). */
static int parse_responses_logprobs(const json_t *req, struct job *j, struct http_err *e) {
    int64_t top = 0;
    if (get_int(req, "top_logprobs", 0, LP_TOP_MAX, &top, e)) return -1;
    const json_t *inc = json_object_get(req, "include");
    if (inc && !json_is_null(inc) && !json_is_array(inc)) return http_fail(e, 400, "'include' must be an array of strings");
    size_t i;
    const json_t *v;
    json_array_foreach(inc, i, v) {
        if (!json_is_string(v)) return http_fail(e, 400, "'include[%zu]' must be a string", i);
        if (!strcmp(json_string_value(v), "message.output_text.logprobs")) j->logprobs = (int)top;
    }
    return 0;
}

static struct job *parse_chat(struct server *sv, json_t *req, struct http_err *e) {
    struct job *j = job_new(sv, API_CHAT, req);
    struct conv c = {0};
    struct common cm = {0};
    int64_t max_tokens = 0, n = 1;
    if (!j) {
        http_fail(e, 500, "out of memory");
        return NULL;
    }
    const json_t *so = json_object_get(req, "stream_options");
    if (get_bool(req, "stream", &j->stream, e) || get_int(req, "n", 1, 1, &n, e) ||
        get_int(req, "max_tokens", 1, INT32_MAX, &max_tokens, e) ||
        get_int(req, "max_completion_tokens", 1, INT32_MAX, &max_tokens, e) ||
        (so && !json_is_null(so) && !json_is_object(so) &&
         http_fail(e, 400, "'stream_options' must be an object")) ||
        (json_is_object(so) && get_bool(so, "include_usage", &j->include_usage, e)) ||
        parse_sampling(req, j, e) || parse_stop(req, "stop", j, e) || openai_thinking(req, &cm, e) ||
        parse_chat_messages(json_object_get(req, "messages"), &c, e) || tools_parse(req, API_CHAT, &c, e) ||
        parse_chat_logprobs(req, j, e))
        goto bad;
    const json_t *rf = json_object_get(req, "response_format");
    if (json_is_object(rf)) {
        const char *t = json_string_value(json_object_get(rf, "type"));
        if (!t) {
            http_fail(e, 400, "'response_format.type' must be a string");
            goto bad;
        }
        if (strcmp(t, "text")) cm.response_format = (json_t *)rf;
    } else if (rf && !json_is_null(rf)) {
        http_fail(e, 400, "'response_format' must be an object");
        goto bad;
    }
    if (build_prompt(sv, j, &c, &cm, e) || check_ctx(sv, j, max_tokens, e) ||
        structured_from_format(j, cm.response_format, "response_format", e) || structured_from_fields(j, req, e))
        goto bad;
    conv_free(&c);
    return j;
bad:
    conv_free(&c);
    job_release(j);
    return NULL;
}

/* ---- OpenAI completions ---- */

/* check_ctx for completions: echo with max_tokens 0 (the prompt scored,
 * nothing generated) may fill the whole context. */
static int completions_ctx(struct server *sv, struct job *j, int64_t max_tokens, struct http_err *e) {
    if (max_tokens == 0 && !j->echo)
        return http_fail(e, 400, "'max_tokens' must be at least 1 (0, nothing generated, goes with 'echo': true "
                                 "to score the prompt)");
    if (max_tokens == 0 && (int64_t)j->n_ids >= sv->n_ctx) {
        if ((int64_t)j->n_ids == sv->n_ctx) {
            j->max_tokens = 0;
            return 0;
        }
        e->code = "context_length_exceeded";
        return http_fail(e, 400, "prompt is too long: %zu tokens > %lld maximum (the server's context; nothing "
                         "is generated with max_tokens 0)", j->n_ids, (long long)sv->n_ctx);
    }
    if (check_ctx(sv, j, max_tokens, e)) return -1;
    if (max_tokens == 0) j->max_tokens = 0;
    return 0;
}

/* A completions prompt given as token ids (a non-empty array of integers,
 * as OpenAI accepts and evaluation harnesses send): evaluated as given (no
 * BOS added), its text the tokens' pieces (special tokens as their text),
 * with clean cuts at its start and end only. Errors: an id outside the
 * vocabulary, an empty array, OOM. */
static int prompt_ids(struct server *sv, struct job *j, const json_t *p, struct http_err *e) {
    const size_t n = json_array_size(p);
    const json_int_t n_vocab = (json_int_t)ms_tokenizer_n_vocab(sv->tok);
    if (n == 0) return http_fail(e, 400, "'prompt' is empty");
    const json_t *first = json_array_get(p, 0);
    if (json_is_array(first) || json_is_string(first))
        return http_fail(e, 400, "'prompt' must be a string, an array of token ids, or an array of those (several "
                         "prompts); it holds an array of %s", json_is_array(first) ? "arrays" : "strings");
    j->ids = malloc(n * sizeof *j->ids);
    j->cut_off = malloc(2 * sizeof *j->cut_off);
    j->cut_tok = malloc(2 * sizeof *j->cut_tok);
    if (!j->ids || !j->cut_off || !j->cut_tok) return http_fail(e, 500, "out of memory");
    struct ms_buf text = {0};
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(p, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab) {
            ms_buf_free(&text);
            return http_fail(e, 400, "'prompt[%zu]' must be a token id in [0, %lld)", i, (long long)n_vocab);
        }
        j->ids[i] = (int32_t)json_integer_value(v);
        const char *piece;
        size_t plen;
        ms_tokenizer_piece(sv->tok, j->ids[i], true, &piece, &plen);
        ms_buf_put(&text, piece, plen);
    }
    if (!text.p) ms_buf_puts(&text, "");
    if (!text.p) return http_fail(e, 500, "out of memory");
    j->n_ids = n;
    j->prompt = text.p;
    j->prompt_len = text.len;
    j->cut_off[0] = 0;
    j->cut_tok[0] = 0;
    j->cut_off[1] = text.len;
    j->cut_tok[1] = n;
    j->n_cuts = 2;
    j->ids_given = true;
    return 0;
}

/* A completion's structured output: llama.cpp's "grammar" / "json_schema",
 * or a response_format as vLLM takes it there. */
static int completions_format(const json_t *req, struct job *j, struct http_err *e) {
    const json_t *rf = json_object_get(req, "response_format");
    if (rf && !json_is_null(rf) && !json_is_object(rf)) return http_fail(e, 400, "'response_format' must be an object");
    return structured_from_format(j, rf, "response_format", e) || structured_from_fields(j, req, e) ? -1 : 0;
}

static struct job *parse_completions(struct server *sv, json_t *req, struct http_err *e) {
    struct job *j = job_new(sv, API_COMPLETIONS, req);
    int64_t max_tokens = 16, n = 1;
    if (!j) {
        http_fail(e, 500, "out of memory");
        return NULL;
    }
    const json_t *so = json_object_get(req, "stream_options");
    int64_t lp = -1;
    if (get_bool(req, "stream", &j->stream, e) || get_int(req, "n", 1, 1, &n, e) ||
        get_bool(req, "echo", &j->echo, e) || get_int(req, "max_tokens", 0, INT32_MAX, &max_tokens, e) ||
        (json_is_object(so) && get_bool(so, "include_usage", &j->include_usage, e)) ||
        get_int(req, "logprobs", 0, LP_TOP_MAX, &lp, e) || parse_sampling(req, j, e) ||
        parse_stop(req, "stop", j, e) || completions_format(req, j, e))
        goto bad;
    j->logprobs = (int)lp;
    j->prompt_lp = j->echo && lp >= 0;
    const json_t *p = json_object_get(req, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && !json_is_integer(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_array(p)) {
        if (prompt_ids(sv, j, p, e) || completions_ctx(sv, j, max_tokens, e)) goto bad;
        return j;
    }
    if (!json_is_string(p)) {
        http_fail(e, 400, "'prompt' must be a string or an array of token ids (or an array of one of them)");
        goto bad;
    }
    struct ms_buf text = {0};
    const char *ps = json_string_value(p);
    if (ms_tokenizer_add_bos(sv->tok) && strncmp(ps, MS_CHAT_BOS, strlen(MS_CHAT_BOS))) {
        ms_buf_puts(&text, MS_CHAT_BOS);
        j->echo_off = strlen(MS_CHAT_BOS); /* the BOS the server adds is not echoed */
        j->echo_tok = 1;
    }
    ms_buf_put(&text, ps, json_string_length(p));
    if (!text.p) ms_buf_puts(&text, "");
    /* raw prompt: special-token text is parsed, as llama.cpp's completion does */
    const struct ms_chat_out r = {.text = text.p, .len = text.len};
    const int rc = tokenize_prompt(sv, j, &r, e);
    j->prompt = text.p;
    j->prompt_len = text.len;
    if (rc) goto bad;
    if (j->n_ids == 0) {
        http_fail(e, 400, "'prompt' is empty");
        goto bad;
    }
    if (completions_ctx(sv, j, max_tokens, e)) goto bad;
    return j;
bad:
    job_release(j);
    return NULL;
}

/* ---- Anthropic messages ---- */

/* Anthropic tool_result content: a string or text blocks. */
static int tool_result_text(const json_t *c, size_t i, size_t k, struct ms_buf *out, struct http_err *e) {
    char field[128];
    snprintf(field, sizeof field, "messages.%zu.content.%zu.content", i, k);
    return content_text(c, field, "text", out, e);
}

static int parse_anthropic(struct server *sv, const json_t *req, struct conv *c, struct common *cm,
                           struct http_err *e) {
    const json_t *sys = json_object_get(req, "system");
    if (sys && !json_is_null(sys)) {
        if (conv_add(c, "system", e) || content_text(sys, "system", "text", &c->texts[c->n - 1], e))
            return -1;
    }
    const json_t *th = json_object_get(req, "thinking");
    if (json_is_object(th)) {
        const char *t = json_string_value(json_object_get(th, "type"));
        if (!t || (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive")))
            return http_fail(e, 400, "thinking.type: must be enabled, disabled or adaptive");
        cm->thinking = strcmp(t, "disabled") != 0;
    } else if (th && !json_is_null(th)) {
        return http_fail(e, 400, "thinking: must be an object");
    }
    /* output_config: effort "max" adds the template's maximum-effort
     * preamble (as reasoning_effort "max" does), and a format (Claude Code's
     * title request sends a json_schema one) is rendered as OpenAI's
     * response_format is */
    const json_t *oc = json_object_get(req, "output_config");
    if (json_is_object(oc)) {
        const json_t *ef = json_object_get(oc, "effort");
        const char *es = json_string_value(ef);
        if (ef && !json_is_null(ef) &&
            (!es || (strcmp(es, "low") && strcmp(es, "medium") && strcmp(es, "high") &&
                     strcmp(es, "xhigh") && strcmp(es, "max"))))
            return http_fail(e, 400, "output_config.effort: must be low, medium, high, xhigh or max");
        if (es && !strcmp(es, "max")) cm->effort_max = true;
        const json_t *fmt = json_object_get(oc, "format");
        if (json_is_object(fmt)) {
            const char *t = json_string_value(json_object_get(fmt, "type"));
            if (!t || (strcmp(t, "text") && strcmp(t, "json_schema")))
                return http_fail(e, 400, "output_config.format.type: must be \"json_schema\" or \"text\"");
            if (!strcmp(t, "json_schema") && !json_is_object(json_object_get(fmt, "schema")))
                return http_fail(e, 400, "output_config.format.schema: must be an object");
            if (strcmp(t, "text")) cm->response_format = (json_t *)fmt;
        } else if (fmt && !json_is_null(fmt)) {
            return http_fail(e, 400, "output_config.format: must be an object");
        }
    } else if (oc && !json_is_null(oc)) {
        return http_fail(e, 400, "output_config: must be an object");
    }
    const json_t *msgs = json_object_get(req, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return http_fail(e, 400, "messages: must be a non-empty array");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role ||
            (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system")))
            return http_fail(e, 400, "messages.%zu.role: must be \"user\", \"assistant\" or \"system\"", i);
        const json_t *content = json_object_get(m, "content");
        if (!strcmp(role, "system")) {
            /* a system message inside the conversation (Claude Code sends
             * them) stays where it is, as the template's developer role (in
             * the user block): moving it to the top would change the prompt's
             * start every turn and defeat prefix reuse */
            char field[128];
            snprintf(field, sizeof field, "messages.%zu.content", i);
            if (conv_add(c, "developer", e) || content_text(content, field, "text", &c->texts[c->n - 1], e))
                return -1;
            continue;
        }
        const bool user = !strcmp(role, "user");
        if (json_is_string(content)) {
            if (conv_add(c, user ? "user" : "assistant", e)) return -1;
            ms_buf_put(&c->texts[c->n - 1], json_string_value(content), json_string_length(content));
            continue;
        }
        if (!json_is_array(content))
            return http_fail(e, 400, "messages.%zu.content: must be a string or an array of blocks", i);
        if (!user && conv_add(c, "assistant", e)) return -1;
        const size_t asst = c->n - 1;
        ssize_t cur_user = -1; /* index of the open user message */
        for (size_t k = 0; k < json_array_size(content); k++) {
            const json_t *b = json_array_get(content, k);
            const char *type = json_string_value(json_object_get(b, "type"));
            if (!json_is_object(b) || !type)
                return http_fail(e, 400, "messages.%zu.content.%zu: a block needs a 'type'", i, k);
            const char *media = media_placeholder(type);
            if (!strcmp(type, "text") || media) {
                /* an image or file block: its placeholder (a text document: its text) */
                const json_t *t = !media ? json_object_get(b, "text") : document_text(b);
                if (!media && !json_is_string(t))
                    return http_fail(e, 400, "messages.%zu.content.%zu.text: must be a string", i, k);
                struct ms_buf *dst;
                if (user) {
                    if (cur_user < 0) {
                        if (conv_add(c, "user", e)) return -1;
                        cur_user = (ssize_t)c->n - 1;
                    }
                    dst = &c->texts[cur_user];
                } else {
                    dst = &c->texts[asst];
                }
                if (dst->len) ms_buf_puts(dst, "\n\n");
                if (t) ms_buf_put(dst, json_string_value(t), json_string_length(t));
                else ms_buf_puts(dst, media);
            } else if (!strcmp(type, "tool_result") && user) {
                const char *id = json_string_value(json_object_get(b, "tool_use_id"));
                if (!id)
                    return http_fail(e, 400, "messages.%zu.content.%zu.tool_use_id: must be a string", i, k);
                if (conv_add(c, "tool", e) ||
                    tool_result_text(json_object_get(b, "content"), i, k, &c->texts[c->n - 1], e))
                    return -1;
                cur_user = -1;
            } else if (!strcmp(type, "tool_use") && !user) {
                const char *id = json_string_value(json_object_get(b, "id"));
                const char *name = json_string_value(json_object_get(b, "name"));
                const json_t *in = json_object_get(b, "input");
                if (!id || !name || !json_is_object(in))
                    return http_fail(e, 400, "messages.%zu.content.%zu: tool_use needs id, name and an object input", i, k);
                if (add_call(c, asst, id, name, (json_t *)in, e)) return -1;
            } else if (!strcmp(type, "thinking") && !user) {
                const json_t *t = json_object_get(b, "thinking");
                if (!json_is_string(t))
                    return http_fail(e, 400, "messages.%zu.content.%zu.thinking: must be a string", i, k);
                ms_buf_put(&c->reasons[asst], json_string_value(t), json_string_length(t));
            } else if (!strcmp(type, "redacted_thinking")) {
                continue;
            } else {
                return http_fail(e, 400, "messages.%zu.content.%zu: block type '%s' is not supported here",
                                 i, k, type);
            }
        }
        if (user && cur_user < 0 && c->n && strcmp(c->m[c->n - 1].role, "tool") &&
            json_array_size(content) == 0) {
            if (conv_add(c, "user", e)) return -1;
        }
    }
    (void)sv;
    return tools_parse(req, API_MESSAGES, c, e);
}

static struct job *parse_messages(struct server *sv, json_t *req, struct http_err *e) {
    struct job *j = job_new(sv, API_MESSAGES, req);
    struct conv c = {0};
    struct common cm = {0};
    int64_t max_tokens = 0;
    if (!j) {
        http_fail(e, 500, "out of memory");
        return NULL;
    }
    if (!json_object_get(req, "max_tokens")) {
        http_fail(e, 400, "max_tokens: Field required");
        goto bad;
    }
    if (get_bool(req, "stream", &j->stream, e) ||
        get_int(req, "max_tokens", 1, INT32_MAX, &max_tokens, e) || parse_sampling(req, j, e) ||
        parse_stop(req, "stop_sequences", j, e) || parse_anthropic(sv, req, &c, &cm, e))
        goto bad;
    j->sp.temp = json_is_number(json_object_get(req, "temperature")) ? j->sp.temp : 1.0f;
    if (build_prompt(sv, j, &c, &cm, e) || check_ctx(sv, j, max_tokens, e) ||
        structured_from_format(j, cm.response_format, "output_config.format", e))
        goto bad;
    conv_free(&c);
    return j;
bad:
    conv_free(&c);
    job_release(j);
    return NULL;
}

int64_t api_count_tokens(struct server *sv, json_t *req, struct http_err *e) {
    struct conv c = {0};
    struct common cm = {0};
    struct job *j = job_new(sv, API_MESSAGES, req);
    int64_t n = -1;
    if (!j) return http_fail(e, 500, "out of memory");
    if (!parse_anthropic(sv, req, &c, &cm, e) && !build_prompt(sv, j, &c, &cm, e))
        n = (int64_t)j->n_ids;
    conv_free(&c);
    job_release(j);
    return n;
}

/* ---- OpenAI Responses ---- */

static int parse_responses_input(const json_t *req, struct conv *c, struct http_err *e) {
    const json_t *ins = json_object_get(req, "instructions");
    if (json_is_string(ins)) {
        if (conv_add(c, "system", e)) return -1;
        ms_buf_put(&c->texts[c->n - 1], json_string_value(ins), json_string_length(ins));
    } else if (ins && !json_is_null(ins)) {
        return http_fail(e, 400, "'instructions' must be a string");
    }
    const json_t *in = json_object_get(req, "input");
    if (json_is_string(in)) {
        if (conv_add(c, "user", e)) return -1;
        ms_buf_put(&c->texts[c->n - 1], json_string_value(in), json_string_length(in));
        return 0;
    }
    if (!json_is_array(in) || json_array_size(in) == 0)
        return http_fail(e, 400, "'input' must be a string or a non-empty array of items");
    struct ms_buf pending_reasoning = {0};
    for (size_t i = 0; i < json_array_size(in); i++) {
        const json_t *it = json_array_get(in, i);
        if (!json_is_object(it)) {
            ms_buf_free(&pending_reasoning);
            return http_fail(e, 400, "'input[%zu]' must be an object", i);
        }
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        char field[128];
        int rc = 0;
        if ((!type || !strcmp(type, "message")) && role) {
            const char *r = !strcmp(role, "user") ? "user"
                            : !strcmp(role, "assistant") ? "assistant"
                            : !strcmp(role, "system") ? "system"
                            : !strcmp(role, "developer") ? "developer" : NULL;
            if (!r) rc = http_fail(e, 400, "'input[%zu].role': unknown role '%s'", i, role);
            else if (!(rc = conv_add(c, r, e))) {
                snprintf(field, sizeof field, "input[%zu].content", i);
                rc = content_text(json_object_get(it, "content"), field,
                                  "input_text|output_text|text|summary_text", &c->texts[c->n - 1], e);
                if (!rc && !strcmp(r, "assistant") && pending_reasoning.len) {
                    ms_buf_put(&c->reasons[c->n - 1], pending_reasoning.p, pending_reasoning.len);
                    pending_reasoning.len = 0;
                }
            }
        } else if (type && (!strcmp(type, "function_call") || !strcmp(type, "custom_tool_call"))) {
            /* a call, with its namespace when the tool is in one */
            const bool custom = !strcmp(type, "custom_tool_call");
            const char *id = json_string_value(json_object_get(it, "call_id"));
            const char *name = json_string_value(json_object_get(it, "name"));
            const json_t *nsj = json_object_get(it, "namespace");
            const json_t *text = json_object_get(it, "input");
            snprintf(field, sizeof field, "input[%zu].arguments", i);
            json_t *args = !id || !name                ? NULL
                           : !custom                   ? args_object(json_object_get(it, "arguments"), field, e)
                           : json_is_string(text)      ? json_pack("{s:O}", "input", text)
                                                       : NULL;
            if (!id || !name) rc = http_fail(e, 400, "'input[%zu]': %s needs call_id and name", i, type);
            else if (nsj && !json_is_null(nsj) && !json_is_string(nsj))
                rc = http_fail(e, 400, "'input[%zu].namespace' must be a string", i);
            else if (!args && custom) rc = http_fail(e, 400, "'input[%zu].input' must be a string", i);
            else if (!args) rc = -1;
            else {
                /* calls join the assistant message right before them */
                if (!c->n || strcmp(c->m[c->n - 1].role, "assistant")) {
                    rc = conv_add(c, "assistant", e);
                    if (!rc && pending_reasoning.len) {
                        ms_buf_put(&c->reasons[c->n - 1], pending_reasoning.p, pending_reasoning.len);
                        pending_reasoning.len = 0;
                    }
                }
                const char *ns = json_string_value(nsj);
                if (!rc) rc = add_history_call(c, c->n - 1, id, ns && *ns ? ns : NULL, name, args, e);
            }
            json_decref(args);
        } else if (type && (!strcmp(type, "function_call_output") || !strcmp(type, "custom_tool_call_output"))) {
            const json_t *out = json_object_get(it, "output");
            if (!json_is_string(json_object_get(it, "call_id")))
                rc = http_fail(e, 400, "'input[%zu].call_id' must be a string", i);
            else if (!(rc = conv_add(c, "tool", e))) {
                snprintf(field, sizeof field, "input[%zu].output", i);
                rc = content_text(out, field, "input_text|output_text|text", &c->texts[c->n - 1], e);
            }
        } else if (type && !strcmp(type, "reasoning")) {
            const json_t *parts = json_object_get(it, "content");
            for (size_t k = 0; k < json_array_size(parts); k++) {
                const json_t *t = json_object_get(json_array_get(parts, k), "text");
                if (json_is_string(t)) ms_buf_put(&pending_reasoning, json_string_value(t), json_string_length(t));
            }
        } else {
            rc = http_fail(e, 400, "'input[%zu]': item type '%s' is not supported", i, type ? type : "(none)");
        }
        if (rc) {
            ms_buf_free(&pending_reasoning);
            return -1;
        }
    }
    ms_buf_free(&pending_reasoning);
    return 0;
}

/* Responses structured output, text.format: {"type": "text"}, {"type":
 * "json_object"} or {"type": "json_schema", "name", "schema", "strict"?}
 * (Codex's --output-schema), rendered as chat's response_format is (the
 * template puts the object after its "Response Format" line). */
static int responses_text_format(const json_t *req, struct common *cm, struct http_err *e) {
    const json_t *tx = json_object_get(req, "text");
    if (!tx || json_is_null(tx)) return 0;
    if (!json_is_object(tx)) return http_fail(e, 400, "'text' must be an object");
    const json_t *fmt = json_object_get(tx, "format");
    if (!fmt || json_is_null(fmt)) return 0;
    const char *t = json_is_object(fmt) ? json_string_value(json_object_get(fmt, "type")) : NULL;
    if (!t || (strcmp(t, "text") && strcmp(t, "json_object") && strcmp(t, "json_schema")))
        return http_fail(e, 400, "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    if (!strcmp(t, "json_schema") && !json_is_object(json_object_get(fmt, "schema")))
        return http_fail(e, 400, "'text.format.schema' must be an object");
    if (strcmp(t, "text")) cm->response_format = (json_t *)fmt;
    return 0;
}

static struct job *parse_responses(struct server *sv, json_t *req, struct http_err *e) {
    struct job *j = job_new(sv, API_RESPONSES, req);
    struct conv c = {0};
    struct common cm = {0};
    int64_t max_tokens = 0;
    if (!j) {
        http_fail(e, 500, "out of memory");
        return NULL;
    }
    const json_t *prev = json_object_get(req, "previous_response_id");
    if (prev && !json_is_null(prev)) {
        http_fail(e, 400, "'previous_response_id' is not supported (the server keeps no responses; send the whole input)");
        goto bad;
    }
    if (get_bool(req, "stream", &j->stream, e) ||
        get_int(req, "max_output_tokens", 1, INT32_MAX, &max_tokens, e) ||
        parse_sampling(req, j, e) || openai_thinking(req, &cm, e) ||
        parse_responses_input(req, &c, e) || tools_parse(req, API_RESPONSES, &c, e) ||
        responses_text_format(req, &cm, e) || parse_responses_logprobs(req, j, e))
        goto bad;
    if (build_prompt(sv, j, &c, &cm, e) || check_ctx(sv, j, max_tokens, e) ||
        structured_from_format(j, cm.response_format, "text.format", e))
        goto bad;
    conv_free(&c);
    return j;
bad:
    conv_free(&c);
    job_release(j);
    return NULL;
}

struct job *api_parse(struct server *sv, enum api_kind k, json_t *req, struct http_err *e) {
    if (!json_is_object(req)) {
        http_fail(e, 400, "the request body must be a JSON object");
        return NULL;
    }
    const json_t *model = json_object_get(req, "model");
    if (model && !json_is_string(model) && !json_is_null(model)) {
        http_fail(e, 400, "'model' must be a string");
        return NULL;
    }
    switch (k) {
    case API_CHAT: return parse_chat(sv, req, e);
    case API_COMPLETIONS: return parse_completions(sv, req, e);
    case API_MESSAGES: return parse_messages(sv, req, e);
    case API_RESPONSES: return parse_responses(sv, req, e);
    }
    return NULL;
}
