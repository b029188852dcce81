/*
 * vec.c - scalar versions and the run-time choice of the vec.h primitives.
 */
#include "kernels/vec.h"

#include <pthread.h>
#include <string.h>

#include "quant/quant.h"

float ms_vec_dot_avx2(int64_t n, const float *x, const float *y);
float ms_vec_dot_avx512(int64_t n, const float *x, const float *y);
void ms_vec_axpy_avx2(int64_t n, float a, const float *x, float *y);
void ms_vec_axpy_avx512(int64_t n, float a, const float *x, float *y);

static float dot_scalar(int64_t n, const float *x, const float *y) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

static void axpy_scalar(int64_t n, float a, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static float (*g_dot)(int64_t, const float *, const float *) = dot_scalar;
static void (*g_axpy)(int64_t, float, const float *, float *) = axpy_scalar;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void pick(void) {
    const char *isa = ms_quant_isa();
    if (!strcmp(isa, "avx512")) {
        g_dot = ms_vec_dot_avx512;
        g_axpy = ms_vec_axpy_avx512;
    } else if (!strcmp(isa, "avx2")) {
        g_dot = ms_vec_dot_avx2;
        g_axpy = ms_vec_axpy_avx2;
    }
}

float ms_vec_dot(int64_t n, const float *x, const float *y) {
    pthread_once(&g_once, pick);
    return g_dot(n, x, y);
}

void ms_vec_axpy(int64_t n, float a, const float *x, float *y) {
    pthread_once(&g_once, pick);
    g_axpy(n, a, x, y);
}

float ms_vec_dot_isa(int isa, int64_t n, const float *x, const float *y) {
    return isa == 2 ? ms_vec_dot_avx512(n, x, y) : isa == 1 ? ms_vec_dot_avx2(n, x, y)
                                                           : dot_scalar(n, x, y);
}

void ms_vec_axpy_isa(int isa, int64_t n, float a, const float *x, float *y) {
    if (isa == 2) ms_vec_axpy_avx512(n, a, x, y);
    else if (isa == 1) ms_vec_axpy_avx2(n, a, x, y);
    else axpy_scalar(n, a, x, y);
}
