/*
 * matmul.c - batched matmul over the quant traits table (see matmul.h).
 * Threads split output rows; within a thread a tile of weight rows (about
 * 128 KiB, kept in L2) is used for all tokens before moving on, so weights
 * are read from memory once per call and activations once per tile.
 *
 * Every output element is one call of the same dot kernel, whatever the
 * number of tokens or threads: the result for a token does not depend on
 * the batch it was computed in. That is what makes one-shot, chunked and
 * token-by-token evaluation (and streamed vs resident runs) agree bit for
 * bit. Groups of four tokens go through the type's four-token kernel where
 * it has one (traits vec_dot_x4 / vec_dot_f32_x4): it loads and decodes each
 * weight block once for the four and gives each token exactly the single
 * kernel's result, so grouping keeps that guarantee. (A dequantize-once-
 * then-f32-dot path for exact mode was tried: it sums in another order, so
 * prefill and decode differed in the last bits, which the quantized
 * activations of the next expert layer can amplify.)
 */
#include "kernels/matmul.h"

#include <stdlib.h>
#include <string.h>

#include "util/mem.h"

void ms_matmul_ctx_free(struct ms_matmul_ctx *c) {
    ms_free(c->scratch);
    c->scratch = NULL;
    c->scratch_cap = 0;
}

struct mm_job {
    const struct ms_mat *w;
    const void *act;       /* activations in the dot's format */
    size_t act_stride;     /* bytes between tokens' activation rows */
    ms_vec_dot_fn dot;
    ms_vec_dot_x4_fn dot4; /* NULL: tokens one by one */
    int64_t n_tok;
    float *y;
    int64_t ldy;
};

/* Rows per cache tile: a tile of weight rows (at most this many bytes, at
 * least one row) is run over all tokens before the next, so it stays in L2
 * while each group of activation rows is read from memory once per tile, not
 * once per row (a prefill's activations are megabytes). */
#define MM_TILE_BYTES (128 * 1024)

/* y[t][r] for r in [r0, r1) and every token: one dot call per element
 * (four-token calls for whole groups of four). */
static void mm_tile(const struct mm_job *j, int64_t r0, int64_t r1) {
    const int64_t n = j->w->n_cols;
    const size_t as = j->act_stride;
    int64_t t = 0;
    if (j->dot4) {
        for (; t + 4 <= j->n_tok; t += 4) {
            const char *a = (const char *)j->act + (size_t)t * as;
            const void *const a4[4] = {a, a + as, a + 2 * as, a + 3 * as};
            for (int64_t r = r0; r < r1; r++) {
                float s[4];
                j->dot4(n, s, (const char *)j->w->data + (size_t)r * j->w->row_stride, a4);
                for (int k = 0; k < 4; k++) j->y[(t + k) * j->ldy + r] = s[k];
            }
        }
    }
    /* Two or three tokens left: one four-token call with the last token
     * repeated in the spare lanes beats two or three single calls (the x4
     * decodes each weight block once), and its lanes are the single
     * kernel's results all the same. */
    if (j->dot4 && j->n_tok - t >= 2) {
        const char *a = (const char *)j->act + (size_t)t * as;
        const int64_t left = j->n_tok - t;
        const void *const a4[4] = {a, a + as, a + (left > 2 ? 2 : 1) * as, a + (left - 1) * as};
        for (int64_t r = r0; r < r1; r++) {
            float s[4];
            j->dot4(n, s, (const char *)j->w->data + (size_t)r * j->w->row_stride, a4);
            for (int64_t k = 0; k < left; k++) j->y[(t + k) * j->ldy + r] = s[k];
        }
        t = j->n_tok;
    }
    for (; t < j->n_tok; t++) {
        const char *a = (const char *)j->act + (size_t)t * as;
        for (int64_t r = r0; r < r1; r++) {
            float s;
            j->dot(n, &s, (const char *)j->w->data + (size_t)r * j->w->row_stride, a);
            j->y[t * j->ldy + r] = s;
        }
    }
}

static void mm_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct mm_job *j = ctx;
    int64_t tile = (int64_t)(MM_TILE_BYTES / (j->w->row_stride ? j->w->row_stride : 1));
    if (tile < 1) tile = 1;
    for (int64_t r = r0; r < r1; r += tile) mm_tile(j, r, r + tile < r1 ? r + tile : r1);
}

int ms_matmul(struct ms_matmul_ctx *c, const struct ms_mat *w, const float *x, int64_t ldx,
              int64_t n_tok, float *y, int64_t ldy, bool exact, ms_err *err) {
    const struct ms_type_traits *tt = ms_type_traits(w->type);
    if (!tt || !tt->has_kernels)
        return ms_err_set(err, "matmul: no kernels for type %s", ms_type_name(w->type));
    struct mm_job j = {.w = w, .n_tok = n_tok, .y = y, .ldy = ldy};
    if (exact || tt->vec_dot_type == MS_TYPE_F32) {
        j.dot = exact ? tt->vec_dot_f32 : tt->vec_dot;
        j.dot4 = exact ? tt->vec_dot_f32_x4 : tt->vec_dot_x4;
        j.act = x;
        j.act_stride = (size_t)ldx * sizeof(float);
    } else {
        const struct ms_type_traits *at = ms_type_traits(tt->vec_dot_type);
        const size_t row = ms_row_size(tt->vec_dot_type, w->n_cols);
        if (!at || !at->from_float || row == 0)
            return ms_err_set(err, "matmul: cannot convert activations to %s",
                              ms_type_name(tt->vec_dot_type));
        size_t need = row * (size_t)n_tok;
        if (need > c->scratch_cap) {
            void *p = ms_aligned_alloc(MS_ALIGN, need);
            if (!p) return ms_err_set(err, "matmul: out of memory (%zu bytes)", need);
            ms_free(c->scratch);
            c->scratch = p;
            c->scratch_cap = need;
        }
        for (int64_t t = 0; t < n_tok; t++)
            at->from_float(x + t * ldx, (char *)c->scratch + (size_t)t * row, w->n_cols);
        j.dot = tt->vec_dot;
        j.dot4 = tt->vec_dot_x4;
        j.act = c->scratch;
        j.act_stride = row;
    }
    ms_pool_for(c->pool, w->n_rows, 16, mm_rows, &j);
    return 0;
}
