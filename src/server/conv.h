/*
 * conv.h - internal to the server: a conversation under construction,
 * what api.c's three dialects parse a request into before the chat
 * template renders it, and the tools part of that parse (tools.c).
 */
#ifndef MS_SERVER_CONV_H
#define MS_SERVER_CONV_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/internal.h"

struct conv {
    struct ms_chat_message *m;
    struct ms_buf *texts; /* owned content per message */
    struct ms_buf *reasons;
    json_t **calls;    /* owned tool_calls arrays */
    size_t n, cap;
    json_t *tools;     /* owned, OpenAI chat shape */
    json_t *tool_map;  /* owned: the job's tool_map (NULL: none yet) */
    char *force;       /* owned: the job's force_call (NULL: the model chooses) */
    json_t *names;     /* owned: the names the model sees so far (an object used as a set) */
    bool one_call;     /* the job's one_call */
};

/* A new message of role `role` (a string literal); its content buffer is
 * c->texts[c->n - 1]. Errors: 500 out of memory. */
int conv_add(struct conv *c, const char *role, struct http_err *e);
/* Adds a call of the tool the model sees as `name` (args_obj: its
 * arguments, an object) to message i, in the chat shape the template
 * renders. Errors: 500 out of memory. */
int add_call(struct conv *c, size_t i, const char *id, const char *name, json_t *args_obj,
             struct http_err *e);

/* ---- tools.c ---- */

/* The request's tools and tool_choice in dialect k (chat, messages or
 * responses) into c: c->tools in the chat shape the template renders,
 * c->tool_map for tools the model sees under another name or shape,
 * c->names, c->force and c->one_call. Errors: 400 naming the field. */
int tools_parse(const json_t *req, enum api_kind k, struct conv *c, struct http_err *e);
/* A call of the client's tool `name` (in namespace ns, NULL: none) from the
 * history, added to message i under the name the model sees (a custom
 * tool's args: {"input": its text}). */
int add_history_call(struct conv *c, size_t i, const char *id, const char *ns, const char *name,
                     json_t *args, struct http_err *e);

#endif
