/*
 * kv_opts.c - the --kv-* options (see kv_opts.h).
 */
#include "cli/kv_opts.h"

#include <stdio.h>
#include <string.h>

#include "util/parse.h"

/* The policy options: their names and ranges. */
static const struct {
    int c;
    const char *name;
    long min, max;
} k_policy[] = {
    {KV_OPT_BUDGET, "--kv-budget-mb", 1, 1L << 30},
    {KV_OPT_DISK_SPACE, "--kv-disk-space-mb", 1, 1L << 30},
    {KV_OPT_MIN, "--kv-min-tokens", 1, INT32_MAX},
    {KV_OPT_TRIM, "--kv-trim", 0, INT32_MAX},
    {KV_OPT_ALIGN, "--kv-align", 0, INT32_MAX},
    {KV_OPT_INTERVAL, "--kv-interval", 0, INT32_MAX},
};

int kv_opt(const char *cmd, int c, const char *arg, struct kv_cli *k) {
    struct ms_kv_params *p = &k->p;
    if (c == KV_OPT_DIR || c == KV_OPT_DISK_DIR) {
        if (!*arg) {
            fprintf(stderr, "moestream %s: %s needs a directory\n", cmd,
                    c == KV_OPT_DIR ? "--kv-dir" : "--kv-disk-dir");
            return -1;
        }
        p->dir = arg;
        return 1;
    }
    for (size_t i = 0; i < sizeof k_policy / sizeof k_policy[0]; i++) {
        if (k_policy[i].c != c) continue;
        long v;
        if (ms_parse_long(arg, k_policy[i].min, k_policy[i].max, &v)) {
            fprintf(stderr, "moestream %s: %s must be an integer from %ld to %ld\n", cmd,
                    k_policy[i].name, k_policy[i].min, k_policy[i].max);
            return -1;
        }
        switch (c) {
        case KV_OPT_BUDGET:
        case KV_OPT_DISK_SPACE: p->budget_bytes = (uint64_t)v << 20; break;
        case KV_OPT_MIN: p->min_tokens = v; break;
        case KV_OPT_TRIM: p->trim_tokens = v; break;
        case KV_OPT_ALIGN: p->align_tokens = v; break;
        default: p->interval_tokens = v; break;
        }
        if (!k->tuned) k->tuned = k_policy[i].name;
        return 1;
    }
    return 0;
}

int kv_cli_check(const char *cmd, const struct kv_cli *k) {
    if (!k->tuned || k->p.dir) return 0;
    fprintf(stderr, "moestream %s: %s needs %s (there is no cache to apply it to)\n", cmd,
            k->tuned, strcmp(cmd, "serve") ? "--kv-dir" : "--kv-disk-dir");
    return -1;
}

int kv_open_opt(struct ms_kvstore **kv, struct ms_engine *e, const struct kv_cli *k, ms_err *err) {
    *kv = NULL;
    return k->p.dir ? ms_kv_open(kv, e, &k->p, err) : 0;
}
