/*
 * test_cpus.c - the default thread count: parsing of the cgroup CPU quota
 * files (v2 cpu.max, v1 cfs_quota_us / cfs_period_us) as pure functions,
 * the quota lookup on fake /proc and /sys trees (ancestor quotas, joint v1
 * controller names, the tightest wins), and the affinity mask bounding the
 * result (the test narrows its own mask and checks ms_n_cpus follows).
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_util.h"
#include "util/cpus.h"

static void test_v2_parse(void **state) {
    (void)state;
    double c = -1;
    assert_int_equal(ms_cpu_quota_v2("max 100000\n", &c), 0);
    assert_true(c == 0);
    c = -1;
    assert_int_equal(ms_cpu_quota_v2("max", &c), 0);
    assert_true(c == 0);
    assert_int_equal(ms_cpu_quota_v2("150000 100000\n", &c), 0);
    assert_true(c == 1.5);
    assert_int_equal(ms_cpu_quota_v2("400000 100000", &c), 0);
    assert_true(c == 4.0);
    assert_int_equal(ms_cpu_quota_v2("50000 100000\n", &c), 0);
    assert_true(c == 0.5);
    /* malformed: leave *cpus alone */
    c = 7;
    const char *bad[] = {"", "\n", "150000", "150000\n", "abc 100000", "150000 0",
                         "150000 -5", "-1 100000", "0 100000", "150000 100000 7",
                         "150000 10x", "maxx 100000", "max 0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(ms_cpu_quota_v2(bad[i], &c), -1);
        assert_true(c == 7);
    }
}

static void test_v1_parse(void **state) {
    (void)state;
    double c = -1;
    assert_int_equal(ms_cpu_quota_v1("-1\n", "100000\n", &c), 0);
    assert_true(c == 0);
    assert_int_equal(ms_cpu_quota_v1("200000\n", "100000\n", &c), 0);
    assert_true(c == 2.0);
    assert_int_equal(ms_cpu_quota_v1("250000", "100000", &c), 0);
    assert_true(c == 2.5);
    assert_int_equal(ms_cpu_quota_v1("-1", "garbage", &c), 0); /* period unused */
    assert_true(c == 0);
    c = 7;
    assert_int_equal(ms_cpu_quota_v1("", "100000", &c), -1);
    assert_int_equal(ms_cpu_quota_v1("0", "100000", &c), -1);
    assert_int_equal(ms_cpu_quota_v1("-2", "100000", &c), -1);
    assert_int_equal(ms_cpu_quota_v1("200000", "0", &c), -1);
    assert_int_equal(ms_cpu_quota_v1("200000", "", &c), -1);
    assert_int_equal(ms_cpu_quota_v1("20x", "100000", &c), -1);
    assert_true(c == 7);
}

static void test_quota_threads(void **state) {
    (void)state;
    assert_int_equal(ms_cpu_quota_threads(0), 0);
    assert_int_equal(ms_cpu_quota_threads(0.25), 1);
    assert_int_equal(ms_cpu_quota_threads(1.0), 1);
    assert_int_equal(ms_cpu_quota_threads(1.5), 2);
    assert_int_equal(ms_cpu_quota_threads(4.0), 4);
    assert_int_equal(ms_cpu_quota_threads(4.0000000001), 4);
    assert_int_equal(ms_cpu_quota_threads(4.01), 5);
}

static void put(const char *rel, const char *text) {
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", tmp_path(rel));
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(tmp_path(rel), "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static struct ms_cpu_limit limit_of(void) {
    char proc[1200], sys[1200];
    snprintf(proc, sizeof proc, "%s", tmp_path("proc"));
    snprintf(sys, sizeof sys, "%s", tmp_path("sys"));
    struct ms_cpu_limit l;
    ms_cpu_limit_read(&l, proc, sys);
    return l;
}

static int fresh_tree(void **state) {
    (void)state;
    char sub[64], cmd[2200];
    snprintf(sub, sizeof sub, "cpus-%d", (int)getpid());
    if (test_tmp_setup(sub)) return -1;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_tmp, g_tmp);
    return system(cmd) ? -1 : 0;
}

static int remove_tree(void **state) {
    (void)state;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) ? -1 : 0;
}

static void test_quota_files(void **state) {
    (void)state;
    struct ms_cpu_limit l;
    /* no cgroup file at all: no quota, n = affinity */
    l = limit_of();
    assert_true(l.quota == 0);
    assert_null(l.quota_source);
    assert_int_equal(l.n, l.affinity);

    /* v2 at the cgroup itself */
    put("proc/self/cgroup", "0::/user/job\n");
    put("sys/user/job/cpu.max", "150000 100000\n");
    l = limit_of();
    assert_true(l.quota == 1.5);
    assert_string_equal(l.quota_source, "cgroup v2");
    assert_int_equal(l.n, l.affinity < 2 ? l.affinity : 2);

    /* a tighter parent wins; an unlimited child does not lift it */
    put("sys/user/job/cpu.max", "max 100000\n");
    put("sys/user/cpu.max", "100000 100000\n");
    l = limit_of();
    assert_true(l.quota == 1.0);
    assert_int_equal(l.n, 1);

    /* v1 under the joint controller name */
    put("proc/self/cgroup", "5:cpuacct,cpu:/docker/abc\n4:memory:/docker/abc\n");
    put("sys/cpuacct,cpu/docker/abc/cpu.cfs_quota_us", "300000\n");
    put("sys/cpuacct,cpu/docker/abc/cpu.cfs_period_us", "100000\n");
    l = limit_of();
    assert_true(l.quota == 3.0);
    assert_string_equal(l.quota_source, "cgroup v1");

    /* v1 with no limit (-1) at the cgroup, a mount root view under "cpu" */
    put("proc/self/cgroup", "2:cpu,cpuacct:/docker/xyz\n");
    put("sys/cpu/cpu.cfs_quota_us", "50000\n");
    put("sys/cpu/cpu.cfs_period_us", "100000\n");
    l = limit_of();
    assert_true(l.quota == 0.5);
    assert_int_equal(l.n, 1);

    /* malformed files are ignored, not fatal */
    put("proc/self/cgroup", "0::/bad\nnonsense line\n");
    put("sys/bad/cpu.max", "lots 100000\n");
    l = limit_of();
    assert_true(l.quota == 0);
    assert_int_equal(l.n, l.affinity);
}

/* The affinity mask bounds the default: narrow this thread's mask to one
 * CPU and the count follows; restore it after. */
static void test_affinity(void **state) {
    (void)state;
    cpu_set_t old;
    assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
    int ids[1024];
    const int n = ms_cpu_affinity_ids(ids, 1024);
    assert_int_equal(n, CPU_COUNT(&old));
    for (int i = 1; i < n && i < 1024; i++) assert_true(ids[i] > ids[i - 1]);
    struct ms_cpu_limit l;
    ms_cpu_limit_read(&l, "/nonexistent-proc", "/nonexistent-sys");
    assert_int_equal(l.affinity, n);
    assert_true(l.online >= 1);

    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(ids[n - 1], &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    ms_cpu_limit_read(&l, "/nonexistent-proc", "/nonexistent-sys");
    assert_int_equal(l.affinity, 1);
    assert_int_equal(l.n, 1);
    assert_int_equal(ms_cpu_affinity_ids(ids, 1024), 1);
    assert_true(ms_n_cpus() == 1);
    assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_parse),
        cmocka_unit_test(test_v1_parse),
        cmocka_unit_test(test_quota_threads),
        cmocka_unit_test_setup_teardown(test_quota_files, fresh_tree, remove_tree),
        cmocka_unit_test(test_affinity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
