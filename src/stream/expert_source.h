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
 * Usage: create over a loaded model, then `m->experts =
 * ms_stream_source_iface(src)` before creating sessions; free the source
 * after the last session. Not thread-safe (one forward pass at a time).
 */
#ifndef MS_STREAM_EXPERT_SOURCE_H
#define MS_STREAM_EXPERT_SOURCE_H

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
};

struct ms_stream_source;

/* Buffer bytes of one expert slot of layer il (its three extents). */
uint64_t ms_stream_slot_bytes(const struct dsv4_model *m, uint32_t il);
/* The smallest budget that holds one token's experts in every layer:
 * max over layers of n_expert_used * slot bytes. */
uint64_t ms_stream_min_budget(const struct dsv4_model *m);

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

struct ms_expert_cache *ms_stream_source_cache(struct ms_stream_source *s);
struct ms_io *ms_stream_source_io(struct ms_stream_source *s);

#endif
