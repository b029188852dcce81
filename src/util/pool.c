/* pool.c - persistent worker threads (see pool.h).
 *
 * A forward pass dispatches thousands of short jobs per prompt (one per
 * matmul, attention step or MoE layer), so the hand-off must cost far less
 * than a futex round trip: sleeping on a condition variable for every job
 * cost about a tenth of a prefill's time (perf: futex wait/wake). Workers
 * therefore spin on the job generation for a while (MS_POOL_SPIN_NS)
 * before they sleep, and the caller spins, then yields, while the last
 * chunks finish. Items are handed out in chunks from an
 * atomic counter, so a thread that falls behind (a noisy, shared machine)
 * takes fewer chunks instead of holding everyone up.
 *
 * Sleeping is Dekker-style: a worker announces itself in n_sleeping, then
 * re-checks the generation under the mutex before it waits; the caller
 * publishes the generation, then wakes sleepers if it sees any. With both
 * sides sequentially consistent, one of them always sees the other.
 */
#include "util/pool.h"

#include "util/mem.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a thread spins before it sleeps (worker) or yields (caller):
 * longer than most serial gaps between a forward pass's jobs. Measured in
 * time, not in pauses: a pause costs 19 ns on one benchmark VM (Zen 5) and
 * 57 ns on another (Zen 1 under a hypervisor), and a fixed count of 2000
 * meant 38 us on one and 114 us on the other. Longer spins cost more than
 * they save when the machine is shared: a spinning thread takes the core
 * from the one doing the work (measured: 2x slower prefill with a spin of
 * 20000 pauses under a load of 4 on 2 cores), and on an idle 2-vCPU VM
 * 1,000 and 20,000 us gave the same tok/s as 50 us (bench/RESULTS.md).
 * A build may set it (-DMS_POOL_SPIN_NS=...) to measure another value. */
#ifndef MS_POOL_SPIN_NS
#define MS_POOL_SPIN_NS 50000
#endif
/* Pauses between two reads of the clock while spinning. */
#define MS_POOL_SPIN_CHECK 32

struct ms_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    _Atomic uint64_t generation;
    _Atomic int n_sleeping;
    _Atomic int pending; /* workers that have not finished the current job */
    _Atomic int64_t next; /* first item not yet handed out */
    _Atomic bool stop;
    /* counters (written by the calling thread only): see ms_pool_stats */
    uint64_t n_jobs, n_inline, n_wakeups;
    int64_t t_first, t_last, ns_jobs, ns_end_wait; /* ns; t_first 0: no job yet */
    struct worker_slot *slots; /* [n_threads]: slot 0 unused (the caller) */
    /* current job, written before generation is bumped */
    ms_pool_fn fn;
    void *ctx;
    int64_t n, chunk;
};

/* A worker's time in chunks, on a cache line of its own: written by that
 * worker after each job, read by the caller for ms_pool_stats. */
struct worker_slot {
    _Alignas(64) _Atomic int64_t busy_ns;
};

struct worker_arg {
    struct ms_pool *p;
    int ith;
};

/* Takes chunks of the current job until none are left. */
static void run_chunks(struct ms_pool *p, int ith) {
    const int64_t n = p->n, chunk = p->chunk;
    for (;;) {
        const int64_t b = atomic_fetch_add_explicit(&p->next, chunk, memory_order_relaxed);
        if (b >= n) break;
        p->fn(p->ctx, b, b + chunk < n ? b + chunk : n, ith);
    }
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Waits until the generation differs from `seen` or the pool stops. */
static uint64_t wait_job(struct ms_pool *p, uint64_t seen) {
    const int64_t t0 = now_ns();
    for (int i = 1;; i++) {
        const uint64_t g = atomic_load(&p->generation);
        if (g != seen || atomic_load(&p->stop)) return g;
        cpu_relax();
        if (i % MS_POOL_SPIN_CHECK == 0 && now_ns() - t0 > MS_POOL_SPIN_NS) break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleeping, 1);
    uint64_t g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv_work, &p->mu);
    atomic_fetch_sub(&p->n_sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *argp) {
    struct worker_arg *a = argp;
    struct ms_pool *p = a->p;
    const int ith = a->ith;
    free(a);
    uint64_t seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (atomic_load(&p->stop)) break;
        const int64_t t0 = now_ns();
        run_chunks(p, ith);
        atomic_fetch_add_explicit(&p->slots[ith].busy_ns, now_ns() - t0, memory_order_relaxed);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
    return NULL;
}

int ms_pool_pin(struct ms_pool *p, ms_err *err) {
    const int nt = ms_pool_n_threads(p);
    int *ids = malloc((size_t)nt * sizeof *ids);
    if (!ids) return ms_err_set(err, "out of memory pinning threads");
    const int n = ms_cpu_affinity_ids(ids, nt);
    if (n < 1) {
        free(ids);
        return ms_err_set(err, "cannot read the CPU affinity mask to pin threads");
    }
    const int m = n < nt ? n : nt; /* ids[0..m) are filled */
    for (int i = 0; i < nt; i++) {
        cpu_set_t set;
        CPU_ZERO(&set);
        const int cpu = ids[i % m];
        if (cpu >= CPU_SETSIZE) continue; /* beyond a fixed cpu_set_t: leave it free */
        CPU_SET(cpu, &set);
        const int rc = pthread_setaffinity_np(i == 0 ? pthread_self() : p->threads[i],
                                              sizeof set, &set);
        if (rc) {
            free(ids);
            return ms_err_errno(err, rc, "cannot pin thread %d to CPU %d", i, cpu);
        }
    }
    free(ids);
    return 0;
}

int ms_pool_new(struct ms_pool **out, int n_threads, ms_err *err) {
    if (n_threads < 1) n_threads = 1;
    struct ms_pool *p = calloc(1, sizeof *p);
    if (!p) return ms_err_set(err, "out of memory creating thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->slots = ms_aligned_alloc(64, (size_t)n_threads * sizeof *p->slots);
    if (!p->threads || !p->slots) {
        p->n_threads = 1; /* no worker was started: ms_pool_free joins none */
        ms_pool_free(p);
        return ms_err_set(err, "out of memory creating thread pool");
    }
    for (int i = 0; i < n_threads; i++) atomic_init(&p->slots[i].busy_ns, 0);
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *a = malloc(sizeof *a);
        if (!a) {
            p->n_threads = i;
            ms_pool_free(p);
            return ms_err_set(err, "out of memory creating thread pool");
        }
        a->p = p;
        a->ith = i;
        int rc = pthread_create(&p->threads[i], NULL, worker_main, a);
        if (rc) {
            free(a);
            p->n_threads = i;
            ms_pool_free(p);
            return ms_err_errno(err, rc, "cannot start worker thread %d", i);
        }
    }
    *out = p;
    return 0;
}

struct ms_pool_stats ms_pool_stats(const struct ms_pool *p) {
    if (!p) return (struct ms_pool_stats){0};
    int64_t busy = 0;
    for (int i = 1; i < p->n_threads; i++) busy += atomic_load_explicit(&p->slots[i].busy_ns, memory_order_relaxed);
    return (struct ms_pool_stats){.jobs = p->n_jobs,
                                  .inline_jobs = p->n_inline,
                                  .wakeups = p->n_wakeups,
                                  .wall_s = (double)(p->t_last - p->t_first) * 1e-9,
                                  .jobs_s = (double)p->ns_jobs * 1e-9,
                                  .end_wait_s = (double)p->ns_end_wait * 1e-9,
                                  .busy_s = (double)busy * 1e-9};
}

void ms_pool_free(struct ms_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    free(p->threads);
    ms_free(p->slots);
    free(p);
}

int ms_pool_n_threads(const struct ms_pool *p) { return p ? p->n_threads : 1; }

/* Publishes a job of n items in chunks of `chunk`, runs chunks on the
 * caller too, and returns when every worker has finished. */
static void run_job(struct ms_pool *p, int64_t n, int64_t chunk, ms_pool_fn fn, void *ctx) {
    const int64_t t_start = now_ns();
    if (!p->t_first) p->t_first = t_start;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add(&p->generation, 1); /* seq_cst: releases the job fields */
    p->n_jobs++;
    if (atomic_load(&p->n_sleeping) > 0) {
        p->n_wakeups++;
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }
    run_chunks(p, 0);
    const int64_t t_mine = now_ns();
    int64_t t0 = -1;
    for (int i = 1; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) {
        if (t0 < 0) {
            cpu_relax();
            if (i % MS_POOL_SPIN_CHECK == 0) t0 = now_ns(); /* the wait is not short */
        } else if (now_ns() - t0 < MS_POOL_SPIN_NS) {
            cpu_relax();
        } else {
            sched_yield(); /* a worker may be descheduled: give it the core */
        }
    }
    const int64_t t_end = now_ns();
    p->ns_jobs += t_end - t_start;
    p->ns_end_wait += t_end - t_mine;
    p->t_last = t_end;
}

/* Runs a job on the caller alone (a pool of one thread, or too few items
 * to share), counted for ms_pool_stats. */
static void run_inline(struct ms_pool *p, int64_t n, ms_pool_fn fn, void *ctx) {
    if (!p) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->n_inline++;
    if (!p->t_first) p->t_first = now_ns();
    fn(ctx, 0, n, 0);
    p->t_last = now_ns();
}

void ms_pool_for(struct ms_pool *p, int64_t n, int64_t grain, ms_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    const int nt = p ? p->n_threads : 1;
    if (nt <= 1 || n <= grain) {
        run_inline(p, n, fn, ctx);
        return;
    }
    /* about four chunks per thread: balance without cutting work too fine */
    int64_t chunk = (n + 4 * (int64_t)nt - 1) / (4 * (int64_t)nt);
    if (chunk < grain) chunk = grain;
    run_job(p, n, chunk, fn, ctx);
}

void ms_pool_for_each(struct ms_pool *p, int64_t n, ms_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!p || p->n_threads <= 1 || n == 1) {
        run_inline(p, n, fn, ctx);
        return;
    }
    run_job(p, n, 1, fn, ctx);
}
