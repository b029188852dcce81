/*
 * layer_reader.c - background whole-layer reads into two buffers (contract
 * in layer_reader.h).
 *
 * One mutex guards the job states; the thread takes queued jobs in the order
 * they were queued (a sequence number), runs ms_io_read_hooked without the
 * lock (its hooks take the lock: want() says whether a range was withdrawn,
 * done() records each range's end and wakes the waiters), then marks the
 * job done or failed. The I/O engine
 * is the thread's own (ms_io is single-threaded), opened on a second file
 * descriptor, so decode-cache reads on the forward pass's thread never
 * share it.
 */
#include "stream/layer_reader.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "util/mem.h"

enum job_state { JOB_NONE, JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED };

struct lbuf {
    void *mem;
    enum job_state st;
    int64_t tag;
    uint64_t seq;          /* queue order */
    struct ms_io_req *reads; /* [max_ranges] */
    bool *want;            /* [max_ranges] */
    bool *ended;           /* [max_ranges] */
    int *status;           /* [max_ranges]: 0, ECANCELED or errno once ended */
    size_t n_reads;
    uint64_t bytes;        /* read by the job */
    bool counted;          /* bytes handed to a waiter already */
    ms_err err;
};

struct ms_layer_reader {
    struct ms_io *io;
    uint64_t buf_bytes;
    size_t max_ranges;
    struct lbuf b[MS_LR_BUFFERS];
    int running;           /* buffer of the job being read, or -1 */
    struct ms_io_req *run; /* [max_ranges] the running job's requests */
    /* bytes read and not yet taken (ms_layer_reader_take_bytes): moved in
     * as each request ends, so a waiter that has its ranges finds their
     * bytes counted even while the rest of the job is in flight */
    uint64_t bytes_untaken;
    uint64_t io_mark;      /* ms_io_bytes_read already moved into bytes_untaken */
    uint64_t next_seq;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* any state change */
    pthread_t thread;
    bool stop;
    double busy_s;         /* seconds the thread spent reading */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The queued job with the lowest sequence number, or -1. Lock held. */
static int next_job(const struct ms_layer_reader *r) {
    int best = -1;
    for (int i = 0; i < MS_LR_BUFFERS; i++)
        if (r->b[i].st == JOB_QUEUED && (best < 0 || r->b[i].seq < r->b[best].seq)) best = i;
    return best;
}

static bool hook_want(void *ctx, size_t i) {
    struct ms_layer_reader *r = ctx;
    pthread_mutex_lock(&r->mu);
    const bool w = r->b[r->running].want[i];
    pthread_mutex_unlock(&r->mu);
    return w;
}

/* Moves the bytes the io has read since the last mark into bytes_untaken.
 * Lock held; called on the reader thread (the io's only user). */
static void move_bytes(struct ms_layer_reader *r) {
    const uint64_t now = ms_io_bytes_read(r->io);
    r->bytes_untaken += now - r->io_mark;
    r->io_mark = now;
}

static void hook_done(void *ctx, size_t i, int status) {
    struct ms_layer_reader *r = ctx;
    pthread_mutex_lock(&r->mu);
    move_bytes(r); /* the io counts a request's bytes before it reports it done */
    struct lbuf *b = &r->b[r->running];
    b->status[i] = status;
    b->ended[i] = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void *reader_main(void *arg) {
    struct ms_layer_reader *r = arg;
    const struct ms_io_hooks hooks = {.ctx = r, .want = hook_want, .done = hook_done};
    pthread_mutex_lock(&r->mu);
    for (;;) {
        int i;
        while (!r->stop && (i = next_job(r)) < 0) pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop) break;
        struct lbuf *b = &r->b[i];
        b->st = JOB_RUNNING;
        r->running = i;
        struct ms_io_req *reqs = r->run;
        const size_t n = b->n_reads;
        for (size_t k = 0; k < n; k++) {
            reqs[k] = b->reads[k];
            reqs[k].buf = (char *)b->mem + (uintptr_t)b->reads[k].buf;
        }
        r->io_mark = ms_io_bytes_read(r->io);
        pthread_mutex_unlock(&r->mu);
        ms_err e = {{0}};
        const uint64_t b0 = ms_io_bytes_read(r->io);
        const double t0 = now_s();
        const int rc = ms_io_read_hooked(r->io, reqs, n, &hooks, &e);
        const double dt = now_s() - t0;
        const uint64_t got = ms_io_bytes_read(r->io) - b0;
        pthread_mutex_lock(&r->mu);
        r->running = -1;
        r->busy_s += dt;
        move_bytes(r);
        b->bytes = got;
        b->counted = false;
        b->err = e;
        b->st = rc ? JOB_FAILED : JOB_DONE;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void free_arrays(struct ms_layer_reader *r) {
    for (int i = 0; i < MS_LR_BUFFERS; i++) {
        free(r->b[i].reads);
        free(r->b[i].want);
        free(r->b[i].ended);
        free(r->b[i].status);
    }
    free(r->run);
}

int ms_layer_reader_new(struct ms_layer_reader **out, const char *path,
                        const struct ms_io_params *io, uint64_t buf_bytes, size_t max_ranges,
                        ms_err *err) {
    if (!buf_bytes || buf_bytes > SIZE_MAX || !max_ranges)
        return ms_err_set(err, "layer reader: bad buffer size %llu or range count %zu",
                          (unsigned long long)buf_bytes, max_ranges);
    struct ms_layer_reader *r = calloc(1, sizeof *r);
    if (!r) return ms_err_set(err, "out of memory");
    r->buf_bytes = buf_bytes;
    r->max_ranges = max_ranges;
    r->running = -1;
    bool ok = (r->run = calloc(max_ranges, sizeof *r->run)) != NULL;
    for (int i = 0; i < MS_LR_BUFFERS; i++) {
        r->b[i].tag = -1;
        ok = ok && (r->b[i].reads = calloc(max_ranges, sizeof *r->b[i].reads)) &&
             (r->b[i].want = calloc(max_ranges, sizeof *r->b[i].want)) &&
             (r->b[i].ended = calloc(max_ranges, sizeof *r->b[i].ended)) &&
             (r->b[i].status = calloc(max_ranges, sizeof *r->b[i].status));
    }
    if (!ok) {
        free_arrays(r);
        free(r);
        return ms_err_set(err, "out of memory");
    }
    if (ms_io_open(&r->io, path, io, err)) {
        free_arrays(r);
        free(r);
        return ms_err_prefix(err, "layer reader");
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&r->thread, NULL, reader_main, r)) {
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        ms_io_close(r->io);
        free_arrays(r);
        free(r);
        return ms_err_set(err, "layer reader: cannot start its thread");
    }
    *out = r;
    return 0;
}

/* Waits until buffer i has no queued or running job. Lock held. */
static void wait_idle(struct ms_layer_reader *r, int i) {
    while (r->b[i].st == JOB_QUEUED || r->b[i].st == JOB_RUNNING)
        pthread_cond_wait(&r->cv, &r->mu);
}

void ms_layer_reader_drop(struct ms_layer_reader *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < MS_LR_BUFFERS; i++) {
        wait_idle(r, i);
        r->b[i].st = JOB_NONE;
        r->b[i].tag = -1;
    }
    pthread_mutex_unlock(&r->mu);
}

int ms_layer_reader_alloc(struct ms_layer_reader *r, bool populate, ms_err *err) {
    for (int i = 0; i < MS_LR_BUFFERS; i++) {
        struct lbuf *lb = &r->b[i];
        if (lb->mem) continue;
        lb->mem = ms_alloc_large((size_t)r->buf_bytes);
        if (!lb->mem)
            return ms_err_set(err, "out of memory for a %llu-byte layer buffer",
                              (unsigned long long)r->buf_bytes);
        if (populate) ms_populate(lb->mem, (size_t)r->buf_bytes);
    }
    return 0;
}

void *ms_layer_reader_buffer(const struct ms_layer_reader *r, int b) {
    return b >= 0 && b < MS_LR_BUFFERS ? r->b[b].mem : NULL;
}

void ms_layer_reader_free(struct ms_layer_reader *r) {
    if (!r) return;
    ms_layer_reader_drop(r);
    for (int i = 0; i < MS_LR_BUFFERS; i++) ms_free(r->b[i].mem);
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    ms_io_close(r->io);
    free_arrays(r);
    free(r);
}

int ms_layer_reader_start(struct ms_layer_reader *r, int b, int64_t tag,
                          const struct ms_io_req *reads, size_t n, ms_err *err) {
    if (b < 0 || b >= MS_LR_BUFFERS || tag < 0 || n > r->max_ranges)
        return ms_err_set(err, "layer reader: bad job (buffer %d, tag %lld, %zu ranges)", b,
                          (long long)tag, n);
    for (size_t k = 0; k < n; k++)
        if ((uintptr_t)reads[k].buf % MS_IO_ALIGN ||
            (uint64_t)(uintptr_t)reads[k].buf + ms_io_extent(reads[k].offset, reads[k].len) >
                r->buf_bytes)
            return ms_err_set(err, "layer reader: range %zu does not fit the %llu-byte buffer",
                              k, (unsigned long long)r->buf_bytes);
    pthread_mutex_lock(&r->mu);
    struct lbuf *lb = &r->b[b];
    wait_idle(r, b);
    if (!lb->mem) lb->mem = ms_alloc_large((size_t)r->buf_bytes);
    if (!lb->mem) {
        lb->st = JOB_NONE;
        lb->tag = -1;
        pthread_mutex_unlock(&r->mu);
        return ms_err_set(err, "out of memory for a %llu-byte layer buffer",
                          (unsigned long long)r->buf_bytes);
    }
    memcpy(lb->reads, reads, n * sizeof *reads);
    for (size_t k = 0; k < n; k++) {
        lb->want[k] = true;
        lb->ended[k] = false;
        lb->status[k] = 0;
    }
    lb->n_reads = n;
    lb->tag = tag;
    lb->seq = r->next_seq++;
    lb->st = JOB_QUEUED;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int64_t ms_layer_reader_tag(const struct ms_layer_reader *r, int b) {
    /* tag is only written by the caller's thread: no lock needed */
    return b >= 0 && b < MS_LR_BUFFERS ? r->b[b].tag : -1;
}

/* Buffer b's job with r->mu held, or NULL (mu not held, err set) when b is
 * out of range or holds no job: the common entry of the two waits. */
static struct lbuf *lock_job(struct ms_layer_reader *r, int b, ms_err *err) {
    if (b < 0 || b >= MS_LR_BUFFERS) {
        ms_err_set(err, "layer reader: bad buffer %d", b);
        return NULL;
    }
    pthread_mutex_lock(&r->mu);
    struct lbuf *lb = &r->b[b];
    if (lb->st == JOB_NONE) {
        pthread_mutex_unlock(&r->mu);
        ms_err_set(err, "layer reader: buffer %d holds no job", b);
        return NULL;
    }
    return lb;
}

int ms_layer_reader_wait(struct ms_layer_reader *r, int b, void **data, double *waited,
                         uint64_t *bytes, ms_err *err) {
    if (waited) *waited = 0.0;
    if (bytes) *bytes = 0;
    struct lbuf *lb = lock_job(r, b, err);
    if (!lb) return -1;
    const double t0 = now_s();
    wait_idle(r, b);
    if (waited) *waited = now_s() - t0;
    if (!lb->counted) {
        if (bytes) *bytes = lb->bytes;
        lb->counted = true;
    }
    int rc = 0;
    if (lb->st == JOB_FAILED) {
        *err = lb->err;
        lb->st = JOB_NONE;
        lb->tag = -1;
        rc = -1;
    } else {
        *data = lb->mem;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void ms_layer_reader_want(struct ms_layer_reader *r, int b, const bool *want) {
    if (b < 0 || b >= MS_LR_BUFFERS) return;
    pthread_mutex_lock(&r->mu);
    struct lbuf *lb = &r->b[b];
    if (lb->st == JOB_QUEUED || lb->st == JOB_RUNNING)
        for (size_t k = 0; k < lb->n_reads; k++) lb->want[k] = want[k];
    pthread_mutex_unlock(&r->mu);
}

int ms_layer_reader_wait_ranges(struct ms_layer_reader *r, int b, const uint32_t *idx, size_t n,
                                void **data, double *waited, ms_err *err) {
    if (waited) *waited = 0.0;
    struct lbuf *lb = lock_job(r, b, err);
    if (!lb) return -1;
    const double t0 = now_s();
    int rc = 0;
    for (size_t j = 0; j < n && !rc; j++) {
        const uint32_t k = idx[j];
        if (k >= lb->n_reads) {
            rc = ms_err_set(err, "layer reader: range %u of a %zu-range job", k, lb->n_reads);
            break;
        }
        /* a queued job may have been read already by an earlier start's
         * job; otherwise its ranges end one by one */
        while (!lb->ended[k] && (lb->st == JOB_QUEUED || lb->st == JOB_RUNNING))
            pthread_cond_wait(&r->cv, &r->mu);
        if (!lb->ended[k] || lb->status[k]) {
            const int st = lb->ended[k] ? lb->status[k] : EIO;
            const struct ms_io_req *q = &lb->reads[k];
            rc = ms_err_set(err, "layer read of bytes [%llu, +%zu) %s",
                            (unsigned long long)q->offset, q->len,
                            st == ECANCELED ? "was withdrawn" : "failed");
            if (st != ECANCELED) {
                wait_idle(r, b);
                if (lb->st == JOB_FAILED) *err = lb->err;
                lb->st = JOB_NONE;
                lb->tag = -1;
            }
        }
    }
    if (waited) *waited = now_s() - t0;
    if (!rc) *data = lb->mem;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

uint64_t ms_layer_reader_take_bytes(struct ms_layer_reader *r) {
    pthread_mutex_lock(&r->mu);
    const uint64_t b = r->bytes_untaken;
    r->bytes_untaken = 0;
    pthread_mutex_unlock(&r->mu);
    return b;
}

uint64_t ms_layer_reader_buffer_bytes(const struct ms_layer_reader *r) {
    uint64_t n = 0;
    for (int i = 0; i < MS_LR_BUFFERS; i++)
        if (r->b[i].mem) n += r->buf_bytes;
    return n;
}

struct ms_io *ms_layer_reader_io(struct ms_layer_reader *r) { return r->io; }

double ms_layer_reader_busy_seconds(struct ms_layer_reader *r) {
    pthread_mutex_lock(&r->mu);
    const double t = r->busy_s;
    pthread_mutex_unlock(&r->mu);
    return t;
}
