/*
 * kv_opts.h - the disk KV cache options of run, chat and bench (--kv-dir
 * and its policy knobs), parsed into struct ms_kv_params.
 */
#ifndef MS_CLI_KV_OPTS_H
#define MS_CLI_KV_OPTS_H

#include <getopt.h>

#include "moestream.h"

enum {
    KV_OPT_DIR = 4000,
    KV_OPT_BUDGET,
    KV_OPT_MIN,
    KV_OPT_TRIM,
    KV_OPT_ALIGN,
    KV_OPT_INTERVAL,
    KV_OPT_DISK_DIR,   /* serve's names for --kv-dir and --kv-budget-mb */
    KV_OPT_DISK_SPACE,
};

#define KV_OPTIONS                                                                                \
    {"kv-dir", required_argument, 0, KV_OPT_DIR},                                                 \
        {"kv-budget-mb", required_argument, 0, KV_OPT_BUDGET},                                    \
        {"kv-min-tokens", required_argument, 0, KV_OPT_MIN},                                      \
        {"kv-trim", required_argument, 0, KV_OPT_TRIM},                                           \
        {"kv-align", required_argument, 0, KV_OPT_ALIGN},                                         \
        {"kv-interval", required_argument, 0, KV_OPT_INTERVAL}

#define KV_HELP                                                                                   \
    "      --kv-dir DIR     disk KV cache: restore the longest saved prefix of the prompt, save\n" \
    "                       checkpoints (files hold prompts verbatim; docs/kv-cache.md)\n"       \
    "      --kv-budget-mb N  size of the cache directory (default 4096)\n"                       \
    "      --kv-min-tokens N  shortest checkpoint saved (default 512)\n"                         \
    "      --kv-trim N      cold saves drop the prompt's last N tokens (default 32)\n"          \
    "      --kv-align N     ... and round down to a multiple of N (default 2048; 0: none)\n"     \
    "      --kv-interval N  save when prefill or generation crosses a multiple of N\n"           \
    "                       (default 8192; 0: never)\n"

/* serve: the same knobs, the directory and its size under the names the
 * server issue gave them (--kv-disk-dir, --kv-disk-space-mb); --kv-dir and
 * --kv-budget-mb are accepted too. */
#define KV_SERVE_OPTIONS                                                                          \
    {"kv-disk-dir", required_argument, 0, KV_OPT_DISK_DIR},                                       \
        {"kv-disk-space-mb", required_argument, 0, KV_OPT_DISK_SPACE}, KV_OPTIONS

#define KV_SERVE_HELP                                                                             \
    "      --kv-disk-dir DIR  disk KV cache: a request that does not extend the live session\n"  \
    "                       restores the longest saved prefix of its prompt; checkpoints are\n"  \
    "                       saved cold, at intervals, on eviction and at shutdown (files hold\n" \
    "                       prompts verbatim; docs/kv-cache.md; --kv-dir is the same)\n"       \
    "      --kv-disk-space-mb N  size of the cache directory (default 4096; = --kv-budget-mb)\n" \
    "      --kv-min-tokens N  shortest checkpoint saved (default 512)\n"                       \
    "      --kv-trim N      cold saves drop the prompt's last N tokens (default 32)\n"          \
    "      --kv-align N     ... and round down to a multiple of N (default 2048; 0: none)\n"     \
    "      --kv-interval N  save when prefill or generation crosses a multiple of N\n"           \
    "                       (default 8192; 0: never)\n"

/* The disk KV cache options of one command line. */
struct kv_cli {
    struct ms_kv_params p; /* starts as ms_kv_params_default(NULL) */
    const char *tuned;     /* the first policy option given (--kv-interval ...), or NULL */
};

/* Handles one KV option c with argument arg into *k. 1 when c was one, 0
 * when not, -1 after printing "moestream <cmd>: ..." when its value is
 * malformed or out of range. */
int kv_opt(const char *cmd, int c, const char *arg, struct kv_cli *k);

/* After the options: -1 after printing a usage error when a policy option
 * was given without a cache directory (it would be ignored), else 0. */
int kv_cli_check(const char *cmd, const struct kv_cli *k);

/* Opens the store when a directory was given (*kv NULL otherwise). */
int kv_open_opt(struct ms_kvstore **kv, struct ms_engine *e, const struct kv_cli *k, ms_err *err);

#endif
