/*
 * expert_source.h - routed experts streamed from the GGUF: a
 * struct dsv4_expert_source (model/model.h) over the expert cache and the
 * I/O engine.
 *
 * acquire(layer, ids[n]) pins the n experts in the cache; the misses' three
 * byte ranges (gate, up, down) are read together in one I/O batch, straight
 * into their slot buffers; the views point into the slots (no copy).
 * release unpins them. A slot of layer il is laid out as
 *     [gate extent][up extent][down extent]
 * each extent being the MS_IO_ALIGN-aligned superset of that matrix's byte
 * range (the largest over the layer's experts), so every part starts
 * aligned and the matrix begins at (file offset % MS_IO_ALIGN) inside it.
 *
 * Whole-layer mode (the one-pass prefill, docs/streaming.md "Prefill: whole
 * layers, once per prompt"): when a
 * ubatch is long enough that nearly every expert of a layer is selected
 * (n_tokens * n_expert_used >= 3 * n_expert by default, see below and
 * whole_layer_min_tokens), prepare(il) reads the layer's three expert
 * tensors whole, with large direct reads on a background thread, into one of
 * two layer buffers, and starts layer il + 1's read into the other while il
 * computes; acquire then serves views into the layer buffer, bypassing the
 * decode cache (no pins, no hits or misses). A layer whose experts are all
 * in the cache is served from the cache instead. tail_routed copies the
 * experts of the ubatch's last tokens from the layer buffer into the decode
 * cache (ms_expert_cache_install: the budget holds at every install), at
 * most budget / (n_layer * largest slot) per layer, so that seeding one
 * layer does not evict the seeds of the others, and at most n_expert_used
 * (one token's worth: seeding more cost more than it saved, measured in
 * docs/streaming.md). The layer buffers are the two layers of prefill
 * headroom of the memory plan (stream/budget.h). With headroom_bytes they
 * are allocated and faulted in when the source is made and never freed
 * until it is: between prefills (from the first short ubatch, a decode
 * step) they are lent to the decode cache (ms_expert_cache_lend), which
 * gives them back (dropping what it kept there) before the next prefill
 * queues a read. So the decode cache has the headroom, and no prefill pays
 * for zeroing fresh pages (measured on the 4-layer Flash shape: 8.7% of
 * the prefill's CPU time was page clearing under the direct reads before).
 * Without headroom_bytes they are allocated at the first long ubatch and
 * kept.
 *
 * Switch point: n*k >= 3 * n_expert (WHOLE_LAYER_FILL in expert_source.c),
 * from the measurements in docs/streaming.md ("The switch point, measured"):
 * whole layers win once about 85% of a layer's experts are selected, and
 * earlier under a memory cap with a cold page cache.
 *
 * Decode prefetch (on unless no_prefetch): on a decode step (ubatch of one
 * token) the forward pass, once layer L's experts are pinned, guesses layer
 * L+1's (its router and bias on L's FFN input; exact tid2eid ids for a hash
 * layer) and calls prefetch(L+1, ids): the missing ones get cache slots
 * pinned as "loading" (ms_expert_cache_reserve: evicting by the policy, so
 * the budget holds at every install; no room = no prefetch) and their
 * reads go to a background thread (stream/prefetch.h) while L's experts and
 * L+1's attention compute. The next acquire waits for them and ends the
 * reservations; a failed read drops its slots (a miss later, not an
 * error). In selected-only mode prepare(il) of a hash layer starts the
 * reads of the ubatch's tid2eid experts the same way, before the layer's
 * attention. Guess accuracy is counted (predicted_right / predicted_
 * selected).
 * Measured gains: docs/streaming.md, "Decode prefetch".
 *
 * Layers held whole (full_layers = N): the first N layers' expert tensors
 * are read at creation into their own buffers, outside the cache budget
 * (the engine's memory plan counts them as resident); acquires of those
 * layers serve views into them, with no cache traffic, no prefetch and no
 * whole-layer reads.
 *
 * Usage: create over a loaded model, then `m->experts =
 * ms_stream_source_iface(src)` before creating sessions; free the source
 * after the last session. Not thread-safe (one forward pass at a time).
 */
#ifndef MS_STREAM_EXPERT_SOURCE_H
#define MS_STREAM_EXPERT_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "stream/expert_cache.h"
#include "stream/io.h"
#include "util/err.h"

struct ms_stream_params {
    uint64_t budget_bytes;         /* expert cache budget; 0 = ms_stream_min_budget */
    const char *hotlist_path;      /* seeds the policy; NULL = none */
    struct ms_io_params io;        /* I/O engine options (zero = defaults) */
    struct ms_cache_policy policy; /* taken over; all-zero = default policy */
    /* ubatches of at least this many tokens read whole layers; 0 = auto
     * (ceil(3 * n_expert / n_expert_used)), -1 = never */
    int64_t whole_layer_min_tokens;
    /* with a hotlist: read its first this many experts (highest priority
     * first) into the cache at creation, as far as the budget holds them */
    uint32_t preload_experts;
    /* hold the first this many layers' experts whole, read at creation,
     * outside the cache budget (ms_stream_full_layer_bytes); they never
     * touch the cache */
    uint32_t full_layers;
    /* true: no decode prefetch (see "Decode prefetch" above) */
    bool no_prefetch;
    /* the memory plan's prefill headroom (two layer buffers): nonzero =
     * the layer buffers are made at creation and lent to the decode cache
     * while no prefill runs (above), so cache + layer buffers never exceed
     * budget + the buffers. 0 = the cache keeps budget_bytes always. */
    uint64_t headroom_bytes;
    /* false (the default): once a ubatch that is the whole pass has been
     * routed, the runs of its speculative whole-layer read that no selected
     * expert needs are withdrawn; true: layers are always read whole (for
     * measurements and tests) */
    bool no_layer_drop;
    /* experts per run of a whole-layer read (one range per part per run);
     * 0 = enough for one I/O piece (io.chunk_bytes) per range */
    uint32_t layer_run_experts;
};

struct ms_stream_counters {
    uint64_t layer_reads;       /* whole-layer reads completed and used */
    uint64_t layer_bytes;       /* bytes they read (also in the cache's bytes_read) */
    uint64_t seeded;            /* experts installed into the cache from layer buffers */
    uint64_t peak_layer_buffer_bytes;
    double layer_read_seconds;  /* the layer reader's time in reads */
    /* decode prefetch */
    uint64_t prefetched;         /* experts read ahead and filled */
    uint64_t prefetch_failed;    /* experts whose read-ahead failed (misses later) */
    uint64_t prefetch_cancelled; /* wrong guesses whose reads were cancelled before they ran */
    uint64_t prefetch_used;      /* prefetched experts the next acquire selected */
    uint64_t predicted_selected; /* experts selected in layers with a router guess */
    uint64_t predicted_right;    /* of those, guessed */
};

struct ms_stream_source;

/* Buffer bytes of one expert slot of layer il (its three extents). */
uint64_t ms_stream_slot_bytes(const struct dsv4_model *m, uint32_t il);
/* The largest slot over all layers (layers of different weight types have
 * different slots); 0 for a model without routed experts. */
uint64_t ms_stream_max_slot_bytes(const struct dsv4_model *m);
/* The smallest budget that holds one token's experts in every layer:
 * n_expert_used * the largest slot. */
uint64_t ms_stream_min_budget(const struct dsv4_model *m);
/* Bytes that holding the first n layers whole takes (--full-layers). */
uint64_t ms_stream_full_layer_bytes(const struct dsv4_model *m, uint32_t n);

/*
 * Opens the model's file for expert reads (O_DIRECT where allowed) and
 * creates the cache. The model must outlive the source. Errors: missing
 * expert tensors, budget below ms_stream_min_budget, hotlist errors, I/O
 * open errors, OOM.
 */
int ms_stream_source_new(struct ms_stream_source **out, const struct dsv4_model *m,
                         const struct ms_stream_params *p, ms_err *err);
void ms_stream_source_free(struct ms_stream_source *s);

/* The interface the forward pass calls (ctx = s). */
struct dsv4_expert_source ms_stream_source_iface(struct ms_stream_source *s);

const struct ms_stream_counters *ms_stream_source_counters(struct ms_stream_source *s);
/* Bytes of whole-layer buffers held for prefill reads now (0 while they
 * are lent to the decode cache, between prefills). */
uint64_t ms_stream_source_layer_buffer_bytes(const struct ms_stream_source *s);
/* The smallest ubatch that reads whole layers (INT64_MAX: never). */
int64_t ms_stream_source_whole_min_tokens(const struct ms_stream_source *s);
/* The whole-layer reader's I/O engine (fault injection in tests). */
struct ms_io *ms_stream_source_layer_io(struct ms_stream_source *s);

struct ms_expert_cache *ms_stream_source_cache(struct ms_stream_source *s);
struct ms_io *ms_stream_source_io(struct ms_stream_source *s);
/* The prefetcher's I/O engine (fault injection in tests), NULL when off. */
struct ms_io *ms_stream_source_prefetch_io(struct ms_stream_source *s);

#endif
