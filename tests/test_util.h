/*
 * test_util.h - helpers shared by the cmocka tests that write files: a
 * scratch directory of their own under $MS_TMPDIR (CTest sets it) and paths
 * in it. Static inline, included by each such test file.
 */
#ifndef MS_TEST_UTIL_H
#define MS_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

static char g_tmp[1024]; /* the test's scratch directory */

/* Sets g_tmp to $MS_TMPDIR/sub (fallback/sub when MS_TMPDIR is unset or
 * empty) and creates it (mkdir -p). 0, or -1 if it cannot be made: a cmocka
 * group setup. */
static inline int test_tmp_setup(const char *sub) {
    const char *base = getenv("MS_TMPDIR");
    if (!base || !*base) base = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/ms-test/%s", base && *base ? base : P_tmpdir, sub);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* g_tmp/name, in one of 4 rotating buffers: valid until the 4th next call. */
static inline const char *tmp_path(const char *name) {
    static char p[4][1200];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", g_tmp, name);
    return p[k];
}

#ifdef MS_MKMODEL_MKMODEL_H
/* A cmocka group setup's body for tests that run the tiny mkmodel model:
 * the scratch directory sub, and the model written to *path there. 0 or
 * -1. Include mkmodel/mkmodel.h before this file to have it. */
static inline int test_tiny_model_setup(const char *sub, const char **path) {
    if (test_tmp_setup(sub)) return -1;
    *path = tmp_path("m.gguf");
    struct mkmodel_opts o;
    ms_err err;
    return mkmodel_preset(&o, "tiny", &err) || mkmodel_write(&o, *path, &err) ? -1 : 0;
}
#endif

#endif
