/*
 * hparams.h - DeepSeek V4 ("deepseek4") hyperparameters: the GGUF metadata
 * keys (docs/gguf.md, "Metadata keys"), read into one struct, validated
 * against the constraints llama.cpp's loader imposes (the same table; some
 * were found by running llama.cpp on test models: it fails at context
 * creation without them), and written back by mkmodel.
 *
 * Nothing here hard-codes a model size: the same struct describes a 2 MB test
 * model and V4-Flash. Layer counting follows llama.cpp: the file's
 * block_count includes n_nextn MTP blocks appended after the n_layer main
 * layers.
 */
#ifndef MS_MODEL_HPARAMS_H
#define MS_MODEL_HPARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

#define DSV4_ARCH "deepseek4"
#define DSV4_MAX_LAYERS 256 /* blocks; V4-Flash has 43 (+1 MTP) */
#define DSV4_N_HC 4          /* hyper-connection streams llama.cpp accepts */
#define DSV4_GATING_SQRT_SOFTPLUS 4
/* Most Sinkhorn iterations accepted (hyper_connection.sinkhorn_iterations):
 * V4 uses 20; the normalisation has converged long before 100, and the file
 * value is otherwise an unbounded per-token cost. */
#define DSV4_MAX_SINKHORN_ITER 100
/* Indexer heads a model may have (Flash has 64): the per-row indexer
 * scores keep one dot per head on the stack. */
#define DSV4_MAX_INDEXER_HEADS 256

struct dsv4_hparams {
    uint32_t n_ctx_train;      /* context_length */
    uint32_t n_embd;           /* D: embedding_length */
    uint32_t n_block;          /* block_count: main layers + n_nextn */
    uint32_t n_nextn;          /* nextn_predict_layers (0 if absent) */
    uint32_t n_vocab;          /* vocab_size, else tokenizer.ggml.tokens length */
    uint32_t n_head;           /* H */
    uint32_t n_head_kv;        /* must be 1 */
    uint32_t n_embd_head;      /* d = key_length = value_length */
    uint32_t n_embd_head_v;    /* value_length as stored (validated == d) */
    uint32_t n_rot;            /* d_r: rope.dimension_count (rotated tail) */
    float rms_eps;             /* attention.layer_norm_rms_epsilon */
    uint32_t q_lora_rank;      /* r_q */
    uint32_t o_lora_rank;      /* r_o: output_lora_rank */
    uint32_t n_out_group;      /* G: output_group_count */
    uint32_t n_swa;            /* sliding_window (raw window incl. current) */
    uint32_t compress_ratio[DSV4_MAX_LAYERS]; /* per block: 0, 4 or 128 */
    float compress_rope_freq_base;
    uint32_t n_indexer_head;   /* H_I */
    uint32_t indexer_head_size; /* d_I: indexer.key_length */
    uint32_t indexer_top_k;    /* K_I */
    float rope_freq_base;      /* ratio-0 layers */
    char rope_scaling_type[16]; /* "yarn", "linear", ... ; "" = key absent */
    float rope_scaling_factor; /* 0 = key absent */
    uint32_t rope_n_ctx_orig;  /* 0 = key absent (falls back to n_ctx_train) */
    float yarn_beta_fast;      /* default 32 */
    float yarn_beta_slow;      /* default 1 */
    uint32_t n_expert;         /* E */
    uint32_t n_expert_used;    /* k */
    uint32_t n_expert_shared;  /* shared FFN width = n_ff_exp * this */
    uint32_t n_ff_exp;         /* F */
    float expert_weights_scale;
    bool expert_weights_norm;
    uint32_t expert_gating_func; /* must be 4 (sqrt-softplus) */
    uint32_t n_expert_groups;  /* must be 0 */
    uint32_t n_group_used;     /* must be 0 */
    float swiglu_clamp_exp[DSV4_MAX_LAYERS];   /* per block; 0 = no clamp */
    float swiglu_clamp_shexp[DSV4_MAX_LAYERS]; /* per block */
    uint32_t n_hash_layer;     /* layers il < this route by tid2eid */
    uint32_t n_hc;             /* hyper_connection.count, must be 4 */
    uint32_t n_sinkhorn_iter;  /* T */
    float hc_eps;              /* hyper_connection.epsilon */
};

/* Main (non-MTP) layers: n_block - n_nextn. */
static inline uint32_t dsv4_n_layer(const struct dsv4_hparams *hp) {
    return hp->n_block - hp->n_nextn;
}

/* Compressor overlap factor (docs/model.md, "Attention"): 2 for ratio 4
 * (overlapping windows), 1 for ratio 128, 0 for an uncompressed layer. */
static inline uint32_t dsv4_coff(uint32_t ratio) {
    return ratio == 4 ? 2 : ratio == 128 ? 1 : 0;
}

/*
 * Reads every key of docs/gguf.md's tables from an open GGUF into *hp and validates the
 * result (dsv4_hparams_validate). general.architecture must be "deepseek4".
 * Optional keys take llama.cpp's defaults (vocab_size -> token count,
 * nextn/hash/group counts -> 0, yarn betas -> 32 / 1, swiglu_clamp_shexp ->
 * swiglu_clamp_exp, clamps -> 0). n_nextn is read as stored; call
 * dsv4_hparams_probe_nextn to apply llama.cpp's probe-tensor rule.
 * Errors: -1 with a message naming the key.
 */
int dsv4_hparams_read(struct dsv4_hparams *hp, const struct gguf_file *f, ms_err *err);

/* llama.cpp's rule: if blk.<n_layer>.nextn.eh_proj.weight is
 * absent, the file has no MTP blocks and n_nextn becomes 0. */
void dsv4_hparams_probe_nextn(struct dsv4_hparams *hp, const struct gguf_file *f);

/*
 * Checks llama.cpp's constraints (docs/gguf.md, "Metadata keys", column
 * "checked") and basic sanity (non-zero sizes, n_block <= DSV4_MAX_LAYERS,
 * k <= E, hash layers <= main layers, at most DSV4_MAX_SINKHORN_ITER
 * Sinkhorn iterations, every float key finite, clamps >= 0). Returns
 * 0, or -1 with a message saying which value breaks which rule.
 */
int dsv4_hparams_validate(const struct dsv4_hparams *hp, ms_err *err);

/* Writes general.architecture and every deepseek4.* key (the
 * compress ratios as a u32 array, clamps as per-block f32 arrays; optional
 * keys only when set). -1 on writer failure (OOM). */
int dsv4_hparams_write(const struct dsv4_hparams *hp, struct gguf_writer *w, ms_err *err);

/* Fills ratio[0..n) with the default pattern: layer 0 raw (0) then 4, 128
 * alternating (one layer: 4). Satisfies llama.cpp's ratio constraints for
 * any n >= 1 (n >= 3
 * has a ratio-128 layer too). */
void dsv4_default_ratios(uint32_t *ratio, uint32_t n);

#endif
