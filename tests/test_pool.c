/*
 * test_pool.c - the thread pool (util/pool.h): every item of a job is run
 * exactly once, on a valid thread index, whatever the chunking; jobs follow
 * each other with nothing lost, whether the workers are spinning or asleep;
 * pools of one thread and NULL pools run on the caller; the statistics
 * count the jobs and split the caller's time as they say.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/pool.h"

#define MAX_N 5000

struct job {
    _Atomic int hits[MAX_N];
    _Atomic int bad_range;
    _Atomic int bad_ith;
    int n_threads;
};

static void count(void *ctx, int64_t b, int64_t e, int ith) {
    struct job *j = ctx;
    if (b < 0 || e > MAX_N || b >= e) atomic_fetch_add(&j->bad_range, 1);
    if (ith < 0 || ith >= j->n_threads) atomic_fetch_add(&j->bad_ith, 1);
    for (int64_t i = b; i < e && i < MAX_N; i++) atomic_fetch_add(&j->hits[i], 1);
}

static void check_once(struct job *j, int64_t n) {
    assert_int_equal(atomic_load(&j->bad_range), 0);
    assert_int_equal(atomic_load(&j->bad_ith), 0);
    for (int64_t i = 0; i < n; i++) assert_int_equal(atomic_load(&j->hits[i]), 1);
    for (int64_t i = n; i < MAX_N; i++) assert_int_equal(atomic_load(&j->hits[i]), 0);
}

static struct job *new_job(int n_threads) {
    struct job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    j->n_threads = n_threads;
    return j;
}

static void reset(struct job *j) {
    for (int i = 0; i < MAX_N; i++) atomic_store(&j->hits[i], 0);
}

/* Every size from 1 to 70 and some large ones, grains 1..17, both entry
 * points, on pools of 1..5 threads (more threads than items included). */
static void test_every_item_once(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 64, 70, 1000, 4999, 5000};
    for (int nt = 1; nt <= 5; nt++) {
        struct ms_pool *p = NULL;
        ms_err err = {{0}};
        assert_int_equal(ms_pool_new(&p, nt, &err), 0);
        assert_int_equal(ms_pool_n_threads(p), nt);
        struct job *j = new_job(nt);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int64_t grain = 1; grain <= 17; grain += 4) {
                reset(j);
                ms_pool_for(p, sizes[si], grain, count, j);
                check_once(j, sizes[si]);
                reset(j);
                ms_pool_for_each(p, sizes[si], count, j);
                check_once(j, sizes[si]);
            }
        free(j);
        ms_pool_free(p);
    }
}

/* Thousands of back-to-back jobs (workers still spinning when the next is
 * published), then jobs after pauses long enough for the workers to sleep. */
static void test_back_to_back_and_after_sleep(void **state) {
    (void)state;
    struct ms_pool *p = NULL;
    ms_err err = {{0}};
    assert_int_equal(ms_pool_new(&p, 3, &err), 0);
    struct job *j = new_job(3);
    for (int r = 0; r < 3000; r++) {
        const int64_t n = 1 + r % 97;
        reset(j);
        if (r & 1)
            ms_pool_for_each(p, n, count, j);
        else
            ms_pool_for(p, n, 1 + r % 5, count, j);
        check_once(j, n);
    }
    for (int r = 0; r < 5; r++) {
        const struct timespec ts = {0, 20 * 1000 * 1000}; /* 20 ms: workers asleep */
        nanosleep(&ts, NULL);
        reset(j);
        ms_pool_for(p, 1000, 1, count, j);
        check_once(j, 1000);
    }
    free(j);
    ms_pool_free(p);
}

static void test_null_pool_and_empty_jobs(void **state) {
    (void)state;
    struct job *j = new_job(1);
    ms_pool_for(NULL, 100, 1, count, j);
    check_once(j, 100);
    reset(j);
    ms_pool_for_each(NULL, 33, count, j);
    check_once(j, 33);
    reset(j);
    ms_pool_for(NULL, 0, 1, count, j);
    ms_pool_for_each(NULL, -3, count, j);
    check_once(j, 0);
    free(j);
    /* a pool that is created and freed without a job */
    struct ms_pool *p = NULL;
    ms_err err = {{0}};
    assert_int_equal(ms_pool_new(&p, 4, &err), 0);
    ms_pool_free(p);
    ms_pool_free(NULL);
}

/* An item that takes ITEM_NS of wall time (a spin on the clock, so that it
 * lasts as long on a loaded machine as on an idle one). */
#define ITEM_NS 200000

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void spin_items(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ctx;
    (void)ith;
    for (int64_t i = b; i < e; i++) {
        const int64_t t0 = mono_ns();
        while (mono_ns() - t0 < ITEM_NS) {
        }
    }
}

/* Five jobs of eight 0.2 ms items on two threads, 3 ms apart: five
 * hand-offs; the serial share holds at least the four pauses; each job
 * lasts at least half its items' time (two threads at most); the items'
 * time is found in the workers' busy time plus the caller's own share of
 * the jobs; the end waits are part of the jobs' time. A pool of one thread
 * runs its jobs inline and hands out none. */
static void test_stats(void **state) {
    (void)state;
    struct ms_pool *p = NULL;
    ms_err err = {{0}};
    assert_int_equal(ms_pool_new(&p, 2, &err), 0);
    const struct ms_pool_stats z = ms_pool_stats(p);
    assert_int_equal(z.jobs, 0);
    assert_true(z.wall_s == 0.0 && z.jobs_s == 0.0 && z.busy_s == 0.0);
    const int n_jobs = 5, n_items = 8;
    for (int r = 0; r < n_jobs; r++) {
        if (r) {
            const struct timespec ts = {0, 3 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        ms_pool_for_each(p, n_items, spin_items, NULL);
    }
    const struct ms_pool_stats s = ms_pool_stats(p);
    const double item_s = ITEM_NS * 1e-9, work = n_jobs * n_items * item_s;
    assert_int_equal(s.jobs, (uint64_t)n_jobs);
    assert_int_equal(s.inline_jobs, 0);
    assert_true(s.end_wait_s >= 0.0 && s.end_wait_s <= s.jobs_s && s.jobs_s <= s.wall_s);
    assert_true(s.wall_s - s.jobs_s >= (n_jobs - 1) * 3e-3);
    assert_true(s.jobs_s >= 0.999 * work / 2);
    assert_true(s.busy_s + (s.jobs_s - s.end_wait_s) >= 0.999 * work);
    ms_pool_free(p);

    assert_int_equal(ms_pool_new(&p, 1, &err), 0);
    ms_pool_for(p, 4, 1, spin_items, NULL);
    const struct ms_pool_stats one = ms_pool_stats(p);
    assert_int_equal(one.jobs, 0);
    assert_int_equal(one.inline_jobs, 1);
    assert_true(one.jobs_s == 0.0 && one.busy_s == 0.0 && one.wall_s >= 0.999 * 4 * item_s);
    ms_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_once),
        cmocka_unit_test(test_back_to_back_and_after_sleep),
        cmocka_unit_test(test_null_pool_and_empty_jobs),
        cmocka_unit_test(test_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
