/*
 * matvec.c - y = W x for one activation vector, any weight type with kernels.
 *
 * The single-token building block (decode, tests, tools): fast mode converts
 * x once into the weight type's activation format (Q8_0 / Q8_K / F16 / BF16,
 * as ggml's vec_dot_type) and runs vec_dot per row; quality mode runs
 * vec_dot_f32 per row on the f32 x. Batched and threaded matmul lives in
 * kernels/, built on the same traits.
 */
#include "quant/quant.h"

#include "util/mem.h"

size_t ms_matvec_scratch_size(enum ms_type type, int64_t n_cols) {
    const struct ms_type_traits *tt = ms_type_traits(type);
    if (!tt || !tt->has_kernels || tt->vec_dot_type == MS_TYPE_F32) return 0;
    return ms_row_size(tt->vec_dot_type, n_cols);
}

int ms_matvec(enum ms_type type, const void *w, int64_t n_rows, int64_t n_cols, const float *x, float *y,
              bool quality, void *scratch) {
    const struct ms_type_traits *tt = ms_type_traits(type);
    if (!tt || !tt->has_kernels || n_rows < 0 || n_cols < 0 || n_cols % tt->blck_size) return -1;
    const size_t w_row = ms_row_size(type, n_cols);
    const char *wp = w;

    if (quality) {
        for (int64_t r = 0; r < n_rows; r++) tt->vec_dot_f32(n_cols, &y[r], wp + (size_t)r * w_row, x);
        return 0;
    }

    const void *act = x; /* F32 weights dot the f32 row directly */
    void *owned = NULL;
    if (tt->vec_dot_type != MS_TYPE_F32) {
        const struct ms_type_traits *at = ms_type_traits(tt->vec_dot_type);
        const size_t a_size = ms_row_size(tt->vec_dot_type, n_cols);
        if (!at || !at->from_float || (n_cols > 0 && a_size == 0)) return -1;
        if (!scratch) {
            owned = ms_aligned_alloc(MS_ALIGN, a_size);
            if (!owned) return -1;
            scratch = owned;
        }
        at->from_float(x, scratch, n_cols);
        act = scratch;
    }
    for (int64_t r = 0; r < n_rows; r++) tt->vec_dot(n_cols, &y[r], wp + (size_t)r * w_row, act);
    ms_free(owned);
    return 0;
}
