/* mem.c - aligned allocation (see mem.h). */
#include "util/mem.h"

#include <stdlib.h>

void *ms_aligned_alloc(size_t align, size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : align) != 0) return NULL;
    return p;
}

void ms_free(void *p) { free(p); }
