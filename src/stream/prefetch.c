/*
 * prefetch.c - background expert reads (contract in prefetch.h).
 *
 * Submissions append their reads to one queue and a ticket to a table; the
 * thread takes everything queued so far as one batch (so the I/O engine
 * keeps all of it in flight) and reads it with per-request hooks: before a
 * read starts it asks whether its ticket was cancelled, and when a read
 * ends it counts it against its ticket and wakes the waiters. So a waiter
 * for one ticket returns as soon as that ticket's reads are in, whatever
 * else is still in flight. Numbering starts again once every ticket has
 * been reported ended.
 */
#include "stream/prefetch.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ticket {
    size_t r0, n;      /* its reads: q[r0 .. r0 + n) */
    size_t n_ended;
    int status;        /* 0, ECANCELED, or the first failure's errno */
    bool cancel;
    bool reported;
};

struct ms_prefetch {
    struct ms_io *io;
    struct ms_io_req *q;   /* [max] queued since numbering started */
    uint32_t *owner;       /* [max] ticket of each queued read */
    struct ms_io_req *run; /* [max] the thread's batch */
    size_t run_base;       /* q index of run[0] */
    struct ticket *t;      /* [max] */
    size_t max, n_queued, n_taken, n_t, n_reported;
    uint64_t bytes;        /* read since the last take */
    uint64_t io_mark;      /* ms_io_bytes_read already added to bytes (thread only) */
    bool busy;             /* the thread is inside a batch */
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* any state change */
    pthread_t thread;
    bool stop;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool hook_want(void *ctx, size_t i) {
    struct ms_prefetch *p = ctx;
    pthread_mutex_lock(&p->mu);
    const bool want = !p->t[p->owner[p->run_base + i]].cancel;
    pthread_mutex_unlock(&p->mu);
    return want;
}

/* Adds the engine's bytes read since the last call to p->bytes: before a
 * ticket is reported ended, so a waiter that then takes the bytes sees
 * its reads. Called on the thread, lock held. */
static void account(struct ms_prefetch *p) {
    const uint64_t now = ms_io_bytes_read(p->io);
    p->bytes += now - p->io_mark;
    p->io_mark = now;
}

static void hook_done(void *ctx, size_t i, int status) {
    struct ms_prefetch *p = ctx;
    pthread_mutex_lock(&p->mu);
    account(p);
    struct ticket *t = &p->t[p->owner[p->run_base + i]];
    /* a failure outranks a cancellation */
    if (status && (!t->status || t->status == ECANCELED)) t->status = status;
    t->n_ended++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *prefetch_main(void *arg) {
    struct ms_prefetch *p = arg;
    const struct ms_io_hooks hooks = {.ctx = p, .want = hook_want, .done = hook_done};
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->n_taken == p->n_queued) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        const size_t n = p->n_queued - p->n_taken;
        memcpy(p->run, p->q + p->n_taken, n * sizeof *p->run);
        p->run_base = p->n_taken;
        p->n_taken = p->n_queued;
        p->busy = true;
        pthread_mutex_unlock(&p->mu);
        ms_err e = {{0}};
        (void)ms_io_read_hooked(p->io, p->run, n, &hooks, &e); /* outcomes via hook_done */
        pthread_mutex_lock(&p->mu);
        account(p);
        p->busy = false;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int ms_prefetch_new(struct ms_prefetch **out, const char *path, const struct ms_io_params *io,
                    size_t max_reqs, ms_err *err) {
    struct ms_prefetch *p = calloc(1, sizeof *p);
    if (p) {
        p->max = max_reqs ? max_reqs : 1;
        p->q = calloc(p->max, sizeof *p->q);
        p->owner = calloc(p->max, sizeof *p->owner);
        p->run = calloc(p->max, sizeof *p->run);
        p->t = calloc(p->max, sizeof *p->t);
    }
    if (!p || !p->q || !p->owner || !p->run || !p->t) goto oom;
    if (ms_io_open(&p->io, path, io, err)) {
        ms_err_prefix(err, "prefetcher");
        goto fail;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, prefetch_main, p)) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        ms_io_close(p->io);
        ms_err_set(err, "prefetcher: cannot start its thread");
        goto fail;
    }
    *out = p;
    return 0;
oom:
    ms_err_set(err, "out of memory for the prefetcher");
fail:
    if (p) free(p->q), free(p->owner), free(p->run), free(p->t);
    free(p);
    return -1;
}

void ms_prefetch_free(struct ms_prefetch *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    while (p->n_taken < p->n_queued || p->busy) pthread_cond_wait(&p->cv, &p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    ms_io_close(p->io);
    free(p->q);
    free(p->owner);
    free(p->run);
    free(p->t);
    free(p);
}

int ms_prefetch_submit(struct ms_prefetch *p, const struct ms_io_req *reqs, size_t n,
                       uint32_t *ticket) {
    pthread_mutex_lock(&p->mu);
    /* every ticket ended and seen: the thread has made its last hook call
     * for them (it touches the queue only in hooks and when taking a
     * batch under the lock), so numbering can start again */
    if (p->n_reported == p->n_t && p->n_taken == p->n_queued)
        p->n_queued = p->n_taken = p->n_t = p->n_reported = 0;
    const bool fits = n <= p->max - p->n_queued && p->n_t < p->max;
    if (fits) {
        const uint32_t id = (uint32_t)p->n_t++;
        p->t[id] = (struct ticket){.r0 = p->n_queued, .n = n};
        memcpy(p->q + p->n_queued, reqs, n * sizeof *reqs);
        for (size_t i = 0; i < n; i++) p->owner[p->n_queued + i] = id;
        p->n_queued += n;
        *ticket = id;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return fits ? 0 : -1;
}

void ms_prefetch_cancel(struct ms_prefetch *p, uint32_t t) {
    pthread_mutex_lock(&p->mu);
    if (t < p->n_t) p->t[t].cancel = true;
    pthread_mutex_unlock(&p->mu);
}

enum ms_pf_state ms_prefetch_check(struct ms_prefetch *p, uint32_t t, bool wait, double *waited,
                                   ms_err *err) {
    const double t0 = now_s();
    if (waited) *waited = 0.0;
    pthread_mutex_lock(&p->mu);
    if (t >= p->n_t || p->t[t].reported) {
        pthread_mutex_unlock(&p->mu);
        ms_err_set(err, "prefetcher: ticket %u is not outstanding", t);
        return MS_PF_FAILED;
    }
    struct ticket *tk = &p->t[t];
    while (wait && tk->n_ended < tk->n) pthread_cond_wait(&p->cv, &p->mu);
    enum ms_pf_state st = MS_PF_PENDING;
    if (tk->n_ended == tk->n) {
        tk->reported = true;
        p->n_reported++;
        st = !tk->status ? MS_PF_DONE : tk->status == ECANCELED ? MS_PF_CANCELLED : MS_PF_FAILED;
        if (st == MS_PF_FAILED)
            ms_err_set(err, "prefetch read failed: %s",
                       tk->status == ENODATA ? "unexpected end of file" : strerror(tk->status));
    }
    pthread_mutex_unlock(&p->mu);
    if (waited && wait) *waited = now_s() - t0;
    return st;
}

int ms_prefetch_pending(const struct ms_prefetch *p) {
    /* n_t and n_reported only change on this (the caller's) thread */
    return p->n_reported < p->n_t;
}

uint64_t ms_prefetch_take_bytes(struct ms_prefetch *p) {
    pthread_mutex_lock(&p->mu);
    const uint64_t b = p->bytes;
    p->bytes = 0;
    pthread_mutex_unlock(&p->mu);
    return b;
}

struct ms_io *ms_prefetch_io(struct ms_prefetch *p) { return p->io; }
