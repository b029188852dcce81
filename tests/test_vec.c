/*
 * test_vec.c - the AVX2 and AVX-512 f32 dot/axpy against the scalar
 * reference on random data of lengths with every tail, and against a
 * double-precision sum with the textbook bound.
 */
#include <math.h>
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot),
        cmocka_unit_test(test_axpy),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_relu_scores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
