/*
 * layout.h - every tensor a deepseek4 model has (docs/gguf.md, "Tensors"):
 * GGUF name, layer, role, class and ggml shape, derived from the
 * hyperparameters alone.
 *
 * One enumeration serves three users: mkmodel writes exactly these tensors,
 * inspect checks a file against them and classifies its bytes (dense vs
 * routed), and the model loader binds them by role. MTP/nextn tensors are
 * not part of the main-model layout (docs/gguf.md, "Layouts we accept");
 * files that carry them are recognised by dsv4_is_mtp_name.
 */
#ifndef MS_MODEL_LAYOUT_H
#define MS_MODEL_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/hparams.h"
#include "util/err.h"

/* Coarse classes: what inspect totals by and what mkmodel picks types by. */
enum dsv4_class {
    DSV4_C_EMBD,       /* token_embd */
    DSV4_C_OUTPUT,     /* output (the LM head matrix) */
    DSV4_C_HC,         /* hyper-connection fn / base / scale (layer and head) */
    DSV4_C_NORM,       /* every RMSNorm weight */
    DSV4_C_ATTN,       /* attention dense matrices and sinks */
    DSV4_C_COMPRESSOR, /* attn_compressor_* */
    DSV4_C_INDEXER,    /* indexer.* and indexer_compressor_* */
    DSV4_C_ROUTER,     /* ffn_gate_inp */
    DSV4_C_BIAS,       /* exp_probs_b (non-hash layers) */
    DSV4_C_TID2EID,    /* ffn_gate_tid2eid (hash layers), I32 */
    DSV4_C_SHEXP,      /* shared expert */
    DSV4_C_EXP_GATE,   /* routed experts: ffn_gate_exps */
    DSV4_C_EXP_UP,     /* ffn_up_exps */
    DSV4_C_EXP_DOWN,   /* ffn_down_exps */
    DSV4_C_COUNT
};

/* Roles: one per distinct tensor of the model (the loader binds by these). */
enum dsv4_role {
    /* global */
    DSV4_TOKEN_EMBD,
    DSV4_OUTPUT_HC_FN,
    DSV4_OUTPUT_HC_BASE,
    DSV4_OUTPUT_HC_SCALE,
    DSV4_OUTPUT_NORM,
    DSV4_OUTPUT,
    /* per layer */
    DSV4_HC_ATTN_FN,
    DSV4_HC_ATTN_BASE,
    DSV4_HC_ATTN_SCALE,
    DSV4_ATTN_NORM,
    DSV4_ATTN_Q_A,
    DSV4_ATTN_Q_A_NORM,
    DSV4_ATTN_Q_B,
    DSV4_ATTN_KV,
    DSV4_ATTN_KV_A_NORM,
    DSV4_ATTN_SINKS,
    DSV4_ATTN_OUTPUT_A,
    DSV4_ATTN_OUTPUT_B,
    DSV4_ATTN_COMP_KV,     /* ratio != 0 */
    DSV4_ATTN_COMP_GATE,
    DSV4_ATTN_COMP_APE,
    DSV4_ATTN_COMP_NORM,
    DSV4_IDX_ATTN_Q_B,     /* ratio == 4 */
    DSV4_IDX_PROJ,
    DSV4_IDX_COMP_KV,
    DSV4_IDX_COMP_GATE,
    DSV4_IDX_COMP_APE,
    DSV4_IDX_COMP_NORM,
    DSV4_HC_FFN_FN,
    DSV4_HC_FFN_BASE,
    DSV4_HC_FFN_SCALE,
    DSV4_FFN_NORM,
    DSV4_FFN_GATE_INP,
    DSV4_EXP_PROBS_B,      /* il >= n_hash_layer */
    DSV4_FFN_GATE_TID2EID, /* il < n_hash_layer */
    DSV4_FFN_GATE_EXPS,
    DSV4_FFN_UP_EXPS,
    DSV4_FFN_DOWN_EXPS,
    DSV4_FFN_GATE_SHEXP,
    DSV4_FFN_UP_SHEXP,
    DSV4_FFN_DOWN_SHEXP,
    DSV4_ROLE_COUNT
};

#define DSV4_NAME_MAX 64

struct dsv4_tensor_info {
    char name[DSV4_NAME_MAX]; /* GGUF name, e.g. "blk.3.attn_q_a.weight" */
    int32_t layer;            /* -1 for global tensors */
    enum dsv4_role role;
    enum dsv4_class cls;
    uint32_t n_dims;          /* 1..3 */
    int64_t ne[4];            /* ggml order, fastest first; unused dims = 1 */
};

struct dsv4_layout {
    size_t n;
    struct dsv4_tensor_info *t; /* owned; file order used by mkmodel */
};

/*
 * Enumerates the main model's tensors for hp (validated first): the global
 * token_embd, then per layer il in [0, n_layer) the tensors of that layer
 * (compressor tensors only where ratio != 0, indexer tensors only where ratio
 * == 4, tid2eid for il < n_hash_layer and exp_probs_b otherwise), then the
 * output head. Shapes are ggml ne (fastest dimension first): e.g. attn_q_b {r_q, H*d},
 * attn_output_a {H*d/G, G*r_o}, ffn_gate_exps {D, F, E}, ffn_down_exps
 * {F, D, E}, tid2eid {k, V}. Returns 0, or -1 (invalid hparams, OOM).
 * Free with dsv4_layout_free.
 */
int dsv4_layout_build(const struct dsv4_hparams *hp, struct dsv4_layout *out, ms_err *err);
void dsv4_layout_free(struct dsv4_layout *l);

/* Index of the tensor called `name`, or -1. */
long dsv4_layout_find(const struct dsv4_layout *l, const char *name);

/* Short lower-case class name ("attn", "exp_gate", ...). */
const char *dsv4_class_name(enum dsv4_class c);
/* GGUF name suffix of a role, without "blk.N." ("attn_q_a.weight"). */
const char *dsv4_role_suffix(enum dsv4_role r);

/* True for the routed-expert classes (streamed from disk). */
static inline bool dsv4_class_is_routed(enum dsv4_class c) {
    return c == DSV4_C_EXP_GATE || c == DSV4_C_EXP_UP || c == DSV4_C_EXP_DOWN;
}

/* True for names of MTP tensors: llama.cpp's "blk.N.nextn.*" or ds4's
 * separate-file "mtp.*". */
bool dsv4_is_mtp_name(const char *name);

#endif
