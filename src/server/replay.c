/*
 * replay.c - exact replay of sampled tool calls: each tool-call id maps to
 * the bytes the model sampled for its block, so that a history carrying
 * the calls back renders as the live session (or a checkpoint) holds it,
 * not as the template would re-serialise the calls' JSON.
 *
 * A block is replayed only for the calls it was sampled as: an entry holds
 * the calls' ids and their signature (names and canonical arguments), and
 * a history whose calls were edited under the same ids renders from their
 * JSON instead.
 *
 * The table keeps the last REPLAY_MAX blocks in memory. With a disk KV
 * cache it is also a log in the cache's directory (REPLAY_LOG: one JSON
 * object a line, {"ids", "sig", "raw", "reasoning", "in_reasoning"}), appended as blocks
 * are sampled and read back at start: a checkpoint restored after a
 * restart then still matches a conversation past its first tool call. The
 * log is rewritten from the table at start and whenever it holds
 * REPLAY_LOG_SLACK times as many lines as the table; a torn or unreadable
 * line is skipped, a block that is not valid UTF-8 (JSON cannot carry it)
 * stays in memory only, and anything but a regular file is not read.
 * Processes that share the directory append to one log: a writer reopens
 * it when another has replaced it, and a rewrite keeps only the writer's
 * own table (the log is a cache).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/internal.h"
#include "util/log.h"

#define REPLAY_LOG "replay.jsonl"
#define REPLAY_LOG_SLACK 4
#define REPLAY_LOG_MAX_BYTES (256u << 20) /* a bigger log is not read, only replaced */

static char *join_ids(const json_t *calls) {
    struct ms_buf b = {0};
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(calls, i), "id"));
        if (!id) {
            ms_buf_free(&b);
            return NULL;
        }
        if (i) ms_buf_put(&b, "\n", 1);
        ms_buf_puts(&b, id);
    }
    if (!b.p) ms_buf_puts(&b, "");
    return b.p;
}

void replay_sig_add(struct ms_buf *sig, const char *name, const char *args) {
    json_t *a = json_loads(args ? args : "", JSON_DECODE_ANY, NULL);
    char *canon = a ? json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
    json_decref(a);
    /* unit and record separators: neither occurs in a name or in JSON text */
    ms_buf_printf(sig, "%s\x1f%s\x1e", name ? name : "", canon ? canon : args ? args : "");
    free(canon);
}

/* The signature of a history message's calls (chat shape: function.name
 * and the arguments' text); malloc'd, NULL when out of memory. */
static char *calls_sig(const json_t *calls) {
    struct ms_buf b = {0};
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *fn = json_object_get(json_array_get(calls, i), "function");
        replay_sig_add(&b, json_string_value(json_object_get(fn, "name")),
                       json_string_value(json_object_get(fn, "arguments")));
    }
    if (!b.p) ms_buf_puts(&b, "");
    return b.p;
}

/* Puts an entry into the table (its oldest slot), taking ownership of the
 * strings. Caller holds sv->mu. */
static void table_put(struct server *sv, char *ids, char *sig, char *raw, size_t raw_len, char *reasoning,
                      bool in_reasoning) {
    struct replay_entry *r = &sv->replay[sv->replay_next];
    sv->replay_next = (sv->replay_next + 1) % REPLAY_MAX;
    free(r->ids);
    free(r->sig);
    free(r->raw);
    free(r->reasoning);
    *r = (struct replay_entry){
        .ids = ids, .sig = sig, .raw = raw, .raw_len = raw_len, .reasoning = reasoning, .in_reasoning = in_reasoning};
}

/* One log line for r (malloc'd, "\n"-terminated); NULL when the entry
 * cannot be written as JSON (bytes that are not UTF-8) or out of memory. */
static char *log_line(const struct replay_entry *r) {
    json_t *raw = json_stringn(r->raw, r->raw_len);
    json_t *sig = json_string(r->sig);
    json_t *o = raw && sig ? json_pack("{s:s, s:o, s:o}", "ids", r->ids, "sig", sig, "raw", raw) : NULL;
    if (!o) {
        json_decref(raw);
        json_decref(sig);
    }
    if (o) {
        json_t *rs = json_string(r->reasoning);
        if (!rs) {
            json_decref(o);
            return NULL;
        }
        json_object_set_new(o, "reasoning", rs);
        json_object_set_new(o, "in_reasoning", json_boolean(r->in_reasoning));
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return NULL;
    const size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    return line;
}

static int write_all(int fd, const char *s, size_t n) {
    while (n) {
        const ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Replaces the log with the table's entries, oldest first, and reopens it
 * for appending. Caller holds sv->mu (or is the only thread). */
static void log_rewrite(struct server *sv) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%ld-" REPLAY_LOG, sv->replay_dir, (long)getpid());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        ms_log_warn("serve: cannot write %s: %s (tool-call replay stays in memory)", tmp, strerror(errno));
        return;
    }
    size_t lines = 0;
    bool ok = true;
    for (size_t k = 0; k < REPLAY_MAX && ok; k++) {
        const struct replay_entry *r = &sv->replay[(sv->replay_next + k) % REPLAY_MAX];
        if (!r->ids) continue;
        char *line = log_line(r);
        if (line) {
            ok = !write_all(fd, line, strlen(line));
            lines++;
        }
        free(line);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/" REPLAY_LOG, sv->replay_dir);
    if (close(fd) || !ok || rename(tmp, path)) {
        ms_log_warn("serve: cannot replace %s: %s (tool-call replay stays in memory)", path, strerror(errno));
        unlink(tmp);
        return;
    }
    if (sv->replay_fd >= 0) close(sv->replay_fd);
    sv->replay_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    sv->replay_lines = lines;
    sv->replay_torn = false;
}

/* The log's fd still names the file at REPLAY_LOG (another process's
 * rewrite replaces it); reopens it when not. */
static void log_follow(struct server *sv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/" REPLAY_LOG, sv->replay_dir);
    struct stat a, b;
    if (!fstat(sv->replay_fd, &a) && !stat(path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return;
    const int fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && !fstat(fd, &b) && S_ISREG(b.st_mode)) {
        close(sv->replay_fd);
        sv->replay_fd = fd;
        return;
    }
    if (fd >= 0) close(fd);
    log_rewrite(sv); /* gone or not a file: this table becomes the log */
}

void replay_open(struct server *sv, const char *dir) {
    sv->replay_dir = strdup(dir);
    if (!sv->replay_dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/" REPLAY_LOG, dir);
    /* only a regular file of a sane size is read (not a FIFO that would
     * block, nor a device that never ends) */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) close(fd);
    size_t n_read = 0;
    struct stat sb;
    if (f && !fstat(fileno(f), &sb) && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size <= REPLAY_LOG_MAX_BYTES) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, f)) > 0) {
            json_t *o = json_loadb(line, (size_t)len, 0, NULL);
            const json_t *ids = json_object_get(o, "ids"), *raw = json_object_get(o, "raw");
            const json_t *sig = json_object_get(o, "sig"), *rs = json_object_get(o, "reasoning");
            const json_t *ir = json_object_get(o, "in_reasoning");
            /* lines of the first log format carry "reasoning" only for a
             * block opened inside it, and no "in_reasoning" */
            if (json_is_string(ids) && json_is_string(sig) && json_is_string(raw) && (!rs || json_is_string(rs)) &&
                (!ir || json_is_boolean(ir))) {
                char *ic = strdup(json_string_value(ids));
                char *gc = strdup(json_string_value(sig));
                char *rc = strndup(json_string_value(raw), json_string_length(raw));
                char *sc = strdup(rs ? json_string_value(rs) : "");
                const bool in_r = ir ? json_is_true(ir) : rs != NULL;
                if (ic && gc && rc && sc) {
                    table_put(sv, ic, gc, rc, json_string_length(raw), sc, in_r);
                    n_read++;
                } else {
                    free(ic);
                    free(gc);
                    free(rc);
                    free(sc);
                }
            }
            json_decref(o);
        }
        free(line);
    }
    if (f) fclose(f);
    if (n_read) ms_log_info("serve: %zu sampled tool-call blocks read back from %s", n_read < REPLAY_MAX ? n_read : REPLAY_MAX, path);
    log_rewrite(sv);
}

void replay_record(struct server *sv, json_t *calls, const char *sig, const char *raw, size_t raw_len,
                   const struct ms_buf *reasoning, bool in_reasoning) {
    char *ids = join_ids(calls);
    char *scopy = strdup(sig);
    char *copy = malloc(raw_len + 1);
    char *rcopy = malloc(reasoning->len + 1);
    if (!ids || !scopy || !copy || !rcopy) {
        free(ids);
        free(scopy);
        free(copy);
        free(rcopy);
        return;
    }
    memcpy(copy, raw, raw_len);
    copy[raw_len] = '\0';
    if (reasoning->len) memcpy(rcopy, reasoning->p, reasoning->len);
    rcopy[reasoning->len] = '\0';
    pthread_mutex_lock(&sv->mu);
    table_put(sv, ids, scopy, copy, raw_len, rcopy, in_reasoning);
    if (sv->replay_fd >= 0) log_follow(sv);
    if (sv->replay_fd >= 0) {
        char *line = log_line(&sv->replay[(sv->replay_next + REPLAY_MAX - 1) % REPLAY_MAX]);
        /* after a failed write (a full disk) the line starts on a fresh
         * one: the torn line before it is skipped alone when read */
        if (line && sv->replay_torn) write_all(sv->replay_fd, "\n", 1);
        if (line && write_all(sv->replay_fd, line, strlen(line))) {
            if (!sv->replay_torn)
                ms_log_warn("serve: cannot append to %s/" REPLAY_LOG ": %s (this block is kept in memory only)",
                            sv->replay_dir, strerror(errno));
            sv->replay_torn = true;
        } else if (line) {
            sv->replay_lines++;
            sv->replay_torn = false;
        }
        free(line);
        if (sv->replay_lines >= REPLAY_LOG_SLACK * REPLAY_MAX) log_rewrite(sv);
    }
    pthread_mutex_unlock(&sv->mu);
}

void replay_ctx_free(struct replay_ctx *rc) {
    for (size_t i = 0; i < rc->n; i++) free(rc->copies[i]);
    free(rc->copies);
    rc->copies = NULL;
    rc->n = rc->cap = 0;
}

/* Keeps p (malloc'd) until replay_ctx_free; false (p freed) when out of
 * memory. */
static bool ctx_keep(struct replay_ctx *rc, char *p) {
    if (rc->n == rc->cap) {
        const size_t cap = rc->cap ? 2 * rc->cap : 16;
        char **c = realloc(rc->copies, cap * sizeof *c);
        if (!c) {
            free(p);
            return false;
        }
        rc->copies = c;
        rc->cap = cap;
    }
    rc->copies[rc->n++] = p;
    return true;
}

/* ctx: a struct replay_ctx; the copies handed out live until its free. */

const char *replay_lookup(void *ctx, const json_t *tool_calls, const char *reasoning, size_t *len,
                          bool *in_reasoning, const char **stored) {
    struct replay_ctx *rc = ctx;
    *stored = NULL;
    char *ids = join_ids(tool_calls);
    char *sig = calls_sig(tool_calls);
    if (!ids || !sig) {
        free(ids);
        free(sig);
        return NULL;
    }
    char *hit = NULL, *rs = NULL;
    pthread_mutex_lock(&rc->sv->mu);
    for (size_t i = 0; i < REPLAY_MAX; i++) {
        const struct replay_entry *r = &rc->sv->replay[i];
        if (r->ids && !strcmp(r->ids, ids)) {
            if (strcmp(r->sig, sig)) break; /* edited under the same ids: render the JSON */
            /* no reasoning sent back: the turn's stands in for it */
            const bool none = !reasoning || !*reasoning;
            hit = malloc(r->raw_len + 1);
            rs = none && *r->reasoning ? strdup(r->reasoning) : NULL;
            if (hit && (rs || !none || !*r->reasoning)) {
                memcpy(hit, r->raw, r->raw_len + 1);
                *len = r->raw_len;
                /* the block closed the reasoning only where the message is
                 * rendered with that same reasoning */
                *in_reasoning = r->in_reasoning && !strcmp(r->reasoning, none ? r->reasoning : reasoning);
            } else {
                free(hit);
                free(rs);
                hit = rs = NULL;
            }
            break;
        }
    }
    pthread_mutex_unlock(&rc->sv->mu);
    free(ids);
    free(sig);
    if (hit && !ctx_keep(rc, hit)) {
        free(rs);
        return NULL;
    }
    if (rs && !ctx_keep(rc, rs)) return NULL;
    *stored = rs;
    return hit;
}

void replay_close(struct server *sv) {
    if (sv->replay_fd >= 0) close(sv->replay_fd);
    sv->replay_fd = -1;
    free(sv->replay_dir);
    sv->replay_dir = NULL;
    for (size_t i = 0; i < REPLAY_MAX; i++) {
        free(sv->replay[i].ids);
        free(sv->replay[i].sig);
        free(sv->replay[i].raw);
        free(sv->replay[i].reasoning);
        sv->replay[i] = (struct replay_entry){0};
    }
}
