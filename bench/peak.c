/*
 * peak.c - peak dot-product throughput of this CPU, for bench/limits: fp32
 * FMA and int8 multiply-accumulate, on independent accumulator chains (enough
 * of them to cover the instruction latency), per thread, T threads at once.
 * AVX-512 when the CPU has it (VNNI vpdpbusd for int8), else AVX2 (vfmadd /
 * vpmaddubsw accumulated in int16). A multiply-add counts as 2 operations.
 *
 * usage: peak [THREADS [SECONDS [wall|cpu]]]   (defaults 1, 0.5 per kind, wall)
 *        cpu: each thread measures its own CPU time, so the figure is what
 *        a thread does per second it runs (on a shared machine, wall time
 *        also counts the time spent waiting for a core).
 * out:   "fp32_gflops X isa", "int8_gops Y isa" (all threads together).
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cpu_clock;

static double now(void) {
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { ITERS = 1 << 20 };
static volatile float sink_f;
static volatile int32_t sink_i;

/* Each call does ITERS x 12 vector multiply-adds; returns the ops done. */
__attribute__((target("avx512f"))) static double fp32_avx512(void) {
    __m512 acc[12], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    for (int k = 0; k < 12; k++) acc[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < ITERS; i++)
        for (int k = 0; k < 12; k++) acc[k] = _mm512_fmadd_ps(acc[k], x, y);
    __m512 s = acc[0];
    for (int k = 1; k < 12; k++) s = _mm512_add_ps(s, acc[k]);
    sink_f = _mm512_reduce_add_ps(s);
    return (double)ITERS * 12 * 16 * 2;
}
__attribute__((target("avx2,fma"))) static double fp32_avx2(void) {
    __m256 acc[12], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    for (int k = 0; k < 12; k++) acc[k] = _mm256_set1_ps((float)k);
    for (long i = 0; i < ITERS; i++)
        for (int k = 0; k < 12; k++) acc[k] = _mm256_fmadd_ps(acc[k], x, y);
    float out[8];
    __m256 s = acc[0];
    for (int k = 1; k < 12; k++) s = _mm256_add_ps(s, acc[k]);
    _mm256_storeu_ps(out, s);
    sink_f = out[0];
    return (double)ITERS * 12 * 8 * 2;
}
__attribute__((target("avx512f,avx512vnni"))) static double int8_avx512(void) {
    __m512i acc[12], x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
    for (int k = 0; k < 12; k++) acc[k] = _mm512_set1_epi32(k);
    for (long i = 0; i < ITERS; i++)
        for (int k = 0; k < 12; k++) acc[k] = _mm512_dpbusd_epi32(acc[k], x, y);
    __m512i s = acc[0];
    for (int k = 1; k < 12; k++) s = _mm512_add_epi32(s, acc[k]);
    sink_i = _mm512_reduce_add_epi32(s);
    return (double)ITERS * 12 * 64 * 2;
}
__attribute__((target("avx2"))) static double int8_avx2(void) {
    /* vpmaddubsw (u8 x s8 -> s16 pairs) accumulated in int16 with vpaddw:
     * what the token-lane k-quant kernels run per 32 products (they widen
     * with one vpmaddwd per 4 to 8 of these); a vpmaddwd per vpmaddubsw,
     * the older idiom, runs at about 0.6 of this on Zen 1 */
    __m256i acc[12], x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);
    for (int k = 0; k < 12; k++) acc[k] = _mm256_set1_epi16((short)k);
    for (long i = 0; i < ITERS; i++)
        for (int k = 0; k < 12; k++) {
            /* x opaque at every step: otherwise the compiler computes the
             * loop-invariant vpmaddubsw once and this measures vpaddw alone
             * (it did, with vpmaddwd too: 104-114 "GOPS" on Zen 1) */
            __asm__ volatile("" : "+x"(x));
            acc[k] = _mm256_add_epi16(acc[k], _mm256_maddubs_epi16(x, y));
        }
    int16_t out[16];
    __m256i s = acc[0];
    for (int k = 1; k < 12; k++) s = _mm256_add_epi16(s, acc[k]);
    _mm256_storeu_si256((__m256i *)out, s);
    sink_i = out[0];
    return (double)ITERS * 12 * 32 * 2;
}

static double (*kern)(void);
static double seconds;
static double ops_done[256];
static pthread_barrier_t bar;

static void *worker(void *arg) {
    const long id = (long)arg;
    pthread_barrier_wait(&bar);
    const double t0 = now();
    double ops = 0;
    while (now() - t0 < seconds) ops += kern();
    ops_done[id] = ops / (now() - t0);
    return NULL;
}

static double run(double (*k)(void), int n) {
    kern = k;
    pthread_t th[256];
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    for (long i = 0; i < n; i++) pthread_create(&th[i], NULL, worker, (void *)i);
    double total = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        total += ops_done[i];
    }
    pthread_barrier_destroy(&bar);
    return total;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 1;
    seconds = argc > 2 ? atof(argv[2]) : 0.5;
    cpu_clock = argc > 3 && !strcmp(argv[3], "cpu");
    if (n < 1 || n > 256 || !(seconds > 0) || (argc > 3 && !cpu_clock && strcmp(argv[3], "wall"))) {
        fprintf(stderr, "usage: peak [THREADS [SECONDS [wall|cpu]]]\n");
        return 2;
    }
    __builtin_cpu_init();
    const int has512 = __builtin_cpu_supports("avx512f");
    const int vnni = has512 && __builtin_cpu_supports("avx512vnni");
    if (!__builtin_cpu_supports("avx2")) {
        fprintf(stderr, "peak: needs AVX2\n");
        return 1;
    }
    printf("threads %d\n", n);
    printf("fp32_gflops %.2f %s\n", run(has512 ? fp32_avx512 : fp32_avx2, n) / 1e9,
           has512 ? "avx512" : "avx2");
    printf("int8_gops %.2f %s\n", run(vnni ? int8_avx512 : int8_avx2, n) / 1e9,
           vnni ? "avx512vnni" : "avx2");
    return 0;
}
