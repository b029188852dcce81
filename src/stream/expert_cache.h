/*
 * expert_cache.h - the decode expert cache: which routed experts are in
 * memory, in which buffer, and which one to drop when another must come in.
 *
 * A slot holds one whole expert (gate, up and down of one (layer, expert)) in
 * one MS_IO_ALIGN-aligned buffer of the layer's slot size, laid out by the
 * caller (stream/expert_source.c). The cache owns the buffers; it knows
 * nothing about files.
 *
 * Budget: a byte count, accounted per buffer (layers may have different
 * slot sizes: mixed expert types). The bytes of every buffer the cache holds
 * (slots in use plus freed buffers kept for reuse) never exceed the budget,
 * not even during an install: enough is evicted and freed before a buffer is
 * allocated. Memory lent to the cache (ms_expert_cache_lend) adds to both
 * and is never allocated or freed here.
 *
 * Lifetime of a slot: ms_expert_cache_pin installs missing experts (evicting
 * others) and pins every requested one; the caller fills the new ones and
 * calls ms_expert_cache_loaded (or _abort on failure); a slot is only
 * evicted while unpinned, so nothing a computation reads is ever overwritten.
 *
 * Eviction: the unpinned slot with the lowest policy rank, ties broken by
 * least recent use. The policy is a small interface (struct
 * ms_cache_policy) so alternatives can be measured; the default counts
 * selections, halves all counts periodically and is seeded from a hotlist.
 *
 * Not thread-safe: one caller at a time.
 */
#ifndef MS_STREAM_EXPERT_CACHE_H
#define MS_STREAM_EXPERT_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "stream/hotlist.h"
#include "util/err.h"

/* An eviction policy over keys layer * n_expert + expert. */
struct ms_cache_policy {
    const char *name;
    void *ctx;
    /* Raises key's standing to at least `priority` (1..32, hotlist seed). */
    void (*seed)(void *ctx, uint32_t key, uint32_t priority);
    /* The router selected key (once per acquire that includes it). */
    void (*selected)(void *ctx, uint32_t key);
    /* Standing of key: lower is evicted first. */
    uint32_t (*rank)(void *ctx, uint32_t key);
    void (*free)(void *ctx);
};

/*
 * The default policy: a count per expert, +1 per selection (saturating),
 * every `decay_every` selections all counts are halved; a hotlist seed sets
 * the count to at least its priority, so seeds start ahead and fade if the
 * workload does not use them. decay_every 0 = 4096. Errors: OOM.
 */
int ms_policy_prio_recency(struct ms_cache_policy *out, uint32_t n_keys, uint64_t decay_every,
                           ms_err *err);
/* Pure least-recently-used (every rank equal), for comparison and tests. */
void ms_policy_lru(struct ms_cache_policy *out);

struct ms_expert_cache_params {
    uint32_t n_layer, n_expert;
    const uint64_t *slot_bytes;  /* [n_layer]: buffer bytes of one expert of the layer */
    uint64_t budget_bytes;
    struct ms_cache_policy policy; /* taken over (freed with the cache); all-zero =
                                      ms_policy_prio_recency with default decay */
};

struct ms_cache_stats {
    uint64_t hits, misses, evictions;
    uint64_t prefetched;          /* experts filled through ms_expert_cache_reserve */
    uint64_t bytes_read;          /* noted by the reader (ms_expert_cache_note_io) */
    double io_wait_seconds;       /* likewise */
    uint64_t resident_bytes;      /* buffers held: slots in use + kept for reuse */
    uint64_t peak_resident_bytes;
    uint64_t used_bytes;          /* slots holding an expert */
    uint64_t n_resident;          /* experts held */
    uint64_t budget_bytes;
};

struct ms_expert_cache;

/* Errors: bad params (zero sizes, budget 0), OOM. On error the policy is
 * freed too. */
int ms_expert_cache_new(struct ms_expert_cache **out, const struct ms_expert_cache_params *p,
                        ms_err *err);
void ms_expert_cache_free(struct ms_expert_cache *c);

/*
 * Pins experts ids[0..n) of layer il (distinct, in [0, n_expert)) and sets
 * bufs[i] to each one's slot buffer (slot_bytes[il] bytes, MS_IO_ALIGN
 * aligned). miss[i] is set true where the expert was not resident: its
 * buffer is new and must be filled, then ms_expert_cache_loaded (or
 * ms_expert_cache_abort) called before the next pin. Succeeds whenever the
 * n experts fit in the budget beside what other callers keep pinned.
 * Errors (nothing is pinned then): bad or repeated id, the n experts alone
 * exceed the budget, pinned slots leave no room, OOM.
 */
int ms_expert_cache_pin(struct ms_expert_cache *c, uint32_t il, const int32_t *ids, int n,
                        void **bufs, bool *miss, ms_err *err);
/* The misses of the last pin are filled: they become hits for later pins. */
void ms_expert_cache_loaded(struct ms_expert_cache *c, uint32_t il, const int32_t *ids, int n,
                            const bool *miss);
/* Filling failed: drops the misses of the last pin and unpins its hits. */
void ms_expert_cache_abort(struct ms_expert_cache *c, uint32_t il, const int32_t *ids, int n,
                           const bool *miss);
/* Ends a pin (after _loaded): the slots may be evicted again. */
void ms_expert_cache_unpin(struct ms_expert_cache *c, uint32_t il, const int32_t *ids, int n);

/*
 * Installs expert `expert` of layer il from memory, without I/O (seeding
 * the cache from a whole-layer prefill buffer): when it is not resident, a
 * slot is made exactly as a pin would (evicting by the policy first, so the
 * budget holds at every install) and fill(ctx, buf) writes its slot buffer
 * (slot_bytes[il] bytes). Counts neither a hit nor a miss and leaves the
 * expert unpinned. Returns 1 when installed, 0 when already resident or
 * when pinned slots leave no room (nothing changes), -1 on a bad id or OOM.
 */
int ms_expert_cache_install(struct ms_expert_cache *c, uint32_t il, int32_t expert,
                            void (*fill)(void *ctx, void *buf), void *ctx, ms_err *err);

/*
 * Reserves a slot for an expert read in the background (decode prefetch):
 * when expert `expert` of layer il is not resident and room can be made by
 * evicting unpinned slots (the budget holds at every install), a slot is
 * made, pinned and marked loading, *buf receives its buffer (slot_bytes[il]
 * bytes) and 1 is returned; the caller fills it and must call
 * ms_expert_cache_filled before any pin of that expert (a pin of a loading
 * expert is an error). Counts neither a hit nor a miss and does not tell
 * the policy (a guess is not a selection). 0 when already resident or no
 * room (nothing changes), -1 on a bad id or OOM.
 */
int ms_expert_cache_reserve(struct ms_expert_cache *c, uint32_t il, int32_t expert, void **buf,
                            ms_err *err);
/* Ends a reservation: ok = the buffer was filled (the expert becomes an
 * ordinary unpinned resident, counted in stats.prefetched), else the slot
 * is dropped (a later pin is a miss). */
void ms_expert_cache_filled(struct ms_expert_cache *c, uint32_t il, int32_t expert, bool ok);

/* Seeds the policy from a hotlist (entries outside the cache's shape are
 * skipped). */
void ms_expert_cache_seed(struct ms_expert_cache *c, const struct ms_hotlist *h);

/* Changes the budget of the cache's own buffers (lent memory is on top of
 * it). Lowering it evicts unpinned slots (policy order) and frees kept
 * buffers until the own buffers held fit, as far as pins allow. Returns the
 * bytes of own buffers held afterwards (> budget_bytes only when pinned
 * slots hold more). */
uint64_t ms_expert_cache_set_budget(struct ms_expert_cache *c, uint64_t budget_bytes);

/*
 * Allocates up to n of the cache's own buffers of the common slot size (the
 * size most layers' slots have), within its own budget, and faults them in
 * now, into the pool that the next installs of that size take from. Why:
 * the prefill seeds the cache from the layer buffers on the forward pass's
 * thread (ms_expert_cache_install), and a copy into fresh pages pays their
 * zeroing there, at 0.7-2.4 GB/s on a virtual machine, while the other
 * threads wait. Returns the buffers allocated (fewer than n when the budget
 * is reached), -1 (err set) on OOM: the buffers allocated before stay.
 */
int64_t ms_expert_cache_prefault(struct ms_expert_cache *c, uint32_t n, ms_err *err);

/*
 * Lends the cache `bytes` of memory at mem (MS_IO_ALIGN aligned, owned and
 * kept alive by the caller) until ms_expert_cache_reclaim: it is cut into
 * as many chunks of one slot size (the size most layers' slots have) as fit
 * and used for slots of that size before any buffer of the cache's own.
 * This is how the prefill's whole-layer buffers serve the decode cache
 * between prefills without being freed and faulted in again (a fresh page
 * costs its zeroing; on a virtual machine a first touch ran at 0.7-2.4
 * GB/s). The stats count lent chunks as budget and resident bytes. May be
 * called more than once. Returns the bytes lent (a multiple of the chunk
 * size, 0 when bytes is below one chunk); -1 (err set) on bad alignment or
 * OOM, nothing lent then.
 */
int64_t ms_expert_cache_lend(struct ms_expert_cache *c, void *mem, uint64_t bytes, ms_err *err);
/*
 * Takes all lent memory back: the experts held in it are dropped (counted
 * as evictions) and the chunks forgotten; the owner may write it as soon as
 * this returns 0. Errors (nothing changes): a lent chunk is pinned (end
 * every acquire and prefetch first).
 */
int ms_expert_cache_reclaim(struct ms_expert_cache *c, ms_err *err);
/* Bytes of lent memory the cache holds (0 after reclaim). */
uint64_t ms_expert_cache_lent_bytes(const struct ms_expert_cache *c);

bool ms_expert_cache_contains(const struct ms_expert_cache *c, uint32_t il, uint32_t expert);
const struct ms_cache_stats *ms_expert_cache_stats(const struct ms_expert_cache *c);
/* Adds a reader's I/O to the counters: bytes read, seconds waited. */
void ms_expert_cache_note_io(struct ms_expert_cache *c, uint64_t bytes, double seconds);

/* Test hook: called after every buffer allocation and every install with
 * the bytes of buffers held, so a test can check the budget at each step. */
typedef void (*ms_cache_install_fn)(void *ctx, uint64_t resident_bytes, uint64_t budget_bytes);
void ms_expert_cache_set_install_hook(struct ms_expert_cache *c, ms_cache_install_fn fn,
                                      void *ctx);

#endif
