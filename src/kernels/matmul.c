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

#include "quant/blocks.h"
#include "util/mem.h"

void ms_matmul_ctx_free(struct ms_matmul_ctx *c) {
    ms_free(c->scratch);
    c->scratch = NULL;
    c->scratch_cap = 0;
    free(c->chunks);
    c->chunks = NULL;
    c->chunks_cap = 0;
    free(c->fmts);
    c->fmts = NULL;
    c->fmts_cap = 0;
}

struct mm_job {
    const struct ms_mat *w;
    const void *act;       /* activations in the dot's format */
    size_t act_stride;     /* bytes between tokens' activation rows */
    ms_vec_dot_fn dot;
    ms_vec_dot_x4_fn dot4; /* NULL: tokens one by one */
    ms_vec_dot_rows_fn dot_rows; /* a token against many rows, or NULL */
    ms_vec_dot_rows_n_fn dot_rows_n; /* up to four tokens against many rows, or NULL */
    ms_gemm_tok_fn gemm;   /* token-lane GEMM over the packed groups, or NULL */
    const void *pack;      /* its packed activations: groups of `lanes` tokens */
    int lanes;             /* the GEMM's tokens per group */
    int groups;            /* groups one GEMM call takes (1 or 2) */
    size_t pack_stride;    /* bytes per packed group */
    int64_t n_pack;        /* tokens [0, n_pack) go through gemm */
    bool gemm_blocks;      /* the GEMM blocks for the cache itself: a call takes the whole chunk */
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
 * (four-token calls for whole groups of four, many-rows calls for the
 * tokens left over where the type has them). */
static void mm_tile(const struct mm_job *j, int64_t r0, int64_t r1) {
    const int64_t n = j->w->n_cols;
    const size_t as = j->act_stride;
    int64_t t = 0;
    /* token-lane GEMM: every row of the tile against up to `groups` packed
     * groups at once (consecutive in the pack) */
    const int64_t per_call = (int64_t)j->lanes * j->groups;
    while (t < j->n_pack) {
        const int64_t left = j->n_pack - t, nt = left < per_call ? left : per_call;
        j->gemm(n, j->y + t * j->ldy + r0, j->ldy,
                (const char *)j->w->data + (size_t)r0 * j->w->row_stride, j->w->row_stride, r1 - r0,
                (const char *)j->pack + (size_t)(t / j->lanes) * j->pack_stride, (int)nt);
        t += nt;
    }
    /* the rest four tokens at a time, each row read once for all of them
     * (a last lone token takes the one-token forms below: some types have
     * a many-rows one tuned for their parts, see attach_vbmi, and the
     * single dot of others decodes a block its own way for one token) */
    for (; j->dot_rows_n && j->n_tok - t >= 2; t += 4) {
        const char *a = (const char *)j->act + (size_t)t * as;
        const int64_t left = j->n_tok - t, nt = left < 4 ? left : 4;
        const void *const a4[4] = {a, a + (nt > 1 ? as : 0), a + (nt > 2 ? 2 * as : 0), a + (nt > 3 ? 3 * as : 0)};
        j->dot_rows_n(n, j->y + t * j->ldy + r0, j->ldy, (const char *)j->w->data + (size_t)r0 * j->w->row_stride,
                      j->w->row_stride, r1 - r0, a4, (int)nt);
    }
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
    /* a token's outputs are contiguous in y: one many-rows call a tile */
    for (; t < j->n_tok && j->dot_rows; t++)
        j->dot_rows(n, j->y + t * j->ldy + r0, (const char *)j->w->data + (size_t)r0 * j->w->row_stride,
                    j->w->row_stride, r1 - r0, (const char *)j->act + (size_t)t * as);
    for (; t < j->n_tok; t++) {
        const char *a = (const char *)j->act + (size_t)t * as;
        for (int64_t r = r0; r < r1; r++) {
            float s;
            j->dot(n, &s, (const char *)j->w->data + (size_t)r * j->w->row_stride, a);
            j->y[t * j->ldy + r] = s;
        }
    }
}

/* The first bytes of a tile that are requested from memory at once, before
 * it runs. The single-token dots prefetch their stream 2 KiB ahead, which
 * covers a tile from its 2 KiB on (rows are contiguous); the start of a
 * tile is where nothing has asked for the data yet. In a decode step a
 * routed expert is a cold 64-170 KiB stream that begins at a tile, and
 * without this its first lines arrive one miss after another while the
 * hardware prefetcher warms up. */
#define MM_PREFETCH_LEAD 2048

static void mm_prefetch_tile(const struct mm_job *j, int64_t r0, int64_t r1) {
    const char *p = (const char *)j->w->data + (size_t)r0 * j->w->row_stride;
    size_t n = (size_t)(r1 - r0) * j->w->row_stride;
    if (n > MM_PREFETCH_LEAD) n = MM_PREFETCH_LEAD;
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 3);
}

static void mm_rows(const struct mm_job *j, int64_t r0, int64_t r1) {
    int64_t tile = (int64_t)(MM_TILE_BYTES / (j->w->row_stride ? j->w->row_stride : 1));
    /* a GEMM that reads its tokens in place (gemm_tok_f32_rows) keeps four
     * tokens' activations in L1 while every row of its call streams past
     * them: tiles of a few long rows (DeepSeek V4's HC mixes: 24 rows of
     * 16384) would read every token once a tile */
    if (j->gemm_blocks) tile = r1 - r0;
    if (tile < 1) tile = 1;
    for (int64_t r = r0; r < r1; r += tile) {
        const int64_t e = r + tile < r1 ? r + tile : r1;
        mm_prefetch_tile(j, r, e);
        mm_tile(j, r, e);
    }
}

/* ---- fused calls ---------------------------------------------------------- */

/* A chunk of a fused call: rows [r0, r1) of op `op`. */
struct mm_chunk {
    int64_t op, r0, r1;
};

struct mm_multi {
    const struct ms_mm_op *ops;
    const struct mm_job *jobs; /* [n_ops][2]: w's and w2's */
    const struct mm_chunk *chunks;
};

/* Chunks shrink as the call goes on (guided scheduling): each aims at
 * 1 / (2 nt) of the cost not yet cut, so the first are large (few
 * hand-outs) and the last small, and a thread that finishes its chunk
 * while the others still run theirs waits for little; a thread slowed down
 * by a noisy neighbour takes fewer of them. None is cut below 1 / (8 nt) of
 * the whole (a chunk of a prefill reads every token's activations once a
 * tile) or below this many weight bytes: a chunk costs an atomic hand-out
 * on a line every thread touches, about the time of reading a few KiB. */
#define MM_CHUNK_MIN_BYTES (32 * 1024)

static void mm_pair_rows(const struct mm_job *j, const struct mm_job *j2, int64_t r0, int64_t r1) {
    if (!j2) {
        mm_rows(j, r0, r1);
        return;
    }
    /* tile by tile, so both matrices' rows are computed while the
     * activations' tile-sized share is hot */
    int64_t tile = (int64_t)(MM_TILE_BYTES / (2 * (j->w->row_stride ? j->w->row_stride : 1)));
    if (tile < 1) tile = 1;
    for (int64_t r = r0; r < r1; r += tile) {
        const int64_t e = r + tile < r1 ? r + tile : r1;
        mm_prefetch_tile(j, r, e);
        mm_prefetch_tile(j2, r, e);
        mm_tile(j, r, e);
        mm_tile(j2, r, e);
    }
}

static void mm_chunk_run(const struct mm_multi *m, const struct mm_chunk *c) {
    const struct ms_mm_op *op = &m->ops[c->op];
    const struct mm_job *j = &m->jobs[2 * c->op];
    mm_pair_rows(j, op->w2 ? j + 1 : NULL, c->r0, c->r1);
    if (op->done) op->done(op->done_arg, c->r0, c->r1);
}

static void mm_multi_task(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ith;
    const struct mm_multi *m = ctx;
    for (int64_t i = b; i < e; i++) mm_chunk_run(m, &m->chunks[i]);
}

/* How an op's dot products take their activations, resolved from its
 * ms_act and its weight type's traits. */
struct act_fmt {
    enum ms_act act;        /* QUANT, F32 or Q16 (Q16 without kernels: F32) */
    enum ms_type conv_type; /* QUANT: the vec_dot_type rows are converted to */
    size_t row_bytes;       /* converted bytes per token; 0: the f32 rows as given */
    ms_from_float_fn conv;
    ms_vec_dot_fn dot;
    ms_vec_dot_x4_fn dot4;  /* may be NULL */
    ms_vec_dot_rows_fn dot_rows; /* may be NULL */
    ms_vec_dot_rows_n_fn dot_rows_n; /* may be NULL */
    ms_act_pack_fn pack;    /* token-lane GEMM (may be NULL) and its packing */
    ms_gemm_tok_fn gemm;
    size_t pack_block;      /* packed bytes per pack_blck elements of a group */
    int64_t pack_blck;
    int lanes, min, groups;
    int min_paired;         /* a last partial group sharing a call with a full one */
};

static void pack_f32_x16(int64_t n, const void *restrict a, size_t a_stride, int nt, void *restrict dst) {
    ms_pack_f32_x16(n, a, a_stride, nt, dst);
}

static struct act_fmt act_fmt(const struct ms_mm_op *op) {
    const struct ms_type_traits *tt = ms_type_traits(op->w->type);
    enum ms_act act = op->act;
    if (act == MS_ACT_Q16 && !tt->vec_dot_q16) act = MS_ACT_F32;
    if (act == MS_ACT_QUANT && tt->vec_dot_type == MS_TYPE_F32) act = MS_ACT_F32;
    struct act_fmt f = {.act = act};
    switch (act) {
    case MS_ACT_F32:
        f.dot = tt->vec_dot_f32;
        f.dot4 = tt->vec_dot_f32_x4;
        if (tt->gemm_tok_f32) {
            f.pack = tt->gemm_tok_f32_rows ? ms_pack_f32_rows : pack_f32_x16;
            f.gemm = tt->gemm_tok_f32;
            /* in place: one struct ms_f32_rows a group, whatever the row length */
            f.pack_block = tt->gemm_tok_f32_rows ? sizeof(struct ms_f32_rows) : 16 * sizeof(float);
            f.pack_blck = tt->gemm_tok_f32_rows ? op->w->n_cols : 1;
            f.lanes = 16;
            f.min = tt->gemm_tok_f32_min;
            f.groups = 1;
        }
        break;
    case MS_ACT_Q16:
        f.row_bytes = (size_t)(op->w->n_cols / QK8_0) * sizeof(block_q16_0);
        f.conv = tt->q16_from_float;
        f.dot = tt->vec_dot_q16;
        f.dot4 = tt->vec_dot_q16_x4;
        f.dot_rows = tt->vec_dot_q16_rows;
        f.dot_rows_n = tt->vec_dot_q16_rows_n;
        if (tt->gemm_tok_q16) {
            f.pack = tt->q16_pack;
            f.gemm = tt->gemm_tok_q16;
            f.pack_block = tt->q16_pack_block;
            f.pack_blck = QK8_0;
            f.lanes = tt->gemm_tok_q16_lanes;
            f.min = tt->gemm_tok_q16_min;
            f.groups = 1;
        }
        break;
    case MS_ACT_QUANT: {
        const struct ms_type_traits *at = ms_type_traits(tt->vec_dot_type);
        f.conv_type = tt->vec_dot_type;
        f.row_bytes = ms_row_size(tt->vec_dot_type, op->w->n_cols);
        f.conv = at ? at->from_float : NULL;
        f.dot = tt->vec_dot;
        f.dot4 = tt->vec_dot_x4;
        f.dot_rows = tt->vec_dot_rows;
        f.dot_rows_n = tt->vec_dot_rows_n;
        if (tt->gemm_tok) {
            f.pack = tt->act_pack;
            f.gemm = tt->gemm_tok;
            f.pack_block = tt->act_pack_block;
            f.pack_blck = at ? at->blck_size : 1;
            f.lanes = tt->gemm_tok_lanes;
            f.min = tt->gemm_tok_min;
            f.groups = tt->gemm_tok_groups > 1 ? tt->gemm_tok_groups : 1;
            f.min_paired = f.groups > 1 ? tt->gemm_tok_min_paired : f.min;
        }
        break;
    }
    }
    return f;
}

/* Tokens of op that go through its format's token-lane GEMM (whole groups
 * of its lanes, and a last partial group of at least its minimum, whose
 * spare lanes cost less than the four-token calls it replaces: a lower
 * minimum where it rides in a call with a full group), 0 when the format
 * has none. */
static int64_t pack_tokens(const struct ms_mm_op *op, const struct act_fmt *f) {
    if (!f->gemm || op->n_tok < f->min) return 0;
    const int64_t full = op->n_tok / f->lanes, rem = op->n_tok % f->lanes;
    /* calls take groups in runs of f->groups from the first token: the
     * last partial group shares a call when the full ones leave a gap */
    const bool paired = f->groups > 1 && full % f->groups != 0;
    return rem >= (paired ? f->min_paired : f->min) ? op->n_tok : op->n_tok - rem;
}

/* The packed groups start at this alignment in the scratch (the kernels
 * use aligned vector loads; the scratch itself is MS_ALIGN-aligned). */
#define MM_PACK_ALIGN 64

/* Bytes of op's packed activation groups. */
static size_t pack_bytes(const struct ms_mm_op *op, const struct act_fmt *f) {
    const int64_t nt = pack_tokens(op, f);
    if (nt == 0) return 0;
    return (size_t)((nt + f->lanes - 1) / f->lanes) * (size_t)(op->w->n_cols / f->pack_blck) * f->pack_block;
}

/* Whether op b can use the activations op a converted. */
static bool same_act(const struct ms_mm_op *a, const struct act_fmt *fa, const struct ms_mm_op *b,
                     const struct act_fmt *fb) {
    return fa->row_bytes > 0 && a->x == b->x && a->ldx == b->ldx && a->n_tok == b->n_tok &&
           a->w->n_cols == b->w->n_cols && fa->act == fb->act && fa->conv_type == fb->conv_type;
}

/* Cost of one output row of op for every token: weight bytes times tokens. */
static double row_cost(const struct ms_mm_op *op) {
    return (double)op->w->row_stride * (op->w2 ? 2.0 : 1.0) * (double)op->n_tok;
}

/* Cuts the ops into chunks, guided (above), from a total cost of `total`
 * on nt threads; on one thread an op is one chunk. Stores them in out when
 * it is not NULL; returns their number either way. */
static size_t cut_chunks(const struct ms_mm_op *ops, int n_ops, double total, int nt, struct mm_chunk *out) {
    double least = nt > 1 ? total / (8.0 * nt) : total + 1.0;
    if (least < MM_CHUNK_MIN_BYTES) least = MM_CHUNK_MIN_BYTES;
    double left = total;
    size_t n = 0;
    for (int i = 0; i < n_ops; i++) {
        const int64_t R = ops[i].w->n_rows;
        if (R <= 0 || ops[i].n_tok <= 0) continue;
        const double rc = row_cost(&ops[i]);
        for (int64_t r = 0; r < R;) {
            double want = nt > 1 ? left / (2.0 * nt) : left + 1.0;
            if (want < least) want = least;
            /* a row that costs nothing (no columns) leaves the op whole */
            int64_t rows = rc > 0.0 && want / rc < (double)(R - r) ? (int64_t)(want / rc + 0.5) : R - r;
            if (rows < 1) rows = 1;
            if (out) out[n] = (struct mm_chunk){.op = i, .r0 = r, .r1 = r + rows};
            n++;
            r += rows;
            left -= rc * (double)rows;
        }
    }
    return n;
}

/* Whether op is a pair whose two matrices are stored in different types. */
static bool pair_types_differ(const struct ms_mm_op *op) { return op->w2 && op->w2->type != op->w->type; }

/* ms_matmul_multi for a call with pairs in two types (a file quantized with
 * gate and up in different formats: one dot cannot run both rows): each
 * such pair runs as two products in the same call, and its done callback
 * once over all its rows after both. The results are the same dot calls. */
static int matmul_multi_split_pairs(struct ms_matmul_ctx *c, const struct ms_mm_op *ops, int n_ops,
                                    ms_err *err) {
    struct ms_mm_op *split = malloc(2 * (size_t)n_ops * sizeof *split);
    if (!split) return ms_err_set(err, "matmul: out of memory (%d ops)", n_ops);
    int n = 0;
    for (int i = 0; i < n_ops; i++) {
        split[n] = ops[i];
        if (!pair_types_differ(&ops[i])) {
            n++;
            continue;
        }
        if (ops[i].w2->n_rows != ops[i].w->n_rows || ops[i].w2->n_cols != ops[i].w->n_cols) {
            free(split);
            return ms_err_set(err, "matmul: paired matrices differ in shape");
        }
        split[n].w2 = NULL, split[n].y2 = NULL, split[n].done = NULL;
        split[n + 1] = split[n];
        split[n + 1].w = ops[i].w2, split[n + 1].y = ops[i].y2;
        n += 2;
    }
    const int rc = ms_matmul_multi(c, split, n, err);
    free(split);
    if (rc) return rc;
    for (int i = 0; i < n_ops; i++)
        if (pair_types_differ(&ops[i]) && ops[i].done && ops[i].n_tok > 0 && ops[i].w->n_rows > 0)
            ops[i].done(ops[i].done_arg, 0, ops[i].w->n_rows);
    return 0;
}

int ms_matmul_multi(struct ms_matmul_ctx *c, const struct ms_mm_op *ops, int n_ops,
                    ms_err *err) {
    if (n_ops <= 0) return 0;
    for (int i = 0; i < n_ops; i++)
        if (pair_types_differ(&ops[i])) return matmul_multi_split_pairs(c, ops, n_ops, err);
    const int nt = ms_pool_n_threads(c->pool);
    /* 1. checks, the activation formats, the converted activations' size,
     * the total cost */
    if ((size_t)n_ops > c->fmts_cap) { /* grows once: no allocation per decode step */
        void *q = malloc((size_t)n_ops * sizeof(struct act_fmt));
        if (!q) return ms_err_set(err, "matmul: out of memory (%d ops)", n_ops);
        free(c->fmts);
        c->fmts = q;
        c->fmts_cap = (size_t)n_ops;
    }
    struct act_fmt *fmts = c->fmts;
    size_t act_bytes = 0;
    double total = 0.0;
    for (int i = 0; i < n_ops; i++) {
        const struct ms_mm_op *op = &ops[i];
        const struct ms_type_traits *tt = ms_type_traits(op->w->type);
        if (!tt || !tt->has_kernels)
            return ms_err_set(err, "matmul: no kernels for type %s", ms_type_name(op->w->type));
        if (op->w2 && (op->w2->n_rows != op->w->n_rows || op->w2->n_cols != op->w->n_cols))
            return ms_err_set(err, "matmul: paired matrices differ in shape");
        fmts[i] = act_fmt(op);
        const struct act_fmt *f = &fmts[i];
        if (f->act != MS_ACT_F32) {
            if (!f->conv || f->row_bytes == 0)
                return ms_err_set(err, "matmul: cannot convert activations to %s",
                                  f->act == MS_ACT_Q16 ? "q16_0" : ms_type_name(f->conv_type));
            bool shared = false;
            for (int k = 0; k < i && !shared; k++) shared = same_act(&ops[k], &fmts[k], op, f);
            /* each conversion starts aligned (step 3): Q8_0 rows are 34 bytes a
             * block, and a Q16_0 row after them must start on its f32 scale */
            if (!shared && op->n_tok > 0) act_bytes += f->row_bytes * (size_t)op->n_tok + MM_PACK_ALIGN;
        }
        if (pack_bytes(op, f)) act_bytes += pack_bytes(op, f) + MM_PACK_ALIGN; /* own copy: step 3 */
        if (op->n_tok > 0) total += row_cost(op) * (double)op->w->n_rows;
    }
    /* 2. the chunks (guided; one per op on a single thread) */
    const size_t n_chunks = cut_chunks(ops, n_ops, total, nt, NULL);
    const size_t need =
        2 * (size_t)n_ops * sizeof(struct mm_job) + n_chunks * sizeof(struct mm_chunk);
    if (need > c->chunks_cap) {
        void *q = malloc(need);
        if (!q) return ms_err_set(err, "matmul: out of memory (%zu bytes)", need);
        free(c->chunks);
        c->chunks = q;
        c->chunks_cap = need;
    }
    if (act_bytes > c->scratch_cap) {
        void *q = ms_aligned_alloc(MS_ALIGN, act_bytes);
        if (!q) return ms_err_set(err, "matmul: out of memory (%zu bytes)", act_bytes);
        ms_free(c->scratch);
        c->scratch = q;
        c->scratch_cap = act_bytes;
    }
    /* 3. the jobs, with activations converted once per distinct input */
    struct mm_job *jobs = c->chunks;
    struct mm_chunk *chunks = (struct mm_chunk *)(jobs + 2 * n_ops);
    size_t act_off = 0;
    for (int i = 0; i < n_ops; i++) {
        const struct ms_mm_op *op = &ops[i];
        const struct act_fmt *f = &fmts[i];
        struct mm_job *j = &jobs[2 * i];
        *j = (struct mm_job){.w = op->w, .n_tok = op->n_tok, .y = op->y, .ldy = op->ldy,
                             .dot = f->dot, .dot4 = f->dot4, .dot_rows = f->dot_rows,
                             .dot_rows_n = f->dot_rows_n};
        const size_t row = f->row_bytes;
        if (row == 0) {
            j->act = op->x;
            j->act_stride = (size_t)op->ldx * sizeof(float);
        } else {
            j->act_stride = row;
            for (int k = 0; k < i && !j->act; k++)
                if (same_act(&ops[k], &fmts[k], op, f)) j->act = jobs[2 * k].act;
            if (!j->act) {
                act_off = (act_off + MM_PACK_ALIGN - 1) / MM_PACK_ALIGN * MM_PACK_ALIGN;
                char *dst = (char *)c->scratch + act_off;
                for (int64_t t = 0; t < op->n_tok; t++)
                    f->conv(op->x + t * op->ldx, dst + (size_t)t * row, op->w->n_cols);
                j->act = dst;
                act_off += row * (size_t)(op->n_tok > 0 ? op->n_tok : 0);
            }
        }
        /* the token-lane GEMM's packed groups (a pack per op: ops that
         * share activations are mostly pairs in one op already) */
        j->n_pack = pack_tokens(op, f);
        if (j->n_pack > 0) {
            act_off = (act_off + MM_PACK_ALIGN - 1) / MM_PACK_ALIGN * MM_PACK_ALIGN;
            char *dst = (char *)c->scratch + act_off;
            const int lanes = f->lanes;
            j->gemm = f->gemm;
            j->gemm_blocks = f->pack == ms_pack_f32_rows;
            j->lanes = lanes;
            j->groups = f->groups;
            j->pack = dst;
            j->pack_stride = pack_bytes(op, f) / (size_t)((j->n_pack + lanes - 1) / lanes);
            for (int64_t t = 0; t < j->n_pack; t += lanes) {
                const int64_t left = op->n_tok - t;
                f->pack(op->w->n_cols, (const char *)j->act + (size_t)t * j->act_stride, j->act_stride,
                        (int)(left < lanes ? left : lanes), dst + (size_t)(t / lanes) * j->pack_stride);
            }
            act_off += pack_bytes(op, f);
        }
        jobs[2 * i + 1] = *j;
        if (op->w2) {
            jobs[2 * i + 1].w = op->w2;
            jobs[2 * i + 1].y = op->y2;
        }
    }
    cut_chunks(ops, n_ops, total, nt, chunks);
    struct mm_multi m = {.ops = ops, .jobs = jobs, .chunks = chunks};
    ms_pool_for_each(c->pool, (int64_t)n_chunks, mm_multi_task, &m);
    return 0;
}

int ms_matmul(struct ms_matmul_ctx *c, const struct ms_mat *w, const float *x, int64_t ldx,
              int64_t n_tok, float *y, int64_t ldy, enum ms_act act, ms_err *err) {
    const struct ms_mm_op op = {.w = w, .x = x, .ldx = ldx, .n_tok = n_tok, .y = y, .ldy = ldy,
                                .act = act};
    return ms_matmul_multi(c, &op, 1, err);
}
