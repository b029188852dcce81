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
 * Not rendered (yet): tool schemas in the system prompt, assistant tool calls
 * (DSML), response_format, and the reasoning_effort preamble.
 * The special markers are plain text here; tokenize the result with
 * parse_special = true and without an extra BOS.
 */
#ifndef MS_TEXT_CHAT_TEMPLATE_H
#define MS_TEXT_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

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

#endif
