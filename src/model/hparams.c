/*
 * hparams.c - deepseek4 metadata <-> struct dsv4_hparams (see hparams.h).
 * Key strings are llama.cpp's (src/llama-arch.cpp; listed in docs/gguf.md).
 */
#include "model/hparams.h"

#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define K(suffix) DSV4_ARCH "." suffix

#define KEY_CTX K("context_length")
#define KEY_EMBD K("embedding_length")
#define KEY_BLOCKS K("block_count")
#define KEY_VOCAB K("vocab_size")
#define KEY_HEAD K("attention.head_count")
#define KEY_HEAD_KV K("attention.head_count_kv")
#define KEY_KEY_LEN K("attention.key_length")
#define KEY_VAL_LEN K("attention.value_length")
#define KEY_ROT K("rope.dimension_count")
#define KEY_RMS_EPS K("attention.layer_norm_rms_epsilon")
#define KEY_Q_LORA K("attention.q_lora_rank")
#define KEY_O_LORA K("attention.output_lora_rank")
#define KEY_O_GROUP K("attention.output_group_count")
#define KEY_SWA K("attention.sliding_window")
#define KEY_RATIOS K("attention.compress_ratios")
#define KEY_C_BASE K("attention.compress_rope_freq_base")
#define KEY_IDX_HEAD K("attention.indexer.head_count")
#define KEY_IDX_LEN K("attention.indexer.key_length")
#define KEY_IDX_TOPK K("attention.indexer.top_k")
#define KEY_ROPE_BASE K("rope.freq_base")
#define KEY_RS_TYPE K("rope.scaling.type")
#define KEY_RS_FACTOR K("rope.scaling.factor")
#define KEY_RS_ORIG K("rope.scaling.original_context_length")
#define KEY_BETA_FAST K("rope.scaling.yarn_beta_fast")
#define KEY_BETA_SLOW K("rope.scaling.yarn_beta_slow")
#define KEY_EXPERT K("expert_count")
#define KEY_EXPERT_USED K("expert_used_count")
#define KEY_EXPERT_SHARED K("expert_shared_count")
#define KEY_FF_EXP K("expert_feed_forward_length")
#define KEY_W_SCALE K("expert_weights_scale")
#define KEY_W_NORM K("expert_weights_norm")
#define KEY_GATING K("expert_gating_func")
#define KEY_GROUPS K("expert_group_count")
#define KEY_GROUP_USED K("expert_group_used_count")
#define KEY_CLAMP_EXP K("swiglu_clamp_exp")
#define KEY_CLAMP_SHEXP K("swiglu_clamp_shexp")
#define KEY_HASH K("hash_layer_count")
#define KEY_HC K("hyper_connection.count")
#define KEY_SINKHORN K("hyper_connection.sinkhorn_iterations")
#define KEY_HC_EPS K("hyper_connection.epsilon")
#define KEY_NEXTN K("nextn_predict_layers")

static int opt_u32(const struct gguf_file *f, const char *key, uint32_t *out, uint32_t dflt,
                   ms_err *err) {
    *out = dflt;
    return gguf_get_u32_opt(f, key, out, err) < 0 ? -1 : 0;
}

static int opt_f32(const struct gguf_file *f, const char *key, float *out, float dflt,
                   ms_err *err) {
    *out = dflt;
    return gguf_get_f32_opt(f, key, out, err) < 0 ? -1 : 0;
}

/* A per-block float array, or a scalar broadcast to every block. 1 if absent. */
static int opt_f32_per_block(const struct gguf_file *f, const char *key, float *out,
                             uint32_t n, ms_err *err) {
    if (!gguf_find_kv(f, key)) return 1;
    return gguf_get_arr_f32(f, key, out, n, true, err);
}

int dsv4_hparams_read(struct dsv4_hparams *hp, const struct gguf_file *f, ms_err *err) {
    memset(hp, 0, sizeof *hp);
    const char *arch = NULL;
    if (gguf_get_str(f, "general.architecture", &arch, err)) return -1;
    if (strcmp(arch, DSV4_ARCH))
        return ms_err_set(err, "general.architecture is '%s', not '%s'", arch, DSV4_ARCH);

    if (gguf_get_u32(f, KEY_BLOCKS, &hp->n_block, err)) return -1;
    if (hp->n_block == 0 || hp->n_block > DSV4_MAX_LAYERS)
        return ms_err_set(err, "%s = %u: must be in 1..%d", KEY_BLOCKS, hp->n_block,
                          DSV4_MAX_LAYERS);
    struct {
        const char *key;
        uint32_t *dst;
    } req_u32[] = {
        {KEY_CTX, &hp->n_ctx_train},       {KEY_EMBD, &hp->n_embd},
        {KEY_HEAD, &hp->n_head},           {KEY_HEAD_KV, &hp->n_head_kv},
        {KEY_KEY_LEN, &hp->n_embd_head},   {KEY_VAL_LEN, &hp->n_embd_head_v},
        {KEY_ROT, &hp->n_rot},             {KEY_Q_LORA, &hp->q_lora_rank},
        {KEY_O_LORA, &hp->o_lora_rank},    {KEY_O_GROUP, &hp->n_out_group},
        {KEY_SWA, &hp->n_swa},             {KEY_IDX_HEAD, &hp->n_indexer_head},
        {KEY_IDX_LEN, &hp->indexer_head_size}, {KEY_IDX_TOPK, &hp->indexer_top_k},
        {KEY_EXPERT, &hp->n_expert},       {KEY_EXPERT_USED, &hp->n_expert_used},
        {KEY_EXPERT_SHARED, &hp->n_expert_shared}, {KEY_FF_EXP, &hp->n_ff_exp},
        {KEY_GATING, &hp->expert_gating_func}, {KEY_HC, &hp->n_hc},
        {KEY_SINKHORN, &hp->n_sinkhorn_iter},
    };
    for (size_t i = 0; i < sizeof req_u32 / sizeof req_u32[0]; i++)
        if (gguf_get_u32(f, req_u32[i].key, req_u32[i].dst, err)) return -1;
    struct {
        const char *key;
        float *dst;
    } req_f32[] = {
        {KEY_RMS_EPS, &hp->rms_eps},
        {KEY_C_BASE, &hp->compress_rope_freq_base},
        {KEY_ROPE_BASE, &hp->rope_freq_base},
        {KEY_HC_EPS, &hp->hc_eps},
    };
    for (size_t i = 0; i < sizeof req_f32 / sizeof req_f32[0]; i++)
        if (gguf_get_f32(f, req_f32[i].key, req_f32[i].dst, err)) return -1;

    int64_t ratios[DSV4_MAX_LAYERS];
    if (gguf_get_arr_i64(f, KEY_RATIOS, ratios, hp->n_block, false, err)) return -1;
    for (uint32_t il = 0; il < hp->n_block; il++) {
        if (ratios[il] != 0 && ratios[il] != 4 && ratios[il] != 128)
            return ms_err_set(err, "%s[%u] = %lld: must be 0, 4 or 128", KEY_RATIOS, il,
                              (long long)ratios[il]);
        hp->compress_ratio[il] = (uint32_t)ratios[il];
    }

    if (opt_u32(f, KEY_NEXTN, &hp->n_nextn, 0, err)) return -1;
    if (opt_u32(f, KEY_HASH, &hp->n_hash_layer, 0, err)) return -1;
    if (opt_u32(f, KEY_GROUPS, &hp->n_expert_groups, 0, err)) return -1;
    if (opt_u32(f, KEY_GROUP_USED, &hp->n_group_used, 0, err)) return -1;
    if (opt_u32(f, KEY_RS_ORIG, &hp->rope_n_ctx_orig, 0, err)) return -1;
    if (opt_f32(f, KEY_RS_FACTOR, &hp->rope_scaling_factor, 0.0f, err)) return -1;
    if (opt_f32(f, KEY_BETA_FAST, &hp->yarn_beta_fast, 32.0f, err)) return -1;
    if (opt_f32(f, KEY_BETA_SLOW, &hp->yarn_beta_slow, 1.0f, err)) return -1;
    if (opt_f32(f, KEY_W_SCALE, &hp->expert_weights_scale, 1.0f, err)) return -1;
    hp->expert_weights_norm = false;
    if (gguf_get_bool_opt(f, KEY_W_NORM, &hp->expert_weights_norm, err) < 0) return -1;

    const char *rs = NULL;
    int r = gguf_get_str_opt(f, KEY_RS_TYPE, &rs, err);
    if (r < 0) return -1;
    if (r == 0) {
        if (strlen(rs) >= sizeof hp->rope_scaling_type)
            return ms_err_set(err, "%s: value too long", KEY_RS_TYPE);
        strcpy(hp->rope_scaling_type, rs);
    }

    /* vocab_size is optional (small models omit it): fall back to the token
     * list, as llama.cpp does. */
    r = gguf_get_u32_opt(f, KEY_VOCAB, &hp->n_vocab, err);
    if (r < 0) return -1;
    if (r == 1) {
        const struct gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
        if (!kv || kv->val.type != GGUF_TYPE_ARRAY || kv->val.arr.n > UINT32_MAX)
            return ms_err_set(err, "neither %s nor tokenizer.ggml.tokens is present",
                              KEY_VOCAB);
        hp->n_vocab = (uint32_t)kv->val.arr.n;
    }

    r = opt_f32_per_block(f, KEY_CLAMP_EXP, hp->swiglu_clamp_exp, hp->n_block, err);
    if (r < 0) return -1;
    r = opt_f32_per_block(f, KEY_CLAMP_SHEXP, hp->swiglu_clamp_shexp, hp->n_block, err);
    if (r < 0) return -1;
    if (r == 1) memcpy(hp->swiglu_clamp_shexp, hp->swiglu_clamp_exp, sizeof hp->swiglu_clamp_exp);

    return dsv4_hparams_validate(hp, err);
}

void dsv4_hparams_probe_nextn(struct dsv4_hparams *hp, const struct gguf_file *f) {
    if (hp->n_nextn == 0) return;
    char name[64];
    snprintf(name, sizeof name, "blk.%u.nextn.eh_proj.weight", dsv4_n_layer(hp));
    if (!gguf_find_tensor(f, name)) hp->n_nextn = 0;
}

int dsv4_hparams_validate(const struct dsv4_hparams *hp, ms_err *err) {
    struct {
        const char *what;
        uint32_t v;
    } nonzero[] = {
        {KEY_EMBD, hp->n_embd},          {KEY_VOCAB, hp->n_vocab},
        {KEY_HEAD, hp->n_head},          {KEY_KEY_LEN, hp->n_embd_head},
        {KEY_Q_LORA, hp->q_lora_rank},   {KEY_O_LORA, hp->o_lora_rank},
        {KEY_O_GROUP, hp->n_out_group},  {KEY_SWA, hp->n_swa},
        {KEY_IDX_HEAD, hp->n_indexer_head}, {KEY_IDX_LEN, hp->indexer_head_size},
        {KEY_IDX_TOPK, hp->indexer_top_k}, {KEY_EXPERT, hp->n_expert},
        {KEY_EXPERT_USED, hp->n_expert_used}, {KEY_FF_EXP, hp->n_ff_exp},
        {KEY_SINKHORN, hp->n_sinkhorn_iter},
    };
    for (size_t i = 0; i < sizeof nonzero / sizeof nonzero[0]; i++)
        if (nonzero[i].v == 0) return ms_err_set(err, "%s must be > 0", nonzero[i].what);
    if (hp->n_block == 0 || hp->n_block > DSV4_MAX_LAYERS)
        return ms_err_set(err, "%s = %u: must be in 1..%d", KEY_BLOCKS, hp->n_block,
                          DSV4_MAX_LAYERS);
    if (hp->n_nextn >= hp->n_block)
        return ms_err_set(err, "%s = %u leaves no main layer (block_count %u)", KEY_NEXTN,
                          hp->n_nextn, hp->n_block);
    if (hp->n_hc != DSV4_N_HC)
        return ms_err_set(err, "%s = %u: llama.cpp requires %d", KEY_HC, hp->n_hc, DSV4_N_HC);
    if (hp->expert_gating_func != DSV4_GATING_SQRT_SOFTPLUS)
        return ms_err_set(err, "%s = %u: must be %d (sqrt-softplus)", KEY_GATING,
                          hp->expert_gating_func, DSV4_GATING_SQRT_SOFTPLUS);
    if (hp->n_expert_groups || hp->n_group_used)
        return ms_err_set(err, "%s / %s must be 0 (group-limited routing is not used)",
                          KEY_GROUPS, KEY_GROUP_USED);
    if (hp->n_head_kv != 1)
        return ms_err_set(err, "%s = %u: must be 1 (one shared KV head)", KEY_HEAD_KV,
                          hp->n_head_kv);
    if (hp->n_embd_head != hp->n_embd_head_v)
        return ms_err_set(err, "%s (%u) must equal %s (%u)", KEY_KEY_LEN, hp->n_embd_head,
                          KEY_VAL_LEN, hp->n_embd_head_v);
    if (hp->n_head % hp->n_out_group)
        return ms_err_set(err, "%s = %u is not divisible by %s = %u", KEY_HEAD, hp->n_head,
                          KEY_O_GROUP, hp->n_out_group);
    uint32_t min_d = hp->n_embd_head < hp->indexer_head_size ? hp->n_embd_head
                                                             : hp->indexer_head_size;
    if (hp->n_rot == 0 || hp->n_rot % 2 || hp->n_rot > min_d || hp->n_rot > MS_ROPE_MAX_ROT)
        return ms_err_set(err, "%s = %u: must be even, > 0, <= %d and <= min(key_length %u, "
                          "indexer key_length %u)", KEY_ROT, hp->n_rot, MS_ROPE_MAX_ROT,
                          hp->n_embd_head, hp->indexer_head_size);
    if (hp->n_indexer_head > DSV4_MAX_INDEXER_HEADS)
        return ms_err_set(err, "%s = %u: must be at most %d", KEY_IDX_HEAD, hp->n_indexer_head,
                          DSV4_MAX_INDEXER_HEADS);
    if (hp->indexer_head_size % 64)
        return ms_err_set(err, "%s = %u: must be a multiple of 64 (Hadamard blocks)",
                          KEY_IDX_LEN, hp->indexer_head_size);
    if (hp->n_expert_used > hp->n_expert)
        return ms_err_set(err, "%s = %u exceeds %s = %u", KEY_EXPERT_USED, hp->n_expert_used,
                          KEY_EXPERT, hp->n_expert);
    uint32_t n_layer = dsv4_n_layer(hp);
    if (hp->n_hash_layer > n_layer)
        return ms_err_set(err, "%s = %u exceeds the %u main layers", KEY_HASH,
                          hp->n_hash_layer, n_layer);
    if (hp->n_sinkhorn_iter > DSV4_MAX_SINKHORN_ITER)
        return ms_err_set(err, "%s = %u: must be at most %d (DeepSeek V4 uses 20; each "
                          "iteration runs per token and layer)", KEY_SINKHORN,
                          hp->n_sinkhorn_iter, DSV4_MAX_SINKHORN_ITER);
    /* Every float key must be finite: a NaN or infinity here turns every
     * logit into NaN without any other symptom. */
    const struct {
        const char *what;
        float v;
    } floats[] = {
        {KEY_RMS_EPS, hp->rms_eps},           {KEY_C_BASE, hp->compress_rope_freq_base},
        {KEY_ROPE_BASE, hp->rope_freq_base},  {KEY_HC_EPS, hp->hc_eps},
        {KEY_RS_FACTOR, hp->rope_scaling_factor}, {KEY_BETA_FAST, hp->yarn_beta_fast},
        {KEY_BETA_SLOW, hp->yarn_beta_slow},  {KEY_W_SCALE, hp->expert_weights_scale},
    };
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (!isfinite(floats[i].v))
            return ms_err_set(err, "%s = %g: must be a finite number", floats[i].what,
                              (double)floats[i].v);
    for (uint32_t il = 0; il < hp->n_block; il++) {
        const float ce = hp->swiglu_clamp_exp[il], cs = hp->swiglu_clamp_shexp[il];
        if (!isfinite(ce) || ce < 0.0f || !isfinite(cs) || cs < 0.0f)
            return ms_err_set(err, "%s[%u] = %g: must be a finite number >= 0 (0 = no clamp)",
                              !isfinite(ce) || ce < 0.0f ? KEY_CLAMP_EXP : KEY_CLAMP_SHEXP, il,
                              (double)(!isfinite(ce) || ce < 0.0f ? ce : cs));
    }
    if (!(hp->rms_eps > 0.0f)) return ms_err_set(err, "%s must be > 0", KEY_RMS_EPS);
    if (!(hp->hc_eps >= 0.0f)) return ms_err_set(err, "%s must be >= 0", KEY_HC_EPS);
    if (!(hp->rope_freq_base > 0.0f) || !(hp->compress_rope_freq_base > 0.0f))
        return ms_err_set(err, "RoPE bases must be > 0");
    if (hp->rope_scaling_factor < 0.0f || hp->rope_scaling_factor != hp->rope_scaling_factor)
        return ms_err_set(err, "%s must be >= 0", KEY_RS_FACTOR);
    int n4 = 0, n128 = 0;
    for (uint32_t il = 0; il < hp->n_block; il++) {
        uint32_t c = hp->compress_ratio[il];
        if (c != 0 && c != 4 && c != 128)
            return ms_err_set(err, "%s[%u] = %u: must be 0, 4 or 128", KEY_RATIOS, il, c);
        if (il < n_layer) {
            n4 += c == 4;
            n128 += c == 128;
        }
    }
    if (n4 == 0)
        return ms_err_set(err, "%s: at least one layer must have ratio 4 (llama.cpp dies "
                          "at context creation otherwise)", KEY_RATIOS);
    if (hp->n_embd_head == hp->indexer_head_size && n128 == 0)
        return ms_err_set(err, "%s: key_length == indexer key_length (%u) requires a "
                          "ratio-128 layer (llama.cpp dies at context creation otherwise)",
                          KEY_RATIOS, hp->n_embd_head);
    return 0;
}

int dsv4_hparams_write(const struct dsv4_hparams *hp, struct gguf_writer *w, ms_err *err) {
    int rc = 0;
    rc |= gguf_writer_set_str(w, "general.architecture", DSV4_ARCH);
    rc |= gguf_writer_set_u32(w, KEY_CTX, hp->n_ctx_train);
    rc |= gguf_writer_set_u32(w, KEY_EMBD, hp->n_embd);
    rc |= gguf_writer_set_u32(w, KEY_BLOCKS, hp->n_block);
    rc |= gguf_writer_set_u32(w, KEY_VOCAB, hp->n_vocab);
    rc |= gguf_writer_set_u32(w, KEY_HEAD, hp->n_head);
    rc |= gguf_writer_set_u32(w, KEY_HEAD_KV, hp->n_head_kv);
    rc |= gguf_writer_set_u32(w, KEY_KEY_LEN, hp->n_embd_head);
    rc |= gguf_writer_set_u32(w, KEY_VAL_LEN, hp->n_embd_head_v);
    rc |= gguf_writer_set_u32(w, KEY_ROT, hp->n_rot);
    rc |= gguf_writer_set_f32(w, KEY_RMS_EPS, hp->rms_eps);
    rc |= gguf_writer_set_u32(w, KEY_Q_LORA, hp->q_lora_rank);
    rc |= gguf_writer_set_u32(w, KEY_O_LORA, hp->o_lora_rank);
    rc |= gguf_writer_set_u32(w, KEY_O_GROUP, hp->n_out_group);
    rc |= gguf_writer_set_u32(w, KEY_SWA, hp->n_swa);
    rc |= gguf_writer_set_arr(w, KEY_RATIOS, GGUF_TYPE_UINT32, hp->compress_ratio, hp->n_block);
    rc |= gguf_writer_set_f32(w, KEY_C_BASE, hp->compress_rope_freq_base);
    rc |= gguf_writer_set_u32(w, KEY_IDX_HEAD, hp->n_indexer_head);
    rc |= gguf_writer_set_u32(w, KEY_IDX_LEN, hp->indexer_head_size);
    rc |= gguf_writer_set_u32(w, KEY_IDX_TOPK, hp->indexer_top_k);
    rc |= gguf_writer_set_f32(w, KEY_ROPE_BASE, hp->rope_freq_base);
    if (hp->rope_scaling_type[0]) rc |= gguf_writer_set_str(w, KEY_RS_TYPE, hp->rope_scaling_type);
    if (hp->rope_scaling_factor > 0.0f)
        rc |= gguf_writer_set_f32(w, KEY_RS_FACTOR, hp->rope_scaling_factor);
    if (hp->rope_n_ctx_orig) rc |= gguf_writer_set_u32(w, KEY_RS_ORIG, hp->rope_n_ctx_orig);
    rc |= gguf_writer_set_f32(w, KEY_BETA_FAST, hp->yarn_beta_fast);
    rc |= gguf_writer_set_f32(w, KEY_BETA_SLOW, hp->yarn_beta_slow);
    rc |= gguf_writer_set_u32(w, KEY_EXPERT, hp->n_expert);
    rc |= gguf_writer_set_u32(w, KEY_EXPERT_USED, hp->n_expert_used);
    rc |= gguf_writer_set_u32(w, KEY_EXPERT_SHARED, hp->n_expert_shared);
    rc |= gguf_writer_set_u32(w, KEY_FF_EXP, hp->n_ff_exp);
    rc |= gguf_writer_set_f32(w, KEY_W_SCALE, hp->expert_weights_scale);
    rc |= gguf_writer_set_bool(w, KEY_W_NORM, hp->expert_weights_norm);
    rc |= gguf_writer_set_u32(w, KEY_GATING, hp->expert_gating_func);
    rc |= gguf_writer_set_u32(w, KEY_GROUPS, hp->n_expert_groups);
    rc |= gguf_writer_set_u32(w, KEY_GROUP_USED, hp->n_group_used);
    rc |= gguf_writer_set_arr(w, KEY_CLAMP_EXP, GGUF_TYPE_FLOAT32, hp->swiglu_clamp_exp,
                              hp->n_block);
    if (memcmp(hp->swiglu_clamp_exp, hp->swiglu_clamp_shexp, hp->n_block * sizeof(float)))
        rc |= gguf_writer_set_arr(w, KEY_CLAMP_SHEXP, GGUF_TYPE_FLOAT32, hp->swiglu_clamp_shexp,
                                  hp->n_block);
    rc |= gguf_writer_set_u32(w, KEY_HASH, hp->n_hash_layer);
    rc |= gguf_writer_set_u32(w, KEY_HC, hp->n_hc);
    rc |= gguf_writer_set_u32(w, KEY_SINKHORN, hp->n_sinkhorn_iter);
    rc |= gguf_writer_set_f32(w, KEY_HC_EPS, hp->hc_eps);
    if (hp->n_nextn) rc |= gguf_writer_set_u32(w, KEY_NEXTN, hp->n_nextn);
    return rc ? ms_err_set(err, "out of memory writing deepseek4 metadata") : 0;
}

void dsv4_default_ratios(uint32_t *ratio, uint32_t n) {
    if (n == 1) {
        ratio[0] = 4;
        return;
    }
    for (uint32_t il = 0; il < n; il++) ratio[il] = il == 0 ? 0 : (il % 2 ? 4 : 128);
}
