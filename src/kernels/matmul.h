/*
 * matmul.h - quantized-weight x f32-activation matrix products, batched over
 * tokens and split by output rows across the thread pool.
 *
 * Two modes (docs/model.md, "Numerics and modes"): fast, where the activations
 * are converted once per call to the weight format's vec_dot_type (Q8_0,
 * Q8_K, F16 ... as ggml does) and integer/half dot products run; and quality,
 * where every dot product is taken against the f32 activations (exact math
 * on the stored weights).
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
};

void ms_matmul_ctx_free(struct ms_matmul_ctx *c);

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
 * exact: dot products against the f32 activations (quality mode) instead of
 * activations converted to the weight's vec_dot_type (fast mode).
 * Returns 0, or -1 (OOM for the scratch, or a type without kernels).
 */
int ms_matmul(struct ms_matmul_ctx *c, const struct ms_mat *w, const float *x, int64_t ldx,
              int64_t n_tok, float *y, int64_t ldy, bool exact, ms_err *err);

#endif
