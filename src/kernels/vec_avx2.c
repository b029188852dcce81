/* vec_avx2.c - AVX2/FMA versions of the vec.h primitives (8 floats a step,
 * four accumulators for the dot to hide FMA latency). The row forms
 * perform each row's operations exactly as the single calls do. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/vec.h"
#include "kernels/vec_expf.h"

float ms_vec_dot_avx2(int64_t n, const float *x, const float *y);
void ms_vec_axpy_avx2(int64_t n, float a, const float *x, float *y);
float ms_vec_exp_sum_avx2(int64_t n, float *x, float m);
void ms_vec_swiglu_avx2(int64_t n, float *out, const float *gate, const float *up, float limit);
void ms_vec_dot_rows_avx2(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out);
void ms_vec_axpy_rows_avx2(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y);
void ms_vec_relu_scores_avx2(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                             int64_t key_stride, int64_t n_keys, float *out);

double ms_vec_sum_sq_avx2(int64_t n, const float *x);
void ms_vec_scale_avx2(int64_t n, float *y, const float *x, float a, const float *w);
void ms_vec_mix_rows_avx2(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                          int64_t x_stride, int n_k);

float ms_vec_dot_avx2(int64_t n, const float *x, const float *y) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k),
                                     acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float r = _mm_cvtss_f32(h);
    for (; i < n; i++) r += x[i] * y[i];
    return r;
}

void ms_vec_dot_rows_avx2(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out) {
    for (int64_t k = 0; k < n_rows; k++) out[k] = ms_vec_dot_avx2(n, x, rows[k]);
}

void ms_vec_axpy_avx2(int64_t n, float a, const float *x, float *y) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* y kept in registers, 8 vectors (64 floats) at a time, across all rows;
 * the scalar tail as ms_vec_axpy's (a multiply, then an add). */
void ms_vec_axpy_rows_avx2(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m256 acc[8];
        for (int v = 0; v < 8; v++) acc[v] = _mm256_loadu_ps(y + i + 8 * v);
        for (int64_t k = 0; k < n_rows; k++) {
            const __m256 wk = _mm256_set1_ps(w[k]);
            const float *x = rows[k] + i;
            for (int v = 0; v < 8; v++) acc[v] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(x + 8 * v), acc[v]);
        }
        for (int v = 0; v < 8; v++) _mm256_storeu_ps(y + i + 8 * v, acc[v]);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(y + i);
        for (int64_t k = 0; k < n_rows; k++) acc = _mm256_fmadd_ps(_mm256_set1_ps(w[k]), _mm256_loadu_ps(rows[k] + i), acc);
        _mm256_storeu_ps(y + i, acc);
    }
    for (; i < n; i++) {
        float acc = y[i];
        for (int64_t k = 0; k < n_rows; k++) acc += w[k] * rows[k][i];
        y[i] = acc;
    }
}

/* ms_vec_relu_scores (vec.h): a group of 16 heads is two 8-lane halves;
 * two keys at a time (four chains per group); each (key, head) chain is
 * the same either way. */
static inline __attribute__((always_inline)) void relu_scores_k(int64_t d, int64_t hp, const float *qT,
                                                                const float *w, const float *const key[2],
                                                                float *out, const int K) {
    const __m256 zero = _mm256_setzero_ps();
    __m256 s_lo[2] = {zero, zero}, s_hi[2] = {zero, zero};
    for (int64_t g = 0; g < hp; g += 16) {
        __m256 lo[2] = {zero, zero}, hi[2] = {zero, zero};
        for (int64_t c = 0; c < d; c++) {
            const __m256 q0 = _mm256_loadu_ps(qT + c * hp + g), q1 = _mm256_loadu_ps(qT + c * hp + g + 8);
            for (int k = 0; k < K; k++) {
                const __m256 kb = _mm256_set1_ps(key[k][c]);
                lo[k] = _mm256_fmadd_ps(q0, kb, lo[k]);
                hi[k] = _mm256_fmadd_ps(q1, kb, hi[k]);
            }
        }
        const __m256 w0 = _mm256_loadu_ps(w + g), w1 = _mm256_loadu_ps(w + g + 8);
        for (int k = 0; k < K; k++) {
            s_lo[k] = _mm256_add_ps(s_lo[k], _mm256_mul_ps(_mm256_max_ps(lo[k], zero), w0));
            s_hi[k] = _mm256_add_ps(s_hi[k], _mm256_mul_ps(_mm256_max_ps(hi[k], zero), w1));
        }
    }
    for (int k = 0; k < K; k++) {
        const __m256 t8 = _mm256_add_ps(s_lo[k], s_hi[k]);
        const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
        const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
        out[k] = _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
    }
}

void ms_vec_relu_scores_avx2(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                             int64_t key_stride, int64_t n_keys, float *out) {
    int64_t m = 0;
    for (; m + 2 <= n_keys; m += 2) {
        const float *const key[2] = {keys + m * key_stride, keys + (m + 1) * key_stride};
        relu_scores_k(d, hp, qT, w, key, out + m, 2);
    }
    if (m < n_keys) {
        const float *const key[2] = {keys + m * key_stride, keys + m * key_stride};
        relu_scores_k(d, hp, qT, w, key, out + m, 1);
    }
}
/* ---- ms_expf's operations, 8 lanes (vec.h; constants in vec_expf.h); the
 * tails go through the scalar ms_expf, which performs the same steps ---- */

static inline __m256 pow2i8(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

static inline __m256 expf8(__m256 x) {
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 c = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(MS_EXPF_LO)), _mm256_set1_ps(MS_EXPF_HI));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(MS_EXPF_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-MS_EXPF_C1), c);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-MS_EXPF_C2), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(MS_EXPF_P0), r, _mm256_set1_ps(MS_EXPF_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXPF_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXPF_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXPF_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXPF_P5));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    const __m256i k = _mm256_cvtps_epi32(n), k1 = _mm256_srai_epi32(k, 1);
    const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, pow2i8(k1)), pow2i8(_mm256_sub_epi32(k, k1)));
    return _mm256_blendv_ps(e, x, nan);
}

float ms_vec_exp_sum_avx2(int64_t n, float *x, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps(); /* sums 0-7, 8-15 */
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        const __m256 b = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
        _mm256_storeu_ps(x + i, a);
        _mm256_storeu_ps(x + i + 8, b);
        lo = _mm256_add_ps(lo, a);
        hi = _mm256_add_ps(hi, b);
    }
    float s[16];
    _mm256_storeu_ps(s, lo);
    _mm256_storeu_ps(s + 8, hi);
    for (int l = 0; i < n; i++, l++) {
        x[i] = ms_expf(x[i] - m);
        s[l] += x[i];
    }
    for (int l = 0; l < 8; l++) s[l] += s[l + 8];
    for (int l = 0; l < 4; l++) s[l] += s[l + 4];
    for (int l = 0; l < 2; l++) s[l] += s[l + 2];
    return s[0] + s[1];
}

void ms_vec_swiglu_avx2(int64_t n, float *out, const float *gate, const float *up, float limit) {
    const bool clamp = limit > 1e-6f;
    const __m256 lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit);
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
        if (clamp) { /* minps / maxps: (a < b) ? a : b, a NaN a takes b */
            g = _mm256_min_ps(g, lim);
            u = _mm256_min_ps(_mm256_max_ps(u, nlim), lim);
        }
        const __m256 e = expf8(_mm256_xor_ps(g, sign));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u));
    }
    if (i < n) ms_vec_swiglu_isa(0, n - i, out + i, gate + i, up + i, limit); /* the scalar form */
}

/* Partial sums 0-3 in lo, 4-7 in hi: the squares of eight floats widened
 * to double, four to a register. */
double ms_vec_sum_sq_avx2(int64_t n, const float *x) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 sq = _mm256_mul_ps(v, v);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    double s[8];
    _mm256_storeu_pd(s, lo);
    _mm256_storeu_pd(s + 4, hi);
    for (int k = 0; i < n; i++, k++) s[k] += (double)(x[i] * x[i]);
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

void ms_vec_scale_avx2(int64_t n, float *y, const float *x, float a, const float *w) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), va), _mm256_loadu_ps(w + i)));
        for (; i < n; i++) y[i] = (x[i] * a) * w[i];
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
        for (; i < n; i++) y[i] = x[i] * a;
    }
}

void ms_vec_mix_rows_avx2(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                          int64_t x_stride, int n_k) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = f ? _mm256_mul_ps(va, _mm256_loadu_ps(f + i)) : _mm256_setzero_ps();
        for (int k = 0; k < n_k; k++)
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(c[k]), _mm256_loadu_ps(x + k * x_stride + i)));
        _mm256_storeu_ps(y + i, acc);
    }
    for (; i < n; i++) {
        float acc = f ? a * f[i] : 0.0f;
        for (int k = 0; k < n_k; k++) acc += c[k] * x[k * x_stride + i];
        y[i] = acc;
    }
}
