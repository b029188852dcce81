/*
 * forward.c - the DeepSeek V4 forward pass, layer-major over a ubatch.
 *
 * One layer reads top to bottom like SPEC-dsv4.md 3.4/3.7:
 *
 *   hc_pre(attn) -> attn_norm -> attention -> hc_post
 *   hc_pre(ffn)  -> ffn_norm  -> routed MoE + shared expert -> hc_post
 *
 * Every projection runs batched over the ubatch's tokens (kernels/matmul);
 * the steps that write the per-layer attention state (compressor frontiers,
 * compressed rows) run token by token in position order inside the layer,
 * then every token attends to the state its position sees, which is what
 * makes one-shot, chunked and token-by-token evaluation agree (SPEC 4.2).
 * Across the pool: matmuls split by output rows, attention by token (one
 * token: by head), a long ubatch's experts one per thread, and the
 * per-token norms, RoPE and HC mixing by token.
 */
#include <math.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/vec.h"
#include "model/session_impl.h"

#define MOE_WEIGHT_FLOOR 6.103515625e-5f /* SPEC 3.6: renormalisation floor */

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Dense projections take f32 activations in both modes; only the routed
 * experts (most of the FLOPs and nearly all the bytes of a DeepSeek V4 model)
 * use quantized activations in fast mode. Measured on the tiny test models
 * against llama.cpp on their F32 twins: activation rounding in the dense
 * projections (attention, compressor, HC mix, router, indexer) accounted for
 * most of the fast mode's divergence, because it flips near-tied expert and
 * indexer selections; with f32 activations there the mean KL per position
 * fell 2-3x, below llama.cpp's on the same quantized file. */
static int mm(struct dsv4_session *s, const struct dsv4_tensor *w, const float *x, int64_t ldx,
              int64_t n, float *y, int64_t ldy, ms_err *err) {
    return ms_matmul(&s->mm, &w->mat, x, ldx, n, y, ldy, true, err);
}

/* RoPE parameters of a layer (SPEC 3.1 table): ratio-0 layers use the plain
 * base; compressed layers use the compress base with YaRN (or linear scaling
 * when the type key is absent), with the YaRN magnitude factor cancelled. */
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

/* ---- per-token work across the pool ------------------------------------ */

/* The element-wise and per-token steps between matmuls (norms, RoPE, HC
 * mixing) are cheap per token but serial work is paid on every thread's
 * clock, so long ubatches split them by token too. Each token's arithmetic
 * is the same whatever thread runs it. */
typedef void (*tok_fn)(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg);

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

/* ---- hyper-connections (SPEC 3.3) -------------------------------------- */

struct hc_args {
    const float *base, *scale; /* HC base [(2+n_hc)*n_hc], scale [3] */
    const float *norm;         /* the sublayer's RMSNorm weight [D] */
};

static void hc_flat(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    (void)arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t w = hp->n_hc * hp->n_embd;
    for (int64_t t = t0; t < t1; t++)
        ms_rmsnorm(s->sc.flat + t * w, s->sc.X + t * w, NULL, w, hp->rms_eps);
}

static void hc_mix(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    const struct hc_args *a = arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, nh = hp->n_hc, w = nh * D, nmix = (2 + nh) * nh;
    const float *base = a->base, *scale = a->scale;
    for (int64_t t = t0; t < t1; t++) {
        const float *mu = sc->mix + t * nmix;
        float *pre = sc->pre + t * nh, *post = sc->post + t * nh, *comb = sc->comb + t * nh * nh;
        for (int64_t k = 0; k < nh; k++) {
            pre[k] = sigmoidf(mu[k] * scale[0] + base[k]) + hp->hc_eps;
            post[k] = 2.0f * sigmoidf(mu[nh + k] * scale[1] + base[nh + k]);
        }
        float z[16];
        for (int64_t k = 0; k < nh * nh; k++) z[k] = mu[2 * nh + k] * scale[2] + base[2 * nh + k];
        ms_sinkhorn4(comb, z, (int)hp->n_sinkhorn_iter, hp->hc_eps);
        float *x = sc->h + t * D;
        const float *X = sc->X + t * w;
        for (int64_t i = 0; i < D; i++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < nh; k++) acc += pre[k] * X[k * D + i];
            x[i] = acc;
        }
        ms_rmsnorm(x, x, a->norm, D, hp->rms_eps);
    }
}

/* HC-pre for n tokens: fills sc->pre/post/comb and writes the mixed input
 * sum_s pre_s X_s, RMS-normalised with the sublayer's norm weight, into
 * sc->h. */
static int hc_pre(struct dsv4_session *s, const struct dsv4_tensor *fn, const float *base,
                  const float *scale, const float *norm, int64_t n, ms_err *err) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t nh = hp->n_hc, w = nh * hp->n_embd, nmix = (2 + nh) * nh;
    for_tokens(s, n, hc_flat, NULL);
    if (mm(s, fn, s->sc.flat, w, n, s->sc.mix, nmix, err)) return -1;
    const struct hc_args a = {base, scale, norm};
    for_tokens(s, n, hc_mix, &a);
    return 0;
}

/* HC-post: X'_d = post_d * f + sum_s C[d][s] X_s; f = sc->a. */
static void hc_post_tokens(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    (void)arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, nh = hp->n_hc, w = nh * D;
    for (int64_t t = t0; t < t1; t++) {
        float *X = sc->X + t * w, *old = sc->flat + t * w;
        const float *f = sc->a + t * D, *post = sc->post + t * nh, *C = sc->comb + t * nh * nh;
        memcpy(old, X, (size_t)w * sizeof(float));
        for (int64_t d = 0; d < nh; d++) {
            for (int64_t i = 0; i < D; i++) {
                float acc = post[d] * f[i];
                for (int64_t k = 0; k < nh; k++) acc += C[d + nh * k] * old[k * D + i];
                X[d * D + i] = acc;
            }
        }
    }
}

static void hc_post(struct dsv4_session *s, int64_t n) { for_tokens(s, n, hc_post_tokens, NULL); }

/* ---- attention (SPEC 3.5) ---------------------------------------------- */

/* Emits compressed row m of a compressor with output width dc from its
 * frontier (slot = position % S), then RMSNorm with `norm` and tail RoPE at
 * the block's first position r*m. p is the position that completes block m. */
static void compressor_emit(const float *fa, const float *fb, int64_t S, int64_t dc, uint32_t r,
                            int64_t p, const float *norm, float eps,
                            const struct ms_rope_params *rp, float *row) {
    const int64_t W = (r == 4 ? 2 : 1) * dc; /* frontier row width */
    const int64_t m = (p + 1) / r - 1;
    for (int64_t c = 0; c < dc; c++) {
        float sc[128], va[128];
        int nc = 0;
        if (r == 4) {
            /* previous window: first halves; current window: second halves */
            for (int64_t q = p - 7; q <= p; q++) {
                if (q < 0) continue;
                const int64_t slot = q % S, off = q <= p - 4 ? 0 : dc;
                sc[nc] = fb[slot * W + off + c];
                va[nc++] = fa[slot * W + off + c];
            }
        } else {
            for (int64_t q = p + 1 - r; q <= p; q++) {
                const int64_t slot = q % S;
                sc[nc] = fb[slot * W + c];
                va[nc++] = fa[slot * W + c];
            }
        }
        float mx = -INFINITY;
        for (int j = 0; j < nc; j++) mx = fmaxf(mx, sc[j]);
        float den = 0.0f, num = 0.0f;
        for (int j = 0; j < nc; j++) {
            const float e = expf(sc[j] - mx);
            den += e;
            num += e * va[j];
        }
        row[c] = num / den;
    }
    ms_rmsnorm(row, row, norm, dc, eps);
    ms_rope_tail(row, dc, (int64_t)r * m, rp, false);
}

/* Attention of the ubatch's tokens over the layer state. The keys of
 * positions before the ubatch come from the sliding-window ring st->raw,
 * those of the ubatch itself from sc->kv (the ring gets them only after
 * every token has attended, so none is overwritten early); compressed rows
 * are all emitted before, and token t sees the n_comp[t] its position
 * completes. So tokens are independent and run in parallel. */
struct attn_job {
    struct dsv4_session *s;
    const struct dsv4_layer_state *st;
    uint32_t ratio;
    const int64_t *n_comp; /* [n] compressed rows visible to each token */
    const float *sinks; /* [H] this layer's sink logits */
    int64_t t;          /* one-token jobs (split by heads): the token */
};

/* Key (= value) row of position q for token t's attention. */
static inline const float *attn_key(const struct attn_job *j, int64_t q) {
    const struct dsv4_session *s = j->s;
    const int64_t d = s->m->hp.n_embd_head;
    if (q >= s->n_past) return s->sc.kv + (q - s->n_past) * d;
    return j->st->raw + (q % (int64_t)s->m->hp.n_swa) * d;
}

/* Sink softmax attention of heads [h0, h1) of token t (SPEC 3.5, "Attention
 * core"), then inverse RoPE of each head's output at the query position.
 * sel: ratio 4, the compressed rows the indexer kept (NULL: all). score:
 * this thread's [n_swa + comp_cap] scratch. */
static void attn_token_heads(const struct attn_job *j, int64_t t, int64_t h0, int64_t h1,
                             const uint8_t *sel, float *score) {
    const struct dsv4_session *s = j->s;
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t d = hp->n_embd_head, n_swa = hp->n_swa, H = hp->n_head;
    const int64_t p = s->n_past + t, n_comp = j->n_comp[t];
    const float kq_scale = 1.0f / sqrtf((float)d);
    const int64_t lo = p - n_swa + 1 > 0 ? p - n_swa + 1 : 0;
    const struct ms_rope_params rp = rope_params(hp, j->ratio);
    for (int64_t h = h0; h < h1; h++) {
        const float *q = s->sc.q + (t * H + h) * d;
        float *o = s->sc.o + (t * H + h) * d;
        int ns = 0;
        float mx = -INFINITY;
        for (int64_t q_pos = lo; q_pos <= p; q_pos++) {
            score[ns] = ms_vec_dot(d, q, attn_key(j, q_pos)) * kq_scale;
            mx = fmaxf(mx, score[ns++]);
        }
        for (int64_t m = 0; m < n_comp; m++) {
            if (sel && !sel[m]) continue;
            score[ns] = ms_vec_dot(d, q, j->st->comp + m * d) * kq_scale;
            mx = fmaxf(mx, score[ns++]);
        }
        const float sink = j->sinks[h];
        mx = fmaxf(mx, sink);
        float den = expf(sink - mx);
        memset(o, 0, (size_t)d * sizeof(float));
        int js = 0;
        for (int64_t q_pos = lo; q_pos <= p; q_pos++, js++) {
            const float w = expf(score[js] - mx);
            den += w;
            ms_vec_axpy(d, w, attn_key(j, q_pos), o);
        }
        for (int64_t m = 0; m < n_comp; m++) {
            if (sel && !sel[m]) continue;
            const float w = expf(score[js++] - mx);
            den += w;
            ms_vec_axpy(d, w, j->st->comp + m * d, o);
        }
        const float inv = 1.0f / den;
        for (int64_t i = 0; i < d; i++) o[i] *= inv;
        ms_rope_tail(o, d, p, &rp, true);
    }
}

/* Lightning indexer (SPEC 3.5): marks in sel which of the n_comp visible
 * compressed rows token t attends to. iscore, itop, sel: this thread's
 * [comp_cap] scratch. */
static void indexer_select(const struct dsv4_session *s, const struct dsv4_layer_state *st,
                           int64_t t, int64_t n_comp, float *iscore, int *itop, uint8_t *sel) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const struct dsv4_scratch *sc = &s->sc;
    const int64_t dI = hp->indexer_head_size, HI = hp->n_indexer_head, K = hp->indexer_top_k;
    if (n_comp <= K) {
        memset(sel, 1, (size_t)n_comp);
        return;
    }
    for (int64_t m = 0; m < n_comp; m++) {
        const float *key = st->idx_keys + m * dI;
        float score = 0.0f;
        for (int64_t h = 0; h < HI; h++) {
            const float *qh = sc->iq + (t * HI + h) * dI;
            const float dot = ms_vec_dot(dI, qh, key);
            score += sc->iw[t * HI + h] * (dot > 0.0f ? dot : 0.0f);
        }
        iscore[m] = score;
    }
    ms_topk_heap(iscore, (int)n_comp, (int)K, itop);
    memset(sel, 0, (size_t)n_comp);
    for (int64_t i = 0; i < K; i++) sel[itop[i]] = 1;
}

/* Scratch of worker ith: attention scores and the indexer's buffers. */
static float *attn_scores(const struct dsv4_session *s, int ith) {
    return s->sc.att + (size_t)ith * (size_t)(s->m->hp.n_swa + s->comp_cap);
}

static const uint8_t *attn_select(const struct attn_job *j, int64_t t, int ith) {
    const struct dsv4_session *s = j->s;
    if (j->ratio != 4) return NULL;
    const size_t cc = (size_t)s->comp_cap;
    uint8_t *sel = s->sc.isel + (size_t)ith * cc;
    indexer_select(s, j->st, t, j->n_comp[t], s->sc.iscore + (size_t)ith * cc,
                   s->sc.itop + (size_t)ith * cc, sel);
    return sel;
}

/* Pool items: whole tokens (prefill). */
static void attn_tokens(void *ctx, int64_t t0, int64_t t1, int ith) {
    const struct attn_job *j = ctx;
    const int64_t H = j->s->m->hp.n_head;
    for (int64_t t = t0; t < t1; t++)
        attn_token_heads(j, t, 0, H, attn_select(j, t, ith), attn_scores(j->s, ith));
}

/* Pool items: the heads of token j->t (decode); its selection is made once
 * before, in worker 0's indexer scratch. */
static void attn_heads(void *ctx, int64_t h0, int64_t h1, int ith) {
    const struct attn_job *j = ctx;
    const uint8_t *sel = j->ratio == 4 ? j->s->sc.isel : NULL;
    attn_token_heads(j, j->t, h0, h1, sel, attn_scores(j->s, ith));
}

/* Per-token steps of the attention projections (for_tokens). */
struct qkv_args {
    const struct dsv4_layer *L;
    const struct ms_rope_params *rp, *rpc; /* this layer's RoPE; compressed rows' */
    uint32_t ratio;
};

/* qr = RMSNorm(q_a h) * q_a_norm */
static void qr_norm(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    const struct qkv_args *a = arg;
    const int64_t rq = s->m->hp.q_lora_rank;
    for (int64_t t = t0; t < t1; t++)
        ms_rmsnorm(s->sc.qr + t * rq, s->sc.qr + t * rq, a->L->t[DSV4_ATTN_Q_A_NORM].f32, rq,
                   s->m->hp.rms_eps);
}

/* per-head RMSNorm and RoPE of q; RMSNorm * kv_norm and RoPE of kv */
static void qkv_norm_rope(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    const struct qkv_args *a = arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    const int64_t d = hp->n_embd_head, H = hp->n_head;
    const float eps = hp->rms_eps;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t p = s->n_past + t;
        for (int64_t h = 0; h < H; h++) {
            float *qh = s->sc.q + (t * H + h) * d;
            ms_rmsnorm(qh, qh, NULL, d, eps);
            ms_rope_tail(qh, d, p, a->rp, false);
        }
        float *kv = s->sc.kv + t * d;
        ms_rmsnorm(kv, kv, a->L->t[DSV4_ATTN_KV_A_NORM].f32, d, eps);
        ms_rope_tail(kv, d, p, a->rp, false);
    }
}

/* Compressed layers: ape added to the gate branches (row p mod r); ratio 4:
 * indexer query RoPE and head-weight scale. */
static void comp_ape_rope(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    const struct qkv_args *a = arg;
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const uint32_t r = a->ratio;
    const int64_t d = hp->n_embd_head, dI = hp->indexer_head_size, HI = hp->n_indexer_head;
    const int64_t Wc = (r == 4 ? 2 : 1) * d, Wi = 2 * dI;
    const float wscale = 1.0f / sqrtf((float)(dI * HI));
    for (int64_t t = t0; t < t1; t++) {
        const int64_t p = s->n_past + t;
        const float *ape = a->L->t[DSV4_ATTN_COMP_APE].f32 + (p % r) * Wc;
        for (int64_t i = 0; i < Wc; i++) sc->cb[t * Wc + i] += ape[i];
        if (r != 4) continue;
        const float *iape = a->L->t[DSV4_IDX_COMP_APE].f32 + (p % 4) * Wi;
        for (int64_t i = 0; i < Wi; i++) sc->cib[t * Wi + i] += iape[i];
        for (int64_t h = 0; h < HI; h++) {
            ms_rope_tail(sc->iq + (t * HI + h) * dI, dI, p, a->rpc, false);
            sc->iw[t * HI + h] *= wscale;
        }
    }
}

static int attention(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    const struct dsv4_layer *L = &m->layers[il];
    struct dsv4_layer_state *st = &s->ls[il];
    struct dsv4_scratch *sc = &s->sc;
    const uint32_t r = L->ratio;
    const int64_t D = hp->n_embd, d = hp->n_embd_head, H = hp->n_head, rq = hp->q_lora_rank;
    const int64_t n_swa = hp->n_swa, G = hp->n_out_group, ro = hp->o_lora_rank;
    const int64_t dI = hp->indexer_head_size, HI = hp->n_indexer_head;
    const struct ms_rope_params rp = rope_params(hp, r);
    const struct ms_rope_params rpc = rope_params(hp, r ? r : 4); /* compressed rows */
    const float eps = hp->rms_eps;

    /* Queries: qr = RMSNorm(q_a h) * q_a_norm; q = q_b qr, per-head RMSNorm, RoPE. */
    const struct qkv_args qa = {L, &rp, &rpc, r};
    if (mm(s, &L->t[DSV4_ATTN_Q_A], sc->h, D, n, sc->qr, rq, err)) return -1;
    for_tokens(s, n, qr_norm, &qa);
    if (mm(s, &L->t[DSV4_ATTN_Q_B], sc->qr, rq, n, sc->q, H * d, err)) return -1;
    /* Key = value: kv = RMSNorm(kv h) * kv_norm, RoPE. */
    if (mm(s, &L->t[DSV4_ATTN_KV], sc->h, D, n, sc->kv, d, err)) return -1;
    for_tokens(s, n, qkv_norm_rope, &qa);

    /* Compressor (and indexer) projections for all tokens; ape goes to the
     * gate branch, row p mod r. */
    const int64_t Wc = (r == 4 ? 2 : 1) * d, Wi = 2 * dI;
    if (r) {
        if (mm(s, &L->t[DSV4_ATTN_COMP_KV], sc->h, D, n, sc->ca, Wc, err)) return -1;
        if (mm(s, &L->t[DSV4_ATTN_COMP_GATE], sc->h, D, n, sc->cb, Wc, err)) return -1;
    }
    if (r == 4) {
        if (mm(s, &L->t[DSV4_IDX_COMP_KV], sc->h, D, n, sc->cia, Wi, err)) return -1;
        if (mm(s, &L->t[DSV4_IDX_COMP_GATE], sc->h, D, n, sc->cib, Wi, err)) return -1;
        if (mm(s, &L->t[DSV4_IDX_ATTN_Q_B], sc->qr, rq, n, sc->iq, HI * dI, err)) return -1;
        if (mm(s, &L->t[DSV4_IDX_PROJ], sc->h, D, n, sc->iw, HI, err)) return -1;
    }
    if (r) for_tokens(s, n, comp_ape_rope, &qa);

    /* State first, in position order: compressor frontiers and the
     * compressed rows the ubatch completes (token t sees n_comp[t]). */
    const int64_t S = r == 4 ? 8 : 128;
    int64_t *n_comp = sc->tcomp;
    for (int64_t t = 0; t < n; t++) {
        const int64_t p = s->n_past + t;
        if (r) {
            memcpy(st->fa + (p % S) * Wc, sc->ca + t * Wc, (size_t)Wc * sizeof(float));
            memcpy(st->fb + (p % S) * Wc, sc->cb + t * Wc, (size_t)Wc * sizeof(float));
            if (r == 4) {
                memcpy(st->ia + (p % S) * Wi, sc->cia + t * Wi, (size_t)Wi * sizeof(float));
                memcpy(st->ib + (p % S) * Wi, sc->cib + t * Wi, (size_t)Wi * sizeof(float));
            }
            if ((p + 1) % r == 0) {
                compressor_emit(st->fa, st->fb, S, d, r, p, L->t[DSV4_ATTN_COMP_NORM].f32, eps,
                                &rpc, st->comp + st->n_comp * d);
                if (r == 4)
                    compressor_emit(st->ia, st->ib, S, dI, r, p, L->t[DSV4_IDX_COMP_NORM].f32,
                                    eps, &rpc, st->idx_keys + st->n_comp * dI);
                st->n_comp++;
            }
        }
        n_comp[t] = r ? st->n_comp : 0;
    }
    struct attn_job job = {.s = s, .st = st, .ratio = r, .n_comp = n_comp,
                           .sinks = L->t[DSV4_ATTN_SINKS].f32};
    if (n == 1) {
        attn_select(&job, 0, 0);
        ms_pool_for(s->p.pool, H, 1, attn_heads, &job);
    } else {
        ms_pool_for_each(s->p.pool, n, attn_tokens, &job);
    }
    /* the ring keeps the last n_swa positions */
    for (int64_t t = n > n_swa ? n - n_swa : 0; t < n; t++)
        memcpy(st->raw + ((s->n_past + t) % n_swa) * d, sc->kv + t * d, (size_t)d * sizeof(float));

    /* Grouped output projection: u_g = Wa_g O_g, then a = Wb u. */
    const int64_t gw = H * d / G;
    for (int64_t g = 0; g < G; g++) {
        struct dsv4_tensor wa = L->t[DSV4_ATTN_OUTPUT_A];
        wa.mat.data = (const char *)wa.mat.data + (size_t)(g * ro) * wa.mat.row_stride;
        wa.mat.n_rows = ro;
        if (mm(s, &wa, sc->o + g * gw, H * d, n, sc->u + g * ro, G * ro, err)) return -1;
    }
    return mm(s, &L->t[DSV4_ATTN_OUTPUT_B], sc->u, G * ro, n, sc->a, D, err);
}

/* ---- MoE (SPEC 3.6) ----------------------------------------------------- */

/* One routed expert over its gathered rows [r0, r0 + rows) of eh/eg/eu
 * (token ids in etok, slots in eslot): clamped SwiGLU, down projection and
 * the router weight; the result goes to the (token, slot) rows of sc->eo.
 * Experts own disjoint row ranges, so several can run at once, each with its
 * own matmul context. */
static int expert_ffn(struct dsv4_session *s, struct ms_matmul_ctx *mc, uint32_t il,
                      const struct dsv4_expert_view *v, int64_t r0, int64_t rows, ms_err *err) {
    const struct dsv4_hparams *hp = &s->m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, k = hp->n_expert_used, F = hp->n_ff_exp;
    const bool exact = s->p.quality;
    float *eh = sc->eh + r0 * D, *eg = sc->eg + r0 * F, *eu = sc->eu + r0 * F;
    const int32_t *etok = sc->etok + r0, *eslot = sc->eslot + r0;
    for (int64_t i = 0; i < rows; i++)
        memcpy(eh + i * D, sc->h + (int64_t)etok[i] * D, (size_t)D * sizeof(float));
    if (ms_matmul(mc, &v->gate, eh, D, rows, eg, F, exact, err) ||
        ms_matmul(mc, &v->up, eh, D, rows, eu, F, exact, err))
        return -1;
    for (int64_t i = 0; i < rows; i++)
        ms_swiglu_clamped(eg + i * F, eg + i * F, eu + i * F, F, hp->swiglu_clamp_exp[il]);
    /* down: into eh (free now), then scaled into the (token, slot) row */
    if (ms_matmul(mc, &v->down, eg, F, rows, eh, D, exact, err)) return -1;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t t = etok[i], j = eslot[i];
        const float w = sc->selw[t * k + j];
        float *dst = sc->eo + (t * k + j) * D;
        for (int64_t c = 0; c < D; c++) dst[c] = w * eh[i * D + c];
    }
    return 0;
}

/* A group of acquired experts run in parallel, one expert per thread at a
 * time (each with its own single-threaded matmul context), largest first. */
struct expert_job {
    struct dsv4_session *s;
    uint32_t il;
    const struct dsv4_expert_view *views; /* [ng] */
    const int32_t *order;                 /* [ng] group indices, most rows first */
    const int32_t *u0;                    /* [ng] index of each in used[]/eoff[] */
    _Atomic int failed;
    ms_err *errs;                         /* [n_threads] */
};

static void expert_task(void *ctx, int64_t b, int64_t e, int ith) {
    struct expert_job *j = ctx;
    struct dsv4_session *s = j->s;
    for (int64_t i = b; i < e && !atomic_load_explicit(&j->failed, memory_order_relaxed); i++) {
        const int32_t g = j->order[i], u = j->u0[g];
        const int64_t r0 = s->sc.eoff[u], rows = s->sc.eoff[u + 1] - r0;
        if (expert_ffn(s, &s->mm_thread[ith], j->il, &j->views[g], r0, rows, &j->errs[ith]))
            atomic_store(&j->failed, ith + 1);
    }
}

/* Runs experts used[g0 .. g0 + ng) (acquired, views in sc->views). With
 * at least two experts per thread, each thread takes whole experts: one
 * hand-off per expert instead of three row-split matmuls, and no thread
 * waits on another between an expert's matmuls. With fewer (a decode step
 * on a many-core machine: 6 experts), each matmul's rows are split across
 * the pool instead. Every output element is the same dot call either way,
 * so both give identical results. */
static int run_experts(struct dsv4_session *s, uint32_t il, int g0, int ng, ms_err *err) {
    struct dsv4_scratch *sc = &s->sc;
    const int nt = ms_pool_n_threads(s->p.pool);
    if (nt <= 1 || ng < 2 * nt || !s->mm_thread) {
        for (int g = 0; g < ng; g++) {
            const int64_t r0 = sc->eoff[g0 + g], rows = sc->eoff[g0 + g + 1] - r0;
            if (expert_ffn(s, &s->mm, il, &sc->views[g], r0, rows, err)) return -1;
        }
        return 0;
    }
    int32_t *order = sc->eorder, *u0 = sc->eorder + ng;
    for (int g = 0; g < ng; g++) {
        const int64_t rows = sc->eoff[g0 + g + 1] - sc->eoff[g0 + g];
        int i = g;
        for (; i > 0 && sc->eoff[g0 + order[i - 1] + 1] - sc->eoff[g0 + order[i - 1]] < rows; i--)
            order[i] = order[i - 1];
        order[i] = g;
        u0[g] = g0 + g;
    }
    struct expert_job j = {.s = s, .il = il, .views = sc->views, .order = order, .u0 = u0,
                           .errs = sc->eerr};
    atomic_init(&j.failed, 0);
    ms_pool_for_each(s->p.pool, ng, expert_task, &j);
    const int failed = atomic_load(&j.failed);
    if (failed) {
        *err = sc->eerr[failed - 1];
        return -1;
    }
    return 0;
}

/* Tells the expert source the distinct experts of the ubatch's last
 * DSV4_TAIL_TOKENS tokens, last token first (it may seed its decode cache
 * with them). sc->used is free until the gathering below. */
static int tail_routed(struct dsv4_session *s, uint32_t il, int64_t n, ms_err *err) {
    const struct dsv4_model *m = s->m;
    const int64_t k = m->hp.n_expert_used;
    int32_t *ids = s->sc.used;
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
 * previous layer's FFN input sc->h, which is close to layer il's (the
 * residual stream changes little per layer; accuracy measured in
 * stream/expert_source.h). sc->router, biased, topidx and eorder are free
 * between routing and the first run_experts. */
static int prefetch_next(struct dsv4_session *s, uint32_t il, const int32_t *tokens,
                         ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_layer *L = &m->layers[il];
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = m->hp.n_embd, E = m->hp.n_expert, k = m->hp.n_expert_used;
    int32_t *ids = sc->eorder;
    if (il < m->hp.n_hash_layer) {
        memcpy(ids, L->t[DSV4_FFN_GATE_TID2EID].i32 + (int64_t)tokens[0] * k,
               (size_t)k * sizeof *ids);
    } else {
        if (mm(s, &L->t[DSV4_FFN_GATE_INP], sc->h, D, 1, sc->router, E, err)) return -1;
        const float *bias = L->t[DSV4_EXP_PROBS_B].f32;
        for (int64_t e = 0; e < E; e++)
            sc->biased[e] = sqrtf(ms_softplus(sc->router[e])) + bias[e];
        ms_topk_heap(sc->biased, (int)E, (int)k, sc->topidx);
        for (int64_t j = 0; j < k; j++) ids[j] = sc->topidx[j];
    }
    return m->experts.prefetch(m->experts.ctx, il, ids, (int)k, err);
}

/* Shared expert's clamped SwiGLU, in place in sc->sg; arg: the layer. */
static void shexp_swiglu(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    const struct dsv4_hparams *hp = &s->m->hp;
    const uint32_t il = *(const uint32_t *)arg;
    const int64_t Fs = (int64_t)hp->n_ff_exp * hp->n_expert_shared;
    for (int64_t t = t0; t < t1; t++)
        ms_swiglu_clamped(s->sc.sg + t * Fs, s->sc.sg + t * Fs, s->sc.su + t * Fs, Fs,
                          hp->swiglu_clamp_shexp[il]);
}

/* sc->a (shared expert) += the routed slots' outputs, in slot order. */
static void moe_sum(struct dsv4_session *s, int64_t t0, int64_t t1, const void *arg) {
    (void)arg;
    const int64_t D = s->m->hp.n_embd, k = s->m->hp.n_expert_used;
    for (int64_t t = t0; t < t1; t++) {
        float *a = s->sc.a + t * D;
        for (int64_t c = 0; c < D; c++) {
            float routed = 0.0f;
            for (int64_t j = 0; j < k; j++) routed += s->sc.eo[(t * k + j) * D + c];
            a[c] += routed;
        }
    }
}

static int moe(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
               ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    const struct dsv4_layer *L = &m->layers[il];
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    const int64_t F = hp->n_ff_exp, Fs = F * hp->n_expert_shared;
    const bool hash = il < hp->n_hash_layer;

    /* Router: pi_e = sqrt(softplus(l_e)); the bias only picks, pi weighs. */
    if (mm(s, &L->t[DSV4_FFN_GATE_INP], sc->h, D, n, sc->router, E, err)) return -1;
    for (int64_t t = 0; t < n; t++) {
        float *pi = sc->router + t * E;
        int32_t *sel = sc->sel + t * k;
        float *w = sc->selw + t * k;
        for (int64_t e = 0; e < E; e++) pi[e] = sqrtf(ms_softplus(pi[e]));
        if (hash) {
            memcpy(sel, L->t[DSV4_FFN_GATE_TID2EID].i32 + (int64_t)tokens[t] * k,
                   (size_t)k * sizeof(int32_t));
        } else {
            float *biased = sc->biased;
            int *idx = sc->topidx;
            const float *bias = L->t[DSV4_EXP_PROBS_B].f32;
            for (int64_t e = 0; e < E; e++) biased[e] = pi[e] + bias[e];
            ms_topk_heap(biased, (int)E, (int)k, idx);
            /* slot order: best first (fixes the summation order) */
            for (int64_t a = 1; a < k; a++)
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
    if (m->experts.tail_routed && tail_routed(s, il, n, err)) return -1;

    /* Experts: each used expert's rows (token, slot) gathered in expert
     * order, so expert u owns rows [eoff[u], eoff[u + 1]) of eh/eg/eu. */
    int32_t *used = sc->used, *eidx = sc->eidx;
    int n_used = 0;
    for (int64_t e = 0; e < E; e++) eidx[e] = -1;
    for (int64_t i = 0; i < n * k; i++)
        if (eidx[sc->sel[i]] < 0) eidx[sc->sel[i]] = 0;
    for (int64_t e = 0; e < E; e++)
        if (eidx[e] == 0) {
            eidx[e] = n_used;
            used[n_used++] = (int32_t)e;
        }
    int64_t *eoff = sc->eoff;
    for (int u = 0; u <= n_used; u++) eoff[u] = 0;
    for (int64_t i = 0; i < n * k; i++) eoff[eidx[sc->sel[i]] + 1]++;
    for (int u = 0; u < n_used; u++) eoff[u + 1] += eoff[u];
    for (int64_t t = 0; t < n; t++) /* token order within an expert, as before */
        for (int64_t j = 0; j < k; j++) {
            const int64_t r = eoff[eidx[sc->sel[t * k + j]]]++;
            sc->etok[r] = (int32_t)t;
            sc->eslot[r] = (int32_t)j;
        }
    for (int u = n_used; u > 0; u--) eoff[u] = eoff[u - 1]; /* back to starts */
    eoff[0] = 0;
    /* Acquired in groups the expert source can hold at once (all of them
     * when resident); each group is computed, then released. */
    const int group = m->experts.max_per_acquire > 0 ? m->experts.max_per_acquire : n_used;
    for (int g0 = 0; g0 < n_used; g0 += group) {
        const int ng = n_used - g0 < group ? n_used - g0 : group;
        if (m->experts.acquire(m->experts.ctx, il, used + g0, ng, sc->views, err)) return -1;
        int rc = 0;
        /* decode: with this layer's experts pinned, start the next layer's */
        if (g0 == 0 && n == 1 && m->experts.prefetch && il + 1 < m->n_layer)
            rc = prefetch_next(s, il + 1, tokens, err);
        if (!rc) rc = run_experts(s, il, g0, ng, err);
        m->experts.release(m->experts.ctx, il, used + g0, ng);
        if (rc) return -1;
    }

    /* Shared expert, then routed slots added in slot order. */
    if (mm(s, &L->t[DSV4_FFN_GATE_SHEXP], sc->h, D, n, sc->sg, Fs, err) ||
        mm(s, &L->t[DSV4_FFN_UP_SHEXP], sc->h, D, n, sc->su, Fs, err))
        return -1;
    for_tokens(s, n, shexp_swiglu, &il);
    if (mm(s, &L->t[DSV4_FFN_DOWN_SHEXP], sc->sg, Fs, n, sc->a, D, err)) return -1;
    for_tokens(s, n, moe_sum, NULL);
    return 0;
}

/* ---- the whole model ---------------------------------------------------- */

static int layer_forward(struct dsv4_session *s, uint32_t il, const int32_t *tokens, int64_t n,
                         ms_err *err) {
    const struct dsv4_layer *L = &s->m->layers[il];
    if (hc_pre(s, &L->t[DSV4_HC_ATTN_FN], L->t[DSV4_HC_ATTN_BASE].f32,
               L->t[DSV4_HC_ATTN_SCALE].f32, L->t[DSV4_ATTN_NORM].f32, n, err))
        return -1;
    if (attention(s, il, n, err)) return -1;
    hc_post(s, n);

    if (hc_pre(s, &L->t[DSV4_HC_FFN_FN], L->t[DSV4_HC_FFN_BASE].f32, L->t[DSV4_HC_FFN_SCALE].f32,
               L->t[DSV4_FFN_NORM].f32, n, err))
        return -1;
    if (moe(s, il, tokens, n, err)) return -1;
    hc_post(s, n);
    return 0;
}

/* HC-head, output norm and LM head for tokens [t0, n): logits rows into out
 * (ld n_vocab). */
static int output_head(struct dsv4_session *s, int64_t t0, int64_t n, float *out, ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    struct dsv4_scratch *sc = &s->sc;
    const int64_t D = hp->n_embd, nh = hp->n_hc, w = nh * D;
    const int64_t cnt = n - t0;
    for (int64_t t = t0; t < n; t++) ms_rmsnorm(sc->flat + t * w, sc->X + t * w, NULL, w, hp->rms_eps);
    if (mm(s, &m->glob[DSV4_OUTPUT_HC_FN], sc->flat + t0 * w, w, cnt, sc->mix, nh, err))
        return -1;
    const float *base = m->glob[DSV4_OUTPUT_HC_BASE].f32, *scale = m->glob[DSV4_OUTPUT_HC_SCALE].f32;
    for (int64_t i = 0; i < cnt; i++) {
        const float *X = sc->X + (t0 + i) * w;
        float ws[DSV4_N_HC];
        for (int64_t k = 0; k < nh; k++)
            ws[k] = sigmoidf(sc->mix[i * nh + k] * scale[0] + base[k]) + hp->hc_eps;
        float *y = sc->h + i * D;
        for (int64_t c = 0; c < D; c++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < nh; k++) acc += ws[k] * X[k * D + c];
            y[c] = acc;
        }
        ms_rmsnorm(y, y, m->glob[DSV4_OUTPUT_NORM].f32, D, hp->rms_eps);
    }
    return mm(s, &m->glob[DSV4_OUTPUT], sc->h, D, cnt, out, (int64_t)hp->n_vocab, err);
}

int dsv4_forward(struct dsv4_session *s, const int32_t *tokens, int64_t n, float *logits,
                 ms_err *err) {
    const struct dsv4_model *m = s->m;
    const struct dsv4_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, nh = hp->n_hc, V = hp->n_vocab;
    const struct dsv4_tensor *emb = &m->glob[DSV4_TOKEN_EMBD];
    const struct ms_type_traits *et = ms_type_traits(emb->mat.type);
    for (int64_t t = 0; t < n; t++) {
        float *X = s->sc.X + t * nh * D;
        et->to_float((const char *)emb->mat.data + (size_t)tokens[t] * emb->mat.row_stride, X, D);
        for (int64_t k = 1; k < nh; k++) memcpy(X + k * D, X, (size_t)D * sizeof(float));
    }
    for (uint32_t il = 0; il < m->n_layer; il++) {
        /* the expert source starts this layer's reads (and the next's) now,
         * so they overlap this layer's attention */
        if (m->experts.prepare && m->experts.prepare(m->experts.ctx, il, tokens, n, err))
            return ms_err_prefix(err, "layer %u", il);
        if (layer_forward(s, il, tokens, n, err)) return ms_err_prefix(err, "layer %u", il);
    }
    if (logits) {
        if (output_head(s, 0, n, logits, err)) return -1;
        memcpy(s->logits, logits + (n - 1) * V, (size_t)V * sizeof(float));
    } else if (output_head(s, n - 1, n, s->logits, err)) {
        return -1;
    }
    return 0;
}
