/*
 * budget.c - memory limits and the residency/cache plan (see budget.h).
 */
#include "stream/budget.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads one unsigned integer from a file; "max" (cgroup v2) is UINT64_MAX. */
static int read_u64_file(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[64] = {0};
    const bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    if (!strncmp(buf, "max", 3)) {
        *out = UINT64_MAX;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf || errno) return -1;
    *out = v;
    return 0;
}

/* The cgroup limit of this process, or UINT64_MAX when there is none. */
static uint64_t cgroup_limit(const char *proc_root, const char *sys_root, const char **source) {
    char path[512], line[512];
    snprintf(path, sizeof path, "%s/self/cgroup", proc_root);
    FILE *f = fopen(path, "r");
    if (!f) return UINT64_MAX;
    uint64_t best = UINT64_MAX;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        /* v1: "N:memory:/path"; v2: "0::/path" */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *ctrl = c1 + 1, *cg = c2 + 1;
        uint64_t v;
        if (!strcmp(ctrl, "memory")) {
            snprintf(path, sizeof path, "%s/memory%s/memory.limit_in_bytes", sys_root, cg);
            if (!read_u64_file(path, &v) && v < best) {
                best = v;
                *source = "cgroup v1";
            }
        } else if (!*ctrl) {
            snprintf(path, sizeof path, "%s%s/memory.max", sys_root, cg);
            if (!read_u64_file(path, &v) && v < best) {
                best = v;
                *source = "cgroup v2";
            }
        }
    }
    fclose(f);
    return best;
}

static int mem_available(const char *proc_root, uint64_t *out) {
    char path[512], line[256];
    snprintf(path, sizeof path, "%s/meminfo", proc_root);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *out = (uint64_t)kb * 1024;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

int ms_mem_limit(uint64_t *bytes, const char **source, const char *proc_root,
                 const char *sys_root, ms_err *err) {
    uint64_t avail = UINT64_MAX;
    const char *src = "cgroup";
    const uint64_t cg = cgroup_limit(proc_root, sys_root, &src);
    const bool have_avail = mem_available(proc_root, &avail) == 0;
    if (!have_avail && cg == UINT64_MAX)
        return ms_err_set(err, "cannot tell how much memory is available (no %s/meminfo and "
                          "no memory cgroup limit)", proc_root);
    if (cg < avail) {
        *bytes = cg;
        *source = src;
    } else {
        *bytes = avail;
        *source = "MemAvailable";
    }
    return 0;
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int ms_mem_plan(const struct ms_mem_plan_in *in, struct ms_mem_plan *out, ms_err *err) {
    memset(out, 0, sizeof *out);
    const double pct = in->pct > 0 && in->pct <= 100 ? in->pct : 80;
    out->usable_bytes = (uint64_t)((double)in->limit_bytes * pct / 100.0);
    out->dense_bytes = in->file_bytes - in->routed_bytes;
    out->resident_need = in->file_bytes + in->session_bytes;
    out->stream = in->stream == 1 || (in->stream < 0 && out->resident_need > out->usable_bytes);
    if (!out->stream) {
        /* forced resident (--no-stream) beyond the usable memory, the
         * weights stay a file mapping (page cache, reclaimable: the engine
         * copies them to huge pages only when resident_need fits); the
         * sessions must fit either way */
        if (in->session_bytes > out->usable_bytes)
            return ms_err_set(err,
                              "not enough memory for the sessions: %.2f GiB needed, %.2f GiB "
                              "usable",
                              gib(in->session_bytes), gib(out->usable_bytes));
        return 0;
    }

    out->headroom_bytes = in->no_whole_layer ? 0 : 2 * in->max_layer_routed;
    uint64_t fixed = out->dense_bytes + in->full_bytes + in->session_bytes + out->headroom_bytes;
    uint64_t room = out->usable_bytes > fixed ? out->usable_bytes - fixed : 0;
    if (room < in->min_cache_bytes && out->headroom_bytes &&
        out->usable_bytes >= fixed - out->headroom_bytes + in->min_cache_bytes) {
        /* no room for the whole-layer buffers: stream the prefill through
         * the cache instead */
        fixed -= out->headroom_bytes;
        out->headroom_bytes = 0;
        out->whole_layer_dropped = true;
        room = out->usable_bytes - fixed;
    }
    if (room < in->min_cache_bytes)
        return ms_err_set(err,
                          "not enough memory to stream: %.2f GiB usable, %.2f GiB dense "
                          "(and whole-layer) weights + %.2f GiB sessions + %.2f GiB prefill "
                          "headroom leave %.2f GiB, the expert cache needs at least %.3f GiB",
                          gib(out->usable_bytes), gib(out->dense_bytes + in->full_bytes),
                          gib(in->session_bytes), gib(out->headroom_bytes), gib(room),
                          gib(in->min_cache_bytes));
    uint64_t cache = in->cache_bytes ? in->cache_bytes : room;
    if (cache > room) cache = room;
    const uint64_t streamed = in->routed_bytes > in->full_bytes ? in->routed_bytes - in->full_bytes
                                                                : 0;
    if (cache > streamed) cache = streamed;
    if (cache < in->min_cache_bytes) cache = in->min_cache_bytes;
    out->cache_bytes = cache;
    return 0;
}

