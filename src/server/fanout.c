/*
 * fanout.c - requests that ask for several choices: OpenAI's `n` on chat
 * and completions, and a completion's `prompt` given as an array of
 * prompts (what evaluation harnesses send in batches). The engine runs one
 * sequence at a time, so such a request becomes one sub-request per
 * choice, each an ordinary request with `n` 1 and one prompt, run one
 * after the other through the queue; the replies are merged into one.
 *
 * Choice i * n + k is prompt i's k-th sample; with a `seed`, sample k uses
 * seed + k, so the n samples differ and the request is still reproducible
 * (no seed, or -1: every sample seeds from the clock).
 * A prompt's later samples find its tokens in the live session (prefix
 * reuse), so the prompt is prefilled once. Usage counts each prompt once
 * and every completion. Streaming several choices is refused (the SSE
 * formatters write one choice).
 */
#include <stdint.h>
#include <string.h>

#include "server/internal.h"

#define FANOUT_MAX 128 /* choices in one request */

/* Whether p is an array of prompts (strings, or arrays of token ids) rather
 * than one prompt (a string, or one array of ids). */
static bool prompt_list(const json_t *p) {
    if (!json_is_array(p) || json_array_size(p) == 0) return false;
    const json_t *first = json_array_get(p, 0);
    return json_is_string(first) || json_is_array(first);
}

int fanout_count(const json_t *req, enum api_kind k, size_t *n_prompts, int64_t *n, struct http_err *e) {
    *n_prompts = 1;
    *n = 1;
    if (k != API_CHAT && k != API_COMPLETIONS) return 0;
    const json_t *jn = json_object_get(req, "n");
    if (jn && !json_is_null(jn)) {
        if (!json_is_integer(jn) || json_integer_value(jn) < 1 || json_integer_value(jn) > FANOUT_MAX)
            return http_fail(e, 400, "'n' must be an integer from 1 to %d", FANOUT_MAX);
        *n = json_integer_value(jn);
    }
    const json_t *p = json_object_get(req, "prompt");
    if (k == API_COMPLETIONS && prompt_list(p)) {
        *n_prompts = json_array_size(p);
        /* each one a string or token ids: not a list of prompts itself */
        for (size_t i = 0; *n_prompts > 1 && i < *n_prompts; i++) {
            const json_t *q = json_array_get(p, i);
            const json_t *first = json_array_get(q, 0);
            if (!json_is_string(q) && (!json_is_array(q) || json_is_array(first) || json_is_string(first)))
                return http_fail(e, 400, "'prompt[%zu]' must be a string or an array of token ids", i);
        }
    }
    if ((int64_t)*n_prompts * *n > FANOUT_MAX)
        return http_fail(e, 400, "%zu prompts times 'n' %lld is more than %d choices", *n_prompts, (long long)*n,
                         FANOUT_MAX);
    if ((int64_t)*n_prompts * *n > 1) {
        const json_t *st = json_object_get(req, "stream");
        if (json_is_true(st))
            return http_fail(e, 400, "'stream' with several choices ('n' > 1 or several prompts) is not supported");
    }
    return 0;
}

json_t *fanout_request(const json_t *req, size_t choice, size_t n_prompts, int64_t n) {
    /* a shallow copy: the fields stay shared (jansson counts references
     * atomically), so n choices of a large body do not hold n copies */
    json_t *r = json_copy((json_t *)req);
    if (!r) return NULL;
    const size_t i = choice / (size_t)n, k = choice % (size_t)n;
    int rc = json_object_set_new(r, "n", json_integer(1));
    if (n_prompts > 1) rc |= json_object_set(r, "prompt", json_array_get(json_object_get(req, "prompt"), i));
    const json_t *seed = json_object_get(req, "seed");
    if (json_is_integer(seed) && json_integer_value(seed) != -1 && k > 0) {
        /* seed + k, wrapping (two's complement); -1 means "from the
         * clock" to the parser, so a sum landing there takes INT64_MIN */
        json_int_t sk = (json_int_t)((uint64_t)json_integer_value(seed) + (uint64_t)k);
        if (sk == -1) sk = INT64_MIN;
        rc |= json_object_set_new(r, "seed", json_integer(sk));
    }
    if (rc) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* Adds src's integer at key (in obj, or obj.sub when sub) into dst's. */
static void add_count(json_t *dst, const json_t *src, const char *sub, const char *key) {
    if (sub) {
        dst = json_object_get(dst, sub);
        src = json_object_get(src, sub);
    }
    const json_t *a = json_object_get(dst, key), *b = json_object_get(src, key);
    if (json_is_integer(a) && json_is_integer(b))
        json_object_set_new(dst, key, json_integer(json_integer_value(a) + json_integer_value(b)));
}

int fanout_merge(json_t *merged, const char *body, size_t choice, int64_t n, struct http_err *e) {
    json_t *r = json_loads(body, 0, NULL);
    json_t *ch = json_array_get(json_object_get(r, "choices"), 0);
    if (!ch) {
        json_decref(r);
        return http_fail(e, 500, "internal error: a sub-request's reply has no choice");
    }
    json_object_set_new(ch, "index", json_integer((json_int_t)choice));
    if (choice == 0) {
        json_object_update(merged, r);
        json_decref(r);
        return 0;
    }
    json_array_append(json_object_get(merged, "choices"), ch);
    json_t *mu = json_object_get(merged, "usage"), *ru = json_object_get(r, "usage");
    if (json_is_object(mu) && json_is_object(ru)) {
        if (choice % (size_t)n == 0) { /* a new prompt: its tokens count once */
            add_count(mu, ru, NULL, "prompt_tokens");
            add_count(mu, ru, "prompt_tokens_details", "cached_tokens");
        }
        add_count(mu, ru, NULL, "completion_tokens");
        add_count(mu, ru, "completion_tokens_details", "reasoning_tokens");
        const json_t *p = json_object_get(mu, "prompt_tokens"), *c = json_object_get(mu, "completion_tokens");
        if (json_is_integer(p) && json_is_integer(c))
            json_object_set_new(mu, "total_tokens", json_integer(json_integer_value(p) + json_integer_value(c)));
    }
    json_decref(r);
    return 0;
}
