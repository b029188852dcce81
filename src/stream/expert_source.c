/*
 * expert_source.c - the streaming expert source (see expert_source.h).
 *
 * Per layer we precompute where each of the three expert tensors starts in
 * the file and how many bytes one expert takes in it (n_ff_exp rows for
 * gate/up, n_embd rows for down, expert-major), and from that the slot
 * layout. An acquire is then: pin, one I/O batch for all misses, views.
 * In whole-layer mode (see expert_source.h) the plan also gives where each
 * tensor lands in a layer buffer, and an acquire is: wait for the layer's
 * read, views into the buffer.
 */
#include "stream/expert_source.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stream/layer_reader.h"
#include "stream/prefetch.h"

#include "util/mem.h"

enum { PART_GATE, PART_UP, PART_DOWN, N_PART };

static const enum dsv4_role part_role[N_PART] = {DSV4_FFN_GATE_EXPS, DSV4_FFN_UP_EXPS,
                                                 DSV4_FFN_DOWN_EXPS};

struct part {
    uint64_t file_base;   /* absolute offset of the tensor's data */
    uint64_t bytes;       /* of one expert: rows * row_stride */
    uint64_t slot_off;    /* where this part's extent starts in the slot */
    uint64_t layer_off;   /* where the whole tensor's extent starts in a layer buffer */
    struct ms_mat mat;    /* one expert's matrix (data filled per acquire) */
};

struct layer_plan {
    struct part p[N_PART];
    uint64_t slot_bytes;
    uint64_t layer_bytes; /* the three tensors' extents */
};

struct ms_stream_source {
    const struct dsv4_model *m;
    struct layer_plan *plan; /* [n_layer] */
    uint64_t max_slot;       /* the largest plan[il].slot_bytes */
    struct ms_expert_cache *cache;
    struct ms_io *io;
    void **bufs;             /* [n_expert] scratch of one acquire */
    bool *miss;              /* [n_expert] */
    struct ms_io_req *reqs;  /* [n_expert * 3] */
    /* whole-layer mode */
    struct ms_layer_reader *lr;
    int64_t whole_min;       /* smallest whole-layer ubatch (INT64_MAX: never) */
    int64_t whole_il;        /* layer served from a layer buffer now, or -1 */
    uint64_t base_budget;    /* the cache's own budget */
    uint64_t headroom;       /* layer buffer bytes the decode cache may use (0: none) */
    uint64_t lr_buf_bytes;   /* bytes of one layer buffer */
    bool lent;               /* the layer buffers are lent to the cache (decode) */
    uint32_t seed_quota;     /* experts seeded per layer */
    /* --full-layers: the first n_full layers held whole, read at creation */
    uint32_t n_full;
    void **full;               /* [n_full] layer buffers (layer_plan layout) */
    /* speculative whole-layer reads: runs of run_experts experts, each run
     * one range per tensor (range index run * N_PART + part) */
    uint32_t run_experts;
    bool drop;               /* withdraw unselected runs once routing is known */
    int64_t pass_n;          /* tokens of the pass (prepare) */
    bool partial[MS_LR_BUFFERS]; /* that buffer's job had ranges withdrawn */
    uint64_t job_pass[MS_LR_BUFFERS]; /* the pass that queued it */
    uint64_t pass_id;        /* counts passes (prepare of layer 0) */
    int64_t counted_il;      /* last layer counted in ctr.layer_reads */
    bool *want;              /* [n_runs * N_PART] scratch */
    uint32_t *ranges;        /* [n_expert * 2 * N_PART] scratch */
    /* decode prefetch (NULL when off) */
    struct ms_prefetch *pf;
    struct ms_io_req *pf_reqs; /* [N_PART] scratch of one submission */
    uint32_t *res_il;          /* [2 * n_expert] slots reserved, not yet ended */
    int32_t *res_e;
    uint32_t *res_tk;          /* their prefetch tickets */
    uint32_t n_res, cap_res;
    bool *fresh;               /* [n_layer * n_expert]: prefetched, not yet acquired */
    int64_t pred_il;           /* layer of the last router guess, or -1 */
    bool *pred;                /* [n_expert]: that guess */
    bool *seen;                /* [n_expert] scratch */
    int32_t *hash_ids;         /* [n_expert] scratch */
    struct ms_stream_counters ctr;
};

/* Fills the plan of layer il; -1 if its expert tensors are missing. */
static int plan_layer(const struct dsv4_model *m, uint32_t il, struct layer_plan *lp,
                      ms_err *err) {
    const int64_t E = m->hp.n_expert;
    uint64_t off = 0;
    for (int k = 0; k < N_PART; k++) {
        const struct dsv4_tensor *t = &m->layers[il].t[part_role[k]];
        char name[96];
        snprintf(name, sizeof name, "blk.%u.%s", il, dsv4_role_suffix(part_role[k]));
        const struct gguf_tensor *gt = gguf_find_tensor(m->gguf, name);
        if (!t->present || !gt || t->ne[2] != E)
            return ms_err_set(err, "expert streaming: tensor %s missing or not [.., .., %lld]",
                              name, (long long)E);
        struct part *p = &lp->p[k];
        p->mat = t->mat;
        p->mat.n_rows = t->ne[1];
        p->mat.data = NULL;
        p->bytes = (uint64_t)t->ne[1] * t->mat.row_stride;
        p->file_base = m->gguf->data_offset + gt->offset;
        if (p->bytes * (uint64_t)E > gt->size)
            return ms_err_set(err, "expert streaming: tensor %s is smaller than its experts",
                              name);
        uint64_t extent = 0;
        for (int64_t e = 0; e < E; e++) {
            const uint64_t x = ms_io_extent(p->file_base + (uint64_t)e * p->bytes, p->bytes);
            if (x > extent) extent = x;
        }
        p->slot_off = off;
        off += extent;
    }
    lp->slot_bytes = off;
    uint64_t loff = 0;
    for (int k = 0; k < N_PART; k++) {
        lp->p[k].layer_off = loff;
        loff += ms_io_extent(lp->p[k].file_base, lp->p[k].bytes * (uint64_t)E);
    }
    lp->layer_bytes = loff;
    return 0;
}

uint64_t ms_stream_slot_bytes(const struct dsv4_model *m, uint32_t il) {
    struct layer_plan lp;
    ms_err e;
    return il < m->n_layer && !plan_layer(m, il, &lp, &e) ? lp.slot_bytes : 0;
}

uint64_t ms_stream_max_slot_bytes(const struct dsv4_model *m) {
    uint64_t best = 0;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const uint64_t b = ms_stream_slot_bytes(m, il);
        if (b > best) best = b;
    }
    return best;
}

uint64_t ms_stream_min_budget(const struct dsv4_model *m) {
    return (uint64_t)m->hp.n_expert_used * ms_stream_max_slot_bytes(m);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- decode prefetch ---------------------------------------------------- */

/* Ends reservation i with the prefetcher's verdict: a filled slot becomes
 * an ordinary resident, anything else is dropped (a miss later, never an
 * error). */
static void end_reservation(struct ms_stream_source *s, uint32_t i, enum ms_pf_state st) {
    const uint32_t il = s->res_il[i];
    const int32_t e = s->res_e[i];
    ms_expert_cache_filled(s->cache, il, e, st == MS_PF_DONE);
    if (st == MS_PF_DONE) {
        s->ctr.prefetched++;
        s->fresh[(uint64_t)il * s->m->hp.n_expert + (uint32_t)e] = true;
    } else if (st == MS_PF_CANCELLED) {
        s->ctr.prefetch_cancelled++;
    } else {
        s->ctr.prefetch_failed++;
    }
    s->n_res--;
    s->res_il[i] = s->res_il[s->n_res];
    s->res_e[i] = s->res_e[s->n_res];
    s->res_tk[i] = s->res_tk[s->n_res];
}

/* True when expert e is among ids[0..n). */
static bool among(const int32_t *ids, int n, int32_t e) {
    for (int i = 0; i < n; i++)
        if (ids[i] == e) return true;
    return false;
}

/* Collects the background reads: reservations of layer il among ids[0..n)
 * are waited for (only those: later or wrong guesses may still be in
 * flight); every other one is ended if its reads have ended. il < 0 waits
 * for all. The waits count as I/O wait of the forward pass. */
static void reap(struct ms_stream_source *s, int64_t il, const int32_t *ids, int n) {
    double waited_total = 0.0;
    for (uint32_t i = 0; i < s->n_res;) {
        const bool need = il < 0 || ((int64_t)s->res_il[i] == il && among(ids, n, s->res_e[i]));
        double waited = 0.0;
        ms_err e = {{0}};
        const enum ms_pf_state st = ms_prefetch_check(s->pf, s->res_tk[i], need, &waited, &e);
        waited_total += waited;
        if (st == MS_PF_PENDING) {
            i++;
            continue;
        }
        end_reservation(s, i, st); /* moves the last one to i */
    }
    ms_expert_cache_note_io(s->cache, ms_prefetch_take_bytes(s->pf), waited_total);
}

/* Reserves slots for the experts ids[0..n) of layer il that are not
 * resident and submits their reads, one ticket per expert. Best effort: no
 * room, a full queue or a bad id just reads less. -1 only on OOM. */
static int start_reads(struct ms_stream_source *s, uint32_t il, const int32_t *ids, int n,
                       ms_err *err) {
    if (s->n_res) reap(s, 0, NULL, 0); /* ends what has ended (il 0, no ids: no wait) */
    const struct layer_plan *lp = &s->plan[il];
    for (int i = 0; i < n && s->n_res < s->cap_res; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->m->hp.n_expert) continue;
        void *buf = NULL;
        const int rc = ms_expert_cache_reserve(s->cache, il, ids[i], &buf, err);
        if (rc < 0) return ms_err_prefix(err, "prefetch of layer %u", il);
        if (!rc) continue;
        for (int k = 0; k < N_PART; k++) {
            const struct part *p = &lp->p[k];
            s->pf_reqs[k] = (struct ms_io_req){
                .offset = p->file_base + (uint64_t)ids[i] * p->bytes,
                .len = (size_t)p->bytes,
                .buf = (char *)buf + p->slot_off};
        }
        uint32_t tk;
        if (ms_prefetch_submit(s->pf, s->pf_reqs, N_PART, &tk)) {
            ms_expert_cache_filled(s->cache, il, ids[i], false);
            break; /* queue full */
        }
        s->res_il[s->n_res] = il;
        s->res_e[s->n_res] = ids[i];
        s->res_tk[s->n_res++] = tk;
    }
    return 0;
}

static int stream_prefetch(void *ctx, uint32_t il, const int32_t *ids, int n, ms_err *err) {
    struct ms_stream_source *s = ctx;
    if (il >= s->m->n_layer || il < s->n_full || n < 0) return 0;
    if (il >= s->m->hp.n_hash_layer) { /* a router guess: remember it to score it */
        memset(s->pred, 0, s->m->hp.n_expert * sizeof *s->pred);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && (uint32_t)ids[i] < s->m->hp.n_expert) s->pred[ids[i]] = true;
        s->pred_il = il;
    }
    return start_reads(s, il, ids, n, err);
}

/* Most experts one acquire may hold: as many of the largest layer's as the
 * budget holds while a prefill runs (at least one token's worth: the budget
 * is never below that). */
static int acquire_fit(const struct ms_stream_source *s) {
    const uint64_t max_slot = s->max_slot ? s->max_slot : 1;
    uint64_t fit = s->base_budget / max_slot;
    if (fit < s->m->hp.n_expert_used) fit = s->m->hp.n_expert_used;
    if (fit > s->m->hp.n_expert) fit = s->m->hp.n_expert;
    return (int)fit;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Selected-only mode, hash layer: its experts are known from the token ids
 * (tid2eid), so their reads start before the layer's attention. When they
 * are more than one acquire holds, only the first group the forward pass
 * will acquire is read now (it acquires in ascending id order, groups of
 * half an acquire when it reads ahead): reading more would fill the cache
 * with later groups' experts that the first group must evict again. */
static int prefetch_hash_layer(struct ms_stream_source *s, uint32_t il, const int32_t *tokens,
                               int64_t n, ms_err *err) {
    const struct dsv4_tensor *t = &s->m->layers[il].t[DSV4_FFN_GATE_TID2EID];
    const int64_t k = s->m->hp.n_expert_used;
    if (!t->i32 || !tokens) return 0;
    memset(s->seen, 0, s->m->hp.n_expert * sizeof *s->seen);
    int n_ids = 0;
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->m->hp.n_vocab) continue;
        for (int64_t j = 0; j < k; j++) {
            const int32_t e = t->i32[(int64_t)tokens[i] * k + j];
            if (e < 0 || (uint32_t)e >= s->m->hp.n_expert || s->seen[e]) continue;
            s->seen[e] = true;
            s->hash_ids[n_ids++] = e;
        }
    }
    const int fit = acquire_fit(s);
    if (n_ids > fit) { /* the forward pass's first group that misses */
        qsort(s->hash_ids, (size_t)n_ids, sizeof *s->hash_ids, cmp_i32);
        int n_miss = 0;
        for (int i = 0; i < n_ids; i++)
            if (!ms_expert_cache_contains(s->cache, il, (uint32_t)s->hash_ids[i]))
                s->hash_ids[n_miss++] = s->hash_ids[i];
        n_ids = n_miss < fit / 2 ? n_miss : fit > 1 ? fit / 2 : fit;
    }
    return start_reads(s, il, s->hash_ids, n_ids, err);
}

/* A long step through the cache (no layer buffers) on a layer routed by
 * its router: before routing, the experts it will select are unknown, but
 * a step with n * n_expert_used >= WHOLE_LAYER_FILL * n_expert selects
 * nearly all of them, so the first group the forward pass will find
 * missing (the lowest ids not held, see stream_order) is read during the
 * layer's attention; routing cancels what it does not select. */
static int prefetch_first_group(struct ms_stream_source *s, uint32_t il, ms_err *err) {
    const int fit = acquire_fit(s), group = fit > 1 ? fit / 2 : fit;
    int n_ids = 0;
    for (uint32_t e = 0; e < s->m->hp.n_expert && n_ids < group; e++)
        if (!ms_expert_cache_contains(s->cache, il, e)) s->hash_ids[n_ids++] = (int32_t)e;
    return start_reads(s, il, s->hash_ids, n_ids, err);
}

/* Layers served from a layer buffer or held whole take any number of
 * experts per acquire (views into memory held anyway); others what the
 * cache holds. */
static int stream_acquire_limit(void *ctx, uint32_t il) {
    const struct ms_stream_source *s = ctx;
    if (il < s->n_full || s->whole_il == (int64_t)il) return 0;
    return acquire_fit(s);
}

/* Acquire order through the cache: the experts it holds first (ascending
 * order kept within both parts), so that a ubatch uses what the previous
 * ubatch of the pass left in the cache before its own misses evict it.
 * Layers served from a layer buffer or held whole keep their order. */
static void stream_order(void *ctx, uint32_t il, int32_t *ids, int n) {
    struct ms_stream_source *s = ctx;
    if (il >= s->m->n_layer || il < s->n_full || s->whole_il == (int64_t)il) return;
    int32_t *tmp = s->hash_ids; /* [n_expert] scratch, free between prepares */
    int n_hit = 0, n_miss = 0;
    for (int i = 0; i < n; i++)
        if (ms_expert_cache_contains(s->cache, il, (uint32_t)ids[i])) ids[n_hit++] = ids[i];
        else tmp[n_miss++] = ids[i];
    memcpy(ids + n_hit, tmp, (size_t)n_miss * sizeof *ids);
}

/* The forward pass's next group of layer il (exact ids): read through the
 * cache in the background unless the layer is served otherwise (a layer
 * buffer, --full-layers). */
static int stream_read_ahead(void *ctx, uint32_t il, const int32_t *ids, int n, ms_err *err) {
    struct ms_stream_source *s = ctx;
    if (il >= s->m->n_layer || il < s->n_full || s->whole_il == (int64_t)il || n <= 0) return 0;
    return start_reads(s, il, ids, n, err);
}

/* ---- whole-layer mode -------------------------------------------------- */

/* Auto switch point: whole layers once n_tokens * n_expert_used >=
 * WHOLE_LAYER_FILL * n_expert (measured: docs/streaming.md, "The switch
 * point, measured"). */
#define WHOLE_LAYER_FILL 3

/* The layer buffer holding (or reading) layer il, or -1. */
static int whole_buffer(const struct ms_stream_source *s, uint32_t il) {
    for (int b = 0; b < MS_LR_BUFFERS; b++)
        if (ms_layer_reader_tag(s->lr, b) == (int64_t)il) return b;
    return -1;
}

/* True when every expert of layer il is in the decode cache already (then
 * the cache serves it and nothing is read). */
static bool layer_cached(const struct ms_stream_source *s, uint32_t il) {
    if (il < s->n_full) return true; /* held whole: nothing to read */
    for (uint32_t e = 0; e < s->m->hp.n_expert; e++)
        if (!ms_expert_cache_contains(s->cache, il, e)) return false;
    return true;
}

/* Runs of experts per layer. */
static uint32_t n_runs(const struct ms_stream_source *s) {
    return (s->m->hp.n_expert + s->run_experts - 1) / s->run_experts;
}

/* The file range of run j of part p: its experts' bytes; the direct read
 * covers their aligned superset, so each run holds whole experts and an
 * expert needs only its own run. Two neighbouring runs may share a
 * boundary block, which both then write with the same file bytes (at most
 * one block per run read twice): cutting runs at aligned boundaries
 * instead made the last expert of a run need the next run too, and a
 * prompt that selects a third of the experts then still needed three
 * quarters of the runs (measured on the 1 GB bench model, 2-expert runs).
 * *buf_off: where the read lands in the layer buffer. */
static void run_range(const struct ms_stream_source *s, const struct part *p, uint32_t j,
                      uint64_t *off, uint64_t *len, uint64_t *buf_off) {
    const uint64_t E = s->m->hp.n_expert, R = s->run_experts;
    const uint64_t base = p->file_base & ~(uint64_t)(MS_IO_ALIGN - 1);
    const uint64_t first = (uint64_t)j * R, end = first + R < E ? first + R : E;
    *off = p->file_base + first * p->bytes;
    *len = (end - first) * p->bytes;
    *buf_off = p->layer_off + ((*off & ~(uint64_t)(MS_IO_ALIGN - 1)) - base);
}

/* The ranges expert e needs: its run's range of each part. Returns how
 * many were written to out. */
static int expert_ranges(const struct ms_stream_source *s, uint32_t il, int32_t e,
                         uint32_t *out) {
    (void)il;
    const uint32_t j = (uint32_t)e / s->run_experts;
    for (int k = 0; k < N_PART; k++) out[k] = j * N_PART + (uint32_t)k;
    return N_PART;
}

/* Starts reading layer il whole, run by run (each run one range per part),
 * into the buffer that does not hold layer `keep` (the one being
 * computed), unless a buffer has it already: all of it, or what this pass
 * wants of it (a buffer whose runs an earlier pass withdrew is read
 * again). */
static int queue_layer(struct ms_stream_source *s, uint32_t il, int64_t keep, ms_err *err) {
    int b = whole_buffer(s, il);
    if (b >= 0 && (!s->partial[b] || s->job_pass[b] == s->pass_id)) return 0;
    if (b < 0) b = ms_layer_reader_tag(s->lr, 0) == keep ? 1 : 0;
    const struct layer_plan *lp = &s->plan[il];
    const uint32_t nr = n_runs(s);
    struct ms_io_req *reads = s->reqs; /* [n_expert * N_PART] >= nr * N_PART */
    for (uint32_t j = 0; j < nr; j++)
        for (int k = 0; k < N_PART; k++) {
            uint64_t off, len, bo;
            run_range(s, &lp->p[k], j, &off, &len, &bo);
            reads[j * N_PART + (uint32_t)k] =
                (struct ms_io_req){.offset = off, .len = (size_t)len, .buf = (void *)(uintptr_t)bo};
        }
    if (ms_layer_reader_start(s->lr, b, il, reads, (size_t)nr * N_PART, err)) return -1;
    s->partial[b] = false;
    s->job_pass[b] = s->pass_id;
    const uint64_t held = ms_layer_reader_buffer_bytes(s->lr);
    if (held > s->ctr.peak_layer_buffer_bytes) s->ctr.peak_layer_buffer_bytes = held;
    return 0;
}

/* Withdraws the runs of layer il (queued or being read in buffer b) that
 * no expert of ids[0..n) (valid ids) lies in. */
static void want_only(struct ms_stream_source *s, int b, uint32_t il, const int32_t *ids, int n) {
    const uint32_t n_ranges = n_runs(s) * N_PART;
    memset(s->want, 0, n_ranges * sizeof *s->want);
    for (int i = 0; i < n; i++) {
        uint32_t r[N_PART];
        const int nr = expert_ranges(s, il, ids[i], r);
        for (int q = 0; q < nr; q++) s->want[r[q]] = true;
    }
    bool all = true;
    for (uint32_t q = 0; q < n_ranges; q++) all = all && s->want[q];
    if (all) return;
    ms_layer_reader_want(s->lr, b, s->want);
    s->partial[b] = true;
}

/* A hash layer's experts follow from the pass's tokens (tid2eid), so a
 * whole-layer read of it needs only their runs from the start. */
static void want_hash_layer(struct ms_stream_source *s, uint32_t il, const int32_t *tokens,
                            int64_t n) {
    const struct dsv4_tensor *t = &s->m->layers[il].t[DSV4_FFN_GATE_TID2EID];
    const int64_t k = s->m->hp.n_expert_used;
    const int b = whole_buffer(s, il);
    if (!s->drop || il >= s->m->hp.n_hash_layer || !t->i32 || !tokens || b < 0) return;
    memset(s->seen, 0, s->m->hp.n_expert * sizeof *s->seen);
    int n_ids = 0;
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->m->hp.n_vocab) return; /* read it all */
        for (int64_t j = 0; j < k; j++) {
            const int32_t e = t->i32[(int64_t)tokens[i] * k + j];
            if (e < 0 || (uint32_t)e >= s->m->hp.n_expert) return;
            if (s->seen[e]) continue;
            s->seen[e] = true;
            s->hash_ids[n_ids++] = e;
        }
    }
    want_only(s, b, il, s->hash_ids, n_ids);
}

/* Adds the bytes the layer reader read since the last call to the
 * counters. */
static void note_layer_bytes(struct ms_stream_source *s) {
    const uint64_t b = ms_layer_reader_take_bytes(s->lr);
    s->ctr.layer_bytes += b;
    ms_expert_cache_note_io(s->cache, b, 0.0);
}

/* Decode starts: the layer buffers' jobs end and their memory serves the
 * decode cache until the next prefill (they stay allocated and faulted in:
 * a prefill never pays the first touch of its buffers again). */
static int lend_buffers(struct ms_stream_source *s, ms_err *err) {
    ms_layer_reader_drop(s->lr);
    s->lent = true; /* from here the cache counts the buffers' bytes */
    for (int b = 0; b < MS_LR_BUFFERS; b++) {
        void *mem = ms_layer_reader_buffer(s->lr, b);
        if (mem && ms_expert_cache_lend(s->cache, mem, s->lr_buf_bytes, err) < 0) {
            ms_err e2 = {{0}};
            (void)ms_expert_cache_reclaim(s->cache, &e2); /* nothing lent is pinned yet */
            s->lent = false;
            return -1;
        }
    }
    return 0;
}

static int stream_prepare(void *ctx, uint32_t il, const int32_t *tokens, int64_t n,
                          ms_err *err) {
    struct ms_stream_source *s = ctx;
    s->whole_il = -1;
    s->pass_n = n;
    if (il == 0) s->pass_id++;
    if (il >= s->m->n_layer) return ms_err_set(err, "expert streaming: layer %u out of range", il);
    if (s->lr) note_layer_bytes(s);
    if (n < s->whole_min) { /* a short step (decode): the headroom goes back */
        if (s->lr && s->headroom && !s->lent && lend_buffers(s, err)) return -1;
        if (s->pf && il < s->m->hp.n_hash_layer && il >= s->n_full)
            return prefetch_hash_layer(s, il, tokens, n, err);
        if (s->pf && il >= s->n_full &&
            n * (int64_t)s->m->hp.n_expert_used >= WHOLE_LAYER_FILL * (int64_t)s->m->hp.n_expert)
            return prefetch_first_group(s, il, err);
        return 0;
    }
    if (s->lr && s->lent) {
        /* a prefill starts: the decode cache gives the layer buffers back
         * before a read is queued into them (prefetches into them end
         * first) */
        if (s->pf && s->n_res) reap(s, -1, NULL, 0);
        if (ms_expert_cache_reclaim(s->cache, err)) return -1;
        s->lent = false;
    }
    if (!layer_cached(s, il)) {
        if (queue_layer(s, il, (int64_t)il - 1, err)) return -1;
        want_hash_layer(s, il, tokens, n);
        s->whole_il = il;
    }
    if (il + 1 < s->m->n_layer && !layer_cached(s, il + 1)) {
        if (queue_layer(s, il + 1, il, err)) return -1;
        want_hash_layer(s, il + 1, tokens, n);
    }
    return 0;
}

/* Waits for what experts ids[0..n) of layer il need from its buffer (the
 * rest of the layer may still be read); counts the layer once and the
 * wait. */
static int whole_wait(struct ms_stream_source *s, uint32_t il, const int32_t *ids, int n,
                      char **data, ms_err *err) {
    const int b = whole_buffer(s, il);
    if (b < 0) return ms_err_set(err, "expert streaming: layer %u was not prepared", il);
    uint32_t n_idx = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->m->hp.n_expert)
            return ms_err_set(err, "layer %u: expert id %d out of range", il, ids[i]);
        n_idx += (uint32_t)expert_ranges(s, il, ids[i], s->ranges + n_idx);
        if (n_idx > s->m->hp.n_expert * N_PART) { /* the scratch holds 2 per part per expert */
            void *mem = NULL;
            double w = 0.0;
            if (ms_layer_reader_wait_ranges(s->lr, b, s->ranges, n_idx, &mem, &w, err))
                return ms_err_prefix(err, "whole-layer read");
            ms_expert_cache_note_io(s->cache, 0, w);
            n_idx = 0;
        }
    }
    double waited = 0.0;
    void *mem = NULL;
    const int rc = ms_layer_reader_wait_ranges(s->lr, b, s->ranges, n_idx, &mem, &waited, err);
    ms_expert_cache_note_io(s->cache, 0, waited);
    note_layer_bytes(s);
    if (rc) {
        s->whole_il = -1;
        return ms_err_prefix(err, "whole-layer read");
    }
    if (s->counted_il != (int64_t)il) {
        s->ctr.layer_reads++;
        s->counted_il = il;
    }
    *data = mem;
    return 0;
}

/* After routing (forward pass's routed hook): wrong prefetch guesses of
 * layer il that have not started are cancelled; when the ubatch is the
 * whole pass, its selection is the layer's, so the runs of a whole-layer
 * read that no selected expert needs are withdrawn (those not started yet
 * are never read). */
static int stream_routed(void *ctx, uint32_t il, const int32_t *ids, int n, int64_t n_tokens,
                         ms_err *err) {
    struct ms_stream_source *s = ctx;
    for (uint32_t i = 0; s->pf && i < s->n_res; i++)
        if (s->res_il[i] == il && !among(ids, n, s->res_e[i]))
            ms_prefetch_cancel(s->pf, s->res_tk[i]);
    if (!s->drop || s->whole_il != (int64_t)il || n_tokens != s->pass_n) return 0;
    const int b = whole_buffer(s, il);
    if (b < 0 || il < s->m->hp.n_hash_layer) return 0; /* hash layers: done at prepare */
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->m->hp.n_expert)
            return ms_err_set(err, "layer %u: expert id %d out of range", il, ids[i]);
    want_only(s, b, il, ids, n);
    return 0;
}

/* Where expert e's part k starts in layer il's buffer. */
static const char *whole_part(const struct ms_stream_source *s, const char *data, uint32_t il,
                              int32_t e, int k) {
    const struct part *p = &s->plan[il].p[k];
    return data + p->layer_off + p->file_base % MS_IO_ALIGN + (uint64_t)e * p->bytes;
}

struct seed_fill {
    const struct ms_stream_source *s;
    const char *data;
    uint32_t il;
    int32_t e;
};

/* Copies one expert from the layer buffer into a slot, in the slot layout. */
static void seed_copy(void *ctx, void *buf) {
    const struct seed_fill *f = ctx;
    for (int k = 0; k < N_PART; k++) {
        const struct part *p = &f->s->plan[f->il].p[k];
        const uint64_t off = p->file_base + (uint64_t)f->e * p->bytes;
        memcpy((char *)buf + p->slot_off + off % MS_IO_ALIGN,
               whole_part(f->s, f->data, f->il, f->e, k), (size_t)p->bytes);
    }
}

static int stream_tail_routed(void *ctx, uint32_t il, const int32_t *ids, int n, ms_err *err) {
    struct ms_stream_source *s = ctx;
    if (s->whole_il != (int64_t)il || !s->seed_quota) return 0;
    const int q = n < (int)s->seed_quota ? n : (int)s->seed_quota;
    char *data;
    if (whole_wait(s, il, ids, q, &data, err)) return -1;
    for (int i = 0; i < q; i++) {
        struct seed_fill f = {.s = s, .data = data, .il = il, .e = ids[i]};
        const int rc = ms_expert_cache_install(s->cache, il, ids[i], seed_copy, &f, err);
        if (rc < 0) return ms_err_prefix(err, "seeding layer %u", il);
        s->ctr.seeded += (uint64_t)rc;
    }
    return 0;
}

/* Views of experts ids[0..n) into data, a whole layer il in the layer
 * buffer layout. */
static int layer_views(const struct ms_stream_source *s, const char *data, uint32_t il,
                       const int32_t *ids, int n, struct dsv4_expert_view *views, ms_err *err) {
    const struct layer_plan *lp = &s->plan[il];
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->m->hp.n_expert)
            return ms_err_set(err, "layer %u: expert id %d out of range", il, ids[i]);
        struct ms_mat *dst[N_PART] = {&views[i].gate, &views[i].up, &views[i].down};
        for (int k = 0; k < N_PART; k++) {
            *dst[k] = lp->p[k].mat;
            dst[k]->data = whole_part(s, data, il, ids[i], k);
        }
    }
    return 0;
}

static int whole_acquire(struct ms_stream_source *s, uint32_t il, const int32_t *ids, int n,
                         struct dsv4_expert_view *views, ms_err *err) {
    char *data;
    if (whole_wait(s, il, ids, n, &data, err)) return -1;
    return layer_views(s, data, il, ids, n, views, err);
}

/* ---- selected experts through the decode cache ------------------------- */

static int stream_acquire(void *ctx, uint32_t il, const int32_t *ids, int n,
                          struct dsv4_expert_view *views, ms_err *err) {
    struct ms_stream_source *s = ctx;
    if (il >= s->m->n_layer) return ms_err_set(err, "expert streaming: layer %u out of range", il);
    if (n < 0 || n > (int)s->m->hp.n_expert)
        return ms_err_set(err, "layer %u: %d experts requested", il, n);
    if (s->pf && s->n_res) reap(s, il, ids, n); /* waits only for what this acquire needs */
    if (il < s->n_full) return layer_views(s, s->full[il], il, ids, n, views, err);
    if (s->whole_il == (int64_t)il) return whole_acquire(s, il, ids, n, views, err);
    if (s->pred_il == (int64_t)il) { /* score the router guess */
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && (uint32_t)ids[i] < s->m->hp.n_expert && s->pred[ids[i]])
                s->ctr.predicted_right++;
        s->ctr.predicted_selected += (uint64_t)n;
        s->pred_il = -1;
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->m->hp.n_expert) continue;
        bool *f = &s->fresh[(uint64_t)il * s->m->hp.n_expert + (uint32_t)ids[i]];
        if (*f) s->ctr.prefetch_used++;
        *f = false;
    }
    if (ms_expert_cache_pin(s->cache, il, ids, n, s->bufs, s->miss, err)) {
        /* slots still loading (other layers' guesses) may hold the room:
         * wait for them all and try once more */
        if (!s->pf || !s->n_res) return -1;
        reap(s, -1, NULL, 0);
        if (ms_expert_cache_pin(s->cache, il, ids, n, s->bufs, s->miss, err)) return -1;
    }
    const struct layer_plan *lp = &s->plan[il];
    size_t n_req = 0;
    for (int i = 0; i < n; i++) {
        if (!s->miss[i]) continue;
        for (int k = 0; k < N_PART; k++) {
            const struct part *p = &lp->p[k];
            s->reqs[n_req++] = (struct ms_io_req){
                .offset = p->file_base + (uint64_t)ids[i] * p->bytes,
                .len = (size_t)p->bytes,
                .buf = (char *)s->bufs[i] + p->slot_off};
        }
    }
    if (n_req) {
        const uint64_t b0 = ms_io_bytes_read(s->io);
        const double t0 = now_s();
        const int rc = ms_io_read(s->io, s->reqs, n_req, err);
        ms_expert_cache_note_io(s->cache, ms_io_bytes_read(s->io) - b0, now_s() - t0);
        if (rc) {
            ms_expert_cache_abort(s->cache, il, ids, n, s->miss);
            return ms_err_prefix(err, "layer %u experts", il);
        }
        ms_expert_cache_loaded(s->cache, il, ids, n, s->miss);
    }
    for (int i = 0; i < n; i++) {
        struct ms_mat *dst[N_PART] = {&views[i].gate, &views[i].up, &views[i].down};
        for (int k = 0; k < N_PART; k++) {
            const struct part *p = &lp->p[k];
            const uint64_t off = p->file_base + (uint64_t)ids[i] * p->bytes;
            *dst[k] = p->mat;
            dst[k]->data = (const char *)s->bufs[i] + p->slot_off + off % MS_IO_ALIGN;
        }
    }
    return 0;
}

static void stream_release(void *ctx, uint32_t il, const int32_t *ids, int n) {
    struct ms_stream_source *s = ctx;
    /* whole-layer views pinned nothing: the buffer lives until the next
     * layer's prepare reuses it */
    if (il < s->m->n_layer && il >= s->n_full && s->whole_il != (int64_t)il)
        ms_expert_cache_unpin(s->cache, il, ids, n);
}

/* ---- layers held whole (--full-layers) --------------------------------- */

/* Reads layers [0, n_full) whole into their own buffers (outside the cache
 * budget: the caller's memory plan counts them, full_layer_bytes). */
static int read_full_layers(struct ms_stream_source *s, ms_err *err) {
    if (!s->n_full) return 0;
    s->full = calloc(s->n_full, sizeof *s->full);
    if (!s->full) return ms_err_set(err, "out of memory");
    for (uint32_t il = 0; il < s->n_full; il++) {
        const struct layer_plan *lp = &s->plan[il];
        char *mem = ms_alloc_large((size_t)lp->layer_bytes);
        if (!mem)
            return ms_err_set(err, "out of memory for layer %u held whole (%llu bytes)", il,
                              (unsigned long long)lp->layer_bytes);
        s->full[il] = mem;
        struct ms_io_req reads[N_PART];
        for (int k = 0; k < N_PART; k++)
            reads[k] = (struct ms_io_req){.offset = lp->p[k].file_base,
                                          .len = (size_t)(lp->p[k].bytes * s->m->hp.n_expert),
                                          .buf = mem + lp->p[k].layer_off};
        const uint64_t b0 = ms_io_bytes_read(s->io);
        const int rc = ms_io_read(s->io, reads, N_PART, err);
        ms_expert_cache_note_io(s->cache, ms_io_bytes_read(s->io) - b0, 0.0);
        if (rc) return ms_err_prefix(err, "reading layer %u whole", il);
    }
    return 0;
}

uint64_t ms_stream_full_layer_bytes(const struct dsv4_model *m, uint32_t n) {
    uint64_t sum = 0;
    for (uint32_t il = 0; il < n && il < m->n_layer; il++) {
        struct layer_plan lp;
        ms_err e;
        if (!plan_layer(m, il, &lp, &e)) sum += lp.layer_bytes;
    }
    return sum;
}

/* ---- preloading from a hotlist ----------------------------------------- */

struct slot_copy {
    const void *src;
    size_t bytes;
};
static void copy_slot(void *ctx, void *buf) {
    const struct slot_copy *c = ctx;
    memcpy(buf, c->src, c->bytes);
}

/*
 * Reads the first n entries of h (highest priority first) into the cache,
 * in batches of PRELOAD_BATCH experts read together, and stops at the first
 * one that no longer fits beside those already resident (a preload never
 * evicts a preloaded expert). The reads count in bytes_read, but neither as
 * misses nor as time the forward pass waited.
 */
#define PRELOAD_BATCH 16
static int preload(struct ms_stream_source *s, const struct ms_hotlist *h, uint32_t n,
                   ms_err *err) {
    if (!n || !h->n) return 0;
    const uint64_t max_slot = s->max_slot;
    char *scratch = ms_aligned_alloc(MS_IO_ALIGN, (size_t)(max_slot * PRELOAD_BATCH));
    if (!scratch) return ms_err_set(err, "out of memory for the expert preload");
    const struct ms_cache_stats *st = ms_expert_cache_stats(s->cache);
    uint64_t planned = st->used_bytes;
    size_t i = 0;
    uint32_t done = 0;
    int rc = 0;
    while (!rc && i < h->n && done < n) {
        const struct ms_hotlist_entry *batch[PRELOAD_BATCH];
        int nb = 0;
        size_t n_req = 0;
        for (; i < h->n && done + (uint32_t)nb < n && nb < PRELOAD_BATCH; i++) {
            const struct ms_hotlist_entry *he = &h->e[i];
            if (he->layer < s->n_full) continue; /* held whole already */
            const struct layer_plan *lp = &s->plan[he->layer];
            if (planned + lp->slot_bytes > st->budget_bytes) {
                i = h->n; /* full */
                break;
            }
            planned += lp->slot_bytes;
            for (int k = 0; k < N_PART; k++)
                s->reqs[n_req++] = (struct ms_io_req){
                    .offset = lp->p[k].file_base + (uint64_t)he->expert * lp->p[k].bytes,
                    .len = (size_t)lp->p[k].bytes,
                    .buf = scratch + (size_t)nb * max_slot + lp->p[k].slot_off};
            batch[nb++] = he;
        }
        if (!nb) break;
        const uint64_t b0 = ms_io_bytes_read(s->io);
        rc = ms_io_read(s->io, s->reqs, n_req, err);
        ms_expert_cache_note_io(s->cache, ms_io_bytes_read(s->io) - b0, 0.0);
        for (int j = 0; j < nb && !rc; j++) {
            struct slot_copy c = {scratch + (size_t)j * max_slot,
                                  (size_t)s->plan[batch[j]->layer].slot_bytes};
            if (ms_expert_cache_install(s->cache, batch[j]->layer, (int32_t)batch[j]->expert,
                                        copy_slot, &c, err) < 0)
                rc = -1;
        }
        done += (uint32_t)nb;
    }
    ms_free(scratch);
    return rc ? ms_err_prefix(err, "preloading experts") : 0;
}

void ms_stream_source_free(struct ms_stream_source *s) {
    if (!s) return;
    ms_prefetch_free(s->pf); /* its reads end before the slots go */
    ms_layer_reader_free(s->lr);
    for (uint32_t il = 0; s->full && il < s->n_full; il++) ms_free(s->full[il]);
    free(s->full);
    ms_expert_cache_free(s->cache);
    ms_io_close(s->io);
    free(s->plan);
    free(s->bufs);
    free(s->miss);
    free(s->reqs);
    free(s->pf_reqs);
    free(s->res_il);
    free(s->res_e);
    free(s->res_tk);
    free(s->fresh);
    free(s->want);
    free(s->ranges);
    free(s->pred);
    free(s->seen);
    free(s->hash_ids);
    free(s);
}

int ms_stream_source_new(struct ms_stream_source **out, const struct dsv4_model *m,
                         const struct ms_stream_params *p, ms_err *err) {
    struct ms_cache_policy pol = p->policy;
    const uint32_t E = m->hp.n_expert;
    struct ms_stream_source *s = calloc(1, sizeof *s);
    uint64_t *slot_bytes = calloc(m->n_layer ? m->n_layer : 1, sizeof *slot_bytes);
    if (s) {
        s->m = m;
        s->whole_il = -1;
        s->plan = calloc(m->n_layer ? m->n_layer : 1, sizeof *s->plan);
        s->bufs = calloc(E ? E : 1, sizeof *s->bufs);
        s->miss = calloc(E ? E : 1, sizeof *s->miss);
        s->reqs = calloc((size_t)(E ? E : 1) * N_PART, sizeof *s->reqs);
        s->pred_il = -1;
        s->cap_res = 2 * (E ? E : 1);
        s->pf_reqs = calloc(N_PART, sizeof *s->pf_reqs);
        s->res_il = calloc(s->cap_res, sizeof *s->res_il);
        s->res_e = calloc(s->cap_res, sizeof *s->res_e);
        s->res_tk = calloc(s->cap_res, sizeof *s->res_tk);
        s->fresh = calloc((size_t)(m->n_layer ? m->n_layer : 1) * (E ? E : 1), sizeof *s->fresh);
        s->want = calloc((size_t)(E ? E : 1) * N_PART, sizeof *s->want);
        s->ranges = calloc((size_t)(E ? E : 1) * 2 * N_PART, sizeof *s->ranges);
        s->counted_il = -1;
        s->drop = !p->no_layer_drop;
        s->pred = calloc(E ? E : 1, sizeof *s->pred);
        s->seen = calloc(E ? E : 1, sizeof *s->seen);
        s->hash_ids = calloc(E ? E : 1, sizeof *s->hash_ids);
    }
    if (!s || !slot_bytes || !s->plan || !s->bufs || !s->miss || !s->reqs || !s->pf_reqs ||
        !s->res_il || !s->res_e || !s->res_tk || !s->fresh || !s->want || !s->ranges || !s->pred ||
        !s->seen || !s->hash_ids) {
        ms_err_set(err, "out of memory");
        goto fail;
    }
    for (uint32_t il = 0; il < m->n_layer; il++) {
        if (plan_layer(m, il, &s->plan[il], err)) goto fail;
        slot_bytes[il] = s->plan[il].slot_bytes;
        if (slot_bytes[il] > s->max_slot) s->max_slot = slot_bytes[il];
    }
    const uint64_t min = ms_stream_min_budget(m);
    const uint64_t budget = p->budget_bytes ? p->budget_bytes : min;
    if (budget < min) {
        ms_err_set(err, "expert cache budget %llu bytes is below the %llu bytes one token's "
                   "experts need (%u experts x the largest layer's slot)",
                   (unsigned long long)budget, (unsigned long long)min, m->hp.n_expert_used);
        goto fail;
    }
    struct ms_expert_cache_params cp = {.n_layer = m->n_layer, .n_expert = E,
                                        .slot_bytes = slot_bytes, .budget_bytes = budget,
                                        .policy = pol};
    pol = (struct ms_cache_policy){0}; /* the cache owns it now, even on error */
    if (ms_expert_cache_new(&s->cache, &cp, err)) goto fail;
    if (ms_io_open(&s->io, m->gguf->path, &p->io, err)) goto fail;
    s->n_full = p->full_layers < m->n_layer ? p->full_layers : m->n_layer;
    if (read_full_layers(s, err)) goto fail;
    if (p->hotlist_path) {
        struct ms_hotlist h;
        if (ms_hotlist_load(&h, p->hotlist_path, m->n_layer, E, err)) goto fail;
        ms_expert_cache_seed(s->cache, &h);
        const int rc = preload(s, &h, p->preload_experts, err);
        ms_hotlist_free(&h);
        if (rc) goto fail;
    }
    uint64_t max_layer = 0;
    for (uint32_t il = 0; il < m->n_layer; il++)
        if (s->plan[il].layer_bytes > max_layer) max_layer = s->plan[il].layer_bytes;
    const uint32_t k = m->hp.n_expert_used ? m->hp.n_expert_used : 1;
    s->whole_min = p->whole_layer_min_tokens > 0    ? p->whole_layer_min_tokens
                   : p->whole_layer_min_tokens < 0 ? INT64_MAX
                                                   : (int64_t)((WHOLE_LAYER_FILL * E + k - 1) / k);
    /* Seeding copies into fresh slot memory on the forward pass's thread:
     * one token's experts per layer (measured: docs/streaming.md, "Decode:
     * the expert cache"). */
    s->seed_quota =
        m->n_layer && s->max_slot ? (uint32_t)(budget / (m->n_layer * s->max_slot)) : 0;
    if (s->seed_quota > m->hp.n_expert_used) s->seed_quota = m->hp.n_expert_used;
    /* runs of whole-layer reads: at least one I/O piece (1 MiB by default)
     * per range, so cutting a layer into runs keeps its reads large */
    {
        const uint64_t piece = p->io.chunk_bytes ? p->io.chunk_bytes : (uint64_t)1 << 20;
        uint64_t min_part = UINT64_MAX;
        for (uint32_t il = 0; il < m->n_layer; il++)
            for (int kk = 0; kk < N_PART; kk++)
                if (s->plan[il].p[kk].bytes && s->plan[il].p[kk].bytes < min_part)
                    min_part = s->plan[il].p[kk].bytes;
        uint64_t r = min_part == UINT64_MAX ? 1 : (piece + min_part - 1) / min_part;
        if (p->layer_run_experts) r = p->layer_run_experts;
        s->run_experts = (uint32_t)(r < 1 ? 1 : r > E ? (E ? E : 1) : r);
    }
    if (s->whole_min != INT64_MAX && max_layer &&
        ms_layer_reader_new(&s->lr, m->gguf->path, &p->io, max_layer, (size_t)n_runs(s) * N_PART,
                            err))
        goto fail;
    if (!p->no_prefetch &&
        ms_prefetch_new(&s->pf, m->gguf->path, &p->io, (size_t)s->cap_res * N_PART, err))
        goto fail;
    /* no prefill yet: the decode cache may use the headroom, i.e. the layer
     * buffers, allocated and faulted in now (load time, not the first
     * prefill's) */
    s->base_budget = budget;
    s->headroom = s->lr ? p->headroom_bytes : 0;
    s->lr_buf_bytes = max_layer;
    if (s->headroom &&
        (ms_layer_reader_alloc(s->lr, true, err) || lend_buffers(s, err)))
        goto fail;
    /* the buffers the first prefill seeds (seed_quota experts per layer),
     * faulted in at load like the layer buffers */
    if (s->lr && s->seed_quota &&
        ms_expert_cache_prefault(s->cache, s->seed_quota * m->n_layer, err) < 0)
        goto fail;
    free(slot_bytes);
    *out = s;
    return 0;
fail:
    if (pol.free) pol.free(pol.ctx);
    free(slot_bytes);
    ms_stream_source_free(s);
    return -1;
}

struct dsv4_expert_source ms_stream_source_iface(struct ms_stream_source *s) {
    return (struct dsv4_expert_source){.ctx = s, .acquire = stream_acquire,
                                       .release = stream_release,
                                       .max_per_acquire = acquire_fit(s),
                                       .acquire_limit = stream_acquire_limit,
                                       .prepare = s->lr || s->pf ? stream_prepare : NULL,
                                       .tail_routed = s->lr ? stream_tail_routed : NULL,
                                       .routed = s->lr || s->pf ? stream_routed : NULL,
                                       .prefetch = s->pf ? stream_prefetch : NULL,
                                       .read_ahead = s->pf ? stream_read_ahead : NULL,
                                       .order = stream_order};
}

struct ms_expert_cache *ms_stream_source_cache(struct ms_stream_source *s) { return s->cache; }
const struct ms_stream_counters *ms_stream_source_counters(struct ms_stream_source *s) {
    if (s->lr) {
        note_layer_bytes(s);
        s->ctr.layer_read_seconds = ms_layer_reader_busy_seconds(s->lr);
    }
    return &s->ctr;
}
uint64_t ms_stream_source_layer_buffer_bytes(const struct ms_stream_source *s) {
    return s->lr && !s->lent ? ms_layer_reader_buffer_bytes(s->lr) : 0;
}
int64_t ms_stream_source_whole_min_tokens(const struct ms_stream_source *s) {
    return s->lr ? s->whole_min : INT64_MAX;
}
struct ms_io *ms_stream_source_layer_io(struct ms_stream_source *s) {
    return s->lr ? ms_layer_reader_io(s->lr) : NULL;
}
struct ms_io *ms_stream_source_io(struct ms_stream_source *s) { return s->io; }
struct ms_io *ms_stream_source_prefetch_io(struct ms_stream_source *s) {
    return s->pf ? ms_prefetch_io(s->pf) : NULL;
}
