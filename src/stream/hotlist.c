/*
 * hotlist.c - reading expert hotlist files (format in hotlist.h).
 */
#include "stream/hotlist.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses one unsigned decimal field at *p (after blanks); advances *p. */
static int field_u64(const char **p, const char *end, uint64_t *out) {
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    if (s == end || !isdigit((unsigned char)*s)) return -1;
    uint64_t v = 0;
    for (; s < end && isdigit((unsigned char)*s); s++) {
        const uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *p = s;
    *out = v;
    return 0;
}

static int field_double(const char **p, const char *end, double *out) {
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    char tmp[64];
    size_t n = 0;
    while (s + n < end && !isspace((unsigned char)s[n]) && n < sizeof tmp - 1) n++;
    if (n == 0 || n == sizeof tmp - 1) return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    char *stop;
    errno = 0;
    const double v = strtod(tmp, &stop);
    if (*stop || errno || !isfinite(v) || v < 0) return -1;
    *p = s + n;
    *out = v;
    return 0;
}

static int by_rank(const void *a, const void *b) {
    const struct ms_hotlist_entry *x = a, *y = b;
    if (x->hits != y->hits) return x->hits > y->hits ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

static int by_pair(const void *a, const void *b) {
    const struct ms_hotlist_entry *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->expert < y->expert ? -1 : x->expert > y->expert;
}

int ms_hotlist_parse(struct ms_hotlist *out, const char *text, size_t len, const char *name,
                     uint32_t n_layer, uint32_t n_expert, ms_err *err) {
    *out = (struct ms_hotlist){0};
    struct ms_hotlist h = {0};
    size_t cap = 0;
    const char *p = text, *end = text + len;
    uint32_t line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *ce = le > p && le[-1] == '\r' ? le - 1 : le;
        line++;
        if (line == 1) {
            const size_t hl = strlen(MS_HOTLIST_HEADER);
            if ((size_t)(ce - p) != hl || memcmp(p, MS_HOTLIST_HEADER, hl)) {
                ms_err_set(err, "%s:1: not a hotlist (first line must be '%s')", name,
                           MS_HOTLIST_HEADER);
                goto fail;
            }
        } else {
            const char *s = p;
            while (s < ce && (*s == ' ' || *s == '\t')) s++;
            if (s < ce && *s != '#') {
                struct ms_hotlist_entry e = {.line = line};
                uint64_t il, ie;
                if (field_u64(&s, ce, &il) || field_u64(&s, ce, &ie) ||
                    field_u64(&s, ce, &e.hits) || field_double(&s, ce, &e.weight)) {
                    ms_err_set(err, "%s:%u: expected 'layer expert hits weight' (non-negative "
                               "numbers), got '%.*s'", name, line, (int)(ce - p > 80 ? 80 : ce - p), p);
                    goto fail;
                }
                while (s < ce && (*s == ' ' || *s == '\t')) s++;
                if (s != ce) {
                    ms_err_set(err, "%s:%u: unexpected text after the weight: '%.*s'", name, line,
                               (int)(ce - s > 40 ? 40 : ce - s), s);
                    goto fail;
                }
                if (il >= n_layer || ie >= n_expert) {
                    ms_err_set(err, "%s:%u: (layer %llu, expert %llu) outside the model's %u "
                               "layers x %u experts", name, line, (unsigned long long)il,
                               (unsigned long long)ie, n_layer, n_expert);
                    goto fail;
                }
                e.layer = (uint32_t)il;
                e.expert = (uint32_t)ie;
                if (h.n == cap) {
                    cap = cap ? 2 * cap : 256;
                    struct ms_hotlist_entry *ne = realloc(h.e, cap * sizeof *ne);
                    if (!ne) {
                        ms_err_set(err, "%s: out of memory", name);
                        goto fail;
                    }
                    h.e = ne;
                }
                h.e[h.n++] = e;
            }
        }
        p = nl ? nl + 1 : end;
    }
    if (line == 0) {
        ms_err_set(err, "%s: empty file, not a hotlist", name);
        goto fail;
    }
    /* Duplicates: sort by pair, compare neighbours. */
    if (h.n) qsort(h.e, h.n, sizeof *h.e, by_pair); /* qsort(NULL, 0) is UB */
    for (size_t i = 1; i < h.n; i++)
        if (!by_pair(&h.e[i - 1], &h.e[i])) {
            const struct ms_hotlist_entry *a = &h.e[i - 1], *b = &h.e[i];
            ms_err_set(err, "%s:%u: (layer %u, expert %u) already listed on line %u", name,
                       a->line > b->line ? a->line : b->line, a->layer, a->expert,
                       a->line < b->line ? a->line : b->line);
            goto fail;
        }
    if (h.n) qsort(h.e, h.n, sizeof *h.e, by_rank);
    for (size_t r = 0; r < h.n; r++)
        h.e[r].priority = (uint32_t)(1 + (MS_HOTLIST_PRIO_MAX - 1) * (h.n - r) / h.n);
    *out = h;
    return 0;
fail:
    free(h.e);
    return -1;
}

int ms_hotlist_load(struct ms_hotlist *out, const char *path, uint32_t n_layer,
                    uint32_t n_expert, ms_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ms_err_errno(err, errno, "cannot open hotlist %s", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return ms_err_set(err, "%s: out of memory", path);
            }
            buf = nb;
        }
        const size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    const int bad = ferror(f);
    fclose(f);
    int rc = bad ? ms_err_set(err, "cannot read hotlist %s", path)
                 : ms_hotlist_parse(out, buf, len, path, n_layer, n_expert, err);
    free(buf);
    return rc;
}

void ms_hotlist_free(struct ms_hotlist *h) {
    free(h->e);
    *h = (struct ms_hotlist){0};
}

int ms_hotlist_write(const char *path, uint32_t n_layer, uint32_t n_expert, const uint64_t *hits,
                     const double *weight, ms_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return ms_err_errno(err, errno, "cannot write %s", path);
    int bad = fprintf(f, "%s\n", MS_HOTLIST_HEADER) < 0;
    for (uint32_t il = 0; il < n_layer && !bad; il++)
        for (uint32_t x = 0; x < n_expert && !bad; x++) {
            const size_t i = (size_t)il * n_expert + x;
            if (hits[i])
                bad = fprintf(f, "%u %u %llu %.9g\n", il, x, (unsigned long long)hits[i],
                              weight[i]) < 0;
        }
    if (fclose(f) || bad) return ms_err_errno(err, errno ? errno : EIO, "cannot write %s", path);
    return 0;
}
