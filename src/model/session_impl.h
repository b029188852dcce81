/*
 * session_impl.h - internal: the session's state and scratch, shared by
 * session.c (state, eval loop, snapshots) and forward.c (the layer math).
 */
#ifndef MS_MODEL_SESSION_IMPL_H
#define MS_MODEL_SESSION_IMPL_H

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/session.h"

/* Attention state of one layer (SPEC 4.1). */
struct dsv4_layer_state {
    float *raw;      /* [n_swa][d]: kv row of position p at slot p % n_swa */
    float *comp;     /* [comp_cap][d]: compressed rows (ratio != 0) */
    float *idx_keys; /* [comp_cap][d_I]: indexer keys (ratio 4) */
    int64_t n_comp;  /* rows emitted so far */
    float *fa, *fb;  /* [S][coff*d] compressor frontier (kv, gate+ape) */
    float *ia, *ib;  /* [S][2*d_I] indexer compressor frontier (ratio 4) */
};

/* Scratch for one ubatch of up to n_ubatch tokens. */
struct dsv4_scratch {
    float *X;      /* [n][n_hc][D] hyper-connection state */
    float *flat;   /* [n][n_hc*D] RMS-normalised state */
    float *mix;    /* [n][(2+n_hc)*n_hc] HC mix logits */
    float *pre, *post, *comb; /* [n][n_hc], [n][n_hc], [n][n_hc*n_hc] */
    float *h;      /* [n][D] sublayer input after its norm */
    float *qr;     /* [n][r_q] */
    float *q;      /* [n][H*d] */
    float *kv;     /* [n][d] */
    float *o;      /* [n][H*d] attention output per head */
    float *u;      /* [n][G*r_o] */
    float *a;      /* [n][D] sublayer output */
    float *ca, *cb;/* [n][coff*d] compressor projections */
    float *cia, *cib; /* [n][2*d_I] indexer compressor projections */
    float *iq;     /* [n][H_I*d_I] indexer queries */
    float *iw;     /* [n][H_I] indexer head weights */
    float *router; /* [n][E] */
    int32_t *sel;  /* [n][k] selected experts */
    float *selw;   /* [n][k] their weights */
    float *eo;     /* [n][k][D] weighted routed expert outputs, per slot */
    float *eh, *eg, *eu; /* [n*k][D], [n*k][F], [n*k][F]: gathered rows, by expert */
    int32_t *etok; /* [n*k] token of each gathered row; eslot: its slot */
    int32_t *eslot;
    int32_t *eidx; /* [E] index in used[] of each expert, -1 if unused */
    int64_t *eoff; /* [E+1] first gathered row of each used expert */
    int32_t *eorder; /* [2E] run order of a group of experts, and scratch */
    ms_err *eerr;  /* [n_threads] errors of parallel expert runs */
    float *sg, *su;/* [n][F*n_shared] shared expert */
    float *att;    /* [n_threads][n_swa + comp_cap] attention scores */
    float *iscore; /* [n_threads][comp_cap] indexer scores */
    int *itop;     /* [n_threads][comp_cap] top-k scratch */
    uint8_t *isel; /* [n_threads][comp_cap] selected-row flags */
    int64_t *tcomp; /* [n] compressed rows visible to each token */
    float *biased; /* [E] router scores + selection bias */
    int *topidx;   /* [E] top-k scratch */
    int32_t *used; /* [E] experts used by the ubatch */
    struct dsv4_expert_view *views; /* [E] */
};

struct dsv4_session {
    const struct dsv4_model *m;
    struct dsv4_session_params p;
    int64_t n_past;
    int32_t *tokens;         /* [n_ctx] */
    float *logits;           /* [n_vocab] of the last position */
    bool has_logits;
    int64_t comp_cap;        /* max compressed rows per layer (ratio 4) */
    struct dsv4_layer_state *ls; /* [n_layer] */
    struct dsv4_scratch sc;
    int64_t sc_cap;          /* tokens the scratch holds */
    struct ms_matmul_ctx mm;
    struct ms_matmul_ctx *mm_thread; /* [n_threads]: single-threaded, one per worker */
};

/* Runs every layer and the requested heads over tokens[0..n) at positions
 * s->n_past ...; does not advance n_past. logits: [n][n_vocab] or NULL;
 * the last token's logits always go to s->logits. (forward.c) */
int dsv4_forward(struct dsv4_session *s, const int32_t *tokens, int64_t n, float *logits,
                 ms_err *err);

#endif
