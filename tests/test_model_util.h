/*
 * test_model_util.h - helpers for cmocka tests that run real models: write
 * one with the moestream binary's mkmodel ($MS_BIN, set by CTest) and load
 * it. Include after <cmocka.h>.
 */
#ifndef MS_TEST_MODEL_UTIL_H
#define MS_TEST_MODEL_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"

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

#endif
