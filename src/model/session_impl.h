/*
 * session_impl.h - internal: the session's state and scratch, shared by
 * session.c (state, eval loop, snapshots) and forward.c (the layer math).
 *
 * Shape names: n tokens of the ubatch, D = n_embd, n_hc hyper-connection
 * streams, H heads of d = n_embd_head, H_I indexer heads of d_I, E experts,
 * k = n_expert_used, F = n_ff_exp, Fs = F * n_expert_shared, G output
 * groups of rank r_o, r_q = q_lora_rank.
 */
#ifndef MS_MODEL_SESSION_IMPL_H
#define MS_MODEL_SESSION_IMPL_H

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/session.h"

/* Compressor geometry of a layer of compression ratio r (0, 4 or 128): the
 * frontier holds the projections of the last coff * r positions (ratio 4
 * overlaps two windows of 4, ratio 128 one window of 128), each row
 * coff * dc wide for a compressor of output width dc. */
static inline int64_t dsv4_comp_slots(uint32_t ratio) {
    return (int64_t)dsv4_coff(ratio) * ratio;
}

/* Attention state of one layer (model.md, "state"). */
struct dsv4_layer_state {
    float *raw;      /* [n_swa][d]: kv row of position p at slot p % n_swa */
    float *comp;     /* [n_ctx / r + 1][d]: compressed rows (ratio != 0) */
    float *idx_keys; /* [n_ctx / 4 + 1][d_I]: indexer keys (ratio 4) */
    int64_t n_comp;  /* rows emitted so far */
    float *fa, *fb;  /* [coff*r][coff*d] compressor frontier (kv, gate+ape) */
    float *ia, *ib;  /* [coff*r][coff*d_I] indexer compressor frontier (ratio 4) */
};

/* Scratch for one ubatch of up to sc_cap tokens; one allocation (base),
 * laid out by scratch_layout() in session.c. The buffers marked [span]
 * hold span_cap tokens (rows span_cap * k): in a span (dsv4_forward) they
 * point at the ubatch's rows of the span while it runs. */
struct dsv4_scratch {
    void *base;
    /* hyper-connections */
    float *resid;      /* [n][n_hc][D] residual stream (hyper-connection state):
                          the ubatch's rows of the session's resid, not owned */
    float *hc_flat;    /* [n][n_hc*D] normalised residual; hc_post: the old residual */
    float *hc_mix;     /* [n][(2+n_hc)*n_hc] HC mix logits */
    float *hc_wpre;    /* [n][n_hc] pre weights */
    float *hc_wpost;   /* [span] [n][n_hc] post weights */
    float *hc_comb;    /* [span] [n][n_hc][n_hc] Sinkhorn combination matrix */
    float *sub_in;     /* [span] [n][D] sublayer input after its norm */
    float *sub_out;    /* [span] [n][D] sublayer output */
    /* attention */
    float *q_lora;     /* [n][r_q] normalised query low-rank projection */
    float *q;          /* [n][H][d] queries */
    float *kv;         /* [n][d] key = value rows */
    float *attn_out;   /* [n][H][d] attention output per head */
    float *out_lora;   /* [n][G][r_o] grouped output low-rank projection */
    float *comp_kv, *comp_gate;   /* [n][coff*d] compressor projections */
    float *icomp_kv, *icomp_gate; /* [n][2*d_I] indexer compressor projections */
    float *idx_q;      /* [n][H_I][d_I] indexer queries */
    float *idx_w;      /* [n][H_I] indexer head weights */
    int64_t *n_comp_seen; /* [n] compressed rows visible to each token */
    float *comp_window;   /* [2][max coff*r] one compressed element's scores, values */
    float *attn_score;    /* [n_threads][4][n_swa + comp_cap] attention scores of 4 heads */
    const float **attn_rows; /* [n_threads][n_swa + comp_cap] the keys a token attends to */
    float *idx_score;     /* [n_threads][comp_cap] indexer scores */
    int *idx_top;         /* [n_threads][comp_cap] top-k scratch */
    uint8_t *idx_sel;     /* [n_threads][comp_cap] selected-row flags */
    float *idx_qT;        /* [n_threads][d_I][H_I padded to 16] a token's indexer queries, transposed */
    float *idx_wp;        /* [n_threads][H_I padded to 16] its head weights (padding 0) */
    /* MoE */
    float *router;     /* [n][E] router probabilities pi */
    int32_t *sel;      /* [span] [n][k] selected experts, slot order */
    float *selw;       /* [span] [n][k] their weights */
    float *exp_out;    /* [span] [n][k][D] weighted routed expert outputs, per slot */
    float *exp_in;     /* [n*k][D] gathered rows, by expert; later the down output */
    float *exp_gate;   /* [n*k][F] */
    float *exp_up;     /* [n*k][F] */
    int32_t *row_tok;  /* [span] [n*k] token of each gathered row */
    int32_t *row_slot; /* [span] [n*k] slot of each gathered row */
    int32_t *expert_pos;  /* [E] index in used[] of each expert, -1 if unused */
    int64_t *expert_row0; /* [E+1] first gathered row of each used expert */
    int32_t *run_order;   /* [2E] run order of a group of experts, and scratch */
    ms_err *thread_err;   /* [n_threads] errors of parallel expert runs */
    float *shexp_gate, *shexp_up; /* [n][Fs] shared expert */
    float *biased;     /* [E] router probabilities + selection bias */
    int *topidx;       /* [E] top-k scratch */
    int32_t *used;     /* [E] experts used by the ubatch */
    int32_t *tail_ids; /* [DSV4_TAIL_TOKENS * k] experts of the last tokens */
    struct dsv4_expert_view *views; /* [E] */
};

/* The starts of the scratch's [span] buffers (row 0 of the span). */
struct dsv4_span_rows {
    float *hc_wpost, *hc_comb, *sub_in, *sub_out, *selw, *exp_out;
    int32_t *sel;
};

/* The state at a position inside an eval (dsv4_session_capture_at): what
 * the session would hold had the eval stopped there. The window ring and
 * frontiers are copies; the compressed rows and indexer keys are the
 * session's own (rows below n_comp are never rewritten, only appended). */
struct dsv4_capture {
    int64_t at;                  /* tokens evaluated up to it */
    float *logits;               /* [n_vocab] after position at - 1 */
    struct dsv4_layer_state *ls; /* [n_layer]: raw, fa, fb, ia, ib owned;
                                    comp, idx_keys borrowed */
};

struct dsv4_session {
    const struct dsv4_model *m;
    struct dsv4_session_params p;
    int64_t n_past;
    /* the lineage of the state: unique over the process, renewed by every
     * change that is not an append (reset, restore, load), so that a
     * snapshot of an older lineage is known stale (session.c) */
    uint64_t epoch;
    int32_t *tokens;         /* [n_ctx] */
    float *logits;           /* [n_vocab] of the last position */
    bool has_logits;
    int64_t comp_cap;        /* max compressed rows per layer (ratio 4) */
    struct dsv4_layer_state *ls; /* [n_layer] */
    struct dsv4_scratch sc;
    int64_t sc_cap;          /* tokens the scratch holds (n_ubatch) */
    int64_t span_cap;        /* tokens its [span] buffers hold (>= sc_cap) */
    struct dsv4_span_rows span;
    int64_t row_base;        /* first gathered row of the experts running now:
                                exp_in/gate/up row i holds gathered row
                                row_base + i */
    float *resid;            /* [resid_cap][n_hc][D] residual stream of a pass */
    int64_t resid_cap;       /* tokens it holds */
    int64_t pos0;            /* position of the ubatch's first token */
    bool pass_tail;          /* the ubatch holds the pass's last tokens */
    struct ms_matmul_ctx mm;
    struct ms_matmul_ctx *mm_thread; /* [n_threads]: single-threaded, one per worker */
    /* while a MoE layer runs: the shared expert's down projection, for the
     * routed experts' fused down job to take along (forward.c) */
    const struct ms_mm_op *shexp_down;
    /* progress of the eval running now (dsv4_session_set_progress):
     * token-layers of its earlier passes, and its total */
    dsv4_progress_fn progress;
    void *progress_ctx;
    int64_t progress_done, progress_total;
    /* the logits consumer (dsv4_session_set_logits_sink): positions >=
     * sink_from, through sink_buf [DSV4_SINK_ROWS][n_vocab] */
    dsv4_logits_fn sink;
    void *sink_ctx;
    int64_t sink_from;
    float *sink_buf;
    /* captures armed for the eval (dsv4_session_capture_at) */
    struct dsv4_capture *cap; /* [n_cap] by position; NULL: none */
    int n_cap;
    int cap_sent;             /* those handed to cap_fn so far */
    dsv4_capture_fn cap_fn;
    void *cap_ctx;
    /* the draft (dsv4_session_eval_draft): NULL before the first, then kept
     * for the next ones; a pointer so that dsv4_session_snapshot (const s)
     * can mark the open one as snapped */
    struct dsv4_draft *draft;
};

/* What an open draft overwrote (session.c). */
struct dsv4_draft {
    bool open;
    bool snapped;          /* a snapshot was taken while it was open */
    int64_t n0, n;         /* n_past before it, its tokens */
    const float *logits;   /* the caller's [n][n_vocab] */
    int64_t *n_comp;       /* [n_layer] compressed-row counts before it */
    size_t *off;           /* [n_layer] each layer's first float in save */
    float *save;           /* per layer [draft_max][ring row, fa, fb, ia, ib] */
};

/* Layer il has run every token before position `at` in this pass: if a
 * capture is armed there, copies the layer's state into it. (session.c) */
void dsv4_capture_layer(struct dsv4_session *s, int64_t at, uint32_t il);

/* The first capture position after position p, or INT64_MAX when none is
 * armed past it. (session.c) */
int64_t dsv4_capture_next(const struct dsv4_session *s, int64_t p);

/* One layer-major pass: runs every layer over tokens[0..n) at positions
 * s->n_past ... (n <= resid_cap), inside each layer in ubatches of
 * p.n_ubatch tokens, then the requested heads; does not advance n_past.
 * logits: [n][n_vocab] or NULL; the last token's logits always go to
 * s->logits. (forward.c) */
int dsv4_forward(struct dsv4_session *s, const int32_t *tokens, int64_t n, float *logits,
                 ms_err *err);

#endif
