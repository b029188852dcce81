/*
 * engine_opts.h - the options every model-evaluating subcommand shares
 * (model, threads, context, kernel mode, streaming and the expert cache),
 * and the --stats report of run and bench.
 */
#ifndef MS_CLI_ENGINE_OPTS_H
#define MS_CLI_ENGINE_OPTS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "moestream.h"

/* getopt_long codes of the long-only engine options. */
enum {
    ENG_OPT_QUALITY = 3000,
    ENG_OPT_STREAM,
    ENG_OPT_NO_STREAM,
    ENG_OPT_CACHE_EXPERTS,
    ENG_OPT_CACHE_PCT,
    ENG_OPT_HOTLIST,
    ENG_OPT_COLD,
    ENG_OPT_PREFILL_CHUNK,
    ENG_OPT_WHOLE_LAYER_MIN,
    ENG_OPT_PRELOAD,
    ENG_OPT_NO_PREFETCH,
    ENG_OPT_FULL_LAYERS,
    ENG_OPT_PIN_THREADS,
    ENG_OPT_MOE_SPAN,
    ENG_OPT_MMAP,
};

/* Short options they use: "m:t:c:". */
#define ENGINE_OPTIONS                                                                           \
    {"model", required_argument, 0, 'm'}, {"threads", required_argument, 0, 't'},                \
        {"ctx-size", required_argument, 0, 'c'}, {"quality", no_argument, 0, ENG_OPT_QUALITY},   \
        {"stream", no_argument, 0, ENG_OPT_STREAM},                                              \
        {"no-stream", no_argument, 0, ENG_OPT_NO_STREAM},                                        \
        {"cache-experts", required_argument, 0, ENG_OPT_CACHE_EXPERTS},                          \
        {"cache-pct", required_argument, 0, ENG_OPT_CACHE_PCT},                                  \
        {"hotlist", required_argument, 0, ENG_OPT_HOTLIST}, {"cold", no_argument, 0, ENG_OPT_COLD}, \
        {"prefill-chunk", required_argument, 0, ENG_OPT_PREFILL_CHUNK},                          \
        {"whole-layer-min", required_argument, 0, ENG_OPT_WHOLE_LAYER_MIN},                      \
        {"preload-experts", required_argument, 0, ENG_OPT_PRELOAD},                              \
        {"no-prefetch", no_argument, 0, ENG_OPT_NO_PREFETCH},                                    \
        {"full-layers", required_argument, 0, ENG_OPT_FULL_LAYERS},                              \
        {"pin-threads", no_argument, 0, ENG_OPT_PIN_THREADS},                                    \
        {"moe-span", required_argument, 0, ENG_OPT_MOE_SPAN}, {"mmap", no_argument, 0, ENG_OPT_MMAP}

#define ENGINE_HELP                                                                               \
    "  -m, --model FILE     deepseek4 GGUF\n"                                                     \
    "  -t, --threads N      worker threads; 0 (default) = the CPUs this process may use:\n"       \
    "                       its affinity mask (taskset) bounded by its cgroup CPU quota\n"        \
    "      --pin-threads    pin the threads one per CPU of the affinity mask\n"                  \
    "  -c, --ctx-size N     context size in positions (default: run: the prompt and -n, at\n"  \
    "                       least 4096; logits: the prompt's; chat, serve: the model's, at\n"    \
    "                       most 131072; run, chat, serve: less when memory is short; bench:\n" \
    "                       its --ctx-max)\n"                                                    \
    "      --quality        F32 activations (exact math on the stored weights)\n"                 \
    "      --stream         stream routed experts from disk even if the model fits in memory\n"   \
    "      --no-stream      keep the whole model resident\n"                                      \
    "                       (default: stream when the resident plan does not fit)\n"              \
    "      --mmap           resident: compute from the file mapping (page cache, shared with\n"   \
    "                       other processes) instead of a private copy on huge pages\n"         \
    "      --cache-experts N|SIZE  expert cache: N expert slots, or a byte target such as 12GB\n" \
    "                       fitted to what remains after weights, KV and buffers (default: auto)\n" \
    "      --cache-pct P    share of available memory (cgroup limit or MemAvailable) the\n"        \
    "                       automatic plan may use (default 80)\n"                                 \
    "      --hotlist FILE   seed expert priorities from a routing profile\n"                       \
    "      --cold           no hotlist seeding\n"                                                 \
    "      --preload-experts N  read the hotlist's N highest-priority experts at start\n"          \
    "      --no-prefetch    no decode prefetch of the next layer's likely experts\n"               \
    "      --full-layers N  hold the first N layers' routed experts in memory whole (their\n"     \
    "                       bytes count as resident in the memory plan)\n"                          \
    "      --prefill-chunk N  prompt tokens per forward step (one read of the routed weights\n"  \
    "                       a step when streaming); 0 = the whole prompt in one step; default:\n" \
    "                       32768 when streaming (a longer step hides no more reads), else\n"   \
    "                       the MoE span (512 without one)\n"                                      \
    "      --whole-layer-min N  streamed steps of >= N tokens read whole layers sequentially\n"   \
    "                       (default: 3 * n_expert / n_expert_used; -1 = never)\n"        \
    "      --moe-span N     prompt tokens whose routed experts run together: each expert\n"   \
    "                       read and multiplied once per span, not once per 512-token\n"      \
    "                       ubatch (default 2048 where it fits in memory, -1 = off)\n"

/* Handles engine option c with argument arg into *p. Returns 1 when c was
 * an engine option, 0 when not, -1 (after printing "moestream <cmd>: ..." on
 * stderr) when its value is malformed. */
int engine_opt(const char *cmd, int c, const char *arg, struct ms_engine_params *p);

/* The engine options of one command line and which of them were given, for
 * the checks no single option can make alone. */
struct engine_cli {
    struct ms_engine_params ep;
    bool stream_given, no_stream_given;
    /* streaming-only options given (names, for the messages) */
    const char *streaming_only[8];
    int n_streaming_only;
};

/* engine_opt into e->ep, also recording what was given. */
int engine_cli_opt(const char *cmd, int c, const char *arg, struct engine_cli *e);

/*
 * After parsing, before any work: -m given and readable; --stream and
 * --no-stream not both; no streaming-only option (--cache-experts,
 * --hotlist, --preload-experts, --full-layers, --whole-layer-min,
 * --moe-span, --no-prefetch) with --no-stream; a --hotlist file that exists and parses.
 * 0, or the exit status after printing one line "moestream <cmd>: ..."
 * naming the flag: 2 for a usage error, 1 for a file that cannot be read.
 */
int engine_cli_check(const char *cmd, const struct engine_cli *e);

/*
 * After the engine loaded: warnings (one line each, on stderr) for what the
 * options cannot change on this model: a context (-c) above the model's
 * training context, streaming-only options when the plan keeps the model
 * resident.
 */
void engine_cli_after_load(const char *cmd, const struct engine_cli *e,
                           const struct ms_engine *eng);

/* Whether path can be written (an existing writable file, or a new file in
 * an existing writable directory), checked without creating it. 0, or 1
 * (the exit status) after printing "moestream <cmd>: FLAG: cannot write
 * PATH: reason". */
int cli_check_writable(const char *cmd, const char *flag, const char *path);

/* What one run measured, for --stats / --stats-json. */
struct run_stats {
    int64_t prefill_tokens, decode_tokens;
    double prefill_seconds, decode_seconds;
    uint64_t prefill_bytes_read; /* expert bytes read during prefill */
    double prefill_io_wait;      /* seconds the prefill waited for expert reads */
    double decode_io_wait;       /* seconds the decode steps waited for expert reads */
    const struct ms_kvstore *kv; /* NULL, or the disk KV cache whose figures to add */
    int64_t decode_evals;        /* evals decode made (fewer than its tokens with drafts) */
    int64_t draft_guessed, draft_accepted; /* guesses evaluated, and kept */
};

/* Writes the stats JSON object (one line) to f: the run's figures, the
 * engine's stream counters, /proc/self/io read_bytes, peak RSS. -1 on a
 * write error. */
int write_run_stats(FILE *f, const struct ms_engine *e, const struct run_stats *rs);

#endif
