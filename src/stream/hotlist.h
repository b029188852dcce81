/*
 * hotlist.h - expert hotlist files: which (layer, expert) pairs a routing
 * profile found most used, to seed the decode cache's priorities.
 *
 * Format (text, one record per line):
 *     # moestream expert hotlist v1
 *     layer expert hits weight
 *     ...
 * layer and expert are decimal indices, hits a decimal count, weight a
 * finite non-negative number (the profiler's summed router weight). Blank
 * lines and lines starting with '#' after the header are ignored. Any other
 * line is an error naming the file and line. A (layer, expert) pair may
 * appear once.
 *
 * Priority by rank (from ds4's seeding of its streaming cache, seed 003):
 * entries sorted by hits (descending, ties in file order) get priority
 * 1 + 31 * (total - rank) / total, i.e. 32 for the first down to 1.
 */
#ifndef MS_STREAM_HOTLIST_H
#define MS_STREAM_HOTLIST_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define MS_HOTLIST_HEADER "# moestream expert hotlist v1"
#define MS_HOTLIST_PRIO_MAX 32u

struct ms_hotlist_entry {
    uint32_t layer, expert;
    uint64_t hits;
    double weight;
    uint32_t priority; /* 1..32, from the rank */
    uint32_t line;     /* 1-based line in the file */
};

struct ms_hotlist {
    struct ms_hotlist_entry *e; /* sorted by rank (most hits first) */
    size_t n;
};

/*
 * Parses text[0..len) (need not be NUL-terminated); `name` names the source
 * in errors ("FILE:LINE: ..."). n_layer / n_expert bound the indices (an
 * entry outside them is an error). On success *out owns its entries (free
 * with ms_hotlist_free). Errors: missing header, malformed or out-of-range
 * line, duplicate pair, OOM.
 */
int ms_hotlist_parse(struct ms_hotlist *out, const char *text, size_t len, const char *name,
                     uint32_t n_layer, uint32_t n_expert, ms_err *err);
/* Reads and parses the file at path. */
int ms_hotlist_load(struct ms_hotlist *out, const char *path, uint32_t n_layer,
                    uint32_t n_expert, ms_err *err);
void ms_hotlist_free(struct ms_hotlist *h);

/*
 * Writes a routing profile in the format above to path: one line per
 * (layer, expert) with hits > 0, layer-major. hits and weight are
 * [n_layer][n_expert] arrays (the selections counted and the router weights
 * summed over a run). Errors: the file cannot be created or written.
 */
int ms_hotlist_write(const char *path, uint32_t n_layer, uint32_t n_expert, const uint64_t *hits,
                     const double *weight, ms_err *err);

#endif
