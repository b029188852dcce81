/*
 * mkmodel.c - the random-weight deepseek4 model generator (see mkmodel.h).
 *
 * Generation is organised in row blocks: a tensor of n_rows rows of ne0
 * values (3-D expert tensors flattened to ne1*ne2 rows) is cut into blocks
 * of MK_BLOCK_ELEMS values; block b is generated from an RNG seeded with
 * (seed, hash of the tensor name, b), converted to the stored type and
 * appended to the file. Up to n_threads blocks are generated in parallel and
 * written in order, so the bytes never depend on the thread count.
 *
 * The bench preset (multi-GB files) draws its normal values with
 * ms_rng_fill_normal_fast, a float Box-Muller about 20x faster than the
 * double one; tiny and small keep ms_rng_fill_normal, so their bytes (and
 * the test vectors recorded from them) do not change.
 *
 * The flash preset (DeepSeek V4 Flash's real dimensions, tens of GB) does
 * not quantize at all: a quantized block is filled with random codes and
 * its scale fields are set so the values have about the spread the float
 * path would give (quantizing random floats to IQ2_XXS runs at ~16 MB/s;
 * random codes at the speed of the RNG). The file records this in
 * moestream.mkmodel.data. With sparse, the matrices' data is left as holes
 * (zeros; a sparse file of the full layout for memory-plan and streaming
 * tests), only the 1-D tensors and tid2eid get values.
 */
#include "mkmodel/mkmodel.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "mkmodel/vocab_build.h"
#include "quant/blocks.h"
#include "mkmodel/vocab_import.h"
#include "util/mem.h"
#include "util/rng.h"

#define MK_BLOCK_ELEMS (1 << 18) /* values per generated row block (target) */
#define MK_MAX_THREADS 16

/* ------------------------------------------------------------------------ */
/* Presets                                                                   */

static void base_hparams(struct dsv4_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->n_ctx_train = 4096;
    hp->n_head_kv = 1;
    hp->n_rot = 64;
    hp->rms_eps = 1e-6f;
    hp->compress_rope_freq_base = 160000.0f;
    hp->rope_freq_base = 10000.0f;
    strcpy(hp->rope_scaling_type, "yarn");
    hp->rope_scaling_factor = 16.0f;
    hp->rope_n_ctx_orig = 256;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    hp->n_expert_shared = 1;
    hp->expert_weights_scale = 1.5f;
    hp->expert_weights_norm = true;
    hp->expert_gating_func = DSV4_GATING_SQRT_SOFTPLUS;
    hp->n_hc = DSV4_N_HC;
    hp->n_sinkhorn_iter = 20;
    hp->hc_eps = 1e-6f;
}

static void set_clamp(struct dsv4_hparams *hp, float v) {
    for (int il = 0; il < DSV4_MAX_LAYERS; il++)
        hp->swiglu_clamp_exp[il] = hp->swiglu_clamp_shexp[il] = v;
}

int mkmodel_preset(struct mkmodel_opts *o, const char *name, ms_err *err) {
    memset(o, 0, sizeof *o);
    struct dsv4_hparams *hp = &o->hp;
    base_hparams(hp);
    o->seed = 1;
    o->n_threads = 2;
    o->experts_type = MS_TYPE_Q4_K;
    o->dense_type = MS_TYPE_Q8_0;
    o->last_layers_type = MS_TYPE_Q4_K;
    if (!strcmp(name, "tiny")) {
        /* Sensitive on purpose (docs/model.md, "How it is checked": on
         * default weights a wrong Sinkhorn axis or epsilon moves
         * probabilities by < 1e-6, so a test could not fail): few Sinkhorn iterations, a large eps_hc, a clamp that
         * clamps, a weight scale other than 1.5, a small indexer top-k. */
        hp->n_embd = 256;
        hp->n_block = 4;
        hp->n_vocab = 512;
        hp->n_head = 8;
        hp->n_embd_head = hp->n_embd_head_v = 128;
        hp->q_lora_rank = 256;
        hp->o_lora_rank = 64;
        hp->n_out_group = 4;
        hp->n_swa = 32;
        hp->n_indexer_head = 4;
        hp->indexer_head_size = 64;
        hp->indexer_top_k = 8;
        hp->n_expert = 8;
        hp->n_expert_used = 3;
        hp->n_ff_exp = 256;
        hp->n_hash_layer = 1;
        hp->n_sinkhorn_iter = 3;
        hp->hc_eps = 0.01f;
        hp->expert_weights_scale = 1.25f;
        hp->rope_scaling_factor = 4.0f;
        hp->rope_n_ctx_orig = 64;
        set_clamp(hp, 1.5f);
    } else if (!strcmp(name, "small")) {
        hp->n_embd = 512;
        hp->n_block = 6;
        hp->n_vocab = 1024;
        hp->n_head = 8;
        hp->n_embd_head = hp->n_embd_head_v = 128;
        hp->q_lora_rank = 256;
        hp->o_lora_rank = 64;
        hp->n_out_group = 4;
        hp->n_swa = 64;
        hp->n_indexer_head = 8;
        hp->indexer_head_size = 64;
        hp->indexer_top_k = 16;
        hp->n_expert = 32;
        hp->n_expert_used = 4;
        hp->n_ff_exp = 256;
        hp->n_hash_layer = 1;
        set_clamp(hp, 10.0f);
    } else if (!strcmp(name, "bench")) {
        hp->n_ctx_train = 65536;
        hp->rope_n_ctx_orig = 4096;
        hp->n_embd = 1024;
        hp->n_block = 8;
        hp->n_vocab = 2048;
        hp->n_head = 16;
        hp->n_embd_head = hp->n_embd_head_v = 256;
        hp->q_lora_rank = 512;
        hp->o_lora_rank = 256;
        hp->n_out_group = 4;
        hp->n_swa = 128;
        hp->n_indexer_head = 16;
        hp->indexer_head_size = 128;
        hp->indexer_top_k = 64;
        hp->n_expert = 64;
        hp->n_expert_used = 6;
        hp->n_ff_exp = 512;
        hp->n_hash_layer = 2;
        set_clamp(hp, 10.0f);
    } else if (!strcmp(name, "flash")) {
        /* DeepSeek V4 Flash's published shape, ds4's q2 quant mix */
        hp->n_ctx_train = 1048576;
        hp->rope_n_ctx_orig = 65536;
        hp->n_embd = 4096;
        hp->n_block = 43;
        hp->n_vocab = 129280;
        hp->n_head = 64;
        hp->n_embd_head = hp->n_embd_head_v = 512;
        hp->q_lora_rank = 1024;
        hp->o_lora_rank = 1024;
        hp->n_out_group = 8;
        hp->n_swa = 128;
        hp->n_indexer_head = 64;
        hp->indexer_head_size = 128;
        hp->indexer_top_k = 512;
        hp->n_expert = 256;
        hp->n_expert_used = 6;
        hp->n_ff_exp = 2048;
        hp->n_hash_layer = 3;
        set_clamp(hp, 10.0f);
        o->ds4_mix = true;
        o->random_codes = true;
        o->n_threads = 2;
    } else {
        return ms_err_set(err, "unknown preset '%s' (expected tiny, small, bench or flash)",
                          name);
    }
    snprintf(o->preset, sizeof o->preset, "%s", name);
    mkmodel_preset_ratios(o);
    return 0;
}

void mkmodel_preset_ratios(struct mkmodel_opts *o) {
    struct dsv4_hparams *hp = &o->hp;
    if (strcmp(o->preset, "flash")) {
        dsv4_default_ratios(hp->compress_ratio, hp->n_block);
        return;
    }
    /* V4 Flash: layers 0 and 1 uncompressed, then ratio 4 on even and 128
     * on odd layers */
    for (uint32_t il = 0; il < hp->n_block; il++)
        hp->compress_ratio[il] = il < 2 ? 0 : il % 2 ? 128 : 4;
    if (hp->n_hash_layer > hp->n_block) hp->n_hash_layer = hp->n_block;
}

/* ------------------------------------------------------------------------ */
/* Types                                                                     */

static bool is_block_quant(enum ms_type t) {
    const struct ms_type_traits *tt = ms_type_traits_ref(t);
    return tt && tt->is_quantized;
}

static enum ms_type ds4_mix_type(const struct dsv4_tensor_info *t) {
    switch (t->cls) {
    case DSV4_C_EXP_GATE: case DSV4_C_EXP_UP: return MS_TYPE_IQ2_XXS;
    case DSV4_C_EXP_DOWN: return MS_TYPE_Q2_K;
    case DSV4_C_ATTN: case DSV4_C_SHEXP: case DSV4_C_OUTPUT: return MS_TYPE_Q8_0;
    default: return MS_TYPE_F16; /* embd, HC, compressor, indexer, router */
    }
}

int mkmodel_tensor_type(const struct mkmodel_opts *o, const struct dsv4_tensor_info *t,
                        enum ms_type *type, ms_err *err) {
    enum ms_type ty;
    if (t->cls == DSV4_C_TID2EID) {
        ty = MS_TYPE_I32;
    } else if (t->n_dims == 1) {
        ty = MS_TYPE_F32;
    } else if (dsv4_class_is_routed(t->cls)) {
        uint32_t n_layer = dsv4_n_layer(&o->hp);
        if (o->n_last_layers && (uint32_t)t->layer + o->n_last_layers >= n_layer)
            ty = o->last_layers_type;
        else
            ty = o->ds4_mix ? ds4_mix_type(t) : o->experts_type;
    } else {
        ty = o->ds4_mix ? ds4_mix_type(t) : o->dense_type;
        bool ape = t->role == DSV4_ATTN_COMP_APE || t->role == DSV4_IDX_COMP_APE;
        if (ape && is_block_quant(ty)) ty = MS_TYPE_F16;
    }
    const struct ms_type_traits *tt = ms_type_traits_ref(ty);
    if (!tt) return ms_err_set(err, "%s: unknown tensor type %d", t->name, (int)ty);
    if (t->ne[0] % tt->blck_size)
        return ms_err_set(err, "%s: row length ne0 = %lld is not a multiple of %s's block "
                          "size %lld; choose dimensions that are multiples of %lld",
                          t->name, (long long)t->ne[0], tt->name, (long long)tt->blck_size,
                          (long long)tt->blck_size);
    *type = ty;
    return 0;
}

static uint64_t tensor_bytes(const struct dsv4_tensor_info *t, enum ms_type ty) {
    return (uint64_t)ms_row_size(ty, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

int mkmodel_data_bytes(const struct mkmodel_opts *o, uint64_t *bytes, ms_err *err) {
    struct dsv4_layout l;
    if (dsv4_layout_build(&o->hp, &l, err)) return -1;
    uint64_t total = 0;
    for (size_t i = 0; i < l.n; i++) {
        enum ms_type ty = MS_TYPE_F32; /* set on success; -O3 cannot see it */
        if (mkmodel_tensor_type(o, &l.t[i], &ty, err)) {
            dsv4_layout_free(&l);
            return -1;
        }
        total += tensor_bytes(&l.t[i], o->f32_twin && ty != MS_TYPE_I32 ? MS_TYPE_F32 : ty);
    }
    dsv4_layout_free(&l);
    *bytes = total;
    return 0;
}

int mkmodel_fit_size(struct mkmodel_opts *o, uint64_t target, bool fixed_layers, ms_err *err) {
    static const uint32_t layer_steps[] = {4, 6, 8, 12, 16, 24, 32, 43, 64, 96, 128};
    const uint32_t e_min = o->hp.n_expert_used > 8 ? o->hp.n_expert_used : 8, e_max = 256;
    size_t n_steps = sizeof layer_steps / sizeof layer_steps[0];
    struct dsv4_hparams best = o->hp;
    uint64_t best_bytes = 0;
    for (size_t s = 0; s < n_steps; s++) {
        if (!fixed_layers) {
            o->hp.n_block = layer_steps[s];
            o->hp.n_hash_layer = o->hp.n_hash_layer < layer_steps[s] ? o->hp.n_hash_layer : 1;
            dsv4_default_ratios(o->hp.compress_ratio, o->hp.n_block);
        }
        /* Largest E in [e_min, last step's cap] whose data fits the target. */
        uint32_t lo = e_min, hi = (s + 1 == n_steps || fixed_layers) ? 4096 : e_max;
        uint64_t bytes;
        o->hp.n_expert = lo;
        if (mkmodel_data_bytes(o, &bytes, err)) return -1;
        if (bytes > target) break; /* even the fewest experts overshoot */
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo + 1) / 2;
            o->hp.n_expert = mid;
            if (mkmodel_data_bytes(o, &bytes, err)) return -1;
            if (bytes <= target) lo = mid;
            else hi = mid - 1;
        }
        o->hp.n_expert = lo;
        if (mkmodel_data_bytes(o, &bytes, err)) return -1;
        best = o->hp;
        best_bytes = bytes;
        if (lo < e_max || fixed_layers) break; /* more layers would only shrink E */
    }
    if (!best_bytes)
        return ms_err_set(err, "--size %llu is too small for the %s preset (use a smaller "
                          "preset or fewer layers)", (unsigned long long)target, o->preset);
    o->hp = best;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                    */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

enum gen_kind { GEN_NORMAL, GEN_ONE_PLUS, GEN_UNIFORM, GEN_TID2EID };

/* The distribution of a tensor's values (see mkmodel.h for the reasons). */
static enum gen_kind gen_params(const struct dsv4_tensor_info *t, float *a, float *b) {
    *a = 0.0f;
    *b = 1.0f;
    switch (t->role) {
    case DSV4_TOKEN_EMBD: return GEN_NORMAL;                     /* N(0, 1) rows */
    case DSV4_FFN_GATE_TID2EID: return GEN_TID2EID;
    case DSV4_OUTPUT_HC_BASE: case DSV4_HC_ATTN_BASE: case DSV4_HC_FFN_BASE:
        return GEN_NORMAL;                                      /* N(0, 1) */
    case DSV4_OUTPUT_HC_SCALE: case DSV4_HC_ATTN_SCALE: case DSV4_HC_FFN_SCALE:
        *a = 0.5f, *b = 2.0f;
        return GEN_UNIFORM;
    case DSV4_ATTN_SINKS: *b = 0.5f; return GEN_NORMAL;
    case DSV4_EXP_PROBS_B: *b = 0.05f; return GEN_NORMAL;
    case DSV4_ATTN_COMP_APE: case DSV4_IDX_COMP_APE: *b = 0.5f; return GEN_NORMAL;
    default: break;
    }
    if (t->cls == DSV4_C_NORM) {
        *b = 0.1f;
        return GEN_ONE_PLUS;
    }
    *b = (float)(1.0 / sqrt((double)t->ne[0])); /* matrices: N(0, 1/sqrt(n_in)) */
    return GEN_NORMAL;
}

struct block_job {
    const struct dsv4_tensor_info *t;
    uint32_t n_expert;
    uint64_t seed;         /* already mixed with the name hash */
    int64_t block;         /* block index */
    int64_t row0, n_rows;
    enum ms_type qtype;    /* the type chosen by mkmodel_tensor_type */
    bool twin;
    bool fast_normal;      /* ms_rng_fill_normal_fast (bench preset) */
    bool random_codes;     /* quantized blocks: random codes, fitted scales */
    float *f;              /* MK scratch: n_rows * ne0 floats */
    void *q;               /* quantized scratch */
    const void *out;       /* result pointer (f or q) */
    size_t out_bytes;
    int rc;
    char errmsg[128];
};

static void gen_tid2eid(struct block_job *j, ms_rng *r) {
    int64_t k = j->t->ne[0];
    int32_t *ids = (int32_t *)j->f;
    uint32_t perm[4096];
    uint32_t E = j->n_expert < 4096 ? j->n_expert : 4096;
    for (int64_t row = 0; row < j->n_rows; row++) {
        for (uint32_t e = 0; e < E; e++) perm[e] = e;
        for (int64_t i = 0; i < k; i++) { /* partial Fisher-Yates: k distinct ids */
            uint32_t pick = (uint32_t)i + (uint32_t)(ms_rng_u64(r) % (E - (uint64_t)i));
            uint32_t tmp = perm[i];
            perm[i] = perm[pick];
            perm[pick] = tmp;
            ids[row * k + i] = (int32_t)perm[i];
        }
    }
    j->out = ids;
    j->out_bytes = (size_t)(j->n_rows * k) * sizeof(int32_t);
}

/* Random codes for a quantized type: every byte random, then each block's
 * scale fields set so the values' standard deviation is about stddev
 * (the code distributions' spreads: int8 uniform ~74, Q4_K sc*q ~145,
 * Q2_K sc*q ~8.4, Q6_K sc*(q-32) ~1366 with int8 sc, IQ2_XXS scale*grid
 * ~50, FP4 ~3). false for a type it does not know (the caller quantizes
 * floats instead). */
static bool fill_random_codes(enum ms_type type, ms_rng *r, void *dst, size_t bytes,
                              float stddev) {
    size_t bsize, d_off, dmin_off = SIZE_MAX;
    float spread, dmin_ratio = 0.0f;
    switch (type) {
    case MS_TYPE_Q8_0: bsize = sizeof(block_q8_0); d_off = offsetof(block_q8_0, d); spread = 74; break;
    case MS_TYPE_Q4_K:
        bsize = sizeof(block_q4_K), d_off = offsetof(block_q4_K, d);
        dmin_off = offsetof(block_q4_K, dmin), spread = 145, dmin_ratio = 7.5f;
        break;
    case MS_TYPE_Q2_K:
        bsize = sizeof(block_q2_K), d_off = offsetof(block_q2_K, d);
        dmin_off = offsetof(block_q2_K, dmin), spread = 8.4f, dmin_ratio = 1.5f;
        break;
    case MS_TYPE_IQ2_XXS:
        bsize = sizeof(block_iq2_xxs), d_off = offsetof(block_iq2_xxs, d), spread = 50;
        break;
    case MS_TYPE_Q6_K: bsize = sizeof(block_q6_K); d_off = offsetof(block_q6_K, d); spread = 1366; break;
    case MS_TYPE_MXFP4: bsize = sizeof(block_mxfp4); d_off = SIZE_MAX; spread = 3; break;
    default: return false;
    }
    uint8_t *p = dst;
    for (size_t i = 0; i < bytes; i += 8) {
        const uint64_t v = ms_rng_u64(r);
        memcpy(p + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
    const float d = stddev / spread;
    const uint16_t dh = ms_fp32_to_fp16(d), dminh = ms_fp32_to_fp16(d * dmin_ratio);
    /* MXFP4: a shared E8M0 exponent, 2^(e - 127) */
    const uint8_t e8 = (uint8_t)(127 + (int)lrintf(log2f(d > 1e-30f ? d : 1e-30f)));
    for (size_t b = 0; b + bsize <= bytes; b += bsize) {
        if (d_off != SIZE_MAX) memcpy(p + b + d_off, &dh, 2);
        else p[b] = e8;
        if (dmin_off != SIZE_MAX) memcpy(p + b + dmin_off, &dminh, 2);
    }
    return true;
}

static void *run_block(void *arg) {
    struct block_job *j = arg;
    ms_rng r;
    ms_rng_seed(&r, mix64(j->seed ^ mix64((uint64_t)j->block + 1)));
    const int64_t ne0 = j->t->ne[0], n = j->n_rows * ne0;
    float a, b;
    enum gen_kind kind = gen_params(j->t, &a, &b);
    j->rc = 0;
    if (kind == GEN_TID2EID) {
        gen_tid2eid(j, &r);
        return NULL;
    }
    if (j->random_codes && kind == GEN_NORMAL && !j->twin) {
        const size_t bytes = ms_row_size(j->qtype, ne0) * (size_t)j->n_rows;
        if (fill_random_codes(j->qtype, &r, j->q, bytes, b)) {
            j->out = j->q;
            j->out_bytes = bytes;
            return NULL;
        }
    }
    if (kind == GEN_UNIFORM) {
        for (int64_t i = 0; i < n; i++) j->f[i] = ms_rng_uniform_f(&r, a, b);
    } else {
        if (j->fast_normal) ms_rng_fill_normal_fast(&r, j->f, n, b);
        else ms_rng_fill_normal(&r, j->f, n, b);
        if (kind == GEN_ONE_PLUS)
            for (int64_t i = 0; i < n; i++) j->f[i] += 1.0f;
    }
    j->out = j->f;
    j->out_bytes = (size_t)n * sizeof(float);
    if (j->qtype == MS_TYPE_F32) return NULL;
    const struct ms_type_traits *tt = ms_type_traits_ref(j->qtype);
    if (!tt->from_float || (j->twin && !tt->to_float)) {
        snprintf(j->errmsg, sizeof j->errmsg, "%s: no %s kernel for type %s", j->t->name,
                 tt->from_float ? "dequantization" : "quantization", tt->name);
        j->rc = -1;
        return NULL;
    }
    size_t row_bytes = ms_row_size(j->qtype, ne0);
    for (int64_t row = 0; row < j->n_rows; row++)
        tt->from_float(j->f + row * ne0, (char *)j->q + row * row_bytes, ne0);
    if (j->twin) { /* the exact-math reference: dequantized values as F32 */
        for (int64_t row = 0; row < j->n_rows; row++)
            tt->to_float((char *)j->q + row * row_bytes, j->f + row * ne0, ne0);
    } else {
        j->out = j->q;
        j->out_bytes = row_bytes * (size_t)j->n_rows;
    }
    return NULL;
}

/* Generates and writes one tensor, n_threads row blocks at a time. */
static int write_tensor(const struct mkmodel_opts *o, const struct dsv4_tensor_info *t,
                        enum ms_type qtype, struct gguf_writer *w, struct block_job *jobs,
                        int n_threads, ms_err *err) {
    const int64_t ne0 = t->ne[0], n_rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (o->sparse && t->n_dims > 1 && t->cls != DSV4_C_TID2EID) /* a hole */
        return gguf_writer_skip(w, tensor_bytes(t, o->f32_twin ? MS_TYPE_F32 : qtype), err);
    int64_t rows_per_block = MK_BLOCK_ELEMS / ne0;
    if (rows_per_block < 1) rows_per_block = 1;
    const int64_t n_blocks = (n_rows + rows_per_block - 1) / rows_per_block;
    const uint64_t seed = mix64(o->seed ^ name_hash(t->name));
    for (int64_t b0 = 0; b0 < n_blocks; b0 += n_threads) {
        int n_jobs = (int)(n_blocks - b0 < n_threads ? n_blocks - b0 : n_threads);
        pthread_t tid[MK_MAX_THREADS];
        bool started[MK_MAX_THREADS] = {false};
        for (int i = 0; i < n_jobs; i++) {
            struct block_job *j = &jobs[i];
            j->t = t;
            j->n_expert = o->hp.n_expert;
            j->seed = seed;
            j->block = b0 + i;
            j->row0 = j->block * rows_per_block;
            j->n_rows = n_rows - j->row0 < rows_per_block ? n_rows - j->row0 : rows_per_block;
            j->qtype = qtype;
            j->twin = o->f32_twin;
            j->fast_normal = !strcmp(o->preset, "bench") || o->random_codes;
            j->random_codes = o->random_codes;
            if (i > 0 && pthread_create(&tid[i], NULL, run_block, j) == 0) started[i] = true;
        }
        run_block(&jobs[0]);
        for (int i = 1; i < n_jobs; i++) {
            if (started[i]) pthread_join(tid[i], NULL);
            else run_block(&jobs[i]); /* could not start a thread: do it here */
        }
        for (int i = 0; i < n_jobs; i++) {
            if (jobs[i].rc) return ms_err_set(err, "%s", jobs[i].errmsg);
            if (gguf_writer_write(w, jobs[i].out, jobs[i].out_bytes, err)) return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* File                                                                      */

static int write_vocab(const struct mkmodel_opts *o, struct gguf_writer *w, ms_err *err) {
    struct ms_vocab_spec v;
    memset(&v, 0, sizeof v);
    if (o->vocab_from ? ms_vocab_import_hf(o->vocab_from, o->hp.n_vocab, &v, err)
                      : ms_vocab_build(o->hp.n_vocab, &v, err))
        return ms_err_prefix(err, "vocabulary");
    int rc = 0;
    rc |= gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= gguf_writer_set_str(w, "tokenizer.ggml.pre", "deepseek-v3");
    rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
                                  v.n_tokens);
    rc |= gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.token_type,
                              v.n_tokens);
    rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                  v.n_merges);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v.bos_id);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v.eos_id);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", v.pad_id);
    rc |= gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    rc |= gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    uint32_t n_tokens = v.n_tokens;
    ms_vocab_spec_free(&v);
    if (rc) return ms_err_set(err, "out of memory writing the vocabulary");
    if (n_tokens != o->hp.n_vocab)
        return ms_err_set(err, "vocabulary has %u tokens, expected %u", n_tokens, o->hp.n_vocab);
    return 0;
}

static int write_metadata(const struct mkmodel_opts *o, struct gguf_writer *w, ms_err *err) {
    char name[128];
    snprintf(name, sizeof name, "moestream mkmodel %s seed %llu%s", o->preset,
             (unsigned long long)o->seed, o->f32_twin ? " f32-twin" : "");
    if (gguf_writer_set_str(w, "general.architecture", DSV4_ARCH) ||
        gguf_writer_set_str(w, "general.name", name) ||
        gguf_writer_set_u32(w, "general.quantization_version", 2))
        return ms_err_set(err, "out of memory writing metadata");
    if (o->provenance && gguf_writer_set_str(w, "moestream.mkmodel.options", o->provenance))
        return ms_err_set(err, "out of memory writing metadata");
    /* only generators other than the float path say how the data was made
     * (older files, and the test vectors recorded from them, keep their bytes) */
    const char *data = o->sparse         ? "holes: matrices all zero, only 1-D tensors and tid2eid "
                                           "hold values"
                       : o->random_codes ? "random codes: quantized blocks hold random codes with "
                                           "fitted scales, not quantized random floats"
                                         : NULL;
    if (data && gguf_writer_set_str(w, "moestream.mkmodel.data", data))
        return ms_err_set(err, "out of memory writing metadata");
    if (dsv4_hparams_write(&o->hp, w, err)) return -1;
    return write_vocab(o, w, err);
}

int mkmodel_write(const struct mkmodel_opts *o, const char *path, ms_err *err) {
    struct dsv4_layout l;
    if (dsv4_layout_build(&o->hp, &l, err)) return -1;
    int rc = -1;
    bool began = false;
    int n_threads = o->n_threads < 1 ? 1 : o->n_threads > MK_MAX_THREADS ? MK_MAX_THREADS
                                                                         : o->n_threads;
    struct block_job *jobs = calloc((size_t)n_threads, sizeof *jobs);
    enum ms_type *types = calloc(l.n, sizeof *types);
    struct gguf_writer *w = gguf_writer_new();
    if (!jobs || !types || !w) {
        ms_err_set(err, "out of memory");
        goto done;
    }
    int64_t max_elems = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (mkmodel_tensor_type(o, &l.t[i], &types[i], err)) goto done;
        int64_t rows = MK_BLOCK_ELEMS / l.t[i].ne[0];
        int64_t elems = (rows < 1 ? 1 : rows) * l.t[i].ne[0];
        if (elems > max_elems) max_elems = elems;
    }
    for (int i = 0; i < n_threads; i++) {
        /* Quantized data is never larger than the f32 it came from. */
        jobs[i].f = ms_aligned_alloc(MS_ALIGN, (size_t)max_elems * sizeof(float));
        jobs[i].q = ms_aligned_alloc(MS_ALIGN, (size_t)max_elems * sizeof(float));
        if (!jobs[i].f || !jobs[i].q) {
            ms_err_set(err, "out of memory (generation buffers)");
            goto done;
        }
    }
    if (write_metadata(o, w, err)) goto done;
    for (size_t i = 0; i < l.n; i++) {
        enum ms_type stored = o->f32_twin && types[i] != MS_TYPE_I32 ? MS_TYPE_F32 : types[i];
        if (gguf_writer_add_tensor(w, l.t[i].name, stored, l.t[i].n_dims, l.t[i].ne, err))
            goto done;
    }
    if (o->no_overwrite) gguf_writer_set_overwrite(w, false);
    if (gguf_writer_begin(w, path, err)) goto done;
    began = true;
    for (size_t i = 0; i < l.n; i++)
        if (write_tensor(o, &l.t[i], types[i], w, jobs, n_threads, err)) goto done;
    if (gguf_writer_finish(w, err)) goto done;
    rc = 0;
done:
    if (jobs)
        for (int i = 0; i < n_threads; i++) {
            ms_free(jobs[i].f);
            ms_free(jobs[i].q);
        }
    free(jobs);
    free(types);
    gguf_writer_free(w);
    if (rc && began) remove(path); /* never leave a partial model behind */
    dsv4_layout_free(&l);
    return rc;
}
