/*
 * matmul.h - quantized-weight x f32-activation matrix products, batched over
 * tokens and split by output rows across the thread pool.
 *
 * Each product takes its activations in one of three forms (enum ms_act,
 * docs/model.md "Numerics and modes"): converted once per call to the weight
 * format's vec_dot_type (Q8_0, Q8_K, F16 ... as ggml does) for integer/half
 * dot products; f32 as given (exact math on the stored weights: quality
 * mode); or 16-bit integers (Q16_0) for fast mode's accuracy-sensitive dense
 * products.
 */
#ifndef MS_KERNELS_MATMUL_H
#define MS_KERNELS_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"
#include "util/err.h"
#include "util/pool.h"

/* Per-session matmul context: the pool and a growable scratch buffer for
 * converted activations (one context per concurrent caller). */
struct ms_matmul_ctx {
    struct ms_pool *pool; /* may be NULL: single-threaded */
    void *scratch;
    size_t scratch_cap;
    void *chunks;       /* ms_matmul_multi's work list (matmul.c) */
    size_t chunks_cap;  /* entries it holds */
    void *fmts;         /* ms_matmul_multi's per-op activation formats (matmul.c) */
    size_t fmts_cap;    /* ops they hold */
};

void ms_matmul_ctx_free(struct ms_matmul_ctx *c);

/* The activations a product's dot products take. */
enum ms_act {
    MS_ACT_QUANT = 0, /* converted to the weight type's vec_dot_type (fast mode) */
    MS_ACT_F32 = 1,   /* f32 as given: exact math on the stored weights */
    MS_ACT_Q16 = 2,   /* 16-bit integers per 32-element block (block_q16_0) where
                       * the weight type has dots for them (Q8_0), else f32 */
};

/* A weight matrix: n_rows rows of n_cols elements in `type`, row r at
 * data + r * row_stride bytes. */
struct ms_mat {
    const void *data;
    enum ms_type type;
    int64_t n_rows, n_cols;
    size_t row_stride;
};

/*
 * Y[t][r] = sum_c W[r][c] * X[t][c] for t < n_tok, r < W.n_rows.
 * X: [n_tok][ldx] f32 (ldx >= n_cols), Y: [n_tok][ldy] f32 (ldy >= n_rows).
 * act: the form the dot products take the activations in (enum ms_act).
 * Returns 0, or -1 (OOM for the scratch, or a type without kernels).
 */
int ms_matmul(struct ms_matmul_ctx *c, const struct ms_mat *w, const float *x, int64_t ldx,
              int64_t n_tok, float *y, int64_t ldy, enum ms_act act, ms_err *err);

/* Called by ms_matmul_multi once rows [r0, r1) of an op's outputs (y and,
 * with a pair, y2) are final for every token, on the thread that computed
 * them (the caller, for a pair in two types); arg is the op's done_arg.
 * Ranges of one op are disjoint and cover
 * its rows; several run at once on different threads. */
typedef void (*ms_mm_done_fn)(void *arg, int64_t r0, int64_t r1);

/* One product of a fused call: y = w x as in ms_matmul (x [n_tok][ldx],
 * y [n_tok][ldy]); with w2 (same shape as w), also y2 = w2 x, row by row
 * beside y (a gate/up pair: the done callback then sees both rows, e.g. to
 * apply SwiGLU in place). A pair in two types runs as two products, its
 * done callback once over all rows after both. */
struct ms_mm_op {
    const struct ms_mat *w, *w2; /* w2 may be NULL */
    const float *x;
    int64_t ldx, n_tok;
    float *y, *y2;
    int64_t ldy;
    enum ms_act act;
    ms_mm_done_fn done; /* may be NULL */
    void *done_arg;
};

/*
 * Runs ops[0 .. n_ops) as ONE pool job (one hand-off and one wait), their
 * output rows cut into chunks of similar cost handed to whichever thread is
 * free: independent products of a decode step (the projections that read
 * the same input, a MoE layer's experts) cost one synchronisation instead
 * of one each, and a few experts still spread over many threads by rows.
 * Every output element is the dot call ms_matmul makes for it, so results
 * equal separate ms_matmul calls bit for bit. Activations shared by several
 * ops (same x, ldx, n_tok, columns and converted format) are converted
 * once. The ops' outputs must not overlap each other or any
 * op's input. Returns 0, or -1 (OOM, or a type without kernels: then no op
 * has run).
 */
int ms_matmul_multi(struct ms_matmul_ctx *c, const struct ms_mm_op *ops, int n_ops,
                    ms_err *err);

#endif
