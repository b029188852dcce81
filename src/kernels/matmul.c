/*
 * matmul.c - batched matmul over the quant traits table (see matmul.h).
 *
 * Threads split output rows. Two inner strategies:
 *  - per row: each weight row is dotted with every token's activations
 *    (decode, and fast mode where the activations are already quantized);
 *  - dequantize-once (exact mode with several tokens and a non-f32 weight):
 *    a thread expands a few weight rows to f32 in its own scratch and takes
 *    f32 dot products with every token, so the dequantization cost is paid
 *    once per row instead of once per (row, token).
 * Both compute the same sums up to float summation order.
 */
#include "kernels/matmul.h"

#include <stdlib.h>
#include <string.h>

#include "util/mem.h"

#define DEQ_ROWS 4        /* rows expanded at a time in dequantize-once mode */
#define DEQ_MIN_TOKENS 4  /* below this, the fused per-row kernel is cheaper */

void ms_matmul_ctx_free(struct ms_matmul_ctx *c) {
    ms_free(c->scratch);
    ms_free(c->deq);
    c->scratch = c->deq = NULL;
    c->scratch_cap = c->deq_cap = 0;
}

struct mm_job {
    const struct ms_mat *w;
    const void *act;       /* activations in the dot's format */
    size_t act_stride;     /* bytes between tokens' activation rows */
    ms_vec_dot_fn dot;
    int64_t n_tok;
    float *y;
    int64_t ldy;
    /* dequantize-once mode */
    ms_to_float_fn to_float;
    ms_vec_dot_fn dot_f32;
    float *deq;            /* [n_threads][DEQ_ROWS][n_cols] */
};

static void mm_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct mm_job *j = ctx;
    const int64_t n = j->w->n_cols;
    for (int64_t r = r0; r < r1; r++) {
        const char *wr = (const char *)j->w->data + (size_t)r * j->w->row_stride;
        for (int64_t t = 0; t < j->n_tok; t++) {
            float s;
            j->dot(n, &s, wr, (const char *)j->act + (size_t)t * j->act_stride);
            j->y[t * j->ldy + r] = s;
        }
    }
}

static void mm_rows_deq(void *ctx, int64_t r0, int64_t r1, int ith) {
    const struct mm_job *j = ctx;
    const int64_t n = j->w->n_cols;
    float *buf = j->deq + (size_t)ith * DEQ_ROWS * (size_t)n;
    for (int64_t rb = r0; rb < r1; rb += DEQ_ROWS) {
        const int64_t nr = r1 - rb < DEQ_ROWS ? r1 - rb : DEQ_ROWS;
        for (int64_t i = 0; i < nr; i++)
            j->to_float((const char *)j->w->data + (size_t)(rb + i) * j->w->row_stride,
                        buf + i * n, n);
        for (int64_t t = 0; t < j->n_tok; t++) {
            const float *x = (const float *)((const char *)j->act + (size_t)t * j->act_stride);
            for (int64_t i = 0; i < nr; i++) j->dot_f32(n, &j->y[t * j->ldy + rb + i], buf + i * n, x);
        }
    }
}

/* Grows *buf to at least `need` bytes (contents not kept). */
static int reserve(void **buf, size_t *cap, size_t need, ms_err *err) {
    if (need <= *cap) return 0;
    void *p = ms_aligned_alloc(MS_ALIGN, need);
    if (!p) return ms_err_set(err, "matmul: out of memory (%zu bytes)", need);
    ms_free(*buf);
    *buf = p;
    *cap = need;
    return 0;
}

int ms_matmul(struct ms_matmul_ctx *c, const struct ms_mat *w, const float *x, int64_t ldx,
              int64_t n_tok, float *y, int64_t ldy, bool exact, ms_err *err) {
    const struct ms_type_traits *tt = ms_type_traits(w->type);
    if (!tt || !tt->has_kernels)
        return ms_err_set(err, "matmul: no kernels for type %s", ms_type_name(w->type));
    struct mm_job j = {.w = w, .n_tok = n_tok, .y = y, .ldy = ldy};
    if (exact && n_tok >= DEQ_MIN_TOKENS && w->type != MS_TYPE_F32) {
        const int nt = ms_pool_n_threads(c->pool);
        if (reserve(&c->deq, &c->deq_cap, (size_t)nt * DEQ_ROWS * (size_t)w->n_cols * sizeof(float),
                    err))
            return -1;
        j.to_float = tt->to_float;
        j.dot_f32 = ms_type_traits(MS_TYPE_F32)->vec_dot;
        j.deq = c->deq;
        j.act = x;
        j.act_stride = (size_t)ldx * sizeof(float);
        ms_pool_for(c->pool, w->n_rows, DEQ_ROWS, mm_rows_deq, &j);
        return 0;
    }
    if (exact || tt->vec_dot_type == MS_TYPE_F32) {
        j.dot = exact ? tt->vec_dot_f32 : tt->vec_dot;
        j.act = x;
        j.act_stride = (size_t)ldx * sizeof(float);
    } else {
        const struct ms_type_traits *at = ms_type_traits(tt->vec_dot_type);
        const size_t row = ms_row_size(tt->vec_dot_type, w->n_cols);
        if (!at || !at->from_float || row == 0)
            return ms_err_set(err, "matmul: cannot convert activations to %s",
                              ms_type_name(tt->vec_dot_type));
        if (reserve(&c->scratch, &c->scratch_cap, row * (size_t)n_tok, err)) return -1;
        for (int64_t t = 0; t < n_tok; t++)
            at->from_float(x + t * ldx, (char *)c->scratch + (size_t)t * row, w->n_cols);
        j.dot = tt->vec_dot;
        j.act = c->scratch;
        j.act_stride = row;
    }
    ms_pool_for(c->pool, w->n_rows, 16, mm_rows, &j);
    return 0;
}
