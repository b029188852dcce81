/*
 * pool.h - a persistent pool of worker threads for data-parallel loops.
 *
 * The forward pass splits matmuls (by output rows), attention (by token, or
 * by head for one token), a long ubatch's experts and its per-token steps
 * across the pool. Workers spin briefly, then sleep, between jobs; one job
 * runs at a time and the calling thread takes part, so a pool of n threads
 * starts n - 1 workers. A pool of 1 runs everything on the caller. Items
 * are handed out in chunks from a shared counter, so which thread runs an
 * item varies from run to run: fn must give an item the same result
 * whatever thread runs it.
 */
#ifndef MS_UTIL_POOL_H
#define MS_UTIL_POOL_H

#include <stdint.h>

#include "util/cpus.h" /* ms_n_cpus: the default pool size */
#include "util/err.h"

struct ms_pool;

/* Work item: process the half-open range [begin, end) of a job's n items;
 * `ith` is the worker index in [0, n_threads) (for per-thread scratch). */
typedef void (*ms_pool_fn)(void *ctx, int64_t begin, int64_t end, int ith);

/* Creates a pool of n_threads (>= 1; the caller counts as one). -1 with an
 * error when threads cannot be started. */
int ms_pool_new(struct ms_pool **out, int n_threads, ms_err *err);
void ms_pool_free(struct ms_pool *p);
int ms_pool_n_threads(const struct ms_pool *p);

/* Runs fn over [0, n) split into contiguous chunks of at least `grain`
 * items (about four per thread), and returns when all are done. Not
 * re-entrant: fn must not call ms_pool_for on the same pool. p may be NULL
 * (runs on the caller). */
void ms_pool_for(struct ms_pool *p, int64_t n, int64_t grain, ms_pool_fn fn, void *ctx);

/* As ms_pool_for, but one item per call: for a few items of uneven cost
 * (the experts of a MoE layer), handed out in turn to whichever thread is
 * free. */
void ms_pool_for_each(struct ms_pool *p, int64_t n, ms_pool_fn fn, void *ctx);

/* What a pool has done since it was made: jobs handed to the workers (each
 * one hand-off and one wait for the slowest thread: the synchronisation a
 * decode step pays per matmul or per-token op), jobs small enough to run on
 * the caller alone, and hand-offs that had to wake sleeping workers (a
 * futex round trip each). The times (seconds, CLOCK_MONOTONIC) split the
 * caller's wall time from the start of its first job to the end of its
 * last one: handed-out jobs (of which the caller's wait at their ends,
 * after its own last chunk, for the workers' last chunks), and the rest,
 * the serial work between jobs (inline jobs included), during which the
 * workers spin or sleep; busy_s is the workers' time in chunks, summed
 * over them. Read by the thread that calls ms_pool_for. */
struct ms_pool_stats {
    uint64_t jobs, inline_jobs, wakeups;
    double wall_s, jobs_s, end_wait_s, busy_s;
};
struct ms_pool_stats ms_pool_stats(const struct ms_pool *p);

/* Pins the pool's threads one per CPU of the caller's affinity mask, in
 * order: the caller (thread 0) to the first CPU, worker i to the i-th
 * (wrapping when there are more threads than CPUs). Keeps the OS from
 * migrating a decode step's threads between cores (and, on multi-socket
 * machines, away from their memory). -1 with an error when the mask cannot
 * be read or a thread cannot be pinned; the pool stays usable unpinned. */
int ms_pool_pin(struct ms_pool *p, ms_err *err);

#endif
