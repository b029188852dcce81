/*
 * test_model_util.h - helpers for cmocka tests that run real models: write
 * one with the moestream binary's mkmodel ($MS_BIN, set by CTest), load it,
 * feed it random tokens, switch it to streamed experts, and compare logits
 * bit for bit. Include after <cmocka.h>.
 */
#ifndef MS_TEST_MODEL_UTIL_H
#define MS_TEST_MODEL_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "stream/expert_source.h"
#include "util/rng.h"

/* `$MS_BIN mkmodel OPTS -o PATH`; 0, or -1 if MS_BIN is unset or it failed. */
static inline int test_mkmodel(const char *path, const char *opts) {
    const char *bin = getenv("MS_BIN");
    if (!bin) return -1;
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel %s --force -o '%s' >/dev/null", bin, opts, path);
    return system(cmd) == 0 ? 0 : -1;
}

/* Loads a model or fails the test with the loader's message. */
static inline struct dsv4_model *test_load_model(const char *path) {
    struct dsv4_model *m = NULL;
    ms_err e = {{0}};
    if (dsv4_model_load(&m, path, &e)) fail_msg("%s", e.msg);
    return m;
}

/* t[0..n) = token ids drawn uniformly from [lo, lo + span), seeded. */
static inline void random_tokens(int32_t *t, int64_t n, uint32_t lo, uint32_t span,
                                 uint64_t seed) {
    ms_rng r;
    ms_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(lo + ms_rng_u64(&r) % span);
}

/* Streams m's routed experts through a new expert store with this cache
 * budget (m->experts is replaced; the caller frees the source and restores
 * the resident interface). Fails the test on error. */
static inline struct ms_stream_source *stream_on(struct dsv4_model *m, uint64_t budget) {
    struct ms_stream_source *src = NULL;
    struct ms_stream_params p = {.budget_bytes = budget};
    ms_err e = {{0}};
    if (ms_stream_source_new(&src, m, &p, &e)) fail_msg("%s", e.msg);
    m->experts = ms_stream_source_iface(src);
    return src;
}

/* Fails the test, naming the first differing logit, unless a and b
 * ([n] floats) are identical bit for bit. */
static inline void assert_same(const float *a, const float *b, size_t n, const char *what) {
    if (memcmp(a, b, n * sizeof *a)) {
        size_t i = 0;
        while (a[i] == b[i]) i++;
        fail_msg("%s: logit %zu differs: %.9g vs %.9g", what, i, a[i], b[i]);
    }
}

#endif
