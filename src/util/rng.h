/*
 * rng.h - a small, fast, seedable PRNG (xoshiro256**, seeded by splitmix64).
 *
 * Deterministic across platforms and compilers: mkmodel's byte-identical
 * output for a given seed and the randomized kernel tests depend on it. The
 * generators are from Blackman & Vigna, "Scrambled linear pseudorandom number
 * generators" (2018); the normal variate uses Box-Muller in double precision.
 * ms_rng_fill_normal_fast is a second, float Box-Muller (both variates of each
 * pair, polynomial log/sin/cos, no libm) for bulk data such as mkmodel's bench
 * weights: about 20x faster, and its bytes depend on no libm or ISA.
 */
#ifndef MS_UTIL_RNG_H
#define MS_UTIL_RNG_H

#include <stdint.h>

typedef struct ms_rng {
    uint64_t s[4];
} ms_rng;

/* Seeds the state from one 64-bit seed (splitmix64 expansion). */
void ms_rng_seed(ms_rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t ms_rng_u64(ms_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double ms_rng_uniform(ms_rng *r);
/* Uniform float in [lo, hi). */
float ms_rng_uniform_f(ms_rng *r, float lo, float hi);
/* Fills x[0..n) with normal(0, stddev) values. */
void ms_rng_fill_normal(ms_rng *r, float *x, int64_t n, float stddev);
/* Fills x[0..n) with normal(0, stddev) values, two per 64 random bits: a
 * radius sqrt(-2 ln u1) from 24 bits (so |value| <= 5.77 stddev) and an angle
 * from 26 bits. Only IEEE +, -, *, /, sqrt in a fixed order, so the output is
 * the same on every IEEE machine whatever the compiler vectorizes. A
 * different stream from ms_rng_fill_normal's. */
void ms_rng_fill_normal_fast(ms_rng *r, float *x, int64_t n, float stddev);

#endif
