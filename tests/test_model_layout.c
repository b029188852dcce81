/*
 * test_model_layout.c - deepseek4 hyperparameters, tensor layout and the
 * mkmodel generator: layout counts and shapes derived from the rules of
 * docs/gguf.md ("Tensors"), validation of every llama.cpp constraint on the
 * metadata (docs/gguf.md, "Metadata keys"), metadata
 * round trip, files in every supported type read back by gguf_open,
 * determinism, the F32 twin and mixed expert types.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/layout.h"
#include "mkmodel/mkmodel.h"
#include "quant/quant.h"
#include "test_util.h"

static int setup_tmp(void **state) {
    (void)state;
    return test_tmp_setup("test_model_layout");
}

static struct mkmodel_opts tiny_opts(void) {
    struct mkmodel_opts o;
    ms_err err;
    assert_int_equal(mkmodel_preset(&o, "tiny", &err), 0);
    return o;
}

static const struct dsv4_tensor_info *find(const struct dsv4_layout *l, const char *name) {
    long i = dsv4_layout_find(l, name);
    return i < 0 ? NULL : &l->t[i];
}

static void assert_ne(const struct dsv4_tensor_info *t, int64_t a, int64_t b, int64_t c) {
    assert_non_null(t);
    assert_int_equal(t->ne[0], a);
    assert_int_equal(t->ne[1], b);
    assert_int_equal(t->ne[2], c);
    assert_int_equal(t->ne[3], 1);
}

/* Count per layer (docs/gguf.md, "Tensors"): 24 always-present tensors (6 HC, 4 norms,
 * 6 attention, router, bias-or-tid2eid, 3 routed, 3 shared), +4 compressor
 * tensors when ratio != 0, +6 indexer tensors when ratio == 4; 6 globals. */
static size_t expected_count(const struct dsv4_hparams *hp) {
    size_t n = 6;
    for (uint32_t il = 0; il < dsv4_n_layer(hp); il++)
        n += 24 + (hp->compress_ratio[il] ? 4 : 0) + (hp->compress_ratio[il] == 4 ? 6 : 0);
    return n;
}

static void test_layout_counts_and_shapes(void **state) {
    (void)state;
    struct mkmodel_opts o = tiny_opts();
    struct dsv4_hparams *hp = &o.hp;
    /* A layout with more variety than the preset: 6 layers, 2 hash layers. */
    hp->n_block = 6;
    uint32_t ratios[6] = {0, 128, 4, 4, 0, 128};
    memcpy(hp->compress_ratio, ratios, sizeof ratios);
    hp->n_hash_layer = 2;
    struct dsv4_layout l;
    ms_err err;
    assert_int_equal(dsv4_layout_build(hp, &l, &err), 0);
    assert_int_equal(l.n, expected_count(hp));

    const int64_t D = hp->n_embd, H = hp->n_head, d = hp->n_embd_head, G = hp->n_out_group;
    assert_ne(find(&l, "token_embd.weight"), D, hp->n_vocab, 1);
    assert_ne(find(&l, "output.weight"), D, hp->n_vocab, 1);
    assert_ne(find(&l, "output_hc_fn.weight"), 4 * D, 4, 1);
    assert_ne(find(&l, "blk.0.hc_attn_fn.weight"), 4 * D, 24, 1);
    assert_ne(find(&l, "blk.0.hc_ffn_scale.weight"), 3, 1, 1);
    assert_ne(find(&l, "blk.1.attn_q_b.weight"), hp->q_lora_rank, H * d, 1);
    assert_ne(find(&l, "blk.1.attn_output_a.weight"), H * d / G, G * hp->o_lora_rank, 1);
    assert_ne(find(&l, "blk.1.attn_output_b.weight"), G * hp->o_lora_rank, D, 1);
    assert_ne(find(&l, "blk.2.ffn_gate_exps.weight"), D, hp->n_ff_exp, hp->n_expert);
    assert_ne(find(&l, "blk.2.ffn_down_exps.weight"), hp->n_ff_exp, D, hp->n_expert);
    assert_ne(find(&l, "blk.0.ffn_gate_tid2eid.weight"), hp->n_expert_used, hp->n_vocab, 1);
    assert_ne(find(&l, "blk.2.attn_compressor_kv.weight"), D, 2 * d, 1);   /* coff 2 */
    assert_ne(find(&l, "blk.1.attn_compressor_kv.weight"), D, d, 1);       /* coff 1 */
    assert_ne(find(&l, "blk.2.attn_compressor_ape.weight"), 2 * d, 4, 1);
    assert_ne(find(&l, "blk.5.attn_compressor_ape.weight"), d, 128, 1);
    assert_ne(find(&l, "blk.3.indexer_compressor_ape.weight"), 2 * hp->indexer_head_size, 4, 1);
    assert_ne(find(&l, "blk.3.indexer.attn_q_b.weight"), hp->q_lora_rank,
              hp->n_indexer_head * hp->indexer_head_size, 1);

    for (uint32_t il = 0; il < 6; il++) {
        char name[64];
        bool hash = il < hp->n_hash_layer;
        snprintf(name, sizeof name, "blk.%u.ffn_gate_tid2eid.weight", il);
        assert_int_equal(find(&l, name) != NULL, hash);
        snprintf(name, sizeof name, "blk.%u.exp_probs_b.bias", il);
        assert_int_equal(find(&l, name) != NULL, !hash);
        snprintf(name, sizeof name, "blk.%u.attn_compressor_gate.weight", il);
        assert_int_equal(find(&l, name) != NULL, ratios[il] != 0);
        snprintf(name, sizeof name, "blk.%u.indexer.proj.weight", il);
        assert_int_equal(find(&l, name) != NULL, ratios[il] == 4);
        snprintf(name, sizeof name, "blk.%u.ffn_up_shexp.weight", il);
        assert_non_null(find(&l, name));
    }
    /* Classes and routed flags. */
    const struct dsv4_tensor_info *t = find(&l, "blk.4.ffn_up_exps.weight");
    assert_int_equal(t->cls, DSV4_C_EXP_UP);
    assert_true(dsv4_class_is_routed(t->cls));
    assert_false(dsv4_class_is_routed(find(&l, "blk.4.ffn_up_shexp.weight")->cls));
    assert_int_equal(find(&l, "blk.4.ffn_gate_inp.weight")->cls, DSV4_C_ROUTER);
    assert_int_equal(t->layer, 4);
    assert_int_equal(find(&l, "output_norm.weight")->layer, -1);
    assert_true(dsv4_is_mtp_name("blk.43.nextn.eh_proj.weight"));
    assert_true(dsv4_is_mtp_name("mtp.0.hc_head_fn.weight"));
    assert_false(dsv4_is_mtp_name("blk.4.ffn_up_exps.weight"));
    dsv4_layout_free(&l);
}

/* Each llama.cpp constraint, broken one at a time, must be rejected with a message
 * naming the key. */
static void test_validation(void **state) {
    (void)state;
    struct mkmodel_opts o = tiny_opts();
    ms_err err;
    assert_int_equal(dsv4_hparams_validate(&o.hp, &err), 0);
    struct dsv4_hparams h;
#define BREAK(stmt, key)                                                  \
    do {                                                                  \
        h = o.hp;                                                         \
        stmt;                                                             \
        err.msg[0] = 0;                                                   \
        assert_int_equal(dsv4_hparams_validate(&h, &err), -1);            \
        if (!strstr(err.msg, key)) fail_msg("'%s' lacks '%s'", err.msg, key); \
    } while (0)
    BREAK(h.n_hc = 3, "hyper_connection.count");
    BREAK(h.expert_gating_func = 2, "expert_gating_func");
    BREAK(h.compress_ratio[1] = 5, "compress_ratios");
    BREAK((h.compress_ratio[1] = 0, h.compress_ratio[3] = 128), "ratio 4");
    BREAK((h.indexer_head_size = 128, h.compress_ratio[2] = 4), "ratio-128");
    BREAK(h.n_head_kv = 2, "head_count_kv");
    BREAK(h.n_embd_head_v = 64, "value_length");
    BREAK(h.indexer_head_size = 96, "indexer.key_length");
    BREAK(h.n_out_group = 3, "output_group_count");
    BREAK(h.n_rot = 256, "rope.dimension_count");
    BREAK(h.n_expert_used = 9, "expert_used_count");
    BREAK(h.n_hash_layer = 5, "hash_layer_count");
    BREAK(h.n_expert_groups = 2, "expert_group_count");
    BREAK(h.n_embd = 0, "embedding_length");
    BREAK(h.n_block = DSV4_MAX_LAYERS + 1, "block_count");
#undef BREAK
    /* d == d_I with a ratio-128 layer is fine. */
    h = o.hp;
    h.indexer_head_size = 128;
    assert_int_equal(dsv4_hparams_validate(&h, &err), 0);
}

static void write_model(struct mkmodel_opts *o, const char *name) {
    ms_err err;
    if (mkmodel_write(o, tmp_path(name), &err)) fail_msg("mkmodel_write: %s", err.msg);
}

/* Every expected tensor present, in the type mkmodel_tensor_type chose, with
 * the layout's shape, and nothing else. */
static void check_file(const struct mkmodel_opts *o, const char *name) {
    struct gguf_file *f;
    ms_err err;
    if (gguf_open(&f, tmp_path(name), &err)) fail_msg("gguf_open: %s", err.msg);
    struct dsv4_layout l;
    assert_int_equal(dsv4_layout_build(&o->hp, &l, &err), 0);
    assert_int_equal(f->n_tensors, l.n);
    for (size_t i = 0; i < l.n; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(f, l.t[i].name);
        if (!t) fail_msg("missing %s", l.t[i].name);
        enum ms_type ty;
        assert_int_equal(mkmodel_tensor_type(o, &l.t[i], &ty, &err), 0);
        if (o->f32_twin && ty != MS_TYPE_I32) ty = MS_TYPE_F32;
        if (t->type != ty) fail_msg("%s: type %d, expected %d", t->name, t->type, ty);
        assert_int_equal(t->n_dims, l.t[i].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], l.t[i].ne[d]);
        if (l.t[i].n_dims == 1) assert_int_equal(t->type, MS_TYPE_F32);
    }
    /* Hyperparameters read back equal what was written. */
    struct dsv4_hparams hp;
    if (dsv4_hparams_read(&hp, f, &err)) fail_msg("hparams_read: %s", err.msg);
    assert_int_equal(hp.n_embd, o->hp.n_embd);
    assert_int_equal(hp.n_block, o->hp.n_block);
    assert_int_equal(hp.n_vocab, o->hp.n_vocab);
    assert_int_equal(hp.n_expert, o->hp.n_expert);
    assert_int_equal(hp.n_hash_layer, o->hp.n_hash_layer);
    assert_int_equal(hp.n_sinkhorn_iter, o->hp.n_sinkhorn_iter);
    assert_true(hp.hc_eps == o->hp.hc_eps);
    assert_true(hp.expert_weights_scale == o->hp.expert_weights_scale);
    assert_string_equal(hp.rope_scaling_type, o->hp.rope_scaling_type);
    assert_memory_equal(hp.compress_ratio, o->hp.compress_ratio, hp.n_block * sizeof(uint32_t));
    assert_memory_equal(hp.swiglu_clamp_exp, o->hp.swiglu_clamp_exp, hp.n_block * sizeof(float));
    assert_memory_equal(hp.swiglu_clamp_shexp, o->hp.swiglu_clamp_shexp,
                        hp.n_block * sizeof(float));
    const char *s;
    assert_int_equal(gguf_get_str(f, "tokenizer.ggml.model", &s, &err), 0);
    assert_string_equal(s, "gpt2");
    assert_int_equal(gguf_get_str(f, "tokenizer.ggml.pre", &s, &err), 0);
    assert_string_equal(s, "deepseek-v3");
    assert_int_equal(gguf_get_str(f, "general.name", &s, &err), 0);
    assert_non_null(strstr(s, "moestream mkmodel tiny seed"));
    dsv4_layout_free(&l);
    gguf_close(f);
}

static void test_every_type(void **state) {
    (void)state;
    static const enum ms_type types[] = {MS_TYPE_F32, MS_TYPE_F16, MS_TYPE_BF16,
                                         MS_TYPE_Q8_0, MS_TYPE_Q4_K, MS_TYPE_Q2_K,
                                         MS_TYPE_IQ2_XXS, MS_TYPE_MXFP4};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        struct mkmodel_opts o = tiny_opts();
        o.experts_type = types[i];
        /* dense in a different type than the experts, cycling through all */
        o.dense_type = types[(i + 3) % (sizeof types / sizeof types[0])];
        char name[64];
        snprintf(name, sizeof name, "type_%s.gguf", ms_type_name(types[i]));
        write_model(&o, name);
        check_file(&o, name);
        remove(tmp_path(name));
    }
    struct mkmodel_opts o = tiny_opts();
    o.ds4_mix = true;
    write_model(&o, "ds4mix.gguf");
    check_file(&o, "ds4mix.gguf");
    struct gguf_file *f;
    ms_err err;
    assert_int_equal(gguf_open(&f, tmp_path("ds4mix.gguf"), &err), 0);
    assert_int_equal(gguf_find_tensor(f, "blk.1.ffn_up_exps.weight")->type, MS_TYPE_IQ2_XXS);
    assert_int_equal(gguf_find_tensor(f, "blk.1.ffn_down_exps.weight")->type, MS_TYPE_Q2_K);
    assert_int_equal(gguf_find_tensor(f, "blk.1.attn_kv.weight")->type, MS_TYPE_Q8_0);
    assert_int_equal(gguf_find_tensor(f, "blk.1.hc_ffn_fn.weight")->type, MS_TYPE_F16);
    assert_int_equal(gguf_find_tensor(f, "blk.1.ffn_gate_inp.weight")->type, MS_TYPE_F16);
    assert_int_equal(gguf_find_tensor(f, "blk.1.attn_norm.weight")->type, MS_TYPE_F32);
    gguf_close(f);
    remove(tmp_path("ds4mix.gguf"));
}

static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static void test_determinism(void **state) {
    (void)state;
    struct mkmodel_opts o = tiny_opts();
    o.seed = 7;
    o.n_threads = 2;
    write_model(&o, "det_a.gguf");
    o.n_threads = 1; /* the thread count must not change a byte */
    write_model(&o, "det_b.gguf");
    o.seed = 8;
    write_model(&o, "det_c.gguf");
    assert_true(files_equal(tmp_path("det_a.gguf"), tmp_path("det_b.gguf")));
    assert_false(files_equal(tmp_path("det_a.gguf"), tmp_path("det_c.gguf")));
    remove(tmp_path("det_a.gguf"));
    remove(tmp_path("det_b.gguf"));
    remove(tmp_path("det_c.gguf"));
}

/* The twin holds exactly the dequantized values of the quantized file, and
 * the values look like the distributions mkmodel promises. */
static void test_f32_twin(void **state) {
    (void)state;
    struct mkmodel_opts o = tiny_opts();
    o.experts_type = MS_TYPE_Q2_K;
    o.dense_type = MS_TYPE_Q8_0;
    write_model(&o, "twin_q.gguf");
    o.f32_twin = true;
    write_model(&o, "twin_f.gguf");
    check_file(&o, "twin_f.gguf");
    struct gguf_file *fq, *ff;
    ms_err err;
    assert_int_equal(gguf_open(&fq, tmp_path("twin_q.gguf"), &err), 0);
    assert_int_equal(gguf_open(&ff, tmp_path("twin_f.gguf"), &err), 0);
    int n_quantized = 0;
    for (uint64_t i = 0; i < fq->n_tensors; i++) {
        const struct gguf_tensor *tq = &fq->tensors[i];
        const struct gguf_tensor *tf = gguf_find_tensor(ff, tq->name);
        assert_non_null(tf);
        void *q = malloc(tq->size), *fv = malloc(tf->size);
        assert_int_equal(gguf_read_tensor(fq, tq, q, &err), 0);
        assert_int_equal(gguf_read_tensor(ff, tf, fv, &err), 0);
        if (tq->type == MS_TYPE_F32 || tq->type == MS_TYPE_I32) {
            assert_int_equal(tf->type, tq->type);
            assert_memory_equal(q, fv, tq->size);
        } else {
            n_quantized++;
            assert_int_equal(tf->type, MS_TYPE_F32);
            float *deq = malloc((size_t)tq->n_elements * sizeof(float));
            ms_type_traits_ref(tq->type)->to_float(q, deq, tq->n_elements);
            assert_memory_equal(deq, fv, tf->size);
            free(deq);
        }
        const float *x = fv;
        if (tf->type == MS_TYPE_F32) {
            double sum = 0, sum2 = 0;
            int64_t n = tf->n_elements, nonzero = 0;
            for (int64_t k = 0; k < n; k++) {
                assert_true(isfinite(x[k]));
                sum += x[k];
                sum2 += (double)x[k] * x[k];
                nonzero += x[k] != 0.0f;
            }
            assert_true(nonzero > n / 2);
            double mean = sum / (double)n, sd = sqrt(sum2 / (double)n - mean * mean);
            if (strstr(tq->name, "attn_norm.weight")) {
                assert_true(fabs(mean - 1.0) < 0.05);
            } else if (strstr(tq->name, "blk.1.attn_q_b.weight")) {
                /* N(0, 1/sqrt(r_q)) through q8_0 */
                double want = 1.0 / sqrt((double)o.hp.q_lora_rank);
                assert_true(fabs(mean) < 0.1 * want);
                assert_true(fabs(sd - want) < 0.05 * want);
            }
        } else if (tf->type == MS_TYPE_I32) {
            const int32_t *ids = fv;
            int64_t k = tf->ne[0];
            for (int64_t row = 0; row < tf->ne[1]; row++)
                for (int64_t a = 0; a < k; a++) {
                    assert_true(ids[row * k + a] >= 0 &&
                                ids[row * k + a] < (int32_t)o.hp.n_expert);
                    for (int64_t b = 0; b < a; b++)
                        assert_int_not_equal(ids[row * k + a], ids[row * k + b]);
                }
        }
        free(q);
        free(fv);
    }
    assert_true(n_quantized > 50);
    gguf_close(fq);
    gguf_close(ff);
    remove(tmp_path("twin_q.gguf"));
    remove(tmp_path("twin_f.gguf"));
}

static void test_mixed_expert_types(void **state) {
    (void)state;
    struct mkmodel_opts o = tiny_opts();
    o.experts_type = MS_TYPE_Q2_K;
    o.n_last_layers = 2;
    o.last_layers_type = MS_TYPE_Q8_0;
    write_model(&o, "mixed.gguf");
    check_file(&o, "mixed.gguf");
    struct gguf_file *f;
    ms_err err;
    assert_int_equal(gguf_open(&f, tmp_path("mixed.gguf"), &err), 0);
    uint32_t n = dsv4_n_layer(&o.hp);
    for (uint32_t il = 0; il < n; il++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%u.ffn_down_exps.weight", il);
        enum ms_type want = il + 2 >= n ? MS_TYPE_Q8_0 : MS_TYPE_Q2_K;
        assert_int_equal(gguf_find_tensor(f, name)->type, want);
    }
    gguf_close(f);
    remove(tmp_path("mixed.gguf"));
}

static void test_type_divisibility(void **state) {
    (void)state;
    struct mkmodel_opts o = tiny_opts();
    o.hp.n_embd = 288; /* a multiple of 32, not of 256 */
    o.dense_type = MS_TYPE_Q8_0;
    o.experts_type = MS_TYPE_Q8_0;
    uint64_t bytes;
    ms_err err;
    assert_int_equal(mkmodel_data_bytes(&o, &bytes, &err), 0);
    o.experts_type = MS_TYPE_Q4_K;
    assert_int_equal(mkmodel_data_bytes(&o, &bytes, &err), -1);
    assert_non_null(strstr(err.msg, "ffn_gate_exps"));
    assert_non_null(strstr(err.msg, "288"));
}

static void test_bench_fit(void **state) {
    (void)state;
    struct mkmodel_opts o;
    ms_err err;
    assert_int_equal(mkmodel_preset(&o, "bench", &err), 0);
    const uint64_t targets[] = {128ull << 20, 1ull << 30, 8ull << 30};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(mkmodel_preset(&o, "bench", &err), 0);
        assert_int_equal(mkmodel_fit_size(&o, targets[i], false, &err), 0);
        uint64_t bytes;
        assert_int_equal(mkmodel_data_bytes(&o, &bytes, &err), 0);
        assert_true(bytes <= targets[i]);
        assert_true(bytes >= targets[i] / 10 * 9);
        assert_true(o.hp.n_expert >= 8 && o.hp.n_expert <= 256);
    }
    assert_int_equal(mkmodel_preset(&o, "bench", &err), 0);
    assert_int_equal(mkmodel_fit_size(&o, 1 << 20, false, &err), -1);
    assert_int_equal(mkmodel_preset(&o, "huge", &err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_counts_and_shapes),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_f32_twin),
        cmocka_unit_test(test_mixed_expert_types),
        cmocka_unit_test(test_type_divisibility),
        cmocka_unit_test(test_bench_fit),
    };
    return cmocka_run_group_tests(tests, setup_tmp, NULL);
}
