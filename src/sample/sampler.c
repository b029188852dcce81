/*
 * sampler.c - top_k / top_p / min_p / temperature sampling (see sampler.h for
 * the order and its source).
 *
 * Candidates are (logit, id) pairs ordered by logit descending, ties by the
 * lower id, so every cut below is deterministic. top_p and min_p both keep a
 * prefix of that order, and min_p's cut depends only on the largest logit,
 * which top_p always keeps; so applying min_p's threshold first and then
 * top_p (with the normaliser of the set top_p would have seen) keeps exactly
 * the tokens that llama.cpp's top_p -> min_p keeps, while sorting only what
 * survives min_p.
 */
#include "sample/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util/rng.h"

struct cand {
    float logit;
    int32_t id;
};

struct ms_sampler {
    struct ms_sampler_params p;
    int32_t n_vocab;
    ms_rng rng;
    struct cand *c; /* [n_vocab] scratch */
    double *prob;   /* [n_vocab] scratch */
};

int32_t ms_sampler_first_cut(const struct ms_sampler_params *p) {
    return p->temp <= 0 ? 1 : p->top_k > 0 ? p->top_k : 0;
}

struct ms_sampler_params ms_sampler_defaults(uint64_t seed) {
    /* llama.cpp common/common.h, struct common_params_sampling */
    return (struct ms_sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                      .seed = seed};
}

int ms_sampler_new(struct ms_sampler **out, const struct ms_sampler_params *p, int32_t n_vocab,
                   ms_err *err) {
    *out = NULL;
    if (n_vocab < 1) return ms_err_set(err, "sampler: n_vocab %d < 1", (int)n_vocab);
    if (isnan(p->top_p) || isnan(p->min_p) || isnan(p->temp))
        return ms_err_set(err, "sampler: temp, top_p and min_p must be numbers");
    struct ms_sampler *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, "sampler: out of memory");
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    if (!s->c || !s->prob) {
        ms_sampler_free(s);
        return ms_err_set(err, "sampler: out of memory");
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    ms_rng_seed(&s->rng, p->seed);
    *out = s;
    return 0;
}

void ms_sampler_free(struct ms_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->prob);
    free(s);
}

/* a ranks before b: larger logit, then lower id */
static int before(const struct cand *a, const struct cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *pa, const void *pb) {
    const struct cand *a = pa, *b = pb;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Moves the k best of c[0..n) into c[0..k), sorted: a heap of the k best
 * seen so far whose root is the worst of them (O(n log k)). */
static void select_top_k(struct cand *c, int32_t n, int32_t k) {
    for (int32_t i = 0; i < n; i++) {
        struct cand x = c[i];
        int32_t j;
        if (i < k) {
            j = i; /* sift up: parent must rank after child */
            while (j > 0 && before(&c[(j - 1) / 2], &x)) {
                c[j] = c[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            c[j] = x;
            continue;
        }
        if (!before(&x, &c[0])) continue;
        j = 0; /* replace the root and sift down */
        for (;;) {
            int32_t l = 2 * j + 1, r = l + 1, w = j;
            const struct cand *wc = &x;
            if (l < k && before(wc, &c[l])) w = l, wc = &c[l];
            if (r < k && before(wc, &c[r])) w = r, wc = &c[r];
            if (w == j) break;
            c[j] = c[w];
            j = w;
        }
        c[j] = x;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

/* Runs the filters; leaves the survivors in s->c[0..n), best first, with
 * their post-temperature probabilities in s->prob. Returns n (0 when no
 * logit is a number above -inf). */
static int32_t filter(struct ms_sampler *s, const float *logits) {
    struct cand *c = s->c;
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (!isnan(logits[i]) && logits[i] > -INFINITY) c[n++] = (struct cand){logits[i], i};
    if (n == 0) return 0;
    if (s->p.temp <= 0.0f) { /* greedy */
        int32_t b = 0;
        for (int32_t i = 1; i < n; i++)
            if (before(&c[i], &c[b])) b = i;
        c[0] = c[b];
        s->prob[0] = 1.0;
        return 1;
    }
    bool sorted = false;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        select_top_k(c, n, s->p.top_k);
        n = s->p.top_k;
        sorted = true;
    }
    float mx = c[0].logit;
    for (int32_t i = 1; i < n; i++) mx = c[i].logit > mx ? c[i].logit : mx;
    if (mx == INFINITY) { /* only the +inf tokens can be drawn, evenly */
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].logit == INFINITY) c[m++] = (struct cand){0.0f, c[i].id};
        n = m;
        mx = 0.0f;
    }
    double z = 0.0; /* softmax normaliser of the set top_p sees (temperature 1) */
    for (int32_t i = 0; i < n; i++) z += exp((double)c[i].logit - mx);
    if (s->p.min_p > 0.0f) { /* p_i >= min_p * p_max  <=>  l_i >= l_max + log(min_p) */
        const double thr = (double)mx + log((double)s->p.min_p);
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if ((double)c[i].logit >= thr) c[m++] = c[i];
        n = m > 0 ? m : 1; /* the max always passes unless min_p > 1 */
    }
    if (!sorted) qsort(c, (size_t)n, sizeof *c, cmp_cand);
    if (s->p.top_p < 1.0f) { /* smallest prefix whose mass reaches top_p */
        double cum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)c[i].logit - mx) / z;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += s->prob[i] = exp(((double)c[i].logit - mx) / s->p.temp);
    for (int32_t i = 0; i < n; i++) s->prob[i] /= sum;
    return n;
}

int32_t ms_sampler_sample(struct ms_sampler *s, const float *logits) {
    const int32_t n = filter(s, logits);
    if (n == 0) return 0;
    if (n == 1) return s->c[0].id;
    const double u = ms_rng_uniform(&s->rng);
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum) return s->c[i].id;
    }
    return s->c[n - 1].id; /* u just below 1 and rounding in cum */
}

void ms_sampler_candidates(struct ms_sampler *s, const float *logits, int32_t *ids, double *probs,
                           int32_t *n) {
    *n = filter(s, logits);
    for (int32_t i = 0; i < *n; i++) {
        ids[i] = s->c[i].id;
        probs[i] = s->prob[i];
    }
}

bool ms_log_sum_exp(const float *logits, int32_t n, double *lse) {
    float mx = -INFINITY;
    for (int32_t v = 0; v < n; v++) {
        if (isnan(logits[v]) || logits[v] == INFINITY) return false;
        if (logits[v] > mx) mx = logits[v];
    }
    if (mx == -INFINITY) return false;
    double sum = 0.0;
    for (int32_t v = 0; v < n; v++) sum += exp((double)logits[v] - (double)mx);
    *lse = (double)mx + log(sum);
    return true;
}
