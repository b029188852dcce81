/*
 * prefetch.c - background expert reads (contract in prefetch.h).
 *
 * Submissions append to one queue; the thread takes everything queued so
 * far as one batch (so the I/O engine keeps all of it in flight), reads it,
 * and comes back for what was appended meanwhile. A wait ends when the
 * thread has finished every queued read, and empties the queue.
 */
#include "stream/prefetch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ms_prefetch {
    struct ms_io *io;
    struct ms_io_req *q;   /* [max] queued since the last wait */
    struct ms_io_req *run; /* [max] the thread's batch */
    size_t max, n_queued, n_taken, n_done;
    uint64_t bytes;        /* read since the last wait */
    bool failed;
    ms_err err;            /* the first failure since the last wait */
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

static void *prefetch_main(void *arg) {
    struct ms_prefetch *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->n_taken == p->n_queued) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        const size_t n = p->n_queued - p->n_taken;
        memcpy(p->run, p->q + p->n_taken, n * sizeof *p->run);
        p->n_taken = p->n_queued;
        pthread_mutex_unlock(&p->mu);
        ms_err e = {{0}};
        const uint64_t b0 = ms_io_bytes_read(p->io);
        const int rc = ms_io_read(p->io, p->run, n, &e);
        const uint64_t got = ms_io_bytes_read(p->io) - b0;
        pthread_mutex_lock(&p->mu);
        p->bytes += got;
        if (rc && !p->failed) {
            p->failed = true;
            p->err = e;
        }
        p->n_done += n;
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
        p->run = calloc(p->max, sizeof *p->run);
    }
    if (!p || !p->q || !p->run) {
        if (p) free(p->q), free(p->run);
        free(p);
        return ms_err_set(err, "out of memory for the prefetcher");
    }
    if (ms_io_open(&p->io, path, io, err)) {
        free(p->q);
        free(p->run);
        free(p);
        return ms_err_prefix(err, "prefetcher");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, prefetch_main, p)) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        ms_io_close(p->io);
        free(p->q);
        free(p->run);
        free(p);
        return ms_err_set(err, "prefetcher: cannot start its thread");
    }
    *out = p;
    return 0;
}

void ms_prefetch_free(struct ms_prefetch *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    while (p->n_done < p->n_queued) pthread_cond_wait(&p->cv, &p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    ms_io_close(p->io);
    free(p->q);
    free(p->run);
    free(p);
}

int ms_prefetch_submit(struct ms_prefetch *p, const struct ms_io_req *reqs, size_t n) {
    pthread_mutex_lock(&p->mu);
    const bool fits = n <= p->max - p->n_queued;
    if (fits && n) {
        memcpy(p->q + p->n_queued, reqs, n * sizeof *reqs);
        p->n_queued += n;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return fits ? 0 : -1;
}

int ms_prefetch_pending(const struct ms_prefetch *p) {
    /* n_queued only changes on this (the caller's) thread */
    return p->n_queued > 0;
}

int ms_prefetch_wait(struct ms_prefetch *p, double *waited, uint64_t *bytes, ms_err *err) {
    const double t0 = now_s();
    pthread_mutex_lock(&p->mu);
    while (p->n_done < p->n_queued) pthread_cond_wait(&p->cv, &p->mu);
    const bool failed = p->failed;
    if (failed && err) *err = p->err;
    if (bytes) *bytes = p->bytes;
    p->n_queued = p->n_taken = p->n_done = 0;
    p->bytes = 0;
    p->failed = false;
    pthread_mutex_unlock(&p->mu);
    if (waited) *waited = now_s() - t0;
    return failed ? -1 : 0;
}

struct ms_io *ms_prefetch_io(struct ms_prefetch *p) { return p->io; }
