/*
 * spec.c - speculative decoding with prompt-lookup guesses (see spec.h).
 */
#include "spec/spec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/mem.h"

/* Moving averages: eval seconds and guess acceptance. */
#define T_ALPHA 0.25
#define A_ALPHA 0.1
/* Acceptance before any guess of an n-gram length was seen. */
#define A_PRIOR 0.5
/* Lookups not evaluated (the guesses did not pay) before the longest step
 * is measured again, where guesses are kept at least as often as the
 * prior: one slow measurement (a busy neighbour) must not turn guessing
 * off for the life of a server. On 2 cores a retry costs about 4 steps'
 * worth once in this many. */
#define SKIPS_BEFORE_RETRY 256
/* Most guesses an eval, whatever the session allows. */
#define GUESS_CAP 15

struct ms_spec {
    struct ms_session *s;
    struct ms_spec_params p;
    struct ms_spec_hooks hooks;
    int64_t V;
    int64_t n_commit;      /* accepted tokens in the session */
    float *rows;           /* [draft_max + 1][V] logits of the open draft */
    int32_t guess[GUESS_CAP];
    int n_guess, n_next;   /* guesses of the open draft, the next one to check */
    int ngram;             /* the n-gram length the guesses came from */
    bool open;
    /* the first guess of a lookup that was not evaluated, checked against
     * the next token all the same: acceptance is learned at every step,
     * so a machine where guesses rarely pay still sees them become good */
    int32_t shadow;
    int shadow_ngram;      /* 0: none pending */
    /* the cost of a step of n tokens: t_one seconds for one, ratio[n] that
     * many one-token steps for n >= 2 (0: not measured). Ratios, so that a
     * host whose speed moves moves them all. */
    double t_one;
    double ratio[GUESS_CAP + 2];
    int64_t skips;         /* lookups not evaluated since a step with guesses */
    bool exploring;        /* the open step re-measures its length */
    double accept[MS_SPEC_NGRAM_MAX + 1];
    int32_t *hist;         /* [hist_cap]: the accepted tokens (n_commit) */
    int64_t hist_cap;
    struct ms_spec_stats st;
};

static bool kv_due(void *ctx, const int32_t *hist, int64_t n) {
    return ms_kv_continued_due(ctx, hist, n - 1, n);
}

static void kv_commit(void *ctx, struct ms_session *s) { ms_kv_save_continued(ctx, s); }

struct ms_spec_hooks ms_spec_kv_hooks(struct ms_kvstore *kv) {
    return kv ? (struct ms_spec_hooks){.due = kv_due, .commit = kv_commit, .ctx = kv}
              : (struct ms_spec_hooks){0};
}

struct ms_spec_params ms_spec_defaults(void) {
    return (struct ms_spec_params){.draft_max = 7, .ngram_min = 2};
}

int ms_spec_lookup(const int32_t *hist, int64_t n, int ngram_min, int32_t *out, int max_out,
                   int *ngram) {
    *ngram = 0;
    if (ngram_min < 1) ngram_min = 1;
    for (int m = MS_SPEC_NGRAM_MAX; m >= ngram_min; m--) {
        if (n <= m) continue;
        const int32_t *key = hist + n - m;
        /* the latest earlier occurrence: what followed it is freshest */
        for (int64_t j = n - m - 1; j >= 0; j--) {
            if (hist[j] != key[0] || memcmp(hist + j, key, (size_t)m * sizeof *key)) continue;
            int64_t k = n - (j + m);
            if (k > max_out) k = max_out;
            memcpy(out, hist + j + m, (size_t)k * sizeof *out);
            *ngram = m;
            return (int)k;
        }
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Room for n tokens in hist; -1 on OOM. */
static int hist_reserve(struct ms_spec *sp, int64_t n) {
    if (n <= sp->hist_cap) return 0;
    int64_t cap = sp->hist_cap ? sp->hist_cap : 1024;
    while (cap < n) cap *= 2;
    int32_t *h = realloc(sp->hist, (size_t)cap * sizeof *h);
    if (!h) return -1;
    sp->hist = h;
    sp->hist_cap = cap;
    return 0;
}

/* hist and the counts from the session as it is (start, after a failure). */
static int hist_sync(struct ms_spec *sp) {
    sp->open = false;
    sp->shadow_ngram = 0;
    sp->n_commit = ms_session_n_past(sp->s);
    if (hist_reserve(sp, sp->n_commit + 1)) return -1;
    if (sp->n_commit) memcpy(sp->hist, ms_session_tokens(sp->s), (size_t)sp->n_commit * sizeof *sp->hist);
    return 0;
}

int ms_spec_new(struct ms_spec **out, struct ms_session *s, int32_t n_vocab,
                const struct ms_spec_params *p, const struct ms_spec_hooks *hooks, ms_err *err) {
    const struct ms_spec_params q = p ? *p : ms_spec_defaults();
    if (q.draft_max < 0) return ms_err_set(err, "draft_max must be >= 0 (got %d)", q.draft_max);
    if (q.ngram_min < 1 || q.ngram_min > MS_SPEC_NGRAM_MAX)
        return ms_err_set(err, "ngram_min must be in [1, %d] (got %d)", MS_SPEC_NGRAM_MAX, q.ngram_min);
    struct ms_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return ms_err_set(err, "out of memory");
    sp->s = s;
    sp->p = q;
    int64_t cap = ms_session_draft_max(s) - 1;
    if (cap > GUESS_CAP) cap = GUESS_CAP;
    if (sp->p.draft_max > cap) sp->p.draft_max = (int)cap;
    if (hooks && hooks->due && hooks->commit) sp->hooks = *hooks;
    sp->V = n_vocab;
    if (hist_sync(sp)) {
        ms_spec_free(sp);
        return ms_err_set(err, "out of memory");
    }
    for (int m = 0; m <= MS_SPEC_NGRAM_MAX; m++) sp->accept[m] = A_PRIOR;
    if (sp->p.draft_max > 0) {
        sp->rows = ms_aligned_alloc(64, (size_t)(sp->p.draft_max + 1) * (size_t)sp->V * sizeof(float));
        if (!sp->rows) {
            ms_spec_free(sp);
            return ms_err_set(err, "out of memory for %d rows of logits", sp->p.draft_max + 1);
        }
    }
    *out = sp;
    return 0;
}

int ms_spec_begin(struct ms_spec *sp, ms_err *err) {
    /* guesses a caller left pending go first (an eval since would have
     * kept them: then there is nothing left to take back) */
    if (sp->open) {
        ms_err ignored;
        ms_spec_finish(sp, &ignored);
    }
    sp->st = (struct ms_spec_stats){0};
    return hist_sync(sp) ? ms_err_set(err, "out of memory") : 0;
}

void ms_spec_free(struct ms_spec *sp) {
    if (!sp) return;
    ms_err err;
    ms_spec_finish(sp, &err);
    ms_free(sp->rows);
    free(sp->hist);
    free(sp);
}

const float *ms_spec_logits(const struct ms_spec *sp) {
    return sp->open ? sp->rows + (size_t)sp->n_next * (size_t)sp->V : ms_session_logits(sp->s);
}

int64_t ms_spec_n_past(const struct ms_spec *sp) { return sp->n_commit; }

struct ms_spec_stats ms_spec_get_stats(const struct ms_spec *sp) { return sp->st; }

/* The chance a guess from an n-gram of length m is kept moves toward
 * kept (1) or not (0). */
static void learn(struct ms_spec *sp, int m, bool kept) {
    sp->accept[m] += A_ALPHA * ((kept ? 1.0 : 0.0) - sp->accept[m]);
}

/* Ends the open draft keeping the accepted part: the token it began with
 * and the guesses confirmed since. */
static int close_draft(struct ms_spec *sp, ms_err *err) {
    if (!sp->open) return 0;
    sp->open = false;
    /* the guess checked last was refused (or never checked): acceptance */
    if (sp->n_next < sp->n_guess) learn(sp, sp->ngram, false);
    return ms_session_draft_keep(sp->s, 1 + sp->n_next, err);
}

/* One more token accepted (hist[n_commit - 1]): the caller's hooks see
 * it, and when they want the state there, the guesses past it go. */
static int advance(struct ms_spec *sp, ms_err *err) {
    if (!sp->hooks.due || !sp->hooks.due(sp->hooks.ctx, sp->hist, sp->n_commit)) return 0;
    if (sp->open) {
        sp->n_guess = sp->n_next; /* the rest unchecked: no verdict */
        if (close_draft(sp, err)) return -1;
    }
    sp->hooks.commit(sp->hooks.ctx, sp->s);
    return 0;
}

int ms_spec_finish(struct ms_spec *sp, ms_err *err) {
    if (!sp->open) return 0;
    /* unchecked guesses at the end say nothing about acceptance */
    sp->n_guess = sp->n_next;
    return close_draft(sp, err);
}

/* Seconds a step of n tokens is taken to cost: measured, else the line
 * between the nearest measured lengths below and above it, else (none
 * above) the nearest below, so that a longer step gets tried once. */
static double t_est(const double *t_eval, int n, int n_max) {
    if (t_eval[n] > 0) return t_eval[n];
    int lo = n - 1, hi = n + 1;
    while (lo > 1 && t_eval[lo] <= 0) lo--;
    while (hi <= n_max && t_eval[hi] <= 0) hi++;
    if (hi > n_max) return t_eval[lo];
    return t_eval[lo] + (t_eval[hi] - t_eval[lo]) * (double)(n - lo) / (double)(hi - lo);
}

int ms_spec_best_k(const double *t_eval, int found, int n_max, double a) {
    if (t_eval[1] <= 0) return 0; /* plain decode is measured first */
    double expect = 1.0, ai = 1.0, best_rate = 1.0 / t_eval[1];
    int best = 0;
    for (int k = 1; k <= found && 1 + k <= n_max; k++) {
        ai *= a;
        expect += ai;
        const double rate = expect / t_est(t_eval, 1 + k, n_max);
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    return best;
}

/* A step of n tokens took dt seconds: a moving average, or for a step
 * that re-measures its length, the new value outright. */
static void t_record(struct ms_spec *sp, int n, double dt) {
    if (n == 1) {
        sp->t_one = sp->t_one > 0 ? sp->t_one + T_ALPHA * (dt - sp->t_one) : dt;
        return;
    }
    if (sp->t_one <= 0) return;
    double *r = &sp->ratio[n];
    const double x = dt / sp->t_one;
    *r = *r > 0 && !sp->exploring ? *r + T_ALPHA * (x - *r) : x;
}

/* How many of the `found` guesses from an n-gram of length ngram to
 * evaluate behind the token. */
static int guesses_that_pay(struct ms_spec *sp, int found, int ngram) {
    double t[GUESS_CAP + 2] = {0};
    t[1] = sp->t_one;
    for (int n = 2; n <= sp->p.draft_max + 1; n++) t[n] = sp->ratio[n] * sp->t_one;
    int k = ms_spec_best_k(t, found, sp->p.draft_max + 1, sp->accept[ngram]);
    sp->exploring = false;
    if (k > 0) {
        sp->skips = 0;
    } else if (++sp->skips >= SKIPS_BEFORE_RETRY && sp->accept[ngram] >= A_PRIOR && sp->t_one > 0) {
        k = found; /* measure again */
        sp->exploring = true;
        sp->skips = 0;
    }
    return k;
}

int ms_spec_seed_costs(struct ms_spec *sp, const double *t_eval, int n) {
    if (n < 1 || n > GUESS_CAP + 1 || t_eval[1] <= 0) return -1;
    sp->t_one = t_eval[1];
    for (int m = 2; m <= GUESS_CAP + 1; m++) sp->ratio[m] = m <= n && t_eval[m] > 0 ? t_eval[m] / t_eval[1] : 0;
    return 0;
}

int ms_spec_accept(struct ms_spec *sp, int32_t tok, ms_err *err) {
    if (sp->open && sp->n_next < sp->n_guess && sp->guess[sp->n_next] == tok) {
        /* the guess was right: its position is evaluated already */
        learn(sp, sp->ngram, true);
        sp->n_next++;
        sp->hist[sp->n_commit++] = tok; /* room: reserved with the draft */
        sp->st.accepted++;
        if (sp->n_next == sp->n_guess && close_draft(sp, err)) return -1;
        return advance(sp, err);
    }
    if (close_draft(sp, err)) return -1;
    if (sp->shadow_ngram) {
        learn(sp, sp->shadow_ngram, tok == sp->shadow);
        sp->shadow_ngram = 0;
    }
    const int64_t n_ctx = ms_session_n_ctx(sp->s);
    if (sp->n_commit >= n_ctx)
        return ms_err_set(err, "context full: %lld positions used, context size %lld",
                          (long long)sp->n_commit, (long long)n_ctx);
    /* guesses: prompt lookup over the accepted tokens and tok */
    int k = 0, ngram = 0;
    int max_k = sp->p.draft_max;
    if (max_k > n_ctx - sp->n_commit - 1) max_k = (int)(n_ctx - sp->n_commit - 1);
    if (hist_reserve(sp, sp->n_commit + 1 + max_k + 1)) return ms_err_set(err, "out of memory");
    sp->hist[sp->n_commit] = tok;
    if (max_k > 0) {
        k = ms_spec_lookup(sp->hist, sp->n_commit + 1, sp->p.ngram_min, sp->guess, max_k, &ngram);
        if (k > 0 && !sp->p.always) {
            const int found = k;
            k = guesses_that_pay(sp, found, ngram);
            if (k == 0) { /* checked against the next token all the same */
                sp->shadow = sp->guess[0];
                sp->shadow_ngram = ngram;
            }
        }
    }
    const double t0 = now_s();
    if (k == 0) {
        if (ms_session_eval(sp->s, &tok, 1, NULL, err)) goto failed;
        t_record(sp, 1, now_s() - t0);
        sp->st.evals++;
        sp->n_commit++;
        return advance(sp, err);
    }
    int32_t toks[GUESS_CAP + 1];
    toks[0] = tok;
    memcpy(toks + 1, sp->guess, (size_t)k * sizeof *toks);
    if (ms_session_eval_draft(sp->s, toks, 1 + k, sp->rows, err)) goto failed;
    t_record(sp, 1 + k, now_s() - t0);
    sp->st.evals++;
    sp->st.drafts++;
    sp->st.guessed += k;
    sp->open = true;
    sp->n_guess = k;
    sp->n_next = 0;
    sp->ngram = ngram;
    sp->n_commit++;
    return advance(sp, err);
failed:
    /* a refused eval changed nothing; one that failed midway emptied s */
    hist_sync(sp); /* shrinks or keeps: room was reserved */
    return -1;
}
