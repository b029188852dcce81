/*
 * quant.c - the type traits table and its run-time kernel selection.
 *
 * Every ggml type is described once here (name, block size, bytes per block;
 * values from ggml's ggml.c type_traits). Types moestream computes with also
 * carry kernels; the reference (scalar) table is the specification, and
 * ms_quant_init() builds the active table by swapping in AVX2 / AVX-512
 * kernels where the CPU has them.
 */
#include "quant/quant.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "quant/blocks.h"
#include "quant/quant_impl.h"

#define SIZE_ONLY(nm, bs, ts, q) {.name = nm, .blck_size = bs, .type_size = ts, .is_quantized = q}

static const struct ms_type_traits ref_table[MS_TYPE_COUNT] = {
    [MS_TYPE_F32] = SIZE_ONLY("f32", 1, 4, false),
    [MS_TYPE_F16] = SIZE_ONLY("f16", 1, 2, false),
    [MS_TYPE_Q4_0] = SIZE_ONLY("q4_0", 32, 18, true),
    [MS_TYPE_Q4_1] = SIZE_ONLY("q4_1", 32, 20, true),
    [MS_TYPE_Q5_0] = SIZE_ONLY("q5_0", 32, 22, true),
    [MS_TYPE_Q5_1] = SIZE_ONLY("q5_1", 32, 24, true),
    [MS_TYPE_Q8_0] = SIZE_ONLY("q8_0", QK8_0, sizeof(block_q8_0), true),
    [MS_TYPE_Q8_1] = SIZE_ONLY("q8_1", 32, 36, true),
    [MS_TYPE_Q2_K] = SIZE_ONLY("q2_K", QK_K, sizeof(block_q2_K), true),
    [MS_TYPE_Q3_K] = SIZE_ONLY("q3_K", QK_K, sizeof(block_q3_K), true),
    [MS_TYPE_Q4_K] = SIZE_ONLY("q4_K", QK_K, sizeof(block_q4_K), true),
    [MS_TYPE_Q5_K] = SIZE_ONLY("q5_K", QK_K, sizeof(block_q5_K), true),
    [MS_TYPE_Q6_K] = SIZE_ONLY("q6_K", QK_K, sizeof(block_q6_K), true),
    [MS_TYPE_Q8_K] = SIZE_ONLY("q8_K", QK_K, sizeof(block_q8_K), true),
    [MS_TYPE_IQ2_XXS] = SIZE_ONLY("iq2_xxs", QK_K, sizeof(block_iq2_xxs), true),
    [MS_TYPE_IQ2_XS] = SIZE_ONLY("iq2_xs", QK_K, 74, true),
    [MS_TYPE_IQ3_XXS] = SIZE_ONLY("iq3_xxs", QK_K, 98, true),
    [MS_TYPE_IQ1_S] = SIZE_ONLY("iq1_s", QK_K, 50, true),
    [MS_TYPE_IQ4_NL] = SIZE_ONLY("iq4_nl", QK4_NL, sizeof(block_iq4_nl), true),
    [MS_TYPE_IQ3_S] = SIZE_ONLY("iq3_s", QK_K, 110, true),
    [MS_TYPE_IQ2_S] = SIZE_ONLY("iq2_s", QK_K, 82, true),
    [MS_TYPE_IQ4_XS] = SIZE_ONLY("iq4_xs", QK_K, sizeof(block_iq4_xs), true),
    [MS_TYPE_I8] = SIZE_ONLY("i8", 1, 1, false),
    [MS_TYPE_I16] = SIZE_ONLY("i16", 1, 2, false),
    [MS_TYPE_I32] = SIZE_ONLY("i32", 1, 4, false),
    [MS_TYPE_I64] = SIZE_ONLY("i64", 1, 8, false),
    [MS_TYPE_F64] = SIZE_ONLY("f64", 1, 8, false),
    [MS_TYPE_IQ1_M] = SIZE_ONLY("iq1_m", QK_K, 56, true),
    [MS_TYPE_BF16] = SIZE_ONLY("bf16", 1, 2, false),
    [MS_TYPE_TQ1_0] = SIZE_ONLY("tq1_0", QK_K, 54, true),
    [MS_TYPE_TQ2_0] = SIZE_ONLY("tq2_0", QK_K, 66, true),
    [MS_TYPE_MXFP4] = SIZE_ONLY("mxfp4", QK_MXFP4, sizeof(block_mxfp4), true),
};

/* Kernels are attached in ms_quant_init (quant_dispatch.c owns selection). */
static struct ms_type_traits g_ref[MS_TYPE_COUNT];
static struct ms_type_traits g_active[MS_TYPE_COUNT];

/* Provided by the dispatch code: fills kernel pointers of the reference and
 * active tables, sets *split (whether the AVX-512 set took the split-part
 * choices) and *vbmi (whether it took the VBMI kernels) and returns the ISA
 * name. Called exactly once. */
const char *ms_quant_attach_kernels(struct ms_type_traits *ref, struct ms_type_traits *active, bool *split,
                                    bool *vbmi);

#include <pthread.h>
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const char *g_isa = "scalar";
static bool g_split;
static bool g_vbmi;

static void init_once(void) {
    memcpy(g_ref, ref_table, sizeof g_ref);
    memcpy(g_active, ref_table, sizeof g_active);
    g_isa = ms_quant_attach_kernels(g_ref, g_active, &g_split, &g_vbmi);
}

void ms_quant_init(void) { pthread_once(&g_once, init_once); }
const char *ms_quant_isa(void) {
    ms_quant_init();
    return g_isa;
}
bool ms_quant_avx512_split(void) {
    ms_quant_init();
    return g_split;
}
bool ms_quant_avx512_vbmi(void) {
    ms_quant_init();
    return g_vbmi;
}

const struct ms_type_traits *ms_type_traits(enum ms_type type) {
    if ((unsigned)type >= MS_TYPE_COUNT || !ref_table[type].name) return NULL;
    ms_quant_init();
    return &g_active[type];
}

const struct ms_type_traits *ms_type_traits_ref(enum ms_type type) {
    if ((unsigned)type >= MS_TYPE_COUNT || !ref_table[type].name) return NULL;
    ms_quant_init();
    return &g_ref[type];
}

const char *ms_type_name(enum ms_type type) {
    if ((unsigned)type >= MS_TYPE_COUNT) return NULL;
    return ref_table[type].name;
}

int ms_type_from_name(const char *name, enum ms_type *out) {
    for (int t = 0; t < MS_TYPE_COUNT; t++) {
        if (ref_table[t].name && !strcasecmp(ref_table[t].name, name)) {
            *out = (enum ms_type)t;
            return 0;
        }
    }
    return -1;
}

size_t ms_row_size(enum ms_type type, int64_t n) {
    if ((unsigned)type >= MS_TYPE_COUNT || !ref_table[type].name || n < 0) return 0;
    const struct ms_type_traits *tt = &ref_table[type];
    if (n % tt->blck_size) return 0;
    return (size_t)(n / tt->blck_size) * tt->type_size;
}
