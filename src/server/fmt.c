/*
 * fmt.c - response formatters: the worker's events (begin, reasoning,
 * content, tool call, end) as each API's stream events or final JSON.
 * Text is accumulated in the job for the non-streaming replies; streaming
 * replies also go out as SSE frames through job_emit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/internal.h"

void job_emit(struct job *j, const char *s, size_t n) {
    pthread_mutex_lock(&j->mu);
    ms_buf_put(&j->out, s, n);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static json_t *jstrn(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    return j ? j : json_string("\xEF\xBF\xBD"); /* formatters get whole UTF-8 (worker.c) */
}

/* "data: {json}\n\n" (or with an "event:" line); steals o. */
static void sse(struct job *j, const char *event, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return;
    struct ms_buf b = {0};
    if (event) ms_buf_printf(&b, "event: %s\n", event);
    ms_buf_puts(&b, "data: ");
    ms_buf_puts(&b, s);
    ms_buf_puts(&b, "\n\n");
    job_emit(j, b.p, b.len);
    ms_buf_free(&b);
    free(s);
}

static void rand_hex(char *out, size_t cap, const char *prefix) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_nsec << 1) ^ ((atomic_fetch_add(&counter, 1) + 1) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    snprintf(out, cap, "%s%016llx%08x", prefix, (unsigned long long)x, (unsigned)(ts.tv_nsec & 0xffffffff));
}

static const char *model_of(const struct server *sv) { return sv->model_id; }

/* ---- usage ---- */

static json_t *usage_openai(const struct job *j) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens", (json_int_t)j->n_prompt,
                     "completion_tokens", (json_int_t)j->n_completion, "total_tokens",
                     (json_int_t)(j->n_prompt + j->n_completion), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)j->n_cached, "completion_tokens_details",
                     "reasoning_tokens", (json_int_t)j->n_reasoning);
}

static json_t *usage_anthropic(const struct job *j, bool with_output) {
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", (json_int_t)(j->n_prompt - j->n_cached),
                     "cache_read_input_tokens", (json_int_t)j->n_cached,
                     "cache_creation_input_tokens", (json_int_t)0, "output_tokens",
                     (json_int_t)(with_output ? j->n_completion : 0));
}

static json_t *usage_responses(const struct job *j) {
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)j->n_prompt,
                     "input_tokens_details", "cached_tokens", (json_int_t)j->n_cached,
                     "output_tokens", (json_int_t)j->n_completion, "output_tokens_details",
                     "reasoning_tokens", (json_int_t)j->n_reasoning, "total_tokens",
                     (json_int_t)(j->n_prompt + j->n_completion));
}

static const char *openai_finish(const struct job *j) {
    const char *f = j->finish ? j->finish : "stop";
    if (!strcmp(f, "tool_calls") || !strcmp(f, "length")) return f;
    return "stop";
}

static const char *anthropic_stop(const struct job *j) {
    const char *f = j->finish ? j->finish : "stop";
    if (!strcmp(f, "tool_calls")) return "tool_use";
    if (!strcmp(f, "length")) return "max_tokens";
    if (!strcmp(f, "stop_sequence")) return "stop_sequence";
    return "end_turn";
}

/* ---- log-probabilities ---- */

void fmt_logprob(struct job *j, json_t *e, int64_t start) {
    if (!e) return;
    if (!j->lp_pending) j->lp_pending = json_array();
    const size_t n = json_array_size(j->lp_pending);
    if (n == j->lp_pend_cap) {
        const size_t cap = n ? 2 * n : 64;
        int64_t *ns = realloc(j->lp_pend_start, cap * sizeof *ns);
        if (!ns) {
            json_decref(e);
            return;
        }
        j->lp_pend_start = ns;
        j->lp_pend_cap = cap;
    }
    if (json_array_append_new(j->lp_pending, e)) return;
    j->lp_pend_start[n] = start;
}

/* The entries of the text being sent now: the pending ones whose text
 * starts before the content's lp_sent_raw bytes (taken; an empty array
 * when there are none), also kept in lp_sent for the final reply. NULL
 * when logprobs are off. */
static json_t *lp_take(struct job *j) {
    if (j->logprobs < 0) return NULL;
    const size_t n = json_array_size(j->lp_pending);
    size_t k = 0;
    while (k < n && j->lp_pend_start[k] < j->lp_sent_raw) k++;
    json_t *a;
    if (k == n) { /* the usual case: all of them */
        a = j->lp_pending ? j->lp_pending : json_array();
        j->lp_pending = NULL;
    } else {
        a = json_array();
        json_t *rest = json_array();
        for (size_t i = 0; i < n; i++) json_array_append(i < k ? a : rest, json_array_get(j->lp_pending, i));
        json_decref(j->lp_pending);
        j->lp_pending = rest;
        memmove(j->lp_pend_start, j->lp_pend_start + k, (n - k) * sizeof *j->lp_pend_start);
    }
    if (!j->lp_sent) j->lp_sent = json_array();
    json_array_extend(j->lp_sent, a);
    return a;
}

/* A chunk's or reply's choice "logprobs": chat {"content": entries,
 * "refusal": null}, completions the legacy arrays (lp_completions); steals
 * a. */
static json_t *lp_choice(struct job *j, json_t *a) {
    if (!a) return json_null();
    if (j->kind == API_COMPLETIONS) {
        json_t *o = lp_completions(a, &j->lp_text);
        json_decref(a);
        return o ? o : json_null();
    }
    return json_pack("{s:o, s:n}", "content", a, "refusal");
}

/* ---- OpenAI chat ---- */

static json_t *chat_chunk(struct server *sv, struct job *j, json_t *delta, const char *finish) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:o, s:o}]}", "id", j->id, "object",
                     "chat.completion.chunk", "created", (json_int_t)j->created, "model",
                     model_of(sv), "system_fingerprint", "moestream", "choices", "index", 0, "delta",
                     delta, "finish_reason", finish ? json_string(finish) : json_null());
}

/* lp: the chunk's "logprobs" (stolen), NULL for null */
static json_t *completion_chunk(struct server *sv, struct job *j, const char *s, size_t n,
                                const char *finish, json_t *lp) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:o, s:i, s:o, s:o}]}", "id", j->id, "object",
                     "text_completion", "created", (json_int_t)j->created, "model", model_of(sv),
                     "choices", "text", jstrn(s, n), "index", 0, "logprobs", lp ? lp : json_null(),
                     "finish_reason", finish ? json_string(finish) : json_null());
}

/* ---- Anthropic blocks ---- */

static void anth_close_block(struct job *j) {
    if (j->block_kind == 0) return;
    if (j->stream) {
        if (j->block_kind == 1)
            sse(j, "content_block_delta",
                json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", j->block,
                          "delta", "type", "signature_delta", "signature", ""));
        sse(j, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", j->block));
    }
    j->block_kind = 0;
}

static void anth_open_block(struct job *j, int kind, json_t *block) {
    anth_close_block(j);
    j->block++;
    j->block_kind = kind;
    if (j->stream)
        sse(j, "content_block_start",
            json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", j->block,
                      "content_block", block));
    else
        json_decref(block);
}

/* ---- Responses items ---- */

static json_t *resp_item(struct job *j, bool done) {
    const char *status = done ? "completed" : "in_progress";
    if (j->item_kind == 1)
        return json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}], s:s}", "type", "reasoning", "id", j->item_id,
                         "summary", "content", "type", "reasoning_text", "text",
                         jstrn(j->cur.p, j->cur.len), "status", status);
    json_t *it = json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o, s:[]}]}", "type", "message", "id",
                           j->item_id, "status", status, "role", "assistant", "content", "type",
                           "output_text", "text", jstrn(j->cur.p, j->cur.len), "annotations");
    if (it && j->logprobs >= 0)
        json_object_set_new(json_array_get(json_object_get(it, "content"), 0), "logprobs",
                            j->lp_sent ? json_copy(j->lp_sent) : json_array());
    return it;
}

static json_t *with_seq(struct job *j, const char *type, json_t *o) {
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(j->seq++));
    return o;
}

static void resp_close_item(struct job *j) {
    if (j->item_kind == 0) return;
    const int idx = j->out_index - 1;
    if (j->stream) {
        if (j->item_kind == 1) {
            sse(j, "response.reasoning_text.done",
                with_seq(j, "response.reasoning_text.done",
                         json_pack("{s:s, s:i, s:i, s:o}", "item_id", j->item_id, "output_index", idx,
                                   "content_index", 0, "text", jstrn(j->cur.p, j->cur.len))));
        } else {
            sse(j, "response.output_text.done",
                with_seq(j, "response.output_text.done",
                         json_pack("{s:s, s:i, s:i, s:o, s:o}", "item_id", j->item_id, "output_index",
                                   idx, "content_index", 0, "text", jstrn(j->cur.p, j->cur.len),
                                   "logprobs", j->lp_sent ? json_copy(j->lp_sent) : json_array())));
            json_t *part = json_pack("{s:s, s:o, s:[]}", "type", "output_text", "text", jstrn(j->cur.p, j->cur.len),
                                     "annotations");
            if (part && j->logprobs >= 0)
                json_object_set_new(part, "logprobs", j->lp_sent ? json_copy(j->lp_sent) : json_array());
            sse(j, "response.content_part.done",
                with_seq(j, "response.content_part.done",
                         json_pack("{s:s, s:i, s:i, s:o}", "item_id", j->item_id, "output_index", idx,
                                   "content_index", 0, "part", part)));
        }
        sse(j, "response.output_item.done",
            with_seq(j, "response.output_item.done",
                     json_pack("{s:i, s:o}", "output_index", idx, "item", resp_item(j, true))));
    }
    json_array_append_new(j->items, resp_item(j, true));
    if (j->item_kind == 2) json_array_clear(j->lp_sent); /* the next message item's own */
    j->item_kind = 0;
    j->cur.len = 0;
}

static void resp_open_item(struct job *j, int kind) {
    resp_close_item(j);
    j->item_kind = kind;
    j->cur.len = 0;
    rand_hex(j->item_id, sizeof j->item_id, kind == 1 ? "rs_" : "msg_");
    const int idx = j->out_index++;
    if (!j->stream) return;
    sse(j, "response.output_item.added",
        with_seq(j, "response.output_item.added",
                 json_pack("{s:i, s:o}", "output_index", idx, "item", resp_item(j, false))));
    if (kind == 2) {
        json_t *part = json_pack("{s:s, s:s, s:[]}", "type", "output_text", "text", "", "annotations");
        if (part && j->logprobs >= 0) json_object_set_new(part, "logprobs", json_array());
        sse(j, "response.content_part.added",
            with_seq(j, "response.content_part.added",
                     json_pack("{s:s, s:i, s:i, s:o}", "item_id", j->item_id, "output_index", idx,
                               "content_index", 0, "part", part)));
    }
}

static json_t *resp_object(struct server *sv, struct job *j, const char *status) {
    const json_t *req = j->req;
    json_t *tools = json_object_get(req, "tools");
    if (!json_is_array(tools)) tools = NULL; /* "tools": null echoes as [] */
    json_t *ins = json_object_get(req, "instructions");
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:n, s:s, s:O, s:s, s:O, s:b, s:n, s:s, s:O, s:n}", "id", j->id,
        "object", "response", "created_at", (json_int_t)j->created, "status", status, "error",
        "model", model_of(sv), "output", j->items, "tool_choice", "auto", "tools",
        tools ? tools : json_array(), "parallel_tool_calls", !json_is_false(json_object_get(req, "parallel_tool_calls")),
        "previous_response_id", "truncation",
        "disabled", "instructions", ins ? ins : json_null(), "incomplete_details");
    if (!tools) json_decref(json_object_get(o, "tools")); /* the fresh [] was stolen by O? */
    const json_t *tc = json_object_get(req, "tool_choice");
    if (tc && !json_is_null(tc)) json_object_set(o, "tool_choice", (json_t *)tc);
    json_object_set_new(o, "metadata", json_object());
    /* the text format as requested (json_schema included), else plain text */
    const json_t *tf = json_object_get(json_object_get(req, "text"), "format");
    json_object_set_new(o, "text", json_is_object(tf) ? json_pack("{s:O}", "format", tf)
                                                      : json_pack("{s:{s:s}}", "format", "type", "text"));
    if (!strcmp(status, "incomplete"))
        json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    if (strcmp(status, "in_progress")) json_object_set_new(o, "usage", usage_responses(j));
    return o;
}

/* ---- events ---- */

void fmt_begin(struct server *sv, struct job *j) {
    j->started = true;
    if (!j->stream) return;
    switch (j->kind) {
    case API_CHAT:
        sse(j, NULL, chat_chunk(sv, j, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
        break;
    case API_COMPLETIONS: break;
    case API_MESSAGES:
        sse(j, "message_start",
            json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "type", "message_start",
                      "message", "id", j->id, "type", "message", "role", "assistant", "model",
                      model_of(sv), "content", "stop_reason", "stop_sequence", "usage",
                      usage_anthropic(j, false)));
        break;
    case API_RESPONSES: {
        sse(j, "response.created",
            with_seq(j, "response.created", json_pack("{s:o}", "response", resp_object(sv, j, "in_progress"))));
        sse(j, "response.in_progress",
            with_seq(j, "response.in_progress", json_pack("{s:o}", "response", resp_object(sv, j, "in_progress"))));
        break;
    }
    }
}

void fmt_reasoning(struct server *sv, struct job *j, const char *s, size_t n) {
    ms_buf_put(&j->reasoning, s, n);
    switch (j->kind) {
    case API_CHAT:
        if (j->stream) sse(j, NULL, chat_chunk(sv, j, json_pack("{s:o}", "reasoning_content", jstrn(s, n)), NULL));
        break;
    case API_COMPLETIONS: break;
    case API_MESSAGES:
        if (j->block_kind != 1)
            anth_open_block(j, 1, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""));
        if (j->stream)
            sse(j, "content_block_delta",
                json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index", j->block,
                          "delta", "type", "thinking_delta", "thinking", jstrn(s, n)));
        break;
    case API_RESPONSES:
        if (j->item_kind != 1) resp_open_item(j, 1);
        ms_buf_put(&j->cur, s, n);
        if (j->stream)
            sse(j, "response.reasoning_text.delta",
                with_seq(j, "response.reasoning_text.delta",
                         json_pack("{s:s, s:i, s:i, s:o}", "item_id", j->item_id, "output_index",
                                   j->out_index - 1, "content_index", 0, "delta", jstrn(s, n))));
        break;
    }
}

void fmt_content(struct server *sv, struct job *j, const char *s, size_t n) {
    ms_buf_put(&j->content, s, n);
    if (j->kind == API_RESPONSES && j->item_kind != 2) resp_open_item(j, 2); /* before its entries */
    json_t *lp = lp_take(j);
    switch (j->kind) {
    case API_CHAT:
        if (j->stream) {
            json_t *c = chat_chunk(sv, j, json_pack("{s:o}", "content", jstrn(s, n)), NULL);
            if (lp) json_object_set_new(json_array_get(json_object_get(c, "choices"), 0), "logprobs", lp_choice(j, lp));
            sse(j, NULL, c);
        } else {
            json_decref(lp);
        }
        break;
    case API_COMPLETIONS:
        if (j->stream) sse(j, NULL, completion_chunk(sv, j, s, n, NULL, lp ? lp_choice(j, lp) : NULL));
        else json_decref(lp);
        break;
    case API_MESSAGES:
        if (j->block_kind != 2) anth_open_block(j, 2, json_pack("{s:s, s:s}", "type", "text", "text", ""));
        if (j->stream)
            sse(j, "content_block_delta",
                json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index", j->block,
                          "delta", "type", "text_delta", "text", jstrn(s, n)));
        break;
    case API_RESPONSES:
        ms_buf_put(&j->cur, s, n);
        if (j->stream)
            sse(j, "response.output_text.delta",
                with_seq(j, "response.output_text.delta",
                         json_pack("{s:s, s:i, s:i, s:o, s:o}", "item_id", j->item_id, "output_index",
                                   j->out_index - 1, "content_index", 0, "delta", jstrn(s, n),
                                   "logprobs", lp ? lp : json_array())));
        else
            json_decref(lp);
        break;
    }
}

/* The text a custom tool's call carries: its arguments' "input" string; a
 * value of another type as its JSON text, "" when the model wrote none
 * (other parameters are not the tool's). malloc'd; NULL when out of
 * memory. */
static char *custom_input(const char *args) {
    json_t *o = json_loads(args, 0, NULL);
    const json_t *in = json_object_get(o, "input");
    char *s = json_is_string(in) ? strndup(json_string_value(in), json_string_length(in))
              : in               ? json_dumps(in, JSON_COMPACT | JSON_ENCODE_ANY)
                                 : strdup("");
    json_decref(o);
    return s;
}

/* A Responses call item: function_call {arguments} or custom_tool_call
 * {input}, with its namespace when the tool is in one. */
static json_t *resp_call_item(const char *fc, const char *id, const char *name, const char *ns,
                              const char *input, const char *args, const char *status) {
    json_t *it = json_pack("{s:s, s:s, s:s, s:s}", "type", input ? "custom_tool_call" : "function_call", "id", fc,
                           "call_id", id, "name", name);
    if (!it) return NULL;
    if (ns) json_object_set_new(it, "namespace", json_string(ns));
    json_object_set_new(it, input ? "input" : "arguments", json_string(input ? input : args));
    json_object_set_new(it, "status", json_string(status));
    return it;
}

void fmt_tool_call(struct server *sv, struct job *j, const char *name, const char *args) {
    char id[64];
    rand_hex(id, sizeof id, j->kind == API_MESSAGES ? "toolu_" : "call_");
    const int index = j->n_calls++;
    /* the client's name, namespace and kind of tool (api.c's tool_map) */
    const json_t *m = j->tool_map ? json_object_get(j->tool_map, name) : NULL;
    const char *ns = m ? json_string_value(json_object_get(m, "namespace")) : NULL;
    char *input = m && json_is_true(json_object_get(m, "custom")) ? custom_input(args) : NULL;
    if (m) name = json_string_value(json_object_get(m, "name"));
    /* the chat shape (Anthropic's bodies read name and arguments from it) */
    json_t *call = input ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "custom", "custom", "name", name,
                                     "input", input)
                         : json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name",
                                     name, "arguments", args);
    json_array_append_new(j->calls, call);
    switch (j->kind) {
    case API_CHAT:
        if (j->stream) {
            json_t *d = json_pack("{s:i}", "index", index); /* index first, as OpenAI sends it */
            json_object_update(d, call);
            sse(j, NULL, chat_chunk(sv, j, json_pack("{s:[o]}", "tool_calls", d), NULL));
        }
        break;
    case API_COMPLETIONS: break;
    case API_MESSAGES:
        anth_open_block(j, 3, json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", id, "name", name, "input"));
        if (j->stream)
            sse(j, "content_block_delta",
                json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", j->block,
                          "delta", "type", "input_json_delta", "partial_json", args));
        anth_close_block(j);
        break;
    case API_RESPONSES: {
        resp_close_item(j);
        char fc[64];
        rand_hex(fc, sizeof fc, input ? "ctc_" : "fc_");
        const int idx = j->out_index++;
        if (j->stream) {
            const char *ev = input ? "response.custom_tool_call_input" : "response.function_call_arguments";
            char evd[64], evn[64];
            snprintf(evd, sizeof evd, "%s.delta", ev);
            snprintf(evn, sizeof evn, "%s.done", ev);
            sse(j, "response.output_item.added",
                with_seq(j, "response.output_item.added",
                         json_pack("{s:i, s:o}", "output_index", idx, "item",
                                   resp_call_item(fc, id, name, ns, input ? "" : NULL, "", "in_progress"))));
            sse(j, evd,
                with_seq(j, evd, json_pack("{s:s, s:i, s:s}", "item_id", fc, "output_index", idx, "delta",
                                           input ? input : args)));
            json_t *done = json_pack("{s:s, s:i, s:s}", "item_id", fc, "output_index", idx, input ? "input" : "arguments",
                                     input ? input : args);
            if (!input) json_object_set_new(done, "name", json_string(name));
            sse(j, evn, with_seq(j, evn, done));
        }
        json_t *item = resp_call_item(fc, id, name, ns, input, args, "completed");
        if (j->stream)
            sse(j, "response.output_item.done",
                with_seq(j, "response.output_item.done",
                         json_pack("{s:i, s:O}", "output_index", idx, "item", item)));
        json_array_append_new(j->items, item);
        break;
    }
    }
    free(input);
}

/* The non-streaming reply body (or error). */
static char *final_body(struct server *sv, struct job *j) {
    json_t *o = NULL;
    switch (j->kind) {
    case API_CHAT: {
        json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                                j->content.len || !j->n_calls ? jstrn(j->content.p, j->content.len)
                                                              : json_null());
        if (j->reasoning.len)
            json_object_set_new(msg, "reasoning_content", jstrn(j->reasoning.p, j->reasoning.len));
        if (j->n_calls) json_object_set(msg, "tool_calls", j->calls);
        o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:o, s:n, s:s}], s:o}", "id", j->id, "object",
                      "chat.completion", "created", (json_int_t)j->created, "model", model_of(sv),
                      "system_fingerprint", "moestream", "choices", "index", 0, "message", msg,
                      "logprobs", "finish_reason", openai_finish(j), "usage", usage_openai(j));
        if (o && j->logprobs >= 0)
            json_object_set_new(json_array_get(json_object_get(o, "choices"), 0), "logprobs",
                                lp_choice(j, j->lp_sent ? json_copy(j->lp_sent) : json_array()));
        break;
    }
    case API_COMPLETIONS:
        o = json_pack("{s:s, s:s, s:I, s:s, s:[{s:o, s:i, s:n, s:s}], s:o}", "id", j->id, "object",
                      "text_completion", "created", (json_int_t)j->created, "model", model_of(sv),
                      "choices", "text", jstrn(j->content.p, j->content.len), "index", 0, "logprobs",
                      "finish_reason", openai_finish(j), "usage", usage_openai(j));
        /* the offsets of the whole text again */
        ms_buf_free(&j->lp_text.raw);
        j->lp_text = (struct lp_text){0};
        if (o && j->logprobs >= 0)
            json_object_set_new(json_array_get(json_object_get(o, "choices"), 0), "logprobs",
                                lp_choice(j, j->lp_sent ? json_copy(j->lp_sent) : json_array()));
        break;
    case API_MESSAGES: {
        json_t *content = json_array();
        if (j->reasoning.len)
            json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                     jstrn(j->reasoning.p, j->reasoning.len), "signature", ""));
        if (j->content.len)
            json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                     jstrn(j->content.p, j->content.len)));
        for (size_t i = 0; i < json_array_size(j->calls); i++) {
            const json_t *c = json_array_get(j->calls, i);
            const json_t *fn = json_object_get(c, "function");
            json_t *input = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
            json_array_append_new(content, json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id",
                                                     json_object_get(c, "id"), "name",
                                                     json_object_get(fn, "name"), "input",
                                                     input ? input : json_object()));
        }
        o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", j->id, "type", "message", "role",
                      "assistant", "model", model_of(sv), "content", content, "stop_reason",
                      anthropic_stop(j), "stop_sequence",
                      j->stop_seq ? json_string(j->stop_seq) : json_null(), "usage",
                      usage_anthropic(j, true));
        break;
    }
    case API_RESPONSES:
        o = resp_object(sv, j, !strcmp(j->finish ? j->finish : "", "length") ? "incomplete" : "completed");
        break;
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

void fmt_end(struct server *sv, struct job *j) {
    /* a shutdown is retryable elsewhere or later: 503, as for the queue */
    const int err_status = j->error && strstr(j->error, "shutting down") ? 503 : 500;
    if (j->error && !j->started) {
        /* nothing was sent: an error reply (streams too: headers are not out yet
         * only when the caller waits; a stream gets an error event) */
        struct http_err e = {.status = err_status};
        snprintf(e.msg, sizeof e.msg, "%s", j->error);
        if (j->stream) {
            char *body = api_error_body(j->kind, &e);
            struct ms_buf b = {0};
            if (j->kind == API_MESSAGES) ms_buf_puts(&b, "event: error\n");
            ms_buf_printf(&b, "data: %s\n\n", body ? body : "{}");
            job_emit(j, b.p, b.len);
            ms_buf_free(&b);
            free(body);
        } else {
            pthread_mutex_lock(&j->mu);
            j->status = e.status;
            j->body = api_error_body(j->kind, &e);
            pthread_mutex_unlock(&j->mu);
        }
        goto done;
    }
    if (j->error) {
        struct http_err e = {.status = err_status};
        snprintf(e.msg, sizeof e.msg, "%s", j->error);
        if (j->stream) {
            char *body = api_error_body(j->kind, &e);
            struct ms_buf b = {0};
            if (j->kind == API_MESSAGES || j->kind == API_RESPONSES) ms_buf_puts(&b, "event: error\n");
            ms_buf_printf(&b, "data: %s\n\n", body ? body : "{}");
            job_emit(j, b.p, b.len);
            ms_buf_free(&b);
            free(body);
            goto done;
        }
        pthread_mutex_lock(&j->mu);
        j->status = e.status;
        j->body = api_error_body(j->kind, &e);
        pthread_mutex_unlock(&j->mu);
        goto done;
    }
    if (j->kind == API_MESSAGES) anth_close_block(j);
    if (j->kind == API_RESPONSES) resp_close_item(j);
    if (j->stream) {
        switch (j->kind) {
        case API_CHAT:
            sse(j, NULL, chat_chunk(sv, j, json_object(), openai_finish(j)));
            if (j->include_usage) {
                json_t *u = chat_chunk(sv, j, json_object(), NULL);
                json_object_set_new(u, "choices", json_array());
                json_object_set_new(u, "usage", usage_openai(j));
                sse(j, NULL, u);
            }
            job_emit(j, "data: [DONE]\n\n", 14);
            break;
        case API_COMPLETIONS:
            sse(j, NULL, completion_chunk(sv, j, "", 0, openai_finish(j), NULL));
            if (j->include_usage) {
                json_t *u = completion_chunk(sv, j, "", 0, NULL, NULL);
                json_object_set_new(u, "choices", json_array());
                json_object_set_new(u, "usage", usage_openai(j));
                sse(j, NULL, u);
            }
            job_emit(j, "data: [DONE]\n\n", 14);
            break;
        case API_MESSAGES:
            sse(j, "message_delta",
                json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason",
                          anthropic_stop(j), "stop_sequence",
                          j->stop_seq ? json_string(j->stop_seq) : json_null(), "usage",
                          usage_anthropic(j, true)));
            sse(j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
            break;
        case API_RESPONSES: {
            const bool inc = !strcmp(j->finish ? j->finish : "", "length");
            const char *ev = inc ? "response.incomplete" : "response.completed";
            sse(j, ev, with_seq(j, ev, json_pack("{s:o}", "response", resp_object(sv, j, inc ? "incomplete" : "completed"))));
            break;
        }
        }
    } else {
        char *body = final_body(sv, j);
        pthread_mutex_lock(&j->mu);
        j->status = body ? 200 : 500;
        j->body = body;
        pthread_mutex_unlock(&j->mu);
    }
done:
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}
