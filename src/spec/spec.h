/*
 * spec.h - speculative decoding with guesses from the context (prompt
 * lookup): after the token just sampled, the tokens that followed the
 * latest earlier occurrence of the last few tokens are guessed to come
 * next, and the sampled token and the guesses are evaluated in one eval
 * (ms_session_eval_draft). The caller samples after each position from its
 * row as it always does; a guess equal to the sample costs no eval of its
 * own, and at the first guess that differs the rest are taken back
 * (ms_session_draft_keep).
 *
 * The tokens, the logits and the sampler's draws are those of plain
 * decoding, bit for bit (an eval computes every position alike, whatever
 * its length): speculation changes the speed, never the text, at any
 * temperature and under any grammar. Coding agents gain most: an edit
 * repeats the lines around it, a tool call repeats paths and names.
 *
 * Whether guessing pays depends on the machine: one eval of n tokens costs
 * about one token's weight reads where decode is bound by memory (many
 * cores), nearly n tokens' compute where it is bound by arithmetic (a few
 * cores). So the stepper measures both sides as it goes and guesses k
 * tokens only when the expected tokens per second beat plain decode:
 *     k* = argmax_k (1 + a + a^2 + ... + a^k) / t(1 + k),
 * a the measured chance that a guess is kept given the one before it was
 * (per n-gram length; a lookup whose guesses are not evaluated still has
 * its first guess checked against the token chosen next, so a is learned
 * at every step), t(n) the measured seconds of an eval of n tokens
 * (moving averages; a step length not yet measured is interpolated
 * between the measured ones, the longest tried first; costs are kept as
 * ratios to a one-token step, and after 256 lookups without guesses where
 * guesses are kept often the longest step is measured afresh, so one slow
 * sample cannot turn guessing off for good; the measurements live as long
 * as the stepper). With a = 0 or t growing
 * linearly, k* = 0: plain decode, nothing lost but a lookup.
 * (The expected count is Leviathan et al., "Fast Inference from
 * Transformers via Speculative Decoding", 2023, with one guess per
 * position.)
 *
 * Depends on moestream.h and util/ only. One stepper per session and
 * generation; not thread-safe.
 */
#ifndef MS_SPEC_SPEC_H
#define MS_SPEC_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "moestream.h"

/* Longest n-gram looked up. */
#define MS_SPEC_NGRAM_MAX 4

struct ms_spec_params {
    int draft_max; /* most guesses an eval (0: no speculation); capped at
                      ms_session_draft_max - 1 */
    int ngram_min; /* shortest n-gram that may start guesses (1..MS_SPEC_NGRAM_MAX) */
    bool always;   /* guess whenever the lookup finds tokens, without the
                      cost model: for tests and measurements */
};

/* draft_max 7 (DeepSeek V4's cap), ngram_min 2. */
struct ms_spec_params ms_spec_defaults(void);

/*
 * Prompt lookup over token ids hist[0..n): for m = MS_SPEC_NGRAM_MAX down to
 * ngram_min, the latest j < n - m with hist[j..j+m) == hist[n-m..n); the
 * first m that has one gives out[0..) = hist[j+m ..), at most max_out
 * tokens (fewer where hist ends). Returns the count (0: no match) and
 * stores m in *ngram (0 when none). O(n * MS_SPEC_NGRAM_MAX) a call.
 */
int ms_spec_lookup(const int32_t *hist, int64_t n, int ngram_min, int32_t *out, int max_out,
                   int *ngram);

/* The cost model: the k in [0, found] (1 + k <= n_max) with the best
 * expected tokens per second, (1 + a + ... + a^k) / t(1 + k), ties to the
 * smaller. t(n) is t_eval[n] where measured (> 0), else the line between
 * the nearest measured lengths below and above n, else (none above) the
 * nearest below: so the longest step is tried first, and once it is
 * measured the lengths between are estimated, not each tried. 0 while
 * t_eval[1] is unmeasured. t_eval: [n_max + 1] seconds; a: the chance that
 * a guess is kept given the one before it was. */
int ms_spec_best_k(const double *t_eval, int found, int n_max, double a);

/* Sets the stepper's step costs as if measured: t_eval[1 .. n] seconds
 * of a step of that many tokens (0: not measured; t_eval[1] > 0). For
 * tests, and for a caller that measured the machine elsewhere. -1 when n
 * or t_eval[1] is out of range. */
struct ms_spec;
int ms_spec_seed_costs(struct ms_spec *sp, const double *t_eval, int n);

struct ms_spec_stats {
    int64_t evals;      /* evals made (plain and drafts) */
    int64_t drafts;     /* of them, evals with guesses */
    int64_t guessed;    /* guesses evaluated */
    int64_t accepted;   /* guesses that matched the token sampled there */
};

/* What the caller needs to see at given accepted lengths (a disk KV
 * cache's continued checkpoints, ms_kv_continued_due): due is called once
 * for every accepted token, in order, with hist [n] the accepted ids; when
 * it returns true, the stepper takes back any guesses past those n tokens
 * (so the session holds exactly them, as plain decoding's would) and calls
 * commit. Either may be NULL (then neither is called). */
struct ms_spec_hooks {
    bool (*due)(void *ctx, const int32_t *hist, int64_t n);
    void (*commit)(void *ctx, struct ms_session *s);
    void *ctx;
};

/* Hooks that save kv's continued checkpoints where plain decoding would
 * (ms_kv_continued_due, ms_kv_save_continued); kv NULL: none. */
struct ms_spec_hooks ms_spec_kv_hooks(struct ms_kvstore *kv);

struct ms_spec;

/* A stepper over s (which must outlive it; n_vocab its model's), from
 * s's present state, which must have logits. p NULL: the defaults; hooks
 * NULL: none (copied). Errors: OOM, bad parameters. */
int ms_spec_new(struct ms_spec **out, struct ms_session *s, int32_t n_vocab,
                const struct ms_spec_params *p, const struct ms_spec_hooks *hooks, ms_err *err);
/* Takes s as it is now as the accepted tokens (call after the caller
 * evaluated a prompt, restored, loaded or reset s, before the next
 * accept), and starts its stats afresh. The measurements of the cost
 * model are kept: one stepper per
 * session lives across generations and requests, so that each eval length
 * is tried once a process, not once a request. Errors: OOM. */
int ms_spec_begin(struct ms_spec *sp, ms_err *err);
/* Ends the stepper: ms_spec_finish, then frees (NULL: nothing). */
void ms_spec_free(struct ms_spec *sp);

/* The logits [n_vocab] after the last accepted token: where the next token
 * is sampled from. Valid until the next ms_spec_accept / ms_spec_finish. */
const float *ms_spec_logits(const struct ms_spec *sp);
/* Accepted tokens in the session (ms_session_n_past less the guesses
 * still pending): the context check uses this. */
int64_t ms_spec_n_past(const struct ms_spec *sp);

/*
 * Appends tok, the token chosen from ms_spec_logits (sampled, forced or
 * written by the caller alike), as ms_session_eval(s, &tok, 1) would: free
 * when it equals the pending guess, else the pending guesses are taken back
 * and tok is evaluated, with new guesses behind it when they pay. Errors:
 * the eval's (the session is then empty, as after a failed eval); the
 * context full (nothing changed).
 */
int ms_spec_accept(struct ms_spec *sp, int32_t tok, ms_err *err);

/* Takes back the guesses still pending, so that s holds exactly the
 * accepted tokens (call before using s otherwise: a snapshot, a save, the
 * next request). Idempotent; the stepper may go on afterwards. */
int ms_spec_finish(struct ms_spec *sp, ms_err *err);

/* The figures since ms_spec_new or the last ms_spec_begin. */
struct ms_spec_stats ms_spec_get_stats(const struct ms_spec *sp);

#endif
