/*
 * logprobs.c - the log-probabilities the OpenAI endpoints return: chat
 * `logprobs` / `top_logprobs`, completions `logprobs` (and `echo`, which
 * scores the prompt's tokens too), Responses `top_logprobs` with `include:
 * ["message.output_text.logprobs"]`.
 *
 * A token's log-probability is the log softmax of the model's raw
 * next-token logits at its position: temperature 1, before top_k, top_p
 * and min_p. That is the model's distribution, what OpenAI returns and
 * llama.cpp's server reports by default, not the sampler's truncated one;
 * so a greedy token's logprob is the largest of its alternatives', and an
 * evaluation harness scoring a continuation gets the model's own numbers
 * whatever the request's sampling settings.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* What a token the model rules out (a -inf logit) reads: JSON has no
 * infinity, and OpenAI writes this value. */
#define LP_IMPOSSIBLE -9999.0

/* The piece as a JSON string of valid UTF-8 (a byte that is not part of a
 * whole character as U+FFFD), or NULL on OOM. */
static json_t *piece_text(const char *p, size_t n) {
    struct ms_buf b = {0};
    if (ms_utf8_clean_text(&b, p, n)) {
        ms_buf_free(&b);
        return NULL;
    }
    json_t *s = json_stringn(b.p ? b.p : "", b.len);
    ms_buf_free(&b);
    return s;
}

static json_t *piece_bytes(const char *p, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer((unsigned char)p[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* {"token", "logprob", "bytes"} of token id with log-probability lp (NAN:
 * null). */
static json_t *token_obj(const struct ms_tokenizer *t, int32_t id, double lp) {
    const char *p;
    size_t n;
    ms_tokenizer_piece(t, id, true, &p, &n);
    json_t *o = json_object();
    if (!o || json_object_set_new(o, "token", piece_text(p, n)) ||
        json_object_set_new(o, "logprob", isnan(lp) ? json_null() : json_real(isinf(lp) ? LP_IMPOSSIBLE : lp)) ||
        json_object_set_new(o, "bytes", piece_bytes(p, n))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *lp_entry(const struct ms_tokenizer *t, const float *logits, int32_t tok, int n_top) {
    const int32_t n_vocab = (int32_t)ms_tokenizer_n_vocab(t);
    if (n_top > LP_TOP_MAX) n_top = LP_TOP_MAX;
    if (n_top < 0) n_top = 0;
    double lse;
    if (!ms_log_sum_exp(logits, n_vocab, &lse)) return NULL;
    /* the n_top largest in one pass: insertion into a short sorted list,
     * a later id entering only above an equal value, so ties keep the
     * lower */
    int32_t top[LP_TOP_MAX];
    int n_have = 0;
    for (int32_t v = 0; n_top > 0 && v < n_vocab; v++) {
        const float x = logits[v];
        if (n_have == n_top && !(x > logits[top[n_have - 1]])) continue;
        int k = n_have < n_top ? n_have++ : n_top - 1;
        for (; k > 0 && x > logits[top[k - 1]]; k--) top[k] = top[k - 1];
        top[k] = v;
    }
    const double lp_tok = tok >= 0 && tok < n_vocab ? (double)logits[tok] - lse : -INFINITY;
    json_t *e = token_obj(t, tok, lp_tok);
    json_t *alts = json_array();
    for (int k = 0; e && alts && k < n_have; k++)
        if (json_array_append_new(alts, token_obj(t, top[k], (double)logits[top[k]] - lse))) goto oom;
    if (!e || !alts || json_object_set_new(e, "top_logprobs", alts)) goto oom;
    return e;
oom:
    json_decref(e);
    json_decref(alts);
    return NULL;
}

json_t *lp_entry_first(const struct ms_tokenizer *t, int32_t tok) {
    json_t *e = token_obj(t, tok, NAN);
    if (e && json_object_set_new(e, "top_logprobs", json_null())) {
        json_decref(e);
        return NULL;
    }
    return e;
}

/* Where the character holding raw byte `at` of t starts in the cleaned
 * text (ms_utf8_clean_text's rule: a valid sequence as is, except NUL, and
 * U+FFFD, three bytes, for every invalid byte). Advances t over the
 * sequences decided before at; a character still incomplete at the end of
 * t (its next bytes are in a later token) is not decided yet. */
static size_t clean_offset(struct lp_text *t, size_t at) {
    while (t->done < at) {
        const char *p = t->raw.p + t->done;
        const size_t left = t->raw.len - t->done;
        const size_t len = ms_utf8_valid_len(p, left);
        if (!len && ms_utf8_partial_tail(p, left) == left) break; /* undecided */
        const size_t step = len ? len : 1;
        if (t->done + step > at) break; /* at is inside this character */
        t->clean += len && !(len == 1 && *p == 0) ? len : 3;
        t->done += step;
    }
    return t->clean;
}

json_t *lp_completions(const json_t *entries, struct lp_text *t) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    json_t *o = json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                          "text_offset", offs);
    if (!o) return NULL;
    size_t i;
    const json_t *e;
    json_array_foreach(entries, i, e) {
        const json_t *alts = json_object_get(e, "top_logprobs");
        json_t *m = json_is_array(alts) ? json_object() : json_null();
        size_t k;
        const json_t *a;
        json_array_foreach(alts, k, a) {
            const char *tk = json_string_value(json_object_get(a, "token"));
            /* two pieces that read alike as text (partial characters)
             * share a key: the first, more likely one stays */
            if (m && tk && !json_object_get(m, tk)) json_object_set(m, tk, json_object_get(a, "logprob"));
        }
        const size_t start = t->raw.len;
        const json_t *bytes = json_object_get(e, "bytes");
        size_t b;
        const json_t *v;
        json_array_foreach(bytes, b, v) {
            const char c = (char)json_integer_value(v);
            ms_buf_put(&t->raw, &c, 1);
        }
        if (json_array_append(tokens, json_object_get(e, "token")) ||
            json_array_append(lps, json_object_get(e, "logprob")) || json_array_append_new(tops, m) ||
            json_array_append_new(offs, json_integer((json_int_t)clean_offset(t, start)))) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}
