/*
 * prefetch.h - best-effort expert reads in the background: decode prefetch
 * of the experts the next layer is likely to select (stream/expert_source.c;
 * docs/streaming.md, "Decode prefetch": while layer L computes, the likely
 * experts of layer L+1 are read).
 *
 * A background thread with its own I/O engine runs the submitted batches of
 * reads one after another, so the forward pass never waits for them until
 * it needs their data. The caller owns the destination buffers (cache slots
 * pinned as "loading") and must not touch them until ms_prefetch_wait has
 * returned.
 *
 * Threads: every function is called from one thread (the forward pass);
 * the prefetcher's thread only runs the reads.
 */
#ifndef MS_STREAM_PREFETCH_H
#define MS_STREAM_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#include "stream/io.h"
#include "util/err.h"

struct ms_prefetch;

/* Opens `path` with I/O params io (NULL = defaults) and starts the thread.
 * max_reqs: the most reads pending at once (submissions beyond are
 * refused). Errors: open failure, thread creation, OOM. */
int ms_prefetch_new(struct ms_prefetch **out, const char *path, const struct ms_io_params *io,
                    size_t max_reqs, ms_err *err);
/* Waits for the reads under way, stops the thread. NULL is allowed. */
void ms_prefetch_free(struct ms_prefetch *p);

/* Queues reqs[0..n) (copied; their .buf must stay valid and untouched until
 * ms_prefetch_wait). Returns 0, or -1 when they do not fit beside those
 * pending (nothing queued: the caller drops its reservations). */
int ms_prefetch_submit(struct ms_prefetch *p, const struct ms_io_req *reqs, size_t n);

/* True when reads were submitted since the last wait. */
int ms_prefetch_pending(const struct ms_prefetch *p);

/*
 * Waits until every submitted read has ended. Returns 0 when all succeeded,
 * -1 when any failed (err, may be NULL, names the failure; every buffer of
 * the submissions since the last wait must then be treated as not
 * filled). *waited (may be NULL) receives the seconds spent waiting,
 * *bytes (may be NULL) the bytes read since the last wait.
 */
int ms_prefetch_wait(struct ms_prefetch *p, double *waited, uint64_t *bytes, ms_err *err);

/* The prefetcher's I/O engine, for fault injection in tests (set hooks only
 * while nothing is pending). */
struct ms_io *ms_prefetch_io(struct ms_prefetch *p);

#endif
