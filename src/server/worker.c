/*
 * worker.c - the engine worker: runs queued jobs in arrival order on the one
 * live session, reusing the longest evaluated prefix of each new prompt.
 *
 * Prefix reuse works on text, as `moestream chat` does: the live session's
 * tokens spell `live` (prompt text plus the pieces of the generated tokens
 * that were evaluated). A new prompt that starts with `live`, where `live`
 * ends at a clean cut of the new prompt (the start of a special token or of
 * a plain-text run, so the rest tokenizes the same alone as within the
 * whole), evaluates only the rest. Generated tokens stay as sampled even
 * where they are not the canonical tokenization of their text. Failing
 * that, a snapshot taken just before the last prompt token (the generation
 * prompt's "<think>" / "</think>") is tried the same way: it serves the next
 * turn when the template drops the answered turn's reasoning. Otherwise the
 * session is reset and the whole prompt is prefilled.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/internal.h"
#include "text/dsml.h"

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- exact replay of sampled tool calls ---- */

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

void replay_record(struct server *sv, json_t *calls, const char *raw, size_t raw_len) {
    char *ids = join_ids(calls);
    char *copy = malloc(raw_len + 1);
    if (!ids || !copy) {
        free(ids);
        free(copy);
        return;
    }
    memcpy(copy, raw, raw_len);
    copy[raw_len] = '\0';
    pthread_mutex_lock(&sv->mu);
    struct replay_entry *r = &sv->replay[sv->replay_next];
    sv->replay_next = (sv->replay_next + 1) % REPLAY_MAX;
    free(r->ids);
    free(r->raw);
    r->ids = ids;
    r->raw = copy;
    r->raw_len = raw_len;
    pthread_mutex_unlock(&sv->mu);
}

/* ctx: struct replay_ctx (api.c); returns a copy the context frees later. */
struct replay_ctx {
    struct server *sv;
    char *copies[64];
    int n;
};

const char *replay_lookup(void *ctx, const json_t *tool_calls, size_t *len) {
    struct replay_ctx *rc = ctx;
    if (rc->n == (int)(sizeof rc->copies / sizeof rc->copies[0])) return NULL;
    char *ids = join_ids(tool_calls);
    if (!ids) return NULL;
    char *hit = NULL;
    pthread_mutex_lock(&rc->sv->mu);
    for (size_t i = 0; i < REPLAY_MAX; i++) {
        const struct replay_entry *r = &rc->sv->replay[i];
        if (r->ids && !strcmp(r->ids, ids)) {
            hit = malloc(r->raw_len + 1);
            if (hit) {
                memcpy(hit, r->raw, r->raw_len + 1);
                *len = r->raw_len;
            }
            break;
        }
    }
    pthread_mutex_unlock(&rc->sv->mu);
    free(ids);
    if (hit) rc->copies[rc->n++] = hit;
    return hit;
}

/* ---- the live session ---- */

static int live_set(struct server *sv, const char *s, size_t n) {
    sv->live.len = 0;
    return ms_buf_put(&sv->live, s, n);
}

static int live_append(struct server *sv, const char *s, size_t n) {
    return ms_buf_put(&sv->live, s, n);
}

/* The token index at byte offset off of j's prompt if off is a clean cut,
 * else -1. */
static int64_t cut_at(const struct job *j, size_t off) {
    size_t lo = 0, hi = j->n_cuts;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (j->cut_off[mid] < off) lo = mid + 1;
        else hi = mid;
    }
    return lo < j->n_cuts && j->cut_off[lo] == off ? (int64_t)j->cut_tok[lo] : -1;
}

static bool extends(const struct job *j, const char *text, size_t len) {
    return len <= j->prompt_len && !memcmp(j->prompt, text, len);
}

/* Brings the session to j's prompt (see the file comment). Returns the
 * number of prompt tokens reused, or -1 with err. */
static int64_t prepare(struct server *sv, struct job *j, ms_err *err) {
    int64_t from = -1;
    if (sv->live.p && ms_session_n_past(sv->s) > 0 && extends(j, sv->live.p, sv->live.len))
        from = cut_at(j, sv->live.len);
    if (from >= 0) {
        pthread_mutex_lock(&sv->mu);
        sv->m.prefix_hits++;
        pthread_mutex_unlock(&sv->mu);
    } else if (sv->snap && extends(j, sv->snap_text, sv->snap_len) &&
               (from = cut_at(j, sv->snap_len)) >= 0) {
        if (ms_session_restore(sv->s, sv->snap, err)) return -1;
        if (live_set(sv, sv->snap_text, sv->snap_len)) return ms_err_set(err, "out of memory");
        pthread_mutex_lock(&sv->mu);
        sv->m.snapshot_restores++;
        pthread_mutex_unlock(&sv->mu);
    } else {
        ms_session_reset(sv->s);
        sv->live.len = 0;
        from = 0;
        pthread_mutex_lock(&sv->mu);
        sv->m.full_prefills++;
        pthread_mutex_unlock(&sv->mu);
    }
    /* evaluate the rest: up to the last token, snapshot, then the last one */
    const int64_t reused = from;
    const int64_t n = (int64_t)j->n_ids;
    if (n - from >= 2) {
        if (ms_session_eval(sv->s, j->ids + from, n - 1 - from, NULL, err)) goto broken;
        /* the last token starts a clean cut (the generation prompt ends in a
         * special token): keep the state before it */
        if (j->n_cuts >= 2 && j->cut_tok[j->n_cuts - 2] == (size_t)(n - 1)) {
            const size_t at = j->cut_off[j->n_cuts - 2];
            struct ms_snapshot *snap = ms_session_snapshot(sv->s);
            char *text = malloc(at + 1);
            if (snap && text) {
                memcpy(text, j->prompt, at);
                text[at] = '\0';
                ms_snapshot_free(sv->snap);
                free(sv->snap_text);
                sv->snap = snap;
                sv->snap_text = text;
                sv->snap_len = at;
            } else {
                ms_snapshot_free(snap);
                free(text);
            }
        }
        from = n - 1;
    }
    if (n - from >= 1 && ms_session_eval(sv->s, j->ids + from, n - from, NULL, err)) goto broken;
    if (live_set(sv, j->prompt, j->prompt_len)) return ms_err_set(err, "out of memory");
    return reused;
broken:
    ms_session_reset(sv->s);
    sv->live.len = 0;
    return -1;
}

/* ---- generation ---- */

/* Text channel with UTF-8 hold-back: only whole characters go out. */
struct chan {
    char pend[8];
    size_t n;
};

/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8
 * sequence. */
static size_t utf8_whole(const char *s, size_t n) {
    size_t i = n;
    size_t back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) return n;
    const unsigned char c = (unsigned char)s[i - 1];
    size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return back + 1 >= need ? n : i - 1;
}

struct gen {
    struct server *sv;
    struct job *j;
    struct ms_dsml parser;
    struct ms_buf text;    /* content not yet released (stop strings) */
    struct ms_buf rbuf;    /* reasoning bytes not yet whole UTF-8 */
    struct ms_buf cbuf;    /* content bytes not yet whole UTF-8 */
    bool stopped;       /* a stop string matched or the block closed */
    bool tool_error;
    bool tools_done;
};

static void out_text(struct gen *g, struct ms_buf *b, bool reasoning, bool flush) {
    const size_t n = flush ? b->len : utf8_whole(b->p, b->len);
    if (n == 0) return;
    /* the formatters get valid UTF-8: each bad byte becomes U+FFFD */
    struct ms_buf clean = {0};
    ms_utf8_clean(&clean, b->p, n);
    if (reasoning) fmt_reasoning(g->sv, g->j, clean.p, clean.len);
    else fmt_content(g->sv, g->j, clean.p, clean.len);
    ms_buf_free(&clean);
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

/* Content through the stop strings. */
static void content_in(struct gen *g, const char *s, size_t n, bool flush) {
    struct job *j = g->j;
    ms_buf_put(&g->text, s, n);
    size_t release = g->text.len;
    for (size_t k = 0; k < json_array_size(j->stop); k++) {
        const char *st = json_string_value(json_array_get(j->stop, k));
        const size_t sn = st ? strlen(st) : 0;
        if (!sn || !g->text.p) continue;
        const char *hit = memmem(g->text.p, g->text.len, st, sn);
        if (hit) {
            ms_buf_put(&g->cbuf, g->text.p, (size_t)(hit - g->text.p));
            out_text(g, &g->cbuf, false, true);
            g->text.len = 0;
            g->stopped = true;
            j->finish = j->kind == API_MESSAGES ? "stop_sequence" : "stop";
            free(j->stop_seq);
            j->stop_seq = strdup(st);
            return;
        }
        if (!flush)
            for (size_t h = sn - 1 < g->text.len ? sn - 1 : g->text.len; h > 0; h--)
                if (!memcmp(g->text.p + g->text.len - h, st, h)) {
                    if (g->text.len - h < release) release = g->text.len - h;
                    break;
                }
    }
    if (release) {
        ms_buf_put(&g->cbuf, g->text.p, release);
        memmove(g->text.p, g->text.p + release, g->text.len - release);
        g->text.len -= release;
    }
    out_text(g, &g->cbuf, false, flush);
}

static void on_dsml(void *ctx, const struct ms_dsml_ev *ev) {
    struct gen *g = ctx;
    if (g->stopped) return;
    switch (ev->type) {
    case MS_DSML_EV_REASONING:
        ms_buf_put(&g->rbuf, ev->text, ev->len);
        out_text(g, &g->rbuf, true, false);
        break;
    case MS_DSML_EV_CONTENT:
        out_text(g, &g->rbuf, true, true);
        content_in(g, ev->text, ev->len, false);
        break;
    case MS_DSML_EV_TOOL_CALL:
        out_text(g, &g->rbuf, true, true);
        content_in(g, "", 0, true);
        if (!g->stopped) fmt_tool_call(g->sv, g->j, ev->name, ev->args);
        break;
    case MS_DSML_EV_TOOLS_END:
        g->tools_done = true;
        if (g->j->calls && json_array_size(g->j->calls) > 0)
            replay_record(g->sv, g->j->calls, ev->text, ev->len);
        break;
    case MS_DSML_EV_ERROR:
        g->tool_error = true;
        fprintf(stderr, "serve: %s (turn ended)\n", ev->text ? ev->text : "malformed tool call");
        break;
    }
}

static void run_job(struct server *sv, struct job *j) {
    ms_err err = {0};
    j->t_start = now_s();
    const double t0 = now_s();
    const int64_t reused = prepare(sv, j, &err);
    const double t_prefill = now_s() - t0;
    if (reused < 0) {
        j->error = strdup(err.msg);
        j->finish = "error";
        fmt_end(sv, j);
        return;
    }
    j->n_prompt = (int64_t)j->n_ids;
    j->n_cached = reused;
    fmt_begin(sv, j);
    struct ms_sampler *smp = NULL;
    if (ms_sampler_new(&smp, &j->sp, (int32_t)ms_tokenizer_n_vocab(sv->tok), &err)) {
        j->error = strdup(err.msg);
        j->finish = "error";
        fmt_end(sv, j);
        return;
    }
    struct gen g = {.sv = sv, .j = j};
    if (j->parse_output) ms_dsml_init(&g.parser, j->thinking, on_dsml, &g);
    int32_t *script = NULL;
    size_t n_script = 0;
    if (sv->o.n_scripted > 0) {
        const char *text = sv->o.scripted_outputs[sv->n_generations % (uint64_t)sv->o.n_scripted];
        if (ms_tokenizer_encode(sv->tok, text, strlen(text), false, true, &script, &n_script, &err))
            n_script = 0;
    }
    sv->n_generations++;
    const double t1 = now_s();
    const size_t n_vocab = ms_tokenizer_n_vocab(sv->tok);
    float *masked = NULL;
    int64_t n_gen = 0;
    j->finish = "length";
    while (n_gen < j->max_tokens) {
        if (atomic_load(&j->cancel)) {
            j->finish = "cancelled";
            break;
        }
        const float *logits = ms_session_logits(sv->s);
        if (!logits) {
            j->finish = "error";
            j->error = strdup("no logits (empty prompt)");
            break;
        }
        if (j->ignore_eos && sv->eos >= 0) {
            if (!masked) masked = malloc(n_vocab * sizeof *masked);
            if (masked) {
                memcpy(masked, logits, n_vocab * sizeof *masked);
                masked[sv->eos] = -INFINITY;
                logits = masked;
            }
        }
        const int32_t tok = sv->o.n_scripted > 0
                                ? ((size_t)n_gen < n_script ? script[n_gen] : sv->eos)
                                : ms_sampler_sample(smp, logits);
        if (n_gen == 0) j->t_first = now_s();
        if (tok == sv->eos) {
            j->finish = "stop";
            break;
        }
        n_gen++;
        const char *piece, *shown;
        size_t plen, slen;
        ms_tokenizer_piece(sv->tok, tok, true, &piece, &plen);
        /* control tokens other than the thinking and DSML markers are not
         * text (their bytes still go into the live text below) */
        shown = piece;
        slen = plen;
        if (ms_tokenizer_token_type(sv->tok, tok) == MS_TOKEN_CONTROL && tok != sv->think_tok &&
            tok != sv->end_think_tok && !memmem(piece, plen, "DSML", 4))
            slen = 0;
        bool last = false;
        if (j->parse_output) {
            const enum ms_dsml_state st = ms_dsml_feed(&g.parser, shown, slen);
            if (st == MS_DSML_REASONING_STATE) j->n_reasoning++;
            if (st == MS_DSML_ERROR_STATE) break;
            /* a closed block ends the turn; its last token is evaluated so the
             * live session holds the whole block (the next request replays it) */
            last = st == MS_DSML_DONE_STATE;
        } else {
            content_in(&g, shown, slen, false);
        }
        if (g.stopped) break;
        /* at the token limit the last token is evaluated too, so the live
         * session ends where the client's copy of the answer does */
        if (ms_session_n_past(sv->s) >= ms_session_n_ctx(sv->s)) break;
        if (ms_session_eval(sv->s, &tok, 1, NULL, &err)) {
            j->finish = "error";
            j->error = strdup(err.msg);
            ms_session_reset(sv->s);
            sv->live.len = 0;
            break;
        }
        live_append(sv, piece, plen);
        if (last) break;
    }
    if (j->parse_output) {
        if (!g.stopped) ms_dsml_finish(&g.parser);
        ms_dsml_free(&g.parser);
    }
    out_text(&g, &g.rbuf, true, true);
    if (!g.stopped) content_in(&g, "", 0, true);
    if (g.tools_done && !g.tool_error) j->finish = "tool_calls";
    else if (g.tool_error && strcmp(j->finish, "length") && strcmp(j->finish, "cancelled"))
        j->finish = "stop";
    if (g.stopped && !g.tools_done && !j->stop_seq) j->finish = "stop";
    j->n_completion = n_gen;
    j->t_end = now_s();
    const double t_decode = j->t_end - t1;
    free(script);
    free(masked);
    ms_buf_free(&g.text);
    ms_buf_free(&g.rbuf);
    ms_buf_free(&g.cbuf);
    ms_sampler_free(smp);
    pthread_mutex_lock(&sv->mu);
    sv->m.prompt_tokens += (uint64_t)j->n_prompt;
    sv->m.cached_tokens += (uint64_t)j->n_cached;
    sv->m.completion_tokens += (uint64_t)n_gen;
    sv->m.prefill_seconds += t_prefill;
    sv->m.decode_seconds += t_decode;
    if (j->n_prompt > j->n_cached && t_prefill > 0)
        sv->m.last_prefill_tps = (double)(j->n_prompt - j->n_cached) / t_prefill;
    if (n_gen > 1 && t_decode > 0) sv->m.last_decode_tps = (double)n_gen / t_decode;
    if (j->t_first > 0) sv->m.last_ttft = j->t_first - j->t_queued;
    if (!strcmp(j->finish, "cancelled")) sv->m.cancelled++;
    pthread_mutex_unlock(&sv->mu);
    fprintf(stderr,
            "serve: %s: prompt %lld tokens (%lld cached), prefill %.3f s, %lld generated in %.3f s, "
            "finish %s\n",
            j->id, (long long)j->n_prompt, (long long)j->n_cached, t_prefill, (long long)n_gen,
            t_decode, j->finish);
    fmt_end(sv, j);
}

void *worker_main(void *arg) {
    struct server *sv = arg;
    for (;;) {
        pthread_mutex_lock(&sv->mu);
        while (sv->q_len == 0 && !sv->stopping) pthread_cond_wait(&sv->cv, &sv->mu);
        if (sv->q_len == 0 && sv->stopping) {
            pthread_mutex_unlock(&sv->mu);
            break;
        }
        struct job *j = sv->queue[sv->q_head];
        sv->q_head = (sv->q_head + 1) % sv->q_cap;
        sv->q_len--;
        sv->running = j;
        const bool stopping = sv->stopping;
        pthread_mutex_unlock(&sv->mu);
        if (stopping || atomic_load(&j->cancel)) {
            if (!j->finish) j->finish = "cancelled";
            if (stopping && !j->error) j->error = strdup("server shutting down");
            pthread_mutex_lock(&sv->mu);
            sv->m.cancelled++;
            pthread_mutex_unlock(&sv->mu);
            fprintf(stderr, "serve: %s: %s before it ran\n", j->id,
                    stopping ? "refused at shutdown" : "cancelled (client gone)");
            fmt_end(sv, j); /* nothing was sent: the reply is an error */
        } else {
            run_job(sv, j);
        }
        pthread_mutex_lock(&sv->mu);
        sv->running = NULL;
        pthread_mutex_unlock(&sv->mu);
        job_release(j);
    }
    return NULL;
}
