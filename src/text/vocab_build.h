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
#ifndef MS_TEXT_VOCAB_BUILD_H
#define MS_TEXT_VOCAB_BUILD_H

#include <stdint.h>

#include "util/err.h"

/* llama.cpp's token types (llama_token_type / tokenizer.ggml.token_type). */
enum ms_token_type {
    MS_TOKEN_UNDEFINED = 0,
    MS_TOKEN_NORMAL = 1,
    MS_TOKEN_UNKNOWN = 2,
    MS_TOKEN_CONTROL = 3,
    MS_TOKEN_USER_DEFINED = 4,
    MS_TOKEN_UNUSED = 5,
    MS_TOKEN_BYTE = 6,
};

struct ms_vocab_spec {
    uint32_t n_tokens;
    char **tokens;         /* [n_tokens] UTF-8 token texts (byte-level encoded) */
    int32_t *token_type;   /* [n_tokens] enum ms_token_type */
    uint32_t n_merges;
    char **merges;         /* [n_merges] "left right" */
    uint32_t bos_id, eos_id, pad_id;
};

/* Builds a vocabulary of exactly n_vocab tokens (n_vocab >= 256 + the number
 * of special tokens + 1; smaller is an error). Deterministic: the same n_vocab
 * gives the same vocabulary. The caller frees it with ms_vocab_spec_free. */
int ms_vocab_build(uint32_t n_vocab, struct ms_vocab_spec *out, ms_err *err);
void ms_vocab_spec_free(struct ms_vocab_spec *v);

#endif
