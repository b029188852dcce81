/*
 * mkmodel.h - writes a DeepSeek-V4-architecture GGUF (llama.cpp's deepseek4
 * layout, docs/gguf.md) with seeded random weights, for tests,
 * demos and benchmarks.
 *
 * Weights are scaled so a forward pass stays finite and informative:
 * matrices ~ N(0, 1/sqrt(n_in)), norm weights ~ 1 + N(0, 0.1), HC fn/scale/base
 * large enough that the Sinkhorn mix departs from uniform, router rows that
 * vary the selected experts per token, small attention sinks, random
 * tid2eid rows for hash layers. A byte-level BPE vocabulary (ms_vocab_build)
 * is written as tokenizer.ggml.* keys.
 *
 * Values are a pure function of (seed, tensor name, row block): every tensor
 * is generated in fixed blocks of rows, each from its own RNG stream, so the
 * file is byte-identical for the same options whatever the thread count, and
 * a tensor's values do not depend on the storage types chosen. The file is
 * streamed: one row block per thread is in memory at a time.
 */
#ifndef MS_MKMODEL_MKMODEL_H
#define MS_MKMODEL_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/hparams.h"
#include "model/layout.h"
#include "quant/quant.h"
#include "util/err.h"

#define MKMODEL_MAX_TENSOR_TYPES 16

struct mkmodel_opts {
    char preset[16];          /* "tiny", "small", "bench", "flash" */
    struct dsv4_hparams hp;
    uint64_t seed;
    enum ms_type experts_type; /* routed experts (gate, up, down) */
    enum ms_type dense_type;   /* every other rank-2 tensor */
    bool ds4_mix;              /* ds4's published mix instead of the two above */
    uint32_t n_last_layers;    /* the last n_last_layers layers' experts ... */
    enum ms_type last_layers_type; /* ... are stored in this type */
    bool f32_twin;             /* store every non-F32 tensor as F32 of its
                                  dequantized values */
    int n_threads;             /* >= 1; does not change the output */
    const char *provenance;    /* options string recorded in the file, or NULL */
    const char *vocab_from;    /* a Hugging Face tokenizer.json to import instead of the
                                  built-in vocabulary (padded to hp.n_vocab), or NULL */
    bool no_overwrite;         /* refuse to replace an existing output file (the file is
                                  always written to a temporary name and renamed) */
    bool random_codes;         /* quantized tensors: random valid codes and fitted scales
                                  instead of quantized random floats (flash preset) */
    bool sparse;               /* leave every matrix's data as a hole (zeros) */
    /* Per-tensor types that override all of the above (--tensor-type
     * NAME=TYPE, as llama-quantize's option of that name): entry k applies
     * to every matrix whose name, or whose name without "blk.N." and
     * ".weight", equals tensor_types[k].name; the last match wins. */
    struct mkmodel_tensor_type {
        char name[64];
        enum ms_type type;
    } tensor_types[MKMODEL_MAX_TENSOR_TYPES];
    uint32_t n_tensor_types;
};

/*
 * Fills o (hparams, default types, seed 1, 2 threads) for a preset:
 *   tiny  - n_embd 256, 4 layers (ratios 0,4,128,4), 8 experts, vocab 512:
 *           a few MB, for unit tests; HC/Sinkhorn/clamp settings chosen so
 *           the fine details of the architecture change the output
 *   small - n_embd 512, 6 layers, 32 experts, vocab 1024: tens of MB (demo)
 *   bench - n_embd 1024, 256-wide experts sized by mkmodel_fit_size
 *   flash - DeepSeek V4 Flash's dimensions (n_embd 4096, 43 layers, 256
 *           experts of 2048, vocab 129280, its compress ratios), ds4's q2
 *           mix, random codes (about 80 GB; sparse or fewer layers for tests)
 * Every preset dimension that is a row length is a multiple of 256, so any
 * supported type fits. -1 for an unknown preset name.
 */
int mkmodel_preset(struct mkmodel_opts *o, const char *name, ms_err *err);
/* Sets the compress ratios of o->hp.n_block layers as the preset lays them
 * out (flash: 0, 0, then 4 and 128 alternating; others
 * dsv4_default_ratios). */
void mkmodel_preset_ratios(struct mkmodel_opts *o);

/*
 * The type a tensor is stored in (before the twin rewrite): 1-D -> F32,
 * tid2eid -> I32, routed experts -> experts_type (last_layers_type in the
 * last n_last_layers layers), other rank-2 tensors -> dense_type, except the
 * compressor position tables (ape), which are F16 when dense_type is a block
 * quant (ds4 stores them F16; they are lookup tables, not matmul weights).
 * With ds4_mix: gate/up IQ2_XXS, down Q2_K, attention matrices, output and
 * shared expert Q8_0, token_embd/HC/compressor/indexer/router F16.
 * A matching o->tensor_types entry overrides every rule above for a matrix
 * (n_dims >= 2, not tid2eid). -1 when ne0 is not a multiple of the chosen
 * type's block size (the message names the tensor, its ne0 and the type).
 */
int mkmodel_tensor_type(const struct mkmodel_opts *o, const struct dsv4_tensor_info *t,
                        enum ms_type *type, ms_err *err);

/* -1 with a message naming the entry when an o->tensor_types entry matches
 * no matrix of the layout o->hp gives (a misspelt name would otherwise
 * change nothing); 0 otherwise. */
int mkmodel_check_tensor_types(const struct mkmodel_opts *o, ms_err *err);

/* Validates hparams and every tensor's type (as mkmodel_write would) and sets
 * *bytes to the total tensor data size, without padding. */
int mkmodel_data_bytes(const struct mkmodel_opts *o, uint64_t *bytes, ms_err *err);

/* Chooses n_block (unless compress ratios were given: pass fixed_layers) and
 * n_expert so the tensor data is close to, and not above, target bytes.
 * Used by the bench preset. -1 when the target is out of reach. */
int mkmodel_fit_size(struct mkmodel_opts *o, uint64_t target, bool fixed_layers,
                     ms_err *err);

/* Writes the model to `path`. Errors: invalid hparams or types, vocabulary
 * build, I/O (the partial file is removed). */
int mkmodel_write(const struct mkmodel_opts *o, const char *path, ms_err *err);

#endif
