/*
 * engine.c - the public API of moestream.h over model/ (loading, sessions).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine_internal.h"
#include "model/session_io.h"
#include "quant/quant.h"
#include "stream/budget.h"
#include "stream/expert_source.h"
#include "stream/hotlist.h"
#include "util/cpus.h"
#include "util/log.h"
#include "util/mapguard.h"
#include "util/pool.h"

struct ms_engine {
    struct dsv4_model *model;
    struct ms_tokenizer *tok;
    struct ms_pool *pool;
    struct ms_stream_source *stream; /* NULL when resident */
    bool quality;
    int64_t n_ctx;
    int64_t n_batch;                 /* session n_batch (DSV4_BATCH_WHOLE or > 0) */
    int64_t n_span;                  /* session n_span */
    uint64_t *route_hits;            /* [n_layer][n_expert] with profile_routing */
    double *route_weight;            /* likewise: summed router weights */
    /* The model file as loaded: evaluation stops with an error once it
     * changes (size, modification time) or a read of its mapping faults
     * (util/mapguard.h), instead of dying of SIGBUS or computing on bytes
     * that are not the model's. */
    struct stat file_st;
    int map_guard;                   /* mapguard slot of the mapping, -1 none */
    bool file_broken;                /* the file changed: every eval fails */
    struct ms_plan plan;
    char plan_line[512];
    bool copy_weights; /* resident: read the file into huge pages (setup_plan) */
};

/* The public marker is the session's. */
_Static_assert(MS_PREFILL_WHOLE == DSV4_BATCH_WHOLE, "one marker for a whole-call pass");

/* The session n_span for a moe_span option (0 = default, -1 = off). */
static int64_t span_of(int64_t moe_span) {
    if (moe_span < 0) return 0;
    return moe_span ? moe_span : DSV4_SPAN_DEFAULT;
}

/* The session n_batch (tokens per layer-major pass) for a prefill chunk
 * option (0 = default by mode) in sessions of n_span: streaming, long
 * passes (each reads the routed weights once); resident, passes as long as
 * a span (a shorter pass would cut the span), else one ubatch. The session
 * takes whole ubatches of a span (dsv4_session_new), and so does the pass:
 * a --moe-span of 1000 is spans of 512, which passes of 1000 would cut. */
static int64_t batch_of(int64_t chunk, bool streaming, int64_t n_span) {
    if (chunk != 0) return chunk;
    if (streaming) return MS_PREFILL_STREAM_DEFAULT;
    const int64_t span = n_span / DSV4_UBATCH_DEFAULT * DSV4_UBATCH_DEFAULT;
    return span > DSV4_UBATCH_DEFAULT ? span : DSV4_UBATCH_DEFAULT;
}

/* Routing observer of profile_routing sessions (dsv4_route_fn). */
static void observe_route(void *ctx, uint32_t il, const int32_t *sel, const float *w, int64_t n,
                          int k) {
    struct ms_engine *e = ctx;
    const uint32_t E = e->model->hp.n_expert;
    for (int64_t i = 0; i < n * k; i++) {
        if (sel[i] < 0 || (uint32_t)sel[i] >= E) continue;
        e->route_hits[(size_t)il * E + (uint32_t)sel[i]]++;
        e->route_weight[(size_t)il * E + (uint32_t)sel[i]] += w[i];
    }
}

#define GiB(x) ((double)(x) / (1024.0 * 1024.0 * 1024.0))

struct ms_engine_params ms_engine_params_default(const char *model_path) {
    return (struct ms_engine_params){.model_path = model_path, .stream = MS_STREAM_AUTO};
}

/* The context of n_ctx = 0 (and the least of MS_CTX_AUTO): MS_CTX_DEFAULT,
 * or the training context when it is shorter. */
static int64_t default_n_ctx(const struct dsv4_model *m) {
    const int64_t train = m->hp.n_ctx_train;
    return train <= 0 || train > MS_CTX_DEFAULT ? MS_CTX_DEFAULT : train;
}

/* ---- the memory plan ----------------------------------------------------- */

/* The memory plan of model m under the options p at context n_ctx with
 * limit bytes of memory, for sessions of n_span (dsv4_session_params):
 * fills in (the plan's inputs), mem (the session's parts) and plan. -1 with
 * err when it does not fit. The sessions are sized for the streaming
 * prefill pass when the mode may stream (the larger one when the chunk is
 * left to the mode). */
static int plan_with(const struct dsv4_model *m, const struct ms_engine_params *p, int64_t n_ctx,
                     int64_t n_span, uint64_t limit, struct ms_mem_plan_in *in,
                     struct dsv4_session_mem *mem, struct ms_mem_plan *plan, ms_err *err) {
    const uint64_t max_slot = ms_stream_max_slot_bytes(m);
    const uint64_t max_layer = max_slot * m->hp.n_expert;
    const bool stream = p->stream != MS_STREAM_OFF;
    const struct dsv4_session_params sp = {
        .n_ctx = n_ctx, .n_batch = batch_of(p->prefill_chunk, stream, n_span), .n_span = n_span};
    *mem = dsv4_session_mem(m, &sp);
    /* the caller's snapshots and a prefill's checkpoint captures (one per
     * stop a prompt of n_ctx tokens can have): each a copy of the window
     * rings, frontiers and logits */
    int64_t n_cap = p->kv_captures ? (p->kv_interval > 0 ? n_ctx / p->kv_interval : 0) + 1 : 0;
    if (n_cap > DSV4_CAPTURE_MAX) n_cap = DSV4_CAPTURE_MAX;
    const uint64_t kept = (uint64_t)p->n_snapshots * dsv4_snapshot_bytes(m) +
                          (uint64_t)n_cap * dsv4_capture_bytes(m) + p->kept_state_bytes;
    mem->kv += kept;
    mem->total += kept;
    *in = (struct ms_mem_plan_in){
        .limit_bytes = limit,
        .pct = p->cache_pct,
        .file_bytes = m->gguf->file_size,
        .routed_bytes = dsv4_model_routed_bytes(m),
        .max_layer_routed = max_layer,
        .session_bytes = mem->total,
        .min_cache_bytes = stream ? ms_stream_min_budget(m) : 0,
        .stream = p->stream,
        .cache_bytes = p->cache_experts ? p->cache_experts * max_slot : p->cache_bytes,
        /* layers held whole are resident, like dense weights */
        .full_bytes = stream ? ms_stream_full_layer_bytes(m, p->full_layers) : 0,
        .no_whole_layer = p->whole_layer_min_tokens < 0};
    return ms_mem_plan(in, plan, err);
}

/* plan_with for the sessions the engine would make: with spans
 * (p->moe_span) when they fit, else without; the session n_span chosen
 * goes to *n_span. A span runs each routed expert once over all of its
 * tokens: streamed through the cache, one read per span instead of one per
 * ubatch; in memory (resident, or in a layer buffer), one matmul over
 * about n_span / n_ubatch times the rows, which packs the 16-token groups
 * of the GEMMs fuller (docs/streaming.md, "Spans"). */
static int plan_at(const struct dsv4_model *m, const struct ms_engine_params *p, int64_t n_ctx,
                   uint64_t limit, struct ms_mem_plan_in *in, struct dsv4_session_mem *mem,
                   struct ms_mem_plan *plan, int64_t *n_span, ms_err *err) {
    *n_span = 0;
    if (plan_with(m, p, n_ctx, 0, limit, in, mem, plan, err)) return -1;
    const int64_t span = span_of(p->moe_span);
    if (!span) return 0;
    struct ms_mem_plan_in in2;
    struct dsv4_session_mem mem2;
    struct ms_mem_plan plan2;
    ms_err e2;
    if (plan_with(m, p, n_ctx, span, limit, &in2, &mem2, &plan2, &e2)) return 0; /* no room */
    *in = in2;
    *mem = mem2;
    *plan = plan2;
    *n_span = span;
    return 0;
}

/* When the plan does not fit: appends to err the knobs that would make it
 * fit and the values that would (the largest -c, the largest prefill
 * chunk, the smallest --cache-pct), found by bisection over the plan. */
static void plan_advice(const struct dsv4_model *m, const struct ms_engine_params *p,
                        int64_t n_ctx, uint64_t limit, ms_err *err) {
    struct ms_mem_plan_in in;
    struct dsv4_session_mem mem;
    struct ms_mem_plan plan;
    int64_t span;
    ms_err e2;
    char advice[256] = "";
    size_t len = 0;
    /* -c: the largest context that fits */
    int64_t lo = 0, hi = n_ctx; /* lo fits (0: none known), hi does not */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (plan_at(m, p, mid, limit, &in, &mem, &plan, &span, &e2)) hi = mid;
        else lo = mid;
    }
    if (lo > 0)
        len += (size_t)snprintf(advice + len, sizeof advice - len, "-c %lld fits", (long long)lo);
    /* the prefill chunk: the largest that fits at this context */
    if (p->stream != MS_STREAM_OFF && len < sizeof advice) {
        struct ms_engine_params q = *p;
        int64_t clo = 0, chi = p->prefill_chunk > 0 ? p->prefill_chunk : n_ctx;
        while (chi - clo > 1) {
            q.prefill_chunk = clo + (chi - clo) / 2;
            if (plan_at(m, &q, n_ctx, limit, &in, &mem, &plan, &span, &e2)) chi = q.prefill_chunk;
            else clo = q.prefill_chunk;
        }
        if (clo > 0)
            len += (size_t)snprintf(advice + len, sizeof advice - len, "%s--prefill-chunk %lld fits",
                                    len ? ", or " : "", (long long)clo);
    }
    /* --cache-pct: the smallest share that fits, if any */
    const double pct = p->cache_pct > 0 && p->cache_pct <= 100 ? p->cache_pct : 80;
    if (pct < 100 && len < sizeof advice) {
        struct ms_engine_params q = *p;
        q.cache_pct = 100;
        if (!plan_at(m, &q, n_ctx, limit, &in, &mem, &plan, &span, &e2)) {
            int plo = (int)pct, phi = 100; /* plo does not fit, phi does */
            while (phi - plo > 1) {
                q.cache_pct = (plo + phi) / 2;
                if (plan_at(m, &q, n_ctx, limit, &in, &mem, &plan, &span, &e2)) plo = (int)q.cache_pct;
                else phi = (int)q.cache_pct;
            }
            len += (size_t)snprintf(advice + len, sizeof advice - len, "%s--cache-pct %d fits",
                                    len ? ", or " : "", phi);
        }
    }
    if (len == 0) snprintf(advice, sizeof advice, "no -c, --prefill-chunk or --cache-pct fits");
    char base[sizeof err->msg];
    snprintf(base, sizeof base, "%s", err->msg);
    ms_err_set(err, "%s (at -c %lld: %s)", base, (long long)n_ctx, advice);
}

/* The range MS_CTX_AUTO (moestream.h) searches: [*lo, *hi]. lo: the
 * default context, or the prompt and one generated token (p->n_prompt);
 * hi: the training context capped at MS_CTX_AUTO_MAX, or the prompt and
 * p->n_gen tokens, those counted up to that cap. */
static void auto_range(const struct dsv4_model *m, const struct ms_engine_params *p, int64_t *lo,
                       int64_t *hi) {
    const int64_t least = default_n_ctx(m);
    int64_t cap = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : least;
    if (cap > MS_CTX_AUTO_MAX) cap = MS_CTX_AUTO_MAX;
    *lo = least;
    *hi = cap;
    if (p->n_prompt > 0) {
        if (p->n_prompt + 1 > *lo) *lo = p->n_prompt + 1;
        *hi = p->n_prompt + (p->n_gen > 0 && p->n_gen < cap ? p->n_gen : cap);
    }
    if (*hi < *lo) *hi = *lo;
}

/* The context of MS_CTX_AUTO under the memory limit: the top of
 * auto_range, halved down to its bottom until the plan fits and keeps
 * what the bottom's plan has: residency (and the weights' private copy),
 * MoE spans, and when streaming the two layer buffers of whole-layer
 * prefill reads and at least half its expert cache (all of a
 * --cache-experts target). A longer context is worth some of the expert
 * cache, not a slower kind of prefill or a cache at its minimum. When
 * even the bottom does not fit, the bottom (whose error the caller then
 * reports). */
static int64_t auto_n_ctx(const struct dsv4_model *m, const struct ms_engine_params *p,
                          uint64_t limit) {
    int64_t lo, hi;
    auto_range(m, p, &lo, &hi);
    struct ms_mem_plan_in in;
    struct dsv4_session_mem mem;
    struct ms_mem_plan base, plan;
    int64_t base_span, span;
    ms_err e2;
    if (plan_at(m, p, lo, limit, &in, &mem, &base, &base_span, &e2)) return lo;
    const bool base_copy = base.resident_need <= base.usable_bytes;
    const uint64_t min_cache =
        p->cache_bytes || p->cache_experts ? base.cache_bytes : base.cache_bytes / 2;
    for (int64_t n = hi; n > lo; n /= 2) {
        if (plan_at(m, p, n, limit, &in, &mem, &plan, &span, &e2)) continue;
        if (plan.stream != base.stream) continue;
        if (!plan.stream && (plan.resident_need <= plan.usable_bytes) != base_copy) continue;
        if ((span > 0) != (base_span > 0)) continue;
        if (plan.stream && ((plan.headroom_bytes > 0) != (base.headroom_bytes > 0) ||
                            plan.cache_bytes < min_cache))
            continue;
        return n;
    }
    return lo;
}

/* p->kept_state_bytes as kept_state_fit asks (moestream.h): at most a
 * tenth of the usable memory, halved while the plan at the least context
 * does not fit (0 below 64 MiB). Kept states save prefills; they must not
 * stop a model from loading that fits without them. */
static uint64_t fit_kept_states(const struct dsv4_model *m, const struct ms_engine_params *p,
                                uint64_t limit) {
    if (!p->kept_state_fit || !p->kept_state_bytes) return p->kept_state_bytes;
    const double pct = p->cache_pct > 0 && p->cache_pct <= 100 ? p->cache_pct : 80;
    struct ms_engine_params q = *p;
    const uint64_t tenth = (uint64_t)((double)limit * pct / 100.0 / 10.0);
    if (q.kept_state_bytes > tenth) q.kept_state_bytes = tenth;
    int64_t lo, hi;
    auto_range(m, p, &lo, &hi);
    if (p->n_ctx > 0) lo = p->n_ctx;
    struct ms_mem_plan_in in;
    struct dsv4_session_mem mem;
    struct ms_mem_plan plan;
    int64_t span;
    ms_err e2;
    while (q.kept_state_bytes >= (64u << 20) &&
           plan_at(m, &q, lo, limit, &in, &mem, &plan, &span, &e2))
        q.kept_state_bytes /= 2;
    return q.kept_state_bytes >= (64u << 20) ? q.kept_state_bytes : 0;
}

/* Decides residency from the memory plan (e->plan, e->plan_line) and, when
 * streaming and open_source, swaps the model's expert source for the SSD
 * expert store. */
static int setup_plan(struct ms_engine *e, const struct ms_engine_params *p, bool open_source,
                      ms_err *err) {
    struct dsv4_model *m = e->model;
    uint64_t limit;
    const char *source;
    if (p->mem_bytes) {
        limit = p->mem_bytes;
        source = "--mem";
    } else if (ms_mem_limit(&limit, &source, "/proc", "/sys/fs/cgroup", err)) {
        return -1;
    }
    struct ms_engine_params fitted = *p;
    fitted.kept_state_bytes = fit_kept_states(m, p, limit);
    p = &fitted;
    e->n_ctx = p->n_ctx > 0 ? p->n_ctx
             : p->n_ctx == MS_CTX_AUTO ? auto_n_ctx(m, p, limit)
                                       : default_n_ctx(m);
    struct ms_mem_plan_in in;
    struct dsv4_session_mem mem;
    struct ms_mem_plan plan;
    if (plan_at(m, p, e->n_ctx, limit, &in, &mem, &plan, &e->n_span, err)) {
        plan_advice(m, p, e->n_ctx, limit, err);
        return -1;
    }
    e->plan = (struct ms_plan){.stream = plan.stream,
                               .limit_bytes = limit,
                               .usable_bytes = plan.usable_bytes,
                               .file_bytes = in.file_bytes,
                               .routed_bytes = in.routed_bytes,
                               .dense_bytes = plan.dense_bytes,
                               .full_layer_bytes = in.full_bytes,
                               .kv_bytes = mem.kv,
                               .resid_bytes = mem.resid,
                               .scratch_bytes = mem.scratch + mem.other,
                               .moe_span = mem.span,
                               .layer_buffer_bytes = plan.headroom_bytes,
                               .cache_bytes = plan.cache_bytes,
                               .n_ctx = e->n_ctx,
                               .kept_state_bytes = p->kept_state_bytes,
                               .n_ctx_auto = e->n_ctx};
    if (p->n_ctx == MS_CTX_AUTO) {
        int64_t lo;
        auto_range(m, p, &lo, &e->plan.n_ctx_auto);
    }
    snprintf(e->plan.limit_source, sizeof e->plan.limit_source, "%s", source);
    if (!plan.stream) {
        /* the private huge-page copy only when it fits beside the sessions
         * (a --no-stream run past the budget computes from the page cache) */
        e->copy_weights = !p->mmap && plan.resident_need <= plan.usable_bytes;
        snprintf(e->plan_line, sizeof e->plan_line,
                 "resident%s: %.2f GiB of weights (%s) + %.2f GiB of sessions (KV %.2f, "
                 "residual %.2f, scratch %.2f), %.2f GiB usable (%s)",
                 p->stream == MS_STREAM_OFF ? " (--no-stream)" : "", GiB(in.file_bytes),
                 e->copy_weights ? "copied to huge pages" : "mapped",
                 GiB(in.session_bytes), GiB(mem.kv), GiB(mem.resid),
                 GiB(mem.scratch + mem.other), GiB(plan.usable_bytes), source);
        return 0;
    }
    const struct ms_stream_params spar = {.budget_bytes = plan.cache_bytes,
                                          .full_layers = p->full_layers,
                                          .hotlist_path = p->hotlist,
                                          .whole_layer_min_tokens =
                                              plan.headroom_bytes ? p->whole_layer_min_tokens : -1,
                                          .preload_experts = p->preload_experts,
                                          .no_prefetch = p->no_prefetch,
                                          .headroom_bytes = plan.headroom_bytes};
    if (open_source) {
        if (ms_stream_source_new(&e->stream, m, &spar, err)) return -1;
        m->experts = ms_stream_source_iface(e->stream);
    }
    /* under --stream the resident plan may well fit: say which it was */
    const bool fits = plan.resident_need <= plan.usable_bytes;
    snprintf(e->plan_line, sizeof e->plan_line,
             "streaming experts: %.2f GiB resident need %s %.2f GiB usable (%s)%s; dense %.2f + "
             "KV %.2f + residual %.2f + scratch %.2f + layer buffers %.2f (%s) "
             "+ expert cache %.2f GiB (%.1f%% of %.2f GiB routed)",
             GiB(plan.resident_need), fits ? "<=" : ">", GiB(plan.usable_bytes), source,
             p->stream == MS_STREAM_ON ? ", --stream" : "", GiB(plan.dense_bytes + in.full_bytes),
             GiB(mem.kv), GiB(mem.resid), GiB(mem.scratch + mem.other),
             GiB(plan.headroom_bytes),
             plan.whole_layer_dropped ? "no room for two layers: prefill reads through the cache"
             : plan.headroom_bytes    ? "decode: expert cache"
                                      : "--whole-layer-min -1",
             GiB(plan.cache_bytes),
             100.0 * (double)plan.cache_bytes / (double)(in.routed_bytes ? in.routed_bytes : 1),
             GiB(in.routed_bytes));
    return 0;
}

int ms_engine_plan(const struct ms_engine_params *p, struct ms_plan *out, char *line,
                   size_t line_len, ms_err *err) {
    struct ms_engine *e = calloc(1, sizeof *e);
    if (!e) return ms_err_set(err, "out of memory");
    e->map_guard = -1;
    int rc = dsv4_model_load(&e->model, p->model_path, err);
    if (!rc) rc = setup_plan(e, p, false, err);
    if (!rc) {
        *out = e->plan;
        if (line) snprintf(line, line_len, "%s", e->plan_line);
    }
    ms_engine_free(e);
    return rc;
}

struct ms_session {
    struct dsv4_session *s;
    struct ms_engine *e;
    int64_t n_ctx;
};

/* Whether the model file is still what was loaded: same size and
 * modification time, and no read of the mapping faulted. Once it is not,
 * the engine stays broken (what was computed from it cannot be trusted). */
static int check_model_file(struct ms_engine *e, ms_err *err) {
    const char *path = e->model->gguf->path;
    struct stat st;
    if (fstat(e->model->gguf->fd, &st) != 0) return ms_err_errno(err, errno, "%s: stat", path);
    if (!e->file_broken)
        e->file_broken = st.st_size != e->file_st.st_size ||
                         st.st_mtim.tv_sec != e->file_st.st_mtim.tv_sec ||
                         st.st_mtim.tv_nsec != e->file_st.st_mtim.tv_nsec ||
                         ms_mapguard_faulted(e->map_guard);
    if (!e->file_broken) return 0;
    return ms_err_set(err, "%s changed on disk while in use (%lld bytes at load, %lld now); "
                      "restart with the new file", path, (long long)e->file_st.st_size,
                      (long long)st.st_size);
}

const struct dsv4_model *ms_engine_model(const struct ms_engine *e) { return e->model; }
struct dsv4_session *ms_session_impl(struct ms_session *s) { return s->s; }
const struct dsv4_session *ms_session_impl_const(const struct ms_session *s) { return s->s; }
struct ms_engine *ms_session_engine(const struct ms_session *s) { return s->e; }

int ms_engine_load(struct ms_engine **out, const struct ms_engine_params *p, ms_err *err) {
    struct ms_engine *e = calloc(1, sizeof *e);
    if (!e) return ms_err_set(err, "out of memory");
    e->map_guard = -1;
    e->quality = p->quality;
    struct ms_cpu_limit cl;
    ms_cpu_limit_read(&cl, "/proc", "/sys/fs/cgroup");
    if (p->n_threads > cl.n) {
        if (cl.quota > 0 && ms_cpu_quota_threads(cl.quota) < cl.affinity)
            ms_log_warn("-t %d exceeds the %.2f CPUs of this process's %s quota: threads will "
                        "take turns on the cores and run slower (-t 0 = %d)",
                        p->n_threads, cl.quota, cl.quota_source, cl.n);
        else
            ms_log_warn("-t %d exceeds the %d CPUs this process may run on (affinity mask of "
                        "%d online): threads will take turns on the cores and run slower "
                        "(-t 0 = %d)",
                        p->n_threads, cl.affinity, cl.online, cl.n);
    }
    if (dsv4_model_load(&e->model, p->model_path, err) ||
        ms_pool_new(&e->pool, p->n_threads > 0 ? p->n_threads : cl.n, err)) {
        ms_engine_free(e);
        return -1;
    }
    if (p->pin_threads && ms_pool_pin(e->pool, err)) {
        ms_engine_free(e);
        return -1;
    }
    e->map_guard = ms_mapguard_add(e->model->map, e->model->map_size);
    if (fstat(e->model->gguf->fd, &e->file_st) != 0) {
        ms_err_errno(err, errno, "%s: stat", p->model_path);
        ms_engine_free(e);
        return -1;
    }
    if (setup_plan(e, p, true, err)) {
        ms_engine_free(e);
        return -1;
    }
    if (!e->stream && dsv4_model_populate(e->model, e->copy_weights, err)) {
        ms_err_prefix(err, "%s", p->model_path);
        ms_engine_free(e);
        return -1;
    }
    if (!e->stream && e->copy_weights && !e->model->huge)
        ms_log_warn("%s: no private copy on huge pages (no memory for it, or transparent huge "
                    "pages off): computing from the file mapping", p->model_path);
    e->n_batch = batch_of(p->prefill_chunk, e->stream != NULL, e->n_span);
    if (p->profile_routing) {
        const size_t n = (size_t)e->model->n_layer * e->model->hp.n_expert;
        e->route_hits = calloc(n ? n : 1, sizeof *e->route_hits);
        e->route_weight = calloc(n ? n : 1, sizeof *e->route_weight);
        if (!e->route_hits || !e->route_weight) {
            ms_engine_free(e);
            return ms_err_set(err, "out of memory");
        }
    }
    if (gguf_find_kv(e->model->gguf, "tokenizer.ggml.model") &&
        ms_tokenizer_load(&e->tok, e->model->gguf, err)) {
        ms_err_prefix(err, "%s: tokenizer", p->model_path);
        ms_engine_free(e);
        return -1;
    }
    /* Every token id must have an embedding and an output row, and every row
     * a token text: ids past the token list would print nothing, ids past
     * the rows would be rejected mid-generation. */
    if (e->tok && ms_tokenizer_n_vocab(e->tok) != e->model->hp.n_vocab) {
        ms_err_set(err, "%s: tokenizer.ggml.tokens has %u entries but the model has %u "
                   "vocabulary rows (token_embd/output)", p->model_path,
                   ms_tokenizer_n_vocab(e->tok), e->model->hp.n_vocab);
        ms_engine_free(e);
        return -1;
    }
    *out = e;
    return 0;
}

void ms_engine_free(struct ms_engine *e) {
    if (!e) return;
    if (e->pool && getenv("MS_POOL_STATS")) { /* profiling aid: thread hand-offs of the run */
        const struct ms_pool_stats ps = ms_pool_stats(e->pool);
        const int nt = ms_pool_n_threads(e->pool);
        const double wall = ps.wall_s > 0.0 ? ps.wall_s : 1.0;
        fprintf(stderr, "pool: %llu jobs handed out (%llu woke sleeping workers), %llu run inline, "
                "%d threads\n", (unsigned long long)ps.jobs, (unsigned long long)ps.wakeups,
                (unsigned long long)ps.inline_jobs, nt);
        fprintf(stderr, "pool: %.3f s from the first job to the last: %.1f%% serial on the caller, "
                "%.1f%% in handed-out jobs (%.1f%% the caller's wait at their ends, %.1f us a job); "
                "workers busy %.1f%% of it\n", ps.wall_s, 100.0 * (ps.wall_s - ps.jobs_s) / wall,
                100.0 * ps.jobs_s / wall, 100.0 * ps.end_wait_s / wall,
                ps.jobs ? 1e6 * ps.jobs_s / (double)ps.jobs : 0.0,
                nt > 1 ? 100.0 * ps.busy_s / (wall * (nt - 1)) : 0.0);
    }
    ms_tokenizer_free(e->tok);
    ms_pool_free(e->pool);
    ms_stream_source_free(e->stream);
    ms_mapguard_remove(e->map_guard);
    dsv4_model_free(e->model);
    free(e->route_hits);
    free(e->route_weight);
    free(e);
}

struct ms_model_info ms_engine_info(const struct ms_engine *e) {
    const struct dsv4_hparams *hp = &e->model->hp;
    return (struct ms_model_info){.n_vocab = hp->n_vocab,
                                  .n_ctx_train = hp->n_ctx_train,
                                  .n_layer = e->model->n_layer,
                                  .n_embd = hp->n_embd,
                                  .n_expert = hp->n_expert,
                                  .n_expert_used = hp->n_expert_used,
                                  .routed_bytes = dsv4_model_routed_bytes(e->model),
                                  .file_bytes = e->model->gguf->file_size};
}

uint64_t ms_engine_kv_bytes(const struct ms_engine *e, int64_t n_pos) {
    return dsv4_kv_bytes(e->model, n_pos, true);
}

int ms_engine_n_threads(const struct ms_engine *e) { return ms_pool_n_threads(e->pool); }
const struct ms_tokenizer *ms_engine_tokenizer(const struct ms_engine *e) { return e->tok; }

int ms_model_tokenizer_load(struct ms_tokenizer **out, const char *path, ms_err *err) {
    struct gguf_file *f;
    *out = NULL;
    if (gguf_open(&f, path, err)) return -1;
    int rc = 0;
    if (!gguf_find_kv(f, "tokenizer.ggml.model")) {
        rc = ms_err_set(err, "%s has no tokenizer (tokenizer.ggml.* metadata)", path);
    } else if (ms_tokenizer_load(out, f, err)) {
        ms_err_prefix(err, "%s: tokenizer", path);
        rc = -1;
    }
    gguf_close(f);
    return rc;
}
const char *ms_engine_plan_line(const struct ms_engine *e) { return e->plan_line; }
const struct ms_plan *ms_engine_plan_info(const struct ms_engine *e) { return &e->plan; }

struct ms_stream_stats ms_engine_stream_stats(const struct ms_engine *e) {
    struct ms_stream_stats st = {.prefill_chunk = e->n_batch};
    if (!e->stream) return st;
    const struct ms_cache_stats *cs = ms_expert_cache_stats(ms_stream_source_cache(e->stream));
    st.streaming = true;
    st.cache_budget_bytes = cs->budget_bytes;
    st.cache_hits = cs->hits;
    st.cache_misses = cs->misses;
    st.bytes_read = cs->bytes_read;
    st.io_wait_seconds = cs->io_wait_seconds;
    st.peak_cache_bytes = cs->peak_resident_bytes;
    const struct ms_stream_counters *c = ms_stream_source_counters(e->stream);
    st.layer_reads = c->layer_reads;
    st.layer_bytes_read = c->layer_bytes;
    st.layer_read_seconds = c->layer_read_seconds;
    st.seeded_experts = c->seeded;
    st.prefetched = c->prefetched;
    st.prefetch_used = c->prefetch_used;
    st.predicted_selected = c->predicted_selected;
    st.predicted_right = c->predicted_right;
    st.peak_layer_buffer_bytes = c->peak_layer_buffer_bytes;
    return st;
}

int ms_hotlist_check(const char *path, ms_err *err) {
    struct ms_hotlist h;
    if (ms_hotlist_load(&h, path, UINT32_MAX, UINT32_MAX, err)) return -1;
    ms_hotlist_free(&h);
    return 0;
}

int ms_engine_write_routing_profile(const struct ms_engine *e, const char *path, ms_err *err) {
    if (!e->route_hits)
        return ms_err_set(err, "routing was not profiled (load the engine with profile_routing)");
    return ms_hotlist_write(path, e->model->n_layer, e->model->hp.n_expert, e->route_hits,
                            e->route_weight, err);
}

int ms_session_new(struct ms_session **out, struct ms_engine *e, int64_t n_ctx, ms_err *err) {
    if (n_ctx <= 0) n_ctx = e->n_ctx;
    struct ms_session *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, "out of memory");
    const struct dsv4_session_params sp = {.n_ctx = n_ctx, .n_batch = e->n_batch,
                                           .n_span = e->n_span,
                                           .quality = e->quality, .pool = e->pool,
                                           .on_route = e->route_hits ? observe_route : NULL,
                                           .route_ctx = e};
    if (dsv4_session_new(&s->s, e->model, &sp, err)) {
        free(s);
        return -1;
    }
    s->n_ctx = n_ctx;
    s->e = e;
    *out = s;
    return 0;
}

void ms_session_free(struct ms_session *s) {
    if (!s) return;
    dsv4_session_free(s->s);
    free(s);
}

int64_t ms_session_n_ctx(const struct ms_session *s) { return s->n_ctx; }

/* An eval's return code rc, or the model file's fault instead: a fault
 * during the pass (its results are garbage), or a failed read of a file
 * that changed meanwhile, is said as such, not as its symptom. */
static int eval_checked(struct ms_session *s, int rc, ms_err *err) {
    if (rc || ms_mapguard_faulted(s->e->map_guard)) {
        ms_err ferr;
        if (check_model_file(s->e, &ferr)) {
            *err = ferr;
            return -1;
        }
    }
    return rc;
}

int ms_session_eval(struct ms_session *s, const int32_t *tokens, int64_t n, float *logits,
                    ms_err *err) {
    if (check_model_file(s->e, err)) return -1;
    return eval_checked(s, dsv4_session_eval(s->s, tokens, n, logits, err), err);
}

int ms_session_eval_draft(struct ms_session *s, const int32_t *tokens, int64_t n, float *logits,
                          ms_err *err) {
    if (check_model_file(s->e, err)) return -1;
    return eval_checked(s, dsv4_session_eval_draft(s->s, tokens, n, logits, err), err);
}

int ms_session_draft_keep(struct ms_session *s, int64_t k, ms_err *err) {
    return dsv4_session_draft_keep(s->s, k, err);
}

int64_t ms_session_draft_max(const struct ms_session *s) { return dsv4_session_draft_max(s->s); }

void ms_session_set_progress(struct ms_session *s, ms_progress_fn fn, void *ctx) {
    dsv4_session_set_progress(s->s, fn, ctx);
}

int ms_session_set_logits_sink(struct ms_session *s, ms_logits_fn fn, void *ctx, int64_t from, ms_err *err) {
    return dsv4_session_set_logits_sink(s->s, fn, ctx, from, err);
}

int64_t ms_session_n_past(const struct ms_session *s) { return dsv4_session_n_past(s->s); }
const float *ms_session_logits(const struct ms_session *s) { return dsv4_session_logits(s->s); }
const int32_t *ms_session_tokens(const struct ms_session *s) { return dsv4_session_token_ids(s->s); }
void ms_session_reset(struct ms_session *s) { dsv4_session_reset(s->s); }

struct ms_snapshot *ms_session_snapshot(const struct ms_session *s) {
    return (struct ms_snapshot *)dsv4_session_snapshot(s->s);
}
bool ms_snapshot_valid(const struct ms_session *s, const struct ms_snapshot *snap) {
    return dsv4_snapshot_valid(s->s, (const struct dsv4_snapshot *)snap);
}
int ms_session_restore(struct ms_session *s, struct ms_snapshot *snap, ms_err *err) {
    return dsv4_session_restore(s->s, (struct dsv4_snapshot *)snap, err);
}
void ms_snapshot_free(struct ms_snapshot *snap) { dsv4_snapshot_free((struct dsv4_snapshot *)snap); }

/* A dsv4_io over a caller's buffer: p advances, left counts down. */
struct mem_io {
    uint8_t *p;
    uint64_t left;
};

static int mem_put(void *ctx, void *buf, size_t n, ms_err *err) {
    struct mem_io *m = ctx;
    if (n > m->left) return ms_err_set(err, "session state: the buffer is too short");
    memcpy(m->p, buf, n);
    m->p += n;
    m->left -= n;
    return 0;
}

static int mem_get(void *ctx, void *buf, size_t n, ms_err *err) {
    struct mem_io *m = ctx;
    if (n > m->left) return ms_err_set(err, "session state: truncated");
    memcpy(buf, m->p, n);
    m->p += n;
    m->left -= n;
    return 0;
}

uint64_t ms_session_state_bytes(const struct ms_session *s) {
    const struct dsv4_state_view v = dsv4_session_view(s->s);
    return v.n_past > 0 ? dsv4_payload_bytes(&v) : 0;
}

int ms_session_state_save(const struct ms_session *s, void *buf, uint64_t len, ms_err *err) {
    const struct dsv4_state_view v = dsv4_session_view(s->s);
    if (v.n_past <= 0) return ms_err_set(err, "session state: the session is empty");
    if (len < dsv4_payload_bytes(&v)) return ms_err_set(err, "session state: the buffer is too short");
    struct mem_io m = {.p = buf, .left = len};
    return dsv4_save_payload(&v, &(struct dsv4_io){.fn = mem_put, .ctx = &m}, err);
}

int ms_session_state_load(struct ms_session *s, const void *buf, uint64_t len, ms_err *err) {
    struct mem_io m = {.p = (uint8_t *)(uintptr_t)buf, .left = len};
    return dsv4_session_load_payload(s->s, &(struct dsv4_io){.fn = mem_get, .ctx = &m}, len, err);
}

const char *ms_kernels_isa(void) {
    if (ms_quant_avx512_split()) return "avx512-split";
    return ms_quant_avx512_vbmi() ? "avx512-vbmi" : ms_quant_isa();
}
