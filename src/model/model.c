/*
 * model.c - loading and binding a deepseek4 GGUF (see model.h), and the
 * resident expert source.
 */
#include "model/model.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/mem.h"

static bool role_is_table(enum dsv4_role r) {
    return r == DSV4_ATTN_COMP_APE || r == DSV4_IDX_COMP_APE;
}

/* Binds one layout entry to the file's tensor of the same name. Vectors and
 * ape tables are converted into *arena (advanced past what was used). */
static int bind_tensor(struct dsv4_model *m, const struct dsv4_tensor_info *info,
                       struct dsv4_tensor *out, float **arena, ms_err *err) {
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, info->name);
    if (!t) return ms_err_set(err, "tensor '%s' is missing", info->name);
    for (int d = 0; d < 4; d++) {
        if (t->ne[d] != info->ne[d])
            return ms_err_set(err,
                              "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected "
                              "[%lld, %lld, %lld, %lld]",
                              info->name, (long long)t->ne[0], (long long)t->ne[1],
                              (long long)t->ne[2], (long long)t->ne[3], (long long)info->ne[0],
                              (long long)info->ne[1], (long long)info->ne[2],
                              (long long)info->ne[3]);
    }
    const char *data = (const char *)m->map + m->gguf->data_offset + t->offset;
    const struct ms_type_traits *tt = ms_type_traits(t->type);
    out->present = true;
    memcpy(out->ne, info->ne, sizeof out->ne);

    if (info->role == DSV4_FFN_GATE_TID2EID) {
        if (t->type != MS_TYPE_I32)
            return ms_err_set(err, "tensor '%s' must be i32, found %s", info->name, tt->name);
        out->i32 = (const int32_t *)data;
        return 0;
    }
    if (info->n_dims == 1 || role_is_table(info->role)) {
        if (!tt->has_kernels || tt->is_quantized)
            return ms_err_set(err, "tensor '%s' must be f32, f16 or bf16, found %s", info->name,
                              tt->name);
        const int64_t n = info->ne[0] * info->ne[1];
        tt->to_float(data, *arena, n);
        out->f32 = *arena;
        *arena += ms_align_up((uint64_t)n, 16);
        return 0;
    }
    if (!tt->has_kernels)
        return ms_err_set(err, "tensor '%s' has type %s, which moestream cannot compute with",
                          info->name, tt->name);
    out->mat = (struct ms_mat){.data = data,
                               .type = t->type,
                               .n_rows = info->ne[1] * info->ne[2],
                               .n_cols = info->ne[0],
                               .row_stride = ms_row_size(t->type, info->ne[0])};
    return 0;
}

/* Resident experts: views into the mapping, nothing to release. */
static int resident_acquire(void *ctx, uint32_t il, const int32_t *ids, int n,
                            struct dsv4_expert_view *views, ms_err *err) {
    const struct dsv4_model *m = ctx;
    const struct dsv4_layer *L = &m->layers[il];
    const int64_t E = m->hp.n_expert;
    const struct dsv4_tensor *g = &L->t[DSV4_FFN_GATE_EXPS], *u = &L->t[DSV4_FFN_UP_EXPS],
                             *d = &L->t[DSV4_FFN_DOWN_EXPS];
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= E)
            return ms_err_set(err, "layer %u: expert id %d out of range [0, %lld)", il, ids[i],
                              (long long)E);
        const struct dsv4_tensor *src[3] = {g, u, d};
        struct ms_mat *dst[3] = {&views[i].gate, &views[i].up, &views[i].down};
        for (int k = 0; k < 3; k++) {
            const int64_t rows = src[k]->ne[1];
            *dst[k] = src[k]->mat;
            dst[k]->n_rows = rows;
            dst[k]->data = (const char *)src[k]->mat.data +
                           (size_t)ids[i] * (size_t)rows * src[k]->mat.row_stride;
        }
    }
    return 0;
}

static void resident_release(void *ctx, uint32_t il, const int32_t *ids, int n) {
    (void)ctx, (void)il, (void)ids, (void)n;
}

/* Transparent huge page size the mappings are aligned to. */
#define MODEL_HUGE (2u << 20)

/* A reservation of size bytes (rounded up to whole pages) at a huge-page
 * boundary, with protection prot: a larger anonymous mapping whose slack
 * before and after the aligned part is released. NULL when mmap fails. */
static char *reserve_aligned(size_t size, int prot) {
    const long pg = sysconf(_SC_PAGESIZE);
    const size_t page = pg > 0 ? (size_t)pg : 4096, end = (size + page - 1) / page * page;
    char *raw = mmap(NULL, end + MODEL_HUGE, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *a = (char *)(((uintptr_t)raw + MODEL_HUGE - 1) & ~(uintptr_t)(MODEL_HUGE - 1));
    if (a > raw) munmap(raw, (size_t)(a - raw));
    if (raw + end + MODEL_HUGE > a + end) munmap(a + end, (size_t)(raw + end + MODEL_HUGE - (a + end)));
    return a;
}

/* Maps the file's pages now, through the page cache (MADV_POPULATE_READ,
 * or touching a byte per page before Linux 5.14). */
static int populate_mapping(struct dsv4_model *m, ms_err *err) {
#ifdef MADV_POPULATE_READ
    if (madvise(m->map, m->map_size, MADV_POPULATE_READ) == 0) return 0;
    if (errno != EINVAL) /* EINVAL: a kernel before 5.14, touch the pages below */
        return ms_err_errno(err, errno, "cannot read the model file into memory");
#endif
    (void)madvise(m->map, m->map_size, MADV_WILLNEED);
    const long page = sysconf(_SC_PAGESIZE);
    const size_t step = page > 0 ? (size_t)page : 4096;
    volatile const unsigned char *b = m->map;
    unsigned char sink = 0;
    for (size_t off = 0; off < m->map_size; off += step) sink ^= b[off];
    (void)sink;
    return 0;
}

/* Whether madvise(MADV_HUGEPAGE) can give this process transparent huge
 * pages: THP "always" or "madvise", not "never" (or absent). */
static bool thp_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char buf[128] = {0};
    const bool ok = fgets(buf, sizeof buf, f) && !strstr(buf, "[never]");
    fclose(f);
    return ok;
}

/*
 * The resident copy: the file read into anonymous memory backed by
 * transparent huge pages, which then replaces the file mapping at the same
 * address (mremap), so every pointer bound into the mapping stays valid.
 * Why: a decode step reads every dense weight and six experts per layer,
 * scattered over gigabytes; through a file mapping each 4 KiB page costs a
 * TLB miss, and under virtualisation a miss is a two-level page walk. On a
 * 2-vCPU Zen 5 VM a 3 GB Q8_0 model decoded at 27-35 tok/s from the file
 * mapping and 76-99 tok/s from the huge-page copy (bench/RESULTS.md,
 * "Resident weights on huge pages"). The page cache keeps the file as well
 * (reclaimable; the next run loads from it). Returns 1 when the copy could not
 * be made (no memory for it, or mremap refused): the caller falls back to
 * the file mapping; -1 with err on a read error or a short file.
 */
static int resident_copy(struct dsv4_model *m, ms_err *err) {
    const long pg = sysconf(_SC_PAGESIZE);
    const size_t page = pg > 0 ? (size_t)pg : 4096;
    const size_t size = (m->map_size + page - 1) / page * page;
    if ((uintptr_t)m->map % MODEL_HUGE) return 1; /* the huge pages would not survive the move */
    if (!thp_available()) return 1;               /* a copy on small pages would gain nothing */
    char *a = reserve_aligned(size, PROT_READ | PROT_WRITE);
    if (!a) return 1;
#ifdef MADV_HUGEPAGE
    (void)madvise(a, size, MADV_HUGEPAGE);
#endif
    const size_t chunk = 64u << 20;
    for (size_t off = 0; off < m->map_size;) {
        const size_t want = m->map_size - off < chunk ? m->map_size - off : chunk;
        const ssize_t got = pread(m->gguf->fd, a + off, want, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            const int e = got < 0 ? errno : 0;
            munmap(a, size);
            if (e) return ms_err_errno(err, e, "cannot read the model file into memory");
            return ms_err_set(err, "the model file ended at byte %zu while being read into memory", off);
        }
        off += (size_t)got;
    }
    if (mprotect(a, size, PROT_READ) != 0) {
        munmap(a, size);
        return 1;
    }
    if (mremap(a, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, m->map) == MAP_FAILED) {
        /* the kernel may have unmapped the target before failing: map the
         * file there again (same address, so bound pointers stay valid) */
        munmap(a, size);
        if (mmap(m->map, m->map_size, PROT_READ, MAP_PRIVATE | MAP_FIXED, m->gguf->fd, 0) == MAP_FAILED)
            return ms_err_errno(err, errno, "cannot map the model file again");
        return 1;
    }
    m->huge = true;
    return 0;
}

int dsv4_model_populate(struct dsv4_model *m, bool copy, ms_err *err) {
    if (!m->map || !m->map_size) return 0;
    if (copy) {
        const int rc = resident_copy(m, err);
        if (rc <= 0) return rc;
    }
    return populate_mapping(m, err);
}

/* The file mapped read-only at a huge-page boundary (a larger anonymous
 * reservation, the file mapped over its aligned part, the rest released),
 * so that resident_copy's huge pages can take its place. */
static void *map_aligned(size_t size, int fd) {
    char *a = reserve_aligned(size, PROT_NONE);
    if (a && mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) != MAP_FAILED) return a;
    if (a) munmap(a, size);
    return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
}

int dsv4_model_load(struct dsv4_model **out, const char *path, ms_err *err) {
    struct dsv4_model *m = calloc(1, sizeof *m);
    struct dsv4_layout lay = {0};
    if (!m) return ms_err_set(err, "out of memory");
    if (gguf_open(&m->gguf, path, err)) { /* its message names the file */
        free(m);
        return -1;
    }
    if (dsv4_hparams_read(&m->hp, m->gguf, err)) goto fail;
    dsv4_hparams_probe_nextn(&m->hp, m->gguf);
    m->n_layer = dsv4_n_layer(&m->hp);
    if (dsv4_layout_build(&m->hp, &lay, err)) goto fail;

    m->map_size = m->gguf->file_size;
    m->map = map_aligned(m->map_size, m->gguf->fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        ms_err_errno(err, errno, "cannot map %s", path);
        goto fail;
    }

    /* Room for the converted vectors and tables (16-float aligned each). */
    uint64_t arena_floats = 0;
    for (size_t i = 0; i < lay.n; i++) {
        const struct dsv4_tensor_info *ti = &lay.t[i];
        if (ti->n_dims == 1 || role_is_table(ti->role))
            arena_floats += ms_align_up((uint64_t)(ti->ne[0] * ti->ne[1]), 16);
    }
    m->f32_arena = ms_aligned_alloc(MS_ALIGN, arena_floats * sizeof(float));
    m->layers = calloc(m->n_layer ? m->n_layer : 1, sizeof *m->layers);
    if (!m->f32_arena || !m->layers) {
        ms_err_set(err, "out of memory binding %s", path);
        goto fail;
    }
    float *arena = m->f32_arena;
    for (size_t i = 0; i < lay.n; i++) {
        const struct dsv4_tensor_info *ti = &lay.t[i];
        struct dsv4_tensor *dst = ti->layer < 0 ? &m->glob[ti->role] : &m->layers[ti->layer].t[ti->role];
        if (bind_tensor(m, ti, dst, &arena, err)) goto fail;
    }
    for (uint32_t il = 0; il < m->n_layer; il++) m->layers[il].ratio = m->hp.compress_ratio[il];

    /* tid2eid entries index experts: check them once here, not per token. */
    const int64_t E = m->hp.n_expert;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const struct dsv4_tensor *t = &m->layers[il].t[DSV4_FFN_GATE_TID2EID];
        if (!t->present) continue;
        for (int64_t i = 0; i < t->ne[0] * t->ne[1]; i++) {
            if (t->i32[i] < 0 || t->i32[i] >= E) {
                ms_err_set(err, "blk.%u.ffn_gate_tid2eid.weight: entry %lld is %d, not an expert "
                           "id in [0, %lld)", il, (long long)i, t->i32[i], (long long)E);
                goto fail;
            }
        }
    }

    m->experts = (struct dsv4_expert_source){
        .ctx = m, .acquire = resident_acquire, .release = resident_release};
    dsv4_layout_free(&lay);
    *out = m;
    return 0;
fail:
    ms_err_prefix(err, "%s", path);
    dsv4_layout_free(&lay);
    dsv4_model_free(m);
    return -1;
}

void dsv4_model_free(struct dsv4_model *m) {
    if (!m) return;
    if (m->map) munmap(m->map, m->map_size);
    gguf_close(m->gguf);
    free(m->layers);
    ms_free(m->f32_arena);
    free(m);
}

uint64_t dsv4_model_routed_bytes(const struct dsv4_model *m) {
    uint64_t total = 0;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const enum dsv4_role r[3] = {DSV4_FFN_GATE_EXPS, DSV4_FFN_UP_EXPS, DSV4_FFN_DOWN_EXPS};
        for (int k = 0; k < 3; k++) {
            const struct ms_mat *mt = &m->layers[il].t[r[k]].mat;
            total += (uint64_t)mt->n_rows * mt->row_stride;
        }
    }
    return total;
}
