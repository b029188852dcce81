/*
 * membw.c - memory bandwidth of this machine, for bench/limits: a STREAM-
 * style triad a[i] = b[i] + s * c[i] (24 bytes moved per element, STREAM's
 * convention: write-allocate traffic not counted) and a read-only sum (8
 * bytes per element: what a decode that streams weights from memory needs),
 * over arrays far larger than the caches, split across T threads, best of
 * several repetitions (McCalpin's STREAM reports the best, too).
 *
 * usage: membw [THREADS [ELEMENTS [wall|cpu]]]   (defaults 1, 2^25 doubles per
 *        array, wall). cpu: each thread times itself on its own CPU-time clock
 *        (the slowest thread of a repetition counts), so time spent waiting
 *        for a core on a shared machine is not counted.
 * out:   "triad_gbs X" and "read_gbs Y" lines (10^9 bytes per second).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double *a, *b, *c;
static long n_elem;
static int n_threads;
static double sums[256];
static pthread_barrier_t bar;
enum { REPS = 8 };
static double t_triad = 1e30, t_read = 1e30;

static int cpu_clock;
static double dt_triad[256], dt_read[256];

static double now(void) {
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *worker(void *arg) {
    const long id = (long)arg;
    const long lo = n_elem * id / n_threads, hi = n_elem * (id + 1) / n_threads;
    for (long i = lo; i < hi; i++) { a[i] = 0.0; b[i] = 1.0 + (double)(i & 7); c[i] = 0.5; }
    for (int r = 0; r < REPS; r++) {
        pthread_barrier_wait(&bar);
        double t0 = now();
        for (long i = lo; i < hi; i++) a[i] = b[i] + 3.0 * c[i];
        dt_triad[id] = now() - t0;
        pthread_barrier_wait(&bar);
        double t1 = now();
        /* eight partial sums: one chain would be bound by the add latency */
        double p[8] = {0};
        long i = lo;
        for (; i + 8 <= hi; i += 8)
            for (int k = 0; k < 8; k++) p[k] += a[i + k];
        for (; i < hi; i++) p[0] += a[i];
        sums[id] += p[0] + p[1] + p[2] + p[3] + p[4] + p[5] + p[6] + p[7];
        dt_read[id] = now() - t1;
        pthread_barrier_wait(&bar);
        double t2 = now();
        if (id == 0) {
            double tt = t1 - t0, tr = t2 - t1;
            if (cpu_clock) { /* per-thread clocks: the slowest thread */
                tt = tr = 0;
                for (int k = 0; k < n_threads; k++) {
                    if (dt_triad[k] > tt) tt = dt_triad[k];
                    if (dt_read[k] > tr) tr = dt_read[k];
                }
            }
            if (tt < t_triad) t_triad = tt;
            if (tr < t_read) t_read = tr;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    n_threads = argc > 1 ? atoi(argv[1]) : 1;
    n_elem = argc > 2 ? atol(argv[2]) : 1L << 25;
    cpu_clock = argc > 3 && argv[3][0] == 'c';
    if (n_threads < 1 || n_threads > 256 || n_elem < 1024 ||
        (argc > 3 && strcmp(argv[3], "cpu") && strcmp(argv[3], "wall"))) {
        fprintf(stderr, "usage: membw [THREADS [ELEMENTS [wall|cpu]]]\n");
        return 2;
    }
    a = malloc((size_t)n_elem * sizeof *a);
    b = malloc((size_t)n_elem * sizeof *b);
    c = malloc((size_t)n_elem * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "membw: out of memory\n");
        return 1;
    }
    pthread_barrier_init(&bar, NULL, (unsigned)n_threads);
    pthread_t th[256];
    for (long i = 0; i < n_threads; i++) pthread_create(&th[i], NULL, worker, (void *)i);
    for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
    double s = 0;
    for (int i = 0; i < n_threads; i++) s += sums[i];
    printf("threads %d elements %ld checksum %.0f\n", n_threads, n_elem, s);
    printf("triad_gbs %.2f\n", 24.0 * (double)n_elem / t_triad / 1e9);
    printf("read_gbs %.2f\n", 8.0 * (double)n_elem / t_read / 1e9);
    return 0;
}
