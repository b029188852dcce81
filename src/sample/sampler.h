/*
 * sampler.h - picks the next token from a vector of logits: top_k, top_p,
 * min_p, temperature, then a draw from the remaining distribution with a
 * seeded generator (util/rng.h), or the argmax when temp <= 0.
 *
 * The filters run in llama.cpp's default order (common/common.h,
 * common_params_sampling::samplers, with penalties/DRY/typical/XTC off):
 *   top_k -> top_p -> min_p -> temperature -> draw.
 * So top_p and min_p see the temperature-1 probabilities of the tokens that
 * survived top_k, and the temperature only reshapes the final set. Each
 * filter keeps at least one token (llama.cpp's min_keep = 1). Defaults are
 * llama.cpp's: top_k 40, top_p 0.95, min_p 0.05, temp 0.8.
 *
 * A sampler owns its scratch space and its generator, so a given seed and a
 * given sequence of logit vectors always give the same tokens. Depends only
 * on util/.
 */
#ifndef MS_SAMPLE_SAMPLER_H
#define MS_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

struct ms_sampler_params {
    float temp;    /* <= 0: greedy (argmax, ties to the lowest id) */
    int top_k;     /* <= 0: off */
    float top_p;   /* >= 1: off */
    float min_p;   /* <= 0: off; keeps p_i >= min_p * p_max */
    uint64_t seed;
};

/* The most tokens the sampler keeps before anything else looks at the
 * distribution: 1 when greedy, top_k when set, 0 (no bound) otherwise. A
 * token mask need only find that many (text/grammar.h,
 * ms_grammar_mask_top). */
int32_t ms_sampler_first_cut(const struct ms_sampler_params *p);

/* llama.cpp's defaults with the given seed. */
struct ms_sampler_params ms_sampler_defaults(uint64_t seed);

struct ms_sampler;

/* A sampler over n_vocab logits. Errors: n_vocab < 1, top_p or min_p not a
 * number, OOM. The parameters are copied. */
int ms_sampler_new(struct ms_sampler **out, const struct ms_sampler_params *p, int32_t n_vocab,
                   ms_err *err);
void ms_sampler_free(struct ms_sampler *s);

/* The next token for logits[0..n_vocab) (not modified). Logits that are NaN
 * are never chosen unless all are; -inf logits are never drawn. */
int32_t ms_sampler_sample(struct ms_sampler *s, const float *logits);

/* The candidate set the filters leave for these logits, before the draw:
 * ids[0..*n) in descending probability, probs[0..*n) their probabilities
 * after temperature, summing to 1. ids and probs hold n_vocab entries. For
 * tests and for showing what a setting does. */
void ms_sampler_candidates(struct ms_sampler *s, const float *logits, int32_t *ids, double *probs,
                           int32_t *n);

/* The log sum exp of logits[0..n) in double into *lse, so that
 * logits[v] - *lse is token v's log-probability (log softmax at
 * temperature 1: the model's distribution, what perplexity and logprobs
 * report). A -inf logit is a token ruled out. false, *lse unset, when a
 * logit is NaN or +inf (weights or activations holding them: no
 * probability means anything) or every logit is -inf. */
bool ms_log_sum_exp(const float *logits, int32_t n, double *lse);

#endif
