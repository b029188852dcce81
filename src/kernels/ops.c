/*
 * ops.c - scalar operators of the forward pass (see ops.h for the formulas
 * and their sources). Rounding mirrors ggml's CPU ops where it matters at the
 * 1e-6 level: f32 products summed in double, f32 scale factors.
 */
#include "kernels/ops.h"

#include "kernels/vec.h"

#include <math.h>

/* RMSNorm's sum of squares is ms_vec_sum_sq: the f32 squares summed in
 * double in eight interleaved sums, then the eight in a fixed tree. ggml
 * sums in one serial chain, which costs four cycles an element (a Flash
 * token's HC norm is 16 K elements); the double sums differ from it only
 * below f32's precision. */
void ms_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    const double sum = ms_vec_sum_sq(n, x);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    ms_vec_scale(n, y, x, scale, w);
}

float ms_softmax(float *x, int64_t n) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > max) max = x[i];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float e = (x[i] == -INFINITY) ? 0.0f : expf(x[i] - max);
        x[i] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
    return max;
}

float ms_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* YaRN correction dimension: the pair index whose wavelength spans
 * n_ctx_orig / beta rotations (ggml ggml_rope_yarn_corr_dim). */
static float yarn_corr_dim(int n_rot, int n_ctx_orig, float beta, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (beta * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void ms_rope_cs(float *cs, int64_t pos, const struct ms_rope_params *p, bool inverse) {
    const int n_rot = p->n_rot;
    float lo = 0.0f, hi = 0.0f;
    if (p->ext_factor != 0.0f) {
        lo = fmaxf(0.0f, floorf(yarn_corr_dim(n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base)));
        hi = fminf((float)(n_rot - 1), ceilf(yarn_corr_dim(n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base)));
    }
    const float theta_scale = powf(p->freq_base, -2.0f / (float)n_rot);
    float mscale = p->attn_factor;
    if (p->ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
    const float sin_sign = inverse ? -1.0f : 1.0f;

    float theta_extrap = (float)pos;
    for (int i0 = 0; i0 < n_rot; i0 += 2) {
        const float theta_interp = p->freq_scale * theta_extrap;
        float theta = theta_interp;
        if (p->ext_factor != 0.0f) {
            const float y = ((float)(i0 / 2) - lo) / fmaxf(0.001f, hi - lo);
            const float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            const float mix = ramp * p->ext_factor;
            theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
        }
        cs[i0] = cosf(theta) * mscale;
        cs[i0 + 1] = sinf(theta) * mscale * sin_sign;
        theta_extrap *= theta_scale;
    }
}

void ms_rope_apply(float *x, int64_t n, int n_rot, const float *cs) {
    float *t = x + (n - n_rot);
    for (int i0 = 0; i0 < n_rot; i0 += 2) {
        const float c = cs[i0], s = cs[i0 + 1];
        const float x0 = t[i0], x1 = t[i0 + 1];
        t[i0] = x0 * c - x1 * s;
        t[i0 + 1] = x0 * s + x1 * c;
    }
}

void ms_rope_tail(float *x, int64_t n, int64_t pos, const struct ms_rope_params *p, bool inverse) {
    float cs[MS_ROPE_MAX_ROT];
    ms_rope_cs(cs, pos, p, inverse);
    ms_rope_apply(x, n, p->n_rot, cs);
}

void ms_swiglu_clamped(float *out, const float *gate, const float *up, int64_t n, float limit) {
    ms_vec_swiglu(n, out, gate, up, limit);
}

void ms_sinkhorn4(float c[16], const float z[16], int iters, float eps) {
    /* c[d + 4*s]: destination d, source s. */
    for (int s = 0; s < 4; s++) {
        float m = z[4 * s];
        for (int d = 1; d < 4; d++) m = fmaxf(m, z[d + 4 * s]);
        float sum = 0.0f;
        for (int d = 0; d < 4; d++) sum += (c[d + 4 * s] = expf(z[d + 4 * s] - m));
        for (int d = 0; d < 4; d++) c[d + 4 * s] = c[d + 4 * s] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) { /* source pass: each column over destinations */
            for (int s = 0; s < 4; s++) {
                float sum = 0.0f;
                for (int d = 0; d < 4; d++) sum += c[d + 4 * s];
                for (int d = 0; d < 4; d++) c[d + 4 * s] /= sum + eps;
            }
        }
        for (int d = 0; d < 4; d++) { /* destination pass: each row over sources */
            float sum = 0.0f;
            for (int s = 0; s < 4; s++) sum += c[d + 4 * s];
            for (int s = 0; s < 4; s++) c[d + 4 * s] /= sum + eps;
        }
    }
}

/* libstdc++ __adjust_heap followed by __push_heap on idx[0..len) with the
 * "before" order s[a] > s[b] (a min-heap on score: the top is the worst of
 * the kept k). libstdc++'s __adjust_heap / __push_heap steps, as
 * std::partial_sort runs them (make_heap over the first k, then each later
 * index that beats the top replaces it and sifts down). */
static void heap_sift(const float *s, int *idx, int hole, int len, int v) {
    const int top = hole;
    int c = hole;
    while (c < (len - 1) / 2) {
        c = 2 * c + 2;
        if (s[idx[c]] > s[idx[c - 1]]) c--;
        idx[hole] = idx[c];
        hole = c;
    }
    if ((len & 1) == 0 && c == (len - 2) / 2) {
        c = 2 * c + 2;
        idx[hole] = idx[c - 1];
        hole = c - 1;
    }
    int parent = (hole - 1) / 2;
    while (hole > top && s[idx[parent]] > s[v]) {
        idx[hole] = idx[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    idx[hole] = v;
}

void ms_topk_heap(const float *s, int n, int k, int *idx) {
    for (int j = 0; j < n; j++) idx[j] = j;
    if (k <= 0) return;
    if (k >= 2)
        for (int parent = (k - 2) / 2; parent >= 0; parent--) heap_sift(s, idx, parent, k, idx[parent]);
    for (int i = k; i < n; i++) {
        if (s[idx[i]] > s[idx[0]]) {
            int v = idx[i];
            idx[i] = idx[0];
            heap_sift(s, idx, 0, k, v);
        }
    }
}
