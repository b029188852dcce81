/*
 * cmd_mkmodel.c - `moestream mkmodel`: writes a deepseek4 GGUF with seeded
 * random weights (src/mkmodel/mkmodel.h does the work; this file parses the
 * options into a struct mkmodel_opts).
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "mkmodel/mkmodel.h"

/* Types mkmodel can write: the weight formats moestream computes with
 * (kernels in the reference table; Q8_K is an activation format only). */
static bool writable_type(enum ms_type t) {
    const struct ms_type_traits *tt = ms_type_traits_ref(t);
    return tt && tt->has_kernels && tt->from_float;
}

static int parse_type(const char *s, enum ms_type *out) {
    enum ms_type t;
    if (!s || ms_type_from_name(s, &t) || !writable_type(t)) return -1;
    *out = t;
    return 0;
}

/* "f32 f16 ... mxfp4": the names parse_type takes, for messages. */
static const char *type_list(void) {
    static char buf[256];
    if (!buf[0])
        for (int t = 0; t < MS_TYPE_COUNT; t++)
            if (writable_type((enum ms_type)t)) {
                size_t len = strlen(buf);
                snprintf(buf + len, sizeof buf - len, "%s%s", len ? " " : "", ms_type_name((enum ms_type)t));
            }
    return buf;
}

static void usage(FILE *out) {
    fprintf(out,
        "usage: moestream mkmodel --preset tiny|small|bench|flash [options] -o OUT.gguf\n"
        "\n"
        "  --preset P              tiny (few MB, unit tests), small (tens of MB), bench (--size),\n"
        "                          flash (DeepSeek V4 Flash's shape and q2 mix, random codes)\n"
        "  --layers N              the layer count (same as --n-layer)\n"
        "  --sparse                leave the matrices' data as holes (a sparse file)\n"
        "  --size BYTES            bench: target tensor data size (suffixes K, M, G)\n"
        "  --seed N                RNG seed (default 1); same options + seed = same bytes\n"
        "  --experts-type T        routed experts' type, one of:\n"
        "                          %s\n"
        "  --dense-type T          every other matrix (1-D tensors are always f32)\n"
        "  --experts-type-last-layers T:N   the last N layers' experts in type T\n"
        "  --tensor-type NAME=T    matrices called NAME (with or without blk.N. and .weight,\n"
        "                          e.g. output, ffn_down_exps, blk.3.attn_kv) in type T;\n"
        "                          repeatable, over every option above (llama-quantize's mixes)\n"
        "  --ds4-mix               ds4's published mix (iq2_xxs/q2_K experts, q8_0 attn, f16 rest)\n"
        "  --f32-twin              store every tensor as f32 of its dequantized values\n"
        "  --vocab-from FILE       import a Hugging Face tokenizer.json (e.g. DeepSeek V3/V4's)\n"
        "                          instead of the built-in vocabulary; padded to --n-vocab\n"
        "                          (default with this option: 129280, DeepSeek V4's)\n"
        "  --threads N             generation threads (default 2; output does not depend on it)\n"
        "  -o, --output PATH       output file (written to a temporary name, then renamed)\n"
        "  --force                 replace PATH if it exists (default: refuse)\n"
        "\n"
        "hyperparameter overrides (deepseek4.* metadata):\n"
        "  --n-embd --n-layer --n-vocab --n-head --head-dim --n-rot --q-lora-rank\n"
        "  --o-lora-rank --n-out-group --n-swa --n-indexer-head --indexer-head-dim\n"
        "  --indexer-top-k --n-expert --n-expert-used --n-expert-shared --n-ff-exp\n"
        "  --n-hash-layer --n-hc --n-head-kv --sinkhorn-iters --n-ctx-train --rope-orig-ctx N\n"
        "  --hc-eps --rms-eps --rope-base --compress-rope-base --rope-scaling-factor\n"
        "  --yarn-beta-fast --yarn-beta-slow --expert-weights-scale --swiglu-clamp\n"
        "  --swiglu-clamp-shexp X\n"
        "  --expert-weights-norm 0|1   --rope-scaling-type yarn|linear|none\n"
        "  --compress-ratios R0,R1,...  (sets the layer count; each 0, 4 or 128)\n", type_list());
}

#define FAIL_USAGE(...)                                          \
    do {                                                         \
        fprintf(stderr, "moestream mkmodel: " __VA_ARGS__);      \
        fputc('\n', stderr);                                     \
        return 2;                                                \
    } while (0)

enum ovr_kind { OVR_U32, OVR_F32 };

struct ovr {
    const char *opt;
    enum ovr_kind kind;
    size_t offset;   /* into struct dsv4_hparams */
    const char *key; /* the metadata key it sets (after "deepseek4.") */
};

#define U(o, f, k) {o, OVR_U32, offsetof(struct dsv4_hparams, f), k}
#define F(o, f, k) {o, OVR_F32, offsetof(struct dsv4_hparams, f), k}
static const struct ovr g_ovr[] = {
    U("--n-embd", n_embd, "embedding_length"), U("--n-layer", n_block, "block_count"),
    U("--n-vocab", n_vocab, "vocab_size"), U("--n-head", n_head, "attention.head_count"),
    U("--head-dim", n_embd_head, "attention.key_length"),
    U("--n-rot", n_rot, "rope.dimension_count"),
    U("--q-lora-rank", q_lora_rank, "attention.q_lora_rank"),
    U("--o-lora-rank", o_lora_rank, "attention.output_lora_rank"),
    U("--n-out-group", n_out_group, "attention.output_group_count"),
    U("--n-swa", n_swa, "attention.sliding_window"),
    U("--n-indexer-head", n_indexer_head, "attention.indexer.head_count"),
    U("--indexer-head-dim", indexer_head_size, "attention.indexer.key_length"),
    U("--indexer-top-k", indexer_top_k, "attention.indexer.top_k"),
    U("--n-expert", n_expert, "expert_count"),
    U("--n-expert-used", n_expert_used, "expert_used_count"),
    U("--n-expert-shared", n_expert_shared, "expert_shared_count"),
    U("--n-ff-exp", n_ff_exp, "expert_feed_forward_length"),
    U("--n-hash-layer", n_hash_layer, "hash_layer_count"),
    U("--n-hc", n_hc, "hyper_connection.count"),
    U("--n-head-kv", n_head_kv, "attention.head_count_kv"),
    U("--sinkhorn-iters", n_sinkhorn_iter, "hyper_connection.sinkhorn_iterations"),
    U("--n-ctx-train", n_ctx_train, "context_length"),
    U("--rope-orig-ctx", rope_n_ctx_orig, "rope.scaling.original_context_length"),
    F("--hc-eps", hc_eps, "hyper_connection.epsilon"),
    F("--rms-eps", rms_eps, "attention.layer_norm_rms_epsilon"),
    F("--rope-base", rope_freq_base, "rope.freq_base"),
    F("--compress-rope-base", compress_rope_freq_base, "attention.compress_rope_freq_base"),
    F("--rope-scaling-factor", rope_scaling_factor, "rope.scaling.factor"),
    F("--yarn-beta-fast", yarn_beta_fast, "rope.scaling.yarn_beta_fast"),
    F("--yarn-beta-slow", yarn_beta_slow, "rope.scaling.yarn_beta_slow"),
    F("--expert-weights-scale", expert_weights_scale, "expert_weights_scale"),
};

/* The flag behind the first deepseek4.* key an error message names, so a
 * message about metadata says which option to change; NULL if none. */
static const char *flag_of_message(const char *msg) {
    const char *best = NULL, *best_at = NULL;
    static const struct {
        const char *key, *flag;
    } extra[] = {{"compress_ratios", "--compress-ratios"},
                 {"swiglu_clamp_exp", "--swiglu-clamp"},
                 {"swiglu_clamp_shexp", "--swiglu-clamp-shexp"},
                 {"attention.value_length", "--head-dim"},
                 {"rope.scaling.type", "--rope-scaling-type"}};
    const size_t n_ovr = sizeof g_ovr / sizeof g_ovr[0], n_extra = sizeof extra / sizeof extra[0];
    for (size_t i = 0; i < n_ovr + n_extra; i++) {
        const char *key = i < n_ovr ? g_ovr[i].key : extra[i - n_ovr].key;
        const char *flag = i < n_ovr ? g_ovr[i].opt : extra[i - n_ovr].flag;
        char full[128];
        snprintf(full, sizeof full, "deepseek4.%s", key);
        for (const char *at = strstr(msg, full); at; at = strstr(at + 1, full)) {
            const char next = at[strlen(full)];
            if ((next >= 'a' && next <= 'z') || next == '_' || next == '.') continue;
            if (!best_at || at < best_at) best_at = at, best = flag;
            break;
        }
    }
    return best;
}
#undef U
#undef F

static int parse_u64(const char *s, uint64_t *out, bool suffix) {
    if (!s || !*s || *s == '-') return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    uint64_t mul = 1;
    if (suffix && *end) {
        switch (*end) {
        case 'K': case 'k': mul = 1ULL << 10; break;
        case 'M': case 'm': mul = 1ULL << 20; break;
        case 'G': case 'g': mul = 1ULL << 30; break;
        case 'T': case 't': mul = 1ULL << 40; break;
        default: return -1;
        }
        end++;
        if (*end == 'B' || *end == 'b') end++;
        if (*end == 'i') return -1;
    }
    if (*end || v > UINT64_MAX / mul) return -1;
    *out = v * mul;
    return 0;
}

static int parse_u32(const char *s, uint32_t *out) {
    uint64_t v;
    if (parse_u64(s, &v, false) || v > UINT32_MAX) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_f32(const char *s, float *out) {
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    float v = strtof(s, &end);
    if (errno || *end || v != v) return -1;
    *out = v;
    return 0;
}

static int parse_ratios(const char *s, uint32_t *ratio, uint32_t *n) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || (v != 0 && v != 4 && v != 128)) return -1;
        if (*n >= DSV4_MAX_LAYERS) return -1;
        ratio[(*n)++] = (uint32_t)v;
        if (*end == ',') end++;
        else if (*end) return -1;
        p = end;
    }
    return *n ? 0 : -1;
}

/* Appends an argument to the provenance string (all options except -o and
 * --threads, so the bytes depend on nothing else). */
static void prov_add(char *buf, size_t cap, const char *a) {
    size_t len = strlen(buf);
    if (len + strlen(a) + 2 < cap) snprintf(buf + len, cap - len, "%s%s", len ? " " : "", a);
}

/* Everything `mkmodel` was asked for, validated (mkmodel_parse). */
struct mkmodel_cli {
    struct mkmodel_opts o;
    const char *out;
    bool force;
    uint64_t bytes; /* tensor data the file will hold */
    char prov[2048];
};

/* Parses and validates argv into *c, before anything is generated: every
 * option's syntax, the hyperparameters (a rule they break is reported with
 * the option that sets them), the tensor types, and the output path (which
 * must not exist unless --force). Returns CLI_CONTINUE, or the exit status
 * (0 after --help, 2 for a usage error, 1 for an existing output) after
 * printing one line. */
static int mkmodel_parse(int argc, char **argv, struct mkmodel_cli *c) {
    const char *preset = NULL;
    memset(c, 0, sizeof *c);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[i + 1];
    }
    if (!preset) {
        usage(stderr);
        FAIL_USAGE("--preset is required (tiny, small, bench or flash)");
    }
    struct mkmodel_opts *o = &c->o;
    ms_err err;
    if (mkmodel_preset(o, preset, &err)) FAIL_USAGE("--preset: %s", err.msg);

    char *prov = c->prov;
    uint64_t size = 0;
    bool have_ratios = false, have_layers = false, have_clamp_shexp = false, have_vocab = false;
    bool have_hash = false;
    float clamp = -1.0f, clamp_shexp = -1.0f;
    uint32_t ratios[DSV4_MAX_LAYERS], n_ratios = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool flag = !strcmp(a, "--ds4-mix") || !strcmp(a, "--f32-twin") || !strcmp(a, "--force") ||
                    !strcmp(a, "--sparse");
        if (!flag && !v) FAIL_USAGE("option %s needs a value", a);
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!*v) FAIL_USAGE("%s: the path is empty", a);
            c->out = v;
            i++;
            continue;
        }
        if (!strcmp(a, "--force")) { /* where it goes, not what it holds */
            c->force = true;
            continue;
        }
        if (strcmp(a, "--threads")) { /* the thread count never changes a byte */
            prov_add(prov, sizeof c->prov, a);
            if (!flag) prov_add(prov, sizeof c->prov, v);
        }
        if (!strcmp(a, "--ds4-mix")) {
            o->ds4_mix = true;
            continue;
        }
        if (!strcmp(a, "--f32-twin")) {
            o->f32_twin = true;
            continue;
        }
        if (!strcmp(a, "--sparse")) {
            o->sparse = true;
            continue;
        }
        if (!strcmp(a, "--layers")) a = "--n-layer";
        i++;
        if (!strcmp(a, "--preset")) continue;
        if (!strcmp(a, "--seed")) {
            if (parse_u64(v, &o->seed, false)) FAIL_USAGE("--seed: '%s' is not a number", v);
        } else if (!strcmp(a, "--size")) {
            if (parse_u64(v, &size, true) || !size)
                FAIL_USAGE("--size: '%s' is not a byte count (e.g. 2G, 500M)", v);
        } else if (!strcmp(a, "--threads")) {
            uint32_t n;
            if (parse_u32(v, &n) || n < 1 || n > 16) FAIL_USAGE("--threads: 1..16");
            o->n_threads = (int)n;
        } else if (!strcmp(a, "--vocab-from")) {
            o->vocab_from = v;
        } else if (!strcmp(a, "--experts-type")) {
            if (parse_type(v, &o->experts_type))
                FAIL_USAGE("--experts-type: unknown or unsupported type '%s' (%s)", v, type_list());
        } else if (!strcmp(a, "--dense-type")) {
            if (parse_type(v, &o->dense_type))
                FAIL_USAGE("--dense-type: unknown or unsupported type '%s' (%s)", v, type_list());
        } else if (!strcmp(a, "--tensor-type")) {
            const char *eq = strrchr(v, '=');
            struct mkmodel_tensor_type *tt = &o->tensor_types[o->n_tensor_types];
            if (!eq || eq == v || (size_t)(eq - v) >= sizeof tt->name)
                FAIL_USAGE("--tensor-type: expected NAME=TYPE (e.g. output=q6_K), got '%s'", v);
            if (o->n_tensor_types == MKMODEL_MAX_TENSOR_TYPES)
                FAIL_USAGE("--tensor-type: at most %d of them", MKMODEL_MAX_TENSOR_TYPES);
            if (parse_type(eq + 1, &tt->type))
                FAIL_USAGE("--tensor-type: unknown or unsupported type '%s' (%s)", eq + 1, type_list());
            memcpy(tt->name, v, (size_t)(eq - v));
            tt->name[eq - v] = 0;
            o->n_tensor_types++;
        } else if (!strcmp(a, "--experts-type-last-layers")) {
            char tname[32];
            const char *colon = strchr(v, ':');
            if (!colon || (size_t)(colon - v) >= sizeof tname)
                FAIL_USAGE("--experts-type-last-layers: expected TYPE:N, got '%s'", v);
            memcpy(tname, v, (size_t)(colon - v));
            tname[colon - v] = 0;
            if (parse_type(tname, &o->last_layers_type) ||
                parse_u32(colon + 1, &o->n_last_layers) || !o->n_last_layers)
                FAIL_USAGE("--experts-type-last-layers: expected TYPE:N with a supported type "
                           "and N >= 1, got '%s'", v);
        } else if (!strcmp(a, "--compress-ratios")) {
            if (parse_ratios(v, ratios, &n_ratios))
                FAIL_USAGE("--compress-ratios: expected a comma list of 0, 4 or 128, got '%s'",
                           v);
            have_ratios = true;
        } else if (!strcmp(a, "--rope-scaling-type")) {
            if (!strcmp(v, "none")) o->hp.rope_scaling_type[0] = 0;
            else if (!strcmp(v, "yarn") || !strcmp(v, "linear"))
                snprintf(o->hp.rope_scaling_type, sizeof o->hp.rope_scaling_type, "%s", v);
            else FAIL_USAGE("--rope-scaling-type: yarn, linear or none, got '%s'", v);
        } else if (!strcmp(a, "--expert-weights-norm")) {
            if (strcmp(v, "0") && strcmp(v, "1"))
                FAIL_USAGE("--expert-weights-norm: 0 or 1, got '%s'", v);
            o->hp.expert_weights_norm = v[0] == '1';
        } else if (!strcmp(a, "--swiglu-clamp")) {
            if (parse_f32(v, &clamp) || !(clamp >= 0) || isinf(clamp))
                FAIL_USAGE("--swiglu-clamp: a finite number >= 0, got '%s'", v);
        } else if (!strcmp(a, "--swiglu-clamp-shexp")) {
            if (parse_f32(v, &clamp_shexp) || !(clamp_shexp >= 0) || isinf(clamp_shexp))
                FAIL_USAGE("--swiglu-clamp-shexp: a finite number >= 0, got '%s'", v);
            have_clamp_shexp = true;
        } else {
            const struct ovr *ov = NULL;
            for (size_t k = 0; k < sizeof g_ovr / sizeof g_ovr[0]; k++)
                if (!strcmp(a, g_ovr[k].opt)) ov = &g_ovr[k];
            if (!ov) FAIL_USAGE("unknown option '%s' (see --help)", a);
            void *dst = (char *)&o->hp + ov->offset;
            if (ov->kind == OVR_U32 ? parse_u32(v, dst) : parse_f32(v, dst))
                FAIL_USAGE("%s: invalid value '%s'", a, v);
            if (ov->kind == OVR_F32 && isinf(*(float *)dst))
                FAIL_USAGE("%s: must be a finite number, got '%s'", a, v);
            if (!strcmp(a, "--n-layer")) {
                have_layers = true;
                if (o->hp.n_block == 0 || o->hp.n_block > DSV4_MAX_LAYERS)
                    FAIL_USAGE("--n-layer: must be 1..%d", DSV4_MAX_LAYERS);
            }
            if (!strcmp(a, "--head-dim")) o->hp.n_embd_head_v = o->hp.n_embd_head;
            if (!strcmp(a, "--n-vocab")) have_vocab = true;
            if (!strcmp(a, "--n-hash-layer")) have_hash = true;
        }
    }
    if (!c->out) FAIL_USAGE("missing -o OUT.gguf");
    if (o->vocab_from && !have_vocab) o->hp.n_vocab = 129280; /* DeepSeek V4's padded vocabulary */
    if (size && strcmp(o->preset, "bench")) FAIL_USAGE("--size applies to --preset bench only");

    if (have_ratios) {
        if (have_layers && n_ratios != o->hp.n_block)
            FAIL_USAGE("--compress-ratios has %u entries but --n-layer is %u", n_ratios,
                       o->hp.n_block);
        o->hp.n_block = n_ratios;
        memcpy(o->hp.compress_ratio, ratios, n_ratios * sizeof ratios[0]);
    } else if (have_layers) {
        mkmodel_preset_ratios(o);
    }
    for (uint32_t il = 0; il < DSV4_MAX_LAYERS; il++) {
        if (clamp >= 0) o->hp.swiglu_clamp_exp[il] = clamp;
        if (have_clamp_shexp) o->hp.swiglu_clamp_shexp[il] = clamp_shexp;
        else if (clamp >= 0) o->hp.swiglu_clamp_shexp[il] = clamp;
    }
    /* the preset's hash layer count follows a smaller layer count; an
     * explicit --n-hash-layer is checked as given */
    if (o->hp.n_hash_layer > o->hp.n_block && !have_hash)
        o->hp.n_hash_layer = o->hp.n_block;

    /* The hyperparameters and types as mkmodel_write will check them; a
     * broken rule is reported with the option that sets the key. */
    if (!strcmp(o->preset, "bench")) {
        if (!size) size = 1ULL << 30;
        if (mkmodel_fit_size(o, size, have_layers || have_ratios, &err)) {
            const char *fl = flag_of_message(err.msg);
            FAIL_USAGE("%s%s%s", fl ? fl : "--size", ": ", err.msg);
        }
    }
    if (mkmodel_data_bytes(o, &c->bytes, &err)) {
        const char *fl = flag_of_message(err.msg);
        FAIL_USAGE("%s%s%s", fl ? fl : "", fl ? ": " : "", err.msg);
    }
    /* after the hyperparameters' checks, so that their errors name their
     * own options */
    if (mkmodel_check_tensor_types(o, &err)) FAIL_USAGE("--tensor-type: %s", err.msg);
    if (!c->force && access(c->out, F_OK) == 0) {
        fprintf(stderr, "moestream mkmodel: %s already exists; pass --force to replace it\n",
                c->out);
        return 1;
    }
    o->no_overwrite = !c->force;
    o->provenance = c->prov;
    return CLI_CONTINUE;
}

/* Writes the model c describes. 0, or 1 after printing the error. */
static int mkmodel_run(const struct mkmodel_cli *c) {
    ms_err err;
    if (mkmodel_write(&c->o, c->out, &err)) {
        fprintf(stderr, "moestream mkmodel: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "moestream mkmodel: wrote %s (%u layers, %u experts, %.1f MiB of tensors)\n",
            c->out, dsv4_n_layer(&c->o.hp), c->o.hp.n_expert, (double)c->bytes / (1 << 20));
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    static struct mkmodel_cli c; /* large (hyperparameter arrays): not on the stack */
    const int rc = mkmodel_parse(argc, argv, &c);
    return rc == CLI_CONTINUE ? mkmodel_run(&c) : rc;
}
