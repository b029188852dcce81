/*
 * layout.c - the deepseek4 tensor enumeration (see layout.h; names and ggml
 * shapes are those of gguf-py's tensor table and llama.cpp's deepseek4
 * loader, summarised in docs/gguf.md, "Tensors").
 */
#include "model/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *suffix;
    enum dsv4_class cls;
} g_roles[DSV4_ROLE_COUNT] = {
    [DSV4_TOKEN_EMBD] = {"token_embd.weight", DSV4_C_EMBD},
    [DSV4_OUTPUT_HC_FN] = {"output_hc_fn.weight", DSV4_C_HC},
    [DSV4_OUTPUT_HC_BASE] = {"output_hc_base.weight", DSV4_C_HC},
    [DSV4_OUTPUT_HC_SCALE] = {"output_hc_scale.weight", DSV4_C_HC},
    [DSV4_OUTPUT_NORM] = {"output_norm.weight", DSV4_C_NORM},
    [DSV4_OUTPUT] = {"output.weight", DSV4_C_OUTPUT},
    [DSV4_HC_ATTN_FN] = {"hc_attn_fn.weight", DSV4_C_HC},
    [DSV4_HC_ATTN_BASE] = {"hc_attn_base.weight", DSV4_C_HC},
    [DSV4_HC_ATTN_SCALE] = {"hc_attn_scale.weight", DSV4_C_HC},
    [DSV4_ATTN_NORM] = {"attn_norm.weight", DSV4_C_NORM},
    [DSV4_ATTN_Q_A] = {"attn_q_a.weight", DSV4_C_ATTN},
    [DSV4_ATTN_Q_A_NORM] = {"attn_q_a_norm.weight", DSV4_C_NORM},
    [DSV4_ATTN_Q_B] = {"attn_q_b.weight", DSV4_C_ATTN},
    [DSV4_ATTN_KV] = {"attn_kv.weight", DSV4_C_ATTN},
    [DSV4_ATTN_KV_A_NORM] = {"attn_kv_a_norm.weight", DSV4_C_NORM},
    [DSV4_ATTN_SINKS] = {"attn_sinks.weight", DSV4_C_ATTN},
    [DSV4_ATTN_OUTPUT_A] = {"attn_output_a.weight", DSV4_C_ATTN},
    [DSV4_ATTN_OUTPUT_B] = {"attn_output_b.weight", DSV4_C_ATTN},
    [DSV4_ATTN_COMP_KV] = {"attn_compressor_kv.weight", DSV4_C_COMPRESSOR},
    [DSV4_ATTN_COMP_GATE] = {"attn_compressor_gate.weight", DSV4_C_COMPRESSOR},
    [DSV4_ATTN_COMP_APE] = {"attn_compressor_ape.weight", DSV4_C_COMPRESSOR},
    [DSV4_ATTN_COMP_NORM] = {"attn_compressor_norm.weight", DSV4_C_NORM},
    [DSV4_IDX_ATTN_Q_B] = {"indexer.attn_q_b.weight", DSV4_C_INDEXER},
    [DSV4_IDX_PROJ] = {"indexer.proj.weight", DSV4_C_INDEXER},
    [DSV4_IDX_COMP_KV] = {"indexer_compressor_kv.weight", DSV4_C_INDEXER},
    [DSV4_IDX_COMP_GATE] = {"indexer_compressor_gate.weight", DSV4_C_INDEXER},
    [DSV4_IDX_COMP_APE] = {"indexer_compressor_ape.weight", DSV4_C_INDEXER},
    [DSV4_IDX_COMP_NORM] = {"indexer_compressor_norm.weight", DSV4_C_NORM},
    [DSV4_HC_FFN_FN] = {"hc_ffn_fn.weight", DSV4_C_HC},
    [DSV4_HC_FFN_BASE] = {"hc_ffn_base.weight", DSV4_C_HC},
    [DSV4_HC_FFN_SCALE] = {"hc_ffn_scale.weight", DSV4_C_HC},
    [DSV4_FFN_NORM] = {"ffn_norm.weight", DSV4_C_NORM},
    [DSV4_FFN_GATE_INP] = {"ffn_gate_inp.weight", DSV4_C_ROUTER},
    [DSV4_EXP_PROBS_B] = {"exp_probs_b.bias", DSV4_C_BIAS},
    [DSV4_FFN_GATE_TID2EID] = {"ffn_gate_tid2eid.weight", DSV4_C_TID2EID},
    [DSV4_FFN_GATE_EXPS] = {"ffn_gate_exps.weight", DSV4_C_EXP_GATE},
    [DSV4_FFN_UP_EXPS] = {"ffn_up_exps.weight", DSV4_C_EXP_UP},
    [DSV4_FFN_DOWN_EXPS] = {"ffn_down_exps.weight", DSV4_C_EXP_DOWN},
    [DSV4_FFN_GATE_SHEXP] = {"ffn_gate_shexp.weight", DSV4_C_SHEXP},
    [DSV4_FFN_UP_SHEXP] = {"ffn_up_shexp.weight", DSV4_C_SHEXP},
    [DSV4_FFN_DOWN_SHEXP] = {"ffn_down_shexp.weight", DSV4_C_SHEXP},
};

static const char *const g_class_names[DSV4_C_COUNT] = {
    [DSV4_C_EMBD] = "embd",         [DSV4_C_OUTPUT] = "output",
    [DSV4_C_HC] = "hc",             [DSV4_C_NORM] = "norm",
    [DSV4_C_ATTN] = "attn",         [DSV4_C_COMPRESSOR] = "compressor",
    [DSV4_C_INDEXER] = "indexer",   [DSV4_C_ROUTER] = "router",
    [DSV4_C_BIAS] = "bias",         [DSV4_C_TID2EID] = "tid2eid",
    [DSV4_C_SHEXP] = "shexp",       [DSV4_C_EXP_GATE] = "exp_gate",
    [DSV4_C_EXP_UP] = "exp_up",     [DSV4_C_EXP_DOWN] = "exp_down",
};

const char *dsv4_class_name(enum dsv4_class c) {
    return (unsigned)c < DSV4_C_COUNT ? g_class_names[c] : "?";
}
const char *dsv4_role_suffix(enum dsv4_role r) {
    return (unsigned)r < DSV4_ROLE_COUNT ? g_roles[r].suffix : "?";
}

/* ggml shape of a role in layer il (docs/model.md names the symbols). */
static uint32_t role_shape(const struct dsv4_hparams *hp, enum dsv4_role r, uint32_t il,
                           int64_t ne[4]) {
    const int64_t D = hp->n_embd, V = hp->n_vocab, H = hp->n_head, d = hp->n_embd_head;
    const int64_t rq = hp->q_lora_rank, ro = hp->o_lora_rank, G = hp->n_out_group;
    const int64_t E = hp->n_expert, k = hp->n_expert_used, F = hp->n_ff_exp;
    const int64_t Fs = hp->n_ff_exp * (int64_t)hp->n_expert_shared;
    const int64_t HI = hp->n_indexer_head, dI = hp->indexer_head_size, nhc = hp->n_hc;
    const int64_t ratio = hp->compress_ratio[il], coff = dsv4_coff(hp->compress_ratio[il]);
    const int64_t hc_mix = (2 + nhc) * nhc;
    ne[0] = ne[1] = ne[2] = ne[3] = 1;
#define S1(a) (ne[0] = (a), 1u)
#define S2(a, b) (ne[0] = (a), ne[1] = (b), 2u)
#define S3(a, b, c) (ne[0] = (a), ne[1] = (b), ne[2] = (c), 3u)
    switch (r) {
    case DSV4_TOKEN_EMBD: return S2(D, V);
    case DSV4_OUTPUT_HC_FN: return S2(nhc * D, nhc);
    case DSV4_OUTPUT_HC_BASE: return S1(nhc);
    case DSV4_OUTPUT_HC_SCALE: return S1(1);
    case DSV4_OUTPUT_NORM: return S1(D);
    case DSV4_OUTPUT: return S2(D, V);
    case DSV4_HC_ATTN_FN: case DSV4_HC_FFN_FN: return S2(nhc * D, hc_mix);
    case DSV4_HC_ATTN_BASE: case DSV4_HC_FFN_BASE: return S1(hc_mix);
    case DSV4_HC_ATTN_SCALE: case DSV4_HC_FFN_SCALE: return S1(3);
    case DSV4_ATTN_NORM: case DSV4_FFN_NORM: return S1(D);
    case DSV4_ATTN_Q_A: return S2(D, rq);
    case DSV4_ATTN_Q_A_NORM: return S1(rq);
    case DSV4_ATTN_Q_B: return S2(rq, H * d);
    case DSV4_ATTN_KV: return S2(D, d);
    case DSV4_ATTN_KV_A_NORM: return S1(d);
    case DSV4_ATTN_SINKS: return S1(H);
    case DSV4_ATTN_OUTPUT_A: return S2(H * d / G, G * ro);
    case DSV4_ATTN_OUTPUT_B: return S2(G * ro, D);
    case DSV4_ATTN_COMP_KV: case DSV4_ATTN_COMP_GATE: return S2(D, coff * d);
    case DSV4_ATTN_COMP_APE: return S2(coff * d, ratio);
    case DSV4_ATTN_COMP_NORM: return S1(d);
    case DSV4_IDX_ATTN_Q_B: return S2(rq, HI * dI);
    case DSV4_IDX_PROJ: return S2(D, HI);
    case DSV4_IDX_COMP_KV: case DSV4_IDX_COMP_GATE: return S2(D, 2 * dI);
    case DSV4_IDX_COMP_APE: return S2(2 * dI, 4);
    case DSV4_IDX_COMP_NORM: return S1(dI);
    case DSV4_FFN_GATE_INP: return S2(D, E);
    case DSV4_EXP_PROBS_B: return S1(E);
    case DSV4_FFN_GATE_TID2EID: return S2(k, V);
    case DSV4_FFN_GATE_EXPS: case DSV4_FFN_UP_EXPS: return S3(D, F, E);
    case DSV4_FFN_DOWN_EXPS: return S3(F, D, E);
    case DSV4_FFN_GATE_SHEXP: case DSV4_FFN_UP_SHEXP: return S2(D, Fs);
    case DSV4_FFN_DOWN_SHEXP: return S2(Fs, D);
    case DSV4_ROLE_COUNT: break;
    }
#undef S1
#undef S2
#undef S3
    return 0;
}

/* Whether role r exists in layer il: compressor tensors in ratio 4 and 128
 * layers, indexer tensors in ratio 4 layers, tid2eid in hash layers, the
 * selection bias in the others. */
static bool role_present(const struct dsv4_hparams *hp, enum dsv4_role r, uint32_t il) {
    uint32_t ratio = hp->compress_ratio[il];
    switch (r) {
    case DSV4_ATTN_COMP_KV: case DSV4_ATTN_COMP_GATE:
    case DSV4_ATTN_COMP_APE: case DSV4_ATTN_COMP_NORM:
        return ratio != 0;
    case DSV4_IDX_ATTN_Q_B: case DSV4_IDX_PROJ: case DSV4_IDX_COMP_KV:
    case DSV4_IDX_COMP_GATE: case DSV4_IDX_COMP_APE: case DSV4_IDX_COMP_NORM:
        return ratio == 4;
    case DSV4_EXP_PROBS_B: return il >= hp->n_hash_layer;
    case DSV4_FFN_GATE_TID2EID: return il < hp->n_hash_layer;
    case DSV4_FFN_GATE_SHEXP: case DSV4_FFN_UP_SHEXP: case DSV4_FFN_DOWN_SHEXP:
        return hp->n_expert_shared > 0;
    default: return true;
    }
}

static void add(struct dsv4_layout *l, const struct dsv4_hparams *hp, enum dsv4_role r,
                int32_t il) {
    struct dsv4_tensor_info *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    t->layer = il;
    t->role = r;
    t->cls = g_roles[r].cls;
    t->n_dims = role_shape(hp, r, il < 0 ? 0 : (uint32_t)il, t->ne);
    if (il < 0)
        snprintf(t->name, sizeof t->name, "%s", g_roles[r].suffix);
    else
        snprintf(t->name, sizeof t->name, "blk.%d.%s", il, g_roles[r].suffix);
}

int dsv4_layout_build(const struct dsv4_hparams *hp, struct dsv4_layout *out, ms_err *err) {
    out->n = 0;
    out->t = NULL;
    if (dsv4_hparams_validate(hp, err)) return -1;
    uint32_t n_layer = dsv4_n_layer(hp);
    size_t cap = 6 + (size_t)n_layer * DSV4_ROLE_COUNT;
    out->t = calloc(cap, sizeof *out->t);
    if (!out->t) return ms_err_set(err, "out of memory (tensor layout)");
    add(out, hp, DSV4_TOKEN_EMBD, -1);
    for (uint32_t il = 0; il < n_layer; il++)
        for (int r = DSV4_HC_ATTN_FN; r < DSV4_ROLE_COUNT; r++)
            if (role_present(hp, (enum dsv4_role)r, il))
                add(out, hp, (enum dsv4_role)r, (int32_t)il);
    add(out, hp, DSV4_OUTPUT_HC_FN, -1);
    add(out, hp, DSV4_OUTPUT_HC_BASE, -1);
    add(out, hp, DSV4_OUTPUT_HC_SCALE, -1);
    add(out, hp, DSV4_OUTPUT_NORM, -1);
    add(out, hp, DSV4_OUTPUT, -1);
    return 0;
}

void dsv4_layout_free(struct dsv4_layout *l) {
    if (!l) return;
    free(l->t);
    l->t = NULL;
    l->n = 0;
}

long dsv4_layout_find(const struct dsv4_layout *l, const char *name) {
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->t[i].name, name)) return (long)i;
    return -1;
}

bool dsv4_is_mtp_name(const char *name) {
    if (!strncmp(name, "mtp.", 4)) return true;
    if (strncmp(name, "blk.", 4)) return false;
    const char *p = name + 4;
    while (*p >= '0' && *p <= '9') p++;
    return p > name + 4 && !strncmp(p, ".nextn.", 7);
}
