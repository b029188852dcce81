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

/* For large buffers of weights that direct I/O fills (layer buffers, layers
 * held whole, the expert cache's slots): `size` bytes; when size >= 2 MiB,
 * 2 MiB aligned with its whole 2 MiB pages advised MADV_HUGEPAGE, so that a
 * kernel with transparent huge pages in "madvise" mode (Debian's default)
 * backs them with huge pages; the tail stays in 4 KiB pages, so no more
 * memory is used than asked. Why: O_DIRECT pins every page of the
 * destination per read, and the kernels stream through these bytes once
 * per token; with 4 KiB pages both pay per page and per TLB miss
 * (bench/RESULTS.md has the measurement). Below 2 MiB: 4096-byte aligned
 * (O_DIRECT's alignment). NULL when out of memory; free with ms_free. */
void *ms_alloc_large(size_t size);

/* Faults in every page of [p, p + bytes) for writing now (the kernel zeroes
 * a fresh page at its first touch: on a virtual machine that ran at 0.7-2.4
 * GB/s), so that the first direct read or copy into the buffer does not pay
 * it. MADV_POPULATE_WRITE where the kernel has it, else a write per page;
 * the contents become unspecified. */
void ms_populate(void *p, size_t bytes);

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
