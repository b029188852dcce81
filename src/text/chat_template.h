/*
 * chat_template.h - renders a conversation into the prompt text DeepSeek V4
 * was trained on: its published Jinja chat template (DeepSeek-V4
 * tokenizer_config.json, as llama.cpp ships it in
 * models/templates/deepseek-ai-DeepSeek-V4.jinja), without tools:
 *
 *   BOS, then every system message's content joined by "\n\n";
 *   user (and developer) messages: "<｜User｜>" + content, consecutive ones
 *     joined by "\n\n" under one marker;
 *   tool results: "<tool_result>" + content + "</tool_result>", inside the
 *     user block as a user message would be;
 *   assistant messages: "<｜Assistant｜>", then "<think>" + reasoning +
 *     "</think>" when thinking is on and the message comes after the last
 *     user/tool message (or any tool message exists), else just "</think>"
 *     (V4 drops earlier reasoning), then content, then "<｜end▁of▁sentence｜>";
 *   generation prompt: "<｜Assistant｜>" + ("<think>" if thinking else
 *     "</think>").
 *
 * ms_chat_render_ex adds what the template does with tools (their schemas in
 * the system prompt, assistant tool calls as DSML blocks), response_format,
 * the reasoning_effort "max" preamble, and tells which byte ranges came from
 * the messages (to be tokenized as plain text, never as control tokens).
 * ms_chat_render's result is plain text with the markers inside; tokenize it
 * with parse_special = true and without an extra BOS.
 */
#ifndef MS_TEXT_CHAT_TEMPLATE_H
#define MS_TEXT_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/err.h"

#define MS_CHAT_BOS "<｜begin▁of▁sentence｜>"
#define MS_CHAT_EOS "<｜end▁of▁sentence｜>"
#define MS_CHAT_USER "<｜User｜>"
#define MS_CHAT_ASSISTANT "<｜Assistant｜>"
#define MS_CHAT_THINK "<think>"
#define MS_CHAT_END_THINK "</think>"

struct ms_chat_msg {
    const char *role;      /* "system", "user", "developer", "assistant" or "tool" */
    const char *content;   /* NULL renders as "" */
    const char *reasoning; /* assistant only: reasoning_content, or NULL */
};

/*
 * Renders msgs[0..n) (see the file comment). thinking selects V4's thinking
 * mode. On success *out is a malloc'd NUL-terminated string of *len bytes
 * (the caller frees it). Errors: an unknown role, OOM.
 */
int ms_chat_render(const struct ms_chat_msg *msgs, size_t n, bool add_generation_prompt,
                   bool thinking, char **out, size_t *len, ms_err *err);

#define MS_DSML "｜DSML｜"
#define MS_DSML_CALLS_OPEN "<" MS_DSML "tool_calls>"
#define MS_DSML_CALLS_CLOSE "</" MS_DSML "tool_calls>"
#define MS_DSML_INVOKE_OPEN "<" MS_DSML "invoke"
#define MS_DSML_INVOKE_CLOSE "</" MS_DSML "invoke>"
#define MS_DSML_PARAM_OPEN "<" MS_DSML "parameter"
#define MS_DSML_PARAM_CLOSE "</" MS_DSML "parameter>"

/* One message for ms_chat_render_ex (OpenAI chat shape, already flattened:
 * content is a string). */
struct ms_chat_message {
    const char *role;         /* "system", "user", "developer", "assistant", "tool" */
    const char *content;      /* NULL renders as "" */
    const char *reasoning;    /* assistant: reasoning_content, or NULL */
    const json_t *tool_calls; /* assistant: NULL or an array of OpenAI tool calls
                                 {"id", "function": {"name", "arguments"}} where
                                 arguments is an object or a JSON text of one */
};

/*
 * Exact replay of sampled tool calls: called for each assistant message with
 * tool calls and its reasoning (NULL: none); returns the bytes the model
 * sampled for that block ("\n\n<｜DSML｜tool_calls>...</｜DSML｜tool_calls>")
 * and their length, or NULL to render the calls from their JSON as the
 * template does. *stored: when the message carries no reasoning (NULL or
 * ""), the reasoning the block was sampled after, rendered in its place
 * (clients that drop reasoning_content would otherwise change the prompt
 * the model sampled from); NULL to keep the message's. *in_reasoning: the
 * model opened the block inside that very reasoning (the message's, or
 * *stored) with no "</think>", so a message rendered with it and no answer
 * text gets none either. The bytes stay owned by the callee and must live
 * until the render returns.
 */
typedef const char *(*ms_chat_replay_fn)(void *ctx, const json_t *tool_calls, const char *reasoning,
                                         size_t *len, bool *in_reasoning, const char **stored);

struct ms_chat_opts {
    bool add_generation_prompt;
    bool thinking;               /* the template's `thinking` */
    bool effort_max;             /* reasoning_effort == "max": the preamble (thinking only) */
    const json_t *tools;         /* NULL or an array of {"type": "function", "function": {...}} */
    const json_t *response_format; /* NULL or the request's response_format object */
    ms_chat_replay_fn replay;    /* NULL: always render tool calls from JSON */
    void *replay_ctx;
};

/* A byte range [off, off + len) of the rendering. */
struct ms_chat_span {
    size_t off, len;
};

struct ms_chat_out {
    char *text;                 /* malloc'd, NUL-terminated */
    size_t len;
    struct ms_chat_span *plain; /* malloc'd: ranges that came from message, tool or
                                   schema data, ascending, not overlapping */
    size_t n_plain;
};

/*
 * Renders msgs[0..n) as DeepSeek V4's template does, tools included (see the
 * file comment). Every rule follows the template: tool schemas are each
 * `function` object as JSON with ", " / ": " separators and keys in their
 * order (the template's tojson), appended to the system prompt under the
 * template's "## Tools" header; past reasoning is kept when tools are given,
 * after the last user/tool message, or when any tool result exists; tool
 * calls render as "\n\n<｜DSML｜tool_calls>\n" + one invoke per call with one
 * parameter per argument (strings as-is with string="true", other values as
 * JSON with string="false") + "</｜DSML｜tool_calls>". Errors: an unknown
 * role, a tool call whose arguments are not a JSON object, OOM. out is freed
 * with ms_chat_out_free.
 */
int ms_chat_render_ex(const struct ms_chat_message *msgs, size_t n, const struct ms_chat_opts *o,
                      struct ms_chat_out *out, ms_err *err);
void ms_chat_out_free(struct ms_chat_out *out);

/*
 * Appends v as the template engine's tojson writes it (JSON.stringify with
 * ", " and ": " separators: keys in order, non-ASCII kept, control characters
 * as \u00xx, integral reals without a fraction, other reals in the shortest
 * form that reads back the same). Returns a malloc'd string or NULL on OOM.
 */
char *ms_chat_tojson(const json_t *v);

/* One run of a rendering: the template's scaffolding (markers, tokenized
 * with special-token parsing) or data from the messages (plain text). */
struct ms_chat_seg {
    size_t off, len; /* bytes of the rendered string */
    bool scaffold;
};

/*
 * ms_chat_render with the rendering's runs: *segs (malloc'd, *n_segs
 * entries, the caller frees it) cover [0, *len) in order: the plain spans of
 * ms_chat_render_ex as content runs, the scaffolding between them split so
 * that every marker (BOS, EOS, User, Assistant, <think>, </think>) starts a
 * run of its own (a token boundary where a session can be resumed).
 */
int ms_chat_render_segs(const struct ms_chat_msg *msgs, size_t n, bool add_generation_prompt,
                        bool thinking, char **out, size_t *len, struct ms_chat_seg **segs,
                        size_t *n_segs, ms_err *err);

struct ms_tokenizer;
/*
 * Token ids of a rendering from byte `from` on (a run start; 0 for all):
 * scaffold runs with special-token parsing, content runs as plain text (no
 * special token whatever they contain, USER_DEFINED ones included). No BOS
 * is added (the rendering starts with BOS text). *ids malloc'd (NULL when
 * *n_ids is 0). Errors: `from` inside a run, OOM.
 */
int ms_chat_encode(const struct ms_tokenizer *t, const char *text, const struct ms_chat_seg *segs,
                   size_t n_segs, size_t from, int32_t **ids, size_t *n_ids, ms_err *err);

#endif
