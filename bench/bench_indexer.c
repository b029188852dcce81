/*
 * bench_indexer.c - the lightning indexer's scores for one token against
 * n_keys compressed rows, two ways, on one thread:
 *   rows   per key, ms_vec_dot_rows against the H query heads (each dot ends
 *          in a horizontal sum), then sum_h w_h max(0, dot_h) in head order
 *          (moestream's form before the heads went into SIMD lanes);
 *   lanes  ms_vec_relu_scores: the queries transposed once, [d][H], each
 *          key broadcast against them (the engine's form).
 * Keys are seeded random floats (a working set of n_keys x d x 4 bytes:
 * 4 MiB at Flash's d 128 and 8192 keys, i.e. a 32 K-token context).
 * Repeats each form for --min-time seconds; prints CSV:
 *   form,heads,dim,keys,seconds_best,gflops_best   (gflops = 2 H d keys / s)
 *
 * usage: bench_indexer [--heads 64] [--dim 128] [--keys 8192] [--min-time 1]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/vec.h"
#include "util/mem.h"
#include "util/rng.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void scores_rows(int64_t d, int64_t H, const float *const *qh, const float *w, const float *keys,
                        int64_t n_keys, float *dot, float *out) {
    for (int64_t m = 0; m < n_keys; m++) {
        ms_vec_dot_rows(d, keys + m * d, qh, H, dot);
        float acc = 0.0f;
        for (int64_t h = 0; h < H; h++) acc += w[h] * (dot[h] > 0.0f ? dot[h] : 0.0f);
        out[m] = acc;
    }
}

int main(int argc, char **argv) {
    long H = 64, d = 128, n_keys = 8192;
    double min_time = 1.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--heads")) H = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--dim")) d = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--keys")) n_keys = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-time")) min_time = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_indexer [--heads H] [--dim D] [--keys N] [--min-time S]\n");
            return 2;
        }
    }
    if (H < 1 || H > 4096 || d < 1 || n_keys < 1 || !(min_time > 0)) {
        fprintf(stderr, "bench_indexer: bad sizes\n");
        return 2;
    }
    const int64_t hp = (H + 15) / 16 * 16;
    float *q = ms_aligned_alloc(MS_ALIGN, (size_t)(H * d) * sizeof(float));
    float *qT = ms_aligned_alloc(MS_ALIGN, (size_t)(hp * d) * sizeof(float));
    float *w = ms_aligned_alloc(MS_ALIGN, (size_t)hp * sizeof(float));
    float *keys = ms_aligned_alloc(MS_ALIGN, (size_t)(n_keys * d) * sizeof(float));
    float *out = ms_aligned_alloc(MS_ALIGN, (size_t)n_keys * sizeof(float));
    float *dot = ms_aligned_alloc(MS_ALIGN, (size_t)H * sizeof(float));
    const float **qh = malloc((size_t)H * sizeof *qh);
    if (!q || !qT || !w || !keys || !out || !dot || !qh) {
        fprintf(stderr, "bench_indexer: out of memory\n");
        return 1;
    }
    ms_rng r;
    ms_rng_seed(&r, 42);
    ms_rng_fill_normal(&r, q, H * d, 1.0f);
    ms_rng_fill_normal(&r, w, hp, 1.0f);
    ms_rng_fill_normal(&r, keys, n_keys * d, 1.0f);
    for (int64_t h = 0; h < H; h++) qh[h] = q + h * d;
    for (int64_t h = H; h < hp; h++) w[h] = 0.0f;
    printf("form,heads,dim,keys,seconds_best,gflops_best\n");
    for (int form = 0; form < 2; form++) {
        double best = 1e30, t_end = now() + min_time;
        do {
            const double t0 = now();
            if (form == 0) {
                scores_rows(d, H, qh, w, keys, n_keys, dot, out);
            } else {
                for (int64_t c = 0; c < d; c++)
                    for (int64_t h = 0; h < hp; h++) qT[c * hp + h] = h < H ? q[h * d + c] : 0.0f;
                ms_vec_relu_scores(d, hp, qT, w, keys, d, n_keys, out);
            }
            const double t = now() - t0;
            if (t < best) best = t;
        } while (now() < t_end);
        printf("%s,%ld,%ld,%ld,%.6g,%.2f\n", form ? "lanes" : "rows", H, d, n_keys, best,
               2.0 * (double)H * (double)d * (double)n_keys / best * 1e-9);
    }
    return 0;
}
