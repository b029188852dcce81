/*
 * chat_template.c - DeepSeek V4's chat template in C (see chat_template.h;
 * the rules follow models/templates/deepseek-ai-DeepSeek-V4.jinja line by
 * line, with drop_thinking at its default, true, and no tools).
 */
#include "text/chat_template.h"

#include <stdlib.h>
#include <string.h>

struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void put(struct sbuf *b, const char *s) {
    const size_t n = s ? strlen(s) : 0;
    if (b->oom || n == 0) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static bool is(const char *role, const char *name) { return !strcmp(role, name); }

static bool user_like(const char *role) { return is(role, "user") || is(role, "developer"); }

int ms_chat_render(const struct ms_chat_msg *msgs, size_t n, bool add_generation_prompt,
                   bool thinking, char **out, size_t *len, ms_err *err) {
    *out = NULL;
    *len = 0;
    /* roles, the last user/tool message, whether any tool result exists */
    size_t last_user = (size_t)-1;
    bool has_tool_results = false;
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role ? msgs[i].role : "";
        if (!user_like(r) && !is(r, "tool") && !is(r, "assistant") && !is(r, "system"))
            return ms_err_set(err, "chat template: message %zu has unknown role '%s'", i, r);
        if (user_like(r) || is(r, "tool")) last_user = i;
        if (is(r, "tool")) has_tool_results = true;
    }
    struct sbuf b = {0};
    put(&b, MS_CHAT_BOS);
    bool first_sp = true; /* system messages, wherever they are, come first */
    for (size_t i = 0; i < n; i++) {
        if (!is(msgs[i].role, "system")) continue;
        if (!first_sp) put(&b, "\n\n");
        put(&b, msgs[i].content);
        first_sp = false;
    }
    bool in_user = false;
    for (size_t i = 0; i < n; i++) {
        const struct ms_chat_msg *m = &msgs[i];
        if (user_like(m->role) || is(m->role, "tool")) {
            put(&b, in_user ? "\n\n" : MS_CHAT_USER);
            in_user = true;
            if (is(m->role, "tool")) put(&b, "<tool_result>");
            put(&b, m->content);
            if (is(m->role, "tool")) put(&b, "</tool_result>");
        } else if (is(m->role, "assistant")) {
            in_user = false;
            put(&b, MS_CHAT_ASSISTANT);
            const bool after_last_user = last_user == (size_t)-1 || i > last_user;
            if (thinking && (after_last_user || has_tool_results)) {
                put(&b, MS_CHAT_THINK);
                put(&b, m->reasoning);
            }
            put(&b, MS_CHAT_END_THINK);
            put(&b, m->content);
            put(&b, MS_CHAT_EOS);
        }
    }
    if (add_generation_prompt) {
        put(&b, MS_CHAT_ASSISTANT);
        put(&b, thinking ? MS_CHAT_THINK : MS_CHAT_END_THINK);
    }
    if (b.oom) {
        free(b.p);
        return ms_err_set(err, "chat template: out of memory");
    }
    *out = b.p;
    *len = b.len;
    return 0;
}
