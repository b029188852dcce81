/*
 * test_vec.c - the AVX2 and AVX-512 f32 dot/axpy against the scalar
 * reference on random data of lengths with every tail, and against a
 * double-precision sum with the textbook bound.
 */
#include <math.h>
#include <string.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/vec.h"
#include "util/rng.h"

static int isa_max(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
    return 0;
}

static void test_dot(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 21);
    float x[300], y[300];
    ms_rng_fill_normal(&r, x, 300, 1.0f);
    ms_rng_fill_normal(&r, y, 300, 1.0f);
    for (int n = 1; n <= 300; n += (n < 70 ? 1 : 37)) {
        double ref = 0, mag = 0;
        for (int i = 0; i < n; i++) {
            ref += (double)x[i] * y[i];
            mag += fabs((double)x[i] * y[i]);
        }
        const double bound = (n + 2) * 0x1p-24 * mag; /* f32 summation of n terms */
        for (int isa = 0; isa <= isa_max(); isa++)
            assert_true(fabs(ms_vec_dot_isa(isa, n, x, y) - ref) <= bound);
        assert_true(fabs(ms_vec_dot(n, x, y) - ref) <= bound);
    }
}

static void test_axpy(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 22);
    float x[300], y0[300], y[300];
    ms_rng_fill_normal(&r, x, 300, 1.0f);
    ms_rng_fill_normal(&r, y0, 300, 1.0f);
    for (int n = 1; n <= 300; n += (n < 40 ? 1 : 41)) {
        for (int isa = 0; isa <= isa_max(); isa++) {
            for (int i = 0; i < 300; i++) y[i] = y0[i];
            ms_vec_axpy_isa(isa, n, 0.37f, x, y);
            for (int i = 0; i < 300; i++) {
                const double want = i < n ? (double)y0[i] + 0.37 * x[i] : y0[i];
                /* one FMA or a rounded multiply then add: within 2 ulps */
                assert_true(fabs(y[i] - want) <= 2 * 0x1p-24 * (fabs(want) + fabs(0.37 * x[i])));
            }
        }
    }
}

/* The row forms against the single calls, bit for bit, per ISA: lengths with
 * every tail (and past the 64/128-float blocks), 0..9 rows (odd counts
 * leave a lone last row for the paired dot). */
static void test_rows(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 23);
    enum { N = 300, R = 9 };
    static float x[N], rows_data[R][N], w[R], y0[N], y1[N], y2[N];
    ms_rng_fill_normal(&r, x, N, 1.0f);
    ms_rng_fill_normal(&r, &rows_data[0][0], R * N, 1.0f);
    ms_rng_fill_normal(&r, w, R, 1.0f);
    ms_rng_fill_normal(&r, y0, N, 1.0f);
    const float *rows[R];
    for (int k = 0; k < R; k++) rows[k] = rows_data[k];
    for (int n = 1; n <= N; n += (n < 70 ? 1 : 23)) {
        for (int isa = 0; isa <= isa_max(); isa++) {
            for (int nr = 0; nr <= R; nr++) {
                float got[R], want[R];
                ms_vec_dot_rows_isa(isa, n, x, rows, nr, got);
                for (int k = 0; k < nr; k++) want[k] = ms_vec_dot_isa(isa, n, x, rows[k]);
                assert_memory_equal(got, want, sizeof(float) * (size_t)nr);
                for (int i = 0; i < N; i++) y1[i] = y2[i] = y0[i];
                ms_vec_axpy_rows_isa(isa, n, w, rows, nr, y1);
                for (int k = 0; k < nr; k++) ms_vec_axpy_isa(isa, n, w[k], rows[k], y2);
                assert_memory_equal(y1, y2, sizeof y1);
            }
        }
    }
    /* the multi-query forms against the single-query row forms */
    for (int n = 1; n <= N; n += (n < 70 ? 1 : 23))
        for (int isa = 0; isa <= isa_max(); isa++)
            for (int nr = 0; nr <= R; nr += 3) {
                const float *xq[4] = {rows[0], rows[3], x, rows[8]};
                static float out4[4][R], want4[R];
                float *const o4[4] = {out4[0], out4[1], out4[2], out4[3]};
                ms_vec_dot_rows_x4_isa(isa, n, xq, rows, nr, o4);
                for (int h = 0; h < 4; h++) {
                    ms_vec_dot_rows_isa(isa, n, xq[h], rows, nr, want4);
                    assert_memory_equal(out4[h], want4, sizeof(float) * (size_t)nr);
                }
                static float ya[N], yb[N], yc[N], yd[N];
                for (int i = 0; i < N; i++) ya[i] = yc[i] = y0[i], yb[i] = yd[i] = -y0[i];
                const float *w2[2] = {w, rows[2]};
                float *const y2p[2] = {ya, yb};
                ms_vec_axpy_rows_x2_isa(isa, n, w2, rows, nr, y2p);
                ms_vec_axpy_rows_isa(isa, n, w2[0], rows, nr, yc);
                ms_vec_axpy_rows_isa(isa, n, w2[1], rows, nr, yd);
                assert_memory_equal(ya, yc, sizeof ya);
                assert_memory_equal(yb, yd, sizeof yb);
            }
    /* the dispatched entry points are one of the above */
    float got[R], want[R];
    ms_vec_dot_rows(N, x, rows, R, got);
    for (int k = 0; k < R; k++) want[k] = ms_vec_dot(N, x, rows[k]);
    assert_memory_equal(got, want, sizeof got);
    for (int i = 0; i < N; i++) y1[i] = y2[i] = y0[i];
    ms_vec_axpy_rows(N, w, rows, R, y1);
    for (int k = 0; k < R; k++) ms_vec_axpy(N, w[k], rows[k], y2);
    assert_memory_equal(y1, y2, sizeof y1);
}

/* ms_vec_relu_scores: every ISA against the scalar form bit for bit, and
 * the scalar form against a double-precision sum, over head counts that
 * take each kernel shape (one, two and four groups of 16 heads, and the
 * any-count path), lengths with tails, and a key stride beyond d. */
static void test_relu_scores(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0x1d3e);
    enum { DMAX = 130, HMAX = 80, KMAX = 9, STRIDE = DMAX + 3 };
    static float q[HMAX][DMAX], qT[DMAX * HMAX], wts[HMAX], keys[KMAX * STRIDE];
    ms_rng_fill_normal(&r, &q[0][0], HMAX * DMAX, 1.0f);
    ms_rng_fill_normal(&r, wts, HMAX, 1.0f);
    ms_rng_fill_normal(&r, keys, KMAX * STRIDE, 1.0f);
    const int heads[] = {1, 5, 16, 17, 32, 48, 64, 80};
    const int lens[] = {1, 7, 64, 128, 130};
    int positive = 0, gated = 0;
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int H = heads[hi], d = lens[li], hp = (H + 15) / 16 * 16;
            static float wp[HMAX];
            for (int c = 0; c < d; c++)
                for (int h = 0; h < hp; h++) qT[c * hp + h] = h < H ? q[h][c] : 0.0f;
            for (int h = 0; h < hp; h++) wp[h] = h < H ? wts[h] : 0.0f;
            for (int nk = 0; nk <= KMAX; nk++) {
                float want[KMAX], got[KMAX];
                ms_vec_relu_scores_isa(0, d, hp, qT, wp, keys, STRIDE, nk, want);
                for (int m = 0; m < nk; m++) {
                    double e = 0, mag = 0;
                    for (int h = 0; h < H; h++) {
                        double dot = 0, dmag = 0;
                        for (int c = 0; c < d; c++) {
                            dot += (double)q[h][c] * keys[m * STRIDE + c];
                            dmag += fabs((double)q[h][c] * keys[m * STRIDE + c]);
                        }
                        if (dot > 0) e += dot * wts[h], positive++;
                        else gated++;
                        mag += (dmag + fabs(dot)) * fabs(wts[h]);
                    }
                    /* a head whose dot is within rounding of 0 may be gated either way */
                    assert_true(fabs((double)want[m] - e) <= 1e-5 * mag + 1e-30);
                }
                for (int isa = 1; isa <= isa_max(); isa++) {
                    ms_vec_relu_scores_isa(isa, d, hp, qT, wp, keys, STRIDE, nk, got);
                    assert_memory_equal(got, want, sizeof(float) * (size_t)nk);
                }
                ms_vec_relu_scores(d, hp, qT, wp, keys, STRIDE, nk, got);
                assert_memory_equal(got, want, sizeof(float) * (size_t)nk);
            }
        }
    assert_true(positive > 100 && gated > 100); /* both sides of the ReLU were exercised */
}

/* Units in the last place between a float and the double it approximates. */
static double ulps(float got, double want) {
    if (isinf(want) || want > 3.4028234663852886e38) return isinf(got) && got > 0 ? 0 : 1e9;
    const double scale = want < 0x1p-126 ? 0x1p-149 : ldexp(1.0, ilogb(want) - 23);
    return fabs((double)got - want) / scale;
}

/* ms_expf within 2 ulp of exp over the float range: a dense sweep of
 * [-104, 89] and random points, plus the special values. */
/* RMSNorm's sum of squares and scale, and the hyper-connection mix, in
 * every ISA against the scalar reference bit for bit (their orders are
 * fixed by vec.h), on normal data with outliers over lengths with every
 * tail of the 8- and 16-wide steps; the sum also against a long-double
 * sum, and outputs past n untouched. */
static void test_norm_mix(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 27);
    enum { N = 1100 };
    static float x[4 * N], f[N], w[N], y[N + 16], y0[N + 16];
    ms_rng_fill_normal(&r, x, 4 * N, 1.0f);
    ms_rng_fill_normal(&r, f, N, 1.0f);
    ms_rng_fill_normal(&r, w, N, 0.5f);
    for (int i = 0; i < 4 * N; i += 1 + (int)(ms_rng_u64(&r) % 97)) x[i] *= 300.0f;
    const float c[4] = {0.71f, -1.3f, 0.05f, 2.25f};
    int checked = 0;
    for (int n = 0; n <= N; n += (n < 70 ? 1 : 173)) {
        const double s0 = ms_vec_sum_sq_isa(0, n, x);
        long double ref = 0;
        for (int i = 0; i < n; i++) ref += (long double)(x[i] * x[i]);
        assert_true(fabsl((long double)s0 - ref) <= 1e-12L * (ref + 1));
        for (int isa = 1; isa <= isa_max(); isa++) {
            const double s = ms_vec_sum_sq_isa(isa, n, x);
            if (memcmp(&s, &s0, sizeof s)) fail_msg("sum_sq isa %d n %d: %.17g vs %.17g", isa, n, s, s0);
        }
        for (int variant = 0; variant < 4; variant++) {
            for (int isa = 0; isa <= isa_max(); isa++) {
                float *out = isa ? y : y0;
                for (int i = 0; i < N + 16; i++) out[i] = -7.0f;
                switch (variant) {
                case 0: ms_vec_scale_isa(isa, n, out, x, 0.0371f, w); break;
                case 1: ms_vec_scale_isa(isa, n, out, x, 1.7f, NULL); break;
                case 2: ms_vec_mix_rows_isa(isa, n, out, 0.0f, NULL, c, x, N, 4); break;
                default: ms_vec_mix_rows_isa(isa, n, out, 1.9f, f, c + 1, x + 3, N, 3); break;
                }
                for (int i = n; i < N + 16; i++) assert_true(out[i] == -7.0f);
                if (isa && memcmp(y, y0, (size_t)n * sizeof(float)))
                    fail_msg("variant %d isa %d n %d differs from scalar", variant, isa, n);
            }
            /* the scalar reference against its formula */
            for (int i = 0; i < n; i++) {
                float want;
                switch (variant) {
                case 0: want = (x[i] * 0.0371f) * w[i]; break;
                case 1: want = x[i] * 1.7f; break;
                case 2: want = ((((0.0f + c[0] * x[i]) + c[1] * x[N + i]) + c[2] * x[2 * N + i]) + c[3] * x[3 * N + i]); break;
                default: want = (((1.9f * f[i] + c[1] * x[3 + i]) + c[2] * x[3 + N + i]) + c[3] * x[3 + 2 * N + i]); break;
                }
                assert_true(memcmp(&want, &y0[i], sizeof want) == 0);
            }
            checked++;
        }
    }
    assert_true(checked > 100);
    /* y may alias x for the scale */
    float a[37], b[37];
    ms_rng_fill_normal(&r, a, 37, 1.0f);
    memcpy(b, a, sizeof a);
    for (int isa = 0; isa <= isa_max(); isa++) {
        float t[37];
        memcpy(t, a, sizeof a);
        ms_vec_scale_isa(isa, 37, t, t, 0.5f, w);
        for (int i = 0; i < 37; i++) assert_true(t[i] == (b[i] * 0.5f) * w[i]);
    }
}

static void test_expf(void **state) {
    (void)state;
    double worst = 0;
    for (double x = -104.0; x <= 89.0; x += 1.0 / 4099.0) {
        const float xf = (float)x;
        const double u = ulps(ms_expf(xf), exp((double)xf));
        if (u > worst) worst = u;
    }
    ms_rng r;
    ms_rng_seed(&r, 0xe4f);
    for (int i = 0; i < 200000; i++) {
        const float xf = (float)(ms_rng_uniform(&r) * 20.0 - 10.0);
        const double u = ulps(ms_expf(xf), exp((double)xf));
        if (u > worst) worst = u;
    }
    assert_true(worst <= 2.0);
    assert_true(ms_expf(0.0f) == 1.0f && ms_expf(-0.0f) == 1.0f);
    assert_true(ms_expf(-INFINITY) == 0.0f && ms_expf(-200.0f) == 0.0f);
    assert_true(isinf(ms_expf(INFINITY)) && isinf(ms_expf(89.0f)) && isinf(ms_expf(1000.0f)));
    assert_true(isnan(ms_expf(NAN)));
    assert_true(ms_expf(-100.0f) > 0.0f); /* a subnormal result, not flushed */
}

/* Inputs for the exp kernels: normal values and every special case. */
static void exp_inputs(ms_rng *r, float *x, int n, float scale) {
    ms_rng_fill_normal(r, x, n, scale);
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.9f, 89.5f, -103.9f,
                                    -150.0f, 1e-30f, -87.5f, 88.7f};
    for (int i = 0; i < n; i += 7) x[i] = special[(i / 7) % (int)(sizeof special / sizeof special[0])];
}

/* exp_sum and swiglu: each SIMD set equals the scalar form bit for bit
 * (NaN where it has NaN) for every length and tail. */
static void test_exp_kernels(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0xe45);
    enum { NMAX = 300 };
    float x[NMAX], want[NMAX], got[NMAX], g[NMAX], u[NMAX];
    for (int n = 0; n <= NMAX; n += (n < 70 ? 1 : 23)) {
        exp_inputs(&r, x, n, 3.0f);
        exp_inputs(&r, g, n, 4.0f);
        ms_rng_fill_normal(&r, u, n, 4.0f);
        for (int i = 3; i < n; i += 11) u[i] = (i & 1) ? NAN : -INFINITY;
        /* finite inputs for the sum (a softmax's scores less their max) */
        float xs[NMAX];
        for (int i = 0; i < n; i++) xs[i] = isfinite(x[i]) ? -fabsf(x[i]) : -50.0f;
        memcpy(want, xs, sizeof(float) * (size_t)n);
        const float sw = ms_vec_exp_sum_isa(0, n, want, 0.25f);
        double ref = 0;
        for (int i = 0; i < n; i++) {
            assert_true(want[i] == ms_expf(xs[i] - 0.25f));
            ref += want[i];
        }
        assert_true(fabs(sw - ref) <= (n + 1) * 0x1p-24 * ref + 1e-30);
        for (int isa = 1; isa <= isa_max() + 1; isa++) {
            memcpy(got, xs, sizeof(float) * (size_t)n);
            const float sg = isa <= isa_max() ? ms_vec_exp_sum_isa(isa, n, got, 0.25f)
                                              : ms_vec_exp_sum(n, got, 0.25f);
            assert_memory_equal(&sg, &sw, sizeof sw);
            assert_memory_equal(got, want, sizeof(float) * (size_t)n);
        }
        /* and the elementwise exp of the special values, through the sum's kernel */
        memcpy(want, x, sizeof(float) * (size_t)n);
        ms_vec_exp_sum_isa(0, n, want, 0.0f);
        for (int isa = 1; isa <= isa_max(); isa++) {
            memcpy(got, x, sizeof(float) * (size_t)n);
            ms_vec_exp_sum_isa(isa, n, got, 0.0f);
            for (int i = 0; i < n; i++)
                assert_true(isnan(want[i]) ? isnan(got[i]) : memcmp(&got[i], &want[i], sizeof(float)) == 0);
        }
        for (int c = 0; c < 2; c++) {
            const float limit = c ? 7.0f : 0.0f;
            ms_vec_swiglu_isa(0, n, want, g, u, limit);
            for (int i = 0; i < n; i++) {
                float gi = g[i], ui = u[i];
                if (c) {
                    gi = fminf(gi, limit);
                    ui = fminf(fmaxf(ui, -limit), limit);
                }
                const float e = (gi / (1.0f + ms_expf(-gi))) * ui;
                assert_true(isnan(e) ? isnan(want[i]) : memcmp(&e, &want[i], sizeof e) == 0);
            }
            for (int isa = 1; isa <= isa_max() + 1; isa++) {
                if (isa <= isa_max()) ms_vec_swiglu_isa(isa, n, got, g, u, limit);
                else ms_vec_swiglu(n, got, g, u, limit);
                for (int i = 0; i < n; i++)
                    assert_true(isnan(want[i]) ? isnan(got[i]) : memcmp(&got[i], &want[i], sizeof(float)) == 0);
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot),
        cmocka_unit_test(test_axpy),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_relu_scores),
        cmocka_unit_test(test_norm_mix),
        cmocka_unit_test(test_expf),
        cmocka_unit_test(test_exp_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
