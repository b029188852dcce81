/*
 * kvstore.h - internal constants of the disk KV store and its fault
 * injection hooks (tests only). The API is in moestream.h; the file format
 * in docs/kv-cache.md.
 */
#ifndef MS_KVSTORE_KVSTORE_H
#define MS_KVSTORE_KVSTORE_H

#include <stdint.h>

#include "moestream.h"

#define MS_KV_MAGIC "MSKV"
#define MS_KV_VERSION 1u
#define MS_KV_HEADER_BYTES 128u
#define MS_KV_HIT_HALF_LIFE_S (6.0 * 3600.0) /* hits count half after 6 hours */
#define MS_KV_ANCHOR_FACTOR 2.0              /* cold / evict / shutdown keep score x2 */

/* Fault injection for the tests: the next writes fail with errnum (e.g.
 * ENOSPC) once fail_at bytes of a file are written (0: off); the process
 * kills itself with SIGKILL once kill_at bytes are written (0: off). */
void ms_kv_test_faults(struct ms_kvstore *kv, uint64_t fail_at, int errnum, uint64_t kill_at);

#endif
