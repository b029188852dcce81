/* rng.c - xoshiro256** + splitmix64 (see rng.h for the source). */
#include "util/rng.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void ms_rng_seed(ms_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ms_rng_u64(ms_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double ms_rng_uniform(ms_rng *r) { return (double)(ms_rng_u64(r) >> 11) * 0x1.0p-53; }

float ms_rng_uniform_f(ms_rng *r, float lo, float hi) {
    return lo + (float)(ms_rng_uniform(r) * (double)(hi - lo));
}

/* Standard normal variate (mean 0, variance 1). */
static double rng_normal(ms_rng *r) {
    /* Box-Muller; u1 in (0, 1] so log() is finite. */
    double u1 = 1.0 - ms_rng_uniform(r);
    double u2 = ms_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void ms_rng_fill_normal(ms_rng *r, float *x, int64_t n, float stddev) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(rng_normal(r) * stddev);
}

/* ---- float Box-Muller (ms_rng_fill_normal_fast) */

/* A compiler that contracts a*b+c into an FMA (clang by default, GCC in GNU C
 * mode, when the target has FMA) would make the bytes depend on -march. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define FN_BATCH 64 /* pairs per batch: random words first, then the math */

/* 4 lanes in GCC/clang vector extensions: both compilers accept them for
 * any x86-64 target and lower them to whatever SIMD the build has, with the
 * same per-lane IEEE semantics (plain loops are not vectorized at -O2). */
typedef float vf4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));
#define VSEL(m, a, b) (((a) & (m)) | ((b) & ~(m))) /* m ? a : b, per lane, on bits */

/* Pairs from the random words (hi[i], lo[i]), i in [0, FN_BATCH):
 * c[i] = r cos(phi), s[i] = r sin(phi).
 *   u1 = k / 2^24, k = (hi >> 8) + 1 in [1, 2^24] (exact in float);
 *   ln u1 = e ln 2 + ln m with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(z),
 *   z = (m - 1) / (m + 1), by its series to z^9 (|z| < 0.172: truncation
 *   < 4e-10).
 *   sqrt(y) = y / sqrt(y) with 1 / sqrt(y) from the bit-trick guess and three
 *   Newton steps (relative error ~1e-7; libm's sqrtf is avoided for errno's
 *   sake and to keep every step plain IEEE arithmetic).
 *   phi = q pi/2 + t, the quadrant q = hi & 3, t uniform in [-pi/4, pi/4)
 *   from lo >> 8; sin t and cos t by Taylor series to t^9 / t^10
 *   (truncation < 2e-9). */
static void normal_pairs(const uint32_t *hi, const uint32_t *lo, float scale, float *c, float *s) {
    const vi4 mant = (vi4){0} + 0x007fffff;
    for (int i = 0; i < FN_BATCH; i += 4) {
        vi4 h, l;
        memcpy(&h, hi + i, sizeof h);
        memcpy(&l, lo + i, sizeof l);
        const vf4 u1 = __builtin_convertvector(((h >> 8) & 0xffffff) + 1, vf4) * 0x1p-24f;
        vi4 b;
        memcpy(&b, &u1, sizeof b);
        const vi4 big = (b & mant) > 0x3504f3; /* mantissa above sqrt(2): -1 or 0 */
        const vi4 e = (b >> 23) - 127 - big;
        const vi4 mb = (b & mant) | VSEL(big, (vi4){0} + 0x3f000000, (vi4){0} + 0x3f800000);
        vf4 m;
        memcpy(&m, &mb, sizeof m);
        const vf4 z = (m - 1.0f) / (m + 1.0f), z2 = z * z;
        const vf4 p = 1.0f + z2 * (1.0f / 3 + z2 * (1.0f / 5 + z2 * (1.0f / 7 + z2 * (1.0f / 9))));
        const vf4 y = -2.0f * (__builtin_convertvector(e, vf4) * 0.693147181f + 2.0f * z * p);
        vi4 yb;
        memcpy(&yb, &y, sizeof yb);
        const vi4 gb = 0x5f3759df - (yb >> 1); /* y >= 0, so the shift is logical */
        vf4 g;
        memcpy(&g, &gb, sizeof g);
        g = g * (1.5f - 0.5f * y * g * g);
        g = g * (1.5f - 0.5f * y * g * g);
        g = g * (1.5f - 0.5f * y * g * g);
        const vf4 r = y * g * scale;

        const vi4 q = h & 3;
        const vf4 t = (__builtin_convertvector((l >> 8) & 0xffffff, vf4) * 0x1p-24f - 0.5f) * 1.57079633f;
        const vf4 t2 = t * t;
        const vf4 sn = t * (1.0f + t2 * (-1.0f / 6 + t2 * (1.0f / 120 + t2 * (-1.0f / 5040 + t2 * (1.0f / 362880)))));
        const vf4 cs = 1.0f + t2 * (-0.5f + t2 * (1.0f / 24 + t2 * (-1.0f / 720 + t2 * (1.0f / 40320 + t2 * (-1.0f / 3628800)))));
        /* rotate (cs, sn) by q quarter turns */
        vi4 snb, csb;
        memcpy(&snb, &sn, sizeof snb);
        memcpy(&csb, &cs, sizeof csb);
        const vi4 swap = (q & 1) != 0;
        const vi4 c0 = VSEL(swap, snb, csb) ^ (((q ^ (q >> 1)) & 1) << 31);
        const vi4 s0 = VSEL(swap, csb, snb) ^ ((q >> 1) << 31);
        vf4 cf, sf;
        memcpy(&cf, &c0, sizeof cf);
        memcpy(&sf, &s0, sizeof sf);
        cf = r * cf;
        sf = r * sf;
        memcpy(c + i, &cf, sizeof cf);
        memcpy(s + i, &sf, sizeof sf);
    }
}

void ms_rng_fill_normal_fast(ms_rng *r, float *x, int64_t n, float stddev) {
    uint32_t hi[FN_BATCH], lo[FN_BATCH];
    float c[FN_BATCH], s[FN_BATCH];
    while (n > 0) {
        for (int i = 0; i < FN_BATCH; i++) {
            const uint64_t v = ms_rng_u64(r);
            hi[i] = (uint32_t)(v >> 32);
            lo[i] = (uint32_t)v;
        }
        normal_pairs(hi, lo, stddev, c, s);
        /* a short last batch uses a prefix; words past it are drawn anyway */
        const int64_t m = 2 * FN_BATCH < n ? 2 * FN_BATCH : n;
        for (int64_t i = 0; i < m; i++) x[i] = (i & 1) ? s[i / 2] : c[i / 2];
        x += m;
        n -= m;
    }
}
