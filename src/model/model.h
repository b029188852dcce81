/*
 * model.h - a loaded DeepSeek V4 model: hyperparameters, every tensor bound
 * by role, and the interface through which the forward pass reaches routed
 * experts.
 *
 * Binding checks every tensor of the layout (model/layout.h) against the
 * file: a missing, mis-shaped or wrongly typed tensor is an error naming it.
 * Weight matrices are used in place (the file is mapped read-only); vectors
 * (norms, HC base/scale, sinks, selection bias) and the compressor position
 * tables (ape) are converted to f32 arrays owned by the model, since they are
 * small and read element by element.
 *
 * Routed experts are never touched directly: the forward pass asks an
 * expert source for the experts a layer's tokens route to and releases them
 * when done. The resident source here hands out pointers into the mapping;
 * the streaming expert store (stream/) implements the same interface.
 */
#ifndef MS_MODEL_MODEL_H
#define MS_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/hparams.h"
#include "model/layout.h"
#include "util/err.h"

/* One bound tensor. For matrices `mat` describes rows (ne[1] * ne[2] rows of
 * ne[0] elements; 3-D expert tensors are expert-major). For vectors and ape
 * tables `f32` holds the converted values (ne[0] * ne[1] floats). */
struct dsv4_tensor {
    bool present;
    int64_t ne[3];
    struct ms_mat mat;
    const float *f32;
    const int32_t *i32; /* tid2eid: [n_vocab][n_expert_used] */
};

struct dsv4_layer {
    uint32_t ratio; /* 0, 4 or 128 */
    struct dsv4_tensor t[DSV4_ROLE_COUNT];
};

/* The three matrices of one routed expert: gate and up [n_ff_exp x n_embd],
 * down [n_embd x n_ff_exp]. */
struct dsv4_expert_view {
    struct ms_mat gate, up, down;
};

/* Where routed experts come from (resident mapping or the expert store). */
struct dsv4_expert_source {
    void *ctx;
    /* Makes experts ids[0..n) of layer il readable and fills views[0..n);
     * they stay valid until the matching release. -1 with err on I/O error. */
    int (*acquire)(void *ctx, uint32_t il, const int32_t *ids, int n,
                   struct dsv4_expert_view *views, ms_err *err);
    void (*release)(void *ctx, uint32_t il, const int32_t *ids, int n);
    /* Most experts one acquire may hold (the cache's capacity); 0 = no limit.
     * The forward pass acquires a layer's experts in groups of at most this. */
    int max_per_acquire;
    /* Optional: the limit for layer il's acquires in the step that has just
     * been prepared, when it differs from max_per_acquire (0 = no limit: a
     * layer served from memory the source holds whole, such as a layer
     * buffer, needs no groups). */
    int (*acquire_limit)(void *ctx, uint32_t il);
    /* Optional (NULL = not needed). Called at the start of every layer, before
     * its attention, with the ubatch's tokens[0..n_tokens): a streaming
     * source decides how it will serve the layer (whole-layer reads for long
     * ubatches) and starts reading ahead (layer il, and il + 1 while il
     * computes). -1 with err on failure. */
    int (*prepare)(void *ctx, uint32_t il, const int32_t *tokens, int64_t n_tokens,
                   ms_err *err);
    /* Optional. Called after routing, before the layer's acquires, with the
     * distinct experts ids[0..n) the ubatch's last tokens selected (last
     * token's first): a streaming source seeds its decode cache with them
     * while the layer is in memory. -1 with err on I/O error. */
    int (*tail_routed)(void *ctx, uint32_t il, const int32_t *ids, int n, ms_err *err);
    /* Optional. Called once per ubatch after routing, before tail_routed
     * and the acquires, with the distinct experts ids[0..n) (ascending) the
     * ubatch's n_tokens tokens selected in layer il: a streaming source
     * stops reading what nobody selected (the rest of a speculative
     * whole-layer read, wrong prefetch guesses). -1 with err on failure. */
    int (*routed)(void *ctx, uint32_t il, const int32_t *ids, int n, int64_t n_tokens,
                  ms_err *err);
    /* Optional. A guess of the experts ids[0..n) layer il will select, made
     * while an earlier layer computes (decode steps): a streaming source
     * starts reading the missing ones in the background. Best effort: a
     * wrong guess only costs a read, a failed read is a miss later. -1 with
     * err only on OOM. */
    int (*prefetch)(void *ctx, uint32_t il, const int32_t *ids, int n, ms_err *err);
    /* Optional. The experts ids[0..n) of layer il the forward pass acquires
     * next (exact, not a guess), told while the group before them computes
     * when a layer takes more than one acquire: a streaming source that
     * serves the layer through its cache starts reading the missing ones so
     * that the reads overlap that computation. The forward pass then
     * acquires in groups of at most half of max_per_acquire, so the group
     * computing and the group being read fit in the cache together. Best
     * effort, as prefetch; -1 with err only on OOM. */
    int (*read_ahead)(void *ctx, uint32_t il, const int32_t *ids, int n, ms_err *err);
    /* Optional. When a layer takes more than one acquire: reorders the
     * ubatch's distinct experts ids[0..n) (ascending on entry) into the
     * order they are best acquired in (a cache: the experts it holds
     * first, so an earlier ubatch's leftovers are used before they are
     * evicted). Only the processing order changes: the results do not. */
    void (*order)(void *ctx, uint32_t il, int32_t *ids, int n);
};

/* How many of a ubatch's last tokens tell tail_routed their experts. */
#define DSV4_TAIL_TOKENS 4

struct dsv4_model {
    struct dsv4_hparams hp;
    uint32_t n_layer;          /* main layers */
    struct gguf_file *gguf;
    void *map;                 /* read-only mapping of the whole file (2 MiB aligned) */
    bool huge;                 /* the mapping is the huge-page copy (dsv4_model_populate) */
    size_t map_size;
    struct dsv4_tensor glob[DSV4_ROLE_COUNT]; /* global roles */
    struct dsv4_layer *layers; /* [n_layer] */
    struct dsv4_expert_source experts;
    float *f32_arena;          /* backing store of every dsv4_tensor.f32 */
};

/*
 * Opens `path`, reads and validates the hyperparameters, binds every tensor
 * and maps the file. The model owns the gguf_file and the mapping; free with
 * dsv4_model_free. Errors name the file and the offending key or tensor.
 */
int dsv4_model_load(struct dsv4_model **out, const char *path, ms_err *err);
void dsv4_model_free(struct dsv4_model *m);

/* Reads the whole model into memory now (resident runs): with copy, into
 * anonymous memory on transparent huge pages that replaces the file
 * mapping at the same address (pointers into the mapping stay valid;
 * m->huge is set); without copy, or when the copy cannot be made, by
 * mapping every page of the file (as llama.cpp's MAP_POPULATE does). Either way no routed expert page is faulted in when a
 * token first selects it, which would dominate the first hundreds of decode
 * steps. -1 with err on a read error. */
int dsv4_model_populate(struct dsv4_model *m, bool copy, ms_err *err);

/* Bytes of routed expert weights in the file, and of everything else. */
uint64_t dsv4_model_routed_bytes(const struct dsv4_model *m);

#endif
