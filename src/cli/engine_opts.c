/*
 * engine_opts.c - shared engine options and the stats report (see
 * engine_opts.h).
 */
#include "cli/engine_opts.h"

#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util/parse.h"

/* Parses an integer option value in [lo, hi] into *v; false (after printing
 * "moestream <cmd>: <what>" on stderr) when it is malformed. */
static bool int_arg(const char *cmd, const char *arg, long lo, long hi, const char *what,
                    long *v) {
    if (!ms_parse_long(arg, lo, hi, v)) return true;
    fprintf(stderr, "moestream %s: %s\n", cmd, what);
    return false;
}

int engine_opt(const char *cmd, int c, const char *arg, struct ms_engine_params *p) {
    long v;
    switch (c) {
    case 'm': p->model_path = arg; return 1;
    case 't':
        if (!int_arg(cmd, arg, 0, 4096, "-t must be an integer in [0, 4096]", &v)) return -1;
        p->n_threads = (int)v;
        return 1;
    case 'c':
        if (!int_arg(cmd, arg, 1, INT32_MAX, "-c must be an integer >= 1", &v)) return -1;
        p->n_ctx = v;
        return 1;
    case ENG_OPT_QUALITY: p->quality = true; return 1;
    case ENG_OPT_STREAM: p->stream = MS_STREAM_ON; return 1;
    case ENG_OPT_NO_STREAM: p->stream = MS_STREAM_OFF; return 1;
    case ENG_OPT_MMAP: p->mmap = true; return 1;
    case ENG_OPT_CACHE_EXPERTS: {
        /* all digits: a slot count; otherwise a size with a unit */
        if (arg[0] && strspn(arg, "0123456789") == strlen(arg)) {
            if (ms_parse_long(arg, 1, UINT32_MAX, &v)) goto bad_cache;
            p->cache_experts = (uint32_t)v;
            p->cache_bytes = 0;
        } else {
            if (ms_parse_size(arg, &p->cache_bytes) || !p->cache_bytes) goto bad_cache;
            p->cache_experts = 0;
        }
        return 1;
    bad_cache:
        fprintf(stderr, "moestream %s: --cache-experts takes a slot count >= 1 (e.g. 512) or a "
                        "size > 0 (e.g. 12GB), got '%s'\n", cmd, arg);
        return -1;
    }
    case ENG_OPT_CACHE_PCT: {
        char *end;
        errno = 0;
        const double pct = strtod(arg, &end);
        if (!*arg || *end || errno || !(pct > 0 && pct <= 100)) {
            fprintf(stderr, "moestream %s: --cache-pct must be in (0, 100]\n", cmd);
            return -1;
        }
        p->cache_pct = pct;
        return 1;
    }
    case ENG_OPT_HOTLIST: p->hotlist = arg; return 1;
    case ENG_OPT_COLD: p->hotlist = NULL; return 1;
    case ENG_OPT_NO_PREFETCH: p->no_prefetch = true; return 1;
    case ENG_OPT_PIN_THREADS: p->pin_threads = true; return 1;
    case ENG_OPT_FULL_LAYERS:
        if (!int_arg(cmd, arg, 0, UINT32_MAX, "--full-layers must be an integer >= 0", &v))
            return -1;
        p->full_layers = (uint32_t)v;
        return 1;
    case ENG_OPT_PREFILL_CHUNK:
        if (!int_arg(cmd, arg, 0, INT32_MAX, "--prefill-chunk must be an integer >= 0", &v))
            return -1;
        p->prefill_chunk = v ? v : MS_PREFILL_WHOLE;
        return 1;
    case ENG_OPT_PRELOAD:
        if (!int_arg(cmd, arg, 0, UINT32_MAX, "--preload-experts must be an integer >= 0", &v))
            return -1;
        p->preload_experts = (uint32_t)v;
        return 1;
    case ENG_OPT_WHOLE_LAYER_MIN:
        if (!int_arg(cmd, arg, -1, INT32_MAX, "--whole-layer-min must be an integer >= -1", &v))
            return -1;
        p->whole_layer_min_tokens = v;
        return 1;
    case ENG_OPT_MOE_SPAN:
        if (!int_arg(cmd, arg, -1, INT32_MAX, "--moe-span must be an integer >= -1", &v))
            return -1;
        p->moe_span = v;
        return 1;
    default: return 0;
    }
}

int engine_cli_opt(const char *cmd, int c, const char *arg, struct engine_cli *e) {
    const int r = engine_opt(cmd, c, arg, &e->ep);
    if (r <= 0) return r;
    const char *name = NULL;
    switch (c) {
    case ENG_OPT_STREAM: e->stream_given = true; break;
    case ENG_OPT_NO_STREAM: e->no_stream_given = true; break;
    case ENG_OPT_CACHE_EXPERTS: name = "--cache-experts"; break;
    case ENG_OPT_HOTLIST: name = "--hotlist"; break;
    case ENG_OPT_PRELOAD: name = "--preload-experts"; break;
    case ENG_OPT_FULL_LAYERS: name = "--full-layers"; break;
    case ENG_OPT_WHOLE_LAYER_MIN: name = "--whole-layer-min"; break;
    case ENG_OPT_NO_PREFETCH: name = "--no-prefetch"; break;
    default: break;
    }
    if (name) {
        bool seen = false;
        for (int i = 0; i < e->n_streaming_only; i++) seen |= !strcmp(e->streaming_only[i], name);
        if (!seen && e->n_streaming_only < (int)(sizeof e->streaming_only / sizeof e->streaming_only[0]))
            e->streaming_only[e->n_streaming_only++] = name;
    }
    return 1;
}

int engine_cli_check(const char *cmd, const struct engine_cli *e) {
    const struct ms_engine_params *p = &e->ep;
    if (!p->model_path) {
        fprintf(stderr, "moestream %s: -m MODEL is required\n", cmd);
        return 2;
    }
    if (access(p->model_path, R_OK) != 0) {
        fprintf(stderr, "moestream %s: -m: cannot open %s: %s\n", cmd, p->model_path,
                strerror(errno));
        return 1;
    }
    if (e->stream_given && e->no_stream_given) {
        fprintf(stderr, "moestream %s: --stream and --no-stream contradict each other\n", cmd);
        return 2;
    }
    if (p->stream == MS_STREAM_OFF && e->n_streaming_only > 0) {
        fprintf(stderr, "moestream %s: %s applies only when streaming experts, not with "
                        "--no-stream\n", cmd, e->streaming_only[0]);
        return 2;
    }
    if (p->hotlist) {
        /* syntax now; the engine checks indices against the model */
        ms_err err;
        if (ms_hotlist_check(p->hotlist, &err)) {
            fprintf(stderr, "moestream %s: --hotlist: %s\n", cmd, err.msg);
            return 1;
        }
    }
    return 0;
}

void engine_cli_after_load(const char *cmd, const struct engine_cli *e,
                           const struct ms_engine *eng) {
    const struct ms_model_info info = ms_engine_info(eng);
    if (e->ep.n_ctx == MS_CTX_AUTO) {
        const struct ms_plan *pl = ms_engine_plan_info(eng);
        /* said only where the context is not simply what was asked for */
        if (pl->n_ctx < pl->n_ctx_auto)
            fprintf(stderr, "%s: context %lld positions, halved from %lld for the memory plan "
                            "(to keep its residency, layer buffers and half its expert cache; "
                            "-c sets it)\n", cmd, (long long)pl->n_ctx, (long long)pl->n_ctx_auto);
        else if (e->ep.n_prompt == 0 && pl->n_ctx < (int64_t)info.n_ctx_train)
            fprintf(stderr, "%s: context %lld positions, of the model's %u (-c sets it)\n", cmd,
                    (long long)pl->n_ctx, info.n_ctx_train);
    }
    if (e->ep.n_ctx > 0 && info.n_ctx_train > 0 && e->ep.n_ctx > (int64_t)info.n_ctx_train)
        fprintf(stderr, "moestream %s: warning: -c %lld is above the model's training context "
                        "(%u); quality past it is not what the model was trained for\n",
                cmd, (long long)e->ep.n_ctx, info.n_ctx_train);
    if (!ms_engine_stream_stats(eng).streaming && e->n_streaming_only > 0) {
        char names[160] = "";
        for (int i = 0; i < e->n_streaming_only; i++) {
            const size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", e->streaming_only[i]);
        }
        fprintf(stderr, "moestream %s: warning: the model is resident (it fits the memory "
                        "budget), so %s %s no effect; add --stream to stream experts\n",
                cmd, names, e->n_streaming_only > 1 ? "have" : "has");
    }
}

int cli_check_writable(const char *cmd, const char *flag, const char *path) {
    if (!*path) {
        fprintf(stderr, "moestream %s: %s: the path is empty\n", cmd, flag);
        return 1;
    }
    if (access(path, F_OK) == 0) {
        if (access(path, W_OK) == 0) return 0;
        fprintf(stderr, "moestream %s: %s: cannot write %s: %s\n", cmd, flag, path,
                strerror(errno));
        return 1;
    }
    if (errno != ENOENT) {
        fprintf(stderr, "moestream %s: %s: cannot write %s: %s\n", cmd, flag, path,
                strerror(errno));
        return 1;
    }
    char *copy = strdup(path);
    if (!copy) {
        fprintf(stderr, "moestream %s: out of memory\n", cmd);
        return 1;
    }
    const char *dir = dirname(copy);
    const int ok = access(dir, W_OK | X_OK) == 0;
    const int e = errno;
    free(copy);
    if (ok) return 0;
    fprintf(stderr, "moestream %s: %s: cannot write %s: %s\n", cmd, flag, path, strerror(e));
    return 1;
}

/* read_bytes of /proc/self/io: what this process made the kernel read from
 * storage (page cache misses and direct reads alike). 0 if unreadable. */
static uint64_t proc_read_bytes(void) {
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long v = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %llu", &v) == 1) break;
    fclose(f);
    return v;
}

int write_run_stats(FILE *f, const struct ms_engine *e, const struct run_stats *rs) {
    const struct ms_stream_stats ss = ms_engine_stream_stats(e);
    const struct ms_model_info info = ms_engine_info(e);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double total = rs->prefill_seconds + rs->decode_seconds;
    json_t *o = json_object();
    json_object_set_new(o, "streaming", json_boolean(ss.streaming));
    json_object_set_new(o, "prefill_tokens", json_integer(rs->prefill_tokens));
    json_object_set_new(o, "prefill_seconds", json_real(rs->prefill_seconds));
    json_object_set_new(o, "decode_tokens", json_integer(rs->decode_tokens));
    json_object_set_new(o, "decode_seconds", json_real(rs->decode_seconds));
    json_object_set_new(o, "decode_evals", json_integer(rs->decode_evals));
    json_object_set_new(o, "draft_guessed", json_integer(rs->draft_guessed));
    json_object_set_new(o, "draft_accepted", json_integer(rs->draft_accepted));
    json_object_set_new(o, "bytes_read", json_integer((json_int_t)ss.bytes_read));
    json_object_set_new(o, "proc_read_bytes", json_integer((json_int_t)proc_read_bytes()));
    json_object_set_new(o, "routed_bytes", json_integer((json_int_t)info.routed_bytes));
    json_object_set_new(o, "passes", json_real(info.routed_bytes ? (double)rs->prefill_bytes_read /
                                                                     (double)info.routed_bytes
                                                               : 0.0));
    json_object_set_new(o, "cache_hits", json_integer((json_int_t)ss.cache_hits));
    json_object_set_new(o, "cache_misses", json_integer((json_int_t)ss.cache_misses));
    json_object_set_new(o, "io_wait_seconds", json_real(ss.io_wait_seconds));
    json_object_set_new(o, "compute_seconds",
                        json_real(total > ss.io_wait_seconds ? total - ss.io_wait_seconds : 0.0));
    json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)ru.ru_maxrss * 1024));
    json_object_set_new(o, "cache_budget_bytes", json_integer((json_int_t)ss.cache_budget_bytes));
    json_object_set_new(o, "prefill_bytes_read", json_integer((json_int_t)rs->prefill_bytes_read));
    json_object_set_new(o, "prefill_io_wait_seconds", json_real(rs->prefill_io_wait));
    json_object_set_new(o, "decode_io_wait_seconds", json_real(rs->decode_io_wait));
    json_object_set_new(o, "prefill_chunk", json_integer(ss.prefill_chunk));
    json_object_set_new(o, "layer_reads", json_integer((json_int_t)ss.layer_reads));
    json_object_set_new(o, "layer_bytes_read", json_integer((json_int_t)ss.layer_bytes_read));
    json_object_set_new(o, "layer_read_seconds", json_real(ss.layer_read_seconds));
    json_object_set_new(o, "seeded_experts", json_integer((json_int_t)ss.seeded_experts));
    json_object_set_new(o, "prefetched_experts", json_integer((json_int_t)ss.prefetched));
    json_object_set_new(o, "prefetch_used", json_integer((json_int_t)ss.prefetch_used));
    json_object_set_new(o, "prefetch_accuracy",
                        json_real(ss.predicted_selected ? (double)ss.predicted_right /
                                                              (double)ss.predicted_selected
                                                        : 0.0));
    json_object_set_new(o, "peak_layer_buffer_bytes",
                        json_integer((json_int_t)ss.peak_layer_buffer_bytes));
    const struct ms_kv_stats kvs = rs->kv ? ms_kv_get_stats(rs->kv) : (struct ms_kv_stats){0};
    json_object_set_new(o, "kv_restored_tokens", json_integer(kvs.restored_tokens));
    json_object_set_new(o, "kv_saved_files", json_integer(kvs.saved_files));
    json_object_set_new(o, "kv_restore_seconds", json_real(kvs.restore_seconds));
    json_object_set_new(o, "kv_save_seconds", json_real(kvs.save_seconds));
    /* the memory plan (ms_plan) */
    const struct ms_plan *pl = ms_engine_plan_info(e);
    json_t *plan = json_object();
    json_object_set_new(plan, "stream", json_boolean(pl->stream));
    json_object_set_new(plan, "limit_source", json_string(pl->limit_source));
    json_object_set_new(plan, "limit_bytes", json_integer((json_int_t)pl->limit_bytes));
    json_object_set_new(plan, "usable_bytes", json_integer((json_int_t)pl->usable_bytes));
    json_object_set_new(plan, "dense_bytes", json_integer((json_int_t)pl->dense_bytes));
    json_object_set_new(plan, "full_layer_bytes", json_integer((json_int_t)pl->full_layer_bytes));
    json_object_set_new(plan, "kv_bytes", json_integer((json_int_t)pl->kv_bytes));
    json_object_set_new(plan, "resid_bytes", json_integer((json_int_t)pl->resid_bytes));
    json_object_set_new(plan, "scratch_bytes", json_integer((json_int_t)pl->scratch_bytes));
    json_object_set_new(plan, "moe_span", json_integer((json_int_t)pl->moe_span));
    json_object_set_new(plan, "layer_buffer_bytes",
                        json_integer((json_int_t)pl->layer_buffer_bytes));
    json_object_set_new(plan, "cache_bytes", json_integer((json_int_t)pl->cache_bytes));
    json_object_set_new(plan, "n_ctx", json_integer((json_int_t)pl->n_ctx));
    json_object_set_new(o, "plan", plan);
    char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) return -1;
    const int rc = fprintf(f, "%s\n", text) < 0 || fflush(f) ? -1 : 0;
    free(text);
    return rc;
}
