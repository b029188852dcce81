/*
 * test_cpu.h - what the test machine's CPU can run, with the same
 * requirements as the kernel dispatch (src/quant/quant_dispatch.c): the AVX2
 * set needs AVX2 + FMA + F16C, the AVX-512 set also F/BW/VL/DQ/VNNI, its
 * VBMI kernels VBMI as well. Tests
 * call an ISA's kernels directly only when these say yes.
 */
#ifndef MS_TEST_CPU_H
#define MS_TEST_CPU_H

#include <cpuid.h>
#include <stdbool.h>

static inline bool cpu_avx2(void) {
    unsigned a, b, c, d; /* F16C: CPUID.1:ECX bit 29 (clang's builtin lacks "f16c") */
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

static inline bool cpu_avx512(void) {
    return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

/* The VBMI kernels (quant_iq2_avx512vbmi.c): the AVX-512 set, VBMI and BITALG. */
static inline bool cpu_avx512vbmi(void) {
    return cpu_avx512() && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bitalg");
}

#endif
