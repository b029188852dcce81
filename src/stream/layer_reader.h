/*
 * layer_reader.h - whole-layer reads for the one-pass prefill: a background
 * thread with its own I/O engine fills one of two layer buffers while the
 * forward pass computes from the other (double buffering; docs/streaming.md,
 * "Prefill: whole layers, once per prompt").
 *
 * A buffer receives one job at a time: a list of ranges (a layer's three
 * expert tensors, whole or cut into runs of experts) read in list order
 * with large direct reads (the I/O engine splits them and keeps
 * queue_depth pieces in flight). Completion is tracked per range: a caller
 * may wait for the ranges it needs while the others are still being read,
 * and may withdraw ranges not started yet (ms_layer_reader_want: a
 * speculative layer read whose routing turned out to need only part of
 * it). The caller owns the layout; the reader only knows buffers, jobs
 * and their state. The buffers (the two layers of prefill headroom the
 * memory plan reserves, stream/budget.h) are allocated by
 * ms_layer_reader_alloc or at the first job that needs them, and kept until
 * ms_layer_reader_free: between prefills their owner may lend them out
 * (the decode cache, ms_expert_cache_lend) after ms_layer_reader_drop.
 *
 * Threads: every function is called from one thread (the forward pass);
 * the reader's own thread only runs the reads. A buffer is never written
 * while the caller may read it: ms_layer_reader_start waits until the
 * buffer's previous job is over before queueing a new one.
 */
#ifndef MS_STREAM_LAYER_READER_H
#define MS_STREAM_LAYER_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream/io.h"
#include "util/err.h"

#define MS_LR_BUFFERS 2

struct ms_layer_reader;

/*
 * Starts the thread and opens `path` with I/O params io (NULL = defaults).
 * buf_bytes: the size of each of the two buffers (the largest job's
 * extent); max_ranges: the most ranges of one job. Errors: open failure,
 * thread creation, bad size, OOM.
 */
int ms_layer_reader_new(struct ms_layer_reader **out, const char *path,
                        const struct ms_io_params *io, uint64_t buf_bytes, size_t max_ranges,
                        ms_err *err);
/* Waits for the running job, stops the thread, frees the buffers. */
void ms_layer_reader_free(struct ms_layer_reader *r);

/*
 * Queues job `tag` (the caller's name for it, e.g. the layer index, >= 0)
 * into buffer b: reads[0..n) (n <= max_ranges; each .buf is an offset into
 * the buffer, cast to a pointer, MS_IO_ALIGN aligned) are read in the
 * background, in that order, every range wanted. Waits first for b's
 * previous job to end. Allocates b if needed. Errors: OOM (nothing
 * queued), bad arguments.
 */
int ms_layer_reader_start(struct ms_layer_reader *r, int b, int64_t tag,
                          const struct ms_io_req *reads, size_t n, ms_err *err);

/* The tag of buffer b's job (queued, running, done or failed), -1 if none. */
int64_t ms_layer_reader_tag(const struct ms_layer_reader *r, int b);

/*
 * Waits until buffer b's job is done (every range read or withdrawn);
 * *data receives the buffer. *waited (may be NULL) receives the seconds
 * spent waiting; *bytes (may be NULL) the bytes the job read, the first
 * time its completion is seen, else 0 (so each job is counted once; the
 * same bytes are also counted by ms_layer_reader_take_bytes: use one of the
 * two). On a
 * read error: -1 with err naming the range, and the buffer forgets the job
 * (tag -1) so a later start reads it again. -1 too if b holds no job.
 */
int ms_layer_reader_wait(struct ms_layer_reader *r, int b, void **data, double *waited,
                         uint64_t *bytes, ms_err *err);

/* Withdraws the ranges i of buffer b's job with want[i] false (want has the
 * job's range count) that have not started: they are not read. Ranges
 * started or done are unaffected; want[i] true re-adds a withdrawn range
 * not started yet. No effect when b holds no job. */
void ms_layer_reader_want(struct ms_layer_reader *r, int b, const bool *want);

/*
 * Waits until ranges idx[0..n) of buffer b's job have been read (the rest
 * of the job may still be running); *data receives the buffer, *waited
 * (may be NULL) the seconds spent waiting. -1 with err when one of them
 * failed (the job is then forgotten once it ends, as in
 * ms_layer_reader_wait) or was withdrawn, or b holds no job.
 */
int ms_layer_reader_wait_ranges(struct ms_layer_reader *r, int b, const uint32_t *idx, size_t n,
                                void **data, double *waited, ms_err *err);

/* Bytes read by jobs that ended since the last call. */
uint64_t ms_layer_reader_take_bytes(struct ms_layer_reader *r);

/* Waits for both buffers' jobs and forgets them (tags -1); the buffers stay
 * allocated and the caller may use their memory until the next start. */
void ms_layer_reader_drop(struct ms_layer_reader *r);

/*
 * Allocates both buffers now if they are not yet and, with populate, faults
 * every page in (MADV_POPULATE_WRITE, else a write per page), so that no
 * read or kernel later pays for a first touch. Errors: OOM (a buffer
 * allocated before stays).
 */
int ms_layer_reader_alloc(struct ms_layer_reader *r, bool populate, ms_err *err);

/* Buffer b's memory (buf_bytes bytes, MS_IO_ALIGN aligned), NULL if not
 * allocated. Only to be used between ms_layer_reader_drop and the next
 * start (no job may be writing it). */
void *ms_layer_reader_buffer(const struct ms_layer_reader *r, int b);

/* Seconds the reader thread has spent in reads so far (its device time:
 * bytes read / this = the bandwidth the whole-layer reads reached). */
double ms_layer_reader_busy_seconds(struct ms_layer_reader *r);

/* Bytes of buffers allocated now. */
uint64_t ms_layer_reader_buffer_bytes(const struct ms_layer_reader *r);

/* The reader's I/O engine, for fault injection in tests (set hooks only
 * while no job runs). */
struct ms_io *ms_layer_reader_io(struct ms_layer_reader *r);

#endif
