/*
 * cmd_bench.c - `moestream bench`: prefill and decode throughput at context
 * frontiers, with the expert store's counters, as a table and a CSV.
 *
 * The model is loaded once. A fixed text (bench/ ships a public-domain one)
 * is tokenized, repeated when it is shorter than the largest frontier, and
 * walked to increasing context frontiers c_1 < c_2 < ... with incremental
 * prefill: the row of frontier c_i times only the interval c_{i-1}..c_i,
 * evaluated in one call (one layer-major pass over the weights) on top of the
 * c_{i-1} positions already in the session. So a row measures prefill at that
 * depth of context, not an average from zero. At each frontier the session
 * is snapshotted, a greedy probe of --gen-tokens tokens is decoded (argmax,
 * lowest id on a tie, each token fed back), and the snapshot is restored, so
 * the probe never enters the walk. With --fresh every frontier is instead
 * prefilled from an empty session: a row is then a prompt of that length.
 * --warmup runs the first frontier (and one decoded token) once, unrecorded,
 * before the walk.
 *
 * Byte and cache figures are deltas of ms_engine_stream_stats over the
 * interval (zero when the model is resident). KV bytes are the attention
 * state the context occupies (ms_engine_kv_bytes; the session allocates its
 * full n_ctx capacity up front). Peak RSS is the process's high-water
 * mark so far (getrusage).
 *
 * With --kv-dir, each frontier's session is also saved to the disk KV cache
 * (timed), the files' page cache is dropped, and the checkpoint is restored
 * into a second session (timed) whose logits must equal the live ones bit
 * for bit: with --fresh, a row then compares re-prefilling c tokens with
 * restoring them (file bytes, bytes per token, restore bandwidth).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/gen.h"
#include "cli/kv_opts.h"
#include "moestream.h"
#include "util/buf.h"

/* The text `bench` walks when --prompt-file is not given: looked up in the
 * working directory, then beside the binary's build directory. */
#define BENCH_TEXT "bench/pride-and-prejudice-ch1-19.txt"
#define MAX_FRONTIERS 4096

static const char *const CSV_HEADER =
    "context,interval_tokens,prefill_seconds,prefill_tok_s,decode_tokens,decode_seconds,"
    "decode_tok_s,prefill_bytes_read,decode_bytes_read,prefill_passes,prefill_hit_rate,"
    "decode_hit_rate,io_wait_seconds,kv_bytes,peak_rss_bytes,streaming,kv_save_seconds,"
    "kv_restore_seconds,kv_file_bytes";

static void usage(FILE *f) {
    fprintf(f,
            "usage: moestream bench -m MODEL [options]\n"
            "  --prompt-file F      text to walk (default: " BENCH_TEXT ", repeated if short)\n"
            "  --ctx-start N        first context frontier (default 512)\n"
            "  --ctx-max N          last context frontier (default 4096)\n"
            "  --step-incr N        frontiers grow by N tokens, or\n"
            "  --step-mul F         frontiers grow by the factor F > 1 (default 2)\n"
            "  --frontiers A,B,...  explicit increasing frontiers instead of start/max/step\n"
            "  --gen-tokens N       greedy decode probe at each frontier (default 32; 0: none)\n"
            "  --csv FILE           write one CSV row per frontier to FILE\n"
            "  --fresh              prefill each frontier from an empty session (a row then\n"
            "                       measures a prompt of that length; bench/compare uses it)\n"
            "  --warmup             first an unrecorded prefill of the first frontier and one\n"
            "                       decoded token, as llama-bench warms up (bench/scaling)\n"
            KV_HELP
            ENGINE_HELP
            "The context size (-c) defaults to ctx-max + gen-tokens.\n");
}

struct counters {
    struct ms_stream_stats ss;
    double t;
};

static struct counters now_counters(const struct ms_engine *e) {
    return (struct counters){.ss = ms_engine_stream_stats(e), .t = gen_now()};
}

/* One frontier's figures. */
struct row {
    int64_t context, interval;
    double prefill_s, decode_s, io_wait_s;
    int64_t decode_tokens;
    uint64_t prefill_bytes, decode_bytes;
    uint64_t prefill_hits, prefill_lookups, decode_hits, decode_lookups;
    uint64_t kv_bytes, peak_rss;
    double kv_save_s, kv_restore_s; /* --kv-dir: checkpoint save and restore */
    uint64_t kv_file_bytes;
};

static double rate(double n, double s) { return s > 0 ? n / s : 0.0; }

/* "0.953" or "" (no cache lookups: resident, or nothing routed). */
static void fmt_hit(char *buf, size_t n, uint64_t hits, uint64_t lookups) {
    if (lookups) snprintf(buf, n, "%.4f", (double)hits / (double)lookups);
    else buf[0] = 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* The default text: ./bench/..., else <dir of the binary>/../bench/... */
static const char *default_text(char *buf, size_t n) {
    if (access(BENCH_TEXT, R_OK) == 0) return BENCH_TEXT;
    char exe[PATH_MAX];
    const ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return BENCH_TEXT;
    exe[k] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return BENCH_TEXT;
    *slash = 0;
    snprintf(buf, n, "%s/../%s", exe, BENCH_TEXT);
    return access(buf, R_OK) == 0 ? buf : BENCH_TEXT;
}

/* Frontiers start, then +incr or *mul, up to max (max itself always ends the
 * walk). Returns the count, strictly increasing; -1 when too many. */
static int make_frontiers(int64_t start, int64_t max, int64_t incr, double mul, int64_t *out) {
    int n = 0;
    for (int64_t c = start; c < max; ) {
        if (n == MAX_FRONTIERS - 1) return -1;
        out[n++] = c;
        int64_t next = incr > 0 ? c + incr : (int64_t)ceil((double)c * mul);
        c = next > c ? next : c + 1;
    }
    out[n++] = max;
    return n;
}

/* "128,512,2048" -> out; the count, or -1 unless strictly increasing
 * integers in [1, INT32_MAX]. */
static int parse_frontiers(const char *s, int64_t *out) {
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        const long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < 1 || v > INT32_MAX || (n && v <= out[n - 1]) ||
            n == MAX_FRONTIERS || (*end && *end != ','))
            return -1;
        out[n++] = v;
        s = *end ? end + 1 : end;
        if (*end && !*s) return -1;
    }
    return n;
}

static uint64_t peak_rss(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}

/* Greedy probe: n tokens, each the argmax of the current logits (lowest id
 * on a tie), fed back. */
static int greedy_probe(struct ms_session *s, uint32_t n_vocab, int64_t n, ms_err *err) {
    for (int64_t i = 0; i < n; i++) {
        const float *lg = ms_session_logits(s);
        if (!lg) return ms_err_set(err, "no logits to decode from");
        int32_t best = 0;
        for (uint32_t v = 1; v < n_vocab; v++)
            if (lg[v] > lg[best]) best = (int32_t)v;
        if (ms_session_eval(s, &best, 1, NULL, err)) return -1;
    }
    return 0;
}

static void print_row(FILE *f, const struct row *r) {
    char ph[16], dh[16];
    fmt_hit(ph, sizeof ph, r->prefill_hits, r->prefill_lookups);
    fmt_hit(dh, sizeof dh, r->decode_hits, r->decode_lookups);
    fprintf(f, "%8lld %8lld %10.2f %10.2f %12.1f %12.1f %8s %8s %10.1f %10.1f\n",
            (long long)r->context, (long long)r->interval, rate((double)r->interval, r->prefill_s),
            rate((double)r->decode_tokens, r->decode_s), (double)r->prefill_bytes / 1048576.0,
            (double)r->decode_bytes / 1048576.0, ph[0] ? ph : "-", dh[0] ? dh : "-",
            (double)r->kv_bytes / 1048576.0, (double)r->peak_rss / 1048576.0);
    fflush(f);
}

static int csv_row(FILE *f, const struct row *r, uint64_t routed, bool streaming) {
    char ph[16], dh[16];
    fmt_hit(ph, sizeof ph, r->prefill_hits, r->prefill_lookups);
    fmt_hit(dh, sizeof dh, r->decode_hits, r->decode_lookups);
    const int rc = fprintf(
        f, "%lld,%lld,%.6f,%.3f,%lld,%.6f,%.3f,%llu,%llu,%.4f,%s,%s,%.6f,%llu,%llu,%d,%.6f,%.6f,%llu\n",
        (long long)r->context, (long long)r->interval, r->prefill_s,
        rate((double)r->interval, r->prefill_s), (long long)r->decode_tokens, r->decode_s,
        rate((double)r->decode_tokens, r->decode_s), (unsigned long long)r->prefill_bytes,
        (unsigned long long)r->decode_bytes,
        routed ? (double)r->prefill_bytes / (double)routed : 0.0, ph, dh, r->io_wait_s,
        (unsigned long long)r->kv_bytes, (unsigned long long)r->peak_rss, streaming ? 1 : 0,
        r->kv_save_s, r->kv_restore_s, (unsigned long long)r->kv_file_bytes);
    return rc < 0 || fflush(f) ? -1 : 0;
}

/* Runs one frontier: prefill tokens[s.n_past .. c), then the probe. */
static int run_frontier(struct ms_engine *e, struct ms_session *s, const int32_t *tokens,
                        int64_t c, int64_t gen, struct row *r,
                        ms_err *err) {
    const int64_t from = ms_session_n_past(s);
    *r = (struct row){.context = c, .interval = c - from};
    const struct counters a = now_counters(e);
    if (ms_session_eval(s, tokens + from, c - from, NULL, err)) return -1;
    const struct counters b = now_counters(e);
    r->prefill_s = b.t - a.t;
    r->prefill_bytes = b.ss.bytes_read - a.ss.bytes_read;
    r->prefill_hits = b.ss.cache_hits - a.ss.cache_hits;
    r->prefill_lookups = r->prefill_hits + (b.ss.cache_misses - a.ss.cache_misses);
    r->kv_bytes = ms_engine_kv_bytes(e, c);
    struct counters d = b;
    if (gen > 0) {
        struct ms_snapshot *snap = ms_session_snapshot(s);
        if (!snap) return ms_err_set(err, "out of memory taking a snapshot at %lld", (long long)c);
        const struct counters c0 = now_counters(e);
        int rc = greedy_probe(s, ms_engine_info(e).n_vocab, gen, err);
        d = now_counters(e);
        if (rc == 0) rc = ms_session_restore(s, snap, err);
        ms_snapshot_free(snap);
        if (rc) return -1;
        r->decode_tokens = gen;
        r->decode_s = d.t - c0.t;
        r->decode_bytes = d.ss.bytes_read - c0.ss.bytes_read;
        r->decode_hits = d.ss.cache_hits - c0.ss.cache_hits;
        r->decode_lookups = r->decode_hits + (d.ss.cache_misses - c0.ss.cache_misses);
    }
    r->io_wait_s = d.ss.io_wait_seconds - a.ss.io_wait_seconds;
    r->peak_rss = peak_rss();
    return 0;
}

/* --kv-dir: saves s (at c tokens) to the store, drops the files' page
 * cache, restores the checkpoint into s2 by the text of the c tokens, and
 * checks the restored logits against the live ones. */
static int kv_round_trip(struct ms_kvstore *kv, const struct ms_tokenizer *tok, struct ms_session *s,
                         struct ms_session *s2, const int32_t *tokens, int64_t c, uint32_t n_vocab,
                         struct row *r, ms_err *err) {
    const struct ms_kv_stats k0 = ms_kv_get_stats(kv);
    double t0 = gen_now();
    if (ms_kv_save(kv, s, MS_KV_COLD, err)) return -1;
    r->kv_save_s = gen_now() - t0;
    r->kv_file_bytes = ms_kv_get_stats(kv).saved_bytes - k0.saved_bytes;
    ms_kv_drop_page_cache(kv);
    char *text = NULL;
    size_t len = 0;
    if (ms_tokenizer_decode(tok, tokens, (size_t)c, true, &text, &len, err)) return -1;
    struct ms_kv_restored kr;
    ms_session_reset(s2);
    t0 = gen_now();
    const int rc = ms_kv_restore_prefix(kv, s2, text, len, NULL, 0, &kr, err);
    r->kv_restore_s = gen_now() - t0;
    free(text);
    if (rc) return -1;
    if (kr.n_tokens != c)
        return ms_err_set(err, "the checkpoint at %lld tokens restored %lld tokens", (long long)c,
                          (long long)kr.n_tokens);
    if (memcmp(ms_session_logits(s), ms_session_logits(s2), (size_t)n_vocab * sizeof(float)))
        return ms_err_set(err, "the checkpoint at %lld tokens restored other logits", (long long)c);
    return 0;
}

/* The token sequence: the text's tokens (BOS first when the model wants
 * it), the text's tokens repeated after them until n are there. */
static int bench_tokens(const struct ms_tokenizer *t, const char *text, size_t len, int64_t n,
                        int32_t **out, int *repeats, ms_err *err) {
    int32_t *ids = NULL;
    size_t n_ids = 0;
    const bool bos = ms_tokenizer_add_bos(t);
    if (ms_tokenizer_encode(t, text, len, bos, false, &ids, &n_ids, err)) return -1;
    const size_t body = n_ids - (bos ? 1 : 0);
    if (body == 0) {
        free(ids);
        return ms_err_set(err, "the benchmark text has no tokens");
    }
    int32_t *seq = malloc((size_t)n * sizeof *seq);
    if (!seq) {
        free(ids);
        return ms_err_set(err, "out of memory for %lld tokens", (long long)n);
    }
    int64_t k = 0;
    *repeats = 0;
    for (size_t i = 0; k < n && i < n_ids; i++) seq[k++] = ids[i];
    while (k < n) {
        ++*repeats;
        for (size_t i = n_ids - body; k < n && i < n_ids; i++) seq[k++] = ids[i];
    }
    free(ids);
    *out = seq;
    return 0;
}

/* Everything `bench` was asked for (bench_parse fills and validates it). */
struct bench_opts {
    struct engine_cli eng;
    struct kv_cli kp;
    const char *text_path, *csv_path;
    long ctx_max, gen;
    bool fresh, warmup;
    int64_t frontiers[MAX_FRONTIERS];
    int n_front;
    char pathbuf[PATH_MAX + 64];
};

/* Parses and validates argv into *o before any work (see cli.h): every
 * number, the frontiers, the context against them, the prompt file (must
 * be readable) and the CSV path (must be writable). */
static int bench_parse(int argc, char **argv, struct bench_opts *o) {
    enum { OPT_PROMPT_FILE = 2000, OPT_CTX_START, OPT_CTX_MAX, OPT_STEP_INCR, OPT_STEP_MUL,
           OPT_GEN, OPT_CSV, OPT_FRESH, OPT_WARMUP, OPT_FRONTIERS };
    static const struct option opts[] = {
        {"prompt-file", required_argument, 0, OPT_PROMPT_FILE},
        {"ctx-start", required_argument, 0, OPT_CTX_START},
        {"ctx-max", required_argument, 0, OPT_CTX_MAX},
        {"step-incr", required_argument, 0, OPT_STEP_INCR},
        {"step-mul", required_argument, 0, OPT_STEP_MUL},
        {"gen-tokens", required_argument, 0, OPT_GEN},
        {"csv", required_argument, 0, OPT_CSV},
        {"fresh", no_argument, 0, OPT_FRESH},
        {"warmup", no_argument, 0, OPT_WARMUP},
        {"frontiers", required_argument, 0, OPT_FRONTIERS},
        {"help", no_argument, 0, 'h'},
        KV_OPTIONS,
        ENGINE_OPTIONS,
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->eng.ep = ms_engine_params_default(NULL);
    o->kp = (struct kv_cli){.p = ms_kv_params_default(NULL)};
    const char *frontier_list = NULL;
    long ctx_start = 512, incr = 0;
    o->ctx_max = 4096;
    o->gen = 32;
    double mul = 0.0;
    bool ctx_given = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:t:c:h", opts, NULL)) != -1) {
        int r = engine_cli_opt("bench", c, optarg, &o->eng);
        if (r == 0) r = kv_opt("bench", c, optarg, &o->kp);
        if (r < 0) return 2;
        if (r > 0) {
            if (c == 'c') ctx_given = true;
            continue;
        }
        switch (c) {
        case OPT_PROMPT_FILE: o->text_path = optarg; break;
        case OPT_CTX_START:
        case OPT_CTX_MAX:
        case OPT_STEP_INCR:
        case OPT_GEN: {
            long v;
            const long lo = c == OPT_GEN ? 0 : 1;
            if (ms_parse_long(optarg, lo, INT32_MAX, &v)) {
                const char *name = c == OPT_CTX_START ? "--ctx-start"
                                   : c == OPT_CTX_MAX   ? "--ctx-max"
                                   : c == OPT_STEP_INCR ? "--step-incr"
                                                        : "--gen-tokens";
                fprintf(stderr, "moestream bench: %s must be an integer >= %ld\n", name, lo);
                return 2;
            }
            if (c == OPT_CTX_START) ctx_start = v;
            else if (c == OPT_CTX_MAX) o->ctx_max = v;
            else if (c == OPT_STEP_INCR) incr = v;
            else o->gen = v;
            break;
        }
        case OPT_STEP_MUL:
            if (parse_double(optarg, &mul) || !(mul > 1.0 && mul <= 1024.0)) {
                fprintf(stderr, "moestream bench: --step-mul must be a number in (1, 1024]\n");
                return 2;
            }
            break;
        case OPT_CSV: o->csv_path = optarg; break;
        case OPT_FRESH: o->fresh = true; break;
        case OPT_WARMUP: o->warmup = true; break;
        case OPT_FRONTIERS:
            frontier_list = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "moestream bench: unknown option or missing value '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "moestream bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->eng.ep.model_path) {
        fprintf(stderr, "moestream bench: -m MODEL is required\n");
        usage(stderr);
        return 2;
    }
    if (incr > 0 && mul > 0) {
        fprintf(stderr, "moestream bench: --step-incr and --step-mul exclude each other\n");
        return 2;
    }
    if (frontier_list && (incr > 0 || mul > 0)) {
        fprintf(stderr, "moestream bench: --frontiers excludes --step-incr and --step-mul\n");
        return 2;
    }
    if (incr == 0 && mul == 0) mul = 2.0;
    if (frontier_list) {
        o->n_front = parse_frontiers(frontier_list, o->frontiers);
        if (o->n_front <= 0) {
            fprintf(stderr, "moestream bench: --frontiers takes increasing integers >= 1 "
                            "separated by commas, got '%s'\n", frontier_list);
            return 2;
        }
        ctx_start = o->frontiers[0];
        o->ctx_max = o->frontiers[o->n_front - 1];
    }
    if (ctx_start > o->ctx_max) {
        fprintf(stderr, "moestream bench: --ctx-start (%ld) is larger than --ctx-max (%ld)\n",
                ctx_start, o->ctx_max);
        return 2;
    }
    if (ctx_given && o->eng.ep.n_ctx < o->ctx_max + o->gen) {
        fprintf(stderr, "moestream bench: -c %lld cannot hold --ctx-max + --gen-tokens = %ld\n",
                (long long)o->eng.ep.n_ctx, o->ctx_max + o->gen);
        return 2;
    }
    if (!ctx_given) o->eng.ep.n_ctx = o->ctx_max + o->gen;
    o->eng.ep.n_snapshots = o->gen > 0; /* each decode probe's snapshot */
    o->eng.ep.kv_captures = o->kp.p.dir != NULL;
    o->eng.ep.kv_interval = o->kp.p.interval_tokens;
    if (!frontier_list)
        o->n_front = make_frontiers(ctx_start, o->ctx_max, incr, mul, o->frontiers);
    if (o->n_front < 0) {
        fprintf(stderr, "moestream bench: more than %d frontiers; use a larger step\n",
                MAX_FRONTIERS);
        return 2;
    }
    int chk = engine_cli_check("bench", &o->eng);
    if (chk) return chk;
    if (kv_cli_check("bench", &o->kp)) return 2;
    if (!o->text_path) o->text_path = default_text(o->pathbuf, sizeof o->pathbuf);
    if (access(o->text_path, R_OK) != 0) {
        fprintf(stderr, "moestream bench: --prompt-file: cannot read %s: %s\n", o->text_path,
                strerror(errno));
        return 1;
    }
    if (o->csv_path && (chk = cli_check_writable("bench", "--csv", o->csv_path))) return chk;
    return CLI_CONTINUE;
}

/* Loads, walks the frontiers, prints the table (and CSV). 0, or 1 after one
 * error line. */
static int bench_run(const struct bench_opts *o) {
    const struct ms_engine_params *ep = &o->eng.ep;
    const char *text_path = o->text_path, *csv_path = o->csv_path;
    const long ctx_max = o->ctx_max, gen = o->gen;
    ms_err err = {0};
    char *text = NULL;
    size_t text_len = 0;
    int32_t *tokens = NULL;
    struct ms_engine *e = NULL;
    struct ms_session *s = NULL, *s2 = NULL;
    struct ms_kvstore *kv = NULL;
    FILE *csv = NULL;
    int rc = 1;
    struct ms_buf tb = {0};
    if (ms_buf_read_file(&tb, text_path, MS_PROMPT_FILE_MAX, &err)) {
        ms_buf_free(&tb);
        goto fail;
    }
    text = tb.p;
    text_len = tb.len;
    if (ms_engine_load(&e, ep, &err)) goto fail;
    fprintf(stderr, "moestream: %s\n", ms_engine_plan_line(e));
    engine_cli_after_load("bench", &o->eng, e);
    const struct ms_tokenizer *tok = ms_engine_tokenizer(e);
    if (!tok) {
        ms_err_set(&err, "%s has no tokenizer (tokenizer.ggml.* metadata)", ep->model_path);
        goto fail;
    }
    int repeats = 0;
    if (bench_tokens(tok, text, text_len, ctx_max, &tokens, &repeats, &err)) goto fail;
    if (repeats)
        fprintf(stderr, "bench: %s is shorter than %ld tokens; its text is repeated %d more "
                        "time(s)\n", text_path, ctx_max, repeats);
    if (ms_session_new(&s, e, ep->n_ctx, &err)) goto fail;
    if (kv_open_opt(&kv, e, &o->kp, &err)) goto fail;
    if (kv && ms_session_new(&s2, e, ep->n_ctx, &err)) goto fail;
    if (csv_path) {
        csv = fopen(csv_path, "w");
        if (!csv || fprintf(csv, "%s\n", CSV_HEADER) < 0) {
            ms_err_errno(&err, errno, "cannot write %s", csv_path);
            goto fail;
        }
    }
    const struct ms_model_info info = ms_engine_info(e);
    const bool streaming = ms_engine_stream_stats(e).streaming;
    printf("bench: %s, %s, %d threads, text %s\n", ep->model_path,
           streaming ? "streaming" : "resident", ms_engine_n_threads(e), text_path);
    printf("%8s %8s %10s %10s %12s %12s %8s %8s %10s %10s\n", "context", "interval", "pp tok/s",
           "tg tok/s", "pp read MiB", "tg read MiB", "pp hit", "tg hit", "KV MiB", "RSS MiB");
    if (o->warmup) {
        /* The first prefill after the load ran up to 35% slower than
         * the next on a 2-vCPU VM (a few thousand page faults of the
         * matmul's scratch; the rest not pinned down: bench/RESULTS.md);
         * llama-bench times its prompts after a warm-up run too. */
        struct row r;
        if (run_frontier(e, s, tokens, o->frontiers[0], gen > 0 ? 1 : 0, &r, &err)) goto fail;
        ms_session_reset(s);
    }
    for (int i = 0; i < o->n_front; i++) {
        struct row r;
        if (o->fresh) ms_session_reset(s);
        if (run_frontier(e, s, tokens, o->frontiers[i], gen, &r, &err)) goto fail;
        if (kv && kv_round_trip(kv, tok, s, s2, tokens, o->frontiers[i], ms_engine_info(e).n_vocab,
                                &r, &err))
            goto fail;
        print_row(stdout, &r);
        if (kv)
            printf("%8s kv: save %.3f s, restore %.3f s (%.0f MB/s), %llu bytes (%.0f bytes/token)\n",
                   "", r.kv_save_s, r.kv_restore_s,
                   r.kv_restore_s > 0 ? (double)r.kv_file_bytes / r.kv_restore_s / 1e6 : 0.0,
                   (unsigned long long)r.kv_file_bytes,
                   (double)r.kv_file_bytes / (double)o->frontiers[i]);
        if (csv && csv_row(csv, &r, info.routed_bytes, streaming)) {
            ms_err_errno(&err, errno, "cannot write %s", csv_path);
            goto fail;
        }
    }
    if (fflush(stdout) || ferror(stdout)) {
        ms_err_errno(&err, errno ? errno : EIO, "cannot write the output");
        goto fail;
    }
    if (csv) {
        const int cerr = fclose(csv);
        csv = NULL;
        if (cerr) {
            ms_err_errno(&err, errno, "cannot write %s", csv_path);
            goto fail;
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moestream bench: %s\n", err.msg);
done:
    if (csv) fclose(csv);
    free(tokens);
    free(text);
    ms_kv_close(kv);
    ms_session_free(s2);
    ms_session_free(s);
    ms_engine_free(e);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    static struct bench_opts o; /* PATH_MAX buffer and frontier table: not on the stack */
    const int rc = bench_parse(argc, argv, &o);
    return rc == CLI_CONTINUE ? bench_run(&o) : rc;
}
