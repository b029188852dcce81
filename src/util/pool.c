/* pool.c - persistent worker threads (see pool.h). Jobs are published under a
 * mutex with a generation counter; each worker takes its fixed chunk of the
 * current job, and the caller waits until the pending count reaches zero. */
#include "util/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

struct ms_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t generation;
    int pending;
    bool stop;
    /* current job */
    ms_pool_fn fn;
    void *ctx;
    int64_t n, chunk;
};

struct worker_arg {
    struct ms_pool *p;
    int ith;
};

static void run_chunk(struct ms_pool *p, int ith) {
    int64_t b = (int64_t)ith * p->chunk;
    int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
    if (b < e) p->fn(p->ctx, b, e, ith);
}

static void *worker_main(void *argp) {
    struct worker_arg *a = argp;
    struct ms_pool *p = a->p;
    const int ith = a->ith;
    free(a);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_chunk(p, ith);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int ms_n_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

int ms_pool_new(struct ms_pool **out, int n_threads, ms_err *err) {
    if (n_threads < 1) n_threads = 1;
    struct ms_pool *p = calloc(1, sizeof *p);
    if (!p) return ms_err_set(err, "out of memory creating thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        ms_pool_free(p);
        return ms_err_set(err, "out of memory creating thread pool");
    }
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

void ms_pool_free(struct ms_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free(p);
}

int ms_pool_n_threads(const struct ms_pool *p) { return p ? p->n_threads : 1; }

void ms_pool_for(struct ms_pool *p, int64_t n, int64_t grain, ms_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = p ? p->n_threads : 1;
    if ((int64_t)nt > (n + grain - 1) / grain) nt = (int)((n + grain - 1) / grain);
    if (nt <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = (n + p->n_threads - 1) / p->n_threads;
    if (p->chunk < grain) p->chunk = grain; /* trailing threads get empty ranges */
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
