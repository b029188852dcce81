/*
 * mem.h - allocation helpers: aligned buffers and overflow-checked sizes.
 *
 * Weight and activation buffers are 64-byte aligned (one cache line, one
 * AVX-512 register) and I/O buffers 4096-byte aligned (O_DIRECT). Sizes that
 * come from files are multiplied with ms_mul_size so a hostile header cannot
 * wrap a size_t into a small allocation.
 */
#ifndef MS_UTIL_MEM_H
#define MS_UTIL_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MS_ALIGN 64

/* Returns a buffer of `size` bytes aligned to `align` (a power of two, >=
 * sizeof(void*)), or NULL when out of memory. Free with ms_free. size 0
 * returns a valid unique pointer. */
void *ms_aligned_alloc(size_t align, size_t size);
void ms_free(void *p);

/* *out = a * b; returns false on overflow (then *out is unspecified). */
static inline bool ms_mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool ms_add_size(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
/* Rounds x up to a multiple of `align` (a power of two). */
static inline uint64_t ms_align_up(uint64_t x, uint64_t align) {
    return (x + align - 1) & ~(align - 1);
}

#endif
