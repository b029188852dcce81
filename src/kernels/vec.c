/*
 * vec.c - scalar versions and the run-time choice of the vec.h primitives.
 */
#include "kernels/vec.h"

#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <string.h>

#include "kernels/vec_expf.h"
#include "quant/quant.h"

float ms_vec_dot_avx2(int64_t n, const float *x, const float *y);
float ms_vec_dot_avx512(int64_t n, const float *x, const float *y);
void ms_vec_axpy_avx2(int64_t n, float a, const float *x, float *y);
void ms_vec_axpy_avx512(int64_t n, float a, const float *x, float *y);
void ms_vec_dot_rows_avx2(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out);
void ms_vec_dot_rows_avx512(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out);
void ms_vec_axpy_rows_avx2(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y);
void ms_vec_axpy_rows_avx512(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y);

static float dot_scalar(int64_t n, const float *x, const float *y) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

static void axpy_scalar(int64_t n, float a, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void dot_rows_scalar(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out) {
    for (int64_t k = 0; k < n_rows; k++) out[k] = dot_scalar(n, x, rows[k]);
}

static void axpy_rows_scalar(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y) {
    for (int64_t k = 0; k < n_rows; k++) axpy_scalar(n, w[k], rows[k], y);
}

void ms_vec_dot_rows_x4_avx512(int64_t n, const float *const x[4], const float *const *rows, int64_t n_rows,
                               float *const out[4]);
void ms_vec_axpy_rows_x2_avx512(int64_t n, const float *const w[2], const float *const *rows, int64_t n_rows,
                                float *const y[2]);

void ms_vec_relu_scores_avx2(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                             int64_t key_stride, int64_t n_keys, float *out);
void ms_vec_relu_scores_avx512(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                               int64_t key_stride, int64_t n_keys, float *out);

/* vec.h's numerics written out; fmaf is the SIMD kernels' FMA, rounded once. */
static void relu_scores_scalar(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                               int64_t key_stride, int64_t n_keys, float *out) {
    for (int64_t m = 0; m < n_keys; m++) {
        const float *k = keys + m * key_stride;
        float s[16] = {0};
        for (int64_t g = 0; g < hp; g += 16)
            for (int l = 0; l < 16; l++) {
                float acc = 0.0f;
                for (int64_t c = 0; c < d; c++) acc = fmaf(qT[c * hp + g + l], k[c], acc);
                s[l] += (acc > 0.0f ? acc : 0.0f) * w[g + l];
            }
        for (int l = 0; l < 8; l++) s[l] += s[l + 8];
        for (int l = 0; l < 4; l++) s[l] += s[l + 4];
        for (int l = 0; l < 2; l++) s[l] += s[l + 2];
        out[m] = s[0] + s[1];
    }
}

float ms_vec_exp_sum_avx2(int64_t n, float *x, float m);
float ms_vec_exp_sum_avx512(int64_t n, float *x, float m);
void ms_vec_swiglu_avx2(int64_t n, float *out, const float *gate, const float *up, float limit);
void ms_vec_swiglu_avx512(int64_t n, float *out, const float *gate, const float *up, float limit);

/* 2^k for k in [-126, 127], from its exponent bits */
static float pow2i(int k) {
    const uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float ms_expf(float x) {
    if (x != x) return x;
    x = x < MS_EXPF_LO ? MS_EXPF_LO : x > MS_EXPF_HI ? MS_EXPF_HI : x;
    const float n = rintf(x * MS_EXPF_LOG2E);
    float r = fmaf(n, -MS_EXPF_C1, x);
    r = fmaf(n, -MS_EXPF_C2, r);
    float p = fmaf(MS_EXPF_P0, r, MS_EXPF_P1);
    p = fmaf(p, r, MS_EXPF_P2);
    p = fmaf(p, r, MS_EXPF_P3);
    p = fmaf(p, r, MS_EXPF_P4);
    p = fmaf(p, r, MS_EXPF_P5);
    p = fmaf(p, r * r, r) + 1.0f;
    const int k = (int)n, k1 = k >> 1; /* arithmetic shift: floor(k / 2) */
    return (p * pow2i(k1)) * pow2i(k - k1);
}

static float exp_sum_scalar(int64_t n, float *x, float m) {
    float s[16] = {0};
    for (int64_t i = 0; i < n; i++) {
        x[i] = ms_expf(x[i] - m);
        s[i % 16] += x[i];
    }
    for (int l = 0; l < 8; l++) s[l] += s[l + 8];
    for (int l = 0; l < 4; l++) s[l] += s[l + 4];
    for (int l = 0; l < 2; l++) s[l] += s[l + 2];
    return s[0] + s[1];
}

static void swiglu_scalar(int64_t n, float *out, const float *gate, const float *up, float limit) {
    const bool clamp = limit > 1e-6f;
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i];
        if (clamp) {
            g = g < limit ? g : limit;
            u = u > -limit ? u : -limit;
            u = u < limit ? u : limit;
        }
        out[i] = (g / (1.0f + ms_expf(-g))) * u;
    }
}

static double sum_sq_scalar(int64_t n, const float *x) {
    double s[8] = {0};
    for (int64_t i = 0; i < n; i++) s[i % 8] += (double)(x[i] * x[i]);
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static void scale_scalar(int64_t n, float *y, const float *x, float a, const float *w) {
    if (w) {
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * a) * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * a;
    }
}

static void mix_rows_scalar(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                            int64_t x_stride, int n_k) {
    for (int64_t i = 0; i < n; i++) {
        float acc = f ? a * f[i] : 0.0f;
        for (int k = 0; k < n_k; k++) acc += c[k] * x[k * x_stride + i];
        y[i] = acc;
    }
}

double ms_vec_sum_sq_avx2(int64_t n, const float *x);
double ms_vec_sum_sq_avx512(int64_t n, const float *x);
void ms_vec_scale_avx2(int64_t n, float *y, const float *x, float a, const float *w);
void ms_vec_scale_avx512(int64_t n, float *y, const float *x, float a, const float *w);
void ms_vec_mix_rows_avx2(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                          int64_t x_stride, int n_k);
void ms_vec_mix_rows_avx512(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                            int64_t x_stride, int n_k);
typedef double (*sum_sq_fn)(int64_t, const float *);
typedef void (*scale_fn)(int64_t, float *, const float *, float, const float *);
typedef void (*mix_rows_fn)(int64_t, float *, float, const float *, const float *, const float *, int64_t, int);

typedef void (*relu_scores_fn)(int64_t, int64_t, const float *, const float *, const float *, int64_t, int64_t,
                               float *);

typedef void (*dot_rows_fn)(int64_t, const float *, const float *const *, int64_t, float *);
typedef void (*axpy_rows_fn)(int64_t, const float *, const float *const *, int64_t, float *);

typedef void (*dot_rows_x4_fn)(int64_t, const float *const[4], const float *const *, int64_t, float *const[4]);
typedef void (*axpy_rows_x2_fn)(int64_t, const float *const[2], const float *const *, int64_t, float *const[2]);

/* The AVX2 and scalar sets: their row forms, query by query. */
static void dot_rows_x4_avx2(int64_t n, const float *const x[4], const float *const *rows, int64_t n_rows,
                             float *const out[4]) {
    for (int h = 0; h < 4; h++) ms_vec_dot_rows_avx2(n, x[h], rows, n_rows, out[h]);
}
static void axpy_rows_x2_avx2(int64_t n, const float *const w[2], const float *const *rows, int64_t n_rows,
                              float *const y[2]) {
    for (int h = 0; h < 2; h++) ms_vec_axpy_rows_avx2(n, w[h], rows, n_rows, y[h]);
}
static void dot_rows_x4_scalar(int64_t n, const float *const x[4], const float *const *rows, int64_t n_rows,
                               float *const out[4]) {
    for (int h = 0; h < 4; h++) dot_rows_scalar(n, x[h], rows, n_rows, out[h]);
}
static void axpy_rows_x2_scalar(int64_t n, const float *const w[2], const float *const *rows, int64_t n_rows,
                                float *const y[2]) {
    for (int h = 0; h < 2; h++) axpy_rows_scalar(n, w[h], rows, n_rows, y[h]);
}

static float (*g_dot)(int64_t, const float *, const float *) = dot_scalar;
static void (*g_axpy)(int64_t, float, const float *, float *) = axpy_scalar;
static dot_rows_fn g_dot_rows = dot_rows_scalar;
static axpy_rows_fn g_axpy_rows = axpy_rows_scalar;
static dot_rows_x4_fn g_dot_rows_x4 = dot_rows_x4_scalar;
static axpy_rows_x2_fn g_axpy_rows_x2 = axpy_rows_x2_scalar;
static relu_scores_fn g_relu_scores = relu_scores_scalar;
static float (*g_exp_sum)(int64_t, float *, float) = exp_sum_scalar;
static void (*g_swiglu)(int64_t, float *, const float *, const float *, float) = swiglu_scalar;
static sum_sq_fn g_sum_sq = sum_sq_scalar;
static scale_fn g_scale = scale_scalar;
static mix_rows_fn g_mix_rows = mix_rows_scalar;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void pick(void) {
    const char *isa = ms_quant_isa();
    if (!strcmp(isa, "avx512")) {
        g_dot = ms_vec_dot_avx512;
        g_axpy = ms_vec_axpy_avx512;
        g_dot_rows = ms_vec_dot_rows_avx512;
        g_axpy_rows = ms_vec_axpy_rows_avx512;
        g_dot_rows_x4 = ms_vec_dot_rows_x4_avx512;
        g_axpy_rows_x2 = ms_vec_axpy_rows_x2_avx512;
        g_relu_scores = ms_vec_relu_scores_avx512;
        g_exp_sum = ms_vec_exp_sum_avx512;
        g_swiglu = ms_vec_swiglu_avx512;
        g_sum_sq = ms_vec_sum_sq_avx512;
        g_scale = ms_vec_scale_avx512;
        g_mix_rows = ms_vec_mix_rows_avx512;
    } else if (!strcmp(isa, "avx2")) {
        g_dot = ms_vec_dot_avx2;
        g_axpy = ms_vec_axpy_avx2;
        g_dot_rows = ms_vec_dot_rows_avx2;
        g_axpy_rows = ms_vec_axpy_rows_avx2;
        g_dot_rows_x4 = dot_rows_x4_avx2;
        g_axpy_rows_x2 = axpy_rows_x2_avx2;
        g_relu_scores = ms_vec_relu_scores_avx2;
        g_exp_sum = ms_vec_exp_sum_avx2;
        g_swiglu = ms_vec_swiglu_avx2;
        g_sum_sq = ms_vec_sum_sq_avx2;
        g_scale = ms_vec_scale_avx2;
        g_mix_rows = ms_vec_mix_rows_avx2;
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

void ms_vec_dot_rows(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out) {
    pthread_once(&g_once, pick);
    g_dot_rows(n, x, rows, n_rows, out);
}

void ms_vec_axpy_rows(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y) {
    pthread_once(&g_once, pick);
    g_axpy_rows(n, w, rows, n_rows, y);
}

void ms_vec_dot_rows_x4(int64_t n, const float *const x[4], const float *const *rows, int64_t n_rows,
                        float *const out[4]) {
    pthread_once(&g_once, pick);
    g_dot_rows_x4(n, x, rows, n_rows, out);
}

void ms_vec_axpy_rows_x2(int64_t n, const float *const w[2], const float *const *rows, int64_t n_rows,
                         float *const y[2]) {
    pthread_once(&g_once, pick);
    g_axpy_rows_x2(n, w, rows, n_rows, y);
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

void ms_vec_dot_rows_isa(int isa, int64_t n, const float *x, const float *const *rows, int64_t n_rows,
                         float *out) {
    const dot_rows_fn f = isa == 2 ? ms_vec_dot_rows_avx512 : isa == 1 ? ms_vec_dot_rows_avx2 : dot_rows_scalar;
    f(n, x, rows, n_rows, out);
}

void ms_vec_axpy_rows_isa(int isa, int64_t n, const float *w, const float *const *rows, int64_t n_rows,
                          float *y) {
    const axpy_rows_fn f = isa == 2 ? ms_vec_axpy_rows_avx512 : isa == 1 ? ms_vec_axpy_rows_avx2 : axpy_rows_scalar;
    f(n, w, rows, n_rows, y);
}

void ms_vec_dot_rows_x4_isa(int isa, int64_t n, const float *const x[4], const float *const *rows,
                            int64_t n_rows, float *const out[4]) {
    const dot_rows_x4_fn f = isa == 2 ? ms_vec_dot_rows_x4_avx512 : isa == 1 ? dot_rows_x4_avx2 : dot_rows_x4_scalar;
    f(n, x, rows, n_rows, out);
}

void ms_vec_axpy_rows_x2_isa(int isa, int64_t n, const float *const w[2], const float *const *rows,
                             int64_t n_rows, float *const y[2]) {
    const axpy_rows_x2_fn f = isa == 2 ? ms_vec_axpy_rows_x2_avx512 : isa == 1 ? axpy_rows_x2_avx2 : axpy_rows_x2_scalar;
    f(n, w, rows, n_rows, y);
}

void ms_vec_relu_scores(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                        int64_t key_stride, int64_t n_keys, float *out) {
    pthread_once(&g_once, pick);
    g_relu_scores(d, hp, qT, w, keys, key_stride, n_keys, out);
}

void ms_vec_relu_scores_isa(int isa, int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                            int64_t key_stride, int64_t n_keys, float *out) {
    const relu_scores_fn f = isa == 2 ? ms_vec_relu_scores_avx512 : isa == 1 ? ms_vec_relu_scores_avx2
                                                                            : relu_scores_scalar;
    f(d, hp, qT, w, keys, key_stride, n_keys, out);
}

float ms_vec_exp_sum(int64_t n, float *x, float m) {
    pthread_once(&g_once, pick);
    return g_exp_sum(n, x, m);
}

void ms_vec_swiglu(int64_t n, float *out, const float *gate, const float *up, float limit) {
    pthread_once(&g_once, pick);
    g_swiglu(n, out, gate, up, limit);
}

float ms_vec_exp_sum_isa(int isa, int64_t n, float *x, float m) {
    return isa == 2 ? ms_vec_exp_sum_avx512(n, x, m) : isa == 1 ? ms_vec_exp_sum_avx2(n, x, m)
                                                               : exp_sum_scalar(n, x, m);
}

void ms_vec_swiglu_isa(int isa, int64_t n, float *out, const float *gate, const float *up, float limit) {
    if (isa == 2) ms_vec_swiglu_avx512(n, out, gate, up, limit);
    else if (isa == 1) ms_vec_swiglu_avx2(n, out, gate, up, limit);
    else swiglu_scalar(n, out, gate, up, limit);
}

double ms_vec_sum_sq(int64_t n, const float *x) {
    pthread_once(&g_once, pick);
    return g_sum_sq(n, x);
}

void ms_vec_scale(int64_t n, float *y, const float *x, float a, const float *w) {
    pthread_once(&g_once, pick);
    g_scale(n, y, x, a, w);
}

void ms_vec_mix_rows(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                     int64_t x_stride, int n_k) {
    pthread_once(&g_once, pick);
    g_mix_rows(n, y, a, f, c, x, x_stride, n_k);
}

double ms_vec_sum_sq_isa(int isa, int64_t n, const float *x) {
    return isa == 2 ? ms_vec_sum_sq_avx512(n, x) : isa == 1 ? ms_vec_sum_sq_avx2(n, x) : sum_sq_scalar(n, x);
}

void ms_vec_scale_isa(int isa, int64_t n, float *y, const float *x, float a, const float *w) {
    const scale_fn f = isa == 2 ? ms_vec_scale_avx512 : isa == 1 ? ms_vec_scale_avx2 : scale_scalar;
    f(n, y, x, a, w);
}

void ms_vec_mix_rows_isa(int isa, int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                         int64_t x_stride, int n_k) {
    const mix_rows_fn fn = isa == 2 ? ms_vec_mix_rows_avx512 : isa == 1 ? ms_vec_mix_rows_avx2 : mix_rows_scalar;
    fn(n, y, a, f, c, x, x_stride, n_k);
}
