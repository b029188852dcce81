/*
 * quant_dispatch.c - attaches kernels to the type traits table, once, at
 * start-up (called from quant.c's ms_quant_init).
 *
 * The reference table always gets the scalar kernels. The active table gets
 * the widest kernel set the CPU (and OS) support:
 *   avx512  AVX-512 F+BW+VL+DQ with FMA and F16C
 *   avx2    AVX2 with FMA and F16C
 *   scalar  everything else
 * MS_ISA=scalar|avx2|avx512 in the environment caps the choice (it can never
 * select a set the CPU lacks); an unknown value is ignored. Within the
 * AVX-512 set some entries take AVX2 kernels that measured faster: always
 * (q4_K_isa, dot_f32_isa) or where 512-bit operations are split in two
 * (split_isa; MS_AVX512_SPLIT=0|1 overrides that detection). Kernels without a
 * SIMD version (the MXFP4 and k-quant quantizers, Q8_K dequantize) stay
 * scalar in every set.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

const char *ms_quant_attach_kernels(struct ms_type_traits *ref, struct ms_type_traits *active, bool *split,
                                    bool *vbmi);

enum isa { ISA_SCALAR, ISA_AVX2, ISA_AVX512 };

static const char *const isa_names[] = {"scalar", "avx2", "avx512"};

/* F32 rows need no conversion; these give the table uniform entries. */
static void f32_copy_to_float(const void *restrict x, float *restrict y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}
static void f32_copy_from_float(const float *restrict x, void *restrict y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}

#if defined(__x86_64__) || defined(__i386__)
/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does
 * not know "f16c". Its register state is the AVX state the avx2 check covers. */
static bool cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static enum isa detect_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool f16c = cpu_has_f16c();
    /* The AVX-512 set includes VNNI (Ice Lake, Zen 4 and later): the int8
     * dots use vpdpbusd. Older AVX-512 parts (Skylake-X) take the AVX2 set.
     * __builtin_cpu_supports also checks that the OS saves the wider
     * register state (XCR0), so a "yes" here means usable. */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") && f16c &&
        __builtin_cpu_supports("avx2"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)
        return ISA_AVX2;
#endif
    return ISA_SCALAR;
}

/* Whether the CPU executes each 512-bit operation as two 256-bit halves:
 * AMD Zen 4 (family 19h; its Zen 3 members have no AVX-512, so with the
 * AVX-512 set picked family 19h means Zen 4). Zen 5 (1Ah) and Intel's
 * AVX-512 cores have full-width units. On a split part a 512-bit kernel
 * issues as many micro-ops per byte as the 256-bit one, while its wider
 * shuffles, gathers and reductions cost more, and several AVX2 kernels
 * measured faster (see split_isa). MS_AVX512_SPLIT=0|1 in the environment
 * overrides the detection (for measurement on either kind of part). */
static bool cpu_avx512_split(void) {
    const char *v = getenv("MS_AVX512_SPLIT");
    if (v && (!strcmp(v, "0") || !strcmp(v, "1"))) return v[0] == '1';
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    /* "AuthenticAMD" in EBX, EDX, ECX */
    if (b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const unsigned base = (a >> 8) & 0xfu;
    const unsigned family = base == 0xfu ? base + ((a >> 20) & 0xffu) : base;
    return family == 0x19u;
#else
    return false;
#endif
}

/* Whether the AVX-512 set may take the VBMI kernels (quant_iq2_avx512vbmi.c):
 * the CPU reports AVX512_VBMI (Ice Lake, Zen 4 and later; Skylake-X and
 * Cascade Lake do not). MS_AVX512_VBMI=0 in the environment turns them off,
 * for measurement and to test the VBMI-less forms on a VBMI part. */
static bool cpu_avx512_vbmi(void) {
    const char *v = getenv("MS_AVX512_VBMI");
    if (v && !strcmp(v, "0")) return false;
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bitalg");
#else
    return false;
#endif
}

static enum isa env_cap(void) {
    const char *v = getenv("MS_ISA");
    if (!v) return ISA_AVX512;
    for (int i = 0; i <= ISA_AVX512; i++)
        if (!strcmp(v, isa_names[i])) return (enum isa)i;
    return ISA_AVX512;
}

/* One format's kernels, picked for an ISA. */
struct kset {
    ms_to_float_fn to_float;
    ms_from_float_fn from_float;
    ms_vec_dot_fn vec_dot;
    ms_vec_dot_fn vec_dot_f32;
};

#define KSET(deq, q, dot, dotf) ((struct kset){(deq), (q), (dot), (dotf)})
#define PICK(isa, r, a2, a5) ((isa) == ISA_AVX512 ? (a5) : (isa) == ISA_AVX2 ? (a2) : (r))
/* name##_ref, name##_avx2 or name##_avx512 (quant_impl.h's naming) */
#define PICK_ISA(isa, name) PICK(isa, name##_ref, name##_avx2, name##_avx512)
/* A format with weight fmt and activation format act, all four kernels
 * picked for isa; the _REFQ form keeps the scalar quantizer in every set. */
#define KSET_ISA(isa, fmt, act)                                                                          \
    KSET(PICK_ISA(isa, ms_dequant_##fmt), PICK_ISA(isa, ms_quant_##fmt), PICK_ISA(isa, ms_dot_##fmt##_##act), \
         PICK_ISA(isa, ms_dot_##fmt##_f32))
#define KSET_ISA_REFQ(isa, fmt, act)                                                                  \
    KSET(PICK_ISA(isa, ms_dequant_##fmt), ms_quant_##fmt##_ref, PICK_ISA(isa, ms_dot_##fmt##_##act), \
         PICK_ISA(isa, ms_dot_##fmt##_f32))

static void set_kernels(struct ms_type_traits *t, enum ms_type vec_dot_type, struct kset k) {
    t->has_kernels = true;
    t->vec_dot_type = vec_dot_type;
    t->to_float = k.to_float;
    t->from_float = k.from_float;
    t->vec_dot = k.vec_dot;
    t->vec_dot_f32 = k.vec_dot_f32;
    t->vec_dot_x4 = NULL; /* attach_x4 sets the ones that exist */
    t->vec_dot_f32_x4 = NULL;
    t->vec_dot_rows = NULL; /* attach_rows sets the ones that exist */
    t->vec_dot_rows_n = NULL;
    t->act_pack = NULL; /* attach_gemm_tok sets the ones that exist */
    t->gemm_tok = NULL;
    t->act_pack_block = 0;
    t->gemm_tok_lanes = 0;
    t->gemm_tok_min = 0;
    t->gemm_tok_groups = 0;
    t->gemm_tok_min_paired = 0;
    t->gemm_tok_f32 = NULL;
    t->gemm_tok_f32_min = 0;
    t->gemm_tok_f32_rows = false;
    t->q16_from_float = NULL; /* attach_q16 sets the ones that exist */
    t->vec_dot_q16 = NULL;
    t->vec_dot_q16_x4 = NULL;
    t->vec_dot_q16_rows = NULL;
    t->vec_dot_q16_rows_n = NULL;
    t->q16_pack = NULL;
    t->gemm_tok_q16 = NULL;
    t->q16_pack_block = 0;
    t->gemm_tok_q16_lanes = 0;
    t->gemm_tok_q16_min = 0;
}

/* The kernel set Q4_K runs on for a machine's isa: the AVX-512 set takes
 * the AVX2 kernels, which measured faster on a Zen 5 core (bench_kernels
 * -t 1 --types q4_K --rows 4096 --cols 4096 --batches 1,512: single-token
 * dot 47-57 against 37-39 GFLOPS, the token-lane GEMM 124-125 against
 * 103-108 for the VNNI x4 dot; decode of a Q4_K model +7-19%). The
 * AVX-512 single-token kernel stays built and tested (test_quant_x4 calls
 * it directly) for parts where it may win; the AVX-512 x4 dot is used
 * (attach_x4). Every set equals the reference bit for bit, so single, x4
 * and token-lane kernels agree whichever set each comes from. */
static enum isa q4_K_isa(enum isa isa) { return isa == ISA_AVX512 ? ISA_AVX2 : isa; }

/* The kernel set the f32-activation dots of Q8_0, F16 and BF16 (exact
 * mode, and the dense products fast mode keeps in f32) run on: the
 * AVX-512 set takes the AVX2 kernels, which measured faster on a Zen 5
 * core where it matters most, a decode step streaming its dense weights
 * from DRAM (bench_kernels -t 1 --activations f32 --rows 256 --cols 4096
 * --batches 1 --working-set 256: Q8_0 12.0-13.0 against 9.2 GB/s, F16
 * 18.3-19.1 against 15.0-15.9), and equal or better at 4 and 512 tokens
 * (Q8_0 34-36 / 46-49 against 34-35 / 44-46 GFLOPS, F16 24-25 / 44-45
 * against 24-25 / 41-44). Single and x4 come from one set, so they agree
 * bit for bit; the int8 dots keep the AVX-512 kernels. */
static enum isa dot_f32_isa(enum isa isa) { return isa == ISA_AVX512 ? ISA_AVX2 : isa; }

/* The kernel set that the kernels below run on where 512-bit operations
 * are split in two (cpu_avx512_split, Zen 4): the AVX2 one, for the
 * entries whose 512-bit form does about as much work a block as its AVX2
 * twin and so gains nothing from the width (a split core issues both
 * halves) while paying twice for its wide shuffles and reductions.
 * Measured on a 2-vCPU Zen 4 VM (EPYC family 19h model 11h) at commit
 * e7d27df, bench_kernels -t 1, best repetition, weights from a 512 MiB
 * working set (IQ2_XXS and Q2_K: 512 x 1024, --order random; Q8_0: 1024 x
 * 4096), AVX-512 against AVX2 kernel, three interleaved runs each:
 *   Q2_K one token 9.6-9.7 against 11.1-11.5 GB/s;
 *   IQ2_XXS one token (without VBMI) 3.8-3.9 against 4.1 GB/s;
 *   Q8_0 x Q16_0 one token 20.3-20.9 against 23.0-24.3 GB/s, four tokens
 *   42-51 against 50-51 GFLOPS.
 * (one token: the single dot, which decode's matmuls call only where a
 * format has no many-rows dot or a row is too long for it.) Everything
 * else stays on the AVX-512 set there, measured the faster in the same
 * runs: the many-rows dots of Q2_K (13.1-13.5 against 12.2-12.9 GB/s),
 * IQ2_XXS without VBMI (6.3-6.5 against 4.4-4.5) and Q8_0 x Q16_0
 * (26.9-28.7 against 23.1-25.1); the four-token dots of Q8_0 x Q8_0 (73-74
 * against 65-66 GFLOPS) and IQ2_XXS without VBMI (67-68 against 60-61);
 * the Q8_0 x Q16_0 token-lane GEMM (16 tokens: 119-124 against 107-108)
 * and the VNNI GEMMs of the int8 formats (Q8_0 / Q2_K / IQ2_XXS at 16
 * tokens: 145-158 / 160-167 / 146-150 against 102 / 116 / 88). The
 * earlier table of an older Zen 4 VM (bench/RESULTS.md, "Zen 4 scaling
 * run") measured the single dots of the time, before the many-rows forms
 * and the current x4 kernels. Each pair is equal bit for bit (the
 * k-quants equal the reference, the Q8_0 dots share one order), so the
 * sets mix. */
static enum isa split_isa(enum isa isa, bool split) { return isa == ISA_AVX512 && split ? ISA_AVX2 : isa; }

/* A kernel that exists for the SIMD sets only (four-token and many-rows
 * dots): NULL for the scalar set, and matmul falls back to the single dot. */
#define PICK_SIMD(isa, name) ((isa) == ISA_AVX512 ? name##_avx512 : (isa) == ISA_AVX2 ? name##_avx2 : NULL)

/* The many-rows dots (ms_vec_dot_rows_fn), from the set each format's single
 * dot comes from (the scalar table has none): decode's one-token matmuls
 * call them once a tile instead of the single dot once a row. Q8_0, Q8_0
 * x Q16_0, Q2_K and IQ2_XXS have AVX-512 kernels of their own, IQ2_XXS a
 * VBMI one besides (the activation prepared once a call;
 * quant_basic_avx512.c, quant_q16_avx512.c, quant_kq_avx512.c,
 * quant_iq2_avx512.c, quant_iq2_avx512vbmi.c), the others are their single
 * dot inlined in a loop over rows (MS_DEFINE_DOT_ROWS). One
 * token of the Q8_0 bench model decoded at 115 -> 130 tok/s on a Zen 5
 * core (bench/RESULTS.md, "Zen 5 ... many-rows dots"). The many-rows
 * dots for up to four tokens (ms_vec_dot_rows_n_fn): every quantized
 * format but MXFP4 in both sets, IQ2_XXS with a VBMI form besides
 * (attach_vbmi). The AVX-512 Q8_0 and Q2_K forms and the VBMI one expand
 * a row once for the tokens; the others run the four-token dot's body row
 * by row for the tokens given (which the matmul used to run for four
 * lanes whatever the tokens). */
static void attach_rows(struct ms_type_traits *tab, enum isa isa, bool split) {
    tab[MS_TYPE_Q8_0].vec_dot_rows = PICK_SIMD(isa, ms_dot_rows_q8_0_q8_0);
    tab[MS_TYPE_Q8_0].vec_dot_rows_n = PICK_SIMD(isa, ms_dot_rows_n_q8_0_q8_0);
    tab[MS_TYPE_Q4_K].vec_dot_rows = q4_K_isa(isa) == ISA_AVX2 ? ms_dot_rows_q4_K_q8_K_avx2 : NULL;
    tab[MS_TYPE_Q2_K].vec_dot_rows = PICK_SIMD(isa, ms_dot_rows_q2_K_q8_K);
    tab[MS_TYPE_Q2_K].vec_dot_rows_n = PICK_SIMD(isa, ms_dot_rows_n_q2_K_q8_K);
    tab[MS_TYPE_Q5_K].vec_dot_rows = PICK_SIMD(isa, ms_dot_rows_q5_K_q8_K);
    tab[MS_TYPE_Q3_K].vec_dot_rows = PICK_SIMD(isa, ms_dot_rows_q3_K_q8_K);
    tab[MS_TYPE_IQ2_XXS].vec_dot_rows = PICK_SIMD(isa, ms_dot_rows_iq2_xxs_q8_K);
    tab[MS_TYPE_IQ2_XXS].vec_dot_rows_n = PICK_SIMD(isa, ms_dot_rows_n_iq2_xxs_q8_K);
    /* Q6_K: the set's own form, split parts included (see attach_x4) */
    tab[MS_TYPE_Q6_K].vec_dot_rows = PICK_SIMD(isa, ms_dot_rows_q6_K_q8_K);
    /* IQ4_XS: a split part's one-token forms from the AVX2 set (see attach) */
    tab[MS_TYPE_IQ4_XS].vec_dot_rows = PICK_SIMD(split_isa(isa, split), ms_dot_rows_iq4_xs_q8_K);
    /* the others' for up to four tokens: the four-token dot's set */
    tab[MS_TYPE_Q4_K].vec_dot_rows_n = PICK_SIMD(isa, ms_dot_rows_n_q4_K_q8_K);
    tab[MS_TYPE_Q5_K].vec_dot_rows_n = PICK_SIMD(isa, ms_dot_rows_n_q5_K_q8_K);
    tab[MS_TYPE_Q3_K].vec_dot_rows_n = PICK_SIMD(isa, ms_dot_rows_n_q3_K_q8_K);
    tab[MS_TYPE_Q6_K].vec_dot_rows_n = PICK_SIMD(isa, ms_dot_rows_n_q6_K_q8_K);
    tab[MS_TYPE_IQ4_XS].vec_dot_rows_n = PICK_SIMD(isa, ms_dot_rows_n_iq4_xs_q8_K);
}

/* The four-token dots (ms_vec_dot_x4_fn) exist for the SIMD sets only; the
 * scalar table leaves them NULL and matmul falls back to the single kernel. */

static void attach_x4(struct ms_type_traits *tab, enum isa isa) {
    tab[MS_TYPE_F32].vec_dot_x4 = PICK_SIMD(isa, ms_dot_f32_f32_x4);
    tab[MS_TYPE_F32].vec_dot_f32_x4 = PICK_SIMD(isa, ms_dot_f32_f32_x4);
    tab[MS_TYPE_F16].vec_dot_f32_x4 = PICK_SIMD(dot_f32_isa(isa), ms_dot_f16_f32_x4);
    tab[MS_TYPE_BF16].vec_dot_f32_x4 = PICK_SIMD(dot_f32_isa(isa), ms_dot_bf16_f32_x4);
    tab[MS_TYPE_Q8_0].vec_dot_x4 = PICK_SIMD(isa, ms_dot_q8_0_q8_0_x4);
    tab[MS_TYPE_Q8_0].vec_dot_f32_x4 = PICK_SIMD(dot_f32_isa(isa), ms_dot_q8_0_f32_x4);
    tab[MS_TYPE_MXFP4].vec_dot_x4 = PICK_SIMD(isa, ms_dot_mxfp4_q8_0_x4);
    /* Q4_K x4: the AVX-512 kernel (the single-token dot stays AVX2, see
     * q4_K_isa; every set equals the reference bit for bit, so they mix):
     * 147-150 against 97-100 GFLOPS for 4 tokens of a 512 x 1024 expert
     * matrix from DRAM on a Zen 5 core (bench_kernels -t 1 --types q4_K
     * --rows 512 --cols 1024 --batches 4 --working-set 1024) */
    tab[MS_TYPE_Q4_K].vec_dot_x4 = PICK_SIMD(isa, ms_dot_q4_K_q8_K_x4);
    tab[MS_TYPE_Q2_K].vec_dot_x4 = PICK_SIMD(isa, ms_dot_q2_K_q8_K_x4);
    tab[MS_TYPE_Q5_K].vec_dot_x4 = PICK_SIMD(isa, ms_dot_q5_K_q8_K_x4);
    tab[MS_TYPE_Q3_K].vec_dot_x4 = PICK_SIMD(isa, ms_dot_q3_K_q8_K_x4);
    tab[MS_TYPE_IQ2_XXS].vec_dot_x4 = PICK_SIMD(isa, ms_dot_iq2_xxs_q8_K_x4);
    /* Q6_K: every form from the machine's set: on a Zen 5 core
     * (full-width; bench_kernels -t 1 --types q6_K --rows 1024 --cols 4096
     * --batches 1,4, a busy 2-core VM, mean / best of 0.5 s) the AVX-512
     * many-rows dot (one token) ran 101-112 against AVX2's 67-73 GFLOPS
     * in cache and 22.2 / 34.7 against 21.3 / 25.3 GB/s from a 512 MiB
     * working set, the x4 dot 191-208 against 101-114 GFLOPS in cache and
     * 160-181 against 80-109 from DRAM. Split parts (Zen 4) take the
     * AVX-512 forms too: the code assembly and vpmaddubsw cost the same
     * micro-ops either way, while the AVX-512 form fuses each scale
     * multiply with its sum, vpdpwssd for vpmaddwd and vpaddd, and makes a
     * block's scales with four word permutes for the AVX2 form's eight
     * byte shuffles and sign extensions. Measured on a Zen 4 core at
     * 960ced3 (bench_kernels -t 1 --rows 2048 --cols 4096 --batches
     * 1,2,3,4 --working-set 512 --order random, against MS_ISA=avx2, best
     * ms, two interleaved runs): Q6_K 0.246 / 0.336 / 0.445 / 0.546
     * against 0.282 / 0.380 / 0.526 / 0.629. */
    tab[MS_TYPE_Q6_K].vec_dot_x4 = PICK_SIMD(isa, ms_dot_q6_K_q8_K_x4);
    tab[MS_TYPE_IQ4_XS].vec_dot_x4 = PICK_SIMD(isa, ms_dot_iq4_xs_q8_K_x4);
}

/* The token-lane GEMMs (ms_gemm_tok_fn). AVX2 set: Q4_K and Q2_K, 8 tokens
 * per 256-bit vector (vpmaddubsw, int16 sums per sub-block), Q6_K the same
 * way (two steps summed in int16 per vpmaddwd by its int8 scale), and Q8_0 and
 * IQ2_XXS with both sides widened to int16 (vpmaddwd; a Zen 3 core,
 * bench_kernels -t 1 --rows 4096 --cols 4096 --batches 16,512: Q8_0
 * 96-102 against the x4 dot's 61 GFLOPS, IQ2_XXS 72-75 against 51). AVX-512 set:
 * Q4_K, Q2_K, Q6_K and Q8_0, 16 tokens per 512-bit vector with VNNI's vpdpbusd
 * (measured on a Zen 5 core, bench_kernels -t 1 --rows 4096 --cols 4096
 * --batches 16,512, GFLOPS at 16 / 512 tokens: Q4_K 149-172 / 179-193
 * against the AVX2 token-lane form's 106-130 / 124-134, Q2_K 158-166 /
 * 163-169 against the VNNI x4 dot's 102-116 / 95-102, Q8_0 150-154 /
 * 183-188 against 69-73 / 75-78, IQ2_XXS 139-156 / 150-158 against the
 * x4 dot's 78-84 / 68-77; since then both sets' kernels are faster, see
 * bench/RESULTS.md). A last partial group goes through the GEMM when it
 * has at least as many tokens as the pass costs in x4-dot tokens: the
 * thresholds are in attach_gemm_tok. The scalar table has none. */
static void set_gemm_tok(struct ms_type_traits *t, ms_act_pack_fn pack, ms_gemm_tok_fn gemm, size_t pack_block,
                         int lanes, int min) {
    t->act_pack = pack;
    t->gemm_tok = gemm;
    t->act_pack_block = pack_block;
    t->gemm_tok_lanes = lanes;
    t->gemm_tok_min = min;
    t->gemm_tok_groups = 1;
}

static void attach_gemm_tok(struct ms_type_traits *tab, enum isa isa, bool split) {
    /* f32 activations: the AVX-512 set computes Q8_0 with the AVX2 dots
     * (dot_f32_isa), whose operations its 16-lane GEMM repeats */
    if (isa == ISA_AVX512 && dot_f32_isa(isa) == ISA_AVX2) {
        tab[MS_TYPE_Q8_0].gemm_tok_f32 = ms_gemm_q8_0_f32x16_avx512;
        tab[MS_TYPE_Q8_0].gemm_tok_f32_min = 10;
        /* F16 and BF16 (the HC mixes, compressors, indexer and router of
         * DeepSeek V4 files) likewise, reading the tokens in place, from
         * two tokens: at one (decode) the single dot streams from memory
         * as fast. Zen 5, bench_kernels -t 1 --types f16 --activations
         * f32, GFLOPS of the GEMM against the x4 / single dots: 24 x
         * 16384 in cache 63 / 26 at 1 token, 100 / 29 at 2, 129 / 43 at
         * 3, 145 / 54 at 16, 95 / 44 at 512; 256 x 4096 from a 256 MiB
         * working set 44 / 20 at 2, 23 / 23 at 1 */
        tab[MS_TYPE_F16].gemm_tok_f32 = ms_gemm_f16_f32x16_avx512;
        tab[MS_TYPE_BF16].gemm_tok_f32 = ms_gemm_bf16_f32x16_avx512;
        for (int k = 0; k < 2; k++) {
            struct ms_type_traits *t = &tab[k ? MS_TYPE_BF16 : MS_TYPE_F16];
            t->gemm_tok_f32_min = 2;
            t->gemm_tok_f32_rows = true;
        }
    }
    if (isa == ISA_AVX512) {
        /* The least tokens a last partial group needs, alone in its call
         * (min) and sharing a call with a full group (paired), against
         * the x4 and single dots that would take them otherwise. Measured
         * on a Zen 5 core, bench_kernels -t 1 --clock cpu --working-set
         * 256 --rows 512 --cols 1024 (a bench model's routed expert,
         * cold), medians of three interleaved runs; IQ2_XXS, Q2_K, Q4_K
         * and Q8_0 also at --rows 2048 --cols 4096 --working-set 512
         * (Flash's). Alone (at 3d0db46, the one-pack GEMMs prefetching),
         * the x4 dot's time over the GEMM's at the first token count that
         * takes the GEMM: Q8_0 1.91 at 6 (Flash 1.24; 0.95 at 5), Q4_K
         * 1.14 at 8 (Flash 0.98, 1.12 at 9), Q5_K 1.29 at 6, Q3_K 1.18 at
         * 10, IQ4_XS 1.26 at 9, Q2_K 1.11 at 9 (Flash 1.02), IQ2_XXS 1.27
         * at 6 (Flash 1.10), Q6_K 1.21 at 10. Paired (at dea3300), the
         * full group's GEMM alone plus dots for the rest over the paired
         * call: Q8_0 1.21 at 18 (16 + 2), IQ2_XXS 1.05 (Flash 1.11),
         * IQ4_XS 1.14, Q5_K 1.09 at 18; Q4_K 1.05 at 18 (Flash 1.00, 1.24
         * at 22): from 19; Q6_K 1.05 at 21, Q3_K 1.09 at 21; Q2_K 0.99 at
         * 21 and 1.14 at 22 (Flash 1.10). Then Q8_0, IQ2_XXS (VBMI) and
         * Q2_K got many-rows dots for up to four tokens, which read a row
         * once for all of them: their minimums went up to where those lose
         * (the same commands, ms, two interleaved runs; Flash's shape
         * unless said; IQ2_XXS's in attach_vbmi): Q8_0 6 -> 9 (6 / 7 / 8 tokens 1.91 / 1.90 / 1.92
         * through the GEMM, 1.50 / 1.68 / 1.84 through the dots, 9: 1.92
         * / 2.15), IQ2_XXS 6 -> 10 (6 / 8 tokens 0.77 / 0.77 against 0.47
         * / 0.55, 10: 0.76-0.79 / 0.73-0.75, the bench model's shape 0.049
         * / 0.050-0.054, 11: 0.78 / 0.79-0.81), Q2_K 9 -> 10 (9: 0.88 /
         * 0.78-0.81, 10: 0.88-0.90 either way). A paired call costs what
         * its two groups cost alone on Flash's shape, where the GEMM is
         * bound by its work (Q8_0 at 18: 4.07-4.17 against 2.38-2.40 for
         * the full group and the dots, IQ2_XXS 1.45-1.48 against
         * 1.00-1.05); it still wins on the bench model's cold experts from
         * about 6 (Q8_0 at 22: 0.072-0.085 against 0.087-0.103): Q8_0
         * paired 2 -> 5, IQ2_XXS 2 -> 10 (26: 1.60 against 1.61, the
         * bench model's 0.092-0.095 against 0.103-0.108), Q2_K stays 6.
         * With every k-quant's few-token dots (the four-token bodies for
         * the tokens given): Q6_K 10 -> 12 (10 / 11 tokens 1.25 / 1.22
         * through the GEMM against 0.93 / 1.04, 13: 1.23 / 1.20; the bench
         * model's shape about even at 10-12), paired 5 -> 10 (21: 1.88 /
         * 1.75, the bench model's 0.137 / 0.101-0.108; 26: 1.96 / 2.16);
         * Q4_K stays at 8 (9: 1.00-1.35 / 1.50-1.55).
         *
         * Split parts (Zen 4) have minimums of their own (split_min,
         * split_paired): there a few-token dot's extra token costs more
         * (its 512-bit operations issue as two halves) while the GEMM's
         * cost stays flat up to its 16 lanes. Measured on a 2-vCPU Zen 4
         * VM (EPYC family 19h model 11h) at commit 960ced3, Flash's shape
         * from a 512 MiB working set (bench_kernels -t 1 --rows 2048 --cols
         * 4096 --order random), best ms, medians of two or three
         * interleaved runs, dots against the GEMM: Q2_K 9 tokens 1.28 /
         * 1.09, Q3_K 9: 1.32 / 1.18, Q4_K 7: 1.18 / 1.04, IQ4_XS 7 / 8:
         * 1.31 / 1.39 against 1.26; paired, the full group's GEMM alone
         * plus dots for the rest against the paired call: Q4_K 19 / 20:
         * 1.58 / 1.71 against 1.79 / 1.82, then 21: 1.95 / 1.85; Q5_K 20:
         * 1.85 / 1.87, 21: 2.15 / 1.88; IQ4_XS 20: 2.03 / 2.13, 21: 2.44
         * / 2.17. Set and measured against the full-width table on the
         * same VM (MS_AVX512_SPLIT=0), the split one's ms at the counts
         * that changed path: Flash's shape Q2_K 9 tokens 1.09 against
         * 1.29, Q3_K 9: 1.16 / 1.32, Q4_K 7: 1.07 / 1.16, 19 / 20: 1.66 /
         * 1.68 against 1.83 / 1.84, IQ4_XS 7 / 8: 1.23 / 1.24 against 1.30
         * / 1.38, 19 / 20: 1.95 / 2.04 against 2.15 / 2.14, Q5_K 19: 1.75
         * / 1.81 (20 even); the bench model's expert (--rows 512 --cols
         * 1024 --working-set 256) the same or faster at every one. Q6_K
         * keeps its paired 10: Flash's shape would take the dots at 23
         * tokens (2.21 against 2.33) but the bench model's the GEMM (0.14
         * against 0.15-0.20). Q8_0, Q2_K paired and IQ2_XXS (VBMI) held at
         * the full-width minimums there. */
        static const struct {
            enum ms_type type;
            ms_act_pack_fn pack;
            ms_gemm_tok_fn gemm;
            size_t pack_block;
            int min, paired, split_min, split_paired;
        } x16[] = {
            {MS_TYPE_Q8_0, ms_pack_q8_0_x16, ms_gemm_q8_0_q8_0x16_avx512, sizeof(block_q8_0x16), 9, 5, 9, 5},
            {MS_TYPE_Q4_K, ms_pack_q8_K_x16, ms_gemm_q4_K_q8_Kx16_avx512, sizeof(block_q8_Kx16), 8, 3, 7, 5},
            {MS_TYPE_Q5_K, ms_pack_q8_K_x16, ms_gemm_q5_K_q8_Kx16_avx512, sizeof(block_q8_Kx16), 6, 2, 6, 5},
            {MS_TYPE_Q3_K, ms_pack_q8_K_x16, ms_gemm_q3_K_q8_Kx16_avx512, sizeof(block_q8_Kx16), 10, 5, 9, 5},
            {MS_TYPE_Q2_K, ms_pack_q8_K_x16, ms_gemm_q2_K_q8_Kx16_avx512, sizeof(block_q8_Kx16), 10, 6, 9, 6},
            {MS_TYPE_Q6_K, ms_pack_q8_K_x16, ms_gemm_q6_K_q8_Kx16_avx512, sizeof(block_q8_Kx16), 12, 10, 12, 10},
            {MS_TYPE_IQ2_XXS, ms_pack_q8_K_x16, ms_gemm_iq2_xxs_q8_Kx16_avx512, sizeof(block_q8_Kx16), 6, 2, 6, 2},
            {MS_TYPE_IQ4_XS, ms_pack_q8_K_x16, ms_gemm_iq4_xs_q8_Kx16_avx512, sizeof(block_q8_Kx16), 9, 2, 7, 5},
        };
        /* each takes two groups a call (MS_DEFINE_GEMM_KQ_X16, MS_DEFINE_GEMM_Q8_0_X16) */
        for (size_t i = 0; i < sizeof x16 / sizeof x16[0]; i++) {
            struct ms_type_traits *t = &tab[x16[i].type];
            set_gemm_tok(t, x16[i].pack, x16[i].gemm, x16[i].pack_block, 16, split ? x16[i].split_min : x16[i].min);
            t->gemm_tok_groups = 2;
            t->gemm_tok_min_paired = split ? x16[i].split_paired : x16[i].paired;
        }
    }
    if (isa == ISA_AVX2) {
        /* Q8_0: the Q8_0 x Q16_0 GEMM over widened Q8_0 activations
         * (ms_pack_q8_0_x8), whose float steps the AVX2 Q8_0 x Q8_0 dots
         * repeat; IQ2_XXS: int16 w * ls against widened Q8_K activations */
        set_gemm_tok(&tab[MS_TYPE_Q8_0], ms_pack_q8_0_x8, ms_gemm_q8_0_q16_0x8_avx2, sizeof(block_q16_0x8), 8, 5);
        set_gemm_tok(&tab[MS_TYPE_Q4_K], ms_pack_q8_K_x8, ms_gemm_q4_K_q8_Kx8_avx2, sizeof(block_q8_Kx8), 8, 5);
        /* Q2_K and IQ2_XXS from 7 tokens: below, their many-rows dots for
         * up to four tokens win (MS_ISA=avx2 on a Zen 5 core, bench_kernels
         * -t 1 --rows 2048 --cols 4096 --batches 5,6,7 --working-set 512
         * --order random, ms, two interleaved runs, GEMM against dots: Q2_K
         * 0.96 / 0.73-0.75 at 5, 0.91-0.98 / 0.85-0.91 at 6, 0.91-0.98 /
         * 1.05 at 7; IQ2_XXS 1.53-1.57 / 1.36-1.38, 1.55-1.60 / 1.51-1.52,
         * 1.59-1.61 / 1.67-1.68; Q8_0 stays at 5: 1.18-1.23 / 1.15-1.17,
         * then 1.20-1.27 / 1.34-1.35 at 6) */
        set_gemm_tok(&tab[MS_TYPE_Q2_K], ms_pack_q8_K_x8, ms_gemm_q2_K_q8_Kx8_avx2, sizeof(block_q8_Kx8), 8, 7);
        /* Q5_K and Q3_K from 7 tokens: 8 x the x4 dot's GFLOPS over the
         * GEMM's at 16 tokens (the AVX2 kernels on a Zen 5 core, MS_ISA=avx2
         * bench_kernels -t 1 --rows 1024 --cols 4096 --batches 4,16: Q5_K
         * 76-97 / 104-118, Q3_K 87-101 / 84-129) */
        set_gemm_tok(&tab[MS_TYPE_Q5_K], ms_pack_q8_K_x8, ms_gemm_q5_K_q8_Kx8_avx2, sizeof(block_q8_Kx8), 8, 7);
        set_gemm_tok(&tab[MS_TYPE_Q3_K], ms_pack_q8_K_x8, ms_gemm_q3_K_q8_Kx8_avx2, sizeof(block_q8_Kx8), 8, 7);
        /* Q6_K from 6 tokens (MS_ISA=avx2 on a busy 2-core Zen 5 VM,
         * bench_kernels -t 1 --types q6_K --rows 2048 --cols 4096
         * --working-set 0, mean GFLOPS of the better of two runs: 8 and
         * 512 tokens 114-120 against the x4 dot's 108 at 4; a last group
         * of 5 / 6 / 7 tokens through the GEMM 70 / 83 / 95, through the
         * x4 and single dots 85 / 70 / 81) */
        set_gemm_tok(&tab[MS_TYPE_Q6_K], ms_pack_q8_K_x8, ms_gemm_q6_K_q8_Kx8_avx2, sizeof(block_q8_Kx8), 8, 6);
        /* IQ4_XS only for full groups of 8: with the sign trick a step
         * costs more than Q6_K's, and the GEMM about breaks even with the x4
         * dot (MS_ISA=avx2, the same smoke runs: mean GFLOPS 64-78 at 4
         * tokens against 75-80 at 16, best 100-104 against 87-93) */
        set_gemm_tok(&tab[MS_TYPE_IQ4_XS], ms_pack_q8_K_x8, ms_gemm_iq4_xs_q8_Kx8_avx2, sizeof(block_q8_Kx8), 8, 8);
        set_gemm_tok(&tab[MS_TYPE_IQ2_XXS], ms_pack_q8_K_x8w, ms_gemm_iq2_xxs_q8_Kx8w_avx2, sizeof(block_q8_Kx8w), 8, 7);
    }
}

/* Q16_0 activations (16-bit integers) for Q8_0 weights, in every set: the
 * scalar reference, AVX2 (pmaddwd) and AVX-512 (pmaddwd dots and a VNNI
 * token-lane GEMM; measured on a Zen 5 core, bench_kernels -t 1
 * --activations q16 --rows 4096 --cols 4096: see bench/RESULTS.md, "Q16
 * activations"). The AVX2 set has an 8-lane pmaddwd GEMM: 97-102 GFLOPS
 * at 16 and 512 tokens against the x4 dot's 42 on a Zen 3 core (same
 * command). All agree bit for bit. */
static void attach_q16(struct ms_type_traits *tab, enum isa isa, bool split) {
    struct ms_type_traits *t = &tab[MS_TYPE_Q8_0];
    t->q16_from_float = PICK_ISA(isa, ms_quant_q16_0);
    /* the single and four-token dots on the AVX2 set where 512-bit
     * operations split; the quantizer, many-rows dot and GEMM stay wide */
    t->vec_dot_q16 = PICK_ISA(split_isa(isa, split), ms_dot_q8_0_q16_0);
    t->vec_dot_q16_x4 = PICK_SIMD(split_isa(isa, split), ms_dot_q8_0_q16_0_x4);
    t->vec_dot_q16_rows = PICK_SIMD(isa, ms_dot_rows_q8_0_q16_0);
    t->vec_dot_q16_rows_n = PICK_SIMD(isa, ms_dot_rows_n_q8_0_q16_0);
    if (isa == ISA_AVX512) {
        t->q16_pack = ms_pack_q16_0_x16_avx512;
        t->gemm_tok_q16 = ms_gemm_q8_0_q16_0x16_avx512;
        t->q16_pack_block = sizeof(block_q16_0x16);
        t->gemm_tok_q16_lanes = 16;
        /* a pack costs the GEMM its 16 lanes' work whatever its tokens,
         * and the four-token many-rows dot reads each row once for four:
         * 6 and 8 tokens from memory ran 2.7 and 3.4 ms through that dot
         * against 4.0 through the GEMM, 9 about the same (Zen 5,
         * bench_kernels -t 1 --types q8_0 --activations q16 --rows 4096
         * --cols 4096 --working-set 512 --order random) */
        t->gemm_tok_q16_min = 9;
    }
    if (isa == ISA_AVX2) {
        t->q16_pack = ms_pack_q16_0_x8;
        t->gemm_tok_q16 = ms_gemm_q8_0_q16_0x8_avx2;
        t->q16_pack_block = sizeof(block_q16_0x8);
        t->gemm_tok_q16_lanes = 8;
        t->gemm_tok_q16_min = 5;
    }
}

/* IQ2_XXS single, four-token and many-rows dots on an AVX-512 part with
 * VBMI: the sign and magnitude expansions in byte permutes
 * (quant_iq2_avx512vbmi.c). Measured on a Zen 5 core, bench_kernels -t 1
 * --types iq2_xxs --rows 512 --cols 1024 --batches 1,4 --working-set 512,
 * best of three interleaved with MS_AVX512_VBMI=0: one token 9.1-9.4
 * against 6.2-6.9 GB/s, four tokens 122-125 against 99-103 GFLOPS
 * (bench/RESULTS.md, "IQ2_XXS in byte permutes"); the many-rows form
 * (decode) 18.6-19.5 in cache. Bit for bit the reference's, as every
 * IQ2_XXS kernel is, so it mixes with the others.
 *
 * A split part (Zen 4) takes them too, and the GEMM below. Measured on a
 * Zen 4 core at commit e7d27df (same commands, --order random, three
 * interleaved runs): one token 5.4 against AVX2's 4.1 GB/s (the single
 * dot, measured in a local build with the many-rows entry unset), the
 * many-rows form 11.4-11.5 against 4.4, four tokens 89-90 against 61
 * GFLOPS, the 16-lane GEMM at 16 tokens 151-154 against the VBMI-less
 * form's 146-150; one-thread decode of the ds4 mix's bench model 35.8-39.8
 * against 27.2-30.5 tok/s with MS_AVX512_VBMI=0 (bench/RESULTS.md, "Zen 4
 * at e7d27df").
 *
 * The 16-lane token GEMM (prefill) takes the byte-permute expansion too:
 * its products are the VBMI-less form's, its expansion about 40
 * instructions a block and row against 240 (bench_kernels -t 1 --types
 * iq2_xxs --rows 512 --cols 1024 --batches 8,16,32 --working-set 0, a
 * routed expert's shape and token counts, Zen 5, best GFLOPS: 8 tokens
 * 121-130 against 103-108, 16 and 32 tokens 228-240 against 194-206). */
static void attach_vbmi(struct ms_type_traits *tab, bool split) {
    tab[MS_TYPE_IQ2_XXS].vec_dot = ms_dot_iq2_xxs_q8_K_avx512vbmi;
    tab[MS_TYPE_IQ2_XXS].vec_dot_x4 = ms_dot_iq2_xxs_q8_K_x4_avx512vbmi;
    /* rows eight at a time where measured faster (a split part: bound by
     * its work); a full-width part keeps the sequence of rows */
    tab[MS_TYPE_IQ2_XXS].vec_dot_rows =
        split ? ms_dot_rows8_iq2_xxs_q8_K_avx512vbmi : ms_dot_rows_iq2_xxs_q8_K_avx512vbmi;
    tab[MS_TYPE_IQ2_XXS].vec_dot_rows_n = ms_dot_rows_n_iq2_xxs_q8_K_avx512vbmi;
    tab[MS_TYPE_IQ2_XXS].gemm_tok = ms_gemm_iq2_xxs_q8_Kx16_avx512vbmi;
    /* with the many-rows dots for a few tokens, the GEMM from 10 tokens,
     * alone or paired (attach_gemm_tok's table: the VBMI-less set keeps 6
     * and 2) */
    tab[MS_TYPE_IQ2_XXS].gemm_tok_min = 10;
    tab[MS_TYPE_IQ2_XXS].gemm_tok_min_paired = 10;
}

static void attach(struct ms_type_traits *tab, enum isa isa, bool split) {
    ms_vec_dot_fn f32dot = PICK_ISA(isa, ms_dot_f32_f32);
    set_kernels(&tab[MS_TYPE_F32], MS_TYPE_F32, KSET(f32_copy_to_float, f32_copy_from_float, f32dot, f32dot));
    set_kernels(&tab[MS_TYPE_F16], MS_TYPE_F16, KSET_ISA(isa, f16, f16));
    set_kernels(&tab[MS_TYPE_BF16], MS_TYPE_BF16, KSET_ISA(isa, bf16, bf16));
    set_kernels(&tab[MS_TYPE_Q8_0], MS_TYPE_Q8_0, KSET_ISA(isa, q8_0, q8_0));
    tab[MS_TYPE_F16].vec_dot_f32 = PICK_ISA(dot_f32_isa(isa), ms_dot_f16_f32);
    tab[MS_TYPE_BF16].vec_dot_f32 = PICK_ISA(dot_f32_isa(isa), ms_dot_bf16_f32);
    tab[MS_TYPE_Q8_0].vec_dot_f32 = PICK_ISA(dot_f32_isa(isa), ms_dot_q8_0_f32);
    set_kernels(&tab[MS_TYPE_MXFP4], MS_TYPE_Q8_0, KSET_ISA_REFQ(isa, mxfp4, q8_0));
    set_kernels(&tab[MS_TYPE_Q4_K], MS_TYPE_Q8_K, KSET_ISA_REFQ(q4_K_isa(isa), q4_K, q8_K));
    set_kernels(&tab[MS_TYPE_Q2_K], MS_TYPE_Q8_K, KSET_ISA_REFQ(isa, q2_K, q8_K));
    /* Q5_K and Q3_K: every form from the set picked, the AVX-512 one on
     * split parts too (as Q6_K, see attach_x4; on a Zen 4 core, the same
     * command, 1 / 2 / 3 / 4 tokens: Q5_K 0.303 / 0.421 / 0.587 / 0.677
     * against 0.298 / 0.456 / 0.629 / 0.698, Q3_K 0.269 / 0.355 / 0.443 /
     * 0.527 against 0.292 / 0.379 / 0.499 / 0.594). On a
     * Zen 5 core (bench_kernels -t 1 --rows 1024
     * --cols 4096 --batches 1,4 --working-set 512, two interleaved runs,
     * best GFLOPS, AVX-512 against AVX2 kernels): Q5_K one token
     * (many-rows dot) 67.9-68.1 against 63.1-63.6, four tokens 142.7-143.0
     * against 103.8-105.4; Q3_K one token 83.8-83.9 against 58.8-58.9,
     * four tokens 181-182 against 109-110; the 16-lane GEMMs at 16 and 512
     * tokens (in cache) 163 / 188 (Q5_K) and 196 / 210 (Q3_K) against the
     * 8-lane AVX2 ones' 104 / 115 and 97 / 130 mean (a busy 2-vCPU VM:
     * smoke figures). */
    set_kernels(&tab[MS_TYPE_Q5_K], MS_TYPE_Q8_K, KSET_ISA_REFQ(isa, q5_K, q8_K));
    set_kernels(&tab[MS_TYPE_Q3_K], MS_TYPE_Q8_K, KSET_ISA_REFQ(isa, q3_K, q8_K));
    set_kernels(&tab[MS_TYPE_IQ2_XXS], MS_TYPE_Q8_K, KSET_ISA_REFQ(isa, iq2_xxs, q8_K));
    set_kernels(&tab[MS_TYPE_Q6_K], MS_TYPE_Q8_K, KSET_ISA_REFQ(isa, q6_K, q8_K));
    /* IQ4_XS: every form from the machine's set, but a split part's
     * one-token dots (single and many-rows) from the AVX2 set: on a Zen 4
     * core (bench_kernels -t 1 --types iq4_xs --batches 1 --order random,
     * three interleaved runs, best ms) 0.389 against 0.407 for 2048 x 4096
     * from a 512 MiB working set, 0.025 against 0.026 for 512 x 1024 from
     * 256 MiB, while the few-token dots stay wide (two tokens 0.496
     * against 0.512, four 0.701 against 0.761). Q5_K's one-token forms ran
     * within 2-5% either way there and stay wide. */
    set_kernels(&tab[MS_TYPE_IQ4_XS], MS_TYPE_Q8_K, KSET_ISA_REFQ(isa, iq4_xs, q8_K));
    tab[MS_TYPE_IQ4_XS].vec_dot = PICK_ISA(split_isa(isa, split), ms_dot_iq4_xs_q8_K);
    tab[MS_TYPE_Q2_K].vec_dot = PICK_ISA(split_isa(isa, split), ms_dot_q2_K_q8_K);
    tab[MS_TYPE_IQ2_XXS].vec_dot = PICK_ISA(split_isa(isa, split), ms_dot_iq2_xxs_q8_K);
    attach_rows(tab, isa, split);
    attach_x4(tab, isa);
    attach_gemm_tok(tab, isa, split);
    attach_q16(tab, isa, split);

    /* Q8_K is an activation format only: it can be produced and read back,
     * but there is no dot with it as the weight, so has_kernels stays false. */
    tab[MS_TYPE_Q8_K].to_float = ms_dequant_q8_K_ref;
    tab[MS_TYPE_Q8_K].from_float = PICK_ISA(isa, ms_quant_q8_K);
}

const char *ms_quant_attach_kernels(struct ms_type_traits *ref, struct ms_type_traits *active, bool *split,
                                    bool *vbmi) {
    enum isa isa = detect_isa();
    const enum isa cap = env_cap();
    if (isa > cap) isa = cap;
    *split = isa == ISA_AVX512 && cpu_avx512_split();
    *vbmi = isa == ISA_AVX512 && cpu_avx512_vbmi();
    attach(ref, ISA_SCALAR, false);
    attach(active, isa, *split);
    if (*vbmi) attach_vbmi(active, *split);
    return isa_names[isa];
}
