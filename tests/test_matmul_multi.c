/*
 * test_matmul_multi.c - fused matmul calls (ms_matmul_multi): one pool job
 * for several products must give every output element bit for bit what a
 * separate single-threaded ms_matmul gives it, whatever the thread count
 * and however the rows are cut into chunks, because the forward pass fuses
 * a decode step's products and one-shot, chunked and token-by-token
 * evaluation must still agree exactly. Checked with memcmp on random data
 * (normal values with outliers):
 * - ops of every kernel type, fast and quality mode, 1 to 5 tokens, small
 *   (1 and 3 rows) and large (1400 rows: many chunks) matrices, gate/up
 *   pairs, activations shared between ops (converted once) and not;
 * - pools of 1, 2, 3 and 5 threads and no pool;
 * - the done callback: every row of an op exactly once, only once that
 *   row's outputs are final (it compares them with the reference), and what
 *   it writes (SwiGLU-like, in place) is what the caller sees;
 * - pairs whose matrices are stored in two types (each its own dot, the
 *   done callback after both);
 * - a pair whose matrices differ in shape is refused before anything runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "quant/quant.h"
#include "util/mem.h"
#include "util/pool.h"
#include "util/rng.h"

#define N_COLS 768 /* three blocks of the 256-element k-quant formats */
#define MAX_TOK 5
#define MAX_ROWS 1400

static void *xalloc(size_t n) {
    void *p = ms_aligned_alloc(MS_ALIGN, n ? n : 1);
    assert_non_null(p);
    return p;
}

/* A random matrix of n_rows x N_COLS in type (quantized from normal floats
 * with outliers by the reference quantizer). */
static struct ms_mat make_mat(ms_rng *r, enum ms_type type, int64_t n_rows) {
    const size_t row = ms_row_size(type, N_COLS);
    char *w = xalloc(row * (size_t)n_rows);
    float *tmp = xalloc(N_COLS * sizeof(float));
    for (int64_t i = 0; i < n_rows; i++) {
        ms_rng_fill_normal(r, tmp, N_COLS, 1.0f);
        for (int64_t c = 0; c < N_COLS; c += 37) tmp[c] *= 8.0f;
        if (type == MS_TYPE_F32)
            memcpy(w + (size_t)i * row, tmp, N_COLS * sizeof(float));
        else
            ms_type_traits_ref(type)->from_float(tmp, w + (size_t)i * row, N_COLS);
    }
    ms_free(tmp);
    return (struct ms_mat){.data = w, .type = type, .n_rows = n_rows, .n_cols = N_COLS,
                           .row_stride = row};
}

/* What the done callback of a pair op does to its rows: gate = gate * up +
 * 1 (in place, elementwise), after checking that the rows it is handed are
 * final (equal to the reference products). */
struct done_arg {
    const struct ms_mm_op *op;
    const float *ref_y, *ref_y2; /* [n_tok][ldy] */
    _Atomic int *seen;           /* [n_rows] times each row was handed over */
    _Atomic int bad;             /* rows handed over before they were final */
};

static void done_fn(void *argp, int64_t r0, int64_t r1) {
    struct done_arg *a = argp;
    const struct ms_mm_op *op = a->op;
    for (int64_t r = r0; r < r1; r++) {
        atomic_fetch_add(&a->seen[r], 1);
        for (int64_t t = 0; t < op->n_tok; t++) {
            float *g = op->y + t * op->ldy + r;
            if (memcmp(g, a->ref_y + t * op->ldy + r, sizeof *g)) atomic_fetch_add(&a->bad, 1);
            if (op->y2) {
                const float *u = op->y2 + t * op->ldy + r;
                if (memcmp(u, a->ref_y2 + t * op->ldy + r, sizeof *u))
                    atomic_fetch_add(&a->bad, 1);
                *g = *g * *u + 1.0f;
            }
        }
    }
}

struct op_case {
    enum ms_type type;
    int64_t rows, n_tok;
    enum ms_act act;
    bool pair;
    int x; /* which activation buffer: equal indices share one */
    enum ms_type type2; /* a pair's second matrix, when not F32 (0): another type than w's */
};

static const struct op_case cases[] = {
    {MS_TYPE_Q8_0, MAX_ROWS, 1, MS_ACT_QUANT, false, 0, 0},   {MS_TYPE_Q4_K, 300, 1, MS_ACT_QUANT, true, 0, 0},
    {MS_TYPE_IQ2_XXS, 200, 1, MS_ACT_QUANT, true, 0, 0},      {MS_TYPE_Q2_K, 3, 1, MS_ACT_QUANT, false, 0, 0},
    {MS_TYPE_F16, 1, 1, MS_ACT_F32, false, 0, 0},            {MS_TYPE_Q8_0, 64, 1, MS_ACT_F32, false, 0, 0},
    {MS_TYPE_Q4_K, 500, 3, MS_ACT_QUANT, true, 1, 0},         {MS_TYPE_Q2_K, 257, 5, MS_ACT_QUANT, false, 2, 0},
    {MS_TYPE_MXFP4, 129, 2, MS_ACT_QUANT, true, 3, 0},        {MS_TYPE_BF16, 77, 4, MS_ACT_F32, true, 1, 0},
    {MS_TYPE_F32, 33, 5, MS_ACT_QUANT, false, 2, 0},          {MS_TYPE_IQ2_XXS, MAX_ROWS, 5, MS_ACT_F32, false, 2, 0},
    {MS_TYPE_Q2_K, 40, 3, MS_ACT_QUANT, false, 3, 0}, /* as op 6's dot type and tokens, another input */
    {MS_TYPE_Q8_0, 90, 5, MS_ACT_Q16, true, 2, 0},    {MS_TYPE_Q8_0, 40, 5, MS_ACT_Q16, false, 2, 0},
    {MS_TYPE_F16, 20, 3, MS_ACT_Q16, false, 1, 0}, /* no Q16_0 dots: f32 */
    {MS_TYPE_Q8_0, 33, 5, MS_ACT_QUANT, false, 2, 0}, /* the same input as the Q16_0 ops, int8 */
    /* pairs in two types (gate and up quantized differently) */
    {MS_TYPE_Q4_K, 300, 3, MS_ACT_QUANT, true, 1, MS_TYPE_IQ2_XXS},
    {MS_TYPE_Q8_0, MAX_ROWS, 1, MS_ACT_QUANT, true, 0, MS_TYPE_Q2_K},
    {MS_TYPE_Q8_0, 70, 2, MS_ACT_Q16, true, 3, MS_TYPE_F16},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static void run_multi(struct ms_pool *pool) {
    ms_rng r;
    ms_rng_seed(&r, 0x51c0ffeeull);
    float *xs[4];
    for (int i = 0; i < 4; i++) {
        xs[i] = xalloc((size_t)MAX_TOK * N_COLS * sizeof(float));
        ms_rng_fill_normal(&r, xs[i], MAX_TOK * N_COLS, 1.0f);
        for (int64_t c = 0; c < MAX_TOK * N_COLS; c += 41) xs[i][c] *= 8.0f;
    }
    struct ms_mat w[N_CASES], w2[N_CASES];
    struct ms_mm_op ops[N_CASES];
    struct done_arg da[N_CASES];
    float *ref[N_CASES], *ref2[N_CASES], *want[N_CASES];
    struct ms_matmul_ctx single = {0}, fused = {.pool = pool};
    ms_err err = {0};
    for (int i = 0; i < N_CASES; i++) {
        const struct op_case *c = &cases[i];
        const size_t sz = (size_t)(c->n_tok * c->rows) * sizeof(float);
        w[i] = make_mat(&r, c->type, c->rows);
        w2[i] = c->pair ? make_mat(&r, c->type2 ? c->type2 : c->type, c->rows) : (struct ms_mat){0};
        ref[i] = xalloc(sz);
        ref2[i] = xalloc(sz);
        want[i] = xalloc(sz);
        assert_int_equal(ms_matmul(&single, &w[i], xs[c->x], N_COLS, c->n_tok, ref[i], c->rows,
                                   c->act, &err),
                         0);
        memcpy(want[i], ref[i], sz);
        if (c->pair) {
            assert_int_equal(ms_matmul(&single, &w2[i], xs[c->x], N_COLS, c->n_tok, ref2[i],
                                       c->rows, c->act, &err),
                             0);
            for (int64_t e = 0; e < c->n_tok * c->rows; e++)
                want[i][e] = ref[i][e] * ref2[i][e] + 1.0f;
        }
        bool nonzero = false;
        for (int64_t e = 0; e < c->n_tok * c->rows; e++) nonzero |= ref[i][e] != 0.0f;
        assert_true(nonzero); /* random data: the comparison has teeth */
        ops[i] = (struct ms_mm_op){.w = &w[i], .w2 = c->pair ? &w2[i] : NULL, .x = xs[c->x],
                                   .ldx = N_COLS, .n_tok = c->n_tok,
                                   .y = xalloc(sz), .y2 = c->pair ? xalloc(sz) : NULL,
                                   .ldy = c->rows, .act = c->act};
        for (int64_t e = 0; e < c->n_tok * c->rows; e++) ops[i].y[e] = NAN;
        da[i] = (struct done_arg){.op = &ops[i], .ref_y = ref[i], .ref_y2 = ref2[i],
                                  .seen = calloc((size_t)c->rows, sizeof(_Atomic int))};
        assert_non_null(da[i].seen);
        atomic_init(&da[i].bad, 0);
        /* a done callback on every other op, pairs always */
        if (c->pair || i % 2 == 0) {
            ops[i].done = done_fn;
            ops[i].done_arg = &da[i];
        }
    }
    assert_int_equal(ms_matmul_multi(&fused, ops, N_CASES, &err), 0);
    for (int i = 0; i < N_CASES; i++) {
        const struct op_case *c = &cases[i];
        const size_t sz = (size_t)(c->n_tok * c->rows) * sizeof(float);
        if (memcmp(ops[i].y, want[i], sz)) {
            print_error("op %d (%s, %lld rows, %lld tokens, %s%s): fused result differs\n", i,
                        ms_type_name(c->type), (long long)c->rows, (long long)c->n_tok,
                        c->act ? "quality" : "fast", c->pair ? ", pair" : "");
            fail();
        }
        if (c->pair) assert_memory_equal(ops[i].y2, ref2[i], sz);
        if (ops[i].done) {
            assert_int_equal(atomic_load(&da[i].bad), 0);
            for (int64_t row = 0; row < c->rows; row++)
                assert_int_equal(atomic_load(&da[i].seen[row]), 1);
        }
    }
    /* a second call on the same context (scratch reused) gives the same */
    for (int i = 0; i < N_CASES; i++) {
        if (cases[i].pair) continue;
        memset(ops[i].y, 0, (size_t)(cases[i].n_tok * cases[i].rows) * sizeof(float));
        ops[i].done = NULL;
    }
    int n_plain = 0;
    struct ms_mm_op plain[N_CASES];
    for (int i = 0; i < N_CASES; i++)
        if (!cases[i].pair) plain[n_plain++] = ops[i];
    assert_int_equal(ms_matmul_multi(&fused, plain, n_plain, &err), 0);
    for (int i = 0; i < N_CASES; i++)
        if (!cases[i].pair)
            assert_memory_equal(ops[i].y, ref[i],
                                (size_t)(cases[i].n_tok * cases[i].rows) * sizeof(float));
    for (int i = 0; i < N_CASES; i++) {
        ms_free((void *)w[i].data);
        ms_free((void *)w2[i].data);
        ms_free(ref[i]);
        ms_free(ref2[i]);
        ms_free(want[i]);
        ms_free(ops[i].y);
        ms_free(ops[i].y2);
        free(da[i].seen);
    }
    for (int i = 0; i < 4; i++) ms_free(xs[i]);
    ms_matmul_ctx_free(&single);
    ms_matmul_ctx_free(&fused);
}

static void test_multi_no_pool(void **state) {
    (void)state;
    run_multi(NULL);
}

static void test_multi_pools(void **state) {
    (void)state;
    const int counts[] = {1, 2, 3, 5};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        struct ms_pool *p;
        ms_err err = {0};
        assert_int_equal(ms_pool_new(&p, counts[i], &err), 0);
        run_multi(p);
        ms_pool_free(p);
    }
}

static void test_multi_bad_pair(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 7);
    struct ms_mat a = make_mat(&r, MS_TYPE_Q8_0, 8), b = make_mat(&r, MS_TYPE_Q8_0, 9);
    float x[N_COLS] = {0}, y[9], y2[9];
    for (int i = 0; i < 9; i++) y[i] = y2[i] = -7.0f;
    struct ms_mm_op ops[2] = {
        {.w = &a, .x = x, .ldx = N_COLS, .n_tok = 1, .y = y, .ldy = 8},
        {.w = &a, .w2 = &b, .x = x, .ldx = N_COLS, .n_tok = 1, .y = y, .y2 = y2, .ldy = 8},
    };
    struct ms_matmul_ctx ctx = {0};
    ms_err err = {0};
    assert_int_equal(ms_matmul_multi(&ctx, ops, 2, &err), -1);
    assert_non_null(strstr(err.msg, "paired"));
    for (int i = 0; i < 9; i++) assert_true(y[i] == -7.0f && y2[i] == -7.0f); /* nothing ran */
    /* the same with the pair in two types (the path that splits pairs) */
    struct ms_mat c2 = make_mat(&r, MS_TYPE_Q4_K, 9);
    ops[1].w2 = &c2;
    assert_int_equal(ms_matmul_multi(&ctx, ops, 2, &err), -1);
    assert_non_null(strstr(err.msg, "paired"));
    for (int i = 0; i < 9; i++) assert_true(y[i] == -7.0f && y2[i] == -7.0f);
    ms_free((void *)c2.data);
    ms_matmul_ctx_free(&ctx);
    ms_free((void *)a.data);
    ms_free((void *)b.data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_no_pool),
        cmocka_unit_test(test_multi_pools),
        cmocka_unit_test(test_multi_bad_pair),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
