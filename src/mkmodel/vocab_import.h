/*
 * vocab_import.h - a Hugging Face tokenizer.json (byte-level BPE, e.g.
 * DeepSeek V3's) turned into the vocabulary mkmodel writes, token for token
 * as llama.cpp's convert_hf_to_gguf.py would write it.
 */
#ifndef MS_MKMODEL_VOCAB_IMPORT_H
#define MS_MKMODEL_VOCAB_IMPORT_H

#include <stdint.h>

#include "mkmodel/vocab_build.h"
#include "util/err.h"

/*
 * Reads tokenizer.json at `path` into *out (freed with ms_vocab_spec_free):
 *   - ids 0..n_vocab-1; n_vocab 0 means max id + 1. Ids with no token become
 *     "[PAD<id>]" UNUSED (how the converter pads DeepSeek V3's 128,815 ids to
 *     the model's vocab_size, 129,280 for V4);
 *   - model.vocab tokens are NORMAL; added_tokens are CONTROL when "special"
 *     is true or the text looks special ("<|...|>", "<｜...｜>"), else
 *     USER_DEFINED with U+2581 replaced by a space;
 *   - model.merges ("a b" strings or ["a", "b"] pairs) in file order;
 *   - bos/eos/pad from tokenizer_config.json beside it (bos_token, eos_token,
 *     pad_token), else DeepSeek's <｜begin▁of▁sentence｜> / <｜end▁of▁sentence｜>
 *     with pad = eos.
 * Errors: unreadable or malformed JSON, model.type other than "BPE", an id
 * >= n_vocab, a missing bos/eos token, OOM.
 */
int ms_vocab_import_hf(const char *path, uint32_t n_vocab, struct ms_vocab_spec *out, ms_err *err);

#endif
