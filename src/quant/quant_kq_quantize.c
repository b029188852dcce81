/*
 * quant_kq_quantize.c - reference quantizers for Q4_K, Q5_K, Q2_K and IQ2_XXS
 * weights (the from_float entries of the traits table).
 *
 * They write ggml's byte layouts, so any reader decodes them, but they are
 * not bit-identical to ggml's quantizers (they need not be: quantization is a
 * search, and only the decoded values matter). All are deterministic.
 *
 * Q4_K / Q2_K: per sub-block, a scale and a min are fitted by weighted least
 * squares over a small sweep of candidate grids (the method of ggml's
 * make_qkx2_quants); the per-block d / dmin are the largest sub-block scale /
 * min over 63 (Q4_K, 6-bit codes) or 15 (Q2_K, 4-bit codes), and the values
 * are re-rounded against the scales as stored.
 *
 * Speed: the Q4_K / Q2_K fits run lane-parallel, one sub-block per SIMD lane
 * (fit_lanes, GCC/clang vector extensions, an AVX2 build picked at run time).
 * Each lane performs exactly the scalar fit's operations in the same order,
 * so the bytes equal the scalar fit's on every machine (tested against it
 * through ms_quant_kq_force_fit). This is what makes mkmodel's multi-GB
 * bench models practical (~10x).
 *
 * IQ2_XXS: d is taken from the block's largest magnitude so that the top
 * sub-block scale (ls = 15) maps it onto the largest grid magnitude 43. Per
 * group of 8 the signs are those of x, except that an odd count of negatives
 * flips the smallest magnitude (the format stores 7 sign bits; the 8th is
 * their parity). Per sub-block of 32 the scales near the one that maps its
 * largest magnitude onto 43 are tried (on Gaussian data the window
 * costs 0.1% of RMS error against trying all 16, at a third of the time); for each, every
 * group takes the grid point nearest its magnitudes among the K grid points
 * closest to the rounded 3^8 lattice point (a table built once), and the
 * scale with the least squared error wins.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "quant/iq2_grid.h"
#include "quant/quant_impl.h"
#include "quant/quant_kq.h"

/*
 * Fits x[i] ~= scale * L[i] - min_out with L[i] in [0, nmax], minimizing
 * sum w[i] * err^2 (or w[i] * |err| when use_mad). Candidate roundings come
 * from the grids (nmax + rmin + rdelta * k) / (max - min), k = 0..nstep; for
 * each, scale and min are the weighted least-squares solution (min kept
 * >= 0 in the subtracted sense). Returns scale (>= 0); *min_out >= 0.
 */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *min_out,
                           float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0], sum_w = 0.0f, sum_x = 0.0f;
    for (int i = 0; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0.0f) min = 0.0f;
    if (!(max > min)) { /* constant (or NaN) sub-block */
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale, best = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)ms_clampi(ms_nearest_int(iscale * (x[i] - min)), 0, nmax);
        const float diff = scale * L[i] + min - x[i];
        best += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    uint8_t Laux[32];
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = ms_clampi(ms_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)(l * l);
            sum_xl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0.0f)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0.0f) {
            this_min = 0.0f;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            const float diff = this_scale * Laux[i] + this_min - x[i];
            err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
        }
        if (err < best) {
            memcpy(L, Laux, (size_t)n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *min_out = -min;
    return scale > 0.0f ? scale : 0.0f;
}

/* ---- lane-parallel fit */

/* clang contracts a*b+c into an FMA when the target has one (the AVX2 build
 * below does not enable FMA, but a -march build might); GCC in ISO C mode
 * (CMAKE_C_EXTENSIONS OFF) never contracts. Contraction would break the
 * lanes' equality with the scalar fit. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define KL 8 /* lanes: sub-blocks fitted at once */
typedef float kvf __attribute__((vector_size(4 * KL)));
typedef int32_t kvi __attribute__((vector_size(4 * KL)));
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Helpers are macros: vector arguments of non-inlined functions would warn
 * about the AVX calling convention in the default (SSE2) build. Casts
 * between same-size vector types reinterpret the bits. */
#define VF(v) ((kvf)(v))
#define VI(v) ((kvi)(v))
#define VSEL(m, a, b) VF((VI(a) & (m)) | (VI(b) & ~(m))) /* m ? a : b per lane */
#define VABS(a) VF(VI(a) & 0x7fffffff)
/* out = ms_clampi(ms_nearest_int(f), 0, nmax) per lane (nearest_int's bit trick). */
#define VROUND_CLAMP(out, f, nmax)                                        \
    do {                                                                  \
        kvi k_ = (VI((f) + 12582912.0f) & 0x007fffff) - 0x00400000;       \
        k_ = k_ & ~(k_ < 0);                                              \
        const kvi hi_ = k_ > (nmax);                                      \
        (out) = (k_ & ~hi_) | (((kvi){0} + (nmax)) & hi_);                \
    } while (0)

/*
 * fit_scale_min for KL sub-blocks at once (without the L output): lane j
 * fits x[j*n .. j*n + n) with weights w = av + |x|, n <= 32. Every lane runs
 * the scalar loop's operations in its order (selects stand in for branches),
 * so scale[j] / min_out[j] equal fit_scale_min's bit for bit.
 */
static ALWAYS_INLINE void fit_lanes(int n, int nmax, const float *x, float av, float rmin, float rdelta,
                                    int nstep, bool use_mad, float scale_out[KL], float min_out[KL]) {
    kvf X[32], W[32], Lf[32];
    for (int i = 0; i < n; i++) {
        float t[KL];
        for (int j = 0; j < KL; j++) t[j] = x[j * n + i];
        memcpy(&X[i], t, sizeof t);
        W[i] = av + VABS(X[i]);
    }
    kvf mn = X[0], mx = X[0], sum_w = {0}, sum_x = {0};
    for (int i = 0; i < n; i++) {
        mn = VSEL(X[i] < mn, X[i], mn);
        mx = VSEL(X[i] > mx, X[i], mx);
        sum_w = sum_w + W[i];
        sum_x = sum_x + W[i] * X[i];
    }
    mn = VSEL(mn > 0.0f, (kvf){0}, mn);
    const kvi degenerate = ~(mx > mn);
    const kvf mn0 = mn;
    kvf iscale = (float)nmax / (mx - mn);
    kvf scale = 1.0f / iscale, best = {0};
    for (int i = 0; i < n; i++) {
        kvi li;
        VROUND_CLAMP(li, iscale * (X[i] - mn), nmax);
        const kvf l = __builtin_convertvector(li, kvf);
        const kvf diff = scale * l + mn - X[i];
        best = best + W[i] * (use_mad ? VABS(diff) : diff * diff);
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (mx - mn);
        kvf sum_l = {0}, sum_l2 = {0}, sum_xl = {0};
        for (int i = 0; i < n; i++) {
            kvi li;
            VROUND_CLAMP(li, iscale * (X[i] - mn), nmax);
            const kvf l = __builtin_convertvector(li, kvf);
            Lf[i] = l;
            sum_l = sum_l + W[i] * l;
            sum_l2 = sum_l2 + W[i] * (l * l);
            sum_xl = sum_xl + W[i] * l * X[i];
        }
        const kvf D = sum_w * sum_l2 - sum_l * sum_l;
        kvf this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        kvf this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        const kvi pos = this_min > 0.0f;
        this_min = VSEL(pos, (kvf){0}, this_min);
        this_scale = VSEL(pos, sum_xl / sum_l2, this_scale);
        kvf err = {0};
        for (int i = 0; i < n; i++) {
            const kvf diff = this_scale * Lf[i] + this_min - X[i];
            err = err + W[i] * (use_mad ? VABS(diff) : diff * diff);
        }
        const kvi better = (D > 0.0f) & (err < best);
        best = VSEL(better, err, best);
        scale = VSEL(better, this_scale, scale);
        mn = VSEL(better, this_min, mn);
    }
    scale = VSEL(degenerate, (kvf){0}, VSEL(scale > 0.0f, scale, (kvf){0}));
    mn = VSEL(degenerate, -mn0, -mn);
    memcpy(scale_out, &scale, sizeof scale);
    memcpy(min_out, &mn, sizeof mn);
}

/* L[l] = d > 0 ? ms_clampi(ms_nearest_int((x[l] + m) / d), 0, nmax) : 0 for
 * l < n (n a multiple of KL); elementwise, so identical to the scalar form. */
static ALWAYS_INLINE void round_codes(const float *x, float d, float m, int nmax, int n, uint8_t *L) {
    if (!(d > 0.0f)) {
        memset(L, 0, (size_t)n);
        return;
    }
    for (int l = 0; l < n; l += KL) {
        kvf v;
        memcpy(&v, x + l, sizeof v);
        kvi k;
        VROUND_CLAMP(k, (v + m) / d, nmax);
        for (int j = 0; j < KL; j++) L[l + j] = (uint8_t)k[j];
    }
}

/* ---- Q4_K and Q5_K: 8 sub-blocks of 32, a 6-bit scale and min each */

/* One Q4_K or Q5_K block's fit of x[0 .. QK_K - 1]: the codes L (0 ..
 * nmax, value order), the packed 6-bit scales and mins (s, Q4_K's
 * packing) and the fp16 super-block scales *d, *dmin. Each sub-block's
 * scale and min come from fit_scale_min (fit_lanes when lanes) with
 * weights av_x + |x|, av_x the block's RMS (ggml's weighting: larger values
 * matter more, none count zero), over the grids of rmin, 0.1 and nstep;
 * the codes are re-rounded against the scales as stored. */
static ALWAYS_INLINE void q45_K_fit(const float *x, int nmax, float rmin, int nstep, bool lanes, uint8_t L[QK_K],
                                    uint8_t s[K_SCALE_SIZE], uint16_t *d16, uint16_t *dmin16) {
    uint8_t sc[8], m[8];
    float scales[8], mins[8], w[32];
    float sum_x2 = 0.0f;
    for (int j = 0; j < QK_K; j++) sum_x2 += x[j] * x[j];
    const float av_x = sqrtf(sum_x2 / QK_K);
    float max_scale = 0.0f, max_min = 0.0f;
    if (lanes) fit_lanes(32, nmax, x, av_x, rmin, 0.1f, nstep, false, scales, mins);
    for (int j = 0; j < 8; j++) {
        if (!lanes) {
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
        }
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)ms_clampi(ms_nearest_int(inv_scale * scales[j]), 0, 63);
        m[j] = (uint8_t)ms_clampi(ms_nearest_int(inv_min * mins[j]), 0, 63);
    }
    ms_q4k_pack_scales(sc, m, s);
    *d16 = ms_fp32_to_fp16(max_scale / 63.0f);
    *dmin16 = ms_fp32_to_fp16(max_min / 63.0f);
    const float d = ms_fp16_to_fp32(*d16), dmin = ms_fp16_to_fp32(*dmin16);
    for (int j = 0; j < 8; j++) round_codes(x + 32 * j, d * sc[j], dmin * m[j], nmax, 32, L + 32 * j);
}

/* Q4_K: nmax 15, ggml's rmin -1 and 20 steps. */
static ALWAYS_INLINE void q4_K_blocks(const float *x, block_q4_K *b, int64_t nb, bool lanes) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t L[QK_K];
        q45_K_fit(x, 15, -1.0f, 20, lanes, L, b[i].scales, &b[i].d, &b[i].dmin);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * g + l] = (uint8_t)(L[64 * g + l] | L[64 * g + 32 + l] << 4);
    }
}

/* ---- Q2_K */

static ALWAYS_INLINE void q2_K_blocks(const float *x, block_q2_K *b, int64_t nb, bool lanes) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t L[QK_K];
        float scales[16], mins[16], w[16];
        float max_scale = 0.0f, max_min = 0.0f;
        if (lanes) {
            fit_lanes(16, 3, x, 0.0f, -0.5f, 0.1f, 15, true, scales, mins);
            fit_lanes(16, 3, x + 16 * KL, 0.0f, -0.5f, 0.1f, 15, true, scales + KL, mins + KL);
        }
        for (int k = 0; k < 16; k++) {
            if (!lanes) {
                for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * k + l]);
                scales[k] = fit_scale_min(16, 3, x + 16 * k, w, L + 16 * k, &mins[k], -0.5f, 0.1f, 15, true);
            }
            if (scales[k] > max_scale) max_scale = scales[k];
            if (mins[k] > max_min) max_min = mins[k];
        }
        const float inv_scale = max_scale > 0.0f ? 15.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0.0f ? 15.0f / max_min : 0.0f;
        for (int k = 0; k < 16; k++) {
            const int ls = ms_clampi(ms_nearest_int(inv_scale * scales[k]), 0, 15);
            const int lm = ms_clampi(ms_nearest_int(inv_min * mins[k]), 0, 15);
            b[i].scales[k] = (uint8_t)(ls | lm << 4);
        }
        b[i].d = ms_fp32_to_fp16(max_scale / 15.0f);
        b[i].dmin = ms_fp32_to_fp16(max_min / 15.0f);
        const float d = ms_fp16_to_fp32(b[i].d), dmin = ms_fp16_to_fp32(b[i].dmin);
        for (int k = 0; k < 16; k++)
            round_codes(x + 16 * k, d * (float)(b[i].scales[k] & 0x0f), dmin * (float)(b[i].scales[k] >> 4), 3,
                        16, L + 16 * k);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *Lh = L + 128 * h + l;
                b[i].qs[32 * h + l] = (uint8_t)(Lh[0] | Lh[32] << 2 | Lh[64] << 4 | Lh[96] << 6);
            }
    }
}

/* ---- Q5_K: Q4_K's fit with 5-bit codes (ggml's quantize_row_q5_K_ref
 * takes nmax 31, rmin -0.5, 15 steps; its weights use each sub-block's RMS,
 * this the block's, as Q4_K here), the fifth bit of each code in qh. */

static ALWAYS_INLINE void q5_K_blocks(const float *x, block_q5_K *b, int64_t nb, bool lanes) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t L[QK_K];
        q45_K_fit(x, 31, -0.5f, 15, lanes, L, b[i].scales, &b[i].d, &b[i].dmin);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = L[64 * g + l], hi = L[64 * g + 32 + l];
                b[i].qs[32 * g + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                b[i].qh[l] |= (uint8_t)((lo >> 4) << (2 * g) | (hi >> 4) << (2 * g + 1));
            }
    }
}

/* ---- entry points: one instantiation per fit and ISA */

static void q4_K_scalar(const float *x, void *y, int64_t nb) { q4_K_blocks(x, y, nb, false); }
static void q4_K_lanes(const float *x, void *y, int64_t nb) { q4_K_blocks(x, y, nb, true); }
static void q2_K_scalar(const float *x, void *y, int64_t nb) { q2_K_blocks(x, y, nb, false); }
static void q2_K_lanes(const float *x, void *y, int64_t nb) { q2_K_blocks(x, y, nb, true); }
static void q5_K_scalar(const float *x, void *y, int64_t nb) { q5_K_blocks(x, y, nb, false); }
static void q5_K_lanes(const float *x, void *y, int64_t nb) { q5_K_blocks(x, y, nb, true); }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_LANES 1
__attribute__((target("avx2"))) static void q4_K_lanes_avx2(const float *x, void *y, int64_t nb) {
    q4_K_blocks(x, y, nb, true);
}
__attribute__((target("avx2"))) static void q2_K_lanes_avx2(const float *x, void *y, int64_t nb) {
    q2_K_blocks(x, y, nb, true);
}
__attribute__((target("avx2"))) static void q5_K_lanes_avx2(const float *x, void *y, int64_t nb) {
    q5_K_blocks(x, y, nb, true);
}
#endif

enum { FIT_UNSET, FIT_SCALAR, FIT_LANES, FIT_LANES_AVX2 };
static atomic_int g_fit = FIT_UNSET;

/* Test hook (tests/test_quant_kq_fit.c declares it; no header, since nothing
 * else may call it): which Q4_K / Q2_K fit the quantizers use from now on.
 * 0 = the fastest the CPU has (default), 1 = the scalar fit_scale_min,
 * 2 = the lanes in the baseline build, 3 = the AVX2 lanes (2 without AVX2).
 * Not thread-safe against running quantizers; the bytes never change. */
void ms_quant_kq_force_fit(int kind);
void ms_quant_kq_force_fit(int kind) {
    int f = kind == 1 ? FIT_SCALAR : kind == 2 ? FIT_LANES : FIT_UNSET;
#ifdef HAVE_AVX2_LANES
    if (kind == 3) f = __builtin_cpu_supports("avx2") ? FIT_LANES_AVX2 : FIT_LANES;
#else
    if (kind == 3) f = FIT_LANES;
#endif
    atomic_store(&g_fit, f);
}

static int fit_kind(void) {
    int f = atomic_load_explicit(&g_fit, memory_order_relaxed);
    if (f != FIT_UNSET) return f;
    f = FIT_LANES;
#ifdef HAVE_AVX2_LANES
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) f = FIT_LANES_AVX2;
#endif
    atomic_store(&g_fit, f);
    return f;
}

MS_DECL_QUANT(q4_K, ref) {
    switch (fit_kind()) {
    case FIT_SCALAR: q4_K_scalar(x, y, n / QK_K); break;
#ifdef HAVE_AVX2_LANES
    case FIT_LANES_AVX2: q4_K_lanes_avx2(x, y, n / QK_K); break;
#endif
    default: q4_K_lanes(x, y, n / QK_K); break;
    }
}

MS_DECL_QUANT(q2_K, ref) {
    switch (fit_kind()) {
    case FIT_SCALAR: q2_K_scalar(x, y, n / QK_K); break;
#ifdef HAVE_AVX2_LANES
    case FIT_LANES_AVX2: q2_K_lanes_avx2(x, y, n / QK_K); break;
#endif
    default: q2_K_lanes(x, y, n / QK_K); break;
    }
}

MS_DECL_QUANT(q5_K, ref) {
    switch (fit_kind()) {
    case FIT_SCALAR: q5_K_scalar(x, y, n / QK_K); break;
#ifdef HAVE_AVX2_LANES
    case FIT_LANES_AVX2: q5_K_lanes_avx2(x, y, n / QK_K); break;
#endif
    default: q5_K_lanes(x, y, n / QK_K); break;
    }
}

/* ---- IQ2_XXS */

#define IQ2_LATTICE 6561 /* 3^8 points with coordinates in {8, 25, 43} */
#define IQ2_NBR 8        /* grid candidates kept per lattice point */
#define IQ2_LS_BELOW 5   /* sub-block scales tried below / above the one */
#define IQ2_LS_ABOVE 1   /* that maps the sub-block maximum onto 43 */

static uint8_t g_nbr[IQ2_LATTICE][IQ2_NBR];
static pthread_once_t g_nbr_once = PTHREAD_ONCE_INIT;
static const int k_level[3] = {8, 25, 43};

/* For every lattice point, the IQ2_NBR grid points nearest to it (squared
 * distance, ties to the lower index, so the table is deterministic). */
static void build_neighbours(void) {
    for (int p = 0; p < IQ2_LATTICE; p++) {
        int v[8], best_d[IQ2_NBR];
        for (int j = 0, q = p; j < 8; j++, q /= 3) v[j] = k_level[q % 3];
        for (int k = 0; k < IQ2_NBR; k++) best_d[k] = INT32_MAX;
        for (int g = 0; g < MS_IQ2XXS_GRID_SIZE; g++) {
            int dist = 0;
            for (int j = 0; j < 8; j++) {
                const int e = ms_iq2xxs_grid_val((unsigned)g, j) - v[j];
                dist += e * e;
            }
            int k = IQ2_NBR;
            while (k > 0 && dist < best_d[k - 1]) k--;
            if (k == IQ2_NBR) continue;
            for (int s = IQ2_NBR - 1; s > k; s--) {
                best_d[s] = best_d[s - 1];
                g_nbr[p][s] = g_nbr[p][s - 1];
            }
            best_d[k] = dist;
            g_nbr[p][k] = (uint8_t)g;
        }
    }
}

/* Nearest grid point to the 8 target magnitudes t (grid units; a negative
 * target is an element whose sign was forced wrong). Returns the index and
 * adds the squared error in grid units to *err. */
static int iq2_nearest(const float t[8], float *err) {
    int p = 0;
    for (int j = 7; j >= 0; j--) p = 3 * p + (t[j] < 16.5f ? 0 : t[j] < 34.0f ? 1 : 2);
    int best = g_nbr[p][0];
    float best_e = INFINITY;
    for (int k = 0; k < IQ2_NBR; k++) {
        const unsigned g = g_nbr[p][k];
        float e = 0.0f;
        for (int j = 0; j < 8; j++) {
            const float diff = t[j] - (float)ms_iq2xxs_grid_val(g, j);
            e += diff * diff;
        }
        if (e < best_e) {
            best_e = e;
            best = (int)g;
        }
    }
    *err += best_e;
    return best;
}

MS_DECL_QUANT(iq2_xxs, ref) {
    pthread_once(&g_nbr_once, build_neighbours);
    block_iq2_xxs *b = y;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
        memset(b[i].qs, 0, sizeof b[i].qs);
        b[i].d = ms_fp32_to_fp16(amax / (43.0f * 3.875f));
        const float d = ms_fp16_to_fp32(b[i].d);
        if (!(d > 0.0f) || !isfinite(d)) {
            b[i].d = 0;
            continue;
        }
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const float *xb = x + 32 * ib;
            float mag[32]; /* |x|, negated where the stored sign is wrong */
            uint32_t signs7 = 0;
            for (int l = 0; l < 4; l++) {
                unsigned bits = 0;
                int smallest = 0;
                for (int j = 0; j < 8; j++) {
                    const float v = xb[8 * l + j];
                    mag[8 * l + j] = fabsf(v);
                    if (v < 0.0f) bits |= 1u << j;
                    if (fabsf(v) < fabsf(xb[8 * l + smallest])) smallest = j;
                }
                if (__builtin_popcount(bits) & 1) {
                    bits ^= 1u << smallest;
                    mag[8 * l + smallest] = -mag[8 * l + smallest];
                }
                signs7 |= (bits & 127u) << (7 * l);
            }
            /* Scales far from the one that puts this sub-block's largest
             * magnitude on 43 never win; search a window around it. */
            float smax = 0.0f;
            for (int j = 0; j < 32; j++) smax = fmaxf(smax, fabsf(mag[j]));
            const int ls0 = ms_clampi(ms_nearest_int(smax / (43.0f * 0.25f * d) - 0.5f), 0, 15);
            int best_ls = 0;
            uint32_t best_idx = 0;
            float best_err = INFINITY;
            for (int ls = ls0 > IQ2_LS_BELOW ? ls0 - IQ2_LS_BELOW : 0; ls <= ls0 + IQ2_LS_ABOVE && ls < 16; ls++) {
                const float db = d * (0.5f + (float)ls) * 0.25f;
                const float inv = 1.0f / db;
                float err = 0.0f;
                uint32_t idx = 0;
                for (int l = 0; l < 4; l++) {
                    float t[8];
                    for (int j = 0; j < 8; j++) t[j] = mag[8 * l + j] * inv;
                    idx |= (uint32_t)iq2_nearest(t, &err) << (8 * l);
                }
                err *= db * db; /* back to the units of x */
                if (err < best_err) {
                    best_err = err;
                    best_ls = ls;
                    best_idx = idx;
                }
            }
            const uint32_t aux1 = signs7 | (uint32_t)best_ls << 28;
            uint16_t *q = b[i].qs + 4 * ib;
            q[0] = (uint16_t)best_idx;
            q[1] = (uint16_t)(best_idx >> 16);
            q[2] = (uint16_t)aux1;
            q[3] = (uint16_t)(aux1 >> 16);
        }
    }
}
