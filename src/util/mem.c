/* mem.c - aligned allocation (see mem.h). */
#include "util/mem.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

void *ms_aligned_alloc(size_t align, size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : align) != 0) return NULL;
    return p;
}

void ms_free(void *p) { free(p); }

void *ms_alloc_large(size_t size) {
    const size_t huge = (size_t)2 << 20;
    if (size < huge) return ms_aligned_alloc(4096, size); /* O_DIRECT's alignment */
    void *p = ms_aligned_alloc(huge, size);
#ifdef MADV_HUGEPAGE
    /* Only whole 2 MiB pages are advised: a partial last one would be
     * backed by a whole huge page (up to 2 MiB more than asked, per buffer).
     * Advice only: where THP is off the pages stay 4 KiB. */
    if (p) (void)madvise(p, size & ~(huge - 1), MADV_HUGEPAGE);
#endif
    return p;
}

void ms_populate(void *p, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
    /* no MADV_POPULATE_WRITE (before Linux 5.14), or p not page aligned:
     * one write per page */
    const long page = sysconf(_SC_PAGESIZE);
    const size_t step = page > 0 ? (size_t)page : 4096;
    for (size_t off = 0; off < bytes; off += step) ((volatile char *)p)[off] = 0;
}
