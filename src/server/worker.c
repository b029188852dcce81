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
 * turn when the template drops the answered turn's reasoning. Otherwise
 * the live session and the snapshot are kept in memory (server/parked.h,
 * --kv-ram-mb) and, with a disk KV cache, saved when worth it (reason
 * evict); then the longest kept state the prompt extends, by the same
 * rules, is restored, unless the disk holds a longer prefix: its
 * checkpoint is restored and only the rest of the text is tokenized and
 * prefilled; failing all that the session is reset and the whole prompt
 * is prefilled. Prefill and generation write the store's cold
 * and continued checkpoints; the worker saves the live session once more
 * when it stops (reason shutdown). Only this thread touches the store.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/internal.h"
#include "text/dsml.h"
#include "text/grammar.h"
#include "text/utf8.h"

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

/* Whether a state of n tokens whose text ends at j's token index cut
 * leaves room in the context for the rest of j's prompt and one token
 * more: sampled tokens may spell their text in more tokens than the
 * prompt's own tokenization, so a state can hold more than cut. */
static bool fits_rest(const struct server *sv, const struct job *j, int64_t n, int64_t cut) {
    return cut >= 0 && n + ((int64_t)j->n_ids - cut) < sv->n_ctx;
}

/* Whether the session's first n tokens (which spell j's prompt up to byte
 * len) hold the prompt's own control tokens there: the same bytes may be
 * a marker in one and text a user typed in the other, which must not turn
 * into the marker (ms_tokenizer_same_controls). */
static bool same_controls(const struct server *sv, const struct job *j, int64_t n, size_t len) {
    return ms_tokenizer_same_controls(sv->tok, ms_session_tokens(sv->s), (size_t)n, j->ids, j->n_ids, len);
}

/* ---- the disk KV cache (worker-only: the store is not thread-safe) ---- */

/* Copies the store's figures into the metrics. */
static void kv_publish(struct server *sv) {
    if (!sv->kv) return;
    const struct ms_kv_stats st = ms_kv_get_stats(sv->kv);
    pthread_mutex_lock(&sv->mu);
    sv->m.kv = st;
    pthread_mutex_unlock(&sv->mu);
}

static void kv_save_warn(struct server *sv, enum ms_kv_reason why, const char *what) {
    ms_err e = {0};
    if (ms_kv_save(sv->kv, sv->s, why, &e))
        fprintf(stderr, "serve: %s checkpoint not saved: %s\n", what, e.msg);
}

/* Drops the snapshot (memory and text). */
static void snap_drop(struct server *sv) {
    ms_snapshot_free(sv->snap);
    free(sv->snap_text);
    free(sv->snap_ids);
    sv->snap = NULL;
    sv->snap_text = NULL;
    sv->snap_ids = NULL;
    sv->snap_len = 0;
}

/* Drops the snapshot once the session has left its history (a reset, a
 * disk restore, a failed eval): it shares the session's compressed rows
 * (ms_session_snapshot) and cannot be restored any more. */
static void snap_check(struct server *sv) {
    if (sv->snap && !ms_snapshot_valid(sv->s, sv->snap)) snap_drop(sv);
}

/* Whether the live session is its snapshot plus at most one token (nothing
 * was generated: the snapshot serves a retry with a one-token prefill, so
 * keeping the live session too would keep the same thing twice). */
static bool live_is_snap_plus_one(const struct server *sv) {
    return sv->snap && sv->live.p && sv->snap_len <= sv->live.len &&
           !memcmp(sv->snap_text, sv->live.p, sv->snap_len) &&
           ms_session_n_past(sv->s) - sv->snap_n <= 1;
}

/*
 * Before the live session is replaced by an unrelated prompt (why = evict)
 * or the process exits (shutdown): saves what a later request could extend
 * and the disk does not hold yet. That is the live session (a retry of the
 * same prompt, or a next turn that keeps the answer, as with tools), and
 * the snapshot before the last prompt token (a next turn whose template
 * drops the answer's reasoning). The live session is skipped when it is
 * the snapshot plus one token (nothing was generated: the snapshot serves
 * a retry with a one-token prefill). Shorter than --kv-min-tokens: not
 * worth a file. Leaves the session holding something else (the caller
 * replaces it next, or exits).
 */
static void kv_keep(struct server *sv, enum ms_kv_reason why) {
    if (!sv->kv) return;
    snap_check(sv);
    const int64_t n = ms_session_n_past(sv->s);
    /* a snapshot taken for a prompt's next sample ends inside a text run:
     * it serves that sample (by its tokens), not the cache */
    const bool want_snap = sv->snap && !sv->snap_ids && !sv->snap_on_disk && sv->snap_n >= sv->kv_min_tokens;
    bool want_live = n >= sv->kv_min_tokens && sv->live_disk_n != n && sv->live.len > 0;
    if (want_live && want_snap && live_is_snap_plus_one(sv)) want_live = false;
    if (want_live) {
        kv_save_warn(sv, why, why == MS_KV_EVICT ? "evict" : "shutdown");
        sv->live_disk_n = n;
    }
    if (want_snap) {
        ms_err e = {0};
        if (ms_session_restore(sv->s, sv->snap, &e)) {
            fprintf(stderr, "serve: snapshot not saved: %s\n", e.msg);
        } else {
            kv_save_warn(sv, why, why == MS_KV_EVICT ? "evict" : "shutdown");
            /* the session holds the snapshot now */
            if (live_set(sv, sv->snap_text, sv->snap_len)) sv->live.len = 0;
            sv->live_disk_n = ms_session_n_past(sv->s);
        }
        sv->snap_on_disk = true;
    }
    kv_publish(sv);
}

/* ---- states kept in memory (worker-only) ---------------------------------- */

/* Copies the store's figures into the metrics. */
static void ram_publish(struct server *sv) {
    pthread_mutex_lock(&sv->mu);
    sv->m.ram_parked = sv->pk.parked;
    sv->m.ram_evicted = sv->pk.evicted;
    sv->m.ram_bytes = sv->pk.bytes;
    sv->m.ram_entries = sv->pk.n;
    sv->m.ram_budget = sv->pk.budget;
    pthread_mutex_unlock(&sv->mu);
}

/* Keeps the session's state under text[0..len); whether it is kept. */
static bool ram_park(struct server *sv, const char *text, size_t len) {
    ms_err e = {0};
    const int rc = parked_put(&sv->pk, sv->s, text, len, &e);
    if (rc < 0)
        fprintf(stderr, "serve: session state not kept in memory: %s\n", e.msg);
    else if (rc == 0)
        fprintf(stderr, "serve: a session state of %lld tokens (%.1f MiB) is larger than "
                        "--kv-ram-mb: not kept in memory\n", (long long)ms_session_n_past(sv->s),
                (double)ms_session_state_bytes(sv->s) / (1024.0 * 1024.0));
    return rc > 0;
}

/*
 * Before the live session is replaced by a prompt it does not serve: keeps
 * in memory, and with a disk KV cache on disk (kv_keep), what a later
 * request could extend: the live session, and the snapshot before the last
 * prompt token (the live session is skipped when it is that snapshot plus
 * one token). Leaves the session holding something else; the caller
 * replaces it next.
 */
static void keep_states(struct server *sv) {
    snap_check(sv);
    const int64_t n = ms_session_n_past(sv->s);
    const bool keep_live = n > 0 && sv->live.len > 0 && !live_is_snap_plus_one(sv);
    /* the parked live state's LRU stamp (0: not kept) */
    const uint64_t live_used =
        sv->pk.budget && keep_live && ram_park(sv, sv->live.p, sv->live.len) ? sv->pk.clock : 0;
    kv_keep(sv, MS_KV_EVICT); /* may leave the session holding the snapshot */
    snap_check(sv);
    if (sv->pk.budget && sv->snap && !sv->snap_ids) {
        ms_err e = {0};
        if (ms_session_restore(sv->s, sv->snap, &e)) {
            fprintf(stderr, "serve: snapshot not kept in memory: %s\n", e.msg);
        } else {
            ram_park(sv, sv->snap_text, sv->snap_len);
            if (live_set(sv, sv->snap_text, sv->snap_len)) sv->live.len = 0;
        }
    }
    /* A turn that ended in a tool call is extended next, with the tool's
     * result, from the live state; its snapshot serves only a retry. So
     * that state is the more recently used of the two: when the budget
     * runs short, the snapshot goes first. */
    if (live_used && sv->live_called)
        for (size_t i = 0; i < sv->pk.n; i++)
            if (sv->pk.v[i].used == live_used) {
                parked_touch(&sv->pk, i);
                break;
            }
    ram_publish(sv);
}

/* The kept state that serves j best: the longest whose text j's prompt
 * extends as the live session would serve it (a clean cut of the
 * prompt's tokens, the same control tokens, room for the rest). Its index
 * and j's token index where it ends (*cut), or SIZE_MAX when none does. */
static size_t ram_best(const struct server *sv, const struct job *j, int64_t *cut) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < sv->pk.n; i++) {
        const struct parked_entry *e = &sv->pk.v[i];
        if (best != SIZE_MAX && e->len <= sv->pk.v[best].len) continue;
        if (e->n >= sv->n_ctx || !extends(j, e->text, e->len)) continue;
        const int64_t c = cut_at(j, e->len);
        if (!fits_rest(sv, j, e->n, c) ||
            !ms_tokenizer_same_controls(sv->tok, e->ids, (size_t)e->n, j->ids, j->n_ids, e->len))
            continue;
        best = i;
        *cut = c;
    }
    return best;
}

/* Loads kept state i into the session. 0, or -1 when it did not load (the
 * state is dropped and the session left empty). */
static int ram_load(struct server *sv, const struct job *j, size_t i) {
    const struct parked_entry *e = &sv->pk.v[i];
    ms_err err = {0};
    const double t0 = now_s();
    if (ms_session_state_load(sv->s, e->state, e->state_bytes, &err) ||
        live_set(sv, e->text, e->len)) {
        fprintf(stderr, "serve: %s: a state kept in memory did not load: %s\n", j->id,
                err.msg[0] ? err.msg : "out of memory");
        parked_drop(&sv->pk, i);
        ms_session_reset(sv->s);
        sv->live.len = 0;
        ram_publish(sv);
        return -1;
    }
    parked_touch(&sv->pk, i);
    sv->live_disk_n = -1;
    fprintf(stderr, "serve: %s: restored %lld tokens kept in memory (%.1f MiB in %.3f s)\n", j->id,
            (long long)e->n, (double)e->state_bytes / (1024.0 * 1024.0), now_s() - t0);
    pthread_mutex_lock(&sv->mu);
    sv->m.ram_hits++;
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

/* A prompt the live session and the snapshot do not serve: keeps them
 * (keep_states), then restores the state kept in memory that serves j
 * best (ram_best), unless the disk KV cache holds a longer prefix of it (a
 * tie goes to memory: no read). Returns j's token index where the restored
 * state ends, or -1: the disk KV cache or an empty session next. */
static int64_t switch_states(struct server *sv, const struct job *j) {
    keep_states(sv);
    int64_t cut = -1;
    const size_t i = ram_best(sv, j, &cut);
    if (i == SIZE_MAX) return -1;
    size_t on_disk = 0;
    ms_err e = {0};
    if (sv->kv && ms_kv_longest_prefix(sv->kv, j->prompt, j->prompt_len, sv->n_ctx, &on_disk, &e))
        fprintf(stderr, "serve: %s: disk KV cache lookup: %s\n", j->id, e.msg);
    if (on_disk > sv->pk.v[i].len) return -1;
    return ram_load(sv, j, i) ? -1 : cut;
}

/* Prefills of at least this many tokens log each quarter they pass: a long
 * prompt streamed from disk takes minutes at the real model's size, and
 * the operator sees it move instead of a silent server. */
#define PREFILL_LOG_MIN_TOKENS 1024

/* The progress of one eval_prompt. */
struct prefill_log {
    const struct job *j;
    int64_t n;  /* tokens */
    int next;   /* the next quarter to report, 1 .. 3 */
    double t0;
};

/* ms_progress_fn: one line per quarter passed. It interrupts a scoring
 * pass whose client went away (the scores are of use to it only), never a
 * prefill (a client that went away leaves the prompt prefilled for its
 * retry to reuse). */
static bool prefill_log_progress(void *ctx, int64_t done, int64_t total) {
    struct prefill_log *p = ctx;
    if (p->j->prompt_lp && atomic_load(&((struct job *)p->j)->cancel)) return false;
    const double tok = (double)p->n * (double)done / (double)total;
    for (; p->next < 4 && tok >= (double)p->n * p->next / 4.0; p->next++) {
        const double dt = now_s() - p->t0;
        fprintf(stderr, "serve: %s: prefill %d%% (%lld of %lld tokens, %.1f tok/s)\n", p->j->id,
                25 * p->next, (long long)tok, (long long)p->n, dt > 0 ? tok / dt : 0.0);
    }
    return true;
}

/* Evaluates j's tokens[0..n) into the session, with the store's cold and
 * continued checkpoints when there is one; a long prefill logs its
 * quarters. */
static int eval_prompt(struct server *sv, const struct job *j, const int32_t *tokens, int64_t n,
                       ms_err *err) {
    if (n <= 0) return 0;
    struct prefill_log p = {.j = j, .n = n, .next = 1, .t0 = now_s()};
    const bool logged = n >= PREFILL_LOG_MIN_TOKENS;
    if (logged) ms_session_set_progress(sv->s, prefill_log_progress, &p);
    const int rc = sv->kv ? ms_kv_prefill(sv->kv, sv->s, tokens, n, err)
                          : ms_session_eval(sv->s, tokens, n, NULL, err);
    if (logged) ms_session_set_progress(sv->s, NULL, NULL);
    return rc;
}

/* The scoring of a prompt as its logits come (ms_logits_fn): the entry
 * of each echoed token under the logits before it; false (interrupting
 * the eval) when the client has gone or an entry cannot be made. */
struct scoring {
    struct server *sv;
    struct job *j;
    int64_t bad_pos; /* the position whose entry failed, -1 */
};

static bool score_rows(void *ctx, int64_t pos, int64_t n, const float *logits) {
    struct scoring *sc = ctx;
    struct job *j = sc->j;
    const size_t n_vocab = ms_tokenizer_n_vocab(sc->sv->tok);
    /* unlike a prefill, which a retry would reuse, a scoring pass is of
     * use to its client only: stop when it goes away */
    if (atomic_load(&j->cancel)) return false;
    for (int64_t k = 0; k < n; k++) {
        const int64_t t = pos + k + 1; /* the token these logits predict */
        if (t < (int64_t)j->echo_tok || t >= (int64_t)j->n_ids) continue;
        if (json_array_append_new(j->lp_prompt, lp_entry(sc->sv->tok, logits + (size_t)k * n_vocab, j->ids[t],
                                                         j->logprobs))) {
            sc->bad_pos = pos + k;
            return false;
        }
    }
    return true;
}

/* Prefills j's whole prompt into the (empty) session keeping each token's
 * log-probability under the tokens before it (completions echo with
 * logprobs): j->lp_prompt gets one entry (lp_entry) per echoed token, the
 * first of a prompt without a BOS having none (lp_entry_first). The
 * logits come from the pass as it computes them (ms_session_set_logits_sink),
 * so the prompt is one evaluation as any prefill (one read of a streamed
 * model's routed weights, checkpoints saved alike), in memory of 64 rows
 * of logits. Errors: eval_prompt's; "cancelled" when the client went away;
 * OOM or a non-finite logit. */
static int eval_scored(struct server *sv, struct job *j, ms_err *err) {
    j->lp_prompt = json_array();
    if (!j->lp_prompt) return ms_err_set(err, "out of memory");
    if (j->echo_tok == 0) json_array_append_new(j->lp_prompt, lp_entry_first(sv->tok, j->ids[0]));
    struct scoring sc = {.sv = sv, .j = j, .bad_pos = -1};
    if (ms_session_set_logits_sink(sv->s, score_rows, &sc, 0, err)) return -1;
    int rc = eval_prompt(sv, j, j->ids, (int64_t)j->n_ids, err);
    ms_session_set_logits_sink(sv->s, NULL, NULL, 0, err);
    if (rc && atomic_load(&j->cancel)) rc = ms_err_set(err, "cancelled");
    else if (rc && sc.bad_pos >= 0)
        rc = ms_err_set(err, "out of memory, or a non-finite logit at position %lld", (long long)sc.bad_pos);
    return rc;
}

/* Session state after prepare: tokens of the prompt now in the session and
 * how many of them were reused (not prefilled). */
struct prepared {
    int64_t n_prompt, reused;
};

/* j's token index where the snapshot's text ends, when the snapshot
 * serves j as the live session would (its text starts the prompt at a
 * clean cut, the same control tokens, room for the rest); else -1. */
static int64_t snap_cut(const struct server *sv, const struct job *j) {
    if (sv->snap && sv->snap_ids) {
        /* taken for the next sample of the same prompt (keep_prompt): it
         * ends inside a text run, so it is matched by its tokens, which
         * make the state exactly */
        const int64_t k = sv->snap_n;
        if ((int64_t)j->n_ids <= k || memcmp(j->ids, sv->snap_ids, (size_t)k * sizeof *j->ids) ||
            !extends(j, sv->snap_text, sv->snap_len))
            return -1;
        return fits_rest(sv, j, k, k) ? k : -1;
    }
    if (!sv->snap || !extends(j, sv->snap_text, sv->snap_len) ||
        !same_controls(sv, j, sv->snap_n, sv->snap_len))
        return -1;
    const int64_t cut = cut_at(j, sv->snap_len);
    return fits_rest(sv, j, sv->snap_n, cut) ? cut : -1;
}

/* Brings the session to j's prompt (see the file comment): the live
 * session, the snapshot, the disk KV cache (the longest checkpoint whose
 * text starts the prompt; only the rest of the text is tokenized), or an
 * empty session. Returns 0, or -1 with err (the session is then empty). */
static int prepare(struct server *sv, struct job *j, struct prepared *out, ms_err *err) {
    const int32_t *ids = j->ids; /* evaluated: ids[from..n) */
    int64_t n = (int64_t)j->n_ids, from = -1;
    int32_t *suffix = NULL;        /* after a disk restore: the rest of the prompt's tokens */
    int64_t base = 0;              /* tokens in the session before ids[from] (disk restore) */
    size_t text_from = 0;          /* prompt bytes the session holds before ids[from] */
    snap_check(sv);
    if (j->prompt_lp) {
        /* every position's logits are needed, and neither a reused state
         * nor a checkpoint has them: the whole prompt, from empty */
        keep_states(sv);
        ms_session_reset(sv->s);
        sv->live.len = 0;
        sv->live_disk_n = -1;
        pthread_mutex_lock(&sv->mu);
        sv->m.full_prefills++;
        pthread_mutex_unlock(&sv->mu);
        out->reused = 0;
        out->n_prompt = n;
        if (eval_scored(sv, j, err)) goto broken;
        goto evaluated;
    }
    if (sv->live.p && ms_session_n_past(sv->s) > 0 && extends(j, sv->live.p, sv->live.len) &&
        same_controls(sv, j, ms_session_n_past(sv->s), sv->live.len)) {
        from = cut_at(j, sv->live.len);
        if (!fits_rest(sv, j, ms_session_n_past(sv->s), from)) from = -1;
    }
    if (from >= 0) {
        text_from = sv->live.len;
        pthread_mutex_lock(&sv->mu);
        sv->m.prefix_hits++;
        pthread_mutex_unlock(&sv->mu);
    } else if ((from = snap_cut(sv, j)) >= 0) {
        if (ms_session_restore(sv->s, sv->snap, err)) goto broken;
        if (live_set(sv, sv->snap_text, sv->snap_len)) {
            ms_err_set(err, "out of memory");
            goto broken;
        }
        sv->live_disk_n = sv->snap_on_disk ? sv->snap_n : -1;
        text_from = sv->snap_len;
        pthread_mutex_lock(&sv->mu);
        sv->m.snapshot_restores++;
        pthread_mutex_unlock(&sv->mu);
    } else if ((from = switch_states(sv, j)) >= 0) {
        text_from = sv->live.len;
    } else {
        struct ms_kv_restored kr = {0};
        /* token ids as sent stay as sent: a checkpoint's rest would be
         * tokenized from the text */
        if (sv->kv && !j->ids_given) {
            if (ms_kv_restore_prefix(sv->kv, sv->s, j->prompt, j->prompt_len, j->ids,
                                     (int64_t)j->n_ids, &kr, err))
                goto broken;
            size_t m = 0;
            const bool tok_ok = kr.n_tokens > 0 &&
                                api_tokenize_from(sv, j, kr.text_bytes, &suffix, &m, err) == 0;
            if (tok_ok && kr.n_tokens + (int64_t)m < sv->n_ctx) {
                ids = suffix;
                n = (int64_t)m;
                from = 0;
                base = kr.n_tokens;
                text_from = kr.text_bytes;
                sv->live_disk_n = kr.n_tokens;
                pthread_mutex_lock(&sv->mu);
                sv->m.kv_hits++;
                pthread_mutex_unlock(&sv->mu);
                fprintf(stderr, "serve: %s: restored %lld tokens from the disk KV cache\n", j->id,
                        (long long)kr.n_tokens);
            } else if (kr.n_tokens > 0) {
                fprintf(stderr, "serve: %s: restored checkpoint not used (%s)\n", j->id,
                        tok_ok ? "its tokens and the rest exceed the context"
                               : "the rest of the prompt does not tokenize");
                free(suffix);
                suffix = NULL;
            }
            kv_publish(sv);
        }
        if (from < 0) {
            ms_session_reset(sv->s);
            sv->live_disk_n = -1;
            from = 0;
            pthread_mutex_lock(&sv->mu);
            sv->m.full_prefills++;
            pthread_mutex_unlock(&sv->mu);
        }
        sv->live.len = 0;
    }
    /* evaluate the rest: up to the last token, snapshot, then the last one.
     * The snapshot is taken when the last token is the prompt's last clean
     * cut (the generation prompt ends in a special token) and the session
     * does not hold it yet. */
    out->reused = base > 0 ? base : from;
    out->n_prompt = base > 0 ? base + n : (int64_t)j->n_ids;
    const bool clean_last = j->n_cuts >= 2 && j->cut_tok[j->n_cuts - 2] == j->n_ids - 1;
    /* a prompt whose next sample follows (several choices): a snapshot
     * before its last token even inside a text run, matched by tokens */
    const bool for_next = !clean_last && j->keep_prompt && base == 0;
    if (n - from >= 1 && (clean_last || for_next)) {
        const char *piece;
        size_t plen;
        ms_tokenizer_piece(sv->tok, ids[n - 1], true, &piece, &plen);
        const size_t at = clean_last ? j->cut_off[j->n_cuts - 2] : plen <= j->prompt_len ? j->prompt_len - plen : 0;
        const bool last_is_cut = at >= text_from && plen == j->prompt_len - at &&
                                 !memcmp(piece, j->prompt + at, plen);
        if (eval_prompt(sv, j, ids + from, n - 1 - from, err)) goto broken;
        if (n - 1 > from) sv->live_disk_n = -1;
        from = n - 1;
        snap_check(sv); /* a disk restore above leaves it stale */
        const bool have = sv->snap && sv->snap_len == at && sv->snap_n == ms_session_n_past(sv->s) &&
                          !memcmp(sv->snap_text, j->prompt, at);
        if (last_is_cut && !have) {
            /* the old snapshot goes first: the memory plan counts one */
            snap_drop(sv);
            struct ms_snapshot *snap = ms_session_snapshot(sv->s);
            char *text = snap ? malloc(at + 1) : NULL;
            int32_t *snap_ids = for_next && snap ? malloc((size_t)(n - 1) * sizeof *snap_ids + 1) : NULL;
            if (snap && text && (!for_next || snap_ids)) {
                memcpy(text, j->prompt, at);
                text[at] = '\0';
                if (snap_ids) memcpy(snap_ids, j->ids, (size_t)(n - 1) * sizeof *snap_ids);
                sv->snap_ids = snap_ids;
                sv->snap = snap;
                sv->snap_text = text;
                sv->snap_len = at;
                sv->snap_n = ms_session_n_past(sv->s);
                sv->snap_on_disk = sv->live_disk_n == sv->snap_n; /* e.g. just restored from disk */
            } else {
                ms_snapshot_free(snap);
                free(text);
                free(snap_ids);
            }
        }
    }
    if (eval_prompt(sv, j, ids + from, n - from, err)) goto broken;
    if (n - from > 0) sv->live_disk_n = -1;
    free(suffix);
evaluated:
    if (live_set(sv, j->prompt, j->prompt_len)) {
        ms_err_set(err, "out of memory");
        goto broken_freed;
    }
    kv_publish(sv);
    return 0;
broken:
    free(suffix);
broken_freed:
    ms_session_reset(sv->s);
    sv->live.len = 0;
    sv->live_disk_n = -1;
    kv_publish(sv);
    return -1;
}

/* ---- generation ---- */

struct gen {
    struct server *sv;
    struct job *j;
    struct ms_dsml parser;
    struct ms_buf text;    /* content not yet released (stop strings) */
    struct ms_buf rbuf;    /* reasoning bytes not yet whole UTF-8 */
    struct ms_buf cbuf;    /* content bytes not yet whole UTF-8 */
    struct ms_buf sig;     /* the block's calls (replay_sig_add) */
    bool close_block;      /* one_call: the first call is complete, close the block */
    bool stopped;       /* a stop string matched or the block closed */
    bool tool_error;
    bool tools_done;
    int64_t content_in; /* raw content bytes into content_in so far (where
                           the next token's text starts, with the parser's
                           held bytes: logprob entries) */
};

static void out_text(struct gen *g, struct ms_buf *b, bool reasoning, bool flush) {
    const size_t n = flush ? b->len : b->len - ms_utf8_partial_tail(b->p, b->len);
    if (n == 0) return;
    /* the formatters get valid UTF-8 without NUL (each bad byte and each
     * NUL becomes U+FFFD): a request cannot carry \u0000 back, and a client
     * echoes the answer in its next turn */
    struct ms_buf clean = {0};
    ms_utf8_clean_text(&clean, b->p, n);
    if (reasoning) {
        fmt_reasoning(g->sv, g->j, clean.p, clean.len);
    } else {
        g->j->lp_sent_raw += (int64_t)n; /* the entries of these bytes go with them */
        fmt_content(g->sv, g->j, clean.p, clean.len);
    }
    ms_buf_free(&clean);
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

/* Content through the stop strings. */
static void content_in(struct gen *g, const char *s, size_t n, bool flush) {
    struct job *j = g->j;
    g->content_in += (int64_t)n;
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
        if (!g->stopped && !g->j->has_tools) {
            /* no tools offered (none sent, or tool_choice "none"): a call
             * the model writes anyway is not the client's to run */
            fprintf(stderr, "serve: %s: a call of '%s' with no tools offered (dropped)\n", g->j->id, ev->name);
        } else if (!g->stopped) {
            replay_sig_add(&g->sig, ev->name, ev->args);
            fmt_tool_call(g->sv, g->j, ev->name, ev->args);
            if (g->j->one_call) g->close_block = true;
        }
        break;
    case MS_DSML_EV_TOOLS_END:
        g->tools_done = true;
        if (g->j->calls && json_array_size(g->j->calls) > 0)
            replay_record(g->sv, g->j->calls, g->sig.p ? g->sig.p : "", ev->text, ev->len, &g->j->reasoning,
                          g->parser.block_in_reasoning);
        break;
    case MS_DSML_EV_ERROR:
        g->tool_error = true;
        fprintf(stderr, "serve: %s (turn ended)\n", ev->text ? ev->text : "malformed tool call");
        break;
    }
}

/* ---- tokens the server writes for the model ----
 *
 * A forced tool call (tool_choice) and one call a turn (parallel_tool_calls
 * false) are not sampled: the server writes their markup where the model
 * would, as the template renders a call, and the model writes the rest.
 * The tokens go through the parser and into the live session like sampled
 * ones, so the next turn replays them. */
struct written {
    /* the forced call: forced[0] is "</think>", written first only when the
     * model would end its turn while still thinking; forced[1 .. i_invoke)
     * the block's opening, forced[i_invoke .. n_forced) a named tool's
     * invoke line; i_forced the next one, 1 until forcing starts */
    int32_t *forced;
    size_t n_forced, i_forced, i_invoke;
    bool forcing;
    int32_t *closing; /* one call a turn: the block's closing */
    size_t n_closing, i_closing;
    bool close_fitted; /* the closing was fitted to what followed the call */
};

/* s[0 .. n) as tokens, special-token text parsed (malloc'd; NULL and
 * *n_out 0 on failure). */
static int32_t *encode_special(const struct server *sv, const char *s, size_t n, size_t *n_out) {
    int32_t *ids = NULL;
    ms_err err;
    *n_out = 0;
    if (ms_tokenizer_encode(sv->tok, s, n, false, true, &ids, n_out, &err)) return NULL;
    return ids;
}

static void written_init(const struct server *sv, const struct job *j, struct written *w) {
    *w = (struct written){.i_forced = 1};
    /* the forced call starts at once, or when the reasoning closes */
    if (j->force_call && (!j->thinking || sv->end_think_tok >= 0)) {
        /* the opening and a named tool's invoke line, tokenized apart (the
         * invoke line goes alone after a block the model opened itself) */
        const char *inv = strstr(j->force_call, "<" MS_DSML "invoke");
        const size_t n_open = inv ? (size_t)(inv - j->force_call) : strlen(j->force_call);
        size_t n = 0, n2 = 0;
        int32_t *ids = encode_special(sv, j->force_call, n_open, &n);
        int32_t *ids2 = inv ? encode_special(sv, inv, strlen(inv), &n2) : NULL;
        if (ids && (!inv || ids2) && (w->forced = malloc((1 + n + n2) * sizeof *w->forced))) {
            w->forced[0] = sv->end_think_tok;
            memcpy(w->forced + 1, ids, n * sizeof *ids);
            if (n2) memcpy(w->forced + 1 + n, ids2, n2 * sizeof *ids2);
            w->n_forced = 1 + n + n2;
            w->i_invoke = 1 + n;
            w->forcing = !j->thinking;
        }
        free(ids);
        free(ids2);
    }
    if (j->one_call) {
        static const char close_text[] = "\n</" MS_DSML "tool_calls>";
        w->closing = encode_special(sv, close_text, strlen(close_text), &w->n_closing);
    }
}

/* One call a turn, free sampling: the first call is complete and pend[0
 * .. n) is what the model wrote after it. A token may have begun the
 * closing tag already ("></" ends the call and starts it): the closing
 * written is then the rest of the tag. Other text leaves the closing as
 * planned (the parser will refuse the block). */
static void written_close_fit(const struct server *sv, struct written *w, const char *pend, size_t n) {
    w->close_fitted = true;
    size_t i = 0;
    while (i < n && (pend[i] == ' ' || pend[i] == '\n' || pend[i] == '\r' || pend[i] == '\t')) i++;
    const char *tag = MS_DSML_CALLS_CLOSE;
    if (i == n || n - i >= strlen(tag) || memcmp(pend + i, tag, n - i)) return;
    size_t m = 0;
    int32_t *ids = encode_special(sv, tag + (n - i), strlen(tag) - (n - i), &m);
    if (!ids) return;
    free(w->closing);
    w->closing = ids;
    w->n_closing = m;
    w->i_closing = 0;
}

/* The next token to write instead of sampling, or -1 (close: the block's
 * first call is complete). */
static int32_t written_next(struct written *w, bool close) {
    if (close && w->i_closing < w->n_closing) return w->closing[w->i_closing++];
    if (w->forcing && w->i_forced < w->n_forced) return w->forced[w->i_forced++];
    return -1;
}

/* The model's end token eos, when a forced call is still due: the call's
 * first token instead ("</think>" when still_reasoning). */
static int32_t written_at_end(struct written *w, int32_t eos, bool still_reasoning) {
    if (w->forcing || w->i_forced != 1 || w->n_forced <= 1) return eos;
    w->forcing = true;
    if (still_reasoning) w->i_forced = 0;
    return w->forced[w->i_forced++];
}

/* After the parser took the model's token, in state st: a forced call
 * starts when the reasoning closes ("</think>" as a token or as text); a
 * block the model opened itself stands, a named tool's invoke going first. */
static void written_after(struct written *w, enum ms_dsml_state st) {
    if (!w->n_forced || w->forcing || w->i_forced != 1) return;
    if (st == MS_DSML_TOOLS_STATE) {
        w->forcing = w->i_invoke < w->n_forced;
        w->i_forced = w->i_invoke;
        if (!w->forcing) w->n_forced = 0;
    } else if (st == MS_DSML_CONTENT_STATE) {
        w->forcing = true;
    }
}

static void written_free(struct written *w) {
    free(w->forced);
    free(w->closing);
}

/* Whether tok is one of DeepSeek V4's DSML marker tokens (a control token
 * whose text names DSML). */
static bool dsml_token(const struct server *sv, int32_t tok) {
    if (ms_tokenizer_token_type(sv->tok, tok) != MS_TOKEN_CONTROL) return false;
    const char *p;
    size_t n;
    ms_tokenizer_piece(sv->tok, tok, true, &p, &n);
    return memmem(p, n, "DSML", 4) != NULL;
}

/* The vocabulary index of structured output, made once, and the DSML
 * marker tokens: they are text to the index, so a grammar can let a
 * tool-call block start. */
static int grammar_vocab(struct server *sv, ms_err *err) {
    if (sv->gvocab) return 0;
    const uint32_t n = ms_tokenizer_n_vocab(sv->tok);
    free(sv->dsml_ids);
    sv->n_dsml = 0;
    sv->dsml_ids = malloc((n ? n : 1) * sizeof *sv->dsml_ids);
    if (!sv->dsml_ids) return ms_err_set(err, "out of memory");
    for (uint32_t id = 0; id < n; id++)
        if (dsml_token(sv, (int32_t)id)) sv->dsml_ids[sv->n_dsml++] = (int32_t)id;
    return ms_grammar_vocab_new(&sv->gvocab, sv->tok, sv->dsml_ids, sv->n_dsml, err);
}

/*
 * Structured output's part of a decode step: the logits to sample from,
 * copied into *masked and restricted. While the model reasons, only the
 * end of sentence is ruled out (a reply with a format must reach its
 * answer). In the answer, the DSML markers are ruled out unless the
 * request has tools (and EOS already is under ignore_eos), then the
 * grammar's mask: the sampler keeps at most k tokens first (1 when
 * greedy, top_k), so ms_grammar_mask_top checks only those where it can.
 * 1: *logits points at the masked copy; 0: nothing is allowed and the
 * grammar is complete (the answer ends); -1 with err.
 */
static int constrain_step(struct server *sv, const struct job *j, struct ms_grammar_matcher *gm, bool answer,
                          const float **logits, float **masked, ms_err *err) {
    const size_t n_vocab = ms_tokenizer_n_vocab(sv->tok);
    if (!*masked && !(*masked = malloc(n_vocab * sizeof **masked))) return ms_err_set(err, "out of memory");
    if (*logits != *masked) memcpy(*masked, *logits, n_vocab * sizeof **masked);
    *logits = *masked;
    if (!answer) {
        if (sv->eos >= 0) (*masked)[sv->eos] = -INFINITY;
        return 1;
    }
    if (!j->has_tools)
        for (size_t i = 0; i < sv->n_dsml; i++) (*masked)[sv->dsml_ids[i]] = -INFINITY;
    return ms_grammar_constrain(gm, sv->gvocab, *masked, sv->eos, ms_sampler_first_cut(&j->sp), err);
}

/* The tools' grammar stops holding j's call (why: a phrase, logged); the
 * call goes on free. */
static void tool_block_drop(const struct job *j, struct ms_grammar_matcher **tm, const char *why) {
    fprintf(stderr, "serve: %s: the tools' grammar gave up (%s); the call goes on unconstrained\n", j->id, why);
    ms_grammar_matcher_free(*tm);
    *tm = NULL;
}

/* The logits a decode step samples from: the model's raw ones, or under
 * ignore_eos a copy in *masked (allocated on first use) with end of
 * sentence ruled out (raw again when that copy cannot be made). */
static const float *eos_ruled_out(const struct server *sv, const struct job *j, const float *raw, float **masked) {
    if (!j->ignore_eos || sv->eos < 0) return raw;
    const size_t n_vocab = ms_tokenizer_n_vocab(sv->tok);
    if (!*masked && !(*masked = malloc(n_vocab * sizeof **masked))) return raw;
    memcpy(*masked, raw, n_vocab * sizeof **masked);
    (*masked)[sv->eos] = -INFINITY;
    return *masked;
}

/* A tool-call block opened (the DSML parser p just entered it): the
 * matcher of j's tool grammar, in *tm, fed what the block holds so far
 * (its opening tag, and whatever came with it). A block the grammar
 * refuses from the start (more whitespace after the tag than it allows)
 * goes on free, logged. 0, or -1 with err (OOM). */
static int tool_block_start(struct server *sv, const struct job *j, const struct ms_dsml *p,
                            struct ms_grammar_matcher **tm, ms_err *err) {
    if (grammar_vocab(sv, err) || ms_grammar_matcher_new(tm, j->tool_grammar, err)) return -1;
    const int rc = ms_grammar_matcher_accept(*tm, p->buf + p->block_ws, p->len - p->block_ws, err);
    if (rc < 0) return -1;
    if (rc == 0) tool_block_drop(j, tm, "the block's opening does not fit it");
    return 0;
}

/* Moves the tool grammar's matcher *tm over a piece of the block. A
 * token the server wrote (a forced call's markup) that the grammar
 * refuses ends the constraint, logged, and so does a grammar too
 * ambiguous to follow; a sampled one cannot be refused (the mask allowed
 * it): an internal error. 0, or -1 with err. */
static int tool_block_accept(const struct job *j, struct ms_grammar_matcher **tm, const char *piece, size_t n,
                             bool written, ms_err *err) {
    const int rc = ms_grammar_matcher_accept(*tm, piece, n, err);
    if (rc == 0 && !written) return ms_err_set(err, "internal error: a token the tools' grammar refuses was chosen");
    if (rc < 0) tool_block_drop(j, tm, err->msg); /* too ambiguous (or OOM) */
    if (rc == 0) tool_block_drop(j, tm, "the forced call's markup does not fit it");
    return 0;
}

static void run_job(struct server *sv, struct job *j) {
    ms_err err = {0};
    j->t_start = now_s();
    const double t0 = now_s();
    struct prepared pp;
    const int prc = prepare(sv, j, &pp, &err);
    const double t_prefill = now_s() - t0;
    if (prc) {
        j->error = strdup(err.msg);
        j->finish = "error";
        if (atomic_load(&j->cancel)) {
            j->finish = "cancelled";
            pthread_mutex_lock(&sv->mu);
            sv->m.cancelled++;
            const bool stopping = sv->stopping;
            pthread_mutex_unlock(&sv->mu);
            if (stopping) { /* retryable elsewhere: a 503 */
                free(j->error);
                j->error = strdup("server shutting down");
            }
            fprintf(stderr, "serve: %s: scoring cancelled (%s)\n", j->id, stopping ? "server shutting down" : "client gone");
        }
        fmt_end(sv, j);
        return;
    }
    j->n_prompt = pp.n_prompt;
    j->n_cached = pp.reused;
    fmt_begin(sv, j);
    if (j->echo) {
        /* the client's prompt starts the text, with its tokens' entries */
        if (j->lp_prompt) {
            json_t *e;
            size_t i;
            json_array_foreach(j->lp_prompt, i, e) fmt_logprob(j, json_incref(e), -1);
        }
        /* token ids' pieces need not be whole UTF-8 */
        struct ms_buf clean = {0};
        ms_utf8_clean_text(&clean, j->prompt + j->echo_off, j->prompt_len - j->echo_off);
        fmt_content(sv, j, clean.p ? clean.p : "", clean.len);
        ms_buf_free(&clean);
    }
    struct ms_sampler *smp = NULL;
    if (ms_sampler_new(&smp, &j->sp, (int32_t)ms_tokenizer_n_vocab(sv->tok), &err)) {
        j->error = strdup(err.msg);
        j->finish = "error";
        fmt_end(sv, j);
        return;
    }
    struct gen g = {.sv = sv, .j = j};
    if (j->parse_output) ms_dsml_init(&g.parser, j->thinking, on_dsml, &g);
    /* structured output: the matcher of j's grammar, applied to the answer
     * (the whole output of a completion) until a tool-call block opens or
     * a token is forced */
    struct ms_grammar_matcher *gm = NULL;
    bool gm_on = false;
    double mask_seconds = 0; /* the format's masks, over mask_steps steps (logged) */
    int64_t mask_steps = 0;
    if (j->grammar && sv->o.n_scripted == 0) {
        if (grammar_vocab(sv, &err) || ms_grammar_matcher_new(&gm, j->grammar, &err)) {
            j->error = strdup(err.msg);
            j->finish = "error";
            ms_sampler_free(smp);
            if (j->parse_output) ms_dsml_free(&g.parser);
            fmt_end(sv, j);
            return;
        }
        gm_on = true;
    }
    /* the tools' grammar: its matcher starts at a tool-call block's opening
     * tag (the answer before it is free, or the format's) */
    struct ms_grammar_matcher *tcm = NULL;
    bool tm_on = j->tool_grammar && j->parse_output && sv->o.n_scripted == 0;
    double tool_mask_seconds = 0;
    int64_t tool_mask_steps = 0;
    int32_t *script = NULL;
    size_t n_script = 0, i_script = 0;
    if (sv->o.n_scripted > 0) {
        const char *text = sv->o.scripted_outputs[sv->n_generations % (uint64_t)sv->o.n_scripted];
        script = encode_special(sv, text, strlen(text), &n_script);
    }
    sv->n_generations++;
    struct written wr;
    written_init(sv, j, &wr);
    /* speculative decoding over the prompt just evaluated (or restored);
     * without it, a stepper that never guesses keeps one loop */
    const struct ms_spec_params plain = {.draft_max = 0, .ngram_min = 1};
    struct ms_spec *sp = sv->spec, *own = NULL;
    const struct ms_spec_hooks hooks = ms_spec_kv_hooks(sv->kv);
    if (sp ? ms_spec_begin(sp, &err)
           : ms_spec_new(&own, sv->s, (int32_t)ms_tokenizer_n_vocab(sv->tok), &plain, &hooks, &err)) {
        j->error = strdup(err.msg);
        j->finish = "error";
        written_free(&wr);
        free(script);
        ms_grammar_matcher_free(gm);
        ms_sampler_free(smp);
        if (j->parse_output) ms_dsml_free(&g.parser);
        fmt_end(sv, j);
        return;
    }
    if (own) sp = own;
    const double t1 = now_s();
    const size_t n_vocab = ms_tokenizer_n_vocab(sv->tok);
    float *masked = NULL;
    int64_t n_gen = 0;
    j->finish = "length";
    while (n_gen < j->max_tokens) {
        if (atomic_load(&j->cancel)) {
            j->finish = "cancelled";
            /* stopped by a shutdown, not by its client: an answer cut short
             * must not read as complete (503, or an error event) */
            pthread_mutex_lock(&sv->mu);
            const bool stopping = sv->stopping;
            pthread_mutex_unlock(&sv->mu);
            if (stopping && !j->error) j->error = strdup("server shutting down");
            break;
        }
        const float *logits = ms_spec_logits(sp);
        if (!logits) {
            j->finish = "error";
            j->error = strdup("no logits (empty prompt)");
            break;
        }
        const float *raw = logits; /* the model's: what logprobs report */
        /* NaN or infinite logits (weights or activations holding them) make
         * every probability meaningless: an error, not whatever the sampler
         * picks (as `run` does) */
        int64_t bad = -1;
        for (size_t v = 0; v < n_vocab && bad < 0; v++)
            if (isnan(logits[v]) || logits[v] == INFINITY) bad = (int64_t)v;
        if (bad >= 0) {
            char msg[256];
            snprintf(msg, sizeof msg, "the model produced a non-finite logit (%g for token %lld) at position %lld: "
                     "the weights or activations hold NaN or infinity", (double)logits[bad], (long long)bad,
                     (long long)ms_session_n_past(sv->s));
            j->finish = "error";
            j->error = strdup(msg);
            break;
        }
        logits = eos_ruled_out(sv, j, raw, &masked);
        /* one call a turn: the tools' grammar closes the block itself (a
         * written closing could land after a token that began it) */
        if (g.close_block && !tcm && !wr.close_fitted)
            written_close_fit(sv, &wr, g.parser.buf + g.parser.scan, g.parser.len - g.parser.scan);
        int32_t tok = written_next(&wr, g.close_block && !tcm);
        const bool written = tok >= 0;
        if (written) gm_on = false; /* a forced tool call: the grammar is for an answer */
        const bool in_block = tcm && g.parser.state == MS_DSML_TOOLS_STATE;
        if (!written && in_block) {
            const double tm0 = now_s();
            const int rc = constrain_step(sv, j, tcm, true, &logits, &masked, &err);
            tool_mask_seconds += now_s() - tm0;
            tool_mask_steps++;
            if (rc < 0) {
                /* too ambiguous here (a custom tool's alternation of
                 * thousands): the call goes on free rather than fail */
                tool_block_drop(j, &tcm, err.msg);
                logits = eos_ruled_out(sv, j, raw, &masked);
            } else if (rc == 0) {
                tok = sv->eos;
            }
        }
        const bool constrain = gm_on && (!j->parse_output || g.parser.state == MS_DSML_CONTENT_STATE);
        const bool reasoning = gm_on && j->parse_output && g.parser.state == MS_DSML_REASONING_STATE;
        if (tok < 0 && (constrain || reasoning) && sv->o.n_scripted == 0) {
            const double tm = now_s();
            const int rc = constrain_step(sv, j, gm, constrain, &logits, &masked, &err);
            if (constrain) {
                mask_seconds += now_s() - tm;
                mask_steps++;
            }
            if (rc < 0) {
                j->finish = "error";
                j->error = strdup(err.msg);
                break;
            }
            if (rc == 0) tok = sv->eos;
        }
        if (tok < 0) tok = sv->o.n_scripted > 0 ? (i_script < n_script ? script[i_script++] : sv->eos)
                                                : ms_sampler_sample(smp, logits);
        /* the turn would end before a forced call: it is written instead */
        if (tok == sv->eos) tok = written_at_end(&wr, sv->eos, j->parse_output && g.parser.state == MS_DSML_REASONING_STATE);
        if (n_gen == 0) j->t_first = now_s();
        if (tok == sv->eos) {
            j->finish = "stop";
            break;
        }
        n_gen++;
        const char *piece, *shown;
        size_t plen, slen;
        ms_tokenizer_piece(sv->tok, tok, true, &piece, &plen);
        if (constrain) {
            /* the piece the mask allowed moves the matcher (once a
             * tool-call block's opening tag is through, the DSML parser
             * leaves the answer state and the grammar is not applied) */
            const int rc = ms_grammar_matcher_accept(gm, piece, plen, &err);
            if (rc <= 0) {
                j->finish = "error";
                j->error = strdup(rc < 0 ? err.msg : "internal error: a token the response format refuses was chosen");
                break;
            }
        }
        /* control tokens other than the thinking and DSML markers are not
         * text (their bytes still go into the live text below) */
        shown = piece;
        slen = plen;
        if (ms_tokenizer_token_type(sv->tok, tok) == MS_TOKEN_CONTROL && tok != sv->think_tok &&
            tok != sv->end_think_tok && !memmem(piece, plen, "DSML", 4))
            slen = 0;
        /* its log-probability goes out with the content that sends its
         * first byte: none for reasoning, none for text that never reaches
         * the content (a tool-call block's opening, text after a stop) */
        if (j->logprobs >= 0 && slen > 0 && (!j->parse_output || g.parser.state == MS_DSML_CONTENT_STATE))
            fmt_logprob(j, lp_entry(sv->tok, raw, tok, j->logprobs),
                        g.content_in + (j->parse_output ? (int64_t)g.parser.len : 0));
        bool last = false;
        if (in_block && tcm && tool_block_accept(j, &tcm, shown, slen, written, &err)) {
            j->finish = "error";
            j->error = strdup(err.msg);
            break;
        }
        if (j->parse_output) {
            const enum ms_dsml_state before = g.parser.state;
            const enum ms_dsml_state st = ms_dsml_feed(&g.parser, shown, slen);
            if (tm_on && before != MS_DSML_TOOLS_STATE && st == MS_DSML_TOOLS_STATE) {
                tm_on = false;
                if (tool_block_start(sv, j, &g.parser, &tcm, &err)) {
                    j->finish = "error";
                    j->error = strdup(err.msg);
                    break;
                }
            }
            if (st == MS_DSML_REASONING_STATE) j->n_reasoning++;
            if (st == MS_DSML_ERROR_STATE) {
                j->finish = "stop"; /* a malformed block ends the turn, not the token limit */
                break;
            }
            written_after(&wr, st);
            /* a closed block ends the turn; its last token is evaluated so the
             * live session holds the whole block (the next request replays it) */
            last = st == MS_DSML_DONE_STATE;
        } else {
            content_in(&g, shown, slen, false);
        }
        if (g.stopped) break;
        /* at the token limit the last token is evaluated too, so the live
         * session ends where the client's copy of the answer does */
        if (ms_spec_n_past(sp) >= ms_session_n_ctx(sv->s)) break;
        /* evaluated now, or already as the guess there (a continued disk
         * checkpoint is saved through the stepper's hooks where plain
         * decoding would save it) */
        if (ms_spec_accept(sp, tok, &err)) {
            j->finish = "error";
            j->error = strdup(err.msg);
            ms_session_reset(sv->s);
            ms_spec_begin(sp, &err);
            sv->live.len = 0;
            sv->live_disk_n = -1;
            break;
        }
        live_append(sv, piece, plen);
        if (last) break;
    }
    /* the live session ends at the last accepted token: its guesses go */
    if (ms_spec_finish(sp, &err)) {
        if (!j->error) {
            j->finish = "error";
            j->error = strdup(err.msg);
        }
        ms_session_reset(sv->s);
        sv->live.len = 0;
        sv->live_disk_n = -1;
    }
    const struct ms_spec_stats sps = ms_spec_get_stats(sp);
    ms_spec_free(own);
    if (j->parse_output) {
        if (!g.stopped) ms_dsml_finish(&g.parser);
        ms_dsml_free(&g.parser);
    }
    out_text(&g, &g.rbuf, true, true);
    if (!g.stopped) content_in(&g, "", 0, true);
    if (g.tools_done && !g.tool_error && j->n_calls > 0) j->finish = "tool_calls";
    else if (g.tools_done && !g.tool_error) j->finish = "stop"; /* its calls were dropped */
    else if (g.tool_error && strcmp(j->finish, "length") && strcmp(j->finish, "cancelled"))
        j->finish = "stop";
    if (g.stopped && !g.tools_done && !j->stop_seq) j->finish = "stop";
    sv->live_called = !strcmp(j->finish, "tool_calls");
    j->n_completion = n_gen;
    j->t_end = now_s();
    const double t_decode = j->t_end - t1;
    kv_publish(sv);
    free(script);
    written_free(&wr);
    ms_grammar_matcher_free(gm);
    ms_grammar_matcher_free(tcm);
    free(masked);
    ms_buf_free(&g.text);
    ms_buf_free(&g.sig);
    ms_buf_free(&g.rbuf);
    ms_buf_free(&g.cbuf);
    ms_sampler_free(smp);
    pthread_mutex_lock(&sv->mu);
    sv->m.prompt_tokens += (uint64_t)j->n_prompt;
    sv->m.cached_tokens += (uint64_t)j->n_cached;
    sv->m.completion_tokens += (uint64_t)n_gen;
    sv->m.decode_evals += (uint64_t)sps.evals;
    sv->m.draft_guessed += (uint64_t)sps.guessed;
    sv->m.draft_accepted += (uint64_t)sps.accepted;
    sv->m.prefill_seconds += t_prefill;
    sv->m.decode_seconds += t_decode;
    if (j->n_prompt > j->n_cached && t_prefill > 0)
        sv->m.last_prefill_tps = (double)(j->n_prompt - j->n_cached) / t_prefill;
    if (n_gen > 1 && t_decode > 0) sv->m.last_decode_tps = (double)n_gen / t_decode;
    if (j->t_first > 0) sv->m.last_ttft = j->t_first - j->t_queued;
    if (!strcmp(j->finish, "cancelled")) sv->m.cancelled++;
    pthread_mutex_unlock(&sv->mu);
    char fmt_cost[256] = "";
    if (mask_steps > 0)
        snprintf(fmt_cost, sizeof fmt_cost, ", format masks %.3f ms/token", 1e3 * mask_seconds / (double)mask_steps);
    if (tool_mask_steps > 0)
        snprintf(fmt_cost + strlen(fmt_cost), sizeof fmt_cost - strlen(fmt_cost), ", tool-call masks %.3f ms/token",
                 1e3 * tool_mask_seconds / (double)tool_mask_steps);
    if (sps.guessed > 0)
        snprintf(fmt_cost + strlen(fmt_cost), sizeof fmt_cost - strlen(fmt_cost), ", %lld evals, %lld of %lld guesses kept",
                 (long long)sps.evals, (long long)sps.accepted, (long long)sps.guessed);
    fprintf(stderr,
            "serve: %s: prompt %lld tokens (%lld cached), prefill %.3f s, %lld generated in %.3f s%s, "
            "finish %s%s\n",
            j->id, (long long)j->n_prompt, (long long)j->n_cached, t_prefill, (long long)n_gen,
            t_decode, fmt_cost, j->finish,
            j->error && strstr(j->error, "shutting down") ? " (server shutting down)" : "");
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
    /* every request is answered: keep the live session for the next start */
    kv_keep(sv, MS_KV_SHUTDOWN);
    return NULL;
}
