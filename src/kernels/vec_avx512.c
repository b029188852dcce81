/* vec_avx512.c - AVX-512 versions of the vec.h primitives (16 floats a step,
 * four accumulators for the dot, masked tails). The row forms perform each
 * row's operations exactly as the single calls do. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/vec_expf.h"

float ms_vec_dot_avx512(int64_t n, const float *x, const float *y);
void ms_vec_axpy_avx512(int64_t n, float a, const float *x, float *y);
void ms_vec_dot_rows_avx512(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out);
float ms_vec_exp_sum_avx512(int64_t n, float *x, float m);
void ms_vec_swiglu_avx512(int64_t n, float *out, const float *gate, const float *up, float limit);
void ms_vec_axpy_rows_avx512(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y);
void ms_vec_dot_rows_x4_avx512(int64_t n, const float *const x[4], const float *const *rows, int64_t n_rows,
                               float *const out[4]);
void ms_vec_axpy_rows_x2_avx512(int64_t n, const float *const w[2], const float *const *rows, int64_t n_rows,
                                float *const y[2]);
void ms_vec_relu_scores_avx512(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                               int64_t key_stride, int64_t n_keys, float *out);

double ms_vec_sum_sq_avx512(int64_t n, const float *x);
void ms_vec_scale_avx512(int64_t n, float *y, const float *x, float a, const float *w);
void ms_vec_mix_rows_avx512(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                            int64_t x_stride, int n_k);

static inline float reduce4(const __m512 acc[4]) {
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* dot(x, y[k]) for k < R (1 or 2, a constant): x's loads shared. */
static inline __attribute__((always_inline)) void dot_n(int64_t n, const float *x, const float *const y[2],
                                                        float *s, const int R) {
    __m512 acc[2][4];
    for (int r = 0; r < R; r++)
        for (int k = 0; k < 4; k++) acc[r][k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 4; k++) {
            const __m512 xv = _mm512_loadu_ps(x + i + 16 * k);
            for (int r = 0; r < R; r++) acc[r][k] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(y[r] + i + 16 * k), acc[r][k]);
        }
    for (; i + 16 <= n; i += 16) {
        const __m512 xv = _mm512_loadu_ps(x + i);
        for (int r = 0; r < R; r++) acc[r][0] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(y[r] + i), acc[r][0]);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
        for (int r = 0; r < R; r++) acc[r][1] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, y[r] + i), acc[r][1]);
    }
    for (int r = 0; r < R; r++) s[r] = reduce4(acc[r]);
}

float ms_vec_dot_avx512(int64_t n, const float *x, const float *y) {
    const float *const y1[2] = {y, y};
    float s;
    dot_n(n, x, y1, &s, 1);
    return s;
}

void ms_vec_dot_rows_avx512(int64_t n, const float *x, const float *const *rows, int64_t n_rows, float *out) {
    int64_t k = 0;
    for (; k + 2 <= n_rows; k += 2) dot_n(n, x, rows + k, out + k, 2);
    if (k < n_rows) {
        const float *const y1[2] = {rows[k], rows[k]};
        dot_n(n, x, y1, out + k, 1);
    }
}

void ms_vec_axpy_avx512(int64_t n, float a, const float *x, float *y) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i),
                                              _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* y kept in registers, 8 vectors (128 floats) at a time, across all rows:
 * each element sees the FMAs of n_rows ms_vec_axpy calls, in row order. */
void ms_vec_axpy_rows_avx512(int64_t n, const float *w, const float *const *rows, int64_t n_rows, float *y) {
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m512 acc[8];
        for (int v = 0; v < 8; v++) acc[v] = _mm512_loadu_ps(y + i + 16 * v);
        for (int64_t k = 0; k < n_rows; k++) {
            const __m512 wk = _mm512_set1_ps(w[k]);
            const float *x = rows[k] + i;
            for (int v = 0; v < 8; v++) acc[v] = _mm512_fmadd_ps(wk, _mm512_loadu_ps(x + 16 * v), acc[v]);
        }
        for (int v = 0; v < 8; v++) _mm512_storeu_ps(y + i + 16 * v, acc[v]);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 acc = _mm512_loadu_ps(y + i);
        for (int64_t k = 0; k < n_rows; k++) acc = _mm512_fmadd_ps(_mm512_set1_ps(w[k]), _mm512_loadu_ps(rows[k] + i), acc);
        _mm512_storeu_ps(y + i, acc);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 acc = _mm512_maskz_loadu_ps(m, y + i);
        for (int64_t k = 0; k < n_rows; k++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(w[k]), _mm512_maskz_loadu_ps(m, rows[k] + i), acc);
        _mm512_mask_storeu_ps(y + i, m, acc);
    }
}

/* dot(x[h], rows[k]) for four x at once: each row's loads shared by the
 * four, each dot the single call's operations (16 accumulators). */
void ms_vec_dot_rows_x4_avx512(int64_t n, const float *const x[4], const float *const *rows, int64_t n_rows,
                               float *const out[4]) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *y = rows[r];
        __m512 acc[4][4];
        for (int h = 0; h < 4; h++)
            for (int k = 0; k < 4; k++) acc[h][k] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 64 <= n; i += 64)
            for (int k = 0; k < 4; k++) {
                const __m512 yv = _mm512_loadu_ps(y + i + 16 * k);
                for (int h = 0; h < 4; h++) acc[h][k] = _mm512_fmadd_ps(_mm512_loadu_ps(x[h] + i + 16 * k), yv, acc[h][k]);
            }
        for (; i + 16 <= n; i += 16) {
            const __m512 yv = _mm512_loadu_ps(y + i);
            for (int h = 0; h < 4; h++) acc[h][0] = _mm512_fmadd_ps(_mm512_loadu_ps(x[h] + i), yv, acc[h][0]);
        }
        if (i < n) {
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
            const __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
            for (int h = 0; h < 4; h++) acc[h][1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x[h] + i), yv, acc[h][1]);
        }
        for (int h = 0; h < 4; h++) out[h][r] = reduce4(acc[h]);
    }
}

/* ms_vec_axpy_rows for two outputs over the same rows: 64 floats of each
 * held in registers, each row's loads shared by the two. */
void ms_vec_axpy_rows_x2_avx512(int64_t n, const float *const w[2], const float *const *rows, int64_t n_rows,
                                float *const y[2]) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 acc[2][4];
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < 4; v++) acc[h][v] = _mm512_loadu_ps(y[h] + i + 16 * v);
        for (int64_t k = 0; k < n_rows; k++) {
            const __m512 w0 = _mm512_set1_ps(w[0][k]), w1 = _mm512_set1_ps(w[1][k]);
            const float *x = rows[k] + i;
            for (int v = 0; v < 4; v++) {
                const __m512 xv = _mm512_loadu_ps(x + 16 * v);
                acc[0][v] = _mm512_fmadd_ps(w0, xv, acc[0][v]);
                acc[1][v] = _mm512_fmadd_ps(w1, xv, acc[1][v]);
            }
        }
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < 4; v++) _mm512_storeu_ps(y[h] + i + 16 * v, acc[h][v]);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 a0 = _mm512_loadu_ps(y[0] + i), a1 = _mm512_loadu_ps(y[1] + i);
        for (int64_t k = 0; k < n_rows; k++) {
            const __m512 xv = _mm512_loadu_ps(rows[k] + i);
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[0][k]), xv, a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(w[1][k]), xv, a1);
        }
        _mm512_storeu_ps(y[0] + i, a0);
        _mm512_storeu_ps(y[1] + i, a1);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 a0 = _mm512_maskz_loadu_ps(m, y[0] + i), a1 = _mm512_maskz_loadu_ps(m, y[1] + i);
        for (int64_t k = 0; k < n_rows; k++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, rows[k] + i);
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[0][k]), xv, a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(w[1][k]), xv, a1);
        }
        _mm512_mask_storeu_ps(y[0] + i, m, a0);
        _mm512_mask_storeu_ps(y[1] + i, m, a1);
    }
}

/* ms_vec_relu_scores (vec.h): K keys at a time against G groups of 16
 * heads (K, G constants), K x G independent FMA chains to cover the FMA
 * latency; each (key, head) chain is the same whatever K and G. */
static inline __attribute__((always_inline)) void relu_scores_kg(int64_t d, int64_t hp, const float *qT,
                                                                 const float *w, const float *const key[4],
                                                                 float *out, const int K, const int G) {
    __m512 acc[4][4];
    for (int k = 0; k < K; k++)
        for (int g = 0; g < G; g++) acc[k][g] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c++) {
        __m512 kb[4];
        for (int k = 0; k < K; k++) kb[k] = _mm512_set1_ps(key[k][c]);
        for (int g = 0; g < G; g++) {
            const __m512 q = _mm512_loadu_ps(qT + c * hp + 16 * g);
            for (int k = 0; k < K; k++) acc[k][g] = _mm512_fmadd_ps(q, kb[k], acc[k][g]);
        }
    }
    const __m512 zero = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m512 s = zero;
        for (int g = 0; g < G; g++)
            s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_max_ps(acc[k][g], zero), _mm512_loadu_ps(w + 16 * g)));
        const __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
        const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
        const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
        out[k] = _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
    }
}

/* Any head count: one group at a time, one key at a time (the same chains). */
static void relu_scores_any(int64_t d, int64_t hp, const float *qT, const float *w, const float *key, float *out) {
    const __m512 zero = _mm512_setzero_ps();
    __m512 s = zero;
    for (int64_t g = 0; g < hp / 16; g++) {
        __m512 acc = zero;
        for (int64_t c = 0; c < d; c++)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(qT + c * hp + 16 * g), _mm512_set1_ps(key[c]), acc);
        s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_max_ps(acc, zero), _mm512_loadu_ps(w + 16 * g)));
    }
    const __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
    const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    *out = _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

void ms_vec_relu_scores_avx512(int64_t d, int64_t hp, const float *qT, const float *w, const float *keys,
                               int64_t key_stride, int64_t n_keys, float *out) {
    const int64_t G = hp / 16;
    int64_t m = 0;
    if (G == 1 || G == 2 || G == 4) {
        const int K = G == 4 ? 2 : 4;
        for (; m + K <= n_keys; m += K) {
            const float *const key[4] = {keys + m * key_stride, keys + (m + 1) * key_stride,
                                         keys + (m + (K > 2 ? 2 : 1)) * key_stride,
                                         keys + (m + (K > 2 ? 3 : 1)) * key_stride};
            if (G == 1) relu_scores_kg(d, hp, qT, w, key, out + m, 4, 1);
            else if (G == 2) relu_scores_kg(d, hp, qT, w, key, out + m, 4, 2);
            else relu_scores_kg(d, hp, qT, w, key, out + m, 2, 4);
        }
    }
    for (; m < n_keys; m++) relu_scores_any(d, hp, qT, w, keys + m * key_stride, out + m);
}
/* ---- ms_expf's operations, 16 lanes (vec.h; constants in vec_expf.h) ---- */

static inline __m512 pow2i16(__m512i k) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23));
}

static inline __m512 expf16(__m512 x) {
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(MS_EXPF_LO)), _mm512_set1_ps(MS_EXPF_HI));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(MS_EXPF_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-MS_EXPF_C1), c);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-MS_EXPF_C2), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(MS_EXPF_P0), r, _mm512_set1_ps(MS_EXPF_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXPF_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXPF_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXPF_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXPF_P5));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    const __m512i k = _mm512_cvtps_epi32(n), k1 = _mm512_srai_epi32(k, 1);
    const __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, pow2i16(k1)), pow2i16(_mm512_sub_epi32(k, k1)));
    return _mm512_mask_mov_ps(e, nan, x);
}

float ms_vec_exp_sum_avx512(int64_t n, float *x, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 s = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        const __m512 e = expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(x + i, k, e);
        s = _mm512_add_ps(s, _mm512_maskz_mov_ps(k, e)); /* +0 past the end: sums unchanged */
    }
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

void ms_vec_swiglu_avx512(int64_t n, float *out, const float *gate, const float *up, float limit) {
    const bool clamp = limit > 1e-6f;
    const __m512 lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit);
    const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 g = _mm512_maskz_loadu_ps(k, gate + i), u = _mm512_maskz_loadu_ps(k, up + i);
        if (clamp) { /* minps / maxps: (a < b) ? a : b, a NaN a takes b */
            g = _mm512_min_ps(g, lim);
            u = _mm512_min_ps(_mm512_max_ps(u, nlim), lim);
        }
        const __m512 e = expf16(_mm512_xor_ps(g, sign));
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
    }
}

/* Partial sum k in double lane k: sixteen squares a step, elements i .. i + 7
 * then i + 8 .. i + 15 (each lane's adds in index order); a masked tail
 * adds exact zeros. */
double ms_vec_sum_sq_avx512(int64_t n, const float *x) {
    __m512d acc = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 sq = _mm512_mul_ps(v, v);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
    }
    if (i + 8 <= n) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
        i += 8;
    }
    if (i < n) {
        const __m256 v = _mm256_maskz_loadu_ps((__mmask8)((1u << (n - i)) - 1), x + i);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
    }
    /* lanes l + 4, then l + 2, then l + 1: the scalar tree */
    const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
    const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}

void ms_vec_scale_avx512(int64_t n, float *y, const float *x, float a, const float *w) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), va);
        _mm512_storeu_ps(y + i, w ? _mm512_mul_ps(v, _mm512_loadu_ps(w + i)) : v);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), va);
        _mm512_mask_storeu_ps(y + i, m, w ? _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)) : v);
    }
}

static inline __m512 mix_step(__mmask16 m, int64_t i, __m512 va, const float *f, const float *c, const float *x,
                              int64_t x_stride, int n_k) {
    __m512 acc = f ? _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, f + i)) : _mm512_setzero_ps();
    for (int k = 0; k < n_k; k++)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(c[k]), _mm512_maskz_loadu_ps(m, x + k * x_stride + i)));
    return acc;
}

void ms_vec_mix_rows_avx512(int64_t n, float *y, float a, const float *f, const float *c, const float *x,
                            int64_t x_stride, int n_k) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, mix_step((__mmask16)0xffff, i, va, f, c, x, x_stride, n_k));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, mix_step(m, i, va, f, c, x, x_stride, n_k));
    }
}
