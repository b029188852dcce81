/*
 * bench_kernels.c - moestream's matmul (kernels/matmul.h) per weight format,
 * for bench/limits: a rows x cols weight matrix of seeded random values
 * quantized to each format, times f32 activations of batch 1 (decode) and
 * batch 512 (prefill), fast mode (activations converted to the format's
 * vec_dot_type, as the engine runs; --activations f32: the dot products
 * against the f32 activations, as quality mode runs; --activations q16:
 * 16-bit integer activations, as fast mode's accuracy-sensitive dense
 * products take with Q8_0 weights, f32 for other types), on T threads of
 * moestream's pool.
 * Repeats each product until --min-time has passed and reports the mean
 * and the fastest repetition (on a shared machine the best repetition is
 * the one least disturbed by other processes, as membw's best-of-8).
 * The weights are copied until they fill --working-set bytes (default
 * 512 MiB, far above any last-level cache) and the products walk the
 * copies in turn, so batch 1 measures weights streamed from memory, as in
 * decode, not a matrix that stays in cache. --order random visits the
 * copies in a scattered order (a stride coprime to their count), as a
 * decode step reads its experts from all over a file: every product then
 * starts a new stream that the hardware prefetchers have not seen.
 *
 * usage: bench_kernels [-t THREADS] [--types f32,q8_0,...] [--rows R]
 *                      [--cols C] [--batches 1,512] [--min-time S]
 *                      [--working-set MIB] [--clock wall|cpu]
 *                      [--activations converted|f32|q16] [--order seq|random]
 * out:   CSV on stdout: type,batch,threads,rows,cols,seconds,gflops,weight_gbs,
 *        best_seconds,best_gflops,best_weight_gbs (gflops = 2 rows cols batch /
 *        time; weight_gbs = weight bytes / time, 10^9 units; seconds is the
 *        mean, best_* the fastest repetition). Types without a quantizer
 *        (from_float) are skipped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/matmul.h"
#include "quant/quant.h"
#include "util/mem.h"
#include "util/pool.h"

/* --clock cpu: this process's CPU time divided by the thread count, i.e.
 * the time the product would take if each thread had a core to itself;
 * on a machine shared with other busy processes, wall time mostly measures
 * the queue for the cores. */
static int g_cpu_clock, g_threads = 1;
static enum ms_act g_act = MS_ACT_QUANT; /* --activations */

/* The stride between the copies consecutive products read: 1 (in turn),
 * or for --order random one near 0.618 of their count made coprime to it,
 * so that consecutive products are far apart and every copy is visited. */
static size_t copy_stride(size_t copies, int random) {
    if (!random || copies < 3) return 1;
    size_t stride = (size_t)((double)copies * 0.6180339887) | 1;
    for (;;) {
        size_t a = stride, b = copies;
        while (b) {
            const size_t t = a % b;
            a = b;
            b = t;
        }
        if (a == 1) return stride;
        stride += 2;
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    const double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return g_cpu_clock ? t / g_threads : t;
}

/* xorshift uniform in [-1, 1) */
static float rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

int main(int argc, char **argv) {
    int threads = 1;
    const char *types = "f32,f16,bf16,q8_0,q6_K,q5_K,q4_K,q3_K,q2_K,iq4_xs,iq2_xxs,mxfp4", *batches = "1,512";
    long rows = 2048, cols = 4096;
    double min_time = 0.5;
    long working_set_mib = 512;
    int random_order = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        i++;
        if (!strcmp(k, "-t")) threads = atoi(v);
        else if (!strcmp(k, "--types")) types = v;
        else if (!strcmp(k, "--rows")) rows = atol(v);
        else if (!strcmp(k, "--cols")) cols = atol(v);
        else if (!strcmp(k, "--batches")) batches = v;
        else if (!strcmp(k, "--min-time")) min_time = atof(v);
        else if (!strcmp(k, "--working-set")) working_set_mib = atol(v);
        else if (!strcmp(k, "--clock") && (!strcmp(v, "cpu") || !strcmp(v, "wall")))
            g_cpu_clock = !strcmp(v, "cpu");
        else if (!strcmp(k, "--activations") && !strcmp(v, "converted")) g_act = MS_ACT_QUANT;
        else if (!strcmp(k, "--activations") && !strcmp(v, "f32")) g_act = MS_ACT_F32;
        else if (!strcmp(k, "--activations") && !strcmp(v, "q16")) g_act = MS_ACT_Q16;
        else if (!strcmp(k, "--order") && (!strcmp(v, "seq") || !strcmp(v, "random")))
            random_order = !strcmp(v, "random");
        else goto usage;
    }
    if (threads < 1 || rows < 1 || cols < 256 || cols % 256 || !(min_time > 0) ||
        working_set_mib < 0)
        goto usage;
    g_threads = threads;
    ms_quant_init();
    ms_err err = {0};
    struct ms_pool *pool = NULL;
    if (ms_pool_new(&pool, threads, &err)) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        return 1;
    }
    struct ms_matmul_ctx mm = {.pool = pool};
    long max_batch = 1;
    for (const char *p = batches; *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
        if (atol(p) > max_batch) max_batch = atol(p);
    float *w32 = malloc((size_t)rows * cols * sizeof *w32);
    float *x = malloc((size_t)max_batch * cols * sizeof *x);
    float *y = malloc((size_t)max_batch * rows * sizeof *y);
    if (!w32 || !x || !y) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        return 1;
    }
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (long i = 0; i < rows * cols; i++) w32[i] = 0.05f * rnd(&seed);
    for (long i = 0; i < max_batch * cols; i++) x[i] = rnd(&seed);
    printf("type,batch,threads,rows,cols,seconds,gflops,weight_gbs,best_seconds,best_gflops,"
           "best_weight_gbs\n");
    char list[512];
    snprintf(list, sizeof list, "%s", types);
    for (char *tn = strtok(list, ","); tn; tn = strtok(NULL, ",")) {
        enum ms_type t;
        const struct ms_type_traits *tr;
        if (ms_type_from_name(tn, &t) || !(tr = ms_type_traits(t)) || !tr->has_kernels ||
            !tr->from_float) {
            fprintf(stderr, "bench_kernels: skipping %s (no kernels or quantizer)\n", tn);
            continue;
        }
        const size_t row_bytes = ms_row_size(t, cols), mat_bytes = row_bytes * (size_t)rows;
        size_t copies = mat_bytes ? ((size_t)working_set_mib << 20) / mat_bytes : 1;
        if (copies < 1) copies = 1;
        const size_t stride = copy_stride(copies, random_order);
        void *w = ms_aligned_alloc(64, mat_bytes * copies);
        if (!w || !row_bytes) {
            fprintf(stderr, "bench_kernels: cannot hold %s weights\n", tn);
            return 1;
        }
        for (long r = 0; r < rows; r++)
            tr->from_float(w32 + r * cols, (char *)w + r * row_bytes, cols);
        for (size_t c = 1; c < copies; c++) memcpy((char *)w + c * mat_bytes, w, mat_bytes);
        for (const char *p = batches; *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
            const long nb = atol(p);
            if (nb < 1) continue;
            struct ms_mat m = {.data = w, .type = t, .n_rows = rows, .n_cols = cols,
                               .row_stride = row_bytes};
            if (ms_matmul(&mm, &m, x, cols, nb, y, rows, g_act, &err)) { /* warm-up */
                fprintf(stderr, "bench_kernels: %s: %s\n", tn, err.msg);
                return 1;
            }
            long reps = 0;
            const double t0 = now();
            double dt, best = 1e30, tp = t0;
            do {
                m.data = (const char *)w + (size_t)(((unsigned long long)reps * stride) % copies) * mat_bytes;
                ms_matmul(&mm, &m, x, cols, nb, y, rows, g_act, &err);
                reps++;
                const double t_now = now();
                if (t_now - tp < best) best = t_now - tp;
                tp = t_now;
                dt = t_now - t0;
            } while (dt < min_time);
            const double s = dt / (double)reps;
            const double flop = 2.0 * (double)rows * (double)cols * (double)nb;
            printf("%s,%ld,%d,%ld,%ld,%.6g,%.3f,%.3f,%.6g,%.3f,%.3f\n", tr->name, nb, threads, rows,
                   cols, s, flop / s / 1e9, (double)mat_bytes / s / 1e9, best, flop / best / 1e9,
                   (double)mat_bytes / best / 1e9);
            fflush(stdout);
        }
        ms_free(w);
    }
    ms_matmul_ctx_free(&mm);
    ms_pool_free(pool);
    free(w32);
    free(x);
    free(y);
    return 0;
usage:
    fprintf(stderr, "usage: bench_kernels [-t THREADS] [--types f32,q8_0,...] [--rows R] "
                    "[--cols C (multiple of 256)] [--batches 1,512] [--min-time S] "
                    "[--working-set MIB] [--clock wall|cpu] [--activations converted|f32|q16]\n"
                    "                     [--order seq|random]\n");
    return 2;
}
