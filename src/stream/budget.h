/*
 * budget.h - how much memory the process may use, and how it is split
 * between resident weights, attention state and the expert cache.
 *
 * The limit is the tightest of the memory cgroup's limit (v1
 * memory.limit_in_bytes or v2 memory.max of the cgroup this process is in)
 * and the machine's MemAvailable. The plan subtracts everything that is not
 * expert cache - dense weights, the sessions' KV state and scratch, and two
 * layers of prefill headroom - before fitting the cache (leaving KV and
 * context buffers out, as a reference engine does, overcommits memory at
 * long contexts; docs/streaming.md, "The memory plan").
 */
#ifndef MS_STREAM_BUDGET_H
#define MS_STREAM_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

/* The memory limit in bytes and where it came from ("cgroup v1",
 * "cgroup v2", "MemAvailable"). proc_root/sys_root are "/proc" and
 * "/sys/fs/cgroup" except in tests. -1 when neither source can be read. */
int ms_mem_limit(uint64_t *bytes, const char **source, const char *proc_root,
                 const char *sys_root, ms_err *err);

struct ms_mem_plan_in {
    uint64_t limit_bytes;     /* from ms_mem_limit */
    double pct;               /* share of the limit the plan may use, (0, 100] */
    uint64_t file_bytes;      /* whole model file */
    uint64_t routed_bytes;    /* routed expert bytes in it */
    uint64_t max_layer_routed;/* routed bytes of the largest layer */
    uint64_t session_bytes;   /* KV state + scratch of the sessions to serve */
    uint64_t min_cache_bytes; /* smallest workable expert cache */
    int stream;               /* -1 auto, 0 never, 1 always */
    uint64_t cache_bytes;     /* requested cache target in bytes, 0 = auto */
    uint64_t full_bytes;      /* routed experts held whole (--full-layers), resident
                                 beside the dense weights when streaming */
    bool no_whole_layer;      /* prefill never reads whole layers: no headroom */
};

struct ms_mem_plan {
    bool stream;              /* routed experts streamed from disk */
    uint64_t usable_bytes;    /* limit * pct */
    uint64_t dense_bytes;     /* resident non-routed weights */
    uint64_t headroom_bytes;  /* two layers of prefill reads (streaming); 0 when
                                 whole-layer reads are off or do not fit */
    bool whole_layer_dropped; /* they did not fit beside the smallest cache, so the
                                 plan leaves them out: prefill reads through the cache */
    uint64_t cache_bytes;     /* fitted expert cache budget (streaming) */
    uint64_t resident_need;   /* what running fully resident would take */
};

/*
 * Decides residency and fits the cache. Auto streams when the resident need
 * (file + sessions) exceeds the usable memory. A requested cache size is a
 * target: it is reduced to what remains after dense weights, sessions and
 * headroom (and never below min_cache_bytes). When the two layers of
 * headroom leave no room for the smallest cache but the plan fits without
 * them, they are left out (whole_layer_dropped: the prefill then reads its
 * experts through the cache, as short prompts do). Errors (the message gives the
 * figures): streaming cannot fit even the smallest cache in what remains,
 * whatever cache was requested; resident, the sessions alone exceed the
 * usable memory (the weights are a reclaimable file mapping).
 */
int ms_mem_plan(const struct ms_mem_plan_in *in, struct ms_mem_plan *out, ms_err *err);

#endif
