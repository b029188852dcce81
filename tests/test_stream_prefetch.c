/*
 * test_stream_prefetch.c - per-request completion in the background
 * readers: a wait for the reads one needs returns while an unneeded read
 * is still in flight (held in the I/O engine's fault hook), reads withdrawn
 * before they start are never read, and the I/O engine's request hooks
 * (want, done) report every request once, in every mode.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "stream/io.h"
#include "stream/layer_reader.h"
#include "stream/prefetch.h"
#include "util/mem.h"
#include "util/rng.h"

#define BLK 8192
#define N_BLK 16
#define FILE_BYTES ((size_t)BLK * N_BLK)

static char g_path[512];
static unsigned char *g_truth;

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("MS_TMPDIR");
    if (!tmp) tmp = ".";
    mkdir(tmp, 0755);
    snprintf(g_path, sizeof g_path, "%s/test_stream_prefetch.%d.bin", tmp, (int)getpid());
    g_truth = malloc(FILE_BYTES);
    ms_rng rng;
    ms_rng_seed(&rng, 91);
    for (size_t i = 0; i < FILE_BYTES; i++) g_truth[i] = (unsigned char)(ms_rng_u64(&rng) >> 56);
    FILE *o = fopen(g_path, "wb");
    return !o || fwrite(g_truth, 1, FILE_BYTES, o) != FILE_BYTES || fclose(o) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    free(g_truth);
    return 0;
}

/* A fault hook that holds the read number `hold` (in completion order; the
 * pread path completes in submission order) until released, or 5 s. */
struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t hold;
    bool holding, released, timed_out;
};
static long gate_hook(void *ctx, uint64_t seq, long res) {
    struct gate *g = ctx;
    if (seq != g->hold) return res;
    pthread_mutex_lock(&g->mu);
    g->holding = true;
    pthread_cond_broadcast(&g->cv);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (!g->released && !g->timed_out)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT) g->timed_out = true;
    g->holding = false;
    pthread_mutex_unlock(&g->mu);
    return res;
}
static void gate_init(struct gate *g, uint64_t hold) {
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->hold = hold;
}
static void gate_wait_holding(struct gate *g) {
    pthread_mutex_lock(&g->mu);
    while (!g->holding && !g->timed_out) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}
static bool gate_is_holding(struct gate *g) {
    pthread_mutex_lock(&g->mu);
    const bool h = g->holding;
    pthread_mutex_unlock(&g->mu);
    return h;
}
static void gate_release(struct gate *g) {
    pthread_mutex_lock(&g->mu);
    g->released = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
static void gate_free(struct gate *g) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

/* One request of block b into buf (BLK bytes, aligned). */
static struct ms_io_req blk_req(int b, void *buf) {
    return (struct ms_io_req){.offset = (uint64_t)b * BLK, .len = BLK, .buf = buf};
}

/* The prefetcher: ticket A (needed) ends while ticket B (submitted after it,
 * not needed) is held in flight; C, cancelled while B is held, is never
 * read; B completes once released. pread path: reads complete in order. */
static void test_prefetch_waits_only_for_needed(void **state) {
    (void)state;
    struct ms_io_params iop = {.no_uring = true};
    struct ms_prefetch *p = NULL;
    ms_err e = {{0}};
    if (ms_prefetch_new(&p, g_path, &iop, 64, &e)) fail_msg("%s", e.msg);
    struct gate g;
    gate_init(&g, 3); /* the first read of B (A is reads 0..2) */
    ms_io_set_fault_hook(ms_prefetch_io(p), gate_hook, &g);
    unsigned char *buf = ms_aligned_alloc(MS_IO_ALIGN, 9 * BLK);
    memset(buf, 0xAB, 9 * BLK);
    struct ms_io_req a[3], b[3], c[3];
    for (int i = 0; i < 3; i++) {
        a[i] = blk_req(i, buf + i * BLK);
        b[i] = blk_req(3 + i, buf + (3 + i) * BLK);
        c[i] = blk_req(6 + i, buf + (6 + i) * BLK);
    }
    uint32_t ta, tb, tc;
    assert_int_equal(ms_prefetch_submit(p, a, 3, &ta), 0);
    assert_int_equal(ms_prefetch_submit(p, b, 3, &tb), 0);
    assert_int_equal(ms_prefetch_submit(p, c, 3, &tc), 0);
    assert_true(ms_prefetch_pending(p));
    assert_int_equal(ms_prefetch_check(p, ta, true, NULL, &e), MS_PF_DONE);
    gate_wait_holding(&g);
    /* A is in while B's read is still held: the wait did not wait for B */
    assert_true(gate_is_holding(&g));
    assert_false(g.timed_out);
    assert_memory_equal(buf, g_truth, 3 * BLK);
    assert_int_equal(ms_prefetch_check(p, tb, false, NULL, &e), MS_PF_PENDING);
    ms_prefetch_cancel(p, tc);
    gate_release(&g);
    assert_int_equal(ms_prefetch_check(p, tb, true, NULL, &e), MS_PF_DONE);
    assert_memory_equal(buf + 3 * BLK, g_truth + 3 * BLK, 3 * BLK);
    assert_int_equal(ms_prefetch_check(p, tc, true, NULL, &e), MS_PF_CANCELLED);
    for (size_t i = 6 * BLK; i < 9 * BLK; i++) assert_int_equal(buf[i], 0xAB); /* never read */
    assert_false(ms_prefetch_pending(p));
    assert_int_equal(ms_prefetch_take_bytes(p), 6 * BLK);
    /* a ticket is reported once */
    assert_int_equal(ms_prefetch_check(p, ta, true, NULL, &e), MS_PF_FAILED);
    /* numbering starts again once all are seen, and failures are per ticket */
    ms_io_set_fault_hook(ms_prefetch_io(p), NULL, NULL);
    struct ms_io_req bad = {.offset = FILE_BYTES - 100, .len = 4096, .buf = buf};
    assert_int_equal(ms_prefetch_submit(p, &bad, 1, &ta), 0);
    assert_int_equal(ta, 0);
    assert_int_equal(ms_prefetch_submit(p, a, 3, &tb), 0);
    assert_int_equal(ms_prefetch_check(p, tb, true, NULL, &e), MS_PF_DONE);
    assert_int_equal(ms_prefetch_check(p, ta, true, NULL, &e), MS_PF_FAILED);
    assert_non_null(strstr(e.msg, "end of file"));
    ms_prefetch_free(p);
    ms_free(buf);
    gate_free(&g);
}

/* The layer reader: a wait for range 0 returns while range 1 is held;
 * range 2, withdrawn meanwhile, is never read and waiting for it is an
 * error; the job still ends, and range 3 is read. */
static void test_layer_reader_ranges(void **state) {
    (void)state;
    struct ms_io_params iop = {.no_uring = true};
    struct ms_layer_reader *r = NULL;
    ms_err e = {{0}};
    if (ms_layer_reader_new(&r, g_path, &iop, 4 * BLK, 4, &e)) fail_msg("%s", e.msg);
    struct gate g;
    gate_init(&g, 1);
    ms_io_set_fault_hook(ms_layer_reader_io(r), gate_hook, &g);
    struct ms_io_req reads[4];
    for (int i = 0; i < 4; i++)
        reads[i] = (struct ms_io_req){.offset = (uint64_t)(2 * i) * BLK, .len = BLK,
                                      .buf = (void *)(uintptr_t)(i * BLK)};
    if (ms_layer_reader_start(r, 0, 7, reads, 4, &e)) fail_msg("%s", e.msg);
    void *data = NULL;
    const uint32_t r0 = 0, r2 = 2, r3 = 3;
    if (ms_layer_reader_wait_ranges(r, 0, &r0, 1, &data, NULL, &e)) fail_msg("%s", e.msg);
    gate_wait_holding(&g);
    assert_true(gate_is_holding(&g));
    assert_memory_equal(data, g_truth, BLK);
    memset((char *)data + 2 * BLK, 0xCD, BLK); /* range 2's place: must stay untouched */
    const bool want[4] = {true, true, false, true};
    ms_layer_reader_want(r, 0, want);
    gate_release(&g);
    if (ms_layer_reader_wait_ranges(r, 0, &r3, 1, &data, NULL, &e)) fail_msg("%s", e.msg);
    assert_memory_equal((char *)data + 3 * BLK, g_truth + 6 * BLK, BLK);
    assert_int_equal(ms_layer_reader_wait_ranges(r, 0, &r2, 1, &data, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "withdrawn"));
    double waited;
    uint64_t bytes;
    if (ms_layer_reader_wait(r, 0, &data, &waited, &bytes, &e)) fail_msg("%s", e.msg);
    assert_int_equal(bytes, 3 * BLK);
    assert_int_equal(ms_layer_reader_take_bytes(r), 3 * BLK);
    assert_memory_equal((char *)data + BLK, g_truth + 2 * BLK, BLK);
    for (size_t i = 2 * BLK; i < 3 * BLK; i++) assert_int_equal(((unsigned char *)data)[i], 0xCD);
    assert_false(g.timed_out);
    ms_layer_reader_free(r);
    gate_free(&g);
}

/* ms_io_read_hooked: want() is asked once per request, in order, done()
 * reports each request once with its status, skipped requests read
 * nothing and are no failure; io_uring and pread, direct and buffered. */
struct log {
    int asked[8], done[8], status[8];
    size_t n_asked;
    size_t order[8];
};
static bool log_want(void *ctx, size_t i) {
    struct log *l = ctx;
    l->asked[i]++;
    l->order[l->n_asked++] = i;
    return i % 3 != 1; /* skip 1, 4, 7 */
}
static void log_done(void *ctx, size_t i, int status) {
    struct log *l = ctx;
    l->done[i]++;
    l->status[i] = status;
}
static void test_io_hooks(void **state) {
    (void)state;
    for (int mode = 0; mode < 4; mode++) {
        struct ms_io_params iop = {.no_uring = mode & 1, .no_direct = mode & 2, .queue_depth = 2,
                                   .chunk_bytes = 4096};
        struct ms_io *io = NULL;
        ms_err e = {{0}};
        if (ms_io_open(&io, g_path, &iop, &e)) fail_msg("%s", e.msg);
        unsigned char *buf = ms_aligned_alloc(MS_IO_ALIGN, 8 * BLK);
        memset(buf, 0xEE, 8 * BLK);
        struct ms_io_req q[8];
        for (int i = 0; i < 8; i++)
            q[i] = (struct ms_io_req){.offset = (uint64_t)i * BLK + 100, .len = BLK - 300,
                                      .buf = buf + i * BLK};
        struct log l;
        memset(&l, 0, sizeof l);
        const struct ms_io_hooks h = {.ctx = &l, .want = log_want, .done = log_done};
        if (ms_io_read_hooked(io, q, 8, &h, &e)) fail_msg("mode %d: %s", mode, e.msg);
        for (size_t i = 0; i < 8; i++) {
            assert_int_equal(l.asked[i], 1);
            assert_int_equal(l.order[i], i);
            assert_int_equal(l.done[i], 1);
            if (i % 3 == 1) {
                assert_int_equal(l.status[i], ECANCELED);
                for (size_t j = 0; j < BLK; j++) assert_int_equal(buf[i * BLK + j], 0xEE);
            } else {
                assert_int_equal(l.status[i], 0);
                assert_memory_equal(buf + i * BLK + 100, g_truth + i * BLK + 100, BLK - 300);
            }
        }
        ms_free(buf);
        ms_io_close(io);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefetch_waits_only_for_needed),
        cmocka_unit_test(test_layer_reader_ranges),
        cmocka_unit_test(test_io_hooks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
