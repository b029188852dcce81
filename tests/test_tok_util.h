/*
 * test_tok_util.h - helpers for the cmocka tests that need a tokenizer: a
 * vocabulary (mkmodel's ms_vocab_spec) written as a vocab-only GGUF, and a
 * tokenizer loaded from such a file. Static, included by each such test.
 */
#ifndef MS_TEST_TOK_UTIL_H
#define MS_TEST_TOK_UTIL_H

#include <stdio.h>

#include "gguf/gguf.h"
#include "mkmodel/vocab_build.h"
#include "text/tokenizer.h"

static inline int write_vocab_gguf(const struct ms_vocab_spec *v, const char *path) {
    struct gguf_writer *w = gguf_writer_new();
    ms_err err;
    int rc = w ? 0 : -1;
    rc |= gguf_writer_set_str(w, "general.architecture", "llama");
    rc |= gguf_writer_set_u32(w, "llama.context_length", 4096);
    rc |= gguf_writer_set_u32(w, "llama.embedding_length", 64);
    rc |= gguf_writer_set_u32(w, "llama.block_count", 1);
    rc |= gguf_writer_set_u32(w, "llama.feed_forward_length", 128);
    rc |= gguf_writer_set_u32(w, "llama.attention.head_count", 1);
    rc |= gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    rc |= gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= gguf_writer_set_str(w, "tokenizer.ggml.pre", "deepseek-v3");
    rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n_tokens);
    rc |= gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->token_type, v->n_tokens);
    rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v->bos_id);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v->eos_id);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", v->pad_id);
    rc |= gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (rc == 0 && (gguf_writer_begin(w, path, &err) || gguf_writer_finish(w, &err))) {
        print_error("%s\n", err.msg);
        rc = -1;
    }
    gguf_writer_free(w);
    return rc;
}

static inline struct ms_tokenizer *load_tok(const char *path) {
    struct gguf_file *f;
    struct ms_tokenizer *t = NULL;
    ms_err err;
    if (gguf_open(&f, path, &err)) {
        print_error("%s\n", err.msg);
        return NULL;
    }
    if (ms_tokenizer_load(&t, f, &err)) print_error("%s\n", err.msg);
    gguf_close(f);
    return t;
}

#endif
