/* rng.c - xoshiro256** + splitmix64 (see rng.h for the source). */
#include "util/rng.h"

#include <math.h>

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

double ms_rng_normal(ms_rng *r) {
    /* Box-Muller; u1 in (0, 1] so log() is finite. */
    double u1 = 1.0 - ms_rng_uniform(r);
    double u2 = ms_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void ms_rng_fill_normal(ms_rng *r, float *x, int64_t n, float stddev) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(ms_rng_normal(r) * stddev);
}
