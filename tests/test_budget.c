/*
 * test_budget.c - memory limit detection (cgroup v1, v2, MemAvailable) on
 * fake /proc and /sys trees, the residency/cache plan, and the size and
 * integer parsers of util/parse.h that the options use.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "stream/budget.h"
#include "util/parse.h"

static char root[512];

static void put(const char *rel, const char *text) {
    char path[1024], cmd[1200];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("MS_TMPDIR") ? getenv("MS_TMPDIR") : P_tmpdir;
    snprintf(root, sizeof root, "%s/budget-%d", tmp, (int)getpid());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", root, root);
    return system(cmd);
}

static int teardown(void **state) {
    (void)state;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd);
}

static void limit_of(uint64_t *bytes, const char **src) {
    char proc[600], sys[600];
    snprintf(proc, sizeof proc, "%s/proc", root);
    snprintf(sys, sizeof sys, "%s/sys", root);
    ms_err err = {0};
    assert_int_equal(ms_mem_limit(bytes, src, proc, sys, &err), 0);
}

static void test_limit_sources(void **state) {
    (void)state;
    uint64_t b;
    const char *src;
    put("proc/meminfo", "MemTotal: 2000000 kB\nMemAvailable: 1000000 kB\n");
    put("proc/self/cgroup", "9:name=systemd:/\n");
    limit_of(&b, &src);
    assert_int_equal(b, 1000000ULL * 1024);
    assert_string_equal(src, "MemAvailable");

    /* cgroup v1 tighter than MemAvailable */
    put("proc/self/cgroup", "7:blkio:/\n4:memory:/bench\n");
    put("sys/memory/bench/memory.limit_in_bytes", "536870912\n");
    limit_of(&b, &src);
    assert_int_equal(b, 536870912ULL);
    assert_string_equal(src, "cgroup v1");

    /* cgroup v1 without a limit (the kernel's huge default) */
    put("sys/memory/bench/memory.limit_in_bytes", "9223372036854771712\n");
    limit_of(&b, &src);
    assert_string_equal(src, "MemAvailable");

    /* cgroup v2 */
    put("proc/self/cgroup", "0::/user/job\n");
    put("sys/user/job/memory.max", "268435456\n");
    limit_of(&b, &src);
    assert_int_equal(b, 268435456ULL);
    assert_string_equal(src, "cgroup v2");
    put("sys/user/job/memory.max", "max\n");
    limit_of(&b, &src);
    assert_string_equal(src, "MemAvailable");
}

static void test_limit_unreadable(void **state) {
    (void)state;
    uint64_t b;
    const char *src;
    ms_err err = {0};
    assert_int_equal(ms_mem_limit(&b, &src, "/nonexistent-proc", "/nonexistent-sys", &err), -1);
    assert_non_null(strstr(err.msg, "meminfo"));
}

#define GiB (1024ULL * 1024 * 1024)

static void test_plan(void **state) {
    (void)state;
    struct ms_mem_plan_in in = {.limit_bytes = 10 * GiB, .pct = 80, .file_bytes = 20 * GiB,
                                .routed_bytes = 18 * GiB, .max_layer_routed = GiB / 2,
                                .session_bytes = GiB / 4, .min_cache_bytes = 64 << 20,
                                .stream = -1};
    struct ms_mem_plan p;
    ms_err err = {0};
    /* auto: 20.25 GiB needed > 8 GiB usable -> stream; cache = 8 - 2 - 0.25 - 1 */
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_true(p.stream);
    assert_int_equal(p.usable_bytes, 8 * GiB);
    assert_int_equal(p.dense_bytes, 2 * GiB);
    assert_int_equal(p.headroom_bytes, GiB);
    assert_int_equal(p.cache_bytes, 8 * GiB - 2 * GiB - GiB / 4 - GiB);
    /* a requested target above what remains is fitted down, below is kept */
    in.cache_bytes = 100 * GiB;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_int_equal(p.cache_bytes, 8 * GiB - 2 * GiB - GiB / 4 - GiB);
    in.cache_bytes = GiB;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_int_equal(p.cache_bytes, GiB);
    /* fits: auto stays resident; forcing streams anyway */
    in.limit_bytes = 64 * GiB;
    in.cache_bytes = 0;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_false(p.stream);
    in.stream = 1;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_true(p.stream);
    assert_int_equal(p.cache_bytes, in.routed_bytes); /* never more than all experts */
    /* layers held whole (--full-layers) are resident: less room, and the
     * cache never exceeds the experts still streamed */
    in.full_bytes = 3 * GiB;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_int_equal(p.cache_bytes, in.routed_bytes - 3 * GiB);
    in.limit_bytes = 10 * GiB;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_int_equal(p.cache_bytes, 8 * GiB - 2 * GiB - 3 * GiB - GiB / 4 - GiB);
    in.limit_bytes = 64 * GiB;
    in.full_bytes = 0;
    /* no room for the two layer buffers beside the smallest cache (3.2 GiB
     * usable: 2 dense + 0.25 sessions + 1 headroom leave less than 64 MiB):
     * they are left out and the prefill reads through the cache */
    in.limit_bytes = 4 * GiB;
    in.stream = -1;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_true(p.stream);
    assert_true(p.whole_layer_dropped);
    assert_int_equal(p.headroom_bytes, 0);
    assert_int_equal(p.cache_bytes, p.usable_bytes - 2 * GiB - GiB / 4);
    /* with room, they stay; whole-layer reads turned off take none */
    in.limit_bytes = 10 * GiB;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_false(p.whole_layer_dropped);
    assert_int_equal(p.headroom_bytes, GiB);
    in.no_whole_layer = true;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_false(p.whole_layer_dropped);
    assert_int_equal(p.headroom_bytes, 0);
    assert_int_equal(p.cache_bytes, 8 * GiB - 2 * GiB - GiB / 4);
    in.no_whole_layer = false;
    in.stream = 1;
    /* too small to stream at all: a clear error with the figures */
    in.limit_bytes = 2 * GiB;
    in.stream = -1;
    assert_int_equal(ms_mem_plan(&in, &p, &err), -1);
    assert_non_null(strstr(err.msg, "not enough memory to stream"));
    /* a requested cache does not skip the check */
    in.cache_bytes = GiB;
    assert_int_equal(ms_mem_plan(&in, &p, &err), -1);
    assert_non_null(strstr(err.msg, "not enough memory to stream"));
    /* resident by force: the sessions must fit (the weights are mapped) */
    in.cache_bytes = 0;
    in.stream = 0;
    assert_int_equal(ms_mem_plan(&in, &p, &err), 0);
    assert_false(p.stream);
    in.session_bytes = 2 * GiB;
    assert_int_equal(ms_mem_plan(&in, &p, &err), -1);
    assert_non_null(strstr(err.msg, "not enough memory for the sessions"));
}

static void test_parse_size(void **state) {
    (void)state;
    uint64_t v;
    assert_int_equal(ms_parse_size("12GB", &v), 0);
    assert_int_equal(v, 12 * GiB);
    assert_int_equal(ms_parse_size("512MiB", &v), 0);
    assert_int_equal(v, 512ULL << 20);
    assert_int_equal(ms_parse_size("1.5G", &v), 0);
    assert_int_equal(v, 3 * GiB / 2);
    assert_int_equal(ms_parse_size("4096", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(ms_parse_size("", &v), -1);
    assert_int_equal(ms_parse_size("12XB", &v), -1);
    assert_int_equal(ms_parse_size("-5G", &v), -1);
    assert_int_equal(ms_parse_size("99999999999T", &v), -1);
}

static void test_parse_long(void **state) {
    (void)state;
    long v = 7;
    assert_int_equal(ms_parse_long("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(ms_parse_long("-1", -1, 5, &v), 0);
    assert_int_equal(v, -1);
    v = 7;
    assert_int_equal(ms_parse_long("", 0, 100, &v), -1);
    assert_int_equal(ms_parse_long("12x", 0, 100, &v), -1);
    assert_int_equal(ms_parse_long("101", 0, 100, &v), -1);
    assert_int_equal(ms_parse_long("-1", 0, 100, &v), -1);
    assert_int_equal(ms_parse_long("99999999999999999999", 0, 100, &v), -1);
    assert_int_equal(v, 7); /* untouched on failure */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_limit_sources, setup, teardown),
        cmocka_unit_test(test_limit_unreadable),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
