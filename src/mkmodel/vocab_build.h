/*
 * vocab_build.h - the byte-level BPE vocabulary that mkmodel writes into test
 * and demo models.
 *
 * A GPT-2 style byte-level vocabulary (256 byte tokens in the GPT-2
 * byte-to-unicode mapping), merges learned deterministically by BPE training
 * on a small built-in English/code/multilingual corpus until the requested
 * size is reached, and DeepSeek V3/V4's special tokens (begin/end of
 * sentence, User/Assistant, think tags, tool-call and DSML markers, pad) as
 * CONTROL tokens. Written with the tokenizer.ggml.* keys llama.cpp accepts:
 * model "gpt2", pre "deepseek-v3", tokens, token_type, merges, bos/eos ids.
 */
#ifndef MS_MKMODEL_VOCAB_BUILD_H
#define MS_MKMODEL_VOCAB_BUILD_H

#include <stdint.h>

#include "text/tokenizer.h" /* enum ms_token_type */
#include "util/err.h"

struct ms_vocab_spec {
    uint32_t n_tokens;
    char **tokens;         /* [n_tokens] UTF-8 token texts (byte-level encoded) */
    int32_t *token_type;   /* [n_tokens] enum ms_token_type */
    uint32_t n_merges;
    char **merges;         /* [n_merges] "left right" */
    uint32_t bos_id, eos_id, pad_id;
};

/* Number of special (CONTROL) tokens in every built vocabulary. */
#define MS_VOCAB_N_SPECIAL 21u
/* Smallest n_vocab ms_vocab_build accepts: the bytes, the specials, one merge. */
#define MS_VOCAB_MIN_SIZE (256u + MS_VOCAB_N_SPECIAL + 1u)
/* Largest n_vocab accepted (DeepSeek V4's own is 129280). */
#define MS_VOCAB_MAX_SIZE (1u << 22)

/* Builds a vocabulary of exactly n_vocab tokens, laid out like DeepSeek V3/V4's:
 *   0, 1, 2          <｜begin▁of▁sentence｜> (bos), <｜end▁of▁sentence｜> (eos),
 *                    <｜▁pad▁｜> (pad), CONTROL
 *   3 .. 258         the 256 byte tokens, byte b at id 3 + b, NORMAL (llama.cpp
 *                    decodes NORMAL tokens of a gpt2 vocabulary byte-level)
 *   259 ..           one token per merge, in merge order: merges[i] makes token
 *                    259 + i, whose parts both have smaller ids; NORMAL
 *   then             <｜place▁holder▁no▁N｜> CONTROL fillers, only if the built-in
 *                    corpus runs out of pairs before n_vocab is reached
 *   last 18          <think> </think> <｜fim▁hole｜> <｜fim▁begin｜> <｜fim▁end｜>
 *                    <｜User｜> <｜Assistant｜> <|EOT|> the nine tool-call/output
 *                    markers (<｜tool▁calls▁begin｜> ... <｜tool▁sep｜>) and V4's
 *                    ｜DSML｜, CONTROL, in DeepSeek's id order.
 * Special texts are stored as plain UTF-8; normal tokens in the GPT-2 byte-to-
 * unicode encoding. n_vocab outside [MS_VOCAB_MIN_SIZE, MS_VOCAB_MAX_SIZE] is an
 * error, as is running out of memory. Deterministic: the same n_vocab gives the
 * same vocabulary, and a larger n_vocab extends a smaller one's merge list. The
 * caller frees it with ms_vocab_spec_free (which accepts a zeroed spec). */
int ms_vocab_build(uint32_t n_vocab, struct ms_vocab_spec *out, ms_err *err);
void ms_vocab_spec_free(struct ms_vocab_spec *v);

#endif
