/*
 * dsml.h - incremental parser of DeepSeek V4's generated output: reasoning
 * (up to "</think>"), answer text, and DSML tool calls, as the chat template
 * (chat_template.h) asks the model to write them:
 *
 *   reasoning</think>answer\n\n<｜DSML｜tool_calls>
 *   <｜DSML｜invoke name="NAME">
 *   <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>
 *   </｜DSML｜invoke>
 *   </｜DSML｜tool_calls>
 *
 * Bytes are fed in any split; the events are the same whatever the split,
 * up to how text is cut into deltas (adjacent text events of one kind
 * concatenate to the same text). Text that might be the start of a marker
 * is held back until it is decided, so markup never reaches a text event;
 * whitespace before a tool-call block belongs to the block (the template
 * writes "\n\n" there), not to the answer.
 *
 * A tool-call block that starts before "</think>" closes the reasoning at
 * the block. Each invoke becomes one MS_DSML_EV_TOOL_CALL when its closing
 * tag arrives, with its arguments as a JSON object text: string="true"
 * values as strings, as they are written; string="false" values parsed as
 * JSON (a value that is not JSON is kept as a string). Malformed markup
 * inside a block (anything but whitespace between tags, a bad attribute, a
 * missing close) gives one MS_DSML_EV_ERROR and the parser stops; so does
 * ms_dsml_finish inside an unclosed block. After "</｜DSML｜tool_calls>" the
 * turn is over (MS_DSML_EV_TOOLS_END, carrying the block's exact bytes for
 * replay) and later bytes are ignored.
 */
#ifndef MS_TEXT_DSML_H
#define MS_TEXT_DSML_H

#include <stdbool.h>
#include <stddef.h>

enum ms_dsml_ev_type {
    MS_DSML_EV_REASONING, /* text: reasoning bytes */
    MS_DSML_EV_CONTENT,   /* text: answer bytes */
    MS_DSML_EV_TOOL_CALL, /* index, name, args (JSON object text) */
    MS_DSML_EV_TOOLS_END, /* text: the block's exact bytes, leading whitespace included */
    MS_DSML_EV_ERROR,     /* text: what was wrong (one line) */
};

struct ms_dsml_ev {
    enum ms_dsml_ev_type type;
    const char *text; /* not NUL-terminated for REASONING/CONTENT/TOOLS_END */
    size_t len;
    int index;        /* TOOL_CALL: 0, 1, ... within the block */
    const char *name; /* TOOL_CALL: NUL-terminated */
    const char *args; /* TOOL_CALL: NUL-terminated JSON object */
};

/* Receives each event; pointers are valid during the call only. */
typedef void (*ms_dsml_cb)(void *ctx, const struct ms_dsml_ev *ev);

enum ms_dsml_state {
    MS_DSML_REASONING_STATE,
    MS_DSML_CONTENT_STATE,
    MS_DSML_TOOLS_STATE,
    MS_DSML_DONE_STATE,  /* the tool-call block closed */
    MS_DSML_ERROR_STATE,
};

struct ms_dsml {
    enum ms_dsml_state state;
    char *buf;       /* undecided bytes (held back text, or the open block) */
    size_t len, cap;
    size_t block_ws; /* TOOLS: leading whitespace bytes at buf's start */
    size_t scan;     /* TOOLS: bytes of buf already parsed into calls */
    int n_calls;
    bool block_in_reasoning; /* TOOLS, DONE: the block opened before "</think>"
                                (which the model then never wrote) */
    bool oom;
    ms_dsml_cb cb;
    void *ctx;
};

/* Starts a parser: in reasoning (the prompt ended with "<think>") or in the
 * answer. */
void ms_dsml_init(struct ms_dsml *p, bool in_reasoning, ms_dsml_cb cb, void *ctx);
/* Feeds bytes; events go to the callback. Returns the state afterwards. An
 * allocation failure is reported as an MS_DSML_EV_ERROR. */
enum ms_dsml_state ms_dsml_feed(struct ms_dsml *p, const char *bytes, size_t n);
/* The output ended: held-back text is released; an open block is an error. */
enum ms_dsml_state ms_dsml_finish(struct ms_dsml *p);
void ms_dsml_free(struct ms_dsml *p);

/* Most bytes one open tool-call block may hold before it is an error. */
#define MS_DSML_MAX_BLOCK (4u << 20)

#endif
