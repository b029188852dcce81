/*
 * dsml.c - incremental parser of reasoning, answer and DSML tool calls (see
 * dsml.h). All matching is on whole-buffer byte strings: the undecided bytes
 * are kept in one buffer and re-examined after each feed, so a split inside
 * a marker or a UTF-8 character behaves as if the bytes had come together.
 */
#include "text/dsml.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/utf8.h"

#define S_END_THINK "</think>"

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void ms_dsml_init(struct ms_dsml *p, bool in_reasoning, ms_dsml_cb cb, void *ctx) {
    memset(p, 0, sizeof *p);
    p->state = in_reasoning ? MS_DSML_REASONING_STATE : MS_DSML_CONTENT_STATE;
    p->cb = cb;
    p->ctx = ctx;
}

void ms_dsml_free(struct ms_dsml *p) {
    free(p->buf);
    p->buf = NULL;
    p->len = p->cap = 0;
}

static void emit_text(struct ms_dsml *p, enum ms_dsml_ev_type t, const char *s, size_t n) {
    if (n == 0) return;
    const struct ms_dsml_ev ev = {.type = t, .text = s, .len = n};
    p->cb(p->ctx, &ev);
}

static void fail(struct ms_dsml *p, const char *msg) {
    const struct ms_dsml_ev ev = {.type = MS_DSML_EV_ERROR, .text = msg, .len = strlen(msg)};
    p->state = MS_DSML_ERROR_STATE;
    p->cb(p->ctx, &ev);
}

/* Drops buf[0..n). */
static void consume(struct ms_dsml *p, size_t n) {
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
}

static const char *find(const char *h, size_t hn, const char *needle) {
    const size_t nn = strlen(needle);
    if (nn > hn) return NULL;
    return memmem(h, hn, needle, nn);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of m. */
static size_t partial_suffix(const char *s, size_t n, const char *m) {
    const size_t mn = strlen(m);
    for (size_t k = mn - 1 < n ? mn - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, m, k)) return k;
    return 0;
}

/* Starts the tool-call block at buf[at] (whitespace before it at buf[ws..at)). */
static void open_block(struct ms_dsml *p, size_t ws) {
    consume(p, ws);
    p->state = MS_DSML_TOOLS_STATE;
    p->block_ws = 0;
    while (p->block_ws < p->len && is_ws(p->buf[p->block_ws])) p->block_ws++;
    p->scan = p->block_ws + strlen(MS_DSML_CALLS_OPEN);
    p->n_calls = 0;
}

/* Reads ` name="VALUE"` at *s (after optional whitespace); VALUE must not
 * contain a quote. Returns a malloc'd VALUE or NULL. */
static char *attr(const char **s, const char *end, const char *name) {
    const char *q = *s;
    while (q < end && is_ws(*q)) q++;
    const size_t nn = strlen(name);
    if ((size_t)(end - q) < nn + 2 || memcmp(q, name, nn) || q[nn] != '=' || q[nn + 1] != '"')
        return NULL;
    q += nn + 2;
    const char *close = memchr(q, '"', (size_t)(end - q));
    if (!close) return NULL;
    char *v = strndup(q, (size_t)(close - q));
    *s = close + 1;
    return v;
}

/* Parses one complete invoke s[0..n) ("<｜DSML｜invoke ...</｜DSML｜invoke>").
 * Returns 0 and fills *name / *args (malloc'd), or -1 with *why. */
static int parse_invoke(const char *s, size_t n, char **name, char **args, const char **why) {
    const char *end = s + n - strlen(MS_DSML_INVOKE_CLOSE);
    const char *q = s + strlen(MS_DSML_INVOKE_OPEN);
    *name = attr(&q, end, "name");
    *args = NULL;
    if (!*name || !**name || q >= end || *q != '>') {
        *why = "tool call: malformed invoke tag";
        goto bad;
    }
    q++;
    json_t *obj = json_object();
    for (;;) {
        while (q < end && is_ws(*q)) q++;
        if (q == end) break;
        const size_t po = strlen(MS_DSML_PARAM_OPEN);
        if ((size_t)(end - q) < po || memcmp(q, MS_DSML_PARAM_OPEN, po)) {
            *why = "tool call: unexpected text inside invoke";
            json_decref(obj);
            goto bad;
        }
        q += po;
        char *key = attr(&q, end, "name");
        char *str = NULL;
        const char *q2 = q;
        if (key) str = attr(&q2, end, "string");
        if (str) q = q2;
        const char *close = q < end && *q == '>' ? find(q + 1, (size_t)(end - q - 1), MS_DSML_PARAM_CLOSE)
                                                 : NULL;
        if (!key || !*key || !close || (str && strcmp(str, "true") && strcmp(str, "false"))) {
            free(key);
            free(str);
            *why = "tool call: malformed parameter";
            json_decref(obj);
            goto bad;
        }
        const char *v = q + 1;
        const size_t vn = (size_t)(close - v);
        json_t *val = NULL;
        if (!str || !strcmp(str, "false")) val = json_loadb(v, vn, JSON_DECODE_ANY, NULL);
        /* text for the client, who sends it back: no NUL (ms_json_client_text) */
        if (!val) val = ms_json_client_text(v, vn);
        json_t *k = ms_json_text(key, strlen(key));
        if (!val || !k || json_object_set_new(obj, json_string_value(k), val)) {
            json_decref(k);
            free(key);
            free(str);
            json_decref(obj);
            *why = "tool call: out of memory";
            goto bad;
        }
        json_decref(k);
        free(key);
        free(str);
        q = close + strlen(MS_DSML_PARAM_CLOSE);
    }
    *args = json_dumps(obj, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(obj);
    if (!*args) {
        *why = "tool call: out of memory";
        goto bad;
    }
    return 0;
bad:
    free(*name);
    *name = NULL;
    return -1;
}

/* Valid-UTF-8 name for the event. */
static char *clean_name(const char *s) {
    json_t *j = ms_json_text(s, strlen(s));
    char *r = j ? strdup(json_string_value(j)) : NULL;
    json_decref(j);
    return r;
}

/* TOOLS: parses what complete invokes the buffer holds. */
static void scan_block(struct ms_dsml *p) {
    const size_t open_len = strlen(MS_DSML_CALLS_OPEN);
    if (p->len < p->block_ws + open_len) return;
    for (;;) {
        size_t i = p->scan;
        while (i < p->len && is_ws(p->buf[i])) i++;
        const char *s = p->buf + i;
        const size_t n = p->len - i;
        const char *cc = MS_DSML_CALLS_CLOSE, *io = MS_DSML_INVOKE_OPEN;
        if (n >= strlen(cc) && !memcmp(s, cc, strlen(cc))) {
            const size_t total = i + strlen(cc);
            const struct ms_dsml_ev ev = {.type = MS_DSML_EV_TOOLS_END, .text = p->buf, .len = total};
            p->state = MS_DSML_DONE_STATE;
            p->cb(p->ctx, &ev);
            consume(p, total);
            return;
        }
        const size_t k = n < strlen(io) ? n : strlen(io);
        const size_t kc = n < strlen(cc) ? n : strlen(cc);
        if (n == 0 || (n < strlen(io) && !memcmp(s, io, k)) || (n < strlen(cc) && !memcmp(s, cc, kc)))
            return; /* wait for more */
        /* not a prefix of either tag (else we waited above): must be an invoke */
        const size_t lio = strlen(io);
        if (n < lio || memcmp(s, io, lio) || (n > lio && !is_ws(s[lio]))) {
            fail(p, "tool call: unexpected text in the tool-call block");
            return;
        }
        const char *close = find(s, n, MS_DSML_INVOKE_CLOSE);
        if (!close) {
            /* an invoke must not hold another block's or invoke's opening */
            if (find(s + 1, n - 1, MS_DSML_INVOKE_OPEN) || find(s, n, MS_DSML_CALLS_CLOSE))
                fail(p, "tool call: invoke not closed");
            else if (p->len > MS_DSML_MAX_BLOCK)
                fail(p, "tool call: block too long");
            return;
        }
        const size_t inv_len = (size_t)(close - s) + strlen(MS_DSML_INVOKE_CLOSE);
        char *name = NULL, *args = NULL;
        const char *why = NULL;
        /* the same test as while waiting for the close, so the verdict does
         * not depend on how the bytes were split */
        if (find(s + 1, inv_len - 1, MS_DSML_INVOKE_OPEN) || find(s, inv_len, MS_DSML_CALLS_CLOSE)) {
            fail(p, "tool call: invoke not closed");
            return;
        }
        if (parse_invoke(s, inv_len, &name, &args, &why)) {
            fail(p, why);
            return;
        }
        char *cname = clean_name(name);
        if (!cname) {
            free(name);
            free(args);
            fail(p, "tool call: out of memory");
            return;
        }
        const struct ms_dsml_ev ev = {
            .type = MS_DSML_EV_TOOL_CALL, .index = p->n_calls++, .name = cname, .args = args};
        p->cb(p->ctx, &ev);
        free(cname);
        free(name);
        free(args);
        p->scan = i + inv_len;
    }
}

static void step(struct ms_dsml *p) {
    for (;;) {
        if (p->state == MS_DSML_REASONING_STATE) {
            const char *et = find(p->buf, p->len, S_END_THINK);
            const char *tc = find(p->buf, p->len, MS_DSML_CALLS_OPEN);
            if (et && (!tc || et < tc)) {
                emit_text(p, MS_DSML_EV_REASONING, p->buf, (size_t)(et - p->buf));
                consume(p, (size_t)(et - p->buf) + strlen(S_END_THINK));
                p->state = MS_DSML_CONTENT_STATE;
                continue;
            }
            if (tc) {
                size_t ws = (size_t)(tc - p->buf);
                while (ws > 0 && is_ws(p->buf[ws - 1])) ws--;
                emit_text(p, MS_DSML_EV_REASONING, p->buf, ws);
                open_block(p, ws);
                p->block_in_reasoning = true;
                continue;
            }
            size_t h = partial_suffix(p->buf, p->len, S_END_THINK);
            const size_t h2 = partial_suffix(p->buf, p->len, MS_DSML_CALLS_OPEN);
            if (h2 > h) h = h2;
            /* whitespace may still turn out to lead a tool-call block */
            size_t keep = p->len - h;
            while (keep > 0 && is_ws(p->buf[keep - 1])) keep--;
            emit_text(p, MS_DSML_EV_REASONING, p->buf, keep);
            consume(p, keep);
            return;
        }
        if (p->state == MS_DSML_CONTENT_STATE) {
            const char *tc = find(p->buf, p->len, MS_DSML_CALLS_OPEN);
            if (tc) {
                size_t ws = (size_t)(tc - p->buf);
                while (ws > 0 && is_ws(p->buf[ws - 1])) ws--;
                emit_text(p, MS_DSML_EV_CONTENT, p->buf, ws);
                open_block(p, ws);
                continue;
            }
            size_t keep = p->len - partial_suffix(p->buf, p->len, MS_DSML_CALLS_OPEN);
            while (keep > 0 && is_ws(p->buf[keep - 1])) keep--;
            emit_text(p, MS_DSML_EV_CONTENT, p->buf, keep);
            consume(p, keep);
            return;
        }
        if (p->state == MS_DSML_TOOLS_STATE) scan_block(p);
        return;
    }
}

enum ms_dsml_state ms_dsml_feed(struct ms_dsml *p, const char *bytes, size_t n) {
    if (p->state == MS_DSML_DONE_STATE || p->state == MS_DSML_ERROR_STATE || n == 0)
        return p->state;
    if (p->len + n > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + n) cap *= 2;
        char *nb = realloc(p->buf, cap);
        if (!nb) {
            fail(p, "out of memory");
            return p->state;
        }
        p->buf = nb;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, bytes, n);
    p->len += n;
    step(p);
    return p->state;
}

/* Of the n held-back bytes at the end of the output, those that are text:
 * all, unless they end in a cut-off block opening ("<｜" at least, which
 * text does not hold; the output ran out of tokens inside the marker),
 * which goes with the whitespace before it. */
static size_t held_text(const char *s, size_t n) {
    const size_t h = partial_suffix(s, n, MS_DSML_CALLS_OPEN);
    if (h < strlen("<" "｜")) return n;
    size_t keep = n - h;
    while (keep > 0 && is_ws(s[keep - 1])) keep--;
    return keep;
}

enum ms_dsml_state ms_dsml_finish(struct ms_dsml *p) {
    switch (p->state) {
    case MS_DSML_REASONING_STATE: emit_text(p, MS_DSML_EV_REASONING, p->buf, held_text(p->buf, p->len)); break;
    case MS_DSML_CONTENT_STATE: emit_text(p, MS_DSML_EV_CONTENT, p->buf, held_text(p->buf, p->len)); break;
    case MS_DSML_TOOLS_STATE: fail(p, "tool call: the output ended inside a tool-call block"); break;
    default: break;
    }
    p->len = 0;
    return p->state;
}
