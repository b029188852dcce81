/*
 * le.h - fixed little-endian integers in byte buffers, for on-disk formats
 * (the disk KV checkpoint envelope in kvstore/ and the session payload in
 * model/session_io.c). Byte by byte, so they are correct on any host and at
 * any alignment; compilers turn each loop into one load or store on x86.
 */
#ifndef MS_UTIL_LE_H
#define MS_UTIL_LE_H

#include <stdint.h>

/* Writes v to p[0..4) / p[0..8), least significant byte first. */
static inline void ms_put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ms_put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads a little-endian value from p[0..4) / p[0..8). */
static inline uint32_t ms_get_le32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t ms_get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
