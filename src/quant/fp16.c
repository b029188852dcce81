/*
 * fp16.c - exported IEEE half / bfloat16 conversions (quant.h).
 *
 * The bit-level algorithms live in quant_basic.h so the kernels can inline
 * them; these wrappers give the rest of the engine (GGUF writer, model code,
 * tests) one stable entry point. Rounding is to nearest, ties to even, which
 * is what ggml's GGML_FP32_TO_FP16 / GGML_FP32_TO_BF16 produce.
 */
#include "quant/quant.h"

#include "quant/quant_basic.h"

uint16_t ms_fp32_to_fp16(float f) { return ms_fp16_from_f32_inline(f); }
float ms_fp16_to_fp32(uint16_t h) { return ms_fp16_to_f32_inline(h); }
uint16_t ms_fp32_to_bf16(float f) { return ms_bf16_from_f32_inline(f); }
float ms_bf16_to_fp32(uint16_t h) { return ms_bf16_to_f32_inline(h); }
