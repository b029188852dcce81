/*
 * forward.c - the DeepSeek V4 forward pass, layer-major over a ubatch
 * (docs/model.md has the formulas and their sources).
 *
 * Read top-down: dsv4_forward runs the layers; layer_forward is one layer,
 *
 *   hc_pre(attn) -> attn_norm -> attention -> hc_post
 *   hc_pre(ffn)  -> ffn_norm  -> moe (routed + shared experts) -> hc_post
 *
 * then attention() and moe() split into one function per job, then the
 * hyper-connection and output-head helpers, and last the thread plumbing
 * (job structs and pool callbacks), kept out of the way of the maths.
 * A session with MoE spans runs a pass longer than a ubatch as spans of
 * ubatches, expert-major (span_forward: attention per ubatch, then each
 * routed expert once over the span's tokens).
 *
 * Every projection runs batched over the ubatch's tokens (kernels/matmul);
 * the steps that write the per-layer attention state (compressor frontiers,
 * compressed rows) run token by token in position order inside the layer,
 * then every token attends to the state its position sees, which is what
 * makes one-shot, chunked and token-by-token evaluation agree. Across the
 * pool: matmuls split by output rows, attention by token (one token: by
 * head), a long ubatch's experts one per thread, and the per-token norms,
 * RoPE and HC mixing by token. Products that read the same input run as
 * one fused pool job (ms_matmul_multi): the attention projections of
 * sub_in, the output groups, the router with the shared expert's gate/up,
 * and a decode step's routed experts (gate/up, then down with the shared
 * expert's down), so a decode layer costs about ten hand-offs, not forty.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/vec.h"
#include "model/session_impl.h"

#define MOE_WEIGHT_FLOOR 6.103515625e-5f /* renormalisation floor of the expert weights */
/* output groups fused into one pool job (DeepSeek V4 Flash has 8) */
#define OUT_GROUPS_PER_JOB 16
/* at most this many routed experts run as one fused pair of jobs */
#define FUSED_EXPERTS_MAX 32

/* ---- declarations of the steps below ------------------------------------ */

static int layer_forward(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
                         ms_err *err);
static int64_t layer_span(const struct dsv4_session *s, int64_t n);
static int span_forward(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t s0,
                        int64_t ns, int64_t n, ms_err *err);
static int ubatch_forward(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t s0,
                          int64_t nu, int64_t n, ms_err *err);
static void at_ubatch(struct dsv4_session *s, int64_t t0, int64_t row);
static int attn_sublayer_ffn_pre(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err);
static int output_head(struct dsv4_session *s, int64_t t0, int64_t n, float *out, ms_err *err);

static int attention(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err);
static int attn_project(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err);
static void attn_update_state(struct dsv4_session *s, uint32_t il, int64_t n);
static void attn_core(struct dsv4_session *s, uint32_t il, int64_t n);
static void attn_store_ring(struct dsv4_session *s, uint32_t il, int64_t n);
static int attn_project_output(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err);

static int moe(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
               ms_err *err);
static int moe_route(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
                     ms_err *err);
static int moe_group_by_expert(struct dsv4_session *s, uint32_t il, int64_t n);
static int moe_routed(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
                      ms_err *err);
static struct ms_mm_op shexp_down_op(const struct dsv4_session *s, uint32_t il, int64_t n);
static int moe_routed_experts(struct dsv4_session *s, uint32_t il, const int32_t *tokens,
                              int64_t n, int n_used, ms_err *err);
static int moe_router_shared_up(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err);
static int run_experts_fused(struct dsv4_session *s, uint32_t il, int g0, int ng, ms_err *err);

static int hc_pre(struct dsv4_session *s, const struct dsv4_tensor *fn, const float *base,
                  const float *scale, const float *norm, int64_t n, ms_err *err);
static void hc_post(struct dsv4_session *s, int64_t n);

/* The dense products, by what they feed (see dense_act) */
enum dense_class {
    DC_ATTN,     /* q_a, kv, q_b: the attention queries and keys */
    DC_ATTN_OUT, /* the grouped output projection (a and b) */
    DC_COMP,     /* the attention compressor's kv and gate */
    DC_IDX,      /* the indexer: its compressor, queries, head weights */
    DC_HC,       /* hyper-connection mixes (sublayers and head) */
    DC_ROUTER,   /* the MoE router logits */
    DC_SHEXP,    /* the shared expert */
    DC_HEAD,     /* the LM head */
};
static int mm(struct dsv4_session *s, enum dense_class dc, const struct dsv4_tensor *w,
              const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy, ms_err *err);
static struct ms_mm_op mm_op(const struct dsv4_session *s, enum dense_class dc,
                             const struct dsv4_tensor *w, const float *x, int64_t ldx, int64_t n,
                             float *y, int64_t ldy);
static struct ms_rope_params rope_params(const struct dsv4_hparams *hp, uint32_t ratio);

/* thread plumbing (bottom of the file) */
typedef void (*tok_fn)(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg);
static void for_tokens(struct dsv4_session *s, int64_t n, tok_fn fn, const void *arg);
static void run_attention(struct dsv4_session *s, const struct dsv4_layer_state *st,
                          uint32_t ratio, const float *sinks, int64_t n);
static int run_experts(struct dsv4_session *s, uint32_t il, int g0, int ng, ms_err *err);

/* per-token steps (for_tokens callbacks) */
static void hc_flat_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg);
static void hc_mix_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg);
static void hc_post_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg);
static void q_lora_norm_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg);
static void qkv_norm_rope_tokens(struct dsv4_session *s, int64_t t0, int64_t t1,
                                 const void *arg);
static void comp_ape_rope_tokens(struct dsv4_session *s, int64_t t0, int64_t t1,
                                 const void *arg);
static void moe_sum_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg);

/* ---- the whole model ---------------------------------------------------- */

int dsv4_forward(struct dsv4_session *s, const int32_t *tokens, int64_t n, float *logits,
                 ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, nh = hp->n_hc, V = hp->n_vocab, w = nh * D;
    const int64_t ub = s->p.n_ubatch;
    const struct dsv4_tensor *emb = &m->glob[DSV4_TOKEN_EMBD];
    const struct ms_type_traits *et = ms_type_traits(emb->mat.type);
    /* residual [n][n_hc][D] for the whole pass: every stream starts as the
     * token's embedding */
    for (int64_t t = 0; t < n; t++) {
        float *X = s->resid + t * w;
        et->to_float((const char *)emb->mat.data + (size_t)tokens[t] * emb->mat.row_stride, X, D);
        for (int64_t k = 1; k < nh; k++) memcpy(X + k * D, X, (size_t)D * sizeof(float));
    }
    for (uint32_t il = 0; il < m->n_layer; il++) {
        /* the expert source decides from the pass's length how to serve the
         * layer and starts its reads (and the next layer's) now, so they
         * overlap this layer's attention */
        if (m->experts.prepare && m->experts.prepare(m->experts.ctx, il, tokens, n, err))
            return ms_err_prefix(err, "layer %u", il);
        /* the layer's ubatches in position order: each attends to the state
         * the earlier ones left, as a chunked evaluation would; in spans of
         * several ubatches when the session has them */
        const int64_t span = layer_span(s, n);
        for (int64_t s0 = 0; s0 < n; s0 += span) {
            const int64_t ns = n - s0 < span ? n - s0 : span;
            const int rc = ns > ub ? span_forward(s, il, tokens, s0, ns, n, err)
                                   : ubatch_forward(s, il, tokens, s0, ns, n, err);
            if (rc) return ms_err_prefix(err, "layer %u", il);
        }
        if (s->progress &&
            !s->progress(s->progress_ctx, s->progress_done + n * (int64_t)(il + 1), s->progress_total))
            return ms_err_set(err, "interrupted");
    }
    /* the captures inside this pass: the next-token logits of the row
     * before each (computed as the last row of a pass ending there is) */
    for (int i = s->cap_sent; i < s->n_cap; i++) {
        struct dsv4_capture *c = &s->cap[i];
        const int64_t row = c->at - 1 - s->n_past;
        if (row < 0 || row >= n) continue;
        s->sc.resid = s->resid + row * w;
        if (output_head(s, 0, 1, c->logits, err)) return -1;
    }
    /* the logits consumer's rows, a buffer's worth at a time */
    for (int64_t u0 = 0; !logits && s->sink && u0 < n; u0 += ub) {
        const int64_t nu = n - u0 < ub ? n - u0 : ub;
        s->sc.resid = s->resid + u0 * w;
        const int64_t pos0 = s->n_past + u0;
        for (int64_t a = s->sink_from > pos0 ? s->sink_from - pos0 : 0; a < nu; a += DSV4_SINK_ROWS) {
            const int64_t b = nu - a < DSV4_SINK_ROWS ? nu : a + DSV4_SINK_ROWS;
            if (output_head(s, a, b, s->sink_buf, err)) return -1;
            if (!s->sink(s->sink_ctx, pos0 + a, b - a, s->sink_buf)) return ms_err_set(err, "interrupted");
        }
    }
    for (int64_t u0 = logits ? 0 : (n - 1) / ub * ub; u0 < n; u0 += ub) {
        const int64_t nu = n - u0 < ub ? n - u0 : ub;
        s->sc.resid = s->resid + u0 * w;
        if (logits) {
            if (output_head(s, 0, nu, logits + u0 * V, err)) return -1;
        } else if (output_head(s, nu - 1, nu, s->logits, err)) {
            return -1;
        }
    }
    if (logits) memcpy(s->logits, logits + (n - 1) * V, (size_t)V * sizeof(float));
    return 0;
}

/* One layer over the ubatch: both sublayers, each between the
 * hyper-connection pre-mix (residual -> sub_in) and post-update
 * (sub_out -> residual). */
static int layer_forward(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
                         ms_err *err) {
    if (attn_sublayer_ffn_pre(s, il, n, err) || moe(s, il, tokens, n, err)) return -1;
    hc_post(s, n);
    return 0;
}

/* Tokens [t, t + n) of the pass cut short at the next capture position
 * (dsv4_session_capture_at) after pass token t, if one lies inside. */
static int64_t until_capture(const struct dsv4_session *s, int64_t t, int64_t n) {
    const int64_t next = dsv4_capture_next(s, s->n_past + t) - s->n_past - t;
    return next < n ? next : n;
}

/* One ubatch [s0, s0 + nu) of a pass of n tokens through layer il. With a
 * capture position inside it, it runs as a span (attention in pieces cut
 * there, each captured after its piece, then the experts once over the
 * whole ubatch, so the expert source still sees the pass's routing in one
 * call); the same rows either way, so the same results bit for bit. */
static int ubatch_forward(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t s0,
                          int64_t nu, int64_t n, ms_err *err) {
    if (until_capture(s, s0, nu) < nu) return span_forward(s, il, tokens, s0, nu, n, err);
    s->pass_tail = s0 + nu == n;
    at_ubatch(s, s0, 0);
    if (layer_forward(s, il, tokens + s0, nu, err)) return -1;
    dsv4_capture_layer(s, s->n_past + s0 + nu, il);
    return 0;
}

/* The attention sublayer with its HC-pre and HC-post, then the FFN's HC-pre
 * (sub_in of the MoE). */
static int attn_sublayer_ffn_pre(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err) {
    const struct dsv4_layer *L = &s->m->layers[il];
    if (hc_pre(s, &L->t[DSV4_HC_ATTN_FN], L->t[DSV4_HC_ATTN_BASE].f32,
               L->t[DSV4_HC_ATTN_SCALE].f32, L->t[DSV4_ATTN_NORM].f32, n, err))
        return -1;
    if (attention(s, il, n, err)) return -1;
    hc_post(s, n);
    return hc_pre(s, &L->t[DSV4_HC_FFN_FN], L->t[DSV4_HC_FFN_BASE].f32,
                  L->t[DSV4_HC_FFN_SCALE].f32, L->t[DSV4_FFN_NORM].f32, n, err);
}

/* Tokens per span in a pass of n: the session's span, when it has one
 * and the pass is longer than a ubatch, else one ubatch. Experts read
 * through a cache smaller than the layer are then read once per span
 * instead of once per ubatch (each ubatch would select most of them
 * again), and every expert's matmuls take all of the span's rows that
 * selected it: at Flash's shape about 48 rows in a 2048-token span against
 * 12 in a ubatch, so fuller 16-token groups in the GEMMs. */
static int64_t layer_span(const struct dsv4_session *s, int64_t n) {
    const int64_t ub = s->p.n_ubatch;
    return s->span_cap > ub && n > ub ? s->span_cap : ub;
}

/* Points the scratch at the ubatch whose first token is token t0 of the
 * pass: its residual rows, its position, and the [span] buffers at row
 * `row` of the span (0 outside spans). */
static void at_ubatch(struct dsv4_session *s, int64_t t0, int64_t row) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t D = hp->n_embd, nh = hp->n_hc, k = hp->n_expert_used;
    const struct dsv4_span_rows *r = &s->span;
    struct dsv4_scratch *sc = &s->sc;
    s->pos0 = s->n_past + t0;
    sc->resid = s->resid + t0 * nh * D;
    sc->hc_wpost = r->hc_wpost + row * nh;
    sc->hc_comb = r->hc_comb + row * nh * nh;
    sc->sub_in = r->sub_in + row * D;
    sc->sub_out = r->sub_out + row * D;
    sc->sel = r->sel + row * k;
    sc->selw = r->selw + row * k;
    sc->exp_out = r->exp_out + row * k * D;
}

/* One layer over the span of tokens [s0, s0 + ns) of the pass (ns >
 * n_ubatch, or one ubatch with a capture inside), expert-major: each
 * ubatch runs attention, the router and the shared expert (sub_in, sel,
 * selw, sub_out and the HC weights stay in the span's rows); then the
 * routed experts run once over the whole span, each acquired once; then
 * each ubatch's FFN HC-post. Every row's arithmetic is layer_forward's, so
 * the results are the same bit for bit. */
static int span_forward(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t s0,
                        int64_t ns, int64_t n, ms_err *err) {
    const int64_t ub = s->p.n_ubatch;
    int rc = 0;
    s->pass_tail = s0 + ns == n;
    /* ubatches cut at capture positions: a layer's attention state is
     * complete for a position once its ubatch's attention ran */
    for (int64_t u0 = 0, nu; u0 < ns && !rc; u0 += nu) {
        nu = until_capture(s, s0 + u0, ns - u0 < ub ? ns - u0 : ub);
        at_ubatch(s, s0 + u0, u0);
        rc = attn_sublayer_ffn_pre(s, il, nu, err) || moe_router_shared_up(s, il, nu, err) ||
             moe_route(s, il, tokens + s0 + u0, nu, err);
        if (!rc) {
            const struct ms_mm_op down = shexp_down_op(s, il, nu);
            rc = ms_matmul_multi(&s->mm, &down, 1, err);
        }
        if (!rc) dsv4_capture_layer(s, s->n_past + s0 + u0 + nu, il);
    }
    at_ubatch(s, s0, 0);
    if (!rc) rc = moe_routed(s, il, tokens + s0, ns, err);
    if (!rc) for_tokens(s, ns, moe_sum_tokens, NULL);
    for (int64_t u0 = 0; u0 < ns && !rc; u0 += ub) {
        at_ubatch(s, s0 + u0, u0);
        hc_post(s, ns - u0 < ub ? ns - u0 : ub);
    }
    at_ubatch(s, s0, 0);
    return rc ? -1 : 0;
}

/* ---- attention sublayer ------------------------------------------------- */

/* sub_in [n][D] -> sub_out [n][D]; reads and extends the layer state. */
static int attention(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err) {
    if (attn_project(s, il, n, err)) return -1;
    attn_update_state(s, il, n);
    attn_core(s, il, n);
    attn_store_ring(s, il, n);
    return attn_project_output(s, il, n, err);
}

/* The projections of sub_in [n][D], as two fused pool jobs (those that read
 * sub_in, then those that read the normalised q_lora):
 * - queries: q_lora = RMSNorm(q_a sub_in) * q_a_norm [n][r_q]; q = q_b
 *   q_lora [n][H][d], per-head RMSNorm, RoPE;
 * - key = value: kv = RMSNorm(kv sub_in) * kv_norm [n][d], RoPE;
 * - compressed layers: the compressor's kv and gate projections
 *   [n][coff*d] (ape added to the gate, row p mod r); ratio 4 also the
 *   indexer's compressor [n][2*d_I], queries [n][H_I][d_I] (from q_lora,
 *   RoPE) and head weights [n][H_I] (scaled by 1/sqrt(d_I*H_I)). */
static int attn_project(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const struct dsv4_layer *L = &s->m->layers[il];
    struct dsv4_scratch *sc = &s->sc;
    const uint32_t r = L->ratio;
    const int64_t D = hp->n_embd, d = hp->n_embd_head, H = hp->n_head, rq = hp->q_lora_rank;
    const int64_t dI = hp->indexer_head_size, HI = hp->n_indexer_head;
    const int64_t Wc = dsv4_coff(r) * d, Wi = dsv4_coff(4) * dI;
    struct ms_mm_op ops[7];
    int n_ops = 0;
    ops[n_ops++] = mm_op(s, DC_ATTN, &L->t[DSV4_ATTN_Q_A], sc->sub_in, D, n, sc->q_lora, rq);
    ops[n_ops++] = mm_op(s, DC_ATTN, &L->t[DSV4_ATTN_KV], sc->sub_in, D, n, sc->kv, d);
    if (r) {
        ops[n_ops++] = mm_op(s, DC_COMP, &L->t[DSV4_ATTN_COMP_KV], sc->sub_in, D, n, sc->comp_kv, Wc);
        ops[n_ops++] = mm_op(s, DC_COMP, &L->t[DSV4_ATTN_COMP_GATE], sc->sub_in, D, n, sc->comp_gate, Wc);
    }
    if (r == 4) {
        ops[n_ops++] = mm_op(s, DC_IDX, &L->t[DSV4_IDX_COMP_KV], sc->sub_in, D, n, sc->icomp_kv, Wi);
        ops[n_ops++] = mm_op(s, DC_IDX, &L->t[DSV4_IDX_COMP_GATE], sc->sub_in, D, n, sc->icomp_gate, Wi);
        ops[n_ops++] = mm_op(s, DC_IDX, &L->t[DSV4_IDX_PROJ], sc->sub_in, D, n, sc->idx_w, HI);
    }
    if (ms_matmul_multi(&s->mm, ops, n_ops, err)) return -1;
    for_tokens(s, n, q_lora_norm_tokens, L);
    n_ops = 0;
    ops[n_ops++] = mm_op(s, DC_ATTN, &L->t[DSV4_ATTN_Q_B], sc->q_lora, rq, n, sc->q, H * d);
    if (r == 4)
        ops[n_ops++] = mm_op(s, DC_IDX, &L->t[DSV4_IDX_ATTN_Q_B], sc->q_lora, rq, n, sc->idx_q, HI * dI);
    if (ms_matmul_multi(&s->mm, ops, n_ops, err)) return -1;
    for_tokens(s, n, qkv_norm_rope_tokens, L);
    if (r) for_tokens(s, n, comp_ape_rope_tokens, L);
    return 0;
}

/* Emits compressed row m of a compressor with output width dc from its
 * frontier (slot = position % (coff*r)), then RMSNorm with `norm` and tail
 * RoPE at the block's first position r*m. p is the position that completes
 * block m. window: [2][coff*r] scratch. */
static void compressor_emit(const float *fa, const float *fb, int64_t dc, uint32_t r, int64_t p,
                            const float *norm, float eps, const struct ms_rope_params *rp,
                            float *window, float *row) {
    const int64_t S = dsv4_comp_slots(r), W = dsv4_coff(r) * dc; /* slots, row width */
    const int64_t m = (p + 1) / r - 1;
    float *score = window, *value = window + S;
    for (int64_t c = 0; c < dc; c++) {
        int nc = 0;
        if (r == 4) {
            /* previous window: first halves; current window: second halves */
            for (int64_t q = p + 1 - S; q <= p; q++) {
                if (q < 0) continue;
                const int64_t slot = q % S, off = q <= p - r ? 0 : dc;
                score[nc] = fb[slot * W + off + c];
                value[nc++] = fa[slot * W + off + c];
            }
        } else {
            for (int64_t q = p + 1 - r; q <= p; q++) {
                const int64_t slot = q % S;
                score[nc] = fb[slot * W + c];
                value[nc++] = fa[slot * W + c];
            }
        }
        float mx = -INFINITY;
        for (int j = 0; j < nc; j++) mx = fmaxf(mx, score[j]);
        float den = 0.0f, num = 0.0f;
        for (int j = 0; j < nc; j++) {
            const float e = expf(score[j] - mx);
            den += e;
            num += e * value[j];
        }
        row[c] = num / den;
    }
    ms_rmsnorm(row, row, norm, dc, eps);
    ms_rope_tail(row, dc, (int64_t)r * m, rp, false);
}

/* State first, in position order: the compressor frontiers take each
 * token's projections, and the compressed rows the ubatch completes are
 * emitted; token t will see n_comp_seen[t] of them. */
static void attn_update_state(struct dsv4_session *s, uint32_t il, int64_t n) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const struct dsv4_layer *L = &s->m->layers[il];
    struct dsv4_layer_state *st = &s->ls[il];
    struct dsv4_scratch *sc = &s->sc;
    const uint32_t r = L->ratio;
    const int64_t d = hp->n_embd_head, dI = hp->indexer_head_size;
    const int64_t Wc = dsv4_coff(r) * d, Wi = dsv4_coff(4) * dI, S = dsv4_comp_slots(r);
    const struct ms_rope_params rpc = rope_params(hp, r ? r : 4); /* compressed rows */
    for (int64_t t = 0; t < n; t++) {
        const int64_t p = s->pos0 + t;
        if (r) {
            memcpy(st->fa + (p % S) * Wc, sc->comp_kv + t * Wc, (size_t)Wc * sizeof(float));
            memcpy(st->fb + (p % S) * Wc, sc->comp_gate + t * Wc, (size_t)Wc * sizeof(float));
            if (r == 4) {
                memcpy(st->ia + (p % S) * Wi, sc->icomp_kv + t * Wi, (size_t)Wi * sizeof(float));
                memcpy(st->ib + (p % S) * Wi, sc->icomp_gate + t * Wi,
                       (size_t)Wi * sizeof(float));
            }
            if ((p + 1) % r == 0) {
                compressor_emit(st->fa, st->fb, d, r, p, L->t[DSV4_ATTN_COMP_NORM].f32,
                                hp->rms_eps, &rpc, sc->comp_window, st->comp + st->n_comp * d);
                if (r == 4)
                    compressor_emit(st->ia, st->ib, dI, r, p, L->t[DSV4_IDX_COMP_NORM].f32,
                                    hp->rms_eps, &rpc, sc->comp_window,
                                    st->idx_keys + st->n_comp * dI);
                st->n_comp++;
            }
        }
        sc->n_comp_seen[t] = r ? st->n_comp : 0;
    }
}

/* q [n][H][d] over the layer state -> attn_out [n][H][d]: sink softmax
 * attention over the sliding window and the visible compressed rows (the
 * indexer's choice on ratio-4 layers), inverse RoPE at the query position. */
static void attn_core(struct dsv4_session *s, uint32_t il, int64_t n) {
    const struct dsv4_layer *L = &s->m->layers[il];
    run_attention(s, &s->ls[il], L->ratio, L->t[DSV4_ATTN_SINKS].f32, n);
}

/* The ring keeps the last n_swa positions' kv rows. Written only after
 * every token has attended, so none of the ubatch overwrote a key an
 * earlier token of it still needed. */
static void attn_store_ring(struct dsv4_session *s, uint32_t il, int64_t n) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t d = hp->n_embd_head, n_swa = hp->n_swa;
    struct dsv4_layer_state *st = &s->ls[il];
    for (int64_t t = n > n_swa ? n - n_swa : 0; t < n; t++)
        memcpy(st->raw + ((s->pos0 + t) % n_swa) * d, s->sc.kv + t * d,
               (size_t)d * sizeof(float));
}

/* Grouped output projection: out_lora_g = Wa_g attn_out_g [n][G][r_o],
 * then sub_out = Wb out_lora [n][D]. */
static int attn_project_output(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const struct dsv4_layer *L = &s->m->layers[il];
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, d = hp->n_embd_head, H = hp->n_head;
    const int64_t G = hp->n_out_group, ro = hp->o_lora_rank, gw = H * d / G;
    /* the G group products in one pool job */
    struct dsv4_tensor wa[OUT_GROUPS_PER_JOB];
    struct ms_mm_op ops[OUT_GROUPS_PER_JOB];
    for (int64_t g0 = 0; g0 < G; g0 += OUT_GROUPS_PER_JOB) {
        const int ng = (int)(G - g0 < OUT_GROUPS_PER_JOB ? G - g0 : OUT_GROUPS_PER_JOB);
        for (int i = 0; i < ng; i++) {
            const int64_t g = g0 + i;
            wa[i] = L->t[DSV4_ATTN_OUTPUT_A];
            wa[i].mat.data = (const char *)wa[i].mat.data + (size_t)(g * ro) * wa[i].mat.row_stride;
            wa[i].mat.n_rows = ro;
            ops[i] = mm_op(s, DC_ATTN_OUT, &wa[i], sc->attn_out + g * gw, H * d, n, sc->out_lora + g * ro, G * ro);
        }
        if (ms_matmul_multi(&s->mm, ops, ng, err)) return -1;
    }
    return mm(s, DC_ATTN_OUT, &L->t[DSV4_ATTN_OUTPUT_B], sc->out_lora, G * ro, n, sc->sub_out, D, err);
}

/* ---- MoE sublayer ------------------------------------------------------- */

/* sub_in [n][D] -> sub_out [n][D] = shared expert + the routed slots. */
static int moe(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
               ms_err *err) {
    if (moe_router_shared_up(s, il, n, err)) return -1;
    if (moe_route(s, il, tokens, n, err)) return -1;
    /* the shared expert's down projection into sub_out: the routed
     * experts' fused down job takes it along (one hand-off less), else it
     * runs on its own after them */
    const struct ms_mm_op shexp_down = shexp_down_op(s, il, n);
    s->shexp_down = &shexp_down;
    const int rc = moe_routed(s, il, tokens, n, err);
    const bool pending = s->shexp_down != NULL;
    s->shexp_down = NULL;
    if (rc) return -1;
    if (pending && ms_matmul_multi(&s->mm, &shexp_down, 1, err)) return -1;
    for_tokens(s, n, moe_sum_tokens, NULL);
    return 0;
}

/* The shared expert's down projection shexp_gate [n][Fs] -> sub_out [n][D]. */
static struct ms_mm_op shexp_down_op(const struct dsv4_session *s, uint32_t il, int64_t n) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t D = hp->n_embd, Fs = (int64_t)hp->n_ff_exp * hp->n_expert_shared;
    return mm_op(s, DC_SHEXP, &s->m->layers[il].t[DSV4_FFN_DOWN_SHEXP], s->sc.shexp_gate, Fs, n,
                 s->sc.sub_out, D);
}

/* The routed experts of n routed tokens (sel, selw) into exp_out [n][k][D]. */
static int moe_routed(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
                      ms_err *err) {
    return moe_routed_experts(s, il, tokens, n, moe_group_by_expert(s, il, n), err);
}

/* Router probabilities pi_e = sqrt(softplus(l_e)), in place over [E]. */
static void router_probs(float *pi, int64_t E) {
    for (int64_t e = 0; e < E; e++) pi[e] = sqrtf(ms_softplus(pi[e]));
}

/* The k experts with the largest pi + bias (the bias only picks, pi
 * weighs): their indices into idx[0..k), in the heap's order. biased: [E]
 * scratch. */
static void router_pick(const float *pi, const float *bias, int64_t E, int64_t k, float *biased,
                        int *idx) {
    for (int64_t e = 0; e < E; e++) biased[e] = pi[e] + bias[e];
    ms_topk_heap(biased, (int)E, (int)k, idx);
}

/* Routing: router [n][E] (logits of sub_in, from moe_router_shared_up) ->
 * pi in place; sel [n][k] the experts (tid2eid
 * on hash layers, else top-k of pi + bias, best first: that fixes the
 * summation order), selw [n][k] their weights pi, normalised and scaled. */
static int moe_route(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
                     ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    const struct dsv4_layer *L = &m->layers[il];
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    const bool hash = il < hp->n_hash_layer;
    (void)D;
    (void)err;
    for (int64_t t = 0; t < n; t++) {
        float *pi = sc->router + t * E;
        int32_t *sel = sc->sel + t * k;
        float *w = sc->selw + t * k;
        router_probs(pi, E);
        if (hash) {
            memcpy(sel, L->t[DSV4_FFN_GATE_TID2EID].i32 + (int64_t)tokens[t] * k,
                   (size_t)k * sizeof(int32_t));
        } else {
            const float *biased = sc->biased;
            int *idx = sc->topidx;
            router_pick(pi, L->t[DSV4_EXP_PROBS_B].f32, E, k, sc->biased, idx);
            for (int64_t a = 1; a < k; a++) /* slot order: best first */
                for (int64_t b = a; b > 0 && biased[idx[b]] > biased[idx[b - 1]]; b--) {
                    int tmp = idx[b];
                    idx[b] = idx[b - 1];
                    idx[b - 1] = tmp;
                }
            for (int64_t j = 0; j < k; j++) sel[j] = idx[j];
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < k; j++) sum += (w[j] = pi[sel[j]]);
        if (hp->expert_weights_norm) {
            const float den = fmaxf(sum, MOE_WEIGHT_FLOOR);
            for (int64_t j = 0; j < k; j++) w[j] /= den;
        }
        const float scale = hp->expert_weights_scale;
        if (scale != 0.0f && scale != 1.0f)
            for (int64_t j = 0; j < k; j++) w[j] *= scale;
    }
    if (s->p.on_route) s->p.on_route(s->p.route_ctx, il, sc->sel, sc->selw, n, (int)k);
    return 0;
}

/* The most experts of layer il the expert source can hold acquired at
 * once (0: no limit). */
static int acquire_limit(const struct dsv4_expert_source *src, uint32_t il) {
    return src->acquire_limit ? src->acquire_limit(src->ctx, il) : src->max_per_acquire;
}

/* Grouping by expert: the distinct experts of sel go to used[0..n_used)
 * in expert order, and each used expert u owns gathered rows
 * [expert_row0[u], expert_row0[u + 1]) (one per (token, slot) selecting it,
 * in token order; row_tok/row_slot say which). Returns n_used. */
static int moe_group_by_expert(struct dsv4_session *s, uint32_t il, int64_t n) {
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t E = hp->n_expert, k = hp->n_expert_used;
    int32_t *used = sc->used, *pos = sc->expert_pos;
    int64_t *row0 = sc->expert_row0;
    int n_used = 0;
    for (int64_t e = 0; e < E; e++) pos[e] = -1;
    for (int64_t i = 0; i < n * k; i++)
        if (pos[sc->sel[i]] < 0) pos[sc->sel[i]] = 0;
    for (int64_t e = 0; e < E; e++)
        if (pos[e] == 0) {
            pos[e] = n_used;
            used[n_used++] = (int32_t)e;
        }
    const struct dsv4_expert_source *src = &s->m->experts;
    const int limit = acquire_limit(src, il);
    if (src->order && limit > 0 && n_used > limit) {
        src->order(src->ctx, il, used, n_used); /* a permutation: rows follow it */
        for (int u = 0; u < n_used; u++) pos[used[u]] = u;
    }
    for (int u = 0; u <= n_used; u++) row0[u] = 0;
    for (int64_t i = 0; i < n * k; i++) row0[pos[sc->sel[i]] + 1]++;
    for (int u = 0; u < n_used; u++) row0[u + 1] += row0[u];
    for (int64_t t = 0; t < n; t++) /* row0[u] counts up to expert u's end */
        for (int64_t j = 0; j < k; j++) {
            const int64_t r = row0[pos[sc->sel[t * k + j]]]++;
            sc->row_tok[r] = (int32_t)t;
            sc->row_slot[r] = (int32_t)j;
        }
    for (int u = n_used; u > 0; u--) row0[u] = row0[u - 1]; /* back to starts */
    row0[0] = 0;
    return n_used;
}

/* Tells the expert source the distinct experts of the pass's last
 * DSV4_TAIL_TOKENS tokens (those of the last ubatch), last token first (it may seed its decode cache
 * with them). */
static int tail_routed(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err) {
    const struct dsv4_model *m = s->m;
    int32_t *ids = s->sc.tail_ids;
    const int64_t k = m->hp.n_expert_used;
    int n_ids = 0;
    for (int64_t t = n - 1; t >= 0 && t >= n - DSV4_TAIL_TOKENS; t--)
        for (int64_t j = 0; j < k; j++) {
            const int32_t e = s->sc.sel[t * k + j];
            bool seen = false;
            for (int i = 0; i < n_ids && !seen; i++) seen = ids[i] == e;
            if (!seen) ids[n_ids++] = e;
        }
    return m->experts.tail_routed(m->experts.ctx, il, ids, n_ids, err);
}

/* Decode prefetch: guesses the experts layer il will select for this step's
 * one token and tells the expert source, which reads the missing ones while
 * the previous layer's experts compute. Hash layers: exact (tid2eid of the
 * token). Others: layer il's router and selection bias applied to the
 * previous layer's FFN input sub_in, which is close to layer il's (the
 * residual stream changes little per layer; accuracy measured in
 * docs/streaming.md, "Decode prefetch"). router, biased, topidx and run_order are free
 * between routing and the first run_experts. */
static int prefetch_next(struct dsv4_session *s, uint32_t il, const int32_t *tokens,
                         ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_layer *L = &m->layers[il];
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = m->hp.n_embd, E = m->hp.n_expert, k = m->hp.n_expert_used;
    int32_t *ids = sc->run_order;
    if (il < m->hp.n_hash_layer) {
        memcpy(ids, L->t[DSV4_FFN_GATE_TID2EID].i32 + (int64_t)tokens[0] * k,
               (size_t)k * sizeof *ids);
    } else {
        if (mm(s, DC_ROUTER, &L->t[DSV4_FFN_GATE_INP], sc->sub_in, D, 1, sc->router, E, err)) return -1;
        router_probs(sc->router, E);
        router_pick(sc->router, L->t[DSV4_EXP_PROBS_B].f32, E, k, sc->biased, sc->topidx);
        for (int64_t j = 0; j < k; j++) ids[j] = sc->topidx[j];
    }
    return m->experts.prefetch(m->experts.ctx, il, ids, (int)k, err);
}

/* Experts in the acquire group starting at used[g0]: at most `group`, and
 * (a span's groups) at most row_cap gathered rows, the ubatch's buffers'
 * (one expert always fits: a span is at most n_ubatch x k tokens). 0 when
 * g0 == n_used. */
static int group_size(const struct dsv4_scratch *sc, int group, int64_t row_cap, int g0,
                      int n_used) {
    int ng = n_used - g0 < group ? n_used - g0 : group;
    while (ng > 1 && sc->expert_row0[g0 + ng] - sc->expert_row0[g0] > row_cap) ng--;
    return ng;
}

/* Routed experts: acquired from the expert source in groups it can hold at
 * once (all of them when resident); each group is computed into exp_out
 * [n][k][D], then released. A decode step, once the first group of this
 * layer is pinned, starts the next layer's prefetch. When a layer takes
 * several groups and the source reads ahead, groups are half as large and
 * the next group's reads start before this one computes (a long prompt
 * through a cache smaller than a layer: reads overlap compute instead of
 * alternating with it). */
static int moe_routed_experts(struct dsv4_session *s, uint32_t il, const int32_t *tokens,
                              int64_t n, int n_used, ms_err *err) {
    const struct dsv4_model *m = s->m;
    struct dsv4_scratch *sc = &s->sc;
    if (m->experts.routed && m->experts.routed(m->experts.ctx, il, sc->used, n_used, n, err))
        return -1;
    if (m->experts.tail_routed && s->pass_tail && tail_routed(s, il, n, err)) return -1;
    const int limit = acquire_limit(&m->experts, il);
    const int64_t row_cap = s->sc_cap * (int64_t)m->hp.n_expert_used;
    int group = limit > 0 ? limit : n_used;
    if (m->experts.read_ahead && n_used > group && group > 1) group /= 2;
    const bool ahead = m->experts.read_ahead && group_size(sc, group, row_cap, 0, n_used) < n_used;
    for (int g0 = 0, ng; g0 < n_used; g0 += ng) {
        ng = group_size(sc, group, row_cap, g0, n_used);
        if (m->experts.acquire(m->experts.ctx, il, sc->used + g0, ng, sc->views, err)) return -1;
        int rc = 0;
        if (g0 == 0 && n == 1 && m->experts.prefetch && il + 1 < m->n_layer)
            rc = prefetch_next(s, il + 1, tokens, err);
        const int next = group_size(sc, group, row_cap, g0 + ng, n_used);
        if (!rc && ahead && next > 0)
            rc = m->experts.read_ahead(m->experts.ctx, il, sc->used + g0 + ng, next, err);
        s->row_base = sc->expert_row0[g0];
        if (!rc) rc = run_experts(s, il, g0, ng, err);
        m->experts.release(m->experts.ctx, il, sc->used + g0, ng);
        if (rc) return -1;
    }
    return 0;
}

/* One routed expert over its gathered rows [r0, r0 + rows): exp_in [rows][D]
 * gathered from sub_in, exp_gate/exp_up [rows][F], clamped SwiGLU, down
 * projection (into exp_in, free by then) and the router weight; the result
 * goes to the (token, slot) rows of exp_out. Experts own disjoint row
 * ranges, so several can run at once, each with its own matmul context. */
static int expert_ffn(struct dsv4_session *s, struct ms_matmul_ctx *mc, uint32_t il,
                      const struct dsv4_expert_view *v, int64_t r0, int64_t rows, ms_err *err) {
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, k = hp->n_expert_used, F = hp->n_ff_exp;
    const enum ms_act act = s->p.quality ? MS_ACT_F32 : MS_ACT_QUANT;
    const int64_t i0 = r0 - s->row_base; /* in exp_in/gate/up */
    float *x = sc->exp_in + i0 * D, *gate = sc->exp_gate + i0 * F, *up = sc->exp_up + i0 * F;
    const int32_t *tok = sc->row_tok + r0, *slot = sc->row_slot + r0;
    for (int64_t i = 0; i < rows; i++)
        memcpy(x + i * D, sc->sub_in + (int64_t)tok[i] * D, (size_t)D * sizeof(float));
    /* gate and up as a pair: the activations are converted once for both */
    const struct ms_mm_op gu = {.w = &v->gate, .w2 = &v->up, .x = x, .ldx = D, .n_tok = rows,
                                .y = gate, .y2 = up, .ldy = F, .act = act};
    if (ms_matmul_multi(mc, &gu, 1, err)) return -1;
    for (int64_t i = 0; i < rows; i++)
        ms_swiglu_clamped(gate + i * F, gate + i * F, up + i * F, F, hp->swiglu_clamp_exp[il]);
    float *down = x;
    if (ms_matmul(mc, &v->down, gate, F, rows, down, D, act, err)) return -1;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t t = tok[i], j = slot[i];
        const float w = sc->selw[t * k + j];
        float *dst = sc->exp_out + (t * k + j) * D;
        for (int64_t c = 0; c < D; c++) dst[c] = w * down[i * D + c];
    }
    return 0;
}

/* SwiGLU of rows [r0, r1) of a gate/up pair's outputs, in place in gate
 * (a fused matmul's done callback). */
struct swiglu_rows_arg {
    float *gate;
    const float *up;
    int64_t n_tok, ld; /* tokens, floats between their rows */
    float clamp;
};

static void swiglu_rows(void *argp, int64_t r0, int64_t r1) {
    const struct swiglu_rows_arg *a = argp;
    for (int64_t t = 0; t < a->n_tok; t++)
        ms_swiglu_clamped(a->gate + t * a->ld + r0, a->gate + t * a->ld + r0,
                          a->up + t * a->ld + r0, r1 - r0, a->clamp);
}

/* One pool job for everything that reads sub_in in the MoE sublayer: the
 * router logits [n][E] and the shared expert's gate/up [n][Fs] with its
 * clamped SwiGLU (in place in shexp_gate). */
static int moe_router_shared_up(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const struct dsv4_layer *L = &s->m->layers[il];
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, E = hp->n_expert;
    const int64_t Fs = (int64_t)hp->n_ff_exp * hp->n_expert_shared;
    struct swiglu_rows_arg sw = {.gate = sc->shexp_gate, .up = sc->shexp_up, .n_tok = n,
                                 .ld = Fs, .clamp = hp->swiglu_clamp_shexp[il]};
    struct ms_mm_op ops[2];
    ops[0] = mm_op(s, DC_ROUTER, &L->t[DSV4_FFN_GATE_INP], sc->sub_in, D, n, sc->router, E);
    ops[1] = mm_op(s, DC_SHEXP, &L->t[DSV4_FFN_GATE_SHEXP], sc->sub_in, D, n, sc->shexp_gate, Fs);
    ops[1].w2 = &L->t[DSV4_FFN_UP_SHEXP].mat;
    ops[1].y2 = sc->shexp_up;
    ops[1].done = swiglu_rows;
    ops[1].done_arg = &sw;
    return ms_matmul_multi(&s->mm, ops, 2, err);
}

/* ---- hyper-connections -------------------------------------------------- */

/* HC-pre for n tokens: hc_flat = RMSNorm(resid), hc_mix = fn hc_flat, the
 * pre/post/comb weights from it, and sub_in [n][D] = sum_s pre_s X_s,
 * RMS-normalised with the sublayer's norm weight. */
static int hc_pre(struct dsv4_session *s, const struct dsv4_tensor *fn, const float *base,
                  const float *scale, const float *norm, int64_t n, ms_err *err) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t nh = hp->n_hc, w = nh * hp->n_embd, nmix = (2 + nh) * nh;
    for_tokens(s, n, hc_flat_tokens, NULL);
    if (mm(s, DC_HC, fn, s->sc.hc_flat, w, n, s->sc.hc_mix, nmix, err)) return -1;
    const float *args[3] = {base, scale, norm};
    for_tokens(s, n, hc_mix_tokens, args);
    return 0;
}

/* HC-post: X'_d = post_d * sub_out + sum_s C[d][s] X_s. */
static void hc_post(struct dsv4_session *s, int64_t n) { for_tokens(s, n, hc_post_tokens, NULL); }

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static void hc_flat_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    (void)arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t w = hp->n_hc * hp->n_embd;
    for (int64_t t = t0; t < t1; t++)
        ms_rmsnorm(s->sc.hc_flat + t * w, s->sc.resid + t * w, NULL, w, hp->rms_eps);
}

/* arg: {HC base [(2+n_hc)*n_hc], HC scale [3], the sublayer's norm [D]} */
static void hc_mix_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    const float *const *a = arg;
    const float *base = a[0], *scale = a[1], *norm = a[2];
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, nh = hp->n_hc, w = nh * D, nmix = (2 + nh) * nh;
    for (int64_t t = t0; t < t1; t++) {
        const float *mu = sc->hc_mix + t * nmix;
        float *pre = sc->hc_wpre + t * nh, *post = sc->hc_wpost + t * nh;
        float *comb = sc->hc_comb + t * nh * nh;
        for (int64_t k = 0; k < nh; k++) {
            pre[k] = sigmoidf(mu[k] * scale[0] + base[k]) + hp->hc_eps;
            post[k] = 2.0f * sigmoidf(mu[nh + k] * scale[1] + base[nh + k]);
        }
        float z[DSV4_N_HC * DSV4_N_HC]; /* n_hc == DSV4_N_HC (hparams check) */
        for (int64_t k = 0; k < nh * nh; k++) z[k] = mu[2 * nh + k] * scale[2] + base[2 * nh + k];
        ms_sinkhorn4(comb, z, (int)hp->n_sinkhorn_iter, hp->hc_eps);
        float *x = sc->sub_in + t * D;
        ms_vec_mix_rows(D, x, 0.0f, NULL, pre, sc->resid + t * w, D, (int)nh);
        ms_rmsnorm(x, x, norm, D, hp->rms_eps);
    }
}

static void hc_post_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    (void)arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, nh = hp->n_hc, w = nh * D;
    for (int64_t t = t0; t < t1; t++) {
        float *X = sc->resid + t * w, *old = sc->hc_flat + t * w;
        const float *f = sc->sub_out + t * D, *post = sc->hc_wpost + t * nh;
        const float *C = sc->hc_comb + t * nh * nh;
        memcpy(old, X, (size_t)w * sizeof(float));
        for (int64_t d = 0; d < nh; d++) {
            float c[DSV4_N_HC]; /* n_hc == DSV4_N_HC (hparams check) */
            for (int64_t k = 0; k < nh; k++) c[k] = C[d + nh * k];
            ms_vec_mix_rows(D, X + d * D, post[d], f, c, old, D, (int)nh);
        }
    }
}

/* ---- output head -------------------------------------------------------- */

/* HC-head, output norm and LM head for tokens [t0, n): logits rows into out
 * [n - t0][n_vocab]. */
static int output_head(struct dsv4_session *s, int64_t t0, int64_t n, float *out, ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, nh = hp->n_hc, w = nh * D;
    const int64_t cnt = n - t0;
    for (int64_t t = t0; t < n; t++)
        ms_rmsnorm(sc->hc_flat + t * w, sc->resid + t * w, NULL, w, hp->rms_eps);
    if (mm(s, DC_HC, &m->glob[DSV4_OUTPUT_HC_FN], sc->hc_flat + t0 * w, w, cnt, sc->hc_mix, nh, err))
        return -1;
    const float *base = m->glob[DSV4_OUTPUT_HC_BASE].f32, *scale = m->glob[DSV4_OUTPUT_HC_SCALE].f32;
    for (int64_t i = 0; i < cnt; i++) {
        const float *X = sc->resid + (t0 + i) * w;
        float ws[DSV4_N_HC];
        for (int64_t k = 0; k < nh; k++)
            ws[k] = sigmoidf(sc->hc_mix[i * nh + k] * scale[0] + base[k]) + hp->hc_eps;
        float *y = sc->sub_in + i * D;
        ms_vec_mix_rows(D, y, 0.0f, NULL, ws, X, D, (int)nh);
        ms_rmsnorm(y, y, m->glob[DSV4_OUTPUT_NORM].f32, D, hp->rms_eps);
    }
    const int64_t V = hp->n_vocab;
    if (mm(s, DC_HEAD, &m->glob[DSV4_OUTPUT], sc->sub_in, D, cnt, out, V, err)) return -1;
    /* Fast mode's int8 activations turn a NaN or infinity into 0, so
     * weights that hold one (a corrupt file) would give finite, meaningless
     * logits (every layer after the bad one sees zeros). The residual keeps
     * the NaN, and so does the head's input: a token whose input is not
     * finite gets NaN logits, which the callers report as quality mode's
     * f32 products would have made them. */
    for (int64_t i = 0; i < cnt; i++) {
        const float *y = sc->sub_in + i * D;
        bool finite = true;
        for (int64_t c = 0; c < D && finite; c++) finite = isfinite(y[c]);
        if (!finite)
            for (int64_t v = 0; v < V; v++) out[i * V + v] = NAN;
    }
    return 0;
}

/* ---- small helpers ------------------------------------------------------ */

/* Dense classes that take int8 activations in fast mode (docs/model.md,
 * "Numerics and modes"): the LM head and the attention output projection.
 * Measured on the test models against llama.cpp on their F32 twins (mean KL
 * per position, tests/test_diff_llama.c): the head adds about 1% to our KL,
 * the output projection 20-60%; with both our KL stays at most ~0.6 of
 * llama.cpp's own quantized run. Queries/keys or the shared expert alone
 * took it to 0.6-0.8 of llama.cpp's and all of them together past it, so
 * they take 16-bit integer activations (Q16_0) instead, as do the router,
 * HC mixes, compressors and indexer, whose outputs pick experts and rows:
 * ~15 significant bits per block, which left the KL where f32 had it. */
#define DENSE_INT8_CLASSES ((1u << DC_HEAD) | (1u << DC_ATTN_OUT))

/* The activations a dense product of class dc on weight w takes: f32 in
 * quality mode; in fast mode the weight's int8 format (Q8_0 or Q8_K, as
 * llama.cpp uses with those weights) for DENSE_INT8_CLASSES, and Q16_0 for
 * the rest where w has dots for it (Q8_0), f32 otherwise. F16/BF16 weights
 * keep f32 activations (ggml would round them to F16). */
static enum ms_act dense_act(const struct dsv4_session *s, enum dense_class dc,
                             const struct dsv4_tensor *w) {
    if (s->p.quality) return MS_ACT_F32;
    const enum ms_type vt = ms_type_traits(w->mat.type)->vec_dot_type;
    if ((DENSE_INT8_CLASSES & (1u << dc)) && (vt == MS_TYPE_Q8_0 || vt == MS_TYPE_Q8_K)) return MS_ACT_QUANT;
    return MS_ACT_Q16; /* f32 where the weight type has no Q16_0 dots */
}

static int mm(struct dsv4_session *s, enum dense_class dc, const struct dsv4_tensor *w,
              const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy, ms_err *err) {
    return ms_matmul(&s->mm, &w->mat, x, ldx, n, y, ldy, dense_act(s, dc, w), err);
}

/* The same product as mm, as one op of a fused call (ms_matmul_multi). */
static struct ms_mm_op mm_op(const struct dsv4_session *s, enum dense_class dc,
                             const struct dsv4_tensor *w, const float *x, int64_t ldx, int64_t n,
                             float *y, int64_t ldy) {
    return (struct ms_mm_op){.w = &w->mat, .x = x, .ldx = ldx, .n_tok = n, .y = y, .ldy = ldy,
                             .act = dense_act(s, dc, w)};
}

/* RoPE parameters of a layer: ratio-0 layers use the plain base;
 * compressed layers use the compress base with YaRN (or linear scaling when
 * the type key is absent), with the YaRN magnitude factor cancelled. */
static struct ms_rope_params rope_params(const struct dsv4_hparams *hp, uint32_t ratio) {
    struct ms_rope_params p = {.n_rot = (int)hp->n_rot,
                               .freq_base = hp->rope_freq_base,
                               .freq_scale = 1.0f,
                               .ext_factor = 0.0f,
                               .attn_factor = 1.0f,
                               .n_ctx_orig = (int)(hp->rope_n_ctx_orig ? hp->rope_n_ctx_orig
                                                                       : hp->n_ctx_train),
                               .beta_fast = hp->yarn_beta_fast,
                               .beta_slow = hp->yarn_beta_slow};
    if (ratio == 0) return p;
    p.freq_base = hp->compress_rope_freq_base;
    if (hp->rope_scaling_factor > 0.0f) p.freq_scale = 1.0f / hp->rope_scaling_factor;
    if (!strcmp(hp->rope_scaling_type, "yarn")) {
        p.ext_factor = 1.0f;
        p.attn_factor = 1.0f / (1.0f + 0.1f * logf(1.0f / p.freq_scale));
    }
    return p;
}

/* ---- per-token steps ---------------------------------------------------- */

/* q_lora = RMSNorm(q_lora) * q_a_norm; arg: the layer */
static void q_lora_norm_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    const struct dsv4_layer *L = arg;
    const int64_t rq = s->m->hp.q_lora_rank;
    for (int64_t t = t0; t < t1; t++)
        ms_rmsnorm(s->sc.q_lora + t * rq, s->sc.q_lora + t * rq, L->t[DSV4_ATTN_Q_A_NORM].f32, rq,
                   s->m->hp.rms_eps);
}

/* per-head RMSNorm and RoPE of q; RMSNorm * kv_norm and RoPE of kv; arg:
 * the layer */
static void qkv_norm_rope_tokens(struct dsv4_session *s, int64_t t0, int64_t t1,
                                 const void *arg) {
    const struct dsv4_layer *L = arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t d = hp->n_embd_head, H = hp->n_head;
    const float eps = hp->rms_eps;
    const struct ms_rope_params rp = rope_params(hp, L->ratio);
    float cs[MS_ROPE_MAX_ROT]; /* one rotation per token for its heads and kv */
    for (int64_t t = t0; t < t1; t++) {
        const int64_t p = s->pos0 + t;
        ms_rope_cs(cs, p, &rp, false);
        for (int64_t h = 0; h < H; h++) {
            float *qh = s->sc.q + (t * H + h) * d;
            ms_rmsnorm(qh, qh, NULL, d, eps);
            ms_rope_apply(qh, d, rp.n_rot, cs);
        }
        float *kv = s->sc.kv + t * d;
        ms_rmsnorm(kv, kv, L->t[DSV4_ATTN_KV_A_NORM].f32, d, eps);
        ms_rope_apply(kv, d, rp.n_rot, cs);
    }
}

/* Compressed layers: ape added to the gate branches (row p mod r); ratio 4:
 * indexer query RoPE and head-weight scale. arg: the layer. */
static void comp_ape_rope_tokens(struct dsv4_session *s, int64_t t0, int64_t t1,
                                 const void *arg) {
    const struct dsv4_layer *L = arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const uint32_t r = L->ratio;
    const int64_t d = hp->n_embd_head, dI = hp->indexer_head_size, HI = hp->n_indexer_head;
    const int64_t Wc = dsv4_coff(r) * d, Wi = dsv4_coff(4) * dI;
    const float wscale = 1.0f / sqrtf((float)(dI * HI));
    const struct ms_rope_params rpc = rope_params(hp, r ? r : 4);
    for (int64_t t = t0; t < t1; t++) {
        const int64_t p = s->pos0 + t;
        const float *ape = L->t[DSV4_ATTN_COMP_APE].f32 + (p % r) * Wc;
        for (int64_t i = 0; i < Wc; i++) sc->comp_gate[t * Wc + i] += ape[i];
        if (r != 4) continue;
        const float *iape = L->t[DSV4_IDX_COMP_APE].f32 + (p % 4) * Wi;
        for (int64_t i = 0; i < Wi; i++) sc->icomp_gate[t * Wi + i] += iape[i];
        float cs[MS_ROPE_MAX_ROT];
        ms_rope_cs(cs, p, &rpc, false);
        for (int64_t h = 0; h < HI; h++) {
            ms_rope_apply(sc->idx_q + (t * HI + h) * dI, dI, rpc.n_rot, cs);
            sc->idx_w[t * HI + h] *= wscale;
        }
    }
}

/* sub_out (shared expert) += the routed slots' outputs, in slot order. */
static void moe_sum_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    (void)arg;
    const int64_t D = s->m->hp.n_embd, k = s->m->hp.n_expert_used;
    for (int64_t t = t0; t < t1; t++) {
        float *out = s->sc.sub_out + t * D;
        for (int64_t c = 0; c < D; c++) {
            float routed = 0.0f;
            for (int64_t j = 0; j < k; j++) routed += s->sc.exp_out[(t * k + j) * D + c];
            out[c] += routed;
        }
    }
}

/* ---- thread plumbing: per-token work -------------------------------------- */

/* The element-wise and per-token steps between matmuls (norms, RoPE, HC
 * mixing) are cheap per token but serial work is paid on every thread's
 * clock, so long ubatches split them by token too. Each token's arithmetic
 * is the same whatever thread runs it. */
struct tok_job {
    struct dsv4_session *s;
    tok_fn fn;
    const void *arg;
};

static void tok_task(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct tok_job *j = ctx;
    j->fn(j->s, t0, t1, j->arg);
}

static void for_tokens(struct dsv4_session *s, int64_t n, tok_fn fn, const void *arg) {
    struct tok_job j = {s, fn, arg};
    ms_pool_for(s->p.pool, n, 8, tok_task, &j);
}

/* ---- thread plumbing: attention ------------------------------------------ */

/* Attention of the ubatch's tokens over the layer state. The keys of
 * positions before the ubatch come from the sliding-window ring st->raw,
 * those of the ubatch itself from kv (the ring gets them only after every
 * token has attended, so none is overwritten early); compressed rows are
 * all emitted before, and token t sees the n_comp_seen[t] its position
 * completes. So tokens are independent and run in parallel. */
struct attn_job {
    struct dsv4_session *s;
    const struct dsv4_layer_state *st;
    uint32_t ratio;
    const float *sinks; /* [H] this layer's sink logits */
    int64_t t;          /* one-token jobs (split by heads): the token */
};

/* Key (= value) row of position q for token t's attention. */
static inline const float *attn_key(const struct attn_job *j, int64_t q) {
    const struct dsv4_session *s = j->s;
    const int64_t d = s->m->hp.n_embd_head;
    if (q >= s->pos0) return s->sc.kv + (q - s->pos0) * d;
    return j->st->raw + (q % (int64_t)s->m->hp.n_swa) * d;
}

/* Sink softmax attention of heads [h0, h1) of token t, then inverse RoPE
 * of each head's output at the query position. sel: ratio 4, the
 * compressed rows the indexer kept (NULL: all). score: this thread's
 * [4][n_swa + comp_cap] scratch, rows its [n_swa + comp_cap]. The keys (= values) a token sees are the
 * same for all heads: listed once, then each head's scores and weighted
 * sum run over the list (ms_vec_dot_rows / ms_vec_axpy_rows: the same
 * operations, in the same order, as a dot and an axpy per key). */
static void attn_token_heads(const struct attn_job *j, int64_t t, int64_t h0, int64_t h1,
                             const uint8_t *sel, float *score, const float **rows) {
    const struct dsv4_session *s = j->s;
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t d = hp->n_embd_head, n_swa = hp->n_swa, H = hp->n_head;
    const int64_t p = s->pos0 + t, n_comp = s->sc.n_comp_seen[t];
    const float kq_scale = 1.0f / sqrtf((float)d);
    const int64_t lo = p - n_swa + 1 > 0 ? p - n_swa + 1 : 0;
    const struct ms_rope_params rp = rope_params(hp, j->ratio);
    float cs[MS_ROPE_MAX_ROT]; /* the inverse rotation at p, for every head */
    ms_rope_cs(cs, p, &rp, true);
    int64_t nk = 0;
    for (int64_t q_pos = lo; q_pos <= p; q_pos++) rows[nk++] = attn_key(j, q_pos);
    for (int64_t m = 0; m < n_comp; m++)
        if (!sel || sel[m]) rows[nk++] = j->st->comp + m * d;
    /* heads four at a time for the scores, two at a time for the sums
     * (each key loaded once for them), the rest one by one */
    for (int64_t h = h0; h < h1;) {
        const int nh = h1 - h >= 4 ? 4 : 1;
        float *sc[4];
        for (int g = 0; g < nh; g++) sc[g] = score + (size_t)g * (size_t)nk;
        if (nh == 4) {
            const float *const q4[4] = {s->sc.q + (t * H + h) * d, s->sc.q + (t * H + h + 1) * d,
                                        s->sc.q + (t * H + h + 2) * d, s->sc.q + (t * H + h + 3) * d};
            ms_vec_dot_rows_x4(d, q4, rows, nk, sc);
        } else {
            ms_vec_dot_rows(d, s->sc.q + (t * H + h) * d, rows, nk, sc[0]);
        }
        float den[4];
        for (int g = 0; g < nh; g++) {
            float mx = -INFINITY;
            for (int64_t k = 0; k < nk; k++) {
                sc[g][k] *= kq_scale;
                mx = sc[g][k] > mx ? sc[g][k] : mx; /* fmaxf (a NaN score leaves mx) */
            }
            const float sink = j->sinks[h + g];
            mx = fmaxf(mx, sink);
            /* the keys' weights, and their sum with the sink's */
            den[g] = ms_vec_exp_sum(nk, sc[g], mx) + ms_expf(sink - mx);
            memset(s->sc.attn_out + (t * H + h + g) * d, 0, (size_t)d * sizeof(float));
        }
        for (int g = 0; g < nh; g += 2) {
            float *o0 = s->sc.attn_out + (t * H + h + g) * d;
            if (g + 1 < nh) {
                const float *const w2[2] = {sc[g], sc[g + 1]};
                float *const o2[2] = {o0, o0 + d};
                ms_vec_axpy_rows_x2(d, w2, rows, nk, o2);
            } else {
                ms_vec_axpy_rows(d, sc[g], rows, nk, o0);
            }
        }
        for (int g = 0; g < nh; g++) {
            float *o = s->sc.attn_out + (t * H + h + g) * d;
            const float inv = 1.0f / den[g];
            for (int64_t i = 0; i < d; i++) o[i] *= inv;
            ms_rope_apply(o, d, rp.n_rot, cs);
        }
        h += nh;
    }
}

/* Lightning indexer: marks in sel which of the n_comp visible compressed
 * rows token t attends to (all when n_comp <= top_k, else the top_k by
 * sum_h w_h relu(q_h . key)). The scores run with the heads in SIMD lanes
 * (ms_vec_relu_scores): the token's queries are transposed once, [dI][hp]
 * with the heads padded to a multiple of 16 (zero queries, zero weights),
 * and each compressed row is broadcast against them, so no dot product
 * ends in a horizontal sum (a Flash row is 64 heads of 128). */
static int64_t idx_heads_padded(const struct dsv4_hparams *hp) {
    return ((int64_t)hp->n_indexer_head + 15) / 16 * 16;
}

/* Token t's indexer queries transposed into qT [dI][hp] and its head
 * weights into wp [hp] (worker scratch). */
static void indexer_prepare(const struct dsv4_session *s, int64_t t, float *qT, float *wp) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t dI = hp->indexer_head_size, HI = hp->n_indexer_head, HP = idx_heads_padded(hp);
    const float *q = s->sc.idx_q + t * HI * dI;
    for (int64_t c = 0; c < dI; c++) {
        for (int64_t h = 0; h < HI; h++) qT[c * HP + h] = q[h * dI + c];
        for (int64_t h = HI; h < HP; h++) qT[c * HP + h] = 0.0f;
    }
    for (int64_t h = 0; h < HP; h++) wp[h] = h < HI ? s->sc.idx_w[t * HI + h] : 0.0f;
}

/* score[m] for the compressed rows m0 <= m < m1, from indexer_prepare's
 * qT and wp. */
static void indexer_scores(const struct dsv4_session *s, const struct dsv4_layer_state *st, const float *qT,
                           const float *wp, int64_t m0, int64_t m1, float *score) {
    const int64_t dI = s->m->hp.indexer_head_size;
    ms_vec_relu_scores(dI, idx_heads_padded(&s->m->hp), qT, wp, st->idx_keys + m0 * dI, dI, m1 - m0, score + m0);
}

/* Worker ith's indexer query and weight scratch. */
static float *idx_qT(const struct dsv4_session *s, int ith) {
    const struct dsv4_hparams *hp = &s->m->hp;
    return s->sc.idx_qT + (size_t)ith * (size_t)(hp->indexer_head_size * idx_heads_padded(hp));
}

static float *idx_wp(const struct dsv4_session *s, int ith) {
    return s->sc.idx_wp + (size_t)ith * (size_t)idx_heads_padded(&s->m->hp);
}

/* The top_k of score[0..n_comp) marked in sel (top: scratch). */
static void indexer_pick(const struct dsv4_session *s, int64_t n_comp, float *score, int *top,
                         uint8_t *sel) {
    const int64_t K = s->m->hp.indexer_top_k;
    ms_topk_heap(score, (int)n_comp, (int)K, top);
    memset(sel, 0, (size_t)n_comp);
    for (int64_t i = 0; i < K; i++) sel[top[i]] = 1;
}

static void indexer_select(const struct dsv4_session *s, const struct dsv4_layer_state *st,
                           int64_t t, int64_t n_comp, int ith, float *score, int *top, uint8_t *sel) {
    if (n_comp <= (int64_t)s->m->hp.indexer_top_k) {
        memset(sel, 1, (size_t)n_comp);
        return;
    }
    indexer_prepare(s, t, idx_qT(s, ith), idx_wp(s, ith));
    indexer_scores(s, st, idx_qT(s, ith), idx_wp(s, ith), 0, n_comp, score);
    indexer_pick(s, n_comp, score, top, sel);
}

/* Attention-score (four heads') and key-list scratch of worker ith. */
static float *attn_scores(const struct dsv4_session *s, int ith) {
    return s->sc.attn_score + (size_t)ith * 4 * (size_t)(s->m->hp.n_swa + s->comp_cap);
}

static const float **attn_rows(const struct dsv4_session *s, int ith) {
    return s->sc.attn_rows + (size_t)ith * (size_t)(s->m->hp.n_swa + s->comp_cap);
}

/* The indexer's selection for token t in worker ith's scratch (ratio 4),
 * else NULL. */
static const uint8_t *attn_select(const struct attn_job *j, int64_t t, int ith) {
    const struct dsv4_session *s = j->s;
    if (j->ratio != 4) return NULL;
    const size_t cc = (size_t)s->comp_cap;
    uint8_t *sel = s->sc.idx_sel + (size_t)ith * cc;
    indexer_select(s, j->st, t, s->sc.n_comp_seen[t], ith, s->sc.idx_score + (size_t)ith * cc,
                   s->sc.idx_top + (size_t)ith * cc, sel);
    return sel;
}

/* Pool items: whole tokens (prefill). */
static void attn_tokens(void *ctx, int64_t t0, int64_t t1, int ith) {
    const struct attn_job *j = ctx;
    const int64_t H = j->s->m->hp.n_head;
    for (int64_t t = t0; t < t1; t++)
        attn_token_heads(j, t, 0, H, attn_select(j, t, ith), attn_scores(j->s, ith), attn_rows(j->s, ith));
}

/* Pool items: the heads of token j->t (decode); its selection is made once
 * before, in worker 0's indexer scratch. */
static void attn_heads(void *ctx, int64_t h0, int64_t h1, int ith) {
    const struct attn_job *j = ctx;
    const uint8_t *sel = j->ratio == 4 ? j->s->sc.idx_sel : NULL;
    attn_token_heads(j, j->t, h0, h1, sel, attn_scores(j->s, ith), attn_rows(j->s, ith));
}

/* Pool items: compressed rows [m0, m1) of token j->t's indexer scores,
 * into worker 0's scratch, from the queries indexer_prepare put in worker
 * 0's (decode). */
static void idx_score_rows(void *ctx, int64_t m0, int64_t m1, int ith) {
    (void)ith;
    const struct attn_job *j = ctx;
    indexer_scores(j->s, j->st, idx_qT(j->s, 0), idx_wp(j->s, 0), m0, m1, j->s->sc.idx_score);
}

/* Compressed rows per indexer chunk of a decode step: a row costs
 * n_indexer_head dots of indexer_head_size (8 K multiply-adds for Flash). */
#define IDX_ROWS_GRAIN 64

static void run_attention(struct dsv4_session *s, const struct dsv4_layer_state *st,
                          uint32_t ratio, const float *sinks, int64_t n) {
    struct attn_job job = {.s = s, .st = st, .ratio = ratio, .sinks = sinks};
    if (n == 1) {
        const int64_t n_comp = s->sc.n_comp_seen[0];
        if (ratio == 4 && n_comp > (int64_t)s->m->hp.indexer_top_k) {
            /* one token's indexer scores every compressed row (at 32 K
             * positions, 8 K rows of 8 K multiply-adds per ratio-4 layer):
             * split by rows rather than left serial on the caller */
            indexer_prepare(s, 0, idx_qT(s, 0), idx_wp(s, 0));
            ms_pool_for(s->p.pool, n_comp, IDX_ROWS_GRAIN, idx_score_rows, &job);
            indexer_pick(s, n_comp, s->sc.idx_score, s->sc.idx_top, s->sc.idx_sel);
        } else {
            attn_select(&job, 0, 0);
        }
        ms_pool_for(s->p.pool, s->m->hp.n_head, 1, attn_heads, &job);
    } else {
        ms_pool_for_each(s->p.pool, n, attn_tokens, &job);
    }
}

/* ---- thread plumbing: routed experts ------------------------------------- */

/* A group of acquired experts run in parallel, one expert per thread at a
 * time (each with its own single-threaded matmul context), largest first. */
struct expert_job {
    struct dsv4_session *s;
    uint32_t il;
    const struct dsv4_expert_view *views; /* [ng] */
    const int32_t *order;                 /* [ng] group indices, most rows first */
    int g0;                               /* index in used[] of the group's first */
    _Atomic int failed;
    ms_err *errs;                         /* [n_threads] */
};

static void expert_task(void *ctx, int64_t b, int64_t e, int ith) {
    struct expert_job *j = ctx;
    struct dsv4_session *s = j->s;
    for (int64_t i = b; i < e && !atomic_load_explicit(&j->failed, memory_order_relaxed); i++) {
        const int32_t g = j->order[i], u = j->g0 + g;
        const int64_t r0 = s->sc.expert_row0[u], rows = s->sc.expert_row0[u + 1] - r0;
        if (expert_ffn(s, &s->mm_thread[ith], j->il, &j->views[g], r0, rows, &j->errs[ith]))
            atomic_store(&j->failed, ith + 1);
    }
}

/* Runs experts used[g0 .. g0 + ng) (acquired, views in sc->views). With
 * at least two experts per thread, each thread takes whole experts: one
 * hand-off per expert instead of three row-split matmuls, and no thread
 * waits on another between an expert's matmuls. With fewer (a decode step:
 * 6 experts, on any number of threads), run_experts_fused splits all of
 * them by rows in two pool jobs. Every output element is the same dot call
 * either way, so both give identical results. */
/* The routed down projection's done callback: rows [c0, c1) of each
 * gathered row's output (in exp_in), times the router weight, to its
 * (token, slot) row of exp_out. */
struct scatter_rows_arg {
    const struct dsv4_session *s;
    int64_t r0, rows; /* the expert's gathered rows */
};

static void scatter_rows(void *argp, int64_t c0, int64_t c1) {
    const struct scatter_rows_arg *a = argp;
    const struct dsv4_scratch *sc = &a->s->sc;
    const int64_t D = a->s->m->hp.n_embd, k = a->s->m->hp.n_expert_used;
    for (int64_t i = a->r0; i < a->r0 + a->rows; i++) {
        const int64_t t = sc->row_tok[i], j = sc->row_slot[i];
        const float w = sc->selw[t * k + j], *down = sc->exp_in + (i - a->s->row_base) * D;
        float *dst = sc->exp_out + (t * k + j) * D;
        for (int64_t c = c0; c < c1; c++) dst[c] = w * down[c];
    }
}

/* Experts used[g0 .. g0 + ng) (ng <= FUSED_EXPERTS_MAX) as two pool jobs
 * whatever their number: every expert's gate/up rows with the clamped
 * SwiGLU, then every expert's down rows with the router weight (and the
 * shared expert's down projection when moe() left it in s->shexp_down).
 * The rows are cut into chunks of similar cost, so 6 experts keep 16
 * threads busy, and experts of unequal row counts balance. The arithmetic
 * is expert_ffn's, element by element. A one-row expert (decode) reads
 * sub_in in place: every expert of a decode step shares one conversion of
 * its activations. */
static int run_experts_fused(struct dsv4_session *s, uint32_t il, int g0, int ng, ms_err *err) {
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, F = hp->n_ff_exp;
    const enum ms_act act = s->p.quality ? MS_ACT_F32 : MS_ACT_QUANT;
    if (ng <= 0) return 0;
    struct ms_mm_op ops[FUSED_EXPERTS_MAX + 1];
    struct swiglu_rows_arg sw[FUSED_EXPERTS_MAX];
    struct scatter_rows_arg sa[FUSED_EXPERTS_MAX];
    for (int g = 0; g < ng; g++) {
        const int64_t r0 = sc->expert_row0[g0 + g], rows = sc->expert_row0[g0 + g + 1] - r0;
        const int64_t i0 = r0 - s->row_base; /* in exp_in/gate/up */
        const float *x = sc->sub_in + (int64_t)sc->row_tok[r0] * D;
        if (rows > 1) {
            float *xg = sc->exp_in + i0 * D;
            for (int64_t i = 0; i < rows; i++)
                memcpy(xg + i * D, sc->sub_in + (int64_t)sc->row_tok[r0 + i] * D,
                       (size_t)D * sizeof(float));
            x = xg;
        }
        sw[g] = (struct swiglu_rows_arg){.gate = sc->exp_gate + i0 * F, .up = sc->exp_up + i0 * F,
                                         .n_tok = rows, .ld = F,
                                         .clamp = hp->swiglu_clamp_exp[il]};
        ops[g] = (struct ms_mm_op){.w = &sc->views[g].gate, .w2 = &sc->views[g].up, .x = x,
                                   .ldx = D, .n_tok = rows, .y = sw[g].gate, .y2 = sc->exp_up + i0 * F,
                                   .ldy = F, .act = act, .done = swiglu_rows,
                                   .done_arg = &sw[g]};
    }
    if (ms_matmul_multi(&s->mm, ops, ng, err)) return -1;
    for (int g = 0; g < ng; g++) {
        const int64_t r0 = sc->expert_row0[g0 + g], rows = sc->expert_row0[g0 + g + 1] - r0;
        const int64_t i0 = r0 - s->row_base;
        sa[g] = (struct scatter_rows_arg){.s = s, .r0 = r0, .rows = rows};
        ops[g] = (struct ms_mm_op){.w = &sc->views[g].down, .x = sc->exp_gate + i0 * F, .ldx = F,
                                   .n_tok = rows, .y = sc->exp_in + i0 * D, .ldy = D,
                                   .act = act, .done = scatter_rows, .done_arg = &sa[g]};
    }
    int n_ops = ng;
    if (s->shexp_down) {
        ops[n_ops++] = *s->shexp_down;
        s->shexp_down = NULL;
    }
    return ms_matmul_multi(&s->mm, ops, n_ops, err);
}

static int run_experts(struct dsv4_session *s, uint32_t il, int g0, int ng, ms_err *err) {
    struct dsv4_scratch *sc = &s->sc;
    const int64_t *row0 = sc->expert_row0;
    const int nt = ms_pool_n_threads(s->p.pool);
    if (ng <= FUSED_EXPERTS_MAX && (nt <= 1 || ng < 2 * nt || !s->mm_thread))
        return run_experts_fused(s, il, g0, ng, err);
    if (nt <= 1 || !s->mm_thread) {
        for (int g = 0; g < ng; g++) {
            const int64_t r0 = row0[g0 + g], rows = row0[g0 + g + 1] - r0;
            if (expert_ffn(s, &s->mm, il, &sc->views[g], r0, rows, err)) return -1;
        }
        return 0;
    }
    int32_t *order = sc->run_order; /* insertion sort by rows, descending */
    for (int g = 0; g < ng; g++) {
        const int64_t rows = row0[g0 + g + 1] - row0[g0 + g];
        int i = g;
        for (; i > 0 && row0[g0 + order[i - 1] + 1] - row0[g0 + order[i - 1]] < rows; i--)
            order[i] = order[i - 1];
        order[i] = g;
    }
    struct expert_job j = {.s = s, .il = il, .views = sc->views, .order = order, .g0 = g0,
                           .errs = sc->thread_err};
    atomic_init(&j.failed, 0);
    ms_pool_for_each(s->p.pool, ng, expert_task, &j);
    const int failed = atomic_load(&j.failed);
    if (failed) {
        *err = sc->thread_err[failed - 1];
        return -1;
    }
    return 0;
}
