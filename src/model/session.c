/*
 * session.c - session state, the eval loop over ubatches, and snapshots
 * (see session.h). The layer math is in forward.c.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model/session_impl.h"
#include "model/session_io.h"
#include "util/mem.h"

/* Allocation helper: all buffers are zeroed and 64-byte aligned. They stay
 * on 4 KiB pages: transparent huge pages (ms_alloc_large) for the buffers
 * of 2 MiB or more cut the page faults of a bench run on the Q8_0 bench
 * model (load, session, a 512-token prefill) from 30.4 K to 8.9 K, but
 * every prefill ran 26% slower (362 against 490 tok/s, one thread,
 * Zen 5), as if the scratch's power-of-two strides now met in the same
 * cache sets, which 4 KiB pages' scattered physical frames avoid. */
static void *zalloc(size_t n_elem, size_t elem, bool *ok) {
    size_t bytes;
    if (!ms_mul_size(n_elem ? n_elem : 1, elem, &bytes)) {
        *ok = false;
        return NULL;
    }
    void *p = ms_aligned_alloc(MS_ALIGN, bytes);
    if (!p) *ok = false;
    else memset(p, 0, bytes);
    return p;
}

/* Floats of each attention-state buffer of layer il: the one formula for
 * the KV state. live false: what a session of n positions allocates (the
 * whole ring, one spare compressed row, the frontiers); live true: what n
 * positions occupy (min(n, n_swa) ring rows, the n / r compressed rows and
 * indexer keys they completed). */
struct state_dims {
    size_t raw, comp, idx, front, ifront; /* floats per buffer */
};

static struct state_dims state_dims(const struct dsv4_model *m, uint32_t il, int64_t n,
                                    bool live) {
    const struct dsv4_hparams *hp = &m->hp;
    const uint32_t r = m->layers[il].ratio;
    const size_t d = hp->n_embd_head, dI = hp->indexer_head_size, spare = live ? 0 : 1;
    const size_t ring = live && (uint64_t)n < hp->n_swa ? (size_t)n : hp->n_swa;
    struct state_dims sd = {.raw = ring * d};
    if (r) {
        sd.comp = ((size_t)n / r + spare) * d;
        sd.front = live ? 0 : (size_t)dsv4_comp_slots(r) * dsv4_coff(r) * d;
    }
    if (r == 4) {
        sd.idx = ((size_t)n / 4 + spare) * dI;
        sd.ifront = live ? 0 : (size_t)dsv4_comp_slots(4) * dsv4_coff(4) * dI;
    }
    return sd;
}

static struct state_dims layer_dims(const struct dsv4_session *s, uint32_t il) {
    return state_dims(s->m, il, s->p.n_ctx, false);
}

uint64_t dsv4_kv_bytes(const struct dsv4_model *m, int64_t n, bool live) {
    uint64_t floats = 0;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const struct state_dims sd = state_dims(m, il, n > 0 ? n : 0, live);
        floats += sd.raw + sd.comp + sd.idx + 2 * sd.front + 2 * sd.ifront;
    }
    return floats * sizeof(float);
}

/* Allocates the buffers of a layer's state of dims sd: the ring and the
 * frontiers, and with rows the compressed rows and indexer keys (a
 * capture borrows the session's). */
static void alloc_state(struct dsv4_layer_state *st, const struct state_dims *sd, bool rows,
                        bool *ok) {
    st->raw = zalloc(sd->raw, 4, ok);
    if (sd->front) {
        if (rows) st->comp = zalloc(sd->comp, 4, ok);
        st->fa = zalloc(sd->front, 4, ok);
        st->fb = zalloc(sd->front, 4, ok);
    }
    if (sd->ifront) {
        if (rows) st->idx_keys = zalloc(sd->idx, 4, ok);
        st->ia = zalloc(sd->ifront, 4, ok);
        st->ib = zalloc(sd->ifront, 4, ok);
    }
}

static void free_state(struct dsv4_layer_state *st) {
    ms_free(st->raw);
    ms_free(st->comp);
    ms_free(st->idx_keys);
    ms_free(st->fa);
    ms_free(st->fb);
    ms_free(st->ia);
    ms_free(st->ib);
}

/* The scratch buffers, as one table: lays out a scratch for ubatches of n
 * tokens and spans of ns >= n tokens over n_threads workers at base (NULL:
 * only counts) and returns its bytes. Each buffer starts MS_ALIGN-aligned.
 * comp_cap: compressed rows per layer (ratio 4). */
static size_t scratch_layout(struct dsv4_scratch *sc, char *base, const struct dsv4_model *m,
                             size_t n, size_t ns, size_t nt, size_t cc) {
    const struct dsv4_hparams *hp = &m->hp;
    const size_t D = hp->n_embd, nh = hp->n_hc;
    const size_t d = hp->n_embd_head, H = hp->n_head, rq = hp->q_lora_rank;
    const size_t dI = hp->indexer_head_size, HI = hp->n_indexer_head;
    const size_t HIP = (HI + 15) / 16 * 16; /* indexer heads padded for ms_vec_relu_scores */
    const size_t E = hp->n_expert, k = hp->n_expert_used, F = hp->n_ff_exp;
    const size_t Fs = F * hp->n_expert_shared, G = hp->n_out_group, ro = hp->o_lora_rank;
    size_t Wc = 0, window = 1; /* widest compressor row, longest compressor window */
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const uint32_t r = m->layers[il].ratio;
        if (dsv4_coff(r) * d > Wc) Wc = dsv4_coff(r) * d;
        if ((size_t)dsv4_comp_slots(r) > window) window = (size_t)dsv4_comp_slots(r);
    }
    size_t off = 0;
#define BUF(field, count)                                                                     \
    do {                                                                                      \
        if (base) sc->field = (void *)(base + off);                                           \
        off += ((count) * sizeof *sc->field + MS_ALIGN - 1) / MS_ALIGN * MS_ALIGN;            \
    } while (0)
    /*  buffer           elements */
    BUF(hc_flat,         n * nh * D);
    BUF(hc_mix,          n * (2 + nh) * nh);
    BUF(hc_wpre,         n * nh);
    BUF(hc_wpost,        ns * nh);
    BUF(hc_comb,         ns * nh * nh);
    BUF(sub_in,          ns * D);
    BUF(sub_out,         ns * D);
    BUF(q_lora,          n * rq);
    BUF(q,               n * H * d);
    BUF(kv,              n * d);
    BUF(attn_out,        n * H * d);
    BUF(out_lora,        n * G * ro);
    BUF(comp_kv,         n * Wc);
    BUF(comp_gate,       n * Wc);
    BUF(icomp_kv,        n * 2 * dI);
    BUF(icomp_gate,      n * 2 * dI);
    BUF(idx_q,           n * HI * dI);
    BUF(idx_w,           n * HI);
    BUF(n_comp_seen,     n);
    BUF(comp_window,     2 * window);
    BUF(attn_score,      nt * 4 * (hp->n_swa + cc));
    BUF(attn_rows,       nt * (hp->n_swa + cc));
    BUF(idx_score,       nt * cc);
    BUF(idx_top,         nt * cc);
    BUF(idx_sel,         nt * cc);
    BUF(idx_qT,          nt * dI * HIP);
    BUF(idx_wp,          nt * HIP);
    BUF(router,          n * E);
    BUF(sel,             ns * k);
    BUF(selw,            ns * k);
    BUF(exp_out,         ns * k * D);
    BUF(exp_in,          n * k * D);
    BUF(exp_gate,        n * k * F);
    BUF(exp_up,          n * k * F);
    BUF(row_tok,         ns * k);
    BUF(row_slot,        ns * k);
    BUF(expert_pos,      E);
    BUF(expert_row0,     E + 1);
    BUF(run_order,       2 * E);
    BUF(thread_err,      nt);
    BUF(shexp_gate,      n * Fs);
    BUF(shexp_up,        n * Fs);
    BUF(biased,          E);
    BUF(topidx,          E);
    BUF(used,            E);
    BUF(tail_ids,        DSV4_TAIL_TOKENS * k);
    BUF(views,           E);
#undef BUF
    return off;
}

static void free_scratch(struct dsv4_scratch *sc) {
    ms_free(sc->base);
    memset(sc, 0, sizeof *sc);
}

/* A session lineage no other session or earlier state of this one had:
 * snapshots compare it (see dsv4_session_snapshot). */
static uint64_t new_epoch(void) {
    static atomic_uint_fast64_t next = 1;
    return (uint64_t)atomic_fetch_add(&next, 1);
}

static void drop_captures(struct dsv4_session *s);
static void send_captures(struct dsv4_session *s);
static void draft_free(struct dsv4_draft *d);
static void draft_close(struct dsv4_session *s);
static void copy_floats(float *dst, const float *src, size_t n);
static void copy_window(struct dsv4_layer_state *dst, const struct dsv4_layer_state *src,
                        const struct state_dims *sd);

void dsv4_session_free(struct dsv4_session *s) {
    if (!s) return;
    drop_captures(s);
    if (s->ls)
        for (uint32_t il = 0; il < s->m->n_layer; il++) free_state(&s->ls[il]);
    free(s->ls);
    free_scratch(&s->sc);
    ms_free(s->resid);
    ms_matmul_ctx_free(&s->mm);
    if (s->mm_thread)
        for (int i = 0; i < ms_pool_n_threads(s->p.pool); i++) ms_matmul_ctx_free(&s->mm_thread[i]);
    free(s->mm_thread);
    ms_free(s->tokens);
    ms_free(s->logits);
    ms_free(s->sink_buf);
    draft_free(s->draft);
    free(s);
}

/* Residual-stream floats per token: [n_hc][n_embd]. */
static size_t resid_floats(const struct dsv4_model *m) {
    return (size_t)m->hp.n_hc * m->hp.n_embd;
}

/* (Re)allocates the residual stream for passes of up to n tokens (the old
 * contents are not kept); on OOM the old one is kept and false returned. */
static bool alloc_resid(struct dsv4_session *s, int64_t n) {
    bool ok = true;
    float *r = zalloc((size_t)n * resid_floats(s->m), sizeof(float), &ok);
    if (!ok) return false;
    ms_free(s->resid);
    s->resid = r;
    s->resid_cap = n;
    return true;
}

/* (Re)allocates the scratch for ubatches of up to n_tok tokens and spans
 * of n_span; on OOM the old scratch is kept and false returned. */
static bool alloc_scratch(struct dsv4_session *s, int64_t n_tok, int64_t n_span) {
    const size_t nt = (size_t)ms_pool_n_threads(s->p.pool);
    struct dsv4_scratch nsc = {0};
    const size_t bytes = scratch_layout(&nsc, NULL, s->m, (size_t)n_tok, (size_t)n_span, nt,
                                        (size_t)s->comp_cap);
    bool ok = true;
    char *base = zalloc(bytes, 1, &ok);
    if (!ok) return false;
    scratch_layout(&nsc, base, s->m, (size_t)n_tok, (size_t)n_span, nt, (size_t)s->comp_cap);
    nsc.base = base;
    free_scratch(&s->sc);
    s->sc = nsc;
    s->sc_cap = n_tok;
    s->span_cap = n_span;
    s->span = (struct dsv4_span_rows){.hc_wpost = nsc.hc_wpost, .hc_comb = nsc.hc_comb,
                                      .sub_in = nsc.sub_in, .sub_out = nsc.sub_out,
                                      .selw = nsc.selw, .exp_out = nsc.exp_out, .sel = nsc.sel};
    return true;
}

/* Tokens per pass, per ubatch and per span of a session with these
 * parameters (n_batch: DSV4_BATCH_WHOLE stays). A span is whole ubatches,
 * at most n_ubatch x n_expert_used tokens (so any one expert's rows fit
 * the ubatch's gathered-row buffers), no longer than the longest pass
 * needs; n_ubatch when spans are off. */
static void batch_sizes(const struct dsv4_model *m, const struct dsv4_session_params *p,
                        int64_t *n_batch, int64_t *n_ubatch, int64_t *n_span) {
    int64_t b = p->n_batch ? p->n_batch : DSV4_UBATCH_DEFAULT;
    if (b > p->n_ctx) b = p->n_ctx;
    int64_t u = p->n_ubatch > 0 ? p->n_ubatch : DSV4_UBATCH_DEFAULT;
    if (b > 0 && u > b) u = b;
    if (u > p->n_ctx) u = p->n_ctx;
    const int64_t longest = b > 0 ? b : p->n_ctx; /* tokens of the longest pass */
    int64_t sp = p->n_span / u * u;
    if (sp > (longest + u - 1) / u * u) sp = (longest + u - 1) / u * u;
    if (sp > u * (int64_t)m->hp.n_expert_used) sp = u * (int64_t)m->hp.n_expert_used;
    if (sp < u) sp = u;
    *n_batch = b;
    *n_ubatch = u;
    *n_span = sp;
}

int dsv4_session_new(struct dsv4_session **out, const struct dsv4_model *m,
                     const struct dsv4_session_params *p, ms_err *err) {
    if (p->n_ctx <= 0) return ms_err_set(err, "context size must be positive (got %lld)",
                                         (long long)p->n_ctx);
    if (p->n_batch < 0 && p->n_batch != DSV4_BATCH_WHOLE)
        return ms_err_set(err, "batch size must be positive, 0 or DSV4_BATCH_WHOLE (got %lld)",
                          (long long)p->n_batch);
    if (p->n_ubatch < 0)
        return ms_err_set(err, "ubatch size must be positive or 0 (got %lld)",
                          (long long)p->n_ubatch);
    struct dsv4_session *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, "out of memory");
    s->m = m;
    s->p = *p;
    batch_sizes(m, p, &s->p.n_batch, &s->p.n_ubatch, &s->p.n_span);
    s->mm.pool = p->pool;
    /* pool NULL: each runs on the worker that owns it */
    s->mm_thread = calloc((size_t)ms_pool_n_threads(p->pool), sizeof *s->mm_thread);
    s->comp_cap = s->p.n_ctx / 4 + 1;
    s->epoch = new_epoch();

    bool ok = alloc_scratch(s, s->p.n_ubatch, s->p.n_span);
    /* whole-call sessions start with a ubatch-sized residual and grow it */
    if (ok) ok = alloc_resid(s, s->p.n_batch > 0 ? s->p.n_batch : s->p.n_ubatch);
    const size_t V = m->hp.n_vocab;
    s->tokens = zalloc((size_t)s->p.n_ctx, 4, &ok);
    s->logits = zalloc(V, 4, &ok);
    if (!s->mm_thread) ok = false;
    s->ls = calloc(m->n_layer ? m->n_layer : 1, sizeof *s->ls);
    if (!s->ls) ok = false;
    for (uint32_t il = 0; ok && il < m->n_layer; il++) {
        const struct state_dims sd = layer_dims(s, il);
        alloc_state(&s->ls[il], &sd, true, &ok);
    }
    if (!ok) {
        dsv4_session_free(s);
        return ms_err_set(err, "out of memory allocating a session of %lld positions",
                          (long long)p->n_ctx);
    }
    *out = s;
    return 0;
}

struct dsv4_session_mem dsv4_session_mem(const struct dsv4_model *m,
                                         const struct dsv4_session_params *p) {
    struct dsv4_session_params q = *p;
    if (q.n_ctx <= 0) q.n_ctx = 1;
    int64_t nb, nu, ns;
    batch_sizes(m, &q, &nb, &nu, &ns);
    if (nb < 0) nb = q.n_ctx; /* a whole-call pass may grow to the whole context */
    struct dsv4_scratch sc;
    struct dsv4_session_mem mem = {
        .kv = dsv4_kv_bytes(m, q.n_ctx, false),
        .resid = (uint64_t)nb * resid_floats(m) * sizeof(float),
        .scratch = scratch_layout(&sc, NULL, m, (size_t)nu, (size_t)ns, (size_t)ms_pool_n_threads(q.pool),
                                  (size_t)(q.n_ctx / 4 + 1)),
        .other = ((uint64_t)m->hp.n_vocab + (uint64_t)q.n_ctx) * sizeof(float)};
    mem.total = mem.kv + mem.resid + mem.scratch + mem.other;
    mem.span = ns > nu ? ns : 0;
    return mem;
}

uint64_t dsv4_session_bytes(const struct dsv4_model *m, const struct dsv4_session_params *p) {
    return dsv4_session_mem(m, p).total;
}

void dsv4_session_reset(struct dsv4_session *s) {
    drop_captures(s);
    draft_close(s);
    s->epoch = new_epoch();
    s->n_past = 0;
    s->has_logits = false;
    for (uint32_t il = 0; il < s->m->n_layer; il++) s->ls[il].n_comp = 0;
}

/* dsv4_session_eval without consuming the captures (see there). */
static int eval_passes(struct dsv4_session *s, const int32_t *tokens, int64_t n, float *logits,
                       ms_err *err) {
    const int64_t V = s->m->hp.n_vocab;
    if (n <= 0) return 0;
    if (n > s->p.n_ctx - s->n_past)
        return ms_err_set(err, "context full: %lld positions used, %lld more requested, "
                          "context size %lld", (long long)s->n_past, (long long)n,
                          (long long)s->p.n_ctx);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return ms_err_set(err, "token id %d at index %lld is outside the vocabulary "
                              "[0, %lld)", tokens[i], (long long)i, (long long)V);
    if (s->cap && s->cap[s->n_cap - 1].at > s->n_past + n)
        return ms_err_set(err, "capture position %lld lies past the eval's last token (%lld)",
                          (long long)s->cap[s->n_cap - 1].at, (long long)(s->n_past + n));
    const int64_t step = s->p.n_batch > 0 ? s->p.n_batch : n;
    if (step > s->resid_cap && !alloc_resid(s, step))
        return ms_err_set(err, "out of memory for the residual stream of a %lld-token pass "
                          "(%.2f GiB; a smaller --prefill-chunk needs less)", (long long)step,
                          (double)step * (double)resid_floats(s->m) * 4.0 / 1073741824.0);
    s->progress_total = n * (int64_t)s->m->n_layer;
    for (int64_t off = 0; off < n; off += step) {
        const int64_t nb = n - off < step ? n - off : step;
        s->progress_done = off * (int64_t)s->m->n_layer;
        if (dsv4_forward(s, tokens + off, nb, logits ? logits + off * V : NULL, err)) {
            dsv4_session_reset(s);
            return -1;
        }
        memcpy(s->tokens + s->n_past, tokens + off, (size_t)nb * sizeof(int32_t));
        s->n_past += nb;
        s->has_logits = true;
        send_captures(s);
    }
    return 0;
}

int dsv4_session_eval(struct dsv4_session *s, const int32_t *tokens, int64_t n, float *logits,
                      ms_err *err) {
    draft_close(s); /* all its tokens kept */
    const int rc = eval_passes(s, tokens, n, logits, err);
    drop_captures(s); /* consumed, whatever happened */
    return rc;
}

/* ---- captures ------------------------------------------------------------ */

static void drop_captures(struct dsv4_session *s) {
    for (int i = 0; i < s->n_cap; i++) {
        struct dsv4_capture *c = &s->cap[i];
        for (uint32_t il = 0; c->ls && il < s->m->n_layer; il++) {
            /* comp and idx_keys are the session's */
            c->ls[il].comp = c->ls[il].idx_keys = NULL;
            free_state(&c->ls[il]);
        }
        free(c->ls);
        ms_free(c->logits);
    }
    free(s->cap);
    s->cap = NULL;
    s->n_cap = s->cap_sent = 0;
    s->cap_fn = NULL;
    s->cap_ctx = NULL;
}

/* Hands the captures the passes so far have reached to cap_fn: their
 * tokens are in s->tokens by now, and their compressed rows are below the
 * session's counts. */
static void send_captures(struct dsv4_session *s) {
    for (; s->cap && s->cap_sent < s->n_cap && s->cap[s->cap_sent].at <= s->n_past; s->cap_sent++) {
        const struct dsv4_capture *c = &s->cap[s->cap_sent];
        const struct dsv4_state_view v = {.s = s, .n_past = c->at, .logits = c->logits, .ls = c->ls};
        s->cap_fn(s->cap_ctx, &v);
    }
}

int dsv4_session_capture_at(struct dsv4_session *s, const int64_t *at, int n_at,
                            dsv4_capture_fn fn, void *ctx, ms_err *err) {
    drop_captures(s);
    if (n_at <= 0) return 0;
    if (!fn) return ms_err_set(err, "captures need a function to receive them");
    if (n_at > DSV4_CAPTURE_MAX)
        return ms_err_set(err, "%d capture positions, at most %d", n_at, DSV4_CAPTURE_MAX);
    for (int i = 0; i < n_at; i++)
        if (at[i] <= (i ? at[i - 1] : s->n_past))
            return ms_err_set(err, "capture position %lld is not past %lld", (long long)at[i],
                              (long long)(i ? at[i - 1] : s->n_past));
    s->cap = calloc((size_t)n_at, sizeof *s->cap);
    bool ok = s->cap != NULL;
    for (int i = 0; ok && i < n_at; i++) {
        struct dsv4_capture *c = &s->cap[i];
        s->n_cap = i + 1;
        c->at = at[i];
        c->logits = zalloc(s->m->hp.n_vocab, sizeof(float), &ok);
        c->ls = calloc(s->m->n_layer ? s->m->n_layer : 1, sizeof *c->ls);
        if (!c->ls) ok = false;
        for (uint32_t il = 0; ok && il < s->m->n_layer; il++) {
            const struct state_dims sd = layer_dims(s, il);
            alloc_state(&c->ls[il], &sd, false, &ok);
        }
    }
    if (!ok) {
        drop_captures(s);
        return ms_err_set(err, "out of memory for %d state captures", n_at);
    }
    s->cap_fn = fn;
    s->cap_ctx = ctx;
    return 0;
}

uint64_t dsv4_snapshot_bytes(const struct dsv4_model *m) { return dsv4_capture_bytes(m); }

uint64_t dsv4_capture_bytes(const struct dsv4_model *m) {
    uint64_t floats = m->hp.n_vocab;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const struct state_dims sd = state_dims(m, il, 1, false); /* the ring and frontiers */
        floats += sd.raw + 2 * sd.front + 2 * sd.ifront;
    }
    return floats * sizeof(float);
}

/* The capture armed at position `at` of the eval running now, or NULL. */
static struct dsv4_capture *capture_find(struct dsv4_session *s, int64_t at) {
    for (int i = 0; i < s->n_cap; i++)
        if (s->cap[i].at == at) return &s->cap[i];
    return NULL;
}

int64_t dsv4_capture_next(const struct dsv4_session *s, int64_t p) {
    for (int i = s->cap_sent; i < s->n_cap; i++)
        if (s->cap[i].at > p) return s->cap[i].at;
    return INT64_MAX;
}

void dsv4_capture_layer(struct dsv4_session *s, int64_t at, uint32_t il) {
    struct dsv4_capture *c = capture_find(s, at);
    if (!c) return;
    const struct state_dims sd = layer_dims(s, il);
    const struct dsv4_layer_state *src = &s->ls[il];
    struct dsv4_layer_state *dst = &c->ls[il];
    copy_window(dst, src, &sd);
    dst->comp = src->comp;
    dst->idx_keys = src->idx_keys;
    dst->n_comp = src->n_comp;
}

int dsv4_session_set_logits_sink(struct dsv4_session *s, dsv4_logits_fn fn, void *ctx, int64_t from,
                                 ms_err *err) {
    if (!fn) {
        ms_free(s->sink_buf);
        s->sink_buf = NULL;
        s->sink = NULL;
        s->sink_ctx = NULL;
        return 0;
    }
    if (!s->sink_buf) {
        s->sink_buf = ms_aligned_alloc(64, (size_t)DSV4_SINK_ROWS * s->m->hp.n_vocab * sizeof(float));
        if (!s->sink_buf) return ms_err_set(err, "out of memory for %d rows of logits", DSV4_SINK_ROWS);
    }
    s->sink = fn;
    s->sink_ctx = ctx;
    s->sink_from = from;
    return 0;
}

void dsv4_session_set_progress(struct dsv4_session *s, dsv4_progress_fn fn, void *ctx) {
    s->progress = fn;
    s->progress_ctx = ctx;
}

void dsv4_session_progress(const struct dsv4_session *s, dsv4_progress_fn *fn, void **ctx) {
    *fn = s->progress;
    *ctx = s->progress_ctx;
}

int64_t dsv4_session_n_past(const struct dsv4_session *s) { return s->n_past; }
const float *dsv4_session_logits(const struct dsv4_session *s) {
    return s->has_logits ? s->logits : NULL;
}

/* ---- drafts ---------------------------------------------------------------
 *
 * An open draft keeps, for each of its n positions and each layer, the
 * ring row and frontier slots the position is about to overwrite: draft
 * positions fall on distinct slots (n <= dsv4_session_draft_max), so those
 * rows are exactly the pre-draft state of every slot it touches, and
 * putting back the rows of the dropped positions restores the state after
 * the kept ones. Compressed rows are appended at n_past / r, so a count
 * taken back needs nothing more. */

static void draft_free(struct dsv4_draft *d) {
    if (!d) return;
    free(d->n_comp);
    free(d->off);
    ms_free(d->save);
    free(d);
}

static void draft_close(struct dsv4_session *s) {
    if (s->draft) s->draft->open = false;
}

/* Floats a position's copy takes in layer il: ring row, fa and fb slots,
 * ia and ib slots. */
static size_t draft_row_floats(const struct dsv4_model *m, uint32_t il) {
    const uint32_t r = m->layers[il].ratio;
    const size_t d = m->hp.n_embd_head, dI = m->hp.indexer_head_size;
    return d + (r ? 2 * (size_t)dsv4_coff(r) * d : 0) + (r == 4 ? 2 * (size_t)dsv4_coff(4) * dI : 0);
}

int64_t dsv4_session_draft_max(const struct dsv4_session *s) {
    int64_t mx = DSV4_DRAFT_MAX;
    if ((int64_t)s->m->hp.n_swa < mx) mx = s->m->hp.n_swa;
    for (uint32_t il = 0; il < s->m->n_layer; il++) {
        const uint32_t r = s->m->layers[il].ratio;
        if (r && dsv4_comp_slots(r) < mx) mx = dsv4_comp_slots(r);
    }
    return mx > 0 ? mx : 1;
}

static struct dsv4_draft *draft_alloc(const struct dsv4_session *s) {
    struct dsv4_draft *d = calloc(1, sizeof *d);
    const uint32_t L = s->m->n_layer ? s->m->n_layer : 1;
    if (!d || !(d->n_comp = calloc(L, sizeof *d->n_comp)) || !(d->off = calloc(L, sizeof *d->off))) {
        draft_free(d);
        return NULL;
    }
    size_t total = 0;
    for (uint32_t il = 0; il < s->m->n_layer; il++) {
        d->off[il] = total;
        total += (size_t)dsv4_session_draft_max(s) * draft_row_floats(s->m, il);
    }
    bool ok = true;
    d->save = zalloc(total, sizeof(float), &ok);
    if (!ok) {
        draft_free(d);
        return NULL;
    }
    return d;
}

/* Copies position q's ring row and frontier slots of layer il to (back:
 * from) its place in the draft's save. */
static void draft_copy(struct dsv4_session *s, uint32_t il, int64_t q, bool back) {
    const struct dsv4_model *m = s->m;
    struct dsv4_layer_state *st = &s->ls[il];
    const uint32_t r = m->layers[il].ratio;
    const size_t d = m->hp.n_embd_head, dI = m->hp.indexer_head_size;
    float *save = s->draft->save + s->draft->off[il] + (size_t)(q - s->draft->n0) * draft_row_floats(m, il);
    struct part {
        float *buf;
        size_t width;
        int64_t slots;
    } part[5] = {{st->raw, d, m->hp.n_swa}};
    int np = 1;
    if (r) {
        const size_t Wc = (size_t)dsv4_coff(r) * d;
        part[np++] = (struct part){st->fa, Wc, dsv4_comp_slots(r)};
        part[np++] = (struct part){st->fb, Wc, dsv4_comp_slots(r)};
    }
    if (r == 4) {
        const size_t Wi = (size_t)dsv4_coff(4) * dI;
        part[np++] = (struct part){st->ia, Wi, dsv4_comp_slots(4)};
        part[np++] = (struct part){st->ib, Wi, dsv4_comp_slots(4)};
    }
    for (int i = 0; i < np; i++) {
        float *row = part[i].buf + (size_t)(q % part[i].slots) * part[i].width;
        memcpy(back ? row : save, back ? save : row, part[i].width * sizeof(float));
        save += part[i].width;
    }
}

int dsv4_session_eval_draft(struct dsv4_session *s, const int32_t *tokens, int64_t n,
                            float *logits, ms_err *err) {
    if (n < 1 || n > dsv4_session_draft_max(s))
        return ms_err_set(err, "a draft holds 1 to %lld tokens (got %lld)",
                          (long long)dsv4_session_draft_max(s), (long long)n);
    if (!logits) return ms_err_set(err, "a draft needs its logits array");
    if (s->cap) return ms_err_set(err, "a draft cannot carry state captures");
    if (!s->draft && !(s->draft = draft_alloc(s))) return ms_err_set(err, "out of memory for a draft");
    struct dsv4_draft *d = s->draft;
    d->open = false;
    d->snapped = false;
    d->n0 = s->n_past;
    d->n = n;
    d->logits = logits;
    for (uint32_t il = 0; il < s->m->n_layer; il++) {
        d->n_comp[il] = s->ls[il].n_comp;
        for (int64_t q = d->n0; q < d->n0 + n; q++) draft_copy(s, il, q, false);
    }
    /* on failure nothing is left to take back: a refused eval changed
     * nothing, one that failed midway reset the session */
    if (eval_passes(s, tokens, n, logits, err)) return -1;
    d->open = true;
    return 0;
}

int dsv4_session_draft_keep(struct dsv4_session *s, int64_t k, ms_err *err) {
    struct dsv4_draft *d = s->draft;
    if (!d || !d->open) return ms_err_set(err, "no draft is open");
    if (k < 1 || k > d->n)
        return ms_err_set(err, "a draft of %lld tokens keeps 1 to %lld (got %lld)", (long long)d->n,
                          (long long)d->n, (long long)k);
    d->open = false;
    if (k == d->n) return 0;
    const int64_t kept = d->n0 + k;
    for (uint32_t il = 0; il < s->m->n_layer; il++) {
        const uint32_t r = s->m->layers[il].ratio;
        for (int64_t q = kept; q < d->n0 + d->n; q++) draft_copy(s, il, q, true);
        s->ls[il].n_comp = d->n_comp[il] + (r ? kept / r - d->n0 / r : 0);
    }
    s->n_past = kept;
    copy_floats(s->logits, d->logits + (size_t)(k - 1) * s->m->hp.n_vocab, s->m->hp.n_vocab);
    s->has_logits = true;
    /* a snapshot of a dropped position would look valid once the session
     * is that long again */
    if (d->snapped) s->epoch = new_epoch();
    return 0;
}

/* ---- snapshots ----------------------------------------------------------
 *
 * A snapshot is a capture (the window ring, the frontiers and the logits
 * copied) that also keeps each layer's compressed-row count, tagged with
 * the session's epoch. Restoring it truncates the session back to its
 * length: the rows below its counts and its token ids are the session's
 * own, unchanged while the epoch is. */

struct dsv4_snapshot {
    const struct dsv4_model *m;
    uint32_t n_layer; /* the model's, kept: a snapshot may outlive the model */
    int64_t n_ctx, n_past;
    uint64_t epoch;
    bool has_logits;
    float *logits;
    struct dsv4_layer_state *ls; /* [n_layer]: raw, fa, fb, ia, ib and n_comp */
};

void dsv4_snapshot_free(struct dsv4_snapshot *snap) {
    if (!snap) return;
    if (snap->ls)
        for (uint32_t il = 0; il < snap->n_layer; il++) free_state(&snap->ls[il]);
    free(snap->ls);
    ms_free(snap->logits);
    free(snap);
}

struct dsv4_snapshot *dsv4_session_snapshot(const struct dsv4_session *s) {
    struct dsv4_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) return NULL;
    /* taken inside an open draft: stale if its tokens are taken back */
    if (s->draft && s->draft->open) s->draft->snapped = true;
    bool ok = true;
    snap->m = s->m;
    snap->n_layer = s->m->n_layer;
    snap->n_ctx = s->p.n_ctx;
    snap->n_past = s->n_past;
    snap->epoch = s->epoch;
    snap->has_logits = s->has_logits;
    snap->logits = zalloc(s->m->hp.n_vocab, sizeof(float), &ok);
    copy_floats(snap->logits, s->logits, s->m->hp.n_vocab);
    snap->ls = calloc(s->m->n_layer ? s->m->n_layer : 1, sizeof *snap->ls);
    if (!snap->ls) ok = false;
    for (uint32_t il = 0; ok && il < s->m->n_layer; il++) {
        const struct state_dims sd = layer_dims(s, il);
        alloc_state(&snap->ls[il], &sd, false, &ok);
        copy_window(&snap->ls[il], &s->ls[il], &sd);
        snap->ls[il].n_comp = s->ls[il].n_comp;
    }
    if (!ok) {
        dsv4_snapshot_free(snap);
        return NULL;
    }
    return snap;
}

bool dsv4_snapshot_valid(const struct dsv4_session *s, const struct dsv4_snapshot *snap) {
    /* the same epoch: the session has only appended since (n_past >= the
     * snapshot's follows; checked anyway) */
    return snap && snap->m == s->m && snap->n_ctx == s->p.n_ctx && snap->epoch == s->epoch &&
           snap->n_past <= s->n_past;
}

static void copy_floats(float *dst, const float *src, size_t n) {
    if (dst && src && n) memcpy(dst, src, n * sizeof(float));
}

/* Copies a layer's window ring and frontiers (dims sd). */
static void copy_window(struct dsv4_layer_state *dst, const struct dsv4_layer_state *src,
                        const struct state_dims *sd) {
    copy_floats(dst->raw, src->raw, sd->raw);
    copy_floats(dst->fa, src->fa, sd->front);
    copy_floats(dst->fb, src->fb, sd->front);
    copy_floats(dst->ia, src->ia, sd->ifront);
    copy_floats(dst->ib, src->ib, sd->ifront);
}

int dsv4_session_restore(struct dsv4_session *s, struct dsv4_snapshot *snap, ms_err *err) {
    if (!dsv4_snapshot_valid(s, snap))
        return ms_err_set(err, "snapshot is stale: its session was reset, restored to another "
                          "point or loaded since (or it is another session's)");
    drop_captures(s);
    draft_close(s);
    s->n_past = snap->n_past;
    s->has_logits = snap->has_logits;
    copy_floats(s->logits, snap->logits, s->m->hp.n_vocab);
    for (uint32_t il = 0; il < s->m->n_layer; il++) {
        const struct state_dims sd = layer_dims(s, il);
        copy_window(&s->ls[il], &snap->ls[il], &sd);
        s->ls[il].n_comp = snap->ls[il].n_comp;
    }
    /* the positions past the snapshot will be written again: snapshots
     * taken there are stale from now on, this one is the new lineage's */
    s->epoch = snap->epoch = new_epoch();
    return 0;
}
