/*
 * quant_kq_avx2.c - avx2 k-quant / iq2_xxs / q8_K kernels (stub; being written).
 */
#include "quant/blocks.h"
#include "quant/quant_impl.h"

MS_DECL_QUANT(q8_K, avx2) { ms_quant_q8_K_ref(x, y, n); }
MS_DECL_DEQUANT(q4_K, avx2) { ms_dequant_q4_K_ref(x, y, n); }
MS_DECL_DOT(q4_K, q8_K, avx2) { ms_dot_q4_K_q8_K_ref(n, s, x, y); }
MS_DECL_DOT(q4_K, f32, avx2) { ms_dot_q4_K_f32_ref(n, s, x, y); }
MS_DECL_DEQUANT(q2_K, avx2) { ms_dequant_q2_K_ref(x, y, n); }
MS_DECL_DOT(q2_K, q8_K, avx2) { ms_dot_q2_K_q8_K_ref(n, s, x, y); }
MS_DECL_DOT(q2_K, f32, avx2) { ms_dot_q2_K_f32_ref(n, s, x, y); }
MS_DECL_DEQUANT(iq2_xxs, avx2) { ms_dequant_iq2_xxs_ref(x, y, n); }
MS_DECL_DOT(iq2_xxs, q8_K, avx2) { ms_dot_iq2_xxs_q8_K_ref(n, s, x, y); }
MS_DECL_DOT(iq2_xxs, f32, avx2) { ms_dot_iq2_xxs_f32_ref(n, s, x, y); }
