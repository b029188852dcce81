/*
 * test_quant_x4.c - the four-token dot kernels (ms_vec_dot_x4_fn) and
 * ms_matmul's use of them.
 *
 * The x4 kernels promise more than closeness: each of their four outputs must
 * be bit-for-bit the single-token kernel's result for the same pair of rows,
 * because matmul groups tokens in fours and one-shot, chunked and
 * token-by-token evaluation must agree exactly. So every check here is a
 * memcmp, never a tolerance:
 * - every AVX2 / AVX-512 x4 kernel (called directly, whatever MS_ISA says,
 *   when the CPU has the ISA) against four calls of its single kernel, on
 *   random rows of many lengths (1, 2, 3, 7, 16 blocks and more, with tails);
 * - the Q8_0 token-lane GEMMs (AVX2: 8 lanes, AVX-512: 16) against their
 *   set's single kernel, and both sets' Q8_0 x Q8_0 dots against the order
 *   the Q16_0 reference specifies (one order in both);
 * - the dispatch table: x4 entries are the active ISA's and NULL in the
 *   scalar reference table;
 * - ms_matmul over 1..37 tokens (the token-lane GEMMs included) against the same matmul one token at a time,
 *   fast and quality mode, for every type with an x4 kernel.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "test_cpu.h"
#include "util/mem.h"
#include "util/rng.h"


static void *xalloc(size_t n) {
    void *p = ms_aligned_alloc(MS_ALIGN, n ? n : 1);
    assert_non_null(p);
    return p;
}

/* A random row of n elements in `type`. Weights (weight true) of Q8_0 get
 * fully random int8 values (-128 included) and MXFP4 fully random codes, as a
 * file may hold; activations come from the reference quantizer (no -128, the
 * kernels' documented precondition). Floats are normal with outliers. */
static void make_row(ms_rng *r, enum ms_type type, int64_t n, bool weight, void *out) {
    float *tmp = xalloc((size_t)n * sizeof(float));
    ms_rng_fill_normal(r, tmp, n, 1.0f);
    for (int64_t i = 0; i < n; i += 37) tmp[i] *= 8.0f;
    if (type == MS_TYPE_F32) {
        memcpy(out, tmp, (size_t)n * sizeof(float));
    } else if (type == MS_TYPE_MXFP4) {
        block_mxfp4 *b = out;
        for (int64_t i = 0; i < n / QK_MXFP4; i++) {
            b[i].e = (uint8_t)(117 + ms_rng_u64(r) % 21);
            for (int j = 0; j < QK_MXFP4 / 2; j++) b[i].qs[j] = (uint8_t)ms_rng_u64(r);
        }
    } else {
        ms_type_traits_ref(type)->from_float(tmp, out, n);
        if (type == MS_TYPE_Q8_0 && weight) {
            block_q8_0 *b = out;
            for (int64_t i = 0; i < n / QK8_0; i++)
                for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)(uint8_t)ms_rng_u64(r);
        }
    }
    ms_free(tmp);
}

/* ------------------------------------------------------------------------ */
/* Kernels against their single-token forms                                 */

struct x4_case {
    const char *name;
    int isa; /* 1 avx2, 2 avx512, 3 avx512vbmi */
    enum ms_type w, a;
    ms_vec_dot_fn one;
    ms_vec_dot_x4_fn four;
};

#define X4_CASE(isa, isa_id, wt, at, wname, aname) \
    {#wname "_" #aname "_" #isa, isa_id, wt, at, ms_dot_##wname##_##aname##_##isa, ms_dot_##wname##_##aname##_x4_##isa}
#define X4_BOTH(wt, at, wname, aname) \
    X4_CASE(avx2, 1, wt, at, wname, aname), X4_CASE(avx512, 2, wt, at, wname, aname)

static const struct x4_case cases[] = {
    X4_BOTH(MS_TYPE_Q8_0, MS_TYPE_Q8_0, q8_0, q8_0), X4_BOTH(MS_TYPE_Q8_0, MS_TYPE_F32, q8_0, f32),
    X4_BOTH(MS_TYPE_MXFP4, MS_TYPE_Q8_0, mxfp4, q8_0), X4_BOTH(MS_TYPE_F16, MS_TYPE_F32, f16, f32),
    X4_BOTH(MS_TYPE_BF16, MS_TYPE_F32, bf16, f32), X4_BOTH(MS_TYPE_F32, MS_TYPE_F32, f32, f32),
    X4_BOTH(MS_TYPE_Q4_K, MS_TYPE_Q8_K, q4_K, q8_K), X4_BOTH(MS_TYPE_Q2_K, MS_TYPE_Q8_K, q2_K, q8_K),
    X4_BOTH(MS_TYPE_IQ2_XXS, MS_TYPE_Q8_K, iq2_xxs, q8_K),
    X4_BOTH(MS_TYPE_Q5_K, MS_TYPE_Q8_K, q5_K, q8_K), X4_BOTH(MS_TYPE_Q3_K, MS_TYPE_Q8_K, q3_K, q8_K),
    X4_BOTH(MS_TYPE_Q6_K, MS_TYPE_Q8_K, q6_K, q8_K),
    X4_BOTH(MS_TYPE_IQ4_XS, MS_TYPE_Q8_K, iq4_xs, q8_K),
    X4_CASE(avx512vbmi, 3, MS_TYPE_IQ2_XXS, MS_TYPE_Q8_K, iq2_xxs, q8_K),
};

/* Lengths in blocks for block formats; for the float formats (block size 1)
 * element counts that leave every kind of tail. */
static const int64_t block_counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 15, 16, 33, 128};
static const int64_t float_lengths[] = {1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 257, 1001, 4099};

static void check_case(const struct x4_case *c, int64_t n, ms_rng *r) {
    const size_t wsize = ms_row_size(c->w, n), asize = ms_row_size(c->a, n);
    assert_true(wsize > 0 && asize > 0);
    void *w = xalloc(wsize);
    void *a[4];
    make_row(r, c->w, n, true, w);
    for (int k = 0; k < 4; k++) {
        a[k] = xalloc(asize);
        make_row(r, c->a, n, false, a[k]);
    }
    const void *const a4[4] = {a[0], a[1], a[2], a[3]};
    float got[4], want[4];
    c->four(n, got, w, a4);
    for (int k = 0; k < 4; k++) c->one(n, &want[k], w, a[k]);
    if (memcmp(got, want, sizeof got) != 0) {
        for (int k = 0; k < 4; k++)
            print_error("%s n=%lld token %d: x4 %.9g (0x%08x) single %.9g\n", c->name, (long long)n, k,
                        (double)got[k], (unsigned)((const uint32_t *)got)[k], (double)want[k]);
        fail();
    }
    /* the results are not trivially zero (random data): the check has teeth */
    assert_true(want[0] != 0.0f || want[1] != 0.0f || want[2] != 0.0f || want[3] != 0.0f);
    for (int k = 0; k < 4; k++) ms_free(a[k]);
    ms_free(w);
}

static void test_x4_bit_identical(void **state) {
    (void)state;
    const bool have[4] = {true, cpu_avx2(), cpu_avx512(), cpu_avx512vbmi()};
    ms_rng r;
    ms_rng_seed(&r, 0x7e574a11ull);
    int ran = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct x4_case *c = &cases[ci];
        if (!have[c->isa]) continue;
        const int64_t blck = ms_type_traits_ref(c->w)->blck_size;
        const bool blocks = blck > 1;
        const size_t nl = blocks ? sizeof block_counts / sizeof block_counts[0]
                                 : sizeof float_lengths / sizeof float_lengths[0];
        for (size_t li = 0; li < nl; li++) {
            const int64_t n = blocks ? block_counts[li] * blck : float_lengths[li];
            for (int rep = 0; rep < 4; rep++) check_case(c, n, &r);
            ran++;
        }
    }
    if (ran == 0) skip(); /* no AVX2 on this CPU: nothing to compare */
}

/* A Q8_0 token-lane GEMM against its set's single kernel, bit for bit:
 * 1-9 rows (the AVX2 kernel takes four at a time, the AVX-512 one two)
 * read at a stride with a gap, 1..lanes tokens per packed group and up to
 * `groups` groups a call (packed one after another), every
 * block count of block_counts (tails of the 4-, 8- and 16-block groups),
 * weights with -128. */
static void check_gemm_q8_0(const char *name, int lanes, int groups, size_t pack_block, ms_act_pack_fn pack_fn,
                            ms_gemm_tok_fn gemm, ms_vec_dot_fn single) {
    ms_rng r;
    ms_rng_seed(&r, 0x9e3779b9ull + (uint64_t)lanes);
    enum { NR = 11 }; /* past a group of four pairs */
    for (size_t li = 0; li < sizeof block_counts / sizeof block_counts[0]; li++) {
        const int64_t n = block_counts[li] * QK8_0;
        const size_t row = ms_row_size(MS_TYPE_Q8_0, n), stride = row + 6;
        char *w = xalloc(stride * NR);
        const int max_nt = lanes * groups;
        const size_t group_bytes = pack_block * (size_t)block_counts[li];
        char *a = xalloc(row * (size_t)max_nt);
        char *pack = xalloc(group_bytes * (size_t)groups);
        for (int64_t i = 0; i < NR; i++) make_row(&r, MS_TYPE_Q8_0, n, true, w + (size_t)i * stride);
        for (int t = 0; t < max_nt; t++) make_row(&r, MS_TYPE_Q8_0, n, false, a + (size_t)t * row);
        for (int nt = 1; nt <= max_nt; nt++) {
            for (int g = 0; g * lanes < nt; g++)
                pack_fn(n, a + (size_t)(g * lanes) * row, row, nt - g * lanes < lanes ? nt - g * lanes : lanes,
                        pack + (size_t)g * group_bytes);
            for (int64_t rows = 1; rows <= NR; rows++) {
                float y[32 * NR], want;
                for (size_t k = 0; k < sizeof y / sizeof y[0]; k++) y[k] = -1.0f;
                gemm(n, y, rows, w, stride, rows, pack, nt);
                bool nonzero = false;
                for (int t = 0; t < nt; t++)
                    for (int64_t i = 0; i < rows; i++) {
                        single(n, &want, w + (size_t)i * stride, a + (size_t)t * row);
                        if (memcmp(&want, &y[t * rows + i], sizeof want))
                            fail_msg("%s q8_0 gemm nb=%lld rows=%lld nt=%d: token %d row %lld %.9g vs single %.9g",
                                     name, (long long)block_counts[li], (long long)rows, nt, t, (long long)i,
                                     (double)y[t * rows + i], (double)want);
                        nonzero |= want != 0.0f;
                    }
                assert_true(nonzero);
                for (int64_t k = nt * rows; k < 32 * rows; k++) assert_true(y[k] == -1.0f); /* untouched */
            }
        }
        ms_free(w), ms_free(a), ms_free(pack);
    }
}

static void test_gemm_q8_0(void **state) {
    (void)state;
    bool ran = false;
    if (cpu_avx2()) {
        check_gemm_q8_0("avx2", 8, 1, sizeof(block_q16_0x8), ms_pack_q8_0_x8, ms_gemm_q8_0_q16_0x8_avx2,
                        ms_dot_q8_0_q8_0_avx2);
        ran = true;
    }
    if (cpu_avx512()) {
        check_gemm_q8_0("avx512", 16, 2, sizeof(block_q8_0x16), ms_pack_q8_0_x16, ms_gemm_q8_0_q8_0x16_avx512,
                        ms_dot_q8_0_q8_0_avx512);
        ran = true;
    }
    if (!ran) skip();
}

/* The AVX2 and AVX-512 Q8_0 x Q8_0 dots perform the float steps that
 * ms_dot_q8_0_q16_0_ref specifies (exact block sums, acc[i % 4] +=
 * (float)sumi * (d_w * d_a), (s0 + s2) + (s1 + s3)): with each Q8_0
 * activation block widened to a Q16_0 one (the same values as int16, the
 * fp16 scale as f32, both exact) the reference gives the same bits, an
 * independent check of the order that the GEMM tests (GEMM against its own
 * set's dot) cannot make. Single and four-token, every block count. */
static void test_q8_0_order(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0x5e75ull);
    int ran = 0;
    for (size_t li = 0; li < sizeof block_counts / sizeof block_counts[0]; li++) {
        const int64_t nb = block_counts[li], n = nb * QK8_0;
        const size_t row = ms_row_size(MS_TYPE_Q8_0, n);
        char *w = xalloc(row), *a = xalloc(4 * row);
        block_q16_0 *a16 = xalloc(4 * (size_t)nb * sizeof *a16);
        make_row(&r, MS_TYPE_Q8_0, n, true, w);
        for (int t = 0; t < 4; t++) {
            make_row(&r, MS_TYPE_Q8_0, n, false, a + (size_t)t * row);
            const block_q8_0 *b = (const block_q8_0 *)(a + (size_t)t * row);
            for (int64_t i = 0; i < nb; i++) {
                a16[t * nb + i].d = ms_fp16_to_fp32(b[i].d);
                for (int j = 0; j < QK8_0; j++) a16[t * nb + i].qs[j] = b[i].qs[j];
            }
        }
        float want[4];
        for (int t = 0; t < 4; t++) ms_dot_q8_0_q16_0_ref(n, &want[t], w, a16 + t * nb);
        const void *const a4[4] = {a, a + row, a + 2 * row, a + 3 * row};
        struct {
            bool ok;
            ms_vec_dot_fn one;
            ms_vec_dot_x4_fn four;
        } sets[2] = {{cpu_avx2(), ms_dot_q8_0_q8_0_avx2, ms_dot_q8_0_q8_0_x4_avx2},
                     {cpu_avx512(), ms_dot_q8_0_q8_0_avx512, ms_dot_q8_0_q8_0_x4_avx512}};
        for (int k = 0; k < 2; k++) {
            if (!sets[k].ok) continue;
            float s4[4], s1;
            sets[k].four(n, s4, w, a4);
            for (int t = 0; t < 4; t++) {
                sets[k].one(n, &s1, w, a + (size_t)t * row);
                if (memcmp(&s1, &want[t], sizeof s1) || memcmp(&s4[t], &want[t], sizeof s1))
                    fail_msg("q8_0 %s nb=%lld token %d: single %.9g x4 %.9g vs the order's %.9g",
                             k ? "avx512" : "avx2", (long long)nb, t, (double)s1, (double)s4[t], (double)want[t]);
            }
            ran++;
        }
        ms_free(w), ms_free(a), ms_free(a16);
    }
    if (!ran) skip();
}

/* The f32-activation Q8_0 GEMM of the AVX-512 set against the AVX2 single
 * kernel it repeats, bit for bit: the same row, token and block cases as
 * above, activations normal with outliers. */
static void test_gemm_q8_0_f32x16(void **state) {
    (void)state;
    if (!cpu_avx512()) skip();
    ms_rng r;
    ms_rng_seed(&r, 0x51ed270bull);
    for (size_t li = 0; li < sizeof block_counts / sizeof block_counts[0]; li++) {
        const int64_t n = block_counts[li] * QK8_0, nr = 5;
        const size_t row = ms_row_size(MS_TYPE_Q8_0, n), stride = row + 6;
        char *w = xalloc(stride * (size_t)nr);
        float *a = xalloc((size_t)n * 16 * sizeof(float));
        float *pack = xalloc((size_t)n * 16 * sizeof(float));
        for (int64_t i = 0; i < nr; i++) make_row(&r, MS_TYPE_Q8_0, n, true, w + (size_t)i * stride);
        for (int t = 0; t < 16; t++) make_row(&r, MS_TYPE_F32, n, false, a + (size_t)t * (size_t)n);
        for (int nt = 1; nt <= 16; nt++) {
            ms_pack_f32_x16(n, a, (size_t)n * sizeof(float), nt, pack);
            for (int64_t rows = 1; rows <= nr; rows += 2) {
                float y[16 * 5], want;
                for (size_t k = 0; k < sizeof y / sizeof y[0]; k++) y[k] = -1.0f;
                ms_gemm_q8_0_f32x16_avx512(n, y, rows, w, stride, rows, pack, nt);
                for (int t = 0; t < nt; t++)
                    for (int64_t i = 0; i < rows; i++) {
                        ms_dot_q8_0_f32_avx2(n, &want, w + (size_t)i * stride, a + (size_t)t * (size_t)n);
                        if (memcmp(&want, &y[t * rows + i], sizeof want))
                            fail_msg("q8_0 f32 gemm nb=%lld rows=%lld nt=%d: token %d row %lld %.9g vs single %.9g",
                                     (long long)block_counts[li], (long long)rows, nt, t, (long long)i,
                                     (double)y[t * rows + i], (double)want);
                    }
                for (int64_t k = nt * rows; k < 16 * rows; k++) assert_true(y[k] == -1.0f);
            }
        }
        ms_free(w), ms_free(a), ms_free(pack);
    }
}

/* The F16 and BF16 GEMMs of the AVX-512 set against the AVX2 single dots
 * they repeat, bit for bit: rows of every length class the dot treats
 * apart (16-value steps, a last 8, a last 1-7 one by one, and all three),
 * 1-9, 23 and 37 rows read at a stride with a gap (the 4-row blocks and
 * each remainder, more than one 32-row group), 1-16 tokens read in place at a stride with a gap (the
 * 4-token blocks and each remainder); outputs past them untouched. */
static void test_gemm_half_f32x16(void **state) {
    (void)state;
    if (!cpu_avx512()) skip();
    static const int64_t lens[] = {1, 7, 8, 9, 15, 16, 23, 24, 31, 40, 100, 263, 1037, 4096};
    ms_rng r;
    ms_rng_seed(&r, 0x7f16b16aull);
    for (int bf = 0; bf < 2; bf++) {
        const enum ms_type type = bf ? MS_TYPE_BF16 : MS_TYPE_F16;
        const ms_gemm_tok_fn gemm = bf ? ms_gemm_bf16_f32x16_avx512 : ms_gemm_f16_f32x16_avx512;
        const ms_vec_dot_fn dot = bf ? ms_dot_bf16_f32_avx2 : ms_dot_f16_f32_avx2;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t n = lens[li], nr = 37, xs = n + 3;
            const size_t stride = ms_row_size(type, n) + 10;
            char *w = xalloc(stride * (size_t)nr);
            float *a = xalloc((size_t)xs * 16 * sizeof(float));
            for (int64_t i = 0; i < nr; i++) make_row(&r, type, n, true, w + (size_t)i * stride);
            for (int t = 0; t < 16; t++) make_row(&r, MS_TYPE_F32, n, false, a + (size_t)t * (size_t)xs);
            struct ms_f32_rows pack;
            ms_pack_f32_rows(n, a, (size_t)xs * sizeof(float), 16, &pack);
            for (int nt = 1; nt <= 16; nt++)
                for (int64_t rows = 1; rows <= nr; rows = rows < 9 ? rows + 1 : rows + 14) {
                    float y[16 * 37], want;
                    for (size_t k = 0; k < sizeof y / sizeof y[0]; k++) y[k] = -1.0f;
                    gemm(n, y, rows, w, stride, rows, &pack, nt);
                    for (int t = 0; t < nt; t++)
                        for (int64_t i = 0; i < rows; i++) {
                            dot(n, &want, w + (size_t)i * stride, a + (size_t)t * (size_t)xs);
                            if (memcmp(&want, &y[t * rows + i], sizeof want))
                                fail_msg("%s f32 gemm n=%lld rows=%lld nt=%d: token %d row %lld %.9g vs dot %.9g",
                                         bf ? "bf16" : "f16", (long long)n, (long long)rows, nt, t, (long long)i,
                                         (double)y[t * rows + i], (double)want);
                        }
                    for (int64_t k = nt * rows; k < 16 * 37; k++) assert_true(y[k] == -1.0f);
                }
            ms_free(w), ms_free(a);
        }
    }
}

/* The many-rows Q8_0 x Q8_0 dot (decode's single-token matmuls) against
 * the single-token dot it repeats, bit for bit: 1-9 rows read at a stride
 * with a gap, every block count of block_counts and rows longer than its
 * stack buffer (the single-dot path), weights uniform over all 256 codes
 * (-128 included), activations normal with outliers; outputs past n_rows
 * untouched. */
static void test_dot_rows_q8_0(void **state) {
    (void)state;
    if (!cpu_avx512()) skip();
    ms_rng r;
    ms_rng_seed(&r, 0x70e5a11ull);
    static const int64_t counts[] = {1, 2, 3, 5, 15, 16, 17, 33, 128, 512, 513};
    enum { NR = 9 };
    int checked = 0;
    for (size_t li = 0; li < sizeof counts / sizeof counts[0]; li++) {
        const int64_t n = counts[li] * QK8_0;
        const size_t row = ms_row_size(MS_TYPE_Q8_0, n), stride = row + 6;
        char *w = xalloc(stride * NR);
        char *a = xalloc(row);
        for (int64_t i = 0; i < NR; i++) make_row(&r, MS_TYPE_Q8_0, n, true, w + (size_t)i * stride);
        make_row(&r, MS_TYPE_Q8_0, n, false, a);
        for (int64_t rows = 1; rows <= NR; rows++) {
            float y[NR + 1], want;
            for (int k = 0; k <= NR; k++) y[k] = -1.0f;
            ms_dot_rows_q8_0_q8_0_avx512(n, y, w, stride, rows, a);
            for (int64_t i = 0; i < rows; i++) {
                ms_dot_q8_0_q8_0_avx512(n, &want, w + (size_t)i * stride, a);
                if (memcmp(&want, &y[i], sizeof want))
                    fail_msg("q8_0 dot_rows nb=%lld rows=%lld: row %lld %.9g vs single %.9g", (long long)counts[li],
                             (long long)rows, (long long)i, (double)y[i], (double)want);
                assert_true(want != 0.0f);
                checked++;
            }
            for (int64_t k = rows; k <= NR; k++) assert_true(y[k] == -1.0f);
        }
        ms_free(w), ms_free(a);
    }
    assert_true(checked > 400);
    /* the AVX-512 table has it (test_matmul_batch_invariant runs it through
     * matmul's one-token path against batched products) */
    if (!getenv("MS_ISA")) assert_ptr_equal(ms_type_traits(MS_TYPE_Q8_0)->vec_dot_rows, ms_dot_rows_q8_0_q8_0_avx512);
}

/* The many-rows Q8_0 dots for up to four tokens (Q8_0 and Q16_0
 * activations; AVX-512 and AVX2 sets, each where the CPU has it) against
 * their set's single dots, bit for bit: 1-4 tokens, 1-9 rows at a stride
 * with a gap, outputs at a token stride with a gap (left untouched), every
 * block count of the one-token test and rows past the AVX-512 stack
 * buffers (its single-dot path: 513 blocks for Q8_0, 1025 for Q16_0); the
 * active table has them. */
typedef void (*dot1_fn)(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
static void test_dot_rows_n_q8_0(void **state) {
    (void)state;
    if (!cpu_avx2()) skip();
    ms_rng r;
    ms_rng_seed(&r, 0x4a0e5b17ull);
    static const int64_t counts[] = {1, 2, 3, 5, 15, 16, 17, 33, 128, 512, 513, 1025};
    enum { NR = 9, LDS = NR + 3 };
    const struct {
        bool avx512, q16;
        ms_vec_dot_rows_n_fn rows_n;
        dot1_fn dot;
    } kernels[] = {
        {true, false, ms_dot_rows_n_q8_0_q8_0_avx512, ms_dot_q8_0_q8_0_avx512},
        {true, true, ms_dot_rows_n_q8_0_q16_0_avx512, ms_dot_q8_0_q16_0_avx512},
        {false, false, ms_dot_rows_n_q8_0_q8_0_avx2, ms_dot_q8_0_q8_0_avx2},
        {false, true, ms_dot_rows_n_q8_0_q16_0_avx2, ms_dot_q8_0_q16_0_avx2},
    };
    int checked = 0;
    for (size_t ki = 0; ki < sizeof kernels / sizeof kernels[0]; ki++) {
        if (kernels[ki].avx512 && !cpu_avx512()) continue;
        const bool q16 = kernels[ki].q16;
        for (size_t li = 0; li < sizeof counts / sizeof counts[0]; li++) {
            const int64_t n = counts[li] * QK8_0;
            const size_t row = ms_row_size(MS_TYPE_Q8_0, n), stride = row + 6;
            const size_t arow = q16 ? (size_t)counts[li] * sizeof(block_q16_0) + 4 : row + 2;
            char *w = xalloc(stride * NR);
            char *a = xalloc(arow * 4);
            float *xf = xalloc((size_t)n * sizeof(float));
            for (int64_t i = 0; i < NR; i++) make_row(&r, MS_TYPE_Q8_0, n, true, w + (size_t)i * stride);
            for (int k = 0; k < 4; k++) {
                if (q16) {
                    ms_rng_fill_normal(&r, xf, n, 1.0f);
                    ms_quant_q16_0_ref(xf, a + (size_t)k * arow, n);
                } else {
                    make_row(&r, MS_TYPE_Q8_0, n, false, a + (size_t)k * arow);
                }
            }
            const void *const y[4] = {a, a + arow, a + 2 * arow, a + 3 * arow};
            for (int nt = 1; nt <= 4; nt++)
                for (int64_t rows = 1; rows <= NR; rows++) {
                    float out[4 * LDS], want;
                    for (int k = 0; k < 4 * LDS; k++) out[k] = -1.0f;
                    kernels[ki].rows_n(n, out, LDS, w, stride, rows, y, nt);
                    for (int k = 0; k < 4; k++)
                        for (int64_t i = 0; i < LDS; i++) {
                            const float got = out[k * LDS + i];
                            if (k >= nt || i >= rows) {
                                assert_true(got == -1.0f);
                                continue;
                            }
                            kernels[ki].dot(n, &want, w + (size_t)i * stride, y[k]);
                            if (memcmp(&want, &got, sizeof want))
                                fail_msg("%s q8_0 x %s dot_rows_n nb=%lld nt=%d rows=%lld: token %d row %lld %.9g "
                                         "vs single %.9g",
                                         kernels[ki].avx512 ? "avx512" : "avx2", q16 ? "q16_0" : "q8_0",
                                         (long long)counts[li], nt, (long long)rows, k, (long long)i, (double)got,
                                         (double)want);
                            assert_true(want != 0.0f);
                            checked++;
                        }
                }
            ms_free(w), ms_free(a), ms_free(xf);
        }
    }
    assert_true(checked > 8000);
    const char *isa = getenv("MS_ISA");
    if (!isa && cpu_avx512()) {
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q8_0)->vec_dot_rows_n, ms_dot_rows_n_q8_0_q8_0_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q8_0)->vec_dot_q16_rows_n, ms_dot_rows_n_q8_0_q16_0_avx512);
    } else if ((isa && !strcmp(isa, "avx2")) || (!isa && !cpu_avx512())) {
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q8_0)->vec_dot_rows_n, ms_dot_rows_n_q8_0_q8_0_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q8_0)->vec_dot_q16_rows_n, ms_dot_rows_n_q8_0_q16_0_avx2);
    }
}

/* Every many-rows dot of the active table (vec_dot_rows, vec_dot_q16_rows)
 * against its table's single dot, bit for bit: 1-19 rows at a stride with
 * a gap, several row lengths, random weights and activations (Q2_K's
 * AVX-512 and IQ2_XXS's VBMI forms take rows eight at a time: one and two
 * groups with every tail). On a SIMD
 * machine Q8_0, Q4_K, Q2_K, IQ2_XXS and Q6_K must have one. 8192 and 8704 are
 * the element-major IQ2_XXS forms' largest activation (16 block pairs
 * with VBMI, 32 blocks without) and the first length past it (their
 * single-dot fallback); 1-7 rows of 1, 4, 5 and 16 blocks give the
 * VBMI-less form's four-block turns every tail length. */
static void test_dot_rows_table(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0x4f3a9d1ull);
    const enum ms_type types[] = {MS_TYPE_Q8_0, MS_TYPE_Q4_K, MS_TYPE_Q2_K, MS_TYPE_IQ2_XXS, MS_TYPE_MXFP4,
                                  MS_TYPE_F16, MS_TYPE_BF16, MS_TYPE_Q5_K, MS_TYPE_Q3_K, MS_TYPE_Q6_K,
                                  MS_TYPE_IQ4_XS};
    static const int64_t lengths[] = {256, 512, 1024, 1280, 4096, 8192, 8704};
    enum { NR = 19 };
    int have = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const struct ms_type_traits *tt = ms_type_traits(types[ti]);
        for (int q16 = 0; q16 < 2; q16++) {
            const ms_vec_dot_rows_fn rows_fn = q16 ? tt->vec_dot_q16_rows : tt->vec_dot_rows;
            const ms_vec_dot_fn one = q16 ? tt->vec_dot_q16 : tt->vec_dot;
            if (!rows_fn) continue;
            have |= 1 << types[ti];
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                const int64_t n = lengths[li];
                const size_t row = ms_row_size(types[ti], n), stride = row + 10;
                char *w = xalloc(stride * NR);
                for (int64_t i = 0; i < NR; i++) make_row(&r, types[ti], n, true, w + (size_t)i * stride);
                float *x = xalloc((size_t)n * sizeof(float));
                ms_rng_fill_normal(&r, x, n, 1.0f);
                char *a = xalloc((size_t)n * 4);
                if (q16) tt->q16_from_float(x, a, n);
                else ms_type_traits(tt->vec_dot_type)->from_float(x, a, n);
                for (int64_t nr = 1; nr <= NR; nr++) {
                    float y[NR + 1], want;
                    for (int k = 0; k <= NR; k++) y[k] = -1.0f;
                    rows_fn(n, y, w, stride, nr, a);
                    for (int64_t i = 0; i < nr; i++) {
                        one(n, &want, w + (size_t)i * stride, a);
                        if (memcmp(&want, &y[i], sizeof want))
                            fail_msg("%s%s dot_rows n=%lld rows=%lld: row %lld %.9g vs single %.9g", tt->name,
                                     q16 ? " x q16_0" : "", (long long)n, (long long)nr, (long long)i, (double)y[i],
                                     (double)want);
                        assert_true(want != 0.0f);
                    }
                    for (int64_t k = nr; k <= NR; k++) assert_true(y[k] == -1.0f);
                }
                ms_free(w), ms_free(x), ms_free(a);
            }
        }
    }
    if (cpu_avx2() && !getenv("MS_ISA")) {
        const int want = (1 << MS_TYPE_Q8_0) | (1 << MS_TYPE_Q4_K) | (1 << MS_TYPE_Q2_K) | (1 << MS_TYPE_IQ2_XXS) |
                         (1 << MS_TYPE_Q6_K) | (1 << MS_TYPE_IQ4_XS);
        assert_int_equal(have & want, want);
    }
}

/* Every many-rows dot for up to four tokens of the active table
 * (vec_dot_rows_n, vec_dot_q16_rows_n) against its table's single dot,
 * bit for bit: 1-4 tokens, 1-9 rows at a stride with a gap, outputs at a
 * token stride with a gap (left untouched), row lengths with every tail
 * of the AVX-512 Q2_K form's four-block turns (1-5 and 16 blocks), an
 * odd block count for the VBMI IQ2_XXS form's pairs (its single-dot path)
 * and lengths past the stack buffers (8704). On a SIMD machine every
 * quantized format but MXFP4 must have one. */
static void test_dot_rows_n_table(void **state) {
    (void)state;
    ms_rng r;
    ms_rng_seed(&r, 0x5b1d0e77ull);
    const enum ms_type types[] = {MS_TYPE_Q8_0,  MS_TYPE_Q4_K, MS_TYPE_Q2_K, MS_TYPE_IQ2_XXS,
                                  MS_TYPE_MXFP4, MS_TYPE_Q5_K, MS_TYPE_Q3_K, MS_TYPE_Q6_K,
                                  MS_TYPE_IQ4_XS};
    static const int64_t lengths[] = {256, 512, 768, 1024, 1280, 4096, 8192, 8704};
    enum { NR = 9, LDS = NR + 3 };
    int have = 0, checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const struct ms_type_traits *tt = ms_type_traits(types[ti]);
        for (int q16 = 0; q16 < 2; q16++) {
            const ms_vec_dot_rows_n_fn rows_n = q16 ? tt->vec_dot_q16_rows_n : tt->vec_dot_rows_n;
            const ms_vec_dot_fn one = q16 ? tt->vec_dot_q16 : tt->vec_dot;
            if (!rows_n) continue;
            have |= 1 << types[ti];
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                const int64_t n = lengths[li];
                const size_t row = ms_row_size(types[ti], n), stride = row + 10, arow = (size_t)n * 4 + 8;
                char *w = xalloc(stride * NR);
                for (int64_t i = 0; i < NR; i++) make_row(&r, types[ti], n, true, w + (size_t)i * stride);
                float *x = xalloc((size_t)n * sizeof(float));
                char *a = xalloc(arow * 4);
                for (int k = 0; k < 4; k++) {
                    ms_rng_fill_normal(&r, x, n, 1.0f);
                    for (int64_t i = 0; i < n; i += 29) x[i] *= 6.0f; /* tails */
                    if (q16) tt->q16_from_float(x, a + (size_t)k * arow, n);
                    else ms_type_traits(tt->vec_dot_type)->from_float(x, a + (size_t)k * arow, n);
                }
                const void *const y[4] = {a, a + arow, a + 2 * arow, a + 3 * arow};
                for (int nt = 1; nt <= 4; nt++)
                    for (int64_t rows = 1; rows <= NR; rows++) {
                        float out[4 * LDS], want;
                        for (int k = 0; k < 4 * LDS; k++) out[k] = -1.0f;
                        rows_n(n, out, LDS, w, stride, rows, y, nt);
                        for (int k = 0; k < 4; k++)
                            for (int64_t i = 0; i < LDS; i++) {
                                const float got = out[k * LDS + i];
                                if (k >= nt || i >= rows) {
                                    assert_true(got == -1.0f);
                                    continue;
                                }
                                one(n, &want, w + (size_t)i * stride, y[k]);
                                if (memcmp(&want, &got, sizeof want))
                                    fail_msg("%s%s dot_rows_n n=%lld nt=%d rows=%lld: token %d row %lld %.9g vs "
                                             "single %.9g",
                                             tt->name, q16 ? " x q16_0" : "", (long long)n, nt, (long long)rows, k,
                                             (long long)i, (double)got, (double)want);
                                assert_true(want != 0.0f);
                                checked++;
                            }
                    }
                ms_free(w), ms_free(x), ms_free(a);
            }
        }
    }
    const char *isa = getenv("MS_ISA");
    if (cpu_avx2() && (!isa || !strcmp(isa, "avx2"))) {
        const int want = (1 << MS_TYPE_Q8_0) | (1 << MS_TYPE_Q2_K) | (1 << MS_TYPE_IQ2_XXS) | (1 << MS_TYPE_Q4_K) |
                         (1 << MS_TYPE_Q5_K) | (1 << MS_TYPE_Q3_K) | (1 << MS_TYPE_Q6_K) | (1 << MS_TYPE_IQ4_XS);
        assert_int_equal(have & want, want);
        assert_true(checked >= 30000);
    }
    if (!strcmp(ms_quant_isa(), "avx512"))
        assert_ptr_equal(ms_type_traits(MS_TYPE_IQ2_XXS)->vec_dot_rows_n, ms_quant_avx512_vbmi()
                                                                             ? ms_dot_rows_n_iq2_xxs_q8_K_avx512vbmi
                                                                             : ms_dot_rows_n_iq2_xxs_q8_K_avx512);
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

static void test_x4_table(void **state) {
    (void)state;
    const enum ms_type types[] = {MS_TYPE_F32, MS_TYPE_F16, MS_TYPE_BF16, MS_TYPE_Q8_0,
                                  MS_TYPE_MXFP4, MS_TYPE_Q4_K, MS_TYPE_Q2_K, MS_TYPE_IQ2_XXS,
                                  MS_TYPE_Q5_K, MS_TYPE_Q3_K, MS_TYPE_Q6_K, MS_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const struct ms_type_traits *ref = ms_type_traits_ref(types[i]);
        assert_null(ref->vec_dot_x4);
        assert_null(ref->vec_dot_f32_x4);
    }
    const char *isa = ms_quant_isa();
    const struct ms_type_traits *q8 = ms_type_traits(MS_TYPE_Q8_0);
    if (!strcmp(isa, "avx512")) {
        /* Q8_0 x4 on the AVX-512 set, split parts too (measured faster
         * there, quant_dispatch.c) */
        assert_ptr_equal(q8->vec_dot_x4, ms_dot_q8_0_q8_0_x4_avx512);
        /* the f32-activation dots run on the AVX2 set there (measured
         * faster), single and x4 */
        assert_ptr_equal(q8->vec_dot_f32_x4, ms_dot_q8_0_f32_x4_avx2);
        assert_ptr_equal(q8->vec_dot_f32, ms_dot_q8_0_f32_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_F16)->vec_dot_f32_x4, ms_dot_f16_f32_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_F16)->vec_dot_f32, ms_dot_f16_f32_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_BF16)->vec_dot_f32, ms_dot_bf16_f32_avx2);
        /* Q4_K's single dot runs on the AVX2 set there (measured faster),
         * its x4 dot and token-lane GEMM (16 lanes) on the AVX-512 one */
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q4_K)->vec_dot_x4, ms_dot_q4_K_q8_K_x4_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q4_K)->vec_dot, ms_dot_q4_K_q8_K_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q4_K)->gemm_tok, ms_gemm_q4_K_q8_Kx16_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q2_K)->vec_dot_x4, ms_dot_q2_K_q8_K_x4_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q2_K)->gemm_tok, ms_gemm_q2_K_q8_Kx16_avx512);
        /* Q5_K and Q3_K: the AVX-512 set's own kernels, split parts too */
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q5_K)->vec_dot, ms_dot_q5_K_q8_K_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q5_K)->vec_dot_x4, ms_dot_q5_K_q8_K_x4_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q5_K)->vec_dot_rows, ms_dot_rows_q5_K_q8_K_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q5_K)->gemm_tok, ms_gemm_q5_K_q8_Kx16_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q3_K)->vec_dot, ms_dot_q3_K_q8_K_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q3_K)->vec_dot_x4, ms_dot_q3_K_q8_K_x4_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q3_K)->vec_dot_rows, ms_dot_rows_q3_K_q8_K_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q3_K)->gemm_tok, ms_gemm_q3_K_q8_Kx16_avx512);
        /* IQ2_XXS's GEMM: the byte-permute expansion wherever the part has VBMI */
        assert_ptr_equal(ms_type_traits(MS_TYPE_IQ2_XXS)->gemm_tok, ms_quant_avx512_vbmi()
                                                                          ? ms_gemm_iq2_xxs_q8_Kx16_avx512vbmi
                                                                          : ms_gemm_iq2_xxs_q8_Kx16_avx512);
        assert_ptr_equal(q8->gemm_tok, ms_gemm_q8_0_q8_0x16_avx512);
        assert_int_equal(q8->gemm_tok_lanes, 16);
        assert_ptr_equal(q8->gemm_tok_f32, ms_gemm_q8_0_f32x16_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_F16)->gemm_tok_f32, ms_gemm_f16_f32x16_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_BF16)->gemm_tok_f32, ms_gemm_bf16_f32x16_avx512);
        assert_true(ms_type_traits(MS_TYPE_F16)->gemm_tok_f32_rows);
        /* IQ2_XXS's x4 and many-rows dots: the VBMI forms wherever the
         * part has VBMI (a split one too), else the AVX-512 forms (the
         * register-lookup x4, the element-major many-rows dot), both
         * measured faster than the AVX2 ones on a split part as well */
        assert_ptr_equal(ms_type_traits(MS_TYPE_IQ2_XXS)->vec_dot_x4, ms_quant_avx512_vbmi()
                                                                          ? ms_dot_iq2_xxs_q8_K_x4_avx512vbmi
                                                                          : ms_dot_iq2_xxs_q8_K_x4_avx512);
        /* (eight rows at a time on a split part) */
        assert_ptr_equal(ms_type_traits(MS_TYPE_IQ2_XXS)->vec_dot_rows,
                         !ms_quant_avx512_vbmi()    ? ms_dot_rows_iq2_xxs_q8_K_avx512
                         : ms_quant_avx512_split() ? ms_dot_rows8_iq2_xxs_q8_K_avx512vbmi
                                                   : ms_dot_rows_iq2_xxs_q8_K_avx512vbmi);
        /* Q6_K: every form from the AVX-512 set, split parts too */
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q6_K)->vec_dot, ms_dot_q6_K_q8_K_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q6_K)->vec_dot_x4, ms_dot_q6_K_q8_K_x4_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q6_K)->vec_dot_rows, ms_dot_rows_q6_K_q8_K_avx512);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q6_K)->gemm_tok, ms_gemm_q6_K_q8_Kx16_avx512);
    } else if (!strcmp(isa, "avx2")) {
        assert_ptr_equal(q8->vec_dot_x4, ms_dot_q8_0_q8_0_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q6_K)->vec_dot, ms_dot_q6_K_q8_K_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q6_K)->vec_dot_x4, ms_dot_q6_K_q8_K_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q6_K)->vec_dot_rows, ms_dot_rows_q6_K_q8_K_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q6_K)->gemm_tok, ms_gemm_q6_K_q8_Kx8_avx2);
        assert_ptr_equal(q8->gemm_tok, ms_gemm_q8_0_q16_0x8_avx2);
        assert_ptr_equal(q8->act_pack, ms_pack_q8_0_x8);
        assert_int_equal(q8->gemm_tok_lanes, 8);
        assert_ptr_equal(q8->vec_dot_f32_x4, ms_dot_q8_0_f32_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_F16)->vec_dot_f32_x4, ms_dot_f16_f32_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q4_K)->vec_dot_x4, ms_dot_q4_K_q8_K_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q2_K)->vec_dot_x4, ms_dot_q2_K_q8_K_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q5_K)->vec_dot_x4, ms_dot_q5_K_q8_K_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q5_K)->gemm_tok, ms_gemm_q5_K_q8_Kx8_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q3_K)->vec_dot_x4, ms_dot_q3_K_q8_K_x4_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_Q3_K)->gemm_tok, ms_gemm_q3_K_q8_Kx8_avx2);
        assert_ptr_equal(ms_type_traits(MS_TYPE_IQ2_XXS)->vec_dot_x4, ms_dot_iq2_xxs_q8_K_x4_avx2);
    } else {
        assert_null(q8->vec_dot_x4);
        assert_null(q8->vec_dot_f32_x4);
    }
}

/* ------------------------------------------------------------------------ */
/* matmul: batched == token by token                                         */

static void test_matmul_batch_invariant(void **state) {
    (void)state;
    const enum ms_type types[] = {MS_TYPE_Q8_0, MS_TYPE_MXFP4, MS_TYPE_F16, MS_TYPE_BF16, MS_TYPE_F32,
                                  MS_TYPE_Q4_K, MS_TYPE_Q2_K, MS_TYPE_IQ2_XXS, MS_TYPE_Q6_K,
                                  MS_TYPE_IQ4_XS};
    /* 1400 rows: several of matmul's 128 KiB row tiles for every type; 768
     * columns: three blocks of the 256-element k-quant formats; up to 37
     * tokens: whole and partial groups of the token-lane GEMMs (8 or 16
     * lanes, one or two groups a call), with 1 to 15 tokens left over */
    const int64_t n_rows = 1400, n_cols = 768, n_tok = 37;
    ms_rng r;
    ms_rng_seed(&r, 0x3a7b1e55ull);
    float *x = xalloc((size_t)(n_tok * n_cols) * sizeof(float));
    float *yb = xalloc((size_t)(n_tok * n_rows) * sizeof(float));
    float *y1 = xalloc((size_t)(n_tok * n_rows) * sizeof(float));
    ms_rng_fill_normal(&r, x, n_tok * n_cols, 1.0f);
    struct ms_matmul_ctx ctx = {0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const size_t row = ms_row_size(types[ti], n_cols);
        char *w = xalloc(row * (size_t)n_rows);
        for (int64_t i = 0; i < n_rows; i++) make_row(&r, types[ti], n_cols, true, w + (size_t)i * row);
        const struct ms_mat m = {.data = w, .type = types[ti], .n_rows = n_rows, .n_cols = n_cols, .row_stride = row};
        const enum ms_act acts[] = {MS_ACT_QUANT, MS_ACT_F32, MS_ACT_Q16};
        for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
            const enum ms_act act = acts[ai];
            for (int64_t nt = 1; nt <= n_tok; nt++) {
                ms_err err = {0};
                memset(yb, 0, (size_t)(n_tok * n_rows) * sizeof(float));
                assert_int_equal(ms_matmul(&ctx, &m, x, n_cols, nt, yb, n_rows, act, &err), 0);
                for (int64_t t = 0; t < nt; t++)
                    assert_int_equal(ms_matmul(&ctx, &m, x + t * n_cols, n_cols, 1, y1 + t * n_rows, n_rows,
                                               act, &err),
                                     0);
                assert_memory_equal(yb, y1, (size_t)(nt * n_rows) * sizeof(float));
                bool nonzero = false;
                for (int64_t i = 0; i < nt * n_rows; i++) nonzero |= yb[i] != 0.0f;
                assert_true(nonzero);
            }
        }
        ms_free(w);
    }
    ms_matmul_ctx_free(&ctx);
    ms_free(x);
    ms_free(yb);
    ms_free(y1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_x4_bit_identical),
        cmocka_unit_test(test_gemm_q8_0),
        cmocka_unit_test(test_q8_0_order),
        cmocka_unit_test(test_gemm_q8_0_f32x16),
        cmocka_unit_test(test_gemm_half_f32x16),
        cmocka_unit_test(test_dot_rows_q8_0),
        cmocka_unit_test(test_dot_rows_n_q8_0),
        cmocka_unit_test(test_dot_rows_n_table),
        cmocka_unit_test(test_dot_rows_table),
        cmocka_unit_test(test_x4_table),
        cmocka_unit_test(test_matmul_batch_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
