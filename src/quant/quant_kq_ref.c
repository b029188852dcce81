/*
 * quant_kq_ref.c - ref k-quant / iq2_xxs / q8_K kernels (stub; being written).
 */
#include "quant/blocks.h"
#include "quant/quant_impl.h"

MS_DECL_DEQUANT(q8_K, ref) { (void)x; (void)y; (void)n; }
MS_DECL_QUANT(q8_K, ref) { (void)x; (void)y; (void)n; }
MS_DECL_DEQUANT(q4_K, ref) { (void)x; (void)y; (void)n; }
MS_DECL_QUANT(q4_K, ref) { (void)x; (void)y; (void)n; }
MS_DECL_DOT(q4_K, q8_K, ref) { (void)n; (void)x; (void)y; *s = 0.0f; }
MS_DECL_DOT(q4_K, f32, ref) { (void)n; (void)x; (void)y; *s = 0.0f; }
MS_DECL_DEQUANT(q2_K, ref) { (void)x; (void)y; (void)n; }
MS_DECL_QUANT(q2_K, ref) { (void)x; (void)y; (void)n; }
MS_DECL_DOT(q2_K, q8_K, ref) { (void)n; (void)x; (void)y; *s = 0.0f; }
MS_DECL_DOT(q2_K, f32, ref) { (void)n; (void)x; (void)y; *s = 0.0f; }
MS_DECL_DEQUANT(iq2_xxs, ref) { (void)x; (void)y; (void)n; }
MS_DECL_QUANT(iq2_xxs, ref) { (void)x; (void)y; (void)n; }
MS_DECL_DOT(iq2_xxs, q8_K, ref) { (void)n; (void)x; (void)y; *s = 0.0f; }
MS_DECL_DOT(iq2_xxs, f32, ref) { (void)n; (void)x; (void)y; *s = 0.0f; }
