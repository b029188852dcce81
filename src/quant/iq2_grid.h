/*
 * iq2_grid.h - internal: the IQ2_XXS lattice grid and sign tables
 * (defined in quant_kq_grid.c). Only quant/ includes this header.
 *
 * An IQ2_XXS group of 8 values is grid[idx] (8 unsigned magnitudes, element j
 * in byte j) with element j negated when bit j of ms_iq2_ksigns[s7] is set.
 */
#ifndef MS_QUANT_IQ2_GRID_H
#define MS_QUANT_IQ2_GRID_H

#include <stdint.h>

#define MS_IQ2XXS_GRID_SIZE 256

extern const uint64_t ms_iq2xxs_grid[MS_IQ2XXS_GRID_SIZE];
extern const uint8_t ms_iq2_ksigns[128];
/* The grid's points as 2-bit levels: element j of point idx is magnitude
 * {8, 25, 43}[(ms_iq2xxs_levels[idx] >> 2 j) & 3]. */
extern const uint16_t ms_iq2xxs_levels[MS_IQ2XXS_GRID_SIZE];
/* ms_iq2xxs_levels in bytes: [h][idx] holds the levels of elements 4 h ..
 * 4 h + 3 of point idx, element j at bits 2 (j % 4). */
extern const uint8_t ms_iq2xxs_level_bytes[2][MS_IQ2XXS_GRID_SIZE];
/* Byte j of ms_iq2_signs64[s7]: -1 if bit j of ms_iq2_ksigns[s7] is set, else +1. */
extern const uint64_t ms_iq2_signs64[128];

/* 64 + the weight whose 2-bit level field is at bits f, f + 1 of i and
 * whose sign is bit s of i (set: negative), for the byte tables of the
 * element-major dots (quant_iq2_avx512.c, quant_iq2_avx512vbmi.c): offset
 * binary, 21..107, vpdpbusd's unsigned operand; magnitudes 8, 25, 43 are
 * the grid's levels (0x08, 0x19, 0x2b), level 3 does not occur. */
#define MS_IQ2_LEVEL_MAG(x) ((x) == 0 ? 8 : (x) == 1 ? 25 : (x) == 2 ? 43 : 0)
#define MS_IQ2_W_OFFSET(i, f, s) (uint8_t)(64 + ((((i) >> (s)) & 1) ? -1 : 1) * MS_IQ2_LEVEL_MAG(((i) >> (f)) & 3))

/* Magnitude of element j (0..7) of grid point idx. */
static inline int ms_iq2xxs_grid_val(unsigned idx, int j) {
    return (int)((ms_iq2xxs_grid[idx] >> (8 * j)) & 0xff);
}

#endif
