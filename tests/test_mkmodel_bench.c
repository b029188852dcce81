/*
 * test_mkmodel_bench.c - the bench preset's generation path (the float
 * Box-Muller in mkmodel.c): its bytes depend on the seed only, never on the
 * thread count; and tiny keeps the double Box-Muller (a bench-preset model
 * with tiny's dimensions differs from the tiny model).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkmodel/mkmodel.h"
#include "quant/quant.h"
#include "test_util.h"

#define TAIL 4096

static int setup(void **state) {
    (void)state;
    return test_tmp_setup("test_mkmodel_bench");
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    uint8_t *buf = malloc((size_t)n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Writes preset `preset` with tiny's dimensions; returns the file's bytes. */
static uint8_t *make(const char *preset, enum ms_type experts, int threads, uint64_t seed, size_t *len) {
    struct mkmodel_opts o, tiny;
    ms_err err;
    assert_int_equal(mkmodel_preset(&tiny, "tiny", &err), 0);
    assert_int_equal(mkmodel_preset(&o, preset, &err), 0);
    o.hp = tiny.hp;
    o.experts_type = o.last_layers_type = experts;
    o.n_threads = threads;
    o.seed = seed;
    char path[1100];
    snprintf(path, sizeof path, "%s/m_%s_%d_%d.gguf", g_tmp, preset, (int)experts, threads);
    if (mkmodel_write(&o, path, &err)) fail_msg("mkmodel_write: %s", err.msg);
    uint8_t *buf = slurp(path, len);
    remove(path);
    return buf;
}

static void test_bench_threads(void **state) {
    (void)state;
    static const enum ms_type types[] = {MS_TYPE_Q4_K, MS_TYPE_Q8_0, MS_TYPE_Q2_K, MS_TYPE_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        size_t n1, n2, n3, nt, ns;
        uint8_t *a = make("bench", types[t], 1, 7, &n1);
        uint8_t *b = make("bench", types[t], 2, 7, &n2);
        uint8_t *c = make("bench", types[t], 3, 7, &n3);
        assert_int_equal(n1, n2);
        assert_int_equal(n1, n3);
        assert_memory_equal(a, b, n1);
        assert_memory_equal(a, c, n1);
        /* The metadata names the seed and preset, so compare the files'
         * last TAIL bytes: tensor data only. */
        uint8_t *s = make("bench", types[t], 2, 8, &ns); /* another seed */
        assert_true(ns >= TAIL && memcmp(a + n1 - TAIL, s + ns - TAIL, TAIL) != 0);
        uint8_t *d = make("tiny", types[t], 2, 7, &nt); /* the other generator */
        assert_true(nt >= TAIL && memcmp(a + n1 - TAIL, d + nt - TAIL, TAIL) != 0);
        free(a), free(b), free(c), free(s), free(d);
    }
}

int main(void) {
    ms_quant_init();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bench_threads)};
    return cmocka_run_group_tests(tests, setup, NULL);
}
