/*
 * kv_opts.c - the --kv-* options (see kv_opts.h).
 */
#include "cli/kv_opts.h"

#include <stdio.h>

#include "util/parse.h"

int kv_opt(const char *cmd, int c, const char *arg, struct ms_kv_params *p) {
    long v;
    const char *name;
    switch (c) {
    case KV_OPT_DIR:
    case KV_OPT_DISK_DIR:
        if (!*arg) {
            fprintf(stderr, "moestream %s: %s needs a directory\n", cmd,
                    c == KV_OPT_DIR ? "--kv-dir" : "--kv-disk-dir");
            return -1;
        }
        p->dir = arg;
        return 1;
    case KV_OPT_BUDGET:
    case KV_OPT_DISK_SPACE:
        if (!ms_parse_long(arg, 1, 1L << 30, &v)) {
            p->budget_bytes = (uint64_t)v << 20;
            return 1;
        }
        name = c == KV_OPT_BUDGET ? "--kv-budget-mb" : "--kv-disk-space-mb";
        break;
    case KV_OPT_MIN:
        if (!ms_parse_long(arg, 1, INT32_MAX, &v)) {
            p->min_tokens = v;
            return 1;
        }
        name = "--kv-min-tokens";
        break;
    case KV_OPT_TRIM:
        if (!ms_parse_long(arg, 0, INT32_MAX, &v)) {
            p->trim_tokens = v;
            return 1;
        }
        name = "--kv-trim";
        break;
    case KV_OPT_ALIGN:
        if (!ms_parse_long(arg, 0, INT32_MAX, &v)) {
            p->align_tokens = v;
            return 1;
        }
        name = "--kv-align";
        break;
    case KV_OPT_INTERVAL:
        if (!ms_parse_long(arg, 0, INT32_MAX, &v)) {
            p->interval_tokens = v;
            return 1;
        }
        name = "--kv-interval";
        break;
    default: return 0;
    }
    fprintf(stderr, "moestream %s: %s must be an integer >= %d\n", cmd, name,
            c == KV_OPT_BUDGET || c == KV_OPT_DISK_SPACE || c == KV_OPT_MIN ? 1 : 0);
    return -1;
}

int kv_open_opt(struct ms_kvstore **kv, struct ms_engine *e, const struct ms_kv_params *p,
                ms_err *err) {
    *kv = NULL;
    return p->dir ? ms_kv_open(kv, e, p, err) : 0;
}
