/*
 * http.c - the HTTP side of `moestream serve` (libmicrohttpd, one thread
 * per connection): routing, API keys, CORS, body limits, the bounded FIFO
 * queue in front of the engine worker, SSE streaming with keepalives, and
 * client-disconnect detection (the socket is polled for a hang-up while a
 * request waits or streams, and the job is cancelled at once).
 */
#include <errno.h>
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "server/internal.h"
#include "text/grammar.h"
#include "util/log.h"

#if MHD_VERSION < 0x00097002
typedef int MHD_RESULT;
#else
typedef enum MHD_Result MHD_RESULT;
#endif

struct conn {
    struct server *sv;
    struct ms_buf body;
    bool too_large;
    struct job *job;    /* a streaming job this connection drains */
    int fd;
    double last_write;
    bool finished;
    uint64_t arrival;   /* the request's place in arrival order (its first callback) */
};

/* ---- replies ---- */

static void add_common_headers(struct server *sv, struct MHD_Response *r) {
    if (sv->o.cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", sv->o.cors);
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, x-api-key, anthropic-version, "
                                "anthropic-beta, OpenAI-Organization, OpenAI-Project");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    }
}

static MHD_RESULT reply(struct server *sv, struct MHD_Connection *c, int status, const char *ctype,
                        char *body /* taken */, const char *retry_after) {
    if (!body) body = strdup("{}");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    add_common_headers(sv, r);
    const MHD_RESULT rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static MHD_RESULT reply_error(struct server *sv, struct MHD_Connection *c, enum api_kind k,
                              const struct http_err *e) {
    pthread_mutex_lock(&sv->mu);
    sv->m.errors++;
    pthread_mutex_unlock(&sv->mu);
    return reply(sv, c, e->status, "application/json", api_error_body(k, e),
                 e->status == 503 ? "1" : NULL);
}

/* ---- disconnects ---- */

static bool hung_up(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static void cancel_job(struct server *sv, struct job *j) {
    if (!atomic_exchange(&j->cancel, 1)) {
        pthread_mutex_lock(&sv->mu);
        sv->m.cancelled += 0; /* counted by the worker when it stops a generation */
        pthread_mutex_unlock(&sv->mu);
    }
}

/* ---- SSE ---- */

static ssize_t sse_reader(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    struct conn *cn = cls;
    struct job *j = cn->job;
    struct server *sv = cn->sv;
    const double ka = sv->o.keepalive_s;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        const size_t avail = j->out.len - j->out_sent;
        if (avail) {
            const size_t n = avail < max ? avail : max;
            memcpy(out, j->out.p + j->out_sent, n);
            j->out_sent += n;
            if (j->out_sent == j->out.len) j->out_sent = j->out.len = 0;
            pthread_mutex_unlock(&j->mu);
            cn->last_write = now_s();
            return (ssize_t)n;
        }
        if (j->done) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (now_s() - cn->last_write >= ka) {
            pthread_mutex_unlock(&j->mu);
            static const char k[] = ": keepalive\n\n";
            if (max < sizeof k - 1) return 0;
            memcpy(out, k, sizeof k - 1);
            cn->last_write = now_s();
            return (ssize_t)(sizeof k - 1);
        }
        if (hung_up(cn->fd)) {
            pthread_mutex_unlock(&j->mu);
            cancel_job(sv, j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
}

/* ---- queue ---- */

/* Queues j in arrival order. part: a later part of a request already
 * admitted (several choices), which the queue's limit does not turn away
 * half done and the request count does not count again. Errors: 503 when
 * stopping or the queue is full, OOM. */
static int enqueue(struct server *sv, struct job *j, bool part, struct http_err *e) {
    pthread_mutex_lock(&sv->mu);
    if (sv->stopping) {
        pthread_mutex_unlock(&sv->mu);
        return http_fail(e, 503, "the server is shutting down");
    }
    if (!part && sv->q_len >= (size_t)sv->o.max_queue) {
        sv->m.rejected++;
        pthread_mutex_unlock(&sv->mu);
        return http_fail(e, 503, "the server is busy: %d requests are waiting; retry later",
                         sv->o.max_queue);
    }
    if (sv->q_len == sv->q_cap) {
        /* grow the ring, keeping order */
        const size_t cap = sv->q_cap ? 2 * sv->q_cap : 16;
        struct job **q = malloc(cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&sv->mu);
            return http_fail(e, 500, "out of memory");
        }
        for (size_t i = 0; i < sv->q_len; i++) q[i] = sv->queue[(sv->q_head + i) % sv->q_cap];
        free(sv->queue);
        sv->queue = q;
        sv->q_head = 0;
        sv->q_cap = cap;
    }
    j->refs++; /* the worker's */
    j->t_queued = now_s();
    /* in arrival order, not parse order: a request that arrived earlier but
     * took longer to render and tokenize goes before later ones still waiting */
    size_t pos = sv->q_len;
    while (pos > 0 && sv->queue[(sv->q_head + pos - 1) % sv->q_cap]->arrival > j->arrival) {
        sv->queue[(sv->q_head + pos) % sv->q_cap] = sv->queue[(sv->q_head + pos - 1) % sv->q_cap];
        pos--;
    }
    sv->queue[(sv->q_head + pos) % sv->q_cap] = j;
    sv->q_len++;
    if (!part) sv->m.requests[j->kind]++;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

/* ---- GET endpoints ---- */

static char *models_body(struct server *sv) {
    json_t *o = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s, s:I}]}", "object", "list", "data", "id",
                          sv->model_id, "object", "model", "created", (json_int_t)0, "owned_by",
                          "moestream", "display_name", sv->model_id, "context_length",
                          (json_int_t)sv->n_ctx);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static char *metrics_body(struct server *sv) {
    struct ms_buf b = {0};
    pthread_mutex_lock(&sv->mu);
    const struct metrics m = sv->m;
    const size_t q = sv->q_len;
    const bool busy = sv->running != NULL;
    pthread_mutex_unlock(&sv->mu);
    const struct ms_stream_stats ss = ms_engine_stream_stats(sv->e);
    static const char *names[] = {"chat_completions", "completions", "messages", "responses"};
    ms_buf_puts(&b, "# HELP moestream_requests_total Generation requests accepted, by endpoint.\n"
                 "# TYPE moestream_requests_total counter\n");
    for (int i = 0; i < 4; i++)
        ms_buf_printf(&b, "moestream_requests_total{endpoint=\"%s\"} %llu\n", names[i],
                   (unsigned long long)m.requests[i]);
#define COUNTER(name, help, v)                                                                    \
    ms_buf_printf(&b, "# HELP moestream_" name " " help "\n# TYPE moestream_" name " counter\nmoestream_" name \
                   " %llu\n", (unsigned long long)(v))
#define GAUGE(name, help, fmt, v)                                                                 \
    ms_buf_printf(&b, "# HELP moestream_" name " " help "\n# TYPE moestream_" name " gauge\nmoestream_" name \
                   " " fmt "\n", v)
    COUNTER("request_errors_total", "Requests answered with an error status.", m.errors);
    COUNTER("requests_rejected_total", "Requests refused because the queue was full (503).", m.rejected);
    COUNTER("requests_cancelled_total", "Generations stopped by a client disconnect or shutdown.", m.cancelled);
    COUNTER("prompt_tokens_total", "Prompt tokens of finished requests.", m.prompt_tokens);
    COUNTER("cached_prompt_tokens_total", "Prompt tokens not prefilled: reused from the live session, the snapshot or the disk KV cache.", m.cached_tokens);
    COUNTER("completion_tokens_total", "Generated tokens.", m.completion_tokens);
    COUNTER("decode_evals_total", "Evals decode made: fewer than the tokens it evaluated where guesses were kept (speculative decoding, --draft).", m.decode_evals);
    COUNTER("draft_guessed_tokens_total", "Guessed tokens evaluated behind a sampled one (--draft).", m.draft_guessed);
    COUNTER("draft_accepted_tokens_total", "Guessed tokens that matched the token chosen there, evaluated for free.", m.draft_accepted);
    COUNTER("prefix_cache_hits_total", "Requests that extended the live session.", m.prefix_hits);
    COUNTER("snapshot_restores_total", "Requests that restored the in-memory snapshot (the live session before its prompt's last token).", m.snapshot_restores);
    COUNTER("full_prefills_total", "Requests prefilled from an empty session.", m.full_prefills);
    COUNTER("ram_restores_total", "Requests that restored a session state kept in memory (--kv-ram-mb).", m.ram_hits);
    COUNTER("ram_kept_total", "Session states kept in memory when another prompt replaced them.", m.ram_parked);
    COUNTER("ram_evicted_total", "Session states dropped from memory for the --kv-ram-mb budget.", m.ram_evicted);
    GAUGE("ram_bytes", "Bytes of the session states kept in memory.", "%llu", (unsigned long long)m.ram_bytes);
    GAUGE("ram_budget_bytes", "The --kv-ram-mb budget in bytes.", "%llu", (unsigned long long)m.ram_budget);
    GAUGE("ram_states", "Session states kept in memory.", "%llu", (unsigned long long)m.ram_entries);
    if (m.kv_on) {
        static const char *reasons[] = {NULL, "cold", "continued", "evict", "shutdown", "named"};
        COUNTER("kv_restores_total", "Requests that restored a disk KV checkpoint.", m.kv_hits);
        COUNTER("kv_restored_tokens_total", "Tokens restored from disk KV checkpoints.", m.kv.restored_tokens);
        COUNTER("kv_restored_bytes_total", "File bytes of the disk KV checkpoints restored.", m.kv.restored_bytes);
        GAUGE("kv_restore_seconds_total", "Seconds spent looking up and restoring disk KV checkpoints.", "%.6f", m.kv.restore_seconds);
        ms_buf_puts(&b, "# HELP moestream_kv_saves_total Disk KV checkpoints written, by reason.\n"
                        "# TYPE moestream_kv_saves_total counter\n");
        for (int r = 1; r <= 4; r++)
            ms_buf_printf(&b, "moestream_kv_saves_total{reason=\"%s\"} %lld\n", reasons[r],
                          (long long)m.kv.saved_by_reason[r]);
        COUNTER("kv_saved_bytes_total", "Bytes of disk KV checkpoints written.", m.kv.saved_bytes);
        GAUGE("kv_save_seconds_total", "Seconds spent writing disk KV checkpoints.", "%.6f", m.kv.save_seconds);
        COUNTER("kv_evicted_files_total", "Disk KV checkpoints deleted to keep the directory budget.", m.kv.evicted_files);
        COUNTER("kv_skipped_files_total", "Unreadable, foreign or corrupt checkpoint files passed over.", m.kv.skipped_files);
    }
    GAUGE("prefill_seconds_total", "Seconds spent in prefill.", "%.6f", m.prefill_seconds);
    GAUGE("decode_seconds_total", "Seconds spent decoding.", "%.6f", m.decode_seconds);
    GAUGE("prefill_tokens_per_second", "Prefill speed of the last request.", "%.3f", m.last_prefill_tps);
    GAUGE("decode_tokens_per_second", "Decode speed of the last request.", "%.3f", m.last_decode_tps);
    GAUGE("time_to_first_token_seconds", "Queue + prefill + first sample of the last request.", "%.6f", m.last_ttft);
    GAUGE("queue_depth", "Requests waiting for the engine.", "%zu", q);
    GAUGE("busy", "1 while a request runs.", "%d", busy ? 1 : 0);
    COUNTER("ssd_bytes_read_total", "Expert bytes read from disk.", ss.bytes_read);
    COUNTER("expert_cache_hits_total", "Expert cache hits.", ss.cache_hits);
    COUNTER("expert_cache_misses_total", "Expert cache misses.", ss.cache_misses);
#undef COUNTER
#undef GAUGE
    return b.p;
}

/* ---- auth ---- */

/* The key as given equals the server's, in time that does not depend on
 * where they differ (OpenSSL's CRYPTO_memcmp): a client must not learn
 * the key a byte at a time from response times. The length may show. */
static bool key_equal(const char *given, const char *key) {
    const size_t n = strlen(key);
    return strlen(given) == n && CRYPTO_memcmp(given, key, n) == 0;
}

static bool authorized(struct server *sv, struct MHD_Connection *c) {
    if (!sv->o.api_key) return true;
    const char *xk = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (xk && key_equal(xk, sv->o.api_key)) return true;
    const char *au = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (au && !strncasecmp(au, "Bearer ", 7)) {
        au += 7;
        while (*au == ' ') au++;
        if (key_equal(au, sv->o.api_key)) return true;
    }
    return false;
}

/* ---- routing ---- */

static bool route_post(const char *url, enum api_kind *k, bool *count) {
    *count = false;
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")) *k = API_CHAT;
    else if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")) *k = API_COMPLETIONS;
    else if (!strcmp(url, "/v1/messages") || !strcmp(url, "/messages")) *k = API_MESSAGES;
    else if (!strcmp(url, "/v1/responses") || !strcmp(url, "/responses")) *k = API_RESPONSES;
    else if (!strcmp(url, "/v1/messages/count_tokens")) {
        *k = API_MESSAGES;
        *count = true;
    } else return false;
    return true;
}

/* Whether url is an endpoint the server answers on GET (so a POST to it
 * is a 405, not a 404). */
static bool get_endpoint(const char *url) {
    return !strcmp(url, "/health") || !strcmp(url, "/v1/health") || !strcmp(url, "/v1/models") ||
           !strcmp(url, "/models") || !strcmp(url, "/metrics") || !strcmp(url, "/tokenizer_info") ||
           !strcmp(url, "/v1/tokenizer_info") || !strncmp(url, "/v1/models/", 11);
}

/* Whether url is an endpoint the server answers on POST. */
static bool post_endpoint(const char *url) {
    enum api_kind k;
    bool count;
    return route_post(url, &k, &count) || !strcmp(url, "/tokenize") || !strcmp(url, "/v1/tokenize") ||
           !strcmp(url, "/detokenize") || !strcmp(url, "/v1/detokenize");
}

/* Waits for a non-streaming job, cancelling it if the client goes away
 * (then false: close the connection). Otherwise *status and *body (taken
 * from the job, malloc'd) hold its reply; errors are counted. */
static bool wait_job(struct server *sv, struct conn *cn, struct job *j, int *status, char **body) {
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (hung_up(cn->fd)) {
            pthread_mutex_unlock(&j->mu);
            cancel_job(sv, j);
            pthread_mutex_lock(&j->mu);
            while (!j->done) pthread_cond_wait(&j->cv, &j->mu);
            pthread_mutex_unlock(&j->mu);
            return false;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    *body = j->body;
    j->body = NULL;
    *status = j->status ? j->status : 500;
    pthread_mutex_unlock(&j->mu);
    if (*status != 200) {
        pthread_mutex_lock(&sv->mu);
        sv->m.errors++;
        pthread_mutex_unlock(&sv->mu);
    }
    return true;
}

static MHD_RESULT wait_and_reply(struct server *sv, struct MHD_Connection *c, struct conn *cn,
                                 struct job *j) {
    int status;
    char *body;
    if (!wait_job(sv, cn, j, &status, &body)) return MHD_NO; /* close the connection */
    return reply(sv, c, status, "application/json", body, status == 503 ? "1" : NULL);
}

/* A request for several choices (fanout.c): every sub-request is parsed
 * first (so a bad prompt is a 400 before anything runs), then each is
 * queued and waited for as a request of its own, one after the other; the
 * first that fails is the reply. */
static MHD_RESULT handle_fanout(struct server *sv, struct MHD_Connection *c, struct conn *cn, enum api_kind k,
                                const json_t *req, size_t n_prompts, int64_t n) {
    struct http_err e = {0};
    const size_t total = n_prompts * (size_t)n;
    struct job **jobs = calloc(total, sizeof *jobs);
    json_t *merged = json_object();
    MHD_RESULT rc = MHD_NO;
    size_t i = 0;
    if (!jobs || !merged) {
        http_fail(&e, 500, "out of memory");
        goto error;
    }
    for (; i < total; i++) {
        json_t *sub = fanout_request(req, i, n_prompts, n);
        if (!sub) {
            http_fail(&e, 500, "out of memory");
            goto error;
        }
        jobs[i] = api_parse(sv, k, sub, &e);
        json_decref(sub);
        if (!jobs[i]) {
            /* name the prompt when the error is about it (the request's
             * other fields are the same for every choice) */
            if (n_prompts > 1 && strstr(e.msg, "prompt")) {
                char msg[sizeof e.msg];
                memcpy(msg, e.msg, sizeof msg);
                snprintf(e.msg, sizeof e.msg, "prompt %zu: %.470s", i / (size_t)n, msg);
            }
            goto error;
        }
        jobs[i]->arrival = cn->arrival;
        /* one id for the reply and every log line of it */
        if (i > 0) memcpy(jobs[i]->id, jobs[0]->id, sizeof jobs[i]->id);
        jobs[i]->keep_prompt = i % (size_t)n + 1 < (size_t)n; /* its prompt's next sample follows */
    }
    for (i = 0; i < total; i++) {
        if (enqueue(sv, jobs[i], i > 0, &e)) goto error;
        int status;
        char *body;
        if (!wait_job(sv, cn, jobs[i], &status, &body)) goto out; /* the client left: close */
        if (status != 200) {
            rc = reply(sv, c, status, "application/json", body, status == 503 ? "1" : NULL);
            goto out;
        }
        const int mrc = fanout_merge(merged, body, i, n, &e);
        free(body);
        if (mrc) goto error;
    }
    rc = reply(sv, c, 200, "application/json", json_dumps(merged, JSON_COMPACT), NULL);
    goto out;
error:
    rc = reply_error(sv, c, k, &e);
out:
    for (size_t q = 0; jobs && q < total; q++)
        if (jobs[q]) job_release(jobs[q]);
    free(jobs);
    json_decref(merged);
    return rc;
}

static MHD_RESULT handle_post(struct server *sv, struct MHD_Connection *c, struct conn *cn,
                              const char *url) {
    enum api_kind k;
    bool count;
    struct http_err e = {0};
    const bool tok = !strcmp(url, "/tokenize") || !strcmp(url, "/v1/tokenize");
    const bool detok = !strcmp(url, "/detokenize") || !strcmp(url, "/v1/detokenize");
    if (tok || detok) {
        k = API_CHAT; /* errors in OpenAI's shape */
        count = false;
    } else if (!route_post(url, &k, &count)) {
        if (get_endpoint(url)) {
            http_fail(&e, 405, "method POST is not allowed for %s (it takes GET)", url);
            return reply_error(sv, c, API_CHAT, &e);
        }
        http_fail(&e, 404, "no such endpoint: POST %s", url);
        return reply_error(sv, c, API_CHAT, &e);
    }
    if (!authorized(sv, c)) {
        http_fail(&e, 401, "invalid or missing API key");
        return reply_error(sv, c, k, &e);
    }
    if (cn->too_large) {
        http_fail(&e, 413, "the request body is larger than %zu bytes", sv->o.max_body);
        return reply_error(sv, c, k, &e);
    }
    json_error_t je;
    json_t *req = cn->body.len ? json_loadb(cn->body.p, cn->body.len, 0, &je) : NULL;
    if (!req) {
        if (!cn->body.len) http_fail(&e, 400, "the request has no body (a JSON object is expected)");
        else http_fail(&e, 400, "invalid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return reply_error(sv, c, k, &e);
    }
    if (tok || detok) {
        char *body = tok ? api_tokenize(sv, req, &e) : api_detokenize(sv, req, &e);
        json_decref(req);
        return body ? reply(sv, c, 200, "application/json", body, NULL) : reply_error(sv, c, k, &e);
    }
    if (count) {
        const int64_t n = api_count_tokens(sv, req, &e);
        json_decref(req);
        if (n < 0) return reply_error(sv, c, k, &e);
        char body[64];
        snprintf(body, sizeof body, "{\"input_tokens\":%lld}", (long long)n);
        return reply(sv, c, 200, "application/json", strdup(body), NULL);
    }
    size_t n_prompts;
    int64_t n_choices;
    if (fanout_count(req, k, &n_prompts, &n_choices, &e)) {
        json_decref(req);
        return reply_error(sv, c, k, &e);
    }
    if (n_prompts * (size_t)n_choices > 1) {
        const MHD_RESULT rc = handle_fanout(sv, c, cn, k, req, n_prompts, n_choices);
        json_decref(req);
        return rc;
    }
    struct job *j = api_parse(sv, k, req, &e);
    json_decref(req);
    if (!j) return reply_error(sv, c, k, &e);
    j->arrival = cn->arrival;
    if (enqueue(sv, j, false, &e)) {
        job_release(j);
        return reply_error(sv, c, k, &e);
    }
    if (!j->stream) {
        const MHD_RESULT rc = wait_and_reply(sv, c, cn, j);
        job_release(j);
        return rc;
    }
    cn->job = j; /* released in the completion callback */
    cn->last_write = now_s();
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, cn, NULL);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    add_common_headers(sv, r);
    const MHD_RESULT rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

static MHD_RESULT handle_get(struct server *sv, struct MHD_Connection *c, const char *url) {
    struct http_err e = {0};
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) {
        pthread_mutex_lock(&sv->mu);
        const size_t q = sv->q_len;
        const bool busy = sv->running != NULL;
        pthread_mutex_unlock(&sv->mu);
        char body[128];
        snprintf(body, sizeof body, "{\"status\":\"ok\",\"busy\":%s,\"queued\":%zu}", busy ? "true" : "false", q);
        return reply(sv, c, 200, "application/json", strdup(body), NULL);
    }
    if (!authorized(sv, c)) {
        http_fail(&e, 401, "invalid or missing API key");
        return reply_error(sv, c, API_CHAT, &e);
    }
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models"))
        return reply(sv, c, 200, "application/json", models_body(sv), NULL);
    if (!strcmp(url, "/metrics"))
        return reply(sv, c, 200, "text/plain; version=0.0.4", metrics_body(sv), NULL);
    if (!strcmp(url, "/tokenizer_info") || !strcmp(url, "/v1/tokenizer_info")) {
        char *body = api_tokenizer_info(sv, &e);
        return body ? reply(sv, c, 200, "application/json", body, NULL) : reply_error(sv, c, API_CHAT, &e);
    }
    if (!strncmp(url, "/v1/models/", 11)) {
        if (strcmp(url + 11, sv->model_id)) {
            http_fail(&e, 404, "no such model: %s", url + 11);
            return reply_error(sv, c, API_CHAT, &e);
        }
        json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", sv->model_id, "object", "model", "created",
                              (json_int_t)0, "owned_by", "moestream");
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        return reply(sv, c, 200, "application/json", s, NULL);
    }
    if (post_endpoint(url)) {
        http_fail(&e, 405, "method GET is not allowed for %s (it takes POST)", url);
        return reply_error(sv, c, API_CHAT, &e);
    }
    http_fail(&e, 404, "no such endpoint: GET %s", url);
    return reply_error(sv, c, API_CHAT, &e);
}

static MHD_RESULT on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size,
                             void **con_cls) {
    (void)version;
    struct server *sv = cls;
    struct conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        cn->sv = sv;
        cn->fd = conn_fd(c);
        cn->arrival = atomic_fetch_add(&sv->arrivals, 1);
        *con_cls = cn;
        atomic_fetch_add(&sv->active, 1);
        return MHD_YES;
    }
    /* a body is read to its end before any reply (libmicrohttpd sends no
     * reply queued while upload data is still coming): kept for a POST,
     * dropped for the other methods, which take none */
    if (*upload_size) {
        if (!strcmp(method, "POST")) {
            if (cn->body.len + *upload_size > sv->o.max_body) cn->too_large = true;
            else if (ms_buf_put(&cn->body, upload, *upload_size)) cn->too_large = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(method, "POST")) return handle_post(sv, c, cn, url);
    if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) return handle_get(sv, c, url);
    if (!strcmp(method, "OPTIONS")) return reply(sv, c, 204, "text/plain", strdup(""), NULL);
    struct http_err e = {0};
    http_fail(&e, 405, "method %s is not allowed", method);
    return reply_error(sv, c, API_CHAT, &e);
}

/* libmicrohttpd's messages: kept for the start error while it starts;
 * then those about the server itself (connection limit, memory, threads,
 * accept, its socket polling) are warnings, and the rest, which concern
 * one connection and mostly follow client disconnects in many wordings (a
 * reset while sending, a stream whose reader gave up), are debug detail. */
static void on_http_log(void *cls, const char *fmt, va_list ap) {
    static const char *const resource_words[] = {"limit", "memory", "thread", "ccept",
                                                 "select", "poll", "FD_SETSIZE", "Failed to create"};
    struct server *sv = cls;
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\r\n")] = '\0';
    if (!atomic_load(&sv->listening)) {
        snprintf(sv->http_msg, sizeof sv->http_msg, "%s", line);
        return;
    }
    bool resource = false;
    for (size_t i = 0; i < sizeof resource_words / sizeof resource_words[0]; i++)
        resource = resource || strcasestr(line, resource_words[i]);
    if (resource) ms_log_warn("serve: http: %s", line);
    else ms_log_debug("serve: http: %s", line);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    struct conn *cn = *con_cls;
    if (!cn) return;
    if (cn->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) cancel_job(cn->sv, cn->job);
        job_release(cn->job);
    }
    ms_buf_free(&cn->body);
    atomic_fetch_sub(&cn->sv->active, 1);
    free(cn);
    *con_cls = NULL;
}

/* ---- the server ---- */

/* Writes "PORT\n" to path through a temporary file renamed over it, so
 * that a script polling for the file never reads it half written. 0, or
 * -1 with err (the temporary file removed). */
static int write_port_file(const char *path, int port, ms_err *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp)
        return ms_err_set(err, "--port-file: the path is too long");
    FILE *f = fopen(tmp, "w");
    if (!f) return ms_err_errno(err, errno, "--port-file: cannot write %s", tmp);
    int bad = fprintf(f, "%d\n", port) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        return ms_err_errno(err, e, "--port-file: cannot write %s", path);
    }
    return 0;
}

int ms_server_run(struct ms_engine *e, const char *model_path, const struct ms_server_opts *o,
                  ms_err *err) {
    struct server *sv = calloc(1, sizeof *sv);
    if (!sv) return ms_err_set(err, "out of memory");
    sv->e = e;
    sv->replay_fd = -1;
    sv->o = *o;
    if (!sv->o.host) sv->o.host = "127.0.0.1";
    if (sv->o.max_queue <= 0) sv->o.max_queue = 16;
    if (!sv->o.max_body) sv->o.max_body = 32u << 20;
    if (sv->o.timeout_s <= 0) sv->o.timeout_s = 600;
    if (sv->o.keepalive_s <= 0 || sv->o.keepalive_s > 5) sv->o.keepalive_s = 2;
    if (sv->o.default_max_tokens <= 0) sv->o.default_max_tokens = 4096;
    sv->tok = ms_engine_tokenizer(e);
    int rc = -1;
    struct MHD_Daemon *d = NULL;
    pthread_t worker;
    bool worker_started = false;
    if (!sv->tok) {
        ms_err_set(err, "%s has no tokenizer; the server needs one", model_path);
        goto out;
    }
    if (sv->o.alias) {
        snprintf(sv->model_id, sizeof sv->model_id, "%s", sv->o.alias);
    } else {
        const char *base = strrchr(model_path, '/');
        snprintf(sv->model_id, sizeof sv->model_id, "%s", base ? base + 1 : model_path);
        char *dot = strstr(sv->model_id, ".gguf");
        if (dot && dot != sv->model_id) *dot = '\0';
    }
    sv->eos = ms_tokenizer_eos(sv->tok);
    sv->think_tok = ms_tokenizer_find(sv->tok, MS_CHAT_THINK, strlen(MS_CHAT_THINK));
    sv->end_think_tok = ms_tokenizer_find(sv->tok, MS_CHAT_END_THINK, strlen(MS_CHAT_END_THINK));
    if (ms_session_new(&sv->s, e, sv->o.n_ctx, err)) goto out;
    sv->n_ctx = ms_session_n_ctx(sv->s);
    sv->live_disk_n = -1;
    sv->pk.budget = sv->o.ram_bytes;
    sv->m.ram_budget = sv->o.ram_bytes;
    if (sv->o.kv && sv->o.kv->dir) {
        /* opened here, then used by the worker only (a store is not thread-safe) */
        if (ms_kv_open(&sv->kv, e, sv->o.kv, err)) goto out;
        sv->kv_min_tokens = sv->o.kv->min_tokens;
        sv->m.kv_on = true;
        fprintf(stderr, "serve: disk KV cache in %s (%llu MiB)\n", sv->o.kv->dir,
                (unsigned long long)(sv->o.kv->budget_bytes >> 20));
        replay_open(sv, sv->o.kv->dir);
    }
    /* after the store: its continued checkpoints go through the stepper */
    const struct ms_spec_hooks hooks = ms_spec_kv_hooks(sv->kv);
    if (sv->o.spec.draft_max > 0 &&
        ms_spec_new(&sv->spec, sv->s, (int32_t)ms_tokenizer_n_vocab(sv->tok), &sv->o.spec, &hooks, err))
        goto out;
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    if (pthread_create(&worker, NULL, worker_main, sv)) {
        ms_err_set(err, "cannot start the worker thread");
        goto out;
    }
    worker_started = true;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv->o.port)};
    if (inet_pton(AF_INET, sv->o.host, &addr.sin_addr) != 1) {
        ms_err_set(err, "--host must be an IPv4 address, got '%s'", sv->o.host);
        goto out;
    }
    errno = 0; /* a failure that sets none must not report an old one */
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                             MHD_USE_ERROR_LOG,
                         0, NULL, NULL, on_request, sv, MHD_OPTION_SOCK_ADDR, &addr,
                         MHD_OPTION_EXTERNAL_LOGGER, on_http_log, sv,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)sv->o.timeout_s,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)(sv->o.max_queue + 48),
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024), MHD_OPTION_END);
    if (!d) {
        /* errno says why; the daemon's own words (kept in http_msg) name
         * port 0, since it is given the address, not the port */
        const int why = errno;
        ms_err_set(err, "cannot listen on %s:%d: %s", sv->o.host, sv->o.port,
                   why ? strerror(why) : sv->http_msg[0] ? sv->http_msg : "libmicrohttpd failed");
        goto out;
    }
    atomic_store(&sv->listening, true);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    const int port = di ? di->port : sv->o.port;
    fprintf(stderr, "serve: %s on http://%s:%d (context %lld tokens, queue %d)\n", sv->model_id,
            sv->o.host, port, (long long)sv->n_ctx, sv->o.max_queue);
    if (sv->o.port_file && write_port_file(sv->o.port_file, port, err)) goto out;
    while (!*sv->o.stop) usleep(50 * 1000);
    fprintf(stderr, "serve: shutting down\n");
    rc = 0;
out:
    if (worker_started) {
        pthread_mutex_lock(&sv->mu);
        sv->stopping = true;
        if (sv->running) atomic_store(&sv->running->cancel, 1);
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
        pthread_join(worker, NULL);
    }
    /* every job is answered now; let the connections send their replies
     * (bounded) before the daemon shuts their sockets */
    for (int i = 0; d && i < 100 && atomic_load(&sv->active) > 0; i++) usleep(30 * 1000);
    if (d) MHD_stop_daemon(d);
    ms_kv_close(sv->kv);
    parked_free(&sv->pk);
    ms_spec_free(sv->spec);
    ms_session_free(sv->s);
    ms_snapshot_free(sv->snap);
    free(sv->snap_text);
    free(sv->snap_ids);
    ms_buf_free(&sv->live);
    ms_grammar_vocab_free(sv->gvocab);
    free(sv->dsml_ids);
    free(sv->queue);
    replay_close(sv);
    free(sv);
    return rc;
}
