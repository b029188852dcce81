/*
 * prefetch.h - best-effort expert reads in the background: decode prefetch
 * of the experts the next layer is likely to select (stream/expert_source.c;
 * docs/streaming.md, "Decode prefetch": while layer L computes, the likely
 * experts of layer L+1 are read).
 *
 * A background thread with its own I/O engine runs the submitted reads in
 * submission order, so the forward pass never waits for them until it needs
 * their data, and then only for the reads it needs: every submission gets a
 * ticket, and ms_prefetch_check waits for (or polls) one ticket's reads
 * while later and unrelated ones are still in flight (per-request
 * completion, ms_io_read_hooked). A ticket whose reads have not started yet
 * can be cancelled (a wrong guess). The caller owns the destination buffers
 * (cache slots pinned as "loading") and must not touch or free a ticket's
 * buffers until ms_prefetch_check has reported it ended.
 *
 * Threads: every function is called from one thread (the forward pass);
 * the prefetcher's thread only runs the reads.
 */
#ifndef MS_STREAM_PREFETCH_H
#define MS_STREAM_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream/io.h"
#include "util/err.h"

struct ms_prefetch;

/* Outcome of a ticket (ms_prefetch_check). */
enum ms_pf_state {
    MS_PF_PENDING = 1,   /* a read is queued or running (poll only) */
    MS_PF_DONE = 0,      /* every read succeeded */
    MS_PF_FAILED = -1,   /* a read failed (err names it) */
    MS_PF_CANCELLED = -2 /* cancelled before all of it was read */
};

/* Opens `path` with I/O params io (NULL = defaults) and starts the thread.
 * max_reqs: the most reads outstanding at once (submissions beyond are
 * refused). Errors: open failure, thread creation, OOM. */
int ms_prefetch_new(struct ms_prefetch **out, const char *path, const struct ms_io_params *io,
                    size_t max_reqs, ms_err *err);
/* Waits for the reads under way, stops the thread. NULL is allowed. */
void ms_prefetch_free(struct ms_prefetch *p);

/* Queues reqs[0..n) (copied; their .buf must stay valid and untouched until
 * the ticket has ended) as one ticket, *ticket. Tickets stay valid until
 * every ticket submitted before has been reported ended by
 * ms_prefetch_check (then numbering starts again). Returns 0, or -1 when
 * they do not fit beside the outstanding ones (nothing queued: the caller
 * drops its reservations). */
int ms_prefetch_submit(struct ms_prefetch *p, const struct ms_io_req *reqs, size_t n,
                       uint32_t *ticket);

/* Reads of ticket t not started yet will not be read (the ticket then ends
 * MS_PF_CANCELLED unless all of it had started). */
void ms_prefetch_cancel(struct ms_prefetch *p, uint32_t t);

/*
 * The state of ticket t. wait: blocks until it has ended (never returns
 * MS_PF_PENDING), *waited (may be NULL) receiving the seconds spent
 * waiting. A ticket reported ended is done with: its buffers are the
 * caller's again; checking it again is an error (MS_PF_FAILED).
 */
enum ms_pf_state ms_prefetch_check(struct ms_prefetch *p, uint32_t t, bool wait, double *waited,
                                   ms_err *err);

/* True while a submitted ticket has not been reported ended. */
int ms_prefetch_pending(const struct ms_prefetch *p);

/* Bytes read since the last call (counted as reads complete). */
uint64_t ms_prefetch_take_bytes(struct ms_prefetch *p);

/* The prefetcher's I/O engine, for fault injection in tests (set hooks only
 * while nothing is pending). */
struct ms_io *ms_prefetch_io(struct ms_prefetch *p);

#endif
